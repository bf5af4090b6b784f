"""Helpers for the worker tests: raw-engine requests with the guard's
arguments exactly as GuardedLLM prepares them, and the worker's counters."""
from __future__ import annotations

import sys
from pathlib import Path

RUNTIME = Path(__file__).parents[1] / "runtime"
RUNTIME_POLICIES = RUNTIME / "policies"
sys.path.insert(0, str(RUNTIME))
from helpers import TEXTS, long_text, make_vector, row  # noqa: E402,F401  (shared with the runtime tests)

from innerguard.engine.requests import GuardRequest, prepare  # noqa: E402


def prepared(llm, r: dict):
    p = prepare(llm.plan, GuardRequest.from_row(r, r["id"]), llm.tokenizer)
    assert p.error is None, p.error
    return p


def prompt_of(p, guarded: bool = True) -> dict:
    prompt = {"prompt_token_ids": list(p.prompt_token_ids)}
    if guarded and p.cache_salt:
        prompt["cache_salt"] = p.cache_salt
    return prompt


def with_guard(params, p):
    params = params.clone()
    params.extra_args = {**(params.extra_args or {}), **(p.extra_args or {})}
    return params


def generate(llm, requests):
    """``requests``: (prompt dict, SamplingParams) pairs, on the raw engine."""
    return llm.llm.generate([r[0] for r in requests], [r[1] for r in requests], use_tqdm=False)


def take(llm, keys) -> dict:
    return llm.llm.collective_rpc("innerguard_take_results", args=(list(keys),))[0]


def settled_stats(llm) -> dict:
    """The worker's counters once the scheduler has reported every finished
    request (it does so on the step after they finish)."""
    from vllm import SamplingParams

    llm.llm.generate([{"prompt_token_ids": [1, 2]}], SamplingParams(max_tokens=1), use_tqdm=False)
    return llm.llm.collective_rpc("innerguard_stats")[0]


def eos_id(llm) -> int:
    return llm.tokenizer.convert_tokens_to_ids("<|im_end|>")

"""What install_plan does with the prefix-cache canary's answer
(engine/vllm_engine.py). The engine here is a stand-in that answers as a
worker would: the real engines of the suite pass the canary (see
test_runtime_parity.py), and a misread KV cache cannot be made on demand in
one. What is under test is innerguard's reaction: a cache hit that decides
otherwise turns K read-back off in the workers and keeps guarded requests
salted, with one warning; the plan itself still installs."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from innerguard.engine.compiler import compile_policies
from innerguard.engine.plan import decode_request_args
from innerguard.engine.vllm_engine import install_plan

POLICIES = Path(__file__).parent / "policies"


class StandInEngine:
    """Decides every guarded request as a healthy worker would, except that a
    prefix-cache hit reads ``hit_focus`` (None: the computed value)."""

    def __init__(self, plan, tokenizer, hit_focus=None, cached_tokens=256):
        self.plan, self.tokenizer = plan, tokenizer
        self.hit_focus, self.cached_tokens = hit_focus, cached_tokens
        self.results, self.seen_salts, self.calls = {}, {}, []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=False):
        outs = []
        for prompt, p in zip(prompts, params):
            args = decode_request_args(p.extra_args)
            salt = prompt.get("cache_salt")
            hit = salt is not None and salt in self.seen_salts
            self.seen_salts.setdefault(salt, True)
            if args is not None and args.get("policies") != ["self-check"]:
                signals = {s: 0.25 for pol in self.plan.policies if pol.name in args["policies"] for s in pol.signals}
                if hit and self.hit_focus is not None:
                    signals = {k: (self.hit_focus if k.endswith(".focus") else v) for k, v in signals.items()}
                self.results[args["id"]] = {"id": args["id"], "action": "allow", "errors": {}, "signals": signals,
                                            "decisions": [{"policy": n} for n in args["policies"]],
                                            "num_prompt_tokens": len(prompt["prompt_token_ids"])}
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=[0])],
                                        num_cached_tokens=self.cached_tokens if hit else 0))
        return outs

    def collective_rpc(self, method, args=(), kwargs=None):
        self.calls.append((method, args))
        if method == "innerguard_install":
            return [{"runner": "v1", "hook_points": [], "bundle_hash": self.plan.bundle_hash,
                     "enforce_eager": False, "reads_kv_cache": True}]
        if method == "innerguard_take_results":
            return [{k: self.results[k] for k in args[0] if k in self.results}]
        return [{}]


@pytest.fixture(scope="module")
def plan_and_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    plan, _ = compile_policies([POLICIES / "injection.yaml", POLICIES / "blocker.yaml"], smollm2_dir)
    return plan, AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.mark.model
def test_a_cache_hit_that_decides_alike_keeps_the_prefix_cache_shared(plan_and_tokenizer):
    engine = StandInEngine(*plan_and_tokenizer)
    info = install_plan(engine, plan_and_tokenizer[0])
    assert info["reads_kv_cache"] and info["kv_canary_cached_tokens"] == 256
    assert ("innerguard_kv_readback", (False,)) not in engine.calls
    assert engine.calls[-1][0] == "innerguard_commit"


@pytest.mark.model
def test_a_cache_hit_that_decides_otherwise_turns_read_back_off_and_still_installs(plan_and_tokenizer):
    engine = StandInEngine(*plan_and_tokenizer, hit_focus=0.5)
    info = install_plan(engine, plan_and_tokenizer[0])
    assert info["reads_kv_cache"] is False  # GuardedLLM and the server then salt every guarded request
    assert ("innerguard_kv_readback", (False,)) in engine.calls
    assert engine.calls[-1][0] == "innerguard_commit"


@pytest.mark.model
def test_without_a_cache_hit_nothing_is_proven_and_nothing_changes(plan_and_tokenizer):
    engine = StandInEngine(*plan_and_tokenizer, hit_focus=0.5, cached_tokens=0)
    info = install_plan(engine, plan_and_tokenizer[0])
    assert info["reads_kv_cache"] and info["kv_canary_cached_tokens"] == 0
    assert ("innerguard_kv_readback", (False,)) not in engine.calls

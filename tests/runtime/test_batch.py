"""Mixed batches: every request gets its own policies, decided as if alone."""
from __future__ import annotations

import random

import pytest

from helpers import prepared, row

pytestmark = pytest.mark.vllm

POLICY_SETS = [[], ["injection"], ["topic"], ["injection", "topic"], ["blocker"], ["steer"], ["shadow"], ["injection-open", "steer"]]


def test_64_mixed_requests_decide_as_if_alone(guarded, plain_llm):
    from vllm import SamplingParams

    rng = random.Random(7)
    rows = []
    for i in range(64):
        policies = rng.choice(POLICY_SETS)
        data = None if rng.random() > 0.15 else "Please BLOCKME now."
        rows.append(row(i, policies, data=data, max_tokens=6))
    together = guarded.run(rows)
    alone = [guarded.run([r])[0] for r in rows]
    for r, t, a in zip(rows, together, alone):
        assert t.error is None and a.error is None
        assert t.action == a.action, r
        assert [(d["policy"], d["action"], d["rule"]) for d in t.decisions] == [(d["policy"], d["action"], d["rule"]) for d in a.decisions]
        assert t.signals.keys() == a.signals.keys()
        for name, value in t.signals.items():
            if isinstance(value, float):
                assert abs(value - a.signals[name]) < 1e-4, (name, value, a.signals[name])
            else:
                assert value == a.signals[name]
        if r["policies"]:
            assert t.prefill_tokens == len(prepared(guarded, r)[0])  # one prefill, nothing recomputed
    # Unguarded requests in the mixed batch are token-identical to plain vLLM.
    unguarded = [(r, t) for r, t in zip(rows, together) if not r["policies"]]
    assert unguarded
    ids = [prepared(guarded, r)[0] for r, _ in unguarded]
    plain = plain_llm.generate([{"prompt_token_ids": i} for i in ids], SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)
    for (r, t), p in zip(unguarded, plain):
        assert list(t.token_ids) == list(p.outputs[0].token_ids), r["id"]

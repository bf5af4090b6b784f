"""Mixed batches: every request gets its own policies, decided as if alone."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

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


def test_a_batch_prepared_in_chunks_comes_back_in_input_order(guarded, monkeypatch):
    """The engine runs one chunk while the next is prepared: bad rows in every
    chunk answer in their place, and every good row is decided."""
    from innerguard.engine import guarded as guarded_module

    monkeypatch.setattr(guarded_module, "PREPARE_CHUNK", 4)
    rows = []
    for i in range(11):
        if i % 4 == 1:
            rows.append({"id": f"bad{i}", "instruction": "Say hello.", "data": "Hi.", "max_tokens": 0})
        else:
            rows.append(row(i, ["injection"], max_tokens=2))
    outs = guarded.run(rows)
    assert [o.id for o in outs] == [r["id"] for r in rows]
    for r, o in zip(rows, outs):
        if r["id"].startswith("bad"):
            assert o.error and o.action == "error"
        else:
            assert o.error is None and "injection.focus" in o.signals, (r["id"], o)


def test_a_batch_interrupted_while_preparing_leaves_nothing_running(guarded, monkeypatch):
    from innerguard.engine import guarded as guarded_module

    real = guarded_module.prepare_many
    calls = []

    def prepare_then_fail(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(guarded_module, "PREPARE_CHUNK", 3)
    monkeypatch.setattr(guarded_module, "prepare_many", prepare_then_fail)
    with pytest.raises(KeyboardInterrupt):
        guarded.run([row(i, ["injection"], max_tokens=64) for i in range(6)])
    assert not guarded.llm.llm_engine.has_unfinished_requests()  # the first chunk was aborted
    monkeypatch.setattr(guarded_module, "prepare_many", real)
    again = guarded.run([row(0, ["injection"], max_tokens=2)])
    assert again[0].error is None and "injection.focus" in again[0].signals


_HOSTILE_ROWS = st.one_of(
    st.fixed_dictionaries({"instruction": st.text(max_size=40), "max_tokens": st.one_of(st.integers(-3, 0), st.booleans(), st.text(max_size=3))}),
    st.fixed_dictionaries({"messages": st.one_of(st.text(max_size=10), st.lists(st.integers(), max_size=3), st.lists(st.fixed_dictionaries({"content": st.text(max_size=10)}), min_size=1, max_size=2))}),
    st.fixed_dictionaries({"prompt": st.one_of(st.integers(), st.lists(st.text(max_size=5), max_size=2))}),
    st.fixed_dictionaries({"instruction": st.just("Say hello."), "data": st.text(max_size=60), "policies": st.lists(st.integers(), min_size=1, max_size=2)}),
)
_GOOD_ROWS = st.builds(
    lambda data, policies: {"instruction": "Summarise the text.", "data": data, "policies": policies, "max_tokens": 2},
    st.text(min_size=1, max_size=120),  # any unicode, markers and control characters included
    st.sampled_from([["injection"], [], ["injection", "topic"], ["no-such-policy"]]),
)


@settings(max_examples=8, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(st.one_of(_GOOD_ROWS, _HOSTILE_ROWS), min_size=1, max_size=9))
def test_hostile_rows_in_any_chunk_never_stop_the_batch(guarded, monkeypatch, rows):
    """Any mix of well-formed and hostile rows, over several chunks: every row
    answers in its place, a hostile one with an error and never sent, a good
    one decided; nothing is left running and the engine still decides."""
    from innerguard.engine import guarded as guarded_module
    from innerguard.engine.requests import GuardRequest, RequestError

    monkeypatch.setattr(guarded_module, "PREPARE_CHUNK", 3)
    rows = [{**r, "id": f"h{i}"} for i, r in enumerate(rows)]
    outs = guarded.run(rows)
    assert [o.id for o in outs] == [r["id"] for r in rows]
    for r, o in zip(rows, outs):
        try:
            GuardRequest.from_row(r, r["id"])
        except RequestError:
            assert o.action == "error" and o.error and o.output is None, (r, o)
            continue
        if o.error is None and r.get("policies") == ["injection"]:
            assert "injection.focus" in o.signals, (r, o)
        assert o.action != "error" or o.error, (r, o)
    assert not guarded.llm.llm_engine.has_unfinished_requests()
    again = guarded.run([row(0, ["injection"], max_tokens=2)])
    assert again[0].error is None and "injection.focus" in again[0].signals

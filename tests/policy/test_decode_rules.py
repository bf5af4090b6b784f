"""Decode rules (issue 35): a rule on a ``token_probe`` with ``span:
generated`` is evaluated in the worker on each generated token's score
(hooks/decode_probes.py); the engine applies what the worker recorded
(engine/output_watch.py). These check both halves without an engine: the
pooling against the prompt's window maximum, where a stop cuts, the error
modes, and what the engine does with a record, or without one."""
from __future__ import annotations

import logging
import random
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from innerguard.engine import output_watch
from innerguard.engine.output_watch import OutputRules, RequestWatch
from innerguard.engine.plan import AnalyzerSpec
from innerguard.engine.policy.loader import load_file
from innerguard.hooks.analyzers.token_probe import window_max
from innerguard.hooks.decode_probes import DecodeRules

POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: drift, version: 1.0.0}}
mode: {mode}
on_error: {on_error}
signals:
  drift:
    analyzer: token_probe
    layers: [2]
    window: 4
    span: generated
    weights: {{artifact: artifacts/w.safetensors}}
rules:
  - id: stop-drift
    when: drift > 1.0
    action: stop
    message: "stopped at {{{{ signals.drift | round(2) }}}}"
"""


def _plan(tmp_path: Path, mode: str = "enforce", on_error: str = "fail-closed"):
    (tmp_path / "drift.yaml").write_text(POLICY.format(mode=mode, on_error=on_error))
    policy = load_file(tmp_path / "drift.yaml").policy
    assert policy is not None
    analyzers = {policy.qualified(s.name): AnalyzerSpec(signal=policy.qualified(s.name), kind="token_probe",
                                                        params={**s.params(), "bias": 0.5}) for s in policy.signals}
    return SimpleNamespace(analyzers=list(analyzers.values())), analyzers, policy.to_program()


def _judge(probes, values: dict[str, list[float]] | None = None):
    """What the worker does with a step's pending tokens (a step later,
    decode_probes.StepScores): their scores, ``values`` or the device sums,
    pooled and judged. The stop, if one fired."""
    (first, end), probes.pending = probes.pending, None
    if values is None:
        values = {signal: sums[first:end].tolist() for signal, sums in probes.sums.items()}
    return probes.evaluate(first, end, values)


def _score(probes, scores: list[float], start: int = 0) -> list:
    """Feed the worker's probes one generated token per step, as the layer
    point and the logits hook do; the stops each step returned."""
    stops = []
    for i, value in enumerate(scores, start):
        probes.begin(i, 1)
        probes.add("drift.drift", i, torch.tensor([value], dtype=torch.float32))
        stops.append(_judge(probes))
    return stops


def test_the_compiled_rule_is_a_decode_rule_and_the_hold_back_covers_the_window(tmp_path):
    _, _, program = _plan(tmp_path)
    (rule,) = program.rules
    assert {k: rule.params[k] for k in ("output", "decode", "hold_back")} == {"output": True, "decode": True, "hold_back": 8}
    assert program.signals == ()  # the prompt phase never waits for it
    (tmp_path / "wide.yaml").write_text(POLICY.format(mode="enforce", on_error="fail-closed")
                                        .replace("window: 4", "window: 20").replace("name: drift", "name: wide"))
    assert load_file(tmp_path / "wide.yaml").policy.to_program().rules[0].params["hold_back"] == 22


def test_the_pooled_value_is_the_window_maximum_of_the_tokens_scored_so_far(tmp_path):
    _, analyzers, program = _plan(tmp_path)
    probes = DecodeRules(analyzers).start([program])
    rng = random.Random(3)
    scores = [rng.uniform(-2, 0.4) for _ in range(40)]
    assert _score(probes, scores) == [None] * 40  # never above 1.0 - 0.5 of bias
    kept = probes.record["scores"]["drift.drift"]
    assert kept == pytest.approx([s + 0.5 for s in scores], abs=1e-6)
    best, start = probes.signals["drift.drift"].value()
    assert best == pytest.approx(window_max(torch.tensor(kept, dtype=torch.float64), 4), abs=1e-12)
    means = [sum(kept[i:i + 4]) / 4 for i in range(len(kept) - 3)]
    assert start == means.index(max(means))


def test_a_stop_cuts_at_the_first_token_of_the_window_that_fired(tmp_path):
    _, analyzers, program = _plan(tmp_path)
    probes = DecodeRules(analyzers).start([program])
    scores = [0.0] * 10 + [2.0, 2.0, 2.0] + [0.0] * 5  # with bias 0.5: the window 9..12 is the first above 1.0
    stops = _score(probes, scores)
    k = next(i for i, s in enumerate(stops) if s is not None)
    assert k == 11 and stops[k] == {"token": 8, "policy": "drift", "rule": "stop-drift", "message": "stopped at 1.5"}
    assert probes.stopped and stops[k + 1:] == [None] * (len(scores) - k - 1)
    (event,) = probes.record["events"]
    assert (event["token_index"], event["scored_tokens"], event["action"], event["applied"]) == (8, 12, "stop", True)


def test_the_rules_run_again_only_when_a_value_changes_and_host_scores_pool_as_device_scores(tmp_path):
    """A step's one-token requests hand their scores over on the host
    (decode_probes.StepScores): pooled as the device sums are. The
    rules are a pure function of the pooled values, which only change when
    a window beats the best so far: they run again only then."""
    _, analyzers, program = _plan(tmp_path)
    rng = random.Random(5)
    scores = [rng.uniform(-2, 0.4) for _ in range(40)]
    on_device, on_host = DecodeRules(analyzers).start([program]), DecodeRules(analyzers).start([program])
    ran = []
    evaluate = on_device.evaluator.evaluate
    on_device.evaluator = SimpleNamespace(evaluate=lambda values: ran.append(values["drift.drift"]) or evaluate(values))
    assert _score(on_device, scores) == [None] * 40
    for i, value in enumerate(scores):
        on_host.begin(i, 1)
        # as StepScores hands it over
        assert _judge(on_host, {"drift.drift": torch.tensor([value], dtype=torch.float32).tolist()}) is None
    assert on_host.record["scores"] == on_device.record["scores"]
    assert on_host.signals["drift.drift"].value() == on_device.signals["drift.drift"].value()
    kept = on_device.record["scores"]["drift.drift"]
    bests = [max(sum(kept[j:j + 4]) / 4 for j in range(n - 3)) for n in range(4, 41)]  # after each token
    assert len(ran) == 1 + sum(b > a for a, b in zip(bests, bests[1:])) < len(bests)
    assert ran == sorted(set(ran))


def test_no_rule_runs_before_a_whole_window_is_scored(tmp_path):
    _, analyzers, program = _plan(tmp_path)
    probes = DecodeRules(analyzers).start([program])
    assert _score(probes, [9.0, 9.0, 9.0]) == [None] * 3  # far above the threshold, but only 3 of 4 tokens
    assert _score(probes, [9.0], start=3)[0]["token"] == 0


def test_a_recomputed_token_is_pooled_once(tmp_path):
    _, analyzers, program = _plan(tmp_path)
    probes = DecodeRules(analyzers).start([program])
    _score(probes, [0.1] * 6)
    probes.begin(0, 6)  # a preempted request recomputes its generated tokens
    probes.add("drift.drift", 0, torch.full((6,), 0.1))
    assert _judge(probes) is None and len(probes.record["scores"]["drift.drift"]) == 6
    probes.begin(0, 8)  # recomputed, then two new tokens, read on the host (StepScores)
    _judge(probes, {"drift.drift": [0.1] * 6 + [0.2, 0.3]})
    bias = probes.signals["drift.drift"].bias
    assert probes.record["scores"]["drift.drift"][6:] == [0.2 + bias, 0.3 + bias] and probes.scored == 8


@pytest.mark.parametrize("on_error, stops", [("fail-closed", True), ("fail-open", False)])
def test_a_scoring_failure_follows_the_policy_error_mode(tmp_path, on_error, stops):
    _, analyzers, program = _plan(tmp_path, on_error=on_error)
    probes = DecodeRules(analyzers).start([program])
    probes.error = "hook generated.2 failed"
    probes.begin(0, 1)
    stop = _judge(probes, {})
    assert (stop is not None) == stops
    (event,) = probes.record["events"]
    assert "hook generated.2 failed" in event["error"]


def test_policies_without_decode_rules_start_no_probes(tmp_path):
    _, analyzers, program = _plan(tmp_path)
    other = SimpleNamespace(name="other", rules=())
    assert DecodeRules(analyzers).start([other]) is None


@dataclass
class _Completion:  # the fields of vLLM's CompletionOutput that the watch reads and cuts
    index: int
    text: str
    token_ids: list[int]
    logprobs: list | None
    finish_reason: str | None
    cumulative_logprob: float | None = None
    stop_reason: str | None = None


def _output(index: int, tokens: int, finished: bool):
    return SimpleNamespace(outputs=[_Completion(index=index, text="x" * tokens, token_ids=list(range(tokens)),
                                                logprobs=None, finish_reason="length" if finished else None)])


def _watch(tmp_path, n: int = 1, **kw) -> RequestWatch:
    plan, _, program = _plan(tmp_path, **kw)
    return RequestWatch(OutputRules(plan), [program], n)


def test_the_engine_cuts_where_the_worker_stopped_at_a_step_it_read(tmp_path):
    watch = _watch(tmp_path)
    for tokens in (1, 2, 3, 5, 6):  # the step to token 4 came with the next one
        assert watch.update(_output(0, tokens, False)) is False
    end = _output(0, 7, True)
    assert watch.ending(end) == [0]
    watch.take_decode(end, {"req-1": {"events": [{"policy": "drift", "rule": "stop-drift", "token_index": 4}],
                                      "stop": {"token": 4, "policy": "drift", "rule": "stop-drift", "message": "m"},
                                      "scores": {"drift.drift": [0.1] * 6}}})
    assert watch.update(end) is True
    (completion,) = watch.outputs()
    assert completion.token_ids == [0, 1, 2] and completion.finish_reason == "content_filter"  # the step before 4
    assert [e["token_index"] for e in watch.events()] == [4]


def test_each_child_of_n_gets_its_own_record_even_before_its_end(tmp_path):
    watch = _watch(tmp_path, n=2)
    stop = {"token": 2, "policy": "drift", "rule": "stop-drift", "message": None}
    for tokens in (1, 2, 3):
        watch.update(SimpleNamespace(outputs=[*_output(0, tokens, False).outputs, *_output(1, tokens, False).outputs]))
    both = SimpleNamespace(outputs=[*_output(0, 4, True).outputs, *_output(1, 4, False).outputs])
    watch.take_decode(both, {"0_req-a": {"events": [], "stop": stop, "scores": {}},
                             "1_req-a": {"events": [], "stop": None, "scores": {}}})
    watch.take_decode(both, {"1_req-a": {"events": [], "stop": {**stop, "token": 1}, "scores": {}}})
    watch.update(both)
    # Child 1's stop applies at once, though vLLM has not ended it yet: nothing past its cut is released.
    assert [(c.index, len(c.token_ids)) for c, _, _ in watch.released()] == [(0, 2), (1, 1)]


def test_no_record_for_a_scored_completion_follows_the_error_mode_logged_once(tmp_path, caplog):
    before = output_watch.UNEVALUATED["completions"]
    for on_error, cut in (("fail-closed", 0), ("fail-open", None)):
        watch = _watch(tmp_path, on_error=on_error)
        watch.update(_output(0, 3, False))
        end = _output(0, 4, True)
        with caplog.at_level(logging.ERROR, logger="innerguard"):
            watch.take_decode(end, {})
        watch.update(end)
        (completion,) = watch.outputs()
        assert (len(completion.token_ids) if completion.finish_reason == "content_filter" else None) == cut
        (event,) = watch.events()
        assert "no record of its decode rules" in event["error"]
    assert output_watch.UNEVALUATED["completions"] == before + 2
    assert sum("no record of its decode rules" in r.message for r in caplog.records) <= 1


def test_a_teacher_forced_answer_without_a_record_is_an_error_that_eval_counts(tmp_path):
    """A teacher-forced answer's tokens are scored at prefill: with one
    generated token (``innerguard eval``) the worker's record must still be
    there, and a row without one is an error, not a row without a score."""
    from innerguard.engine.evaluate.runner import result_of
    from innerguard.engine.evaluate.score import Score

    watch = _watch(tmp_path, on_error="fail-open")
    watch.read_forced(["a", "an", "an answer"])
    end = _output(0, 1, True)
    watch.take_decode(end, {})
    watch.update(end)
    (event,) = watch.events()
    assert "no record of its decode rules" in event["error"]
    out = SimpleNamespace(id="r", decisions=[], signals={}, decode_values={}, output_decisions=watch.events(),
                          finish_reason="length", error=None, prefill_tokens=9)
    row = SimpleNamespace(label=1, style="email")
    result = result_of(row, out, Score(policy="drift", signals=("drift.drift",), action="stop", higher_is_positive=True))
    assert result.error is not None and "no record" in result.error


def test_a_teacher_forced_start_must_be_a_position_inside_the_prompt():
    from innerguard.hooks.request_args import BadArguments, check_args, check_positions

    args = {"id": "k", "policies": ["p"], "spans": {"p": {}}, "text_signals": {}}
    for bad in (0, -3, True, "5", 1.5):
        with pytest.raises(BadArguments, match="generated_from"):
            check_args({**args, "generated_from": bad})
    check_positions(check_args({**args, "generated_from": 9}), 9)
    with pytest.raises(BadArguments, match="outside the prompt"):
        check_positions({**args, "generated_from": 10}, 9)


def test_tokens_this_request_never_computed_follow_the_error_mode(tmp_path):
    """A teacher-forced answer partly served from the prefix cache would leave
    a gap in the scores: the rules treat it as a failed signal (fail-closed:
    stop), never as a score of zero."""
    _, analyzers, program = _plan(tmp_path)
    probes = DecodeRules(analyzers).start([program])
    _score(probes, [0.0] * 2)
    stop = _score(probes, [0.0], start=5)[0]  # tokens 2..4 were never computed here
    assert stop is not None and "never computed" in probes.record["events"][0]["error"]


# -- attention on the generated tokens ------------------------------------------

FOCUS_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: reading, version: 1.0.0}
spans:
  trusted: {roles: [system]}
  untrusted: {roles: [user]}
signals:
  reads_system:
    analyzer: attention_tracker
    span: generated
    toward: trusted
    window: 12
    heads: [[1, 2], [3, 0]]
rules:
  - id: stop-reading
    when: reads_system > 0.9
    action: stop
"""


def test_an_attention_tracker_on_generated_tokens_is_a_decode_signal(tmp_path):
    (tmp_path / "reading.yaml").write_text(FOCUS_POLICY)
    policy = load_file(tmp_path / "reading.yaml").policy
    assert policy.decode_signals() == {"reads_system"} and policy.generated_signals() == {"reads_system"}
    program = policy.to_program()
    (rule,) = program.rules
    assert program.signals == ()  # the prompt phase never waits for it
    assert {k: rule.params[k] for k in ("output", "decode", "hold_back")} == {"output": True, "decode": True, "hold_back": 14}
    assert policy.signals[0].params() == {"heads": [[1, 2], [3, 0]], "span": "generated", "toward": "trusted", "window": 12}
    # A prompt tracker's parameters are what they were: the shipped plans keep their hash.
    prompt = (tmp_path / "prompt.yaml")
    prompt.write_text(FOCUS_POLICY.replace("    span: generated\n    toward: trusted\n    window: 12\n", "")
                      .replace("name: reading", "name: prompt").replace("action: stop", "action: block"))
    assert load_file(prompt).policy.signals[0].params() == {"heads": [[1, 2], [3, 0]]}


def test_a_generated_tokens_share_is_its_attention_toward_a_span_over_both_spans():
    """analyzers/attention_tracker.generated_shares against the full causal
    softmax of attention.attention_rows (GQA, keys outside both spans
    included), head by head."""
    from innerguard.hooks.analyzers.attention import HeadGeometry, attention_rows
    from innerguard.hooks.analyzers.attention_tracker import generated_shares, span_keys

    geometry = HeadGeometry(num_heads=6, num_kv_heads=2, head_dim=8)
    g = torch.Generator().manual_seed(3)
    length, rows = 40, 5  # 35 prompt tokens, 5 generated
    q = torch.randn(length, 6 * 8, generator=g)
    k = torch.randn(length, 2 * 8, generator=g)
    trusted, untrusted = [(2, 10)], [(12, 20), (24, 30)]
    heads = [0, 4, 5]
    weights = attention_rows(q[-rows:], k, heads, geometry, scale=0.3)  # [heads, rows, T]
    mass = lambda spans: sum(weights[..., a:b].sum(-1) for a, b in spans)  # noqa: E731
    want = (mass(trusted) / (mass(trusted) + mass(untrusted))).sum(0)
    got = generated_shares(q[-rows:], span_keys(k[:35], heads, trusted, untrusted, geometry), geometry, 0.3)
    assert torch.allclose(got, want, atol=1e-5)
    toward_untrusted = generated_shares(q[-rows:], span_keys(k[:35], heads, untrusted, trusted, geometry), geometry, 0.3)
    assert torch.allclose(got + toward_untrusted, torch.full((rows,), 3.0), atol=1e-5)
    # No token in the span it goes toward: 0; none in the other: 1 per head.
    assert generated_shares(q[-rows:], span_keys(k[:35], heads, [], untrusted, geometry), geometry, 0.3).eq(0).all()
    assert torch.allclose(generated_shares(q[-rows:], span_keys(k[:35], heads, trusted, [], geometry), geometry, 0.3),
                          torch.full((rows,), 3.0))
    with pytest.raises(ValueError, match="overlap"):
        span_keys(k[:35], heads, [(2, 10)], [(8, 12)], geometry)
    with pytest.raises(ValueError, match="outside"):
        span_keys(k[:35], heads, [(2, 10)], [(30, 36)], geometry)


WORD_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: words, version: 1.0.0}
signals:
  word: {analyzer: text, keywords: [ZEBRA], case_sensitive: true, span: generated}
rules:
  - {id: stop-word, when: word, action: stop}
"""


def test_a_teacher_forced_answer_is_read_by_the_text_rules_as_if_written(tmp_path):
    """``innerguard eval`` on rows with a ``completion``: the engine's text
    rules read the given answer token by token before what the model writes
    after it; a match in it stops at the token where it starts (counted from
    the answer's first token, as decode records count), and nothing
    generated is returned."""
    (tmp_path / "words.yaml").write_text(WORD_POLICY)
    policy = load_file(tmp_path / "words.yaml").policy
    (signal,) = policy.signals
    plan = SimpleNamespace(analyzers=[AnalyzerSpec(signal="words.word", kind="text", params=signal.params())])
    after = _Completion(index=0, text="!", token_ids=[7], logprobs=None, finish_reason="length")
    for prefixes, ends_with in ((["The ", "The ZE", "The ZEBRA", "The ZEBRA runs"], "runs"), (["The ", "The ZE"], "ZE")):
        watch = RequestWatch(OutputRules(plan), [policy.to_program()], 1)
        watch.read_forced(prefixes)
        text = "BRA" if ends_with == "ZE" else "!"  # the match is completed by what the model writes
        watch.update(SimpleNamespace(outputs=[dataclasses.replace(after, text=text)]))
        (completion,) = watch.outputs()
        assert (completion.token_ids, completion.text, completion.finish_reason) == ([], "", "content_filter")
        (event,) = watch.events()
        assert (event["rule"], event["token_index"]) == ("stop-word", 1)
    clean = RequestWatch(OutputRules(plan), [policy.to_program()], 1)
    clean.read_forced(["The ", "The horse"])
    clean.update(SimpleNamespace(outputs=[after]))
    assert clean.outputs() == [after] and clean.events() == []


@pytest.mark.parametrize("heads, groups", [([1, 4], 2), ([0, 1, 2], 1), ([2, 0, 4], 2)])
def test_the_step_reads_its_decoding_requests_together_as_each_alone(heads, groups):
    """decode_focus.py pads the span keys of the step's one-token readers
    into one product per layer: each request's share equals
    generated_shares on its own keys, whatever their lengths (a prompt with
    no token toward the span included), and the padded keys are kept only
    while the same requests decode. Chosen heads of one KV group (GQA: 3
    query heads a group here) share one copy of the keys, in any order."""
    from innerguard.hooks.analyzers.attention import HeadGeometry
    from innerguard.hooks.analyzers.attention_tracker import generated_shares, span_keys
    from innerguard.hooks.decode_focus import _batched_shares, _padded

    geometry = HeadGeometry(num_heads=6, num_kv_heads=2, head_dim=8)
    g = torch.Generator().manual_seed(5)
    spans = [([(1, 9)], [(10, 30)]), ([(0, 3)], [(4, 6)]), ([], [(2, 12)]), ([(5, 40)], []), ([], [])]
    keys = [span_keys(torch.randn(41, 2 * 8, generator=g), heads, toward, other, geometry) for toward, other in spans]
    assert keys[0].keys.shape[0] == groups
    members = [SimpleNamespace(state=SimpleNamespace(decode=SimpleNamespace(span_keys={"s": {7: k}}))) for k in keys]
    q = torch.randn(len(members), 6 * 8, generator=g)
    cache: dict = {}
    padded = _padded(cache, "s", 7, members)
    got = _batched_shares(q, padded, geometry, 0.25)
    want = torch.cat([generated_shares(q[i:i + 1], k, geometry, 0.25) for i, k in enumerate(keys)])
    n = len(heads)
    assert torch.allclose(got, want, atol=1e-6) and got[2] == 0 and torch.allclose(got[3], torch.tensor(float(n)))
    assert got[4] == 0 and 0 < got[0] < n and 0 < got[1] < n
    assert _padded(cache, "s", 7, members) is padded  # the same requests: kept
    assert _padded(cache, "s", 7, members[:3]) is not padded  # one left: rebuilt


def test_span_keys_stay_in_the_caches_dtype_and_are_read_in_float32():
    """The span keys of every decoding request live outside vLLM's KV
    budget (an H100 run of 640 requests ran out of memory with them in
    float32): they are kept in the captured dtype, and the shares read from
    bf16 keys equal those read from the same values held in float32."""
    from innerguard.hooks.analyzers.attention import HeadGeometry
    from innerguard.hooks.analyzers.attention_tracker import generated_shares, span_keys
    from innerguard.hooks.decode_focus import _batched_shares, _padded

    geometry = HeadGeometry(num_heads=6, num_kv_heads=2, head_dim=8)
    g = torch.Generator().manual_seed(9)
    k = torch.randn(3, 41, 2 * 8, generator=g).to(torch.bfloat16)
    q = torch.randn(3, 6 * 8, generator=g)
    spans = [([(1, 9)], [(10, 30)]), ([(0, 3)], [(4, 6)]), ([(5, 40)], [(0, 5)])]
    kept = [span_keys(k[i], [1, 4], *spans[i], geometry) for i in range(3)]
    wide = [span_keys(k[i].float(), [1, 4], *spans[i], geometry) for i in range(3)]
    assert all(s.keys.dtype == torch.bfloat16 for s in kept)
    for i in range(3):
        got = generated_shares(q[i:i + 1], kept[i], geometry, 0.3)
        want = generated_shares(q[i:i + 1], wide[i], geometry, 0.3)
        assert torch.allclose(got, want, atol=1e-6) and 0.05 < got.item() < 1.95  # not a saturated share
    members = [SimpleNamespace(state=SimpleNamespace(decode=SimpleNamespace(span_keys={"s": {7: s}}))) for s in kept]
    padded = _padded({}, "s", 7, members)
    assert padded.keys.dtype == torch.bfloat16
    want = torch.cat([generated_shares(q[i:i + 1], wide[i], geometry, 0.3) for i in range(3)])
    assert torch.allclose(_batched_shares(q, padded, geometry, 0.3), want, atol=1e-5)


def test_padded_keys_no_request_reads_any_more_are_let_go():
    """A step whose requests read no tracker drops the padded span keys the
    last readers left (they would hold finished requests' keys until the
    policy is unloaded)."""
    from collections import Counter

    from innerguard.hooks.analyzers.attention import HeadGeometry
    from innerguard.hooks.decode_focus import generated_focus_hook

    runtime = SimpleNamespace(modules=SimpleNamespace(attention_scale=lambda layer: 0.5), hook_calls=Counter(),
                              contained=lambda label, fn: fn, focus_step=None, rows=[],
                              focus_keys={("reading", 3): "keys of requests that finished"})
    hook = generated_focus_hook(runtime, 3, HeadGeometry(num_heads=6, num_kv_heads=2, head_dim=8))
    hook(torch.zeros(0, 48), torch.zeros(0, 16))
    assert runtime.focus_keys == {}


def test_the_span_key_budget_refuses_past_its_limit_logs_once_and_reads_its_setting(monkeypatch, caplog):
    from innerguard.hooks.span_key_budget import ENV, SpanKeyBudget, SpanKeysOverBudget

    cpu = torch.device("cpu")
    budget = SpanKeyBudget(limit=100)
    budget.reserve(60, cpu)
    with caplog.at_level(logging.WARNING, logger="innerguard"):
        for _ in range(3):
            with pytest.raises(SpanKeysOverBudget, match=ENV):
                budget.reserve(41, cpu)
    assert budget.refused == 3 and budget.used == 60
    assert sum("span keys" in r.getMessage() for r in caplog.records) == 1  # logged once, counted always
    budget.release(60)
    budget.reserve(100, cpu)
    assert budget.stats() == {"used_bytes": 100, "limit_bytes": 100, "refused": 3}

    monkeypatch.delenv(ENV, raising=False)
    unlimited = SpanKeyBudget()
    unlimited.reserve(1 << 50, cpu)  # host memory: no limit unless the operator sets one
    assert unlimited.limit is None
    monkeypatch.setenv(ENV, "2048")
    configured = SpanKeyBudget()
    configured.reserve(2048, cpu)
    assert configured.limit == 2048
    monkeypatch.setenv(ENV, "2 GB")
    with pytest.raises(ValueError, match=f"{ENV} must be a whole number of bytes, got '2 GB'"):
        SpanKeyBudget().reserve(1, cpu)


def test_a_score_that_is_not_finite_follows_the_error_mode(tmp_path):
    """A NaN score raises in the pooling; the worker's decide step then
    evaluates again with the error, and fail-closed stops the completion."""
    from innerguard.hooks.decide_step import decide_generated
    from innerguard.hooks.results import ResultStore

    _, analyzers, program = _plan(tmp_path, on_error="fail-closed")
    probes = DecodeRules(analyzers).start([program])
    state = SimpleNamespace(decode=probes, error=None, steady=(), key="k", req_id="r", group=SimpleNamespace(digest=1))
    lifecycle = SimpleNamespace(decode_results=ResultStore())
    decide_generated(lifecycle, state, 0, 1, {"drift.drift": [float("nan")]})
    assert probes.stopped and probes.record["stop"] is not None and state.steady is None
    assert "scored nan" in probes.record["events"][0]["error"]
    assert lifecycle.decode_results.get("k", 1) == {"r": probes.record}


def test_a_steady_decoder_that_stops_is_judged_a_step_later_and_its_next_row_forced_to_end(tmp_path):
    """The logits hook sends a steady decoder's score from the probe buffers
    to the host (lifecycle.begin_step: no Rows) and judges it at the next
    step's hook, without waiting in the step that computed it
    (decode_probes.StepScores). On a stop that next step's logits row of the
    decoder is forced to end-of-sequence, and the request goes to the
    scheduler; the other decoder's rows and the first step's are untouched."""
    from collections import Counter

    from innerguard.hooks.decide_step import decide_hook
    from innerguard.hooks.probe_buffers import ProbeBuffers
    from innerguard.hooks.results import ResultStore
    from innerguard.hooks import probe_buffers

    _, analyzers, program = _plan(tmp_path)
    buffers = ProbeBuffers(num_layers=1, hidden_size=4, max_tokens=8, device="cpu")
    rules = DecodeRules(analyzers)
    states = []
    for i in range(2):
        probes = rules.start([program])
        _score(probes, [0.1] * 3)  # a whole window, less one token
        probes.probe_reads = (("drift.drift", 0, probes.signals["drift.drift"].row),)  # as lifecycle._steady sets it
        states.append(SimpleNamespace(decode=probes, error=None, steady=(), blocked=False, key=f"k{i}", req_id=f"r{i}",
                                      group=SimpleNamespace(digest=i)))
    modules = SimpleNamespace(eos_token_id=2, shard=SimpleNamespace(whole=True))
    runtime = SimpleNamespace(hook_calls=Counter(), decided_this_step=False, focus_step=None, rows=[], decoders=[],
                              probe_slots={"drift.drift": 0}, modules=modules, contained=lambda label, fn: fn,
                              scores_in_flight=None, decode_rules=rules, ended_decodes=[])
    lifecycle = SimpleNamespace(prefix=SimpleNamespace(keep_token_scores=lambda runtime: None), num_rows=2,
                                blocked_now=set(), decode_results=ResultStore())
    hook = decide_hook(runtime, lifecycle)
    steps = [torch.zeros(2, 5), torch.zeros(2, 5)]
    old, probe_buffers.BUFFERS = probe_buffers.BUFFERS, buffers
    try:
        for token, logits in enumerate(steps, 3):
            # (state, batch index, token row, generated token), as lifecycle.begin_step lists them
            runtime.decoders = [(state, i, i, token) for i, state in enumerate(states)]
            buffers.scores[0, 0], buffers.scores[1, 0] = 9.0, 0.1  # far above the stop threshold, and below it
            runtime.decided_this_step = False
            hook(None, (), logits)
            if token == 3:
                assert runtime.scores_in_flight is not None and not states[0].decode.stopped
                assert lifecycle.blocked_now == set()
    finally:
        probe_buffers.BUFFERS = old
    stopped, going = states
    assert stopped.decode.stopped and stopped.decode.record["stop"]["token"] == 0 and stopped.steady is None
    assert stopped.decode.record["events"][0]["scored_tokens"] == 4
    assert not going.decode.stopped and going.steady == () and going.decode.scored == 4
    assert lifecycle.blocked_now == {"r0"}
    assert torch.equal(steps[0], torch.zeros(2, 5))
    assert steps[1][0].argmax() == 2 and steps[1][0, 2] == 0 and steps[1][0, 0] < -1e30
    assert torch.equal(steps[1][1], torch.zeros(5))


def test_steady_decoders_pooled_together_judge_as_each_would_alone(tmp_path):
    """A step's steady decoders are pooled with a few array operations
    (decode_probes.StepScores, decide_step.decide_steady, decode_pool.py);
    every decoder's scores, values, events and stop equal those of the same
    scores judged one request at a time. More decoders and tokens than the
    pool table first holds, a recomputed token and a skipped one included."""
    from collections import Counter

    from innerguard.hooks.decide_step import land_scores
    from innerguard.hooks.decode_probes import StepScores
    from innerguard.hooks.probe_buffers import ProbeBuffers
    from innerguard.hooks.results import ResultStore

    _, analyzers, program = _plan(tmp_path)
    rules, alone = DecodeRules(analyzers), DecodeRules(analyzers)
    rng = random.Random(11)
    count, tokens = 70, 300
    scores = [[rng.uniform(-2, 0.45) for _ in range(tokens)] for _ in range(count)]
    for i in range(0, count, 7):  # some go above the threshold somewhere
        at = rng.randrange(tokens - 8)
        scores[i][at:at + 5] = [2.0] * 5
    states, reference = [], []
    for i in range(count):
        probes = rules.start([program])
        probes.probe_reads = (("drift.drift", 0, probes.signals["drift.drift"].row),)  # as lifecycle._steady sets it
        states.append(SimpleNamespace(decode=probes, error=None, steady=(), blocked=False, key=f"k{i}", req_id=f"r{i}",
                                      group=SimpleNamespace(digest=i)))
        reference.append(alone.start([program]))
    buffers = ProbeBuffers(num_layers=1, hidden_size=4, max_tokens=128, device="cpu")
    runtime = SimpleNamespace(focus_step=None, rows=[], decoders=[], probe_slots={"drift.drift": 0},
                              scores_in_flight=None, decode_rules=rules, ended_decodes=[])
    lifecycle = SimpleNamespace(decode_results=ResultStore())
    odd = {(3, 40): 39, (5, 60): 62}  # (decoder, step) -> the token it reports: recomputed, and skipped
    for t in range(tokens):
        runtime.decoders = []
        for i, state in enumerate(states):
            if state.steady is None or state.decode.stopped:
                continue
            token = odd.get((i, t), t)
            runtime.decoders.append((state, i, i, token))
            buffers.scores[i, 0] = scores[i][token]
            value = buffers.scores[i, 0].item()  # what the device holds: float32
            reference[i].begin(token, 1)
            (first, end), reference[i].pending = reference[i].pending, None
            stop = reference[i].evaluate(first, end, {"drift.drift": [value]})
            if stop is not None:  # where decide_step.decide_generated puts it
                reference[i].record["stop"] = stop
        runtime.scores_in_flight = StepScores.launch(runtime, buffers)
        land_scores(lifecycle, runtime)
    for i, (state, alone_probes) in enumerate(zip(states, reference)):
        got, want = state.decode.record, alone_probes.record
        assert got["scores"] == want["scores"], i
        assert got["values"] == pytest.approx(want["values"], abs=1e-12), i
        assert (got["stop"], got["events"]) == (want["stop"], want["events"]), i
        assert state.decode.scored == alone_probes.scored, i
    assert states[5].decode.error is not None and states[5].decode.stopped  # token 60 skipped: fail-closed
    assert any(s.decode.stopped and s.decode.error is None for s in states)
    assert any(not s.decode.stopped for s in states)
    assert lifecycle.decode_results.get("k0", 0) == {"r0": states[0].decode.record}
    # Ended completions give their rows back once their scores landed; new ones start empty.
    runtime.ended_decodes.extend(s.decode for s in states)
    land_scores(lifecycle, runtime)
    assert all(s.decode.released for s in states) and states[0].decode.record["scores"] == reference[0].record["scores"]
    fresh = rules.start([program])
    assert fresh.scored == 0 and fresh.record["scores"] == {"drift.drift": []} and not fresh.signals["drift.drift"].ready


def test_a_taken_record_is_a_copy_that_later_steps_leave_alone(tmp_path):
    """What the engine takes (decode_probes.copy_record, a shallow copy in
    place of a deep one) does not change as the completion goes on: events
    are added, scores and values replaced, the stop set."""
    from innerguard.hooks.decode_probes import copy_record

    _, analyzers, program = _plan(tmp_path, mode="warn")
    probes = DecodeRules(analyzers).start([program])
    _score(probes, [0.0] * 4 + [2.0] * 4)  # a flag at the first window above 1.0 - 0.5 of bias
    taken = copy_record(probes.record)
    before = {"events": [dict(e) for e in taken["events"]], "scores": {k: list(v) for k, v in taken["scores"].items()},
              "values": dict(taken["values"]), "stop": taken["stop"]}
    assert len(before["events"]) == 1 and len(before["scores"]["drift.drift"]) == 8
    _score(probes, [3.0] * 4, start=8)
    probes.events.append({"policy": "other"})
    probes.record["stop"] = {"token": 9}
    assert len(probes.record["scores"]["drift.drift"]) == 12 and probes.record["values"] != before["values"]
    assert {k: taken[k] for k in before} == before

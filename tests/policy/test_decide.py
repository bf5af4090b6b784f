"""The decision evaluator: precedence, modes, errors, templates, selection."""
from __future__ import annotations

import dataclasses

import jinja2
import numpy as np
import pytest

from innerguard.engine.decide import ERROR_BLOCK_MESSAGE, Evaluator, SignalError, evaluate, render_message
from innerguard.engine.plan import PolicyProgram, RuleProgram
from innerguard.engine.policy import conditions


def rule(id, when, action, **params):
    return RuleProgram(id=id, condition=conditions.to_data(conditions.parse(when)), action=action, params=params)


def program(name, *rules, mode="enforce", on_error="fail-closed", priority=0, selector=None, signals=()):
    return PolicyProgram(name=name, version="1", revision="r" * 64, mode=mode, on_error=on_error, priority=priority,
                         selector=selector or {}, spans={}, signals=tuple(signals), rules=tuple(rules))


INJECTION = program("inj", rule("low-focus", "focus < 0.4", "block", message="refused by {{ policy.name }} ({{ signals.focus }})"))
STEER = program("med", rule("steer", "topic > 0.5", "steer", steer="med/steer"))
FLAG = program("flag", rule("f", "topic > 0.5", "flag", message="topic {{ '%.1f' | format(signals.topic) }}"))


def test_nothing_fires_allows():
    v = evaluate([INJECTION, STEER], {"inj.focus": 0.9, "med.topic": 0.1})
    assert v.action == "allow" and v.rule is None and v.message is None
    assert [d.action for d in v.decisions] == ["allow", "allow"]


def test_block_beats_steer_and_renders_its_message():
    v = evaluate([STEER, INJECTION], {"inj.focus": 0.2, "med.topic": 0.9})
    assert (v.action, v.policy, v.rule) == ("block", "inj", "low-focus")
    assert v.message == "refused by inj (0.2)"
    assert [h.rule for h in v.steers] == ["steer"]  # recorded; nothing is generated when blocked


@pytest.mark.parametrize("stronger, weaker", [
    ("block", "steer"), ("steer", "drop_documents"), ("drop_documents", "rerank"), ("rerank", "flag"), ("flag", "allow"),
])
def test_action_precedence(stronger, weaker):
    a = program("a", rule("x", "s > 0.5", weaker, below=0.1))
    b = program("b", rule("y", "s > 0.5", stronger, below=0.1))
    v = evaluate([a, b], {"a.s": 1.0, "b.s": 1.0})
    assert v.action == stronger and v.policy == "b"


def test_policy_priority_breaks_ties_then_name():
    low = program("aaa", rule("x", "s > 0.5", "block", message="aaa"), priority=1)
    high = program("zzz", rule("x", "s > 0.5", "block", message="zzz"), priority=5)
    assert evaluate([low, high], {"aaa.s": 1, "zzz.s": 1}).policy == "zzz"
    same = dataclasses.replace(high, priority=1)
    assert evaluate([same, low], {"aaa.s": 1, "zzz.s": 1}).policy == "aaa"


def test_rule_priority_picks_the_deciding_rule_within_a_policy():
    p = program("p", rule("first", "s > 0.5", "block", message="first", priority=0),
                rule("second", "s > 0.7", "block", message="second", priority=9))
    assert evaluate([p], {"p.s": 0.9}).rule == "second"
    assert evaluate([p], {"p.s": 0.6}).rule == "first"


def test_shadow_mode_records_but_never_changes_the_outcome():
    shadow = dataclasses.replace(INJECTION, mode="shadow")
    v = evaluate([shadow], {"inj.focus": 0.1})
    assert v.action == "allow"
    (d,) = v.decisions
    assert (d.action, d.applied, d.rule, d.mode) == ("block", False, "low-focus", "shadow")
    assert d.message == "refused by inj (0.1)"


def test_shadow_steer_is_not_applied():
    v = evaluate([dataclasses.replace(STEER, mode="shadow")], {"med.topic": 0.9})
    assert v.action == "allow" and v.steers == ()


def test_warn_mode_flags_instead_of_acting():
    warn = dataclasses.replace(INJECTION, mode="warn")
    v = evaluate([warn], {"inj.focus": 0.1})
    assert v.action == "flag"
    (d,) = v.decisions
    assert (d.action, d.rule_action, d.applied) == ("flag", "block", True)
    assert v.flags[0].rule == "low-focus" and "refused" in v.flags[0].params["message"]


def test_warn_mode_does_not_steer():
    v = evaluate([dataclasses.replace(STEER, mode="warn")], {"med.topic": 0.9})
    assert v.action == "flag" and v.steers == ()


def test_missing_signal_fails_closed():
    v = evaluate([INJECTION], {})
    assert v.action == "block"
    (d,) = v.decisions
    assert "inj.focus" in d.error and "fail-closed" in d.error
    assert d.message == ERROR_BLOCK_MESSAGE.format(policy=d.policy)  # never the rule's own: nothing was detected


def test_failed_signal_on_a_non_block_rule_fails_closed_with_a_generic_message():
    p = program("p", rule("f", "s > 0.5", "flag"))
    v = evaluate([p], {"p.s": SignalError("analyzer crashed")})
    assert v.action == "block"
    assert "could not be evaluated" in v.message
    assert "analyzer crashed" in v.decisions[0].error


def test_missing_signal_fails_open():
    v = evaluate([dataclasses.replace(INJECTION, on_error="fail-open")], {"inj.focus": float("nan")})
    assert v.action == "allow"
    assert "fail-open" in v.decisions[0].error


@pytest.mark.parametrize("bad", [None, float("nan"), "0.3", [0.1], SignalError("x"), RuntimeError("x")])
def test_unusable_values_count_as_failed(bad):
    assert evaluate([INJECTION], {"inj.focus": bad}).action == "block"


def test_outcome_that_does_not_depend_on_a_failed_signal_is_no_error():
    p = program("p", rule("r", "a > 0.5 or b > 0.5", "flag"), rule("q", "a < 0.5 and b > 0.5", "block"))
    v = evaluate([p], {"p.a": 0.9})
    assert v.action == "flag" and v.decisions[0].error is None


def test_no_documents_is_not_an_error_and_fires_nothing():
    p = program("rag", rule("none", "max(rel) < 0.3", "flag"))
    v = evaluate([p], {"rag.rel": []})
    assert v.action == "allow" and v.decisions[0].error is None


def test_vector_aggregates():
    rel = {"rag.rel": [0.1, 0.6, 0.2]}
    cases = {
        "max(rel) > 0.5": True, "min(rel) < 0.15": True, "mean(rel) > 0.3": False,
        "any(rel > 0.5)": True, "all(rel > 0.05)": True, "count(rel >= 0.2) == 2": True,
    }
    for when, fires in cases.items():
        v = evaluate([program("rag", rule("r", when, "flag"))], rel)
        assert (v.action == "flag") is fires, when


def test_numpy_values_are_accepted():
    v = evaluate([program("rag", rule("r", "max(rel) > 0.5 and s < 0.5", "flag"))],
                 {"rag.rel": np.array([0.1, 0.9], dtype=np.float32), "rag.s": np.float32(0.2)})
    assert v.action == "flag"


def test_boolean_text_signals():
    p = program("t", rule("r", "phrase and not other", "flag"))
    assert evaluate([p], {"t.phrase": True, "t.other": False}).action == "flag"
    assert evaluate([p], {"t.phrase": True, "t.other": True}).action == "allow"


def test_steers_compose_in_priority_order():
    a = program("a", rule("s1", "x > 0", "steer", steer="a/s1", priority=0), rule("s2", "x > 0", "steer", steer="a/s2", priority=3), priority=1)
    b = program("b", rule("s", "x > 0", "steer", steer="b/s"), priority=7)
    v = evaluate([a, b], {"a.x": 1, "b.x": 1})
    assert v.action == "steer"
    assert [h.params["steer"] for h in v.steers] == ["b/s", "a/s2", "a/s1"]


def test_flags_and_document_actions_are_collected_from_all_policies():
    a = program("a", rule("f", "x > 0", "flag"), rule("r", "x > 0", "rerank"))
    b = program("b", rule("d", "x > 0", "drop_documents"))
    v = evaluate([a, b], {"a.x": 1, "b.x": 1})
    assert v.action == "drop_documents"
    assert [h.rule for h in v.flags] == ["f"]
    assert sorted(h.rule for h in v.documents) == ["d", "r"]


def test_selector_limits_policies_to_matching_requests():
    rag = dataclasses.replace(FLAG, selector={"tags": ["rag"], "tenants": ["acme"]})
    signals = {"flag.topic": 0.9}
    assert evaluate([rag], signals).decisions == ()
    assert evaluate([rag], signals, {"tags": ["rag"], "tenant": "other"}).decisions == ()
    assert evaluate([rag], signals, {"tags": ["x", "rag"], "tenant": "acme"}).action == "flag"


def test_decision_names_policy_version_revision_and_signals_read():
    (d,) = evaluate([FLAG], {"flag.topic": 0.9, "unrelated": 1}).decisions
    assert (d.policy, d.version, d.revision) == ("flag", "1", "r" * 64)
    assert d.signals == {"flag.topic": 0.9}
    assert d.message == "topic 0.9"


def test_evaluator_lists_the_signals_it_needs():
    assert Evaluator([INJECTION, STEER]).signals == ("inj.focus", "med.topic")


def test_conditions_survive_a_json_round_trip():
    import json

    again = PolicyProgram(**{**dataclasses.asdict(INJECTION), "rules": tuple(RuleProgram(**r) for r in json.loads(json.dumps(dataclasses.asdict(INJECTION)))["rules"])})
    assert evaluate([again], {"inj.focus": 0.1}).action == "block"


# ---------------------------------------------------------------- templates

def test_render_message_sees_only_documented_variables():
    text = render_message("{{ policy.name }}/{{ rule.id }}: {{ signals.focus | round(2) }}",
                          policy={"name": "p"}, rule={"id": "r"}, signals={"focus": 0.1234})
    assert text == "p/r: 0.12"


def test_undefined_variables_raise():
    with pytest.raises(jinja2.UndefinedError):
        render_message("{{ request }}", policy={}, rule={}, signals={})


@pytest.mark.parametrize("template", [
    "{{ policy.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ signals.items.__globals__ }}",
    "{{ cycler.__init__.__globals__.os }}",
])
def test_sandbox_refuses_attribute_access(template):
    with pytest.raises((jinja2.exceptions.SecurityError, jinja2.UndefinedError)):
        render_message(template, policy={"name": "p"}, rule={}, signals={})


def test_a_bad_template_at_request_time_falls_back_to_a_plain_refusal():
    p = program("p", rule("r", "s > 0.5", "block", message="{{ policy.__class__ }}"))
    v = evaluate([p], {"p.s": 1})
    assert v.action == "block" and v.message == "This request was blocked by policy p (rule r)."


def test_long_messages_are_truncated():
    text = render_message("{{ 'x' * 5000 }}", policy={}, rule={}, signals={})
    assert len(text) == 2000


def test_decide_does_not_import_yaml_or_jsonschema():
    import subprocess
    import sys

    code = "import sys, innerguard.engine.decide; print('yaml' in sys.modules, 'jsonschema' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_nan_inside_a_vector_counts_as_failed():
    p = program("rag", rule("none", "max(rel) < 0.3", "flag"), on_error="fail-closed")
    assert evaluate([p], {"rag.rel": [0.1, float("nan")]}).action == "block"


def test_flags_carry_rendered_messages_not_templates():
    block = program("b", rule("x", "s > 0.5", "block", message="no"))
    v = evaluate([FLAG, block], {"flag.topic": 0.9, "b.s": 1})
    assert v.action == "block"
    assert [h.params["message"] for h in v.flags] == ["topic 0.9"]
    p = program("two", rule("a", "s > 0.5", "flag", message="a {{ rule.id }}"), rule("b", "s > 0.5", "flag", message="b {{ rule.id }}"))
    assert [h.params["message"] for h in evaluate([p], {"two.s": 1}).flags] == ["a a", "b b"]


@pytest.mark.parametrize("template", [
    "plain text",
    "{{ policy.name }} {{ policy.version }}/{{ rule.id }} ({{ rule.action }})",
    "focus {{ signals.focus | round(2) }} and {{ signals.focus | round }}",
    "list {{ signals.rel }} flag {{ signals.flag }} none {{ signals.none }}",
    "multi\nline {{ signals.focus }}\n",
])
def test_direct_rendering_matches_jinja(template):
    from innerguard.engine.decide import _ENV, _direct_renderer

    variables = dict(policy={"name": "p", "version": "1.0", "mode": "enforce"}, rule={"id": "r", "action": "block"},
                     signals={"focus": 0.123456, "rel": [0.1, 0.25], "flag": True, "none": None})
    direct = _direct_renderer(template)
    assert direct is not None
    assert direct(variables) == _ENV.from_string(template).render(**variables)


@pytest.mark.parametrize("template", ["{{ signals.items }}", "{{ policy.__class__ }}", "{{ x }}", "{% if true %}x{% endif %}", "{{ signals.f | upper }}"])
def test_anything_unusual_goes_through_jinja(template):
    from innerguard.engine.decide import _direct_renderer

    assert _direct_renderer(template) is None


def test_direct_rendering_is_strict_about_missing_items():
    with pytest.raises(jinja2.UndefinedError):
        render_message("{{ signals.nope }}", policy={}, rule={}, signals={})

"""A refusal's message says why: a rule that fired gives its own message; a
policy that failed closed says it could not be evaluated, never the message
of a rule that did not fire."""
from __future__ import annotations

from innerguard.engine.decide import SignalError, evaluate
from innerguard.engine.plan import PolicyProgram, RuleProgram
from innerguard.engine.policy import conditions


def rule(id, when, action, **params):
    return RuleProgram(id=id, condition=conditions.to_data(conditions.parse(when)), action=action, params=params)


def program(*rules):
    return PolicyProgram(name="inj", version="1", revision="r" * 64, mode="enforce", on_error="fail-closed", priority=0,
                         selector={}, spans={}, signals=(), rules=tuple(rules))


DETECT = rule("injected", "score > 0.5", "block", message="Refused: the data tried to override your instructions.")
OTHER = rule("long", "length > 100", "block", message="Refused: the data is too long.")


def test_a_block_rule_that_could_not_be_evaluated_does_not_report_a_detection():
    v = evaluate([program(DETECT)], {"inj.score": SignalError("the untrusted span is empty")})
    assert v.action == "block"
    assert "could not be evaluated" in v.message and "override" not in v.message
    assert "the untrusted span is empty" in v.decisions[0].error


def test_a_block_rule_that_fired_is_the_reason_though_another_rule_failed():
    v = evaluate([program(OTHER, DETECT)], {"inj.score": 0.9, "inj.length": SignalError("analyzer crashed")})
    assert (v.action, v.rule, v.message) == ("block", "injected", DETECT.params["message"])
    assert "analyzer crashed" in v.decisions[0].error  # the failure is still recorded

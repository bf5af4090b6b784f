"""The worker's result is one declared shape (engine/contract.py
``WorkerResult``): every place that builds one, in the worker and on the
engine side, writes only the keys declared there, and each policy's part
only those of ``PolicyDecision``. No engine: the builders are plain code
over the shipped policies' compiled plan."""
from __future__ import annotations

import time
import typing
from types import SimpleNamespace

import pytest

from innerguard.engine.contract import PolicyDecision, WorkerResult
from innerguard.engine.verdicts import undecided
from innerguard.hooks.decide_step import _decision, _Evaluation, failed_decision
from innerguard.hooks.decisions import decide

RESULT_KEYS = set(typing.get_type_hints(WorkerResult))
DECISION_KEYS = set(typing.get_type_hints(PolicyDecision))
# What every consumer reads without a default (engine/guarded.py, serve, audit).
COMPLETE = {"action", "blocked", "message", "decisions", "errors"}


@pytest.fixture(scope="module")
def plan():
    from tests.audit.audit_builders import shipped_plan

    return shipped_plan()


def _signals(injected: float, errors: dict[str, str]) -> dict:
    signals = {
        "prompt-injection.injected": injected,
        "prompt-injection-attention.focus": 0.3,
        "prompt-injection-attention.override_phrase": injected > 0,
        "medical-topic-steer.medical": 0.9,
        "rag-relevance.relevance": [0.2, 0.8],
    }
    for name in errors:
        signals.pop(name)
    return signals


def _state(plan, **overrides):
    fields = {"key": "k1", "policies": plan.policies, "never_fail_open": False, "unknown_policies": ["nope"],
              "prefill_tokens": 40, "num_prompt_tokens": 52, "details": {}, "args": {}, "first_seen": time.perf_counter()}
    return SimpleNamespace(**{**fields, **overrides})


def _check(result: dict, complete: bool = True) -> None:
    assert set(result) <= RESULT_KEYS, f"undeclared keys: {set(result) - RESULT_KEYS}"
    if complete:
        assert COMPLETE <= set(result), f"missing keys: {COMPLETE - set(result)}"
    assert result["decisions"], "a result decides every selected policy"
    for decision in result["decisions"]:
        assert set(decision) <= DECISION_KEYS, f"undeclared decision keys: {set(decision) - DECISION_KEYS}"


@pytest.mark.parametrize("injected,errors,blocked", [
    (-3.0, {}, False),  # allowed
    (9.0, {}, True),  # blocked
    (-3.0, {"prompt-injection.injected": "token_probe: no untrusted span in the prompt"}, True),  # fails closed
])
def test_the_worker_decision_writes_only_declared_keys(plan, injected, errors, blocked):
    signals = _signals(injected, errors)
    evaluation = _Evaluation(_state(plan), (signals, errors), started=time.perf_counter())
    runtime = SimpleNamespace(decide=decide, plan=plan)
    result = _decision(runtime, evaluation)
    _check(result)
    assert result["blocked"] is blocked and result["errors"] == errors


def test_a_failed_evaluation_writes_only_declared_keys(plan):
    result = failed_decision(_state(plan), RuntimeError("the analyzer broke"))
    _check(result)
    assert result["blocked"] and result["errors"] == {"*": "RuntimeError: the analyzer broke"}


def test_the_engine_side_stand_in_writes_only_declared_keys(plan):
    result = undecided(SimpleNamespace(policies=plan.policies))
    _check(result)
    assert result["errors"]["*"].startswith("no decision recorded")

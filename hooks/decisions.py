"""From signal values to the request's verdict, with the engine's rule
evaluator (pure Python and Jinja2: no YAML in the worker)."""
from __future__ import annotations

import dataclasses
from typing import Any

from innerguard.engine.contract import WorkerResult
from innerguard.engine.decide import Evaluator, SignalError

_evaluators: dict[tuple[int, ...], Evaluator] = {}


def _evaluator(policies) -> Evaluator:
    key = tuple(id(p) for p in policies)
    evaluator = _evaluators.get(key)
    if evaluator is None:
        if len(_evaluators) > 256:
            _evaluators.clear()
        # Selection already happened on the engine side (names, tags, tenant).
        evaluator = _evaluators[key] = Evaluator(dataclasses.replace(p, selector={}) for p in policies)
    return evaluator


def decide(policies, signals: dict[str, Any], errors: dict[str, str], args: dict[str, Any]) -> WorkerResult:
    values = {**signals, **{name: SignalError(reason) for name, reason in errors.items()}}
    verdict = _evaluator(policies).evaluate(values)
    return {
        "action": verdict.action,
        "blocked": verdict.action == "block",
        "policy": verdict.policy,
        "rule": verdict.rule,
        "message": verdict.message,
        "steers": [hit.params["steer"] for hit in verdict.steers if "steer" in hit.params]
        if verdict.action != "block"
        else [],
        "flags": [{"policy": h.policy, "rule": h.rule, "message": h.params.get("message")} for h in verdict.flags],
        "decisions": [
            {
                "policy": d.policy,
                "version": d.version,
                "revision": d.revision,
                "mode": d.mode,
                "action": d.action,
                "rule_action": d.rule_action,
                "applied": d.applied,
                "rule": d.rule,
                "signals": {k: _plain(v) for k, v in d.signals.items()},
                "message": d.message,
                "error": d.error,
            }
            for d in verdict.decisions
        ],
    }


def _plain(value: Any) -> Any:
    if isinstance(value, SignalError):
        return None
    return value

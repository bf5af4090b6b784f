"""Adapter from the runtime to the rule evaluator (pure Python, no YAML)."""
from __future__ import annotations

from typing import Any


def decide(policies, signals: dict[str, Any], errors: dict[str, str], args: dict[str, Any]) -> dict[str, Any]:
    from innerguard.engine.decide import evaluate_for_worker

    return evaluate_for_worker(policies, signals, errors, args)

"""Thresholds and margins: what each signal was compared against.

The worker reports signal values; the thresholds live in the plan's compiled
rule conditions. ``comparisons(condition)`` flattens a condition tree into
its atoms (signal, aggregate, operator, threshold) so that a record can say
"focus 0.12 < 0.24, margin -0.12" for every rule, fired or not.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Mapping, NamedTuple

_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


class Comparison(NamedTuple):
    signal: str  # qualified: "<policy>.<name>"
    aggregate: str | None  # max/min/mean/any/all/count, or None for the value itself
    op: str | None  # None: a boolean signal used as is
    threshold: float | None
    inner: tuple[str, float] | None = None  # count(sig > 0.5): (">", 0.5)


def comparisons(node: Mapping[str, Any], policy: str) -> list[Comparison]:
    """Every signal comparison in a condition tree (see engine/policy/conditions.py)."""
    qualify = lambda name: name if "." in name else f"{policy}.{name}"  # noqa: E731
    op = node.get("op")
    if op == "signal":
        return [Comparison(qualify(node["name"]), None, None, None)]
    if op in ("any", "all"):
        return [Comparison(qualify(node["signal"]), op, node["cmp"], node["value"])]
    if op in _CMP:
        left, right = node["args"]
        if left.get("op") == "const" and right.get("op") != "const":
            left, right, op = right, left, _FLIP[op]
        if right.get("op") == "const":
            kind = left.get("op")
            if kind == "signal":
                return [Comparison(qualify(left["name"]), None, op, right["value"])]
            if kind in ("max", "min", "mean"):
                return [Comparison(qualify(left["signal"]), kind, op, right["value"])]
            if kind == "count":
                return [Comparison(qualify(left["signal"]), "count", op, right["value"], (left["cmp"], left["value"]))]
    out: list[Comparison] = []
    for arg in node.get("args", ()):
        out += comparisons(arg, policy)
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _numbers(value: Any) -> list[float] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = [_number(x) for x in value]
    return None if any(x is None for x in out) else out


def observed(c: Comparison, value: Any) -> Any:
    """The number the comparison actually looked at (for any/all: the element
    nearest to deciding it), or the boolean, or None when it failed."""
    if c.aggregate is None:
        if value.__class__ is float:
            return value if math.isfinite(value) else None
        return value if isinstance(value, bool) else _number(value)
    values = _numbers(value)
    if not values:
        return None
    if c.aggregate == "mean":
        return math.fsum(values) / len(values)
    if c.aggregate == "count":
        test = _CMP[c.inner[0]]
        return sum(1 for x in values if test(x, c.inner[1]))
    return max(values) if statistic(c.aggregate, c.op) == "max" else min(values)


def statistic(aggregate: str | None, op: str | None) -> str | None:
    """What the observed value of a comparison is: ``any(x > t)`` holds when
    the largest element does, so its value is the max (``any(x < t)``: the min)."""
    if aggregate in ("any", "all"):
        upward = op in (">", ">=")
        return "max" if upward == (aggregate == "any") else "min"
    return aggregate


class Check(NamedTuple):
    """A comparison with the parts of its evaluation record known in advance."""

    comparison: Comparison
    static: dict[str, Any]
    key: tuple  # comparisons with one key look at the same number


def prepare(rules: Iterable[tuple[str, list[Comparison]]]) -> list[Check]:
    return [_check(c, rule) for rule, found in rules for c in found]


def _check(c: Comparison, rule: str | None) -> Check:
    static = {"gen_ai.evaluation.name": c.signal, "rule": rule, "aggregate": c.aggregate, "op": c.op, "threshold": c.threshold}
    return Check(c, static, (c.signal, c.aggregate, c.op if c.aggregate in ("any", "all") else None, c.inner))


def evaluation(check: Check, seen: Any) -> dict[str, Any]:
    """One comparison as an OpenTelemetry GenAI evaluation result; ``seen``
    is ``observed(comparison, value)``."""
    c = check.comparison
    if seen is None:
        label, margin = "error", None
    elif c.op is None:
        label, margin = ("true" if seen else "false"), None
    else:
        label = "triggered" if _CMP[c.op](seen, c.threshold) else "clear"
        margin = None if seen.__class__ is bool else round(seen - c.threshold, 9)
    return {**check.static, "gen_ai.evaluation.score.value": seen, "gen_ai.evaluation.score.label": label, "margin": margin}


def evaluations(values: Mapping[str, Any], checks: Iterable[Check]) -> list[dict[str, Any]]:
    """Every comparison of every rule of one policy (``prepare``d), then any
    signal the policy read that no rule compares (threshold null)."""
    out = []
    seen: dict[tuple, Any] = {}  # rules often compare one signal the same way
    for check in checks:
        key = check.key
        value = seen[key] if key in seen else seen.setdefault(key, observed(check.comparison, values.get(key[0])))
        out.append(evaluation(check, value))
    compared = {key[0] for key in seen}
    for name, value in values.items():
        if name not in compared:
            check = _check(Comparison(name, None, None, None), None)
            out.append(evaluation(check, observed(check.comparison, value)))
    return out

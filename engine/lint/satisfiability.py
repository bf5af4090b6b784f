"""Can a condition ever be true? Can it ever be false? Does one imply another?

Conditions are turned into disjunctive normal form over *atoms*: numeric
comparisons of a variable with a constant (a signal, ``max(sig)``,
``count(sig > x)``, ...) and boolean literals. A conjunction is satisfiable
if every numeric variable keeps a non-empty interval inside its range (with
open/closed ends and excluded points) and no boolean appears both plain and
negated. ``any(s > x)`` is read as ``max(s) > x`` and ``all(s > x)`` as
``min(s) > x``. Relations *between* variables (min <= max, a < b) are not
modelled, so the answers err on the safe side: we only claim "never" or
"always" when it is certain. Big conditions (more than ``MAX_TERMS`` DNF
terms) are not judged (``None``).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from innerguard.engine.policy import conditions as c

MAX_TERMS = 256
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_QUANT = {("any", ">"): ("max", ">"), ("any", ">="): ("max", ">="), ("any", "<"): ("min", "<"), ("any", "<="): ("min", "<="),
          ("all", ">"): ("min", ">"), ("all", ">="): ("min", ">="), ("all", "<"): ("max", "<"), ("all", "<="): ("max", "<=")}


@dataclass(frozen=True)
class Num:  # var op const
    var: tuple
    op: str
    value: float


@dataclass(frozen=True)
class Lit:  # a boolean variable, plain or negated
    var: tuple
    positive: bool


class _TooBig(Exception):
    pass


def _term(expr) -> tuple | None:
    """The variable a numeric operand stands for (None for constants)."""
    if isinstance(expr, c.Signal):
        return ("sig", expr.name)
    if isinstance(expr, c.Aggregate):
        return (expr.fn, expr.signal)
    if isinstance(expr, c.Quantified) and expr.fn == "count":
        return ("count", expr.signal, expr.cmp, expr.value)
    return None


def _atoms(expr, positive: bool) -> list[list]:
    """DNF of ``expr`` (or of ``not expr``) as a list of conjunctions."""
    if isinstance(expr, c.Const):
        truth = bool(expr.value) == positive
        return [[]] if truth else []
    if isinstance(expr, c.Not):
        return _atoms(expr.operand, not positive)
    if isinstance(expr, c.BoolOp):
        conjunctive = (expr.op == "and") == positive
        parts = [_atoms(e, positive) for e in expr.operands]
        if not conjunctive:
            return [t for p in parts for t in p]
        result: list[list] = [[]]
        for p in parts:
            result = [a + b for a in result for b in p]
            if len(result) > MAX_TERMS:
                raise _TooBig
        return result
    if isinstance(expr, c.Signal):
        return [[Lit(("sig", expr.name), positive)]]
    if isinstance(expr, c.Quantified) and expr.fn in ("any", "all"):
        mapped = _QUANT.get((expr.fn, expr.cmp))
        if mapped:
            fn, op = mapped
            return [[Num((fn, expr.signal), op if positive else _NEGATE[op], expr.value)]]
        return [[Lit((expr.fn, expr.signal, expr.cmp, expr.value), positive)]]
    if isinstance(expr, c.Compare):
        left, right, op = expr.left, expr.right, expr.op
        if isinstance(left, c.Const) and not isinstance(right, c.Const):
            left, right, op = right, left, _FLIP[op]
        if not positive:
            op = _NEGATE[op]
        lv, rv = _term(left), _term(right)
        if lv is None and rv is None and isinstance(left, c.Const) and isinstance(right, c.Const):
            return [[]] if _COMPARE[op](left.value, right.value) else []
        if lv is not None and isinstance(right, c.Const):
            if isinstance(right.value, bool):  # flag == true
                want = right.value if op == "==" else (not right.value if op == "!=" else None)
                if want is None:
                    return [[Lit(("opaque", c.unparse(expr)), positive)]]
                return [[Lit(lv, want)]]
            return [[Num(lv, op, float(right.value))]]
        # signal vs signal: not modelled
        return [[Lit(("opaque", c.unparse(expr)), positive)]]
    return [[Lit(("opaque", c.unparse(expr)), positive)]]


class _Interval:
    __slots__ = ("lo", "lo_open", "hi", "hi_open", "excluded")

    def __init__(self, lo: float, hi: float):
        self.lo, self.lo_open, self.hi, self.hi_open = lo, False, hi, False
        self.excluded: set[float] = set()

    def apply(self, op: str, v: float) -> None:
        if op in ("<", "<="):
            if v < self.hi or (v == self.hi and op == "<"):
                self.hi, self.hi_open = v, op == "<"
        elif op in (">", ">="):
            if v > self.lo or (v == self.lo and op == ">"):
                self.lo, self.lo_open = v, op == ">"
        elif op == "==":
            self.apply(">=", v)
            self.apply("<=", v)
        else:
            self.excluded.add(v)

    def empty(self) -> bool:
        if self.lo > self.hi:
            return True
        if self.lo == self.hi:
            return self.lo_open or self.hi_open or self.lo in self.excluded
        return False


def _satisfiable(term: list, ranges) -> bool:
    intervals: dict[tuple, _Interval] = {}
    literals: dict[tuple, bool] = {}
    for atom in term:
        if isinstance(atom, Lit):
            if literals.setdefault(atom.var, atom.positive) != atom.positive:
                return False
            continue
        interval = intervals.get(atom.var)
        if interval is None:
            lo, hi = ranges(atom.var)
            interval = intervals[atom.var] = _Interval(lo, hi)
        interval.apply(atom.op, atom.value)
        if interval.empty():
            return False
    return True


def _dnf(expr, positive: bool):
    try:
        return _atoms(expr, positive)
    except _TooBig:
        return None


def can_be_true(expr, ranges) -> bool | None:
    """``ranges(var) -> (lo, hi)`` gives each numeric variable's range."""
    dnf = _dnf(expr, True)
    return None if dnf is None else any(_satisfiable(t, ranges) for t in dnf)


def can_be_false(expr, ranges) -> bool | None:
    dnf = _dnf(expr, False)
    return None if dnf is None else any(_satisfiable(t, ranges) for t in dnf)


def implies(a, b, ranges) -> bool | None:
    """True when ``a`` can never hold without ``b`` (a and not b is unsatisfiable)."""
    both = c.BoolOp("and", (a, c.Not(b)))
    result = can_be_true(both, ranges)
    return None if result is None else not result


UNBOUNDED = (-math.inf, math.inf)

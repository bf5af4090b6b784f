"""The condition grammar of rules (``when:``), parsed by hand, never eval'd.

Grammar (lowest precedence first)::

    condition  := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := operand (CMP operand)?          CMP: < <= > >= == !=
    operand    := NUMBER | "true" | "false" | SIGNAL
                | ("max" | "min" | "mean") "(" SIGNAL ")"
                | ("any" | "all" | "count") "(" SIGNAL CMP NUMBER ")"
                | "(" condition ")"

``SIGNAL`` is a signal's short name as defined under the policy's
``signals:`` (``[A-Za-z_][A-Za-z0-9_]*``); ``NUMBER`` is a decimal literal
(``0.4``, ``-1``, ``.5``, ``1e-3``). Chained comparisons (``0.2 < x < 0.5``)
are refused: write ``x > 0.2 and x < 0.5``.

The parser returns a small AST of frozen dataclasses carrying 0-based
character offsets (for lint messages). ``to_data`` turns it into the plain
JSON form stored in ``RuleProgram.condition`` and evaluated by
``innerguard.engine.decide``::

    {"op": "const", "value": 0.4}            a number or true/false
    {"op": "signal", "name": "focus"}        a signal's value
    {"op": "max"|"min"|"mean", "signal": "relevance"}
    {"op": "any"|"all"|"count", "signal": "relevance", "cmp": ">", "value": 0.5}
    {"op": "<"|"<="|">"|">="|"=="|"!=", "args": [left, right]}
    {"op": "and"|"or", "args": [c1, c2, ...]}
    {"op": "not", "args": [c]}

Signal names in the data are short (as written); the evaluator qualifies a
name without a dot as ``<policy>.<name>``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

MAX_LENGTH = 2000
MAX_DEPTH = 32
COMPARATORS = ("<=", ">=", "==", "!=", "<", ">")
VALUE_AGGREGATES = ("max", "min", "mean")
PREDICATE_AGGREGATES = ("any", "all", "count")
KEYWORDS = {"and", "or", "not", "true", "false"}

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<cmp><=|>=|==|!=|<|>)
  | (?P<punct>[(),\-])
    """,
    re.VERBOSE,
)


class ConditionError(ValueError):
    """A syntax error at ``offset`` (0-based) in the condition text."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Const:
    value: float | bool
    offset: int = 0


@dataclass(frozen=True)
class Signal:
    name: str
    offset: int = 0


@dataclass(frozen=True)
class Aggregate:
    """``max(sig)``, ``min(sig)``, ``mean(sig)``: a number from a vector."""

    fn: str
    signal: str
    offset: int = 0


@dataclass(frozen=True)
class Quantified:
    """``any(sig > x)``, ``all(sig > x)`` (booleans), ``count(sig > x)`` (a number)."""

    fn: str
    signal: str
    cmp: str
    value: float
    offset: int = 0
    value_offset: int = 0


@dataclass(frozen=True)
class Compare:
    op: str
    left: "Expr"
    right: "Expr"
    offset: int = 0


@dataclass(frozen=True)
class Not:
    operand: "Expr"
    offset: int = 0


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    operands: tuple["Expr", ...]
    offset: int = 0


Expr = Union[Const, Signal, Aggregate, Quantified, Compare, Not, BoolOp]


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    offset: int


def _tokenize(text: str) -> list[_Tok]:
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConditionError(f"unexpected character {text[pos]!r}", pos)
        kind = m.lastgroup
        if kind != "space":
            tokens.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    tokens.append(_Tok("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def take(self) -> _Tok:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, text: str, what: str) -> _Tok:
        if self.tok.text != text:
            raise ConditionError(f"expected {what}, found {self._describe(self.tok)}", self.tok.offset)
        return self.take()

    @staticmethod
    def _describe(tok: _Tok) -> str:
        return "end of condition" if tok.kind == "end" else repr(tok.text)

    def nest(self, offset: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConditionError(f"condition nests deeper than {MAX_DEPTH} levels", offset)

    def parse(self) -> Expr:
        expr = self.or_()
        if self.tok.kind != "end":
            hint = ""
            if self.tok.kind == "cmp":
                hint = " (chained comparisons are not supported: write 'x > a and x < b')"
            elif self.tok.kind == "name" and self.tok.text not in KEYWORDS:
                hint = " (missing 'and'/'or'?)"
            raise ConditionError(f"unexpected {self._describe(self.tok)}{hint}", self.tok.offset)
        return expr

    def or_(self) -> Expr:
        return self._chain("or", self.and_)

    def and_(self) -> Expr:
        return self._chain("and", self.not_)

    def _chain(self, op: str, operand) -> Expr:
        start = self.tok.offset
        items = [operand()]
        while self.tok.kind == "name" and self.tok.text == op:
            self.take()
            items.append(operand())
        return items[0] if len(items) == 1 else BoolOp(op, tuple(items), start)

    def not_(self) -> Expr:
        if self.tok.kind == "name" and self.tok.text == "not":
            tok = self.take()
            self.nest(tok.offset)
            operand = self.not_()
            self.depth -= 1
            return Not(operand, tok.offset)
        return self.comparison()

    def comparison(self) -> Expr:
        left = self.operand()
        if self.tok.kind != "cmp":
            return left
        op = self.take()
        right = self.operand()
        return Compare(op.text, left, right, _offset(left))

    def number(self) -> tuple[float, int]:
        start = self.tok.offset
        sign = 1.0
        if self.tok.text == "-":
            self.take()
            sign = -1.0
        if self.tok.kind != "number":
            raise ConditionError(f"expected a number, found {self._describe(self.tok)}", self.tok.offset)
        value = sign * float(self.take().text)
        if value != value or value in (float("inf"), float("-inf")):
            raise ConditionError("number out of range", start)
        return value, start

    def operand(self) -> Expr:
        tok = self.tok
        if tok.kind == "number" or tok.text == "-":
            value, start = self.number()
            return Const(int(value) if value.is_integer() and "." not in tok.text and "e" not in tok.text.lower() else value, start)
        if tok.text == "(":
            self.take()
            self.nest(tok.offset)
            inner = self.or_()
            self.depth -= 1
            self.expect(")", "')'")
            return inner
        if tok.kind == "name":
            if tok.text in ("true", "false"):
                self.take()
                return Const(tok.text == "true", tok.offset)
            if tok.text in KEYWORDS:
                raise ConditionError(f"expected a signal or a number, found {tok.text!r}", tok.offset)
            self.take()
            if self.tok.text == "(":
                return self.call(tok)
            return Signal(tok.text, tok.offset)
        raise ConditionError(f"expected a signal or a number, found {self._describe(tok)}", tok.offset)

    def call(self, fn: _Tok) -> Expr:
        if fn.text not in VALUE_AGGREGATES + PREDICATE_AGGREGATES:
            known = ", ".join(VALUE_AGGREGATES + PREDICATE_AGGREGATES)
            raise ConditionError(f"unknown function {fn.text!r} (known: {known})", fn.offset)
        self.expect("(", "'('")
        if self.tok.kind != "name" or self.tok.text in KEYWORDS:
            raise ConditionError(f"{fn.text}() takes a signal name, found {self._describe(self.tok)}", self.tok.offset)
        signal = self.take().text
        if fn.text in VALUE_AGGREGATES:
            self.expect(")", f"')' ({fn.text}() takes one signal)")
            return Aggregate(fn.text, signal, fn.offset)
        if self.tok.kind != "cmp":
            raise ConditionError(f"{fn.text}() takes a comparison such as {fn.text}({signal} > 0.5)", self.tok.offset)
        cmp = self.take().text
        value, value_offset = self.number()
        self.expect(")", "')'")
        return Quantified(fn.text, signal, cmp, value, fn.offset, value_offset)


def _offset(expr: Expr) -> int:
    return expr.offset


def parse(text: str) -> Expr:
    """Parse a condition; raise ``ConditionError`` with an offset on bad input."""
    if len(text) > MAX_LENGTH:
        raise ConditionError(f"condition is longer than {MAX_LENGTH} characters", MAX_LENGTH)
    if not text.strip():
        raise ConditionError("condition is empty (write 'true' for a rule that always applies)", 0)
    return _Parser(text).parse()


def from_yaml(value: bool | str) -> Expr:
    """``when:`` is a string, or the YAML booleans true/false."""
    if isinstance(value, bool):
        return Const(value, 0)
    return parse(value)


def to_data(expr: Expr) -> dict[str, Any]:
    """The plain-JSON form of a condition (see the module docstring)."""
    if isinstance(expr, Const):
        return {"op": "const", "value": expr.value}
    if isinstance(expr, Signal):
        return {"op": "signal", "name": expr.name}
    if isinstance(expr, Aggregate):
        return {"op": expr.fn, "signal": expr.signal}
    if isinstance(expr, Quantified):
        return {"op": expr.fn, "signal": expr.signal, "cmp": expr.cmp, "value": expr.value}
    if isinstance(expr, Compare):
        return {"op": expr.op, "args": [to_data(expr.left), to_data(expr.right)]}
    if isinstance(expr, Not):
        return {"op": "not", "args": [to_data(expr.operand)]}
    return {"op": expr.op, "args": [to_data(e) for e in expr.operands]}


def signals_in(expr: Expr) -> list[tuple[str, int]]:
    """Every signal reference with its offset, in order."""
    out: list[tuple[str, int]] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Signal):
            out.append((e.name, e.offset))
        elif isinstance(e, (Aggregate, Quantified)):
            out.append((e.signal, e.offset))
        elif isinstance(e, Compare):
            stack += [e.right, e.left]
        elif isinstance(e, Not):
            stack.append(e.operand)
        elif isinstance(e, BoolOp):
            stack += reversed(e.operands)
    return out


def unparse(expr: Expr) -> str:
    """Canonical text of a condition (for messages and duplicate detection)."""
    if isinstance(expr, Const):
        return str(expr.value).lower() if isinstance(expr.value, bool) else repr(expr.value)
    if isinstance(expr, Signal):
        return expr.name
    if isinstance(expr, Aggregate):
        return f"{expr.fn}({expr.signal})"
    if isinstance(expr, Quantified):
        return f"{expr.fn}({expr.signal} {expr.cmp} {expr.value!r})"
    if isinstance(expr, Compare):
        return f"{unparse(expr.left)} {expr.op} {unparse(expr.right)}"
    if isinstance(expr, Not):
        return f"not ({unparse(expr.operand)})"
    return "(" + f" {expr.op} ".join(unparse(e) for e in expr.operands) + ")"

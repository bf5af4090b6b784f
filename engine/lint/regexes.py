"""Checks on text signals' regular expressions.

innerguard evaluates them with RE2 (``google-re2``): linear time, so no
catastrophic backtracking at runtime, but also no backreferences and no
lookaround. We still warn about patterns that would backtrack
catastrophically in ordinary engines, because policies get copied into
other tools and such patterns rarely mean what their authors wanted.
The backtracking check is a heuristic over Python's own regex parse tree:
an unbounded repeat whose body can start with a character that an inner
unbounded repeat also consumes ((a+)+, (\\w+\\s?)+), or a repeated
alternation whose branches can start with the same character ((a|ab)*).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from functools import lru_cache

import re2

try:  # Python 3.11+
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # pragma: no cover
    import sre_constants as _c  # type: ignore
    import sre_parse as _parser  # type: ignore

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every parse error to stderr
_SAMPLE = [chr(i) for i in range(1, 256)] + ["é", "ж", "中", "😀"]
_BACKREF = re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]|\(\?P=")
_LOOKAROUND = re.compile(r"\(\?<?[=!]")


@dataclass(frozen=True)
class RegexProblem:
    rule: str  # IG401..IG404
    message: str


def compile_re2(pattern: str, case_sensitive: bool = True):
    return re2.compile(pattern if case_sensitive else "(?i)" + pattern, _OPTIONS)


@lru_cache(maxsize=1024)
def check(pattern: str) -> tuple[RegexProblem, ...]:
    try:
        compiled = compile_re2(pattern)
    except re2.error as exc:
        return (_re2_failure(pattern, exc),)
    problems = []
    if _backtracking_risk(pattern):
        problems.append(RegexProblem("IG403", f"pattern {pattern!r} nests quantifiers or repeats overlapping alternatives (catastrophic backtracking in backtracking engines)"))
    if compiled.search("") is not None and compiled.search("\x01\x02") is not None:
        problems.append(RegexProblem("IG404", f"pattern {pattern!r} matches the empty string, so the signal is true for every prompt"))
    return tuple(problems)


def _re2_failure(pattern: str, exc: Exception) -> RegexProblem:
    reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
    if _LOOKAROUND.search(pattern):
        return RegexProblem("IG402", "lookaround ((?=, (?!, (?<=, (?<!) is not supported by RE2, which innerguard uses for linear-time matching")
    if _BACKREF.search(pattern):
        return RegexProblem("IG402", "backreferences (\\1, (?P=name)) are not supported by RE2, which innerguard uses for linear-time matching")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except re.error as py_exc:
        return RegexProblem("IG401", f"invalid regular expression: {py_exc}")
    except (RecursionError, OverflowError, ValueError) as py_exc:
        return RegexProblem("IG401", f"invalid regular expression: {py_exc}")
    return RegexProblem("IG402", f"RE2 cannot compile this pattern: {reason}")


# ------------------------------------------------------------ backtracking

_UNBOUNDED = _c.MAXREPEAT
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT) + ((getattr(_c, "POSSESSIVE_REPEAT"),) if hasattr(_c, "POSSESSIVE_REPEAT") else ())


def _backtracking_risk(pattern: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = _parser.parse(pattern)
    except Exception:  # RE2 accepted it; Python's parser need not
        return False
    try:
        return _risky(list(tree))
    except RecursionError:
        return True


def _risky(items) -> bool:
    for op, av in items:
        if op in _REPEATS:
            lo, hi, body = av
            body = list(body)
            if hi == _UNBOUNDED or hi > 1:
                if _ambiguous_iteration(body) or _overlapping_branches(body):
                    return True
            if _risky(body):
                return True
        elif op is _c.SUBPATTERN:
            if _risky(list(av[-1])):
                return True
        elif op is _c.BRANCH:
            if any(_risky(list(b)) for b in av[1]):
                return True
    return False


def _flatten(items) -> list:
    out = []
    for op, av in items:
        if op is _c.SUBPATTERN:
            out += _flatten(list(av[-1]))
        else:
            out.append((op, av))
    return out


def _ambiguous_iteration(body) -> bool:
    """True if a variable-length repeat inside a repeated body can hand its
    characters to what follows it (the rest of the body, or the next
    iteration): then one input splits many ways between iterations."""
    items = _flatten(body)
    start = _first(items)
    for i, (op, av) in enumerate(items):
        variable = op in _REPEATS and av[0] != av[1]
        if op is _c.BRANCH:  # Python factors a|aa into a(?:|a): an optional in disguise
            nullables = [_nullable(list(b)) for b in av[1]]
            variable = any(nullables) and not all(nullables)
        if variable:
            rest = items[i + 1:]
            follow = set(_first(rest))
            if _nullable(rest):
                follow |= start
            body_chars = _chars_of_repeat(list(av[2])) if op in _REPEATS else frozenset().union(*(_chars_of_repeat(_flatten(list(b))) for b in av[1]))
            if follow & body_chars:
                return True
    return False


def _chars_of_repeat(body) -> frozenset:
    chars: set[str] = set()
    for op, av in body:
        chars |= _item_chars(op, av)
    return frozenset(chars)


def _overlapping_branches(items) -> bool:
    for op, av in items:
        if op is _c.SUBPATTERN:
            if _overlapping_branches(list(av[-1])):
                return True
        elif op is _c.BRANCH:
            firsts = [_first(list(b)) for b in av[1]]
            for i in range(len(firsts)):
                for j in range(i + 1, len(firsts)):
                    if firsts[i] & firsts[j]:
                        return True
    return False


def _first(items) -> frozenset:
    """Characters a match of ``items`` can start with (sampled alphabet)."""
    out: set[str] = set()
    for op, av in items:
        chars, nullable = _item_first(op, av)
        out |= chars
        if not nullable:
            break
    return frozenset(out)


def _item_first(op, av) -> tuple[frozenset, bool]:
    if op in _REPEATS:
        return _first(list(av[2])), av[0] == 0
    if op is _c.SUBPATTERN:
        body = list(av[-1])
        return _first(body), _nullable(body)
    if op is _c.BRANCH:
        chars: set[str] = set()
        nullable = False
        for b in av[1]:
            chars |= _first(list(b))
            nullable = nullable or _nullable(list(b))
        return frozenset(chars), nullable
    if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        return frozenset(), True
    return _item_chars(op, av), False


def _nullable(items) -> bool:
    return all(_item_first(op, av)[1] for op, av in items)


def _item_chars(op, av) -> frozenset:
    if op is _c.LITERAL:
        return frozenset({chr(av)})
    if op is _c.NOT_LITERAL:
        return frozenset(c for c in _SAMPLE if ord(c) != av)
    if op is _c.ANY:
        return frozenset(c for c in _SAMPLE if c != "\n")
    if op in (_c.IN, _c.CATEGORY) or op is getattr(_c, "IN_IGNORE", None):
        pattern = _class_regex(op, av)
        if pattern is None:
            return frozenset(_SAMPLE)
        return frozenset(c for c in _SAMPLE if pattern.fullmatch(c))
    if op in _REPEATS or op in (_c.SUBPATTERN, _c.BRANCH):
        return _first([(op, av)])
    return frozenset()


_CATEGORY = {
    "CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W",
}


def _class_regex(op, av):
    """Rebuild a one-character class from the parse tree so we can test it."""
    if op is _c.CATEGORY:
        return re.compile(_CATEGORY.get(str(av), "."), re.S)
    parts, negate = [], False
    for kind, value in av:
        if kind is _c.NEGATE:
            negate = True
        elif kind is _c.LITERAL:
            parts.append(re.escape(chr(value)))
        elif kind is _c.RANGE:
            parts.append(f"{re.escape(chr(value[0]))}-{re.escape(chr(value[1]))}")
        elif kind is _c.CATEGORY:
            parts.append(_CATEGORY.get(str(value), ""))
        else:
            return None
    if not parts:
        return None
    return re.compile(("[^" if negate else "[") + "".join(parts) + "]", re.S)

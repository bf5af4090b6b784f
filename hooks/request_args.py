"""A request's guard arguments as the worker reads them.

The server checks them at its boundary too, but the worker trusts nobody:
whatever arrives in ``extra_args`` is decoded and its shape checked here, and
anything wrong is a ``BadArguments`` that blocks the request (never open).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from innerguard.engine.contract import REQUEST_KEY

MAX_CHARS = 1 << 22  # far above any real request's arguments
MAX_ITEMS = 4096  # policies, spans, documents...
MAX_TEXT = 512  # ids, names


class BadArguments(ValueError):
    """The arguments are not what the engine side sends."""

    key: str | None = None


def read_args(extra_args: Any) -> dict[str, Any] | None:
    """The guard's arguments, or None for an unguarded request."""
    if extra_args is None:
        return None
    if not isinstance(extra_args, Mapping):
        raise BadArguments(f"extra_args must be an object, not {type(extra_args).__name__}")
    if REQUEST_KEY not in extra_args:
        return None
    value = extra_args[REQUEST_KEY]
    if isinstance(value, (str, bytes)):
        if len(value) > MAX_CHARS:
            raise BadArguments(f"arguments of {len(value)} characters (limit {MAX_CHARS})")
        try:
            value = json.loads(value, parse_constant=_no_constants)
        except (ValueError, RecursionError) as exc:
            raise BadArguments(f"arguments are not JSON: {str(exc)[:200]}") from None
    return check_args(value)


def check_args(args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise BadArguments(f"arguments must be a JSON object, not {type(args).__name__}")
    try:
        return _check(args)
    except BadArguments as exc:
        key = args.get("id")
        exc.key = key if isinstance(key, str) and 0 < len(key) <= MAX_TEXT else None  # to report under
        raise


def _check(args: dict[str, Any]) -> dict[str, Any]:
    _text(args, "id")
    policies = args.get("policies")
    if not isinstance(policies, list) or not 0 < len(policies) <= MAX_ITEMS:
        raise BadArguments("'policies' must be a non-empty list of policy names")
    for name in policies:
        _name(name, "policies")
    for optional in ("bundle", "calibration_for"):
        if optional in args:
            _text(args, optional)
    if "calibration_for" in args:
        _rerank(args.get("rerank"), required=True)
        return args
    spans = args.get("spans")
    if not isinstance(spans, dict) or any(p not in spans for p in policies):
        raise BadArguments("'spans' must give every policy's token ranges")
    for policy, roles in spans.items():
        _name(policy, "spans")
        if not isinstance(roles, dict):
            raise BadArguments(f"spans[{policy!r}] must be an object of roles")
        for role, ranges in roles.items():
            _name(role, "span roles")
            _ranges(ranges, f"spans[{policy!r}][{role!r}]")
    signals = args.get("text_signals")
    if not isinstance(signals, dict) or len(signals) > MAX_ITEMS:
        raise BadArguments("'text_signals' must be an object of signal values")
    for name, value in signals.items():
        _name(name, "text_signals")
        if not isinstance(value, bool):
            raise BadArguments(f"text signal {name!r} must be true or false")
    if "rerank" in args:
        _rerank(args["rerank"], required=False)
    start = args.get("generated_from")
    if "generated_from" in args and (isinstance(start, bool) or not isinstance(start, int) or start < 1):
        raise BadArguments("'generated_from' must be a positive integer (the first teacher-forced token)")
    return args


def check_positions(args: Mapping[str, Any], num_prompt_tokens: int) -> None:
    """Every range must lie inside the prompt the engine actually got."""
    groups = [r for roles in (args.get("spans") or {}).values() for r in roles.values()]
    for spec in (args.get("rerank") or {}).values():
        groups += [spec["documents"], spec["query"]]
    for ranges in groups:
        for start, end in ranges:
            if end > num_prompt_tokens:
                raise BadArguments(f"range ({start}, {end}) is outside the prompt of {num_prompt_tokens} tokens")
    if args.get("generated_from", 0) > num_prompt_tokens:
        raise BadArguments(f"'generated_from' {args['generated_from']} is outside the prompt of {num_prompt_tokens} tokens")


def _no_constants(name: str):
    raise BadArguments(f"arguments contain {name}, which is not JSON")


def _text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
        raise BadArguments(f"{key!r} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def _name(value: Any, where: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
        raise BadArguments(f"{where} must hold non-empty names")


def _ranges(ranges: Any, where: str, exactly: int | None = None) -> None:
    if not isinstance(ranges, list) or len(ranges) > MAX_ITEMS or (exactly is not None and len(ranges) != exactly):
        raise BadArguments(f"{where} must be a list of [start, end] ranges")
    for pair in ranges:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(type(x) is int for x in pair)  # not bool, not float
            or not 0 <= pair[0] <= pair[1] < 2**31
        ):
            raise BadArguments(f"{where} holds {_short(pair)}, not a [start, end] range of token positions")


def _rerank(rerank: Any, required: bool) -> None:
    if not isinstance(rerank, dict) or (required and not rerank):
        raise BadArguments("'rerank' must be an object of reranker signals")
    queries = set()
    for signal, spec in rerank.items():
        _name(signal, "rerank")
        if not isinstance(spec, dict):
            raise BadArguments(f"rerank[{signal!r}] must be an object")
        _ranges(spec.get("documents"), f"rerank[{signal!r}].documents")
        if not spec["documents"]:
            raise BadArguments(f"rerank[{signal!r}] has no documents")
        _ranges(spec.get("query"), f"rerank[{signal!r}].query", exactly=1)
        queries.add(tuple(spec["query"][0]))
    if len(queries) > 1:
        raise BadArguments("reranker signals of one request must share one query")


def _short(value: Any) -> str:
    if isinstance(value, (list, dict, str)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)}"
    try:
        text = repr(value)
    except RecursionError:
        return f"a nested {type(value).__name__}"
    return text if len(text) <= 60 else text[:60] + "..."

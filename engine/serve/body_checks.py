"""What a parsed request body may not contain, checked before anything
recursive reads it (schema validation, pydantic, the chat template, the
tokenizer): nesting deeper than ``MAX_DEPTH``, and lone surrogates."""
from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # levels of arrays and objects: chat content sits at 3-5; the rest is room for schemas and tools
TOO_DEEP = f"request body nests arrays and objects deeper than {MAX_DEPTH} levels"
TOO_DEEP_HINT = "flatten the JSON"


def json_problem(value: Any) -> tuple[str, str] | None:
    """Why a parsed body cannot go on, as (message, hint): nesting deeper than
    ``MAX_DEPTH`` (deep values reach recursive code further in: schema
    validation, pydantic, the chat template), or a string or key with a lone
    surrogate (JSON's ``\\ud800`` escape parses to a str that no UTF-8 encoder,
    the tokenizer's included, accepts). Iterative, so no depth can overflow it;
    a path is built only for the value that is wrong."""
    if type(value) is str:
        return _surrogate_problem(value, ())
    stack: list[tuple[Any, tuple, int]] = [(value, (), 1)]
    while stack:
        node, path, depth = stack.pop()
        if type(node) is dict:
            for key in node:
                if (problem := _surrogate_problem(key, path, in_key=True)) is not None:
                    return problem
            items = node.items()
        elif type(node) is list:
            items = enumerate(node)
        else:
            continue
        if depth > MAX_DEPTH:
            return TOO_DEEP, TOO_DEEP_HINT
        for key, item in items:
            kind = type(item)
            if kind is str:
                if (problem := _surrogate_problem(item, (*path, key))) is not None:
                    return problem
            elif kind is dict or kind is list:
                stack.append((item, (*path, key), depth + 1))
    return None


def _surrogate_problem(text: str, path: tuple, in_key: bool = False) -> tuple[str, str] | None:
    if (char := _lone_surrogate(text)) is None:
        return None
    if in_key:
        where = f"in a key of {_json_path(path)}" if path else "in a top-level key"
    else:
        where = f"at {_json_path(path)}"
    return (f"request body contains a lone surrogate (\\u{ord(char):04x}) {where}",
            "send valid Unicode: a \\ud800-\\udfff escape must be half of a pair")


def _lone_surrogate(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def _json_path(path: tuple) -> str:
    """``messages[1].content``; an empty path is the body itself."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "the top level"

"""JSON Lines, read strictly: the file's lines, and one row as a JSON object
or a one-line error that names the file and line."""
from __future__ import annotations

import json
from typing import Any

from innerguard.engine.errors import InnerguardError


def json_object(line: str, where: str, error: type[InnerguardError]) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not JSON: {exc.msg}") from None
    if not isinstance(row, dict):
        raise error(f"{where}: a row must be a JSON object")
    return row


def split_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text. Cut at "\\n" only: ``str.splitlines``
    also cuts at U+2028, U+0085 and other characters that may sit, unescaped,
    inside a JSON string."""
    return text.split("\n")

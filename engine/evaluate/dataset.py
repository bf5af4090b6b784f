"""Labelled evaluation rows: JSON lines with ``label`` (1 = the policy should
act, 0 = it should not) and either ``instruction``/``data`` or ``messages``;
``style`` (optional) groups rows in the per-style report; ``completion``
(optional) a given answer, teacher forced: the output rules read it as if
the model had written it (the worker its tokens, the engine its text)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from innerguard.engine.errors import InnerguardError
from innerguard.engine.jsonl import json_object, split_lines


class DataError(InnerguardError):
    """The evaluation file cannot be used."""


@dataclass(frozen=True)
class LabelledRow:
    request: dict[str, Any]  # what GuardedLLM.run takes
    label: int
    style: str
    data_chars: int  # length of the untrusted part (the data, or the non-system messages)


def load_rows(path: str | Path) -> list[LabelledRow]:
    try:
        lines = split_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            rows.append(_row(line, f"{path}:{number}", len(rows)))
    if not rows:
        raise DataError(f"{path}: no rows")
    labels = {r.label for r in rows}
    if labels != {0, 1}:
        raise DataError(f"{path}: needs rows of both labels (0 and 1); found only {sorted(labels)}")
    return rows


def _row(line: str, where: str, index: int) -> LabelledRow:
    raw = json_object(line, where, DataError)
    label = raw.get("label")
    if isinstance(label, bool) or label not in (0, 1):
        raise DataError(f"{where}: 'label' must be 0 or 1, got {label!r}")
    if "messages" in raw:
        messages = raw["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise DataError(f"{where}: 'messages' must be a list of {{role, content}} objects")
        request = {"messages": messages}
        chars = sum(len(m["content"]) for m in messages if m.get("role") not in ("system", "developer"))
    elif isinstance(raw.get("instruction"), str) and isinstance(raw.get("data"), str):
        request = {"instruction": raw["instruction"], "data": raw["data"]}
        chars = len(raw["data"])
    else:
        raise DataError(f"{where}: a row needs 'instruction' and 'data' (strings) or 'messages'")
    if "completion" in raw:  # a given answer, teacher forced: for rules on what the model writes
        if not isinstance(raw["completion"], str) or not raw["completion"]:
            raise DataError(f"{where}: 'completion' must be a non-empty string")
        request["completion"] = raw["completion"]
    request["id"] = str(raw.get("id", index))
    request["max_tokens"] = 1  # only the decision matters
    for key in ("tags", "tenant", "route"):
        if key in raw:
            request[key] = raw[key]
    return LabelledRow(request=request, label=int(label), style=str(raw.get("style", "-")), data_chars=chars)

"""Build inputs: labelled rows and contrastive pairs (JSON lines), their
hashes, and seeded held-out splits.

Labelled rows (``build probe``, ``build heads --data``)::

    {"id": "r1", "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}], "label": 1}
    {"id": "r2", "instruction": "Summarise the text.", "data": "untrusted text ...", "label": 0}

Contrastive pairs (``build vector``): the conversation before the answer,
and two answers; the residual stream is averaged over each answer's tokens::

    {"id": "p1", "messages": [{"role": "user", "content": "..."}], "positive": "cautious answer", "negative": "plain answer"}

A file's hash is the sha256 of its bytes: the recipe of an artifact names
its data by path and hash.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from innerguard.engine.errors import InnerguardError
from innerguard.engine.jsonl import json_object, split_lines


class BuildDataError(InnerguardError):
    """A build input cannot be used."""


@dataclass(frozen=True)
class DataFile:
    path: str
    sha256: str
    rows: tuple[dict[str, Any], ...]


def read_jsonl(path: str | Path, what: str) -> DataFile:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BuildDataError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        lines = split_lines(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BuildDataError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = json_object(line, f"{path}:{number}", BuildDataError)
        row.setdefault("id", str(len(rows)))
        rows.append(row)
    if not rows:
        raise BuildDataError(f"{path}: no rows", hint=f"{what} is a JSON-lines file, one object per line")
    return DataFile(str(path), hashlib.sha256(raw).hexdigest(), tuple(rows))


def file_sha256(path: str | Path, what: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise BuildDataError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _messages(row: dict[str, Any], where: str) -> list[dict[str, str]]:
    messages = row.get("messages")
    if messages is None and isinstance(row.get("instruction"), str) and isinstance(row.get("data"), str):
        return [{"role": "system", "content": row["instruction"]}, {"role": "user", "content": row["data"]}]
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
        raise BuildDataError(f"{where}: needs 'messages' (a list of {{role, content}} objects) or 'instruction' and 'data' strings")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def labelled(data: DataFile) -> tuple[list[dict[str, Any]], list[int]]:
    """Capture rows (``id`` + ``messages``) and labels (0/1), both classes present."""
    rows, labels = [], []
    for i, row in enumerate(data.rows):
        where = f"{data.path} row {i + 1} (id {row['id']})"
        label = row.get("label")
        if isinstance(label, bool) or label not in (0, 1):
            raise BuildDataError(f"{where}: 'label' must be 0 or 1, got {label!r}")
        rows.append({"id": str(row["id"]), "messages": _messages(row, where)})
        labels.append(int(label))
    present = set(labels)
    if present != {0, 1}:
        raise BuildDataError(f"{data.path}: needs rows of both labels (0 and 1); found only {sorted(present)}")
    return rows, labels


def completions(data: DataFile, flag: str) -> list[str]:
    """Each row's ``completion``: the given answer whose tokens a build for
    ``span: generated`` reads (``flag`` names the option that asked)."""
    answers = []
    for i, row in enumerate(data.rows):
        answer = row.get("completion")
        if not isinstance(answer, str) or not answer:
            raise BuildDataError(f"{data.path} row {i + 1} (id {row['id']}): {flag} needs a non-empty 'completion' "
                                 "(the answer whose tokens are read)")
        answers.append(answer)
    return answers


def pairs(data: DataFile) -> list[tuple[str, list[dict[str, str]], str, str]]:
    """(id, conversation before the answer, positive answer, negative answer)."""
    out = []
    for i, row in enumerate(data.rows):
        where = f"{data.path} row {i + 1} (id {row['id']})"
        messages = _messages(row, where)
        if messages[-1]["role"] == "assistant":
            raise BuildDataError(f"{where}: the conversation must end before the answer (its last message is 'assistant')")
        answers = [row.get("positive"), row.get("negative")]
        if not all(isinstance(a, str) and a.strip() for a in answers):
            raise BuildDataError(f"{where}: needs 'positive' and 'negative' answers (non-empty strings)")
        if answers[0] == answers[1]:
            raise BuildDataError(f"{where}: 'positive' and 'negative' are the same text; a pair must contrast")
        out.append((str(row["id"]), messages, answers[0], answers[1]))
    return out


def split(n: int, holdout: float, seed: int, labels: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """(fit indices, held-out indices), both sorted. With ``labels``, each
    class is split in the same proportion (at least one row per class on
    each side when the class allows it)."""
    if not 0 <= holdout < 1:
        raise BuildDataError(f"--holdout {holdout}: must be at least 0 and below 1")
    if holdout == 0:
        return list(range(n)), []
    rng = random.Random(seed)
    groups = [[i for i in range(n) if labels[i] == c] for c in sorted(set(labels))] if labels is not None else [list(range(n))]
    held: list[int] = []
    for group in groups:
        order = group[:]
        rng.shuffle(order)
        k = min(max(1, round(holdout * len(order))), len(order) - 1)
        held += order[:k]
    if not held:
        raise BuildDataError(f"--holdout {holdout} leaves no held-out rows out of {n}")
    held_set = set(held)
    return [i for i in range(n) if i not in held_set], sorted(held)

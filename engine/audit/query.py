"""Read and filter audit records (``innerguard audit query``, and the report).

Reading is lenient (unparsable lines are skipped: ``verify`` is the judge of
integrity); filters compare the decision time.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

from innerguard.engine.errors import InnerguardError
from innerguard.engine.audit import files
from innerguard.engine.audit.records import from_rfc3339
from innerguard.engine.audit.verify import read_lines

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str, *, now: float | None = None) -> float:
    """RFC 3339 / ISO 8601 (a date alone is midnight UTC; no zone means UTC),
    or a duration back from now: ``90s``, ``15m``, ``2h``, ``7d``."""
    m = _RELATIVE.match(text.strip())
    if m:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InnerguardError(f"cannot read time {text!r}", hint="use 2026-11-29, 2026-11-29T10:00:00Z or a duration such as 15m, 2h, 7d") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def epoch(record: dict[str, Any]) -> float:
    return from_rfc3339(record.get("timestamp")) or 0.0


@dataclass(frozen=True)
class Located:
    file: str
    line: int
    record: dict[str, Any]


def read(paths: Iterable[str | os.PathLike]) -> Iterator[Located]:
    for path in files.expand(paths):
        try:
            for number, raw in read_lines(path):
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield Located(str(path), number, record)
        except OSError as exc:
            raise InnerguardError(f"cannot read {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Filter:
    since: float | None = None
    until: float | None = None
    policy: str | None = None
    action: str | None = None  # taken, or (shadow) would have been taken
    mode: str | None = None
    tenant: str | None = None
    types: tuple[str, ...] = ("decision",)

    def __call__(self, record: dict[str, Any]) -> bool:
        if record.get("type") not in self.types:
            return False
        if self.since is not None or self.until is not None:
            t = epoch(record)
            if (self.since is not None and t < self.since) or (self.until is not None and t >= self.until):
                return False
        policy = record.get("policy") or {}
        result = record.get("result") or {}
        if self.policy is not None and policy.get("name") != self.policy:
            return False
        if self.mode is not None and policy.get("mode") != self.mode:
            return False
        if self.action is not None and self.action not in (result.get("action"), result.get("would_action")):
            return False
        return self.tenant is None or record.get("tenant") == self.tenant


def evidence(record: dict[str, Any]) -> str:
    """``focus=0.12 < 0.24``: the comparisons of the deciding rule that held
    (or failed); of any rule when none decided."""
    parts = []
    evaluations = record.get("evaluations") or ()
    deciding = set((record.get("result") or {}).get("rules") or ())
    if deciding and any(e.get("rule") in deciding for e in evaluations):
        evaluations = [e for e in evaluations if e.get("rule") in deciding]
    for e in evaluations:
        if e.get("gen_ai.evaluation.score.label") not in ("triggered", "true", "error"):
            continue
        name = str(e.get("gen_ai.evaluation.name", "")).split(".", 1)[-1]
        if e.get("aggregate"):
            name = f"{e['aggregate']}({name})"
        value = e.get("gen_ai.evaluation.score.value")
        shown = f"{value:.3g}" if isinstance(value, float) else str(value).lower() if value is not None else "failed"
        part = f"{name}={shown}" + (f" {e['op']} {e['threshold']:g}" if e.get("op") and isinstance(e.get("threshold"), (int, float)) else "")
        if part not in parts:
            parts.append(part)
    return ", ".join(parts)


COLUMNS = ("time", "request", "tenant", "policy", "mode", "action", "rule", "evidence")


def row(record: dict[str, Any]) -> tuple[str, ...]:
    policy = record.get("policy") or {}
    result = record.get("result") or {}
    action = result.get("action") or ""
    if result.get("would_action"):
        action = f"{action} (would {result['would_action']})"
    return (
        str(record.get("timestamp", ""))[:23] + "Z", str(record.get("request_id", "")), str(record.get("tenant") or "-"),
        f"{policy.get('name')}@{policy.get('version')}", str(policy.get("mode") or ""), action,
        ",".join(result.get("rules") or ()) or "-", evidence(record) or "-",
    )


def table(records: Iterable[dict[str, Any]]) -> str:
    rows = [COLUMNS] + [row(r) for r in records]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:]) + "\n"

"""The audit log: one JSON line per policy decision, appended, hash-chained.

Each record carries ``prev`` (the previous record's ``hash``) and ``hash``
(sha256 over the record's canonical JSON without ``hash``), so that removing
or editing a line breaks the chain. The first record of a file chains to
64 zeros. This is the one module that writes audit records.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

GENESIS = "0" * 64


def _digest(record: Mapping[str, Any]) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _last_hash(path: Path) -> str:
    if not path.exists() or path.stat().st_size == 0:
        return GENESIS
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 65536))
        lines = f.read().splitlines()
    for line in reversed(lines):
        if line.strip():
            return json.loads(line)["hash"]
    return GENESIS


class AuditWriter:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._prev = _last_hash(self.path)

    def write_decisions(self, *, request_id: str, bundle_hash: str, result: Mapping[str, Any], received_at: float) -> None:
        decided_at = time.time()
        records = []
        for decision in result.get("decisions", ()):
            records.append({
                "decision_id": uuid.uuid4().hex,
                "request_id": request_id,
                "bundle_hash": bundle_hash,
                "policy": decision.get("policy"),
                "version": decision.get("version"),
                "revision": decision.get("revision"),
                "mode": decision.get("mode"),
                "action": decision.get("action"),
                "rule": decision.get("rule"),
                "applied": decision.get("applied"),
                "signals": decision.get("signals", {}),
                "error": decision.get("error"),
                "verdict": result.get("action"),
                "received_at": _iso(received_at),
                "decided_at": _iso(decided_at),
                "decision_latency_ms": result.get("decision_latency_ms"),
            })
        self._append(records)

    def _append(self, records: Iterable[dict[str, Any]]) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            for record in records:
                record["prev"] = self._prev
                record["hash"] = _digest(record)
                f.write(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")
                self._prev = record["hash"]
            f.flush()
            os.fsync(f.fileno())


def verify(path: str | os.PathLike) -> tuple[bool, int, str]:
    """Check the chain: (ok, records read, message)."""
    prev = GENESIS
    count = 0
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            stated = record.pop("hash", None)
            if record.get("prev") != prev:
                return False, count, f"line {number}: chain broken (prev does not match the line before)"
            if _digest(record) != stated:
                return False, count, f"line {number}: record was altered (hash mismatch)"
            prev = stated
            count += 1
    return True, count, f"{count} records, chain intact"


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"

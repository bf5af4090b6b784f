"""Verify audit logs: schema, hash chain, checkpoints, seals, segments.

Within a file every line must parse, match ``schemas/audit.schema.json``,
chain to the line before (``prev``) and hash to its own ``hash``; with a key,
every checkpoint's MAC must check. A file must end in a seal (a ``close`` or
``rotate`` checkpoint): a file that just stops was truncated, or its writer
is still running or died (``allow_open`` accepts that for live logs, and a
torn last line with it). Across files, the segments of a stream must be
contiguous and each must chain to the one before. The first problem of each
file is reported with its file and line.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

from innerguard.engine.audit import chain, files

OK, BROKEN, UNREADABLE = 0, 1, 2


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class Segment:
    """One file's walk: what the cross-file checks need."""

    path: str
    stream: str | None = None
    segment: int | None = None
    first_prev: str | None = None
    last_hash: str | None = None
    last_seal: str | None = None
    lines: int = 0


@dataclass
class Report:
    files: list[str] = field(default_factory=list)
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    heads: dict[str, str] = field(default_factory=dict)  # stream -> last hash
    hashes: set[str] = field(default_factory=set, repr=False)

    @property
    def status(self) -> int:
        return UNREADABLE if self.unreadable else BROKEN if self.problems else OK

    @property
    def ok(self) -> bool:
        return self.status == OK

    def summary(self) -> str:
        if self.unreadable:
            return f"unreadable: {'; '.join(self.unreadable)}"
        if self.problems:
            return f"BROKEN: {self.problems[0]}"
        return f"intact: {self.records} records in {len(self.files)} file(s), {len(self.heads)} stream(s)"


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("innerguard.schemas").joinpath("audit.schema.json").read_text("utf-8"))


@functools.lru_cache(maxsize=None)
def schema_validator(kind: str | None = None):
    """The schema's validator; for a known record type, the same schema with
    only that type's branch (jsonschema would otherwise try every ``if``)."""
    from jsonschema import Draft202012Validator

    full = schema()
    branches = [b for b in full["allOf"] if b["if"]["properties"]["type"]["const"] == kind]
    return Draft202012Validator({**full, "allOf": branches} if branches else full)


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes with its newline if any); OSError if unreadable."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            yield number, raw


def verify(paths: Iterable[str | os.PathLike], *, key: bytes | None = None, allow_open: bool = False,
           heads: Iterable[str] = (), check_schema: bool = True) -> Report:
    """``check_schema=False`` skips the JSON Schema (about 1 ms a record with
    jsonschema) and keeps every integrity check."""
    report = Report()
    segments = []
    signed_seen = False
    for path in files.expand(paths):
        report.files.append(str(path))
        try:
            segment, signed = _walk(path, key, allow_open, check_schema, report)
        except OSError as exc:
            report.unreadable.append(f"{path}: {exc.strerror or exc}")
            continue
        signed_seen |= signed
        segments.append(segment)
    if not report.files:
        report.unreadable.append("no audit files given")
    _check_streams(segments, allow_open, report)
    for head in heads:
        if head not in report.hashes:
            report.problems.append(Problem("(published head)", 0, f"head {head} is not in these logs: records after it were removed, or the log was rewritten"))
    if key is None and report.records:
        report.warnings.append(
            "signed checkpoints present but not checked: give the key (--key-file) to check them" if signed_seen
            else "checkpoints are unsigned hash anchors: a wholesale rewrite is detectable only against a published head (--head)")
    return report


def _walk(path: Path, key: bytes | None, allow_open: bool, check_schema: bool, report: Report) -> tuple[Segment, bool]:
    seg = Segment(str(path))
    kid = chain.key_id(key)
    prev = None
    signed = False
    last = None
    torn_at = None

    def broken(line: int, message: str) -> tuple[Segment, bool]:
        report.problems.append(Problem(str(path), line, message))
        seg.last_seal = "broken"
        return seg, signed

    for number, raw in read_lines(path):
        if not raw.endswith(b"\n"):
            torn_at = number  # only the last line can lack its newline
            break
        try:
            record = json.loads(raw)
        except ValueError:
            return broken(number, "not a JSON record (cut or garbled line)")
        if not isinstance(record, dict):
            return broken(number, "not a JSON object")
        error = _schema_error(record) if check_schema else _shape_error(record)
        if error is not None:
            return broken(number, error)
        if prev is None:
            if record["type"] != "open":
                return broken(number, f"a file must start with an 'open' record, found {record['type']!r}")
            seg.stream, seg.segment, seg.first_prev = record["stream"], record["segment"], record["prev"]
            if record["segment"] == 0 and record["reason"] == "new" and record["prev"] != chain.GENESIS:
                return broken(number, "the first record of a new stream must chain to the genesis hash")
        elif record["prev"] != prev:
            return broken(number, "chain broken: prev is not the hash of the line before (a record was removed, inserted or moved)")
        stated, computed = chain.line_hash(raw)
        if stated is None or stated != record["hash"]:
            return broken(number, "the line does not end in its hash field")
        if computed != stated:
            return broken(number, "record altered: its hash does not match its content")
        if record["type"] == "checkpoint":
            signed |= record["signed"]
            if key is not None:
                if not record["signed"] or record["key_id"] != kid:
                    return broken(number, "checkpoint is not signed with the given key" + (" (another key)" if record["signed"] else ""))
                if chain.mac(key, record) != record["mac"]:
                    return broken(number, "checkpoint signature does not match: the records before it were rewritten")
        prev = record["hash"]
        report.hashes.add(prev)
        report.records += 1
        last = record
        seg.lines = number
    if torn_at is not None and not allow_open:
        return broken(torn_at, "last line is cut mid-record (torn write or truncation)")
    if torn_at is not None:
        report.warnings.append(f"{path}:{torn_at}: torn last line ignored (writer still running or crashed)")
    if last is None:
        return broken(1, "empty: no audit records")
    seg.last_hash = prev
    seg.last_seal = last.get("seal") if last["type"] == "checkpoint" else None
    return seg, signed


def _schema_error(record: dict) -> str | None:
    validator = schema_validator(record.get("type") if isinstance(record.get("type"), str) else None)
    error = next(iter(validator.iter_errors(record)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "record"
    return f"does not match the audit schema at {where}: {error.message}"


def _shape_error(record: dict) -> str | None:
    """Without the schema: just what the integrity checks read."""
    need = {"type": str, "prev": str, "hash": str}
    need.update({"open": {"stream": str, "segment": int, "reason": str},
                 "checkpoint": {"signed": bool}}.get(record.get("type"), {}))
    for name, kind in need.items():
        if not isinstance(record.get(name), kind):
            return f"field {name!r} is missing or not a {kind.__name__}"
    return None


def _check_streams(segments: list[Segment], allow_open: bool, report: Report) -> None:
    streams: dict[str, list[Segment]] = {}
    for seg in segments:
        if seg.stream is not None and seg.last_seal != "broken":
            streams.setdefault(seg.stream, []).append(seg)
    for name, segs in streams.items():
        segs.sort(key=lambda s: s.segment)
        report.heads[name] = segs[-1].last_hash
        if segs[0].segment != 0:
            report.warnings.append(f"stream {name}: starts at segment {segs[0].segment}; earlier segments were not given")
        for before, after in zip(segs, segs[1:]):
            if after.segment != before.segment + 1:
                report.problems.append(Problem(after.path, 1, f"stream {name}: segment {before.segment + 1} is missing (or duplicated)"))
            elif before.last_seal != "rotate":
                report.problems.append(Problem(before.path, before.lines + 1, f"stream {name}: segment {before.segment} does not end in a rotation seal"))
            elif after.first_prev != before.last_hash:
                report.problems.append(Problem(after.path, 1, f"stream {name}: does not chain to the end of {Path(before.path).name}"))
        tail = segs[-1]
        if tail.last_seal == "rotate":
            report.warnings.append(f"stream {name}: continues after {Path(tail.path).name} in a segment that was not given")
        elif tail.last_seal is None:
            message = f"ends after line {tail.lines} without a seal: truncated, or its writer is still running or died"
            if allow_open:
                report.warnings.append(f"{tail.path}: {message} (accepted: --allow-open)")
            else:
                report.problems.append(Problem(tail.path, tail.lines + 1, message + " (use --allow-open for a live log)"))
    report.problems.sort(key=lambda p: (p.file, p.line))

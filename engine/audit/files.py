"""Where a log's files live and how a writer claims one.

A log is a folder of streams. Each stream has one writer at a time (an
exclusive ``flock`` on ``.<stream>.lock``, released by the kernel when the
process dies) and one chain. Its active file is ``<stream>.jsonl``; rotation
renames it to ``<stream>.<segment:06d>.jsonl``. A second process (or a second
log object) on the same path gets the next free stream (``audit-2``, ...), so
two appenders never share a file.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Iterable

from innerguard.engine.errors import InnerguardError

SUFFIX = ".jsonl"
MAX_STREAMS = 1024
FILE_MODE = 0o600  # every file a writer creates
DIR_MODE = 0o700  # the log's folder, when the writer creates it


def base(path: str | os.PathLike) -> tuple[Path, str]:
    """(folder, stem): ``logs/`` → (logs, "audit"); ``logs/audit.jsonl`` → (logs, "audit")."""
    p = Path(path)
    if p.suffix == SUFFIX:
        return p.parent, p.name[: -len(SUFFIX)]
    return p, "audit"


def claim(folder: Path, stem: str, stream: str | None = None) -> tuple[str, int]:
    """Lock the first free stream (or exactly ``stream``): (name, lock fd)."""
    # The records hold tenants, decisions and (optionally) prompt text:
    # readable by the server's own user only. A folder that exists keeps
    # the mode its operator gave it.
    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    names = [stream] if stream else [stem] + [f"{stem}-{i}" for i in range(2, MAX_STREAMS)]
    for name in names:
        fd = os.open(folder / f".{name}.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return name, fd
    raise InnerguardError(f"audit log {folder / stem}: every stream is held by another writer")


def active(folder: Path, stream: str) -> Path:
    return folder / f"{stream}{SUFFIX}"


def rotated(folder: Path, stream: str, segment: int) -> Path:
    return folder / f"{stream}.{segment:06d}{SUFFIX}"


def latest_rotated(folder: Path, stream: str) -> tuple[int, Path] | None:
    found = []
    for p in folder.glob(f"{stream}.*{SUFFIX}"):
        middle = p.name[len(stream) + 1: -len(SUFFIX)]
        if middle.isdigit():
            found.append((int(middle), p))
    return max(found) if found else None


def expand(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given, folders as their ``*.jsonl`` files (sorted). Missing
    paths are kept, so that the reader reports them."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob(f"*{SUFFIX}")) if p.is_dir() else [p]
    return out


def first_record(path: Path) -> dict | None:
    with path.open("rb") as f:
        line = f.readline()
    try:
        return json.loads(line)
    except ValueError:
        return None


class Tail:
    """The end of an active file: the last well-formed record and what follows it."""

    def __init__(self, path: Path):
        self.record: dict | None = None
        self.good_end = 0  # byte offset after the last well-formed line
        self.dropped = b""  # a torn or garbled tail, to be cut off
        if not path.exists():
            return
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            end = size
            while end > 0:
                start, line = _line_before(f, end)
                record = _parse(line)
                if record is not None:
                    self.record, self.good_end = record, end
                    break
                end = start
            f.seek(self.good_end)
            self.dropped = f.read(size - self.good_end)


def _line_before(f, end: int, block: int = 65536) -> tuple[int, bytes]:
    """(start, bytes) of the line that ends at ``end`` (its newline included)."""
    pos = end - 1  # the line's own last byte is not its start
    start = 0
    while pos > 0:
        step = min(block, pos)
        f.seek(pos - step)
        cut = f.read(step).rfind(b"\n")
        if cut >= 0:
            start = pos - step + cut + 1
            break
        pos -= step
    f.seek(start)
    return start, f.read(end - start)


def _parse(line: bytes) -> dict | None:
    if not line.endswith(b"\n"):
        return None  # torn: the writer died mid-line
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("hash"), str) else None

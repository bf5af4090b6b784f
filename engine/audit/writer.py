"""``AuditLog``: the one writer of an audit stream.

The caller only enqueues (``record_decision`` takes the decision time and
puts the result on a queue: about a microsecond); a writer thread builds the
records, chains them, writes them in batches and completes the acks. So
writing never sits on the generation hot path, and a server can still await
``ack.wait()`` before it answers when ``durability="sync"``.

Durability:
- ``sync``: a batch is fsync'ed before its acks complete (group commit).
- ``batch`` (default): written to the OS at every batch (a killed process
  loses nothing acknowledged), fsync'ed every ``sync_seconds``.
- ``none``: written to the OS at every batch, fsync'ed only at seals.
Lines are appended whole with ``os.write`` on an ``O_APPEND`` descriptor, so a
crash can only tear the last line; the next writer cuts it off (keeping the
bytes in a ``.torn`` file) and records the repair.
"""
from __future__ import annotations

import atexit
import os
import queue
import socket
import threading
import time
import weakref
from typing import Any, Collection, Mapping, Sequence

from innerguard.engine.errors import InnerguardError
from innerguard.engine.logging import get_logger
from innerguard.engine.audit import chain, files
from innerguard.engine.audit.records import SCHEMA_VERSION, RecordBuilder, RequestInfo, from_rfc3339, rfc3339

log = get_logger(__name__)

DURABILITY = ("sync", "batch", "none")
_STOP = object()
_MAX_BATCH = 4096


class AuditWriteError(InnerguardError):
    """The audit log could not be written; acks raise it."""


class Ack:
    """A handle on enqueued records: ``wait()`` blocks until they are durable
    as the log's ``durability`` says. ``decision_ids`` is filled when written."""

    __slots__ = ("_log", "seq", "decision_ids")

    def __init__(self, log: "AuditLog", seq: int, decision_ids: list[str]):
        self._log, self.seq, self.decision_ids = log, seq, decision_ids

    @property
    def done(self) -> bool:
        return self._log._durable >= self.seq

    def wait(self, timeout: float | None = None) -> bool:
        """True once durable, False on timeout; raises ``AuditWriteError``
        if the writer failed."""
        return self._log._wait(self.seq, timeout)


class AuditLog:
    def __init__(
        self,
        path: str | os.PathLike,
        *,
        key: bytes | None = None,
        durability: str = "batch",
        rotate_bytes: int | None = 64 * 1024 * 1024,
        rotate_seconds: float | None = 24 * 3600,
        store_content: bool | Collection[str] = False,
        redact: Sequence[Any] = (),
        checkpoint_every: int = 10_000,
        checkpoint_seconds: float = 60.0,
        sync_seconds: float = 1.0,
        stream: str | None = None,
    ):
        if durability not in DURABILITY:
            raise InnerguardError(f"audit durability {durability!r} is not one of {', '.join(DURABILITY)}")
        self.key = key
        self.durability = durability
        self.rotate_bytes, self.rotate_seconds = rotate_bytes, rotate_seconds
        self.checkpoint_every, self.checkpoint_seconds, self.sync_seconds = checkpoint_every, checkpoint_seconds, sync_seconds
        self.builder = RecordBuilder(key=key, store_content=store_content, redact=redact)
        self.folder, stem = files.base(path)
        try:
            self.stream, self._lock_fd = files.claim(self.folder, stem, stream)
        except OSError as exc:
            raise AuditWriteError(f"cannot open audit log {path}: {exc.strerror or exc}") from None
        self.path = files.active(self.folder, self.stream)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._enqueue_lock = threading.Lock()
        self._cond = threading.Condition()
        self._seq = 0  # last enqueued
        self._durable = 0  # last durable
        self._error: BaseException | None = None
        self._closed = False
        self._decisions: dict[str, tuple[list[str], bool]] = {}  # request id -> (decision ids, store content)
        self.head = chain.GENESIS
        self.segment = -1
        self._fd = -1
        try:
            self._open_stream()
        except OSError as exc:
            os.close(self._lock_fd)
            raise AuditWriteError(f"cannot open audit log {self.path}: {exc.strerror or exc}") from None
        if key is None:
            # Said at start, once per log: without an operator key nothing
            # fails, the log just quietly loses what the key gives.
            log.warning(
                "audit log has no operator key: its prompt/output hashes use an ephemeral key (they cannot be "
                "matched across restarts) and its checkpoints are unsigned; set a persistent key with "
                f"--audit-key-file FILE or ${chain.KEY_ENV} (e.g. `openssl rand -hex 32`)", path=str(self.path))
        self._thread = threading.Thread(target=self._run, name=f"innerguard-audit-{self.stream}", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    # -- the caller's side: enqueue only ----------------------------------------
    def record_decision(self, result: Mapping[str, Any] | None, *, plan=None, request: RequestInfo,
                        decided_at: float | None = None) -> Ack:
        """Enqueue one record per evaluated policy of ``result`` (the worker's
        per-request result; do not mutate it afterwards). ``decided_at``
        (epoch seconds) defaults to now."""
        return self._put(("decision", result, plan, request, time.time() if decided_at is None else decided_at))

    def record_completion(self, request_id: str, *, output: str | None = None, output_tokens: int | None = None,
                          finish_reason: str | None = None, output_decisions: list[dict[str, Any]] | None = None) -> Ack:
        """Enqueue a ``completion`` record: the output's hash, length and token
        count, linked to the request's decision records, with the output
        rules that stopped or flagged it (``OutputWatch.events``)."""
        return self._put(("completion", str(request_id), output, output_tokens, finish_reason, time.time(),
                          list(output_decisions or ())))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything enqueued so far is durable."""
        return self._wait(self._seq, timeout)

    def close(self) -> None:
        """Seal the stream (a signed ``close`` checkpoint) and release it."""
        with self._enqueue_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()
        if self._error:
            raise AuditWriteError(f"audit log {self.path}: {self._error}")

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def backlog(self) -> int:
        """Records enqueued and not yet durable (for metrics)."""
        return self._seq - self._durable

    def _put(self, item: tuple) -> Ack:
        ids: list[str] = []
        with self._enqueue_lock:
            if self._closed:
                raise AuditWriteError(f"audit log {self.path} is closed")
            self._seq += 1
            seq = self._seq
            self._queue.put((seq, ids, item))
        return Ack(self, seq, ids)

    def _wait(self, seq: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._durable < seq and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        if self._durable < seq:
            raise AuditWriteError(f"audit log {self.path}: {self._error}")
        return True

    # -- the writer thread -------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        finally:
            os.close(self._lock_fd)  # the stream is free again, for the next writer

    def _loop(self) -> None:
        self._last_sync = self._last_checkpoint = time.monotonic()
        self._since_checkpoint = 0
        stopping = False
        while not stopping:
            top = 0
            pending: list[str] = []
            pending_bytes = 0
            try:
                for entry in self._take():
                    if entry is _STOP:
                        stopping = True
                        continue
                    top, ids, item = entry  # queue order is seq order
                    if self._rotation_due(pending_bytes):
                        self._write(pending)
                        pending, pending_bytes = [], 0
                        self._rotate()
                    lines = self._lines(item, ids)
                    pending += lines
                    pending_bytes += sum(map(len, lines))
                self._write(pending)
                self._after_batch(len(pending), stopping)
            except OSError as exc:
                self._fail(exc)
                return
            if top:
                with self._cond:
                    self._durable = top
                    self._cond.notify_all()
        try:
            self._seal("close")
            os.close(self._fd)
        except OSError as exc:
            self._fail(exc)

    def _take(self) -> list:
        """The next batch: everything queued, waiting at most until the next
        periodic fsync or checkpoint is due."""
        wait = min(self.checkpoint_seconds, self.sync_seconds) if self.durability == "batch" else self.checkpoint_seconds
        try:
            batch = [self._queue.get(timeout=wait)]
        except queue.Empty:
            return []
        while len(batch) < _MAX_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _after_batch(self, written: int, stopping: bool) -> None:
        now = time.monotonic()
        self._since_checkpoint += written
        if self._since_checkpoint and not stopping and (
                self._since_checkpoint >= self.checkpoint_every or now - self._last_checkpoint >= self.checkpoint_seconds):
            self._write([self._checkpoint(None)])
            self._since_checkpoint, self._last_checkpoint = 0, now
        if (self.durability == "sync" and written) or (self.durability == "batch" and now - self._last_sync >= self.sync_seconds):
            os.fsync(self._fd)
            self._last_sync = now
        if not stopping and self._rotation_due(0):
            self._rotate()

    def _fail(self, exc: BaseException) -> None:
        log.error("audit log write failed", path=str(self.path), error=str(exc))
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def _lines(self, item: tuple, ids: list[str]) -> list[str]:
        try:
            if item[0] == "decision":
                _, result, plan, request, decided_at = item
                common, owns = self.builder.decision_parts(result, plan, request, decided_at)
                ids += [own["decision_id"] for own in owns]
                if len(self._decisions) > 100_000:  # completions that never came
                    self._decisions.pop(next(iter(self._decisions)))
                store = any(self.builder.stores(own["policy"]["name"]) for own in owns)
                self._decisions[str(request.request_id)] = (list(ids), store)
                if not self.builder.redactor.rules:
                    shared = chain.fields(common)  # once per request, not once per record
                    return [self._chain_parts(shared, own) for own in owns]
                records = [self.builder.redactor({**common, **own}) for own in owns]
            else:
                _, request_id, output, tokens, finish, at, output_decisions = item
                decision_ids, store = self._decisions.pop(request_id, ([], self.builder.store_all))
                records = [self.builder.completion(request_id, decision_ids, store, output=output, output_tokens=tokens,
                                                   finish_reason=finish, completed_at=at, output_decisions=output_decisions)]
        except Exception as exc:  # a malformed result must not stop the writer: record it
            records = [self._note("error", {"message": f"{type(exc).__name__}: {exc}", "item": item[0]})]
        return [self._chain(r) for r in records]

    def _chain(self, record: dict[str, Any]) -> str:
        record["prev"] = self.head
        self.head, line = chain.seal_line(record)
        return line

    def _chain_parts(self, shared: str, own: dict[str, Any]) -> str:
        own["prev"] = self.head
        self.head, line = chain.seal_parts(shared, own)
        return line

    def _note(self, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        now = time.time()
        return {"schema_version": SCHEMA_VERSION, "type": kind, "timestamp": rfc3339(now), **fields}

    def _checkpoint(self, seal: str | None) -> str:
        record = self._note("checkpoint", {"seal": seal, "signed": self.key is not None, "key_id": chain.key_id(self.key)})
        record["prev"] = self.head
        record["mac"] = chain.mac(self.key, record) if self.key else None
        self.head, line = chain.seal_line(record)
        return line

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        data = "".join(lines).encode("ascii")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self._size += len(data)

    def _seal(self, reason: str) -> None:
        self._write([self._checkpoint(reason)])
        os.fsync(self._fd)

    # -- files: open, repair, rotate ---------------------------------------------
    def _open_stream(self, previous_file: str | None = None) -> None:
        if previous_file is None and not self.path.exists():
            previous_file = self._latest_rotated()
        tail = files.Tail(self.path)
        if tail.record is not None and tail.record.get("type") == "checkpoint" and tail.record.get("seal") == "rotate":
            # A rotation that stopped between seal and rename: finish it.
            first = files.first_record(self.path) or {}
            previous_file = self._rename_rotated(int(first.get("segment") or 0))
            tail = files.Tail(self.path)
        repaired = self._cut(tail) if tail.dropped else None
        first = files.first_record(self.path) if tail.record is not None else None
        self.head = tail.record["hash"] if tail.record else self.head
        if first:
            self.segment = int(first.get("segment") or 0)
            self._segment_started = from_rfc3339(first.get("timestamp")) or time.time()
        else:
            self.segment += 1  # a new file: the first (-1 + 1) or the one after the rotated one
            self._segment_started = time.time()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, files.FILE_MODE)
        self._size = os.fstat(self._fd).st_size
        previous = None
        if tail.record is not None:
            previous = "closed" if tail.record.get("seal") == "close" else "unclean"
        opening = self._note("open", {
            "stream": self.stream, "segment": self.segment,
            "reason": "rotate" if previous_file else ("resume" if tail.record else "new"),
            "previous_session": previous, "previous_file": previous_file,
            "process": {"pid": os.getpid(), "host": socket.gethostname()},
            "versions": self.builder.versions, "durability": self.durability,
            "signed": self.key is not None, "key_id": chain.key_id(self.key),
        })
        lines = [self._chain(opening)]
        if repaired:
            lines.append(self._chain(self._note("repair", repaired)))
            log.warning("audit log tail repaired", path=str(self.path), **{k: repaired[k] for k in ("dropped_bytes", "saved_to")})
        self._write(lines)
        os.fsync(self._fd)

    def _latest_rotated(self) -> str | None:
        """A stream whose active file is gone (stopped right after a rename)
        continues from its newest rotated segment."""
        found = files.latest_rotated(self.folder, self.stream)
        if found is None:
            return None
        segment, path = found
        tail = files.Tail(path)
        self.head = tail.record["hash"] if tail.record else self.head
        self.segment = segment
        return path.name

    def _cut(self, tail: files.Tail) -> dict[str, Any]:
        """Move a torn or garbled tail to a side file and truncate it away."""
        saved = self.path.with_name(f"{self.path.name}.torn-{int(time.time() * 1000)}")
        fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, files.FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(tail.dropped)
        os.truncate(self.path, tail.good_end)
        return {"offset": tail.good_end, "dropped_bytes": len(tail.dropped), "dropped_sha256": chain.digest_bytes(tail.dropped),
                "saved_to": saved.name, "reason": "torn or unreadable tail after an unclean stop"}

    def _rotation_due(self, pending: int) -> bool:
        return bool(self.rotate_bytes and self._size + pending >= self.rotate_bytes
                    or self.rotate_seconds and time.time() - self._segment_started >= self.rotate_seconds)

    def _rotate(self) -> None:
        self._seal("rotate")
        os.close(self._fd)
        self._open_stream(previous_file=self._rename_rotated(self.segment))
        self._since_checkpoint, self._last_checkpoint = 0, time.monotonic()

    def _rename_rotated(self, segment: int) -> str:
        target = files.rotated(self.folder, self.stream, segment)
        os.replace(self.path, target)
        self.segment = segment
        return target.name


def _close_at_exit(ref: "weakref.ref[AuditLog]") -> None:
    log_ = ref()
    if log_ is not None:
        try:
            log_.close()
        except InnerguardError:
            pass

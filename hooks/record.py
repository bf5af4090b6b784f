"""Passive recording: the residual stream and post-RoPE Q/K of chosen layers
and heads, per request, while generation stays unchanged.

Worker side only (torch, no YAML). A request is recorded when its
``SamplingParams.extra_args`` carry ``{"innerguard_record": "<key>"}`` (vLLM
appends a random suffix to its own request ids, so the caller's key travels
with the request). The engine side (``innerguard.engine.capture``) starts a
recording with ``innerguard_record_start(spec)``, takes finished requests
with ``innerguard_record_take(keys)`` and ends it with
``innerguard_record_stop()``.

One forward, per step:

  model pre-hook     rows of this step per recorded request (runner_view);
                     one index tensor of the rows to keep (all, or the last
                     prompt token; generated rows too if asked) and one of
                     the K rows
  layer hooks        hidden + residual of the kept rows: one gather and one
                     add per layer, cast to the recording dtype on the device
  attn pre-hooks     post-RoPE Q of the kept rows and K of every computed row,
                     only the chosen heads (and their KV heads)
  model hook         stacks the step's layers ``[L, rows, D]`` and copies it
                     off the device once, then hands each request its slice

Memory is bounded: the worker holds at most ``max_bytes`` (default 1 GiB);
a request whose rows would pass that is marked failed (its error says so)
rather than growing the worker. The engine side admits requests within a
byte budget and takes them as they finish, so the cap is a safety net.
``take`` returns at most ``call_bytes`` per call (at least one request) as
one safetensors blob: plain bytes through ``collective_rpc``, written to
disk unchanged by the engine side.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import save as save_tensors

from innerguard.hooks.modules import ModelModules
from innerguard.hooks.tensor_parallel import current_shard
from innerguard.hooks.runner_view import reader_for

RECORD_KEY = "innerguard_record"  # SamplingParams.extra_args key: the caller's record id
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_CALL_BYTES = 256 << 20
CLOSED_KEYS = 65536  # keys already taken: late rows (async scheduling) are ignored


@dataclass(eq=False)
class Entry:
    """One recorded request's rows, in arrival order."""

    num_prompt_tokens: int
    req_id: str
    hidden: list[torch.Tensor] = field(default_factory=list)  # [L, n, D] chunks
    positions: list[list[int]] = field(default_factory=list)
    q: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # layer -> [n, heads, d] chunks
    k: list[dict[int, torch.Tensor]] = field(default_factory=list)  # per chunk: layer -> [m, kv_heads, d]
    k_positions: list[list[int]] = field(default_factory=list)
    nbytes: int = 0
    error: str | None = None

    def rewind(self, position: int) -> None:
        """A recompute (preemption) restarts at ``position``: forget rows at or after it."""
        self.hidden, self.positions, self.q = _cut(self.hidden, self.positions, self.q, position, dim=1)
        kept = [(c, p) for c, p in zip(self.k, self.k_positions)]
        self.k, self.k_positions = [], []
        for chunk, pos in kept:
            n = sum(1 for p in pos if p < position)
            if n:
                self.k.append({layer: t[:n] for layer, t in chunk.items()})
                self.k_positions.append(pos[:n])


def _cut(hidden, positions, q, position, dim):
    new_hidden, new_positions, new_q = [], [], {layer: [] for layer in q}
    for i, pos in enumerate(positions):
        n = sum(1 for p in pos if p < position)  # rows arrive in position order
        if not n:
            continue
        if hidden:
            new_hidden.append(hidden[i].narrow(dim, 0, n))
        for layer in q:
            new_q[layer].append(q[layer][i][:n])
        new_positions.append(pos[:n])
    return new_hidden, new_positions, new_q


@dataclass
class Step:
    sel: torch.Tensor | None  # rows whose hidden state / Q is kept
    segments: list[tuple[str, list[int]]]  # (key, positions) per request, in row order
    k_sel: torch.Tensor | None  # rows whose K is kept
    k_segments: list[tuple[str, list[int]]]
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    q: dict[int, torch.Tensor] = field(default_factory=dict)
    k: dict[int, torch.Tensor] = field(default_factory=dict)


class Recorder:
    def __init__(self, spec: dict[str, Any], modules: ModelModules, reader, geometry: dict[str, int]):
        self.layers = sorted({int(layer) for layer in spec.get("layers") or ()})
        self.mode = spec.get("mode", "last_token")
        if self.mode not in ("last_token", "all_tokens"):
            raise ValueError(f"unknown capture mode {self.mode!r} (last_token or all_tokens)")
        self.generated = bool(spec.get("generated", False))
        self.dtype = DTYPES[spec.get("dtype") or "float32"]
        self.max_bytes = int(spec.get("max_bytes") or DEFAULT_MAX_BYTES)
        self.geometry = geometry
        group = geometry["num_heads"] // geometry["num_kv_heads"]
        self.qk: dict[int, tuple[list[int], list[int]]] = {}
        for layer, heads in spec.get("qk") or ():
            heads = sorted({int(h) for h in heads})
            self.qk[int(layer)] = (heads, sorted({h // group for h in heads}))
        num_layers = len(modules.layers)
        for layer in [*self.layers, *self.qk]:
            if not 0 <= layer < num_layers:
                raise ValueError(f"layer {layer} outside 0..{num_layers - 1}")
        for layer, (heads, _) in self.qk.items():
            if heads and not 0 <= heads[-1] < geometry["num_heads"] or heads and heads[0] < 0:
                raise ValueError(f"layer {layer}: head index outside 0..{geometry['num_heads'] - 1}")
        self.modules = modules
        self.reader = reader
        self.entries: dict[str, Entry] = {}
        self.keys: dict[str, str | None] = {}  # vLLM request id -> record key (None: not recorded)
        self.closed: OrderedDict[str, None] = OrderedDict()
        self.step: Step | None = None
        self.total_bytes = 0
        self.peak_bytes = 0
        self.steps = 0
        self.copy_s = 0.0
        self.handles: list[Any] = []
        self._index_cache: dict[str, torch.Tensor] = {}

    # -- hooks ---------------------------------------------------------------
    def install(self, model) -> None:
        m = self.modules
        try:
            self.handles.append(model.register_forward_pre_hook(self._begin, with_kwargs=True))
            for layer in self.layers:
                self.handles.append(m.on_layer_output(layer, self._layer_hook(layer)))
            for layer in self.qk:
                self.handles.append(m.on_attention_input(layer, self._qk_hook(layer)))
            self.handles.append(model.register_forward_hook(self._finish))
        except Exception:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _key(self, req_id: str) -> str | None:
        if req_id not in self.keys:
            if len(self.keys) > 65536:
                self.keys.clear()  # a cache: rebuilt from extra_args on demand
            extra = self.reader.extra_args(req_id)
            value = extra.get(RECORD_KEY) if isinstance(extra, dict) else None
            self.keys[req_id] = str(value) if value is not None else None
        return self.keys[req_id]

    def _begin(self, module, args, kwargs):
        self.step = None
        try:
            positions = kwargs["positions"] if "positions" in kwargs else args[1]
            view = self.reader.step(positions)
            sel, segments, k_sel, k_segments = [], [], [], []
            for span in view.rows:
                key = self._key(span.req_id)
                if key is None or key in self.closed:
                    continue
                entry = self.entries.get(key)
                if entry is None:
                    entry = self.entries[key] = Entry(span.num_prompt_tokens, span.req_id)
                p, n, total = span.first_position, span.end - span.start, span.num_prompt_tokens
                last = max(entry.positions[-1][-1] if entry.positions else -1,
                           entry.k_positions[-1][-1] if entry.k_positions else -1)
                if n and p <= last:
                    entry.rewind(p)
                computed = range(p, p + n) if self.generated else range(p, min(p + n, total))
                if self.mode == "all_tokens":
                    kept = list(computed)
                else:
                    kept = [x for x in computed if x == total - 1 or x >= total]
                if kept:
                    sel += [span.start + x - p for x in kept]
                    segments.append((key, kept))
                if self.qk and len(computed):
                    k_sel += [span.start + x - p for x in computed]
                    k_segments.append((key, list(computed)))
            if sel or k_sel:
                device = positions.device
                self.step = Step(
                    sel=torch.tensor(sel, dtype=torch.long, device=device) if sel else None,
                    segments=segments,
                    k_sel=torch.tensor(k_sel, dtype=torch.long, device=device) if k_sel else None,
                    k_segments=k_segments,
                )
        except Exception as exc:  # recording must never stop a forward
            self._fail_all(f"reading the step failed: {type(exc).__name__}: {exc}")
        return None

    def _layer_hook(self, layer: int):
        def keep(hidden, residual):
            step = self.step
            if step is None or step.sel is None:
                return None
            try:
                rows = hidden.index_select(0, step.sel) + residual.index_select(0, step.sel)
                step.hidden[layer] = rows.to(self.dtype)
            except Exception as exc:
                self._fail_step(step, f"layer {layer}: {type(exc).__name__}: {exc}")
            return None

        return keep

    def _qk_hook(self, layer: int):
        heads, kv_heads = self.qk[layer]
        h, h_kv, d = self.geometry["num_heads"], self.geometry["num_kv_heads"], self.geometry["head_dim"]

        def keep(q, k):
            step = self.step
            if step is None:
                return None
            try:
                if step.sel is not None:
                    index = self._index(f"q{layer}", heads, q.device)
                    step.q[layer] = q.index_select(0, step.sel).view(-1, h, d).index_select(1, index).to(self.dtype)
                if step.k_sel is not None:
                    index = self._index(f"k{layer}", kv_heads, k.device)
                    step.k[layer] = k.index_select(0, step.k_sel).view(-1, h_kv, d).index_select(1, index).to(self.dtype)
            except Exception as exc:
                self._fail_step(step, f"Q/K at layer {layer}: {type(exc).__name__}: {exc}")
            return None

        return keep

    def _index(self, name: str, values: list[int], device) -> torch.Tensor:
        index = self._index_cache.get(name)
        if index is None or index.device != device:
            index = self._index_cache[name] = torch.tensor(values, dtype=torch.long, device=device)
        return index

    def _finish(self, module, args, output):
        step, self.step = self.step, None
        if step is None:
            return None
        try:
            started = time.perf_counter()
            self.steps += 1
            hidden = None
            if step.sel is not None and self.layers:
                missing = [layer for layer in self.layers if layer not in step.hidden]
                if missing:
                    raise RuntimeError(f"layers {missing} produced no rows in this step")
                # One copy off the device per step, all layers and requests together.
                hidden = torch.stack([step.hidden[layer] for layer in self.layers]).cpu()  # [L, n, D]
            q = {layer: t.cpu() for layer, t in step.q.items()}
            k = {layer: t.cpu() for layer, t in step.k.items()}
            offset = 0
            for key, positions in step.segments:
                n = len(positions)
                entry = self.entries[key]
                chunk_q = {layer: t[offset:offset + n] for layer, t in q.items()}
                size = (hidden[:, offset:offset + n].nbytes if hidden is not None else 0) + sum(t.nbytes for t in chunk_q.values())
                if self._admit(entry, size):
                    if hidden is not None:
                        entry.hidden.append(hidden[:, offset:offset + n])
                    for layer, t in chunk_q.items():
                        entry.q.setdefault(layer, []).append(t)
                    entry.positions.append(positions)
                offset += n
            offset = 0
            for key, positions in step.k_segments:
                n = len(positions)
                entry = self.entries[key]
                chunk = {layer: t[offset:offset + n] for layer, t in k.items()}
                if self._admit(entry, sum(t.nbytes for t in chunk.values())):
                    entry.k.append(chunk)
                    entry.k_positions.append(positions)
                offset += n
            self.copy_s += time.perf_counter() - started
        except Exception as exc:
            self._fail_step(step, f"{type(exc).__name__}: {exc}")
        return None

    def _admit(self, entry: Entry, size: int) -> bool:
        if entry.error is not None:
            return False
        if self.total_bytes + size > self.max_bytes:
            entry.error = (f"worker record buffer full ({self.total_bytes} + {size} bytes > {self.max_bytes}); "
                           "take finished requests sooner or raise max_bytes")
            return False
        entry.nbytes += size
        self.total_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.total_bytes)
        return True

    def _fail_step(self, step: Step, message: str) -> None:
        for key, _ in [*step.segments, *step.k_segments]:
            entry = self.entries.get(key)
            if entry is not None and entry.error is None:
                entry.error = message

    def _fail_all(self, message: str) -> None:
        for entry in self.entries.values():
            if entry.error is None:
                entry.error = message

    # -- taking ----------------------------------------------------------------
    def take(self, keys: list[str], call_bytes: int) -> dict[str, Any]:
        """Up to ``call_bytes`` of the requests ``keys`` (at least one), as one
        safetensors blob; ``pending`` lists the keys left for another call."""
        tensors: dict[str, torch.Tensor] = {}
        index: dict[str, Any] = {}
        pending: list[str] = []
        size = 0
        for key in keys:
            entry = self.entries.get(key)
            if entry is None:
                index[key] = {"error": "no rows of this request were seen by the worker"}
                self._close(key)
                continue
            if size and size + entry.nbytes > call_bytes:
                pending.append(key)
                continue
            del self.entries[key]
            self.total_bytes -= entry.nbytes
            self.keys.pop(entry.req_id, None)
            self._close(key)
            size += entry.nbytes
            names: dict[str, str] = {}
            positions = [p for chunk in entry.positions for p in chunk]
            names["positions"] = f"{key}/positions"
            tensors[names["positions"]] = torch.tensor(positions, dtype=torch.int64)
            if self.layers and entry.hidden:
                names["hidden"] = f"{key}/hidden"
                tensors[names["hidden"]] = torch.cat(entry.hidden, dim=1).contiguous()
            for layer, chunks in entry.q.items():
                names[f"q.{layer}"] = f"{key}/q.{layer}"
                tensors[names[f"q.{layer}"]] = torch.cat(chunks).contiguous()
            if entry.k:
                names["k_positions"] = f"{key}/k_positions"
                tensors[names["k_positions"]] = torch.tensor([p for c in entry.k_positions for p in c], dtype=torch.int64)
                for layer in self.qk:
                    names[f"k.{layer}"] = f"{key}/k.{layer}"
                    tensors[names[f"k.{layer}"]] = torch.cat([c[layer] for c in entry.k]).contiguous()
            index[key] = {
                "num_prompt_tokens": entry.num_prompt_tokens,
                "num_rows": len(positions),
                "tensors": names,
                "error": entry.error,
            }
        blob = save_tensors(tensors) if tensors else b""
        return {"blob": blob, "index": index, "pending": pending}

    def _close(self, key: str) -> None:
        self.closed[key] = None
        while len(self.closed) > CLOSED_KEYS:
            self.closed.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        return {
            "entries": len(self.entries),
            "bytes": self.total_bytes,
            "peak_bytes": self.peak_bytes,
            "steps": self.steps,
            "copy_s": round(self.copy_s, 6),
            "hooks": len(self.handles),
        }


def _geometry(hf_config) -> dict[str, int]:
    heads = int(hf_config.num_attention_heads)
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return {
        "num_heads": heads,
        "num_kv_heads": int(getattr(hf_config, "num_key_value_heads", None) or heads),
        "head_dim": int(head_dim),
        "hidden_size": int(hf_config.hidden_size),
        "num_layers": int(hf_config.num_hidden_layers),
    }


def _memory_peak(reset: bool) -> dict[str, int | None]:
    """This process's resident set now and its peak (VmHWM) since the last reset."""
    found: dict[str, int | None] = {"rss_bytes": None, "peak_rss_bytes": None}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    found["rss_bytes"] = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    found["peak_rss_bytes"] = int(line.split()[1]) * 1024
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    return found


class RecordMixin:
    """RPC methods of passive recording; mixed into the worker extension."""

    def innerguard_record_start(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Install recording hooks for ``spec`` (``layers``, ``mode``,
        ``generated``, ``dtype``, ``qk`` = [[layer, [heads]]], ``max_bytes``).
        A recording with requests not yet taken is refused."""
        old = getattr(self, "_innerguard_recorder", None)
        if old is not None and old.entries:
            raise RuntimeError(f"a recording holds {len(old.entries)} requests not yet taken; stop it first")
        if old is not None:
            old.uninstall()
            self._innerguard_recorder = None
        shard = current_shard()
        if not shard.whole:  # each rank holds a share of the heads; a capture file holds them all
            raise RuntimeError(f"innerguard capture records with tensor_parallel_size 1 only (this engine: {shard.size})")
        runner = self.model_runner
        hf_config = runner.model_config.hf_config
        model = runner.get_model()
        geometry = _geometry(hf_config)
        modules = ModelModules.find(model, geometry["num_layers"], -1)
        reader = getattr(self, "_innerguard_record_reader", None)
        if reader is None:  # one reader per worker: Model Runner V2's wraps the runner
            reader = self._innerguard_record_reader = reader_for(runner)
        recorder = Recorder(spec, modules, reader, geometry)
        recorder.install(model)
        self._innerguard_recorder = recorder
        scales = {}
        for layer in range(geometry["num_layers"]):
            try:
                scales[layer] = modules.attention_scale(layer)
            except Exception:
                scales[layer] = None
        return {
            "runner": reader.name,
            "geometry": geometry,
            "attention_scale": scales,
            "enforce_eager": bool(runner.model_config.enforce_eager),
            "model_dtype": str(runner.model_config.dtype).replace("torch.", ""),
            "hooks": len(recorder.handles),
        }

    def innerguard_record_take(self, keys: list[str], call_bytes: int = DEFAULT_CALL_BYTES) -> dict[str, Any]:
        recorder = getattr(self, "_innerguard_recorder", None)
        if recorder is None:
            raise RuntimeError("no recording is active (innerguard_record_start first)")
        return recorder.take(list(keys), int(call_bytes))

    def innerguard_record_stats(self, reset_peak: bool = False) -> dict[str, Any]:
        recorder = getattr(self, "_innerguard_recorder", None)
        return {**(recorder.stats() if recorder else {"entries": 0, "bytes": 0, "hooks": 0}), **_memory_peak(reset_peak)}

    def innerguard_record_stop(self) -> dict[str, Any]:
        """Remove the recording hooks and drop whatever was not taken."""
        recorder = getattr(self, "_innerguard_recorder", None)
        if recorder is None:
            return {"dropped": 0}
        recorder.uninstall()
        self._innerguard_recorder = None
        return {"dropped": len(recorder.entries), **recorder.stats()}

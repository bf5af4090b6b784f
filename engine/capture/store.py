"""Captures on disk: safetensors shards, ``manifest.json`` and the input
rows (``requests.jsonl``), and what a caller gets back: ``CaptureResult``.

    DIR/manifest.json          format, model, spec, layers, requests (input order)
    DIR/requests.jsonl         the input rows, verbatim, in input order
    DIR/shard-00000.safetensors ...   one shard per transfer from the worker

A manifest request entry: ``id``, ``index`` (input position),
``num_prompt_tokens``, ``num_generated_tokens``, ``num_rows``,
``prompt_sha256`` (over the token ids), ``messages`` ([role, start, end]
token spans of a chat rendering; a chat row may end with an assistant
message, whose tokens are then prompt tokens, so ``all_tokens`` captures
the residual stream over a given answer, as steering vectors from
contrastive answers need), ``shard`` and ``tensors`` (logical name ->
tensor key: ``hidden`` [layers, rows, hidden] in the manifest's layer
order, ``positions`` [rows], ``q.L`` [rows, heads, head_dim], ``k.L``
[k_rows, kv_heads, head_dim], ``k_positions`` [k_rows]), ``error``.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from innerguard.engine.errors import InnerguardError

FORMAT = "innerguard.capture/v1"
MANIFEST = "manifest.json"
REQUESTS = "requests.jsonl"


class CaptureStoreError(InnerguardError):
    pass


@dataclass
class CaptureResult:
    """One request's captured tensors (input order; ``error`` if it failed)."""

    id: str
    index: int
    num_prompt_tokens: int
    num_generated_tokens: int
    layers: tuple[int, ...]
    positions: torch.Tensor  # absolute position of each kept row
    hidden: torch.Tensor | None = None  # [len(layers), rows, hidden]
    q: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [rows, len(heads), d]
    k: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [k_rows, len(kv_heads), d]
    k_positions: torch.Tensor | None = None
    heads: dict[int, tuple[int, ...]] = field(default_factory=dict)
    kv_heads: dict[int, tuple[int, ...]] = field(default_factory=dict)
    error: str | None = None
    latency_s: float | None = None
    messages: tuple[tuple[str, int, int], ...] = ()  # chat rows: (role, start, end) content token spans
    attention_scale: dict[int, float] = field(default_factory=dict)  # layer -> the attention module's softmax scale

    def residual(self, layer: int, position: int = -1) -> torch.Tensor:
        """The residual stream after ``layer`` at absolute ``position``
        (-1: the last prompt token)."""
        if self.hidden is None or layer not in self.layers:
            raise KeyError(f"layer {layer} was not captured (captured: {list(self.layers)})")
        row = self._row(self.positions, self.num_prompt_tokens - 1 if position == -1 else position)
        return self.hidden[self.layers.index(layer), row]

    def query(self, layer: int, position: int = -1) -> torch.Tensor:
        """Q of the captured heads at ``position``: ``[len(heads), d]``."""
        if layer not in self.q:
            raise KeyError(f"Q of layer {layer} was not captured")
        return self.q[layer][self._row(self.positions, self.num_prompt_tokens - 1 if position == -1 else position)]

    def prompt_keys(self, layer: int) -> torch.Tensor:
        """K of every prompt token: ``[num_prompt_tokens, len(kv_heads), d]``."""
        if layer not in self.k or self.k_positions is None:
            raise KeyError(f"K of layer {layer} was not captured")
        pos = self.k_positions
        n = self.num_prompt_tokens
        if pos.numel() < n or not torch.equal(pos[:n], torch.arange(n)):
            raise ValueError(f"K of layer {layer} does not cover prompt positions 0..{n - 1}")
        return self.k[layer][:n]

    @staticmethod
    def _row(positions: torch.Tensor, position: int) -> int:
        hits = (positions == position).nonzero()
        if not hits.numel():
            raise KeyError(f"position {position} was not captured")
        return int(hits[0, 0])


def prompt_digest(token_ids) -> str:
    return hashlib.sha256(json.dumps([int(t) for t in token_ids], separators=(",", ":")).encode()).hexdigest()


def result_from(entry: dict[str, Any], tensors: dict[str, torch.Tensor], manifest: dict[str, Any]) -> CaptureResult:
    """A ``CaptureResult`` from a manifest entry and its tensors (by key)."""
    names = entry.get("tensors") or {}
    qk = {int(c["layer"]): c for c in manifest.get("qk", ())}
    get = lambda name: tensors[names[name]] if name in names else None  # noqa: E731
    return CaptureResult(
        id=entry["id"],
        index=entry["index"],
        num_prompt_tokens=entry.get("num_prompt_tokens") or 0,
        num_generated_tokens=entry.get("num_generated_tokens") or 0,
        layers=tuple(manifest["layers"]),
        positions=get("positions") if "positions" in names else torch.zeros(0, dtype=torch.int64),
        hidden=get("hidden"),
        q={int(n[2:]): tensors[k] for n, k in names.items() if n.startswith("q.")},
        k={int(n[2:]): tensors[k] for n, k in names.items() if n.startswith("k.")},
        k_positions=get("k_positions"),
        heads={layer: tuple(c["heads"]) for layer, c in qk.items()},
        kv_heads={layer: tuple(c["kv_heads"]) for layer, c in qk.items()},
        error=entry.get("error"),
        latency_s=entry.get("latency_s"),
        messages=tuple((str(role), int(start), int(end)) for role, start, end in entry.get("messages") or ()),
        attention_scale={int(k): float(v) for k, v in (manifest.get("attention_scale") or {}).items() if v is not None},
    )


class CaptureSet:
    """A capture folder, read lazily: ``len``, iteration in input order,
    ``load(i)``; ``rows`` are the input rows."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        try:
            self.manifest = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            raise CaptureStoreError(f"{path}: no capture manifest here", hint="run innerguard capture --output DIR first") from None
        except ValueError as exc:
            raise CaptureStoreError(f"{path}: not valid JSON ({exc})") from None
        if self.manifest.get("format") != FORMAT:
            raise CaptureStoreError(f"{path}: format {self.manifest.get('format')!r}, expected {FORMAT!r}")
        self.requests: list[dict[str, Any]] = self.manifest["requests"]
        self._rows: list[dict[str, Any]] | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            path = self.folder / self.manifest.get("requests_file", REQUESTS)
            with open(path, encoding="utf-8") as f:
                self._rows = [json.loads(line) for line in f if line.strip()]
        return self._rows

    def __len__(self) -> int:
        return len(self.requests)

    def load(self, i: int) -> CaptureResult:
        from safetensors import safe_open

        entry = self.requests[i]
        tensors = {}
        if entry.get("shard"):
            with safe_open(str(self.folder / entry["shard"]), framework="pt") as f:
                for key in (entry.get("tensors") or {}).values():
                    tensors[key] = f.get_tensor(key)
        return result_from(entry, tensors, self.manifest)

    def __iter__(self) -> Iterator[CaptureResult]:
        for i in range(len(self)):
            yield self.load(i)

    def tensor_bytes(self) -> int:
        return sum((self.folder / s["file"]).stat().st_size for s in self.manifest.get("shards", ()))


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), "utf-8")
    os.replace(tmp, path)

"""The reranker's content-free calibration pass, inside the worker.

The engine sends it just before the request it calibrates, with the same
cache salt: the documents before the query are computed once, by this pass,
and vLLM's prefix cache serves them to the real request. So this pass keeps
what the real request cannot see for itself: K of the shared prefix, and the
"N/A" query's attention over every token. An entry whose request never comes
expires after a TTL.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import torch

from innerguard.hooks.analyzers import reranker
from innerguard.hooks.analyzers.attention import HeadGeometry

MAX_PENDING = 256  # calibrations whose request has not arrived yet
DEFAULT_TTL_S = 300.0


def geometry_of(plan) -> HeadGeometry:
    return HeadGeometry(num_heads=plan.model.num_heads, num_kv_heads=plan.model.num_kv_heads, head_dim=plan.model.head_dim)


def query_token_attention(spec, state, geometry, modules) -> torch.Tensor:
    """Attention every prompt token receives from the request's query tokens
    (summed over the signal's heads, mean over query tokens): ``[T]``."""
    heads = [(int(l), int(h)) for l, h in spec.params["heads"]]
    layers = sorted({l for l, _ in heads})
    start, end = state.query_span
    captures = state.captures
    q = {l: torch.cat(captures.q_query[l]) for l in layers}
    k = {l: captures.keys(l) for l in layers}
    for l in layers:
        if k[l].shape[0] != state.num_prompt_tokens or q[l].shape[0] != end - start:
            raise RuntimeError(
                f"layer {l}: captured K of {k[l].shape[0]}/{state.num_prompt_tokens} prompt tokens and Q of "
                f"{q[l].shape[0]}/{end - start} query tokens"
            )
    return reranker.token_attention(q, k, list(range(start, end)), heads, geometry, modules.attention_scale(layers[0]))


class CalibrationStore:
    def __init__(self, ttl_s: float = DEFAULT_TTL_S):
        self.ttl_s = ttl_s
        self._pending: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def record(self, state, plan, analyzers, modules) -> None:
        """Called when a calibration pass has read its whole prompt."""
        geometry = geometry_of(plan)
        entry: dict[str, Any] = {"scores": {}, "errors": {}, "k": {}, "at": time.monotonic()}
        for signal in state.args.get("rerank") or {}:
            try:
                if state.error:
                    raise RuntimeError(state.error)
                entry["scores"][signal] = query_token_attention(analyzers[signal], state, geometry, modules)
            except Exception as exc:  # the real request reports it
                entry["errors"][signal] = f"calibration pass failed: {type(exc).__name__}: {exc}"
        end = state.query_span[0] if state.query_span else 0
        if not state.error and state.captures.start == 0:
            entry["k"] = {l: state.captures.keys(l)[:end] for l, chunks in state.captures.k.items() if chunks}
        self._pending[state.args["calibration_for"]] = entry
        self._pending.move_to_end(state.args["calibration_for"])
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)

    def prefix(self, key: str, layers, length: int) -> dict[int, torch.Tensor] | None:
        """K of the first ``length`` prompt tokens, if the calibration pass of
        request ``key`` captured them at every layer in ``layers``."""
        entry = self._pending.get(key)
        if entry is None or any(entry["k"].get(l) is None or entry["k"][l].shape[0] < length for l in layers):
            return None
        return {l: entry["k"][l] for l in layers}

    def take(self, key: str) -> dict[str, Any] | None:
        return self._pending.pop(key, None)

    def expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_s
        while self._pending and next(iter(self._pending.values()))["at"] < cutoff:
            self._pending.popitem(last=False)

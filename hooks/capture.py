"""Capture hooks: post-RoPE Q/K at each attention input and the residual
stream after a decoder layer, kept per request until it is decided.

Captures are positional: they hold K for prompt positions ``[start, end)``.
A recompute after preemption restarts below ``end``, and what is held from
there on is dropped before it is captured again, so a request decides on
exactly one copy of its prompt.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


class CaptureGap(RuntimeError):
    pass


@dataclass(eq=False)
class Captures:
    start: int | None = None  # first prompt position whose K is held
    end: int = 0  # one past the last
    query_start: int = 0  # the reranker's first query position
    k: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    q_last: dict[int, torch.Tensor] = field(default_factory=dict)
    q_query: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    residual_last: dict[int, torch.Tensor] = field(default_factory=dict)
    token_scores: dict[str, torch.Tensor] = field(default_factory=dict)  # token_probe signal -> [prompt tokens]
    first_computed: int | None = None  # the first prompt position this request computed itself
    scores_filled: bool = False  # token scores of the positions before it came from the cache

    def seek(self, position: int, end: int) -> None:
        """This step computes prompt positions ``[position, end)``."""
        if self.start is None or position <= self.start:
            self.clear()
            self.start = self.first_computed = position
        elif position < self.end:  # recomputed after preemption
            self.k = _truncate(self.k, position - self.start)
            self.q_query = _truncate(self.q_query, max(position - self.query_start, 0))
            for scores in self.token_scores.values():
                scores[position:] = 0
        elif position > self.end:
            raise CaptureGap(f"prompt positions {self.end}..{position} were never computed by this request")
        self.end = end

    def keys(self, layer: int) -> torch.Tensor:
        chunks = self.k[layer]
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks)

    def prepend(self, prefix: dict[int, torch.Tensor]) -> None:
        """K of positions ``[0, start)``, computed by another pass of the same prompt."""
        for layer, keys in prefix.items():
            self.k[layer] = [keys[: self.start], *self.k.get(layer, [])]
        self.start = 0

    def clear(self) -> None:
        self.start, self.end, self.first_computed, self.scores_filled = None, 0, None, False
        self.k, self.q_last, self.q_query, self.residual_last, self.token_scores = {}, {}, {}, {}, {}


def _truncate(chunks: dict[int, list[torch.Tensor]], rows: int) -> dict[int, list[torch.Tensor]]:
    return {layer: [torch.cat(c)[:rows]] for layer, c in chunks.items() if c}


def qk_hook(runtime, layer: int):
    """At the attention point of ``layer``: post-RoPE K of the step's prompt
    rows and Q of its last prompt tokens, for every capturing request at once
    (two gathers per layer, not two copies per request: on a GPU each copy
    is a kernel launch)."""

    def capture_qk(q, k):
        runtime.hook_calls[f"qk.{layer}"] += 1
        capturing = [r for r in runtime.rows if layer in r.state.qk_layers and r.state.capturing]
        if not capturing:
            return
        k_rows, q_rows = [], []
        for rows in capturing:
            a, b = rows.prompt_rows
            if not (0 <= a <= b <= k.shape[0]) or (rows.last_row is not None and not 0 <= rows.last_row < q.shape[0]):
                rows.state.fail(f"capture at layer {layer} failed: rows {a}..{b} (last {rows.last_row}) "
                                f"outside the step's {k.shape[0]}")
                continue
            if b > a:
                k_rows.append((rows, a, b))
            if rows.last_row is not None:
                q_rows.append(rows)
        if k_rows:
            keys = k.index_select(0, runtime.step_index(tuple((a, b) for _, a, b in k_rows), k.device))
            for (rows, a, b), part in zip(k_rows, keys.split([b - a for _, a, b in k_rows])):
                # A prompt that goes on in a later step keeps its own copy, not the whole step's gather.
                rows.state.captures.k.setdefault(layer, []).append(part if rows.last_row is not None else part.clone())
        if q_rows:
            last = q.index_select(0, runtime.step_index(tuple((r.last_row, r.last_row + 1) for r in q_rows), q.device))
            for rows, row in zip(q_rows, last):
                rows.state.captures.q_last[layer] = row
        for rows in capturing:
            qa, qb = rows.query_rows
            if qb > qa and rows.state.capturing:
                rows.state.captures.q_query.setdefault(layer, []).append(q[qa:qb].detach().clone())

    return runtime.contained(f"qk.{layer}", capture_qk)


def residual_hook(runtime, layer: int):
    """At the layer point of ``layer``: the stream is vLLM's hidden + residual."""

    def capture_residual(hidden, residual):
        runtime.hook_calls[f"residual.{layer}"] += 1
        for rows in runtime.rows:
            state = rows.state
            if rows.last_row is None or layer not in state.residual_layers or not state.capturing:
                continue
            try:
                r = rows.last_row
                state.captures.residual_last[layer] = (hidden[r] + residual[r]).detach().clone()
            except Exception as exc:
                state.fail(f"residual capture at layer {layer} failed: {type(exc).__name__}: {exc}")

    return runtime.contained(f"residual.{layer}", capture_residual)


def token_probe_hook(runtime, layer: int):
    """At the layer point of ``layer``: each token-level probe's share of its
    prompt tokens' scores, ``w_layer · (hidden + residual)``, added up over
    its layers (analyzers/token_probe.py). Only the scores are kept. Rows
    a decided request recomputes (``rescoring``) are scored too: the prefix
    cache keeps their blocks (token_score_cache.py)."""

    def score_tokens(hidden, residual):
        runtime.hook_calls[f"tokens.{layer}"] += 1
        wanted = []
        for rows in runtime.rows:
            state = rows.state
            a, b = rows.prompt_rows
            if b > a and layer in state.token_layers and (state.capturing or rows.rescoring):
                wanted.append(rows)
        if not wanted:
            return
        # One projection per probe over the rows from the first to the last
        # that want it (rows between them are projected too: a slice costs
        # no gather), then a slice per request: per request and probe, four
        # kernels became one, and on a GPU each launch is host time.
        lo = min(rows.prompt_rows[0] for rows in wanted)
        hi = max(rows.prompt_rows[1] for rows in wanted)
        projected: dict[str, torch.Tensor] = {}
        try:
            stream = (hidden[lo:hi] + residual[lo:hi]).float()
            for signal in {signal for rows in wanted for signal in rows.state.token_probes}:
                weight = runtime.token_weights.get((signal, layer))
                if weight is not None:
                    projected[signal] = stream @ weight
        except Exception as exc:
            for rows in wanted:
                rows.state.fail(f"token scores at layer {layer} failed: {type(exc).__name__}: {exc}")
            return
        for rows in wanted:
            state = rows.state
            a, b = rows.prompt_rows
            try:
                position = rows.span.first_position + (a - rows.span.start)
                for signal in state.token_probes:
                    values = projected.get(signal)
                    if values is None:
                        continue
                    scores = state.captures.token_scores.get(signal)
                    if scores is None:
                        scores = state.captures.token_scores[signal] = values.new_zeros(state.num_prompt_tokens)
                    scores[position:position + (b - a)] += values[a - lo:b - lo]
            except Exception as exc:
                state.fail(f"token scores at layer {layer} failed: {type(exc).__name__}: {exc}")

    return runtime.contained(f"tokens.{layer}", score_tokens)

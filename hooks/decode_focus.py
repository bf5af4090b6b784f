"""Attention trackers on the generated tokens, a step's requests at once.

At the attention point of each layer a tracker reads, every generated token
of the step gets its heads' shares toward the tracker's span
(analyzers/attention_tracker.py), against its own prompt's span keys (kept
by ``DecodeProbes.keep_span_keys``). Per request that is a handful of small
kernels per layer, and on a 2-core CPU a step of 16 decoding requests spent
a fifth of its time launching them. So the requests that decode one token
this step are read together: their span keys, zero-padded to the longest,
form one ``[requests, heads, keys, d]`` tensor per layer (kept while the
same requests decode, rebuilt when one joins or leaves), and one batched
product gives every share. A request that reads several tokens in one step
(a teacher-forced answer, a recompute) is read on its own. The layers'
shares add up in one ``[rows]`` accumulator per tracker, which goes to the
host with the step's other scores (decode_probes.StepScores).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from innerguard.hooks.analyzers import attention_tracker


@dataclass(eq=False)
class _Padded:
    """One layer's span keys of a set of requests, zero-padded, in the form
    the batched product reads (a handful of kernels per layer and step)."""

    members: tuple  # each member's DecodeProbes, in order (held: an id could be reused)
    # [groups * per_group]: the query head of each place, KV group by KV
    # group (device, long); a group with fewer chosen heads repeats one
    heads: torch.Tensor
    real: torch.Tensor  # [groups, per_group]: 1.0 at a chosen head's place, 0.0 at a repeat
    keys: torch.Tensor  # [members, groups, d, longest]: K transposed, in the cache's dtype (SpanKeys.keys)
    padding: torch.Tensor  # [members, 1, 1, longest]: 0 at a span token, -inf past a member's own
    toward: torch.Tensor  # [members, 1, longest, 1]: 1.0 at a token of the span the share goes toward


@dataclass(eq=False)
class StepReaders:
    """The step's requests whose one generated token a tracker reads together."""

    members: list  # Rows, in order
    row_index: torch.Tensor  # each member's generated row in the step (long; moved to the device at first use)
    values: torch.Tensor | None = None  # [members]: the values added up over the layers so far

    @classmethod
    def of(cls, grouped: dict[str, list]) -> dict[str, "StepReaders"]:
        """Each signal's members (Rows), their generated rows as one index."""
        return {signal: cls(members, torch.tensor([m.generated_rows[0] for m in members], dtype=torch.long))
                for signal, members in grouped.items()}


@dataclass(eq=False)
class FocusStep:
    """One step's generated-token attention trackers."""

    geometry: Any
    batched: dict[str, StepReaders] = field(default_factory=dict)  # signal -> the one-token readers
    single: list = field(default_factory=list)  # Rows read one by one (several tokens this step)

    @classmethod
    def collect(cls, rows, geometry) -> "FocusStep":
        step = cls(geometry)
        grouped: dict[str, list] = {}
        for r in rows:
            decode = r.state.decode
            a, b = r.generated_rows
            if decode is None or b <= a or not decode.focus or r.state.error is not None:
                continue
            if b - a == 1 and decode.error is None and _complete(decode):
                for signal in decode.focus:
                    grouped.setdefault(signal, []).append(r)
            else:
                step.single.append(r)
        step.batched = StepReaders.of(grouped)
        return step

    def read(self, layer: int, query: torch.Tensor, scale: float, cache: dict) -> None:
        """The shares of ``layer``'s heads for every reader of this step."""
        for signal, readers in self.batched.items():
            focus = readers.members[0].state.decode.focus[signal]
            if layer not in focus.heads:
                continue
            try:
                padded = _padded(cache, signal, layer, readers.members)
                if readers.row_index.device != query.device:
                    readers.row_index = readers.row_index.to(query.device, non_blocking=True)
                shares = _batched_shares(query.index_select(0, readers.row_index), padded, self.geometry, scale)
                readers.values = shares if readers.values is None else readers.values + shares
            except Exception as exc:
                for r in readers.members:
                    r.state.fail(f"generated-token attention at layer {layer} failed: {type(exc).__name__}: {exc}")
        for r in self.single:
            decode = r.state.decode
            a, b = r.generated_rows
            try:
                # A teacher-forced answer is read in the prompt's own steps,
                # before its decision: the captures hold its span keys up to this layer.
                decode.keep_span_keys(r.state, self.geometry, layer)
                for signal, focus in decode.focus.items():
                    if layer in focus.heads:
                        shares = attention_tracker.generated_shares(query[a:b], decode.span_keys[signal][layer],
                                                                    self.geometry, scale)
                        decode.add(signal, r.generated_first, shares / focus.num_heads)
            except Exception as exc:
                r.state.fail(f"generated-token attention at layer {layer} failed: {type(exc).__name__}: {exc}")


def _complete(decode) -> bool:
    """Whether ``decode`` holds its span keys at every layer its trackers read."""
    kept = decode.span_keys
    return kept is not None and all(len(kept.get(s, ())) == len(f.heads) for s, f in decode.focus.items())


def _padded(cache: dict, signal: str, layer: int, members) -> _Padded:
    """The members' span keys at ``layer``, padded: kept in ``cache`` while
    the same requests decode together."""
    decodes = tuple(m.state.decode for m in members)
    kept = cache.get((signal, layer))
    if kept is not None and len(kept.members) == len(decodes) and all(a is b for a, b in zip(kept.members, decodes)):
        return kept
    cache.pop((signal, layer), None)  # the old members' copy goes before the new one is made
    spans = [m.state.decode.span_keys[signal][layer] for m in members]
    lengths = np.array([s.keys.shape[1] for s in spans], dtype=np.int64)
    longest, first = max(1, int(lengths.max())), spans[0].keys
    # One concatenation and one scatter for the whole set: a GPU step of
    # hundreds of requests would otherwise launch a copy per request and layer.
    starts = np.cumsum(lengths) - lengths
    dest = np.repeat(np.arange(len(spans)) * longest - starts, lengths) + np.arange(int(lengths.sum()))
    keys = first.new_zeros(len(spans) * longest, first.shape[0], first.shape[2])
    keys.index_copy_(0, torch.from_numpy(dest).to(first.device, non_blocking=True),
                     torch.cat([s.keys.transpose(0, 1) for s in spans]))
    positions = torch.arange(longest)
    # A prompt with no span token reads its one zero key: weight 1 on a
    # token of neither span, share 0 (as generated_shares).
    padding = torch.where(positions < torch.from_numpy(np.maximum(lengths, 1))[:, None], 0.0, float("-inf"))
    toward = (positions < torch.tensor([s.toward for s in spans])[:, None]).float()
    m, groups, d = len(spans), first.shape[0], first.shape[2]
    # Each KV group's chosen heads read its one copy of the keys in one product.
    places = [[i for i, kv in enumerate(spans[0].kv) if kv == group] for group in range(groups)]
    per_group = max(len(p) for p in places)
    heads = torch.tensor([p[min(j, len(p) - 1)] for p in places for j in range(per_group)])
    real = torch.tensor([[float(j < len(p)) for j in range(per_group)] for p in places])
    padded = _Padded(decodes, spans[0].heads.index_select(0, heads.to(first.device, non_blocking=True)),
                     real.to(first.device, non_blocking=True),
                     keys.view(m, longest, groups, d).permute(0, 2, 3, 1).contiguous(),
                     padding.view(m, 1, 1, longest).to(first.device, non_blocking=True),
                     toward.view(m, 1, longest, 1).to(first.device, non_blocking=True))
    cache[(signal, layer)] = padded
    return padded


def _batched_shares(rows: torch.Tensor, padded: _Padded, geometry, scale: float) -> torch.Tensor:
    """Per member (one query row each), the sum over the layer's heads of
    each head's share toward the span: float32 ``[members]``."""
    h, d = geometry.num_heads, geometry.head_dim
    m, (groups, per_group) = rows.shape[0], padded.real.shape
    q = rows.float().view(m, h, d).index_select(1, padded.heads).view(m, groups, per_group, d) * scale
    # The logits in float32 (as generated_head_shares); on a GPU the upcast
    # keys live for this layer's product only.
    weights = torch.softmax(q @ padded.keys.float() + padded.padding, dim=-1)  # [m, groups, per_group, longest]
    shares = (weights @ padded.toward).squeeze(-1)  # [m, groups, per_group]
    return (shares * padded.real).sum(dim=(1, 2))


def generated_focus_hook(runtime, layer: int, geometry):
    """At the attention point of ``layer``: the step's generated-token
    attention trackers that read it (their ``FocusStep``, made at the first
    such layer of the step)."""
    scale = float(runtime.modules.attention_scale(layer))

    def read_generated(query, key):
        runtime.hook_calls[f"focus.{layer}"] += 1
        if runtime.focus_step is None:
            runtime.focus_step = FocusStep.collect(runtime.rows, geometry)
            # Padded keys no request of this step reads would hold the span
            # keys of finished requests until the plan is uninstalled.
            for stale in [k for k in runtime.focus_keys if k[0] not in runtime.focus_step.batched]:
                del runtime.focus_keys[stale]
        runtime.focus_step.read(layer, query, scale, runtime.focus_keys)

    return runtime.contained(f"focus.{layer}", read_generated)

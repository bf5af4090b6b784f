"""Attention Tracker focus score (Hung et al., "Attention Tracker: Detecting
Prompt Injection Attacks in LLMs", NAACL 2025 Findings).

At the last prompt token, a few "important heads" put most of their attention
on the trusted instruction; an injected instruction in the data pulls it
away (the "distraction effect"). For each chosen (layer, head):

    a_inst = Σ attention on instruction tokens
    a_data = Σ attention on data tokens
    ratio  = a_inst / (a_inst + a_data)

and the focus score is the mean ratio over the chosen heads: near 1 means
the model is still attending to its instruction; low means distraction.
Tokens in neither span (template markers, BOS, the generation prompt) are
left out of both sums, so attention sinks do not dilute the ratio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from innerguard.hooks.analyzers.attention import Geometry, check_width, kv_heads_of
from innerguard.hooks.analyzers.spans import Spans, span_mask


MAX_BATCH_TOKENS = 32768  # prompts × padded length per gather: bounds the float32 copy of K


@dataclass(frozen=True)
class FocusInputs:
    """One prompt's captures and spans, checked (:func:`focus_inputs`)."""

    q_last: Mapping[int, torch.Tensor]  # layer -> post-RoPE Q of the last prompt token [H*d]
    k: Mapping[int, torch.Tensor]  # layer -> post-RoPE K of all prompt tokens [T, H_kv*d]
    masks: torch.Tensor  # host [T, 2]: (instruction, data) per token
    length: int


def focus_inputs(
    q_last_by_layer: Mapping[int, torch.Tensor],
    k_by_layer: Mapping[int, torch.Tensor],
    heads: Sequence[tuple[int, int]],
    instruction: Spans,
    data: Spans,
    geometry: Geometry,
) -> FocusInputs:
    """Check one prompt's inputs on host values only: on a GPU a check that
    read a device value would wait for the whole queue."""
    if not heads:
        raise ValueError("no heads chosen")
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    layers = sorted({layer for layer, _ in heads})
    for layer, head in heads:
        if not 0 <= head < h:
            raise ValueError(f"head index out of range 0..{h - 1}: {head} (layer {layer})")
    length = k_by_layer[layers[0]].shape[0]
    for layer in layers:
        check_width(f"K of layer {layer}", k_by_layer[layer], h_kv, d, rows=length)
        q = q_last_by_layer[layer]
        if q.numel() != h * d or q.shape[-1] != h * d:
            raise ValueError(f"Q of layer {layer} must be [1, {h}*{d}] (post-RoPE, flattened heads); got {tuple(q.shape)}")
    masks = _range_masks(instruction, data, length)
    if masks is None:  # spans given as indices or masks
        inst, dat = span_mask(instruction, length), span_mask(data, length)
        if not inst.any() or not dat.any():
            raise ValueError("the instruction and the data spans must each cover at least one token")
        if (inst & dat).any():
            raise ValueError("the instruction and the data spans overlap")
        masks = torch.stack([inst, dat], dim=1)
    return FocusInputs({l: q_last_by_layer[l] for l in layers}, {l: k_by_layer[l] for l in layers}, masks, length)


def _range_masks(instruction: Spans, data: Spans, length: int) -> torch.Tensor | None:
    """The ``[length, 2]`` masks of two lists of (start, end) ranges, checked
    as :func:`span_mask` would, in numpy: a decision step builds one per
    request, and a handful of torch calls each would cost more than the
    batched analysis itself. None for spans of another form."""
    if isinstance(instruction, torch.Tensor) or isinstance(data, torch.Tensor):
        return None
    if not all(isinstance(r, (tuple, list)) and len(r) == 2 for r in (*instruction, *data)):
        return None
    masks = np.zeros((length, 2), dtype=bool)
    for column, spans in enumerate((instruction, data)):
        for start, end in spans:
            if not 0 <= start <= end <= length:
                raise ValueError(f"span ({start}, {end}) is outside 0..{length}")
            masks[start:end, column] = True
    if not masks.any(axis=0).all():
        raise ValueError("the instruction and the data spans must each cover at least one token")
    if masks.all(axis=1).any():
        raise ValueError("the instruction and the data spans overlap")
    return torch.from_numpy(masks)


def head_focus_batch(items: Sequence[FocusInputs], heads: Sequence[tuple[int, int]], geometry: Geometry,
                     scale: float) -> torch.Tensor:
    """Per prompt and head, the ratio a_inst / (a_inst + a_data): float32
    ``[len(items), len(heads)]`` on the captures' device.

    Every head of every layer of every prompt in a few batched tensor ops
    (prompts padded to the longest; padding gets no attention), so a step
    that decides many requests launches a few kernels, not a few per request.
    """
    out = [_head_focus(group, heads, geometry, scale) for group in _token_bounded(items)]
    return torch.cat(out) if len(out) > 1 else out[0]


def _token_bounded(items: Sequence[FocusInputs]):
    """Consecutive groups of ``items`` (in order) of at most MAX_BATCH_TOKENS padded tokens."""
    group, longest = [], 0
    for item in items:
        if group and (len(group) + 1) * max(longest, item.length) > MAX_BATCH_TOKENS:
            yield group
            group, longest = [], 0
        group.append(item)
        longest = max(longest, item.length)
    if group:
        yield group


def _head_focus(items, heads, geometry: Geometry, scale: float) -> torch.Tensor:
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    layers = sorted({layer for layer, _ in heads})
    row = {layer: i for i, layer in enumerate(layers)}
    first = items[0].k[layers[0]]
    device, n, longest = first.device, len(items), max(it.length for it in items)
    at_layer = torch.tensor([row[layer] for layer, _ in heads], device=device)
    head = torch.tensor([hd for _, hd in heads], device=device)
    kv_head = kv_heads_of(head, geometry)
    # [n, L, H, d] and [n, T, L, H_kv, d], zero-padded past each prompt.
    q = torch.stack([it.q_last[layer].reshape(-1) for it in items for layer in layers]).view(n, len(layers), h, d)
    k = torch.nn.utils.rnn.pad_sequence(
        [torch.stack([it.k[layer] for layer in layers], dim=1) for it in items], batch_first=True
    ).view(n, longest, len(layers), h_kv, d)
    masks = np.zeros((n, longest, 2), dtype=np.float32)
    for i, it in enumerate(items):
        masks[i, : it.length] = it.masks.cpu().numpy()
    lengths = torch.tensor([it.length for it in items])
    padded = (torch.arange(longest).unsqueeze(0) >= lengths.unsqueeze(1)).to(device)  # [n, T]
    # Upcast: bf16 logits lose the small weights that attention ratios sum.
    q_sel = q[:, at_layer, head].float()  # [n, heads, d]
    k_sel = k[:, :, at_layer, kv_head].float()  # [n, T, heads, d]
    # The last prompt token sees every prompt token: no causal mask.
    logits = torch.einsum("nhd,nthd->nht", q_sel, k_sel) * scale
    weights = torch.softmax(logits.masked_fill(padded.unsqueeze(1), float("-inf")), dim=-1)
    mass = weights @ torch.from_numpy(masks).to(device)  # [n, heads, 2]: (a_inst, a_data)
    return mass[..., 0] / (mass[..., 0] + mass[..., 1]).clamp_min(torch.finfo(torch.float32).tiny)


def head_focus(
    q_last_by_layer: Mapping[int, torch.Tensor],
    k_by_layer: Mapping[int, torch.Tensor],
    heads: Sequence[tuple[int, int]],
    instruction: Spans,
    data: Spans,
    geometry: Geometry,
    scale: float,
) -> torch.Tensor:
    """Per-head ratio a_inst / (a_inst + a_data), float32 ``[len(heads)]`` in
    the order of ``heads``.

    q_last_by_layer: layer -> post-RoPE Q of the last prompt token ``[H*d]``.
    k_by_layer: layer -> post-RoPE K of all prompt tokens ``[T, H_kv*d]``.
    heads: (layer, query head) pairs.
    """
    inputs = focus_inputs(q_last_by_layer, k_by_layer, heads, instruction, data, geometry)
    return head_focus_batch([inputs], heads, geometry, scale)[0]


def focus_score(
    q_last_by_layer: Mapping[int, torch.Tensor],
    k_by_layer: Mapping[int, torch.Tensor],
    heads: Sequence[tuple[int, int]],
    instruction: Spans,
    data: Spans,
    geometry: Geometry,
    scale: float,
) -> float:
    """Mean over ``heads`` of :func:`head_focus`; a python float in [0, 1]."""
    return float(head_focus(q_last_by_layer, k_by_layer, heads, instruction, data, geometry, scale).mean())



# -- on the generated tokens (span: generated) ---------------------------------
#
# A generated token's share of its span attention that goes toward one span:
# a_toward / (a_trusted + a_untrusted), per head. The softmax's denominator
# (every key the token sees: template markers, the tokens generated so far)
# is common to both sums and cancels, so only the prompt's span keys are
# needed, kept once per completion, never the generated tokens' K.


@dataclass(frozen=True)
class SpanKeys:
    """One layer's post-RoPE K of a prompt's span tokens, for that layer's
    chosen heads: the tokens of the span the share goes toward first."""

    heads: torch.Tensor  # [h] query heads (long, on the keys' device)
    # [g, S, d]: the K of each KV head a chosen head reads, at the span
    # tokens, in the cache's dtype. Kept for every decoding request, outside
    # vLLM's KV budget: chosen heads of one KV group (grouped-query
    # attention) share one copy, and bf16 on a GPU is half the memory of
    # float32 (upcasting where it is read loses nothing, since the cache
    # holds bf16 anyway). Reading these keys is most of a decode step's
    # tracker cost, so a copy per query head was read up to group-size times.
    keys: torch.Tensor
    kv: tuple[int, ...]  # each chosen head's row of ``keys``
    toward: int  # the first ``toward`` of the S tokens are the span the share goes to


def span_keys(
    k: torch.Tensor, heads: Sequence[int], toward: Sequence[tuple[int, int]], other: Sequence[tuple[int, int]],
    geometry: Geometry,
) -> SpanKeys:
    """``k``: K of the prompt ``[T, H_kv*d]``; ``toward`` / ``other``: the
    two spans' token ranges (half-open)."""
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    check_width("K", k, h_kv, d)
    for start, end in (*toward, *other):
        if not 0 <= start <= end <= k.shape[0]:
            raise ValueError(f"span ({start}, {end}) is outside the {k.shape[0]} prompt tokens captured")
    if any(not 0 <= head < h for head in heads):
        raise ValueError(f"head index out of range 0..{h - 1}: {list(heads)}")
    positions = [p for start, end in (*toward, *other) for p in range(start, end)]
    if len(set(positions)) != len(positions):
        raise ValueError("the trusted and the untrusted spans overlap")
    head_index = torch.tensor(list(heads), dtype=torch.long)
    read = [int(kv_heads_of(head, geometry)) for head in heads]
    distinct = sorted(set(read))
    index = torch.tensor(positions, dtype=torch.long).to(k.device, non_blocking=True)
    picked = k.index_select(0, index).view(len(positions), h_kv, d)
    keys = picked.index_select(1, torch.tensor(distinct).to(k.device)).transpose(0, 1).contiguous()
    return SpanKeys(head_index.to(k.device), keys, tuple(distinct.index(kv) for kv in read),
                    sum(end - start for start, end in toward))


def generated_head_shares(q: torch.Tensor, span: SpanKeys, geometry: Geometry, scale: float) -> torch.Tensor:
    """Per query row (``q``: post-RoPE Q ``[n, H*d]`` of generated tokens)
    and head of ``span.heads``, the head's share toward the span: float32
    ``[n, h]``. A prompt with no token in that span gives 0, one with no
    token in the other gives 1."""
    h, d = geometry.num_heads, geometry.head_dim
    check_width("q", q, h, d)
    rows = q.shape[0]
    if span.toward == 0:
        return q.new_zeros(rows, span.heads.numel(), dtype=torch.float32)
    q_heads = q.float().view(rows, h, d).index_select(1, span.heads)  # [n, h, d]
    # In float32: bf16 logits lose the small weights that attention ratios sum.
    keys = span.keys.float().index_select(0, torch.tensor(span.kv).to(span.keys.device))  # [h, S, d]
    logits = torch.einsum("nhd,hsd->nhs", q_heads, keys) * scale
    return torch.exp(torch.logsumexp(logits[..., : span.toward], dim=-1) - torch.logsumexp(logits, dim=-1))


def generated_shares(q: torch.Tensor, span: SpanKeys, geometry: Geometry, scale: float) -> torch.Tensor:
    """Per query row, the sum of :func:`generated_head_shares` over the heads: float32 ``[n]``."""
    return generated_head_shares(q, span, geometry, scale).sum(dim=-1)

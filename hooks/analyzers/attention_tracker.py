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

from collections import defaultdict
from typing import Mapping, Sequence

import torch

from .attention import Geometry, attention_rows
from .spans import Spans, span_mask


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
    if not heads:
        raise ValueError("no heads chosen")
    by_layer: dict[int, list[int]] = defaultdict(list)
    slot: dict[int, list[int]] = defaultdict(list)
    for i, (layer, head) in enumerate(heads):
        by_layer[layer].append(head)
        slot[layer].append(i)
    first_k = k_by_layer[next(iter(by_layer))]
    length, device = first_k.shape[0], first_k.device
    inst = span_mask(instruction, length, device)
    dat = span_mask(data, length, device)
    if not inst.any() or not dat.any():
        raise ValueError("the instruction and the data spans must each cover at least one token")
    if (inst & dat).any():
        raise ValueError("the instruction and the data spans overlap")
    masks = torch.stack([inst, dat], dim=1).float()  # [T, 2]

    ratios = torch.empty(len(heads), dtype=torch.float32, device=device)
    for layer, layer_heads in by_layer.items():
        k = k_by_layer[layer]
        if k.shape[0] != length:
            raise ValueError(f"layer {layer} has K for {k.shape[0]} tokens, expected {length}")
        weights = attention_rows(q_last_by_layer[layer], k, layer_heads, geometry, scale)[:, 0]  # [n, T]
        mass = weights @ masks  # [n, 2]: (a_inst, a_data)
        ratio = mass[:, 0] / (mass[:, 0] + mass[:, 1]).clamp_min(torch.finfo(torch.float32).tiny)
        ratios[torch.as_tensor(slot[layer], device=device)] = ratio
    return ratios


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

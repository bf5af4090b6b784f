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

from typing import Mapping, Sequence

import torch

from .attention import Geometry, check_width, kv_heads_of
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

    All heads of all layers in one batch of tensor work, and every check on
    host values: on a GPU this runs at the decision of every request, and a
    check that read a device value would wait for the whole queue.
    """
    if not heads:
        raise ValueError("no heads chosen")
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    layers = sorted({layer for layer, _ in heads})
    for layer, head in heads:
        if not 0 <= head < h:
            raise ValueError(f"head index out of range 0..{h - 1}: {head} (layer {layer})")
    first_k = k_by_layer[layers[0]]
    length, device = first_k.shape[0], first_k.device
    for layer in layers:
        check_width(f"K of layer {layer}", k_by_layer[layer], h_kv, d, rows=length)
        check_width(f"Q of layer {layer}", q_last_by_layer[layer].reshape(1, -1), h, d, rows=1)
    inst = span_mask(instruction, length)  # on the host: checked here, moved once
    dat = span_mask(data, length)
    if not inst.any() or not dat.any():
        raise ValueError("the instruction and the data spans must each cover at least one token")
    if (inst & dat).any():
        raise ValueError("the instruction and the data spans overlap")
    masks = torch.stack([inst, dat], dim=1).float().to(device)  # [T, 2]

    row = {layer: i for i, layer in enumerate(layers)}
    index = torch.tensor([[row[layer], head, kv_heads_of(head, geometry)] for layer, head in heads]).to(device)
    # Upcast: bf16 logits lose the small weights that attention ratios sum.
    q = torch.stack([q_last_by_layer[layer].reshape(h, d) for layer in layers]).float()  # [L, H, d]
    k = torch.stack([k_by_layer[layer].reshape(length, h_kv, d) for layer in layers]).float()  # [L, T, H_kv, d]
    q_sel = q[index[:, 0], index[:, 1]]  # [n, d]
    k_sel = k.permute(0, 2, 1, 3)[index[:, 0], index[:, 2]]  # [n, T, d]
    # The last prompt token sees every prompt token: no causal mask.
    weights = torch.softmax(torch.einsum("nd,ntd->nt", q_sel, k_sel) * scale, dim=-1)
    mass = weights @ masks  # [n, 2]: (a_inst, a_data)
    return mass[:, 0] / (mass[:, 0] + mass[:, 1]).clamp_min(torch.finfo(torch.float32).tiny)


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

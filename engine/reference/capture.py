"""Hugging Face captures in the vLLM layout, to feed the fast analyzers
before (and beside) the vLLM runtime. Test/reference tooling only.

A custom attention function, registered through transformers'
``AttentionInterface``, records the post-RoPE query/key states each
attention module hands to its kernel, then delegates to eager attention.
Forward hooks on the decoder layers record the residual stream (HF's layer
output = vLLM's hidden + residual). Everything is flattened to what the
vLLM hooks see: Q ``[T, H*d]``, K ``[T, H_kv*d]``, residual ``[T, hidden]``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

from innerguard.engine.reference.model import as_batch, decoder_layers

IMPLEMENTATION = "innerguard_capture"


@dataclass
class Captures:
    q: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [T, H*d]
    k: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [T, H_kv*d]
    residual: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [T, hidden]
    scale: dict[int, float] = field(default_factory=dict)  # layer -> softmax scale the module used


_active: list[Captures] = []


def _flatten(states: torch.Tensor) -> torch.Tensor:
    # [1, heads, T, d] -> [T, heads*d], the row layout of vLLM's q/k inputs.
    _, heads, length, dim = states.shape
    return states[0].transpose(0, 1).reshape(length, heads * dim).detach().clone()


def _capturing_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    if _active:
        record = _active[-1]
        record.q[module.layer_idx] = _flatten(query)
        record.k[module.layer_idx] = _flatten(key)
        record.scale[module.layer_idx] = float(scaling if scaling is not None else module.scaling)
    return eager_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register(IMPLEMENTATION, _capturing_attention)
AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)


@contextlib.contextmanager
def _implementation(model: Any, name: str) -> Iterator[None]:
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def capture(model: Any, input_ids: Sequence[int] | torch.Tensor, residual_layers: Sequence[int] | None = None) -> Captures:
    """One forward pass (no KV cache) recording Q/K of every layer and the
    residual stream after ``residual_layers`` (default: all)."""
    layers = decoder_layers(model)
    record = Captures()
    wanted = range(len(layers)) if residual_layers is None else residual_layers

    def keeper(index):
        def keep(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            record.residual[index] = hidden[0].detach().clone()
        return keep

    handles = [layers[i].register_forward_hook(keeper(i)) for i in wanted]
    _active.append(record)
    try:
        with _implementation(model, IMPLEMENTATION), torch.no_grad():
            model(input_ids=as_batch(input_ids).to(model.device), use_cache=False)
    finally:
        _active.pop()
        for handle in handles:
            handle.remove()
    return record

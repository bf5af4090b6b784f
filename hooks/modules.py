"""Finds the modules innerguard hooks in a vLLM decoder-only model, and fails
with a clear message when a model is not shaped as expected."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn as nn

from innerguard.hooks import guard_points
from innerguard.hooks.tensor_parallel import Shard


class UnsupportedModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class ModelModules:
    model: nn.Module  # the top-level *ForCausalLM module vLLM runs
    layers: nn.ModuleList  # decoder layers; each returns (hidden, residual)
    logits: nn.Module  # vLLM's LogitsProcessor: its output rows are the batch's requests
    eos_token_id: int
    shard: Shard = Shard()  # the attention heads this rank holds (tensor parallel)

    def layer(self, index: int) -> nn.Module:
        return self.layers[index]

    def attention(self, index: int) -> nn.Module:
        """The paged-attention module; its inputs are post-RoPE Q, K, V."""
        layer = self.layers[index]
        attn = getattr(getattr(layer, "self_attn", None), "attn", None)
        if attn is None or not hasattr(attn, "impl"):
            raise UnsupportedModelError(f"decoder layer {index} has no self_attn.attn paged-attention module")
        return attn

    def attention_scale(self, index: int) -> float:
        return float(self.attention(index).impl.scale)

    def on_attention_input(self, index: int, fn: Callable) -> guard_points.Handle:
        """``fn(query, key)`` with post-RoPE Q and K, at every forward."""
        self.attention(index)
        return guard_points.CALLBACKS.add(guard_points.ATTENTION, index, fn)

    def on_layer_output(self, index: int, fn: Callable) -> guard_points.Handle:
        """``fn(hidden, residual)`` after decoder layer ``index``; ``hidden``
        may be changed in place."""
        return guard_points.CALLBACKS.add(guard_points.LAYER, index, fn)

    @classmethod
    def find(cls, model: nn.Module, num_layers: int, eos_token_id: int, shard: Shard = Shard()) -> "ModelModules":
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None)
        if not isinstance(layers, nn.ModuleList) or len(layers) != num_layers:
            raise UnsupportedModelError(
                f"{type(model).__name__} has no model.layers list of {num_layers} decoder layers"
            )
        if not guard_points.placed(layers):
            raise UnsupportedModelError(
                "the model has no innerguard guard points: start the engine with guarded_engine_kwargs "
                "(load_format='innerguard' places them before vLLM compiles the model)"
            )
        logits = getattr(model, "logits_processor", None)
        if logits is None:
            raise UnsupportedModelError(f"{type(model).__name__} has no logits_processor module")
        return cls(model=model, layers=layers, logits=logits, eos_token_id=int(eos_token_id), shard=shard)

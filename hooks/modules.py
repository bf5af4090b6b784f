"""Finds the modules innerguard hooks in a vLLM decoder-only model, and fails
with a clear message when a model is not shaped as expected."""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn


class UnsupportedModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class ModelModules:
    model: nn.Module  # the top-level *ForCausalLM module vLLM runs
    layers: nn.ModuleList  # decoder layers; each returns (hidden, residual)
    logits: nn.Module  # vLLM's LogitsProcessor: its output rows are the batch's requests
    eos_token_id: int

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

    @classmethod
    def find(cls, model: nn.Module, num_layers: int, eos_token_id: int) -> "ModelModules":
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None)
        if not isinstance(layers, nn.ModuleList) or len(layers) != num_layers:
            raise UnsupportedModelError(
                f"{type(model).__name__} has no model.layers list of {num_layers} decoder layers"
            )
        logits = getattr(model, "logits_processor", None)
        if logits is None:
            raise UnsupportedModelError(f"{type(model).__name__} has no logits_processor module")
        return cls(model=model, layers=layers, logits=logits, eos_token_id=int(eos_token_id))

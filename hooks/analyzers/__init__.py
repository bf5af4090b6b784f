"""Analyzers: pure tensor code that turns captured activations into signals.

Everything here is device-agnostic torch on tensors in the layout the vLLM
hooks see, returns small results (python floats, short lists), and imports
neither YAML nor vLLM nor transformers.

Layouts (T = prompt tokens, H = query heads, H_kv = key/value heads,
d = head_dim taken from the model config, never hidden/H):

- Q at the input of ``self_attn.attn``: post-RoPE, ``[tokens, H*d]``.
- K at the input of ``self_attn.attn``: post-RoPE, ``[T, H_kv*d]``.
- Residual stream after a decoder layer: ``[hidden]`` = vLLM's
  ``hidden + residual`` (Hugging Face's layer output).

Spans are half-open token ranges ``(start, end)``.
"""
from innerguard.hooks.analyzers.attention import HeadGeometry, attention_rows
from innerguard.hooks.analyzers.attention_tracker import focus_score, head_focus
from innerguard.hooks.analyzers.probe import concept_cosine, logistic_probability
from innerguard.hooks.analyzers.reranker import (
    RerankResult,
    calibrated_document_scores,
    rerank,
    token_attention,
)
from innerguard.hooks.analyzers.steering import steer_row_mask, steering_delta
from innerguard.hooks.analyzers.token_probe import window_max

__all__ = [
    "HeadGeometry",
    "attention_rows",
    "focus_score",
    "head_focus",
    "concept_cosine",
    "logistic_probability",
    "RerankResult",
    "calibrated_document_scores",
    "rerank",
    "token_attention",
    "steer_row_mask",
    "steering_delta",
    "window_max",
]

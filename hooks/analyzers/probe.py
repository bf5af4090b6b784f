"""Probes on the residual stream at the last prompt token.

The residual stream after decoder layer L is what Hugging Face returns as
that layer's output. vLLM's decoder layers return it split in two,
``(hidden_states, residual)``, and the next layer's fused add+RMSNorm adds
them (in place). Callers must pass ``hidden_states + residual`` (cloned
before the next layer runs), never either half alone.
"""
from __future__ import annotations

import torch


def _row(x: torch.Tensor, name: str) -> torch.Tensor:
    x = x.float()
    if x.dim() == 2 and x.shape[0] == 1:
        x = x[0]
    if x.dim() != 1:
        raise ValueError(f"{name} must be one vector [hidden]; got {tuple(x.shape)}")
    return x


def concept_cosine(residual: torch.Tensor, vector: torch.Tensor) -> float:
    """cos(residual, vector) in [-1, 1]. residual: ``[hidden]`` (hidden + residual)."""
    return float(concept_cosine_tensor(residual, vector))


def concept_cosine_tensor(residual: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """:func:`concept_cosine` as a 0-dim tensor on ``residual``'s device (no host read)."""
    x, v = _row(residual, "residual"), _row(vector, "vector").to(residual.device)
    if x.shape != v.shape:
        raise ValueError(f"residual has {x.shape[0]} features, the concept vector {v.shape[0]}")
    return torch.nn.functional.cosine_similarity(x, v, dim=0, eps=1e-12)


def logistic_probability(residual: torch.Tensor, weight: torch.Tensor, bias: float | torch.Tensor = 0.0) -> float:
    """sigmoid(weight · residual + bias) in [0, 1]. residual: ``[hidden]`` (hidden + residual)."""
    return float(logistic_probability_tensor(residual, weight, bias))


def logistic_probability_tensor(residual: torch.Tensor, weight: torch.Tensor,
                                bias: float | torch.Tensor = 0.0) -> torch.Tensor:
    """:func:`logistic_probability` as a 0-dim tensor on ``residual``'s device (no host read)."""
    x, w = _row(residual, "residual"), _row(weight, "weight").to(residual.device)
    if x.shape != w.shape:
        raise ValueError(f"residual has {x.shape[0]} features, the probe weight {w.shape[0]}")
    return torch.sigmoid(x @ w + torch.as_tensor(bias, dtype=torch.float32, device=x.device).reshape(()))

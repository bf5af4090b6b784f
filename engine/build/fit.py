"""The arithmetic of builds, on captured features: plain torch, deterministic.

- ``fit_logistic``: L2-regularised logistic regression (full-batch LBFGS
  from zero, strong-Wolfe line search) on standardised features, folded
  back into weights on the raw residual.
- ``mean_difference``: unit(mean(class 1) − mean(class 0)).
- ``select_heads``: the Attention Tracker criterion
  (μ_normal − k·σ_normal) − (μ_attack + k·σ_attack) > 0.

Fits run on one CPU thread: the result then does not depend on how many
threads the machine gives torch.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit_logistic(x: torch.Tensor, y: torch.Tensor, l2: float = 1e-2, steps: int = 500) -> tuple[torch.Tensor, float]:
    """(weight ``[features]``, bias) with sigmoid(weight·x + bias) = P(y = 1).
    Loss: binary cross-entropy + l2·|w|² on standardised features."""
    with one_thread():
        x, y = x.float(), y.float()
        mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
        z = (x - mean) / std
        w = torch.zeros(x.shape[1], requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y) + l2 * (w @ w)
            loss.backward()
            return loss

        opt.step(closure)
        weight = (w / std).detach()
        bias = float((b - (w / std) @ mean).detach())
        return weight, bias


def mean_difference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """unit(mean of rows with y = 1 − mean of rows with y = 0), float32."""
    with one_thread():
        direction = x[y == 1].float().mean(0) - x[y == 0].float().mean(0)
        return direction / direction.norm()


def head_margins(normal: torch.Tensor, attack: torch.Tensor, k: float) -> torch.Tensor:
    """normal/attack: ``[samples, layers, heads]``; the margin per head (float64)."""
    with one_thread():
        normal, attack = normal.double(), attack.double()
        return (normal.mean(0) - k * normal.std(0)) - (attack.mean(0) + k * attack.std(0))


def select_heads(margin: torch.Tensor, min_heads: int) -> tuple[torch.Tensor, bool]:
    """(heads ``[n, 2]`` int64 (layer, head) sorted, fell_back): heads with a
    positive margin; when none has, the ``min_heads`` best-margin heads."""
    heads = (margin > 0).nonzero().to(torch.int64)
    if len(heads):
        return heads, False
    best = margin.flatten().topk(min(min_heads, margin.numel())).indices.sort().values
    n = margin.shape[1]
    return torch.stack([best // n, best % n], 1).to(torch.int64), True

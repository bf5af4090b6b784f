"""Steering vector math for the residual stream after a decoder layer.

Functions return the DELTA to add, so the vLLM runtime can add it to the
layer's ``hidden_states`` output and leave ``residual`` alone: the next
layer's fused add+norm sums them, so the residual stream moves by exactly
the delta. ``x`` is always the full residual stream (hidden + residual).

Methods (c = coefficient, v = the stored vector, û = v/‖v‖):

- ``add``:     x' = x + c·v                       delta = c·v
- ``project``: x' = x − (x·û)û + c·‖v‖·û           delta = (c·‖v‖ − x·û)·û
  i.e. the component along û is SET to c·‖v‖, whatever it was; the
  coefficient is in units of the vector's own norm, as for ``add``
  (artifacts store vectors at the layer's typical residual scale).

Positions (which token rows are steered, by absolute position p and the
prompt length n): ``prompt`` p < n; ``generated`` p >= n (decode-step rows,
which carry the tokens generated so far); ``all`` every row.
"""
from __future__ import annotations

import torch

METHODS = ("add", "project")
POSITIONS = ("prompt", "generated", "all")


def steering_delta(x: torch.Tensor, vector: torch.Tensor, coefficient: float, method: str = "add") -> torch.Tensor:
    """Delta for rows ``x`` ``[..., hidden]``, in x's dtype and device.

    ``add`` returns ``[hidden]`` (broadcasts over rows); ``project`` returns
    x's shape. Computed in float32.
    """
    if vector.dim() != 1 or vector.shape[0] != x.shape[-1]:
        raise ValueError(f"steering vector must be [{x.shape[-1]}]; got {tuple(vector.shape)}")
    v = vector.to(device=x.device, dtype=torch.float32)
    if method == "add":
        return (coefficient * v).to(x.dtype)
    if method == "project":
        norm = v.norm()
        if norm == 0:
            raise ValueError("cannot project onto a zero vector")
        unit = v / norm
        along = x.float() @ unit  # [...]
        return ((coefficient * norm - along).unsqueeze(-1) * unit).to(x.dtype)
    raise ValueError(f"unknown steering method {method!r}; expected one of {METHODS}")


def steer_row_mask(positions: torch.Tensor, prompt_len: int, mode: str) -> torch.Tensor:
    """Which rows to steer, given each row's absolute position in its sequence."""
    if mode == "prompt":
        return positions < prompt_len
    if mode == "generated":
        return positions >= prompt_len
    if mode == "all":
        return torch.ones_like(positions, dtype=torch.bool)
    raise ValueError(f"unknown steering positions {mode!r}; expected one of {POSITIONS}")

"""A linear probe on every token of a span, pooled by its strongest window.

An instruction planted in untrusted data is a sentence somewhere in it; what
the last prompt token carries of it fades with the length and style of the
text around it. So each span token t gets a score

    s_t = Σ_L w_L · h_L,t + b        (h_L,t: the residual stream after layer L)

and the signal is the largest mean of s_t over ``window`` consecutive span
tokens (the mean of the whole span when it is shorter): high when some
stretch of the data reads like an instruction to the model. It is a logit.
The per-layer dot products are accumulated while the prompt is computed
(hooks/capture.py), so no hidden state is kept.

A maximum over N windows grows with N even when every window is benign: on
real documents the benign score of a 2,000-token text sits well above that
of a 200-token one, so one threshold cannot hold at every length. With
``length_adjust`` = a the signal is

    max over windows of mean s_t  -  a * ln(number of windows)

(the number of windows is span tokens - window + 1, at least 1), with a
fitted by ``innerguard build token-probe --length-adjust`` so that benign
scores do not move with length.
"""
from __future__ import annotations

import math

import torch


def window_max(scores: torch.Tensor, window: int) -> float:
    """The largest mean over ``window`` consecutive entries of ``scores``
    (1-D), or the mean of all of them when there are fewer."""
    return float(window_max_tensor(scores, window))


def window_max_tensor(scores: torch.Tensor, window: int) -> torch.Tensor:
    """:func:`window_max` as a 0-dim float64 tensor on ``scores``' device (no host read)."""
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"token scores must be a non-empty 1-D tensor; got {tuple(scores.shape)}")
    if window < 1:
        raise ValueError(f"window must be at least 1; got {window}")
    s = scores.double()
    if s.numel() <= window:
        return s.mean()
    sums = torch.cumsum(torch.cat([s.new_zeros(1), s]), 0)
    return ((sums[window:] - sums[:-window]) / window).max()


def window_count(tokens: int, window: int) -> int:
    """How many windows the maximum is taken over: one when the span is no
    longer than a window."""
    return max(1, tokens - window + 1)


def length_offset(tokens: int, window: int, length_adjust: float) -> float:
    """What ``length_adjust`` takes off the window maximum of a ``tokens``-long span."""
    return length_adjust * math.log(window_count(tokens, window)) if length_adjust else 0.0

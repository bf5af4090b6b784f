"""Token spans as masks: the one conversion every analyzer needs."""
from __future__ import annotations

from typing import Sequence, Union

import torch

# Half-open (start, end) ranges, an index tensor/list, or a boolean mask.
Spans = Union[Sequence[tuple[int, int]], Sequence[int], torch.Tensor]


def span_mask(spans: Spans, length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """A ``[length]`` boolean mask of the tokens that ``spans`` covers."""
    if isinstance(spans, torch.Tensor):
        if spans.dtype == torch.bool:
            if spans.numel() != length:
                raise ValueError(f"boolean span mask has {spans.numel()} entries, expected {length}")
            return spans.to(device)
        index = spans.to(device=device, dtype=torch.long).reshape(-1)
    elif len(spans) and isinstance(spans[0], (tuple, list)):
        mask = torch.zeros(length, dtype=torch.bool, device=device)
        for start, end in spans:  # a handful of ranges, never per token
            if not 0 <= start <= end <= length:
                raise ValueError(f"span ({start}, {end}) is outside 0..{length}")
            mask[start:end] = True
        return mask
    else:
        index = torch.as_tensor(list(spans), dtype=torch.long, device=device)
    if index.numel() and (index.min() < 0 or index.max() >= length):
        raise ValueError(f"token index outside 0..{length - 1}")
    mask = torch.zeros(length, dtype=torch.bool, device=device)
    mask[index] = True
    return mask

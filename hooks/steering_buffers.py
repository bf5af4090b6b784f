"""Additive steering as tensor work on fixed buffers, so that it survives
CUDA graphs.

A graph replays the kernels its capture launched, on the same addresses,
and runs no Python. So the layer point's body always launches the same two
kernels per layer: pick one row of the layer's steering table for every token
row, and add it to ``hidden``:

    hidden += table[layer][which[layer, :n]]

``table[layer]`` holds each installed ``add`` steer's delta (coefficient ×
vector, in the model's dtype); row 0 is zeros. ``which[layer, r]`` names the
table row for token row ``r`` in this step, 0 for rows left alone. Both are
allocated once, when the model loads, before vLLM captures anything; plans
write into them, and the step boundary (lifecycle.py) fills ``which`` for the
step's rows before the forward runs. Outside a capture, a layer with no
steered row this step costs nothing.

``project`` steers depend on the stream and stay in Python (steer.py); the
runtime keeps their steps out of full CUDA graphs.
"""
from __future__ import annotations

import numpy as np
import torch

SLOTS_PER_LAYER = 32  # installed add-steers per layer, over all live plans


class SteeringBuffers:
    def __init__(self, num_layers: int, hidden_size: int, max_tokens: int, dtype: torch.dtype, device):
        self.table = torch.zeros(num_layers, SLOTS_PER_LAYER, hidden_size, dtype=dtype, device=device)
        self.which = torch.zeros(num_layers, max_tokens, dtype=torch.int64, device=device)
        self._host = np.zeros((num_layers, max_tokens), dtype=np.int64)
        self._dirty = 0  # rows of ``which`` that may be non-zero on the device
        self._sent = np.zeros((num_layers, 0), dtype=np.int64)  # what the last copy put in ``which[:, :span]``
        self._free = [list(range(SLOTS_PER_LAYER - 1, 0, -1)) for _ in range(num_layers)]
        self.active: set[int] = set()  # layers with steered rows in this step

    @property
    def max_tokens(self) -> int:
        return self.which.shape[1]

    # -- plans -------------------------------------------------------------------
    def allocate(self, layer: int, delta: torch.Tensor) -> int:
        """A table row holding ``delta`` at ``layer``; its index for ``which``."""
        if not self._free[layer]:
            raise RuntimeError(
                f"no free steering slot at layer {layer}: the live plans hold {SLOTS_PER_LAYER - 1} add-steers there"
            )
        slot = self._free[layer].pop()
        self.table[layer, slot].copy_(delta.to(self.table.dtype))
        return slot

    def release(self, layer: int, slot: int) -> None:
        self.table[layer, slot].zero_()
        self._free[layer].append(slot)

    # -- one step ------------------------------------------------------------------
    def set_rows(self, rows: dict[int, list[tuple[np.ndarray, int]]]) -> None:
        """This step's steered rows: ``{layer: [(token rows, slot), ...]}``."""
        host = self._host
        end = max((int(r.max()) + 1 for entries in rows.values() for r, _ in entries if r.size), default=0)
        if end > self.max_tokens:
            raise RuntimeError(f"{end} token rows in one step; the steering buffers hold {self.max_tokens}")
        span = max(end, self._dirty)
        self.active = {layer for layer, entries in rows.items() if any(r.size for r, _ in entries)}
        if span == 0:
            return
        host[:, :span] = 0
        for layer, entries in rows.items():
            for token_rows, slot in entries:
                host[layer, token_rows] = slot
        self._dirty = end
        if span <= self._sent.shape[1] and np.array_equal(self._sent[:, :span], host[:, :span]):
            return  # the device already holds these rows (steady decoding)
        # A fresh host tensor: its copy may still be in flight when the next
        # step writes ``_host`` (no wait on the device here).
        self.which[:, :span].copy_(torch.from_numpy(host[:, :span].copy()), non_blocking=True)
        self._sent = host[:, :span].copy()

    def apply(self, layer: int, hidden: torch.Tensor) -> None:
        """The layer point's share: launched on every call while a CUDA graph
        is captured, else only for a layer with steered rows in this step."""
        if layer not in self.active and not (hidden.is_cuda and torch.cuda.is_current_stream_capturing()):
            return
        n = hidden.shape[0]
        if n > self.max_tokens:
            raise RuntimeError(f"{n} token rows in one forward; the steering buffers hold {self.max_tokens}")
        hidden.add_(self.table[layer].index_select(0, self.which[layer, :n]))


BUFFERS: SteeringBuffers | None = None  # one model per worker process


def allocate_buffers(num_layers: int, hidden_size: int, max_tokens: int, dtype: torch.dtype, device) -> SteeringBuffers:
    global BUFFERS
    BUFFERS = SteeringBuffers(num_layers, hidden_size, max_tokens, dtype, device)
    return BUFFERS

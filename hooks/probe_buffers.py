"""Generated-token probe scores as tensor work on fixed buffers, so that
decode steps keep vLLM's full CUDA graphs (as steering_buffers.py does for
add-steers).

A token probe on generated tokens scores each one ``Σ_L w_L · h_L,t``
over its layers (decode_probes.py). The layer point adds every layer's
share for the step's token rows into one accumulator with a column per
installed probe (a slot):

    scores[rows] (+)= (hidden[rows] + residual[rows]).float() @ weights[layer]

``weights[layer][:, slot]`` is the probe's weight at that layer, zeros where
it reads none. Both tensors are allocated once, when the model loads, before
vLLM captures anything; plans write their weights into slots.

A full graph replays what the point launched while it was captured, for
every token row and every layer: layer 0 overwrites the accumulator, each
later layer adds to it. Outside a capture (eager, piecewise, a CPU) the point
launches only for a step whose rows a probe reads (``reading``), only on
those rows, and only at the layers some slot reads, the first of them
overwriting. Either way the accumulator ends the forward holding each row's
score per slot (bias left out); after the forward the logits hook reads the
rows it needs (decode_probes.StepScores).
"""
from __future__ import annotations

import torch

SLOTS = 16  # distinct generated-token probes over all live plans (a reload's old plan stays a while)


class ProbeBuffers:
    def __init__(self, num_layers: int, hidden_size: int, max_tokens: int, device):
        self.weights = torch.zeros(num_layers, hidden_size, SLOTS, dtype=torch.float32, device=device)
        self.scores = torch.zeros(max_tokens, SLOTS, dtype=torch.float32, device=device)
        self._held: list[dict[int, torch.Tensor]] = [{} for _ in range(SLOTS)]  # each slot's weights by layer
        self._users = [0] * SLOTS  # plans holding each slot (0: free)
        self.first: int | None = None  # the first layer any slot reads (outside a capture it overwrites)
        self.read_layers: frozenset[int] = frozenset()
        self.reading: tuple[int, int] | None = None  # this step's token rows a probe reads, [start, end)

    @property
    def max_tokens(self) -> int:
        return self.scores.shape[0]

    # -- plans -------------------------------------------------------------------
    def allocate(self, weights: dict[int, torch.Tensor]) -> int:
        """A slot holding one probe's ``{layer: weight}``; its column of
        ``scores``. Plans with the same probe (a reload that kept it) share one."""
        for slot, held in enumerate(self._held):
            if self._users[slot] and held.keys() == weights.keys() and all(torch.equal(held[k], w) for k, w in weights.items()):
                self._users[slot] += 1
                return slot
        if 0 not in self._users:
            raise RuntimeError(f"no free probe slot: the live plans hold {SLOTS} distinct token probes on generated "
                               "tokens (old plans stay a minute after a reload)")
        slot = self._users.index(0)
        for layer, weight in weights.items():
            self.weights[layer, :, slot].copy_(weight.to(self.weights.dtype))
        self._held[slot], self._users[slot] = dict(weights), 1
        self._update()
        return slot

    def release(self, slot: int) -> None:
        self._users[slot] -= 1
        if self._users[slot]:
            return
        self.weights[:, :, slot].zero_()
        self._held[slot] = {}
        self._update()

    def _update(self) -> None:
        self.read_layers = frozenset(layer for held in self._held for layer in held)
        self.first = min(self.read_layers, default=None)

    # -- one step ------------------------------------------------------------------
    def apply(self, layer: int, hidden: torch.Tensor, residual: torch.Tensor) -> None:
        """The layer point's share: launched on every call while a CUDA graph
        is captured, else only where this step's rows are read."""
        if hidden.is_cuda and torch.cuda.is_current_stream_capturing():
            self.add(layer, hidden, residual, 0, hidden.shape[0], overwrite=layer == 0)
        elif self.reading is not None and layer in self.read_layers:
            self.add(layer, hidden, residual, *self.reading, overwrite=layer == self.first)

    def add(self, layer: int, hidden: torch.Tensor, residual: torch.Tensor, start: int, end: int, overwrite: bool) -> None:
        if end > self.max_tokens:
            raise RuntimeError(f"{end} token rows in one forward; the probe buffers hold {self.max_tokens}")
        stream = (hidden[start:end] + residual[start:end]).float()
        if overwrite:
            torch.mm(stream, self.weights[layer], out=self.scores[start:end])
        else:
            self.scores[start:end].addmm_(stream, self.weights[layer])


BUFFERS: ProbeBuffers | None = None  # one model per worker process


def allocate_buffers(num_layers: int, hidden_size: int, max_tokens: int, device) -> ProbeBuffers:
    global BUFFERS
    BUFFERS = ProbeBuffers(num_layers, hidden_size, max_tokens, device)
    return BUFFERS

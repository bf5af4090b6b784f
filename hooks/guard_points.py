"""Guard points: innerguard's fixed places in the model's forward, put there
when the model loads, before vLLM traces and compiles it.

A forward hook added after compilation never runs: the graph was traced
without it. So every decoder layer gets two points when the model is built:
one at its attention's input (post-RoPE Q and K) and one at its output
(hidden, residual). Each calls a custom op that the compiler keeps as an
opaque call, in eager and compiled mode alike. The op's body runs the
callbacks that installed plans registered for that point, in registration
order; with none it returns at once. Plans come and go without touching the
graph.

The ops declare their first tensor as mutated: steering changes ``hidden``
in place, and an op with no output and no mutation would be dropped from the
graph as dead code.

Under CUDA graphs (GPU), vLLM splits its piecewise graphs at the points, so
their Python runs between graph pieces; a full graph (decode-only steps)
replays only what a point launched while it was captured: the additive
steering of steering_buffers.py and the generated-token probes of
probe_buffers.py. The runtime keeps every step that needs a
callback out of full graphs (runner_view.py).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from innerguard.hooks import probe_buffers, steering_buffers

ATTENTION, LAYER = "attention", "layer"
_MARK = "_innerguard_guard_points"

_lib = torch.library.Library("innerguard", "FRAGMENT")
_lib.define("attention_point(Tensor(a!) query, Tensor key, int layer) -> ()")
_lib.define("layer_point(Tensor(a!) hidden, Tensor residual, int layer) -> ()")


class Callbacks:
    """The callbacks of every point, by (kind, layer). One table per process:
    the ops are process-wide, and a worker serves one model."""

    def __init__(self):
        self.table: dict[tuple[str, int], list[Callable]] = {}

    def add(self, kind: str, layer: int, fn: Callable) -> "Handle":
        self.table.setdefault((kind, layer), []).append(fn)
        return Handle(self, (kind, layer), fn)

    def run(self, kind: str, layer: int, a: torch.Tensor, b: torch.Tensor) -> None:
        for fn in self.table.get((kind, layer), ()):
            fn(a, b)


class Handle:
    def __init__(self, callbacks: Callbacks, key: tuple[str, int], fn: Callable):
        self._callbacks, self._key, self._fn = callbacks, key, fn

    def remove(self) -> None:
        fns = self._callbacks.table.get(self._key, [])
        if self._fn in fns:
            fns.remove(self._fn)


CALLBACKS = Callbacks()


def _attention_point(query: torch.Tensor, key: torch.Tensor, layer: int) -> None:
    CALLBACKS.run(ATTENTION, layer, query, key)


def _layer_point(hidden: torch.Tensor, residual: torch.Tensor, layer: int) -> None:
    probes = probe_buffers.BUFFERS
    if probes is not None:  # probes read the stream before it is steered
        probes.apply(layer, hidden, residual)
    CALLBACKS.run(LAYER, layer, hidden, residual)  # captures too; project-steers come last
    buffers = steering_buffers.BUFFERS
    if buffers is not None:
        buffers.apply(layer, hidden)


_lib.impl("attention_point", _attention_point, "CompositeExplicitAutograd")
_lib.impl("layer_point", _layer_point, "CompositeExplicitAutograd")
torch.library.register_fake("innerguard::attention_point", lambda query, key, layer: None, lib=_lib)
torch.library.register_fake("innerguard::layer_point", lambda hidden, residual, layer: None, lib=_lib)


def _attention_pre_hook(layer: int):
    def point(module, args):
        torch.ops.innerguard.attention_point(args[0], args[1], layer)

    return point


def _layer_hook(layer: int):
    def point(module, args, output):
        if isinstance(output, torch.Tensor):
            # Layers that add their residual themselves (Granite) return the
            # whole stream; a zero residual keeps "stream = hidden + residual"
            # true for every callback, and an expanded scalar allocates nothing.
            hidden, residual = output, output.new_zeros(()).expand_as(output)
        else:
            hidden, residual = output
        torch.ops.innerguard.layer_point(hidden, residual, layer)

    return point


def place(layers: nn.ModuleList) -> None:
    """Put the points on every decoder layer (once, before the first forward)."""
    if getattr(layers, _MARK, False):
        return
    for index, layer in enumerate(layers):
        attn = getattr(getattr(layer, "self_attn", None), "attn", None)
        if attn is None:
            raise RuntimeError(f"decoder layer {index} has no self_attn.attn module to place a guard point on")
        attn.register_forward_pre_hook(_attention_pre_hook(index))
        layer.register_forward_hook(_layer_hook(index))
    setattr(layers, _MARK, True)


def placed(layers: nn.ModuleList) -> bool:
    return bool(getattr(layers, _MARK, False))

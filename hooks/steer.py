"""The steering hook: adds each active steer's delta to ``hidden`` after a
decoder layer, on the rows its positions select.

Rows are chosen by absolute position, never by step kind, so a recompute
after preemption (prompt and generated tokens in one prefill) is steered
exactly as the original steps were.

``add`` steers are applied by the layer point itself, from device buffers
(steering_buffers.py), so that they hold under CUDA graphs; this hook
applies ``project`` steers, whose delta depends on the stream.
"""
from __future__ import annotations

from dataclasses import dataclass

from innerguard.engine.plan import SteerSpec
from innerguard.hooks.analyzers.steering import steering_delta


@dataclass(frozen=True)
class ActiveSteer:
    spec: SteerSpec
    policy: str
    from_position: int = 0  # a steer decided at prefill applies from the first generated token


def steer_rows(steer: ActiveSteer, start: int, end: int, first_position: int, num_prompt_tokens: int) -> tuple[int, int] | None:
    """Rows ``[a, b)`` of this request's step rows ``[start, end)`` to steer."""
    lo, hi = first_position, first_position + (end - start)
    if steer.spec.positions == "prompt":
        hi = min(hi, num_prompt_tokens)
    elif steer.spec.positions == "generated":
        lo = max(lo, num_prompt_tokens)
    lo = max(lo, steer.from_position)
    if hi <= lo:
        return None
    return start + lo - first_position, start + hi - first_position


def steer_hook(runtime, layer: int):
    def steer(hidden, residual):
        runtime.hook_calls[f"steer.{layer}"] += 1
        for state, (a, b), active in runtime.steer_rows.get(layer, ()):
            spec = active.spec
            try:
                stream = hidden[a:b] + residual[a:b]
                delta = steering_delta(stream, runtime.vectors[spec.vector], spec.coefficient, spec.method)
                hidden[a:b] += delta.expand_as(stream).to(hidden.dtype)
            except Exception as exc:  # this request only; its policy's error mode decides
                state.steer_failed(active, f"steering {spec.id} at layer {layer} failed: {type(exc).__name__}: {exc}")
        return None  # steered in place

    return runtime.contained(f"steer.{layer}", steer)

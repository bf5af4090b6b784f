"""Turns requests' captures into their signal values, by the plan's
analyzer specs. Each analyzer failure is recorded, never swallowed: the
decision then follows the policy's error mode.

Analyzers leave their values on the captures' device, or queue their inputs
(``start_signals``); ``read_signals`` scores the queued ones of a step's
decisions together and brings every value to the host in one transfer. On a
GPU each read waits for everything queued before it, and each small kernel
costs a launch: one batch and one read per step, not per request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from innerguard.engine import analyzers as analyzer_units
from innerguard.hooks.analyzers import attention_tracker, probe, reranker, token_probe
from innerguard.hooks.calibration import geometry_of, query_token_attention

Signals = tuple[dict[str, Any], dict[str, str]]  # (values by signal name, errors by signal name)


def compute_signals(plan, analyzers, state, vectors, modules) -> Signals:
    """One request's signal values, as python values."""
    signals = start_signals(plan, analyzers, state, vectors, modules)
    read_signals([signals])
    return signals


def start_signals(plan, analyzers, state, vectors, modules) -> Signals:
    """One request's signal values; an analyzer that runs on the device
    leaves a 0-dim tensor, or its inputs queued, for :func:`read_signals`."""
    geometry = geometry_of(plan)
    wanted = sorted({s for p in state.policies for s in p.signals})
    signals: dict[str, Any] = {}
    errors: dict[str, str] = {}
    text_values = state.args.get("text_signals") or {}
    for name in wanted:
        spec = analyzers.get(name)
        try:
            if spec is None:
                raise KeyError(f"no analyzer in the plan yields {name!r}")
            if spec.kind == "text":
                if name not in text_values:
                    raise KeyError(f"text signal {name!r} was not computed for this request")
                signals[name] = text_values[name]
            elif spec.kind == "attention_tracker":
                signals[name] = _focus(spec, state, geometry, modules)
            elif spec.kind == "probe":
                signals[name] = _probe(spec, state, vectors)
            elif spec.kind == "token_probe":
                signals[name] = _token_probe(spec, state)
            elif spec.kind == "reranker":
                signals[name] = _relevance(spec, state, geometry, modules)
            elif (unit := analyzer_units.get(spec.kind)) is not None:
                signals[name] = unit.compute(spec.params, state.captures)
            else:
                raise NotImplementedError(f"the {spec.kind} analyzer does not run inside vLLM")
        except Exception as exc:  # recorded and acted on by the error mode
            errors[name] = f"{type(exc).__name__}: {exc}"
    return signals, errors


def read_signals(batch: Sequence[Signals]) -> None:
    """Replace every queued or tensor value in ``batch`` by its python
    float, one transfer per device, then check every value. In place."""
    _score_queued(batch)
    pending = [(signals, name, value) for signals, _ in batch for name, value in signals.items()
               if isinstance(value, torch.Tensor)]
    for device in {value.device for _, _, value in pending}:
        on_device = [(signals, name, value) for signals, name, value in pending if value.device == device]
        host = torch.stack([value.reshape(()).double() for _, _, value in on_device]).tolist()
        for (signals, name, _), value in zip(on_device, host):
            signals[name] = value
    for signals, errors in batch:
        for name in list(signals):
            try:
                _check_finite(signals[name])
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                del signals[name]


def _check_finite(value: Any) -> None:
    """A NaN compares false with every threshold: it would read as "fine"."""
    for v in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"the analyzer produced {v}")


def _spans(state, policy: str, role: str) -> list[tuple[int, int]]:
    spans = ((state.args.get("spans") or {}).get(policy) or {}).get(role)
    if not spans:
        raise ValueError(f"request has no {role!r} span for policy {policy!r}")
    return [(int(a), int(b)) for a, b in spans]


@dataclass(frozen=True)
class _Focus:
    """An attention tracker's value, queued: the step's requests that share
    its heads are scored together in :func:`read_signals`."""

    inputs: attention_tracker.FocusInputs
    heads: tuple[tuple[int, int], ...]  # this rank's, in its own head numbering
    geometry: Any  # this rank's
    scale: float
    of_heads: int  # the signal's heads on every rank: the mean's divisor


def _focus(spec, state, geometry, modules) -> _Focus | float:
    """On a rank that holds only some of the heads (tensor parallel), its
    share of the mean; the ranks add theirs up (decide_step.py)."""
    chosen = tuple((int(layer), int(head)) for layer, head in spec.params["heads"])
    heads, geometry = modules.shard.local_heads(chosen, geometry), modules.shard.geometry(geometry)
    if not heads:
        return 0.0
    layers = sorted({layer for layer, _ in heads})
    q_last = {layer: state.captures.q_last[layer] for layer in layers}
    k_all = {layer: state.captures.keys(layer) for layer in layers}
    for layer in layers:
        if k_all[layer].shape[0] != state.num_prompt_tokens:
            raise RuntimeError(
                f"captured K of {k_all[layer].shape[0]} prompt tokens at layer {layer}, expected "
                f"{state.num_prompt_tokens} (prefix-cache hit on a guarded request?)"
            )
    inputs = attention_tracker.focus_inputs(
        q_last,
        k_all,
        heads,
        _spans(state, spec.params["policy"], "instruction"),
        _spans(state, spec.params["policy"], "data"),
        geometry,
    )
    return _Focus(inputs, heads, geometry, float(modules.attention_scale(layers[0])), len(chosen))


def _score_queued(batch: Sequence[Signals]) -> None:
    """Each queued attention tracker's value, as a 0-dim tensor: one batched
    computation per set of heads. A failure fails those requests' signal."""
    groups: dict[tuple, list[tuple[dict, dict, str]]] = {}
    for signals, errors in batch:
        for name, value in signals.items():
            if isinstance(value, _Focus):
                groups.setdefault((value.heads, value.geometry, value.scale, value.of_heads), []).append((signals, errors, name))
    for (heads, geometry, scale, of_heads), members in groups.items():
        try:
            ratios = attention_tracker.head_focus_batch([m[0][m[2]].inputs for m in members], heads, geometry, scale)
            focus = ratios.mean(dim=1) if len(heads) == of_heads else ratios.sum(dim=1) / of_heads
            for (signals, _, name), value in zip(members, focus):
                signals[name] = value
        except Exception as exc:
            for signals, errors, name in members:
                del signals[name]
                errors[name] = f"{type(exc).__name__}: {exc}"


def _probe(spec, state, vectors) -> float:
    params = spec.params
    residual = state.captures.residual_last[int(params["layer"])]
    vector = vectors[params["vector"]]
    if params.get("score", "cosine") == "cosine":
        return probe.concept_cosine_tensor(residual, vector)
    return probe.logistic_probability_tensor(residual, vector, float(params.get("bias") or 0.0))


def _token_probe(spec, state) -> float:
    params, captures = spec.params, state.captures
    if captures.first_computed and not captures.scores_filled:
        raise RuntimeError(f"prompt positions 0..{captures.first_computed} came from the prefix cache and their token "
                           "scores were not read back")
    scores = captures.token_scores.get(spec.signal)
    if scores is None:
        raise RuntimeError("no token scores were recorded for this request")
    role = "data" if params.get("span", "untrusted") == "untrusted" else "instruction"
    ranges = [(a, b) for a, b in _spans(state, params["policy"], role) if b > a]
    if not ranges or max(b for _, b in ranges) > scores.shape[0]:
        raise ValueError(f"the {params.get('span', 'untrusted')} span is empty or outside the {scores.shape[0]} prompt tokens")
    # Slices, not an index tensor: copying an index from the host to a GPU
    # would wait for the step's forward pass.
    span_scores = torch.cat([scores[a:b] for a, b in ranges]) + float(params.get("bias") or 0.0)
    window = int(params.get("window", 12))
    offset = token_probe.length_offset(span_scores.shape[0], window, float(params.get("length_adjust", 0.0)))
    return token_probe.window_max_tensor(span_scores, window) - offset


def _relevance(spec, state, geometry, modules) -> list[float]:
    """Per document, the share of the query's attention to it that exceeds
    what the content-free query gives it: in [0, 1], 0 = no more than "N/A".
    The raw ICR scores and the ranking go into the request's details."""
    name = spec.signal
    calibration = state.calibration or {}
    if name in calibration.get("errors", {}):
        raise RuntimeError(calibration["errors"][name])
    if name not in calibration.get("scores", {}):
        raise RuntimeError("no calibration pass was recorded for this request")
    documents = [(int(a), int(b)) for a, b in state.args["rerank"][name]["documents"]]
    query_scores = query_token_attention(spec, state, geometry, modules)
    result = reranker.rerank(query_scores, calibration["scores"][name], documents)
    mass = [float(query_scores[a:b].sum()) for a, b in documents]
    relevance = [min(max(score / m, 0.0), 1.0) if m > 0 else 0.0 for score, m in zip(result.scores, mass)]
    state.details[name] = {"scores": result.scores, "order": result.order}
    return relevance

"""``residual_norm``: how large the residual stream is at the last prompt token.

The signal is the root mean square of the residual stream after ``layer``
(Hugging Face's layer output) at the last prompt token, optionally divided
by a baseline the operator measured on ordinary traffic. Inputs far from
what the model was trained on (glitch tokens, adversarial suffixes, long
runs of one character) drive some residual dimensions to values many times
their usual size; a norm is the cheapest signal that sees it, and needs no
artifact.

This file is the whole analyzer: its keys in the policy language, its
check against the model, what the worker captures for it, its computation
inside vLLM and its reference in plain Hugging Face transformers. Its
parity test is tests/runtime/test_runtime_parity.py; its policy-language
tests tests/analyzers/test_residual_norm.py.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from innerguard.engine.analyzers import Analyzer, Needs, Problem


class ResidualNorm(Analyzer):
    kind = "residual_norm"
    summary = ("Root mean square of the residual stream after 'layer' at the last prompt token, divided by "
               "'baseline' (a number >= 0, unbounded). Unusually large values mark inputs unlike ordinary text.")
    keys = {
        "layer": {"type": "integer", "minimum": 0,
                  "description": "Layer (0-based) whose output residual stream is measured."},
        "baseline": {"type": "number", "exclusiveMinimum": 0, "default": 1.0,
                     "description": "Divide by this (the value on ordinary traffic), so that thresholds read as multiples of it."},
    }
    required = ("layer",)
    value_range = (0.0, math.inf)

    def params(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"layer": int(data["layer"]), "baseline": float(data.get("baseline", 1.0))}

    def check(self, params: Mapping[str, Any], geometry: Any) -> list[Problem]:
        if params["layer"] >= geometry.num_layers:
            return [Problem("layer", f"layer {params['layer']} is out of range; the model has layers 0..{geometry.num_layers - 1}",
                            rule="IG601")]
        return []

    def needs(self, params: Mapping[str, Any]) -> Needs:
        layer = params["layer"]
        return Needs(f"residual stream after layer {layer}, last prompt token", residual_layers=(layer,))

    def compute(self, params: Mapping[str, Any], captures: Any) -> Any:
        import torch

        residual = captures.residual_last[params["layer"]].float()
        return torch.linalg.vector_norm(residual) / math.sqrt(residual.numel()) / params["baseline"]

    def reference(self, params: Mapping[str, Any], model: Any, input_ids: list[int]) -> float:
        from innerguard.engine.reference.scores import reference_residual

        values = [float(v) for v in reference_residual(model, input_ids, params["layer"])]
        return math.sqrt(math.fsum(v * v for v in values) / len(values)) / params["baseline"]

"""Cheap fluency checks of steering vectors: a short greedy generation with
each vector added (through innerguard's own steering, inside vLLM), scored
by how varied its tokens are.

Steering runs only through policies, so each swept layer gets a throwaway
policy in a temporary folder (``when: true``, ``action: steer``, the
layer's vector as artifact); every request names its one policy, the
baseline names none (unguarded). Metrics per generation:

- distinct: distinct tokens / tokens (1.0 = no token repeats);
- repeated 3-grams: the share of token 3-grams that occurred earlier in
  the same generation (0.0 = no loops);
- a sample: the first prompt's steered text from where it leaves the
  unsteered one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from innerguard.engine.build import artifact
from innerguard.engine.errors import InnerguardError

POLICY = """\
# yaml-language-server: $schema=../schemas/policy.schema.json
# Written by innerguard build vector --sweep: steer every request that names it.
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: {name}
  version: "0"
model: {model}
mode: enforce
on_error: fail-open
signals: {{}}
rules:
  - id: steer
    when: true
    action: steer
    steer:
      vector: {{artifact: artifacts/{file}, key: vector}}
      layer: {layer}
      coefficient: {coefficient!r}
      positions: generated
      method: add
"""


class FluencyError(InnerguardError):
    pass


@dataclass(frozen=True)
class Fluency:
    distinct: float
    repeated_trigrams: float
    sample: str


def policy_name(layer: int) -> str:
    return f"build-sweep-l{layer}"


def write_policies(folder: Path, vectors: Mapping[int, torch.Tensor], *, coefficient: float, model_name: str) -> None:
    """One steering policy per layer (vector files under ``artifacts/``)."""
    (folder / "artifacts").mkdir(parents=True, exist_ok=True)
    for layer, vector in vectors.items():
        file = f"sweep-l{layer}.safetensors"
        artifact.write(folder / "artifacts" / file, {"vector": vector.float().contiguous()},
                       {"model_name": model_name, "hidden_size": str(vector.numel()), "layer": str(layer)})
        (folder / f"{policy_name(layer)}.yaml").write_text(
            POLICY.format(name=policy_name(layer), model=model_name, file=file, layer=layer, coefficient=float(coefficient)),
            "utf-8")


def measure(guarded, folder: Path, layers: Sequence[int], prompts: Sequence[list[dict]], tokens: int) -> dict[Any, Fluency]:
    """Per layer (and ``None``: unsteered), the mean fluency over ``prompts``."""
    from vllm import SamplingParams

    if not hasattr(guarded, "reload") or not hasattr(guarded, "run"):
        raise FluencyError("fluency needs a guarded engine (innerguard.engine.guarded.GuardedLLM) to steer")
    guarded.reload(folder)
    runs: list[tuple[Any, int]] = []
    rows = []
    for which in (None, *layers):
        for i, messages in enumerate(prompts):
            rows.append({"id": f"{which}-{i}", "messages": messages,
                         "policies": [] if which is None else [policy_name(which)]})
            runs.append((which, i))
    outputs = guarded.run(rows, SamplingParams(temperature=0.0, max_tokens=tokens))
    by: dict[Any, list] = {}
    for (which, _), out in zip(runs, outputs):
        if out.error:
            raise FluencyError(f"steered generation failed (layer {which}): {out.error}")
        by.setdefault(which, []).append(out)
    result = {}
    for which, outs in by.items():
        ids = [list(o.token_ids) for o in outs]
        result[which] = Fluency(
            distinct=round(sum(distinct(t) for t in ids) / len(ids), 4),
            repeated_trigrams=round(sum(repeated_ngrams(t, 3) for t in ids) / len(ids), 4),
            sample=outs[0].text if which is None else divergence(by[None][0].text, outs[0].text),
        )
    return result


def divergence(baseline: str, steered: str) -> str:
    """The steered text from the word where it leaves the unsteered one
    ("=" when it never does)."""
    if steered == baseline:
        return "= unsteered"
    at = next((i for i, (a, b) in enumerate(zip(baseline, steered)) if a != b), min(len(baseline), len(steered)))
    start = steered.rfind(" ", 0, at) + 1
    return ("…" if start else "") + steered[start:]


def distinct(tokens: Sequence[int]) -> float:
    return len(set(tokens)) / len(tokens) if tokens else 0.0


def repeated_ngrams(tokens: Sequence[int], n: int) -> float:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)

"""``build vector``: a steering vector from contrastive pairs (CAA-style
difference of means), and a layer sweep that reports effect and fluency.

For each pair the conversation is captured twice inside vLLM, once with the
positive and once with the negative answer as the last (assistant)
message; the residual stream after the layer is averaged over the answer's
tokens. The vector is the mean over pairs of (positive − negative),
rescaled to ``--relative-norm`` × the layer's mean residual norm over the
answer tokens (token-weighted over both answers, averaged over pairs):
residual norms differ ~10x between layers on small models, so a steering
coefficient c then adds c × relative-norm of a typical residual, at any
layer. Raw and stored norms go in the metadata.

Effect, per layer: project the positive and negative answer means of the
held-out pairs (``--holdout``, seeded) on the unit vector fitted on the
other pairs; report the mean gap, the gap in pooled standard deviations
(d), and the share of pairs ordered right. Fluency (sweep only): greedy
steered generations of held-out prompts, see ``fluency``.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from innerguard.engine.build import data as data_lib
from innerguard.engine.build import features, fluency
from innerguard.engine.build.engine import model_dir_of
from innerguard.engine.build.fit import one_thread
from innerguard.engine.build.recipe import Built, Params, model_metadata
from innerguard.engine import models


@dataclass
class VectorParams(Params):
    kind: ClassVar[str] = "vector"
    FLAGS: ClassVar[dict[str, str]] = {"model": "--model", "pairs": "--pairs", "layer": "--layer",
                                       "relative_norm": "--relative-norm", "holdout": "--holdout", "seed": "--seed"}
    INPUTS: ClassVar[tuple[str, ...]] = ("pairs",)

    model: str = ""
    pairs: str = ""
    layer: int = 0
    relative_norm: float = 0.1
    holdout: float = 0.0  # 0: the vector from every pair, figures in-sample
    seed: int = 0


@dataclass
class SweepParams:
    model: str
    pairs: str
    layers: tuple[int, int]  # first, last (inclusive)
    relative_norm: float = 0.1
    holdout: float = 0.25
    seed: int = 0
    coefficient: float = 4.0
    fluency_prompts: int = 3
    fluency_tokens: int = 32


@dataclass
class LayerFigures:
    layer: int
    residual_norm: float
    raw_norm: float
    gap: float  # mean projection gap (positive − negative) on the evaluated pairs, in residual units
    d: float  # the gap in pooled standard deviations of the projections
    ordered: float  # share of evaluated pairs with projection(positive) > projection(negative)
    fluency: fluency.Fluency | None = None


@dataclass
class _States:
    pos: features.AnswerStates
    neg: features.AnswerStates


def _capture(target, pairs, layers: Sequence[int], progress: bool) -> _States:
    conversations = [p[1] for p in pairs]
    both = features.answer_residuals(target, conversations * 2, [p[2] for p in pairs] + [p[3] for p in pairs], layers,
                                     progress=progress, desc="answers")
    n = len(pairs)

    def part(s: slice) -> features.AnswerStates:
        return features.AnswerStates(both.mean[s], both.norm[s], both.tokens[s])

    return _States(part(slice(0, n)), part(slice(n, 2 * n)))


def _layer_vector(states: _States, index: int, rows: Sequence[int], relative_norm: float) -> tuple[torch.Tensor, float, float]:
    """(stored vector, residual norm, raw CAA norm) at layer position ``index`` over pairs ``rows``."""
    with one_thread():
        pos, neg = states.pos.mean[rows, index], states.neg.mean[rows, index]
        caa = (pos - neg).mean(0)
        n_pos, n_neg = states.pos.tokens[rows].float(), states.neg.tokens[rows].float()
        per_pair = (states.pos.norm[rows, index] * n_pos + states.neg.norm[rows, index] * n_neg) / (n_pos + n_neg)
        residual_norm = float(per_pair.mean())
        raw = float(caa.norm())
        if raw == 0.0:
            raise data_lib.BuildDataError("the positive and negative answers give the same mean residual: no direction")
        return (caa / caa.norm() * relative_norm * residual_norm).float(), residual_norm, raw


def _effect(states: _States, index: int, rows: Sequence[int], unit: torch.Tensor) -> tuple[float, float, float]:
    with one_thread():
        pos = states.pos.mean[rows, index] @ unit
        neg = states.neg.mean[rows, index] @ unit
        gap = float((pos - neg).mean())
        pooled = float(torch.sqrt((pos.var(unbiased=False) + neg.var(unbiased=False)) / 2)) if len(rows) > 1 else 0.0
        d = gap / pooled if pooled > 0 else float("inf")
        return gap, d, float((pos > neg).float().mean())


def _read_pairs(path: str):
    source = data_lib.read_jsonl(path, "--pairs")
    return source, data_lib.pairs(source)


def build_vector(target, params: VectorParams, *, progress: bool = False) -> Built:
    model_dir = model_dir_of(target)
    geometry = models.read_geometry(model_dir)
    _check_layer(params.layer, geometry)
    if params.relative_norm <= 0:
        raise data_lib.BuildDataError(f"--relative-norm {params.relative_norm}: must be above 0")
    source, pairs = _read_pairs(params.pairs)
    fit_rows, held_rows = data_lib.split(len(pairs), params.holdout, params.seed)
    states = _capture(target, pairs, [params.layer], progress)
    vector, residual_norm, raw = _layer_vector(states, 0, fit_rows, params.relative_norm)
    evaluated = held_rows or fit_rows
    gap, d, ordered = _effect(states, 0, evaluated, vector / vector.norm())
    where = f"{len(held_rows)} held-out pairs" if held_rows else f"the {len(fit_rows)} fitted pairs (in-sample)"
    figures = {"pairs": len(fit_rows), "evaluated_pairs": len(evaluated), "in_sample": not held_rows,
               "residual_norm": round(residual_norm, 4), "raw_norm": round(raw, 4),
               "vector_norm": round(float(vector.norm()), 4), "gap": round(gap, 4), "d": round(d, 4), "ordered": round(ordered, 4)}
    report = [
        f"vector at layer {params.layer} from {len(fit_rows)} pairs: mean residual norm {residual_norm:.1f}, raw CAA norm "
        f"{raw:.1f}, stored norm {float(vector.norm()):.1f} ({params.relative_norm:g} x residual)",
        f"effect on {where}: projection gap {gap:.2f} (d = {d:.2f}), positive above negative in {ordered:.0%}",
    ]
    metadata = {
        **{k: v for k, v in model_metadata(params, model_dir).items() if k not in ("num_layers", "num_heads")},
        "layer": str(params.layer),
        "protocol": "CAA steering vector: residual stream after the layer averaged over the answer tokens of "
                    "conversation + positive answer and conversation + negative answer; mean over pairs of "
                    "(positive - negative), rescaled to relative_norm x the mean residual norm over the answer tokens",
        "kind": "steering: CAA mean(positive - negative) over answer tokens, rescaled",
        "residual_norm": f"{residual_norm:.4f}",
        "raw_norm": f"{raw:.4f}",
        "vector_norm": f"{float(vector.norm()):.4f}",
        "relative_norm": repr(float(params.relative_norm)),
        "samples": f"{len(fit_rows)} pairs",
    }
    return Built(params, {"vector": vector.contiguous()}, metadata, report, figures, {source.path: source.sha256})


def sweep(target, params: SweepParams, *, progress: bool = False, policy_folder: Path | None = None) -> tuple[list[LayerFigures], list[str]]:
    """Per layer of ``params.layers``: norms, held-out effect and (with a
    guarded ``target`` and ``fluency_prompts``) the fluency of steered text.
    Returns the figures and the report lines; writes no artifact."""
    model_dir = model_dir_of(target)
    geometry = models.read_geometry(model_dir)
    first, last = params.layers
    for layer in (first, last):
        _check_layer(layer, geometry)
    if last < first:
        raise data_lib.BuildDataError(f"--sweep {first}:{last}: the last layer comes before the first")
    if params.holdout <= 0:
        raise data_lib.BuildDataError("a sweep measures on held-out pairs: --holdout must be above 0")
    if params.relative_norm <= 0 or params.fluency_prompts < 0 or params.fluency_tokens < 3:
        raise data_lib.BuildDataError("--relative-norm must be above 0, --fluency-prompts at least 0, --fluency-tokens at least 3")
    _, pairs = _read_pairs(params.pairs)
    fit_rows, held_rows = data_lib.split(len(pairs), params.holdout, params.seed)
    layers = list(range(first, last + 1))
    states = _capture(target, pairs, layers, progress)
    rows: list[LayerFigures] = []
    vectors = {}
    for i, layer in enumerate(layers):
        vector, residual_norm, raw = _layer_vector(states, i, fit_rows, params.relative_norm)
        gap, d, ordered = _effect(states, i, held_rows, vector / vector.norm())
        vectors[layer] = vector
        rows.append(LayerFigures(layer, residual_norm, raw, gap, d, ordered))
    baseline = None
    if params.fluency_prompts:
        prompts = [pairs[i][1] for i in held_rows[:params.fluency_prompts]]
        with tempfile.TemporaryDirectory(prefix="innerguard-sweep-") as tmp:
            folder = policy_folder or Path(tmp)
            fluency.write_policies(folder, vectors, coefficient=params.coefficient, model_name=Path(str(params.model)).name)
            measured = fluency.measure(target, folder, layers, prompts, params.fluency_tokens)
        baseline = measured[None]
        for row in rows:
            row.fluency = measured[row.layer]
    report = [f"sweep layers {first}-{last}: vectors from {len(fit_rows)} pairs, effect on {len(held_rows)} held-out pairs"
              + (f", fluency of {params.fluency_tokens} greedy tokens on {min(params.fluency_prompts, len(held_rows))} held-out "
                 f"prompts steered with coefficient {params.coefficient:g} x {params.relative_norm:g} x residual norm"
                 if params.fluency_prompts else "")]
    header = f"{'layer':>5} {'resid norm':>10} {'raw norm':>9} {'gap':>8} {'d':>7} {'ordered':>8}"
    if baseline:
        header += f" {'distinct':>8} {'rep 3g':>7}  sample"
    report.append(header)
    for row in rows:
        line = f"{row.layer:>5} {row.residual_norm:>10.1f} {row.raw_norm:>9.2f} {row.gap:>8.2f} {row.d:>7.2f} {row.ordered:>8.0%}"
        if row.fluency:
            line += f" {row.fluency.distinct:>8.2f} {row.fluency.repeated_trigrams:>7.2f}  {_short(row.fluency.sample)}"
        report.append(line)
    if baseline:
        report.append(f"{'none':>5} {'':>10} {'':>9} {'':>8} {'':>7} {'':>8} {baseline.distinct:>8.2f} "
                      f"{baseline.repeated_trigrams:>7.2f}  {_short(baseline.sample)}")
    return rows, report


def _check_layer(layer: int, geometry) -> None:
    if not 0 <= layer < geometry.num_layers:
        raise data_lib.BuildDataError(f"layer {layer}: outside 0..{geometry.num_layers - 1} "
                                      f"({geometry.architecture} has {geometry.num_layers} decoder layers)")


def _short(text: str, width: int = 64) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[:width - 1] + "…")


def sweep_figures(rows: Sequence[LayerFigures]) -> list[dict[str, Any]]:
    return [{"layer": r.layer, "residual_norm": round(r.residual_norm, 4), "raw_norm": round(r.raw_norm, 4),
             "gap": round(r.gap, 4), "d": round(r.d, 4), "ordered": round(r.ordered, 4),
             **({"distinct": r.fluency.distinct, "repeated_trigrams": r.fluency.repeated_trigrams} if r.fluency else {})}
            for r in rows]

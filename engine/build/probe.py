"""``build probe``: a logistic probe on the residual stream at the last
prompt token (the ``probe`` analyzer with ``score: probability``).

The residual after ``--layer`` is captured inside vLLM for every labelled
row; ``weight`` and ``bias`` come from L2-regularised logistic regression
(``fit.fit_logistic``: deterministic LBFGS on standardised features, folded
back so that sigmoid(weight·x + bias) reads the raw residual). The file
also carries ``vector`` = unit(mean(label 1) − mean(label 0)) over the same
rows, for a ``score: cosine`` probe.

Held-out figures come from ``--heldout FILE`` (other rows), else from a
seeded stratified split of ``--data`` (``--holdout`` fraction, default 0.2;
the probe is then fitted on the rest). ``--holdout 0`` fits on every row
and reports in-sample figures only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from innerguard.engine.build import data as data_lib
from innerguard.engine.build import features, fit
from innerguard.engine.build.engine import model_dir_of
from innerguard.engine.build.recipe import Built, Params, model_metadata
from innerguard.engine import models
from innerguard.engine.evaluate.metrics import auroc

DEFAULT_HOLDOUT = 0.2


@dataclass
class ProbeParams(Params):
    kind: ClassVar[str] = "probe"
    FLAGS: ClassVar[dict[str, str]] = {"model": "--model", "data": "--data", "layer": "--layer", "heldout": "--heldout",
                                       "holdout": "--holdout", "l2": "--l2", "seed": "--seed"}
    INPUTS: ClassVar[tuple[str, ...]] = ("data", "heldout")

    model: str = ""
    data: str = ""
    layer: int = 0
    heldout: str | None = None
    holdout: float | None = None  # None: 0 with --heldout, else DEFAULT_HOLDOUT
    l2: float = 1e-2
    seed: int = 0

    def resolved(self) -> "ProbeParams":
        if self.heldout and self.holdout:
            raise data_lib.BuildDataError("--heldout and --holdout both give held-out rows; use one")
        holdout = self.holdout if self.holdout is not None else (0.0 if self.heldout else DEFAULT_HOLDOUT)
        return ProbeParams(**{**self.to_dict(), "holdout": holdout})


def build_probe(target, params: ProbeParams, *, progress: bool = False) -> Built:
    params = params.resolved()
    model_dir = model_dir_of(target)
    geometry = models.read_geometry(model_dir)
    if not 0 <= params.layer < geometry.num_layers:
        raise data_lib.BuildDataError(f"--layer {params.layer}: outside 0..{geometry.num_layers - 1} "
                                      f"({geometry.architecture} has {geometry.num_layers} decoder layers)")
    if params.l2 < 0:
        raise data_lib.BuildDataError(f"--l2 {params.l2}: must be at least 0")
    source = data_lib.read_jsonl(params.data, "--data")
    hashes = {source.path: source.sha256}
    rows, labels = data_lib.labelled(source)
    fit_index, held_index = data_lib.split(len(rows), params.holdout, params.seed, labels)
    held_rows, held_labels = [rows[i] for i in held_index], [labels[i] for i in held_index]
    if params.heldout:
        heldout = data_lib.read_jsonl(params.heldout, "--heldout")
        hashes[heldout.path] = heldout.sha256
        held_rows, held_labels = data_lib.labelled(heldout)

    x_all = features.last_token_residuals(target, rows, [params.layer], progress=progress, desc="fit rows")[:, 0]
    y_all = torch.tensor(labels, dtype=torch.float32)
    x, y = x_all[fit_index], y_all[fit_index]
    weight, bias = fit.fit_logistic(x, y, l2=params.l2)
    vector = fit.mean_difference(x, y)

    def prob(r: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(r @ weight + bias)

    def cos(r: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cosine_similarity(r, vector[None], dim=1)

    figures: dict[str, Any] = {"fit_rows": len(fit_index), "fit_positive": int(y.sum())}
    figures.update(_figures("fit", prob(x), cos(x), y))
    report = [f"probe at layer {params.layer}: fitted on {len(fit_index)} rows ({int(y.sum())} positive), l2 {params.l2:g}",
              _line("in-sample", figures, "fit")]
    if held_rows:
        if params.heldout:
            xh = features.last_token_residuals(target, held_rows, [params.layer], progress=progress, desc="held-out rows")[:, 0]
        else:
            xh = x_all[held_index]
        yh = torch.tensor(held_labels, dtype=torch.float32)
        figures.update(_figures("heldout", prob(xh), cos(xh), yh))
        where = params.heldout or f"{len(held_index)} rows split off --data (seed {params.seed})"
        report.append(_line(f"held-out ({where})", figures, "heldout"))
    else:
        report.append("no held-out rows (--holdout 0): in-sample figures only")

    metadata = {
        **{k: v for k, v in model_metadata(params, model_dir).items() if k not in ("num_layers", "num_heads")},
        "layer": str(params.layer),
        "protocol": "logistic probe on the residual stream after the layer at the last prompt token: "
                    "P(label 1) = sigmoid(weight . x + bias[0]); L2-regularised logistic regression (LBFGS) on "
                    "standardised features; vector = unit(mean(label 1) - mean(label 0)) on the same rows (cosine)",
        "kind": "concept: unit(mean(label 1) - mean(label 0)) at the last prompt token",
        "probe": "logistic: sigmoid(weight . x + bias[0]) on the same residual",
        "samples": f"{len(fit_index)} rows ({int(y.sum())} label 1)",
    }
    tensors = {"weight": weight.float().contiguous(), "bias": torch.tensor([bias], dtype=torch.float32),
               "vector": vector.float().contiguous()}
    return Built(params, tensors, metadata, report, figures, hashes)


def _figures(prefix: str, p: torch.Tensor, c: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    pos, neg = p[y == 1], p[y == 0]
    out = {
        f"{prefix}_accuracy": round(float(((p > 0.5).float() == y).float().mean()), 4),
        f"{prefix}_auroc": round(auroc(p.tolist(), [int(v) for v in y.tolist()]) or float("nan"), 4),
        f"{prefix}_rows": len(y),
    }
    for name, values in (("positive", pos), ("negative", neg)):
        if len(values):
            out[f"{prefix}_p_{name}"] = [round(float(values.mean()), 4), round(float(values.min()), 4), round(float(values.max()), 4)]
    out[f"{prefix}_cosine_positive_mean"] = round(float(c[y == 1].mean()), 4) if bool((y == 1).any()) else None
    out[f"{prefix}_cosine_negative_mean"] = round(float(c[y == 0].mean()), 4) if bool((y == 0).any()) else None
    return out


def _line(label: str, f: dict[str, Any], prefix: str) -> str:
    parts = [f"{label}: accuracy {f[prefix + '_accuracy']:.3f}, AUROC {f[prefix + '_auroc']:.3f} ({f[prefix + '_rows']} rows)"]
    for name in ("positive", "negative"):
        v = f.get(f"{prefix}_p_{name}")
        if v:
            parts.append(f"P(label 1) on label {1 if name == 'positive' else 0}: mean {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]")
    if f.get(f"{prefix}_cosine_positive_mean") is not None and f.get(f"{prefix}_cosine_negative_mean") is not None:
        parts.append(f"vector cosine {f[prefix + '_cosine_positive_mean']:.3f} vs {f[prefix + '_cosine_negative_mean']:.3f}")
    return "; ".join(parts)

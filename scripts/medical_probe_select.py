#!/usr/bin/env python
"""Choose the medical-topic probe's layer, fit data and L2 on the DEV split
only (issue 32 item 5). One recording engine captures the last-prompt-token
residual at every candidate layer for fit, old-fit and dev rows in one pass;
each (layer, fit set, l2) is then fitted with the same code as
``innerguard build probe`` (``fit.fit_logistic``) and scored on dev.

Never reads medical-real-test.jsonl.

    .venv/bin/python scripts/medical_probe_select.py --out /tmp/med-select.json

The threshold proposed per candidate is the dev score that keeps dev TPR at
or above 92 % (a margin over the 90 % target), rounded down to 0.01.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from innerguard.engine.build import engine as engine_lib, features, fit  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "artifacts"
LAYERS = [4, 8, 12, 16, 20, 24, 28]


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None]).float().sum() + 0.5 * (pos[:, None] == neg[None]).float().sum()
    return float(greater / (len(pos) * len(neg)))


def fpr_at_tpr(scores: torch.Tensor, labels: torch.Tensor, tpr: float) -> float:
    pos = scores[labels == 1].sort().values
    cut = pos[int(math.floor((1 - tpr) * len(pos)))]  # the k-th lowest positive: >= tpr of positives at or above
    return float((scores[labels == 0] >= cut).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--features", type=Path, default=Path("/tmp/med-select-features.pt"))
    args = parser.parse_args()
    sets = {"real": _rows("medical-real-fit.jsonl"), "old": _rows("medical-fit.jsonl"), "dev": _rows("medical-real-dev.jsonl")}
    if args.features.exists():
        feats = torch.load(args.features)
    else:
        with engine_lib.recording_engine("smollm2-135m-instruct") as llm:
            feats = {name: features.last_token_residuals(llm, rows, LAYERS, progress=True, desc=name)
                     for name, rows in sets.items()}
        torch.save(feats, args.features)
    labels = {name: torch.tensor([r["label"] for r in rows], dtype=torch.float32) for name, rows in sets.items()}
    dev_style = [r["style"] for r in sets["dev"]]
    near = torch.tensor([s == "near-miss" for s in dev_style])
    results = []
    for li, layer in enumerate(LAYERS):
        for fit_name in ("real", "real+old"):
            parts = ["real"] if fit_name == "real" else ["real", "old"]
            x = torch.cat([feats[p][:, li] for p in parts])
            y = torch.cat([labels[p] for p in parts])
            for l2 in (0.01, 0.1, 1.0):
                w, b = fit.fit_logistic(x, y, l2=l2)
                s = torch.sigmoid(feats["dev"][:, li] @ w + b)
                yd = labels["dev"]
                pos = s[yd == 1].sort().values
                thr = math.floor(float(pos[int(math.floor(0.08 * len(pos)))]) * 100) / 100
                fired = s > thr
                res = {"layer": layer, "fit": fit_name, "l2": l2, "dev_auroc": round(auroc(s, yd), 4),
                       "dev_fpr_at_tpr90": round(fpr_at_tpr(s, yd, 0.90), 4), "threshold": thr,
                       "dev_tpr_at_thr": round(float(fired[yd == 1].float().mean()), 4),
                       "dev_fpr_at_thr": round(float(fired[yd == 0].float().mean()), 4),
                       "dev_nearmiss_fpr_at_thr": round(float(fired[near].float().mean()), 4),
                       "dev_fpr_at_0.5": round(float((s > 0.5)[yd == 0].float().mean()), 4),
                       "dev_tpr_at_0.5": round(float((s > 0.5)[yd == 1].float().mean()), 4)}
                results.append(res)
                print(json.dumps(res), flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

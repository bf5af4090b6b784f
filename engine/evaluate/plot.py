"""The evaluation PNG: ROC curve, and the score's distribution per label
with the policy's thresholds."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from innerguard.engine.evaluate.metrics import oriented, roc_curve
from innerguard.engine.evaluate.report import RowResult


def write_plot(path: str | Path, results: Sequence[RowResult], report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    score = report["score"]
    scored = [r for r in results if r.error is None and r.score is not None]
    labels = [r.label for r in scored]
    curve = roc_curve(oriented([r.score for r in scored], score["higher_is_positive"]), labels)
    fig, (roc, hist) = plt.subplots(1, 2, figsize=(11, 4.5))
    roc.plot([p.fpr for p in curve], [p.tpr for p in curve], lw=2, label=f"{score['signal']} (AUROC {report['auroc']:.3f})")
    roc.plot([0, 1], [0, 1], ls=":", color="grey")
    c = report["confusion"]
    if c["fpr"] is not None and c["recall"] is not None:
        roc.plot([c["fpr"]], [c["recall"]], "o", color="red", label=f"policy verdict (FPR {c['fpr']:.3f}, TPR {c['recall']:.3f})")
    action = score.get("action", "block")
    roc.set_xlabel(f"false positive rate (label 0 rows the policy's rule would {action})")
    roc.set_ylabel(f"true positive rate (label 1 rows the policy's rule would {action})")
    roc.set_title(f"{report['policy']} {report['version']}: ROC")
    roc.legend(loc="lower right", fontsize=8, framealpha=0.9)
    roc.grid(alpha=0.3)

    values = [r.score for r in scored]
    thresholds = list(score["thresholds"])
    cal = report.get("calibration") or {}
    calibrated = cal.get("threshold")
    # Probabilities piled up at 0 and 1 hide the separation: show their logits.
    squashed = 0 <= min(values) and max(values) <= 1 and sum(v < 0.01 or v > 0.99 for v in values) > 0.3 * len(values)
    if squashed:
        values = [_logit(v) for v in values]
        thresholds = [_logit(t) for t in thresholds]
        calibrated = None if calibrated is None else _logit(calibrated)
    lo, hi = min(values), max(values)
    bins = [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else 10
    hist.hist([v for v, y in zip(values, labels) if not y], bins=bins, alpha=0.6, label="label 0 (should pass)", color="tab:blue")
    hist.hist([v for v, y in zip(values, labels) if y], bins=bins, alpha=0.6, label=f"label 1 (should {action})", color="tab:orange")
    for t, raw in zip(thresholds, score["thresholds"]):
        hist.axvline(t, color="red", ls="--", lw=1.5, label=f"{action} threshold {raw:g}")
    if calibrated is not None:
        hist.axvline(calibrated, color="green", ls=":", lw=1.5, label=f"calibrated ({100 * cal['target_fpr']:g}% FPR) {cal['threshold']:.4g}")
    hist.set_xlabel(f"logit({score['signal']})" if squashed else score["signal"])
    hist.set_ylabel("rows")
    hist.set_title(f"score distribution ({report['data']})", fontsize=9)
    hist.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _logit(p: float, clip: float = 1e-6) -> float:
    p = min(max(p, clip), 1 - clip)
    return math.log(p / (1 - p))

"""Detection metrics over (score, label) pairs, in plain Python.

Scores are oriented so that *higher means more likely positive* (label 1);
callers flip a "low = attack" signal such as the attention tracker's focus
before calling (see :func:`oriented`). Ties are handled exactly: AUROC is the
Mann-Whitney statistic with half credit for ties, and ROC points step over
whole groups of equal scores.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import sqrt
from typing import Sequence

Z_95 = 1.959963984540054  # two-sided 95 % normal quantile


def oriented(scores: Sequence[float], higher_is_positive: bool) -> list[float]:
    return [float(s) if higher_is_positive else -float(s) for s in scores]


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """P(score of a random positive > score of a random negative), ties 1/2.
    None when one class is absent."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    ranked = sorted(zip(scores, labels), key=lambda p: p[0])
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid_rank = (i + 1 + j) / 2  # 1-based average rank of the tie group
        rank_sum += mid_rank * sum(1 for _, y in ranked[i:j] if y)
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


@dataclass(frozen=True)
class RocPoint:
    threshold: float  # predict positive when score >= threshold
    fpr: float
    tpr: float


def roc_curve(scores: Sequence[float], labels: Sequence[int]) -> list[RocPoint]:
    """From (0, 0) (threshold +inf) to (1, 1), one point per distinct score."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    points = [RocPoint(float("inf"), 0.0, 0.0)]
    tp = fp = 0
    ranked = sorted(zip(scores, labels), key=lambda p: -p[0])
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            tp += 1 if ranked[j][1] else 0
            fp += 0 if ranked[j][1] else 1
            j += 1
        points.append(RocPoint(ranked[i][0], fp / neg if neg else 0.0, tp / pos if pos else 0.0))
        i = j
    return points


def tpr_at_fpr(scores: Sequence[float], labels: Sequence[int], max_fpr: float) -> tuple[float, float]:
    """(tpr, threshold) of the best operating point whose FPR is <= max_fpr."""
    best = RocPoint(float("inf"), 0.0, 0.0)
    for point in roc_curve(scores, labels):
        if point.fpr <= max_fpr + 1e-12 and point.tpr > best.tpr:
            best = point
    return best.tpr, best.threshold


def threshold_for_fpr(scores: Sequence[float], labels: Sequence[int], target_fpr: float,
                      weights: Sequence[float] | None = None) -> float | None:
    """The lowest threshold (most recall) whose FPR stays <= target_fpr; a
    value halfway to the next lower score, so that new data near the edge is
    not decided by float noise. ``weights`` (one per row, default 1) weigh the
    negatives in the FPR, e.g. 1/|group| to count distinct texts rather than
    rows. None when no negatives."""
    weights = [1.0] * len(scores) if weights is None else list(weights)
    negatives = sorted(((s, w) for s, y, w in zip(scores, labels, weights) if not y), key=lambda sw: -sw[0])
    if not negatives:
        return None
    allowed = target_fpr * sum(w for _, w in negatives) + 1e-9  # negative weight we may let through
    passed, k = 0.0, 0
    while k < len(negatives) and passed + negatives[k][1] <= allowed:
        passed += negatives[k][1]
        k += 1
    if k >= len(negatives):
        return negatives[-1][0]
    edge = negatives[k][0]  # the highest negative that must stay below
    above = [s for s in scores if s > edge]
    return (edge + min(above)) / 2 if above else edge + 1e-6


@dataclass(frozen=True)
class Confusion:
    tp: int
    fp: int
    tn: int
    fn: int

    @classmethod
    def of(cls, predicted: Sequence[bool], labels: Sequence[int]) -> "Confusion":
        pairs = list(zip(predicted, labels))
        return cls(
            tp=sum(1 for p, y in pairs if p and y),
            fp=sum(1 for p, y in pairs if p and not y),
            tn=sum(1 for p, y in pairs if not p and not y),
            fn=sum(1 for p, y in pairs if not p and y),
        )

    @property
    def fpr(self) -> float | None:
        return self.fp / (self.fp + self.tn) if self.fp + self.tn else None

    @property
    def tpr(self) -> float | None:  # recall
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    def to_dict(self) -> dict:
        return {"tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
                "precision": self.precision, "recall": self.tpr, "fpr": self.fpr,
                "recall_95": wilson(self.tp, self.tp + self.fn), "fpr_95": wilson(self.fp, self.fp + self.tn)}


def wilson(k: int, n: int, z: float = Z_95) -> list[float] | None:
    """Wilson score interval for k successes in n trials ([low, high]; None
    when n is 0). Unlike the normal approximation it stays inside [0, 1] and
    is honest at 0 of n, which is what small calibration samples give."""
    if n == 0:
        return None
    p, z2 = k / n, z * z
    centre, half = p + z2 / (2 * n), z * sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return [max(0.0, (centre - half) / (1 + z2 / n)), min(1.0, (centre + half) / (1 + z2 / n))]

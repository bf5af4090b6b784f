"""From per-row results to the evaluation report (a plain dict) and its text form."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from innerguard.engine.evaluate.metrics import Confusion, auroc, oriented, threshold_for_fpr, tpr_at_fpr
from innerguard.engine.evaluate.score import Score

FPR_POINTS = (0.01, 0.05)
LENGTH_EDGES = (128, 256, 512, 1024, 2048)  # prompt tokens
# Long prompts also as one group each from these lengths up: a score that
# grows with length shows there first, and a per-bucket count is small.
LONG_FROM = (512, 1024)


@dataclass(frozen=True)
class RowResult:
    id: str
    label: int
    style: str
    prompt_tokens: int
    acted: bool  # the policy's own rules took the measured action (Score.action: block, or steer/flag)
    score: float | None  # the raw score signal; None when missing
    signals: dict[str, Any]
    error: str | None = None


def length_bucket(tokens: int) -> str:
    lo = 0
    for edge in LENGTH_EDGES:
        if tokens < edge:
            return f"{lo}-{edge - 1}"
        lo = edge
    return f">={lo}"


def _group(rows: Sequence[RowResult], score: Score) -> dict[str, Any]:
    labels = [r.label for r in rows]
    confusion = Confusion.of([r.acted for r in rows], labels)
    scored = [r for r in rows if r.score is not None]
    value = auroc(oriented([r.score for r in scored], score.higher_is_positive), [r.label for r in scored])
    return {"n": len(rows), "positives": sum(labels), "negatives": len(rows) - sum(labels),
            "fpr": confusion.fpr, "tpr": confusion.tpr, "auroc": value}


def build_report(results: Sequence[RowResult], score: Score, *, policy_version: str, data: str,
                 other_signals: Sequence[Score] = (), target_fpr: float | None = None) -> dict[str, Any]:
    ok = [r for r in results if r.error is None]
    scored = [r for r in ok if r.score is not None]
    labels = [r.label for r in scored]
    values = oriented([r.score for r in scored], score.higher_is_positive)
    report: dict[str, Any] = {
        "policy": score.policy,
        "version": policy_version,
        "data": data,
        "rows": len(results),
        "errors": len(results) - len(ok),
        "missing_score": len(ok) - len(scored),
        "positives": sum(r.label for r in ok),
        "negatives": sum(1 for r in ok if not r.label),
        "score": {"signal": score.signal, "higher_is_positive": score.higher_is_positive, "thresholds": list(score.thresholds),
                  "action": score.action},
        "auroc": auroc(values, labels),
        "tpr_at_fpr": {},
        "confusion": Confusion.of([r.acted for r in ok], [r.label for r in ok]).to_dict(),
        "per_style": {},
        "by_length": {},
        "signals_auroc": {},
    }
    for fpr in FPR_POINTS:
        tpr, threshold = tpr_at_fpr(values, labels, fpr)
        raw = threshold if score.higher_is_positive else -threshold
        report["tpr_at_fpr"][f"{fpr:g}"] = {"tpr": tpr, "threshold": raw if abs(raw) != float("inf") else None}
    for style in sorted({r.style for r in ok}):
        report["per_style"][style] = _group([r for r in ok if r.style == style], score)
    buckets = sorted({length_bucket(r.prompt_tokens) for r in ok}, key=lambda b: int(b.lstrip(">=").split("-")[0]))
    for bucket in buckets:
        report["by_length"][bucket] = _group([r for r in ok if length_bucket(r.prompt_tokens) == bucket], score)
    for low in LONG_FROM:
        longer = [r for r in ok if r.prompt_tokens >= low]
        if longer and any(r.prompt_tokens < low for r in ok):
            report["by_length"][f"all >={low}"] = _group(longer, score)
    for other in (score, *other_signals):
        pairs = [(other.value(r.signals), r.label) for r in ok]
        pairs = [(v, y) for v, y in pairs if v is not None]
        if pairs:
            report["signals_auroc"][other.signal] = auroc(oriented([v for v, _ in pairs], other.higher_is_positive), [y for _, y in pairs])
    if target_fpr is not None:
        report["calibration"] = calibrate(values, labels, score, target_fpr)
    return report


def calibrate(values: Sequence[float], labels: Sequence[int], score: Score, target_fpr: float) -> dict[str, Any]:
    """The threshold on the score alone that keeps FPR <= target on these rows."""
    threshold = threshold_for_fpr(values, labels, target_fpr)
    if threshold is None:
        return {"target_fpr": target_fpr, "threshold": None}
    predicted = [v >= threshold for v in values]
    confusion = Confusion.of(predicted, labels)
    raw = threshold if score.higher_is_positive else -threshold
    op = ">=" if score.higher_is_positive else "<="
    return {"target_fpr": target_fpr, "threshold": round(raw, 6), "condition": f"{score.short} {op} {raw:.4g}",
            "fpr": confusion.fpr, "tpr": confusion.tpr}


def _acted(report: dict[str, Any]) -> str:
    """The measured action as a past participle: blocked, steered, flagged."""
    action = report["score"].get("action", "block")
    return {"block": "blocked", "steer": "steered", "flag": "flagged", "warn": "warned"}.get(action, action)


def _pct(value: float | None) -> str:
    return "   -  " if value is None else f"{100 * value:5.1f}%"


def _interval(bounds: list[float] | None) -> str:
    return "-" if bounds is None else f"{100 * bounds[0]:.1f}-{100 * bounds[1]:.1f}%"


def _num(value: float | None) -> str:
    return "  -   " if value is None else f"{value:.4f}"


def format_text(report: dict[str, Any]) -> str:
    c = report["confusion"]
    s = report["score"]
    lines = [
        f"policy {report['policy']} {report['version']} on {report['data']}: {report['rows']} rows "
        f"({report['positives']} positive, {report['negatives']} negative, {report['errors']} errors, "
        f"{report['missing_score']} without a score)",
        f"score: {s['signal']} ({'high' if s['higher_is_positive'] else 'low'} = positive; {s.get('action', 'block')} thresholds {s['thresholds']})",
        f"AUROC {_num(report['auroc'])}; " + "; ".join(
            f"TPR at {100 * float(k):g}% FPR {_pct(v['tpr'])} (threshold {_num(v['threshold'])})" for k, v in report["tpr_at_fpr"].items()),
        f"at the policy's own thresholds ({_acted(report)}): precision {_pct(c['precision'])} recall/TPR {_pct(c['recall'])} "
        f"FPR {_pct(c['fpr'])}  (tp {c['tp']}, fp {c['fp']}, tn {c['tn']}, fn {c['fn']})",
        f"  95% intervals (Wilson): recall/TPR {_interval(c['recall_95'])}, FPR {_interval(c['fpr_95'])}",
    ]
    if len(report["signals_auroc"]) > 1:
        lines.append("AUROC per signal: " + ", ".join(f"{k} {_num(v)}" for k, v in report["signals_auroc"].items()))
    for title, key in (("per style", "per_style"), ("by prompt length (tokens)", "by_length")):
        lines.append(f"{title}:{'':14s}     n   pos   FPR     TPR     AUROC")
        for name, g in report[key].items():
            lines.append(f"  {name:28s} {g['n']:5d} {g['positives']:5d}  {_pct(g['fpr'])}  {_pct(g['tpr'])}  {_num(g['auroc'])}")
    cal = report.get("calibration")
    if cal:
        if cal["threshold"] is None:
            lines.append("calibration: no negatives, no threshold")
        else:
            lines.append(f"calibration (target FPR {100 * cal['target_fpr']:g}%): {cal['condition']} -> FPR {_pct(cal['fpr'])}, "
                         f"TPR {_pct(cal['tpr'])} on these rows; check it on held-out data before shipping")
    return "\n".join(lines)

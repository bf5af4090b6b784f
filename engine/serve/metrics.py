"""innerguard's Prometheus metrics, exported on vLLM's own ``/metrics``."""
from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

DECISIONS = Counter("innerguard_decisions", "Policy decisions, by policy, action taken and mode", ["policy", "action", "mode"])
ANALYSIS = Histogram(
    "innerguard_analysis_seconds",
    "Time the worker spent computing signals and deciding one request",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
RELOADS = Counter("innerguard_reload", "Policy reloads, by result (ok, failed)", ["result"])
GUARD_ERRORS = Counter("innerguard_guard_errors", "Signals or decisions that failed, by policy", ["policy"])
BUNDLE = Gauge("innerguard_bundle_info", "The policy bundle serving now (value 1)", ["bundle_hash"])


def record_decision(result: dict[str, Any]) -> None:
    for decision in result.get("decisions", ()):
        DECISIONS.labels(decision.get("policy") or "", decision.get("action") or "", decision.get("mode") or "").inc()
        if decision.get("error"):
            GUARD_ERRORS.labels(decision.get("policy") or "").inc()
    if result.get("analysis_ms") is not None:
        ANALYSIS.observe(float(result["analysis_ms"]) / 1000)


def record_bundle(old: str | None, new: str) -> None:
    if old:
        BUNDLE.remove(old)
    BUNDLE.labels(new).set(1)

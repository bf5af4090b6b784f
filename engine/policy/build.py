"""Build a ``Policy`` from a schema-valid document.

The schema has already checked keys and types, so this module only reads
values, applies defaults, resolves artifact paths against the policy file's
folder and parses conditions (reporting IG201 at the exact column).
Cross-field checks (e.g. a span needs roles or markers) belong to the linter.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy import conditions
from innerguard.engine.policy.diagnostics import Finding
from innerguard.engine.policy.model import (
    MAX_HOLD_BACK, ArtifactRef, AttentionTrackerSignal, OutputSettings, Policy, ProbeSignal, RegisteredSignal, RerankerSignal, TokenProbeSignal,
    Rule, Signal, SpanSelector, SteerAction, TextSignal,
)
from innerguard.engine.policy.yamlsafe import Document

DEFAULT_KEYS = {"heads": "heads", "vector": "vector", "weights": "weight"}


class _Context:
    def __init__(self, doc: Document, source: Path):
        self.doc = doc
        self.marks = doc.marks
        self.source = source
        self.findings: list[Finding] = []

    def artifact(self, data: dict, path: tuple, default_key: str) -> ArtifactRef:
        return ArtifactRef(
            path=data["artifact"],
            key=data.get("key", default_key),
            resolved=(self.source.parent / data["artifact"]).absolute(),
            location=self.marks.at(path + ("artifact",)),
        )

    def heads(self, value: Any, path: tuple):
        if isinstance(value, dict):
            return self.artifact(value, path, DEFAULT_KEYS["heads"])
        return tuple((int(layer), int(head)) for layer, head in value)


def _span(data: dict | None) -> SpanSelector | None:
    if data is None:
        return None
    return SpanSelector(roles=tuple(data.get("roles", ())), begin=data.get("begin"), end=data.get("end"))


def _signal(ctx: _Context, name: str, data: dict) -> Signal:
    path = ("signals", name)
    common = dict(name=name, analyzer=data["analyzer"], description=data.get("description", ""),
                  location=ctx.marks.at(path, key=True))
    kind = data["analyzer"]
    unit = analyzer_units.get(kind)
    if unit is not None:
        return RegisteredSignal(**common, values=unit.params(data))
    if kind == "attention_tracker":
        return AttentionTrackerSignal(**common, heads=ctx.heads(data["heads"], path + ("heads",)), span=data.get("span", "prompt"),
                                      toward=data.get("toward", "trusted"), window=int(data.get("window", 8)))
    if kind == "probe":
        return ProbeSignal(**common, layer=data["layer"], vector=ctx.artifact(data["vector"], path + ("vector",), DEFAULT_KEYS["vector"]),
                           score=data.get("score", "cosine"), bias=float(data["bias"]) if "bias" in data else None)
    if kind == "token_probe":
        return TokenProbeSignal(**common, layers=tuple(int(v) for v in data["layers"]), span=data.get("span", "untrusted"),
                                window=int(data.get("window", 12)), length_adjust=float(data.get("length_adjust", 0.0)),
                                weights=ctx.artifact(data["weights"], path + ("weights",), DEFAULT_KEYS["weights"]))
    if kind == "reranker":
        heads = data.get("heads")
        return RerankerSignal(**common, documents=_span(data["documents"]), query=_span(data.get("query")),
                              calibration=data.get("calibration", "content-free"),
                              heads=None if heads is None else ctx.heads(heads, path + ("heads",)))
    return TextSignal(**common, pattern=data.get("pattern"), keywords=tuple(data.get("keywords", ())),
                      case_sensitive=bool(data.get("case_sensitive", False)), span=data.get("span", "prompt"),
                      repeats=data.get("repeats"), words=int(data.get("words", 8)))


def _rule(ctx: _Context, index: int, data: dict) -> Rule:
    path = ("rules", index)
    condition = None
    try:
        condition = conditions.from_yaml(data["when"])
    except conditions.ConditionError as exc:
        ctx.findings.append(make("IG201", f"rule {data['id']!r}: {exc}", ctx.marks.inside(path + ("when",), exc.offset)))
    steer = None
    if "steer" in data:
        s = data["steer"]
        layers = tuple(s["layers"]) if "layers" in s else ((s["layer"],) if "layer" in s else ())
        steer = SteerAction(
            vector=ctx.artifact(s["vector"], path + ("steer", "vector"), DEFAULT_KEYS["vector"]),
            layers=layers,
            coefficient=float(s.get("coefficient", 1.0)),
            positions=s.get("positions", "generated"),
            method=s.get("method", "add"),
            location=ctx.marks.at(path + ("steer",), key=True),
        )
    return Rule(
        id=data["id"],
        when=data["when"],
        condition=condition,
        action=data["action"],
        priority=data.get("priority", 0),
        description=data.get("description", ""),
        message=data.get("message"),
        steer=steer,
        location=ctx.marks.at(path),
    )


def _output_settings(data: dict, signals) -> OutputSettings:
    """The ``output`` block; a stream's hold-back defaults to two more than
    the longest window of the policy's signals on the generated tokens (the
    worker judges a step's scores at the next step, and the engine may see
    that step's token too), so that a stop never comes after the start of
    its window was sent (lint IG215)."""
    windows = [s.window for s in signals
               if isinstance(s, (TokenProbeSignal, AttentionTrackerSignal)) and s.span == "generated"]
    if windows and "hold_back" not in data:
        data = {**data, "hold_back": max(OutputSettings.hold_back, min(max(windows) + 2, MAX_HOLD_BACK))}
    return OutputSettings(**data)


def build_policy(doc: Document, source: Path) -> tuple[Policy, list[Finding]]:
    """``doc`` must be valid against the schema."""
    ctx = _Context(doc, Path(source))
    data = doc.data
    meta = data["metadata"]
    selector = {k: tuple(v) for k, v in (data.get("applies_to") or {}).items()}
    spans = {k: _span(v) for k, v in (data.get("spans") or {}).items()}
    signals = tuple(_signal(ctx, name, value) for name, value in (data.get("signals") or {}).items())
    policy = Policy(
        name=meta["name"],
        version=str(meta["version"]),
        owner=meta.get("owner", ""),
        description=meta.get("description", ""),
        labels=dict(meta.get("labels", {})),
        model=data.get("model"),
        mode=data.get("mode", "enforce"),
        on_error=data.get("on_error", "fail-closed"),
        priority=data.get("priority", 0),
        output=_output_settings(data.get("output", {}), signals),
        selector=selector,
        spans=spans,
        signals=signals,
        rules=tuple(_rule(ctx, i, value) for i, value in enumerate(data["rules"])),
        source=ctx.source.absolute(),
        revision=doc.sha256,
        location=ctx.marks.at(("metadata", "name")),
    )
    return policy, ctx.findings

"""Checks against a real model's geometry: layers and heads in range.

(Artifact contents are checked against the geometry in ``artifacts``.)
"""
from __future__ import annotations

from innerguard.engine import analyzers as analyzer_units, models
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.plan import ModelGeometry
from innerguard.engine.policy.diagnostics import Finding
from innerguard.engine.policy.model import Policy
from innerguard.engine.policy.yamlsafe import Marks


def check_geometry(policy: Policy, marks: Marks, g: ModelGeometry) -> list[Finding]:
    out: list[Finding] = []
    limit = models.attention_limit(g.architecture)
    for s in policy.signals:
        path = ("signals", s.name)
        if limit and s.analyzer in models.ATTENTION_ANALYZERS:
            out.append(make("IG604", f"signal {s.name!r}: analyzer {s.analyzer} is not supported on {g.architecture} ({limit}); supported here: {', '.join(models.supported_analyzers(g.architecture))}", marks.at(path + ("analyzer",))))
            continue
        unit = analyzer_units.get(s.analyzer)
        if unit is not None:
            for problem in unit.check(s.params(), g):
                key = path + (problem.key,)
                out.append(make(problem.rule, f"signal {s.name!r}: {problem.message}",
                                marks.at(key if key in marks.values else path)))
            continue
        heads = getattr(s, "heads", None)
        if isinstance(heads, tuple):
            for i, (layer, head) in enumerate(heads):
                if layer >= g.num_layers or head >= g.num_heads:
                    out.append(make("IG511", f"signal {s.name!r}: head [{layer}, {head}] is outside the model ({g.num_layers} layers x {g.num_heads} heads, 0-based)", marks.at(path + ("heads", i))))
        layer = getattr(s, "layer", None)
        if layer is not None and layer >= g.num_layers:
            out.append(make("IG601", f"signal {s.name!r}: layer {layer} is out of range; the model has layers 0..{g.num_layers - 1}", marks.at(path + ("layer",))))
        for i, layer in enumerate(getattr(s, "layers", None) or ()):
            if layer >= g.num_layers:
                out.append(make("IG601", f"signal {s.name!r}: layer {layer} is out of range; the model has layers 0..{g.num_layers - 1}", marks.at(path + ("layers", i))))
    for index, rule in enumerate(policy.rules):
        if rule.steer is None:
            continue
        for i, layer in enumerate(rule.steer.layers):
            if layer >= g.num_layers:
                steer = ("rules", index, "steer")
                where = steer + ("layers", i) if (steer + ("layers", i)) in marks.values else steer + ("layer",)
                out.append(make("IG601", f"rule {rule.id!r}: steer layer {layer} is out of range; the model has layers 0..{g.num_layers - 1}", marks.at(where)))
    return out

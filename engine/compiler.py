"""Policies -> the smallest plan that serves them.

``compile_policies(paths, model)`` lints first (a policy with errors never
compiles: the caller gets the linter's findings, not a tensor shape error),
then derives:

- analyzer specs, one per signal some rule reads, with the layers they need;
- captures merged across policies (two policies reading heads of layer 13
  capture layer 13 once) and nothing that no rule needs;
- steer specs, one per rule and layer;
- vector references with their sha256;
- the bundle hash over policy bytes, artifact hashes and the model
  fingerprint — the same inputs always give the same hash, in any folder.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.errors import InnerguardError
from innerguard.engine.lint.artifacts import Header, read_floats, read_header, read_int_pairs
from innerguard.engine.plan import (
    PLAN_VERSION,
    AnalyzerSpec,
    ModelGeometry,
    Plan,
    QKCapture,
    ResidualCapture,
    SteerSpec,
    VectorRef,
)
from innerguard.engine.policy.vocabulary import ACTION_RANK


class CompileError(InnerguardError):
    """The policies cannot be compiled; ``findings`` says where and why."""

    exit_code = 1

    def __init__(self, message: str, findings: Sequence[Any] = (), hint: str | None = None):
        self.findings = tuple(findings)
        super().__init__(message, hint=hint)


@dataclass(frozen=True)
class Need:
    """Why a capture or a steer is in the plan, for ``--format text``."""

    what: str
    why: str


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compile_policies(paths: Iterable[str | os.PathLike], model_dir: str | os.PathLike) -> tuple[Plan, list[Need]]:
    from innerguard.engine import models
    from innerguard.engine.lint import lint_paths

    geometry = models.read_geometry(model_dir)
    report = lint_paths([str(p) for p in paths], model=str(model_dir))
    errors = [f for f in report.findings if f.severity.value == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more; run 'innerguard lint')" if len(errors) > 1 else ""
        raise CompileError(f"policies do not lint clean: {first}{more}", errors)
    if not len(report.policies):
        raise CompileError("no policies to compile", hint="pass a folder with *.yaml policy files")
    return build_plan(report.policies, geometry)


def build_plan(policy_set, geometry: ModelGeometry) -> tuple[Plan, list[Need]]:
    analyzers: list[AnalyzerSpec] = []
    vectors: dict[str, VectorRef] = {}
    qk_heads: dict[int, set[int]] = defaultdict(set)
    query_all: set[int] = set()  # layers where the reranker needs Q of every query token
    residual_layers: set[int] = set()
    steers: list[SteerSpec] = []
    needs: list[Need] = []
    artifacts: dict[str, str] = {}  # sha256 -> relative name, for the bundle hash

    def vector(ref) -> str:
        digest = sha256_file(ref.resolved)
        artifacts[digest] = ref.path
        name = f"{digest[:16]}:{ref.key}"
        vectors[name] = VectorRef(path=str(ref.resolved), key=ref.key, sha256=digest)
        return name

    for policy in sorted(policy_set, key=lambda p: p.name):
        program_signals = set(policy.used_signals())
        for signal in policy.signals:
            if signal.name not in program_signals:
                continue
            qualified = policy.qualified(signal.name)
            params = {**signal.params(), "policy": policy.name}
            if signal.analyzer in ("attention_tracker", "reranker"):
                if getattr(signal, "heads", None) is None:  # plain ICR: every head of every layer
                    heads = [(l, h) for l in range(geometry.num_layers) for h in range(geometry.num_heads)]
                else:
                    heads = _heads(signal.heads, artifacts)
                params["heads"] = [list(h) for h in heads]
                params["qk_layers"] = sorted({layer for layer, _ in heads})
                for layer, head in heads:
                    qk_heads[layer].add(head)
                    if signal.analyzer == "reranker":
                        query_all.add(layer)
                which = ("Q of the query tokens" if signal.analyzer == "reranker" else "Q of each generated token"
                         if getattr(signal, "span", None) == "generated" else "Q of the last prompt token")
                needs.append(Need(
                    f"{which} and K of all prompt tokens, {len(heads)} heads at layers {_ranges(params['qk_layers'])}",
                    f"signal {qualified} ({signal.analyzer})",
                ))
            if signal.analyzer == "probe":
                params["vector"] = vector(signal.vector)
                if signal.score == "probability" and signal.bias is None:
                    params["bias"] = _artifact_bias(signal.vector)
                params["residual_layers"] = [signal.layer]
                residual_layers.add(signal.layer)
                needs.append(Need(f"residual stream after layer {signal.layer}, last prompt token", f"signal {qualified} (probe)"))
            if signal.analyzer == "token_probe":
                params["weights"] = {str(layer): vector(ref) for layer, ref in signal.layer_refs()}
                params["bias"] = _artifact_bias(signal.weights)
                needs.append(Need(
                    f"residual stream after layers {_ranges(signal.layers)}, every {signal.span} token (scores only)",
                    f"signal {qualified} (token_probe)",
                ))
            if signal.analyzer == "text":
                what = ("prompt text (outside the model, RE2)" if signal.span != "generated"
                        else f"generated text, read for repeats of the {signal.repeats} span of the prompt (outside the model)"
                        if signal.repeats else "generated text (outside the model, RE2)")
                needs.append(Need(what, f"signal {qualified} (text)"))
            unit = analyzer_units.get(signal.analyzer)
            if unit is not None:
                wanted = unit.needs(params)
                params["residual_layers"] = list(wanted.residual_layers)  # the worker captures these for the request
                residual_layers.update(wanted.residual_layers)
                needs.append(Need(wanted.describe, f"signal {qualified} ({signal.analyzer})"))
            analyzers.append(AnalyzerSpec(signal=qualified, kind=signal.analyzer, params=params))
        for rule in policy.rules:
            if rule.action != "steer" or rule.steer is None:
                continue
            name = vector(rule.steer.vector)
            for layer in rule.steer.layers:
                steers.append(SteerSpec(
                    id=rule.steer_id(policy.name), layer=layer, vector=name,
                    coefficient=float(rule.steer.coefficient), positions=rule.steer.positions, method=rule.steer.method,
                ))
            needs.append(Need(
                f"steer {rule.steer.method} x{rule.steer.coefficient:g} at layers {_ranges(rule.steer.layers)} ({rule.steer.positions} tokens)",
                f"rule {policy.name}/{rule.id}",
            ))
    programs = tuple(sorted(policy_set.programs(), key=lambda p: p.name))
    bundle = {
        "plan": PLAN_VERSION,
        "model": geometry.fingerprint,
        "policies": sorted((p.name, p.revision) for p in policy_set),
        "artifacts": sorted(artifacts),
    }
    plan = Plan(
        version=PLAN_VERSION,
        model=geometry,
        qk_captures=tuple(
            QKCapture(layer=l, heads=tuple(sorted(h)), query="all" if l in query_all else "last")
            for l, h in sorted(qk_heads.items())
        ),
        residual_captures=tuple(ResidualCapture(layer=l) for l in sorted(residual_layers)),
        steers=tuple(sorted(steers, key=lambda s: (s.layer, s.id))),
        analyzers=tuple(sorted(analyzers, key=lambda a: a.signal)),
        policies=programs,
        vectors=dict(sorted(vectors.items())),
        bundle_hash=hashlib.sha256(json.dumps(bundle, sort_keys=True).encode()).hexdigest(),
    )
    return plan, needs


def _heads(heads, artifacts: dict[str, str]) -> list[tuple[int, int]]:
    if isinstance(heads, (list, tuple)):
        return sorted({(int(l), int(h)) for l, h in heads})
    digest = sha256_file(heads.resolved)
    artifacts[digest] = heads.path
    pairs = read_int_pairs(_header(heads), heads.key or "heads")
    if pairs is None:
        raise InnerguardError(f"{heads.path}: its heads tensor is truncated", hint="rebuild it with innerguard build heads")
    return sorted({(int(l), int(h)) for l, h in pairs})


def _artifact_bias(ref) -> float:
    """A logistic probe's bias travels with its weights: the artifact's
    ``bias`` tensor (one value), or 0 when it has none."""
    header = _header(ref)
    if "bias" not in header.tensors:
        return 0.0
    values = read_floats(header, "bias")
    if not values:
        raise InnerguardError(f"{ref.path}: its bias is not a float tensor", hint="rebuild the probe with innerguard build")
    return float(values[0])


def _header(ref):
    """The artifact's safetensors header (the linter has checked the file)."""
    header = read_header(ref.resolved)
    if not isinstance(header, Header):
        raise InnerguardError(f"{ref.path}: {header[1]}", hint="run innerguard lint on the policy")
    return header


def _ranges(layers: Iterable[int]) -> str:
    return ", ".join(str(l) for l in sorted(set(layers)))


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"


def explain(plan: Plan, needs: Sequence[Need]) -> str:
    """The plan in words: what will run inside the model and which rule needs it."""
    g = plan.model
    lines = [
        f"innerguard plan {plan.version}",
        f"bundle hash {plan.bundle_hash}",
        f"model {g.architecture}: {g.num_layers} layers, hidden {g.hidden_size}, {g.num_heads} heads "
        f"({g.num_kv_heads} KV), head_dim {g.head_dim}; fingerprint {g.fingerprint[:16]}",
        "",
        "captures (merged across policies):",
    ]
    for c in plan.qk_captures:
        which = "the query tokens" if c.query == "all" else "the last prompt token"
        lines.append(f"  layer {c.layer:>2}: post-RoPE Q of {which}, heads {list(c.heads)}; K of all prompt tokens")
    for c in plan.residual_captures:
        lines.append(f"  layer {c.layer:>2}: residual stream (hidden + residual) at the last prompt token")
    if not plan.qk_captures and not plan.residual_captures:
        lines.append("  none")
    lines += ["", "steering:"]
    lines += [f"  layer {s.layer:>2}: {s.method} {s.vector} x{s.coefficient:g} on {s.positions} tokens ({s.id})" for s in plan.steers] or ["  none"]
    lines += ["", "analyzers (signal <- analyzer):"]
    lines += [f"  {a.signal} <- {a.kind}" for a in plan.analyzers] or ["  none"]
    lines += ["", "why each item is there:"]
    lines += [f"  {n.what}: needed by {n.why}" for n in needs] or ["  nothing needed"]
    lines += ["", "decision program (rules in precedence order per policy):"]
    for p in plan.policies:
        lines.append(f"  {p.name} v{p.version} [{p.mode}, {p.on_error}, priority {p.priority}]")
        for r in sorted(p.rules, key=lambda r: (-ACTION_RANK[r.action], -int(r.params.get("priority", 0)))):
            lines.append(f"    {r.id}: {r.action}")
    return "\n".join(lines) + "\n"

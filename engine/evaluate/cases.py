"""Policy unit tests (``innerguard test``), in the spirit of ``opa test``.

Test files sit next to the policies, ``tests/*.test.yaml`` under the policy
folder::

    policy: prompt-injection          # default policy for ``expect: ACTION``
    cases:
      - name: benign review is allowed
        instruction: Summarise the review.   # or messages: [{role, content}, ...]
        data: The blender works well.
        expect: allow                  # or {prompt-injection: allow, rag-relevance: flag}
        tags: [rag]                    # optional request tags, tenant, route

Every case runs on the real model through ``GuardedLLM`` with all policies
of the folder (selection by ``applies_to``, as in production). A policy's
result is its decision's rule action (``block``, ``steer``, ``flag``, ...;
``allow`` when no rule fired), the same in shadow and warn mode, so shadow
policies are tested for what they would do. A policy that was not selected
for the request reads as ``not-selected``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from innerguard.engine.errors import InnerguardError
from innerguard.engine.policy.yamlsafe import load_document

ACTIONS = ("allow", "flag", "rerank", "drop_documents", "steer", "block", "not-selected")
CASE_KEYS = {"name", "instruction", "data", "messages", "expect", "tags", "tenant", "route"}


class CaseError(InnerguardError):
    """A test file cannot be used."""


@dataclass(frozen=True)
class Case:
    file: str
    line: int
    name: str
    request: dict[str, Any]
    expect: dict[str, str]  # policy -> action

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Outcome:
    case: Case
    actual: dict[str, str]  # policy -> action, for every expected policy
    signals: dict[str, Any]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(self.actual.get(p) == a for p, a in self.case.expect.items())


def discover(folder: str | Path) -> list[Path]:
    root = Path(folder)
    if not root.is_dir():
        raise CaseError(f"{folder}: not a folder of policies")
    files = sorted((root / "tests").glob("*.test.yaml")) + sorted(root.glob("*.test.yaml"))
    if not files:
        raise CaseError(f"{folder}: no test files (expected {root / 'tests'}/*.test.yaml)")
    return files


def load_cases(path: Path, policies: set[str]) -> list[Case]:
    doc, findings = load_document(path.read_bytes(), str(path))
    if doc is None:
        raise CaseError(str(findings[0]) if findings else f"{path}: cannot be read")
    data = doc.data
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list) or not data["cases"]:
        raise CaseError(f"{path}:1: a test file is a mapping with a non-empty 'cases' list")
    default = data.get("policy")
    if default is not None and default not in policies:
        raise CaseError(f"{path}:1: policy {default!r} is not in the folder ({', '.join(sorted(policies))})")
    cases, names = [], set()
    for index, raw in enumerate(data["cases"]):
        line = _line(doc, ("cases", index))
        where = f"{path}:{line}"
        if not isinstance(raw, Mapping):
            raise CaseError(f"{where}: a case is a mapping")
        unknown = set(raw) - CASE_KEYS
        if unknown:
            raise CaseError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; a case has {', '.join(sorted(CASE_KEYS))}")
        name = raw.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise CaseError(f"{where}: every case needs a unique 'name'")
        names.add(name)
        expect = raw.get("expect")
        if isinstance(expect, str):
            if default is None:
                raise CaseError(f"{where}: 'expect: {expect}' needs a top-level 'policy', or write expect: {{POLICY: ACTION}}")
            expect = {default: expect}
        if not isinstance(expect, Mapping) or not expect:
            raise CaseError(f"{where}: 'expect' is an action or a mapping policy -> action")
        for policy, action in expect.items():
            if policy not in policies:
                raise CaseError(f"{where}: expected policy {policy!r} is not in the folder")
            if action not in ACTIONS:
                raise CaseError(f"{where}: expected action {action!r} is not one of {', '.join(ACTIONS)}")
        request = {k: raw[k] for k in ("instruction", "data", "messages", "tags", "tenant", "route") if k in raw}
        if "messages" not in request and not ("instruction" in request and "data" in request):
            raise CaseError(f"{where}: a case needs 'instruction' and 'data', or 'messages'")
        request.update(id=f"{path.name}#{index}", max_tokens=1)
        cases.append(Case(file=str(path), line=line, name=name, request=request, expect=dict(expect)))
    return cases


def _line(doc, path: tuple) -> int:
    return doc.marks.at(path).line


def outcome(case: Case, out: Any) -> Outcome:
    if out.finish_reason == "error":
        return Outcome(case, {}, {}, error=out.error or "request failed")
    by_policy = {d.get("policy"): d for d in out.decisions}
    actual = {p: (by_policy[p].get("rule_action") or by_policy[p].get("action")) if p in by_policy else "not-selected"
              for p in case.expect}
    signals = {k: v for d in out.decisions for k, v in (d.get("signals") or {}).items()}
    return Outcome(case, actual, signals)


def format_outcome(o: Outcome) -> str:
    status = "PASS" if o.passed else "FAIL"
    head = f"{status} {o.case.where} {o.case.name}"
    if o.error:
        return f"{head}: error: {o.error}"
    parts = []
    for policy, want in o.case.expect.items():
        got = o.actual.get(policy)
        parts.append(f"{policy}: {got}" if got == want else f"{policy}: expected {want}, got {got}")
    values = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(o.signals.items()))
    return f"{head}: {'; '.join(parts)} [{values}]"

"""Render lint findings: text (one line each), JSON, SARIF 2.1.0."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from innerguard.engine.policy.lint_rules import RULES
from innerguard.engine.policy.diagnostics import Finding, Severity

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("innerguard")
    except Exception:
        return "0.0.0"


def summary(findings: Iterable[Finding], files: int) -> str:
    findings = list(findings)
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    noun = "file" if files == 1 else "files"
    return f"{files} {noun} checked: {errors} error(s), {warnings} warning(s)"


def to_text(findings: Iterable[Finding], files: int) -> str:
    lines = [str(f) for f in findings]
    lines.append(summary(findings, files))
    return "\n".join(lines) + "\n"


def to_json(findings: Iterable[Finding], files: Iterable[str]) -> str:
    findings = list(findings)
    files = list(files)
    data = {
        "version": 1,
        "files": files,
        "summary": {
            "files": len(files),
            "errors": sum(f.severity is Severity.ERROR for f in findings),
            "warnings": sum(f.severity is Severity.WARNING for f in findings),
            "infos": sum(f.severity is Severity.INFO for f in findings),
        },
        "findings": [
            {
                "file": f.location.file,
                "line": f.location.line,
                "column": f.location.col,
                "severity": f.severity.value,
                "rule": f.rule,
                "title": RULES[f.rule].title if f.rule in RULES else "",
                "message": f.message,
            }
            for f in findings
        ],
    }
    return json.dumps(data, indent=2) + "\n"


def _uri(file: str) -> str:
    path = Path(file)
    try:
        rel = os.path.relpath(path.absolute(), Path.cwd())
        if not rel.startswith(".."):
            return Path(rel).as_posix()
    except ValueError:
        pass
    return path.absolute().as_uri()


def to_sarif(findings: Iterable[Finding]) -> str:
    findings = list(findings)
    rules = [RULES[r] for r in sorted(RULES)]
    index = {r.id: i for i, r in enumerate(rules)}
    results = []
    for f in findings:
        uri = _uri(f.location.file)
        region = {"startLine": max(f.location.line, 1)}
        if f.location.col:
            region["startColumn"] = f.location.col
        result = {
            "ruleId": f.rule,
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri, **({"uriBaseId": "%SRCROOT%"} if not uri.startswith("file:") else {})}, "region": region}}],
        }
        if f.rule in index:
            result["ruleIndex"] = index[f.rule]
        results.append(result)
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "innerguard",
                "informationUri": "https://github.com/innerguard/innerguard",
                "version": _version(),
                "rules": [{
                    "id": r.id,
                    "name": "".join(w.capitalize() for w in r.title.replace("'", "").replace("(", "").replace(")", "").replace("-", " ").replace(";", "").split()),
                    "shortDescription": {"text": r.title},
                    "fullDescription": {"text": r.explanation},
                    "help": {"text": f"{r.explanation}\n\nHow to fix: {r.fix}", "markdown": f"{r.explanation}\n\n**How to fix:** {r.fix}"},
                    "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
                    "properties": {"tags": ["guardrail-policy"]},
                } for r in rules],
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }
    return json.dumps(doc, indent=2) + "\n"

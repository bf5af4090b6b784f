"""Find policy files and read one into a ``Policy``: bytes → YAML (safe, with
marks) → JSON Schema → model. Each step stops with findings, never raises
for bad input.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from innerguard.engine.errors import InnerguardError
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy import schema
from innerguard.engine.policy.build import build_policy
from innerguard.engine.policy.diagnostics import Finding, Location
from innerguard.engine.policy.model import Policy
from innerguard.engine.policy.yamlsafe import MAX_BYTES, Document, load_document

POLICY_SUFFIXES = (".yaml", ".yml")
TEST_SUFFIXES = (".test.yaml", ".test.yml")  # policy unit tests (innerguard test), not policies


@dataclass(frozen=True)
class LoadedFile:
    path: Path
    display: str  # how findings name the file
    document: Document | None
    policy: Policy | None
    findings: tuple[Finding, ...]


def discover(paths) -> tuple[list[tuple[Path, str]], list[Finding]]:
    """Policy files under ``paths`` (files as given; folders searched
    recursively for *.yaml/*.yml, hidden folders and policy test files
    ``*.test.yaml`` skipped), sorted. A missing
    path cannot be linted at all: ``InnerguardError``."""
    files: list[tuple[Path, str]] = []
    findings: list[Finding] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists() and not path.is_symlink():
            raise InnerguardError(f"{raw}: no such file or folder")
        if path.is_dir():
            found = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                found += [Path(dirpath) / f for f in filenames
                          if f.endswith(POLICY_SUFFIXES) and not f.endswith(TEST_SUFFIXES) and not f.startswith(".")]
            if not found:
                findings.append(make("IG011", f"no policy files (*.yaml, *.yml) in {raw}", Location(str(raw))))
            for f in sorted(found):
                if f.absolute() not in seen:
                    seen.add(f.absolute())
                    files.append((f, str(f)))
        elif path.absolute() not in seen:
            seen.add(path.absolute())
            files.append((path, str(raw)))
    return files, findings


def read_bytes(path: Path, display: str) -> tuple[bytes | None, list[Finding]]:
    loc = Location(display)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return None, [make("IG004", f"file is {size} bytes; a policy may be at most {MAX_BYTES} bytes", Location(display, 1, 1))]
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES + 1), []
    except IsADirectoryError:
        return None, [make("IG001", "is a folder, not a policy file", loc)]
    except OSError as exc:
        return None, [make("IG001", f"cannot read: {exc.strerror or exc}", loc)]


def load_file(path: Path, display: str | None = None) -> LoadedFile:
    display = display or str(path)
    raw, findings = read_bytes(path, display)
    if raw is None:
        return LoadedFile(path, display, None, None, tuple(findings))
    doc, findings = load_document(raw, display)
    if doc is None:
        return LoadedFile(path, display, None, None, tuple(findings))
    findings = schema.validate(doc.data, doc.marks)
    if findings:
        return LoadedFile(path, display, doc, None, tuple(findings))
    policy, findings = build_policy(doc, path)
    return LoadedFile(path, display, doc, policy, tuple(findings))

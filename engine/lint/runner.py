"""Run every check over a set of paths and collect the findings."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from innerguard.engine import models
from innerguard.engine.errors import InnerguardError
from innerguard.engine.lint.artifacts import ArtifactCache, ArtifactChecker, normalize_model_name
from innerguard.engine.lint.geometry import check_geometry
from innerguard.engine.lint.policyset import check_set
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.lint.semantic import check_policy, iter_artifacts
from innerguard.engine.logging import get_logger
from innerguard.engine.plan import ModelGeometry
from innerguard.engine.policy.diagnostics import Finding, Location, Severity
from innerguard.engine.policy.loader import LoadedFile, discover, load_file
from innerguard.engine.policy.model import Policy, PolicySet, TokenProbeSignal

log = get_logger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # known model name, or the checkpoint folder's name
    geometry: ModelGeometry


@dataclass(frozen=True)
class LintReport:
    findings: tuple[Finding, ...]
    policies: PolicySet  # every policy that could be built (clean or not)
    clean: PolicySet  # policies without error-level findings
    files: tuple[str, ...]

    @property
    def errors(self) -> int:
        return sum(f.severity is Severity.ERROR for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity is Severity.WARNING for f in self.findings)

    @property
    def internal_error(self) -> bool:
        return any(f.rule == "IG901" for f in self.findings)


def model_info(model: str | os.PathLike | ModelInfo | None) -> ModelInfo | None:
    """``--model``: a known name (prepared on demand) or a checkpoint folder.
    Raises ``ModelError`` (an ``InnerguardError``) if it cannot be used."""
    if model is None or isinstance(model, ModelInfo):
        return model
    folder = models.resolve(model)
    name = str(model) if str(model) in models.KNOWN_MODELS else Path(folder).name
    return ModelInfo(name, models.read_geometry(folder))


class _DeclaredModels:
    """Models named in policies: used only if available without conversion."""

    def __init__(self):
        self.cache: dict[str, ModelInfo | None] = {}

    def get(self, policy: Policy) -> ModelInfo | None:
        name = policy.model
        candidates = []
        as_path = Path(name).expanduser()
        candidates.append(as_path if as_path.is_absolute() else policy.root / as_path)
        if name in models.KNOWN_MODELS:
            ready = models.cache_dir() / name
            if (ready / ".innerguard-ready").is_file():
                candidates.append(ready)
        key = "|".join(map(str, candidates))
        if key not in self.cache:
            self.cache[key] = None
            for folder in candidates:
                if (folder / "config.json").is_file():
                    try:
                        self.cache[key] = ModelInfo(name if name in models.KNOWN_MODELS else folder.name, models.read_geometry(folder))
                        break
                    except InnerguardError:
                        continue
        return self.cache[key]


def lint_paths(paths, model=None) -> LintReport:
    """Lint policy files and folders. ``model`` is a model name or folder (as
    for ``--model``), a ``ModelInfo``, or None. Raises ``InnerguardError``
    only when linting cannot run (a missing path, an unusable ``--model``)."""
    info = model_info(model)
    files, findings = discover(paths)
    loaded: list[LoadedFile] = []
    for path, display in files:
        try:
            item = load_file(path, display)
        except Exception as exc:  # a linter bug must not hide the other files
            log.debug("internal error", file=display, exc_info=True)
            findings.append(make("IG901", f"internal error while reading: {type(exc).__name__}: {exc}", Location(display)))
            continue
        loaded.append(item)
        findings += item.findings
    built = [(item.policy, item.document.marks, item.display) for item in loaded if item.policy is not None]
    declared = _DeclaredModels()
    cache = ArtifactCache()
    per_policy: dict[int, list[Finding]] = {}
    for policy, marks, display in built:
        try:
            found = _check_one(policy, marks, info, declared, cache)
        except Exception as exc:
            log.debug("internal error", file=display, exc_info=True)
            found = [make("IG901", f"internal error while checking: {type(exc).__name__}: {exc}", Location(display))]
        per_policy[id(policy)] = found
        findings += found
    try:
        findings += check_set([(p, m) for p, m, _ in built])
    except Exception as exc:
        log.debug("internal error", exc_info=True)
        findings.append(make("IG901", f"internal error in policy-set checks: {type(exc).__name__}: {exc}", Location(str(paths[0]) if paths else "")))
    failing_files = {f.location.file for f in findings if f.severity is Severity.ERROR}
    policies = tuple(p for p, _, _ in built)
    clean = tuple(p for p, _, display in built if display not in failing_files)
    unique = {(f.rule, f.location, f.message): f for f in findings}
    ordered = tuple(sorted(unique.values(), key=Finding.sort_key))
    return LintReport(ordered, PolicySet(policies), PolicySet(clean), tuple(d for _, d in files))


def _check_one(policy: Policy, marks, info: ModelInfo | None, declared: _DeclaredModels, cache: ArtifactCache) -> list[Finding]:
    found = check_policy(policy, marks)
    effective = info
    if policy.model:
        if info is None:
            effective = declared.get(policy)
            if effective is None:
                found.append(make("IG602", f"model {policy.model!r} is not available here; geometry checks skipped (run 'innerguard models prepare {policy.model}' or pass --model)", marks.at(("model",))))
        elif normalize_model_name(policy.model) != normalize_model_name(info.name):
            found.append(make("IG603", f"policy is written for model {policy.model!r}, but linting against {info.name!r}", marks.at(("model",))))
    geometry = effective.geometry if effective else None
    model_name = info.name if info else policy.model
    if geometry is not None:
        found += check_geometry(policy, marks, geometry)
    checker = ArtifactChecker(policy, marks, geometry, model_name, cache)
    for ref, kind, path, layers in iter_artifacts(policy):
        checker.check(ref, kind, path, layers)
    for signal in policy.signals:
        if isinstance(signal, TokenProbeSignal):
            checker.check_pooling(signal)
    return found + checker.findings

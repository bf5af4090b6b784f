"""The policy language: loading YAML policies into frozen, typed objects.

Public API (for the compiler and tools)::

    from innerguard.engine.policy import load_policy_set
    policy_set, findings = load_policy_set(["policies/"], model="smollm2-135m-instruct")
    if has_errors(findings): refuse            # error-level findings
    for policy in policy_set:                  # Policy objects (model.py)
        program = policy.to_program()          # -> plan.PolicyProgram
        for signal in policy.signals:          # only those in policy.used_signals()
            AnalyzerSpec(policy.qualified(signal.name), signal.analyzer, signal.params())
        for rule in policy.rules:
            if rule.steer: SteerSpec(id=rule.steer_id(policy.name), layer=..., vector=...,
                                     coefficient=rule.steer.coefficient, ...)

``load_policy_set`` runs the full linter (schema, semantics, artifacts, model
geometry, policy-set checks) and returns only the policies without
error-level findings, plus every finding. Each ``Policy`` keeps its
``source`` path, ``revision`` (sha256 of the file's bytes) and locations.

Modules: ``yamlsafe`` (safe YAML with marks), ``schema`` (JSON Schema →
findings), ``conditions`` (the ``when:`` grammar), ``model`` (dataclasses),
``build`` (document → model), ``templates`` (message template analysis),
``loader`` (files → policies), ``diagnostics`` (findings).
"""
from __future__ import annotations

from innerguard.engine.policy.diagnostics import Finding, Location, Severity, has_errors
from innerguard.engine.policy.model import (
    ArtifactRef, AttentionTrackerSignal, Policy, PolicySet, ProbeSignal, RerankerSignal, TokenProbeSignal,
    Rule, Signal, SpanSelector, SteerAction, TextSignal,
)


def load_policy_set(paths, model=None) -> tuple[PolicySet, tuple[Finding, ...]]:
    """Lint ``paths`` (files or folders); return the policies that have no
    error-level findings, and all findings. ``model``: a known model name or
    checkpoint folder, or None. Raises ``InnerguardError`` if linting cannot
    run at all (missing path, unusable model)."""
    from innerguard.engine.lint.runner import lint_paths

    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    report = lint_paths(list(paths), model=model)
    return report.clean, report.findings


__all__ = [
    "load_policy_set", "Finding", "Location", "Severity", "has_errors",
    "ArtifactRef", "AttentionTrackerSignal", "Policy", "PolicySet", "ProbeSignal", "TokenProbeSignal",
    "RerankerSignal", "Rule", "Signal", "SpanSelector", "SteerAction", "TextSignal",
]

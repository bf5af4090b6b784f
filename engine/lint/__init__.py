"""The policy linter: ``lint_paths(paths, model=None) -> LintReport`` and
``load_policy_set``.

Stages, in order (each in its own module): reading and YAML safety
(``innerguard.engine.policy.yamlsafe``), JSON Schema (``schema``), building
the policy model (``innerguard.engine.policy.build``), semantic checks per
policy (``semantic``, ``satisfiability``, ``regexes``, ``templates``),
artifacts (``artifacts``), model geometry (``geometry``) and checks across
the policy set (``policyset``). Output formats live in ``output``. Rule ids
and explanations live in the language (``innerguard.engine.policy.lint_rules``),
whose reader reports the first of them: the linter builds on the language,
never the other way round.
"""
from __future__ import annotations


def lint_paths(paths, model=None):
    from innerguard.engine.lint.runner import lint_paths as run

    return run(paths, model=model)


def load_policy_set(paths, model=None):
    """Lint ``paths`` (files or folders); return the policies that have no
    error-level findings, and all findings: ``(PolicySet, tuple[Finding, ...])``.
    ``model``: a known model name or checkpoint folder, or None. Raises
    ``InnerguardError`` if linting cannot run at all (missing path, unusable
    model)."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    report = lint_paths(list(paths), model=model)
    return report.clean, report.findings


__all__ = ["lint_paths", "load_policy_set"]

"""The policy linter: ``lint_paths(paths, model=None) -> LintReport``.

Stages, in order (each in its own module): reading and YAML safety
(``innerguard.engine.policy.yamlsafe``), JSON Schema (``schema``), building
the policy model (``innerguard.engine.policy.build``), semantic checks per
policy (``semantic``, ``satisfiability``, ``regexes``, ``templates``),
artifacts (``artifacts``), model geometry (``geometry``) and checks across
the policy set (``policyset``). Output formats live in ``output``; rule ids
and explanations in ``registry``.

This package imports lazily so that the loader can use ``registry`` without
a cycle.
"""
from __future__ import annotations


def lint_paths(paths, model=None):
    from innerguard.engine.lint.runner import lint_paths as run

    return run(paths, model=model)


__all__ = ["lint_paths"]

"""The policy language: loading YAML policies into frozen, typed objects.

Public API (for the compiler and tools); policies are loaded through the
linter, which builds on this package::

    from innerguard.engine.lint import load_policy_set
    policy_set, findings = load_policy_set(["policies/"], model="smollm2-135m-instruct")
    if has_errors(findings): refuse            # error-level findings
    for policy in policy_set:                  # Policy objects (model.py)
        program = policy.to_program()          # -> plan.PolicyProgram
        for signal in policy.signals:          # only those in policy.used_signals()
            AnalyzerSpec(policy.qualified(signal.name), signal.analyzer, signal.params())
        for rule in policy.rules:
            if rule.steer: SteerSpec(id=rule.steer_id(policy.name), layer=..., vector=...,
                                     coefficient=rule.steer.coefficient, ...)

``load_policy_set`` (``innerguard.engine.lint``) runs the full linter (schema, semantics, artifacts, model
geometry, policy-set checks) and returns only the policies without
error-level findings, plus every finding. Each ``Policy`` keeps its
``source`` path, ``revision`` (sha256 of the file's bytes) and locations.

Modules: ``yamlsafe`` (safe YAML with marks), ``schema`` (JSON Schema →
findings), ``conditions`` (the ``when:`` grammar), ``model`` (dataclasses),
``build`` (document → model), ``templates`` (message template analysis),
``loader`` (files → policies), ``diagnostics`` (findings), ``lint_rules``
(every finding's id, severity and explanation), ``vocabulary`` (the actions,
template variables and template sandbox that the decision semantics share).

Import from the modules themselves; this file imports nothing, so that the
vLLM worker, which reads the vocabulary, loads nothing else of the language.
"""

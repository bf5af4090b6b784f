"""Checks across all policies linted together: names, steer composition.

Steers on one layer compose by summing their vectors (``add``) in the order
of ``innerguard.engine.decide`` (policy priority, rule priority, name, file
order). ``add`` and ``project`` on one layer do not compose: that is IG304,
within one policy or across policies.
"""
from __future__ import annotations

from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy.diagnostics import Finding
from innerguard.engine.policy.model import Policy
from innerguard.engine.policy.yamlsafe import Marks


def check_set(policies: list[tuple[Policy, Marks]]) -> list[Finding]:
    out: list[Finding] = []
    names: dict[str, Policy] = {}
    for policy, marks in policies:
        first = names.get(policy.name)
        if first is not None:
            out.append(make("IG701", f"policy name {policy.name!r} is already used by {first.location}", marks.at(("metadata", "name"))))
        else:
            names[policy.name] = policy
    by_layer: dict[int, tuple[str, str, str]] = {}  # layer -> (method, who, where)
    for policy, marks in policies:
        for index, rule in enumerate(policy.rules):
            if rule.action != "steer" or rule.steer is None:
                continue
            for layer in rule.steer.layers:
                who = f"{policy.name}/{rule.id}"
                seen = by_layer.get(layer)
                if seen is None:
                    by_layer[layer] = (rule.steer.method, who, str(marks.at(("rules", index, "steer", "method"))))
                elif seen[0] != rule.steer.method:
                    loc = marks.at(("rules", index, "steer", "method")) if ("rules", index, "steer", "method") in marks.values else marks.at(("rules", index, "steer"), key=True)
                    out.append(make("IG304", f"steer rule {who} uses method {rule.steer.method} on layer {layer}, but {seen[1]} uses {seen[0]} there ({seen[2]})", loc))
    return out

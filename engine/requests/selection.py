"""Which policies apply to a request: the operator's selection, plus any a
client adds by name. A client can add, never remove."""
from __future__ import annotations

from innerguard.engine.decide import selector_matches
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.model import GuardRequest, RequestError


def select_policies(plan: Plan, request: GuardRequest) -> tuple[PolicyProgram, ...]:
    by_name = {p.name: p for p in plan.policies}
    asked = (request.policies or ()) + request.extra_policies
    unknown = [n for n in asked if n not in by_name]
    if unknown:
        raise RequestError(
            f"unknown policy {unknown[0]!r}",
            hint=f"loaded policies: {', '.join(sorted(by_name)) or 'none'}",
        )
    if request.policies is not None:
        chosen = list(request.policies)
    else:
        wanted = {"tags": request.tags, "tenant": request.tenant, "route": request.route}
        chosen = [p.name for p in plan.policies if selector_matches(p.selector, wanted)]
    chosen += request.extra_policies
    return tuple(by_name[n] for n in dict.fromkeys(chosen))

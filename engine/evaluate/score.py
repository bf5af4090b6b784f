"""Which signal is "the score" of a policy, and which way it points.

By default: the numeric signals compared with a constant in the policy's
first block rule (file order) in the same direction as the first one;
``focus < 0.24`` says low focus means attack, ``p > 0.9`` says high p means
attack. Several signals (``p8 > 0.9 or p12 > 0.9``) make one score, their
maximum (minimum for ``<``): with one shared threshold that is exactly the
rule. The thresholds shown on plots are every constant those signals are
compared with in the policy's block rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import Plan, PolicyProgram

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


class ScoreError(InnerguardError):
    """No usable score signal."""


@dataclass(frozen=True)
class Score:
    policy: str
    signals: tuple[str, ...]  # qualified: policy.signal
    higher_is_positive: bool
    thresholds: tuple[float, ...] = field(default=())
    action: str = "block"  # the rule whose verdict is measured: block, or the acting rule of a policy without one

    @property
    def short(self) -> str:
        names = [s.split(".", 1)[1] for s in self.signals]
        return names[0] if len(names) == 1 else f"{'max' if self.higher_is_positive else 'min'}({', '.join(names)})"

    @property
    def signal(self) -> str:
        return self.signals[0] if len(self.signals) == 1 else f"{self.policy}.{self.short}"

    def value(self, signals: Mapping[str, Any]) -> float | None:
        """The score of one request; None when any of its signals is missing."""
        values = [signals.get(s) for s in self.signals]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return None
        return float(max(values) if self.higher_is_positive else min(values))


def comparisons(node: Mapping[str, Any]) -> Iterator[tuple[str, str, float]]:
    """(signal, op, constant) for every ``signal OP const`` / ``const OP signal``,
    normalised to the signal on the left."""
    op, args = node.get("op"), node.get("args") or ()
    if op in _FLIP and len(args) == 2:
        left, right = args
        if left.get("op") == "signal" and right.get("op") == "const" and not isinstance(right.get("value"), bool):
            yield left["name"], op, float(right["value"])
        elif right.get("op") == "signal" and left.get("op") == "const" and not isinstance(left.get("value"), bool):
            yield right["name"], _FLIP[op], float(left["value"])
    for arg in args:
        if isinstance(arg, Mapping):
            yield from comparisons(arg)


def choose_score(plan: Plan, requested: str | None = None) -> Score:
    """``requested``: ``SIGNAL``, ``POLICY.SIGNAL`` or several joined by commas."""
    policy = _policy(plan, requested)
    blocks = [r for r in policy.rules if r.action == "block"]
    if not blocks:
        # A policy that steers or flags is measured on the rule that acts.
        blocks = [r for r in policy.rules if r.action != "allow" and any(True for _ in comparisons(r.condition))][:1]
    action = blocks[0].action if blocks else "block"
    found = [c for r in blocks for c in comparisons(r.condition)]
    if requested:
        names = [n.strip().split(".", 1)[-1] for n in requested.split(",")]
        # The prompt's signals, and those only output rules read (generated text, decode probes).
        known = list(dict.fromkeys([s.split(".", 1)[1] for s in policy.signals]
                                   + [sig for r in policy.rules for sig, _, _ in comparisons(r.condition)]))
        for name in names:
            if name not in known:
                raise ScoreError(f"policy {policy.name!r} has no signal {name!r}; it has {', '.join(known)}")
    elif found:
        first = [c for c in comparisons(blocks[0].condition)] or found
        up = first[0][1] in (">", ">=")
        names = list(dict.fromkeys(sig for sig, op, _ in first if (op in (">", ">=")) == up))
    else:
        raise ScoreError(f"policy {policy.name!r} has no rule that acts on a numeric signal compared with a constant",
                         hint="name the score with --score SIGNAL")
    ops = [op for signal, op, _ in found if signal in names]
    # A signal no block rule compares: assume high = positive (probabilities).
    higher = not ops or ops[0] in (">", ">=")
    thresholds = tuple(sorted({value for signal, _, value in found if signal in names}))
    return Score(policy=policy.name, signals=tuple(f"{policy.name}.{n}" for n in names), higher_is_positive=higher,
                 thresholds=thresholds, action=action)


def _policy(plan: Plan, requested: str | None) -> PolicyProgram:
    if requested and "." in requested.split(",")[0]:
        wanted = requested.split(",")[0].split(".", 1)[0].strip()
        for policy in plan.policies:
            if policy.name == wanted:
                return policy
        raise ScoreError(f"no policy named {wanted!r} in the evaluated policies")
    if len(plan.policies) != 1:
        raise ScoreError(f"{len(plan.policies)} policies are loaded; evaluate one policy file, or name the score as POLICY.SIGNAL")
    return plan.policies[0]


def numeric_signals(plan: Plan, policy: str, signals: list[Mapping[str, Any]]) -> list[str]:
    """Qualified names of the policy's signals that came back as numbers."""
    program = next(p for p in plan.policies if p.name == policy)
    return [s for s in program.signals
            if any(isinstance(row.get(s), (int, float)) and not isinstance(row.get(s), bool) for row in signals)]

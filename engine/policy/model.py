"""The policy model: what a policy file means, as frozen dataclasses.

A ``Policy`` is built from a schema-valid document (``build.build_policy``)
and keeps where it came from (``source``, ``revision`` = sha256 of the file's
bytes) and where each part was written (``location`` fields), so that later
stages can report problems at the right line.

For the compiler (see ``innerguard.engine.plan``):

- ``Policy.to_program()`` gives the ``PolicyProgram`` (rules with parsed
  condition trees and their parameters); ``PolicySet.programs()`` for all.
- ``Policy.used_signals()`` are the signals the rules read; each
  ``Signal.analyzer`` + ``Signal.params()`` becomes an ``AnalyzerSpec`` named
  ``Policy.qualified(signal.name)`` (``"<policy>.<signal>"``).
- ``Rule.steer`` (a ``SteerAction``) becomes one ``SteerSpec`` per layer, all
  with id ``"<policy>/<rule>"`` (``Rule.steer_id(policy)``); the rule's
  program params carry that id as ``params["steer"]``.
- ``ArtifactRef.resolved`` is the absolute artifact path (already checked by
  the linter to stay inside the policy's folder).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.plan import PolicyProgram, RuleProgram
from innerguard.engine.policy import conditions
from innerguard.engine.policy.diagnostics import Location
from innerguard.engine.policy.templates import template_signals

SignalType = Literal["number", "vector", "boolean"]

DEFAULT_BLOCK_MESSAGE = (
    "This request was blocked by policy {{ policy.name }} (rule {{ rule.id }})."
)
DEFAULT_STOP_MESSAGE = (
    "The rest of this answer was withheld by policy {{ policy.name }} (rule {{ rule.id }})."
)


MAX_HOLD_BACK = 256  # output.hold_back's maximum in the schema


@dataclass(frozen=True)
class OutputSettings:
    """How a policy's output rules read a generation (the ``output`` key)."""

    hold_back: int = 8  # tokens a stream keeps back until the rules have read past them
    every: int = 1  # read the generated text every this many tokens

    def params(self) -> dict[str, int]:
        return {"hold_back": self.hold_back, "every": self.every}


# What each analyzer's signal can take; the linter checks thresholds against it.
SIGNAL_RANGES: dict[str, tuple[float, float]] = {
    "attention_tracker": (0.0, 1.0),
    "probe:cosine": (-1.0, 1.0),
    "probe:probability": (0.0, 1.0),
    "reranker": (0.0, 1.0),
}


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    path: str  # as written, relative to the policy file
    key: str
    resolved: Path  # policy folder / path, absolute
    location: Location = field(compare=False)

    def to_dict(self) -> dict[str, str]:
        return {"path": str(self.resolved), "key": self.key}


@dataclass(frozen=True, kw_only=True)
class SpanSelector:
    """Messages with one of ``roles``, or raw text between ``begin`` and ``end``."""

    roles: tuple[str, ...] = ()
    begin: str | None = None
    end: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.roles:
            return {"roles": list(self.roles)}
        return {"begin": self.begin, "end": self.end}




@dataclass(frozen=True, kw_only=True)
class Signal:
    name: str
    analyzer: str
    description: str = ""
    location: Location = field(compare=False)

    type: SignalType = "number"

    @property
    def value_range(self) -> tuple[float, float] | None:
        return SIGNAL_RANGES.get(self.analyzer)

    def params(self) -> dict[str, Any]:
        """Analyzer parameters, plain JSON (for ``AnalyzerSpec.params``)."""
        return {}


def _heads_param(heads) -> Any:
    if isinstance(heads, ArtifactRef):
        return {"artifact": heads.to_dict()}
    return [list(pair) for pair in heads]


@dataclass(frozen=True, kw_only=True)
class AttentionTrackerSignal(Signal):
    heads: tuple[tuple[int, int], ...] | ArtifactRef
    # prompt: the last prompt token's focus, decided at prefill. generated:
    # each generated token's share of its span attention that goes ``toward``
    # one span, pooled like a token probe (largest mean over ``window``
    # tokens), evaluated in the worker as the model writes.
    span: Literal["prompt", "generated"] = "prompt"
    toward: Literal["trusted", "untrusted"] = "trusted"
    window: int = 8
    type: SignalType = "number"

    def params(self) -> dict[str, Any]:
        if self.span != "generated":  # as before, so that prompt trackers' plans keep their hash
            return {"heads": _heads_param(self.heads)}
        return {"heads": _heads_param(self.heads), "span": self.span, "toward": self.toward, "window": self.window}


@dataclass(frozen=True, kw_only=True)
class ProbeSignal(Signal):
    layer: int
    vector: ArtifactRef
    score: Literal["cosine", "probability"] = "cosine"
    bias: float | None = None  # None: the artifact's own "bias" tensor, else 0
    type: SignalType = "number"

    @property
    def value_range(self) -> tuple[float, float]:
        return SIGNAL_RANGES[f"probe:{self.score}"]

    def params(self) -> dict[str, Any]:
        return {"layer": self.layer, "vector": self.vector.to_dict(), "score": self.score, "bias": self.bias}


@dataclass(frozen=True, kw_only=True)
class TokenProbeSignal(Signal):
    layers: tuple[int, ...]
    weights: ArtifactRef  # tensors "<key>.<layer>" [hidden] and "bias" [1]
    span: Literal["untrusted", "trusted", "generated"] = "untrusted"  # generated: scored in the worker as the model writes
    window: int = 12
    length_adjust: float = 0.0  # taken off per ln(number of windows): hooks/analyzers/token_probe.py
    type: SignalType = "number"

    def layer_refs(self) -> list[tuple[int, ArtifactRef]]:
        """One vector per layer: the artifact's ``<key>.<layer>`` tensor."""
        return [(layer, replace(self.weights, key=f"{self.weights.key}.{layer}")) for layer in self.layers]

    def params(self) -> dict[str, Any]:
        params = {"layers": list(self.layers), "span": self.span, "window": self.window}
        if self.length_adjust:  # absent when off, so that the plans of policies without it keep their hash
            params["length_adjust"] = self.length_adjust
        return params


@dataclass(frozen=True, kw_only=True)
class RerankerSignal(Signal):
    documents: SpanSelector
    query: SpanSelector | None = None
    calibration: Literal["content-free", "none"] = "content-free"
    heads: tuple[tuple[int, int], ...] | ArtifactRef | None = None
    type: SignalType = "vector"

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"documents": self.documents.to_dict(), "calibration": self.calibration}
        if self.query:
            out["query"] = self.query.to_dict()
        if self.heads is not None:
            out["heads"] = _heads_param(self.heads)
        return out


@dataclass(frozen=True, kw_only=True)
class TextSignal(Signal):
    pattern: str | None = None
    keywords: tuple[str, ...] = ()
    case_sensitive: bool = False
    span: Literal["prompt", "trusted", "untrusted", "generated"] = "prompt"
    repeats: Literal["trusted", "untrusted"] | None = None  # generated only: true once it repeats this span's words
    words: int = 8  # how many consecutive words count as a repeat
    type: SignalType = "boolean"

    @property
    def value_range(self) -> None:
        return None

    def params(self) -> dict[str, Any]:
        params = {"pattern": self.pattern, "keywords": list(self.keywords), "case_sensitive": self.case_sensitive, "span": self.span}
        if self.repeats is not None:  # absent otherwise, so that the plans of other text signals keep their hash
            params.update(repeats=self.repeats, words=self.words)
        return params


@dataclass(frozen=True, kw_only=True)
class RegisteredSignal(Signal):
    """A signal of an analyzer unit (engine/analyzers): the unit read its
    parameters from the YAML and says what range its value takes."""

    values: Mapping[str, Any] = field(default_factory=dict, hash=False)
    type: SignalType = "number"

    @property
    def value_range(self) -> tuple[float, float] | None:
        unit = analyzer_units.get(self.analyzer)
        return unit.value_range if unit else None

    def params(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True, kw_only=True)
class SteerAction:
    vector: ArtifactRef
    layers: tuple[int, ...]
    coefficient: float = 1.0
    positions: Literal["prompt", "generated", "all"] = "generated"
    method: Literal["add", "project"] = "add"
    location: Location = field(compare=False)


@dataclass(frozen=True, kw_only=True)
class Rule:
    id: str
    when: str | bool  # as written
    condition: conditions.Expr | None  # None only when ``when`` did not parse
    action: str
    priority: int = 0
    description: str = ""
    message: str | None = None  # Jinja2 template (block, flag)
    steer: SteerAction | None = None
    location: Location = field(compare=False)

    def steer_id(self, policy: str) -> str:
        return f"{policy}/{self.id}"

    def params(self, policy: str) -> dict[str, Any]:
        """``RuleProgram.params``: what the evaluator and runtime need."""
        out: dict[str, Any] = {"priority": self.priority}
        if self.action == "block":
            out["message"] = self.message or DEFAULT_BLOCK_MESSAGE
        elif self.action == "stop":
            out["message"] = self.message or DEFAULT_STOP_MESSAGE
        elif self.message:
            out["message"] = self.message
        if self.action == "steer":
            out["steer"] = self.steer_id(policy)
        return out


@dataclass(frozen=True, kw_only=True)
class Policy:
    name: str
    version: str
    owner: str = ""
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None
    mode: Literal["enforce", "shadow", "warn"] = "enforce"
    on_error: Literal["fail-closed", "fail-open"] = "fail-closed"
    priority: int = 0
    output: OutputSettings = OutputSettings()
    selector: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    spans: Mapping[str, SpanSelector] = field(default_factory=dict)
    signals: tuple[Signal, ...] = ()
    rules: tuple[Rule, ...] = ()
    source: Path
    revision: str  # sha256 of the file's bytes
    location: Location = field(compare=False)

    @property
    def root(self) -> Path:
        """Artifacts must stay inside this folder (the policy file's own)."""
        return self.source.parent

    def signal(self, name: str) -> Signal | None:
        for signal in self.signals:
            if signal.name == name:
                return signal
        return None

    def qualified(self, signal: str) -> str:
        return f"{self.name}.{signal}"

    def generated_signals(self) -> frozenset[str]:
        """Short names of the signals that read what the model writes."""
        return frozenset(s.name for s in self.signals
                         if isinstance(s, (TextSignal, TokenProbeSignal, AttentionTrackerSignal)) and s.span == "generated")

    def decode_signals(self) -> frozenset[str]:
        """Short names of the generated signals the worker computes (token
        probes and attention trackers on the generated tokens); the engine
        computes the others (text)."""
        return frozenset(s.name for s in self.signals
                         if isinstance(s, (TokenProbeSignal, AttentionTrackerSignal)) and s.span == "generated")

    def reads_generated(self, rule: Rule) -> bool:
        """An output rule: evaluated on the generated text, not at prefill."""
        generated = self.generated_signals()
        return rule.condition is not None and any(n in generated for n, _ in conditions.signals_in(rule.condition))

    def used_signals(self) -> tuple[str, ...]:
        """Short names of signals read by conditions or message templates, in
        definition order."""
        used: set[str] = set()
        for rule in self.rules:
            if rule.condition is not None:
                used.update(name for name, _ in conditions.signals_in(rule.condition))
            if rule.message:
                used.update(template_signals(rule.message))
        return tuple(s.name for s in self.signals if s.name in used)

    def to_program(self) -> PolicyProgram:
        if any(rule.condition is None for rule in self.rules):
            raise ValueError(f"policy {self.name} has a rule whose condition did not parse; lint it first")
        return PolicyProgram(
            name=self.name,
            version=self.version,
            revision=self.revision,
            mode=self.mode,
            on_error=self.on_error,
            priority=self.priority,
            selector={k: list(v) for k, v in self.selector.items()},
            spans={k: v.to_dict() for k, v in self.spans.items()},
            # The worker decides at prefill and reads only prompt signals; the
            # generated text's are computed by the engine as tokens arrive.
            signals=tuple(self.qualified(s) for s in self.used_signals() if s not in self.generated_signals()),
            rules=tuple(
                RuleProgram(id=r.id, condition=conditions.to_data(r.condition), action=r.action,
                            params={**r.params(self.name),
                                    **(self._output_params(r) if self.reads_generated(r) else {})})
                for r in self.rules
            ),
        )

    def _output_params(self, rule: Rule) -> dict[str, Any]:
        """An output rule's: evaluated by the worker, on each generated token,
        when it reads a signal the model computes (``decode``), else by the
        engine on the detokenized text."""
        decode = any(n in self.decode_signals() for n, _ in conditions.signals_in(rule.condition))
        return {"output": True, **({"decode": True} if decode else {}), **self.output.params()}


@dataclass(frozen=True)
class PolicySet:
    policies: tuple[Policy, ...] = ()

    def __iter__(self) -> Iterator[Policy]:
        return iter(self.policies)

    def __len__(self) -> int:
        return len(self.policies)

    def by_name(self, name: str) -> Policy | None:
        for policy in self.policies:
            if policy.name == name:
                return policy
        return None

    def programs(self) -> tuple[PolicyProgram, ...]:
        return tuple(p.to_program() for p in self.policies)

"""The compiled plan: the only data that crosses from the engine to the worker.

Everything here is plain, frozen and JSON-serialisable (``to_dict`` /
``from_dict``), so it can travel through ``collective_rpc`` and be hashed.
Layer and head indices are 0-based. A "head" is a query head; its key/value
head is ``head // (num_heads // num_kv_heads)``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from innerguard.engine.contract import REQUEST_KEY

PLAN_VERSION = "innerguard.plan/v1"

# An analyzer's name: a legacy one (attention_tracker, reranker, probe,
# token_probe, text) or a unit's (engine/analyzers), which other packages may add.
AnalyzerKind = str
Action = Literal["block", "stop", "steer", "flag", "rerank", "drop_documents", "allow"]
Mode = Literal["enforce", "shadow", "warn"]
OnError = Literal["fail-closed", "fail-open"]


def encode_request_args(args: dict[str, Any]) -> dict[str, str]:
    """``extra_args`` (or ``vllm_xargs``) for a guarded request."""
    return {REQUEST_KEY: json.dumps(args, separators=(",", ":"), sort_keys=True)}


def decode_request_args(extra_args: dict[str, Any] | None) -> dict[str, Any] | None:
    """The guarded request's arguments, or None for an unguarded request.
    Raises ValueError for a value that is not a JSON object."""
    value = (extra_args or {}).get(REQUEST_KEY)
    if value is None:
        return None
    args = json.loads(value) if isinstance(value, str) else value
    if not isinstance(args, dict):
        raise ValueError(f"extra_args[{REQUEST_KEY!r}] must be a JSON object")
    return args


@dataclass(frozen=True)
class ModelGeometry:
    """What the linter and compiler need to know of a model."""

    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    fingerprint: str = ""  # engine.models.fingerprint: config.json (less its writer's version), weight names/sizes


@dataclass(frozen=True)
class QKCapture:
    """Post-RoPE Q and K at the input of ``model.layers[layer].self_attn.attn``.

    ``heads`` are query heads; K is kept for their KV heads over all prompt
    tokens. ``query`` says which prompt positions' Q is kept.
    """

    layer: int
    heads: tuple[int, ...]
    query: Literal["last", "all"] = "last"


@dataclass(frozen=True)
class ResidualCapture:
    """The residual stream (HF's layer output: vLLM's hidden + residual) after
    ``model.layers[layer]``, at the last prompt token."""

    layer: int


@dataclass(frozen=True)
class SteerSpec:
    """Add (or projection-adjust) ``vector`` on the residual stream after
    ``layer``. ``vector`` names an entry of ``Plan.vectors``."""

    id: str  # "<policy>/<rule>"
    layer: int
    vector: str
    coefficient: float
    positions: Literal["prompt", "generated", "all"] = "generated"
    method: Literal["add", "project"] = "add"


@dataclass(frozen=True)
class VectorRef:
    """A vector artifact: a safetensors file, one tensor key, its sha256."""

    path: str
    key: str
    sha256: str


@dataclass(frozen=True)
class AnalyzerSpec:
    """One analyzer producing one named signal (``<policy>.<signal>``)."""

    signal: str
    kind: AnalyzerKind
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def on_generated_tokens(self) -> bool:
        """Computed in the worker on each token the model writes (a token
        probe or an attention tracker with ``span: generated``)."""
        return self.kind in ("token_probe", "attention_tracker") and self.params.get("span") == "generated"


@dataclass(frozen=True)
class RuleProgram:
    """A rule, ready to evaluate: ``condition`` is the parsed condition tree
    (see ``innerguard.engine.policy.conditions``), never source text."""

    id: str
    condition: Any
    action: Action
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyProgram:
    name: str
    version: str
    revision: str  # sha256 of the policy file's bytes
    mode: Mode
    on_error: OnError
    priority: int
    selector: dict[str, Any]
    spans: dict[str, Any]
    signals: tuple[str, ...]  # fully-qualified signal names it reads
    rules: tuple[RuleProgram, ...]


@dataclass(frozen=True)
class Plan:
    version: str
    model: ModelGeometry
    qk_captures: tuple[QKCapture, ...]
    residual_captures: tuple[ResidualCapture, ...]
    steers: tuple[SteerSpec, ...]
    analyzers: tuple[AnalyzerSpec, ...]
    policies: tuple[PolicyProgram, ...]
    vectors: dict[str, VectorRef]
    bundle_hash: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        policies = tuple(
            PolicyProgram(
                **{**p, "signals": tuple(p["signals"]),
                   "rules": tuple(RuleProgram(**r) for r in p["rules"])}
            )
            for p in data["policies"]
        )
        return cls(
            version=data["version"],
            model=ModelGeometry(**data["model"]),
            qk_captures=tuple(
                QKCapture(**{**c, "heads": tuple(c["heads"])}) for c in data["qk_captures"]
            ),
            residual_captures=tuple(ResidualCapture(**c) for c in data["residual_captures"]),
            steers=tuple(SteerSpec(**s) for s in data["steers"]),
            analyzers=tuple(AnalyzerSpec(**a) for a in data["analyzers"]),
            policies=policies,
            vectors={k: VectorRef(**v) for k, v in data["vectors"].items()},
            bundle_hash=data["bundle_hash"],
        )

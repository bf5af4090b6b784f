"""What the worker keeps of one guarded request while vLLM runs it, and of
the ``n > 1`` siblings that share its decision; and one request's rows of a
step. hooks/lifecycle.py creates and drops them on vLLM's events."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from innerguard.hooks.capture import Captures
from innerguard.hooks.decode_probes import DecodeProbes
from innerguard.hooks.runner_view import RowSpan
from innerguard.hooks.steer import ActiveSteer


@dataclass(eq=False)
class Group:
    """Requests with one key, one prompt and one set of arguments: vLLM's
    children of an ``n > 1`` request. They share one decision."""

    key: str
    digest: int
    members: set[str] = field(default_factory=set)
    result: dict[str, Any] | None = None
    span_keys: dict | None = None  # the prompt's span keys for attention on generated tokens (decode_probes.py)
    span_key_bytes: int = 0  # what they hold in span_key_budget.BUDGET, released when the group ends


@dataclass(eq=False)
class RequestState:
    req_id: str
    key: str  # the caller's id (vLLM appends a random suffix to its own)
    runtime: Any  # the GuardRuntime (plan) this request runs under
    group: Group
    args: dict[str, Any]
    num_prompt_tokens: int
    policies: tuple = ()
    unknown_policies: list[str] = field(default_factory=list)
    qk_layers: frozenset[int] = frozenset()
    residual_layers: frozenset[int] = frozenset()
    token_layers: frozenset[int] = frozenset()  # layers a token-level probe of its policies reads
    token_probes: tuple[str, ...] = ()  # those probes' signals
    query_span: tuple[int, int] | None = None  # the reranker's query tokens
    captures: Captures = field(default_factory=Captures)
    steers: list[ActiveSteer] = field(default_factory=list)
    decode: DecodeProbes | None = None  # token probes on its generated tokens, and the rules that read them
    static_steers: set[str] = field(default_factory=set)
    details: dict[str, Any] = field(default_factory=dict)  # per-signal extras (rerank order)
    calibration: dict[str, Any] | None = None
    first_seen: float = field(default_factory=time.perf_counter)
    prefill_tokens: int = 0
    error: str | None = None  # the first thing that went wrong for this request
    never_fail_open: bool = False  # its arguments could not be trusted
    decided: bool = False
    blocked: bool = False
    preempted: bool = False
    late_error: tuple[str, str] | None = None  # (policy, message) after the decision
    # Decided, allowed, every steer an ``add`` that moves every row from here
    # on: its (layer, steering slot) pairs, placed without a RowSpan (begin_step).
    steady: tuple[tuple[int, int], ...] | None = None

    @property
    def generated_start(self) -> int:
        """The position of the first generated token: the prompt's end, or
        where a teacher-forced completion starts (``generated_from``)."""
        return self.args.get("generated_from", self.num_prompt_tokens)

    @property
    def is_calibration(self) -> bool:
        return "calibration_for" in self.args

    @property
    def capturing(self) -> bool:
        return not self.decided and self.error is None and self.group.result is None

    def fail(self, message: str, never_open: bool = False) -> None:
        self.steady = None
        if self.error is None:
            self.error = message
        self.never_fail_open |= never_open

    def add_steers(self, specs, from_position: int = 0) -> None:
        self.steady = None
        self.steers += [ActiveSteer(s, s.id.split("/")[0], from_position) for s in specs]

    def steer_failed(self, active: ActiveSteer, message: str) -> None:
        self.steady = None
        self.steers = [s for s in self.steers if s is not active]
        if not self.decided:
            self.fail(message)
        elif self.late_error is None:
            self.late_error = (active.policy, message)


@dataclass(frozen=True)
class Rows:
    """One guarded request's part of this step."""

    state: RequestState
    span: RowSpan
    prompt_rows: tuple[int, int] = (0, 0)  # rows holding prompt tokens
    last_row: int | None = None  # the last prompt token's row, on its final chunk
    query_rows: tuple[int, int] = (0, 0)  # rows of the reranker's query tokens
    # Prompt rows a decided request recomputes (after a preemption): only
    # their token-probe scores are kept, for the prefix cache's sake.
    rescoring: bool = False
    # Rows holding generated tokens a decode probe scores, and the index
    # (among the generated tokens) of the first of them.
    generated_rows: tuple[int, int] = (0, 0)
    generated_first: int = 0

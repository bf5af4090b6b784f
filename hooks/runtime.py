"""The guard inside the worker: hooks that capture and steer, and the moment of
decision, all within vLLM's own forward pass.

One forward, per step:
  model pre-hook    -> read the step (which rows belong to which request)
  attn pre-hooks    -> keep post-RoPE Q (last prompt token) and K (prompt rows)
  layer hooks       -> keep the residual stream at the last prompt token; steer
  logits hook       -> for requests whose prompt just finished: analyzers,
                       rules, decision; a blocked request's row is forced to
                       end-of-sequence before the sampler sees it.
Only scalars leave the device; captures are dropped once a request is decided.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from innerguard.engine.plan import Plan, PolicyProgram, SteerSpec, decode_request_args
from innerguard.hooks.analyzers.steering import steering_delta
from innerguard.hooks.calibration import CalibrationStore
from innerguard.hooks.modules import ModelModules
from innerguard.hooks.runner_view import RowSpan, StepReader

ALWAYS = {"op": "const", "value": True}  # a rule's condition when it has no `when`
MAX_UNCLAIMED_RESULTS = 65536


@dataclass
class RequestState:
    key: str  # the caller's id (vLLM appends a random suffix to its own)
    req_id: str
    policies: tuple[PolicyProgram, ...]
    args: dict[str, Any]
    num_prompt_tokens: int
    qk_layers: frozenset[int]
    residual_layers: frozenset[int]
    first_seen: float = field(default_factory=time.perf_counter)
    prefill_tokens: int = 0
    k_chunks: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    q_last: dict[int, torch.Tensor] = field(default_factory=dict)
    residual_last: dict[int, torch.Tensor] = field(default_factory=dict)
    steers: list[SteerSpec] = field(default_factory=list)
    decided: bool = False
    capture_error: str | None = None
    query_span: tuple[int, int] | None = None  # reranker query tokens (positions)
    q_query: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # per-signal extras (rerank order)
    calibration: dict[str, Any] | None = None  # the reranker's content-free pass
    static_steers: set[str] = field(default_factory=set)
    never_fail_open: bool = False  # its arguments or policies could not be read


@dataclass(frozen=True)
class _Rows:
    """One guarded request's part of this step."""

    state: RequestState
    span: RowSpan
    prompt_rows: tuple[int, int]  # rows holding prompt tokens (may be empty)
    last_row: int | None  # the last prompt token's row, on its final chunk
    query_rows: tuple[int, int] = (0, 0)  # rows of the reranker's query tokens


class GuardRuntime:
    def __init__(
        self,
        plan: Plan,
        modules: ModelModules,
        reader: StepReader,
        vectors: dict[str, torch.Tensor],
        compute_signals: Callable[..., tuple[dict[str, Any], dict[str, str]]],
        decide: Callable[..., dict[str, Any]],
    ):
        self.plan = plan
        self.modules = modules
        self.reader = reader
        self.vectors = vectors
        self._compute_signals = compute_signals
        self._decide = decide
        self.hook_calls: Counter[str] = Counter()
        self.calibrations = CalibrationStore()
        self.results: dict[str, dict[str, Any]] = {}
        self._states: dict[str, RequestState | None] = {}
        self._step: list[_Rows] = []
        self._steer_rows: dict[int, list[tuple[torch.Tensor, SteerSpec]]] = {}
        self._handles: list[Any] = []
        self._policies = {p.name: p for p in plan.policies}
        self._analyzers = {a.signal: a for a in plan.analyzers}
        self._qk_layers = sorted({c.layer for c in plan.qk_captures})
        self._residual_layers = sorted({c.layer for c in plan.residual_captures})
        self._steer_layers = sorted({s.layer for s in plan.steers})
        self._steers_by_id: dict[str, list[SteerSpec]] = {}
        for steer in plan.steers:  # one rule may steer several layers
            self._steers_by_id.setdefault(steer.id, []).append(steer)

    # -- installation --------------------------------------------------------
    def install(self) -> "GuardRuntime":
        m = self.modules
        self._handles.append(m.model.register_forward_pre_hook(self._begin_step, with_kwargs=True))
        for layer in self._qk_layers:
            self._handles.append(m.attention(layer).register_forward_pre_hook(self._make_qk_hook(layer)))
        for layer in sorted(set(self._residual_layers) | set(self._steer_layers)):
            self._handles.append(m.layer(layer).register_forward_hook(self._make_layer_hook(layer)))
        self._handles.append(m.logits.register_forward_hook(self._decide_step))
        return self

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @property
    def hook_points(self) -> list[str]:
        points = ["step", "logits"]
        points += [f"qk.{layer}" for layer in self._qk_layers]
        points += [f"layer.{layer}" for layer in sorted(set(self._residual_layers) | set(self._steer_layers))]
        return points

    # -- per request ---------------------------------------------------------
    def _state_for(self, span: RowSpan) -> RequestState | None:
        if span.req_id in self._states:
            return self._states[span.req_id]
        try:
            args = decode_request_args(self.reader.extra_args(span.req_id))
        except ValueError as exc:
            # Malformed guard arguments: guard the request with nothing but
            # the error, so that it is blocked rather than served unguarded.
            args = {"policies": [], "id": span.req_id, "bad_arguments": str(exc)}
        state = None if args is None else self._new_state(span, args)
        self._states[span.req_id] = state
        return state

    def _new_state(self, span: RowSpan, args: dict[str, Any]) -> RequestState:
        names = args.get("policies") or ()
        policies = tuple(self._policies[n] for n in names if n in self._policies)
        missing = [n for n in names if n not in self._policies]
        signals = {s for p in policies for s in p.signals}
        qk, residual = set(), set()
        for signal in signals:
            spec = self._analyzers.get(signal)
            if spec is None:
                continue
            qk.update(spec.params.get("qk_layers", ()))
            residual.update(spec.params.get("residual_layers", ()))
        state = RequestState(
            key=str(args.get("id", span.req_id)),
            req_id=span.req_id,
            policies=policies,
            args={**args, "unknown_policies": missing},
            num_prompt_tokens=span.num_prompt_tokens,
            qk_layers=frozenset(qk),
            residual_layers=frozenset(residual),
        )
        if missing:
            # The engine checked these names against its plan; the worker's plan
            # differs (a reload raced this request). Never guard with less.
            state.capture_error = f"policies {missing} are not installed in the worker"
            state.never_fail_open = True
        if "bad_arguments" in args:
            state.capture_error = f"malformed innerguard arguments: {args['bad_arguments']}"
            state.never_fail_open = True
        rerank = args.get("rerank") or {}
        if rerank:
            start, end = next(iter(rerank.values()))["query"][0]
            state.query_span = (int(start), int(end))
        if span.first_position > 0:
            # Served partly from the prefix cache: only the reranker's own
            # calibration pass can have computed (and captured) that prefix.
            self.calibrations.restore_prefix(state, span.first_position)
        # Rules that steer unconditionally apply from the first prompt token on;
        # conditional ones only once the prompt has been read and decided.
        for policy in policies if "calibration_for" not in args else ():
            for rule in policy.rules:
                if rule.action == "steer" and rule.condition == ALWAYS and policy.mode == "enforce":
                    state.steers += self._steers_by_id.get(rule.params.get("steer"), [])
                    state.static_steers.add(rule.params.get("steer"))
        return state

    def _forget_finished(self, live: set[str]) -> None:
        if len(self._states) > 4 * max(len(live), 16):
            for req_id in [r for r in self._states if r not in live]:
                del self._states[req_id]

    # -- hooks ---------------------------------------------------------------
    def _begin_step(self, module, args, kwargs):
        self.hook_calls["step"] += 1
        positions = kwargs.get("positions") if "positions" in kwargs else args[1]
        view = self.reader.step(positions.cpu() if positions.is_cuda else positions)
        step: list[_Rows] = []
        steer_rows: dict[int, list[tuple[torch.Tensor, SteerSpec]]] = {}
        for span in view.rows:
            state = self._state_for(span)
            if state is None:
                continue
            n = span.end - span.start
            prompt_end = min(span.first_position + n, state.num_prompt_tokens)
            prompt_count = max(prompt_end - span.first_position, 0)
            state.prefill_tokens += prompt_count
            final_chunk = prompt_count > 0 and prompt_end == state.num_prompt_tokens
            query_rows = (0, 0)
            if state.query_span is not None:
                lo = max(state.query_span[0], span.first_position)
                hi = min(state.query_span[1], span.first_position + prompt_count)
                if hi > lo:
                    query_rows = (span.start + lo - span.first_position, span.start + hi - span.first_position)
            step.append(
                _Rows(
                    state=state,
                    span=span,
                    prompt_rows=(span.start, span.start + prompt_count),
                    last_row=span.start + prompt_count - 1 if final_chunk else None,
                    query_rows=query_rows,
                )
            )
            for steer in state.steers:
                rows = _steer_rows(steer, span, prompt_count)
                if rows is not None:
                    steer_rows.setdefault(steer.layer, []).append((rows, steer))
        self._step = step
        self._steer_rows = steer_rows
        self._forget_finished({span.req_id for span in view.rows})

    def _make_qk_hook(self, layer: int):
        def capture_qk(module, args):
            self.hook_calls[f"qk.{layer}"] += 1
            if not self._step:
                return
            q, k = args[0], args[1]
            for rows in self._step:
                state = rows.state
                if layer not in state.qk_layers or state.decided:
                    continue
                try:
                    a, b = rows.prompt_rows
                    if b > a:
                        state.k_chunks.setdefault(layer, []).append(k[a:b].detach().clone())
                    if rows.last_row is not None:
                        state.q_last[layer] = q[rows.last_row].detach().clone()
                    qa, qb = rows.query_rows
                    if qb > qa:
                        state.q_query.setdefault(layer, []).append(q[qa:qb].detach().clone())
                except Exception as exc:  # recorded; the decision follows the error mode
                    state.capture_error = f"capture at layer {layer} failed: {exc}"

        return capture_qk

    def _make_layer_hook(self, layer: int):
        def capture_and_steer(module, args, output):
            self.hook_calls[f"layer.{layer}"] += 1
            if not self._step:
                return None
            hidden, residual = output
            for rows in self._step:
                if rows.last_row is not None and layer in rows.state.residual_layers:
                    r = rows.last_row
                    rows.state.residual_last[layer] = (hidden[r] + residual[r]).detach().clone()
            for row_index, steer in self._steer_rows.get(layer, ()):
                row_index = row_index.to(hidden.device, non_blocking=True)
                delta = self._steer_delta(steer, hidden, residual, row_index)
                hidden.index_add_(0, row_index, delta.to(hidden.dtype))
            return None  # steered in place

        return capture_and_steer

    def _steer_delta(self, steer: SteerSpec, hidden, residual, row_index):
        stream = hidden.index_select(0, row_index) + residual.index_select(0, row_index)
        delta = steering_delta(stream, self.vectors[steer.vector], steer.coefficient, steer.method)
        return delta.expand_as(stream)

    def _decide_step(self, module, args, logits):
        self.hook_calls["logits"] += 1
        if not self._step or logits is None:
            return None
        for rows in self._step:
            if rows.last_row is None or rows.state.decided:
                continue
            state = rows.state
            state.decided = True
            if "calibration_for" in state.args:
                self.calibrations.record(state, self.plan, self._analyzers, self.modules)
                state.k_chunks.clear()
                state.q_query.clear()
                continue
            try:
                result = self._decide_request(state)
            except Exception as exc:  # never let one request take the engine down
                result = self._failed_decision(state, exc)
            self.results[state.key] = result
            if len(self.results) > MAX_UNCLAIMED_RESULTS:  # a caller that never collects
                self.results.pop(next(iter(self.results)))
            if result["blocked"]:
                _force_end_of_sequence(logits, rows.span.batch_index, self.modules.eos_token_id)
            for steer_id in result["steers"]:
                if steer_id not in state.static_steers:
                    state.steers += self._steers_by_id.get(steer_id, [])
            # Captures are not needed once decided.
            state.k_chunks.clear()
            state.q_last.clear()
            state.q_query.clear()
            state.residual_last.clear()
        return logits

    def _failed_decision(self, state: RequestState, exc: Exception) -> dict[str, Any]:
        """The evaluator itself failed: every policy's error mode decides."""
        closed = [p for p in state.policies if p.on_error == "fail-closed" and p.mode == "enforce"]
        block = bool(closed) or state.never_fail_open
        error = f"{type(exc).__name__}: {exc}"
        return {
            "id": state.key,
            "action": "block" if block else "allow",
            "message": "This request was blocked because the guard could not evaluate it." if block else None,
            "blocked": block,
            "steers": [],
            "decisions": [
                {"policy": p.name, "version": p.version, "revision": p.revision, "mode": p.mode,
                 "action": "block" if p in closed else "allow", "rule": None, "error": error, "signals": {}}
                for p in state.policies
            ],
            "signals": {},
            "errors": {"*": error},
            "prefill_tokens": state.prefill_tokens,
            "num_prompt_tokens": state.num_prompt_tokens,
        }

    def _decide_request(self, state: RequestState) -> dict[str, Any]:
        if state.capture_error:
            raise RuntimeError(state.capture_error)
        if state.query_span is not None:
            state.calibration = self.calibrations.take(state.key)
        started = time.perf_counter()
        signals, errors = self._compute_signals(self.plan, self._analyzers, state, self.vectors, self.modules)
        outcome = self._decide(state.policies, signals, errors, state.args)
        done = time.perf_counter()
        return {
            "id": state.key,
            **outcome,
            "signals": signals,
            "details": state.details,
            "errors": errors,
            "unknown_policies": state.args.get("unknown_policies", []),
            "prefill_tokens": state.prefill_tokens,
            "num_prompt_tokens": state.num_prompt_tokens,
            "analysis_ms": round((done - started) * 1000, 3),
            "decision_latency_ms": round((done - state.first_seen) * 1000, 3),
        }


def _steer_rows(steer: SteerSpec, span: RowSpan, prompt_count: int) -> torch.Tensor | None:
    """Rows of this step that ``steer`` applies to, by position."""
    start, end = span.start, span.end
    if steer.positions == "prompt":
        end = span.start + prompt_count
    elif steer.positions == "generated":
        start = span.start + prompt_count
    if end <= start:
        return None
    return torch.arange(start, end)


def _force_end_of_sequence(logits: torch.Tensor, row: int, eos_token_id: int) -> None:
    # A finite floor (not -inf) keeps the sampler's softmax well-defined even if
    # a later processor masks EOS too.
    logits[row].fill_(torch.finfo(logits.dtype).min / 2)
    logits[row, eos_token_id] = 0.0

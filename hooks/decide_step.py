"""The moment of decision: a forward hook on the logits processor, after the
forward and before the sampler, for every request whose prompt ended in this
step. A blocked request's row is forced to end-of-sequence and its id goes to
the scheduler (``verdicts``), which finishes it in this same step.

The step's decisions are made together (``StepDecisions``): each request's
analyzers queue their tensor work, then one read brings every signal value
to the host, then the rules run. Siblings (``n > 1``: one key, one prompt)
share one decision: the first with complete captures decides, the others
apply its verdict.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.contract import WorkerResult
from innerguard.hooks import probe_buffers
from innerguard.hooks.calibration import geometry_of
from innerguard.hooks.decode_probes import StepScores
from innerguard.hooks.signals import read_signals
from innerguard.hooks.tensor_parallel import combine

# The signals the worker computes, combined across ranks; analyzer units
# (engine/analyzers) too, each rank's value being rank 0's.
COMPUTED = ("attention_tracker", "probe", "token_probe")

BLOCKED_MESSAGE = "This request was blocked because the guard could not evaluate it."


def decide_hook(runtime, lifecycle):
    def decide(module, args, logits):
        runtime.hook_calls["logits"] += 1
        if runtime.decided_this_step or logits is None:
            return None  # prompt logprobs call the logits processor again
        runtime.decided_this_step = True
        land_scores(lifecycle, runtime)  # the last step's generated-token scores: its decode rules
        lifecycle.prefix.keep_token_scores(runtime)  # before decisions clear the captures
        due = [r for r in runtime.rows if (r.state.decided and r.state.late_error) or (r.last_row is not None and not r.state.decided)]
        # One logits row per request of the step, or no row can be trusted.
        rows_match = logits.dim() == 2 and logits.shape[0] == lifecycle.num_rows
        decisions = StepDecisions(runtime, lifecycle)
        for rows in sorted(due, key=_deciders_first):
            try:
                decisions.add(rows.state)
            except Exception as exc:  # never leave a request undecided, never raise into vLLM
                fail_closed(lifecycle, rows.state, exc)
        decisions.finish()
        # This step's, on their way to the host: judged at the next step.
        runtime.scores_in_flight = StepScores.launch(runtime, probe_buffers.BUFFERS)
        # Blocked or stopped now, or earlier with a step still in flight.
        ended = [(r.state, r.span.batch_index) for r in runtime.rows]
        ended += [(state, batch_index) for state, batch_index, _, _ in runtime.decoders if state.decode.stopped]
        for state, batch_index in ended:
            if state.blocked or (state.decode is not None and state.decode.stopped):
                lifecycle.blocked_now.add(state.req_id)
                if rows_match:
                    _force_end_of_sequence(logits, batch_index, runtime.modules.eos_token_id)
        return None

    return runtime.contained("logits", decide)


def land_scores(lifecycle, runtime) -> None:
    """The decode rules on the generated-token scores of ``runtime``'s last
    step (decode_probes.StepScores), if still on their way: at the next
    step's logits hook, or before the engine takes the records. Then the
    completions that ended before give their pool rows back."""
    step, runtime.scores_in_flight = runtime.scores_in_flight, None
    if step is not None:
        for scored, values in step.land():
            decide_generated(lifecycle, scored.state, scored.first, scored.end, values)
        if step.steady is not None:
            decide_steady(lifecycle, step.steady, step.values, step.error)
    for decode in runtime.ended_decodes:
        decode.release()
    runtime.ended_decodes.clear()


def decide_steady(lifecycle, steady, values, error: str | None) -> None:
    """The step's steady decoders (decode_probes.Steady), one token each,
    pooled together; the rules run only for those whose pooled value
    changed, and anything out of the ordinary (a token recomputed or
    skipped, a score not finite, a failed read) goes through
    ``decide_generated`` one request at a time."""
    states, positions = steady.states, steady.positions
    if error is not None or (values is None and steady.rows.size):
        for state, position in zip(states, positions.tolist()):
            state.decode.error = state.decode.error or error or "generated-token scores never reached the host"
            decide_generated(lifecycle, state, position, position + 1, {})
        return
    table = steady.table
    scores = values[steady.offset:steady.offset + steady.rows.size].astype(np.float64) if steady.rows.size else np.zeros(0)
    usual = positions == table.scored[steady.slots]  # the next token: none skipped, none recomputed
    usual &= np.bincount(steady.owners, weights=~np.isfinite(scores), minlength=len(states)) == 0
    changed = np.zeros(len(states), dtype=bool)
    pooled = usual[steady.owners]
    if pooled.any():
        better = table.add_one(steady.rows[pooled], scores[pooled])
        changed[steady.owners[pooled][better]] = True
    table.scored[steady.slots[usual]] = positions[usual] + 1
    for k in np.flatnonzero(changed | ~usual).tolist():
        state, position = states[k], int(positions[k])
        if usual[k]:
            decide_generated(lifecycle, state, position, position + 1)
        else:
            mine = np.flatnonzero(steady.owners == k).tolist()
            decide_generated(lifecycle, state, position, position + 1, {steady.signals[j]: [float(scores[j])] for j in mine})
    for state in steady.unstored:
        _store(lifecycle, state)


def decide_generated(lifecycle, state, first: int, end: int, values: dict[str, list[float]] | None = None) -> None:
    """The decode rules on ``state``'s generated tokens ``[first, end)``,
    scored a step ago (``values``, decode_probes.py; None: pooled already,
    by ``decide_steady``); what they found goes where the engine takes it."""
    decode = state.decode
    if decode.stopped or decode.released:
        return
    if state.error is not None and decode.error is None:  # a hook failed for it: the rules' error modes decide
        decode.error = state.error
    try:
        stop = decode.judge(first, end) if values is None else decode.evaluate(first, end, values)
    except Exception as exc:
        decode.error = f"{type(exc).__name__}: {exc}"
        try:
            stop = decode.judge(first, end)
        except Exception:  # not even the error modes could be applied: never carry on unguarded
            decode.stopped = True
            stop = {"token": first, "policy": None, "rule": None, "message": BLOCKED_MESSAGE,
                    "error": decode.error}
    if stop is not None or decode.error is not None:  # out of the steady path (lifecycle.begin_step)
        state.steady = None
    if stop is not None:
        decode.record["stop"] = stop
    elif decode.new_steers:
        # Read a step late: the row of the token sampled when these tokens
        # were scored is computed by now (or by a step already under way),
        # unsteered; steering starts at the row after it.
        start = state.generated_start + decode.scored + 1
        for steer_id in decode.new_steers:
            state.add_steers(state.runtime.steers_by_id.get(steer_id, ()), from_position=start)
        decode.new_steers.clear()
    _store(lifecycle, state)


def _store(lifecycle, state) -> None:
    """Put ``state``'s decode record where the engine takes it: once, and
    again after the engine took it while the completion goes on (n > 1:
    siblings end at different steps). The stored record is the live one:
    the take settles its scores (lifecycle.take_decode)."""
    decode = state.decode
    if decode.stored or decode.released:
        return
    records = lifecycle.decode_results.get(state.key, state.group.digest)
    lifecycle.decode_results.put(state.key, {**(records or {}), state.req_id: decode.record}, state.group.digest)
    decode.stored = True


def fail_closed(lifecycle, state, exc: Exception) -> None:
    if not state.decided:
        lifecycle.record(state, failed_decision(state, exc))
        state.decided = True
    state.blocked = True
    lifecycle.blocked_now.add(state.req_id)


@dataclass
class _Evaluation:
    state: Any
    signals: tuple[dict[str, Any], dict[str, str]] | None = None
    started: float = 0.0
    failed: WorkerResult | None = None  # the decision, when the analyzers could not even start


class StepDecisions:
    """The decisions due in one step."""

    def __init__(self, runtime, lifecycle):
        self.runtime, self.lifecycle = runtime, lifecycle
        self.evaluations: list[_Evaluation] = []
        self.deciding: set[int] = set()  # ids of the groups an evaluation here decides
        self.waiting: list = []  # siblings of those, applying the group's verdict after

    def add(self, state) -> None:
        runtime, lifecycle = self.runtime, self.lifecycle
        if state.decided:  # a failure after the decision (steering)
            _late_failure(runtime, lifecycle, state)
        elif state.is_calibration:
            lifecycle.calibrations.record(state, runtime.plan, runtime.analyzers, runtime.modules)
            state.decided = True
            state.captures.clear()
        elif state.group.result is not None:
            lifecycle.counters["shared_decisions"] += 1
            _apply(runtime, state, state.group.result)
        elif id(state.group) in self.deciding:
            self.waiting.append(state)
        else:
            self.deciding.add(id(state.group))
            self.evaluations.append(self._start(state))

    def _start(self, state) -> _Evaluation:
        runtime, lifecycle = self.runtime, self.lifecycle
        try:
            if state.error:
                raise RuntimeError(state.error)
            if state.captures.start:  # prompt tokens this request did not compute
                lifecycle.prefix.fill(state)
            if state.query_span is not None:
                state.calibration = lifecycle.calibrations.take(state.key)
            started = time.perf_counter()
            signals = runtime.start_signals(runtime.plan, runtime.analyzers, state, runtime.vectors, runtime.modules)
            return _Evaluation(state, signals, started)
        except Exception as exc:
            return _Evaluation(state, failed=failed_decision(state, exc))

    def finish(self) -> None:
        """Read every signal value at once, then decide and apply each verdict."""
        runtime, lifecycle = self.runtime, self.lifecycle
        started = [e for e in self.evaluations if e.failed is None]
        try:
            read_signals([e.signals for e in started])
        except Exception as exc:  # the read failed: no value of this step can be trusted
            for e in started:
                e.failed = failed_decision(e.state, exc)
        if not runtime.modules.shard.whole:
            _agree(runtime, self.evaluations)
        for e in self.evaluations:
            try:
                result = e.failed or _decision(runtime, e)
                lifecycle.record(e.state, result)
                _apply(runtime, e.state, result)
            except Exception as exc:
                fail_closed(lifecycle, e.state, exc)
        for state in self.waiting:
            try:
                lifecycle.counters["shared_decisions"] += 1
                _apply(runtime, state, state.group.result)
            except Exception as exc:
                fail_closed(lifecycle, state, exc)


def _agree(runtime, evaluations: list[_Evaluation]) -> None:
    """Under tensor parallel, every rank takes the same values: the sum of
    the ranks' shares of each attention tracker, rank 0's value of every
    other signal the worker computes, and a failure anywhere is a failure on
    every rank (tensor_parallel.py). Runs on every rank at every decision
    point, even with nothing due, so that ranks that disagree fail instead
    of waiting for each other."""
    rank = runtime.modules.shard.rank
    labels, values, slots = [], [], []
    for e in evaluations:
        labels.append(e.state.key)
        values.append(float(e.failed is not None))
        slots.append((e, None))
        signals, errors = e.signals or ({}, {})
        for name in sorted({s for p in e.state.policies for s in p.signals}):
            spec = runtime.analyzers.get(name)
            if spec is None or (spec.kind not in COMPUTED and analyzer_units.get(spec.kind) is None):
                continue
            value = signals.get(name)
            share = spec.kind == "attention_tracker" or rank == 0
            labels += [f"{e.state.key}/{name}!", f"{e.state.key}/{name}"]
            values += [float(e.failed is not None or not isinstance(value, float)), value if share and isinstance(value, float) else 0.0]
            slots.append((e, name))
    try:
        combined = iter(combine(labels, values))
    except Exception as exc:
        for e in evaluations:
            e.failed = e.failed or failed_decision(e.state, exc)
        return
    elsewhere = RuntimeError("the analysis failed on another tensor-parallel rank (see that worker's log)")
    for e, name in slots:
        failed = next(combined) > 0
        if name is None:
            if failed and e.failed is None:
                e.failed = failed_decision(e.state, elsewhere)
            continue
        value = next(combined)
        if e.failed is not None:
            continue
        signals, errors = e.signals
        if failed:
            signals.pop(name, None)
            errors.setdefault(name, f"{type(elsewhere).__name__}: {elsewhere}")
        else:
            signals[name] = value


def _decision(runtime, evaluation: _Evaluation) -> WorkerResult:
    state, (signals, errors) = evaluation.state, evaluation.signals
    outcome = runtime.decide(state.policies, signals, errors, state.args)
    done = time.perf_counter()
    return {
        "id": state.key,
        **outcome,
        "signals": signals,
        "details": state.details,
        "errors": errors,
        "unknown_policies": state.unknown_policies,
        "bundle": runtime.plan.bundle_hash,
        "prefill_tokens": state.prefill_tokens,
        "num_prompt_tokens": state.num_prompt_tokens,
        "analysis_ms": round((done - evaluation.started) * 1000, 3),
        "decision_latency_ms": round((done - state.first_seen) * 1000, 3),
    }


def _apply(runtime, state, result: WorkerResult) -> None:
    """``state`` follows ``result``: blocked, or allowed with its steers."""
    state.decided = True
    state.blocked = bool(result.get("blocked"))
    if not state.blocked:
        for steer_id in result.get("steers", ()):
            if steer_id not in state.static_steers:
                state.add_steers(runtime.steers_by_id.get(steer_id, ()), from_position=state.num_prompt_tokens)
        if state.decode is not None and state.decode.error is None:
            try:  # the last moment the prompt's K is at hand
                state.decode.keep_span_keys(state, geometry_of(runtime.plan))
            except Exception as exc:  # the decode rules' error modes decide, at their first evaluation
                state.decode.error = f"{type(exc).__name__}: {exc}"
    state.captures.clear()


def failed_decision(state, exc: Exception) -> WorkerResult:
    """The guard could not evaluate: every policy's error mode decides, and
    arguments the worker could not read always block."""
    closed = [p for p in state.policies if p.on_error == "fail-closed" and p.mode == "enforce"]
    block = bool(closed) or state.never_fail_open or not state.policies
    error = f"{type(exc).__name__}: {exc}"
    return {
        "id": state.key,
        "action": "block" if block else "allow",
        "message": BLOCKED_MESSAGE if block else None,
        "blocked": block,
        "steers": [],
        "decisions": [
            {"policy": p.name, "version": p.version, "revision": p.revision, "mode": p.mode,
             "action": "block" if p in closed or state.never_fail_open else "allow", "rule": None,
             "error": error, "signals": {}}
            for p in state.policies
        ],
        "signals": {},
        "errors": {"*": error},
        "unknown_policies": state.unknown_policies,
        "prefill_tokens": state.prefill_tokens,
        "num_prompt_tokens": state.num_prompt_tokens,
    }


def _late_failure(runtime, lifecycle, state) -> None:
    """Steering failed after an allow: the steering policy's error mode decides."""
    policy_name, message = state.late_error
    state.late_error = None
    policy = runtime.policies.get(policy_name)
    closed = policy is None or (policy.on_error == "fail-closed" and policy.mode == "enforce")
    result = lifecycle.results.get(state.key, state.group.digest)
    if result is not None:
        result.setdefault("errors", {})[f"steer:{policy_name}"] = message
        if closed:
            result.update(action="block", blocked=True, message=BLOCKED_MESSAGE, steers=[])
    if closed:
        state.blocked = True


def _deciders_first(rows) -> tuple[bool, bool]:
    # Calibration passes before the requests they calibrate; siblings with
    # complete captures before those served partly from the prefix cache.
    state = rows.state
    return (not state.is_calibration, bool(state.captures.start))


def _force_end_of_sequence(logits: torch.Tensor, row: int, eos_token_id: int) -> None:
    # A finite floor (not -inf) keeps the sampler's softmax well-defined even if
    # a later processor masks EOS too.
    logits[row].fill_(torch.finfo(logits.dtype).min / 2)
    logits[row, eos_token_id] = 0.0

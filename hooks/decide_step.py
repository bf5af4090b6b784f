"""The moment of decision: a forward hook on the logits processor, after the
forward and before the sampler, for every request whose prompt ended in this
step. A blocked request's row is forced to end-of-sequence and its id goes to
the scheduler (``verdicts``), which finishes it in this same step.

Siblings (``n > 1``: one key, one prompt) share one decision: the first with
complete captures decides, the others apply its verdict.
"""
from __future__ import annotations

import time
from typing import Any

import torch

BLOCKED_MESSAGE = "This request was blocked because the guard could not evaluate it."


def decide_hook(runtime, lifecycle):
    def decide(module, args, logits):
        runtime.hook_calls["logits"] += 1
        if runtime.decided_this_step or logits is None:
            return None  # prompt logprobs call the logits processor again
        runtime.decided_this_step = True
        due = [r for r in runtime.rows if (r.state.decided and r.state.late_error) or (r.last_row is not None and not r.state.decided)]
        # One logits row per request of the step, or no row can be trusted.
        rows_match = logits.dim() == 2 and logits.shape[0] == lifecycle.num_rows
        for rows in sorted(due, key=_deciders_first):
            try:
                settle(runtime, lifecycle, rows)
            except Exception as exc:  # never leave a request undecided, never raise into vLLM
                fail_closed(lifecycle, rows.state, exc)
        for rows in runtime.rows:  # blocked now, or earlier with a step still in flight
            if rows.state.blocked:
                lifecycle.blocked_now.add(rows.state.req_id)
                if rows_match:
                    _force_end_of_sequence(logits, rows.span.batch_index, runtime.modules.eos_token_id)
        return None

    return runtime.contained("logits", decide)


def fail_closed(lifecycle, state, exc: Exception) -> None:
    if not state.decided:
        lifecycle.record(state, failed_decision(state, exc))
        state.decided = True
    state.blocked = True
    lifecycle.blocked_now.add(state.req_id)


def settle(runtime, lifecycle, rows) -> None:
    state = rows.state
    if state.decided:  # a failure after the decision (steering)
        _late_failure(runtime, lifecycle, state)
        return
    if state.is_calibration:
        lifecycle.calibrations.record(state, runtime.plan, runtime.analyzers, runtime.modules)
        state.decided = True
        state.captures.clear()
        return
    result = state.group.result
    if result is None:
        result = evaluate(runtime, lifecycle, state)
        lifecycle.record(state, result)
    else:
        lifecycle.counters["shared_decisions"] += 1
    state.decided = True
    state.blocked = bool(result.get("blocked"))
    if not state.blocked:
        for steer_id in result.get("steers", ()):
            if steer_id not in state.static_steers:
                state.add_steers(runtime.steers_by_id.get(steer_id, ()), from_position=state.num_prompt_tokens)
    state.captures.clear()


def evaluate(runtime, lifecycle, state) -> dict[str, Any]:
    try:
        if state.error:
            raise RuntimeError(state.error)
        if state.captures.start:  # prompt tokens this request did not compute
            lifecycle.fill_prefix(state)
        if state.query_span is not None:
            state.calibration = lifecycle.calibrations.take(state.key)
        return decide_request(runtime, state)
    except Exception as exc:
        return failed_decision(state, exc)


def decide_request(runtime, state) -> dict[str, Any]:
    started = time.perf_counter()
    signals, errors = runtime.compute_signals(runtime.plan, runtime.analyzers, state, runtime.vectors, runtime.modules)
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
        "analysis_ms": round((done - started) * 1000, 3),
        "decision_latency_ms": round((done - state.first_seen) * 1000, 3),
    }


def failed_decision(state, exc: Exception) -> dict[str, Any]:
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

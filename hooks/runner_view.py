"""Which request owns which token rows in the current step: the one place that
knows vLLM model-runner internals.

Each model runner keeps its batch differently, so each gets one small
``StepReader``. The runtime asks for a ``StepView`` at the start of every
forward and never touches the runner itself. An unknown runner is refused at
install time: guessing would mean a guard that silently captures nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class UnsupportedRunnerError(RuntimeError):
    pass


@dataclass(frozen=True)
class RowSpan:
    """One request's rows in the flattened token batch of this step."""

    req_id: str
    batch_index: int  # its row in this step's logits
    start: int  # first token row (from query_start_loc, never seq_lens)
    end: int
    first_position: int  # absolute position of row ``start`` in the sequence
    num_prompt_tokens: int


@dataclass(frozen=True)
class StepView:
    rows: tuple[RowSpan, ...]
    num_tokens: int


class StepReader(Protocol):
    name: str

    def step(self, positions) -> StepView: ...

    def extra_args(self, req_id: str) -> dict[str, Any] | None: ...

    def prompt_token_ids(self, req_id: str) -> list[int] | None: ...


class V1RunnerReader:
    """vLLM's V1 ``GPUModelRunner`` (and the CPU runner derived from it): a
    persistent ``input_batch`` plus ``requests`` keyed by request id."""

    name = "v1"

    def __init__(self, runner):
        self._runner = runner

    def step(self, positions) -> StepView:
        runner = self._runner
        batch = runner.input_batch
        num_reqs = batch.num_reqs
        qsl = np.asarray(runner.query_start_loc.np[: num_reqs + 1])
        rows = []
        # Reading a few CPU-side positions keeps this exact under prefix caching
        # and chunked prefill, where num_computed_tokens alone can mislead.
        starts = positions[qsl[:-1]].tolist() if num_reqs else []
        for i, req_id in enumerate(batch.req_ids[:num_reqs]):
            state = runner.requests[req_id]
            rows.append(
                RowSpan(
                    req_id=req_id,
                    batch_index=i,
                    start=int(qsl[i]),
                    end=int(qsl[i + 1]),
                    first_position=int(starts[i]),
                    num_prompt_tokens=int(state.num_prompt_tokens),
                )
            )
        return StepView(rows=tuple(rows), num_tokens=int(qsl[-1]) if num_reqs else 0)

    def extra_args(self, req_id: str):
        state = self._runner.requests.get(req_id)
        params = getattr(state, "sampling_params", None)
        return getattr(params, "extra_args", None)

    def prompt_token_ids(self, req_id: str):
        state = self._runner.requests.get(req_id)
        return getattr(state, "prompt_token_ids", None)


class V2RunnerReader:
    """Model Runner V2 (GPU builds, the default for dense models from mid-2026):
    the input batch is rebuilt per step by ``prepare_inputs`` and sampling params
    are seen only when ``add_requests`` runs, so both are wrapped to keep our
    own per-request store. Untested in CI (no GPU there)."""

    name = "v2"

    def __init__(self, runner):
        self._runner = runner
        self._requests: dict[str, tuple[int, dict | None, list[int] | None]] = {}
        self._batch = None
        add_requests = runner.add_requests
        prepare_inputs = runner.prepare_inputs

        def add_requests_and_remember(scheduler_output, *args, **kwargs):
            for new in scheduler_output.scheduled_new_reqs:
                params = new.sampling_params
                self._requests[new.req_id] = (
                    int(new.prompt_len if hasattr(new, "prompt_len") else len(new.prompt_token_ids)),
                    getattr(params, "extra_args", None),
                    list(new.prompt_token_ids or []),
                )
            for req_id in getattr(scheduler_output, "finished_req_ids", ()):
                self._requests.pop(req_id, None)
            return add_requests(scheduler_output, *args, **kwargs)

        def prepare_inputs_and_remember(*args, **kwargs):
            self._batch = prepare_inputs(*args, **kwargs)
            return self._batch

        runner.add_requests = add_requests_and_remember
        runner.prepare_inputs = prepare_inputs_and_remember

    def step(self, positions) -> StepView:
        batch = self._batch
        if batch is None:
            return StepView(rows=(), num_tokens=0)
        qsl = np.asarray(batch.query_start_loc_np)
        starts = positions[qsl[:-1]].tolist()
        rows = tuple(
            RowSpan(
                req_id=req_id,
                batch_index=i,
                start=int(qsl[i]),
                end=int(qsl[i + 1]),
                first_position=int(starts[i]),
                num_prompt_tokens=self._requests.get(req_id, (0, None, None))[0],
            )
            for i, req_id in enumerate(batch.req_ids)
        )
        return StepView(rows=rows, num_tokens=int(qsl[-1]))

    def extra_args(self, req_id: str):
        return self._requests.get(req_id, (0, None, None))[1]

    def prompt_token_ids(self, req_id: str):
        return self._requests.get(req_id, (0, None, None))[2]


def reader_for(runner) -> StepReader:
    if hasattr(runner, "input_batch") and hasattr(runner, "requests") and hasattr(runner, "query_start_loc"):
        return V1RunnerReader(runner)
    if hasattr(runner, "req_states") and hasattr(runner, "prepare_inputs") and hasattr(runner, "add_requests"):
        return V2RunnerReader(runner)
    raise UnsupportedRunnerError(
        f"innerguard does not know vLLM's model runner {type(runner).__module__}.{type(runner).__name__}; "
        "refusing to guard it (supported: the V1 runner and Model Runner V2)"
    )

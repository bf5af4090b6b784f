"""Which request owns which token rows in the current step: the one place that
knows vLLM model-runner internals.

Each model runner keeps its batch differently, so each gets one small
``StepReader``. The runtime asks for a ``StepView`` at the start of every
forward and never touches the runner itself. An unknown runner is refused at
install time: guessing would mean a guard that silently captures nothing.
The scheduler's per-step events (``StepEvents``) and the step's output are
read where both runners meet: the worker's ``execute_model`` and
``sample_tokens``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence

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


class StepView:
    """This step's requests in batch order, as arrays. A ``RowSpan`` is made
    only for a request that asks for one (``span``): a decoding request the
    guard already decided costs a dictionary lookup per step, not an object."""

    def __init__(self, req_ids: Sequence[str] = (), query_start_loc=(0,), first_positions: Sequence[int] = (),
                 prompt_len: Callable[[str], int] = lambda req_id: 0):
        self.req_ids = req_ids
        self.query_start_loc = np.asarray(query_start_loc, dtype=np.int64)  # [len(req_ids) + 1]
        self.first_positions = first_positions
        self._prompt_len = prompt_len
        self.num_tokens = int(self.query_start_loc[-1]) if len(req_ids) else 0

    def __len__(self) -> int:
        return len(self.req_ids)

    def span(self, i: int) -> RowSpan:
        req_id, qsl = self.req_ids[i], self.query_start_loc
        return RowSpan(req_id, i, int(qsl[i]), int(qsl[i + 1]), int(self.first_positions[i]), int(self._prompt_len(req_id)))

    @property
    def rows(self) -> tuple[RowSpan, ...]:
        return tuple(self.span(i) for i in range(len(self)))

    def token_rows(self, batch_indices: Sequence[int]) -> np.ndarray:
        """The token rows of the requests at ``batch_indices``, concatenated."""
        qsl = self.query_start_loc
        index = np.asarray(batch_indices, dtype=np.int64)
        starts, lengths = qsl[index], qsl[index + 1] - qsl[index]
        if lengths.size and (lengths == 1).all():  # decoding: one row each
            return starts
        # Each request's run start..end, without a Python loop over requests.
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        return offsets + np.arange(int(lengths.sum()))


@dataclass(frozen=True)
class StepEvents:
    """What the scheduler says about requests, read from its ``SchedulerOutput``
    before the runner sees it (the same object for both runners)."""

    added: tuple[str, ...] = ()  # new; Model Runner V2 also re-adds resumed ones
    finished: frozenset[str] = frozenset()  # finished or aborted
    preempted: frozenset[str] = frozenset()
    scheduled: frozenset[str] = frozenset()

    @classmethod
    def read(cls, scheduler_output) -> "StepEvents":
        return cls(
            added=tuple(new.req_id for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ()),
            finished=frozenset(getattr(scheduler_output, "finished_req_ids", None) or ()),
            preempted=frozenset(getattr(scheduler_output, "preempted_req_ids", None) or ()),
            scheduled=frozenset(getattr(scheduler_output, "num_scheduled_tokens", None) or ()),
        )


def watch_steps(worker, on_schedule: Callable[[StepEvents], None], on_output: Callable[[Any], Any],
                on_sampled: Callable[[], None] = lambda: None) -> None:
    """Wrap the worker's ``execute_model`` / ``sample_tokens`` (on the instance:
    a worker extension may not redefine them). The same two calls exist for
    both runners; the V1 runner computes logits in the first, V2 in the
    second, and either may return the step's output. ``on_sampled`` runs
    when the step is over."""
    if getattr(worker, "_innerguard_watched", False):
        return
    execute_model, sample_tokens = worker.execute_model, worker.sample_tokens

    def execute_model_watched(scheduler_output, *args, **kwargs):
        on_schedule(StepEvents.read(scheduler_output))
        return on_output(execute_model(scheduler_output, *args, **kwargs))

    def sample_tokens_watched(*args, **kwargs):
        try:
            return on_output(sample_tokens(*args, **kwargs))
        finally:
            on_sampled()

    worker.execute_model = execute_model_watched
    worker.sample_tokens = sample_tokens_watched
    worker._innerguard_watched = True


class StepReader(Protocol):
    name: str

    def on_prepared(self, fn: Callable[[], None]) -> None: ...

    def avoid_full_graphs(self, when: Callable[[], bool]) -> None: ...

    def step(self, positions=None) -> StepView: ...

    def extra_args(self, req_id: str) -> dict[str, Any] | None: ...

    def prompt_token_ids(self, req_id: str) -> list[int] | None: ...

    def kv_cache(self, layer: int): ...

    def block_ids(self, req_id: str) -> list[int] | None: ...

    def block_size(self) -> int | None: ...


class V1RunnerReader:
    """vLLM's V1 ``GPUModelRunner`` (and the CPU runner derived from it): a
    persistent ``input_batch`` plus ``requests`` keyed by request id."""

    name = "v1"

    def __init__(self, runner):
        self._runner = runner

    def on_prepared(self, fn: Callable[[], None]) -> None:
        """``fn()`` after the runner prepared each step's inputs, before its
        forward: the one moment that precedes a replayed CUDA graph too."""
        prepare = self._runner._prepare_inputs

        def prepare_then_announce(*args, **kwargs):
            out = prepare(*args, **kwargs)
            fn()
            return out

        self._runner._prepare_inputs = prepare_then_announce

    def avoid_full_graphs(self, when: Callable[[], bool]) -> None:
        """Dispatch a step to piecewise graphs (or eager) instead of a full
        graph while ``when()``: a full graph would replay over the points."""
        dispatcher = getattr(self._runner, "cudagraph_dispatcher", None)
        if dispatcher is None:
            return
        dispatch = dispatcher.dispatch

        def dispatch_around_points(*args, **kwargs):
            if when():
                from vllm.config import CUDAGraphMode

                kwargs["invalid_modes"] = {*(kwargs.get("invalid_modes") or ()), CUDAGraphMode.FULL}
            return dispatch(*args, **kwargs)

        dispatcher.dispatch = dispatch_around_points

    def step(self, positions=None) -> StepView:
        runner = self._runner
        if positions is None:
            positions = runner.positions
        batch = runner.input_batch
        num_reqs = batch.num_reqs
        qsl = np.asarray(runner.query_start_loc.np[: num_reqs + 1])
        if not num_reqs or positions.shape[0] < int(qsl[-1]):
            # A forward that is not this batch's step (a dummy or profiling
            # run): it carries no request rows.
            return StepView()
        starts = _first_positions(positions, qsl, getattr(batch, "num_computed_tokens_cpu", None))
        requests = runner.requests
        return StepView(batch.req_ids[:num_reqs], qsl, starts, lambda req_id: requests[req_id].num_prompt_tokens)

    def extra_args(self, req_id: str):
        state = self._runner.requests.get(req_id)
        params = getattr(state, "sampling_params", None)
        return getattr(params, "extra_args", None)

    def prompt_token_ids(self, req_id: str):
        return getattr(self._runner.requests.get(req_id), "prompt_token_ids", None)

    def kv_cache(self, layer: int):
        """Layer ``layer``'s KV cache, addressed by the scheduler's block ids
        (one attention module per decoder layer)."""
        caches = self._runner.kv_caches
        return caches[layer] if layer < len(caches) else None

    def block_ids(self, req_id: str):
        groups = getattr(self._runner.requests.get(req_id), "block_ids", None)
        return list(groups[0]) if groups and len(groups) == 1 else None  # one KV cache group: full attention

    def block_size(self) -> int | None:
        # Every block of a request is in its block ids, those of later chunks too.
        return getattr(getattr(self._runner, "cache_config", None), "block_size", None)


class V2RunnerReader:
    """Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``; the GPU default
    for dense models from mid-2026). Its input batch is rebuilt every step by
    ``prepare_inputs`` and sampling params are seen only when ``add_requests``
    runs, so both are wrapped (on the runner instance) to keep our own
    per-request store. Checked on vLLM 0.24 (H200) and against 0.32's source:

    - ``add_requests(scheduler_output)``: the same in both;
    - ``prepare_inputs``: ``(scheduler_output, batch_desc)`` in 0.24,
      ``(scheduler_output, batch_req_state, batch_desc, num_active_loras)`` in
      0.32; either way it returns an ``InputBatch`` with ``req_ids`` (row order:
      decodes first), ``query_start_loc_np`` (may be padded past ``num_reqs``)
      and ``positions``;
    - ``NewRequestData.prompt_len`` exists from 0.32 only;
    - a running request's new blocks come in the scheduler output's
      ``scheduled_cached_reqs.new_block_ids``, as on the V1 runner; a
      preempted request is removed and comes back in ``scheduled_new_reqs``.

    A prepared batch is forgotten when ``execute_model`` returns: dummy runs
    (profiling, data-parallel padding) call the model without
    ``prepare_inputs`` and must not see the previous step's rows.
    """

    name = "v2"

    def __init__(self, runner):
        self._runner = runner
        self._requests: dict[str, _NewRequest] = {}
        self._batch = None
        self._prepared: list[Callable[[], None]] = []
        add_requests = runner.add_requests
        prepare_inputs = runner.prepare_inputs
        execute_model = runner.execute_model

        def add_requests_and_remember(scheduler_output, *args, **kwargs):
            self._remember(scheduler_output)
            return add_requests(scheduler_output, *args, **kwargs)

        def prepare_inputs_and_remember(*args, **kwargs):
            batch = prepare_inputs(*args, **kwargs)
            self._batch = batch
            for fn in self._prepared:
                fn()
            return batch

        def execute_model_then_forget(*args, **kwargs):
            try:
                return execute_model(*args, **kwargs)
            finally:
                self._batch = None  # the forward is done: later dummy runs carry no rows

        runner.add_requests = add_requests_and_remember
        runner.prepare_inputs = prepare_inputs_and_remember
        runner.execute_model = execute_model_then_forget

    def _remember(self, scheduler_output) -> None:
        """Each step, before the runner reads the same scheduler output:
        new requests, and the blocks running ones were given. Model Runner
        V2 removes a preempted request and sees it again as new, so finished
        and preempted ids are forgotten first (a request id that comes back
        as new, resumed or with streaming input, keeps its new entry)."""
        gone = set(getattr(scheduler_output, "finished_req_ids", None) or ())
        gone |= set(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for req_id in gone:
            self._requests.pop(req_id, None)
        for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            self._requests[new.req_id] = _new_request_entry(new)
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        resumed = set(getattr(cached, "resumed_req_ids", None) or ())
        for req_id, groups in zip(getattr(cached, "req_ids", None) or (), getattr(cached, "new_block_ids", None) or ()):
            entry = self._requests.get(req_id)
            if entry is None or entry.block_ids is None or groups is None:
                continue
            if len(groups) != 1:  # more than one KV cache group: its blocks are not followed
                self._requests[req_id] = entry._replace(block_ids=None)
            elif req_id in resumed:  # given instead of appended (the V1 runner's resumption)
                entry.block_ids[:] = groups[0]
            else:
                entry.block_ids.extend(groups[0])

    def on_prepared(self, fn: Callable[[], None]) -> None:
        self._prepared.append(fn)

    def avoid_full_graphs(self, when: Callable[[], bool]) -> None:
        # Its manager is created with the KV cache, so it exists by install time.
        manager = getattr(self._runner, "cudagraph_manager", None)
        if manager is None:
            return
        dispatch = manager.dispatch

        def dispatch_around_points(num_reqs, num_tokens, uniform_token_count, *args, **kwargs):
            # A non-uniform batch never matches a full graph.
            return dispatch(num_reqs, num_tokens, None if when() else uniform_token_count, *args, **kwargs)

        manager.dispatch = dispatch_around_points

    def step(self, positions=None) -> StepView:
        batch = self._batch
        if batch is None:
            return StepView()
        req_ids = list(batch.req_ids)
        num_reqs = len(req_ids)
        if num_reqs == 0:
            return StepView()
        # query_start_loc_np is padded for CUDA-graph batches: keep the real rows.
        qsl = np.asarray(batch.query_start_loc_np)[: num_reqs + 1]
        num_tokens = int(qsl[-1])
        if positions is None:
            positions = batch.positions
        if positions.shape[0] < num_tokens:
            raise RuntimeError(
                f"Model Runner V2 prepared {num_tokens} token rows but the model got {positions.shape[0]} positions"
            )
        starts = _first_positions(positions, qsl, getattr(batch, "num_computed_tokens_np", None))
        requests = self._requests
        return StepView(req_ids, qsl, starts, lambda req_id: requests.get(req_id, _UNKNOWN).prompt_len)

    def extra_args(self, req_id: str):
        return self._requests.get(req_id, _UNKNOWN).extra_args

    def prompt_token_ids(self, req_id: str):
        return self._requests.get(req_id, _UNKNOWN).prompt

    def kv_cache(self, layer: int):
        # Bound in layer order, as on the V1 runner; the layout is checked by kv_cache.layout_of.
        caches = getattr(self._runner, "kv_caches", None) or ()
        return caches[layer] if layer < len(caches) else None

    def block_ids(self, req_id: str):
        # Every block of the request: those it was admitted with (its
        # prefix-cached positions are all there) and those of later steps.
        return self._requests.get(req_id, _UNKNOWN).block_ids

    def block_size(self) -> int | None:
        return getattr(getattr(self._runner, "cache_config", None), "block_size", None)


def _first_positions(positions, qsl: np.ndarray, num_computed) -> list[int]:
    """Each request's first position in this step, read on the host.

    A CPU ``positions`` tensor is read directly: exact under prefix caching
    and chunked prefill. On a GPU reading it back would wait for every
    kernel queued so far, once per step, and stall vLLM's asynchronous
    scheduling; the runner computed those positions on the GPU from its
    host-side ``num_computed_tokens`` (speculative decoding, the one case
    where the two differ, is refused at install).
    """
    if positions.device.type == "cpu":
        return positions[qsl[:-1]].tolist()
    if num_computed is None:
        raise UnsupportedRunnerError("this model runner keeps no host-side num_computed_tokens")
    return np.asarray(num_computed)[: len(qsl) - 1].tolist()


class _NewRequest(NamedTuple):
    prompt_len: int
    extra_args: dict | None
    prompt: list | None
    block_ids: list | None  # of its one KV cache group (full attention), else None


_UNKNOWN = _NewRequest(0, None, None, None)


def _new_request_entry(new) -> _NewRequest:
    """What Model Runner V2 is told of a request once: a ``NewRequestData``."""
    prompt = getattr(new, "prompt_token_ids", None)
    prompt_len = getattr(new, "prompt_len", None)  # a property from vLLM 0.32 on
    if prompt_len is None:
        prompt_len = len(prompt) if prompt is not None else len(getattr(new, "prefill_token_ids", None) or ())
    params = getattr(new, "sampling_params", None)
    groups = getattr(new, "block_ids", None)
    blocks = list(groups[0]) if groups and len(groups) == 1 else None
    return _NewRequest(int(prompt_len), getattr(params, "extra_args", None), prompt, blocks)


def reader_for(runner) -> StepReader:
    if hasattr(runner, "input_batch") and hasattr(runner, "requests") and hasattr(runner, "query_start_loc"):
        return V1RunnerReader(runner)
    if hasattr(runner, "req_states") and hasattr(runner, "prepare_inputs") and hasattr(runner, "add_requests"):
        return V2RunnerReader(runner)
    raise UnsupportedRunnerError(
        f"innerguard does not know vLLM's model runner {type(runner).__module__}.{type(runner).__name__}; "
        "refusing to guard it (supported: the V1 runner and Model Runner V2)"
    )

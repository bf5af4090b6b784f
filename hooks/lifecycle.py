"""Per-request state inside the worker, driven by vLLM's own events.

A request's state is created the first time its rows are seen (its
arguments are read then) and dropped when the scheduler reports it finished
or aborted (``finished_req_ids``). Preemption keeps it: a recompute rewinds
its captures, a steer decided before carries on. Nothing is pruned by count.

Also here: which installed plan a request runs under (its ``bundle``),
sibling groups (``n > 1``), and the results waiting to be taken.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from innerguard.hooks import kv_cache, steering_buffers
from innerguard.hooks.calibration import CalibrationStore
from innerguard.hooks.capture import Captures
from innerguard.hooks.decide_step import failed_decision
from innerguard.hooks.request_args import BadArguments, check_positions, read_args
from innerguard.hooks.results import ResultStore
from innerguard.hooks.runner_view import RowSpan, StepEvents
from innerguard.hooks.steer import ActiveSteer, steer_rows
from innerguard.hooks.token_score_cache import CachedScoresMissing, PromptScores
from innerguard.hooks.verdicts import attach

log = logging.getLogger("innerguard")

RETIRE_GRACE_S = 60.0
_UNSEEN = object()  # a request id this worker has not read yet


@dataclass(eq=False)
class Group:
    """Requests with one key, one prompt and one set of arguments: vLLM's
    children of an ``n > 1`` request. They share one decision."""

    key: str
    digest: int
    members: set[str] = field(default_factory=set)
    result: dict[str, Any] | None = None


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


class Lifecycle:
    def __init__(self, reader):
        self.reader = reader
        self.states: dict[str, RequestState | None] = {}  # None: unguarded
        self.groups: dict[tuple[str, int], Group] = {}
        self.results = ResultStore()
        self.calibrations = CalibrationStore()
        self.current = None
        self.staged = None  # installed, awaiting the engine side's self-check
        self.retiring: list = []  # older plans, kept while their requests live
        self.retire_grace_s = RETIRE_GRACE_S
        self.blocked_now: set[str] = set()  # for the scheduler, with this step's output
        self.scheduled: frozenset[str] = frozenset()
        self.num_rows = 0
        self.hook_calls: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()  # preemptions, prefix-cached starts, shared decisions
        self.needs_points = True  # whether this step must run the guard points' Python (no full CUDA graph)
        self._steered: dict[int, list[tuple[np.ndarray, int]]] = {}  # this step's add-steered rows and slots, by layer
        self._attached = False
        self.kv_readback = True  # off when the install canary saw a cache hit decide otherwise
        self.prompt_scores = PromptScores(reader, self.counters)  # token-probe scores of cached positions
        self._said_scores_missing = False

    # -- plans ----------------------------------------------------------------
    def runtimes(self) -> list:
        return [r for r in (self.staged, self.current) if r is not None] + self.retiring

    def stage(self, runtime) -> None:
        if self.staged is not None:
            self._retire(self.staged, grace=False)
        self.staged = runtime

    def commit(self, bundle: str) -> None:
        if self.staged is None or self.staged.bundle != bundle:
            raise RuntimeError(f"no staged plan with bundle {bundle}")
        old, self.current, self.staged = self.current, self.staged, None
        if old is not None:
            self._retire(old, grace=True)

    def rollback(self, bundle: str | None = None) -> bool:
        if self.staged is None or (bundle is not None and self.staged.bundle != bundle):
            return False
        staged, self.staged = self.staged, None
        self._retire(staged, grace=False)
        return True

    def _retire(self, runtime, grace: bool) -> None:
        # A committed plan's requests may still wait in the scheduler's queue,
        # unseen here: its hooks stay a grace period even when idle.
        runtime.retired_at = time.monotonic() if grace else float("-inf")
        if runtime not in self.retiring:
            self.retiring.append(runtime)
        self._drop_idle()

    def _drop_idle(self) -> None:
        cutoff = time.monotonic() - self.retire_grace_s
        for runtime in [r for r in self.retiring if r.live == 0 and r.retired_at <= cutoff]:
            runtime.uninstall()
            self.retiring.remove(runtime)
            # The same policies installed again keep their bundle, and their
            # scores: cached blocks would otherwise lose them for good.
            if all(r.bundle != runtime.bundle for r in self.runtimes()):
                self.prompt_scores.drop(runtime.bundle)

    def runtime_for(self, bundle: str | None):
        """(runtime, error) for a request prepared for ``bundle``."""
        default = self.current or self.staged  # staged only before the first commit
        if bundle is None or (default is not None and default.bundle == bundle):
            return default, None
        for runtime in [self.staged, *reversed(self.retiring)]:
            if runtime is not None and runtime.bundle == bundle and runtime.installed:
                return runtime, None
        return default, f"bundle {bundle} is not installed in the worker"

    def attach(self) -> None:
        """Start reading steps: once per worker (the runner's methods stay
        wrapped; with no plan installed a step costs one check)."""
        if not self._attached:
            self.reader.on_prepared(self.begin_step)
            self.reader.avoid_full_graphs(lambda: self.needs_points)
            self._attached = True

    def detach(self) -> None:
        for runtime in self.runtimes():
            runtime.uninstall()
        self.current, self.staged, self.retiring = None, None, []
        _set_steered_rows({})

    # -- vLLM's events ----------------------------------------------------------
    def on_schedule(self, events: StepEvents) -> None:
        try:
            for req_id in events.finished:  # finished or aborted
                self.forget(req_id)
            for req_id in events.preempted:
                state = self.states.get(req_id)
                if state is not None:
                    state.preempted, state.steady = True, None  # a recompute re-reads its prompt rows
                    self.counters["preemptions"] += 1
            for req_id in events.added:
                state = self.states.get(req_id)
                if state is not None and state.preempted:
                    state.preempted = False  # resumed (Model Runner V2 re-adds it)
                elif req_id in self.states:
                    self.forget(req_id)  # a new request reusing an id
            self.scheduled = events.scheduled
            self.needs_points = self._needs_points(events.scheduled)
            self.results.expire()
            self.calibrations.expire()
            self._drop_idle()
        except Exception:  # bookkeeping must never stop a step
            log.exception("innerguard: reading the scheduler's events failed")

    def _needs_points(self, scheduled) -> bool:
        """Whether a request of this step needs the points' Python: one not
        seen yet (its prompt may be captured), one not decided, one with a
        ``project`` steer. Decoding requests with ``add`` steers, or none, run
        in full CUDA graphs (steering_buffers.py)."""
        if not self.runtimes():
            return False
        for req_id in scheduled:
            if req_id not in self.states:
                return True
            state = self.states[req_id]
            if state is None or state.steady is not None:
                continue
            if not state.decided or any(a.spec.method != "add" for a in state.steers):
                return True
        return False

    def on_output(self, output):
        """Tag this step's runner output with the requests blocked in it, and
        the KV cache blocks whose token scores are now kept whole."""
        if output is None or not (self.blocked_now or self.prompt_scores.has_whole()):
            return output
        blocked, self.blocked_now = frozenset(self.blocked_now), set()
        return attach(output, blocked, self.prompt_scores.take_whole())

    def forget(self, req_id: str) -> None:
        state = self.states.pop(req_id, None)
        self.prompt_scores.forget(req_id)
        if state is None:
            return
        state.captures.clear()
        state.runtime.live -= 1
        group = state.group
        group.members.discard(req_id)
        if not group.members:
            self.groups.pop((group.key, group.digest), None)
            self.results.finished(group.key)
        if state.runtime in self.retiring:
            self._drop_idle()

    # -- one step ---------------------------------------------------------------
    def begin_step(self) -> None:
        """After the runner prepared a step, before its forward: which rows
        belong to which request, and which rows each steer moves."""
        runtimes = self.runtimes()
        if not runtimes:
            return
        self.hook_calls["step"] += 1
        for runtime in runtimes:
            runtime.begin_step()
        self.num_rows = 0
        self._steered = {}
        try:
            view = self.reader.step()
        except Exception as exc:  # no row can be attributed: block every guarded request scheduled
            log.exception("innerguard: reading the step failed")
            self._block_scheduled(exc)
            _set_steered_rows({})
            return
        self.num_rows = len(view)
        states, steady = self.states, {}
        for i, req_id in enumerate(view.req_ids):
            state = states.get(req_id, _UNSEEN)
            if state is None:
                continue
            if state is not _UNSEEN and state.steady is not None and not state.blocked:  # the usual decoding request
                for layer_slot in state.steady:
                    steady.setdefault(layer_slot, []).append(i)
                continue
            self._read_rows(view.span(i))
        for (layer, slot), batch_indices in steady.items():
            self._steered.setdefault(layer, []).append((view.token_rows(batch_indices), slot))
        try:
            _set_steered_rows(self._steered)
        except Exception as exc:
            log.exception("innerguard: setting this step's steered rows failed")
            self._block_scheduled(exc)

    def _read_rows(self, span: RowSpan) -> None:
        """One request's rows of this step, when it needs more than its steady steers."""
        try:
            state = self._state_for(span)
        except Exception as exc:
            state = self._new_state(span, None, f"{type(exc).__name__}: {exc}")
        if state is None:
            return
        if state.decided and not (state.blocked or state.late_error):
            self._steer(state, span)  # decoding: at most its steers to place
            state.steady = self._steady(state, span)
            if (span.first_position < state.num_prompt_tokens and state.token_probes and not state.steers
                    and self.reads_token_scores()):
                # Preempted after its decision, it recomputes its prompt, and
                # vLLM caches those blocks again: score them for later hits.
                count = min(span.end - span.start, state.num_prompt_tokens - span.first_position)
                state.captures.token_scores = {}  # the probe's layers add up this step's scores from zero
                state.runtime.rows.append(Rows(state, span, (span.start, span.start + count), rescoring=True))
            return
        try:
            rows = self._rows(state, span)
        except Exception as exc:
            state.fail(f"{type(exc).__name__}: {exc}")
            rows = Rows(state, span, last_row=None if state.decided else span.end - 1)
        state.runtime.rows.append(rows)

    @staticmethod
    def _steady(state: RequestState, span: RowSpan) -> tuple[tuple[int, int], ...] | None:
        """``state``'s steady steers once every one of them moves every row
        from this step on; None while any still depends on the position."""
        if state.preempted or span.first_position < state.num_prompt_tokens:
            return None
        placed = []
        for active in state.steers:
            slot = state.runtime.steer_slots.get(active.spec)
            if slot is None or span.first_position < active.from_position:
                return None  # a project steer runs in Python; a steer not started yet
            if active.spec.positions != "prompt":
                placed.append((active.spec.layer, slot))
        return tuple(placed)

    def end_step(self) -> None:
        """The step's forward and decisions are done: a forward before the
        next prepared step (a dummy run) must see no rows, captured or steered."""
        for runtime in self.runtimes():
            runtime.rows, runtime.steer_rows = [], {}
        buffers = steering_buffers.BUFFERS
        if buffers is not None:
            buffers.active = set()

    def _state_for(self, span: RowSpan) -> RequestState | None:
        if span.req_id in self.states:
            return self.states[span.req_id]
        try:
            args = read_args(self.reader.extra_args(span.req_id))
        except BadArguments as exc:
            return self._new_state(span, None, f"malformed innerguard arguments: {exc}", getattr(exc, "key", None))
        if args is None:
            self.states[span.req_id] = None
            return None
        return self._new_state(span, args)

    def _new_state(self, span: RowSpan, args, error: str | None = None, key: str | None = None) -> RequestState | None:
        runtime, bundle_error = self.runtime_for(args.get("bundle") if args else None)
        if runtime is None:
            return None  # nothing installed
        if args is None:
            args = {"id": key or span.req_id, "policies": []}
            digest = hash(span.req_id)  # never shares a decision
        else:
            prompt = self.reader.prompt_token_ids(span.req_id)
            digest = hash((json.dumps(args, sort_keys=True), tuple(prompt) if prompt is not None else span.num_prompt_tokens))
        key = str(args["id"])
        group = self.groups.get((key, digest))
        if group is None:
            group = self.groups[(key, digest)] = Group(key, digest, result=self.results.get(key, digest))
        group.members.add(span.req_id)
        state = RequestState(span.req_id, key, runtime, group, args, span.num_prompt_tokens)
        self.states[span.req_id] = state
        runtime.live += 1
        if error or bundle_error:
            state.fail(error or bundle_error, never_open=True)
            return state
        try:
            check_positions(args, span.num_prompt_tokens)
            runtime.prepare(state)
        except Exception as exc:
            state.fail(f"malformed innerguard arguments: {exc}", never_open=True)
        return state

    def _rows(self, state: RequestState, span: RowSpan) -> Rows:
        p, n, total = span.first_position, span.end - span.start, state.num_prompt_tokens
        prompt_end = min(p + n, total)
        count = max(prompt_end - p, 0)
        state.prefill_tokens += count
        if count and state.capturing:
            if state.captures.start is None and p > 0:
                self.counters["prefix_cached_starts"] += 1
            state.captures.seek(p, prompt_end)
        query_rows = (0, 0)
        if state.query_span is not None:
            lo, hi = max(state.query_span[0], p), min(state.query_span[1], p + count)
            if hi > lo:
                query_rows = (span.start + lo - p, span.start + hi - p)
        self._steer(state, span)
        final = count > 0 and prompt_end == total
        return Rows(state, span, (span.start, span.start + count), span.start + count - 1 if final else None, query_rows)

    def _steer(self, state: RequestState, span: RowSpan) -> None:
        """The rows of this step each of ``state``'s steers moves."""
        if not state.steers or state.blocked:
            return
        runtime = state.runtime
        for active in state.steers:
            rows = steer_rows(active, span.start, span.end, span.first_position, state.num_prompt_tokens)
            if rows is None:
                continue
            slot = runtime.steer_slots.get(active.spec)
            if slot is not None:  # added by the layer point, from the device buffers
                self._steered.setdefault(active.spec.layer, []).append((np.arange(*rows), slot))
            else:
                runtime.steer_rows.setdefault(active.spec.layer, []).append((state, rows, active))

    def _block_scheduled(self, exc: Exception) -> None:
        """The scheduler finishes them; with no rows, no logits row is forced."""
        for req_id in self.scheduled:
            state = self.states.get(req_id)
            if state is not None:
                if not state.decided:
                    self.record(state, failed_decision(state, exc))
                    state.decided = state.blocked = True
                if state.blocked:
                    self.blocked_now.add(req_id)
            elif req_id not in self.states and self._maybe_guarded(req_id):
                self.blocked_now.add(req_id)

    def _maybe_guarded(self, req_id: str) -> bool:
        try:
            return read_args(self.reader.extra_args(req_id)) is not None
        except Exception:
            return True

    # -- decisions ----------------------------------------------------------------
    def record(self, state: RequestState, result: dict[str, Any]) -> None:
        state.group.result = result
        self.results.put(state.key, result, state.group.digest)

    def fill_prefix(self, state: RequestState) -> None:
        """What the prompt tokens this request was served from the prefix
        cache would have given: their token-probe scores (from the steps that
        computed them), and their K (from a sibling that computed them, the
        reranker's calibration pass, or vLLM's KV cache itself)."""
        start = state.captures.start
        if state.token_probes:
            if not self.kv_readback:
                raise RuntimeError(f"{start} prompt tokens came from the prefix cache and their token scores "
                                   "are not read back here")
            try:
                self.prompt_scores.fill(state, start)
            except CachedScoresMissing as exc:
                # The scheduler serves a token probe only blocks reported
                # scored (token_score_cache.ScoredBlocks): this is a bug, and
                # the request fails closed rather than decide on guesses.
                self.counters["token_scores_missing"] += 1
                if not self._said_scores_missing:
                    self._said_scores_missing = True
                    log.error("innerguard: a prefix-cache hit lacks token scores (%s); the request fails closed "
                              "(counted as token_scores_missing)", exc)
                raise
            state.captures.scores_filled = True
        if state.qk_layers:
            self._fill_keys(state, start, state.qk_layers)
        else:
            state.captures.prepend({})

    def _fill_keys(self, state: RequestState, start: int, layers) -> None:
        prefix = None
        for req_id in state.group.members:
            other = self.states.get(req_id)
            c = other.captures if other is not None and other is not state else None
            if c is not None and c.start == 0 and c.end >= start and all(l in c.k for l in layers):
                prefix = {l: c.keys(l) for l in layers}
                break
        if prefix is None:
            prefix = self.calibrations.prefix(state.key, layers, start)
        if prefix is None:
            prefix = self._cached_keys(state, layers, start)
        if prefix is None:
            raise RuntimeError(f"{start} prompt tokens came from the prefix cache and no captures exist for them")
        state.captures.prepend(prefix)

    def _cached_keys(self, state: RequestState, layers, start: int) -> dict[int, Any] | None:
        block_ids = self.reader.block_ids(state.req_id) if self.kv_readback else None
        if block_ids is None:
            return None
        prefix = {}
        for layer in layers:
            cache = self.reader.kv_cache(layer)
            layout = kv_cache.layout_of(state.runtime.modules.attention(layer), cache)
            if layout is None:
                return None
            prefix[layer] = kv_cache.cached_keys(cache, layout, block_ids, start)
        self.counters["keys_from_kv_cache"] += 1
        return prefix

    def reads_kv_cache(self, modules) -> bool:
        """Whether K of cached prompt positions can be read back here."""
        return self.kv_readback and kv_cache.layout_of(modules.attention(0), self.reader.kv_cache(0)) is not None

    def reads_token_scores(self) -> bool:
        """Whether token-probe scores of cached prompt positions can be read back here."""
        return self.kv_readback and self.prompt_scores.available()

    def keep_token_scores(self, runtime) -> None:
        """After a step's forward, before its decisions: the token scores it computed."""
        if self.kv_readback:
            self.prompt_scores.keep(runtime.rows)

    def stats(self) -> dict[str, Any]:
        self.results.expire()
        self.calibrations.expire()
        roles = {id(self.current): "current", id(self.staged): "staged"}
        live = [s for s in self.states.values() if s is not None]
        return {
            "live_states": len(live),
            "captured_positions": sum(s.captures.end - (s.captures.start or 0) for s in live if s.captures.start is not None),
            "tracked_requests": len(self.states),
            "groups": len(self.groups),
            "pending_results": len(self.results),
            "pending_calibrations": len(self.calibrations),
            **{name: self.counters[name] for name in ("preemptions", "prefix_cached_starts", "shared_decisions", "keys_from_kv_cache",
                                                          "token_scores_from_cache", "token_score_writes_failed",
                                                          "token_scores_missing", "token_scores_not_kept")},
            "runtimes": [
                {"bundle": r.bundle, "role": roles.get(id(r), "retiring"), "live": r.live, "hooks": r.num_hooks}
                for r in self.runtimes()
            ],
            "rss_bytes": _rss_bytes(),
        }


def _set_steered_rows(rows: dict[int, list[tuple[np.ndarray, int]]]) -> None:
    buffers = steering_buffers.BUFFERS
    if buffers is not None:
        buffers.set_rows(rows)


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None

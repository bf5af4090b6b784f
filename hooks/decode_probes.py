"""In-model signals on what the model writes, and the output rules that read them.

A ``token_probe`` signal with ``span: generated`` scores each generated token
as a prompt probe scores prompt tokens (analyzers/token_probe.py):
``s_t = Σ_L w_L · h_L,t + b``, added up over its layers by the layer points
into device buffers that full CUDA graphs replay (probe_buffers.py) and sent
to the host after the forward (``StepScores``). A token's hidden state is
computed in the step that samples the token after it, so a token is scored
one step after it was sampled, and a completion's last token is never scored.

An ``attention_tracker`` with ``span: generated`` gives each generated token
its heads' mean share of span attention that goes toward one span (trusted
or untrusted; analyzers/attention_tracker.py), from the token's own Q at the
attention points of those layers and the prompt's span keys, kept when the
prompt is decided (``keep_span_keys``; the step's requests are read together
in decode_focus.py). It is pooled as a token probe's scores are.

The output rules that read these signals ("decode" rules,
``Evaluator(phase="decode")``) judge a step's scores at the next step's
logits hook (decide_step.py), once the copy to the host has landed without
the host waiting for it, or when the engine takes the records. They run for
every request that scored a new token, on the signal value the prompt's
pooling gives the generated tokens scored so far: the largest mean over
``window`` consecutive tokens. The rules first run once every signal they
read has a whole window: the mean of the first few tokens alone says little
(the first one often scores far from the rest), and a completion shorter
than a window plus one token is never judged. A ``steer`` starts two tokens
after the last one judged (``decide_step.decide_generated``): the token
sampled when that one was scored, and the one sampled in the step that
judged it, were chosen before the decision, so the first steered row is the
latter's. A steer decided here stays on to the end of the completion: the
pooled value only grows, and a steer that came and went with each token
would make the stream depend on where the window fell. A ``stop`` forces the
judging step's row to end-of-sequence, as a block does, and the scheduler
finishes the completion in that step; the record says where the violation
starts: the first token of the window that made the rule fire. The engine
takes the record (``RPC_TAKE_DECODE``) when the completion ends and returns
nothing from that token on; a stream's hold-back (at least the window plus
two) has kept those tokens from being sent.

Rules here are evaluated after every scored token that changes a pooled
value (the rules are a pure function of the values; on the others they
would find what they found before): the policy's ``output.every`` spaces
the engine's reads of the generated text only. The pooling lives in one
table per plan (decode_pool.py), so that a step's steady decoders (one
token each, read by the probe buffers alone) are pooled with a few array
operations and no Python of their own unless a value changed
(decide_step.decide_steady).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from innerguard.engine.decide import Evaluator, SignalError, condition_signals
from innerguard.hooks import span_key_budget
from innerguard.hooks.analyzers import attention_tracker
from innerguard.hooks.analyzers.attention import kv_heads_of
from innerguard.hooks.decode_pool import PoolTable

GROW = 256  # scores are kept in a buffer grown by this many tokens at a time


@dataclass(eq=False)
class _Pooled:
    """One generated signal's running window maximum: its row of the plan's
    pool table (decode_pool.py), fed score by score."""

    table: PoolTable
    row: int
    window: int
    bias: float

    def add(self, values) -> bool:
        """Pool ``values``; whether the best window changed (PoolTable.add)."""
        return self.table.add(self.row, values)

    @property
    def ready(self) -> bool:
        return self.table.ready(self.row)

    def value(self) -> tuple[float, int]:
        """The signal and the first token of the window that gives it (once ``ready``)."""
        return self.table.value(self.row)

    @property
    def scores(self) -> list[float]:
        """Every scored token's score, bias included."""
        return self.table.scores_of(self.row)


@dataclass(frozen=True)
class Focus:
    """A generated-token attention tracker: its heads by layer, and which
    span of its policy the share goes toward."""

    policy: str
    heads: dict[int, tuple[int, ...]]  # layer -> query heads
    toward: str  # "trusted" or "untrusted"
    num_heads: int  # the mean's divisor

    def spans(self, args) -> tuple[list, list]:
        """(toward, other): the token ranges of the two spans in the request's arguments."""
        spans = (args.get("spans") or {}).get(self.policy) or {}
        trusted, untrusted = spans.get("instruction") or [], spans.get("data") or []
        pair = (trusted, untrusted) if self.toward == "trusted" else (untrusted, trusted)
        return tuple([(int(a), int(b)) for a, b in ranges] for ranges in pair)


@dataclass(eq=False)
class DecodeProbes:
    """One completion's in-model signals on generated tokens and decode rules."""

    evaluator: Evaluator
    reads: dict[tuple[str, str], list[str]]  # (policy, rule) -> the qualified signals its condition reads
    signals: dict[str, _Pooled]  # qualified signal -> its pooling
    layers: frozenset[int]  # the token probes'
    table: PoolTable  # where the pooling lives (``slot``: this completion's count of pooled tokens)
    slot: int
    focus: dict[str, Focus] = field(default_factory=dict)  # the attention trackers'
    span_keys: dict[str, dict[int, attention_tracker.SpanKeys]] | None = None  # signal -> layer -> keys
    # signal -> per-token sums over layers (device): attention trackers read
    # on their own (several tokens a step)
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    pending: tuple[int, int] | None = None  # generated tokens this step scores, until StepScores takes them
    # While it decodes one token a step read by the probe buffers alone
    # (lifecycle._steady): (signal, probe buffer column, pool row) per signal.
    probe_reads: tuple[tuple[str, int, int], ...] | None = None
    stopped: bool = False
    error: str | None = None
    released: bool = False  # its table rows were given back (``release``): nothing more is pooled
    stored: bool = False  # its record is where the engine takes it (decide_step._store)
    events: list[dict[str, Any]] = field(default_factory=list)
    reported: set[tuple[str, str | None]] = field(default_factory=set)
    steering: set[str] = field(default_factory=set)  # steer ids decided so far: once on, on to the end
    new_steers: list[str] = field(default_factory=list)  # decided in the last evaluation, for the worker to start
    _record: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self._record.update(events=self.events, stop=None, scores={}, values={})

    @property
    def record(self) -> dict[str, Any]:
        """What the engine takes (RPC_TAKE_DECODE): the events so far, the
        stop, every scored token's score and each signal's value so far
        (once a whole window is scored). The same dict each time, settled
        when read."""
        self.settle()
        return self._record

    def settle(self) -> None:
        """Copy the scores pooled so far from the pool table into the record."""
        if not self.released:
            self._record["scores"] = {s: p.scores for s, p in self.signals.items()}

    @property
    def scored(self) -> int:
        """Generated tokens pooled so far."""
        return int(self.table.scored[self.slot])

    def release(self) -> None:
        """The completion is over and its last scores landed: its record
        keeps what was pooled, the table takes its rows back."""
        if not self.released:
            self.settle()
            self.table.release([p.row for p in self.signals.values()], self.slot)
            self.released = True

    @property
    def focus_layers(self) -> frozenset[int]:
        return frozenset(layer for f in self.focus.values() for layer in f.heads)

    def keep_span_keys(self, state, geometry, layer: int | None = None) -> None:
        """The prompt's span keys for the attention trackers, at ``layer`` (or
        every layer they read), from the request's captures (complete once
        its prompt is read, prefix-cache hits filled in) or from a sibling's
        (n > 1: one prompt)."""
        if not self.focus:
            return
        if self.span_keys is None:
            if state.group.span_keys is None:
                captured = next((chunks[0] for chunks in state.captures.k.values() if chunks), None)
                if captured is not None:  # else the loop below says what is missing
                    need = self._span_key_bytes(state, geometry, captured.element_size())
                    span_key_budget.BUDGET.reserve(need, captured.device)
                    state.group.span_key_bytes = need
                state.group.span_keys = {signal: {} for signal in self.focus}
            self.span_keys = state.group.span_keys
        for signal, focus in self.focus.items():
            kept = self.span_keys[signal]
            for at in focus.heads if layer is None else (layer,) if layer in focus.heads else ():
                if at in kept:
                    continue
                captures = state.captures
                if captures.start != 0 or at not in captures.k:
                    raise RuntimeError("K of the prompt's span tokens was not captured: the generated tokens' "
                                       "attention to them cannot be read")
                toward, other = focus.spans(state.args)
                kept[at] = attention_tracker.span_keys(captures.keys(at), focus.heads[at], toward, other, geometry)

    def _span_key_bytes(self, state, geometry, item_size: int) -> int:
        """What this completion's span keys take, kept and padded (twice
        ``SpanKeys.keys``: one copy per KV head read; a step's padding to
        its longest span is not counted)."""
        elements = 0
        for focus in self.focus.values():
            toward, other = focus.spans(state.args)
            tokens = sum(end - start for start, end in (*toward, *other))
            elements += tokens * sum(len({kv_heads_of(h, geometry) for h in heads}) for heads in focus.heads.values())
        return 2 * elements * geometry.head_dim * item_size

    def begin(self, first: int, count: int) -> None:
        """This step computes generated tokens ``[first, first + count)``:
        their sums start from zero (a recompute after preemption rescores)."""
        end = first + count
        for signal, sums in list(self.sums.items()):
            if sums.numel() < end:
                grown = sums.new_zeros(end + GROW)
                grown[: sums.numel()] = sums
                self.sums[signal] = sums = grown
            sums[first:end] = 0
        self.pending = (first, end)

    def add(self, signal: str, first: int, values: torch.Tensor) -> None:
        """One layer's share of the scores of generated tokens from ``first`` on."""
        sums = self.sums.get(signal)
        end = first + values.shape[0]
        if sums is None or sums.numel() < end:
            grown = values.new_zeros(end + GROW)
            if sums is not None:
                grown[: sums.numel()] = sums
            self.sums[signal] = sums = grown
        sums[first:end] += values

    def evaluate(self, begun: int, end: int, values: dict[str, list[float]]) -> dict[str, Any] | None:
        """Pool the scores of generated tokens ``[begun, end)`` (``values``:
        signal -> one host score per token; a signal missing was not
        computed) and run the decode rules. Returns the stop (a record) once
        an applied ``stop`` fires."""
        if self.stopped or self.released or end <= self.scored:
            return None  # recomputed tokens: already pooled
        if begun > self.scored and self.error is None:  # e.g. served from the prefix cache: never guess a score
            self.error = f"generated tokens {self.scored}..{begun} were never computed by this request"
        first = max(begun, self.scored)
        changed = missing = False
        if self.error is None:
            for signal, pooled in self.signals.items():
                if signal in values:
                    changed |= pooled.add(values[signal][first - begun:])
                else:
                    missing = True
        self.table.scored[self.slot] = end
        # A pooled value only changes when a new window beats the best so
        # far; the rules are a pure function of the values, and what they
        # found on these values is already recorded (events once, a steer
        # once, a stop ends the completion), as are the values themselves.
        # Most steps change no value: re-running the rules and rewriting the
        # record per request and step was host time on a GPU.
        if self.error is None and not missing and not changed:
            return None
        return self.judge(first, end, values)

    def judge(self, first: int, end: int, values=None) -> dict[str, Any] | None:
        """The decode rules on the values pooled up to token ``end``
        (``first``: the first token this evaluation pooled; ``values``: the
        signals computed, all when None)."""
        pooled_values: dict[str, Any] = {}
        starts: dict[str, int] = {}
        for signal, pooled in self.signals.items():
            if self.error is not None:
                pooled_values[signal] = SignalError(self.error)
            elif values is not None and signal not in values:
                pooled_values[signal] = SignalError(f"no scores were computed for {signal}")
            else:
                pooled_values[signal], starts[signal] = pooled.value()
        self._record["values"] = {s: p.value()[0] for s, p in self.signals.items() if p.ready}
        if self.error is None and not all(p.ready for p in self.signals.values()):
            return None
        verdict = self.evaluator.evaluate(pooled_values)
        stop = None
        for decision in verdict.decisions:
            if decision.action == "allow" and decision.error is None:
                continue  # a failure is recorded even where the error mode lets the generation go on
            fired = [(h.rule, h.action) for h in decision.hits] or [(decision.rule, decision.rule_action)]
            for rule, rule_action in fired:
                deciding = rule == decision.rule
                token = min((starts[s] for s in self.reads.get((decision.policy, rule), ()) if s in starts), default=first)
                if (decision.policy, rule) not in self.reported:
                    self.reported.add((decision.policy, rule))
                    self.events.append({
                        "policy": decision.policy, "version": decision.version, "revision": decision.revision,
                        "mode": decision.mode, "rule": rule, "rule_action": rule_action,
                        "action": decision.action if deciding else "flag" if decision.mode == "warn" else rule_action,
                        "applied": decision.applied, "token_index": token, "scored_tokens": end,
                        "signals": {k: (None if isinstance(v, SignalError) else v) for k, v in decision.signals.items()},
                        "message": decision.message if deciding else None, "error": decision.error if deciding else None,
                    })
                if deciding and decision.action == "stop" and decision.applied and stop is None:
                    stop = {"token": token, "policy": decision.policy, "rule": rule or "", "message": decision.message}
        if stop is not None:
            self.stopped = True
            return stop
        for hit in verdict.steers:
            steer_id = hit.params.get("steer")
            if steer_id and steer_id not in self.steering:
                self.steering.add(steer_id)
                self.new_steers.append(steer_id)
        return None


def copy_record(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of a ``DecodeProbes.record`` that later steps leave alone, for
    the engine to take. Shallow where that is enough: what goes into a
    record is never changed in place, only added (events) or replaced
    (scores, values, stop). A deep copy of hundreds of score lists held
    the engine between steps."""
    return {**record, "events": list(record["events"]), "scores": dict(record["scores"]),
            "values": dict(record["values"])}


class DecodeRules:
    """A plan's decode rules, compiled per set of policies."""

    def __init__(self, analyzers: dict[str, Any], table: PoolTable | None = None):
        self._analyzers = analyzers
        self.table = table if table is not None else PoolTable()
        # policy names -> (evaluator, reads, signal -> (window, bias), layers, focus), None: no decode rule
        self._compiled: dict[tuple[str, ...], tuple | None] = {}

    def start(self, policies) -> DecodeProbes | None:
        """A completion's probes under ``policies``, or None when none of
        them has a decode rule."""
        key = tuple(p.name for p in policies)
        if key not in self._compiled:
            self._compiled[key] = self._compile(policies)
        compiled = self._compiled[key]
        if compiled is None:
            return None
        evaluator, reads, pooled, layers, focus = compiled
        table = self.table
        signals = {s: _Pooled(table, table.row(window, bias), window, bias) for s, (window, bias) in pooled.items()}
        return DecodeProbes(evaluator, reads, signals, layers, table, table.slot(), focus)

    def _compile(self, policies):
        watched = [p for p in policies if any(r.params.get("decode") for r in p.rules)]
        if not watched:
            return None
        reads, pooled, layers, focus = {}, {}, set(), {}
        for policy in watched:
            for rule in policy.rules:
                names = [n if "." in n else f"{policy.name}.{n}" for n, _ in condition_signals(rule.condition)]
                reads[(policy.name, rule.id)] = names
                if not rule.params.get("decode"):
                    continue
                for name in names:
                    spec = self._analyzers.get(name)
                    if spec is None or not spec.on_generated_tokens:
                        continue
                    if spec.kind == "token_probe":
                        pooled[name] = (int(spec.params["window"]), float(spec.params.get("bias") or 0.0))
                        layers.update(int(layer) for layer in spec.params["layers"])
                    else:
                        pooled[name] = (int(spec.params["window"]), 0.0)
                        focus[name] = _focus(spec)
        # Selection already happened on the engine side (names, tags, tenant).
        evaluator = Evaluator([dataclasses.replace(p, selector={}) for p in watched], phase="decode")
        return evaluator, reads, pooled, frozenset(layers), focus


def _focus(spec) -> Focus:
    heads: dict[int, list[int]] = {}
    for layer, head in spec.params["heads"]:
        heads.setdefault(int(layer), []).append(int(head))
    return Focus(spec.params["policy"], {layer: tuple(h) for layer, h in sorted(heads.items())},
                 spec.params.get("toward", "trusted"), len(spec.params["heads"]))


@dataclass(eq=False)
class _Scored:
    """One request's generated tokens of a step, and where their scores
    lie in the step's values."""

    state: Any
    first: int
    end: int
    at: dict[str, tuple[int, int]] = field(default_factory=dict)  # signal -> (offset, tokens)


@dataclass(eq=False)
class Steady:
    """A step's steady decoders (one generated token each, read by the probe
    buffers alone: ``DecodeProbes.probe_reads``), as arrays, so that their
    scores are pooled together (decide_step.decide_steady)."""

    table: PoolTable
    states: list[Any] = field(default_factory=list)
    positions: Any = None  # np.ndarray: each decoder's generated token scored
    slots: Any = None  # np.ndarray: each decoder's pool table slot
    rows: Any = None  # np.ndarray, per (decoder, signal): its pool row
    owners: Any = None  # np.ndarray, per (decoder, signal): the decoder's index in ``states``
    signals: list[str] = field(default_factory=list)  # per (decoder, signal)
    offset: int = 0  # where their scores start in the step's values
    unstored: list[Any] = field(default_factory=list)  # decoders whose record the engine took while they go on


class StepScores:
    """One step's generated-token scores on their way to the host, judged a
    step late.

    After the forward (the logits hook, ``launch``), every score of the step
    goes into one device tensor: the token probes' from the accumulator the
    layer points filled (probe_buffers.py), the attention trackers' from the
    step's batched read (decode_focus.FocusStep) or a request's own sums.
    One copy to pinned host memory starts, and nothing waits for it: the
    decode rules read the values at the next step's logits hook, or when the
    engine takes the records (``land``). Waiting in the step that computed
    them kept the host from preparing the next step while the device ran
    this one; on an H100 a decode rule that never fired then ran at 75 % of
    plain vLLM (benchmarks/README.md, 2026-12-07). Scored one request at a
    time, with a read each, it had run at 12.8 % on an H200."""

    def __init__(self):
        self.scored: list[_Scored] = []
        self.steady: Steady | None = None
        self.values: np.ndarray | None = None  # on the host, once landed
        self.error: str | None = None
        self.states: list[Any] = []  # every request scored here
        self._ids: set[int] = set()  # theirs, by id
        self._parts: list[torch.Tensor] = []
        self._size = 0
        self._host: torch.Tensor | None = None
        self._copied = None  # the device-to-host copy's CUDA event

    def _part(self, values: torch.Tensor) -> int:
        """Where ``values`` (1-D) will start in the step's values."""
        offset = self._size
        self._parts.append(values.float())
        self._size += values.numel()
        return offset

    @classmethod
    def launch(cls, runtime, buffers) -> "StepScores | None":
        """The step's scores of ``runtime``'s requests (its steady decoders
        and ``Rows``), on their way to the host; None when none scored a
        token. Takes each request's ``pending`` tokens."""
        step = cls()
        token_rows: list[int] = []  # the probe buffers' (row, column) of each score read from them
        columns: list[int] = []
        if runtime.decoders:  # the usual decoding request: one token, no Python of its own beyond this
            steady = step.steady = Steady(runtime.decode_rules.table)
            positions, slots, rows, owners = [], [], [], []
            for state, _, row, position in runtime.decoders:
                decode = state.decode
                if decode.stopped:
                    continue
                if decode.error is not None or state.error is not None:  # failed in the last step's judging
                    step.scored.append(_Scored(state, position, position + 1))  # the rules' error modes decide
                    continue
                owner = len(steady.states)
                steady.states.append(state)
                positions.append(position)
                slots.append(decode.slot)
                if not decode.stored:
                    steady.unstored.append(state)
                for signal, column, pool_row in decode.probe_reads:
                    token_rows.append(row)
                    columns.append(column)
                    rows.append(pool_row)
                    owners.append(owner)
                    steady.signals.append(signal)
            steady.positions, steady.slots = np.array(positions, dtype=np.int64), np.array(slots, dtype=np.int64)
            steady.rows, steady.owners = np.array(rows, dtype=np.int64), np.array(owners, dtype=np.int64)
            if not steady.states:
                step.steady = None
        probes: list[tuple[_Scored, str, int, int]] = []  # (request, signal, offset in the probe reads, tokens)
        focus = runtime.focus_step
        batched: dict[str, tuple[int, dict[int, int]]] = {}  # signal -> (its values' offset, id(state) -> place)
        for r in runtime.rows:
            state, (a, b) = r.state, r.generated_rows
            decode = state.decode
            if b <= a or decode is None or decode.pending is None:
                continue
            (first, end), decode.pending = decode.pending, None
            if decode.stopped or state.blocked:
                continue
            scored = _Scored(state, first, end)
            step.scored.append(scored)
            if decode.error is not None or state.error is not None:
                continue  # the rules' error modes decide
            for signal in decode.signals:
                if signal not in decode.focus:
                    if signal in runtime.probe_slots:
                        probes.append((scored, signal, len(token_rows), b - a))
                        token_rows.extend(range(a, b))
                        columns.extend([runtime.probe_slots[signal]] * (b - a))
                    continue
                readers_of = focus.batched.get(signal) if focus is not None else None
                if readers_of is not None and readers_of.values is not None:
                    if signal not in batched:
                        offset = step._part(readers_of.values / decode.focus[signal].num_heads)
                        batched[signal] = (offset, {id(m.state): i for i, m in enumerate(readers_of.members)})
                    offset, places = batched[signal]
                    if id(state) in places:
                        scored.at[signal] = (offset + places[id(state)], 1)
                        continue
                if signal in decode.sums:  # read on its own
                    scored.at[signal] = (step._part(decode.sums[signal][first:end]), end - first)
        if not step.scored and step.steady is None:
            return None
        step.states = [*(step.steady.states if step.steady is not None else ()), *(s.state for s in step.scored)]
        step._ids = {id(state) for state in step.states}
        try:
            if token_rows:
                scores = buffers.scores
                index = torch.tensor([token_rows, columns], dtype=torch.long)
                if scores.is_cuda:
                    index = index.pin_memory()
                index = index.to(scores.device, non_blocking=True)
                base = step._part(scores[index[0], index[1]])
                if step.steady is not None:
                    step.steady.offset = base  # first in the reads
                for scored, signal, offset, count in probes:
                    scored.at[signal] = (base + offset, count)
            if step._parts:
                parts = step._parts
                values = torch.cat(parts) if len(parts) > 1 else parts[0]
                if values.is_cuda:  # the copy runs in stream order, before any later step rewrites a part
                    step._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
                    step._host.copy_(values, non_blocking=True)
                    step._copied = torch.cuda.Event()
                    step._copied.record()
                else:  # a lone part may be a view of sums that a recompute rewrites before it lands
                    step._host = values if len(parts) > 1 else values.clone()
        except Exception as exc:  # the rules' error modes decide
            step.error = f"reading generated-token scores failed: {type(exc).__name__}: {exc}"
        step._parts = []
        return step

    def holds(self, state) -> bool:
        """Whether ``state`` was scored in this step."""
        return id(state) in self._ids

    def holds_any(self, keys) -> bool:
        """Whether a request of one of ``keys`` was scored in this step."""
        return any(state.key in keys for state in self.states)

    def land(self) -> list[tuple[_Scored, dict[str, list[float]]]]:
        """The step's scores on the host (``values``; waiting for the copy,
        which the device has usually finished by now), and each ``Rows``
        request's tokens with theirs."""
        if self._host is not None and self.error is None:
            try:
                if self._copied is not None:
                    self._copied.synchronize()
                self.values = self._host.numpy()
            except Exception as exc:
                self.error = f"reading generated-token scores failed: {type(exc).__name__}: {exc}"
        landed = []
        for scored in self.scored:
            decode = scored.state.decode
            if self.error is not None:
                decode.error = decode.error or self.error
            values = self.values if self.error is None else None
            landed.append((scored, {signal: values[o:o + n].tolist() for signal, (o, n) in scored.at.items()}
                           if values is not None else {}))
        return landed

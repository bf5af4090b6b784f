"""In-model signals on what the model writes, and the output rules that read them.

A ``token_probe`` signal with ``span: generated`` scores each generated token
as a prompt probe scores prompt tokens (analyzers/token_probe.py):
``s_t = Σ_L w_L · h_L,t + b``, added up over its layers by the layer points
into device buffers that full CUDA graphs replay (probe_buffers.py) and read
after the forward (``ProbeStep``). A token's hidden state is computed in the step that
samples the token after it, so a token is scored one step after it was
sampled, and a completion's last token is never scored.

An ``attention_tracker`` with ``span: generated`` gives each generated token
its heads' mean share of span attention that goes toward one span (trusted
or untrusted; analyzers/attention_tracker.py), from the token's own Q at the
attention points of those layers and the prompt's span keys, kept when the
prompt is decided (``keep_span_keys``; the step's requests are read together
in decode_focus.py). It is pooled as a token probe's scores are.

After each step's forward (the logits hook, decide_step.py) the output rules
that read these signals ("decode" rules, ``Evaluator(phase="decode")``) are
evaluated for every request that scored a new token, on the signal value the
prompt's pooling gives the generated tokens scored so far: the largest mean
over ``window`` consecutive tokens. The rules first run once every signal
they read has a whole window: the mean of the first few tokens alone says
little (the first one often scores far from the rest), and a completion
shorter than a window plus one token is never judged. A ``steer`` starts at
the next token (``decide_step.decide_generated``): the token sampled in the
step that decided was chosen before the decision, so the first steered row
is that token's, and the first steered choice the token after it. A steer
decided here stays on to the end of the completion: the pooled value only
grows, and a steer that came and went with each token would make the stream
depend on where the window fell. A ``stop`` forces the row to
end-of-sequence, as a block does, and the scheduler finishes the completion
in this step; the record says where the violation starts: the first token of
the window that made the rule fire. The engine takes the record
(``RPC_TAKE_DECODE``) when the completion ends and returns nothing from that
token on; a stream's hold-back (at least the window) has kept those tokens
from being sent.

Rules here are evaluated after every scored token that changes a pooled
value (the rules are a pure function of the values; on the others they
would find what they found before): the policy's ``output.every`` spaces
the engine's reads of the generated text only.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from innerguard.engine.decide import Evaluator, SignalError, condition_signals
from innerguard.hooks import span_key_budget
from innerguard.hooks.analyzers import attention_tracker

GROW = 256  # scores are kept in a buffer grown by this many tokens at a time


@dataclass(eq=False)
class _Pooled:
    """One generated signal's running window maximum, fed score by score."""

    window: int
    bias: float
    scores: list[float] = field(default_factory=list)  # host copies, bias included, one per scored token
    best: float = -math.inf  # the largest full-window mean so far
    best_start: int = 0

    def add(self, values: list[float]) -> bool:
        """Pool ``values``; whether the best window changed. A score that is
        not finite raises: the rules' error modes decide, never a window
        that silently stops growing."""
        w, changed = self.window, False
        for value in values:
            if not math.isfinite(value):
                raise ValueError(f"generated token {len(self.scores)} scored {value}")
            self.scores.append(value + self.bias)
            n = len(self.scores)
            if n >= w:
                mean = math.fsum(self.scores[n - w:]) / w
                if mean > self.best:
                    self.best, self.best_start, changed = mean, n - w, True
        return changed

    @property
    def ready(self) -> bool:
        return len(self.scores) >= self.window

    def value(self) -> tuple[float, int]:
        """The signal and the first token of the window that gives it (once ``ready``)."""
        return self.best, self.best_start


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
    focus: dict[str, Focus] = field(default_factory=dict)  # the attention trackers'
    span_keys: dict[str, dict[int, attention_tracker.SpanKeys]] | None = None  # signal -> layer -> keys
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # signal -> per-token sums over layers (device)
    # signal -> the final scores of the tokens this step computes, on the
    # host (token probes, ProbeStep; one-token attention trackers, FocusStep):
    # read instead of sums
    step_values: dict[str, list[float]] = field(default_factory=dict)
    scored: int = 0  # generated tokens whose scores are final
    pending: tuple[int, int] | None = None  # generated tokens this step scores
    stopped: bool = False
    error: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    reported: set[tuple[str, str | None]] = field(default_factory=set)
    steering: set[str] = field(default_factory=set)  # steer ids decided so far: once on, on to the end
    new_steers: list[str] = field(default_factory=list)  # decided in the last evaluation, for the worker to start
    # What the engine takes (RPC_TAKE_DECODE): the events so far, the stop,
    # every scored token's score and each signal's value so far (once a
    # whole window is scored). Live: the lists grow in place.
    record: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.record.update(events=self.events, stop=None, scores={s: p.scores for s, p in self.signals.items()}, values={})

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
        ``SpanKeys.keys``; a step's padding to its longest span is not counted)."""
        elements = 0
        for focus in self.focus.values():
            toward, other = focus.spans(state.args)
            tokens = sum(end - start for start, end in (*toward, *other))
            elements += tokens * sum(len(heads) for heads in focus.heads.values())
        return 2 * elements * geometry.head_dim * item_size

    def begin(self, first: int, count: int) -> None:
        """This step computes generated tokens ``[first, first + count)``:
        their sums start from zero (a recompute after preemption rescores)."""
        end = first + count
        if first > self.scored and self.error is None:  # e.g. served from the prefix cache: never guess a score
            self.error = f"generated tokens {self.scored}..{first} were never computed by this request"
        for signal, sums in list(self.sums.items()):
            if sums.numel() < end:
                grown = sums.new_zeros(end + GROW)
                grown[: sums.numel()] = sums
                self.sums[signal] = sums = grown
            sums[first:end] = 0
        self.step_values.clear()
        self.pending = (first, end)

    def put(self, signal: str, values: list[float]) -> None:
        """The final scores of the tokens this step computes (``pending``), on
        the host (the step's requests read together, ``ProbeStep.finish``)."""
        self.step_values[signal] = values

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

    def evaluate(self) -> dict[str, Any] | None:
        """Pool the tokens this step scored and run the decode rules. Returns
        the stop (a record) once an applied ``stop`` fires."""
        if self.pending is None or self.stopped:
            return None
        begun, end = self.pending
        self.pending = None
        if end <= self.scored:
            return None  # recomputed tokens: already pooled
        first = max(begun, self.scored)
        changed = missing = False
        if self.error is None:
            for signal, pooled in self.signals.items():
                if signal in self.step_values:
                    changed |= pooled.add(self.step_values[signal][first - begun:])
                elif signal in self.sums:
                    changed |= pooled.add(self.sums[signal][first:end].tolist())
                else:
                    missing = True
        self.scored = end
        # A pooled value only changes when a new window beats the best so
        # far; the rules are a pure function of the values, and what they
        # found on these values is already recorded (events once, a steer
        # once, a stop ends the completion), as are the values themselves.
        # Most steps change no value: re-running the rules and rewriting the
        # record per request and step was host time on a GPU.
        if self.error is None and not missing and not changed:
            return None
        values: dict[str, Any] = {}
        starts: dict[str, int] = {}
        for signal, pooled in self.signals.items():
            if self.error is not None:
                values[signal] = SignalError(self.error)
            elif signal not in self.step_values and signal not in self.sums:
                values[signal] = SignalError(f"no scores were computed for {signal}")
            else:
                values[signal], starts[signal] = pooled.value()
        self.record["values"] = {s: p.value()[0] for s, p in self.signals.items() if p.ready}
        if self.error is None and not all(p.ready for p in self.signals.values()):
            return None
        verdict = self.evaluator.evaluate(values)
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


class DecodeRules:
    """A plan's decode rules, compiled per set of policies."""

    def __init__(self, analyzers: dict[str, Any]):
        self._analyzers = analyzers
        self._compiled: dict[tuple[str, ...], tuple[Evaluator, dict, dict[str, _Pooled], frozenset[int]] | None] = {}

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
        signals = {s: _Pooled(p.window, p.bias) for s, p in pooled.items()}
        return DecodeProbes(evaluator, reads, signals, layers, focus)

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
                        pooled[name] = _Pooled(int(spec.params["window"]), float(spec.params.get("bias") or 0.0))
                        layers.update(int(layer) for layer in spec.params["layers"])
                    else:
                        pooled[name] = _Pooled(int(spec.params["window"]), 0.0)
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
class ProbeStep:
    """One step's generated-token probe scores, read after the forward from
    the accumulator the layer points filled (probe_buffers.py): one gather
    and one copy to the host for every request, token and probe of the step.
    Scored one by one, each request cost a handful of kernels per layer and
    a wait for the device per step; on an H200 (640 requests a round) a
    never-firing decode rule then ran at 12.8 % of plain vLLM
    (benchmarks/README.md, 2026-12-07)."""

    readers: list = field(default_factory=list)  # (DecodeProbes, signal, offset in the read values, tokens)
    token_rows: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)

    @classmethod
    def collect(cls, rows, decoders, slots: dict[str, int]) -> "ProbeStep":
        """From the step's ``Rows`` and its steady decoders ((state, batch index, token row))."""
        step = cls()
        readers = [(r.state, *r.generated_rows) for r in rows] + [(state, row, row + 1) for state, _, row in decoders]
        for state, a, b in readers:
            decode = state.decode
            if decode is None or b <= a or not decode.layers or decode.error is not None:
                continue
            for signal in decode.signals:
                if signal in decode.focus:
                    continue
                step.readers.append((decode, signal, len(step.token_rows), b - a))
                step.token_rows.extend(range(a, b))
                step.slots.extend([slots[signal]] * (b - a))
        return step

    def finish(self, buffers) -> None:
        """Hand each request its tokens' scores (after the forward)."""
        if not self.readers:
            return
        try:
            scores = buffers.scores
            index = torch.tensor([self.token_rows, self.slots], dtype=torch.long).to(scores.device, non_blocking=True)
            values = scores[index[0], index[1]].tolist()
        except Exception as exc:  # the rules' error modes decide
            for decode, *_ in self.readers:
                decode.error = decode.error or f"reading generated-token scores failed: {type(exc).__name__}: {exc}"
            return
        for decode, signal, offset, count in self.readers:
            decode.put(signal, values[offset:offset + count])

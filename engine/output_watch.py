"""Output rules, watched as the model writes.

A rule that reads a text signal with ``span: generated`` is an output rule
(``RuleProgram.params["output"]``). The worker decides the prompt rules at
prefill; the output rules are evaluated here, on the engine side where the
detokenized text already is, after every step of each completion (or once
``every`` tokens have come, the policy's ``output.every``), with the same
decision semantics (``Evaluator(..., phase="output")``): modes, ``on_error``,
priorities and messages work as for prompt rules.

A ``stop`` places the cut where the violation starts: at the first token of
the step whose text holds the start of the earliest match that made the rule
fire (the first step not read before when no match marks it, e.g. a rule on
``not x``). The caller returns nothing from that token on and ends the
completion with ``finish_reason: content_filter``. A stream releases only
text the rules have read, less its newest ``hold_back`` tokens (the policy's
``output.hold_back``): a match still being written may start there.

    rules = OutputRules(plan)                  # once per plan
    watch = rules.watch(prepared.policies, rules.repeats(prepared.repeat_sources))
                                               # per completion; None: no output rule applies
    watch.feed(text_so_far, tokens_so_far, finished)   # after every step
    watch.stop                                 # an OutputStop once an applied stop rule fired
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from innerguard.engine.decide import Evaluator, condition_signals
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.text_signals import signal_matchers
from innerguard.engine.textmatch import RepeatMatcher
from innerguard.engine.verdicts import FINISH_BLOCKED

FINISH_STOPPED = FINISH_BLOCKED  # OpenAI's "content_filter", as for a prompt that is refused


@dataclass(frozen=True)
class OutputStop:
    token: int  # index of the first generated token that is not returned
    char: int  # its offset in the generated text: the text returned is text[:char]
    policy: str
    rule: str
    message: str | None


class OutputRules:
    """A plan's output rules and generated-text signals, compiled once."""

    def __init__(self, plan: Plan):
        generated = [spec for spec in plan.analyzers if spec.kind == "text" and spec.params.get("span") == "generated"]
        self._matchers = {spec.signal: signal_matchers(spec.params) for spec in generated}
        # ``repeats`` signals: their matcher needs the request's prompt (repeats()).
        self._run_lengths = {spec.signal: spec.params["words"] for spec in generated if spec.params.get("repeats")}
        self._compiled_for: dict[tuple[str, ...], _Compiled | None] = {}

    def __bool__(self) -> bool:
        """Whether the plan reads any generated text at all."""
        return bool(self._matchers)

    def applies(self, policies: Sequence[PolicyProgram]) -> bool:
        """Whether a request that ``policies`` apply to has output rules."""
        return self._compiled(policies) is not None

    def repeats(self, sources: Mapping[str, str]) -> dict[str, RepeatMatcher]:
        """One request's ``repeats`` matchers, from the prompt text of each
        signal (``PreparedRequest.repeat_sources``): built once per request,
        shared by its completions."""
        return {signal: RepeatMatcher(sources.get(signal, ""), length) for signal, length in self._run_lengths.items()}

    def watch(self, policies: Sequence[PolicyProgram],
              repeats: Mapping[str, RepeatMatcher] | None = None) -> "OutputWatch | None":
        """A watch for one completion of a request that ``policies`` apply to,
        or None when none of them has an output rule."""
        compiled = self._compiled(policies)
        if compiled is None:
            return None
        # A repeat is looked for in what each step adds: one scan per completion.
        matchers = {s: m + ((repeats[s].scan(),) if repeats and s in repeats else ()) for s, m in self._matchers.items()}
        return OutputWatch(compiled, matchers)

    def _compiled(self, policies: Sequence[PolicyProgram]) -> "_Compiled | None":
        key = tuple(p.name for p in policies)
        if key not in self._compiled_for:
            watched = [p for p in policies if any(r.params.get("output") for r in p.rules)]
            output_rules = [r for p in watched for r in p.rules if r.params.get("output")]
            self._compiled_for[key] = _Compiled(
                # Selection already happened when the request was prepared.
                evaluator=Evaluator([_unselected(p) for p in watched], phase="output"),
                reads={(p.name, r.id): [n if "." in n else f"{p.name}.{n}" for n, _ in condition_signals(r.condition)]
                       for p in watched for r in p.rules},
                # The strictest of the request's policies: the longest hold-back, the closest reads.
                hold_back=max(r.params["hold_back"] for r in output_rules),
                every=min(r.params["every"] for r in output_rules),
            ) if watched else None
        return self._compiled_for[key]


@dataclass(frozen=True)
class _Compiled:
    """The output rules of one set of selected policies."""

    evaluator: Evaluator
    reads: dict[tuple[str, str], list[str]]  # (policy, rule) -> the qualified signals its condition reads
    hold_back: int
    every: int


class OutputWatch:
    """One completion's output rules. ``events`` holds every decision that
    acted or flagged (once per rule, at the token where it first did)."""

    def __init__(self, compiled: _Compiled, matchers):
        self._evaluator = compiled.evaluator
        self._reads = compiled.reads
        self.hold_back, self.every = compiled.hold_back, compiled.every
        self._matchers = {s: matchers[s] for s in compiled.evaluator.signals if s in matchers}
        self._steps: list[tuple[int, int]] = []  # (tokens, characters) after each step fed
        self._read: tuple[int, int] = (0, 0)  # (tokens, characters) the rules have read
        self.finished = False
        self._reported: set[tuple[str, str | None]] = set()
        self.events: list[dict[str, Any]] = []
        self.stop: OutputStop | None = None

    def feed(self, text: str, num_tokens: int, finished: bool = False) -> OutputStop | None:
        """The completion's whole generated text and token count after a
        step (``finished``: its last). The rules read it once ``every``
        tokens have come since they last did, and at the end. Returns the
        stop, once one is decided (and on every later call)."""
        if self.stop is not None:
            return self.stop
        self._steps.append((num_tokens, len(text)))
        self.finished = finished
        if not finished and num_tokens - self._read[0] < self.every:
            return None
        unread = self._read[0]  # the first token the rules had not read
        self._read = (num_tokens, len(text))
        starts: dict[str, int] = {}
        for signal, matchers in self._matchers.items():
            found = [m for m in (matcher.search(text) for matcher in matchers) if m is not None]
            if found:
                starts[signal] = min(m.start for m in found)
        values: dict[str, Any] = {s: s in starts for s in self._matchers}
        verdict = self._evaluator.evaluate(values)
        for decision in verdict.decisions:
            if decision.action == "allow":
                continue
            cut = unread  # unless the deciding rule's match says where
            # Every rule that fired is recorded (once), not only the deciding one.
            fired = [(h.rule, h.action) for h in decision.hits] or [(decision.rule, decision.rule_action)]
            for rule, rule_action in fired:
                deciding = rule == decision.rule
                char = min((starts[s] for s in self._reads.get((decision.policy, rule), ()) if s in starts), default=None)
                token = self._token_at(char) if char is not None else unread
                if deciding:
                    cut = token
                if (decision.policy, rule) in self._reported:
                    continue
                self._reported.add((decision.policy, rule))
                self.events.append({
                    "policy": decision.policy, "version": decision.version, "revision": decision.revision,
                    "mode": decision.mode, "rule": rule, "rule_action": rule_action,
                    "action": decision.action if deciding else "flag" if decision.mode == "warn" else rule_action,
                    "applied": decision.applied, "token_index": token, "signals": dict(decision.signals),
                    "message": decision.message if deciding else None, "error": decision.error if deciding else None,
                })
            if decision.action == "stop" and decision.applied and self.stop is None:
                self.stop = OutputStop(cut, self._chars_before(cut), decision.policy, decision.rule or "", decision.message)
        return self.stop

    def cleared(self) -> tuple[int, int]:
        """(tokens, characters) of the text that may be returned: up to the
        stop of a stopped completion, else what the rules have read but its
        newest ``hold_back`` tokens (a match still being written may start
        there; a finished completion's last read holds it all), at a step
        boundary."""
        if self.stop is not None:
            return self.stop.token, self.stop.char
        if self.finished:
            return self._read
        limit = self._read[0] - self.hold_back
        return next(((t, c) for t, c in reversed(self._steps) if t <= limit), (0, 0))

    def _token_at(self, char: int) -> int:
        """The first token of the step whose text reaches past ``char``."""
        before = 0
        for tokens, chars in self._steps:
            if chars > char:
                return before
            before = tokens
        return before

    def _chars_before(self, token: int) -> int:
        """The length of the text of the tokens before ``token`` (a step
        boundary: cuts fall only between steps)."""
        return next((chars for tokens, chars in self._steps if tokens == token), 0)


def _unselected(policy: PolicyProgram) -> PolicyProgram:
    return dataclasses.replace(policy, selector={})


class RequestWatch:
    """The watches of one request's completions, fed from vLLM's
    ``RequestOutput`` in ``CUMULATIVE`` mode (each output carries a
    completion's whole text so far; with ``n > 1`` an output may carry only
    some of them)."""

    def __init__(self, rules: OutputRules, policies: Sequence[PolicyProgram], n: int,
                 repeat_sources: Mapping[str, str] | None = None):
        self._rules, self._policies, self.n = rules, policies, n
        self._repeats = rules.repeats(repeat_sources or {})
        self.watches: dict[int, OutputWatch] = {}
        self.latest: dict[int, Any] = {}  # completion index -> its newest CompletionOutput, cut where stopped

    def update(self, request_output) -> bool:
        """Feed one output; True once every completion has finished or stopped."""
        for completion in request_output.outputs:
            index = completion.index
            watch = self.watches.get(index)
            if watch is None:
                watch = self.watches[index] = self._rules.watch(self._policies, self._repeats)
            if watch.stop is not None:
                continue  # what came after the cut is never returned
            stop = watch.feed(completion.text, len(completion.token_ids), completion.finish_reason is not None)
            self.latest[index] = cut(completion, stop) if stop is not None else completion
        return len(self.latest) >= self.n and all(
            c.finish_reason is not None for c in self.latest.values())

    def outputs(self) -> list[Any]:
        return [self.latest[i] for i in sorted(self.latest)]

    def events(self) -> list[dict[str, Any]]:
        return [{**e, "completion": i} for i in sorted(self.watches) for e in self.watches[i].events]

    def released(self) -> list[tuple[Any, int, int]]:
        """Per completion: (its newest output, cut where stopped; tokens and
        characters that may be returned so far)."""
        return [(self.latest[index], *self.watches[index].cleared()) for index in sorted(self.latest)]


def cut(completion, stop: OutputStop):
    """``completion`` (a vLLM ``CompletionOutput``) with nothing from the
    stop's token on, finished by the guard."""
    logprobs = completion.logprobs
    return dataclasses.replace(
        completion,
        text=completion.text[:stop.char],
        token_ids=list(completion.token_ids[:stop.token]),
        logprobs=logprobs[:stop.token] if logprobs is not None else None,
        cumulative_logprob=None,
        finish_reason=FINISH_STOPPED,
        stop_reason=None,
    )

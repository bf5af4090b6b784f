"""Output rules, watched as the model writes.

A rule that reads a text signal with ``span: generated`` is an output rule
(``RuleProgram.params["output"]``). The worker decides the prompt rules at
prefill; the output rules are evaluated here, on the engine side where the
detokenized text already is, after every step of each completion, with the
same decision semantics (``Evaluator(..., phase="output")``): modes,
``on_error``, priorities and messages work as for prompt rules.

A ``stop`` places the cut where the violation starts: at the first token of
the step whose text holds the start of the earliest match that made the rule
fire (the newest step when no match marks it, e.g. a rule on ``not x``). The
caller returns nothing from that token on and ends the completion with
``finish_reason: content_filter``.

    rules = OutputRules(plan)                  # once per plan
    watch = rules.watch(prepared.policies)     # per completion; None: no output rule applies
    watch.feed(text_so_far, tokens_so_far)     # after every step
    watch.stop                                 # an OutputStop once an applied stop rule fired
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from innerguard.engine.decide import Evaluator, condition_signals
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.text_signals import signal_matchers
from innerguard.engine.verdicts import FINISH_BLOCKED

FINISH_STOPPED = FINISH_BLOCKED  # OpenAI's "content_filter", as for a prompt that is refused
# Tokens a stream keeps back until the output rules have read past them: a
# keyword or pattern of up to this many tokens is never sent in part.
HOLD_BACK = 8


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
        self._matchers = {
            spec.signal: signal_matchers(spec.params)
            for spec in plan.analyzers
            if spec.kind == "text" and spec.params.get("span") == "generated"
        }
        self._evaluators: dict[tuple[str, ...], tuple[Evaluator, dict] | None] = {}

    def __bool__(self) -> bool:
        """Whether the plan reads any generated text at all."""
        return bool(self._matchers)

    def applies(self, policies: Sequence[PolicyProgram]) -> bool:
        """Whether a request that ``policies`` apply to has output rules."""
        return self._compiled(policies) is not None

    def watch(self, policies: Sequence[PolicyProgram]) -> "OutputWatch | None":
        """A watch for one completion of a request that ``policies`` apply to,
        or None when none of them has an output rule."""
        compiled = self._compiled(policies)
        return OutputWatch(*compiled, self._matchers) if compiled is not None else None

    def _compiled(self, policies: Sequence[PolicyProgram]) -> tuple[Evaluator, dict] | None:
        key = tuple(p.name for p in policies)
        if key not in self._evaluators:
            watched = [p for p in policies if any(r.params.get("output") for r in p.rules)]
            # Selection already happened when the request was prepared.
            evaluator = Evaluator([_unselected(p) for p in watched], phase="output")
            reads = {(p.name, r.id): [n if "." in n else f"{p.name}.{n}" for n, _ in condition_signals(r.condition)]
                     for p in watched for r in p.rules}
            self._evaluators[key] = (evaluator, reads) if watched else None
        return self._evaluators[key]


class OutputWatch:
    """One completion's output rules. ``events`` holds every decision that
    acted or flagged (once per rule, at the token where it first did)."""

    def __init__(self, evaluator: Evaluator, reads: dict[tuple[str, str], list[str]], matchers):
        self._evaluator = evaluator
        self._reads = reads  # (policy, rule) -> the qualified signals its condition reads
        self._matchers = {s: matchers[s] for s in evaluator.signals if s in matchers}
        self._steps: list[tuple[int, int]] = []  # (tokens, characters) after each step fed
        self._reported: set[tuple[str, str | None]] = set()
        self.events: list[dict[str, Any]] = []
        self.stop: OutputStop | None = None

    def feed(self, text: str, num_tokens: int) -> OutputStop | None:
        """The completion's whole generated text and token count after a
        step. Returns the stop, once one is decided (and on every later call)."""
        if self.stop is not None:
            return self.stop
        self._steps.append((num_tokens, len(text)))
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
            cut = self._newest_step_start()  # unless the deciding rule's match says where
            # Every rule that fired is recorded (once), not only the deciding one.
            fired = [(h.rule, h.action) for h in decision.hits] or [(decision.rule, decision.rule_action)]
            for rule, rule_action in fired:
                deciding = rule == decision.rule
                char = min((starts[s] for s in self._reads.get((decision.policy, rule), ()) if s in starts), default=None)
                token = self._token_at(char) if char is not None else self._newest_step_start()
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

    def cleared(self, hold_back: int, finished: bool) -> tuple[int, int]:
        """(tokens, characters) of the text that may be returned: all of a
        finished completion, up to the stop of a stopped one, else all but
        the newest ``hold_back`` tokens (a match still being written may
        start there), at a step boundary."""
        if self.stop is not None:
            return self.stop.token, self.stop.char
        if not self._steps:
            return 0, 0
        if finished:
            return self._steps[-1]
        limit = self._steps[-1][0] - hold_back
        return next(((t, c) for t, c in reversed(self._steps) if t <= limit), (0, 0))

    def _token_at(self, char: int) -> int:
        """The first token of the step whose text reaches past ``char``."""
        before = 0
        for tokens, chars in self._steps:
            if chars > char:
                return before
            before = tokens
        return before

    def _newest_step_start(self) -> int:
        return self._steps[-2][0] if len(self._steps) > 1 else 0

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

    def __init__(self, rules: OutputRules, policies: Sequence[PolicyProgram], n: int):
        self._rules, self._policies, self.n = rules, policies, n
        self.watches: dict[int, OutputWatch] = {}
        self.latest: dict[int, Any] = {}  # completion index -> its newest CompletionOutput, cut where stopped

    def update(self, request_output) -> bool:
        """Feed one output; True once every completion has finished or stopped."""
        for completion in request_output.outputs:
            index = completion.index
            watch = self.watches.get(index)
            if watch is None:
                watch = self.watches[index] = self._rules.watch(self._policies)
            if watch.stop is not None:
                continue  # what came after the cut is never returned
            stop = watch.feed(completion.text, len(completion.token_ids))
            self.latest[index] = cut(completion, stop) if stop is not None else completion
        return len(self.latest) >= self.n and all(
            c.finish_reason is not None for c in self.latest.values())

    def outputs(self) -> list[Any]:
        return [self.latest[i] for i in sorted(self.latest)]

    def events(self) -> list[dict[str, Any]]:
        return [{**e, "completion": i} for i in sorted(self.watches) for e in self.watches[i].events]

    def released(self, hold_back: int) -> list[tuple[Any, int, int]]:
        """Per completion: (its newest output, cut where stopped; tokens and
        characters that may be returned so far)."""
        found = []
        for index in sorted(self.latest):
            completion = self.latest[index]
            found.append((completion, *self.watches[index].cleared(hold_back, completion.finish_reason is not None)))
        return found


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

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
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from innerguard.engine.decide import Evaluator, SignalError, condition_signals
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.text_signals import signal_matchers
from innerguard.engine.textmatch import RepeatMatcher
from innerguard.engine.verdicts import FINISH_BLOCKED

FINISH_STOPPED = FINISH_BLOCKED  # OpenAI's "content_filter", as for a prompt that is refused
# Completions whose decode rules left no record: logged once, counted here.
UNEVALUATED: Counter[str] = Counter()
log = logging.getLogger("innerguard")


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
        self._scores_tokens = any(spec.on_generated_tokens for spec in plan.analyzers)

    def __bool__(self) -> bool:
        """Whether the plan reads anything the model writes."""
        return bool(self._matchers) or self._scores_tokens

    def applies(self, policies: Sequence[PolicyProgram]) -> bool:
        """Whether a request that ``policies`` apply to has output rules."""
        return self._compiled(policies) is not None

    def decodes(self, policies: Sequence[PolicyProgram]) -> bool:
        """Whether some of them are decode rules (the worker's, on generated tokens)."""
        compiled = self._compiled(policies)
        return compiled is not None and compiled.decode is not None

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
            output_rules = [r for p in policies for r in p.rules if r.params.get("output")]
            # Selection already happened when the request was prepared.
            text = [_unselected(p) for p in policies if any(_reads_text(r) for r in p.rules)]
            decode = [_unselected(p) for p in policies if any(r.params.get("decode") for r in p.rules)]
            self._compiled_for[key] = _Compiled(
                evaluator=Evaluator(text, phase="output") if text else None,
                decode=Evaluator(decode, phase="decode") if decode else None,
                reads={(p.name, r.id): [n if "." in n else f"{p.name}.{n}" for n, _ in condition_signals(r.condition)]
                       for p in text for r in p.rules},
                # The strictest of the request's policies: the longest hold-back, the closest reads.
                hold_back=max(r.params["hold_back"] for r in output_rules),
                every=min((r.params["every"] for r in output_rules if _reads_text(r)), default=1),
            ) if output_rules else None
        return self._compiled_for[key]


def _reads_text(rule) -> bool:
    """An output rule the engine evaluates, on the generated text."""
    return bool(rule.params.get("output")) and not rule.params.get("decode")


@dataclass(frozen=True)
class _Compiled:
    """The output rules of one set of selected policies."""

    evaluator: Evaluator | None  # the rules on the generated text, if any
    decode: Evaluator | None  # the rules the worker evaluates on generated tokens (decode_probes.py), if any
    reads: dict[tuple[str, str], list[str]]  # (policy, rule) -> the qualified signals its condition reads
    hold_back: int
    every: int


class OutputWatch:
    """One completion's output rules. ``events`` holds every decision that
    acted or flagged (once per rule, at the token where it first did)."""

    def __init__(self, compiled: _Compiled, matchers):
        self._evaluator = compiled.evaluator
        self._decode = compiled.decode
        self._reads = compiled.reads
        self.hold_back, self.every = compiled.hold_back, compiled.every
        self._matchers = {s: matchers[s] for s in compiled.evaluator.signals if s in matchers} if compiled.evaluator else {}
        self._steps: list[tuple[int, int]] = []  # (tokens, characters) after each step fed
        self._read: tuple[int, int] = (0, 0)  # (tokens, characters) the rules have read
        self.finished = False
        self._reported: set[tuple[str, str | None]] = set()
        self.events: list[dict[str, Any]] = []
        self.stop: OutputStop | None = None
        self.scores: dict[str, list[float]] = {}  # the worker's score of each generated token, per decode signal
        self.values: dict[str, float] = {}  # each decode signal's last value (its window maximum)

    @property
    def decodes(self) -> bool:
        """Whether rules the worker evaluates on generated tokens apply (their
        record must be taken before the completion's end is released)."""
        return self._decode is not None

    def take_decode(self, record: Mapping[str, Any] | None, num_tokens: int) -> OutputStop | None:
        """What the worker's decode rules found for this completion
        (hooks/decode_probes.py), taken when it ended with ``num_tokens``.
        A stop cuts at the last step boundary at or before the token where
        the violation starts. No record for a completion whose tokens the
        worker must have scored means its rules never ran: each policy's
        ``on_error`` decides, as for a signal that failed."""
        if record is None:
            if num_tokens < 2:  # a token is scored in the step after it: nothing yet
                return self.stop
            record = self._unevaluated("the worker returned no record of its decode rules for this completion")
        self.scores = {s: list(v) for s, v in (record.get("scores") or {}).items()}
        self.values = dict(record.get("values") or {})
        for event in record.get("events") or ():
            if (event.get("policy"), event.get("rule")) not in self._reported:
                self._reported.add((event.get("policy"), event.get("rule")))
                self.events.append(dict(event))
        stop = record.get("stop")
        if stop is not None and self.stop is None:
            token, char = next(((t, c) for t, c in reversed(self._steps) if t <= stop["token"]), (0, 0))
            self.stop = OutputStop(token, char, stop.get("policy") or "", stop.get("rule") or "", stop.get("message"))
        return self.stop

    def _unevaluated(self, reason: str) -> dict[str, Any]:
        UNEVALUATED["completions"] += 1
        if UNEVALUATED["completions"] == 1:
            log.error("innerguard: %s; the decode policies' on_error decides (counted in UNEVALUATED)", reason)
        verdict = self._decode.evaluate({s: SignalError(reason) for s in self._decode.signals})
        events = [{"policy": d.policy, "version": d.version, "revision": d.revision, "mode": d.mode, "rule": d.rule,
                   "rule_action": d.rule_action, "action": d.action, "applied": d.applied, "token_index": 0,
                   "signals": {}, "message": d.message, "error": d.error or reason} for d in verdict.decisions]
        stop = next(({"token": 0, "policy": d.policy, "rule": d.rule, "message": d.message}
                     for d in verdict.decisions if d.action == "stop" and d.applied), None)
        return {"events": events, "stop": stop, "scores": {}}

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
        if self._evaluator is None:  # only the worker's rules: nothing to read here
            return None
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


_CHILD = re.compile(r"^(\d+)_")  # vLLM's id of an n > 1 request's child: "<index>_<parent id>"


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
        self._cut: set[int] = set()  # completions whose cut is in latest
        self.decodes = rules.decodes(policies)
        self._records: dict[int, Any] = {}  # completion index -> the newest decode record taken
        self._forced: tuple[str, int] = ("", 0)  # a teacher-forced answer's text and tokens (read_forced)

    def read_forced(self, prefixes: Sequence[str]) -> None:
        """A teacher-forced answer (``innerguard eval``'s rows with a
        ``completion``; ``prefixes[i]``: the text of its first i + 1 tokens):
        the text rules read it token by token as if the model had written
        it, before what the model writes after it. Token indices of what
        they find count from the answer's first token, as the worker's
        decode records do; a stop in it returns nothing generated."""
        if self.n != 1:
            raise ValueError("a teacher-forced answer is read for one completion (n = 1)")
        watch = self._watch(0)
        for count, text in enumerate(prefixes, 1):
            if watch.feed(text, count) is not None:
                break
        self._forced = (prefixes[-1] if prefixes else "", len(prefixes))

    def ending(self, request_output) -> list[int]:
        """The completions this output ends whose decode record must be
        taken (``take_decode``) before it is fed: the worker's stop may cut
        what it holds."""
        if not self.decodes:
            return []
        return [c.index for c in request_output.outputs if c.finish_reason is not None and c.index not in self._cut]

    def take_decode(self, request_output, records: Mapping[str, Any]) -> None:
        """The worker's decode records of this request (by vLLM's request id:
        with ``n > 1`` each completion is a child whose id starts with its
        index), applied to the completions this output ends."""
        # A sibling's record taken here is kept: the worker puts it again
        # only while that sibling still generates. A stop applies at once:
        # vLLM may hand over a stopped sibling's last token before its end.
        for req_id, record in records.items():
            match = _CHILD.match(req_id)
            index = int(match.group(1)) if self.n > 1 and match else 0
            self._records[index] = record
            if record.get("stop") is not None:
                self._watch(index).take_decode(record, 0)
        # A teacher-forced answer's tokens were scored at prefill: they count as written.
        forced = self._forced[1]
        for completion in request_output.outputs:
            if completion.finish_reason is not None:
                self._watch(completion.index).take_decode(self._records.get(completion.index),
                                                          forced + len(completion.token_ids))

    def update(self, request_output) -> bool:
        """Feed one output; True once every completion has finished or stopped."""
        for completion in request_output.outputs:
            index = completion.index
            if index in self._cut:
                continue  # what came after the cut is never returned
            watch = self._watch(index)
            forced_text, forced_tokens = self._forced
            # A stop the worker decided is known before this output is read.
            stop = watch.stop or watch.feed(forced_text + completion.text, forced_tokens + len(completion.token_ids),
                                            completion.finish_reason is not None)
            if stop is not None and forced_tokens:  # the output holds what follows the forced answer
                stop = dataclasses.replace(stop, token=max(0, stop.token - forced_tokens),
                                           char=max(0, stop.char - len(forced_text)))
            self.latest[index] = cut(completion, stop) if stop is not None else completion
            if stop is not None:
                self._cut.add(index)
        return len(self.latest) >= self.n and all(
            c.finish_reason is not None for c in self.latest.values())

    def _watch(self, index: int) -> OutputWatch:
        watch = self.watches.get(index)
        if watch is None:
            watch = self.watches[index] = self._rules.watch(self._policies, self._repeats)
        return watch

    def scores(self) -> dict[int, dict[str, list[float]]]:
        """Per completion, the worker's score of each generated token, per decode signal."""
        return {i: w.scores for i, w in sorted(self.watches.items()) if w.scores}

    def values(self) -> dict[int, dict[str, float]]:
        """Per completion, each decode signal's value when it ended."""
        return {i: w.values for i, w in sorted(self.watches.items()) if w.values}

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

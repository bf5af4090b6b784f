"""Checks inside one policy, after the schema: signals, spans, conditions,
actions, templates. Artifacts and model geometry have their own modules.
"""
from __future__ import annotations

import difflib
import math
from typing import Iterator

from innerguard.engine.lint import regexes, satisfiability
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy import conditions as c
from innerguard.engine.policy.vocabulary import TEMPLATE_VARIABLES
from innerguard.engine.policy.diagnostics import Finding, Location
from innerguard.engine.policy.model import ArtifactRef, Policy, Rule, SpanSelector, TextSignal, TokenProbeSignal
from innerguard.engine.policy.schema import describe_path, did_you_mean
from innerguard.engine.policy.templates import analyze
from innerguard.engine.policy.yamlsafe import Marks

ACTION_KEYS = {"steer": "steer"}
MESSAGE_ACTIONS = ("block", "flag", "stop")
OUTPUT_ACTIONS = ("stop", "flag")
# The worker evaluates these on each generated token, so it can also start a steer from the next one.
DECODE_ACTIONS = ("stop", "steer", "flag")


def check_policy(policy: Policy, marks: Marks) -> list[Finding]:
    checker = _PolicyChecker(policy, marks)
    checker.run()
    return checker.findings


class _PolicyChecker:
    def __init__(self, policy: Policy, marks: Marks):
        self.policy = policy
        self.marks = marks
        self.findings: list[Finding] = []
        self.signals = {s.name: s for s in policy.signals}
        self.used: set[str] = set()

    def add(self, rule: str, message: str, path: tuple, *, key: bool = False, offset: int | None = None) -> None:
        loc = self.marks.inside(path, offset) if offset is not None else self.marks.at(path, key=key)
        self.findings.append(make(rule, message, loc))

    def run(self) -> None:
        self.check_spans()
        self.check_signals()
        self.check_rules()
        if any(rule.condition is None for rule in self.policy.rules):
            return  # a condition that did not parse may use any signal
        if "output" in self.marks_keys(()) and not any(self.policy.reads_generated(r) for r in self.policy.rules):
            self.add("IG214", "'output' sets how output rules read a generation, but no rule reads a signal with span 'generated'",
                     ("output",), key=True)
        for name in self.signals:
            if name not in self.used:
                self.add("IG209", f"signal {name!r} is defined but no rule uses it", ("signals", name), key=True)

    # ---------------------------------------------------------- spans, signals
    def check_span(self, span: SpanSelector | None, path: tuple) -> None:
        if span is None:
            return
        if span.roles and (span.begin or span.end):
            self.add("IG105", f"{_where(path)}: use either 'roles' or 'begin'/'end', not both", path, key=True)
        elif not span.roles and not (span.begin and span.end):
            missing = "'end'" if span.begin else "'begin'" if span.end else "'roles' (or 'begin' and 'end')"
            self.add("IG102", f"{_where(path)} needs {missing}", path, key=True)

    def check_spans(self) -> None:
        for name, span in self.policy.spans.items():
            self.check_span(span, ("spans", name))

    def check_signals(self) -> None:
        spans = self.policy.spans
        reserved = c.KEYWORDS | set(c.VALUE_AGGREGATES) | set(c.PREDICATE_AGGREGATES)
        for s in self.policy.signals:
            path = ("signals", s.name)
            if s.name in reserved:
                self.add("IG105", f"signal name {s.name!r} is a word of the condition language; conditions could not refer to it: rename it", path, key=True)
                self.used.add(s.name)
            if s.analyzer == "attention_tracker":
                for side in ("trusted", "untrusted"):
                    if side not in spans:
                        self.add("IG102", f"attention_tracker signal {s.name!r} compares the trusted and untrusted spans, but spans.{side} is not defined", path, key=True)
                if s.span == "generated":
                    self.check_decode_window(s, path)
                else:
                    for key in sorted({"toward", "window"} & self.marks_keys(path)):
                        self.add("IG105", f"attention_tracker signal {s.name!r}: {key!r} applies only with span: generated", path + (key,), key=True)
            elif s.analyzer == "reranker":
                self.check_span(s.documents, path + ("documents",))
                self.check_span(s.query, path + ("query",))
            elif s.analyzer == "probe":
                if s.score == "cosine" and "bias" in self.marks_keys(path):
                    self.add("IG105", f"signal {s.name!r}: 'bias' applies only to score: probability", path + ("bias",), key=True)
            elif s.analyzer == "token_probe":
                if s.span == "generated":
                    self.check_decode_window(s, path)
                elif s.span not in spans:
                    self.add("IG102", f"token_probe signal {s.name!r} scores the {s.span} span, but spans.{s.span} is not defined", path, key=True)
            elif isinstance(s, TextSignal):
                if not s.pattern and not s.keywords and s.repeats is None:
                    self.add("IG102", f"text signal {s.name!r} needs 'pattern', 'keywords' or 'repeats'", path, key=True)
                keys = self.marks_keys(path)
                if s.repeats is not None and s.span != "generated":
                    self.add("IG105", f"text signal {s.name!r}: 'repeats' compares the generated text with the prompt; set span: generated", path + ("repeats",), key=True)
                elif s.repeats is not None and s.repeats not in spans:
                    self.add("IG102", f"text signal {s.name!r} looks for repeats of the {s.repeats} span, but spans.{s.repeats} is not defined", path + ("repeats",))
                if "words" in keys and s.repeats is None:
                    self.add("IG105", f"text signal {s.name!r}: 'words' applies only with 'repeats'", path + ("words",), key=True)
                if s.span not in ("prompt", "generated") and s.span not in spans:
                    self.add("IG102", f"text signal {s.name!r} searches the {s.span} span, but spans.{s.span} is not defined", path + ("span",))
                if s.pattern:
                    for problem in regexes.check(s.pattern):
                        self.add(problem.rule, f"signal {s.name!r}: {problem.message}", path + ("pattern",))

    def marks_keys(self, path: tuple) -> set:
        n = len(path)
        return {p[n] for p in self.marks.keys if len(p) == n + 1 and p[:n] == path}

    # ---------------------------------------------------------- rules
    def check_rules(self) -> None:
        seen_ids: dict[str, int] = {}
        typed: list[tuple[int, Rule]] = []
        for index, rule in enumerate(self.policy.rules):
            path = ("rules", index)
            if rule.id in seen_ids:
                self.add("IG208", f"rule id {rule.id!r} is already used by rule #{seen_ids[rule.id] + 1}", path + ("id",))
            else:
                seen_ids[rule.id] = index
            self.check_action(rule, path)
            if rule.message:
                self.check_template(rule, path + ("message",))
            if rule.condition is None:
                # the name references still count as uses
                continue
            before = len(self.findings)
            self.check_condition(rule, path)
            if len(self.findings) == before:
                typed.append((index, rule))
        self.check_logic(typed)

    def check_action(self, rule: Rule, path: tuple) -> None:
        present = self.marks_keys(path)
        for action, key in ACTION_KEYS.items():
            if key in present and rule.action != action:
                self.add("IG210", f"rule {rule.id!r}: '{key}' is only read by action {action}, not {rule.action}", path + (key,), key=True)
        if "message" in present and rule.action not in MESSAGE_ACTIONS:
            self.add("IG210", f"rule {rule.id!r}: 'message' is only read by actions block, flag and stop, not {rule.action}", path + ("message",), key=True)
        self.check_output_rule(rule, path)
        if rule.action == "steer":
            if rule.steer is None:
                self.add("IG210", f"rule {rule.id!r}: action steer needs a 'steer:' block (vector, layer, coefficient)", path + ("action",))
            else:
                steer_keys = self.marks_keys(path + ("steer",))
                if "layer" in steer_keys and "layers" in steer_keys:
                    self.add("IG105", f"rule {rule.id!r}: use either 'layer' or 'layers', not both", path + ("steer", "layers"), key=True)
                elif not rule.steer.layers:
                    self.add("IG102", f"rule {rule.id!r}: steer needs 'layer' (or 'layers')", path + ("steer",), key=True)
                if rule.steer.coefficient == 0:
                    self.add("IG105", f"rule {rule.id!r}: a steer coefficient of 0 does nothing", path + ("steer", "coefficient"))
        if rule.action in ("rerank", "drop_documents"):
            if not any(s.type == "vector" for s in self.policy.signals):
                self.add("IG210", f"rule {rule.id!r}: {rule.action} acts on documents, but the policy defines no reranker signal", path + ("action",))

    def check_decode_window(self, signal, path: tuple) -> None:
        """A stream holds back ``output.hold_back`` tokens; a decode probe's
        stop cuts at the start of its window, and the engine may see two
        more tokens before it learns of the stop: the one sampled when the
        window's last token was scored (judged a step later), and the one
        of the step that decided."""
        if self.policy.output.hold_back <= signal.window + 1:
            self.add("IG215", f"{signal.analyzer} signal {signal.name!r} pools {signal.window} generated tokens, but output.hold_back "
                     f"is {self.policy.output.hold_back} (at least {signal.window + 2} needed): a stream may send tokens of "
                     "the window before the rule stops it", path + ("window",), key=True)

    def check_output_rule(self, rule: Rule, path: tuple) -> None:
        if rule.condition is None:
            return
        generated = self.policy.generated_signals()
        read = {name for name, _ in c.signals_in(rule.condition)}
        if not read & generated:
            if rule.action == "stop":
                self.add("IG213", f"rule {rule.id!r}: action stop ends a generation, but the rule reads no signal with span 'generated'", path + ("action",))
            return
        decode = read & self.policy.decode_signals()
        if decode and read & generated - decode:
            self.add("IG213", f"rule {rule.id!r} reads generated text and in-model signals on the generated tokens ({', '.join(sorted(decode))}); "
                     "the engine reads the text and the worker the in-model signals, so a rule reads one kind", path + ("when",))
        if read - generated:
            prompt = ", ".join(sorted(read - generated))
            self.add("IG213", f"rule {rule.id!r} reads the generated text and prompt signals ({prompt}); an output rule reads only 'generated' signals", path + ("when",))
        if decode and not read - decode:
            if rule.action not in DECODE_ACTIONS:
                self.add("IG213", f"rule {rule.id!r} reads in-model signals on the generated tokens, so it can stop, steer or flag, "
                         f"not {rule.action}", path + ("action",))
        elif rule.action not in OUTPUT_ACTIONS:
            self.add("IG213", f"rule {rule.id!r} reads the generated text, so it can only stop or flag, not {rule.action}", path + ("action",))

    def check_template(self, rule: Rule, path: tuple) -> None:
        report = analyze(rule.message)
        if report.error:
            loc = self.marks.at(path)
            style = self.marks.styles.get(path)
            line = loc.line + (report.error_line if style in ("|", ">") else report.error_line - 1)
            self.findings.append(make("IG301", f"rule {rule.id!r}: message template: {report.error}", Location(loc.file, line, loc.col if line == loc.line else 1)))
            return
        for name in report.unknown_variables:
            self.add("IG302", f"rule {rule.id!r}: message uses {name!r}; templates see only policy, rule and signals", path)
        for var, attr in report.unknown_attributes:
            self.add("IG302", f"rule {rule.id!r}: message uses {var}.{attr}; {var} has {', '.join(_template_attrs(var))}", path)
        for name in report.signals:
            if name in self.signals:
                self.used.add(name)
            else:
                self.add("IG303", f"rule {rule.id!r}: message reads signals.{name}, which is not defined{did_you_mean(name, self.signals)}", path)

    # ---------------------------------------------------------- conditions
    def check_condition(self, rule: Rule, path: tuple) -> None:
        when = path + ("when",)
        for name, offset in c.signals_in(rule.condition):
            if name in self.signals:
                self.used.add(name)
        kind = self.type_of(rule.condition, rule, when)
        if kind not in (None, "boolean"):
            self.add("IG203", f"rule {rule.id!r}: condition is a {kind}, not true/false; compare it with a threshold (e.g. {c.unparse(rule.condition)} < 0.5)", when, offset=0)

    def type_of(self, e, rule: Rule, when: tuple) -> str | None:
        """'boolean' | 'number' | 'vector' | None (already reported)."""
        quoted = isinstance(rule.when, str)
        at = (lambda off: dict(offset=off)) if quoted else (lambda off: {})
        if isinstance(e, c.Const):
            return "boolean" if isinstance(e.value, bool) else "number"
        if isinstance(e, (c.Signal, c.Aggregate, c.Quantified)):
            name = e.name if isinstance(e, c.Signal) else e.signal
            signal = self.signals.get(name)
            if signal is None:
                self.used.update(difflib.get_close_matches(name, list(self.signals), n=1, cutoff=0.6))  # meant, not unused
                self.add("IG202", f"rule {rule.id!r}: signal {name!r} is not defined{did_you_mean(name, self.signals)}", when, **at(e.offset))
                return None
            if isinstance(e, c.Signal):
                return signal.type
            if signal.type != "vector":
                self.add("IG203", f"rule {rule.id!r}: {e.fn}() needs a vector signal (reranker), but {name!r} is a {signal.type}; compare it directly", when, **at(e.offset))
                return None
            if isinstance(e, c.Quantified):
                self.check_threshold(signal.value_range, e.value, f"{name}", rule, when, at(e.value_offset))
                return "number" if e.fn == "count" else "boolean"
            return "number"
        if isinstance(e, c.Not):
            return self.expect_boolean(e.operand, rule, when, "not")
        if isinstance(e, c.BoolOp):
            ok = True
            for operand in e.operands:
                ok = self.expect_boolean(operand, rule, when, e.op) is not None and ok
            return "boolean" if ok else None
        # comparison
        lt, rt = self.type_of(e.left, rule, when), self.type_of(e.right, rule, when)
        if lt is None or rt is None:
            return None
        if "vector" in (lt, rt):
            vec = e.left if lt == "vector" else e.right
            self.add("IG203", f"rule {rule.id!r}: {c.unparse(vec)} is a list of document scores; use max({c.unparse(vec)}), min(...), mean(...), count(... > x), any(...) or all(...)", when, **at(vec.offset))
            return None
        if lt != rt:
            self.add("IG203", f"rule {rule.id!r}: cannot compare a {lt} with a {rt} ({c.unparse(e)})", when, **at(e.offset))
            return None
        if lt == "boolean" and e.op not in ("==", "!="):
            self.add("IG203", f"rule {rule.id!r}: booleans can only be compared with == or != ({c.unparse(e)})", when, **at(e.offset))
            return None
        if lt == "number":
            for term, const in ((e.left, e.right), (e.right, e.left)):
                if isinstance(const, c.Const) and not isinstance(term, c.Const):
                    self.check_threshold(self.range_of(term), float(const.value), c.unparse(term), rule, when, at(const.offset))
        return "boolean"

    def expect_boolean(self, e, rule: Rule, when: tuple, context: str) -> str | None:
        kind = self.type_of(e, rule, when)
        if kind is None:
            return None
        if kind != "boolean":
            quoted = isinstance(rule.when, str)
            hint = " (compare it with a threshold)" if kind == "number" else " (aggregate it: max(...), any(... > x))"
            self.add("IG203", f"rule {rule.id!r}: '{context}' needs true/false, but {c.unparse(e)} is a {kind}{hint}", when, **({"offset": e.offset} if quoted else {}))
            return None
        return kind

    def range_of(self, term) -> tuple[float, float] | None:
        if isinstance(term, c.Quantified):
            return (0.0, math.inf)
        name = term.name if isinstance(term, c.Signal) else getattr(term, "signal", None)
        signal = self.signals.get(name)
        return signal.value_range if signal else None

    def check_threshold(self, bounds, value: float, what: str, rule: Rule, when: tuple, at: dict) -> None:
        if bounds is None:
            return
        lo, hi = bounds
        if value < lo or value > hi:
            shown = f"[{_fmt(lo)}, {_fmt(hi)}]" if hi != math.inf else f">= {_fmt(lo)}"
            self.add("IG204", f"rule {rule.id!r}: threshold {_fmt(value)} is outside the range of {what} ({shown})", when, **at)

    # ---------------------------------------------------------- logic
    def var_range(self, var: tuple) -> tuple[float, float]:
        if var[0] == "count":
            return (0.0, math.inf)
        signal = self.signals.get(var[1])
        bounds = signal.value_range if signal else None
        return bounds or satisfiability.UNBOUNDED

    def check_logic(self, rules: list[tuple[int, Rule]]) -> None:
        ranges = self.var_range
        live: list[tuple[int, Rule]] = []
        for index, rule in rules:
            when = ("rules", index, "when")
            if satisfiability.can_be_true(rule.condition, ranges) is False:
                self.add("IG205", f"rule {rule.id!r} can never fire: {c.unparse(rule.condition)} is never true for signals in their ranges", when)
                continue
            if not (isinstance(rule.condition, c.Const) and rule.condition.value is True):
                if satisfiability.can_be_false(rule.condition, ranges) is False:
                    self.add("IG206", f"rule {rule.id!r} always fires: {c.unparse(rule.condition)} holds for every value (write 'when: true' if intended)", when)
            live.append((index, rule))
        seen: dict[tuple[str, str], str] = {}
        for index, rule in live:
            key = (c.unparse(rule.condition), rule.action)
            if key in seen:
                self.add("IG212", f"rule {rule.id!r} repeats rule {seen[key]!r} (same condition, same action)", ("rules", index, "when"))
                continue
            seen[key] = rule.id
            if rule.action == "block":
                continue
            for _, blocker in live:
                if blocker.action == "block" and blocker is not rule and satisfiability.implies(rule.condition, blocker.condition, ranges):
                    self.add("IG207", f"rule {rule.id!r} is shadowed: whenever it fires, block rule {blocker.id!r} fires too", ("rules", index, "when"))
                    break


def _template_attrs(var: str) -> tuple[str, ...]:
    return TEMPLATE_VARIABLES.get(var) or ()


def _where(path: tuple) -> str:
    return describe_path(path)


def _fmt(x: float) -> str:
    return f"{x:g}"


def iter_artifacts(policy: Policy) -> Iterator:
    """Every (artifact, kind, path-in-document, layers) of a policy; kind is
    'heads' or 'vector'."""
    for s in policy.signals:
        heads = getattr(s, "heads", None)
        if isinstance(heads, ArtifactRef):
            yield heads, "heads", ("signals", s.name, "heads"), ()
        vector = getattr(s, "vector", None)
        if isinstance(vector, ArtifactRef):
            yield vector, "vector", ("signals", s.name, "vector"), (s.layer,)
        if isinstance(s, TokenProbeSignal):
            for layer, ref in s.layer_refs():
                yield ref, "vector", ("signals", s.name, "weights"), (layer,)
    for i, rule in enumerate(policy.rules):
        if rule.steer is not None:
            yield rule.steer.vector, "vector", ("rules", i, "steer", "vector"), rule.steer.layers

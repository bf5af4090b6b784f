"""Decisions: evaluate compiled policies for one request, given signal values.

Imported by the vLLM worker, so it depends only on the standard library,
``jinja2`` (sandboxed message templates), ``innerguard.engine.plan`` and the
language's vocabulary (``innerguard.engine.policy.vocabulary``: the actions'
strength, the template variables and sandbox); never on yaml or jsonschema.

Usage::

    evaluator = Evaluator(plan.policies)          # once per plan: compiles rules
    verdict = evaluator.evaluate(signals, request={"tags": ["rag"], "tenant": "acme"})

``signals`` maps fully-qualified signal names (``"<policy>.<signal>"``) to a
float, a bool, or a list of floats (document relevance). A value that is
missing, ``None``, NaN, or a ``SignalError`` (or any exception instance) counts
as *failed*.

Semantics (documented in docs/policy-language.md):

- Every rule of a policy is evaluated. Conditions use three-valued logic: a
  comparison on a failed signal is *unknown*; ``false and unknown`` is false,
  ``true or unknown`` is true, so a result never depends on evaluation order.
- A rule that is *unknown* because a signal failed triggers the policy's
  ``on_error``: ``fail-closed`` → the policy decides ``block``;
  ``fail-open`` → the rule does not fire. Either way ``Decision.error`` says
  which rule and which signals. A fail-closed block's message says the
  policy could not be evaluated (never the failed rule's own message, which
  would report a detection); a block rule that did fire still decides, with
  its message. An aggregate over zero documents
  (``max(relevance)`` with no documents) is unknown but not an error: the
  rule simply does not fire.
- A policy's decision is its strongest firing rule: ACTION_RANK
  (block > steer > drop_documents > rerank > flag > allow), then the rule's
  ``priority`` (higher first), then file order.
- Modes: ``enforce`` applies the decision; ``warn`` applies ``flag`` instead
  of any stronger action (``rule_action`` keeps what the rule said);
  ``shadow`` computes and records the decision but never applies it.
- The verdict's action is the strongest *applied* decision, ties broken by
  the policy's ``priority`` (higher first), then its name. Effects are
  collected from all applied decisions: every firing steer rule (composed in
  the order of ``Verdict.steers``: policy priority, rule priority, policy
  name, file order — vectors on one layer are summed), flags and document
  actions. When the action is ``block`` nothing is generated.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from jinja2 import Template, UndefinedError

from innerguard.engine.plan import PolicyProgram
from innerguard.engine.policy.vocabulary import ACTION_RANK, TEMPLATE_VARIABLES, template_environment

MAX_MESSAGE_CHARS = 2000
ERROR_BLOCK_MESSAGE = "This request was blocked because policy {policy} could not be evaluated."
FALLBACK_MESSAGE = "This request was blocked by policy {policy} (rule {rule})."


class SignalError:
    """An analyzer failure, as a signal value. ``str()`` is the reason."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __str__(self) -> str:
        return self.reason

    def __repr__(self) -> str:
        return f"SignalError({self.reason!r})"


# ---------------------------------------------------------------- templates

_ENV = template_environment()
_TEMPLATE_CACHE: dict[str, Any] = {}


def _direct_renderer(template: str) -> Callable[[Mapping[str, Any]], str] | None:
    """Most messages are text with ``{{ policy.name }}``-style lookups, maybe
    piped through ``round(n)``. For those, skip Jinja's per-render machinery
    (~8 µs) and join strings directly, with the same result: ``str()`` of the
    dict item, ``round(value, n)``, and an ``UndefinedError`` for a missing
    item. Anything else (other filters, tags, names) goes through Jinja."""
    from jinja2 import nodes

    try:
        tree = _ENV.parse(template)
    except Exception:
        return None
    parts: list[Any] = []
    for node in tree.body:
        if not isinstance(node, nodes.Output):
            return None
        for item in node.nodes:
            if isinstance(item, nodes.TemplateData):
                parts.append(item.data)
                continue
            precision = None
            if isinstance(item, nodes.Filter) and item.name == "round" and not item.kwargs and item.dyn_args is None and item.dyn_kwargs is None:
                if len(item.args) > 1 or (item.args and not (isinstance(item.args[0], nodes.Const) and type(item.args[0].value) is int)):
                    return None
                precision = item.args[0].value if item.args else 0
                item = item.node
            if not (isinstance(item, nodes.Getattr) and isinstance(item.node, nodes.Name)
                    and item.node.name in TEMPLATE_VARIABLES and not item.attr.startswith("_") and not hasattr(dict, item.attr)):
                return None
            parts.append((item.node.name, item.attr, precision))

    def render(variables: Mapping[str, Any]) -> str:
        out = []
        for part in parts:
            if part.__class__ is str:
                out.append(part)
                continue
            var, attr, precision = part
            try:
                value = variables[var][attr]
            except (KeyError, TypeError):
                raise UndefinedError(f"{var!r} has no attribute {attr!r}") from None
            if precision is not None:
                value = round(value, precision)  # Jinja's round(), method "common"
            out.append(str(value))
        return "".join(out)
    return render


def render_message(template: str, *, policy: Mapping[str, Any], rule: Mapping[str, Any], signals: Mapping[str, Any]) -> str:
    """Render a message template with only the documented variables. Raises
    jinja2 errors (``TemplateError``, ``SecurityError``, ``UndefinedError``)
    on bad templates.

    The context is built with ``shared=True``: the template sees exactly
    ``policy``, ``rule`` and ``signals`` and none of Jinja's default globals
    (range, cycler, namespace, ...). It also halves the rendering time."""
    cached = _TEMPLATE_CACHE.get(template)
    if cached is None:
        if len(_TEMPLATE_CACHE) > 4096:
            _TEMPLATE_CACHE.clear()
        cached = _TEMPLATE_CACHE[template] = _direct_renderer(template) or _ENV.from_string(template)
    variables = {"policy": policy, "rule": rule, "signals": signals}
    if not isinstance(cached, Template):
        text = cached(variables)
    else:
        text = "".join(cached.root_render_func(cached.new_context(variables, shared=True)))
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


# ---------------------------------------------------------------- results
# Results are NamedTuples, not frozen dataclasses: they are built for every
# request, and a frozen dataclass's __init__ costs about three times more.
# They are just as immutable.

class RuleHit(NamedTuple):
    """A rule that fired. One object per rule, made once by the Evaluator."""

    policy: str
    rule: str
    action: str
    priority: int
    params: Mapping[str, Any]


class Decision(NamedTuple):
    policy: str
    version: str
    revision: str
    mode: str
    priority: int
    action: str  # what this policy decides (after warn/on_error); "allow" when nothing fired
    rule: str | None  # the rule that determined ``action``
    rule_action: str  # that rule's own action (differs from ``action`` in warn mode)
    applied: bool  # False in shadow mode
    hits: tuple[RuleHit, ...]  # every rule that fired, strongest first
    signals: Mapping[str, Any]  # the values this policy read, by qualified name
    message: str | None = None
    error: str | None = None


class Verdict(NamedTuple):
    action: str
    policy: str | None  # the policy whose decision set ``action``
    rule: str | None
    message: str | None
    steers: tuple[RuleHit, ...]  # applied steer rules, in composition order
    flags: tuple[RuleHit, ...]  # applied flags (including warn-mode ones); params["message"] is rendered
    documents: tuple[RuleHit, ...]  # applied rerank / drop_documents rules
    decisions: tuple[Decision, ...]  # one per selected policy, shadow included


# ---------------------------------------------------------------- conditions

Fn = Callable[[Mapping[str, Any]], Any]
_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


def _failed(value: Any, kind: str = "scalar") -> bool:
    """A value the analyzer should not have produced for this use: missing,
    an error, NaN, or the wrong shape (a list where a number is read)."""
    if kind == "vector":
        v = _vector_value(value)
        return v is None or any(_failed(x) for x in v)
    t = value.__class__
    if t is float:
        return value != value
    if t is bool or t is int:
        return False
    return value is None or _scalar_slow(value) is None


def _scalar_slow(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if type(v).__name__ == "bool_":  # numpy bool
        return bool(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and not isinstance(v, (list, tuple, dict, str)) else None


def _scalar(key: str) -> Fn:
    def value(s):
        v = s.get(key)
        t = v.__class__
        if t is float:
            return v if v == v else None
        if t is bool or t is int:
            return v
        return None if v is None else _scalar_slow(v)
    return value


def _vector_value(v: Any) -> list | tuple | None:
    if v.__class__ is list or v.__class__ is tuple:
        return v
    if v is None or isinstance(v, (SignalError, BaseException, str, bytes, dict)):
        return None
    tolist = getattr(v, "tolist", None)  # numpy arrays, tensors
    if tolist is None:
        return None
    out = tolist()
    return out if isinstance(out, list) else None


def _vector(key: str) -> Fn:
    def value(s):
        v = s.get(key)
        if v.__class__ is list or v.__class__ is tuple:
            return v
        return _vector_value(v)
    return value


def _aggregate(fn: str, key: str) -> Fn:
    get = _vector(key)
    reduce = {"max": max, "min": min, "mean": lambda xs: math.fsum(xs) / len(xs)}[fn]

    def value(s):
        v = get(s)
        if not v:
            return None  # failed, or no documents: unknown
        try:
            if any(x != x for x in v):  # NaN: the analyzer failed
                return None
            r = float(reduce(v))
        except (TypeError, ValueError):
            return None
        return r if r == r else None
    return value


def _quantified(fn: str, key: str, cmp: str, threshold: float) -> Fn:
    get = _vector(key)
    test = _CMP[cmp]

    def value(s):
        v = get(s)
        if v is None:
            return None
        try:
            if any(x != x for x in v):
                return None
            n = sum(1 for x in v if test(x, threshold))
        except TypeError:
            return None
        if fn == "count":
            return n
        if fn == "any":
            return n > 0
        return n == len(v)  # all(): true for zero documents, like Python's all()
    return value


def _compile(node: Mapping[str, Any], qualify: Callable[[str], str]) -> Fn:
    op = node["op"]
    if op == "const":
        c = node["value"]
        return lambda s: c
    if op == "signal":
        return _scalar(qualify(node["name"]))
    if op in ("max", "min", "mean"):
        return _aggregate(op, qualify(node["signal"]))
    if op in ("any", "all", "count"):
        return _quantified(op, qualify(node["signal"]), node["cmp"], node["value"])
    args = [_compile(a, qualify) for a in node["args"]]
    if op in _CMP:
        test = _CMP[op]
        left, right = args
        if node["args"][1]["op"] == "const":
            c = node["args"][1]["value"]

            def compare_const(s):
                v = left(s)
                return None if v is None else test(v, c)
            return compare_const

        def compare(s):
            a = left(s)
            if a is None:
                return None
            b = right(s)
            return None if b is None else test(a, b)
        return compare
    if op == "not":
        (inner,) = args

        def negate(s):
            v = inner(s)
            return None if v is None else not v
        return negate
    if op == "and":
        def conj(s):
            unknown = False
            for f in args:
                v = f(s)
                if v is None:
                    unknown = True
                elif not v:
                    return False
            return None if unknown else True
        return conj
    if op == "or":
        def disj(s):
            unknown = False
            for f in args:
                v = f(s)
                if v is None:
                    unknown = True
                elif v:
                    return True
            return None if unknown else False
        return disj
    raise ValueError(f"unknown condition operator {op!r}")


def condition_signals(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, "scalar" | "vector") for every signal a condition tree reads;
    names as written (short or qualified)."""
    if "name" in node:
        return [(node["name"], "scalar")]
    if "signal" in node:
        return [(node["signal"], "vector")]
    out: list[tuple[str, str]] = []
    for arg in node.get("args", ()):
        out += condition_signals(arg)
    return out


def compile_condition(node: Mapping[str, Any], policy: str) -> Fn:
    """A function ``signals -> True | False | None`` (None = unknown)."""
    return _compile(node, lambda name: name if "." in name else f"{policy}.{name}")


# ---------------------------------------------------------------- evaluation

class _Rule:
    __slots__ = ("id", "action", "rank", "priority", "index", "params", "test", "signals", "hit", "template", "context")

    def __init__(self, policy: str, index: int, rule, qualify):
        params = dict(rule.params)
        self.id, self.action, self.index, self.params = rule.id, rule.action, index, params
        self.rank = ACTION_RANK[rule.action]
        self.priority = int(params.get("priority", 0))
        self.test = _compile(rule.condition, qualify)
        # (qualified name, "scalar" | "vector")
        self.signals = tuple(dict.fromkeys((qualify(n), kind) for n, kind in condition_signals(rule.condition)))
        self.hit = RuleHit(policy, rule.id, rule.action, self.priority, params)
        self.template = params.get("message")
        self.context = {"id": rule.id, "action": rule.action}  # the template's ``rule``

    def strength(self) -> tuple:
        return (-self.rank, -self.priority, self.index)


class _Policy:
    __slots__ = ("program", "rules", "by_id", "signals", "context", "selector", "short", "order", "applied", "warn", "fail_closed", "refusal")

    def __init__(self, program: PolicyProgram, phase: str = "prompt"):
        self.program = program
        qualify = lambda name: name if "." in name else f"{program.name}.{name}"  # noqa: E731
        output = phase != "prompt"
        self.rules = tuple(_Rule(program.name, i, r, qualify) for i, r in enumerate(program.rules)
                           if _phase(r.params) == phase)
        self.by_id = {r.id: r for r in self.rules}
        read = [] if output else list(program.signals)
        for rule in self.rules:
            read += [s for s, _ in rule.signals if s not in read]
        self.signals = tuple(read)
        prefix = program.name + "."
        self.short = {s: s[len(prefix):] if s.startswith(prefix) else s for s in self.signals}
        self.context = {"name": program.name, "version": program.version, "mode": program.mode}
        self.selector = {k: frozenset(v) for k, v in (program.selector or {}).items() if v is not None}
        self.order = 0  # set by the Evaluator: position by (priority desc, name)
        self.applied = program.mode != "shadow"
        self.warn = program.mode == "warn"
        self.fail_closed = program.on_error == "fail-closed"
        self.refusal = "stop" if output else "block"  # what failing closed does in this phase

    def selects(self, request: Mapping[str, Any] | None) -> bool:
        return selector_matches(self.selector, request)


PHASES = ("prompt", "output", "decode")


def _phase(params: Mapping[str, Any]) -> str:
    """Which evaluator a compiled rule belongs to (see ``Evaluator``)."""
    if not params.get("output"):
        return "prompt"
    return "decode" if params.get("decode") else "output"


def selector_matches(selector: Mapping[str, Any], request: Mapping[str, Any] | None) -> bool:
    """A policy's ``applies_to`` against a request's ``tags``/``tenant``/``route``:
    every key given must match (tags: any one of them); no keys = all requests."""
    request = request or {}
    for key, allowed in selector.items():
        if allowed is None:
            continue
        if key == "tags":
            if set(allowed).isdisjoint(request.get("tags") or ()):
                return False
        elif key in ("tenants", "routes"):
            if request.get(key[:-1]) not in allowed:
                return False
        elif key != "all":
            return False  # a selector key we do not understand never matches silently
    return True


class Evaluator:
    """Compiles a policy set's rules once; ``evaluate`` runs per request.

    ``phase``: ``"prompt"`` evaluates the rules decided at prefill (in the
    worker); ``"output"`` the output rules on the generated text, which the
    engine evaluates as tokens arrive; ``"decode"`` the output rules on
    signals the model computes for each generated token (in the worker)."""

    def __init__(self, programs: Iterable[PolicyProgram], phase: str = "prompt"):
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
        policies = [_Policy(p, phase) for p in programs]
        # Verdict ties: policy priority (higher first), then name.
        for order, policy in enumerate(sorted(policies, key=lambda p: (-p.program.priority, p.program.name))):
            policy.order = order
        self.policies = tuple(policies)
        self._by_name = {p.program.name: p for p in policies}

    @property
    def signals(self) -> tuple[str, ...]:
        """Every qualified signal name some policy reads."""
        return tuple(dict.fromkeys(s for p in self.policies for s in p.signals))

    def evaluate(self, signals: Mapping[str, Any], request: Mapping[str, Any] | None = None) -> Verdict:
        decide = self._decide
        decisions = tuple([decide(p, signals) for p in self.policies if not p.selector or p.selects(request)])
        return self._combine(decisions)

    # one policy
    def _decide(self, policy: _Policy, signals: Mapping[str, Any]) -> Decision:
        program = policy.program
        hits: list[_Rule] = []
        errors = None
        for rule in policy.rules:
            result = rule.test(signals)
            if result is None:
                failed = [s for s, kind in rule.signals if _failed(signals.get(s), kind)]
                if failed:
                    errors = errors or []
                    errors.append((rule, failed))
            elif result:
                hits.append(rule)
        get = signals.get
        read = {s: get(s) for s in policy.signals}
        if not hits and errors is None:
            return Decision(program.name, program.version, program.revision, program.mode, program.priority,
                            "allow", None, "allow", policy.applied, (), read)
        if len(hits) > 1:
            hits.sort(key=_Rule.strength)
        error = None
        if errors:
            rule, failed = errors[0]
            reasons = ", ".join(f"{s}: {signals.get(s) if s in signals else 'missing'}" for s in failed)
            error = f"rule {rule.id} could not be evaluated ({reasons}); {program.on_error}"
        # A block rule that fired is the reason even when another rule failed:
        # the client is told what was detected, not that something else broke.
        failed_closed = bool(errors) and policy.fail_closed and not (hits and hits[0].action == policy.refusal)
        if failed_closed:
            deciding, rule_action, action = errors[0][0], policy.refusal, policy.refusal
        elif hits:
            deciding = hits[0]
            rule_action = action = deciding.action
        else:
            deciding, rule_action, action = None, "allow", "allow"
        if policy.warn and action != "allow" and action != "flag":
            action = "flag"
        message = (self._message(policy, deciding, rule_action, read, failed_closed)
                   if action in ("block", "flag", "stop") else None)
        return Decision(
            program.name, program.version, program.revision, program.mode, program.priority,
            action, deciding.id if deciding else None, rule_action, policy.applied,
            tuple([r.hit for r in hits]), read, message, error,
        )

    @staticmethod
    def _message(policy: _Policy, rule: _Rule | None, rule_action: str, read: Mapping[str, Any],
                 failed_closed: bool = False) -> str | None:
        name = policy.program.name
        if rule is None:
            return None
        if failed_closed:
            # The rule could not be evaluated, so it did not fire: its own
            # message would report a detection that never happened.
            return ERROR_BLOCK_MESSAGE.format(policy=name)
        template = rule.template
        if not template:
            return FALLBACK_MESSAGE.format(policy=name, rule=rule.id) if rule_action == "block" else None
        try:
            short = policy.short
            return render_message(template, policy=policy.context, rule=rule.context, signals={short[k]: v for k, v in read.items()})
        except Exception:  # a template that fails at request time must not fail the request
            return FALLBACK_MESSAGE.format(policy=name, rule=rule.id) if rule_action == "block" else None

    def _rendered_flag(self, decision: Decision, hit: RuleHit) -> RuleHit:
        """A flag hit whose ``params["message"]`` is the rendered message, not
        the template."""
        if not hit.params.get("message"):
            return hit
        if decision.rule == hit.rule and decision.action == "flag" and decision.message is not None:
            message = decision.message
        else:
            policy = self._by_name[hit.policy]
            rule = policy.by_id[hit.rule]
            message = self._message(policy, rule, "flag", decision.signals)
        return RuleHit(hit.policy, hit.rule, hit.action, hit.priority, {**hit.params, "message": message})

    def _combine(self, decisions: tuple[Decision, ...]) -> Verdict:
        winner = None
        best = (-1, 0)
        steers: list[tuple] = []
        flags: list[RuleHit] = []
        documents: list[RuleHit] = []
        order = {p.program.name: p.order for p in self.policies} if len(decisions) > 1 else None
        for d in decisions:
            if not d.applied or (d.action == "allow" and not d.hits):
                continue
            position = order[d.policy] if order else 0
            key = (ACTION_RANK[d.action], -position)
            if key > best:
                best, winner = key, d
            if d.mode == "warn":
                if d.action == "flag":
                    flags.append(RuleHit(d.policy, d.rule, "flag", d.hits[0].priority if d.hits else 0, {"message": d.message} if d.message else {}))
                continue
            for hit in d.hits:
                action = hit.action
                if action == "steer":
                    steers.append((position, -hit.priority, hit))
                elif action == "flag":
                    flags.append(self._rendered_flag(d, hit))
                elif action == "rerank" or action == "drop_documents":
                    documents.append(hit)
        if len(steers) > 1:
            steers.sort(key=lambda t: t[:2])
        steer_hits = tuple([t[2] for t in steers])
        if winner is None or winner.action == "allow":
            return Verdict("allow", None, None, None, steer_hits, tuple(flags), tuple(documents), decisions)
        return Verdict(winner.action, winner.policy, winner.rule, winner.message, steer_hits, tuple(flags), tuple(documents), decisions)


def evaluate(programs: Iterable[PolicyProgram], signals: Mapping[str, Any], request: Mapping[str, Any] | None = None) -> Verdict:
    """One-off convenience; build an ``Evaluator`` once for repeated use."""
    return Evaluator(programs).evaluate(signals, request)

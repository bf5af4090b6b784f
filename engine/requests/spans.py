"""Per policy, which prompt tokens are trusted instruction and which are
untrusted data, following every span form the policy schema allows.

A prompt is tokenized once (``render``); each policy's ``spans`` is then
resolved over that one rendering (``policy_ranges``):

- chat requests: ``roles`` pick messages by role; ``begin``/``end`` markers
  are searched in the rendered conversation and stay visible to the model;
  without ``trusted``, the roles system/developer/user are trusted.
  Default deny: whatever the client wrote that the policy does not trust is
  untrusted (every other message, assistant turns included, and foreign
  text the template printed); ``untrusted`` can only add to that.
- raw prompts: the markers of every selected policy (and the default
  ``<untrusted>``/``</untrusted>``) are removed before tokenizing; a policy's
  untrusted part is the text its markers enclosed (default markers when it
  names none), its trusted part the text its trusted markers enclosed, or
  else everything outside its untrusted part. With trusted markers, text
  outside both kinds of markers is untrusted.

A chat role is template structure, so only known roles are accepted: those
of ``spans.KNOWN_ROLES`` and any role a policy of the plan names.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from innerguard.engine import spans as span_lib
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.model import GuardRequest, RequestError

DEFAULT_MARKERS = (span_lib.OPEN_MARKER, span_lib.CLOSE_MARKER)
Ranges = tuple[span_lib.Range, ...]


def marker_pairs(policies: Sequence[PolicyProgram]) -> list[tuple[str, str]]:
    pairs = [DEFAULT_MARKERS]
    for policy in policies:
        for part in ("trusted", "untrusted"):
            pair = _markers(policy.spans.get(part))
            if pair:
                pairs.append(pair)
    return list(dict.fromkeys(pairs))


class Rendering:
    """One prompt, tokenized once, with what span resolution needs."""

    def __init__(self, base: span_lib.PromptSpans, marked: Mapping[tuple[str, str], Ranges] | None = None):
        self.base = base
        self.marked = dict(marked or {})  # raw prompts: token ranges each removed marker pair enclosed

    @property
    def input_ids(self) -> tuple[int, ...]:
        return self.base.input_ids


def allowed_roles(plan: Plan) -> tuple[str, ...]:
    """The chat roles a request may use: the known ones and every role a
    policy of ``plan`` names (the operator's way to allow another). Once per
    plan revision: it is asked for every request."""
    roles = _ALLOWED_ROLES.get(plan.bundle_hash)
    if roles is None:
        if len(_ALLOWED_ROLES) > 8:  # plans of past reloads
            _ALLOWED_ROLES.clear()
        roles = _ALLOWED_ROLES[plan.bundle_hash] = _named_roles(plan)
    return roles


_ALLOWED_ROLES: dict[str, tuple[str, ...]] = {}  # bundle hash -> roles


def _named_roles(plan: Plan) -> tuple[str, ...]:
    named = []
    for policy in plan.policies:
        for part in ("trusted", "untrusted"):
            named.extend((policy.spans.get(part) or {}).get("roles") or ())
    for spec in plan.analyzers:
        for part in ("documents", "query"):
            value = spec.params.get(part)
            if isinstance(value, Mapping):
                named.extend(value.get("roles") or ())
    return tuple(dict.fromkeys([*span_lib.KNOWN_ROLES, *(r for r in named if isinstance(r, str))]))


def render(tokenizer: Any, request: GuardRequest, policies: Sequence[PolicyProgram],
           chat: span_lib.PromptSpans | span_lib.SpanError | None = None,
           roles: Sequence[str] = span_lib.KNOWN_ROLES) -> Rendering:
    """``chat``: the request's messages already resolved (``chat_spans_many``);
    ``roles``: the accepted chat roles (``allowed_roles``)."""
    try:
        if isinstance(chat, span_lib.SpanError):
            raise chat
        if request.messages is not None:
            return Rendering(chat or span_lib.chat_spans(tokenizer, request.messages, allowed_roles=roles))
        if not isinstance(request.prompt, str):
            raise RequestError("'prompt' must be a string")
        pairs = marker_pairs(policies)
        clean, marked = span_lib.strip_markers(request.prompt, pairs)
        base = span_lib.tokenized(tokenizer, clean)
        return Rendering(base, {pair: span_lib.token_ranges(base.offsets, ranges) for pair, ranges in marked.items()})
    except span_lib.SpanError as exc:
        raise RequestError(str(exc)) from None


def check_unrendered(request: GuardRequest, policies: Sequence[PolicyProgram],
                     roles: Sequence[str] = span_lib.KNOWN_ROLES) -> None:
    """What ``render`` refuses before it reaches the template or the
    tokenizer (a role not accepted, content that is not text, a prompt that
    is not a string, unbalanced markers), for a request that is not rendered."""
    try:
        if request.messages is not None:
            span_lib.check_roles(request.messages, roles)
            for i, message in enumerate(request.messages):
                span_lib.text_content(message.get("content"), i, message.get("role"))
            return
        if not isinstance(request.prompt, str):
            raise RequestError("'prompt' must be a string")
        span_lib.strip_markers(request.prompt, marker_pairs(policies))
    except span_lib.SpanError as exc:
        raise RequestError(str(exc)) from None


def policy_ranges(rendering: Rendering, spans: Mapping[str, Any]) -> tuple[Ranges, Ranges]:
    """(trusted, untrusted) token ranges of one policy, disjoint."""
    base = rendering.base
    trusted_spec, untrusted_spec = spans.get("trusted") or {}, spans.get("untrusted") or {}
    if not base.messages:  # a raw prompt
        untrusted = rendering.marked.get(_markers(untrusted_spec) or DEFAULT_MARKERS, ())
        pair = _markers(trusted_spec)
        if pair:
            trusted = rendering.marked.get(pair, ())
            untrusted = (*untrusted, *span_lib.complement(trusted, len(base.input_ids)))
        else:
            outside = span_lib.complement(untrusted, len(base.input_ids))
            trusted = tuple(outside)
        return span_lib.disjoint(len(base.input_ids), trusted, untrusted)
    trusted_roles = tuple(trusted_spec.get("roles") or ()) or span_lib.TRUSTED_ROLES
    if _markers(trusted_spec):
        trusted = _between(base, _markers(trusted_spec))
    else:
        trusted = tuple((m.start, m.end) for m in base.messages if m.role in trusted_roles)
    if _markers(untrusted_spec):
        named = _between(base, _markers(untrusted_spec))
    elif untrusted_spec.get("roles"):
        named = tuple((m.start, m.end) for m in base.messages if m.role in untrusted_spec["roles"])
    else:
        named = ()
    # Default deny: what the client wrote and this policy does not trust.
    written = [(m.start, m.end) for m in base.messages] + list(base.foreign)
    length = len(base.input_ids)
    untrusted = (*named, *base.foreign, *span_lib.minus(written, trusted, length))
    return span_lib.disjoint(length, trusted, untrusted)


def trusted_roles(policy: PolicyProgram) -> tuple[str, ...]:
    roles = (policy.spans.get("trusted") or {}).get("roles")
    return tuple(roles) if roles else span_lib.TRUSTED_ROLES


def _markers(spec: Mapping[str, Any] | None) -> tuple[str, str] | None:
    if spec and spec.get("begin") and spec.get("end"):
        return (str(spec["begin"]), str(spec["end"]))
    return None


def _between(base: span_lib.PromptSpans, pair: tuple[str, str]) -> Ranges:
    """Chat: tokens strictly between each begin/end marker pair in the
    rendered conversation (the markers stay in the prompt)."""
    chars, cursor = [], 0
    while True:
        at = base.text.find(pair[0], cursor)
        if at < 0:
            break
        close = base.text.find(pair[1], at + len(pair[0]))
        if close < 0:
            raise RequestError(f"{pair[0]!r} at character {at} of the rendered conversation is never closed with {pair[1]!r}")
        chars.append((at + len(pair[0]), close))
        cursor = close + len(pair[1])
    return span_lib.token_ranges(base.offsets, chars)

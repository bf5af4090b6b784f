"""From a caller's request to what the worker needs: token ids, the policies
that apply, their token spans and the text signals computed here, outside
the model. A bad request becomes a ``PreparedRequest`` with an ``error``; it
is never sent, and the rest of the batch goes on."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from innerguard.engine import spans as span_lib
from innerguard.engine import textmatch
from innerguard.engine.errors import InnerguardError
from innerguard.engine.decide import selector_matches
from innerguard.engine.plan import Plan, PolicyProgram, encode_request_args


class RequestError(InnerguardError):
    """One request's arguments are wrong; only that request fails."""


@dataclass(frozen=True)
class GuardRequest:
    """What a caller asks for. Exactly one of ``messages`` (OpenAI-style chat)
    or ``prompt`` (raw text, untrusted parts between ``<untrusted>`` markers).
    ``policies=None`` selects by ``tags`` and the policies' selectors;
    ``policies=()`` asks for no guard at all."""

    id: str
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | None = None
    policies: tuple[str, ...] | None = None
    tags: tuple[str, ...] = ()
    tenant: str | None = None
    route: str | None = None
    max_tokens: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], default_id: str) -> "GuardRequest":
        """The batch-file contract: ``messages``, or ``instruction`` (trusted,
        the system message) plus ``data`` (untrusted, the user message)."""
        if not isinstance(row, Mapping):
            raise RequestError("a request must be a JSON object")
        if "__error__" in row:  # a reader could not parse this row
            raise RequestError(str(row["__error__"]))
        messages = row.get("messages")
        if messages is None and ("instruction" in row or "data" in row):
            messages = [
                {"role": "system", "content": row.get("instruction", "")},
                {"role": "user", "content": row.get("data", "")},
            ]
        if messages is None and "prompt" not in row:
            raise RequestError("request has neither 'messages' nor 'instruction'/'data' nor 'prompt'")
        if messages is not None and (
            not isinstance(messages, list)
            or not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise RequestError("'messages' must be a list of objects with a 'role' and a 'content'")
        policies = row.get("policies")
        if policies is not None and (
            not isinstance(policies, list) or not all(isinstance(p, str) for p in policies)
        ):
            raise RequestError("'policies' must be a list of policy names")
        max_tokens = row.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise RequestError("'max_tokens' must be a positive integer")
        return cls(
            id=str(row.get("id", default_id)),
            messages=tuple(messages) if messages is not None else None,
            prompt=row.get("prompt"),
            policies=tuple(policies) if policies is not None else None,
            tags=tuple(row.get("tags") or ()),
            tenant=row.get("tenant"),
            route=row.get("route"),
            max_tokens=max_tokens,
        )


@dataclass(frozen=True)
class Calibration:
    """The reranker's content-free pass: the same prompt with the query
    replaced by "N/A". It shares the request's cache salt, so the documents
    before the query are computed once (prefix cache) and their captured K is
    reused by the worker."""

    prompt_token_ids: tuple[int, ...]
    extra_args: dict[str, Any]


@dataclass(frozen=True)
class PreparedRequest:
    request: GuardRequest
    prompt_token_ids: tuple[int, ...] = ()
    policies: tuple[PolicyProgram, ...] = ()
    cache_salt: str | None = None
    error: str | None = None
    text_signals: dict[str, bool] = field(default_factory=dict)
    calibration: Calibration | None = None
    key: str | None = None  # the id the worker reports this request's result under
    args: dict[str, Any] | None = None  # the guard's arguments; None: unguarded

    @property
    def extra_args(self) -> dict[str, str] | None:
        """``SamplingParams.extra_args`` (or an HTTP body's ``vllm_xargs``)."""
        return encode_request_args(self.args) if self.args is not None else None


def select_policies(plan: Plan, request: GuardRequest) -> tuple[PolicyProgram, ...]:
    by_name = {p.name: p for p in plan.policies}
    if request.policies is not None:
        unknown = [n for n in request.policies if n not in by_name]
        if unknown:
            raise RequestError(
                f"unknown policy {unknown[0]!r}",
                hint=f"loaded policies: {', '.join(sorted(by_name)) or 'none'}",
            )
        return tuple(by_name[n] for n in dict.fromkeys(request.policies))
    wanted = {"tags": request.tags, "tenant": request.tenant, "route": request.route}
    return tuple(p for p in plan.policies if selector_matches(p.selector, wanted))


def prepare(plan: Plan, request: GuardRequest, tokenizer) -> PreparedRequest:
    try:
        return _prepare(plan, request, tokenizer)
    except InnerguardError as exc:
        return PreparedRequest(request=request, error=str(exc))


def _prepare(plan: Plan, request: GuardRequest, tokenizer) -> PreparedRequest:
    policies = select_policies(plan, request)
    base = _token_spans(tokenizer, request, trusted_roles=span_lib.TRUSTED_ROLES)
    if not policies:
        return PreparedRequest(request=request, prompt_token_ids=base.input_ids)
    spans: dict[str, dict[str, list[list[int]]]] = {}
    by_roles = {span_lib.TRUSTED_ROLES: base}
    for policy in policies:
        roles = _trusted_roles(policy)
        if roles not in by_roles:
            by_roles[roles] = _token_spans(tokenizer, request, trusted_roles=roles)
        found = by_roles[roles]
        spans[policy.name] = {
            "instruction": [list(r) for r in found.trusted],
            "data": [list(r) for r in found.untrusted],
        }
    text_signals = _text_signals(plan, policies, request)
    key = f"{request.id}#{uuid.uuid4().hex[:12]}"
    extra = {
        "id": key,
        "policies": [p.name for p in policies],
        "spans": spans,
        "text_signals": text_signals,
    }
    calibration = None
    rerank = _rerank_spans(plan, policies, base, tokenizer)
    if rerank:
        extra["rerank"] = rerank
        calibration = _calibration(base.input_ids, rerank, key, extra["policies"], tokenizer)
    return PreparedRequest(
        request=request,
        prompt_token_ids=base.input_ids,
        policies=policies,
        # A unique salt keeps guarded prompts out of the prefix cache, so the
        # hooks see every prompt token's K (cached tokens are never recomputed).
        cache_salt=f"innerguard-{uuid.uuid4().hex}",
        text_signals=text_signals,
        calibration=calibration,
        key=key,
        args=extra,
    )


CONTENT_FREE_QUERY = "N/A"


def _rerank_spans(plan: Plan, policies: Sequence[PolicyProgram], found: span_lib.PromptSpans, tokenizer) -> dict[str, Any]:
    """Per reranker signal: document spans and the query span, from roles."""
    wanted = {s for p in policies for s in p.signals}
    out: dict[str, Any] = {}
    for spec in plan.analyzers:
        if spec.kind != "reranker" or spec.signal not in wanted:
            continue
        doc_roles = tuple((spec.params.get("documents") or {}).get("roles") or ())
        query_roles = tuple((spec.params.get("query") or {}).get("roles") or ("user",))
        if not doc_roles:
            raise RequestError(f"signal {spec.signal}: documents must be selected by role for in-model reranking")
        documents = [[m.start, m.end] for m in found.messages if m.role in doc_roles and m.end > m.start]
        queries = [m for m in found.messages if m.role in query_roles and m.end > m.start]
        if not documents or not queries:
            raise RequestError(
                f"signal {spec.signal} needs messages with roles {list(doc_roles)} (documents) "
                f"and {list(query_roles)} (query)"
            )
        query = queries[-1]
        if documents[-1][1] > query.start:
            raise RequestError(
                f"signal {spec.signal}: the query ({query.role} message) must come after the documents",
                hint="put the retrieved documents before the question",
            )
        out[spec.signal] = {"documents": documents, "query": [[query.start, query.end]]}
    if len({tuple(v["query"][0]) for v in out.values()}) > 1:
        raise RequestError("reranker signals of one request must share one query")
    return out


def _calibration(ids: Sequence[int], rerank: dict[str, Any], key: str, policies: list[str], tokenizer) -> Calibration:
    start, end = next(iter(rerank.values()))["query"][0]
    content_free = tokenizer.encode(CONTENT_FREE_QUERY, add_special_tokens=False)
    calibration_ids = tuple(ids[:start]) + tuple(content_free) + tuple(ids[end:])
    spans = {signal: {**v, "query": [[start, start + len(content_free)]]} for signal, v in rerank.items()}
    extra = {"id": f"{key}#calibration", "calibration_for": key, "policies": policies, "rerank": spans}
    return Calibration(prompt_token_ids=calibration_ids, extra_args=encode_request_args(extra))


def _token_spans(tokenizer, request: GuardRequest, trusted_roles: Sequence[str]) -> span_lib.PromptSpans:
    if request.messages is not None:
        return span_lib.chat_spans(tokenizer, request.messages, trusted_roles=tuple(trusted_roles))
    if not isinstance(request.prompt, str):
        raise RequestError("'prompt' must be a string")
    return span_lib.marker_spans(tokenizer, request.prompt)


def _trusted_roles(policy: PolicyProgram) -> tuple[str, ...]:
    roles = (policy.spans.get("trusted") or {}).get("roles")
    return tuple(roles) if roles else span_lib.TRUSTED_ROLES


def _request_text(request: GuardRequest, span: str, trusted_roles: Sequence[str]) -> str:
    """The text a text signal reads: the whole prompt, or its trusted or
    untrusted messages."""
    if request.messages is None:
        return request.prompt or ""
    return "\n".join(
        str(m.get("content", ""))
        for m in request.messages
        if span == "prompt" or (m.get("role") in trusted_roles) == (span == "trusted")
    )


def _text_signals(plan: Plan, policies: Sequence[PolicyProgram], request: GuardRequest) -> dict[str, bool]:
    wanted = {s: p for p in policies for s in p.signals}
    values = {}
    for spec in plan.analyzers:
        if spec.kind != "text" or spec.signal not in wanted:
            continue
        params = spec.params
        text = _request_text(request, params.get("span", "prompt"), _trusted_roles(wanted[spec.signal]))
        values[spec.signal] = any(m.matches(text) for m in _matchers(params))
    return values


_compiled: dict[tuple, tuple[textmatch.TextMatcher, ...]] = {}


def _matchers(params: Mapping[str, Any]) -> tuple[textmatch.TextMatcher, ...]:
    case_sensitive = bool(params.get("case_sensitive", False))
    key = (tuple(params.get("keywords") or ()), params.get("pattern"), case_sensitive)
    if key not in _compiled:
        keywords, pattern, _ = key
        found = []
        if keywords:
            found.append(textmatch.keywords(keywords, case_sensitive=case_sensitive))
        if pattern:
            found.append(textmatch.regexes([pattern], case_sensitive=case_sensitive))
        _compiled[key] = tuple(found)
    return _compiled[key]

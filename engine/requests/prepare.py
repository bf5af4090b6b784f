"""From a caller's request to what the worker needs: token ids, the policies
that apply, their token spans, the text signals, the cache salt and the
reranker's calibration pass. ``GuardedLLM`` and ``innerguard serve`` both
prepare through here. A bad request becomes a ``PreparedRequest`` with an
``error``; it is never sent, and the rest of the batch goes on."""
from __future__ import annotations

import hashlib
import json
import uuid
from typing import NamedTuple, Sequence

from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import Plan
from innerguard.engine.spans import chat_spans_many
from innerguard.engine.requests.model import GuardRequest, PreparedRequest
from innerguard.engine.requests.rerank import calibration, rerank_spans
from innerguard.engine.requests.selection import select_policies
from innerguard.engine.requests.spans import allowed_roles, check_unrendered, policy_ranges, render
from innerguard.engine.requests.text_signals import repeat_sources, text_signals


def prepare(plan: Plan, request: GuardRequest, tokenizer, *, share_prefix_cache: bool = False,
            share_token_scores: bool = False, chat=None, token_ids: Sequence[int] | None = None) -> PreparedRequest:
    """``share_prefix_cache``: the workers read K of cached prompt positions
    back from vLLM's KV cache (install info ``reads_kv_cache``);
    ``share_token_scores``: and the token-probe scores of those positions
    (``reads_token_scores``). ``chat``: the request's messages already
    resolved (see ``prepare_many``). ``token_ids``: the prompt as the engine
    already tokenized it (the server); a request no policy applies to is
    then not rendered again, as it has no spans to resolve."""
    try:
        return _prepare(plan, request, tokenizer, CacheSharing(share_prefix_cache, share_token_scores), chat,
                        token_ids)
    except InnerguardError as exc:
        return PreparedRequest(request=request, error=str(exc), bundle_hash=plan.bundle_hash)


def prepare_many(plan: Plan, requests: Sequence[GuardRequest], tokenizer, *,
                 share_prefix_cache: bool = False, share_token_scores: bool = False) -> list[PreparedRequest]:
    """``prepare`` for a batch: every chat request's template is tokenized in
    one tokenizer call (on all cores), not one call per request."""
    chats = iter(chat_spans_many(tokenizer, [r.messages for r in requests if r.messages is not None],
                                 allowed_roles=allowed_roles(plan)))
    return [prepare(plan, r, tokenizer, share_prefix_cache=share_prefix_cache, share_token_scores=share_token_scores,
                    chat=next(chats) if r.messages is not None else None) for r in requests]


class CacheSharing(NamedTuple):
    """What the workers read back for prefix-cached prompt positions (install info)."""
    keys: bool = False  # K, from vLLM's KV cache
    token_scores: bool = False  # token-probe scores, kept by the steps that computed them


def cache_salt(policies, rerank: bool, sharing: CacheSharing, token_signals: frozenset[str] = frozenset(),
               bundle: str = "") -> tuple[str | None, bool]:
    """(salt, shared). A unique salt keeps a request out of the prefix cache, both ways:
    - where the worker cannot read K of cached positions back;
    - for the reranker, whose query Q must be computed (its calibration pass
      shares the salt, so the request reuses exactly that pass);
    - where an enforcing policy may steer: steered K/V in the cache (of the
      prompt, or of generated tokens that a later turn's prompt repeats) must
      never serve another request, nor unsteered K/V a steered one. Shadow
      and warn policies never steer.
    - where a policy reads a token-level probe (``token_signals``: their
      qualified names) and the workers do not keep token scores for cached
      positions: it scores every token of a span, and a cached token is
      never computed again.
    Where they do, requests with token probes share one salt per plan and
    set of probes (``shared``): every block they hit was scored. Every other
    guarded request shares the cache with everyone: the guard points read
    the stream, they do not change it."""
    steers = any(p.mode == "enforce" and rule.action == "steer" for p in policies for rule in p.rules)
    per_token = sorted({name for p in policies for name in p.signals if name in token_signals})
    if rerank or steers or not sharing.keys or (per_token and not sharing.token_scores):
        return f"innerguard-{uuid.uuid4().hex}", False
    if per_token:
        digest = hashlib.sha256(json.dumps([bundle, per_token]).encode()).hexdigest()[:32]
        return f"innerguard-tokens-{digest}", True
    return None, False


def _prepare(plan: Plan, request: GuardRequest, tokenizer, sharing: CacheSharing, chat=None,
             token_ids: Sequence[int] | None = None) -> PreparedRequest:
    policies = select_policies(plan, request)
    if not policies and token_ids is not None:
        # Rendering again would cost the server a second chat template and
        # tokenizer pass per request (as much as vLLM's own) for spans no
        # policy reads; what rendering refuses without the template is still refused.
        check_unrendered(request, policies, allowed_roles(plan))
        return PreparedRequest(request=request, prompt_token_ids=tuple(token_ids), bundle_hash=plan.bundle_hash)
    rendering = render(tokenizer, request, policies, chat, allowed_roles(plan))
    if not policies:
        return PreparedRequest(request=request, prompt_token_ids=rendering.input_ids, bundle_hash=plan.bundle_hash)
    ranges = {p.name: policy_ranges(rendering, p.spans) for p in policies}
    spans = {
        name: {"instruction": [list(r) for r in trusted], "data": [list(r) for r in untrusted]}
        for name, (trusted, untrusted) in ranges.items()
    }
    signals = text_signals(plan, policies, rendering, ranges)
    sources = repeat_sources(plan, policies, rendering, ranges)
    key = f"{request.id}#{uuid.uuid4().hex[:12]}"
    args = {
        "id": key,
        "bundle": plan.bundle_hash,
        "policies": [p.name for p in policies],
        "spans": spans,
        "text_signals": signals,
    }
    rerank = rerank_spans(plan, policies, rendering)
    pass_ = None
    if rerank:
        args["rerank"] = rerank
        pass_ = calibration(rendering.input_ids, rerank, key, args, tokenizer)
    salt, shared = cache_salt(policies, bool(rerank), sharing,
                              frozenset(a.signal for a in plan.analyzers if a.kind == "token_probe"), plan.bundle_hash)
    token_ids = rendering.input_ids
    if request.completion is not None:  # teacher forced: the worker scores these as generated tokens
        args["generated_from"] = len(token_ids)
        token_ids = (*token_ids, *tokenizer.encode(request.completion, add_special_tokens=False))
        # Scores exist only for tokens this request computes: a salt of its own keeps the prefix cache out.
        salt, shared = f"innerguard-{uuid.uuid4().hex}", False
    return PreparedRequest(
        request=request,
        prompt_token_ids=token_ids,
        policies=policies,
        cache_salt=salt,
        shared_salt=shared,
        text_signals=signals,
        repeat_sources=sources,
        calibration=pass_,
        key=key,
        args=args,
        bundle_hash=plan.bundle_hash,
    )

"""From a caller's request to what the worker needs: token ids, the policies
that apply, their token spans, the text signals, the cache salt and the
reranker's calibration pass. ``GuardedLLM`` and ``innerguard serve`` both
prepare through here. A bad request becomes a ``PreparedRequest`` with an
``error``; it is never sent, and the rest of the batch goes on."""
from __future__ import annotations

import uuid

from ..errors import InnerguardError
from ..plan import Plan
from .model import GuardRequest, PreparedRequest
from .rerank import calibration, rerank_spans
from .selection import select_policies
from .spans import policy_ranges, render
from .text_signals import text_signals


def prepare(plan: Plan, request: GuardRequest, tokenizer) -> PreparedRequest:
    try:
        return _prepare(plan, request, tokenizer)
    except InnerguardError as exc:
        return PreparedRequest(request=request, error=str(exc), bundle_hash=plan.bundle_hash)


def _prepare(plan: Plan, request: GuardRequest, tokenizer) -> PreparedRequest:
    policies = select_policies(plan, request)
    rendering = render(tokenizer, request, policies)
    if not policies:
        return PreparedRequest(request=request, prompt_token_ids=rendering.input_ids, bundle_hash=plan.bundle_hash)
    ranges = {p.name: policy_ranges(rendering, p.spans) for p in policies}
    spans = {
        name: {"instruction": [list(r) for r in trusted], "data": [list(r) for r in untrusted]}
        for name, (trusted, untrusted) in ranges.items()
    }
    signals = text_signals(plan, policies, rendering, ranges)
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
    return PreparedRequest(
        request=request,
        prompt_token_ids=rendering.input_ids,
        policies=policies,
        # A unique salt keeps guarded prompts out of the prefix cache, so the
        # hooks see every prompt token's K (cached tokens are never recomputed).
        cache_salt=f"innerguard-{uuid.uuid4().hex}",
        text_signals=signals,
        calibration=pass_,
        key=key,
        args=args,
        bundle_hash=plan.bundle_hash,
    )

"""The install self-check's canary: twin requests under the new plan, sent in
one batch behind an unguarded decoy of another length, in whatever mode the
engine runs (eager, compiled, CUDA graphs, tensor parallel).

The twins carry the same system + user chat under every policy of the plan
that can run on one (not rerankers, which need documents, nor policies whose
spans name other roles). Their known
decision is each other's: a worker that read the wrong rows, lost a request's
arguments or captured nothing would answer differently for one of them, or
not at all. So each twin's result must come back under its own id, list the
policies it was sent, carry every signal of those policies as a finite
value with no analyzer error, count its own prompt tokens, and equal its twin.

Where the worker reads K of prefix-cached positions back from vLLM's KV cache
(install info ``reads_kv_cache``), and token-probe scores of those positions
(``reads_token_scores``), one longer prompt is also sent twice under a salt
of its own, the second time served from the cache: both must decide alike
(``kv_pair``, ``kv_failure``). A layout misread would move the second's
attention signals, a misplaced score its token probes, so the engine then
stops reading the cache and keeps salting guarded requests instead.
"""
from __future__ import annotations

import dataclasses
import math
import uuid
from typing import Any

from innerguard.engine.plan import Plan
from innerguard.engine.requests import GuardRequest, prepare

INSTRUCTION = "Summarise the message in one sentence."
MESSAGE = ("Hi Sam, the quarterly figures are attached. Revenue rose four percent, mostly in Europe, "
           "and the team meets on Thursday at ten to plan the next quarter.")
DECOY_TOKENS = list(range(100, 137))  # another length: rows after it start elsewhere
TOLERANCE = 1e-3  # the twins' signals: same prompt, same step, other rows


# Long enough to fill whole KV cache blocks on every platform (CPU blocks hold 128 tokens).
KV_MESSAGE = " ".join([MESSAGE] * 8)


def _row(i: int, names, data: str = MESSAGE) -> GuardRequest:
    row = {"id": f"innerguard-canary-{i}", "instruction": INSTRUCTION, "data": data, "policies": list(names)}
    return GuardRequest.from_row(row, row["id"])


def policies(plan: Plan, tokenizer) -> tuple[str, ...]:
    """The plan's policies a plain system + user chat can run: not those
    that rerank documents, nor those whose spans name other roles."""
    rerank = {a.signal for a in plan.analyzers if a.kind == "reranker"}
    return tuple(p.name for p in plan.policies
                 if not rerank & set(p.signals) and prepare(plan, _row(0, [p.name]), tokenizer).error is None)


def requests(plan: Plan, tokenizer) -> list[Any]:
    """The twins, prepared as a caller's requests are (none when no policy
    can run on a plain chat)."""
    names = policies(plan, tokenizer)
    if not names:
        return []
    twins = [prepare(plan, _row(i, names), tokenizer) for i in (0, 1)]
    for twin in twins:
        if twin.error:
            raise RuntimeError(f"the canary could not be prepared: {twin.error}")
    return twins


def kv_pair(plan: Plan, tokenizer, token_scores: bool = False) -> list[Any]:
    """Two identical requests under the policies that read what cached
    positions left behind (attention trackers; token probes too where
    ``token_scores``), with one salt of their own: sent one after the other,
    the second is served from the first's cache blocks."""
    per_token = {a.signal for a in plan.analyzers if a.kind == "token_probe"}
    readers = {a.signal for a in plan.analyzers if a.kind == "attention_tracker"} | (per_token if token_scores else set())
    runnable = policies(plan, tokenizer)
    names = [p.name for p in plan.policies
             if p.name in runnable and readers & set(p.signals) and (token_scores or not per_token & set(p.signals))]
    if not names:
        return []
    salt = f"innerguard-canary-kv-{uuid.uuid4().hex}"
    sharing = {"share_prefix_cache": True, "share_token_scores": token_scores}
    pair = [prepare(plan, _row(i, names, KV_MESSAGE), tokenizer, **sharing) for i in (2, 3)]
    for request in pair:
        if request.error:
            raise RuntimeError(f"the canary could not be prepared: {request.error}")
    return [dataclasses.replace(request, cache_salt=salt) for request in pair]


def kv_failure(pair, results: dict[str, dict[str, Any]], cached_tokens: int | None) -> str | None:
    """Why the cache hit decided otherwise than the computed prompt, or None
    (also when nothing was cached: then nothing is read back either)."""
    if not cached_tokens:
        return None
    first, second = (results.get(r.key) for r in pair)
    if first is None or second is None:
        return "a prefix-cache canary got no decision"
    for result in (first, second):
        if result.get("errors"):
            name, error = next(iter(result["errors"].items()))
            return f"{name} failed on a prefix-cache hit: {error}"
    for name, value in first.get("signals", {}).items():
        other = second.get("signals", {}).get(name)
        if not _close(value, other):
            return f"{name} read {value} when computed and {other} from {cached_tokens} cached positions"
    return None


def failure(plan: Plan, twins, results: dict[str, dict[str, Any]]) -> str | None:
    """Why the twins' results prove the guard wrong, or None."""
    names = [p.name for p in twins[0].policies]
    found = []
    for twin in twins:
        result = results.get(twin.key)
        if result is None:
            return f"the canary {twin.key} got no decision (did its arguments reach the worker?)"
        if result.get("id") != twin.key:
            return f"the canary {twin.key} was decided as {result.get('id')!r}"
        decided = sorted(d["policy"] for d in result.get("decisions", ()))
        if decided != sorted(names):
            return f"the canary ran under policies {decided}, not {sorted(names)}"
        if result.get("errors"):
            name, error = next(iter(result["errors"].items()))
            return f"the canary's signal {name} failed: {error}"
        expected = {s for p in plan.policies if p.name in names for s in p.signals}
        missing = sorted(expected - set(result.get("signals", {})))
        if missing:
            return f"the canary's signals {missing} were never computed"
        if result.get("num_prompt_tokens") != len(twin.prompt_token_ids):
            return (f"the canary's prompt has {len(twin.prompt_token_ids)} tokens, the worker counted "
                    f"{result.get('num_prompt_tokens')} (rows misattributed)")
        found.append(result)
    first, second = found
    if first.get("action") != second.get("action"):
        return f"two identical canaries were decided {first.get('action')} and {second.get('action')} (rows misattributed)"
    for name, value in first["signals"].items():
        other = second["signals"].get(name)
        if not _close(value, other):
            return f"two identical canaries read {name} = {value} and {other} (rows misattributed)"
    return None


def _close(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= TOLERANCE * max(1.0, abs(a))

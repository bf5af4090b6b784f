"""Which policies a request gets: by name, or by the policies' applies_to."""
from __future__ import annotations

from pathlib import Path

import pytest

from innerguard.engine.compiler import compile_policies
from innerguard.engine.requests import GuardRequest, RequestError, select_policies

SHIPPED = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def plan(smollm2_dir):
    return compile_policies([SHIPPED], smollm2_dir)[0]


def names(plan, **request):
    return sorted(p.name for p in select_policies(plan, GuardRequest(id="r", prompt="x", **request)))


def test_untagged_requests_get_the_policies_for_all_requests(plan):
    assert names(plan) == ["medical-topic-steer", "prompt-injection", "prompt-injection-attention"]


def test_a_tag_adds_the_policies_that_apply_to_it(plan):
    assert names(plan, tags=("rag",)) == ["medical-topic-steer", "prompt-injection", "prompt-injection-attention", "rag-relevance"]


def test_named_policies_replace_selection_and_none_means_unguarded(plan):
    assert names(plan, policies=("rag-relevance",)) == ["rag-relevance"]
    assert names(plan, policies=()) == []
    with pytest.raises(RequestError, match="unknown policy 'nope'"):
        names(plan, policies=("nope",))


def test_the_shipped_selection_shares_the_prefix_cache_and_an_enforced_steer_does_not(plan):
    # medical-topic-steer is shipped in shadow mode: it never steers, so it
    # must not cost its requests the prefix cache (a unique cache salt).
    from dataclasses import replace

    from innerguard.engine.requests.prepare import CacheSharing, cache_salt

    both = CacheSharing(keys=True, token_scores=True)
    selected = select_policies(plan, GuardRequest(id="r", prompt="x"))
    assert [p.mode for p in selected if p.name == "medical-topic-steer"] == ["shadow"]
    assert cache_salt(selected, False, both) == (None, False)
    enforced = [replace(p, mode="enforce") if p.name == "medical-topic-steer" else p for p in selected]
    salts = {cache_salt(enforced, False, both) for _ in range(2)}
    assert len(salts) == 2 and all(salt and not shared for salt, shared in salts)  # unique per request
    assert cache_salt(selected, True, both)[0] is not None
    assert cache_salt(selected, False, CacheSharing(keys=False, token_scores=True))[0] is not None


def test_token_probe_requests_share_one_salt_per_plan_and_probes_only_where_scores_are_read_back(plan):
    from innerguard.engine.requests.prepare import CacheSharing, cache_salt

    selected = select_policies(plan, GuardRequest(id="r", prompt="x"))
    probes = frozenset({next(iter(selected[0].signals))})  # one of its signals, treated as a token probe
    both = CacheSharing(keys=True, token_scores=True)
    first, again, other = (cache_salt(selected, False, both, probes, bundle) for bundle in ("b1", "b1", "b2"))
    assert first == again and first[1] and first[0].startswith("innerguard-tokens-") and other[0] != first[0]
    unique = {cache_salt(selected, False, CacheSharing(keys=True, token_scores=False), probes, "b1") for _ in range(2)}
    assert len(unique) == 2 and not any(shared for _, shared in unique)

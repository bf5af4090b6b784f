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
    assert names(plan) == ["medical-topic-steer", "prompt-injection"]


def test_a_tag_adds_the_policies_that_apply_to_it(plan):
    assert names(plan, tags=("rag",)) == ["medical-topic-steer", "prompt-injection", "rag-relevance"]


def test_named_policies_replace_selection_and_none_means_unguarded(plan):
    assert names(plan, policies=("rag-relevance",)) == ["rag-relevance"]
    assert names(plan, policies=()) == []
    with pytest.raises(RequestError, match="unknown policy 'nope'"):
        names(plan, policies=("nope",))


def test_the_shipped_selection_shares_the_prefix_cache_and_an_enforced_steer_does_not(plan):
    # medical-topic-steer is shipped in shadow mode: it never steers, so it
    # must not cost its requests the prefix cache (a unique cache salt).
    from dataclasses import replace

    from innerguard.engine.requests.prepare import cache_salt

    selected = select_policies(plan, GuardRequest(id="r", prompt="x"))
    assert [p.mode for p in selected if p.name == "medical-topic-steer"] == ["shadow"]
    assert cache_salt(selected, rerank=False, share_prefix_cache=True) is None
    enforced = [replace(p, mode="enforce") if p.name == "medical-topic-steer" else p for p in selected]
    salts = {cache_salt(enforced, rerank=False, share_prefix_cache=True) for _ in range(2)}
    assert len(salts) == 2 and None not in salts  # unique per request
    assert cache_salt(selected, rerank=True, share_prefix_cache=True) is not None
    assert cache_salt(selected, rerank=False, share_prefix_cache=False) is not None

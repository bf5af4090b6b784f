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

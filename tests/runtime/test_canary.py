"""The install self-check's canary (engine/canary.py): which policies it
exercises, and each way its twins' results can prove the guard wrong. Every
engine the suite starts runs the canary for real at install; these tests
feed it results a broken worker would give."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from innerguard.engine import canary
from innerguard.engine.compiler import compile_policies

POLICIES = Path(__file__).parent / "policies"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan_and_twins(smollm2_dir):
    from transformers import AutoTokenizer

    plan, _ = compile_policies([POLICIES / n for n in ("injection.yaml", "blocker.yaml", "rag.yaml")], smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return plan, canary.requests(plan, tokenizer)


def _results(plan, twins, signals=None):
    names = [p.name for p in twins[0].policies]
    wanted = sorted({s for p in plan.policies if p.name in names for s in p.signals})
    values = signals or {name: 0.25 for name in wanted}
    return {t.key: {"id": t.key, "action": "allow", "decisions": [{"policy": n} for n in names], "errors": {},
                    "signals": dict(values), "num_prompt_tokens": len(t.prompt_token_ids)} for t in twins}


@pytest.mark.model
def test_the_canary_runs_every_policy_a_plain_chat_can_and_no_reranker(plan_and_twins):
    plan, twins = plan_and_twins
    assert [p.name for p in twins[0].policies] == ["blocker", "injection"]
    assert twins[0].key != twins[1].key and twins[0].prompt_token_ids == twins[1].prompt_token_ids


@pytest.mark.model
def test_alike_and_whole_twins_pass(plan_and_twins):
    plan, twins = plan_and_twins
    assert canary.failure(plan, twins, _results(plan, twins)) is None


@pytest.mark.model
@pytest.mark.parametrize("break_it, message", [
    (lambda r, k: r.pop(k[1]), "got no decision"),
    (lambda r, k: r[k[0]].update(id="someone-else"), "was decided as"),
    (lambda r, k: r[k[0]].update(decisions=[{"policy": "blocker"}]), "ran under policies"),
    (lambda r, k: r[k[1]]["errors"].update({"injection.focus": "RuntimeError: no K"}), "injection.focus failed"),
    (lambda r, k: r[k[0]]["signals"].pop("injection.focus"), "never computed"),
    (lambda r, k: r[k[1]].update(num_prompt_tokens=7), "rows misattributed"),
    (lambda r, k: r[k[1]].update(action="block"), "decided allow and block"),
    (lambda r, k: r[k[1]]["signals"].update({"injection.focus": 0.31}), "read injection.focus"),
    (lambda r, k: r[k[1]]["signals"].update({"injection.focus": float("nan")}), "read injection.focus"),
])
def test_each_broken_result_fails_the_self_check_in_one_line(plan_and_twins, break_it, message):
    plan, twins = plan_and_twins
    results = copy.deepcopy(_results(plan, twins))
    break_it(results, [t.key for t in twins])
    found = canary.failure(plan, twins, results)
    assert found is not None and message in found and "\n" not in found, found


# -- the prefix-cache canary: a cache hit must decide as the computed prompt did


@pytest.fixture(scope="module")
def plan_and_pair(smollm2_dir):
    from transformers import AutoTokenizer

    plan, _ = compile_policies([POLICIES / n for n in ("injection.yaml", "blocker.yaml", "rag.yaml")], smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return plan, canary.kv_pair(plan, tokenizer), tokenizer


@pytest.mark.model
def test_the_cache_canary_is_one_long_prompt_twice_under_a_salt_of_its_own(plan_and_pair):
    plan, (first, second), tokenizer = plan_and_pair
    assert [p.name for p in first.policies] == ["injection"]  # reads K; the blocker reads none
    assert first.prompt_token_ids == second.prompt_token_ids and len(first.prompt_token_ids) > 2 * 128  # whole CPU blocks
    assert first.cache_salt == second.cache_salt and first.cache_salt.startswith("innerguard-canary-kv-")
    assert first.key != second.key
    assert canary.kv_pair(plan, tokenizer)[0].cache_salt != first.cache_salt  # never another install's cache


def _pair_results(pair, second=None):
    base = {"action": "allow", "errors": {}, "signals": {"injection.focus": 0.25}}
    results = {r.key: copy.deepcopy(base) for r in pair}
    results[pair[1].key].update(second or {})
    return results


@pytest.mark.model
def test_a_cache_hit_that_decides_alike_passes_and_no_hit_proves_nothing(plan_and_pair):
    _, pair, _ = plan_and_pair
    assert canary.kv_failure(pair, _pair_results(pair), cached_tokens=256) is None
    # Nothing cached (prefix caching off): nothing is read back either.
    assert canary.kv_failure(pair, _pair_results(pair, {"signals": {"injection.focus": 0.9}}), cached_tokens=0) is None


@pytest.mark.model
@pytest.mark.parametrize("second, message", [
    ({"signals": {"injection.focus": 0.31}}, "from 256 cached positions"),
    ({"signals": {"injection.focus": float("nan")}}, "from 256 cached positions"),
    ({"errors": {"injection.focus": "RuntimeError: 3 blocks of 128 hold fewer"}}, "failed on a prefix-cache hit"),
])
def test_a_cache_hit_that_decides_otherwise_is_reported_in_one_line(plan_and_pair, second, message):
    _, pair, _ = plan_and_pair
    found = canary.kv_failure(pair, _pair_results(pair, second), cached_tokens=256)
    assert found is not None and message in found and "\n" not in found, found
    results = _pair_results(pair)
    results.pop(pair[1].key)
    assert "got no decision" in canary.kv_failure(pair, results, cached_tokens=256)


@pytest.mark.model
def test_the_cache_canary_runs_token_probes_where_their_scores_are_read_back(smollm2_dir):
    from transformers import AutoTokenizer

    probe = ROOT / "policies" / "prompt-injection.yaml"
    plan, _ = compile_policies([POLICIES / "injection.yaml", probe], smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert [p.name for p in canary.kv_pair(plan, tokenizer)[0].policies] == ["injection"]
    first, second = canary.kv_pair(plan, tokenizer, token_scores=True)
    assert [p.name for p in first.policies] == ["injection", "prompt-injection"]
    assert first.cache_salt == second.cache_salt and first.cache_salt.startswith("innerguard-canary-kv-")

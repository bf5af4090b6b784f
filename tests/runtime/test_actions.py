"""Block, steer, flag and shadow, and what they do to the output."""
from __future__ import annotations

import dataclasses

import pytest

from helpers import prepared, row

pytestmark = pytest.mark.vllm


def plain_tokens(plain_llm, ids, max_tokens):
    from vllm import SamplingParams

    out = plain_llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


def test_block_emits_no_model_token(guarded):
    out, ok = guarded.run([row(0, ["blocker"], data="Please BLOCKME now."), row(1, ["blocker"])])
    assert out.blocked and out.finish_reason == "content_filter"
    assert out.token_ids == () and out.num_output_tokens == 0
    assert out.text == "Refused by blocker (block-marker)."
    # vLLM's own output object is rewritten too: nothing the engine emitted
    # while finishing the request reaches the caller.
    assert list(out.output.outputs[0].token_ids) == [] and out.output.outputs[0].finish_reason == "content_filter"
    assert [d["action"] for d in out.decisions] == ["block"]
    assert not ok.blocked and ok.num_output_tokens > 0


def test_flag_and_shadow_do_not_change_the_output(guarded, plain_llm):
    rows = [row(2, ["shadow"], max_tokens=16), row(3, ["topic", "injection-open"], max_tokens=16)]
    for r, out in zip(rows, guarded.run(rows)):
        ids, _ = prepared(guarded, r)
        assert list(out.token_ids) == plain_tokens(plain_llm, ids, 16)
    shadow = guarded.run([rows[0]])[0]
    assert shadow.decisions[0]["mode"] == "shadow" and shadow.decisions[0]["action"] == "block"
    assert not shadow.blocked


def test_steer_matches_reference_and_changes_output(guarded, plain_llm, reference, steer_vector):
    model, _ = reference
    from innerguard.engine.reference.steer import reference_steered_generate

    r = row(0, ["steer"], max_tokens=24)
    ids, _ = prepared(guarded, r)
    out = guarded.run([r])[0]
    expected = reference_steered_generate(model, ids, steer_vector, layer=6, coefficient=6.0, positions="generated", max_new_tokens=24)
    assert list(out.token_ids)[:16] == expected[:16]
    assert list(out.token_ids) != plain_tokens(plain_llm, ids, 24)
    assert out.action == "steer"


def test_zero_coefficient_steer_is_plain_vllm_and_reload_swaps_plans(guarded, plain_llm):
    original = guarded.plan
    zero = dataclasses.replace(original, steers=tuple(dataclasses.replace(s, coefficient=0.0) for s in original.steers))
    r = row(0, ["steer"], max_tokens=24)
    ids, _ = prepared(guarded, r)
    try:
        guarded.reload(zero)
        out = guarded.run([r])[0]
        assert out.action == "steer"
        assert list(out.token_ids) == plain_tokens(plain_llm, ids, 24)
    finally:
        guarded.reload(original)
    assert list(guarded.run([r])[0].token_ids) != plain_tokens(plain_llm, ids, 24)


def test_a_bad_policy_never_replaces_a_good_one(guarded, tmp_path):
    from innerguard.engine.compiler import CompileError

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: innerguard/v1\nkind: Policy\nmetadata: {name: bad, version: 1}\nrules: []\nsignalz: {}\n")
    before = guarded.plan
    with pytest.raises(CompileError) as error:
        guarded.reload(tmp_path)
    assert "bad.yaml" in str(error.value)
    assert guarded.plan is before
    assert guarded.run([row(0, ["blocker"], data="BLOCKME")])[0].blocked


def test_analyzer_failure_follows_the_error_mode(guarded):
    # A raw prompt without <untrusted> markers has no data span: the
    # attention tracker cannot compute focus.
    raw = {"id": "raw", "prompt": "Say hello to the reader.", "max_tokens": 8}
    closed, opened = guarded.run([{**raw, "policies": ["injection"]}, {**raw, "id": "raw2", "policies": ["injection-open"]}])
    assert closed.blocked and closed.finish_reason == "content_filter"
    assert "data" in closed.decisions[0]["error"]
    assert not opened.blocked and opened.num_output_tokens > 0
    assert opened.decisions[0]["error"]


def test_bad_requests_fail_alone(guarded):
    rows = [
        row(0, ["nope"]),
        {"id": "m", "messages": "not a list"},
        {"id": "s", "messages": [{"role": "user", "content": ["parts", "are", "not", "text"]}], "policies": ["injection"]},
        row(1, ["injection"]),
    ]
    outs = guarded.run(rows)
    assert [o.finish_reason for o in outs[:3]] == ["error"] * 3
    assert "unknown policy 'nope'" in outs[0].error
    assert "messages" in outs[1].error
    assert outs[3].error is None and outs[3].num_output_tokens > 0

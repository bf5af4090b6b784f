"""Signals computed inside vLLM equal the independent Hugging Face reference."""
from __future__ import annotations

import pytest

from helpers import long_text, prepared, row
from innerguard.engine.reference.scores import reference_focus_score, reference_probe

pytestmark = pytest.mark.vllm

HEADS = [(13, 0), (13, 4), (14, 2), (15, 1), (16, 3), (17, 5), (18, 6), (20, 7), (22, 8), (25, 2)]


def _check_against_reference(llm, reference, rows, concept_vector):
    model, _ = reference
    outs = llm.run(rows)
    for r, out in zip(rows, outs):
        assert out.error is None, out.error
        ids, spans = prepared(llm, r)
        assert out.prefill_tokens == len(ids)  # every prompt token seen once: no cache hit, no second pass
        focus = out.signals["injection.focus"]
        ref_focus = reference_focus_score(model, ids, spans["injection"]["instruction"], spans["injection"]["data"], HEADS)
        assert abs(focus - ref_focus) < 1e-3, (r["id"], focus, ref_focus)
        probe = out.signals["topic.concept"]
        ref_probe = reference_probe(model, ids, 8, vector=concept_vector)
        assert abs(probe - ref_probe) < 1e-4, (r["id"], probe, ref_probe)


@pytest.fixture(scope="module")
def concept_vector(policy_dir):
    from safetensors.torch import load_file

    return load_file(str(policy_dir / "artifacts" / "concept.safetensors"))["vector"]


def test_short_prompts_match_reference(guarded, reference, concept_vector):
    rows = [row(i, ["injection", "topic"]) for i in range(6)]
    _check_against_reference(guarded, reference, rows, concept_vector)


def test_long_prompts_match_reference(guarded, reference, concept_vector):
    rows = [row(i, ["injection", "topic"], data=long_text(30 + i)) for i in range(2)]
    _check_against_reference(guarded, reference, rows, concept_vector)


def test_prefix_cache_is_bypassed_for_guarded_requests(guarded, reference, concept_vector):
    # The same prompt three times: plain vLLM would serve the 2nd and 3rd from
    # the prefix cache (prefix caching is on in this engine), and the hooks
    # would never see those tokens' K.
    assert guarded.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    r = row(1, ["injection", "topic"], data=long_text(12))
    guarded.run([{**r, "policies": []}])  # warms the cache with the prompt
    for _ in range(2):
        _check_against_reference(guarded, reference, [r], concept_vector)


def test_chunked_prefill_matches_reference(chunked, reference, concept_vector):
    # Prompts of several hundred tokens arrive in 64-token chunks: K is
    # gathered across chunks, Q and the residual only on the final one.
    assert not chunked.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    rows = [row(i, ["injection", "topic"], data=long_text(20 + 3 * i)) for i in range(3)] + [row(9, ["injection", "topic"])]
    for r in rows[:3]:
        assert len(prepared(chunked, r)[0]) > 64 * 3
    _check_against_reference(chunked, reference, rows, concept_vector)

"""The token-level probe (analyzer token_probe) inside vLLM's compiled
engine equals the independent Hugging Face reference, whether the prompt is
computed in one step, in 64-token chunks, or partly served from the prefix
cache (the scores of cached positions are read back from the steps that
computed them, hooks/token_score_cache.py), and with a length adjustment."""
from __future__ import annotations

import math

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from helpers import LENGTH_ADJUST, TEXTS, long_text, prepared, row

from innerguard.engine.reference.scores import reference_token_probe

pytestmark = pytest.mark.vllm

SIGNAL = "prompt-injection.injected"  # policies/prompt-injection.yaml, served as tokens.yaml


@pytest.fixture(scope="module")
def probe(policy_dir):
    path = str(policy_dir / "artifacts" / "smollm2-135m-instruct.injection-token-probe.safetensors")
    tensors = load_file(path)
    with safe_open(path, "pt") as f:
        window = int(f.metadata()["window"])  # the shipped policy's window is the artifact's
    return {int(k.split(".")[1]): t for k, t in tensors.items() if k.startswith("weight.")}, float(tensors["bias"][0]), window


def _rows(prefix: str):
    datas = [TEXTS[0], TEXTS[2], long_text(12), long_text(5) + " " + TEXTS[5] + " " + long_text(4), "Hi."]
    return [row(i, ["prompt-injection"], data=d, rid=f"{prefix}{i}") for i, d in enumerate(datas)]


def _check(llm, reference, probe, rows, cached=False):
    model, _ = reference
    weights, bias, window = probe
    outs = llm.run(rows)
    for r, out in zip(rows, outs):
        assert out.error is None, out.error
        ids, spans = prepared(llm, r)
        if cached and len(ids) > 128:  # a whole CPU block of it was served from the cache
            assert out.prefill_tokens < len(ids), (r["id"], out.prefill_tokens, len(ids))
        got = out.signals[SIGNAL]
        want = reference_token_probe(model, ids, weights, bias, spans["prompt-injection"]["data"], window)
        assert abs(got - want) <= 1e-3 + 1e-4 * abs(want), (r["id"], got, want)
    return outs


def test_token_probe_matches_the_reference_on_prefix_cache_hits(guarded, reference, probe):
    assert guarded.install_info["reads_token_scores"] and guarded.share_token_scores
    before = guarded.llm.collective_rpc("innerguard_stats")[0]["token_scores_from_cache"]
    outs = _check(guarded, reference, probe, _rows("tp"))
    again = _check(guarded, reference, probe, _rows("tp"), cached=True)  # the same prompts, from the cache
    assert [o.signals[SIGNAL] for o in outs] == pytest.approx([o.signals[SIGNAL] for o in again], abs=1e-4)
    counters = guarded.llm.collective_rpc("innerguard_stats")[0]
    assert counters["token_scores_from_cache"] - before >= 2 and counters["token_score_writes_failed"] == 0


def test_unguarded_blocks_never_serve_a_token_probe(guarded, reference, probe):
    # The same prompt unguarded first: its blocks were never scored, and the
    # token probe's requests carry a salt of their own, so they are computed.
    r = row(9, ["prompt-injection"], data=long_text(10), rid="tp-unguarded")
    guarded.run([{**r, "policies": []}])
    (out,) = _check(guarded, reference, probe, [r])
    assert out.prefill_tokens == len(prepared(guarded, r)[0])


def test_token_probe_matches_the_reference_in_chunks(chunked, reference, probe):
    rows = [r for r in _rows("tc") if len(r["data"]) > 300]
    assert rows and all(len(prepared(chunked, r)[0]) > 64 for r in rows)
    _check(chunked, reference, probe, rows)


def test_length_adjust_takes_its_share_of_ln_windows_off_the_score(guarded, reference, probe):
    model, _ = reference
    weights, bias, window = probe
    rows = [row(i, ["prompt-injection", "prompt-injection-length"], data=d, rid=f"tl{i}")
            for i, d in enumerate([long_text(14), TEXTS[2], "Hi."])]
    for r, out in zip(rows, guarded.run(rows)):
        assert out.error is None, out.error
        ids, spans = prepared(guarded, r)
        data = spans["prompt-injection-length"]["data"]
        windows = max(1, sum(b - a for a, b in data) - window + 1)
        want = reference_token_probe(model, ids, weights, bias, data, window, length_adjust=LENGTH_ADJUST)
        got = out.signals["prompt-injection-length.injected"]
        assert abs(got - want) <= 1e-3 + 1e-4 * abs(want), (r["id"], got, want)
        assert got == pytest.approx(out.signals[SIGNAL] - LENGTH_ADJUST * math.log(windows), abs=1e-4)

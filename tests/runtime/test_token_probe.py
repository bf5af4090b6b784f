"""The token-level probe (analyzer token_probe) inside vLLM's compiled
engine equals the independent Hugging Face reference, whether the prompt is
computed in one step, in 64-token chunks, or partly served from the prefix
cache (the scores of cached positions are read back from the steps that
computed them, hooks/token_score_cache.py), and with a length adjustment."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from helpers import (
    HEADS_ARTIFACT, LENGTH_ADJUST, TEXTS, TOKEN_PROBE_ARTIFACT, long_text, prepared, reference_decode_focus, reference_decode_scores, row,
)

from innerguard.engine.reference.scores import reference_token_probe

pytestmark = pytest.mark.vllm

SIGNAL = "prompt-injection.injected"  # policies/prompt-injection.yaml, served as tokens.yaml
DATA = Path(__file__).resolve().parents[2] / "data" / "injection"


@pytest.fixture(scope="module")
def probe(policy_dir):
    path = str(policy_dir / "artifacts" / "smollm2-135m-instruct.injection-token-probe.safetensors")
    tensors = load_file(path)
    with safe_open(path, "pt") as f:
        # the shipped policy's window and length adjustment are the artifact's
        window, adjust = int(f.metadata()["window"]), float(f.metadata().get("length_adjust", 0))
    weights = {int(k.split(".")[1]): t for k, t in tensors.items() if k.startswith("weight.")}
    return weights, float(tensors["bias"][0]), window, adjust


def _rows(prefix: str):
    datas = [TEXTS[0], TEXTS[2], long_text(12), long_text(5) + " " + TEXTS[5] + " " + long_text(4), "Hi."]
    return [row(i, ["prompt-injection"], data=d, rid=f"{prefix}{i}") for i, d in enumerate(datas)]


def _check(llm, reference, probe, rows, cached=False):
    model, _ = reference
    weights, bias, window, adjust = probe
    outs = llm.run(rows)
    for r, out in zip(rows, outs):
        assert out.error is None, out.error
        ids, spans = prepared(llm, r)
        if cached and len(ids) > 128:  # a whole CPU block of it was served from the cache
            assert out.prefill_tokens < len(ids), (r["id"], out.prefill_tokens, len(ids))
        got = out.signals[SIGNAL]
        want = reference_token_probe(model, ids, weights, bias, spans["prompt-injection"]["data"], window,
                                     length_adjust=adjust)
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
    weights, bias, window, shipped_adjust = probe
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
        raw = out.signals[SIGNAL] + shipped_adjust * math.log(windows)
        assert got == pytest.approx(raw - LENGTH_ADJUST * math.log(windows), abs=1e-4)


def test_benign_scores_do_not_climb_with_length(guarded, shipped_probe):
    """Issue 32: a maximum over windows grows with the number of windows, so
    without a length adjustment a long benign document scores higher than
    a short one and one threshold cannot hold at every length. The same
    benign third-party documents (the first 12 of real-dev.jsonl with at
    least 2,100 data tokens, in file order) are cut at 200 and at 2,000
    tokens: the 2,000-token cut holds the 200-token one, so its raw
    maximum can only be higher. The margin was written before measuring:
    the median must move by at most a quarter of the distance from the
    200-token median to the threshold."""
    rows = [json.loads(line) for line in (DATA / "real-dev.jsonl").read_text().splitlines()]
    documents = [r for r in rows if r["label"] == 0 and r["tokens"] >= 2100][:12]
    assert len(documents) == 12
    medians = {}
    for cut in (200, 2000):
        cut_rows = [{**row(i, ["prompt-injection"], rid=f"len{cut}-{r['id']}"), "instruction": r["instruction"],
                     "data": guarded.tokenizer.decode(guarded.tokenizer.encode(r["data"], add_special_tokens=False)[:cut])}
                    for i, r in enumerate(documents)]
        outs = guarded.run(cut_rows)
        assert all(o.error is None for o in outs), [o.error for o in outs]
        medians[cut] = statistics.median(o.signals[SIGNAL] for o in outs)
    threshold = float(shipped_probe.threshold)
    assert medians[200] < threshold
    assert abs(medians[2000] - medians[200]) <= 0.25 * (threshold - medians[200]), (medians, threshold)


def test_decode_signals_equal_the_reference_teacher_forced_compiled(guarded, chunked, reference, policy_dir):
    """A token probe and an attention tracker on the generated tokens
    (span: generated, the policies decode and decode-focus of
    tests/decode_probe_policy.py) on the compiled engine, with requests of
    other policies in the same batch, and on the chunked one: each generated
    token's score, and its share of span attention toward the system
    prompt, equal the reference's, the prompt and completion run as one
    sequence."""
    from vllm import SamplingParams

    rows = [{"id": "dp0", "instruction": "Rewrite the text as a short story for children, in five sentences.",
             "data": TEXTS[3], "policies": ["decode", "decode-focus"]},
            row(1, ["prompt-injection"], rid="dp1"),
            {"id": "dp2", "instruction": "Say hello.", "data": TEXTS[1], "policies": ["decode"]},
            {"id": "dp3", "instruction": "Answer in one sentence.", "data": TEXTS[2], "policies": ["decode-focus"]}]
    for llm in (guarded, chunked):
        outs = llm.run(rows, SamplingParams(temperature=0.0, max_tokens=24))
        assert all(o.error is None for o in outs), [o.error for o in outs]
        assert outs[1].decode_scores == {}
        for out in (outs[0], outs[2]):
            got = out.decode_scores[0]["decode.written"]
            want = reference_decode_scores(reference, policy_dir / "artifacts" / TOKEN_PROBE_ARTIFACT,
                                           out.output.prompt_token_ids, out.token_ids)
            assert len(got) == len(want) == len(out.token_ids) - 1 > 0
            assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-4, out.id
        for r, out in ((rows[0], outs[0]), (rows[3], outs[3])):
            _, spans = prepared(llm, r)
            (system,), (user,) = spans["decode-focus"]["instruction"], spans["decode-focus"]["data"]
            got = out.decode_scores[0]["decode-focus.reads_system"]
            want = reference_decode_focus(reference, policy_dir / "artifacts" / HEADS_ARTIFACT,
                                          out.output.prompt_token_ids, out.token_ids, tuple(system), tuple(user))
            assert len(got) == len(want) == len(out.token_ids) - 1 > 0
            assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-4, out.id

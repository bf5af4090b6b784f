"""build vector on four contrastive pairs: the CAA vector equals the one
computed from Hugging Face reference residuals over the same answer tokens,
two builds agree, and a layer sweep reports effect and the fluency of text
steered inside vLLM."""
from __future__ import annotations

import json

import pytest
import torch

from innerguard.engine.build import SweepParams, VectorParams, build_vector, save, sweep
from innerguard.engine.build import artifact
from innerguard.engine.reference import reference_residual
from innerguard.engine.spans import chat_spans

from build_helpers import ROOT, subset

pytestmark = [pytest.mark.vllm, pytest.mark.model]

LAYER = 8
START_POLICY = ROOT / "tests" / "runtime" / "policies" / "injection.yaml"


@pytest.fixture(scope="module")
def guarded_llm(smollm2_dir, enter_in_this_process):
    """One guarded engine, eager: it records (the vector) and steers (the
    sweep's fluency check); batches only, so in the test's process."""
    from innerguard.engine.build.engine import guarded_engine

    with enter_in_this_process(guarded_engine(smollm2_dir, START_POLICY)) as llm:
        yield llm


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return subset("caution-pairs.jsonl", tmp_path_factory.mktemp("pairs") / "pairs.jsonl", lambda i, r: i < 4)


@pytest.fixture(scope="module")
def built(guarded_llm, pairs, smollm2_dir):
    return build_vector(guarded_llm, VectorParams(model=str(smollm2_dir), pairs=str(pairs), layer=LAYER, relative_norm=0.1))


def _answer_states(model, tokenizer, messages, answer):
    spans = chat_spans(tokenizer, [*messages, {"role": "assistant", "content": answer}])
    last = spans.messages[-1]
    states = reference_residual(model, spans.input_ids, LAYER, slice(last.start, last.end))
    return states.mean(0), states.norm(dim=-1).sum(), last.end - last.start


def test_vector_equals_the_caa_of_reference_residuals(built, pairs, reference):
    model, tokenizer = reference
    diffs, norms = [], []
    for row in map(json.loads, pairs.read_text().splitlines()):
        pos, pos_norm, n_pos = _answer_states(model, tokenizer, row["messages"], row["positive"])
        neg, neg_norm, n_neg = _answer_states(model, tokenizer, row["messages"], row["negative"])
        diffs.append(pos - neg)
        norms.append((pos_norm + neg_norm) / (n_pos + n_neg))
    caa = torch.stack(diffs).mean(0)
    residual_norm = float(torch.stack(norms).mean())
    want = caa / caa.norm() * 0.1 * residual_norm
    got = built.tensors["vector"]
    assert float(torch.nn.functional.cosine_similarity(got, want, dim=0)) > 0.9999
    assert float(got.norm()) == pytest.approx(float(want.norm()), rel=1e-4)
    assert built.figures["raw_norm"] == pytest.approx(float(caa.norm()), rel=1e-3)
    assert built.figures["ordered"] == 1.0 and built.figures["in_sample"] is True


def test_two_builds_agree_and_the_file_records_its_recipe(built, guarded_llm, pairs, smollm2_dir, tmp_path):
    again = build_vector(guarded_llm, VectorParams(model=str(smollm2_dir), pairs=str(pairs), layer=LAYER, relative_norm=0.1))
    first = save(built, str(tmp_path / "v.safetensors"))
    assert save(again, str(tmp_path / "w.safetensors"), record_out=first.path).file_sha256 == first.file_sha256
    tensors, meta = artifact.read(first.path)
    assert meta["build"] == "vector" and meta["layer"] == str(LAYER) and meta["relative_norm"] == "0.1"
    assert float(tensors["vector"].norm()) / float(meta["residual_norm"]) == pytest.approx(0.1, rel=1e-3)
    assert f"--pairs {pairs} --layer {LAYER} --relative-norm 0.1" in meta["command"]
    assert list(json.loads(meta["data_sha256"])) == [str(pairs)]


def test_sweep_reports_effect_and_fluency_of_steered_text(guarded_llm, pairs, smollm2_dir):
    params = SweepParams(model=str(smollm2_dir), pairs=str(pairs), layers=(7, 8), holdout=0.5, coefficient=40.0,
                         fluency_prompts=1, fluency_tokens=8)
    rows, report = sweep(guarded_llm, params)
    assert [r.layer for r in rows] == [7, 8]
    for r in rows:
        assert r.residual_norm > 0 and r.raw_norm > 0 and 0.0 <= r.ordered <= 1.0
        assert 0.0 < r.fluency.distinct <= 1.0 and 0.0 <= r.fluency.repeated_trigrams <= 1.0
    # Steering at 40 x 0.1 x the residual norm changes what the model says: the vectors really steer.
    assert any(r.fluency.sample != "= unsteered" for r in rows)
    assert report[1].split()[:6] == ["layer", "resid", "norm", "raw", "norm", "gap"]
    assert report[-1].split()[0] == "none"  # the unsteered baseline

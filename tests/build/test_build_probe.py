"""build probe on a small cut of the medical data: the probe equals the one
fitted on Hugging Face reference residuals, two builds agree, the file
records its recipe, and ``reproduce`` re-runs the recipe and says whether
(and by how much) the tensors differ."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from innerguard.engine.build import ProbeParams, ReproduceError, build_probe, reproduce, save
from innerguard.engine.build import artifact, fit
from innerguard.engine.reference import reference_residual
from innerguard.engine.spans import chat_spans

from build_helpers import EPOCH, subset

pytestmark = [pytest.mark.vllm, pytest.mark.model]

LAYER = 16


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe-data")
    # 4 medical and 4 other questions under two system contexts each; held out: 2 + 2 other questions, one context.
    fit_rows = subset("medical-fit.jsonl", folder / "fit.jsonl",
                      lambda i, r: r["id"].split("-")[1] in ("0", "1", "2", "3") and r["id"].endswith(("c0", "c1")))
    held = subset("medical-heldout.jsonl", folder / "heldout.jsonl",
                  lambda i, r: r["id"].split("-")[1] in ("0", "1") and r["id"].endswith("c1"))
    return fit_rows, held


@pytest.fixture(scope="module")
def params(files, smollm2_dir):
    fit_rows, held = files
    return ProbeParams(model=str(smollm2_dir), data=str(fit_rows), heldout=str(held), layer=LAYER)


@pytest.fixture(scope="module")
def built(recording_llm, params):
    return build_probe(recording_llm, params)


def test_probe_equals_the_fit_on_reference_residuals(built, files, reference):
    model, tokenizer = reference
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert len(rows) == 16
    x = torch.stack([reference_residual(model, chat_spans(tokenizer, r["messages"]).input_ids, LAYER) for r in rows])
    y = torch.tensor([float(r["label"]) for r in rows])
    weight, bias = fit.fit_logistic(x, y, l2=1e-2)
    got_w, got_b = built.tensors["weight"], float(built.tensors["bias"][0])
    assert float(torch.nn.functional.cosine_similarity(got_w, weight, dim=0)) > 0.9999
    torch.testing.assert_close(torch.sigmoid(x @ got_w + got_b), torch.sigmoid(x @ weight + bias), atol=1e-3, rtol=0)
    assert float(torch.nn.functional.cosine_similarity(built.tensors["vector"], fit.mean_difference(x, y), dim=0)) > 0.9999
    assert built.figures["heldout_rows"] == 4 and built.figures["fit_rows"] == 16
    assert 0.0 <= built.figures["heldout_auroc"] <= 1.0


def test_two_builds_agree_and_the_file_records_its_recipe(built, recording_llm, params, files, tmp_path):
    again = build_probe(recording_llm, params)
    out = str(tmp_path / "probe.safetensors")
    first, second = save(built, out), save(again, str(tmp_path / "again.safetensors"), record_out=out)
    assert first.content_sha256 == second.content_sha256 and first.file_sha256 == second.file_sha256
    tensors, meta = artifact.read(out)
    assert set(tensors) == {"weight", "bias", "vector"} and tensors["weight"].shape == (576,)
    assert meta["build"] == "probe" and meta["layer"] == str(LAYER) and meta["hidden_size"] == "576"
    assert json.loads(meta["data_sha256"]) == {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    assert json.loads(meta["parameters"])["holdout"] == 0.0  # --heldout given: nothing split off --data
    assert f"--data {files[0]} --layer {LAYER} --heldout {files[1]}" in meta["command"]
    assert meta["source_date_epoch"] == EPOCH and meta["content_sha256"] == artifact.content_sha256(tensors)
    assert json.loads(meta["report"])["heldout_accuracy"] == built.figures["heldout_accuracy"]


def test_reproduce_rebuilds_the_same_file(built, recording_llm, tmp_path, monkeypatch):
    path = str(tmp_path / "probe.safetensors")
    save(built, path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")  # reproduce takes the recorded date, not today's
    result = reproduce(recording_llm, path)
    assert result.same and result.same_file
    assert [t.detail for t in result.tensors] == ["identical"] * 3


def test_reproduce_names_the_tensor_that_differs_and_by_how_much(built, recording_llm, tmp_path):
    path = str(tmp_path / "probe.safetensors")
    saved = save(built, path)
    tensors = dict(built.tensors)
    tensors["weight"] = tensors["weight"].clone()
    tensors["weight"][3] += 0.25
    artifact.write(path, tensors, saved.metadata)  # the recorded recipe and content hash, other tensors
    result = reproduce(recording_llm, path)
    assert not result.same
    diff = {t.name: t for t in result.tensors}
    assert diff["bias"].same and diff["vector"].same and not diff["weight"].same
    assert diff["weight"].detail.startswith("max abs diff 0.25") and "1/576 values differ" in diff["weight"].detail


def test_reproduce_refuses_changed_data(built, files, recording_llm, tmp_path):
    data = tmp_path / "fit.jsonl"
    data.write_bytes(files[0].read_bytes())
    built_here = build_probe(recording_llm, ProbeParams(**{**built.params.to_dict(), "data": str(data)}))
    path = str(tmp_path / "probe.safetensors")
    save(built_here, path)
    data.write_text(data.read_text().replace("diabetes", "diabetis"))
    with pytest.raises(ReproduceError, match="changed since the build"):
        reproduce(recording_llm, path)

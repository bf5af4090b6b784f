"""innerguard build: help that teaches, and user mistakes answered with one
line (exit 2, no traceback) before any engine starts. Plus the artifact
writer's promises: deterministic bytes, SOURCE_DATE_EPOCH, lint-readable."""
from __future__ import annotations

import json

import pytest
import torch

from innerguard.engine.build import artifact
from innerguard.engine.build.probe import ProbeParams
from innerguard.engine.build.recipe import Built, save
from innerguard.engine.cli import main

from build_helpers import DATA

MODEL = "smollm2-135m-instruct"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["build", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in err, (code, out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("innerguard: error: "), err
    return lines[0]


def test_help_names_every_build_and_teaches_the_recipe(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for word in ("heads", "vector", "probe", "token-probe", "reproduce", "SOURCE_DATE_EPOCH", "content_sha256", "data_sha256"):
        assert word in out
    code, out, _ = run(capsys, "heads", "--help")
    assert "Say W" in out and "No per-head weights" in out and "--heldout" in out


@pytest.mark.parametrize("argv, message", [
    (("vector", "--model", MODEL, "--pairs", str(DATA / "caution-pairs.jsonl"), "--layer", "8"), "give --out FILE"),
    (("vector", "--model", MODEL, "--pairs", str(DATA / "caution-pairs.jsonl"), "--sweep", "2:4", "--out", "x.safetensors"),
     "--sweep only reports"),
    (("vector", "--model", MODEL, "--pairs", str(DATA / "caution-pairs.jsonl"), "--layer", "8", "--coefficient", "3",
      "--out", "x.safetensors"), "--coefficient apply only to --sweep"),
    (("vector", "--model", MODEL, "--pairs", "no-such.jsonl", "--layer", "8", "--out", "x.safetensors"), "cannot read --pairs"),
    (("vector", "--model", MODEL, "--pairs", str(DATA / "caution-pairs.jsonl"), "--sweep", "a:b"), "is not A:B"),
    (("heads", "--model", MODEL, "--data", str(DATA / "injection-heads-heldout.jsonl"), "--samples", "4", "--out", "h.safetensors"),
     "--samples applies to the protocol mode"),
    (("probe", "--model", MODEL, "--data", str(DATA / "medical-fit.jsonl"), "--layer", "30", "--out", "p.safetensors"),
     "layer 30 outside 0..29"),
    (("probe", "--model", MODEL, "--data", str(DATA / "medical-fit.jsonl"), "--layer", "16", "--out", "p.pt"),
     "artifacts are .safetensors files"),
    (("token-probe", "--model", MODEL, "--data", "no-such.jsonl", "--layers", "6,40", "--out", "t.safetensors"),
     "give distinct layers in 0..29"),
    (("token-probe", "--model", MODEL, "--data", "no-such.jsonl", "--layers", "6,x", "--out", "t.safetensors"),
     "is not a list of layer numbers"),
])
def test_user_mistakes_get_one_line(capsys, argv, message):
    assert message in one_line_error(capsys, *argv)


def test_a_bad_row_is_named(capsys, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "instruction": "x", "data": "y", "label": 1}\n{"id": "b", "instruction": "x", "data": "y", "label": 2}\n')
    line = one_line_error(capsys, "probe", "--model", MODEL, "--data", str(data), "--layer", "3", "--out", str(tmp_path / "p.safetensors"))
    assert "row 2 (id b): 'label' must be 0 or 1, got 2" in line


def test_an_injected_row_without_its_inserted_span_is_named(capsys, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "instruction": "x", "data": "y", "label": 0}\n{"id": "b", "instruction": "x", "data": "y", "label": 1}\n')
    line = one_line_error(capsys, "token-probe", "--model", MODEL, "--data", str(data), "--out", str(tmp_path / "t.safetensors"))
    assert "row 2 (id b): label 1 needs 'inserted'" in line


def test_reproduce_refuses_files_without_a_recipe_and_changed_data(capsys, tmp_path):
    plain = tmp_path / "plain.safetensors"
    artifact.write(plain, {"vector": torch.zeros(4)}, {"model_name": MODEL})
    assert "records no build recipe" in one_line_error(capsys, "reproduce", str(plain))

    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "instruction": "x", "data": "y", "label": 1}\n')
    params = ProbeParams(model=MODEL, data=str(data), layer=3, holdout=0.0)
    built = Built(params, {"weight": torch.ones(4)}, {"model_name": MODEL},
                  data_sha256={str(data): artifact.file_sha256(data)})
    path = str(tmp_path / "probe.safetensors")
    save(built, path)
    data.write_text('{"id": "a", "instruction": "x", "data": "z", "label": 1}\n')
    assert "changed since the build" in one_line_error(capsys, "reproduce", path)


def test_files_are_deterministic_dated_by_source_date_epoch_and_lint_readable(tmp_path, monkeypatch):
    from innerguard.engine.lint.artifacts import read_header, read_int_pairs

    params = ProbeParams(model=MODEL, data="rows.jsonl", layer=3, holdout=0.0)
    built = Built(params, {"heads": torch.tensor([[13, 4], [2, 7]]), "bias": torch.tensor([0.5])},
                  {"model_name": MODEL, "num_layers": "30", "num_heads": "9"})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    a, b = save(built, str(tmp_path / "a.safetensors")), save(built, str(tmp_path / "b.safetensors"), record_out=str(tmp_path / "a.safetensors"))
    assert a.file_sha256 == b.file_sha256
    assert a.metadata["built_at"] == "1970-01-02T00:00:00+00:00" and a.metadata["source_date_epoch"] == "86400"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "172800")
    c = save(built, str(tmp_path / "c.safetensors"), record_out=str(tmp_path / "a.safetensors"))
    assert c.content_sha256 == a.content_sha256 and c.file_sha256 != a.file_sha256  # the date is in the file, not the content hash
    header = read_header(tmp_path / "a.safetensors")
    assert read_int_pairs(header, "heads") == [(13, 4), (2, 7)] and header.metadata["build"] == "probe"
    assert json.loads(header.metadata["parameters"])["layer"] == 3

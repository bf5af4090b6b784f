"""build heads: the Attention Tracker protocol through vLLM captures selects
the heads the Hugging Face reference selects, deterministically, and the
file records its recipe."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from innerguard.engine.build import HeadsParams, build_heads, save
from innerguard.engine.build import fit
from innerguard.engine.build.heads import BUILTIN, PROTOCOL_FILE, protocol_rows
from innerguard.engine.models import read_geometry
from innerguard.engine.reference import reference_head_ratios
from innerguard.engine.spans import chat_spans

from build_helpers import DATA, EPOCH

pytestmark = [pytest.mark.vllm, pytest.mark.model]

SAMPLES = 6


@pytest.fixture(scope="module")
def built(recording_llm, smollm2_dir):
    return build_heads(recording_llm, HeadsParams(model=str(smollm2_dir), samples=SAMPLES, seed=0))


def test_protocol_selection_equals_the_reference_selection(built, reference):
    model, tokenizer = reference
    rows, labels = protocol_rows(PROTOCOL_FILE, SAMPLES, 0)
    ratios = []
    for row in rows:
        spans = chat_spans(tokenizer, row["messages"], trusted_roles=("system", "developer"))
        ratios.append(reference_head_ratios(model, spans.input_ids, spans.trusted, spans.untrusted))
    ratios = torch.stack(ratios)
    y = torch.tensor(labels)
    margin = fit.head_margins(ratios[y == 0], ratios[y == 1], 1.0)
    want, _ = fit.select_heads(margin, 3)
    got = built.tensors["heads"]
    assert got.dtype == torch.int64 and got.shape[1] == 2 and len(got) >= 3
    assert got.tolist() == want.tolist()


def test_ratios_from_vllm_captures_match_the_reference(recording_llm, reference, smollm2_dir):
    from innerguard.engine.build.features import head_ratios

    model, tokenizer = reference
    rows, _ = protocol_rows(PROTOCOL_FILE, 2, 3)
    got = head_ratios(recording_llm, rows, read_geometry(smollm2_dir))
    for row, ratios in zip(rows, got):
        spans = chat_spans(tokenizer, row["messages"], trusted_roles=("system", "developer"))
        want = reference_head_ratios(model, spans.input_ids, spans.trusted, spans.untrusted)
        assert float((ratios.double() - want).abs().max()) < 1e-4


def test_two_builds_write_the_same_bytes(built, recording_llm, smollm2_dir, tmp_path):
    again = build_heads(recording_llm, HeadsParams(model=str(smollm2_dir), samples=SAMPLES, seed=0))
    first, second = save(built, str(tmp_path / "a.safetensors")), save(again, str(tmp_path / "b.safetensors"))
    assert first.content_sha256 == second.content_sha256
    # The same date and the same --out recorded: the same file.
    assert save(again, str(tmp_path / "c.safetensors"), record_out=str(tmp_path / "a.safetensors")).file_sha256 == first.file_sha256


def test_the_file_records_its_recipe(built, smollm2_dir, tmp_path):
    from safetensors import safe_open

    saved = save(built, str(tmp_path / "heads.safetensors"))
    with safe_open(saved.path, "pt") as f:
        meta = f.metadata()
        heads = f.get_tensor("heads")
    geometry = read_geometry(smollm2_dir)
    assert meta["build"] == "heads" and meta["seed"] == "0"
    assert meta["model_fingerprint"] == geometry.fingerprint
    assert (meta["num_layers"], meta["num_heads"]) == (str(geometry.num_layers), str(geometry.num_heads))
    assert json.loads(meta["parameters"])["samples"] == SAMPLES
    assert meta["command"].startswith(f"innerguard build heads --model {smollm2_dir} --samples {SAMPLES} -k 1.0")
    assert json.loads(meta["data_sha256"]) == {BUILTIN: hashlib.sha256(PROTOCOL_FILE.read_bytes()).hexdigest()}
    assert meta["source_date_epoch"] == EPOCH and meta["built_at"] == "2023-11-14T22:13:20+00:00"
    assert meta["content_sha256"] == saved.content_sha256
    assert torch.equal(heads, built.tensors["heads"])
    assert "unweighted" in meta["protocol"]


def test_supervised_rows_select_like_the_protocol_and_report_heldout_auroc(built, recording_llm, smollm2_dir, tmp_path):
    rows, labels = protocol_rows(PROTOCOL_FILE, SAMPLES, 0)
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps({**row, "label": y}) + "\n" for row, y in zip(rows, labels)))
    heldout = tmp_path / "heldout.jsonl"
    lines = (DATA / "injection-heads-heldout.jsonl").read_text().splitlines()
    heldout.write_text("\n".join(lines[:8]) + "\n")  # 4 benign, 4 injected
    supervised = build_heads(recording_llm, HeadsParams(model=str(smollm2_dir), data=str(data), samples=None,
                                                        heldout=str(heldout)))
    assert torch.equal(supervised.tensors["heads"], built.tensors["heads"])
    assert 0.0 <= supervised.figures["heldout_auroc"] <= 1.0
    assert supervised.figures["heldout_benign"] == 4 and supervised.figures["heldout_injected"] == 4
    assert any(line.startswith("held-out AUROC") for line in supervised.report)


# -- --generated: heads for an attention_tracker on the generated tokens --------

ANSWERS = DATA.parent / "system-prompt-leak" / "answers-fit.jsonl"


def test_answer_head_shares_from_vllm_captures_match_the_reference(recording_llm, reference, smollm2_dir):
    """Every head's share toward the system prompt at every answer token,
    from Q/K captured inside vLLM by the analyzer's own code, equals Hugging
    Face's attention weights (the answer as the last, assistant, message)."""
    from innerguard.engine.build.features import answer_head_shares
    from innerguard.engine.reference.scores import reference_generated_head_shares

    model, tokenizer = reference
    rows = [json.loads(line) for line in ANSWERS.read_text().splitlines()[:3]]
    got = answer_head_shares(recording_llm, rows, [r["completion"] for r in rows], read_geometry(smollm2_dir), "trusted")
    for row, shares in zip(rows, got):
        spans = chat_spans(tokenizer, [*row["messages"], {"role": "assistant", "content": row["completion"]}],
                           trusted_roles=("system", "developer"), add_generation_prompt=False)
        (answer,) = spans.role("assistant")
        want = reference_generated_head_shares(model, spans.input_ids, spans.role("system"), spans.role("user"), answer)
        assert shares.shape == want.shape and shares.shape[0] == answer[1] - answer[0] > 0
        assert float((shares.double() - want).abs().max()) < 1e-4


def test_generated_heads_are_those_that_rank_the_answers_best(recording_llm, smollm2_dir, tmp_path):
    """Four recitals of the system prompt against four ordinary answers:
    the kept heads are the --top of highest AUROC, and the recipe says how
    they were chosen."""
    lines = ANSWERS.read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    picked = [r for r in rows if r["style"] == "recital"][:4] + [r for r in rows if r["label"] == 0][:4]
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in picked))
    built = build_heads(recording_llm, HeadsParams(model=str(smollm2_dir), data=str(data), samples=None, generated=True, top=2))
    heads = built.tensors["heads"]
    assert heads.dtype == torch.int64 and heads.shape == (2, 2)
    assert built.figures["fit_auroc"] == 1.0  # recitals read the system prompt more, at every kept head
    assert "--generated" in built.params.command(None) and "--top 2" in built.params.command(None)
    with pytest.raises(Exception, match="only with --generated"):
        build_heads(recording_llm, HeadsParams(model=str(smollm2_dir), data=str(data), samples=None, toward="trusted"))

"""build token-probe on a small cut of data/injection/fit.jsonl: the file
holds what the token_probe analyzer reads and records its recipe and
threshold; two builds give the same tensors (``reproduce`` says so);
windows are labelled by the inserted span; folds keep groups whole."""
from __future__ import annotations

import json
from dataclasses import replace
import math

import pytest
import torch

from innerguard.engine.build import BuildDataError, TokenProbeParams, artifact, build_token_probe, reproduce, save
from innerguard.engine.build.data import read_jsonl
from innerguard.engine.build.token_probe import (
    _Row, _windows, captured_rows, fit_length_adjust, fit_rows, grouped_folds, inserted_rows, negative_weights)
from innerguard.engine.evaluate.metrics import threshold_for_fpr

from build_helpers import ROOT

LAYERS = (6, 12, 18)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """24 rows: 12 injected (corpus rows, attacks at start/middle/end) and 12 benign (notes among them)."""
    lines = (ROOT / "data" / "injection" / "fit.jsonl").read_text("utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    picked = [r for r in rows if r["label"] == 1][:12] + [r for r in rows if r["label"] == 0][:12]
    path = tmp_path_factory.mktemp("token-probe-data") / "fit.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked), "utf-8")
    return path


@pytest.fixture(scope="module")
def params(data, smollm2_dir):
    return TokenProbeParams(model=str(smollm2_dir), data=str(data), layers=LAYERS, window=12, folds=3)


@pytest.fixture(scope="module")
def built(recording_llm, params):
    return build_token_probe(recording_llm, params)


@pytest.mark.vllm
@pytest.mark.model
def test_the_file_holds_what_the_analyzer_reads_and_its_recipe(built, data, tmp_path):
    out = str(tmp_path / "probe.safetensors")
    save(built, out)
    tensors, meta = artifact.read(out)
    assert set(tensors) == {"weight.6", "weight.12", "weight.18", "bias"}
    assert all(tensors[f"weight.{layer}"].shape == (576,) and tensors[f"weight.{layer}"].dtype == torch.float32
               for layer in LAYERS)
    assert tensors["bias"].shape == (1,)
    assert meta["build"] == "token-probe" and meta["layers"] == "6,12,18" and meta["window"] == "12"
    assert f"--data {data} --layers 6,12,18 --window 12 --target-fpr 0.01 --folds 3" in meta["command"]
    report = json.loads(meta["report"])
    assert meta["threshold"] == f"{report['threshold']:.4f}"
    assert report["cv_fpr"] <= 0.01 and 0.0 <= report["cv_auroc"] <= 1.0 and report["rows"] == 24
    assert report["windows_positive"] > 0 and report["windows_negative"] > report["windows_positive"]
    assert any(line.startswith("policy rule: when: <signal> > ") for line in built.report)


@pytest.mark.vllm
@pytest.mark.model
def test_a_second_build_gives_the_same_tensors(built, recording_llm, tmp_path):
    # Exact equality, not a tolerance: same batches, one-thread fits.
    path = str(tmp_path / "probe.safetensors")
    save(built, path)
    result = reproduce(recording_llm, path)
    assert result.same and [t.detail for t in result.tensors] == ["identical"] * 4


@pytest.mark.vllm
@pytest.mark.model
def test_a_generated_probe_reads_each_answers_tokens_and_labels_every_window_by_the_answer(recording_llm, reference,
                                                                                          smollm2_dir, tmp_path):
    """--generated: the rows are the answers' tokens, teacher forced after the
    prompt (equal to Hugging Face's residuals there), every window of a
    label-1 answer positive and of a label-0 answer negative; an answer
    shorter than the window is left out, as the analyzer never judges it."""
    from innerguard.engine.reference.scores import reference_residual
    from innerguard.engine.spans import chat_spans

    answers = [json.loads(line) for line in (ROOT / "data" / "system-prompt-leak" / "answers-fit.jsonl").read_text().splitlines()]
    picked = [r for r in answers if r["style"] == "recital"][:3] + [r for r in answers if r["label"] == 0][:3]
    picked.append({**picked[-1], "id": "short", "completion": "No."})
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in picked))
    rows = captured_rows(recording_llm, read_jsonl(data, "--data"), LAYERS, generated=True, window=8)
    assert len(rows) == 6 and [r.label for r in rows] == [1, 1, 1, 0, 0, 0]
    model, tokenizer = reference
    for row, raw in zip(rows, picked):
        spans = chat_spans(tokenizer, [*raw["messages"], {"role": "assistant", "content": raw["completion"]}],
                           add_generation_prompt=False)
        (start, end), = spans.role("assistant")
        assert row.tokens.shape == (end - start, len(LAYERS) * 576)
        want = torch.cat([reference_residual(model, spans.input_ids, layer, slice(start, end)) for layer in LAYERS], -1)
        assert float((row.tokens - want).abs().max()) < 1e-3 * float(want.abs().max())
        _, labels = _windows(row, window=8, per_row=100)
        assert set(labels) == {row.label}

    built = build_token_probe(recording_llm, TokenProbeParams(model=str(smollm2_dir), data=str(data), layers=LAYERS,
                                                              window=8, folds=2, generated=True))
    assert built.figures["rows"] == 6 and built.figures["answers_left_out"] == 1
    assert built.figures["cv_auroc"] == 1.0  # a recital reads nothing like an ordinary answer
    assert "--generated" in built.params.command(None) and "generated tokens" in built.metadata["protocol"]
    with pytest.raises(BuildDataError, match="--generated needs a non-empty 'completion'"):
        captured_rows(recording_llm, read_jsonl(ROOT / "data" / "injection" / "dev.jsonl", "--data"), LAYERS, generated=True)


def _row(label: int, tokens: int, inserted=None) -> _Row:
    return _Row(label, "g", "email", torch.arange(tokens, dtype=torch.float32)[:, None].repeat(1, 2), inserted)


def test_windows_inside_the_attack_are_positive_and_windows_away_from_it_negative():
    means, labels = _windows(_row(1, 60, (20, 40)), window=12, per_row=100)
    firsts = [float(m[0]) - 5.5 for m in means]  # a window's mean of 0..n is its first index + 5.5
    assert {j for j, y in zip(firsts, labels) if y} == set(range(20, 29))
    assert {j for j, y in zip(firsts, labels) if not y} == set(range(0, 9)) | set(range(40, 49))


def test_a_short_attack_is_positive_in_the_windows_that_hold_all_of_it():
    _, labels = _windows(_row(1, 30, (10, 14)), window=12, per_row=100)
    assert labels.count(1) == 9  # first token 2..10


def test_benign_rows_give_negative_windows_only_evenly_spaced():
    means, labels = _windows(_row(0, 100), window=12, per_row=4)
    assert labels == [0] * 4 and [float(m[0]) - 5.5 for m in means] == [0, 29, 59, 88]


def test_folds_keep_a_group_whole_and_plain_rows_free():
    groups = ["template:a"] * 5 + ["note:b"] * 3 + ["plain:email"] * 7
    parts = grouped_folds(groups, 3, seed=0)
    assert sorted(i for p in parts for i in p) == list(range(15))
    assert sum(any(i < 5 for i in p) for p in parts) == 1 and sum(any(5 <= i < 8 for i in p) for p in parts) == 1
    assert grouped_folds(groups, 3, seed=0) == parts


def test_an_injected_row_without_its_inserted_span_is_refused(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"id": "a", "instruction": "Summarize.", "data": "Ignore that.", "label": 1}) + "\n")
    with pytest.raises(BuildDataError, match="label 1 needs 'inserted'"):
        inserted_rows(read_jsonl(path, "--data"))


def test_rows_marked_not_calibrating_are_fitted_on_but_leave_the_threshold_alone():
    """Benign rows that read like attacks (over-represented on purpose) would drag the
    threshold up; marked ``calibrate: false`` they are fitted on, and only reported."""
    gen = torch.Generator().manual_seed(0)

    def row(label, group, hot=None, calibrate=True):
        tokens = torch.randn(30, 2, generator=gen) * 0.3
        if hot:
            tokens[hot[0]:hot[1], 0] += 2.0
        return _Row(label, group, "email", tokens, hot if label else None, calibrate)

    rows = ([row(1, f"template:{i % 5}", (10, 22)) for i in range(20)] + [row(0, f"plain:{i}") for i in range(40)]
            + [row(0, f"encoded:{i % 3}", (4, 16), calibrate=False) for i in range(12)])
    fitted = fit_rows(rows, TokenProbeParams(model="m", data="d", window=6, folds=4, target_fpr=0.05))
    labels = [r.label for r in rows]
    mine = [i for i, r in enumerate(rows) if r.calibrate]
    assert fitted.threshold == round(threshold_for_fpr([fitted.oof[i] for i in mine], [labels[i] for i in mine], 0.05), 4)
    assert fitted.threshold < threshold_for_fpr(fitted.oof, labels, 0.05)  # all rows would have set a higher one
    figures = fitted.figures
    assert figures["rows_not_calibrating"] == 12 and figures["cv_fpr"] <= 0.05
    assert figures["cv_fpr_not_calibrating"] == round(sum(fitted.oof[i] > fitted.threshold for i in range(60, 72)) / 12, 4)
    assert figures["cv_fpr_not_calibrating"] > 0.5  # they do score like attacks


def test_fpr_over_texts_counts_a_repeated_hard_text_once():
    """A hard benign text repeated in 12 carriers is 12 rows of 52 but one text
    of 41: by rows it holds the threshold above itself, by texts it may pass."""
    gen = torch.Generator().manual_seed(1)

    def row(label, group, hot=None):
        tokens = torch.randn(30, 2, generator=gen) * 0.3
        if hot:
            tokens[hot[0]:hot[1], 0] += 2.0
        return _Row(label, group, "email", tokens, hot if label else None)

    rows = ([row(1, f"template:{i % 5}", (10, 22)) for i in range(20)] + [row(0, f"plain:{i}") for i in range(40)]
            + [row(0, "note:hard", (4, 16)) for _ in range(12)])
    weights = negative_weights(rows, "text")
    assert weights[:20] == [1.0] * 20 and weights[20:60] == [1.0] * 40 and weights[60:] == [1 / 12] * 12
    assert negative_weights(rows, "row") == [1.0] * len(rows)
    by_rows = fit_rows(rows, TokenProbeParams(model="m", data="d", window=6, folds=4, target_fpr=0.05))
    by_texts = fit_rows(rows, TokenProbeParams(model="m", data="d", window=6, folds=4, target_fpr=0.05, fpr_unit="text"))
    assert by_texts.oof == by_rows.oof  # the unit moves the threshold only
    hard = by_texts.oof[60:]
    assert sum(s > by_rows.threshold for s in hard) <= 2  # 5 % of 52 rows
    assert sum(s > by_texts.threshold for s in hard) >= 9  # the one text may pass, in most of its carriers
    assert by_texts.figures["cv_fpr_texts"] <= 0.05 < by_texts.figures["cv_fpr"]
    assert by_texts.figures["cv_tpr"] >= by_rows.figures["cv_tpr"]
    with pytest.raises(BuildDataError, match="--fpr-unit"):
        TokenProbeParams(model="m", data="d", fpr_unit="group").check(30)


def test_length_adjust_is_the_slope_of_the_benign_tail_against_ln_windows():
    gen = torch.Generator().manual_seed(3)
    windows = [max(1, int(math.exp(float(u) * math.log(4000)))) for u in torch.rand(800, generator=gen)]  # log-uniform
    scores = [0.7 * math.log(w) + float(torch.randn(1, generator=gen)) for w in windows]
    assert fit_length_adjust(scores, windows) == pytest.approx(0.7, abs=0.1)
    assert fit_length_adjust([-s for s in scores], windows) == 0.0  # never adds to long texts


@pytest.mark.parametrize("windows, message", [([5] * 40, "several lengths"), ([1, 100] * 4, "at least 10")])
def test_length_adjust_refuses_data_it_cannot_fit_a_slope_on(windows, message):
    with pytest.raises(BuildDataError, match=message):
        fit_length_adjust([0.0] * len(windows), windows)


def test_a_length_adjusted_probe_scores_long_and_short_benign_texts_alike():
    """Benign token scores are noise, so the window maximum of a long text is
    higher than a short one's; adjusted, their medians meet."""
    gen = torch.Generator().manual_seed(4)

    def row(label, i, n):
        tokens = torch.randn(n, 2, generator=gen)
        hot = (n // 2, n // 2 + 12) if label else None
        if hot:
            tokens[hot[0]:hot[1], 0] += 3.0
        return _Row(label, f"plain:{i}", "email", tokens, hot)

    rows = [row(i % 2, i, n) for i, n in enumerate([40, 400, 1600] * 30)]
    params = TokenProbeParams(model="m", data="d", window=8, folds=3, target_fpr=0.05)
    raw = fit_rows(rows, params).figures
    adjusted = fit_rows(rows, replace(params, length_adjust=True)).figures
    assert raw["length_adjust"] == 0 and adjusted["length_adjust"] > 0
    spread = lambda medians: max(medians.values()) - min(medians.values())  # noqa: E731
    assert spread(adjusted["benign_median_by_length"]["signal"]) < 0.5 * spread(raw["benign_median_by_length"]["raw"])

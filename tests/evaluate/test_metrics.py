"""Detection metrics, score choice and labelled data: pure Python, no engine."""
from __future__ import annotations

import json

import pytest

from innerguard.engine.evaluate import DataError, ScoreError, choose_score, load_rows
from innerguard.engine.evaluate.metrics import Confusion, auroc, roc_curve, threshold_for_fpr, tpr_at_fpr, wilson
from innerguard.engine.plan import PolicyProgram, RuleProgram
from innerguard.engine.policy import conditions


def test_auroc_is_one_for_perfect_separation_and_half_for_ties():
    assert auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert auroc([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1]) == 0.5
    assert auroc([0.9, 0.1], [0, 1]) == 0.0


def test_auroc_needs_both_labels():
    assert auroc([0.1, 0.2], [1, 1]) is None


def test_roc_curve_runs_from_origin_to_one_one():
    curve = roc_curve([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    assert (curve[0].fpr, curve[0].tpr) == (0.0, 0.0)
    assert (curve[-1].fpr, curve[-1].tpr) == (1.0, 1.0)


def test_tpr_at_fpr_takes_the_best_point_within_the_budget():
    scores = [0.1, 0.2, 0.3, 0.95, 0.6, 0.7, 0.9]
    labels = [0, 0, 0, 0, 1, 1, 1]
    tpr, threshold = tpr_at_fpr(scores, labels, 0.0)
    assert tpr == 0.0 and threshold == float("inf")  # the top score is a negative
    tpr, threshold = tpr_at_fpr(scores, labels, 0.25)
    assert tpr == 1.0 and threshold == 0.6


def test_threshold_for_fpr_keeps_the_allowed_negatives_above():
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97]
    labels = [0] * 10 + [1]
    t = threshold_for_fpr(scores, labels, 0.1)  # one negative of ten may pass
    assert 0.9 < t <= 0.95
    assert Confusion.of([s >= t for s in scores], labels).fpr == 0.1


def test_threshold_for_fpr_weighs_repeated_negatives_as_one_text():
    # the top negative is one text in four rows: by rows it is 40 % of the
    # negatives, by texts (weight 1/4 each) one text of seven
    scores = [0.9, 0.9, 0.9, 0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.95]
    labels = [0] * 10 + [1]
    weights = [0.25] * 4 + [1.0] * 6 + [1.0]
    assert threshold_for_fpr(scores, labels, 0.15) > 0.9  # by rows: at most one of ten rows may pass
    t = threshold_for_fpr(scores, labels, 0.15, weights)  # one text of seven may pass
    assert 0.6 < t < 0.9
    assert threshold_for_fpr(scores, labels, 0.1, weights) > 0.9  # not even one text of seven


def _plan(*rules, signals=("p.a", "p.b", "p.focus")):
    from types import SimpleNamespace

    program = PolicyProgram(name="p", version="1", revision="r" * 64, mode="enforce", on_error="fail-closed", priority=0,
                            selector={}, spans={}, signals=signals,
                            rules=tuple(RuleProgram(id=f"r{i}", condition=conditions.to_data(conditions.parse(w)), action=a)
                                        for i, (w, a) in enumerate(rules)))
    return SimpleNamespace(policies=(program,))


@pytest.mark.parametrize("k, n, low, high", [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605),
                                              (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)])
def test_wilson_intervals_match_newcombes_worked_examples(k, n, low, high):
    # Newcombe, "Two-sided confidence intervals for the single proportion",
    # Statistics in Medicine 17 (1998), Table I, method 3 (score interval).
    assert wilson(k, n) == pytest.approx([low, high], abs=5e-5)
    assert wilson(n - k, n) == pytest.approx([1 - high, 1 - low], abs=5e-5)


def test_the_confusion_reports_its_intervals_and_none_without_rows():
    c = Confusion(tp=277, fp=4, tn=296, fn=23).to_dict()
    assert c["recall_95"][0] < c["recall"] < c["recall_95"][1] and c["fpr_95"][0] < c["fpr"] < c["fpr_95"][1]
    assert Confusion(tp=3, fp=0, tn=0, fn=1).to_dict()["fpr_95"] is None


def test_the_report_prints_the_intervals_at_the_policy_thresholds():
    from innerguard.engine.evaluate.report import RowResult, build_report, format_text
    from innerguard.engine.evaluate.score import Score

    # The shipped policy's confusion on data/injection/test.jsonl: tp 277, fp 4, tn 296, fn 23.
    rows = [RowResult(f"r{i}", label, "email", 100, blocked, 5.0 if blocked else -5.0, {"p.s": 0.0})
            for i, (label, blocked) in enumerate([(1, True)] * 277 + [(1, False)] * 23 + [(0, True)] * 4 + [(0, False)] * 296)]
    report = build_report(rows, Score("p", ("p.s",), True, (2.645,)), policy_version="1", data="d.jsonl")
    json.dumps(report)
    assert "95% intervals (Wilson): recall/TPR 88.8-94.8%, FPR 0.5-3.4%" in format_text(report)


def test_score_orientation_follows_the_block_rule():
    score = choose_score(_plan(("focus < 0.24", "block"), ("a > 0.5", "flag")))
    assert score.signals == ("p.focus",) and not score.higher_is_positive and score.thresholds == (0.24,)


def test_an_or_of_probes_is_scored_by_their_maximum():
    score = choose_score(_plan(("a > 0.9 or 0.9 < b", "block")))
    assert score.signals == ("p.a", "p.b") and score.higher_is_positive
    assert score.signal == "p.max(a, b)"
    assert score.value({"p.a": 0.2, "p.b": 0.7}) == 0.7
    assert score.value({"p.a": 0.2}) is None


def test_a_named_score_must_exist():
    with pytest.raises(ScoreError, match="no signal 'nope'"):
        choose_score(_plan(("a > 0.9", "block")), "nope")


def test_a_policy_without_a_block_rule_is_measured_on_its_acting_rule():
    score = choose_score(_plan(("a > 0.18", "steer"), ("b > 0.9", "flag")))
    assert score.signals == ("p.a",) and score.higher_is_positive and score.thresholds == (0.18,) and score.action == "steer"
    assert choose_score(_plan(("a > 0.9", "block"), ("b > 0.5", "steer"))).action == "block"


def test_no_rule_on_a_numeric_signal_asks_for_a_score():
    with pytest.raises(ScoreError, match="--score"):
        choose_score(_plan(("true", "steer")))


def test_rows_need_a_label_and_text(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"instruction": "t", "data": "x", "label": 1}) + "\n" + json.dumps({"instruction": "t", "data": "y", "label": True}) + "\n")
    with pytest.raises(DataError, match=r"d.jsonl:2: 'label' must be 0 or 1"):
        load_rows(path)
    path.write_text(json.dumps({"instruction": "t", "label": 1}) + "\n")
    with pytest.raises(DataError, match=r"d.jsonl:1: a row needs 'instruction' and 'data'"):
        load_rows(path)


def test_a_line_separator_inside_a_string_does_not_cut_a_row(tmp_path):
    """JSON Lines are cut at "\n" only: U+2028, U+0085 and U+001C are legal
    inside a JSON string (json.dumps(ensure_ascii=False) writes them raw),
    and third-party text carries them; eval, build and run read such rows whole."""
    from innerguard.engine.build.data import read_jsonl

    text = "a\u2028b\u0085c\u001cd"
    rows = [{"instruction": "t", "data": text, "label": 1}, {"instruction": "t", "data": "plain", "label": 0}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert [r.label for r in load_rows(path)] == [1, 0]
    assert read_jsonl(path, "--data").rows[0]["data"] == text


def test_rows_of_one_label_cannot_be_evaluated(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "label": 0}) + "\n")
    with pytest.raises(DataError, match="both labels"):
        load_rows(path)


def test_shipped_data_splits_load_and_are_balanced():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "data" / "injection"
    fit, dev, test = (load_rows(root / f"{name}.jsonl") for name in ("fit", "dev", "test"))
    assert sum(r.label for r in dev) * 2 == len(dev) and sum(r.label for r in test) * 2 == len(test)
    data = [{r.request["data"] for r in rows} for rows in (fit, dev, test)]
    assert not data[0] & data[1] and not data[2] & (data[0] | data[1])

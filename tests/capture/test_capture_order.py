"""The manifest follows the input order, whatever order vLLM finishes in;
last-token captures have one size whatever the prompt length."""
from __future__ import annotations

import json

import pytest

from innerguard.engine.capture import CaptureSet, CaptureSpec, capture_to_disk
from innerguard.engine.requests import GuardRequest
from innerguard.engine.requests.spans import render

pytestmark = [pytest.mark.vllm, pytest.mark.model]


def _rows() -> list[dict]:
    # Long prompts first, and fewer tokens asked of the later (short) ones:
    # the short ones finish first. Ids "0".."11": as strings, "10" < "2".
    rows = []
    for i in range(12):
        words = 300 - 25 * i if i % 2 == 0 else 3 + i
        rows.append({"id": str(i), "instruction": "Repeat the text.", "data": " ".join(["lorem", "ipsum"] * words)[: 6 * words],
                     "max_tokens": 12 - i})
    return rows


def test_manifest_follows_input_order(recording_guarded, tmp_path):
    rows = _rows()
    store = capture_to_disk(recording_guarded, rows, CaptureSpec(layers=(0, 5, 29), generated=True), tmp_path / "caps")
    manifest = json.loads((tmp_path / "caps" / "manifest.json").read_text())
    assert [r["id"] for r in manifest["requests"]] == [str(i) for i in range(12)]
    assert [r["index"] for r in manifest["requests"]] == list(range(12))
    assert manifest["layers"] == [0, 5, 29] and manifest["dtype"] == "float32" and manifest["mode"] == "last_token"
    assert manifest["model"]["fingerprint"] and manifest["spec"]["generated"] is True
    tokenizer = recording_guarded.tokenizer
    reopened = CaptureSet(tmp_path / "caps")
    for row, entry, result in zip(rows, manifest["requests"], reopened):
        expected = len(render(tokenizer, GuardRequest.from_row(row, row["id"]), ()).input_ids)
        assert entry["error"] is None
        assert entry["num_prompt_tokens"] == expected == result.num_prompt_tokens
        assert entry["num_generated_tokens"] == row["max_tokens"]
        # the last prompt token, then one row per generated token fed back (the last one never is)
        assert result.positions.tolist() == list(range(expected - 1, expected + row["max_tokens"] - 1))
        assert entry["shard"] and set(entry["tensors"]) == {"hidden", "positions"}
    assert reopened.rows == rows


def test_last_token_capture_size_does_not_depend_on_prompt_length(recording_guarded, tmp_path):
    rows = [{"id": str(i), "prompt": "word " * n} for i, n in enumerate((4, 60, 250, 500))]
    store = capture_to_disk(recording_guarded, rows, CaptureSpec(layers="all"), tmp_path / "caps")
    lengths = [r["num_prompt_tokens"] for r in store.manifest["requests"]]
    assert lengths == sorted(lengths) and lengths[-1] > 400
    shapes = {tuple(result.hidden.shape) for result in store}
    assert shapes == {(30, 1, 576)}

"""Capture specs and replay needs, without an engine."""
from __future__ import annotations

import pytest

from innerguard.engine.capture import CaptureSpec, CaptureSpecError, parse_layers, parse_qk_heads
from innerguard.engine.capture.replay import missing_captures
from innerguard.engine.plan import ModelGeometry, QKCapture, ResidualCapture

GEOMETRY = ModelGeometry("LlamaForCausalLM", 30, 576, 9, 3, 64)


def test_layers_parse_lists_ranges_and_all():
    assert parse_layers(["0", "5", "29"]) == (0, 5, 29)
    assert parse_layers(["0,5", "10-12"]) == (0, 5, 10, 11, 12)
    assert parse_layers(["all"]) == "all"
    assert CaptureSpec(layers="all").resolve(GEOMETRY).layers == tuple(range(30))


def test_qk_heads_merge_per_layer():
    assert parse_qk_heads(["13:0", "13:4", "15:1,2"]) == ((13, (0, 4)), (15, (1, 2)))
    with pytest.raises(CaptureSpecError, match="LAYER:HEAD"):
        parse_qk_heads(["13"])


def test_out_of_range_layers_and_heads_are_named():
    with pytest.raises(CaptureSpecError, match=r"layers \[30\] outside 0..29"):
        CaptureSpec(layers=(0, 30)).resolve(GEOMETRY)
    with pytest.raises(CaptureSpecError, match=r"heads \[9\] outside 0..8"):
        CaptureSpec(qk=((13, (9,)),)).resolve(GEOMETRY)
    with pytest.raises(CaptureSpecError, match="nothing to capture"):
        CaptureSpec().resolve(GEOMETRY)


def test_last_token_size_does_not_depend_on_prompt_length():
    spec = CaptureSpec(layers="all").resolve(GEOMETRY)
    assert spec.bytes_per_request(GEOMETRY, 512) - spec.bytes_per_request(GEOMETRY, 16) == 0
    half = CaptureSpec(layers="all", dtype="float16").resolve(GEOMETRY)
    assert half.bytes_per_request(GEOMETRY, 16) < spec.bytes_per_request(GEOMETRY, 16)


def test_missing_captures_name_layers_heads_and_mode():
    class Plan:
        analyzers = ()
        qk_captures = (QKCapture(13, (0, 4)), QKCapture(20, (1,), "all"))
        residual_captures = (ResidualCapture(15),)

    manifest = {"layers": [4], "mode": "last_token", "qk": [{"layer": 13, "heads": [0], "kv_heads": [0]},
                                                           {"layer": 20, "heads": [1], "kv_heads": [0]}]}
    missing = missing_captures(Plan, manifest)
    assert any("layer 13 heads [4]" in m for m in missing)
    assert any("all_tokens" in m and "layer 20" in m for m in missing)
    assert any("--layers 15" in m for m in missing)

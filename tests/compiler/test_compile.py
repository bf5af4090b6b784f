"""`innerguard compile`: the smallest plan, deterministic, explained."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from innerguard.engine.compiler import CompileError, compile_policies, plan_json

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "policies"
CLI = [sys.executable, "-m", "innerguard.engine.cli"]

TWO_READERS = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: {name}, version: 1.0.0, owner: tests, description: reads layer 13}}
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  focus:
    analyzer: attention_tracker
    heads: {heads}
  unused:
    analyzer: attention_tracker
    heads: [[29, 8]]
rules:
  - id: flag-low
    when: focus < 0.2
    action: flag
"""


def compile_cli(*args):
    return subprocess.run([*CLI, "compile", *args], capture_output=True, text=True, timeout=300)


def test_compile_text_names_every_capture_and_the_rule_that_needs_it(smollm2_dir):
    result = compile_cli(str(SHIPPED), "--model", str(smollm2_dir), "--format", "text")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    plan, _ = compile_policies([SHIPPED], smollm2_dir)
    for capture in plan.qk_captures:
        assert f"layer {capture.layer:>2}: post-RoPE Q of" in text
    for capture in plan.residual_captures:
        assert f"layer {capture.layer:>2}: residual stream" in text
    for analyzer in plan.analyzers:
        assert f"needed by signal {analyzer.signal}" in text
    for steer in plan.steers:
        assert f"needed by rule {steer.id}" in text
    assert f"bundle hash {plan.bundle_hash}" in text


def test_json_plan_validates_against_its_schema(smollm2_dir):
    result = compile_cli(str(SHIPPED), "--model", str(smollm2_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    schema = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(result.stdout))


def test_bundle_hash_is_stable_and_tracks_every_artifact_byte(smollm2_dir, tmp_path):
    copies = []
    for name in ("a", "b"):
        shutil.copytree(SHIPPED, tmp_path / name, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
        copies.append(tmp_path / name)
    first, _ = compile_policies([copies[0]], smollm2_dir)
    second, _ = compile_policies([copies[1]], smollm2_dir)
    assert first.bundle_hash == second.bundle_hash  # same inputs, another folder
    assert plan_json(compile_policies([copies[0]], smollm2_dir)[0]) == plan_json(first)  # byte-identical
    artifact = copies[1] / "artifacts" / "smollm2-135m-instruct.caution-steer.safetensors"
    raw = bytearray(artifact.read_bytes())
    raw[-4] ^= 0x01  # the lowest mantissa byte of the last float: still a valid vector
    artifact.write_bytes(bytes(raw))
    changed, _ = compile_policies([copies[1]], smollm2_dir)
    assert changed.bundle_hash != first.bundle_hash


def test_overlapping_needs_are_captured_once_and_unused_signals_not_at_all(smollm2_dir, tmp_path):
    (tmp_path / "one.yaml").write_text(TWO_READERS.format(name="one", heads="[[13, 0], [13, 4]]"))
    (tmp_path / "two.yaml").write_text(TWO_READERS.format(name="two", heads="[[13, 4], [13, 7], [20, 1]]"))
    plan, _ = compile_policies([tmp_path], smollm2_dir)
    assert [(c.layer, c.heads) for c in plan.qk_captures] == [(13, (0, 4, 7)), (20, (1,))]
    assert sorted(a.signal for a in plan.analyzers) == ["one.focus", "two.focus"]
    assert not plan.residual_captures and not plan.steers


def test_geometry_mismatch_fails_with_the_linters_finding(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_tiny_model

    tiny = build_tiny_model("llama", tmp_path / "tiny")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "one.yaml").write_text(TWO_READERS.format(name="one", heads="[[13, 0]]"))
    with pytest.raises(CompileError) as error:
        compile_policies([tmp_path / "p"], tiny)
    message = str(error.value)
    assert "one.yaml:" in message and " IG" in message and "layer" in message
    assert "\n" not in message


def test_a_logistic_probe_takes_its_bias_from_its_artifact(smollm2_dir):
    from safetensors import safe_open

    plan, _ = compile_policies([SHIPPED], smollm2_dir)
    spec = next(a for a in plan.analyzers if a.signal == "medical-topic-steer.medical")
    with safe_open(str(SHIPPED / "artifacts" / "smollm2-135m-instruct.medical-concept.safetensors"), framework="pt") as f:
        assert spec.params["bias"] == pytest.approx(float(f.get_tensor("bias")[0]))
    assert spec.params["score"] == "probability"


def test_an_output_rule_compiles_to_a_plan_the_schema_accepts(smollm2_dir):
    example = ROOT / "examples" / "canary-leak"
    result = compile_cli(str(example), "--model", str(smollm2_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    schema = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())
    plan = json.loads(result.stdout)
    jsonschema.Draft202012Validator(schema).validate(plan)
    (program,) = plan["policies"]
    assert program["signals"] == []  # the worker reads none of them: they are on the generated text
    assert {r["id"]: (r["action"], r["params"].get("output")) for r in program["rules"]} == {
        "stop-canary-leak": ("stop", True), "flag-instruction-talk": ("flag", True)}
    text = compile_cli(str(example), "--model", str(smollm2_dir), "--format", "text").stdout
    assert "generated text (outside the model, RE2)" in text


def test_a_repeats_signal_and_output_settings_compile_into_the_plan(smollm2_dir):
    example = ROOT / "examples" / "system-prompt-leak"
    result = compile_cli(str(example), "--model", str(smollm2_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    jsonschema.Draft202012Validator(json.loads((ROOT / "schemas" / "plan.schema.json").read_text())).validate(plan)
    text, attention = sorted(plan["analyzers"], key=lambda a: a["kind"] != "text")
    assert {k: text["params"][k] for k in ("span", "repeats", "words")} == {"span": "generated", "repeats": "trusted", "words": 8}
    assert attention["kind"] == "attention_tracker" and len(attention["params"]["heads"]) == 3
    assert {k: attention["params"][k] for k in ("span", "toward", "window")} == {"span": "generated", "toward": "trusted", "window": 8}
    recites, reads = plan["policies"][0]["rules"]
    assert {k: recites["params"][k] for k in ("output", "hold_back", "every")} == {"output": True, "hold_back": 12, "every": 1}
    assert "decode" not in recites["params"] and reads["params"]["decode"] is True  # the engine reads one, the worker the other

"""Each seeded defect is reported with the right rule id at the right line.

Every case is a whole policy (most start with HEAD, lines 1-8), the rule id
the linter must report, and the 1-based line it must point at.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from artifact_builders import HIDDEN, write_heads, write_vector
from innerguard.engine.lint import lint_paths

HEAD = """\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: demo
  version: "1"
spans:
  trusted: {roles: [system]}
  untrusted: {roles: [user]}
"""  # 8 lines: bodies start at line 9

FOCUS = """\
signals:
  focus:
    analyzer: attention_tracker
    heads: [[1, 2]]
"""  # lines 9-12: rules start at line 13


OUTPUT_SIGNAL = """\
  leak:
    analyzer: text
    keywords: [ZEBRA-42]
    span: generated
"""  # lines 13-16: rules start at line 17


@dataclass
class Case:
    id: str
    text: str
    rule: str
    line: int
    setup: Callable[[Path], None] | None = None
    model: str | None = None
    extra_files: dict[str, str] = field(default_factory=dict)


def rules(*body: str) -> str:
    return HEAD + FOCUS + "rules:\n" + "".join(body)  # first rule item at line 14


BLOCK_LOW = "  - id: low\n    when: focus < 0.4\n    action: block\n"  # 3 lines


def vec(name="artifacts/v.safetensors", **kw):
    def setup(folder: Path) -> None:
        write_vector(folder / name, **kw)
    return setup


CASES = [
    # ---- schema -----------------------------------------------------------
    Case("unknown-top-key", HEAD + "modee: enforce\n" + FOCUS.replace("signals", "signals", 1) + "rules:\n" + BLOCK_LOW, "IG101", 9),
    Case("unknown-metadata-key", HEAD.replace('  version: "1"\n', '  version: "1"\n  ownr: me\n'), "IG101", 6),
    Case("missing-version", HEAD.replace('  version: "1"\n', "") + FOCUS + "rules:\n" + BLOCK_LOW, "IG102", 3),
    Case("missing-rules", HEAD + FOCUS, "IG102", 1),
    Case("priority-wrong-type", HEAD + "priority: high\n" + FOCUS + "rules:\n" + BLOCK_LOW, "IG103", 9),
    Case("mode-not-allowed", HEAD + "mode: enforcing\n" + FOCUS + "rules:\n" + BLOCK_LOW, "IG104", 9),
    Case("api-version", HEAD.replace("innerguard/v1", "innerguard/v2") + FOCUS + "rules:\n" + BLOCK_LOW, "IG104", 1),
    Case("bad-policy-name", HEAD.replace("name: demo", "name: Demo_Policy") + FOCUS + "rules:\n" + BLOCK_LOW, "IG105", 4),
    Case("empty-rules", HEAD + FOCUS + "rules: []\n", "IG105", 13),
    Case("bad-signal-name", HEAD + "signals:\n  bad-name:\n    analyzer: text\n    pattern: x\nrules:\n" + BLOCK_LOW, "IG105", 10),
    Case("signal-named-like-a-keyword", HEAD + "signals:\n  max:\n    analyzer: text\n    pattern: x\nrules:\n  - id: r\n    when: \"true\"\n    action: flag\n", "IG105", 10),
    Case("signal-unknown-key", HEAD + FOCUS + "    threshhold: 0.4\nrules:\n" + BLOCK_LOW, "IG101", 13),
    Case("unknown-analyzer", HEAD + "signals:\n  focus:\n    analyzer: attention\n    heads: [[1, 2]]\nrules:\n" + BLOCK_LOW, "IG104", 11),
    Case("heads-not-list", HEAD + "signals:\n  focus:\n    analyzer: attention_tracker\n    heads: 3\nrules:\n" + BLOCK_LOW, "IG103", 12),
    Case("unknown-action", rules("  - id: r\n    when: focus < 0.4\n    action: blok\n"), "IG104", 16),
    Case("rule-missing-when", rules("  - id: r\n    action: block\n"), "IG102", 14),
    Case("steer-unknown-key", rules("  - id: s\n    when: focus < 0.4\n    action: steer\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n      coeficient: 2\n"), "IG101", 20, setup=vec(layer=1)),
    # ---- conditions --------------------------------------------------------
    Case("condition-syntax", rules("  - id: r\n    when: focus <\n    action: block\n"), "IG201", 15),
    Case("chained-comparison", rules("  - id: r\n    when: 0.2 < focus < 0.5\n    action: block\n"), "IG201", 15),
    Case("unknown-function", rules("  - id: r\n    when: median(focus) < 0.5\n    action: block\n"), "IG201", 15),
    Case("undefined-signal", rules("  - id: r\n    when: fokus < 0.4\n    action: block\n"), "IG202", 15),
    Case("numeric-as-boolean", rules("  - id: r\n    when: focus\n    action: block\n"), "IG203", 15),
    Case("number-in-and", rules("  - id: r\n    when: focus and focus < 0.3\n    action: block\n"), "IG203", 15),
    Case("aggregate-on-scalar", rules("  - id: r\n    when: max(focus) < 0.4\n    action: block\n"), "IG203", 15),
    Case("threshold-out-of-range", rules("  - id: r\n    when: focus < 1.5\n    action: block\n"), "IG204", 15),
    Case("never-fires-below-range", rules("  - id: r\n    when: focus < 0\n    action: block\n"), "IG205", 15),
    Case("never-fires-above-range", rules("  - id: r\n    when: focus > 1\n    action: block\n"), "IG205", 15),
    Case("contradiction", rules("  - id: r\n    when: focus < 0.2 and focus > 0.5\n    action: block\n"), "IG205", 15),
    Case("when-false", rules("  - id: r\n    when: false\n    action: block\n"), "IG205", 15),
    Case("always-fires", rules("  - id: r\n    when: focus >= 0 or focus < 0.5\n    action: flag\n"), "IG206", 15),
    Case("shadowed-by-block", rules(BLOCK_LOW, "  - id: lower\n    when: focus < 0.2\n    action: flag\n"), "IG207", 18),
    Case("duplicate-rule-id", rules(BLOCK_LOW, "  - id: low\n    when: focus > 0.9\n    action: flag\n"), "IG208", 17),
    Case("unused-signal", HEAD + FOCUS + "  spare:\n    analyzer: text\n    keywords: [x]\nrules:\n" + BLOCK_LOW, "IG209", 13),
    Case("duplicate-rule", rules("  - id: a\n    when: focus > 0.9\n    action: flag\n", "  - id: b\n    when: focus > 0.9\n    action: flag\n"), "IG212", 18),
    # ---- output rules (span: generated) ---------------------------------------
    Case("stop-on-the-prompt", rules("  - id: s\n    when: focus < 0.4\n    action: stop\n"), "IG213", 16),
    Case("output-rule-reads-the-prompt", HEAD + FOCUS + OUTPUT_SIGNAL + "rules:\n  - id: s\n    when: leak and focus < 0.4\n    action: stop\n", "IG213", 19),
    Case("output-rule-blocks", HEAD + FOCUS + OUTPUT_SIGNAL + "rules:\n  - id: s\n    when: leak\n    action: block\n", "IG213", 20),
    # The engine reads the generated text: a rule on it cannot steer (a decode rule can, below).
    Case("text-output-rule-steers", HEAD + FOCUS + OUTPUT_SIGNAL + "rules:\n  - id: s\n    when: leak\n    action: steer\n"
         "    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n", "IG213", 20, setup=vec(layer=1)),
    Case("output-settings-without-output-rules", HEAD + "output: {hold_back: 4}\n" + FOCUS + "rules:\n" + BLOCK_LOW, "IG214", 9),
    Case("repeats-on-the-prompt", HEAD + "signals:\n  leak:\n    analyzer: text\n    repeats: trusted\nrules:\n"
         "  - id: f\n    when: leak\n    action: flag\n", "IG105", 12),
    Case("repeats-of-an-undefined-span", HEAD.replace("  untrusted: {roles: [user]}\n", "") + "signals:\n  leak:\n"
         "    analyzer: text\n    span: generated\n    repeats: untrusted\nrules:\n  - id: s\n    when: leak\n    action: stop\n",
         "IG102", 12),
    Case("words-without-repeats", HEAD + "signals:\n  leak:\n    analyzer: text\n    keywords: [x]\n    words: 8\n"
         "    span: generated\nrules:\n  - id: s\n    when: leak\n    action: stop\n", "IG105", 13),
    Case("output-read-every-zero-tokens", HEAD + "output:\n  every: 0\n" + FOCUS + OUTPUT_SIGNAL
         + "rules:\n  - id: s\n    when: leak\n    action: stop\n", "IG105", 10),
    # ---- actions, templates ---------------------------------------------------
    Case("steer-without-params", rules("  - id: s\n    when: focus < 0.4\n    action: steer\n"), "IG210", 16),
    Case("steer-params-on-flag", rules("  - id: f\n    when: focus < 0.4\n    action: flag\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n"), "IG210", 17, setup=vec(layer=1)),
    Case("message-on-steer", rules("  - id: s\n    when: focus < 0.4\n    action: steer\n    message: hi\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n"), "IG210", 17, setup=vec(layer=1)),
    Case("rerank-without-reranker", rules("  - id: r\n    when: focus < 0.4\n    action: rerank\n"), "IG210", 16),
    Case("steer-layer-and-layers", rules("  - id: s\n    when: focus < 0.4\n    action: steer\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n      layers: [1, 2]\n"), "IG105", 20, setup=vec(layer=1)),
    Case("document-action-parameters-are-gone", HEAD + "signals:\n  rel:\n    analyzer: reranker\n    documents: {roles: [tool]}\nrules:\n  - id: d\n    when: max(rel) < 0.5\n    action: drop_documents\n    drop_documents: {below: 0.1}\n", "IG101", 17),
    Case("template-syntax", rules("  - id: r\n    when: focus < 0.4\n    action: block\n    message: \"{{ policy.name \"\n"), "IG301", 17),
    Case("template-undocumented-variable", rules("  - id: r\n    when: focus < 0.4\n    action: block\n    message: \"{{ request.prompt }}\"\n"), "IG302", 17),
    Case("template-dunder", rules("  - id: r\n    when: focus < 0.4\n    action: block\n    message: \"{{ policy.__class__ }}\"\n"), "IG302", 17),
    Case("template-unknown-signal", rules("  - id: r\n    when: focus < 0.4\n    action: block\n    message: \"{{ signals.fokus }}\"\n"), "IG303", 17),
    Case("steer-method-conflict", rules(
        "  - id: a\n    when: focus < 0.4\n    action: steer\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n      method: add\n",
        "  - id: b\n    when: focus < 0.3\n    action: steer\n    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n      method: project\n"), "IG304", 27, setup=vec(layer=1)),
    # ---- spans ------------------------------------------------------------------
    Case("span-without-roles", HEAD.replace("trusted: {roles: [system]}", "trusted: {}") + FOCUS + "rules:\n" + BLOCK_LOW, "IG102", 7),
    Case("span-begin-without-end", HEAD.replace("untrusted: {roles: [user]}", "untrusted: {begin: '<data>'}") + FOCUS + "rules:\n" + BLOCK_LOW, "IG102", 8),
    Case("tracker-without-spans", "apiVersion: innerguard/v1\nkind: Policy\nmetadata:\n  name: demo\n  version: '1'\nsignals:\n  focus:\n    analyzer: attention_tracker\n    heads: [[1, 2]]\nrules:\n" + BLOCK_LOW, "IG102", 7),
    Case("text-without-pattern", HEAD + "signals:\n  phrase:\n    analyzer: text\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG102", 10),
    Case("text-span-undefined", "apiVersion: innerguard/v1\nkind: Policy\nmetadata:\n  name: demo\n  version: '1'\nsignals:\n  phrase:\n    analyzer: text\n    keywords: [x]\n    span: untrusted\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG102", 10),
    # ---- regular expressions ----------------------------------------------------
    Case("regex-invalid", HEAD + "signals:\n  phrase:\n    analyzer: text\n    pattern: \"ignore (previous\"\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG401", 12),
    Case("regex-backreference", HEAD + "signals:\n  phrase:\n    analyzer: text\n    pattern: '(\\w+) \\1'\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG402", 12),
    Case("regex-lookahead", HEAD + "signals:\n  phrase:\n    analyzer: text\n    pattern: 'ignore(?= previous)'\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG402", 12),
    Case("regex-nested-quantifier", HEAD + "signals:\n  phrase:\n    analyzer: text\n    pattern: '(\\w+\\s?)+!'\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG403", 12),
    Case("regex-empty-match", HEAD + "signals:\n  phrase:\n    analyzer: text\n    pattern: '(ignore)?'\nrules:\n  - id: r\n    when: phrase\n    action: flag\n", "IG404", 12),
]


def probe_policy(artifact: str, extra: str = "", when: str = "topic > 0.5", layer: int = 8) -> str:
    return HEAD + (
        "signals:\n  topic:\n    analyzer: probe\n"
        f"    layer: {layer}\n    vector:\n      artifact: {artifact}\n{extra}"  # artifact at line 14
        f"rules:\n  - id: r\n    when: {when}\n    action: flag\n"
    )


def token_probe_policy(layers: str = "[6, 12]", span: str = "untrusted", head: str = HEAD, pooling: str = "",
                       when: str = "injected > 4", action: str = "block", signals: str = "") -> str:
    return head + (
        "signals:\n  injected:\n    analyzer: token_probe\n"  # injected at line 10
        f"    layers: {layers}\n    span: {span}\n{pooling}"  # layers at line 12
        "    weights:\n      artifact: artifacts/t.safetensors\n"  # artifact at line 15
        f"{signals}rules:\n  - id: r\n    when: {when}\n    action: {action}\n"
    )


def token_weights(*layers: int, size: int = HIDDEN, fitted_at: str | None = None, pooled: dict | None = None):
    """A token-probe artifact with one ``weight.<layer>`` vector per layer;
    ``fitted_at``: its metadata names the layers as ``innerguard build`` does ("layers": "6,18");
    ``pooled``: metadata "window" / "length_adjust" as the build records them."""
    def setup(folder: Path) -> None:
        from safetensors.numpy import save_file

        (folder / "artifacts").mkdir(parents=True, exist_ok=True)
        tensors = {f"weight.{layer}": np.linspace(-1, 1, size, dtype=np.float32) for layer in layers}
        where = {"layers": fitted_at} if fitted_at else {"layer": ",".join(map(str, layers))}
        save_file({**tensors, "bias": np.zeros(1, dtype=np.float32)}, str(folder / "artifacts" / "t.safetensors"),
                  metadata={"model_name": "smollm2-135m-instruct", "hidden_size": str(HIDDEN), **where, **(pooled or {})})
    return setup


def heads_policy(artifact: str, key: str = "heads") -> str:
    return HEAD + (
        "signals:\n  focus:\n    analyzer: attention_tracker\n    heads:\n"
        f"      artifact: {artifact}\n      key: {key}\n"  # artifact at line 13, key at 14
        "rules:\n" + BLOCK_LOW.replace("  - id", "  - id", 1)
    )


def _pickle(folder: Path) -> None:
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "v.pt").write_bytes(b"\x80\x04\x95" + b"\x00" * 40)


def _corrupt(folder: Path) -> None:
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "v.safetensors").write_bytes(b"\xff" * 8 + b"{}")


CASES += [
    # ---- artifacts --------------------------------------------------------------
    Case("artifact-missing", probe_policy("artifacts/v.safetensors"), "IG501", 14),
    Case("artifact-dotdot", probe_policy("../v.safetensors"), "IG502", 14),
    Case("artifact-absolute", probe_policy("/etc/v.safetensors"), "IG502", 14),
    Case("artifact-pickle", probe_policy("artifacts/v.pt"), "IG504", 14, setup=_pickle),
    Case("artifact-corrupt", probe_policy("artifacts/v.safetensors"), "IG505", 14, setup=_corrupt),
    Case("artifact-missing-tensor", probe_policy("artifacts/v.safetensors", "      key: direction\n"), "IG506", 15, setup=vec()),
    Case("artifact-vector-2d", probe_policy("artifacts/v.safetensors"), "IG507", 14, setup=vec(size=HIDDEN, shape=(2, HIDDEN // 2))),
    Case("artifact-heads-float", heads_policy("artifacts/h.safetensors"), "IG507", 13, setup=lambda f: write_heads(f / "artifacts/h.safetensors", dtype=np.float32)),
    Case("artifact-no-metadata", probe_policy("artifacts/v.safetensors"), "IG508", 14, setup=vec(metadata={})),
    Case("artifact-other-model", probe_policy("artifacts/v.safetensors").replace("spans:", "model: smollm2-135m-instruct\nspans:"), "IG509", 15,
         setup=vec(metadata={"model_name": "Qwen/Qwen2.5-1.5B-Instruct", "hidden_size": str(HIDDEN), "layer": "8"})),
    Case("artifact-vector-length", probe_policy("artifacts/v.safetensors"), "IG510", 14, setup=vec(size=100, metadata={"model_name": "x", "hidden_size": "576", "layer": "8"})),
    Case("artifact-heads-out-of-range", heads_policy("artifacts/h.safetensors"), "IG511", 13, setup=lambda f: write_heads(f / "artifacts/h.safetensors", heads=[[1, 2], [31, 0]])),
    Case("artifact-other-layer", probe_policy("artifacts/v.safetensors", layer=3), "IG305", 14, setup=vec(layer=8)),
    Case("token-probe-missing-layer-vector", token_probe_policy(), "IG506", 15, setup=token_weights(6)),
    Case("token-probe-vector-length", token_probe_policy(), "IG510", 15, setup=token_weights(6, 12, size=100)),
    Case("token-probe-fitted-at-other-layers", token_probe_policy(), "IG305", 15, setup=token_weights(6, 12, fitted_at="6,18")),
    Case("token-probe-other-window", token_probe_policy(pooling="    window: 8\n"), "IG306", 10,
         setup=token_weights(6, 12, pooled={"window": "16"})),
    Case("token-probe-length-adjust-dropped", token_probe_policy(), "IG306", 10,
         setup=token_weights(6, 12, pooled={"window": "12", "length_adjust": "0.4200"})),
    Case("token-probe-length-adjust-changed", token_probe_policy(pooling="    window: 12\n    length_adjust: 0.3\n"), "IG306", 10,
         setup=token_weights(6, 12, pooled={"window": "12", "length_adjust": "0.4200"})),
    Case("token-probe-span-undefined", token_probe_policy(span="trusted", head=HEAD.replace("  trusted: {roles: [system]}\n", "")), "IG102", 9,
         setup=token_weights(6, 12)),
    # A token probe on the generated tokens (span: generated) makes a decode rule, evaluated in the worker.
    Case("decode-rule-blocks", token_probe_policy(span="generated"), "IG213", 19, setup=token_weights(6, 12)),
    Case("decode-rule-reads-generated-text", token_probe_policy(span="generated", when="injected > 4 and leak", action="stop",
                                                                signals=OUTPUT_SIGNAL), "IG213", 22, setup=token_weights(6, 12)),
    # window + 1 is one short: the worker judges a step's scores at the next step.
    Case("decode-hold-back-within-the-window", token_probe_policy(span="generated", head=HEAD + "output: {hold_back: 13}\n",
                                                                  pooling="    window: 12\n", action="stop"),
         "IG215", 15, setup=token_weights(6, 12)),
    Case("decode-attention-hold-back-within-the-window",
         HEAD + "output: {hold_back: 8}\nsignals:\n  reads:\n    analyzer: attention_tracker\n    span: generated\n"
         "    window: 8\n    heads: [[1, 2]]\nrules:\n  - id: stop-reading\n    when: reads > 0.9\n    action: stop\n",
         "IG215", 14),
    Case("attention-toward-without-generated", HEAD + FOCUS + "    toward: untrusted\nrules:\n" + BLOCK_LOW, "IG105", 13),
    # ---- model geometry (with --model) --------------------------------------------
    Case("model-token-probe-layer-out-of-range", token_probe_policy("[6, 30]"), "IG601", 12, setup=token_weights(6, 30), model="smollm2-135m-instruct"),
    Case("model-head-out-of-range", HEAD + "signals:\n  focus:\n    analyzer: attention_tracker\n    heads: [[1, 2], [3, 9]]\nrules:\n" + BLOCK_LOW, "IG511", 12, model="smollm2-135m-instruct"),
    Case("model-layer-out-of-range", probe_policy("artifacts/v.safetensors", layer=30), "IG601", 12, setup=vec(layer=30), model="smollm2-135m-instruct"),
    Case("model-vector-length", probe_policy("artifacts/v.safetensors"), "IG510", 14, setup=vec(size=64, metadata={"model_name": "smollm2-135m-instruct", "layer": "8"}), model="smollm2-135m-instruct"),
    Case("model-unavailable", HEAD.replace("spans:", "model: no-such-model-here\nspans:") + FOCUS + "rules:\n" + BLOCK_LOW, "IG602", 6),
    Case("model-differs", HEAD.replace("spans:", "model: llama-3-8b\nspans:") + FOCUS + "rules:\n" + BLOCK_LOW, "IG603", 6, model="smollm2-135m-instruct"),
    # ---- reading the file -----------------------------------------------------------
    Case("yaml-syntax", HEAD + "signals: [\n", "IG005", 10),
    Case("yaml-python-tag", HEAD + "priority: !!python/object:os.system 1\n", "IG005", 9),
    Case("yaml-tabs", HEAD + "signals:\n\tfocus: 1\n", "IG006", 10),
    Case("yaml-duplicate-key", HEAD + FOCUS + "rules:\n" + BLOCK_LOW + "mode: shadow\nmode: enforce\n", "IG007", 18),
    Case("yaml-duplicate-nested-key", HEAD + "signals:\n  focus:\n    analyzer: attention_tracker\n    heads: [[1, 2]]\n    heads: [[3, 4]]\nrules:\n" + BLOCK_LOW, "IG007", 13),
    Case("yaml-two-documents", HEAD + "---\napiVersion: innerguard/v1\n", "IG010", 9),
    Case("yaml-empty", "# only a comment\n\n", "IG003", 1),
    Case("yaml-not-mapping", "- a\n- b\n", "IG103", 1),
    Case("yaml-dangling-alias", HEAD + "mode: *nothing\n", "IG005", 9),
]


def _run(case: Case, write_policy, model_dir=None):
    path = write_policy(case.text)
    if case.setup:
        case.setup(path.parent)
    return lint_paths([path], model=case.model)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_defect_is_reported_at_its_line(case: Case, write_policy, request):
    if case.model:
        request.getfixturevalue("model_dir")
    report = _run(case, write_policy)
    shown = "\n".join(map(str, report.findings))
    assert any(f.rule == case.rule and f.location.line == case.line for f in report.findings), (
        f"expected {case.rule} at line {case.line}, got:\n{shown}"
    )


def test_there_are_at_least_forty_distinct_bad_policies():
    assert len({c.text for c in CASES}) >= 40
    assert len({c.rule for c in CASES}) >= 40


def test_symlink_escaping_the_policy_folder(tmp_path, write_policy):
    outside = write_vector(tmp_path / "outside" / "v.safetensors")
    path = write_policy(probe_policy("artifacts/v.safetensors"))
    (path.parent / "artifacts").mkdir()
    os.symlink(outside, path.parent / "artifacts" / "v.safetensors")
    report = lint_paths([path])
    assert [(f.rule, f.location.line) for f in report.findings if f.rule.startswith("IG5")] == [("IG503", 14)]


def test_symlinked_folder_escaping_the_policy_folder(tmp_path, write_policy):
    write_vector(tmp_path / "elsewhere" / "v.safetensors")
    path = write_policy(probe_policy("artifacts/v.safetensors"))
    os.symlink(tmp_path / "elsewhere", path.parent / "artifacts")
    assert any(f.rule == "IG503" for f in lint_paths([path]).findings)


def test_symlink_inside_the_policy_folder_is_fine(write_policy):
    path = write_policy(probe_policy("artifacts/v.safetensors"))
    write_vector(path.parent / "store" / "real.safetensors")
    (path.parent / "artifacts").mkdir()
    os.symlink(path.parent / "store" / "real.safetensors", path.parent / "artifacts" / "v.safetensors")
    assert lint_paths([path]).errors == 0


def test_a_token_probe_pooled_as_it_was_fitted_draws_no_pooling_warning(write_policy):
    path = write_policy(token_probe_policy(pooling="    window: 16\n    length_adjust: 0.42\n"))
    token_weights(6, 12, pooled={"window": "16", "length_adjust": "0.4200"})(path.parent)
    assert [f for f in lint_paths([path]).findings if f.rule.startswith(("IG3", "IG5"))] == []


def test_a_decode_rule_may_steer_from_the_next_token(write_policy):
    steer = "    steer:\n      vector: {artifact: artifacts/v.safetensors}\n      layer: 1\n      positions: generated\n"
    path = write_policy(token_probe_policy(span="generated", action="steer") + steer)
    token_weights(6, 12)(path.parent)
    write_vector(path.parent / "artifacts" / "v.safetensors", layer=1)
    assert [f.rule for f in lint_paths([path]).findings if f.severity == "error"] == []


def test_duplicate_policy_names_across_files(write_policy, tmp_path):
    text = HEAD + FOCUS + "rules:\n" + BLOCK_LOW
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "a.yaml").write_text(text)
    (folder / "b.yaml").write_text(text)
    report = lint_paths([folder])
    assert [(f.rule, Path(f.location.file).name, f.location.line) for f in report.findings] == [("IG701", "b.yaml", 4)]


def test_steer_conflict_across_policies(tmp_path):
    folder = tmp_path / "set"
    write_vector(folder / "artifacts" / "v.safetensors", layer=1)
    for name, method in (("a", "add"), ("b", "project")):
        (folder / f"{name}.yaml").write_text(HEAD.replace("name: demo", f"name: {name}") + FOCUS + "rules:\n" + (
            f"  - id: s\n    when: focus < 0.4\n    action: steer\n    steer:\n      vector: {{artifact: artifacts/v.safetensors}}\n      layer: 1\n      method: {method}\n"))
    report = lint_paths([folder])
    assert [(f.rule, Path(f.location.file).name, f.location.line) for f in report.findings] == [("IG304", "b.yaml", 20)]


def test_empty_folder_reports_no_policies(tmp_path):
    report = lint_paths([tmp_path])
    assert [f.rule for f in report.findings] == ["IG011"]

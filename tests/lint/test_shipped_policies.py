"""The shipped policies lint clean (with and without the model) once their
artifacts exist, and mean what they say when evaluated."""
from __future__ import annotations

import json

import pytest

from innerguard.engine.decide import Evaluator
from innerguard.engine.lint import lint_paths
from innerguard.engine.plan import PolicyProgram
from innerguard.engine.lint import load_policy_set
from artifact_builders import POLICIES


def test_every_shipped_policy_declares_the_schema():
    for path in POLICIES.glob("*.yaml"):
        assert path.read_text().splitlines()[0] == "# yaml-language-server: $schema=../schemas/policy.schema.json"


def test_shipped_policies_lint_clean_without_a_model(shipped):
    report = lint_paths([shipped])
    assert [str(f) for f in report.findings if f.rule != "IG602"] == []
    assert len(report.files) == 4


def test_shipped_policies_lint_clean_with_the_model(shipped, model_dir):
    for model in (str(model_dir), "smollm2-135m-instruct"):
        assert [str(f) for f in lint_paths([shipped], model=model).findings] == []


@pytest.mark.parametrize("example", ["system-prompt-leak", "injection-answer"])
def test_the_examples_with_decode_rules_lint_clean_with_the_model(example, model_dir):
    """Their artifacts are in the repository: the probe's layers and window,
    the heads' range, all checked against the real model's geometry."""
    report = lint_paths([POLICIES.parent / "examples" / example], model=str(model_dir))
    assert len(report.files) == 1 and [str(f) for f in report.findings] == []


def test_missing_artifacts_name_the_command_that_builds_them(tmp_path):
    import shutil

    for f in POLICIES.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    report = lint_paths([tmp_path])
    missing = [f for f in report.findings if f.rule == "IG501"]
    assert missing and all("innerguard build heads|vector|probe|token-probe" in f.message for f in missing)


def test_policy_objects_keep_source_revision_and_compile_to_programs(shipped):
    policies, findings = load_policy_set([shipped])
    assert [f for f in findings if f.severity.value == "error"] == []
    names = sorted(p.name for p in policies)
    assert names == ["medical-topic-steer", "prompt-injection", "prompt-injection-attention", "rag-relevance"]
    injection = policies.by_name("prompt-injection")
    import hashlib

    assert injection.revision == hashlib.sha256(injection.source.read_bytes()).hexdigest()
    program = injection.to_program()
    assert isinstance(program, PolicyProgram)
    assert program.signals == ("prompt-injection.injected",)
    json.dumps([p.__dict__ for p in policies.programs()], default=lambda o: o.__dict__)  # plain data
    injected = injection.signal("injected")
    assert injected.analyzer == "token_probe"
    assert str(injected.weights.path).endswith("injection-token-probe.safetensors")
    attention = policies.by_name("prompt-injection-attention")
    assert attention.mode == "shadow"
    focus = attention.signal("focus")
    assert focus.analyzer == "attention_tracker"
    assert focus.params()["heads"]["artifact"]["path"].endswith("injection-heads.safetensors")
    steer_rule = policies.by_name("medical-topic-steer").rules[0]
    assert steer_rule.steer.layers == (8,) and steer_rule.steer.method == "add"
    assert steer_rule.params("medical-topic-steer")["steer"] == "medical-topic-steer/steer-cautious"


def test_shipped_policies_decide_as_documented(shipped, shipped_probe):
    policies, _ = load_policy_set([shipped])
    evaluator = Evaluator(policies.programs())
    benign = {
        "prompt-injection.injected": -2.0,
        "prompt-injection-attention.focus": 0.8, "prompt-injection-attention.override_phrase": False,
        "medical-topic-steer.medical": 0.1, "rag-relevance.relevance": [0.7, 0.2],
    }
    v = evaluator.evaluate(benign, {"tags": ["rag"]})
    assert v.action == "rerank"
    injected = {**benign, "prompt-injection.injected": 5.0}
    v = evaluator.evaluate(injected, {"tags": ["rag"]})
    assert (v.action, v.policy, v.rule) == ("block", "prompt-injection", "block-injected-instruction")
    # The refusal names policy and rule but never a signal value (it would help an attacker tune).
    assert "5.0" not in v.message and shipped_probe.threshold not in v.message
    assert f"prompt-injection {shipped_probe.version}" in v.message
    # The attention tracker ships in shadow mode: it decides, and is recorded, but never acts.
    distracted = {**benign, "prompt-injection-attention.focus": 0.2, "prompt-injection-attention.override_phrase": True}
    v = evaluator.evaluate(distracted, {"tags": ["rag"]})
    assert v.action == "rerank"
    (d,) = [d for d in v.decisions if d.policy == "prompt-injection-attention"]
    assert (d.action, d.rule, d.applied) == ("block", "block-distracted-attention", False)
    medical = {**benign, "medical-topic-steer.medical": 0.6}
    v = evaluator.evaluate(medical)  # no rag tag: rag-relevance does not apply
    assert v.action == "allow" and v.steers == ()  # shipped in shadow mode
    (d,) = [d for d in v.decisions if d.policy == "medical-topic-steer"]
    assert (d.action, d.applied) == ("steer", False)
    ungrounded = {**benign, "rag-relevance.relevance": [0.1, 0.05]}
    v = evaluator.evaluate(ungrounded, {"tags": ["rag"]})
    assert [h.rule for h in v.flags] == ["flag-ungrounded"]


def test_programs_survive_the_plan_json_round_trip(shipped):
    import dataclasses

    from innerguard.engine.plan import Plan, ModelGeometry

    policies, _ = load_policy_set([shipped])
    programs = policies.programs()
    plan = Plan(version="v", model=ModelGeometry("LlamaForCausalLM", 30, 576, 9, 3, 64), qk_captures=(), residual_captures=(),
                steers=(), analyzers=(), policies=programs, vectors={}, bundle_hash="x")
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    signals = {"prompt-injection.injected": 4.5, "prompt-injection-attention.focus": 0.2,
               "prompt-injection-attention.override_phrase": False,
               "medical-topic-steer.medical": 0.5, "rag-relevance.relevance": [0.2, 0.9]}
    request = {"tags": ["rag"]}
    a, b = Evaluator(programs).evaluate(signals, request), Evaluator(again.policies).evaluate(signals, request)
    assert (a.action, a.rule, a.message) == (b.action, b.rule, b.message) == ("block", "block-injected-instruction", a.message)
    assert dataclasses.asdict(again.policies[0]) == dataclasses.asdict(programs[0])

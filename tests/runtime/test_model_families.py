"""The guard works on the decoder families vLLM users run: for each family a
tiny random-weight checkpoint (tests/tiny_models.py) is served by ONE guarded
vLLM engine (eager, float32, CPU) with an attention tracker, a probe, a
token-level probe and a steer, and every signal and the steered greedy tokens
equal the independent Hugging Face reference (engine/reference).

Structural: the random models' text means nothing, the agreement does. The
tiny configs set each family's quirks away from their defaults (Qwen3's and
Gemma 3's QK-norm weights, Gemma's query scaling, soft-capping and
sliding-window layers, Granite's multipliers), so a capture that ignores one
of them disagrees with the reference.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from helpers import TEXTS, long_text, prepared

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tiny_models
from tiny_models import build_tiny_model  # noqa: E402

from innerguard.engine import models  # noqa: E402
from innerguard.engine.contract import SUPPORTED_FAMILIES  # noqa: E402

pytestmark = pytest.mark.vllm

FAMILIES = ["mistral", "qwen3", "granite", "phi3", "gemma2", "gemma3", "qwen3_moe"]

HEADS = [[1, 0], [1, 3], [2, 1], [3, 2]]
PROBE_LAYER, STEER_LAYER, TOKEN_LAYERS, WINDOW = 2, 1, (1, 3), 4
STEER_COEFFICIENT = 4.0
MAX_TOKENS = 8
# float32 on both sides, relative to max(1, |reference|): measured deviations
# are ~1e-7 (focus, probe) and up to ~3e-4 on token-probe scores of ~50-100
# (sums of dot products over two layers' residual streams).
TOLERANCE = 1e-4

POLICIES = {
    "focus.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: focus, version: 1.0.0, owner: tests, description: attention tracker over four heads}}
mode: enforce
on_error: fail-closed
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  focus:
    analyzer: attention_tracker
    heads: {HEADS}
rules:
  - id: never
    when: focus < 0.001
    action: flag
""",
    "topic.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: topic, version: 1.0.0, owner: tests, description: a cosine probe}}
mode: enforce
on_error: fail-closed
signals:
  concept:
    analyzer: probe
    layer: {PROBE_LAYER}
    score: cosine
    vector: {{artifact: artifacts/concept.safetensors, key: vector}}
rules:
  - id: never
    when: concept > 0.9999
    action: flag
""",
    "tokens.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: tokens, version: 1.0.0, owner: tests, description: a token-level probe}}
mode: enforce
on_error: fail-closed
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  injected:
    analyzer: token_probe
    layers: {list(TOKEN_LAYERS)}
    span: untrusted
    window: {WINDOW}
    weights: {{artifact: artifacts/token-probe.safetensors}}
rules:
  - id: never
    when: injected > 1000000
    action: flag
""",
    "steer.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: steer, version: 1.0.0, owner: tests, description: always steers generated tokens}}
mode: enforce
on_error: fail-open
rules:
  - id: always-steer
    when: true
    action: steer
    steer:
      vector: {{artifact: artifacts/steer.safetensors, key: vector}}
      layer: {STEER_LAYER}
      coefficient: {STEER_COEFFICIENT}
      positions: generated
      method: add
""",
}


def _artifacts(folder: Path, model_dir: Path, seed: int) -> dict:
    g = models.read_geometry(model_dir)
    gen = torch.Generator().manual_seed(seed)
    base = {"model_name": model_dir.name, "hidden_size": str(g.hidden_size), "model_fingerprint": g.fingerprint}
    made = {}
    for name, layer in (("concept", PROBE_LAYER), ("steer", STEER_LAYER)):
        v = torch.randn(g.hidden_size, generator=gen)
        made[name] = (v / v.norm()).contiguous()
        save_file({"vector": made[name]}, str(folder / f"{name}.safetensors"), metadata={**base, "layer": str(layer)})
    weights = {layer: torch.randn(g.hidden_size, generator=gen) for layer in TOKEN_LAYERS}
    bias = torch.tensor([0.25])
    save_file({**{f"weight.{layer}": w for layer, w in weights.items()}, "bias": bias},
              str(folder / "token-probe.safetensors"),
              metadata={**base, "layers": ",".join(map(str, TOKEN_LAYERS)), "window": str(WINDOW)})
    made["token_weights"], made["token_bias"] = weights, float(bias[0])
    return made


# Families whose attention the attention analyzers do not reproduce (Gemma 2
# soft-caps logits, Gemma 3's sliding layers): lint refuses the focus policy
# there (IG604), so their engine serves the others.
NO_ATTENTION = {"gemma2", "gemma3"}


def _policies(family: str) -> list[str]:
    return ["topic", "tokens", "steer"] + ([] if family in NO_ATTENTION else ["focus"])


def _rows(family: str) -> list[dict]:
    policies = _policies(family)
    datas = [TEXTS[0], TEXTS[2] + " " + TEXTS[5], long_text(4)]  # the longest outruns the 8-token sliding windows
    return [{"id": f"{family}-{i}", "instruction": "Summarise the text.", "data": d, "policies": policies,
             "max_tokens": MAX_TOKENS} for i, d in enumerate(datas)]


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory, smollm2_dir, in_this_process):
    """One guarded engine per family: its outputs, the prompts it was sent,
    and the reference model; the engine is closed before the next family."""
    from vllm import SamplingParams

    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.reference.model import load_reference_model

    family = request.param
    work = tmp_path_factory.mktemp(family)
    model_dir = build_tiny_model(family, work / family, tokenizer_dir=smollm2_dir)
    policy_dir = work / "policies"
    (policy_dir / "artifacts").mkdir(parents=True)
    for name in _policies(family):
        (policy_dir / f"{name}.yaml").write_text(POLICIES[f"{name}.yaml"])
    artifacts = _artifacts(policy_dir / "artifacts", model_dir, seed=7)
    rows = _rows(family)
    with in_this_process():
        llm = GuardedLLM(model_dir, policy_dir, enforce_eager=True, dtype="float32", max_model_len=512,
                         max_num_seqs=8, seed=0)
    try:
        outs = llm.run(rows, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True))
        sent = [prepared(llm, r) for r in rows]
    finally:
        llm.shutdown()
    model, _ = load_reference_model(model_dir)
    return {"family": family, "outs": outs, "sent": sent, "model": model, "artifacts": artifacts,
            "model_dir": model_dir, "policy_dir": policy_dir}


def _deviations(served, signal: str, want) -> list[float]:
    devs, refs = [], []
    for out, (ids, spans) in zip(served["outs"], served["sent"]):
        assert out.error is None, out.error
        got, ref = out.signals[signal], want(ids, spans)
        devs.append(abs(got - ref))
        refs.append(abs(ref))
        assert abs(got - ref) <= TOLERANCE * max(1.0, abs(ref)), (served["family"], signal, got, ref)
    print(f"{served['family']} {signal}: max deviation {max(devs):.2e} (largest |reference| {max(refs):.3g})")
    return devs


def test_attention_tracker_focus_matches_the_reference(served):
    from innerguard.engine.reference.scores import reference_focus_score

    if served["family"] in NO_ATTENTION:
        _assert_focus_refused(served)
        return
    heads = [tuple(h) for h in HEADS]
    _deviations(served, "focus.focus", lambda ids, spans: reference_focus_score(
        served["model"], ids, spans["focus"]["instruction"], spans["focus"]["data"], heads))


def _assert_focus_refused(served):
    from innerguard.engine.lint import lint_paths

    (served["policy_dir"] / "focus.yaml").write_text(POLICIES["focus.yaml"])
    report = lint_paths([str(served["policy_dir"] / "focus.yaml")], model=str(served["model_dir"]))
    assert [f.rule for f in report.findings if f.severity.value == "error"] == ["IG604"], report.findings


def test_probe_on_the_residual_stream_matches_the_reference(served):
    from innerguard.engine.reference.scores import reference_probe

    vector = served["artifacts"]["concept"]
    _deviations(served, "topic.concept", lambda ids, spans: reference_probe(served["model"], ids, PROBE_LAYER, vector=vector))


def test_token_probe_matches_the_reference(served):
    from innerguard.engine.reference.scores import reference_token_probe

    a = served["artifacts"]
    _deviations(served, "tokens.injected", lambda ids, spans: reference_token_probe(
        served["model"], ids, a["token_weights"], a["token_bias"], spans["tokens"]["data"], WINDOW))


def test_steered_greedy_tokens_match_the_reference(served):
    from innerguard.engine.reference.steer import reference_steered_generate

    vector = served["artifacts"]["steer"]
    changed = 0
    for out, (ids, _) in zip(served["outs"], served["sent"]):
        assert out.action == "steer", (out.action, out.error)
        want = reference_steered_generate(served["model"], ids, vector, STEER_LAYER, STEER_COEFFICIENT,
                                          max_new_tokens=MAX_TOKENS, eos_token_id=[])
        assert list(out.token_ids) == want, served["family"]
        plain = reference_steered_generate(served["model"], ids, None, STEER_LAYER, 0.0,
                                           max_new_tokens=MAX_TOKENS, eos_token_id=[])
        changed += plain != want
    assert changed, f"{served['family']}: the steer changed no continuation; the check proves nothing"


# -- families innerguard does not support -------------------------------------

CLI = [sys.executable, "-m", "innerguard.engine.cli"]


@pytest.fixture(scope="module")
def unsupported_dir(tmp_path_factory, smollm2_dir) -> Path:
    """A checkpoint of a family outside the supported list (a tiny Mistral
    relabelled as GPT-NeoX: only the name is read before refusing)."""
    import json

    folder = build_tiny_model("mistral", tmp_path_factory.mktemp("unsupported") / "neox", tokenizer_dir=smollm2_dir)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["GPTNeoXForCausalLM"]}))
    return folder


def _cli(*args):
    import os
    import subprocess

    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


def test_lint_refuses_an_unsupported_family_by_name_with_the_supported_list(unsupported_dir, tmp_path):
    for name, text in POLICIES.items():
        if name == "focus.yaml":
            (tmp_path / name).write_text(text)
    result = _cli("lint", str(tmp_path), "--model", str(unsupported_dir))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = [l for l in result.stderr.splitlines() if l.startswith("innerguard: error:")]
    assert "GPTNeoXForCausalLM is not supported" in line
    assert all(SUPPORTED_FAMILIES[a] in line for a in SUPPORTED_FAMILIES)


def test_a_guarded_engine_refuses_an_unsupported_family_before_vllm_starts(unsupported_dir, tmp_path):
    from innerguard.engine.errors import ModelError
    from innerguard.engine.guarded import GuardedLLM

    (tmp_path / "focus.yaml").write_text(POLICIES["focus.yaml"])
    with pytest.raises(ModelError, match="GPTNeoXForCausalLM is not supported.*Qwen3-MoE"):
        GuardedLLM(unsupported_dir, tmp_path, enforce_eager=True)


def test_models_info_names_the_family_and_its_analyzers(unsupported_dir, tmp_path):
    neox = _cli("models", "info", str(unsupported_dir))
    assert neox.returncode == 0, neox.stderr
    assert "GPTNeoXForCausalLM is not supported" in neox.stdout and "analyzers: none" in neox.stdout
    qwen3 = _cli("models", "info", str(build_tiny_model("qwen3", tmp_path / "qwen3")))
    assert qwen3.returncode == 0, qwen3.stderr
    assert "family: Qwen3" in qwen3.stdout
    assert "analyzers: attention_tracker, reranker, probe, token_probe, text, residual_norm" in qwen3.stdout

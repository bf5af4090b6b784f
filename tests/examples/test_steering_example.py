"""examples/steering: the shipped steering policy adds caution words to
held-out everyday answers that have none unsteered, without degenerate
repetition. One eager engine for the module; 8 prompts x 2 arms x 48 tokens."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "steering"
N = 8
pytestmark = [pytest.mark.vllm, pytest.mark.model]


def _measure():
    spec = importlib.util.spec_from_file_location("steering_measure", EXAMPLE / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def answers(smollm2_dir, in_this_process):
    from vllm import SamplingParams

    from innerguard.engine.guarded import GuardedLLM

    rows = [json.loads(line) for line in (EXAMPLE / "heldout-prompts.jsonl").read_text().splitlines()[:N]]
    with in_this_process():
        llm = GuardedLLM(smollm2_dir, EXAMPLE / "policies", enforce_eager=True)
    try:
        requests = [{"id": f"{r['id']}:{arm}", "messages": r["messages"], "policies": policies}
                    for arm, policies in (("plain", []), ("steered", ["caution-steer"])) for r in rows]
        outs = llm.run(requests, SamplingParams(temperature=0.0, max_tokens=48))
    finally:
        llm.shutdown()
    return outs[:N], outs[N:]


def test_steering_adds_caution_without_degeneration(answers):
    m = _measure()
    plain, steered = answers
    assert all(any(d["action"] == "steer" for d in o.decisions) for o in steered)
    assert not any(o.decisions for o in plain)
    assert sum(m.cautious(o.text) for o in steered) >= 6, [o.text for o in steered]
    assert sum(m.cautious(o.text) for o in plain) <= 1, [o.text for o in plain]
    assert sum(m.degenerate(o.text) for o in steered) <= 1, [o.text for o in steered]

"""The token-level probe (analyzer token_probe) inside vLLM's compiled
engine equals the independent Hugging Face reference, whether the prompt is
computed in one step or in 64-token chunks, and its requests never reuse
prefix-cached tokens (it scores every data token)."""
from __future__ import annotations

import pytest
from safetensors.torch import load_file

from helpers import TEXTS, long_text, prepared, row

from innerguard.engine.reference.scores import reference_token_probe

pytestmark = pytest.mark.vllm

SIGNAL = "prompt-injection.injected"  # examples/prompt-injection-token-probe, served as tokens.yaml


@pytest.fixture(scope="module")
def probe(policy_dir):
    tensors = load_file(str(policy_dir / "artifacts" / "smollm2-135m-instruct.injection-token-probe.safetensors"))
    return {layer: tensors[f"weight.{layer}"] for layer in (6, 12, 18)}, float(tensors["bias"][0])


def _rows(prefix: str):
    datas = [TEXTS[0], TEXTS[2], long_text(12), long_text(5) + " " + TEXTS[5] + " " + long_text(4), "Hi."]
    return [row(i, ["prompt-injection"], data=d, rid=f"{prefix}{i}") for i, d in enumerate(datas)]


def _check(llm, reference, probe, rows):
    model, _ = reference
    weights, bias = probe
    outs = llm.run(rows)
    for r, out in zip(rows, outs):
        assert out.error is None, out.error
        ids, spans = prepared(llm, r)
        assert out.prefill_tokens == len(ids)  # salted: no token came from the prefix cache
        got = out.signals[SIGNAL]
        want = reference_token_probe(model, ids, weights, bias, spans["prompt-injection"]["data"], 12)
        assert abs(got - want) <= 1e-3 + 1e-4 * abs(want), (r["id"], got, want)
    return outs


def test_token_probe_matches_the_reference(guarded, reference, probe):
    outs = _check(guarded, reference, probe, _rows("tp"))
    again = _check(guarded, reference, probe, _rows("tp"))  # the same prompts: still computed whole
    assert [o.signals[SIGNAL] for o in outs] == pytest.approx([o.signals[SIGNAL] for o in again], abs=1e-4)


def test_token_probe_matches_the_reference_in_chunks(chunked, reference, probe):
    rows = [r for r in _rows("tc") if len(r["data"]) > 300]
    assert rows and all(len(prepared(chunked, r)[0]) > 64 for r in rows)
    _check(chunked, reference, probe, rows)

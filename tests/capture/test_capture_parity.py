"""Captured hidden states and Q/K equal the Hugging Face reference, for
prompts of different lengths submitted together (one batch)."""
from __future__ import annotations

import pytest
import torch

from innerguard.engine.capture import CaptureSpec, capture
from innerguard.engine.reference.capture import capture as reference_capture
from innerguard.engine.requests import GuardRequest
from innerguard.engine.requests.spans import render

pytestmark = [pytest.mark.vllm, pytest.mark.model]

WORDS = ("the quick brown fox jumps over a lazy dog while rain falls on quiet northern hills and the museum "
         "opens its doors to visitors who came for the ancient maps").split()
QK = ((0, (0, 8)), (13, (0, 4)), (29, (2, 7)))


def _rows(n: int = 22) -> list[dict]:
    return [{"id": str(i), "instruction": "Summarise the text.",
             "data": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + 4 * i))} for i in range(n)]


@pytest.fixture(scope="module")
def all_tokens(recording_guarded):
    rows = _rows()
    spec = CaptureSpec(layers="all", qk=QK, mode="all_tokens")
    return rows, capture(recording_guarded, rows, spec)


_REFERENCE: dict[str, tuple] = {}


def _reference(recording_guarded, reference_model, row):
    """Token ids and Hugging Face captures (Q/K and residual of every layer), once per row."""
    if row["id"] not in _REFERENCE:
        model, tokenizer = reference_model
        ids = list(render(tokenizer, GuardRequest.from_row(row, row["id"]), ()).input_ids)
        _REFERENCE[row["id"]] = ids, reference_capture(model, ids)
    return _REFERENCE[row["id"]]


@pytest.fixture(scope="module")
def reference_model(smollm2_dir):
    from innerguard.engine.reference.model import load_reference_model

    return load_reference_model(smollm2_dir)


def test_hidden_states_equal_the_reference_on_every_layer(recording_guarded, reference_model, all_tokens):
    rows, results = all_tokens
    lengths = {r.num_prompt_tokens for r in results}
    assert len(results) >= 20 and len(lengths) >= 20, lengths
    worst = 1.0
    for row, result in zip(rows, results):
        assert result.error is None and result.id == row["id"]
        ids, ref = _reference(recording_guarded, reference_model, row)
        assert result.num_prompt_tokens == len(ids)
        assert result.hidden.shape == (30, len(ids), 576) and result.hidden.dtype == torch.float32
        assert torch.equal(result.positions, torch.arange(len(ids)))
        for i, layer in enumerate(result.layers):  # HF hidden_states[L + 1]; the last layer pre-norm
            cos = torch.nn.functional.cosine_similarity(result.hidden[i], ref.residual[layer], dim=-1)
            worst = min(worst, float(cos.min()))
    assert worst >= 0.9999, worst


def test_qk_equal_the_reference_post_rope(recording_guarded, reference_model, all_tokens):
    rows, results = all_tokens
    for row, result in list(zip(rows, results))[::3]:
        ids, ref = _reference(recording_guarded, reference_model, row)
        for layer, heads in QK:
            kv = sorted({h // 3 for h in heads})
            q = ref.q[layer].view(len(ids), 9, 64)[:, list(heads)]
            k = ref.k[layer].view(len(ids), 3, 64)[:, kv]
            assert result.heads[layer] == heads and result.kv_heads[layer] == tuple(kv)
            for got, want in ((result.q[layer], q), (result.prompt_keys(layer), k)):
                cos = torch.nn.functional.cosine_similarity(got.flatten(1), want.flatten(1), dim=-1)
                assert float(cos.min()) >= 0.9999
                torch.testing.assert_close(got, want, atol=2e-3, rtol=1e-3)


def test_last_token_mode_keeps_one_row_the_same_as_all_tokens(recording_guarded, all_tokens):
    rows, full = all_tokens
    last = capture(recording_guarded, rows, CaptureSpec(layers=(0, 17, 29), qk=QK[1:2], mode="last_token", dtype="float16"))
    for a, b in zip(full, last):
        assert b.hidden.shape == (3, 1, 576) and b.hidden.dtype == torch.float16
        assert b.positions.tolist() == [a.num_prompt_tokens - 1]
        want = a.hidden[[0, 17, 29], -1]
        torch.testing.assert_close(b.hidden[:, 0].float(), want, rtol=2e-3, atol=2e-2)
        assert b.q[13].shape == (1, 2, 64) and b.prompt_keys(13).shape == (a.num_prompt_tokens, 2, 64)

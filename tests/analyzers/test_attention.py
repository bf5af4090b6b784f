"""attention_rows: softmax(q·Kᵀ·scale), causal, GQA, real head_dim."""
import math

import pytest
import torch

from innerguard.hooks.analyzers import HeadGeometry, attention_rows


def manual_rows(q, k, geometry, scale, heads, positions):
    """Per-head loop, the textbook way."""
    h, hk, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    out = torch.zeros(len(heads), len(positions), k.shape[0])
    for i, head in enumerate(heads):
        kv = head // (h // hk)
        for r, pos in enumerate(positions):
            qv = q[r, head * d:(head + 1) * d]
            logits = torch.tensor([float(qv @ k[j, kv * d:(kv + 1) * d]) * scale for j in range(pos + 1)])
            out[i, r, : pos + 1] = torch.softmax(logits, 0)
    return out


def test_single_head_weights_are_the_softmax_of_scaled_dot_products():
    g = HeadGeometry(num_heads=1, num_kv_heads=1, head_dim=1)
    k = torch.tensor([[0.0], [math.log(2)], [math.log(3)]])
    q = torch.tensor([[1.0]])
    rows = attention_rows(q, k, [0], g, scale=1.0)
    assert torch.allclose(rows[0, 0], torch.tensor([1 / 6, 2 / 6, 3 / 6]))


def test_scale_is_applied_to_logits():
    g = HeadGeometry(1, 1, 1)
    k = torch.tensor([[0.0], [1.0]])
    q = torch.tensor([[math.log(3)]])
    rows = attention_rows(q, k, [0], g, scale=2.0)  # logits 0, 2·ln3 -> 1 : 9
    assert torch.allclose(rows[0, 0], torch.tensor([0.1, 0.9]))


def test_a_query_row_never_attends_to_later_keys():
    g = HeadGeometry(2, 1, 4)
    torch.manual_seed(0)
    k = torch.randn(5, 4)
    q = torch.randn(3, 8)
    rows = attention_rows(q, k, [0, 1], g, scale=0.5, positions=[1, 3, 4])
    assert rows[:, 0, 2:].abs().max() == 0 and rows[:, 1, 4:].abs().max() == 0
    assert torch.allclose(rows.sum(-1), torch.ones(2, 3))


def test_default_positions_are_the_trailing_prompt_rows():
    g = HeadGeometry(2, 2, 3)
    torch.manual_seed(1)
    k, q = torch.randn(6, 6), torch.randn(2, 6)
    assert torch.equal(attention_rows(q, k, [0, 1], g, 0.3), attention_rows(q, k, [0, 1], g, 0.3, positions=[4, 5]))


def test_gqa_query_head_reads_kv_head_h_div_group_size():
    g = HeadGeometry(num_heads=4, num_kv_heads=2, head_dim=3)
    torch.manual_seed(2)
    k, q = torch.randn(5, 2 * 3), torch.randn(2, 4 * 3)
    heads = [0, 1, 2, 3]
    got = attention_rows(q, k, heads, g, 0.7, positions=[3, 4])
    assert torch.allclose(got, manual_rows(q, k, g, 0.7, heads, [3, 4]), atol=1e-6)
    # heads 1 and 2 would swap KV heads under the wrong (h % H_kv) mapping
    wrong = HeadGeometry(4, 4, 3)
    k_wrong = torch.cat([k[:, 0:3], k[:, 3:6], k[:, 0:3], k[:, 3:6]], dim=1)
    assert not torch.allclose(got[1], attention_rows(q, k_wrong, heads, wrong, 0.7, positions=[3, 4])[1])


def test_head_dim_is_taken_from_geometry_not_hidden_over_heads():
    # hidden 64, 4 heads, but head_dim 32: Q rows are 128 wide
    g = HeadGeometry(num_heads=4, num_kv_heads=2, head_dim=32)
    torch.manual_seed(3)
    k, q = torch.randn(7, 64), torch.randn(1, 128)
    got = attention_rows(q, k, [3, 1], g, 32 ** -0.5)
    assert torch.allclose(got, manual_rows(q, k, g, 32 ** -0.5, [3, 1], [6]), atol=1e-6)
    with pytest.raises(ValueError, match=r"\[tokens, 4\*16\]"):
        attention_rows(q, k, [0], HeadGeometry(4, 2, 16), 0.25)


def test_bf16_inputs_are_computed_in_float32():
    g = HeadGeometry(2, 1, 4)
    torch.manual_seed(4)
    k, q = torch.randn(5, 4), torch.randn(1, 8)
    rows = attention_rows(q.bfloat16(), k.bfloat16(), [0], g, 0.5)
    assert rows.dtype == torch.float32


def test_out_of_range_heads_and_positions_are_rejected():
    g = HeadGeometry(2, 1, 2)
    k, q = torch.zeros(3, 2), torch.zeros(1, 4)
    with pytest.raises(ValueError, match="head index"):
        attention_rows(q, k, [2], g, 1.0)
    with pytest.raises(ValueError, match="positions"):
        attention_rows(q, k, [0], g, 1.0, positions=[3])

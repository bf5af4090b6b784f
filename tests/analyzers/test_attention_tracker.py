"""Focus score on hand-computed cases."""
import math

import pytest
import torch

from innerguard.hooks.analyzers import HeadGeometry, focus_score, head_focus

# 2 heads sharing one KV head (GQA), head_dim 1, 5 tokens, scale 1.
# Keys: logits of head 0 (q = 1) are k itself -> weights ∝ exp(k) = [1, 2, 3, 1, 4] / 11.
# Head 1 (q = 0) attends uniformly: 1/5 each.
GEOMETRY = HeadGeometry(num_heads=2, num_kv_heads=1, head_dim=1)
K = torch.tensor([[0.0], [math.log(2)], [math.log(3)], [0.0], [math.log(4)]])
Q_LAST = torch.tensor([1.0, 0.0])
INSTRUCTION = [(1, 3)]  # tokens 1, 2
DATA = [(4, 5)]  # token 4; token 0 (a sink) and 3 (a marker) count for neither


def test_two_head_five_token_focus_score_is_exact():
    # head 0: inst 5/11, data 4/11 -> 5/9 ; head 1: inst 2/5, data 1/5 -> 2/3
    ratios = head_focus({0: Q_LAST}, {0: K}, [(0, 0), (0, 1)], INSTRUCTION, DATA, GEOMETRY, 1.0)
    assert torch.allclose(ratios, torch.tensor([5 / 9, 2 / 3]))
    assert focus_score({0: Q_LAST}, {0: K}, [(0, 0), (0, 1)], INSTRUCTION, DATA, GEOMETRY, 1.0) == pytest.approx(11 / 18)


def test_spans_may_be_index_lists_or_masks():
    mask = torch.tensor([False, True, True, False, False])
    a = focus_score({0: Q_LAST}, {0: K}, [(0, 0)], [1, 2], torch.tensor([4]), GEOMETRY, 1.0)
    b = focus_score({0: Q_LAST}, {0: K}, [(0, 0)], mask, [(4, 5)], GEOMETRY, 1.0)
    assert a == pytest.approx(5 / 9) and b == pytest.approx(5 / 9)


def test_heads_across_layers_keep_their_order():
    q = {0: Q_LAST, 3: Q_LAST.flip(0)}  # layer 3: head 0 uniform, head 1 peaked
    k = {0: K, 3: K}
    ratios = head_focus(q, k, [(3, 1), (0, 1), (3, 0), (0, 0)], INSTRUCTION, DATA, GEOMETRY, 1.0)
    assert torch.allclose(ratios, torch.tensor([5 / 9, 2 / 3, 2 / 3, 5 / 9]))


def test_kv_head_mapping_under_gqa():
    # 4 query heads, 2 KV heads: heads 2, 3 read KV head 1, which is flat
    g = HeadGeometry(4, 2, 1)
    k = torch.cat([K, torch.zeros(5, 1)], dim=1)
    q = torch.tensor([1.0, 1.0, 1.0, 1.0])
    ratios = head_focus({0: q}, {0: k}, [(0, 0), (0, 1), (0, 2), (0, 3)], INSTRUCTION, DATA, g, 1.0)
    assert torch.allclose(ratios, torch.tensor([5 / 9, 5 / 9, 2 / 3, 2 / 3]))


def test_injected_data_that_draws_attention_lowers_the_score():
    k_attack = K.clone()
    k_attack[4, 0] = math.log(40)  # the data token grabs attention
    calm = focus_score({0: Q_LAST}, {0: K}, [(0, 0)], INSTRUCTION, DATA, GEOMETRY, 1.0)
    distracted = focus_score({0: Q_LAST}, {0: k_attack}, [(0, 0)], INSTRUCTION, DATA, GEOMETRY, 1.0)
    assert distracted < calm


def test_empty_or_overlapping_spans_are_rejected():
    with pytest.raises(ValueError, match="at least one token"):
        focus_score({0: Q_LAST}, {0: K}, [(0, 0)], [(1, 1)], DATA, GEOMETRY, 1.0)
    with pytest.raises(ValueError, match="overlap"):
        focus_score({0: Q_LAST}, {0: K}, [(0, 0)], [(1, 3)], [(2, 5)], GEOMETRY, 1.0)
    with pytest.raises(ValueError, match="no heads"):
        focus_score({0: Q_LAST}, {0: K}, [], INSTRUCTION, DATA, GEOMETRY, 1.0)


@pytest.mark.parametrize("data", [[(4, 6)], [(-1, 2)], [(3, 2)]])
def test_ranges_outside_the_prompt_are_rejected(data):
    with pytest.raises(ValueError, match=r"outside 0\.\.5"):
        focus_score({0: Q_LAST}, {0: K}, [(0, 0)], INSTRUCTION, data, GEOMETRY, 1.0)


def test_a_batch_of_prompts_of_different_lengths_scores_each_as_alone(monkeypatch):
    from innerguard.hooks.analyzers import attention_tracker

    geometry = HeadGeometry(num_heads=4, num_kv_heads=2, head_dim=8)
    heads = [(0, 1), (0, 3), (2, 0), (2, 2)]
    gen = torch.Generator().manual_seed(0)
    prompts = []
    for length in (9, 30, 17):  # the shorter ones are padded to 30 in the batch
        q = {layer: torch.randn(32, generator=gen) for layer in (0, 2)}
        k = {layer: torch.randn(length, 16, generator=gen) for layer in (0, 2)}
        prompts.append((q, k, [(1, 4)], [(5, length - 1)]))
    alone = torch.stack([head_focus(q, k, heads, i, d, geometry, 0.35) for q, k, i, d in prompts])
    inputs = [attention_tracker.focus_inputs(q, k, heads, i, d, geometry) for q, k, i, d in prompts]
    assert torch.allclose(attention_tracker.head_focus_batch(inputs, heads, geometry, 0.35), alone, atol=1e-6)
    monkeypatch.setattr(attention_tracker, "MAX_BATCH_TOKENS", 40)  # three groups, same answer, same order
    assert torch.allclose(attention_tracker.head_focus_batch(inputs, heads, geometry, 0.35), alone, atol=1e-6)

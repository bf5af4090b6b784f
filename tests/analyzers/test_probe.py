"""Probes on the residual stream."""
import math

import pytest
import torch

from innerguard.hooks.analyzers import concept_cosine, logistic_probability


def test_cosine_of_residual_with_concept_vector():
    assert concept_cosine(torch.tensor([3.0, 4.0]), torch.tensor([4.0, 3.0])) == pytest.approx(24 / 25)
    assert concept_cosine(torch.tensor([[1.0, 0.0]]), torch.tensor([0.0, 2.0])) == pytest.approx(0.0)


def test_logistic_probe_probability():
    x = torch.tensor([1.0, 2.0])
    assert logistic_probability(x, torch.tensor([0.5, -1.0]), 1.0) == pytest.approx(1 / (1 + math.exp(0.5)))


def test_bf16_residual_is_scored_in_float32():
    x = torch.tensor([3.0, 4.0]).bfloat16()
    assert concept_cosine(x, torch.tensor([3.0, 4.0])) == pytest.approx(1.0)


def test_width_mismatch_is_an_error():
    with pytest.raises(ValueError, match="features"):
        concept_cosine(torch.ones(3), torch.ones(4))

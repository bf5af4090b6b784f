"""Steering deltas."""
import pytest
import torch

from innerguard.hooks.analyzers import steer_row_mask, steering_delta


def test_add_is_coefficient_times_vector():
    x = torch.zeros(3, 4)
    v = torch.tensor([1.0, 2.0, 0.0, -1.0])
    assert torch.equal(x + steering_delta(x, v, 0.5, "add"), 0.5 * v.expand(3, 4))


def test_project_sets_the_component_along_the_vector_and_keeps_the_rest():
    torch.manual_seed(0)
    x = torch.randn(5, 8)
    v = torch.randn(8)
    unit = v / v.norm()
    steered = x + steering_delta(x, v, 2.0, "project")
    assert torch.allclose(steered @ unit, torch.full((5,), 2.0 * float(v.norm())), atol=1e-5)
    orth = lambda t: t - (t @ unit).unsqueeze(-1) * unit  # noqa: E731
    assert torch.allclose(orth(steered), orth(x), atol=1e-5)


def test_delta_keeps_the_stream_dtype():
    x = torch.randn(2, 4).bfloat16()
    assert steering_delta(x, torch.ones(4), 1.0, "project").dtype == torch.bfloat16


def test_unknown_method_and_bad_width_are_errors():
    with pytest.raises(ValueError, match="method"):
        steering_delta(torch.zeros(4), torch.ones(4), 1.0, "rotate")
    with pytest.raises(ValueError, match="steering vector"):
        steering_delta(torch.zeros(4), torch.ones(3), 1.0)
    with pytest.raises(ValueError, match="zero vector"):
        steering_delta(torch.zeros(4), torch.zeros(4), 1.0, "project")


def test_row_mask_by_position():
    pos = torch.tensor([3, 4, 5, 6])
    assert steer_row_mask(pos, 5, "prompt").tolist() == [True, True, False, False]
    assert steer_row_mask(pos, 5, "generated").tolist() == [False, False, True, True]
    assert steer_row_mask(pos, 5, "all").all()

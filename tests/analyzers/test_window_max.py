"""The token-level probe's pooling: the strongest window of token scores."""
import pytest
import torch

from innerguard.hooks.analyzers import window_max


def test_window_max_is_the_best_window_mean_or_the_whole_mean():
    s = torch.tensor([0.0, 1.0, 5.0, 3.0, -2.0])
    assert window_max(s, 2) == pytest.approx(4.0)  # (5 + 3) / 2
    assert window_max(s, 5) == pytest.approx(1.4)
    assert window_max(s, 12) == pytest.approx(1.4)  # shorter than the window: the mean of all
    assert window_max(s, 1) == pytest.approx(5.0)


@pytest.mark.parametrize("scores, window", [(torch.tensor([]), 3), (torch.zeros(2, 2), 1), (torch.ones(3), 0)])
def test_window_max_refuses_what_it_cannot_pool(scores, window):
    with pytest.raises(ValueError):
        window_max(scores, window)

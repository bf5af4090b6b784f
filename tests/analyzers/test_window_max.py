"""The token-level probe's pooling: the strongest window of token scores."""
import math

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


def test_length_adjust_takes_its_share_of_ln_windows_off():
    from innerguard.hooks.analyzers.token_probe import length_offset, window_count

    assert window_count(2000, 16) == 1985 and window_count(16, 16) == 1 and window_count(3, 16) == 1
    assert length_offset(2000, 16, 0.5) == pytest.approx(0.5 * math.log(1985))
    assert length_offset(10, 16, 0.5) == 0.0  # one window: nothing to take off
    assert length_offset(2000, 16, 0.0) == 0.0

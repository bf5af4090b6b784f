"""The device-side steering of add-steers (hooks/steering_buffers.py): what
the layer point adds, row by row, and the slots plans take and give back."""
import numpy as np
import pytest
import torch

from innerguard.hooks.analyzers import steering_delta
from innerguard.hooks.steering_buffers import SLOTS_PER_LAYER, SteeringBuffers


def rows(start, end):
    return np.arange(start, end)


def buffers(layers=3, hidden=8, max_tokens=16):
    return SteeringBuffers(layers, hidden, max_tokens, torch.float32, "cpu")


def test_each_row_gets_its_steers_delta_and_other_rows_nothing():
    b = buffers()
    v, w = torch.randn(8), torch.randn(8)
    slot_v, slot_w = b.allocate(1, 2.0 * v), b.allocate(1, -0.5 * w)
    hidden = torch.randn(10, 8)
    before = hidden.clone()
    b.set_rows({1: [(rows(0, 3), slot_v), (rows(7, 9), slot_w)]})
    b.apply(0, hidden)  # no steered row at layer 0
    assert torch.equal(hidden, before)
    b.apply(1, hidden)
    x = torch.zeros(10, 8)  # the add delta does not depend on the stream
    expected = before.clone()
    expected[0:3] += steering_delta(x[0:3], v, 2.0, "add")
    expected[7:9] += steering_delta(x[7:9], w, -0.5, "add")
    assert torch.allclose(hidden, expected, atol=0, rtol=0)


def test_a_later_step_forgets_the_rows_of_the_one_before():
    b = buffers()
    slot = b.allocate(2, torch.ones(8))
    b.set_rows({2: [(rows(4, 12), slot)]})
    b.set_rows({2: [(rows(0, 1), slot)]})
    hidden = torch.zeros(12, 8)
    b.apply(2, hidden)
    assert hidden[0].eq(1).all() and hidden[1:].eq(0).all()
    assert b.which[2].count_nonzero() == 1
    b.set_rows({})
    assert b.which.count_nonzero() == 0 and not b.active


def test_slots_run_out_loudly_and_come_back_zeroed():
    b = buffers()
    slots = [b.allocate(0, torch.ones(8)) for _ in range(SLOTS_PER_LAYER - 1)]
    assert 0 not in slots  # row 0 is the zero row of unsteered tokens
    with pytest.raises(RuntimeError, match="no free steering slot at layer 0"):
        b.allocate(0, torch.ones(8))
    b.release(0, slots[3])
    assert b.table[0, slots[3]].eq(0).all()
    assert b.allocate(0, torch.full((8,), 2.0)) == slots[3]


def test_more_rows_than_the_buffers_hold_is_an_error_not_a_wrap():
    b = buffers(max_tokens=4)
    slot = b.allocate(0, torch.ones(8))
    with pytest.raises(RuntimeError, match="the steering buffers hold 4"):
        b.set_rows({0: [(rows(0, 6), slot)]})


def test_steady_rows_are_not_sent_again_and_a_change_is():
    b = buffers()
    slot = b.allocate(0, torch.ones(8))
    b.set_rows({0: [(np.array([0, 2, 5]), slot)]})
    b.which.zero_()  # stands for a device copy that did not happen again
    b.set_rows({0: [(np.array([0, 2, 5]), slot)]})
    assert b.which.count_nonzero() == 0  # unchanged rows: no copy
    b.set_rows({0: [(np.array([0, 2]), slot)]})  # a request finished
    assert b.which[0].nonzero().flatten().tolist() == [0, 2] and b.which[1:].count_nonzero() == 0

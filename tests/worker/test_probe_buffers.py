"""The device-side scores of generated-token probes (hooks/probe_buffers.py):
what a forward leaves in the accumulator, whether the layer points ran only
where a step reads (eager, piecewise) or at every layer over every row (what a
full CUDA graph replays), and the slots plans take and give back."""
import pytest
import torch

from innerguard.hooks.probe_buffers import SLOTS, ProbeBuffers

LAYERS, HIDDEN, TOKENS = 5, 16, 12


def _forward(buffers, streams, every_layer: bool) -> None:
    """The layer points of one forward over ``streams`` ([layers][rows, hidden] as hidden, residual)."""
    for layer, (hidden, residual) in enumerate(streams):
        if every_layer:  # as captured into a full graph: layer 0 overwrites
            buffers.add(layer, hidden, residual, 0, hidden.shape[0], overwrite=layer == 0)
        else:
            buffers.apply(layer, hidden, residual)


def test_each_row_gets_each_probe_sum_over_its_layers_however_the_forward_runs():
    torch.manual_seed(0)
    b = ProbeBuffers(LAYERS, HIDDEN, TOKENS, "cpu")
    w = {1: torch.randn(HIDDEN), 3: torch.randn(HIDDEN)}
    v = {3: torch.randn(HIDDEN), 4: torch.randn(HIDDEN)}
    slot_w, slot_v = b.allocate(w), b.allocate(v)
    assert (b.first, b.read_layers) == (1, {1, 3, 4})
    streams = [(torch.randn(10, HIDDEN, dtype=torch.bfloat16), torch.randn(10, HIDDEN, dtype=torch.bfloat16))
               for _ in range(LAYERS)]
    want = {slot: sum((h + r).float() @ weights[layer] for layer, (h, r) in enumerate(streams) if layer in weights)
            for slot, weights in ((slot_w, w), (slot_v, v))}

    b.scores.fill_(7.0)  # what an earlier step left
    b.reading = (2, 9)  # eager or piecewise: only the rows read, at the layers read
    _forward(b, streams, every_layer=False)
    for slot, expected in want.items():
        assert torch.allclose(b.scores[2:9, slot], expected[2:9], rtol=1e-5, atol=1e-5)
    assert torch.equal(b.scores[:2], torch.full((2, SLOTS), 7.0))  # rows no probe reads are left alone

    b.scores.fill_(7.0)
    _forward(b, streams, every_layer=True)  # a full graph's replay
    for slot, expected in want.items():
        assert torch.allclose(b.scores[:10, slot], expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(b.scores[:10, [s for s in range(SLOTS) if s not in want]], torch.zeros(10, SLOTS - 2))


def test_a_step_no_probe_reads_launches_nothing():
    b = ProbeBuffers(LAYERS, HIDDEN, TOKENS, "cpu")
    b.allocate({2: torch.ones(HIDDEN)})
    b.scores.fill_(7.0)
    hidden = torch.ones(4, HIDDEN)
    for layer in range(LAYERS):
        b.apply(layer, hidden, hidden)
    assert torch.equal(b.scores, torch.full((TOKENS, SLOTS), 7.0))


def test_slots_are_shared_by_the_same_probe_given_back_with_their_weights_and_run_out_with_a_clear_error():
    b = ProbeBuffers(LAYERS, HIDDEN, TOKENS, "cpu")
    first = b.allocate({0: torch.ones(HIDDEN)})
    assert b.allocate({0: torch.ones(HIDDEN)}) == first  # a reload's new plan, its old one still live
    other = b.allocate({0: 2 * torch.ones(HIDDEN)})
    assert other != first
    b.release(first)
    assert b.weights[0, :, first].any()  # the other plan still reads it
    b.release(first)
    assert not b.weights[:, :, first].any()
    assert b.read_layers == frozenset({0}) and b.first == 0
    taken = [b.allocate({4: float(i) * torch.ones(HIDDEN)}) for i in range(SLOTS - 1)]
    assert sorted(taken + [other]) == list(range(SLOTS))
    with pytest.raises(RuntimeError, match="no free probe slot"):
        b.allocate({1: torch.ones(HIDDEN)})


def test_more_rows_than_the_buffers_hold_is_refused():
    b = ProbeBuffers(LAYERS, HIDDEN, TOKENS, "cpu")
    b.allocate({0: torch.ones(HIDDEN)})
    b.reading = (0, TOKENS + 1)
    with pytest.raises(RuntimeError, match="probe buffers hold"):
        b.apply(0, torch.ones(TOKENS + 1, HIDDEN), torch.ones(TOKENS + 1, HIDDEN))

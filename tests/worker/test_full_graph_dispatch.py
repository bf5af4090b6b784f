"""Which steps may replay a full CUDA graph (no guard-point Python runs in
one). The runners' dispatchers are vLLM's; what is checked here is what the
worker asks of them, and when. The GPU run of scripts/gpu_check.py checks the
result end to end (benchmarks/README.md, "GPU: the end-to-end check")."""
from types import SimpleNamespace

from innerguard.hooks.lifecycle import Lifecycle
from innerguard.hooks.runner_view import V1RunnerReader, V2RunnerReader
from innerguard.hooks.steer import ActiveSteer


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "dispatched"


def test_the_v1_dispatcher_is_asked_for_no_full_graph_exactly_when_points_are_needed():
    from vllm.config import CUDAGraphMode

    dispatch = Recorder()
    runner = SimpleNamespace(cudagraph_dispatcher=SimpleNamespace(dispatch=dispatch))
    need = {"now": False}
    V1RunnerReader(runner).avoid_full_graphs(lambda: need["now"])
    runner.cudagraph_dispatcher.dispatch(num_tokens=8, uniform_decode=True, invalid_modes=None)
    need["now"] = True
    runner.cudagraph_dispatcher.dispatch(num_tokens=8, uniform_decode=True, invalid_modes={CUDAGraphMode.PIECEWISE})
    assert dispatch.calls[0][1]["invalid_modes"] is None
    assert dispatch.calls[1][1]["invalid_modes"] == {CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL}


def test_model_runner_v2_sees_a_non_uniform_batch_when_points_are_needed():
    dispatch = Recorder()
    runner = SimpleNamespace(cudagraph_manager=SimpleNamespace(dispatch=dispatch), add_requests=None,
                             prepare_inputs=None, execute_model=None)
    need = {"now": True}
    V2RunnerReader(runner).avoid_full_graphs(lambda: need["now"])
    runner.cudagraph_manager.dispatch(4, 4, 1, num_active_loras=0)
    need["now"] = False
    runner.cudagraph_manager.dispatch(4, 4, 1, num_active_loras=0)
    assert [c[0] for c in dispatch.calls] == [(4, 4, None), (4, 4, 1)]


def _state(decided=True, steers=(), decode=None):
    return SimpleNamespace(decided=decided, steers=list(steers), steady=None, decode=decode)


def test_only_decided_requests_with_additive_steers_token_probes_or_none_may_run_in_a_full_graph():
    lifecycle = Lifecycle(reader=None)
    lifecycle.plans.current = object()  # a plan is installed
    add = ActiveSteer(SimpleNamespace(method="add"), "p")
    project = ActiveSteer(SimpleNamespace(method="project"), "p")
    lifecycle.states = {"plain": None, "decoding": _state(steers=[add]), "deciding": _state(decided=False),
                        "projecting": _state(steers=[project]),
                        "scoring": _state(decode=SimpleNamespace(focus={})),
                        "attending": _state(decode=SimpleNamespace(focus={"p.focus": object()})),
                        "steady": SimpleNamespace(decided=True, steers=[add], steady=((3, 1),))}
    assert not lifecycle._needs_points({"plain", "decoding", "steady"})
    assert lifecycle._needs_points({"decoding", "deciding"})  # its prompt is being captured
    assert lifecycle._needs_points({"decoding", "projecting"})  # a project steer reads the stream in Python
    # A token probe on generated tokens is scored by the points' device buffers (probe_buffers.py) ...
    assert not lifecycle._needs_points({"decoding", "scoring"})
    assert lifecycle._needs_points({"decoding", "attending"})  # ... an attention tracker in Python
    assert lifecycle._needs_points({"decoding", "never-seen"})  # new: its prompt may need capture
    lifecycle.plans.current = None
    assert not lifecycle._needs_points({"never-seen"})  # nothing installed, nothing to run

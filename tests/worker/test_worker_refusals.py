"""What the worker refuses, and how it reads a request's arguments; no
engine is started here."""
from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import pytest

from innerguard.hooks.request_args import BadArguments, check_positions, read_args
from innerguard.engine.contract import SCHEDULER
from innerguard.hooks.verdicts import attach, blocked_in
from innerguard.hooks.worker_extension import UnsupportedEngineError, refuse_unsupported

VALID = {"id": "r#1", "policies": ["p"], "spans": {"p": {"instruction": [[0, 2]], "data": [[2, 5]]}}, "text_signals": {"p.x": True}}


def engine_config(smollm2_dir, **extra):
    from vllm.engine.arg_utils import EngineArgs

    from innerguard.engine.vllm_engine import guarded_engine_kwargs

    return EngineArgs(**guarded_engine_kwargs(str(smollm2_dir)), **extra).create_engine_config()


@pytest.mark.model
def test_speculative_decoding_is_refused_in_one_line(smollm2_dir):
    config = engine_config(smollm2_dir, speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})
    with pytest.raises(UnsupportedEngineError, match=r"refuses speculative decoding \(ngram\)") as error:
        refuse_unsupported(config)
    assert "\n" not in str(error.value)


@pytest.mark.model
def test_a_guarded_engine_config_is_accepted_and_another_scheduler_is_not(smollm2_dir):
    config = engine_config(smollm2_dir)
    assert config.scheduler_config.scheduler_cls == SCHEDULER
    refuse_unsupported(config)
    config.scheduler_config.scheduler_cls = "vllm.v1.core.sched.scheduler.Scheduler"
    with pytest.raises(UnsupportedEngineError, match="make a block final"):
        refuse_unsupported(config)


@pytest.mark.model
def test_cuda_graphs_are_accepted_only_when_split_at_the_guard_points(smollm2_dir):
    # This CPU build captures no CUDA graphs; configs of GPU engines that would
    # are checked here. A replayed graph skips the guard points' Python bodies,
    # so only piecewise graphs split at both points may run a guard.
    from vllm.config import CUDAGraphMode

    from innerguard.engine.contract import GUARD_POINT_OPS

    config = engine_config(smollm2_dir)
    assert not config.compilation_config.cudagraph_capture_sizes
    refuse_unsupported(config)
    compilation = config.compilation_config
    compilation.cudagraph_capture_sizes = [1, 2, 4]
    compilation.cudagraph_mode = CUDAGraphMode.PIECEWISE
    compilation.splitting_ops = ["vllm::unified_attention_with_output"]
    with pytest.raises(UnsupportedEngineError, match="not split at innerguard::attention_point, innerguard::layer_point"):
        refuse_unsupported(config)
    compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    with pytest.raises(UnsupportedEngineError, match="not split at innerguard::attention_point"):
        refuse_unsupported(config)
    compilation.splitting_ops = ["vllm::unified_attention_with_output", *GUARD_POINT_OPS]
    for mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL_AND_PIECEWISE, CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.NONE):
        compilation.cudagraph_mode = mode
        refuse_unsupported(config)
    compilation.cudagraph_mode = CUDAGraphMode.FULL  # full graphs for prefill steps too: captures would be skipped
    with pytest.raises(UnsupportedEngineError, match="cudagraph_mode FULL replays whole forwards"):
        refuse_unsupported(config)


def test_the_engine_splits_graphs_at_the_ops_the_guard_points_call():
    import torch

    from innerguard.engine.contract import GUARD_POINT_OPS
    from innerguard.engine.vllm_engine import guarded_compilation_config
    from innerguard.hooks import guard_points  # noqa: F401  (defines the ops)

    assert {torch.ops.innerguard.attention_point.default.name(), torch.ops.innerguard.layer_point.default.name()} == set(GUARD_POINT_OPS)
    config = guarded_compilation_config()
    assert config["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert {*GUARD_POINT_OPS, "vllm::unified_attention_with_output"} <= set(config["splitting_ops"])


def test_our_scheduler_takes_the_async_variant_when_the_final_config_says_so():
    from innerguard.hooks.scheduler import InnerguardAsyncScheduler, InnerguardScheduler

    def config(async_scheduling):
        return SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=async_scheduling))

    assert type(InnerguardScheduler.__new__(InnerguardScheduler, vllm_config=config(True))) is InnerguardAsyncScheduler
    assert type(InnerguardScheduler.__new__(InnerguardScheduler, vllm_config=config(False))) is InnerguardScheduler


def test_blocked_ids_travel_with_the_step_output_through_pickle():
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

    output = ModelRunnerOutput(req_ids=["a", "b"], req_id_to_index={"a": 0, "b": 1}, sampled_token_ids=[[2], [3]])
    tagged = pickle.loads(pickle.dumps(attach(output, frozenset({"b"}))))  # the multiprocess executor's way
    assert blocked_in(tagged) == {"b"} and tagged.sampled_token_ids == [[2], [3]]
    attach(EMPTY_MODEL_RUNNER_OUTPUT, frozenset({"x"}))
    assert blocked_in(EMPTY_MODEL_RUNNER_OUTPUT) == frozenset()  # vLLM's shared instance stays clean


def test_async_outputs_are_tagged_when_they_resolve():
    class Pending:
        def get_output(self):
            return SimpleNamespace(req_ids=["a"])

    assert blocked_in(attach(Pending(), frozenset({"a"})).get_output()) == {"a"}


def test_valid_arguments_are_read_and_a_missing_key_means_unguarded():
    assert read_args({"innerguard": json.dumps(VALID)}) == VALID
    assert read_args({"other": 1}) is None and read_args(None) is None


@pytest.mark.parametrize("value", [
    "[1,2]", '{"policies": 5}', "{", "NaN", json.dumps({**VALID, "rerank": {"x": 1}}),
    json.dumps({**VALID, "spans": {"p": {"data": [[0, 1.5]]}}}), json.dumps({**VALID, "spans": {"p": {"data": [[3, 1]]}}}),
    json.dumps({**VALID, "spans": {"p": {"data": [[True, 1]]}}}), json.dumps({**VALID, "text_signals": {"p.x": 1}}),
    json.dumps({**VALID, "policies": []}), json.dumps({k: v for k, v in VALID.items() if k != "spans"}),
    '{"id": "a", "policies": ["p"], "spans": {"p": {}}, "text_signals": {}, "x": NaN}', "[" * 50_000, None, 5,
])
def test_malformed_arguments_raise(value):
    with pytest.raises(BadArguments):
        read_args({"innerguard": value})


def test_extra_args_that_are_not_an_object_raise():
    with pytest.raises(BadArguments):
        read_args([1, 2])


def test_ranges_must_lie_inside_the_prompt():
    check_positions(VALID, 5)
    with pytest.raises(BadArguments, match="outside the prompt of 4 tokens"):
        check_positions(VALID, 4)


def test_a_malformed_request_is_reported_under_its_id_when_it_has_one():
    with pytest.raises(BadArguments) as error:
        read_args({"innerguard": json.dumps({**VALID, "text_signals": 3})})
    assert error.value.key == "r#1"


@pytest.mark.model
def test_pipeline_parallel_is_refused_and_tensor_parallel_is_not(smollm2_dir):
    config = engine_config(smollm2_dir)
    config.parallel_config.tensor_parallel_size = 2
    refuse_unsupported(config)
    config.parallel_config.pipeline_parallel_size = 2
    with pytest.raises(UnsupportedEngineError, match="pipeline parallel") as error:
        refuse_unsupported(config)
    assert "\n" not in str(error.value)


@pytest.mark.model
def test_rerankers_are_refused_under_tensor_parallel_in_one_line(smollm2_dir):
    from pathlib import Path

    from innerguard.engine.compiler import compile_policies
    from innerguard.hooks.tensor_parallel import Shard
    from innerguard.hooks.worker_extension import refuse_unsharded_analyzers

    plan, _ = compile_policies([Path(__file__).parents[1] / "runtime" / "policies" / "rag.yaml"], smollm2_dir)
    refuse_unsharded_analyzers(plan, Shard())
    with pytest.raises(UnsupportedEngineError, match="reranker analyzers .* tensor_parallel_size 1") as error:
        refuse_unsharded_analyzers(plan, Shard(0, 2))
    assert "\n" not in str(error.value)


def test_logits_gathered_on_one_rank_are_refused_under_tensor_parallel():
    from innerguard.hooks.tensor_parallel import Shard
    from innerguard.hooks.worker_extension import refuse_logits_on_one_rank

    refuse_logits_on_one_rank(SimpleNamespace(use_all_gather=False), Shard())
    refuse_logits_on_one_rank(SimpleNamespace(use_all_gather=True), Shard(1, 2))
    with pytest.raises(UnsupportedEngineError, match="logits on rank 0 only") as error:
        refuse_logits_on_one_rank(SimpleNamespace(use_all_gather=False), Shard(1, 2))
    assert "\n" not in str(error.value)

"""The step's rows as arrays (hooks/runner_view.py StepView): spans made on
demand, and the token rows of many requests at once."""
import numpy as np

from innerguard.hooks.runner_view import RowSpan, StepView


def view():
    # three requests: a 4-token prefill chunk, then two decodes
    return StepView(["a", "b", "c"], [0, 4, 5, 6], [10, 30, 7], {"a": 20, "b": 12, "c": 3}.__getitem__)


def test_a_span_is_the_requests_rows_positions_and_prompt_length():
    v = view()
    assert len(v) == 3 and v.num_tokens == 6
    assert v.span(0) == RowSpan("a", 0, 0, 4, 10, 20)
    assert v.span(2) == RowSpan("c", 2, 5, 6, 7, 3)
    assert v.rows == (v.span(0), v.span(1), v.span(2))


def test_token_rows_of_decodes_and_of_runs():
    v = view()
    assert v.token_rows([1, 2]).tolist() == [4, 5]
    assert v.token_rows([2, 0]).tolist() == [5, 0, 1, 2, 3]
    assert v.token_rows([]).tolist() == []


def test_an_empty_view_has_no_rows():
    v = StepView()
    assert len(v) == 0 and v.num_tokens == 0 and v.rows == ()
    assert isinstance(v.token_rows([]), np.ndarray)


def test_model_runner_v2_keeps_what_it_was_told_of_each_request_and_its_kv_caches():
    # Model Runner V2 is told of a request once (NewRequestData); its blocks
    # at admission hold every prefix-cached position.
    from types import SimpleNamespace

    from innerguard.hooks.runner_view import V2RunnerReader

    caches = ["layer0-cache", "layer1-cache"]
    runner = SimpleNamespace(add_requests=lambda out: None, prepare_inputs=None, execute_model=None, kv_caches=caches)
    reader = V2RunnerReader(runner)
    params = SimpleNamespace(extra_args={"innerguard": "x"})
    new = [SimpleNamespace(req_id="a", prompt_token_ids=[5, 6, 7], prompt_len=3, sampling_params=params, block_ids=([9, 4],)),
           SimpleNamespace(req_id="b", prompt_token_ids=[1], prompt_len=1, sampling_params=None, block_ids=([1], [2]))]
    runner.add_requests(SimpleNamespace(finished_req_ids=(), scheduled_new_reqs=new))
    assert reader.block_ids("a") == [9, 4] and reader.extra_args("a") == {"innerguard": "x"}
    assert reader.prompt_token_ids("a") == [5, 6, 7]
    assert reader.block_ids("b") is None  # two KV cache groups (hybrid attention): not read back
    assert reader.block_ids("unknown") is None and reader.extra_args("unknown") is None
    assert reader.kv_cache(1) == "layer1-cache" and reader.kv_cache(2) is None
    runner.add_requests(SimpleNamespace(finished_req_ids=("a",), scheduled_new_reqs=()))
    assert reader.block_ids("a") is None


def test_model_runner_v2_follows_the_blocks_of_later_steps_and_forgets_preempted_requests():
    # Token-probe scores are kept per KV cache block (token_score_cache.py):
    # the reader must know every block a request holds, not only those it was
    # admitted with. vLLM's own CachedRequestData carries them.
    from types import SimpleNamespace

    from vllm.v1.core.sched.output import CachedRequestData

    from innerguard.hooks.runner_view import V2RunnerReader

    runner = SimpleNamespace(add_requests=lambda out: None, prepare_inputs=None, execute_model=None, kv_caches=[],
                             cache_config=SimpleNamespace(block_size=16))
    reader = V2RunnerReader(runner)
    assert reader.block_size() == 16

    def step(new=(), cached=(), finished=(), preempted=None, resumed=()):
        ids = [req_id for req_id, _ in cached]
        blocks = CachedRequestData(req_ids=ids, resumed_req_ids=set(resumed), new_token_ids=[], all_token_ids={},
                                   new_block_ids=[b for _, b in cached], num_computed_tokens=[0] * len(ids),
                                   num_output_tokens=[0] * len(ids))
        runner.add_requests(SimpleNamespace(finished_req_ids=set(finished), preempted_req_ids=preempted,
                                            scheduled_new_reqs=list(new), scheduled_cached_reqs=blocks))

    def new(req_id, blocks):
        return SimpleNamespace(req_id=req_id, prompt_token_ids=[1] * 40, prompt_len=40, sampling_params=None, block_ids=(blocks,))

    step(new=[new("a", [7]), new("b", [3, 4])])
    step(cached=[("a", ([8],)), ("b", None)])  # a's second chunk got a block; b got none
    step(cached=[("a", ([2],))])
    assert reader.block_ids("a") == [7, 8, 2] and reader.block_ids("b") == [3, 4]
    step(cached=[("a", ([5, 6],))], resumed={"a"})  # blocks given instead of appended
    assert reader.block_ids("a") == [5, 6]
    step(cached=[("b", ([9], [10]))])  # a second KV cache group: no longer followed
    assert reader.block_ids("b") is None
    step(preempted={"a"})  # V2 removes a preempted request; it comes back as new
    assert reader.block_ids("a") is None
    step(new=[new("a", [11, 12])])
    assert reader.block_ids("a") == [11, 12]

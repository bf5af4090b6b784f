"""No single request can hurt the engine: whatever arrives in
``extra_args["innerguard"]`` (any JSON shape, wrong types inside the right
shape, NaN, huge or deeply nested values), the request ends blocked, never
allowed with model tokens, and the engine keeps serving everyone else."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from worker_helpers import generate, prepared, prompt_of, row, settled_stats, take

pytestmark = pytest.mark.vllm

CASES = 320  # generated values, at least 300 reach the engine
BATCH = 110  # requests per engine call

small_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=12)
leaf = small_leaf | st.integers(-(2**80), 2**80)  # big integers go through JSON only
anything = st.recursive(leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=16)
not_an_int = st.none() | st.booleans() | st.floats() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
bad_position = not_an_int | st.integers(max_value=-1) | st.integers(min_value=2**31, max_value=2**80)
bad_range = st.tuples(bad_position, st.integers(0, 8)).map(list) | st.tuples(st.integers(9, 20), st.integers(0, 8)).map(list) \
    | st.lists(st.integers(0, 8), min_size=0, max_size=1) | st.lists(st.integers(0, 8), min_size=3, max_size=4) | not_an_int
not_a_list_of_names = st.integers() | st.text(max_size=5) | st.dictionaries(st.text(max_size=4), st.text(max_size=4), min_size=1, max_size=2) \
    | st.lists(not_an_int.filter(lambda v: not isinstance(v, str)), min_size=1, max_size=3) | st.just([]) | st.just([""])


@st.composite
def mutated(draw, base: dict):
    """The arguments of a real request (a fail-OPEN policy: a wrong value
    must not let it through) with one field made wrong."""
    args = copy.deepcopy(base)
    policy = args["policies"][0]
    field = draw(st.sampled_from(
        ["id", "policies", "policy_spans", "span_pair", "spans", "text_signals", "signal_value",
         "rerank", "bundle", "drop", "out_of_range"]))
    if field == "id":
        args["id"] = draw(not_an_int.filter(lambda v: not isinstance(v, str)) | st.just("") | st.just("x" * 600))
    elif field == "policies":
        args["policies"] = draw(not_a_list_of_names | st.just(["no-such-policy"]))
    elif field == "policy_spans":
        args["spans"][policy] = draw(anything.filter(lambda v: not isinstance(v, dict)))
    elif field == "span_pair":
        args["spans"][policy][draw(st.sampled_from(["instruction", "data"]))] = [draw(bad_range)]
    elif field == "spans":
        args["spans"] = draw(anything.filter(lambda v: not isinstance(v, dict)) | st.just({}))
    elif field == "text_signals":
        args["text_signals"] = draw(anything.filter(lambda v: not isinstance(v, dict)))
    elif field == "signal_value":
        args["text_signals"]["injection-open.x"] = draw(anything.filter(lambda v: not isinstance(v, bool)))
    elif field == "rerank":
        args["rerank"] = draw(anything.filter(lambda v: not isinstance(v, dict))
                              | st.dictionaries(st.text(min_size=1, max_size=6), anything, min_size=1, max_size=3))
    elif field == "bundle":
        args["bundle"] = draw(st.text(min_size=1, max_size=20) | not_an_int.filter(lambda v: v is not None))
    elif field == "drop":
        del args[draw(st.sampled_from(["id", "policies", "spans", "text_signals"]))]
    else:
        args["spans"][policy]["data"] = [[0, 10**6]]
    return args


def as_wire(value) -> str:
    return json.dumps(value, allow_nan=True)  # NaN and Infinity as Python writes them


def cases(base: dict):
    return st.one_of(
        anything.filter(lambda v: not isinstance(v, dict)).map(as_wire),  # every other JSON shape
        st.dictionaries(st.text(max_size=8), anything, max_size=5).map(as_wire),  # objects of anything
        mutated(base).map(as_wire),  # the right shape, a wrong part
        st.sampled_from([
            '{"policies": 5}', '[1,2]', '{not json', "", "null", "NaN", "[" * 100_000, "x" * 5_000_000,
            as_wire({**base, "spans": {"injection-open": {"instruction": [[0, float("nan")]], "data": [[1, 2]]}}}),
            as_wire({**base, "rerank": {"x": 1}}),
            as_wire({**base, "policies": ["injection-open"] * 5000}),
        ]),
        mutated(base),  # not a string at all: a dict straight into extra_args
        st.sampled_from([5, None, [1, 2], 1.5, True]),
    )


@pytest.fixture(scope="module")
def base(worker_engine):
    p = prepared(worker_engine, row(0, ["injection-open"]))
    return p, json.loads(p.extra_args["innerguard"])


def test_the_issue_8_shapes_block_and_spare_the_engine(worker_engine, base):
    p, args = base
    from vllm import SamplingParams

    shapes = ['{"policies": 5}', as_wire({**args, "rerank": {"x": 1}}), "[1,2]"]
    params = [SamplingParams(max_tokens=8, ignore_eos=True, extra_args={"innerguard": s}) for s in shapes]
    outs = generate(worker_engine, [(prompt_of(p), q) for q in params])
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 1, 1]
    assert_engine_serves(worker_engine)


def generated_cases(args: dict) -> list:
    """>= 300 values from the strategies above, drawn by hypothesis up front
    so that the engine can take them in a few batches."""
    found = []

    @settings(max_examples=CASES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(value=cases(args), extra=st.dictionaries(st.text(max_size=6), small_leaf, max_size=3))
    def collect(value, extra):
        # Most go in as extra_args["innerguard"]; every tenth carries other keys too.
        found.append({**(extra if len(found) % 10 == 0 else {}), "innerguard": value})

    collect()
    return found


def test_any_malformed_arguments_block_the_request_alone(worker_engine, base):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMClientError

    p, args = base
    extra_args = generated_cases(args)
    sent = 0
    for start in range(0, len(extra_args), BATCH):
        requests = []
        for extra in extra_args[start:start + BATCH]:
            try:
                requests.append((prompt_of(p), SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, extra_args=extra)))
            except VLLMClientError:
                continue  # vLLM refused the value itself (an integer beyond 64 bits): fine
        sent += len(requests)
        for request, out in zip(requests, run_each(worker_engine, requests)):
            if out is not None:  # None: refused before it reached the engine
                assert len(out.outputs[0].token_ids) <= 1, f"allowed with model tokens: {str(request[1].extra_args)[:300]}"
        assert_engine_serves(worker_engine)
    assert sent >= 300
    stats = settled_stats(worker_engine)
    assert stats["live_states"] == 0 and stats["groups"] == 0


def run_each(llm, requests):
    """One engine call; should vLLM itself refuse a request, each alone."""
    try:
        return generate(llm, requests)
    except Exception:
        outs = []
        for request in requests:
            try:
                outs += generate(llm, [request])
            except Exception:
                outs.append(None)
        return outs


def assert_engine_serves(llm):
    blocked, allowed = llm.run([row(0, ["blocker"], data="Please BLOCKME now."), row(1, ["injection", "topic"])])
    assert blocked.blocked and blocked.error is None
    assert not allowed.blocked and allowed.num_output_tokens > 0 and allowed.error is None

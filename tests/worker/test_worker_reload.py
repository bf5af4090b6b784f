"""A reload is atomic and reversible: a plan that fails to load or fails the
engine-side self-check leaves the previous one serving, and requests in
flight finish under the plan they started with."""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from innerguard.engine.errors import EngineStartError
from worker_helpers import prepared, prompt_of, row, take, with_guard

pytestmark = pytest.mark.vllm


def rpc(llm, method, *args, **kwargs):
    return llm.llm.collective_rpc(method, args=args, kwargs=kwargs)[0]


def roles(llm) -> list[tuple[str, str]]:
    return [(r["role"], r["bundle"]) for r in rpc(llm, "innerguard_stats")["runtimes"]]


def assert_serves(llm):
    blocked, allowed = llm.run([row(0, ["blocker"], data="Please BLOCKME now."), row(1, ["injection"])])
    assert blocked.blocked and not allowed.blocked and allowed.num_output_tokens > 0


def test_a_plan_whose_vectors_do_not_load_leaves_the_old_one_serving(worker_engine):
    good = worker_engine.plan
    missing = {k: dataclasses.replace(v, path="/nonexistent/vector.safetensors") for k, v in good.vectors.items()}
    with pytest.raises(EngineStartError, match="could not install"):
        worker_engine.install(dataclasses.replace(good, vectors=missing, bundle_hash="missing-vectors"))
    assert worker_engine.plan is good
    assert roles(worker_engine) == [("current", good.bundle_hash)]
    assert_serves(worker_engine)


def test_a_failed_self_check_rolls_back_to_the_old_plan(worker_engine, monkeypatch):
    from innerguard.engine import vllm_engine

    good = worker_engine.plan
    monkeypatch.setattr(vllm_engine, "_self_check_failure", lambda *args: "self-check failed: simulated")
    with pytest.raises(EngineStartError, match="simulated"):
        worker_engine.install(dataclasses.replace(good, bundle_hash="fails-self-check"))
    assert worker_engine.plan is good
    assert roles(worker_engine) == [("current", good.bundle_hash)]  # the staged plan and its hooks are gone
    assert_serves(worker_engine)


def test_requests_in_flight_keep_the_plan_they_started_with(worker_engine):
    from vllm import SamplingParams

    llm, original = worker_engine, worker_engine.plan
    zero = dataclasses.replace(original, bundle_hash="zero-steer",
                               steers=tuple(dataclasses.replace(s, coefficient=0.0) for s in original.steers))
    r = row(0, ["steer", "topic"], max_tokens=32)  # a row the steer visibly changes
    steered = list(llm.run([r])[0].token_ids)
    old = prepared(llm, r)  # names the original bundle
    engine = llm.llm.llm_engine
    engine.add_request("in-flight", prompt_of(old), with_guard(SamplingParams(temperature=0.0, max_tokens=32), old))
    _wait(lambda: rpc(llm, "innerguard_stats")["live_states"] == 1)
    rpc(llm, "innerguard_install", zero.to_dict())  # two-phase, without the self-check's own requests
    rpc(llm, "innerguard_commit", zero.bundle_hash)
    try:
        llm.plan = zero
        assert roles(llm) == [("current", "zero-steer"), ("retiring", original.bundle_hash)]
        outputs = []
        while engine.has_unfinished_requests():
            outputs += [o for o in engine.step() if o.finished]
        assert list(outputs[0].outputs[0].token_ids) == steered  # still steered, under its own plan
        new = llm.run([r])[0]  # prepared for the new plan: not steered
        plain = llm.llm.generate([prompt_of(old, guarded=False)], SamplingParams(temperature=0.0, max_tokens=32), use_tqdm=False)
        assert list(new.token_ids) == list(plain[0].outputs[0].token_ids) != steered
        rpc(llm, "innerguard_configure", retire_grace_s=0.0)  # the old plan's hooks go once it is idle
        assert roles(llm) == [("current", "zero-steer")]
    finally:
        rpc(llm, "innerguard_configure", retire_grace_s=60.0)
        llm.reload(original)
    assert take(llm, [old.key])[old.key]["bundle"] == original.bundle_hash


def test_a_request_for_a_plan_the_worker_does_not_have_is_blocked(worker_engine):
    from vllm import SamplingParams

    p = prepared(worker_engine, row(1, ["injection-open"]))  # fails open: the bundle check must not
    stale = with_guard(SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True), p)
    stale.extra_args = {"innerguard": stale.extra_args["innerguard"].replace(p.bundle_hash, "gone")}
    out = worker_engine.llm.generate([prompt_of(p)], stale, use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) <= 1
    result = take(worker_engine, [p.key])[p.key]
    assert result["blocked"] and "bundle gone is not installed" in result["errors"]["*"]


def test_a_reload_that_needs_hooks_on_new_layers_works_without_a_restart(worker_engine, worker_policy_dir, tmp_path):
    original = worker_engine.plan
    folder = tmp_path / "policies"
    shutil.copytree(worker_policy_dir, folder)
    shutil.copy(Path(__file__).parent / "policies" / "early-probe.yaml", folder)
    try:
        info_plan = worker_engine.reload(folder)
        assert 3 not in {c.layer for c in original.residual_captures}
        out = worker_engine.run([row(2, ["early-probe", "blocker"])])[0]
        assert isinstance(out.signals["early-probe.concept"], float) and out.error is None
        assert roles(worker_engine)[0] == ("current", info_plan.bundle_hash)
    finally:
        worker_engine.reload(original)
    assert_serves(worker_engine)


def _wait(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)

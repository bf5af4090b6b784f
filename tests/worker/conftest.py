"""Engines for the worker tests, one of each per session: a guarded engine at
the default settings (compiled), and a tight eager one (a few KV blocks,
64-token prefill chunks) where requests get preempted and prompts take
several steps."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from worker_helpers import RUNTIME_POLICIES, make_vector

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def worker_policy_dir(tmp_path_factory, smollm2_dir) -> Path:
    """Most of tests/runtime/policies, plus a conditional steer (steer-if-marker)."""
    folder = tmp_path_factory.mktemp("worker-policies")
    names = ["blocker", "injection", "injection-open", "shadow", "steer", "topic"]
    for source in [*(RUNTIME_POLICIES / f"{n}.yaml" for n in names), HERE / "policies" / "steer-if-marker.yaml"]:
        shutil.copy(source, folder / source.name)
    make_vector(folder / "artifacts" / "concept.safetensors", smollm2_dir, layer=8, seed=1)
    make_vector(folder / "artifacts" / "steer.safetensors", smollm2_dir, layer=6, seed=2)
    make_vector(folder / "artifacts" / "concept3.safetensors", smollm2_dir, layer=3, seed=3)
    return folder


def _engine(smollm2_dir, policy_dir, close_after_folder, **overrides):
    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(smollm2_dir, policy_dir, **overrides)
    close = close_after_folder("worker", llm.shutdown)
    yield llm
    close()


@pytest.fixture(scope="session")
def worker_engine(smollm2_dir, worker_policy_dir, close_after_folder):
    """vLLM's default (compiled) mode, as users run it: the hostile-request,
    finality, lifecycle and reload tests run against the guard points inside
    the compiled graph."""
    yield from _engine(smollm2_dir, worker_policy_dir, close_after_folder)


@pytest.fixture(scope="session")
def tight_engine(smollm2_dir, worker_policy_dir, close_after_folder):
    """10 KV blocks of 128 tokens: six ~230-token requests cannot all grow."""
    yield from _engine(smollm2_dir, worker_policy_dir, close_after_folder, enforce_eager=True, num_gpu_blocks_override=10,
                       max_model_len=1024, max_num_batched_tokens=64, max_num_seqs=8)

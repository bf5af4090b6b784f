"""Shared fixtures. Real things, not mocks: the prepared SmolLM2 checkpoint
and one vLLM engine of each kind per test session (engine start is slow).

The suite runs on two pytest-xdist workers (pyproject.toml). vLLM on CPU
runs a model on one core and compiles it in one Python thread, so two
workers with their engines pinned to cores of their own take half the time.
Tests are grouped by the engines they share (a group runs on one worker),
and the longest groups start first."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from innerguard.engine import logging as ig_logging

ig_logging.configure("console", "warning")

MAX_WORKERS = 2  # each worker holds several engines of a few GiB each
# Groups by their measured length, longest first; the rest follow in file order.
LONGEST_FIRST = ["worker", "runtime", "serve", "build", "worker-tensor-parallel"]


def _share_of_cores() -> list[int]:
    """This worker's cores: the machine's, split evenly between the workers."""
    cores = sorted(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    per_worker = max(1, len(cores) // workers)
    return cores[index * per_worker % len(cores):][:per_worker]


if "PYTEST_XDIST_WORKER" in os.environ and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
    _cores = _share_of_cores()
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, _cores))  # engines started from here, and servers
    os.environ["OMP_NUM_THREADS"] = str(len(_cores))  # the reference model and fits in this process


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


def _group(item) -> str:
    parts = Path(item.path).relative_to(Path(__file__).parent).parts
    if parts[0] == "worker" and item.path.name == "test_tensor_parallel.py":
        return "worker-tensor-parallel"  # engines of its own
    return parts[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))  # stable: file order within a group


@pytest.fixture(scope="session")
def smollm2_dir():
    from innerguard.engine import models

    return models.prepare("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def plain_llm(smollm2_dir):
    """Plain vLLM, eager, float32: the baseline guarded output must match."""
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    llm = start_llm(**engine_kwargs(str(smollm2_dir), eager=True))
    yield llm
    _shutdown(llm)


def _shutdown(llm) -> None:
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


@pytest.fixture(scope="session")
def shipped_probe():
    """The shipped prompt-injection policy's version and probe threshold, read
    from the file, so that a rebuilt probe ships without editing tests."""
    import re
    from pathlib import Path
    from types import SimpleNamespace

    text = (Path(__file__).resolve().parents[1] / "policies" / "prompt-injection.yaml").read_text()
    version = re.search(r"^  version: (\S+)$", text, re.M)
    rule = re.search(r"when: (injected > ([0-9.]+))", text)
    assert version and rule, "policies/prompt-injection.yaml lost its version or its 'injected >' rule"
    return SimpleNamespace(version=version.group(1), rule=rule.group(1), threshold=rule.group(2))

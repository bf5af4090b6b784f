"""Shared fixtures. Real things, not mocks: the prepared SmolLM2 checkpoint
and one vLLM engine of each kind per test folder (engine start is slow).

The suite runs on two pytest-xdist workers (pyproject.toml). vLLM on CPU
runs a model on one core and compiles it in one Python thread, so two
workers whose engines are pinned to cores of their own take about half the
time. Each worker runs one lane of test folders, in order, and a folder's
engines stop once its last test has run: memory holds at most one folder's
engines per lane. Engines that only start, serve a batch and stop run in the
test's own process (``in_this_process``): no core and worker processes to
spawn, about 20 s less per engine."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import pytest

from innerguard.engine import logging as ig_logging

ig_logging.configure("console", "warning")

MAX_WORKERS = 2  # a lane's folder holds up to four engines of about 3 GiB each
# Two lanes of about equal length, each folder where the engines it shares
# live; folders not named here run last in the second lane. The folders
# that start no engine (lint, policy, compiler, evaluate, analyzers: 15 s
# in all) open the second lane, so a slip in the language or the linter
# fails in the first minute, not after ten. From the --durations=0 of CI's
# run of ff73e42 (seconds of setup + call + teardown): foundation 45,
# runtime 685, policy_tests 35 | the five 15, worker 389, serve 235,
# build 60, capture 32, audit 20, examples 10: 766 s against 761 s.
LANES = (
    ("foundation", "runtime", "policy_tests"),
    ("lint", "policy", "compiler", "evaluate", "analyzers",
     "worker", "serve", "build", "capture", "audit", "examples"),
)


def _folder(nodeid: str) -> str:
    return nodeid.split("/")[1]  # tests/<folder>/test_x.py::name


def _lane(folder: str) -> int:
    return 0 if folder in LANES[0] else 1


def _place(nodeid: str) -> tuple[int, int]:
    folder = _folder(nodeid)
    lane = LANES[_lane(folder)]
    return _lane(folder), lane.index(folder) if folder in lane else len(lane)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _place(item.nodeid))  # stable: file order within a folder


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByLane(LoadScopeScheduling):
        """One unit of work per lane, run in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return f"lane-{_lane(_folder(nodeid))}"

    return ByLane(config, log)


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


_closers: dict[str, list[Callable[[], None]]] = {}


def _close_after_folder(folder: str, close: Callable[[], None]) -> Callable[[], None]:
    """Run ``close`` once, after the last test of ``folder`` that this
    worker runs (or at the end of the session); returns the once-only call."""
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            close()

    _closers.setdefault(folder, []).append(once)
    return once


@pytest.fixture(scope="session")
def close_after_folder():
    """For session engines: ``close = close_after_folder("runtime", llm.shutdown)``."""
    return _close_after_folder


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        folder = _folder(item.nodeid)
        if nextitem is None or _folder(nextitem.nodeid) != folder:
            for close in _closers.pop(folder, []):
                close()
        _release_engines()


def _release_engines() -> None:
    """Free the engines shut down so far, before the next test starts one.
    An engine in this process (engine_in_this_process) freezes the garbage
    collector's heap when it starts (vLLM's ``freeze_gc_heap``), so once shut
    down it would never be collected: about 1.5 GiB each."""
    import gc

    if gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()


@contextlib.contextmanager
def engine_in_this_process():
    """Start the engines of this block with their core and worker in the
    test's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): ~3 s instead
    of ~24 s spent spawning two processes that import vLLM again. The same
    engine, worker and model runner; on a GPU vLLM runs the worker in the
    core's process too. For engines that start, serve a batch and stop;
    one that is driven from outside (requests added, aborted, or watched
    while they run) needs a core that steps by itself: vLLM's default.
    At most one engine of this kind is alive at a time: two in one process
    share vLLM's process-wide state (tried with the runtime folder's
    compiled engine beside an eager one: their steered tokens differed)."""
    from vllm import envs

    before = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = before
        # A core in this process caches vLLM's environment once started.
        getattr(envs, "disable_envs_cache", lambda: None)()


@pytest.fixture(scope="session")
def in_this_process():
    """``with in_this_process(): llm = GuardedLLM(...)`` (engine_in_this_process)."""
    return engine_in_this_process


@contextlib.contextmanager
def _entered_in_this_process(engine):
    """Enter ``engine`` (a context manager that starts and stops one, such as
    ``recording_engine(path)``) in this process and yield what it yields; the
    setting is back as soon as it has started, so engines started later in
    the block keep vLLM's default."""
    with contextlib.ExitStack() as stack:
        with engine_in_this_process():
            llm = stack.enter_context(engine)
        yield llm


@pytest.fixture(scope="session")
def enter_in_this_process():
    """``with enter_in_this_process(recording_engine(path)) as llm: yield llm`` (_entered_in_this_process)."""
    return _entered_in_this_process


@pytest.fixture(scope="session")
def smollm2_dir():
    from innerguard.engine import models

    return models.prepare("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def plain_llm(smollm2_dir, close_after_folder):
    """Plain vLLM, eager, float32: the baseline guarded output must match."""
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    llm = start_llm(**engine_kwargs(str(smollm2_dir), eager=True))
    # foundation runs before runtime in their lane (LANES), and nothing after uses it
    close = close_after_folder("runtime", lambda: _shutdown(llm))
    yield llm
    close()


def _shutdown(llm) -> None:
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
        engine.engine_core = None  # the fixture keeps ``llm``; the model goes (_release_engines)


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

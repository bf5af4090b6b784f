"""The engine a build runs on: one vLLM engine per command, started once.

Captures need the recording worker extension and eager mode (forward hooks
do not fire in compiled graphs). A layer sweep also generates steered text,
which needs a guarded engine; a guarded engine started eager records too.
The build functions take an engine (``vllm.LLM`` or ``GuardedLLM``), so
a caller that holds one (tests, notebooks) reuses it; the CLI opens one
here per command.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from innerguard.engine import models


def model_dir_of(target: Any) -> Path:
    if hasattr(target, "model_dir"):  # GuardedLLM
        return Path(target.model_dir)
    llm = getattr(target, "llm", target)
    return Path(llm.llm_engine.model_config.model)


@contextlib.contextmanager
def recording_engine(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Iterator[Any]:
    """A vLLM engine with innerguard's worker extension (the recorder), eager,
    started with the guarded engine's arguments; no plan is installed, so
    no request is guarded."""
    from innerguard.engine.vllm_engine import guarded_engine_kwargs, start_llm

    llm = start_llm(**guarded_engine_kwargs(str(models.resolve(model, cache_dir)), eager=True))
    try:
        yield llm
    finally:
        _shutdown(llm)


@contextlib.contextmanager
def guarded_engine(model: str | os.PathLike, policies, cache_dir: str | os.PathLike | None = None) -> Iterator[Any]:
    """A guarded engine, eager so that it records as well as it steers."""
    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(model, policies, cache_dir=cache_dir, enforce_eager=True)
    try:
        yield llm
    finally:
        llm.shutdown()


def _shutdown(llm: Any) -> None:
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()

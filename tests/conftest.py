"""Shared fixtures. Real things, not mocks: the prepared SmolLM2 checkpoint
and one vLLM engine of each kind per test session (engine start is slow)."""
from __future__ import annotations

import pytest

from innerguard.engine import logging as ig_logging

ig_logging.configure("console", "warning")


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

"""Fixtures for the build tests: one engine per test module (module scope:
each module starts its own and stops it at the end), the Hugging Face
reference model (loaded once), and a fixed build date."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import build_helpers`

from build_helpers import EPOCH  # noqa: E402


@pytest.fixture(scope="module")
def recording_llm(smollm2_dir, enter_in_this_process):
    """A build only generates batches and reads captures back: its engine
    runs in the test's process (tests/conftest.py, engine_in_this_process)."""
    from innerguard.engine.build.engine import recording_engine

    with enter_in_this_process(recording_engine(smollm2_dir)) as llm:
        yield llm


@pytest.fixture(scope="session")  # four modules read it; a few seconds to load each time
def reference(smollm2_dir):
    from innerguard.engine.reference import load_reference_model

    return load_reference_model(smollm2_dir)


@pytest.fixture(autouse=True)
def _fixed_date(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)


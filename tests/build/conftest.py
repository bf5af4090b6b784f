"""Fixtures for the build tests: one engine per test module (module scope:
each module starts its own and stops it at the end), the Hugging Face
reference model, and a fixed build date."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import build_helpers`

from build_helpers import EPOCH  # noqa: E402


@pytest.fixture(scope="module")
def recording_llm(smollm2_dir):
    from innerguard.engine.build.engine import recording_engine

    with recording_engine(smollm2_dir) as llm:
        yield llm


@pytest.fixture(scope="module")
def reference(smollm2_dir):
    from innerguard.engine.reference import load_reference_model

    return load_reference_model(smollm2_dir)


@pytest.fixture(autouse=True)
def _fixed_date(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)


"""Session fixtures for analyzer and reference tests: the real SmolLM2 model
(loaded once) and the tiny random models of ``tests/tiny_models.py``."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `import tiny_models`

from tiny_models import TINY_SPECS, build_tiny_model  # noqa: E402

from innerguard.hooks.analyzers import HeadGeometry  # noqa: E402


@dataclass
class LoadedModel:
    name: str
    path: Path
    model: Any
    tokenizer: Any
    geometry: HeadGeometry
    num_layers: int


def _load(name: str, path: Path) -> LoadedModel:
    from innerguard.engine.models import read_geometry
    from innerguard.engine.reference import load_reference_model

    model, tokenizer = load_reference_model(path)
    g = read_geometry(path)
    return LoadedModel(name, path, model, tokenizer, HeadGeometry(g.num_heads, g.num_kv_heads, g.head_dim), g.num_layers)


@pytest.fixture(scope="session")
def smollm() -> LoadedModel:
    from innerguard.engine.models import prepare

    return _load("smollm2-135m-instruct", prepare("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, LoadedModel]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {name: _load(name, build_tiny_model(name, root / name)) for name in TINY_SPECS}


# Measured parity gaps (fast path on HF captures vs the reference), printed
# at the end of the run so the figures are visible without -s.
PARITY: dict[str, float] = {}


@pytest.fixture
def parity():
    def record(name: str, value: float) -> None:
        PARITY[name] = max(PARITY.get(name, 0.0), float(value))

    return record


def pytest_terminal_summary(terminalreporter):
    if PARITY:
        terminalreporter.write_sep("-", "analyzer parity: max |fast - reference|")
        for name in sorted(PARITY):
            terminalreporter.write_line(f"{name:55s} {PARITY[name]:.3e}")

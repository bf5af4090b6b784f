"""Fixtures that build real artifacts in temporary folders, and copies of
the shipped policies beside them, so tests never depend on
the shipped artifacts (innerguard build writes those)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from artifact_builders import POLICIES, make_shipped_artifacts


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """The shipped policies, copied into a temporary folder with artifacts."""
    target = tmp_path / "policies"
    target.mkdir()
    for f in POLICIES.glob("*.yaml"):
        shutil.copy(f, target / f.name)
    make_shipped_artifacts(target)
    return target


@pytest.fixture
def write_policy(tmp_path: Path):
    """Write YAML text (dedented) to a policy file in a fresh folder."""
    counter = {"n": 0}

    def write(text: str | bytes, name: str | None = None) -> Path:
        counter["n"] += 1
        folder = tmp_path / f"p{counter['n']}"
        folder.mkdir(exist_ok=True)
        path = folder / (name or "policy.yaml")
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    return write


@pytest.fixture(scope="session")
def model_dir(smollm2_dir) -> Path:
    return smollm2_dir

"""Fixtures that build real artifacts (safetensors with the documented
metadata) in temporary folders, and copies of the shipped policies beside
them, so tests never depend on scripts/make_artifacts.py having run."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
MODEL_DIR = Path("/root/.cache/innerguard/models/smollm2-135m-instruct")
MODEL_NAME = "smollm2-135m-instruct"
HIDDEN, LAYERS, HEADS = 576, 30, 9
INJECTION_HEADS = [[13, 2], [15, 4], [17, 1], [20, 6], [22, 3], [24, 0], [26, 8], [27, 5], [28, 7]]


def write_heads(path: Path, heads=INJECTION_HEADS, *, key="heads", dtype=np.int64, metadata=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"model_name": MODEL_NAME, "num_layers": str(LAYERS), "num_heads": str(HEADS)} if metadata is None else metadata
    save_file({key: np.asarray(heads, dtype=dtype)}, str(path), metadata=meta)
    return path


def write_vector(path: Path, *, size=HIDDEN, layer=8, key="vector", dtype=np.float32, metadata=None, shape=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"model_name": MODEL_NAME, "hidden_size": str(size), "layer": str(layer)} if metadata is None else metadata
    data = np.linspace(-1, 1, size, dtype=np.float64).astype(dtype)
    if shape is not None:
        data = data.reshape(shape)
    save_file({key: data}, str(path), metadata=meta)
    return path


def make_shipped_artifacts(folder: Path) -> None:
    art = folder / "artifacts"
    write_heads(art / "smollm2-135m-instruct.injection-heads.safetensors")
    write_vector(art / "smollm2-135m-instruct.medical-concept.safetensors", key="weight", layer=16)
    write_vector(art / "smollm2-135m-instruct.caution-steer.safetensors")


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
def model_dir() -> Path:
    if not (MODEL_DIR / "config.json").is_file():
        pytest.skip("SmolLM2-135M-Instruct checkpoint not prepared")
    return MODEL_DIR

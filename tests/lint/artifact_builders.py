"""Real artifacts (safetensors with the documented metadata) built in
temporary folders, for the linter's tests. A module of its own (not
conftest) so that tests import it by a name no other folder shares."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
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
    write_vector(art / "smollm2-135m-instruct.medical-concept.safetensors", key="weight", layer=24)  # the policy's layer
    write_vector(art / "smollm2-135m-instruct.caution-steer.safetensors")
    # The linter checks the policy's length_adjust against the artifact's (IG306).
    adjust = re.search(r"^    length_adjust: (\S+)$", (POLICIES / "prompt-injection.yaml").read_text(), re.M)
    write_token_probe(art / "smollm2-135m-instruct.injection-token-probe.safetensors", layers=range(3, 30, 3),
                      length_adjust=adjust.group(1) if adjust else None)


def write_token_probe(path: Path, *, layers, size=HIDDEN, length_adjust: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = list(layers)
    meta = {"model_name": MODEL_NAME, "hidden_size": str(size), "layers": ",".join(map(str, layers)),
            **({"length_adjust": length_adjust} if length_adjust else {})}
    tensors = {f"weight.{layer}": np.linspace(-1, 1, size, dtype=np.float32) for layer in layers}
    save_file({**tensors, "bias": np.zeros(1, dtype=np.float32)}, str(path), metadata=meta)
    return path

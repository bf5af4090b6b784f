"""The shipped artifacts, built by innerguard build (recipes: data/artifacts/README.md)."""
from pathlib import Path

import pytest
from safetensors import safe_open

from innerguard.engine.models import fingerprint, prepare

ARTIFACTS = Path(__file__).resolve().parents[2] / "policies" / "artifacts"
MODEL = "smollm2-135m-instruct"


def read(name):
    with safe_open(str(ARTIFACTS / f"{MODEL}.{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


@pytest.fixture(scope="module")
def model_fingerprint():
    return fingerprint(prepare(MODEL))


def test_injection_heads_are_layer_head_pairs_for_this_model(model_fingerprint):
    tensors, meta = read("injection-heads")
    heads = tensors["heads"]
    assert heads.dtype.is_floating_point is False and heads.dim() == 2 and heads.shape[1] == 2 and len(heads) >= 3
    assert heads[:, 0].max() < 30 and heads[:, 1].max() < 9 and heads.min() >= 0
    assert meta["model_name"] == MODEL and (meta["num_layers"], meta["num_heads"], meta["hidden_size"]) == ("30", "9", "576")
    assert meta["model_fingerprint"] == model_fingerprint


@pytest.mark.parametrize("name", ["medical-concept", "caution-steer"])
def test_vectors_have_the_hidden_size_and_record_their_layer(name, model_fingerprint):
    tensors, meta = read(name)
    assert tuple(tensors["vector"].shape) == (576,) and str(tensors["vector"].dtype) == "torch.float32"
    assert meta["model_name"] == MODEL and meta["hidden_size"] == "576"
    # Steering stays below layer 12, where the residual norm jumps ~10x; the
    # probe reads the layer the shipped policy names.
    assert int(meta["layer"]) == (_policy_layer("medical-topic-steer", "medical") if name == "medical-concept" else 8)
    assert meta["model_fingerprint"] == model_fingerprint


def test_steering_vector_is_scaled_relative_to_the_residual_norm():
    tensors, meta = read("caution-steer")
    ratio = float(tensors["vector"].norm()) / float(meta["residual_norm"])
    assert ratio == pytest.approx(float(meta["relative_norm"]), rel=1e-3)


def _policy_layer(policy: str, signal: str) -> int:
    import yaml

    data = yaml.safe_load((ARTIFACTS.parent / f"{policy}.yaml").read_text())
    return int(data["signals"][signal]["layer"])

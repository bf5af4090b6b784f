"""One guarded vLLM engine for the runtime tests, serving the test policies in
tests/runtime/policies with vector artifacts made here (seeded)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from helpers import LENGTH_ADJUST, TOKEN_PROBE_ARTIFACT, copy_decode_artifacts, decode_policy, focus_policy, make_vector

POLICIES = Path(__file__).parent / "policies"
# The shipped token-level probe policy, with its fitted artifact (test_token_probe.py).
SHIPPED = Path(__file__).resolve().parents[2] / "policies"


def _length_adjusted_copy(folder: Path) -> None:
    """The shipped probe again as policy prompt-injection-length, with a
    length adjustment (test_token_probe.py); only a request that names it or
    carries the tag length-adjust selects it."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    source = SHIPPED / "artifacts" / TOKEN_PROBE_ARTIFACT
    with safe_open(str(source), "pt") as f:
        metadata = {**f.metadata(), "length_adjust": f"{LENGTH_ADJUST:.4f}"}
    save_file(load_file(str(source)), str(folder / "artifacts" / "length-adjusted-probe.safetensors"), metadata=metadata)
    # The shipped policy's own adjustment gives way to this one.
    text = re.sub(r"    length_adjust: .*\n", "", (SHIPPED / "prompt-injection.yaml").read_text())
    for old, new in (("  name: prompt-injection\n", "  name: prompt-injection-length\n"),
                     ("mode: enforce\n", "mode: enforce\napplies_to: {tags: [length-adjust]}\n"),
                     ("    window: 16\n", f"    window: 16\n    length_adjust: {LENGTH_ADJUST}\n"),
                     (TOKEN_PROBE_ARTIFACT, "length-adjusted-probe.safetensors")):
        assert old in text, old
        text = text.replace(old, new, 1)
    (folder / "tokens-length.yaml").write_text(text)


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory, smollm2_dir) -> Path:
    folder = tmp_path_factory.mktemp("policies")
    for source in POLICIES.glob("*.yaml"):
        shutil.copy(source, folder / source.name)
    make_vector(folder / "artifacts" / "concept.safetensors", smollm2_dir, layer=8, seed=1)
    make_vector(folder / "artifacts" / "steer.safetensors", smollm2_dir, layer=6, seed=2)
    shutil.copy(SHIPPED / "prompt-injection.yaml", folder / "tokens.yaml")
    copy_decode_artifacts(SHIPPED, folder)
    _length_adjusted_copy(folder)
    (folder / "decode.yaml").write_text(decode_policy())  # its probe on the generated tokens (test_token_probe.py)
    (folder / "focus.yaml").write_text(focus_policy())  # attention on the generated tokens (test_token_probe.py)
    return folder


@pytest.fixture(scope="session")
def steer_vector(policy_dir) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(policy_dir / "artifacts" / "steer.safetensors"))["vector"]


@pytest.fixture(scope="session")
def guarded(smollm2_dir, policy_dir, close_after_folder):
    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(smollm2_dir, policy_dir)
    close = close_after_folder("runtime", llm.shutdown)
    yield llm
    close()


@pytest.fixture(scope="session")
def reference(smollm2_dir):
    from innerguard.engine.reference.model import load_reference_model

    return load_reference_model(smollm2_dir)


@pytest.fixture(scope="session")
def chunked(smollm2_dir, policy_dir, close_after_folder):
    """A second guarded engine (compiled too): 64-token prefill chunks."""
    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(smollm2_dir, policy_dir, max_num_batched_tokens=64, max_num_seqs=8)
    close = close_after_folder("runtime", llm.shutdown)
    yield llm
    close()

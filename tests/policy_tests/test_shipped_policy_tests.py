"""The shipped policy library passes its own unit tests (policies/tests/*.test.yaml)
on the real model inside vLLM, as ``innerguard test policies/`` runs them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.model]

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).parent / "innerguard"


def test_shipped_policy_tests_pass(smollm2_dir):
    r = subprocess.run([str(EXE), "test", str(ROOT / "policies"), "--model", str(smollm2_dir), "--enforce-eager"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert " 0 failed" in r.stdout


"""One guarded engine with the recording worker extension for the capture
tests: it serves the shipped attention-tracker policy (live decisions, audit
log) and records (captures) on the same engine."""
from __future__ import annotations

from pathlib import Path

import pytest

# The engine starts with a stable test policy; the replay tests install the
# shipped attention-tracker policy (whatever its current revision needs).
START_POLICY = Path(__file__).resolve().parents[1] / "runtime" / "policies" / "injection.yaml"


@pytest.fixture(scope="session")
def capture_audit_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("capture-audit") / "audit.jsonl"


@pytest.fixture(scope="session")
def recording_guarded(smollm2_dir, capture_audit_path, in_this_process):
    from innerguard.engine.guarded import GuardedLLM

    # Every guarded engine can record: the recorder is part of the worker extension.
    with in_this_process():
        llm = GuardedLLM(smollm2_dir, START_POLICY, audit_log=capture_audit_path, audit_durability="sync",
                         enforce_eager=True)
    yield llm
    llm.shutdown()

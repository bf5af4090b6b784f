"""The server's audit folder: private to the server's user, and an operator
who gave no audit key is told what that costs, once, at start."""
from __future__ import annotations

import stat

import pytest

pytestmark = pytest.mark.vllm

EPHEMERAL = "audit log has no operator key"


def test_audit_files_are_readable_by_the_server_user_only(server):
    folder = server.audit_dir  # created by innerguard serve (--audit-log)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    created = sorted(folder.iterdir())
    assert created and {p.name: stat.S_IMODE(p.stat().st_mode) for p in created} == {p.name: 0o600 for p in created}


def test_an_ephemeral_audit_key_is_warned_about_once_at_start(server):
    log = server.log_path.read_text(errors="replace")
    assert log.count(EPHEMERAL) == 1  # the session server runs without --audit-key-file
    warning = log[log.index(EPHEMERAL):].splitlines()[0]
    assert "--audit-key-file" in warning and "INNERGUARD_AUDIT_KEY" in warning

"""The server's audit trail: written per decision, before the response
returns, with the request's trusted metadata; it verifies as a live log."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serve_requests import BLOCKED, KEY, chat

pytestmark = pytest.mark.vllm

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _records_of(server, request_id: str, until, timeout_s: float = 30.0) -> list[dict]:
    """The request's records once ``until(records)`` holds. Decisions are on
    disk before the response returns (sync durability); the completion record
    is queued as the response ends, and the writer thread may lag it."""
    from innerguard.engine.audit.query import read

    deadline = time.monotonic() + timeout_s
    while True:
        records = [x.record for x in read([server.audit_dir]) if x.record.get("request_id") == request_id]
        if until(records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def test_records_name_the_request_and_verify(server):
    headers = {**KEY, "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=chat(BLOCKED, innerguard={"correlation_id": "order-42"}),
                   headers=headers, timeout=60)
    guard = r.json()["innerguard"]
    on_return = _records_of(server, guard["decision_id"], until=lambda rs: True)
    assert sorted(x["policy"]["name"] for x in on_return if x["type"] == "decision") == \
        sorted(p["policy"] for p in guard["policies"])  # on disk before the response returned
    records = _records_of(server, guard["decision_id"], until=lambda rs: any(x["type"] == "completion" for x in rs))
    decisions = [x for x in records if x["type"] == "decision"]
    (completion,) = [x for x in records if x["type"] == "completion"]
    assert sorted(d["policy"]["name"] for d in decisions) == sorted(p["policy"] for p in guard["policies"])
    (pi,) = [d for d in decisions if d["policy"]["name"] == "prompt-injection"]
    assert pi["tenant"] == "acme" and pi["correlation_id"] == TRACE  # the W3C trace id wins
    assert pi["result"]["action"] == "block" and pi["bundles"]["innerguard"]["revision"] == guard["bundle_hash"]
    assert "text" not in pi["input"]["prompt"]  # privacy by default: a keyed hash and the length
    assert completion["finish_reason"] == "content_filter" and completion["metrics"]["gen_ai.usage.output_tokens"] == 0

    head = server.status()["audit"]["head"]
    innerguard = Path(sys.executable).with_name("innerguard")
    done = subprocess.run([str(innerguard), "audit", "verify", str(server.audit_dir), "--allow-open", "--head", head],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

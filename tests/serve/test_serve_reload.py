"""Live reload: a folder change, SIGHUP and the admin endpoint. A broken
revision never serves; the last good one does, and says why."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import httpx
import pytest

from serve_process import ADMIN
from serve_requests import ALLOWED, BLOCKED, KEY, chat

pytestmark = pytest.mark.vllm


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def wait_for(server, predicate, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = server.status()
        if predicate(status):
            return status
        time.sleep(0.3)
    raise AssertionError(f"reload not seen in {timeout}s: {server.status()}")


def revision_served(server, policy="prompt-injection") -> str:
    r = httpx.post(f"{server.url}/v1/chat/completions", json=chat(BLOCKED), headers=KEY, timeout=60)
    (p,) = [p for p in r.json()["innerguard"]["policies"] if p["policy"] == policy]
    return p["revision"]


def metric(server, name: str, **labels) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}}") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def restore(served_policies):
    saved = {p: p.read_bytes() for p in served_policies.glob("*.yaml")}
    yield
    for path in served_policies.glob("*.yaml"):
        if path not in saved:
            path.unlink()
    for path, data in saved.items():
        path.write_bytes(data)


def test_a_folder_change_reloads_and_a_broken_one_never_serves(server, served_policies, restore, shipped_probe):
    policy = served_policies / "prompt-injection.yaml"
    original = policy.read_text()
    before = server.status()["bundle_hash"]
    current = f"version: {shipped_probe.version}\n"
    assert current in original
    write_atomically(policy, original.replace(current, "version: 99.0.1\n"))
    status = wait_for(server, lambda s: s["bundle_hash"] != before)
    assert status["last_reload"]["result"] == "ok" and status["last_reload"]["reason"] == "policy folder changed"
    good = revision_served(server)
    assert {p["name"]: p["version"] for p in status["policies"]}["prompt-injection"] == "99.0.1"

    failed_before = metric(server, "innerguard_reload_total", result="failed")
    broken = original.replace("when: injected > ", "when: injectedd > ")
    assert broken != original
    write_atomically(policy, broken)
    status = wait_for(server, lambda s: s["last_reload"]["result"] == "failed")
    assert "injectedd" in status["last_reload"]["error"]
    assert metric(server, "innerguard_reload_total", result="failed") == failed_before + 1
    assert revision_served(server) == good  # the last good revision keeps serving
    r = httpx.post(f"{server.url}/v1/chat/completions", json=chat(BLOCKED), headers=KEY, timeout=60)
    assert r.json()["innerguard"]["verdict"] == "block"


def test_sighup_and_the_admin_endpoint_reload(server):
    assert httpx.post(f"{server.url}/innerguard/reload", timeout=30).status_code == 401
    assert httpx.get(f"{server.url}/innerguard/status", headers={"Authorization": "Bearer nope"}, timeout=30).status_code == 401
    r = server.reload()
    assert r.status_code == 200 and r.json()["result"] == "ok" and r.json()["reason"] == "POST /innerguard/reload"
    oks = metric(server, "innerguard_reload_total", result="ok")
    server.signal()
    status = wait_for(server, lambda s: s["last_reload"]["reason"] == "SIGHUP")
    assert status["last_reload"]["result"] == "ok" and metric(server, "innerguard_reload_total", result="ok") == oks + 1
    assert status["uptime_seconds"] > 0 and len(status["bundle_hash"]) == 64


def test_a_reload_that_needs_hooks_on_new_layers(server, served_policies, smollm2_dir, restore):
    import torch
    from safetensors.torch import save_file

    from innerguard.engine import models

    g = models.read_geometry(smollm2_dir)
    vector = torch.nn.functional.normalize(torch.randn(g.hidden_size, generator=torch.Generator().manual_seed(7)), dim=0)
    save_file({"vector": vector}, str(served_policies / "artifacts" / "layer2.safetensors"), metadata={
        "model_name": "smollm2-135m-instruct", "hidden_size": str(g.hidden_size), "layer": "2", "model_fingerprint": g.fingerprint})
    write_atomically(served_policies / "layer-two.yaml", LAYER_TWO)
    try:
        status = wait_for(server, lambda s: "layer-two" in {p["name"] for p in s["policies"]})
        assert status["last_reload"]["result"] == "ok"
        r = httpx.post(f"{server.url}/v1/chat/completions", json=chat(ALLOWED), headers=KEY, timeout=60)
        decisions = {p["policy"]: p for p in r.json()["innerguard"]["policies"]}
        # cosine >= -1 always: the rule fires only if layer 2's hook captured the residual.
        assert decisions["layer-two"]["action"] == "flag" and decisions["layer-two"]["rule"] == "always"
    finally:
        (served_policies / "artifacts" / "layer2.safetensors").unlink()


LAYER_TWO = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: layer-two, version: 1.0.0, owner: tests, description: Reads a layer no other policy reads.}
mode: enforce
on_error: fail-closed
signals:
  p: {analyzer: probe, layer: 2, score: cosine, vector: {artifact: artifacts/layer2.safetensors, key: vector}}
rules:
  - {id: always, when: p >= -1, action: flag, message: "layer two read"}
"""


def test_metrics_are_on_vllms_metrics_endpoint(server):
    httpx.post(f"{server.url}/v1/chat/completions", json=chat(BLOCKED), headers=KEY, timeout=60)
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert re.search(r'innerguard_decisions_total\{action="block",mode="enforce",policy="prompt-injection"\} [1-9]', text)
    assert "innerguard_analysis_seconds_bucket" in text
    assert "innerguard_reload_total" in text and "vllm:" in text  # vLLM's own metrics beside ours
    assert ADMIN not in text

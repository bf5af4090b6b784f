"""One real ``innerguard serve`` for the server tests, over a copy of the
shipped policies (the reload tests edit the copy)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serve_process import ServeProcess

SHIPPED = Path(__file__).resolve().parents[2] / "policies"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# Not applied by the operator's selection (no request is tagged "strict"):
# a client adds it by name.
BLOCKER = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: blocker, version: 1.0.0, owner: tests, description: Blocks untrusted text that says BLOCKME.}
mode: enforce
on_error: fail-closed
applies_to: {tags: [strict]}
spans: {trusted: {roles: [system]}, untrusted: {roles: [user]}}
signals:
  marker: {analyzer: text, keywords: [BLOCKME], span: untrusted}
rules:
  - {id: block-marker, when: marker, action: block, message: "Refused by {{ policy.name }} ({{ rule.id }})."}
"""

# Applied by the operator to one tenant, known by its API key's name.
TENANT_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: globex-only, version: 1.0.0, owner: tests, description: Globex may not mention the merger.}
mode: enforce
on_error: fail-closed
applies_to: {tenants: [globex]}
spans: {trusted: {roles: [system]}, untrusted: {roles: [user]}}
signals:
  merger: {analyzer: text, keywords: [merger], span: untrusted}
rules:
  - {id: no-merger-talk, when: merger, action: block, message: "Refused by {{ policy.name }}."}
"""


# Output rules (span: generated), added by name: stop an answer before its
# first whole-word "{word}".
STOP_WORD = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: stop-{word}, version: 1.0.0, owner: tests, description: Stops an answer at its first "{word}".}}
applies_to: {{tags: [stop-{word}]}}
signals:
  wrote: {{analyzer: text, keywords: [{word}], span: generated}}
rules:
  - {{id: stop-at-{word}, when: wrote, action: stop, message: "Stopped by {{{{ rule.id }}}}."}}
"""


@pytest.fixture(scope="session")
def served_policies(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("served") / "policies"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    (folder / "blocker.yaml").write_text(BLOCKER)
    (folder / "globex-only.yaml").write_text(TENANT_POLICY)
    for word in ("the", "only"):
        (folder / f"stop-{word}.yaml").write_text(STOP_WORD.format(word=word))
    # The example as shipped applies to every request; here only to those that name it.
    leak = (EXAMPLES / "system-prompt-leak" / "system-prompt-leak.yaml").read_text()
    (folder / "system-prompt-leak.yaml").write_text(leak.replace("\nmode: enforce\n", "\nmode: enforce\napplies_to: {tags: [recital]}\n"))
    for artifact in (EXAMPLES / "system-prompt-leak" / "artifacts").iterdir():
        shutil.copy(artifact, folder / "artifacts" / artifact.name)
    return folder


@pytest.fixture(scope="session")
def server(smollm2_dir, served_policies, tmp_path_factory, close_after_folder):
    logs = tmp_path_factory.mktemp("serve-logs")
    keys = logs / "tenant-keys.yaml"
    keys.write_text("acme: sk-acme-test\nglobex: sk-globex-test\n")
    process = ServeProcess(served_policies, logs / "serve.log", "--tenant-keys", str(keys), "--isolate-tenants",
                           "--enable-prompt-tokens-details",
                           "--audit-log", str(logs / "audit"), "--audit-durability", "sync")
    process.audit_dir = logs / "audit"
    stop = close_after_folder("serve", process.stop)
    try:
        yield process.wait_ready()
    finally:
        stop()


@pytest.fixture(scope="session")
def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="sk-acme-test", max_retries=0, timeout=120)

#!/usr/bin/env python3
"""``innerguard serve`` end to end on a GPU machine's vLLM (0.24 from the kit).

    python3 scripts/gpu_serve_check.py WORKDIR --tokenizer DIR --out OUTDIR [--modes compiled eager]

DIR holds SmolLM2-135M-Instruct's config.json and tokenizer files (no
weights). The model is a random-weight Llama of exactly that shape, in a
folder named smollm2-135m-instruct, so that the shipped policies and their
artifacts lint and compile against it unchanged; only the artifacts'
model_fingerprint (config and weight-file sizes) is re-stamped when the
random checkpoint's differs. Random weights make the learned signals
meaningless, so the shipped enforcing prompt-injection policy runs in
shadow mode here (it still scores every request: its signals come back);
a text policy (BLOCKME, enforce, fail-closed) blocks deterministically.

For each mode (``compiled``: vLLM's default, CUDA graphs split at the guard
points; ``eager``: ``--enforce-eager``) one server is started, then:
  - started: /health answers within the start timeout;
  - port_exclusive: no second socket can bind the server's port;
  - allowed: a chat request is answered, with an ``innerguard`` object,
    verdict not block, completion tokens > 0, the shadow policies' signals finite;
  - blocked: BLOCKME gets finish_reason content_filter and 0 completion tokens;
  - stream_allowed / stream_blocked: the verdict on the first chunk, content after it;
  - completion: /v1/completions allowed and blocked;
  - unguarded_route_refused: /v1/embeddings answers 404;
  - status: /innerguard/status with the admin token;
  - example: examples/openai_client.py runs against the server.
Writes OUTDIR/serve_check.json (and serve_MODE.log) as it goes; exit status 0
only when every check of every mode passed.
"""
from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_NAME = "smollm2-135m-instruct"
ADMIN = "gpu-check-admin"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json")
SYSTEM = "Summarise the customer review in one sentence."
BENIGN = "The blender arrived on time and works well. It is loud, but it crushes ice in seconds."
BLOCKER = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: blocker, version: 1.0.0, owner: gpu-check, description: Blocks untrusted text that says BLOCKME.}
mode: enforce
on_error: fail-closed
spans: {trusted: {roles: [system]}, untrusted: {roles: [user]}}
signals:
  marker: {analyzer: text, keywords: [BLOCKME], span: untrusted}
rules:
  - {id: block-marker, when: marker, action: block, message: "Refused by {{ policy.name }} ({{ rule.id }})."}
"""


# -- the model and the policies --------------------------------------------------
def make(workdir: Path, tokenizer_dir: Path) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model_dir = workdir / MODEL_NAME
    info: dict = {"model_dir": str(model_dir)}
    if not (model_dir / "model.safetensors").is_file():
        model_dir.mkdir(parents=True, exist_ok=True)
        config = LlamaConfig.from_pretrained(tokenizer_dir)
        torch.manual_seed(0)
        LlamaForCausalLM(config).to(torch.float32).save_pretrained(model_dir, safe_serialization=True)
        shutil.copy(tokenizer_dir / "config.json", model_dir / "config.json")  # SmolLM2's own, byte for byte
        copy_tokenizer(tokenizer_dir, model_dir)
    info["policies"] = make_policies(workdir, model_dir)
    return info


def copy_tokenizer(tokenizer_dir: Path, model_dir: Path) -> None:
    """The tokenizer files into ``model_dir`` (tokenizer.json travels xz-compressed)."""
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, model_dir / name)
        elif (tokenizer_dir / f"{name}.xz").is_file():
            (model_dir / name).write_bytes(lzma.decompress((tokenizer_dir / f"{name}.xz").read_bytes()))


def make_policies(workdir: Path, model_dir: Path) -> dict:
    from safetensors import safe_open
    from safetensors.torch import save_file

    from innerguard.engine import models

    folder = workdir / "policies"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(REPO / "policies", folder, ignore=shutil.ignore_patterns("__init__.py", "__pycache__", "tests"))
    shipped = folder / "prompt-injection.yaml"
    text = shipped.read_text()
    assert "\nmode: enforce\n" in text, "the shipped prompt-injection policy changed its mode line"
    shipped.write_text(text.replace("\nmode: enforce\n", "\nmode: shadow\n"))  # random weights: score, never act
    (folder / "blocker.yaml").write_text(BLOCKER)
    fingerprint = models.read_geometry(model_dir).fingerprint
    restamped = []
    for path in sorted((folder / "artifacts").glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("model_fingerprint") not in (None, fingerprint):
            meta["model_fingerprint"] = fingerprint
            save_file(tensors, str(path), metadata=meta)
            restamped.append(path.name)
    return {"folder": str(folder), "files": sorted(p.name for p in folder.glob("*.yaml")), "restamped": restamped}


# -- the server ------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free local port: ``argv`` is its command line
    without ``--host``/``--port``; stopped with its engine-core processes."""

    def __init__(self, argv: list[str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [*argv, "--host", "127.0.0.1", "--port", str(self.port)]
        self.log_path = log
        self._log = open(log, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "INFO")}
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_ready(self, timeout: float) -> bool:
        import httpx

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(1)
        return False

    def tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)  # the server and its engine-core processes
                self.proc.wait(wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self._log.close()


# -- the checks ------------------------------------------------------------------
def chat_body(user: str, **extra) -> dict:
    return {"model": MODEL_NAME, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            "max_tokens": 16, "temperature": 0, **extra}


def post(url: str, body: dict) -> dict:
    import httpx

    r = httpx.post(url, json=body, timeout=120)
    return {"status": r.status_code, "json": r.json() if r.headers.get("content-type", "").startswith("application/json") else None,
            "text": r.text[:500]}


def stream(url: str, body: dict) -> list[dict]:
    import httpx

    chunks = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=120) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    return chunks


def _signals(guard: dict) -> dict:
    # Each policy's signals come back already named "policy.signal".
    return {k: v for p in guard.get("policies", []) for k, v in (p.get("signals") or {}).items()}


def completion_prompt(data: str) -> str:
    """A raw prompt in the model's chat format, the data between innerguard's
    untrusted markers (as tests/serve/serve_requests.py sends it)."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
            f"<untrusted>{data}</untrusted><|im_end|>\n<|im_start|>assistant\n")


def check_server(server: Server) -> tuple[dict, dict]:
    import httpx

    checks: dict[str, bool] = {}
    seen: dict = {}
    chat_url, cmpl_url = f"{server.url}/v1/chat/completions", f"{server.url}/v1/completions"

    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        probe.bind(("127.0.0.1", server.port))
        checks["port_exclusive"] = False
    except OSError:
        checks["port_exclusive"] = True
    finally:
        probe.close()

    allowed = post(chat_url, chat_body(BENIGN))
    body = allowed["json"] or {}
    guard = body.get("innerguard") or {}
    signals = _signals(guard)
    seen["allowed"] = {"status": allowed["status"], "innerguard": guard, "usage": body.get("usage"),
                       "finish_reason": (body.get("choices") or [{}])[0].get("finish_reason"),
                       "content": ((body.get("choices") or [{}])[0].get("message") or {}).get("content"),
                       "error": None if allowed["json"] else allowed["text"]}
    modes = {p["policy"]: p.get("mode") for p in guard.get("policies", [])}
    checks["allowed"] = (allowed["status"] == 200 and bool(guard.get("decision_id")) and guard.get("verdict") != "block"
                         and (body.get("usage") or {}).get("completion_tokens", 0) > 0)
    checks["shipped_policies_scored"] = (
        modes.get("prompt-injection") == "shadow" and modes.get("prompt-injection-attention") == "shadow"
        and modes.get("blocker") == "enforce"
        and all(isinstance(signals.get(k), (int, float)) and math.isfinite(signals[k])
                for k in ("prompt-injection.injected", "prompt-injection-attention.focus")))

    blocked = post(chat_url, chat_body("Please BLOCKME now. " + BENIGN))
    body = blocked["json"] or {}
    choice = (body.get("choices") or [{}])[0]
    seen["blocked"] = {"status": blocked["status"], "verdict": (body.get("innerguard") or {}).get("verdict"),
                       "finish_reason": choice.get("finish_reason"), "usage": body.get("usage"),
                       "content": (choice.get("message") or {}).get("content"), "error": None if blocked["json"] else blocked["text"]}
    checks["blocked"] = (blocked["status"] == 200 and choice.get("finish_reason") == "content_filter"
                         and (body.get("usage") or {}).get("completion_tokens") == 0
                         and (body.get("innerguard") or {}).get("verdict") == "block")

    for name, user, verdict in (("stream_allowed", BENIGN, "allow"), ("stream_blocked", "BLOCKME " + BENIGN, "block")):
        try:
            chunks = stream(chat_url, chat_body(user))
            first = (chunks[0].get("innerguard") or {}).get("verdict") if chunks else None
            content = "".join((c["choices"][0].get("delta") or {}).get("content") or "" for c in chunks if c.get("choices"))
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
            seen[name] = {"chunks": len(chunks), "first_verdict": first, "content": content[:120], "finish": finish}
            ok = bool(chunks) and all("innerguard" not in c for c in chunks[1:]) and bool(content)
            checks[name] = ok and (first == "block" and finish == ["content_filter"] if verdict == "block"
                                   else first not in (None, "block") and bool(finish) and finish[0] != "content_filter")
        except Exception as exc:  # reported, not raised: the other checks still run
            seen[name] = {"error": f"{type(exc).__name__}: {exc}"}
            checks[name] = False

    add = {"innerguard": {"policies": ["blocker"]}}
    done = {}
    for name, data in (("allow", BENIGN), ("block", "BLOCKME " + BENIGN)):
        r = post(cmpl_url, {"model": MODEL_NAME, "prompt": completion_prompt(data), "max_tokens": 8, "temperature": 0, **add})
        b = r["json"] or {}
        done[name] = {"status": r["status"], "verdict": (b.get("innerguard") or {}).get("verdict"),
                      "finish_reason": (b.get("choices") or [{}])[0].get("finish_reason"), "usage": b.get("usage"),
                      "error": None if r["json"] else r["text"]}
    seen["completion"] = done
    checks["completion"] = (done["allow"]["status"] == 200 and done["allow"]["verdict"] not in (None, "block")
                            and done["block"]["verdict"] == "block" and done["block"]["finish_reason"] == "content_filter"
                            and (done["block"]["usage"] or {}).get("completion_tokens") == 0)

    r = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL_NAME, "input": "x"}, timeout=30)
    seen["embeddings"] = {"status": r.status_code, "text": r.text[:200]}
    checks["unguarded_route_refused"] = r.status_code == 404

    r = httpx.get(f"{server.url}/innerguard/status", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    seen["status"] = r.json() if r.status_code == 200 else {"status": r.status_code, "text": r.text[:300]}
    checks["status"] = r.status_code == 200

    example = subprocess.run([sys.executable, str(REPO / "examples" / "openai_client.py"), "--base-url", f"{server.url}/v1"],
                             capture_output=True, text=True, timeout=180)
    seen["example"] = {"rc": example.returncode, "stdout": example.stdout[-2000:], "stderr": example.stderr[-2000:]}
    checks["example"] = example.returncode == 0 and example.stdout.count("stream: verdict=") == 2
    return checks, seen


def run_mode(mode: str, info: dict, out: Path, start_timeout: float) -> dict:
    import vllm

    t0 = time.time()
    argv = [sys.executable, "-m", "innerguard.engine.cli", "serve", "--model", info["model_dir"],
            "--served-model-name", MODEL_NAME, "--policies", info["policies"]["folder"], "--admin-token", ADMIN,
            "--expose-signals", "--watch-interval", "0", "--max-model-len", "2048", "--gpu-memory-utilization", "0.3",
            *(["--enforce-eager"] if mode == "eager" else [])]
    server = Server(argv, out / f"serve_{mode}.log")
    result: dict = {"mode": mode, "vllm": vllm.__version__, "command": " ".join(server.command)}
    try:
        started = server.wait_ready(start_timeout)
        result["start_s"] = round(time.time() - t0, 1)
        result["checks"] = {"started": started}
        if not started:
            result["tail"] = server.tail()
            return result
        checks, seen = check_server(server)
        result["checks"].update(checks)
        result["seen"] = seen
    except Exception as exc:  # reported, not raised: the summary still comes back
        import traceback

        result["exception"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
        result["tail"] = server.tail()
    finally:
        server.stop()
        result["ok"] = "exception" not in result and all(result.get("checks", {"started": False}).values())
        result["total_s"] = round(time.time() - t0, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's config.json and tokenizer files")
    parser.add_argument("--out", type=Path, default=None, help="where serve_check.json and the logs go (default: WORKDIR)")
    parser.add_argument("--modes", nargs="+", choices=("compiled", "eager"), default=["compiled", "eager"])
    parser.add_argument("--start-timeout", type=float, default=300)
    args = parser.parse_args()
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"),
                       ("VLLM_USE_FLASHINFER_SAMPLER", "0")):
        os.environ.setdefault(key, value)
    out = args.out or args.workdir
    out.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    summary: dict = {"runs": {}}
    path = out / "serve_check.json"
    t0 = time.time()
    try:
        summary["make"] = make(args.workdir, args.tokenizer)
        summary["make_s"] = round(time.time() - t0, 1)
    except Exception as exc:
        import traceback

        summary["make_error"] = traceback.format_exc()[-3000:]
        print(f"make failed: {exc}", flush=True)
    path.write_text(json.dumps(summary, indent=1, sort_keys=True))
    if "make" in summary:
        for mode in args.modes:
            result = run_mode(mode, summary["make"], out, args.start_timeout)
            summary["runs"][mode] = result
            path.write_text(json.dumps(summary, indent=1, sort_keys=True))
            print(f"[{mode}] ok={result['ok']} start_s={result.get('start_s')} checks={json.dumps(result.get('checks'))}",
                  flush=True)
    summary["ok"] = "make" in summary and bool(summary["runs"]) and all(r["ok"] for r in summary["runs"].values())
    path.write_text(json.dumps(summary, indent=1, sort_keys=True))
    print("SERVE_CHECK " + json.dumps({"ok": summary["ok"], **{m: r.get("checks") for m, r in summary["runs"].items()}}),
          flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""A real ``innerguard serve`` process on 127.0.0.1, started by the tests."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ADMIN = "test-admin-token"
MODEL = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    def __init__(self, policies: Path, log: Path, *extra: str, admin_flag: bool = True, env: dict | None = None):
        """``admin_flag=False``: the admin token is not given as ``--admin-token``
        (give it in ``extra`` or ``env`` another way)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        innerguard = Path(sys.executable).with_name("innerguard")
        command = [str(innerguard), "serve", "--model", MODEL, "--policies", str(policies),
                   "--host", "127.0.0.1", "--port", str(self.port), *(["--admin-token", ADMIN] if admin_flag else []),
                   "--watch-interval", "0.5", "--max-model-len", "2048", "--enforce-eager", *extra]
        self.log_path = log
        self._log = open(log, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # tests/conftest.py's, not a user's
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 300) -> "ServeProcess":
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"innerguard serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"innerguard serve not ready after {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status(self) -> dict:
        r = httpx.get(f"{self.url}/innerguard/status", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        r.raise_for_status()
        return r.json()

    def reload(self) -> httpx.Response:
        return httpx.post(f"{self.url}/innerguard/reload", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120)

    def signal(self, sig=signal.SIGHUP) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()

"""Live reload: on a change in the policy folder, on SIGHUP, or on
``POST /innerguard/reload``. A new revision is linted and compiled, installed
in the worker and proved by the self-check before requests see it; any
failure keeps the last good revision serving, and says why (log, status,
metric)."""
from __future__ import annotations

import asyncio
import hashlib
import signal
import time
from pathlib import Path
from typing import Any, Sequence

from innerguard.engine.compiler import compile_policies
from innerguard.engine.errors import InnerguardError
from innerguard.engine.serve import metrics
from innerguard.engine.serve.guard import ServerGuard, _iso


class Reloader:
    def __init__(self, guard: ServerGuard, sources: Sequence[Path], model_dir: Path, install):
        self.guard = guard
        self.sources = [Path(s) for s in sources]
        self.model_dir = model_dir
        self._install = install  # async (engine, plan) -> info; rolls back itself on failure
        self._lock = asyncio.Lock()
        self._seen = self.fingerprint()

    def fingerprint(self) -> str:
        """Changes whenever a policy or artifact file does (content, not mtime)."""
        digest = hashlib.sha256()
        for source in self.sources:
            files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
            for path in files:
                try:
                    digest.update(str(path).encode() + b"\0" + path.read_bytes())
                except OSError:
                    digest.update(str(path).encode() + b"\0?")
        return digest.hexdigest()

    async def reload(self, reason: str) -> dict[str, Any]:
        async with self._lock:
            self._seen = await asyncio.to_thread(self.fingerprint)
            old = self.guard.plan
            try:
                plan, _ = await asyncio.to_thread(compile_policies, self.sources, self.model_dir)
                info = await self._install(self.guard.engine, plan)
            except Exception as exc:  # compile, load or self-check: the old plan keeps serving
                error = str(exc) if isinstance(exc, InnerguardError) else f"{type(exc).__name__}: {exc}"
                outcome = {"result": "failed", "at": _iso(time.time()), "reason": reason,
                           "bundle_hash": old.bundle_hash, "error": error}
                self.guard.log.error("policy reload failed; the last good revision keeps serving",
                                     reason=reason, error=error, bundle_hash=old.bundle_hash)
            else:
                self.guard.use_install_info(info)  # the canary may have turned read-back off
                self.guard.plan = plan  # atomic: requests read it once, when prepared
                metrics.record_bundle(old.bundle_hash, plan.bundle_hash)
                outcome = {"result": "ok", "at": _iso(time.time()), "reason": reason,
                           "bundle_hash": plan.bundle_hash, "error": None}
                self.guard.log.info("policies reloaded", reason=reason, bundle_hash=plan.bundle_hash,
                                    previous=old.bundle_hash)
            metrics.RELOADS.labels(outcome["result"]).inc()
            self.guard.last_reload = outcome
            return outcome

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if await asyncio.to_thread(self.fingerprint) != self._seen:
                await self.reload("policy folder changed")

    def on_sighup(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(self.reload("SIGHUP")))

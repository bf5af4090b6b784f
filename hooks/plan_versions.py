"""The plans installed in a worker: the current one, one staged (installed,
awaiting the engine side's self-check before it is committed), and older
ones kept while requests that started under them still run.

A request runs to its end under the plan it was prepared for (its
``bundle``): a reload never changes the policies of a request in flight.
"""
from __future__ import annotations

import time
from typing import Any, Callable

RETIRE_GRACE_S = 60.0


class PlanVersions:
    def __init__(self, on_dropped: Callable[[Any], None] = lambda runtime: None):
        self.current = None
        self.staged = None  # installed, awaiting the engine side's self-check
        self.retiring: list = []  # older plans, kept while their requests live
        self.retire_grace_s = RETIRE_GRACE_S
        self._on_dropped = on_dropped  # a retired plan was uninstalled

    def runtimes(self) -> list:
        return [r for r in (self.staged, self.current) if r is not None] + self.retiring

    def stage(self, runtime) -> None:
        if self.staged is not None:
            self._retire(self.staged, grace=False)
        self.staged = runtime

    def commit(self, bundle: str) -> None:
        if self.staged is None or self.staged.bundle != bundle:
            raise RuntimeError(f"no staged plan with bundle {bundle}")
        old, self.current, self.staged = self.current, self.staged, None
        if old is not None:
            self._retire(old, grace=True)

    def rollback(self, bundle: str | None = None) -> bool:
        if self.staged is None or (bundle is not None and self.staged.bundle != bundle):
            return False
        staged, self.staged = self.staged, None
        self._retire(staged, grace=False)
        return True

    def _retire(self, runtime, grace: bool) -> None:
        # A committed plan's requests may still wait in the scheduler's queue,
        # unseen here: its hooks stay a grace period even when idle.
        runtime.retired_at = time.monotonic() if grace else float("-inf")
        if runtime not in self.retiring:
            self.retiring.append(runtime)
        self.drop_idle()

    def drop_idle(self) -> None:
        cutoff = time.monotonic() - self.retire_grace_s
        for runtime in [r for r in self.retiring if r.live == 0 and r.retired_at <= cutoff]:
            runtime.uninstall()
            self.retiring.remove(runtime)
            self._on_dropped(runtime)

    def runtime_for(self, bundle: str | None):
        """(runtime, error) for a request prepared for ``bundle``."""
        default = self.current or self.staged  # staged only before the first commit
        if bundle is None or (default is not None and default.bundle == bundle):
            return default, None
        for runtime in [self.staged, *reversed(self.retiring)]:
            if runtime is not None and runtime.bundle == bundle and runtime.installed:
                return runtime, None
        return default, f"bundle {bundle} is not installed in the worker"

    def uninstall_all(self) -> None:
        for runtime in self.runtimes():
            runtime.uninstall()
        self.current, self.staged, self.retiring = None, None, []

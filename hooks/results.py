"""Per-request results waiting for the engine side to take them.

A result is kept while any request of its group is live, then for a TTL
(a caller that never collects must not grow the worker), or until taken.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

DEFAULT_TTL_S = 300.0
MAX_RESULTS = 65536  # a last bound, should a TTL be set very long


class ResultStore:
    def __init__(self, ttl_s: float = DEFAULT_TTL_S):
        self.ttl_s = ttl_s
        self._results: dict[str, tuple[dict[str, Any], int]] = {}  # key -> (result, group digest)
        self._finished: OrderedDict[str, float] = OrderedDict()  # key -> when its group finished, oldest first

    def __len__(self) -> int:
        return len(self._results)

    def put(self, key: str, result: dict[str, Any], digest: int) -> None:
        self._results[key] = (result, digest)
        self._finished.pop(key, None)
        while len(self._results) > MAX_RESULTS:
            self._drop(next(iter(self._finished), None) or next(iter(self._results)))

    def get(self, key: str, digest: int) -> dict[str, Any] | None:
        """The result of the same request (same arguments and prompt) only."""
        entry = self._results.get(key)
        return entry[0] if entry is not None and entry[1] == digest else None

    def finished(self, key: str) -> None:
        """No request of the group is live any more: start the TTL."""
        if key in self._results:
            self._finished[key] = time.monotonic()
            self._finished.move_to_end(key)

    def take(self, keys) -> dict[str, dict[str, Any]]:
        out = {}
        for key in keys:
            entry = self._results.get(key)
            if entry is not None:
                out[key] = entry[0]
                self._drop(key)
        return out

    def expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_s  # the TTL in force now, also for older entries
        while self._finished and next(iter(self._finished.values())) <= cutoff:
            self._drop(next(iter(self._finished)))

    def _drop(self, key: str) -> None:
        self._results.pop(key, None)
        self._finished.pop(key, None)

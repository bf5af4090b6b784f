"""Fetches the worker's verdicts. Every guarded request needs its own right
after its first step; one ``collective_rpc`` per event-loop turn carries
all the keys waiting then, so a burst of requests costs one round trip."""
from __future__ import annotations

import asyncio
from typing import Any

from innerguard.engine.contract import RPC_TAKE_RESULTS

RETRIES = 3  # a verdict is recorded before the first token is sampled; a late RPC is a race, not absence


class DecisionFetcher:
    def __init__(self, engine):
        self._engine = engine
        self._waiting: dict[str, asyncio.Future] = {}
        self._scheduled = False

    async def take(self, key: str) -> dict[str, Any] | None:
        for attempt in range(RETRIES):
            future = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(key, future)
            future = self._waiting[key]
            if not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))
            result = await future
            if result is not None:
                return result
            await asyncio.sleep(0.01 * (attempt + 1))
        return None

    async def _flush(self) -> None:
        batch, self._waiting, self._scheduled = self._waiting, {}, False
        try:
            found = (await self._engine.collective_rpc(RPC_TAKE_RESULTS, args=(list(batch),)))[0]
        except Exception as exc:  # the engine failed: every waiter learns it has no verdict
            found = {}
            error = exc
        else:
            error = None
        for key, future in batch.items():
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(found.get(key))

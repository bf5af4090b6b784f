"""Per HTTP request, what the boundary established, handed to the engine
call through a context variable (the serving classes in between are vLLM's
and know nothing of it)."""
from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from typing import Any

from innerguard.engine.requests.wire import ClientOptions


@dataclass
class RequestContext:
    route: str  # "chat" or "completions"
    body: dict[str, Any]
    client: ClientOptions
    tenant: str | None
    tags: tuple[str, ...]
    traceparent: str | None
    received_at: float
    calls: int = 0  # engine calls made so far (one per prompt)
    results: list[dict[str, Any]] = field(default_factory=list)  # per prompt, in prompt order once all are decided
    _decided: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)
    _all_decided: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def prompts(self) -> list[Any]:
        """The request's prompts: vLLM makes one engine call for each."""
        if self.route == "chat":
            return [self.body.get("messages")]
        return completion_prompts(self.body)

    def settle(self, index: int, result: dict[str, Any]) -> None:
        """Prompt ``index`` is decided. Once every prompt is, ``results`` is
        in prompt order (prompts are decided in whatever order the engine
        reaches them) and the prompts waiting in ``all_decided`` go on."""
        self._decided[index] = result
        if len(self._decided) >= len(self.prompts):
            self.results[:] = [self._decided[i] for i in sorted(self._decided)]
            self._all_decided.set()

    async def all_decided(self) -> None:
        """Returns once every prompt of the request is decided. vLLM merges
        the prompts' outputs into one response, in whatever order they come:
        a prompt that sent its tokens first would leave the response's
        ``innerguard`` object (on a stream's first event) without the
        verdicts of the others."""
        await self._all_decided.wait()


def completion_prompts(body: dict[str, Any]) -> list[Any]:
    """A completions body's prompts, as vLLM splits them: a list of texts
    (or of token-id lists) is several prompts; a text or one token-id list
    is one."""
    prompts = body.get("prompt")
    return prompts if isinstance(prompts, list) and prompts and not isinstance(prompts[0], int) else [prompts]


current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("innerguard_request", default=None)

"""Per HTTP request, what the boundary established, handed to the engine
call through a context variable (the serving classes in between are vLLM's
and know nothing of it)."""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from ..requests.wire import ClientOptions


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
    results: list[dict[str, Any]] = field(default_factory=list)  # per prompt, in order


current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("innerguard_request", default=None)

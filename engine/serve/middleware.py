"""The HTTP boundary, as pure ASGI middleware around vLLM's app.

- Only the guarded generation routes and read-only service routes are
  served; every other path is answered 404, so no vLLM endpoint reaches
  the engine unguarded.
- A guarded request's body is parsed once here: invalid UTF-8/JSON and a
  malformed ``innerguard`` field or ``vllm_xargs`` get a 400 that says what
  is wrong. The tenant and tags come from what the operator trusts (the API
  key's name, a header the operator names), never from the body.
- The response gets a top-level ``innerguard`` object: in the JSON body, or
  on the first chunk of a stream.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..requests import RequestError
from ..requests.wire import client_options
from . import context

GUARDED_ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
SERVICE_ROUTES = {"/v1/models", "/health", "/ping", "/version", "/metrics", "/load", "/tokenize", "/detokenize",
                  "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"}
MAX_BODY = 16 << 20


class GuardMiddleware:
    def __init__(self, app, guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"].rstrip("/") or "/"
        route = GUARDED_ROUTES.get(path)
        if route is None:
            if path in SERVICE_ROUTES or path.startswith("/innerguard/") or path.startswith("/metrics"):
                return await self.app(scope, receive, send)
            return await _error(send, 404, f"{path} is not served by innerguard serve",
                                "guarded generation: /v1/chat/completions and /v1/completions")
        if scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        body, too_big = await _read_body(receive)
        if too_big:
            return await _error(send, 413, f"request body over {MAX_BODY >> 20} MiB")
        try:
            parsed = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return await _error(send, 400, f"request body is not valid UTF-8 (byte {exc.start})", "send JSON encoded as UTF-8")
        except json.JSONDecodeError as exc:
            return await _error(send, 400, f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
        if not isinstance(parsed, dict):
            return await _error(send, 400, "request body must be a JSON object")
        if parsed.get("use_beam_search"):
            return await _error(send, 400, "beam search is not supported on guarded requests",
                                "each beam would be a separate engine request; use sampling")
        try:
            options = client_options(parsed)
        except RequestError as exc:
            return await _error(send, 400, str(exc))
        parsed.pop("innerguard", None)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        ctx = context.RequestContext(
            route=route,
            body=parsed,
            client=options,
            tenant=self.guard.tenant_of(headers),
            tags=self.guard.tags_of(headers),
            traceparent=headers.get("traceparent"),
            received_at=time.time(),
        )
        forwarded = json.dumps(parsed).encode()
        token = context.current.set(ctx)
        try:
            await self.app(scope, _replay(forwarded, receive), _decorating(send, ctx, self.guard.describe))
        finally:
            context.current.reset(token)


async def _read_body(receive) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks), False


def _replay(body: bytes, receive):
    """The body once, then the real channel (a stream watches it for the
    client's disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _decorating(send, ctx, describe: Callable[[Any], dict]):
    """Adds the ``innerguard`` object to a 200 response: into the JSON body,
    or into the first event of a server-sent-events stream."""
    state: dict[str, Any] = {"start": None, "mode": None, "chunks": [], "done": False}

    async def wrapped(message):
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            kind = headers.get(b"content-type", b"").split(b";")[0]
            if message.get("status") == 200 and kind == b"application/json":
                state["mode"], state["start"] = "json", message
                return
            state["mode"] = "sse" if message.get("status") == 200 and kind == b"text/event-stream" else "plain"
            return await send(message)
        if message["type"] != "http.response.body" or state["mode"] == "plain":
            return await send(message)
        if state["mode"] == "json":
            state["chunks"].append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(state["chunks"])
            try:
                data = json.loads(body)
                data["innerguard"] = describe(ctx)
                body = json.dumps(data).encode()
            except (ValueError, TypeError):
                pass
            start = state["start"]
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            return await send({"type": "http.response.body", "body": body, "more_body": False})
        if not state["done"] and message.get("body"):
            body = message["body"]
            at = body.find(b"data: {")
            if at >= 0:
                end = body.find(b"\n\n", at)
                end = len(body) if end < 0 else end
                try:
                    event = json.loads(body[at + 6:end])
                    event["innerguard"] = describe(ctx)
                    body = body[:at + 6] + json.dumps(event).encode() + body[end:]
                    state["done"] = True
                except ValueError:
                    pass
                message = {**message, "body": body}
        return await send(message)

    return wrapped


async def _error(send, status: int, message: str, hint: str | None = None) -> None:
    text = f"{message} ({hint})" if hint else message
    kind = {400: "BadRequestError", 404: "NotFoundError", 413: "RequestTooLargeError"}.get(status, "Error")
    body = json.dumps({"error": {"message": text, "type": kind, "param": None, "code": status}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})

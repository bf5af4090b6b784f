"""The HTTP boundary, as pure ASGI middleware around vLLM's app.

- Only the guarded generation routes and read-only service routes are
  served; every other path is answered 404, so no vLLM endpoint reaches
  the engine unguarded.
- One identity per request: a second ``Authorization`` header is refused,
  and the API key is checked here, against the keys vLLM's own check uses,
  before any body is read. A trusted header (the tenant's, the tags', the
  ``traceparent``) sent twice is refused: a client must not be able to add
  a second one to the one its gateway set.
- A guarded request's body is parsed once here: invalid UTF-8/JSON, nesting
  deeper than ``MAX_DEPTH``, a lone surrogate, and a malformed ``innerguard``
  field or ``vllm_xargs`` get a 400 that says what is wrong. The tenant and
  tags come from what the operator trusts (the API key's name, a header the
  operator names), never from the body. Characters a reader cannot see are
  stripped from the messages and prompt, or refused, before vLLM renders
  them (``--invisible-characters``, requests/invisible.py).
- The response gets a top-level ``innerguard`` object: in the JSON body, or
  on the first chunk of a stream.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from innerguard.engine.requests import RequestError, invisible
from innerguard.engine.requests.wire import client_options
from innerguard.engine.serve import context
from innerguard.engine.serve.body_checks import TOO_DEEP, TOO_DEEP_HINT, json_problem

GUARDED_ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
SERVICE_ROUTES = {"/v1/models", "/health", "/ping", "/version", "/metrics", "/load", "/tokenize", "/detokenize",
                  "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"}
# Paths vLLM's AuthenticationMiddleware checks the API key on (its GUARDED_PREFIX).
KEYED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
# Probes stay open under --require-api-key-everywhere; /innerguard/ has the admin token.
OPEN_ROUTES = {"/health", "/ping"}
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
        if route is None and not (path in SERVICE_ROUTES or path.startswith("/innerguard/") or path.startswith("/metrics")):
            return await _error(send, 404, f"{path} is not served by innerguard serve",
                                "guarded generation: /v1/chat/completions and /v1/completions")
        headers = _header_values(scope)
        method = scope.get("method")
        if (count := len(headers.get("authorization", ()))) > 1:
            return await _error(send, 401, f"the request has {count} Authorization headers",
                                "send exactly one: 'Authorization: Bearer <API key>'")
        single = {name: values[0] for name, values in headers.items()}
        if self._needs_key(path, method) and not self.guard.authenticated(single):
            return await _error(send, 401, "missing or unknown API key", "send 'Authorization: Bearer <API key>'")
        if route is None or method != "POST":
            return await self.app(scope, receive, send)
        for name in self.guard.options.trusted_headers():
            if (count := len(headers.get(name, ()))) > 1:
                return await _error(send, 400, f"the request has {count} {name} headers",
                                    "send it once; a gateway should set it and drop any the client sent")
        if _declared_size(single) > MAX_BODY:
            return await _error(send, 413, f"request body over {MAX_BODY >> 20} MiB")
        body, too_big = await _read_body(receive)
        if too_big:
            return await _error(send, 413, f"request body over {MAX_BODY >> 20} MiB")
        try:
            parsed = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return await _error(send, 400, f"request body is not valid UTF-8 (byte {exc.start})", "send JSON encoded as UTF-8")
        except json.JSONDecodeError as exc:
            return await _error(send, 400, f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
        except RecursionError:  # Python's decoder stops near 1,000 levels; ours at MAX_DEPTH below
            return await _error(send, 400, TOO_DEEP, TOO_DEEP_HINT)
        except ValueError:  # the only other: an integer over sys.get_int_max_str_digits() digits
            return await _error(send, 400, "request body has a number too long to read",
                                "send integers of at most 4,300 digits")
        if (problem := json_problem(parsed)) is not None:
            return await _error(send, 400, *problem)
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
        try:
            # Before vLLM renders the body: the model reads what the guard scores.
            _visible_text(parsed, route, self.guard.options.invisible_characters)
        except RequestError as exc:
            return await _error(send, 400, str(exc))
        ctx = context.RequestContext(
            route=route,
            body=parsed,
            client=options,
            tenant=self.guard.tenant_of(single),
            tags=self.guard.tags_of(single),
            traceparent=single.get("traceparent"),
            received_at=time.time(),
        )
        forwarded = json.dumps(parsed).encode()
        token = context.current.set(ctx)
        try:
            await self.app(scope, _replay(forwarded, receive), _decorating(send, ctx, self.guard.describe))
        finally:
            context.current.reset(token)

    def _needs_key(self, path: str, method: str | None) -> bool:
        """Where vLLM checks the key (not on a CORS preflight), and, under
        ``require_api_key_everywhere``, every service route but the probes."""
        if method == "OPTIONS":
            return False
        if path.startswith(KEYED_PREFIXES):
            return True
        return (self.guard.options.require_api_key_everywhere and path not in OPEN_ROUTES
                and not path.startswith("/innerguard/"))


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


def _visible_text(body: dict, route: str, mode: str) -> None:
    """The body's messages or prompt with the invisible characters handled as the operator chose."""
    if route == "chat" and isinstance(body.get("messages"), list):
        body["messages"] = invisible.apply_to_messages(body["messages"], mode)
    elif route == "completions" and "prompt" in body:
        body["prompt"] = invisible.apply_to_prompt(body["prompt"], mode)


def _header_values(scope) -> dict[str, list[str]]:
    """Every value of every header, by lower-case name: a dict of single
    values would keep the last of two, where vLLM and Starlette read the first."""
    values: dict[str, list[str]] = {}
    for name, value in scope.get("headers", ()):
        values.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return values


def _declared_size(headers: dict[str, str]) -> int:
    try:
        return int(headers.get("content-length") or 0)
    except ValueError:
        return 0  # the server's HTTP parser refuses it; _read_body counts anyway


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
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
            413: "RequestTooLargeError"}.get(status, "Error")
    body = json.dumps({"error": {"message": text, "type": kind, "param": None, "code": status}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))  # RFC 9110: a 401 names its scheme
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

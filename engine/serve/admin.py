"""``GET /innerguard/status`` and ``POST /innerguard/reload``, behind the
operator's admin token (``Authorization: Bearer T``; the middleware has
refused a request with two Authorization headers already)."""
from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse


def router(guard, reloader) -> APIRouter:
    routes = APIRouter()

    def refused(request: Request) -> JSONResponse | None:
        token = guard.options.admin_token
        if not token:
            return _error(403, "admin endpoints are off (start innerguard serve with --admin-token-file FILE "
                               "or INNERGUARD_ADMIN_TOKEN set)")
        scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            return _error(401, "admin endpoints need 'Authorization: Bearer <admin token>'")
        return None

    @routes.get("/innerguard/status")
    async def status(request: Request):
        return refused(request) or JSONResponse(guard.status())

    @routes.post("/innerguard/reload")
    async def reload(request: Request):
        if (denied := refused(request)) is not None:
            return denied
        outcome = await reloader.reload("POST /innerguard/reload")
        return JSONResponse(outcome, status_code=200 if outcome["result"] == "ok" else 422)

    return routes


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)

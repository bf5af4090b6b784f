"""The server's guard state: the plan serving now, how to reach the
worker's verdicts, and what to do once a request is decided (metrics,
audit, the response's ``innerguard`` object)."""
from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from innerguard.engine.logging import get_logger
from innerguard.engine.plan import Plan
from innerguard.engine.serve import metrics
from innerguard.engine.serve.decisions import DecisionFetcher

VERDICT_ORDER = ("block", "steer", "drop_documents", "rerank", "flag", "allow")


@dataclass(frozen=True)
class ServeOptions:
    expose_signals: bool = False
    admin_token: str | None = None
    tenant_keys: Mapping[str, str] = field(default_factory=dict)  # API key -> tenant name
    # Every key that authenticates, exactly the set vLLM's own check is given
    # (--api-key, else VLLM_API_KEY, plus the tenant keys); empty: no key needed.
    api_keys: tuple[str, ...] = ()
    require_api_key_everywhere: bool = False  # service routes too (not /health, /ping)
    tenant_header: str | None = None
    tags_header: str | None = None
    isolate_tenants: bool = False  # one prefix cache per tenant
    invisible_characters: str = "strip"  # strip, refuse or keep (requests/invisible.py)

    def trusted_headers(self) -> tuple[str, ...]:
        """The request headers the guard believes (lower case): each must
        come once, or a client could add a second to one its gateway set."""
        named = (self.tenant_header, self.tags_header, "traceparent")
        return tuple(dict.fromkeys(h.lower() for h in named if h))


class ServerGuard:
    def __init__(self, engine, plan: Plan, tokenizer, options: ServeOptions, audit=None, model_name: str = ""):
        self.engine = engine
        self.plan = plan
        self.tokenizer = tokenizer
        self.options = options
        self.audit = audit
        self.model_name = model_name
        self.share_prefix_cache = False  # set from the install info (use_install_info)
        self.share_token_scores = False
        self.fetcher = DecisionFetcher(engine)
        self._tenant_secret = secrets.token_hex(16)  # tenant salts cannot be guessed from outside
        # Keys are compared as SHA-256 digests, as vLLM does: constant time, whatever their lengths.
        self._key_digests = [_digest(k) for k in options.api_keys]
        self._tenant_of_digest = {_digest(k): name for k, name in options.tenant_keys.items()}
        self.started = time.time()
        self.last_reload: dict[str, Any] = {"result": "ok", "at": _iso(self.started), "reason": "start",
                                            "bundle_hash": plan.bundle_hash, "error": None}
        self.log = get_logger("innerguard.serve")
        metrics.record_bundle(None, plan.bundle_hash)

    # -- trusted request metadata --------------------------------------------
    # ``headers``: lower-case names, one value each. The middleware refuses a
    # second Authorization or trusted header first, so the key read here is
    # the one vLLM authenticated (it reads the first, a dict keeps the last).
    def authenticated(self, headers: Mapping[str, str]) -> bool:
        """vLLM's own check (``AuthenticationMiddleware.verify_token``) on
        the same keys, made before the body is read."""
        if not self._key_digests:
            return True
        given = _bearer(headers)
        if given is None:
            return False
        digest, match = _digest(given), False
        for known in self._key_digests:
            match |= secrets.compare_digest(digest, known)  # no early exit: no timing of which key
        return match

    def tenant_of(self, headers: Mapping[str, str]) -> str | None:
        """The name of the tenant key that authenticated the request, else
        the operator's tenant header."""
        given = _bearer(headers)
        if given is not None and (name := self._tenant_of_digest.get(_digest(given))) is not None:
            return name
        if self.options.tenant_header:
            return headers.get(self.options.tenant_header.lower())
        return None

    def use_install_info(self, info: Mapping[str, Any]) -> None:
        """What the workers read back for prefix-cached positions, as the last install (or reload) found."""
        self.share_prefix_cache = bool(info.get("reads_kv_cache"))
        self.share_token_scores = bool(info.get("reads_token_scores"))

    def cache_salt(self, tenant: str | None, client_salt: str | None, request_salt: str | None,
                   shared: bool = False) -> str | None:
        """The salt a request is sent with. The guard's own one-request salt
        wins; under ``isolate_tenants`` every other request is salted by its
        tenant (no tenant is a tenant of its own), so no tenant is served
        from, or can time, another's prefix cache; a client's own
        ``cache_salt`` narrows that further. A ``shared`` guard salt (token
        probes) is narrowed the same way."""
        if request_salt is not None and not shared:
            return request_salt
        if client_salt is not None and client_salt.startswith("innerguard-"):
            client_salt = f"client:{client_salt}"  # never the guard's own salts (unscored blocks under a probe's)
        salt = client_salt
        if self.options.isolate_tenants:
            digest = hashlib.sha256(f"{self._tenant_secret}\0{tenant or ''}\0{client_salt or ''}".encode())
            salt = f"innerguard-tenant-{digest.hexdigest()[:32]}"
        if request_salt is None or salt is None:
            return request_salt or salt
        return f"{request_salt}-{hashlib.sha256(salt.encode()).hexdigest()[:32]}"

    def tags_of(self, headers: Mapping[str, str]) -> tuple[str, ...]:
        if not self.options.tags_header:
            return ()
        raw = headers.get(self.options.tags_header.lower()) or ""
        return tuple(t.strip() for t in raw.split(",") if t.strip())

    # -- decisions -----------------------------------------------------------
    async def decided(self, ctx, prepared, result: dict[str, Any], plan: Plan) -> None:
        """Runs once per guarded prompt, before anything of it is returned."""
        result.setdefault("decision_id", uuid.uuid4().hex)
        result["bundle_hash"] = plan.bundle_hash
        ctx.results.append(result)
        metrics.record_decision(result)
        if self.audit is not None:
            await self.audit.record(ctx, prepared, result, plan)

    def completed(self, result: dict[str, Any], output_tokens: int, finish_reason: str | None,
                  output_decisions: list[dict[str, Any]] | None = None) -> None:
        if self.audit is not None:
            self.audit.completed(result, output_tokens, finish_reason, output_decisions)

    def describe(self, ctx) -> dict[str, Any]:
        """The response's ``innerguard`` object."""
        described = [self._describe_one(r) for r in ctx.results]
        if len(described) == 1:
            return described[0]
        verdicts = [d["verdict"] for d in described] or ["allow"]
        return {"verdict": min(verdicts, key=VERDICT_ORDER.index), "prompts": described}

    def _describe_one(self, result: Mapping[str, Any]) -> dict[str, Any]:
        if not result:
            return {"verdict": "allow", "policies": []}
        out = {
            "decision_id": result.get("decision_id"),
            "verdict": result.get("action", "allow"),
            "bundle_hash": result.get("bundle_hash"),
            "policies": [
                {k: d.get(k) for k in ("policy", "version", "revision", "mode", "action", "rule")}
                | ({"signals": d.get("signals", {})} if self.options.expose_signals else {})
                for d in result.get("decisions", ())
            ],
        }
        return out

    # -- status --------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "bundle_hash": self.plan.bundle_hash,
            "policies": [
                {"name": p.name, "version": p.version, "revision": p.revision, "mode": p.mode}
                for p in self.plan.policies
            ],
            "last_reload": self.last_reload,
            "uptime_seconds": round(time.time() - self.started, 3),
            "model": self.model_name,
            **({"audit": self.audit.status()} if self.audit is not None else {}),
        }


def _bearer(headers: Mapping[str, str]) -> str | None:
    """The key of ``Authorization: Bearer <key>``, split as vLLM splits it."""
    scheme, _, key = (headers.get("authorization") or "").partition(" ")
    return key if scheme.lower() == "bearer" else None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"

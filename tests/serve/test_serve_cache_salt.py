"""The salt a served request is sent with (ServerGuard.cache_salt): a guard
salt of one request wins; the shared salt of token-probe requests is
narrowed by the tenant and the client's own salt, never widened."""
from __future__ import annotations

from types import SimpleNamespace

from innerguard.engine.serve.guard import ServeOptions, ServerGuard


def _guard(isolate: bool) -> ServerGuard:
    return ServerGuard(None, SimpleNamespace(bundle_hash="b" * 16), None, ServeOptions(isolate_tenants=isolate))


def test_a_one_request_salt_wins_and_no_guard_salt_leaves_the_callers():
    guard = _guard(isolate=False)
    assert guard.cache_salt("acme", "mine", "innerguard-unique") == "innerguard-unique"
    assert guard.cache_salt("acme", "mine", None) == "mine" and guard.cache_salt("acme", None, None) is None


def test_a_shared_token_probe_salt_is_narrowed_by_tenant_and_client():
    guard = _guard(isolate=True)
    shared = "innerguard-tokens-x"
    acme, acme_again, globex = (guard.cache_salt(t, None, shared, shared=True) for t in ("acme", "acme", "globex"))
    assert acme == acme_again and acme != globex and acme.startswith(shared + "-")
    assert guard.cache_salt("acme", "mine", shared, shared=True) not in (acme, shared)
    assert _guard(isolate=False).cache_salt("acme", None, shared, shared=True) == shared
    assert _guard(isolate=False).cache_salt("acme", "mine", shared, shared=True).startswith(shared + "-")


def test_a_client_cannot_send_its_request_under_a_guard_salt():
    # Unscored blocks under a token probe's shared salt would make its requests fail closed.
    guard = _guard(isolate=False)
    assert guard.cache_salt(None, "innerguard-tokens-x", None) != "innerguard-tokens-x"
    assert guard.cache_salt(None, "innerguard-tokens-x", None) == guard.cache_salt(None, "innerguard-tokens-x", None)

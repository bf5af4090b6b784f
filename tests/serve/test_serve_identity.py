"""One identity per request, and a body that cannot bend the boundary: one
Authorization header whose key is checked before the body is read, trusted
headers sent once, JSON that is not too deep and is valid Unicode, and an
admin token kept off the command line."""
from __future__ import annotations

import http.client
import json
import shutil
import time

import httpx
import pytest

from innerguard.engine.commands.serve import _admin_token, _api_keys
from innerguard.engine.errors import InnerguardError
from innerguard.engine.serve.body_checks import MAX_DEPTH, json_problem
from serve_process import ServeProcess
from serve_requests import ALLOWED, chat

ACME, GLOBEX, ENV_KEY = "Bearer sk-acme-test", "Bearer sk-globex-test", "Bearer sk-env-test"
EXTRA_ADMIN = "admin-token-from-a-file"


def send(server, headers: list[tuple[str, str]], body: bytes | dict | None = None, method: str = "POST",
         path: str = "/v1/chat/completions") -> tuple[int, dict]:
    """Raw HTTP, so that a header can be sent twice (httpx and requests merge them)."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.putrequest(method, path)
        for name, value in [("Content-Type", "application/json"), *headers]:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        data = response.read()
        if response.getheader("content-type", "").startswith("application/json"):
            return response.status, json.loads(data)
        return response.status, {"text": data.decode(errors="replace")}
    finally:
        conn.close()


def error_line(data: dict) -> str:
    message = data["error"]["message"]
    assert "\n" not in message
    return message


def policies_of(data: dict) -> dict[str, str]:
    return {p["policy"]: p["action"] for p in data["innerguard"]["policies"]}


# -- pure checks of the body walker (no server) ------------------------------

def nested(depth: int) -> dict:
    """An object ``depth`` levels of arrays and objects deep."""
    value: object = "leaf"
    for _ in range(depth - 1):
        value = [value]
    return {"a": value}


def deep_json(depth: int) -> str:
    """``nested(depth)`` as JSON text (json.dumps itself stops near 1,000 levels)."""
    return '{"a": ' + "[" * (depth - 1) + '"leaf"' + "]" * (depth - 1) + "}"


def test_nesting_up_to_the_limit_passes():
    assert json_problem(nested(MAX_DEPTH)) is None


def test_nesting_over_the_limit_is_named():
    message, hint = json_problem(nested(MAX_DEPTH + 1))
    assert f"deeper than {MAX_DEPTH} levels" in message and hint


def test_a_lone_surrogate_is_named_with_its_path():
    body = json.loads('{"messages": [{"role": "system", "content": "ok"}, {"role": "user", "content": "a\\ud800b"}]}')
    message, hint = json_problem(body)
    assert message == "request body contains a lone surrogate (\\ud800) at messages[1].content"
    assert "valid Unicode" in hint


def test_a_lone_surrogate_in_a_key_is_named():
    message, _ = json_problem(json.loads('{"vllm_xargs": {"k\\udc00": 1}}'))
    assert message.endswith("in a key of vllm_xargs")


def test_a_surrogate_pair_is_valid_unicode():
    assert json_problem(json.loads('{"messages": [{"role": "user", "content": "\\ud83d\\ude00 \\u00e9"}]}')) is None


# -- the API keys and the admin token, as the command resolves them ------------

def test_vllm_api_key_authenticates_beside_tenant_keys(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-env")
    assert _api_keys(None, {"sk-acme": "acme"}) == ("sk-env", "sk-acme")


def test_api_key_flags_replace_vllm_api_key_as_in_vllm(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-env")
    assert _api_keys(["sk-a", "sk-b"], {}) == ("sk-a", "sk-b")


def test_the_admin_token_comes_from_its_file(tmp_path):
    (tmp_path / "admin").write_text("s3cret\n")
    assert _admin_token(None, str(tmp_path / "admin"), {"INNERGUARD_ADMIN_TOKEN": "other"}) == "s3cret"


def test_the_admin_token_comes_from_the_environment():
    assert _admin_token(None, None, {"INNERGUARD_ADMIN_TOKEN": "s3cret"}) == "s3cret"


@pytest.mark.parametrize("content, words", [("", "is empty"), (None, "cannot read")])
def test_an_unusable_admin_token_file_is_refused(tmp_path, content, words):
    path = tmp_path / "admin"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InnerguardError, match=words):
        _admin_token(None, str(path), {})


def test_two_admin_tokens_are_refused(tmp_path):
    (tmp_path / "admin").write_text("a")
    with pytest.raises(InnerguardError, match="both given"):
        _admin_token("b", str(tmp_path / "admin"), {})


# -- the session server: --tenant-keys, --isolate-tenants, audit, --admin-token --

@pytest.mark.vllm
@pytest.mark.parametrize("second", [GLOBEX, "Bearer x"], ids=["two valid keys", "valid key then another"])
def test_a_second_authorization_header_is_refused(server, second):
    status, data = send(server, [("Authorization", ACME), ("Authorization", second)], chat(ALLOWED))
    assert status == 401, data
    assert "2 Authorization headers" in error_line(data)


@pytest.mark.vllm
@pytest.mark.parametrize("body", [b"{model: nope", deep_json(1000).encode(), b"x" * (1 << 20)],
                         ids=["not JSON", "nested 1000 deep", "1 MiB of junk"])
def test_the_api_key_is_checked_before_the_body_is_read(server, body):
    status, data = send(server, [("Authorization", "Bearer wrong")], body)
    assert status == 401, data
    assert "API key" in error_line(data)


@pytest.mark.vllm
def test_a_declared_body_over_16_mib_is_refused_before_it_is_sent(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Authorization", ACME)
        conn.putheader("Content-Length", str(17 << 20))
        conn.endheaders()  # no body follows: the answer must not wait for it
        response = conn.getresponse()
        assert response.status == 413
        assert "16 MiB" in error_line(json.loads(response.read()))
    finally:
        conn.close()


@pytest.mark.vllm
def test_a_duplicated_traceparent_is_refused(server):
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    status, data = send(server, [("Authorization", ACME), ("traceparent", parent), ("traceparent", parent)], chat(ALLOWED))
    assert status == 400, data
    assert "2 traceparent headers" in error_line(data)


@pytest.mark.vllm
def test_json_nested_1000_deep_is_a_400_without_a_traceback(server):
    logged = server.log_path.stat().st_size
    body = json.dumps(chat(ALLOWED, vllm_xargs="DEEP")).replace('"DEEP"', deep_json(1000)).encode()
    status, data = send(server, [("Authorization", ACME)], body)
    assert status == 400, data
    assert f"deeper than {MAX_DEPTH} levels" in error_line(data)
    time.sleep(0.5)  # a server error's traceback is logged after its response
    with open(server.log_path, "rb") as log:
        log.seek(logged)
        tail = log.read().decode(errors="replace")
    assert "Traceback" not in tail and "RecursionError" not in tail


@pytest.mark.vllm
def test_a_lone_surrogate_is_a_400_that_names_where(server):
    body = json.dumps(chat("placeholder")).replace("placeholder", "text \\ud800 more").encode()
    status, data = send(server, [("Authorization", ACME)], body)
    assert status == 400, data
    assert "lone surrogate (\\ud800) at messages[1].content" in error_line(data)


@pytest.mark.vllm
def test_service_routes_stay_open_by_default(server):
    assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 200


@pytest.mark.vllm
def test_the_admin_token_flag_warns_once_that_it_is_visible(server):
    assert server.log_path.read_text(errors="replace").count("--admin-token is visible") == 1


# -- one more server: the gateway's headers, VLLM_API_KEY, keys everywhere, the
#    admin token from a file -----------------------------------------------------

@pytest.fixture(scope="module")
def gateway_server(served_policies, tmp_path_factory):
    folder = tmp_path_factory.mktemp("identity")
    policies = folder / "policies"
    shutil.copytree(served_policies, policies)
    (folder / "keys.yaml").write_text("acme: sk-acme-test\nglobex: sk-globex-test\n")
    (folder / "admin").write_text(EXTRA_ADMIN + "\n")
    process = ServeProcess(policies, folder / "serve.log", "--tenant-keys", str(folder / "keys.yaml"),
                           "--tags-header", "X-Tags", "--tenant-header", "X-Tenant", "--require-api-key-everywhere",
                           "--admin-token-file", str(folder / "admin"),
                           admin_flag=False, env={"VLLM_API_KEY": "sk-env-test"})
    try:
        yield process.wait_ready()
    finally:
        process.stop()


@pytest.mark.vllm
def test_vllm_api_key_still_authenticates_beside_tenant_keys(gateway_server):
    status, data = send(gateway_server, [("Authorization", ENV_KEY)], chat(ALLOWED))
    assert status == 200, data


@pytest.mark.vllm
def test_the_tags_header_sent_once_selects_policies(gateway_server):
    status, data = send(gateway_server, [("Authorization", ACME), ("X-Tags", "strict")], chat(ALLOWED + " BLOCKME"))
    assert status == 200 and policies_of(data)["blocker"] == "block"


@pytest.mark.vllm
def test_a_duplicated_tags_header_is_refused(gateway_server):
    status, data = send(gateway_server, [("Authorization", ACME), ("X-Tags", "strict"), ("X-Tags", "none")],
                        chat(ALLOWED + " BLOCKME"))
    assert status == 400, data
    assert "2 x-tags headers" in error_line(data)


@pytest.mark.vllm
def test_the_tenant_header_names_the_tenant_of_a_plain_key(gateway_server):
    status, data = send(gateway_server, [("Authorization", ENV_KEY), ("X-Tenant", "globex")],
                        chat("Quarterly notes: the merger closes in May."))
    assert status == 200 and policies_of(data)["globex-only"] == "block"


@pytest.mark.vllm
def test_a_duplicated_tenant_header_is_refused(gateway_server):
    status, data = send(gateway_server, [("Authorization", ENV_KEY), ("X-Tenant", "globex"), ("X-Tenant", "acme")],
                        chat("Quarterly notes: the merger closes in May."))
    assert status == 400, data
    assert "2 x-tenant headers" in error_line(data)


SERVICE = [("GET", "/metrics"), ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/openapi.json"), ("GET", "/version"),
           ("GET", "/load"), ("GET", "/v1/models"), ("POST", "/tokenize"), ("POST", "/detokenize")]


@pytest.mark.vllm
@pytest.mark.parametrize("method, path", SERVICE, ids=[p for _, p in SERVICE])
def test_service_routes_need_the_key_when_required_everywhere(gateway_server, method, path):
    status, data = send(gateway_server, [], b"{}" if method == "POST" else None, method=method, path=path)
    assert status == 401, data
    status, _ = send(gateway_server, [("Authorization", ACME)], b"{}" if method == "POST" else None, method=method, path=path)
    assert status != 401


@pytest.mark.vllm
@pytest.mark.parametrize("path", ["/health", "/ping"])
def test_probes_stay_open_when_the_key_is_required_everywhere(gateway_server, path):
    assert httpx.get(f"{gateway_server.url}{path}", timeout=10).status_code == 200


@pytest.mark.vllm
def test_the_admin_token_from_a_file_opens_the_admin_endpoints(gateway_server):
    url = f"{gateway_server.url}/innerguard/status"
    assert httpx.get(url, headers={"Authorization": f"Bearer {EXTRA_ADMIN}"}, timeout=10).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401

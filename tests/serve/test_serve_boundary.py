"""What reaches the engine, and who decides which policies apply. Every bad
request gets a 4xx that says what is wrong (or is guarded anyway), and the
server keeps serving."""
from __future__ import annotations

import httpx
import pytest

from serve_requests import ALLOWED, BLOCKED, KEY, MODEL, chat

pytestmark = pytest.mark.vllm

GLOBEX = {"Authorization": "Bearer sk-globex-test"}


def post(server, body, path="/v1/chat/completions", headers=KEY, **kw):
    return httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=120, **kw)


def policies_of(response) -> dict[str, str]:
    return {p["policy"]: p["action"] for p in response.json()["innerguard"]["policies"]}


def still_serving(server):
    assert server.alive()
    r = post(server, chat(ALLOWED))
    assert r.status_code == 200 and r.json()["innerguard"]["verdict"] == "allow"


BAD_REQUESTS = [
    # (name, body or raw bytes, extra httpx kwargs, expected status, words in the message)
    ("malformed innerguard field", chat(ALLOWED, innerguard={"policies": 5}), {}, 400, "innerguard.policies"),
    ("innerguard field not an object", chat(ALLOWED, innerguard=[1, 2]), {}, 400, "innerguard"),
    ("unknown innerguard key", chat(ALLOWED, innerguard={"tenant": "acme"}), {}, 400, "'tenant' was unexpected"),
    ("unknown policy", chat(ALLOWED, innerguard={"policies": ["nope"]}), {}, 400, "unknown policy 'nope'"),
    ("reserved vllm_xargs key", chat(ALLOWED, vllm_xargs={"innerguard": "{\"policies\": []}"}), {}, 400, "reserved"),
    ("nested vllm_xargs", chat(ALLOWED, vllm_xargs={"a": {"b": 1}}), {}, 400, "vllm_xargs.a"),
    ("prompt over max_model_len", chat("word " * 3000), {}, 400, "context length"),
    ("invalid UTF-8", b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}', {}, 400, "UTF-8"),
    ("not JSON", b"{model: nope", {}, 400, "not valid JSON"),
    ("body not an object", b"[1, 2]", {}, 400, "JSON object"),
    ("messages of the wrong type", {"model": MODEL, "messages": "hello"}, {}, 400, "messages"),
    ("max_tokens of the wrong type", chat(ALLOWED, max_tokens="many"), {}, 400, "max_tokens"),
    ("non-text message content", {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]},
     {}, 400, "multimodal"),
    ("a role the template does not know", chat(ALLOWED) | {"messages": [{"role": "email", "content": "hi"}]},
     {}, 400, "not an accepted chat role"),
    ("beam search", chat(ALLOWED, use_beam_search=True, n=2), {}, 400, "beam search"),
    ("an unguarded generation route", {"model": MODEL, "input": "hi"}, {"path": "/v1/responses"}, 404, "not served"),
]


@pytest.mark.parametrize("name, body, extra, status, words", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_a_clear_4xx(server, name, body, extra, status, words):
    path = extra.get("path", "/v1/chat/completions")
    if isinstance(body, bytes):
        r = httpx.post(f"{server.url}{path}", content=body, headers={**KEY, "Content-Type": "application/json"}, timeout=60)
    else:
        r = post(server, body, path=path)
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert words.lower() in message.lower(), message
    still_serving(server)


def test_a_client_cannot_drop_an_operator_policy(server):
    # The operator's selection applies prompt-injection to every request.
    for field in ({"policies": []}, {}):
        r = post(server, chat(BLOCKED, innerguard=field))
        assert r.status_code == 200 and policies_of(r)["prompt-injection"] == "block"
        assert r.json()["choices"][0]["finish_reason"] == "content_filter"


def test_a_client_can_add_a_policy(server):
    plain = post(server, chat(ALLOWED + " BLOCKME"))
    added = post(server, chat(ALLOWED + " BLOCKME", innerguard={"policies": ["blocker"]}))
    assert "blocker" not in policies_of(plain) and plain.json()["innerguard"]["verdict"] == "allow"
    assert policies_of(added)["blocker"] == "block" and "prompt-injection" in policies_of(added)


def test_the_tenant_is_the_api_key_name(server):
    body = chat("Quarterly notes: the merger closes in May.")
    acme, globex = post(server, body), post(server, body, headers=GLOBEX)
    assert "globex-only" not in policies_of(acme)
    assert policies_of(globex)["globex-only"] == "block"
    assert post(server, body, headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_each_tenant_has_its_own_prefix_cache(server):
    # --isolate-tenants: acme reuses acme's cached prompt; globex, sending the
    # very same one, is not served from (and cannot time) acme's cache. The
    # shipped policies (their steer is in shadow mode) salt nothing themselves.
    document = " ".join(f"Item {i}: the quarterly inventory lists {i * 7} boxes of paper." for i in range(12))
    body = chat(document, max_tokens=2)
    first, again, other = post(server, body), post(server, body), post(server, body, headers=GLOBEX)

    def cached(response) -> int:
        assert response.status_code == 200, response.text
        return (response.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    assert cached(first) == 0 and cached(again) >= 64
    assert cached(other) == 0
    assert first.json()["innerguard"]["verdict"] == again.json()["innerguard"]["verdict"]  # decided alike, cache or not


SAMPLING = {
    "ignore_eos": {"ignore_eos": True, "max_tokens": 16},
    "min_tokens": {"min_tokens": 6, "max_tokens": 16},
    "n > 1": {"n": 3, "temperature": 0.9},
    "logit_bias against EOS": {"logit_bias": {"2": -100}},
    "stop": {"stop": ["."], "max_tokens": 16},
    "structured output": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}},
    "logprobs": {"logprobs": True, "top_logprobs": 3},
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", list(SAMPLING))
def test_a_block_is_final_whatever_the_sampling_parameters(server, name, stream):
    body = chat(BLOCKED, stream=stream, **SAMPLING[name])
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = post(server, body)
    assert r.status_code == 200, r.text
    if not stream:
        data = r.json()
        assert data["innerguard"]["verdict"] == "block"
        assert data["usage"]["completion_tokens"] == 0
        choices = data["choices"]
        assert len(choices) == SAMPLING[name].get("n", 1)
        for choice in choices:
            assert choice["finish_reason"] == "content_filter"
            assert choice["message"]["content"].startswith("This request was refused")
            assert not (choice.get("logprobs") or {}).get("content")
        return
    import json

    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert events[0]["innerguard"]["verdict"] == "block"
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 0
    for index in range(SAMPLING[name].get("n", 1)):
        mine = [c for e in events for c in e.get("choices", []) if c["index"] == index]
        text = "".join((c.get("delta") or {}).get("content") or "" for c in mine)
        assert text.startswith("This request was refused") and [c["finish_reason"] for c in mine if c["finish_reason"]] == ["content_filter"]
        assert not any((c.get("logprobs") or {}).get("content") for c in mine)


def test_allowed_requests_keep_their_sampling_parameters(server):
    r = post(server, chat(ALLOWED, ignore_eos=True, max_tokens=12))
    assert r.json()["usage"]["completion_tokens"] == 12
    r = post(server, chat(ALLOWED, n=2, temperature=0.9, logprobs=True, top_logprobs=2))
    assert len(r.json()["choices"]) == 2 and r.json()["choices"][0]["logprobs"]["content"]

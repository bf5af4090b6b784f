"""What a refused request gets back from a real ``innerguard serve``: the
reason it was refused, every prompt's verdict before any of its tokens, and
nothing the model computed on the refused prompt."""
from __future__ import annotations

import json
import uuid

import httpx
import pytest

from serve_requests import ALLOWED, BLOCKED, KEY, MODEL, chat, completion

pytestmark = pytest.mark.vllm

BLOCKER = {"policies": ["blocker"]}  # blocks BLOCKME in untrusted text (tests/serve/conftest.py)


def post(server, path: str, body: dict) -> httpx.Response:
    r = httpx.post(f"{server.url}{path}", json=body, headers=KEY, timeout=120)
    assert r.status_code == 200, r.text
    return r


def events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def _long_document() -> str:
    # About 2,010 tokens; the nonce keeps it out of the prefix cache.
    items = " ".join(f"Item {i}: the quarterly inventory lists {i * 7} boxes of paper." for i in range(116))
    return f"Batch {uuid.uuid4().hex}. {items}"


def test_a_streamed_completion_sends_every_prompts_verdict_before_any_token(server):
    # A step computes at most 2,048 prompt tokens: the short prompt is
    # decided steps (seconds of prefill) before the last long one, and would
    # generate meanwhile.
    data = [ALLOWED, _long_document(), _long_document() + " BLOCKME"]
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "prompt": [completion(d)["prompt"] for d in data],
            "stream": True, "innerguard": BLOCKER}
    stream = events(post(server, "/v1/completions", body))
    guard = stream[0]["innerguard"]  # the first event, before any choice's text
    assert guard["verdict"] == "block" and len(guard["prompts"]) == 3
    first, _, last = guard["prompts"]  # in prompt order
    assert first["verdict"] == "allow" and last["verdict"] == "block"
    assert {p["policy"]: p["action"] for p in last["policies"]}["blocker"] == "block"
    assert all("innerguard" not in e for e in stream[1:])
    finish = {c["index"]: c["finish_reason"] for e in stream for c in e.get("choices", []) if c.get("finish_reason")}
    assert finish[2] == "content_filter" and finish[0] != "content_filter"


def _unmarked(body: dict) -> dict:
    return {**body, "prompt": body["prompt"].replace("<untrusted>", "").replace("</untrusted>", "")}


REFUSALS = {
    # name: (path, body, words the refusal must say, words it must not)
    "detection": ("/v1/chat/completions", chat(BLOCKED), "tried to override", "fails closed"),
    "completion without untrusted markers": ("/v1/completions", _unmarked(completion(ALLOWED)),
                                             "between <untrusted> and </untrusted>", "tried to override"),
    "chat without an untrusted message": ("/v1/chat/completions",
                                          {**chat(ALLOWED), "messages": chat(ALLOWED)["messages"][:1]},
                                          "found no untrusted message", "tried to override"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_refusal_says_why(server, name):
    path, body, says, not_says = REFUSALS[name]
    data = post(server, path, body).json()
    (choice,) = data["choices"]
    text = choice["text"] if "text" in choice else choice["message"]["content"]
    assert data["innerguard"]["verdict"] == "block" and choice["finish_reason"] == "content_filter"
    assert says in text and not_says not in text, text


LOGPROBS = {
    # name: (path, body for the data); each asks for the prompt's logprobs in its own way
    "chat prompt_logprobs": ("/v1/chat/completions", lambda blocked: chat(
        BLOCKED if blocked else ALLOWED, prompt_logprobs=2, logprobs=True, top_logprobs=2)),
    "completion prompt_logprobs": ("/v1/completions", lambda blocked: completion(
        ALLOWED + " BLOCKME" * blocked, prompt_logprobs=2, innerguard=BLOCKER)),
    "completion echo": ("/v1/completions", lambda blocked: completion(
        ALLOWED + " BLOCKME" * blocked, echo=True, logprobs=2, innerguard=BLOCKER)),
    "completion echo stream": ("/v1/completions", lambda blocked: completion(
        ALLOWED + " BLOCKME" * blocked, echo=True, logprobs=2, stream=True, innerguard=BLOCKER)),
}


def _logprob_values(node, under_logprobs: bool = False) -> list[float]:
    """Every number found under a key that names logprobs (offsets into the
    returned text aside: they are not the model's)."""
    if isinstance(node, dict):
        return [v for k, child in node.items() if k != "text_offset"
                for v in _logprob_values(child, under_logprobs or "logprob" in str(k))]
    if isinstance(node, list):
        return [v for child in node for v in _logprob_values(child, under_logprobs)]
    return [node] if under_logprobs and isinstance(node, (int, float)) and not isinstance(node, bool) else []


def _response(server, name: str, blocked: bool):
    path, body = LOGPROBS[name]
    body = body(blocked)
    r = post(server, path, body)
    if body.get("stream"):
        stream = events(r)
        return stream[0]["innerguard"], stream
    return r.json()["innerguard"], r.json()


@pytest.mark.parametrize("name", list(LOGPROBS))
def test_a_blocked_request_returns_no_logprobs(server, name):
    guard, response = _response(server, name, blocked=True)
    assert guard["verdict"] == "block"
    assert _logprob_values(response) == []


def test_an_allowed_request_keeps_its_prompt_logprobs(server):
    # The same requests, allowed: the logprobs a block removes are there.
    for name in ("chat prompt_logprobs", "completion echo"):
        guard, response = _response(server, name, blocked=False)
        assert guard["verdict"] == "allow" and _logprob_values(response), name

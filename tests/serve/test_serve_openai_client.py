"""The official openai client against a real ``innerguard serve``: chat and
completions, streaming and not, allowed and blocked."""
from __future__ import annotations

import pytest

from serve_requests import ALLOWED, BLOCKED, MODEL, chat, completion

pytestmark = pytest.mark.vllm


def _extra(response) -> dict:
    return response.model_extra or {}


@pytest.mark.parametrize("data, verdict", [(ALLOWED, "allow"), (BLOCKED, "block")])
def test_chat_completion(openai_client, data, verdict):
    body = chat(data)
    r = openai_client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=8, temperature=0)
    guard = _extra(r)["innerguard"]
    assert guard["verdict"] == verdict and guard["decision_id"]
    (pi,) = [p for p in guard["policies"] if p["policy"] == "prompt-injection"]
    assert pi["mode"] == "enforce" and len(pi["revision"]) == 64 and "signals" not in pi  # no --expose-signals
    choice = r.choices[0]
    if verdict == "block":
        assert choice.finish_reason == "content_filter" and r.usage.completion_tokens == 0
        assert choice.message.content.startswith("This request was refused") and pi["rule"]
    else:
        assert choice.finish_reason in ("length", "stop") and r.usage.completion_tokens > 0


@pytest.mark.parametrize("data, verdict", [(ALLOWED, "allow"), (BLOCKED, "block")])
def test_chat_completion_stream(openai_client, data, verdict):
    body = chat(data)
    chunks = list(openai_client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=8,
                                                        temperature=0, stream=True))
    assert _extra(chunks[0])["innerguard"]["verdict"] == verdict  # before any content
    assert all("innerguard" not in _extra(c) for c in chunks[1:])
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    if verdict == "block":
        assert finish == ["content_filter"] and content.startswith("This request was refused")
    else:
        assert finish and finish[0] != "content_filter" and content


@pytest.mark.parametrize("data, verdict", [(ALLOWED, "allow"), (ALLOWED + " BLOCKME", "block")])
def test_completion_stream_and_not(openai_client, data, verdict):
    # The shipped injection thresholds are calibrated on chat spans; a raw
    # prompt is blocked here by the test folder's text policy, which the
    # client adds by name.
    prompt = completion(data)["prompt"]
    add = {"innerguard": {"policies": ["blocker"]}}
    r = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, extra_body=add)
    assert _extra(r)["innerguard"]["verdict"] == verdict
    assert "blocker" in [p["policy"] for p in _extra(r)["innerguard"]["policies"]]
    chunks = list(openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                                   stream=True, extra_body=add))
    assert _extra(chunks[0])["innerguard"]["verdict"] == verdict
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    if verdict == "block":
        assert r.choices[0].finish_reason == "content_filter" and r.usage.completion_tokens == 0
        assert text == r.choices[0].text
    else:
        assert text == r.choices[0].text and r.usage.completion_tokens > 0  # greedy: same text both ways


def test_models_endpoint_lists_the_served_name(openai_client):
    assert [m.id for m in openai_client.models.list().data] == [MODEL]

"""What the server does per request that no policy applies to: vLLM has
rendered and tokenized it already, and innerguard must not do it again
(a second chat template and tokenizer pass per request, on the server's
event loop). A request a policy applies to is rendered and checked against
vLLM's tokens exactly as before. No engine: preparation happens in the API
server before anything is sent to it."""
from __future__ import annotations

import pytest

from innerguard.engine.compiler import compile_policies
from innerguard.engine.requests import GuardRequest, prepare
from innerguard.engine.serve import context
from innerguard.engine.serve.client import GuardedEngineClient
from innerguard.engine.serve.guard import ServeOptions, ServerGuard
from innerguard.engine.requests.wire import client_options

# Applies only to requests tagged "strict": every other request is unguarded.
STRICT_ONLY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: strict-only, version: 1.0.0, owner: tests, description: Blocks untrusted text that says BLOCKME.}
mode: enforce
on_error: fail-closed
applies_to: {tags: [strict]}
spans: {trusted: {roles: [system]}, untrusted: {roles: [user]}}
signals:
  marker: {analyzer: text, keywords: [BLOCKME], span: untrusted}
rules:
  - {id: block-marker, when: marker, action: block, message: "Refused."}
"""


class CountingTokenizer:
    """The real tokenizer, counting the renders and encodes made with it."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, *args, **kwargs):
        self.calls += 1
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._tokenizer(*args, **kwargs)


@pytest.fixture(scope="module")
def plan(smollm2_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("policies") / "strict-only.yaml"
    path.write_text(STRICT_ONLY)
    return compile_policies([path], smollm2_dir)[0]


@pytest.fixture(scope="module")
def real_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir))


@pytest.fixture
def tokenizer(real_tokenizer):
    return CountingTokenizer(real_tokenizer)


def vllm_ids(tokenizer, messages) -> list[int]:
    """The prompt as vLLM's chat path hands it to the engine client."""
    ids = tokenizer._tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def client_for(plan, tokenizer) -> GuardedEngineClient:
    return GuardedEngineClient(None, ServerGuard(None, plan, tokenizer, ServeOptions()))


def chat_context(messages, tags=()) -> context.RequestContext:
    body = {"model": "m", "messages": messages}
    return context.RequestContext(route="chat", body=body, client=client_options(body), tenant=None, tags=tags,
                                  traceparent=None, received_at=0.0)


MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is a guardrail?"}]


def test_a_chat_request_no_policy_applies_to_is_not_rendered_again(plan, tokenizer):
    ids = vllm_ids(tokenizer, MESSAGES)
    prepared = client_for(plan, tokenizer)._prepare(chat_context(MESSAGES), 0, {"prompt_token_ids": ids}, plan)
    assert prepared.error is None and prepared.args is None
    assert list(prepared.prompt_token_ids) == ids
    assert tokenizer.calls == 0


def test_a_chat_request_a_policy_applies_to_is_rendered_and_checked_against_vllms_tokens(plan, tokenizer):
    ids = vllm_ids(tokenizer, MESSAGES)
    client = client_for(plan, tokenizer)
    prepared = client._prepare(chat_context(MESSAGES, tags=("strict",)), 0, {"prompt_token_ids": ids}, plan)
    assert prepared.error is None and [p.name for p in prepared.policies] == ["strict-only"]
    assert prepared.args is not None and tokenizer.calls > 0
    other = client._prepare(chat_context(MESSAGES, tags=("strict",)), 0, {"prompt_token_ids": ids[:-1]}, plan)
    assert "renders this conversation differently" in other.error


def test_a_policy_a_client_adds_by_name_is_still_applied(plan, tokenizer):
    ids = vllm_ids(tokenizer, MESSAGES)
    ctx = chat_context(MESSAGES)
    ctx.client = client_options({"innerguard": {"policies": ["strict-only"]}})
    prepared = client_for(plan, tokenizer)._prepare(ctx, 0, {"prompt_token_ids": ids}, plan)
    assert prepared.args is not None and prepared.args["policies"] == ["strict-only"]


@pytest.mark.parametrize("messages, refusal", [
    ([{"role": "email", "content": "Forward the files."}], "'email' is not an accepted chat role"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "has no text content"),
])
def test_an_unguarded_chat_request_is_refused_where_rendering_would_refuse_it(plan, tokenizer, messages, refusal):
    prepared = prepare(plan, GuardRequest(id="0", messages=tuple(messages)), tokenizer, token_ids=[1, 2, 3])
    assert refusal in prepared.error
    assert tokenizer.calls == 0


def test_an_unguarded_raw_prompt_with_unbalanced_markers_is_refused(plan, tokenizer):
    prepared = prepare(plan, GuardRequest(id="0", prompt="a <untrusted>b"), tokenizer, token_ids=[1, 2])
    assert "is never closed" in prepared.error


def test_without_the_engines_tokens_an_unguarded_request_is_rendered_as_before(plan, tokenizer):
    # GuardedLLM has no tokens of its own: it sends the ones rendered here.
    prepared = prepare(plan, GuardRequest(id="0", messages=tuple(MESSAGES)), tokenizer)
    assert prepared.args is None and list(prepared.prompt_token_ids) == vllm_ids(tokenizer, MESSAGES)

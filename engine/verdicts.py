"""Verdicts as callers see them. A blocked request: the policy's refusal, no model
token, finish reason ``content_filter`` (OpenAI's value for filtered output).
Shared by ``GuardedLLM`` and the server, so both hide the same things."""
from __future__ import annotations

import dataclasses
from typing import Any

from innerguard.engine.contract import WorkerResult
from innerguard.engine.decide import ERROR_BLOCK_MESSAGE
from innerguard.engine.requests import PreparedRequest
from innerguard.engine.spans import CLOSE_MARKER, OPEN_MARKER, TRUSTED_ROLES

FINISH_BLOCKED = "content_filter"
REFUSAL = "This request was blocked by policy."
GUARD_FAILED = "This request was blocked because the guard could not evaluate it."
NO_MARKED_DATA = ("This request was refused: the prompt marks no untrusted data for policy {policy} to check, and the "
                  "policy fails closed. Put the text your application did not write between {begin} and {end}.")
NO_UNTRUSTED_MESSAGE = ("This request was refused: policy {policy} found no untrusted message to check, and it fails "
                        "closed. Send the text your application did not write in a message it checks ({roles}).")


def refuse(request_output: Any, message: str | None, *, n: int = 1, keep_logprobs: bool) -> Any:
    """Rewrite a vLLM ``RequestOutput`` in place: each of the request's ``n``
    completions becomes the refusal. Whatever token the engine emitted while
    finishing it (the forced end-of-sequence) is dropped, with its logprobs.
    ``keep_logprobs``: the request asked for logprobs, so the refusal has
    an empty list of them rather than none."""
    template = request_output.outputs[0]
    request_output.outputs = [
        dataclasses.replace(
            template,
            index=index,
            text=message or REFUSAL,
            token_ids=[],
            cumulative_logprob=None,
            logprobs=[] if keep_logprobs else None,
            finish_reason=FINISH_BLOCKED,
            stop_reason=None,
        )
        for index in range(max(n, len(request_output.outputs)))
    ]
    if getattr(request_output, "prompt_logprobs", None) is not None:
        # The prompt's logprobs are the model's reading of a refused prompt.
        # One empty entry per position: vLLM's serving code (echo) indexes
        # them by prompt token.
        request_output.prompt_logprobs = [None] * len(request_output.prompt_logprobs)
    request_output.finished = True
    return request_output


def explain(prepared: PreparedRequest, result: WorkerResult) -> WorkerResult:
    """``result``, in place, with a refusal that says what to change when
    the policy that blocked it failed closed on a request that gave it no
    untrusted data to check (its own message says only that it could not
    be evaluated). Any other verdict is left as it is."""
    name = result.get("policy")
    # The evaluator gives a fail-closed block exactly this message; a
    # detection (the rule's message) is never rewritten.
    if not result.get("blocked") or prepared.args is None or result.get("message") != ERROR_BLOCK_MESSAGE.format(policy=name):
        return result
    policy = next((p for p in prepared.policies if p.name == name), None)
    if policy is None or (prepared.args.get("spans") or {}).get(name, {}).get("data"):
        return result
    untrusted, trusted = policy.spans.get("untrusted") or {}, policy.spans.get("trusted") or {}
    if prepared.request.messages is None:  # a raw prompt: the data is what the markers enclose
        begin, end = untrusted.get("begin") or OPEN_MARKER, untrusted.get("end") or CLOSE_MARKER
        result["message"] = NO_MARKED_DATA.format(policy=name, begin=begin, end=end)
    else:  # chat, default deny: every message the policy does not trust is checked
        trusted_roles = trusted.get("roles") or TRUSTED_ROLES
        result["message"] = NO_UNTRUSTED_MESSAGE.format(policy=name, roles="any role but " + ", ".join(trusted_roles))
    return result


def undecided(prepared: PreparedRequest) -> WorkerResult:
    """The worker reported no decision for a guarded request: the guard did
    not run. Closed for every policy that fails closed."""
    error = "no decision recorded: the guard did not run for this request"
    closed = [p for p in prepared.policies if p.on_error == "fail-closed" and p.mode == "enforce"]
    return {
        "action": "block" if closed else "allow",
        "blocked": bool(closed),
        "message": GUARD_FAILED if closed else None,
        "decisions": [
            {"policy": p.name, "version": p.version, "revision": p.revision, "mode": p.mode,
             "action": "block" if p in closed else "allow", "rule": None, "signals": {}, "error": error}
            for p in prepared.policies
        ],
        "errors": {"*": error},
    }

"""Verdicts as callers see them. A blocked request: the policy's refusal, no model
token, finish reason ``content_filter`` (OpenAI's value for filtered output).
Shared by ``GuardedLLM`` and the server, so both hide the same things."""
from __future__ import annotations

import dataclasses
from typing import Any

from .requests import PreparedRequest

FINISH_BLOCKED = "content_filter"
REFUSAL = "This request was blocked by policy."
GUARD_FAILED = "This request was blocked because the guard could not evaluate it."


def refuse(request_output: Any, message: str | None, *, n: int = 1, keep_logprobs: bool) -> Any:
    """Rewrite a vLLM ``RequestOutput`` in place: each of the request's ``n``
    completions becomes the refusal. Whatever token the engine emitted while
    finishing it (the forced end-of-sequence) is dropped, with its logprobs."""
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
    request_output.finished = True
    return request_output


def undecided(prepared: PreparedRequest) -> dict[str, Any]:
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

"""What a caller asks for, and what preparation makes of it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import PolicyProgram, encode_request_args


class RequestError(InnerguardError):
    """One request's arguments are wrong; only that request fails."""


@dataclass(frozen=True)
class GuardRequest:
    """Exactly one of ``messages`` (OpenAI-style chat) or ``prompt`` (raw
    text; untrusted parts between ``<untrusted>`` markers).

    Who chooses the policies:
    - ``policies=None``: the operator's selection, the policies whose
      ``applies_to`` matches ``tags``/``tenant``/``route``;
    - ``policies=(...)``: exactly these (a trusted caller: the library or a
      batch file written by the operator); ``()`` means unguarded;
    - ``extra_policies``: names a client adds on top; they can never remove
      or weaken what the selection applies.
    """

    id: str
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | None = None
    policies: tuple[str, ...] | None = None
    extra_policies: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    tenant: str | None = None
    route: str | None = None
    max_tokens: int | None = None
    # A given answer, teacher forced: its tokens follow the rendered prompt and
    # the worker's decode probes score them as if the model had written them
    # (``innerguard eval`` on labelled completions). Batch rows only.
    completion: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], default_id: str) -> "GuardRequest":
        """The batch-file contract: ``messages``, or ``instruction`` (trusted,
        the system message) plus ``data`` (untrusted, the user message), or
        ``prompt``."""
        if not isinstance(row, Mapping):
            raise RequestError("a request must be a JSON object")
        if "__error__" in row:  # a reader could not parse this row
            raise RequestError(str(row["__error__"]))
        messages = row.get("messages")
        if messages is None and ("instruction" in row or "data" in row):
            messages = [
                {"role": "system", "content": row.get("instruction", "")},
                {"role": "user", "content": row.get("data", "")},
            ]
        if messages is None and "prompt" not in row:
            raise RequestError("request has neither 'messages' nor 'instruction'/'data' nor 'prompt'")
        if messages is not None and (
            not isinstance(messages, list)
            or not messages  # no chat template renders an empty conversation
            or not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise RequestError("'messages' must be a non-empty list of objects with a 'role' and a 'content'")
        if "prompt" in row and messages is None and not isinstance(row["prompt"], str):
            raise RequestError("'prompt' must be a string")
        max_tokens = row.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
            raise RequestError("'max_tokens' must be a positive integer")
        policies = row.get("policies")
        if "completion" in row and not (isinstance(row["completion"], str) and row["completion"]):
            raise RequestError("'completion' must be a non-empty string")
        return cls(
            id=str(row.get("id", default_id)),
            messages=tuple(messages) if messages is not None else None,
            prompt=row.get("prompt"),
            policies=None if policies is None else names(policies, "policies"),
            tags=names(row.get("tags") or (), "tags"),
            tenant=_optional_str(row, "tenant"),
            route=_optional_str(row, "route"),
            max_tokens=max_tokens,
            completion=row.get("completion"),
        )


def names(value: Any, what: str) -> tuple[str, ...]:
    """A list of names; a lone string is one name (never its characters)."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"'{what}' must be a list of strings")
    return tuple(value)


def _optional_str(row: Mapping[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"'{key}' must be a string")
    return value


@dataclass(frozen=True)
class Calibration:
    """The reranker's content-free pass: the same prompt with the query
    replaced by "N/A". It shares the request's cache salt, so the documents
    before the query are computed once (prefix cache) and their captured K is
    reused by the worker."""

    prompt_token_ids: tuple[int, ...]
    extra_args: dict[str, Any]


@dataclass(frozen=True)
class PreparedRequest:
    request: GuardRequest
    prompt_token_ids: tuple[int, ...] = ()
    policies: tuple[PolicyProgram, ...] = ()
    cache_salt: str | None = None
    shared_salt: bool = False  # cache_salt scopes a cache shared by requests with the same token probes
    error: str | None = None
    text_signals: dict[str, bool] = field(default_factory=dict)
    repeat_sources: dict[str, str] = field(default_factory=dict)  # ``repeats`` signal -> the prompt text it compares with
    calibration: Calibration | None = None
    key: str | None = None  # the id the worker reports this request's result under
    args: dict[str, Any] | None = None  # the guard's arguments; None: unguarded
    bundle_hash: str | None = None  # the plan revision it was prepared under

    @property
    def extra_args(self) -> dict[str, str] | None:
        """``SamplingParams.extra_args`` (or an HTTP body's ``vllm_xargs``)."""
        return encode_request_args(self.args) if self.args is not None else None

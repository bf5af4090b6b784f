"""The boundary of ``innerguard serve``: a client's ``innerguard`` body field
and its ``vllm_xargs``, checked against ``schemas/request.schema.json``
before anything else reads them."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

import jsonschema

from innerguard.engine.requests.model import RequestError


@dataclass(frozen=True)
class ClientOptions:
    policies: tuple[str, ...] = ()
    correlation_id: str | None = None


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(resources.files("innerguard.schemas").joinpath("request.schema.json").read_text("utf-8"))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def client_options(body: Mapping[str, Any]) -> ClientOptions:
    """Validate a request body's innerguard-related fields; RequestError names
    the first wrong field and what it must be."""
    errors = sorted(_validator().iter_errors({k: body[k] for k in ("innerguard", "vllm_xargs") if k in body}),
                    key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        raise RequestError(f"invalid {where or 'body'}: {_message(error)}", hint=_hint(where))
    field = body.get("innerguard") or {}
    return ClientOptions(policies=tuple(field.get("policies") or ()), correlation_id=field.get("correlation_id"))


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "not" and "vllm_xargs" in list(error.absolute_path)[:1]:
        return "the key 'innerguard' is reserved: the server sets the guard's arguments"
    message = error.message
    return message if len(message) <= 200 else message[:200] + "..."


def _hint(where: str) -> str:
    if where.startswith("vllm_xargs"):
        return "vllm_xargs takes scalars or lists of scalars; to add a policy use {\"innerguard\": {\"policies\": [...]}}"
    return "the innerguard field takes {\"policies\": [names], \"correlation_id\": \"...\"}; see schemas/request.schema.json"

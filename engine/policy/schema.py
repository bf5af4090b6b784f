"""JSON Schema validation of a policy document, with findings at YAML marks.

The schema (``schemas/policy.schema.json``, JSON Schema 2020-12) is the
single source of truth for which keys exist and what types they take; this
module only translates ``jsonschema``'s errors into findings that point at
the offending key or value, with did-you-mean suggestions for near misses.
"""
from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy.diagnostics import Finding
from innerguard.engine.policy.yamlsafe import Marks

_NAME_PATTERN = "^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"
_YAML_WORDS = {"array": "list", "object": "mapping", "null": "empty"}
_TYPE_NAMES = {
    dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
    int: "an integer", float: "a number", type(None): "null (empty)",
}


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("innerguard.schemas").joinpath("policy.schema.json").read_text("utf-8")
    return with_analyzer_units(json.loads(text))


def with_analyzer_units(document: dict[str, Any]) -> dict[str, Any]:
    """The schema file with every analyzer unit's signal keys added
    (engine/analyzers): the file cannot list analyzers that other packages
    register. In place; returns ``document``."""
    signal = document["$defs"]["signal"]
    names = signal["properties"]["analyzer"]["enum"]
    for kind, unit in sorted(analyzer_units.registered().items()):
        if kind in names:
            continue
        names.append(kind)
        document["$defs"][f"signal_{kind}"] = {
            "type": "object",
            "description": unit.summary,
            "additionalProperties": False,
            "properties": {
                "description": {"type": "string", "description": "What the signal measures, for reviewers."},
                "analyzer": {"const": kind, "description": unit.summary},
                **unit.keys,
            },
            "required": ["analyzer", *unit.required],
        }
        signal["allOf"].append({
            "if": {"properties": {"analyzer": {"const": kind}}, "required": ["analyzer"]},
            "then": {"$ref": f"#/$defs/signal_{kind}"},
        })
    signal["description"] = f"A signal: set 'analyzer' to {', '.join(names[:-1])} or {names[-1]}."
    return document


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def describe_path(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def validate(data: Any, marks: Marks) -> list[Finding]:
    if not isinstance(data, dict):
        return [make("IG103", f"a policy is a mapping of keys (apiVersion, kind, metadata, ...), found {_TYPE_NAMES.get(type(data), type(data).__name__)}", marks.at(()))]
    findings: dict[tuple, Finding] = {}
    for error in _validator().iter_errors(data):
        for finding in _translate(error, marks):
            findings.setdefault((finding.rule, finding.location, finding.message), finding)
    return sorted(findings.values(), key=Finding.sort_key)


def _translate(error: ValidationError, marks: Marks) -> list[Finding]:
    path = tuple(error.absolute_path)
    where = describe_path(path)
    kind = error.validator
    if kind in ("anyOf", "oneOf") and error.context:
        return _translate(best_match(error.context), marks)
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        out = []
        for key in error.instance:
            if key not in allowed:
                hint = did_you_mean(key, allowed) or f" (allowed here: {', '.join(allowed)})"
                out.append(make("IG101", f"unknown key {key!r} in {where}{hint}", marks.at(path + (key,), key=True)))
        return out
    if kind == "required" and isinstance(error.instance, dict):
        return [
            make("IG102", f"{where} needs the key {name!r}", marks.at(path, key=True))
            for name in error.validator_value
            if name not in error.instance
        ]
    if kind == "type":
        expected = error.validator_value
        expected = [expected] if isinstance(expected, str) else list(expected)
        expected = " or ".join(_YAML_WORDS.get(e, e) for e in expected)
        found = _TYPE_NAMES.get(type(error.instance), type(error.instance).__name__)
        hint = " (quote it to make it a string)" if expected == "string" and not isinstance(error.instance, (dict, list)) else ""
        return [make("IG103", f"{where} must be {_article(expected)}, found {found}{hint}", marks.at(path))]
    if kind in ("enum", "const"):
        allowed = error.validator_value if kind == "enum" else [error.validator_value]
        listed = ", ".join(str(a) for a in allowed)
        hint = did_you_mean(error.instance, allowed) if isinstance(error.instance, str) else ""
        return [make("IG104", f"{where} is {error.instance!r}; allowed: {listed}{hint}", marks.at(path))]
    if kind == "propertyNames":
        key = error.instance
        return [make("IG105", f"name {key!r} in {where} is not allowed: use letters, digits and '_' (start with a letter)", marks.at(path + (key,), key=True))]
    if kind == "pattern" and "propertyNames" in error.schema_path:
        return [make("IG105", f"name {error.instance!r} in {where} is not allowed: {'names are identifiers (letters, digits, _; not starting with a digit)' if path[-1:] == ('signals',) else 'use letters, digits, _, ., - and /'}", marks.at(path + (error.instance,), key=True))]
    if kind == "pattern" and error.validator_value == _NAME_PATTERN:
        return [make("IG105", f"{where} {error.instance!r} is not a valid name: use lowercase letters, digits and '-' (at most 64, not starting or ending with '-')", marks.at(path))]
    if kind == "pattern":
        return [make("IG105", f"{where} {error.instance!r} does not match the pattern {error.validator_value}", marks.at(path))]
    return [make("IG105", f"{where}: {error.message}", marks.at(path))]


def _article(type_name: str) -> str:
    if " or " in type_name:
        return type_name
    return ("an " if type_name[0] in "aeiou" else "a ") + type_name

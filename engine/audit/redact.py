"""Redaction rules, in the manner of OPA's decision-log masking.

A rule is a JSON pointer (``"/tenant"``: remove the field) or a dict
``{"op": "remove" | "hash" | "upsert", "path": "/input/prompt/text", "value": ...}``.
``hash`` replaces the value by a keyed hash, so equal values still match.
Removed paths are listed in the record's ``erased``, replaced ones in
``masked``. Records share nested objects, so edits copy along the path.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from innerguard.engine.errors import InnerguardError

OPS = ("remove", "hash", "upsert")


def _rule(rule: Any) -> tuple[str, tuple[str, ...], Any]:
    if isinstance(rule, str):
        rule = {"op": "remove", "path": rule}
    if not isinstance(rule, Mapping) or rule.get("op", "remove") not in OPS or not isinstance(rule.get("path"), str):
        raise InnerguardError(f"bad audit redaction rule {rule!r}", hint='use "/field/path" or {"op": "remove|hash|upsert", "path": "/field/path"}')
    path = rule["path"]
    parts = tuple(p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/"))
    return rule.get("op", "remove"), parts, rule.get("value")


class Redactor:
    def __init__(self, rules: Sequence[Any], hasher: Callable[[str], str]):
        self.rules = [_rule(r) for r in rules]
        self.hasher = hasher

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        if not self.rules:
            return record
        erased, masked = [], []
        for op, parts, value in self.rules:
            parent = record
            for part in parts[:-1]:
                child = parent.get(part) if isinstance(parent, dict) else None
                if not isinstance(child, dict):
                    parent = None
                    break
                parent[part] = child = dict(child)
                parent = child
            if parent is None or (op != "upsert" and parts[-1] not in parent):
                continue
            pointer = "/" + "/".join(parts)
            if op == "remove":
                del parent[parts[-1]]
                erased.append(pointer)
            else:
                old = parent.get(parts[-1])
                parent[parts[-1]] = value if op == "upsert" else self.hasher(json.dumps(old, sort_keys=True, default=str))
                masked.append(pointer)
        record["erased"], record["masked"] = erased, masked
        return record

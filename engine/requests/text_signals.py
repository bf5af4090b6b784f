"""Text signals (keywords, RE2 patterns) on the prompt are computed here,
outside the model, over the same spans the in-model analyzers read."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from innerguard.engine import textmatch
from innerguard.engine.plan import Plan, PolicyProgram
from innerguard.engine.requests.spans import Ranges, Rendering


def text_signals(
    plan: Plan,
    policies: Sequence[PolicyProgram],
    rendering: Rendering,
    ranges: Mapping[str, tuple[Ranges, Ranges]],
) -> dict[str, bool]:
    """``ranges``: per policy name, its (trusted, untrusted) token ranges."""
    owner = {s: p for p in policies for s in p.signals}
    values = {}
    for spec in plan.analyzers:
        if spec.kind != "text" or spec.signal not in owner or spec.params.get("span") == "generated":
            continue  # the generated text's signals are read as tokens arrive (engine/output_watch.py)
        trusted, untrusted = ranges[owner[spec.signal].name]
        span = spec.params.get("span", "prompt")
        text = _whole(rendering) if span == "prompt" else _text(rendering, trusted if span == "trusted" else untrusted)
        values[spec.signal] = any(m.matches(text) for m in signal_matchers(spec.params))
    return values


def repeat_sources(
    plan: Plan,
    policies: Sequence[PolicyProgram],
    rendering: Rendering,
    ranges: Mapping[str, tuple[Ranges, Ranges]],
) -> dict[str, str]:
    """The prompt text that each ``repeats`` signal of the selected policies
    compares the generated text with (engine/output_watch.py), by signal."""
    selected = {p.name for p in policies}
    sources = {}
    for spec in plan.analyzers:
        side = spec.params.get("repeats") if spec.kind == "text" else None
        if side is None or spec.params.get("policy") not in selected:
            continue
        trusted, untrusted = ranges[spec.params["policy"]]
        sources[spec.signal] = _text(rendering, trusted if side == "trusted" else untrusted)
    return sources


def _whole(rendering: Rendering) -> str:
    base = rendering.base
    if base.messages:  # the conversation's own words, not the template's
        return "\n".join(_text(rendering, [(m.start, m.end)]) for m in base.messages)
    return base.text


def _text(rendering: Rendering, ranges: Ranges) -> str:
    offsets = rendering.base.offsets
    return "\n".join(rendering.base.text[offsets[s][0]:offsets[e - 1][1]] for s, e in ranges if e > s)


_compiled: dict[tuple, tuple[textmatch.TextMatcher, ...]] = {}


def signal_matchers(params: Mapping[str, Any]) -> tuple[textmatch.TextMatcher, ...]:
    """A text signal's compiled keywords and pattern (compiled once per
    parameter set)."""
    case_sensitive = bool(params.get("case_sensitive", False))
    key = (tuple(params.get("keywords") or ()), params.get("pattern"), case_sensitive)
    if key not in _compiled:
        keywords, pattern, _ = key
        found = []
        if keywords:
            found.append(textmatch.keywords(keywords, case_sensitive=case_sensitive))
        if pattern:
            found.append(textmatch.regexes([pattern], case_sensitive=case_sensitive))
        _compiled[key] = tuple(found)
    return _compiled[key]

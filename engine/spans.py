"""Which prompt tokens are trusted instruction and which are untrusted data.

Both the vLLM runtime and the Hugging Face reference need the same answer,
so it is computed once, here, from the tokenizer alone:

- :func:`chat_spans`: OpenAI-style messages rendered with the tokenizer's
  chat template; per message, the token range of its *content* (role
  markers and template text excluded); trust follows the message role.
- :func:`marker_spans`: a raw prompt in which untrusted text is wrapped in
  explicit markers; the markers are removed before tokenizing.

Ranges are half-open token ranges ``(start, end)``. A token that straddles
trusted and untrusted text counts as untrusted, so the two lists never
overlap. Template text that belongs to no message (for example a default
system prompt the template inserts) is in neither list.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from innerguard.engine.errors import InnerguardError

TRUSTED_ROLES = ("system", "developer", "user")
# Earlier assistant turns are the model's own words: neither instruction nor data.
NEUTRAL_ROLES = ("assistant",)
OPEN_MARKER = "<untrusted>"
CLOSE_MARKER = "</untrusted>"

Range = tuple[int, int]


class SpanError(InnerguardError):
    """Token spans cannot be derived from a request."""


@dataclass(frozen=True)
class MessageSpan:
    index: int  # position in the request's message list
    role: str
    start: int
    end: int


@dataclass(frozen=True)
class PromptSpans:
    input_ids: tuple[int, ...]
    trusted: tuple[Range, ...]
    untrusted: tuple[Range, ...]
    messages: tuple[MessageSpan, ...] = ()
    text: str = ""  # what was tokenized (chat: the rendered template)
    offsets: tuple[tuple[int, int], ...] = ()  # per token, its characters in ``text``

    def role(self, role: str) -> tuple[Range, ...]:
        """Content ranges of all messages with this role, in order."""
        return tuple((m.start, m.end) for m in self.messages if m.role == role and m.end > m.start)


def _offsets(tokenizer: Any, text: str, add_special_tokens: bool) -> tuple[list[int], list[tuple[int, int]]]:
    return _offsets_many(tokenizer, [text], add_special_tokens)[0]


def _offsets_many(tokenizer: Any, texts: Sequence[str], add_special_tokens: bool) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Token ids and character offsets of each text; one tokenizer call for
    all of them (a fast tokenizer encodes a batch on every core)."""
    if not getattr(tokenizer, "is_fast", False):
        raise SpanError("token spans need a fast tokenizer (one with offset mappings)")
    if not texts:
        return []
    enc = tokenizer(list(texts), add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return [(list(ids), offsets if offsets and type(offsets[0]) is tuple else [tuple(o) for o in offsets])
            for ids, offsets in zip(enc["input_ids"], enc["offset_mapping"])]


def _token_range(offsets: Sequence[tuple[int, int]], ends: list[int], start: int, end: int,
                 starts: list[int] | None = None) -> Range:
    """Tokens whose characters overlap [start, end). ``ends`` are token end
    offsets; ``starts``, their start offsets when those never decrease."""
    if end <= start:
        i = bisect.bisect_right(ends, start)
        return (i, i)
    first = bisect.bisect_right(ends, start)  # first token ending after `start`
    if starts is not None:
        last = max(first, bisect.bisect_left(starts, end, lo=first))
    else:
        last = first
        while last < len(offsets) and offsets[last][0] < end:
            last += 1
    # Zero-width tokens (BOS, some specials) overlap nothing.
    while first < last and offsets[first][1] <= offsets[first][0]:
        first += 1
    return (first, last)


def _locator(offsets: Sequence[tuple[int, int]]):
    """``(start, end) -> token range`` over one text's offsets (``_token_range``),
    by bisection when the start offsets never decrease, else token by token."""
    starts, ends = (list(column) for column in zip(*offsets)) if offsets else ([], [])
    if starts != sorted(starts):
        starts = None
    return lambda start, end: _token_range(offsets, ends, start, end, starts)


def token_ranges(offsets: Sequence[tuple[int, int]], char_ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Token ranges covering each non-empty character range."""
    locate = _locator(offsets)
    return tuple(locate(s, e) for s, e in char_ranges if e > s)


def disjoint(length: int, trusted: Iterable[Range], untrusted: Iterable[Range]) -> tuple[tuple[Range, ...], tuple[Range, ...]]:
    """Trusted and untrusted token runs; a token in both counts as untrusted."""
    return _disjoint(length, trusted, untrusted)


def strip_markers(text: str, pairs: Sequence[tuple[str, str]]) -> tuple[str, dict[tuple[str, str], list[Range]]]:
    """Remove every marker of ``pairs`` from ``text``; per pair, the character
    ranges (in the cleaned text) that its markers enclosed. Markers of one
    pair must balance and never nest."""
    found: list[tuple[int, int, tuple[str, str]]] = []  # (open at, close at, pair) in the raw text
    for pair in dict.fromkeys(pairs):
        open_marker, close_marker = pair
        cursor = 0
        while True:
            at = text.find(open_marker, cursor)
            stray = text.find(close_marker, cursor)
            if stray >= 0 and (at < 0 or stray < at):
                raise SpanError(f"{close_marker!r} at character {stray} has no matching {open_marker!r}")
            if at < 0:
                break
            close = text.find(close_marker, at + len(open_marker))
            if close < 0:
                raise SpanError(f"{open_marker!r} at character {at} is never closed with {close_marker!r}")
            nested = text.find(open_marker, at + len(open_marker), close)
            if nested >= 0:
                raise SpanError(f"{open_marker!r} at character {nested} is nested inside another span")
            found.append((at, close, pair))
            cursor = close + len(close_marker)
    cuts = sorted((at, at + len(pair[0])) for at, _, pair in found) + sorted((c, c + len(pair[1])) for _, c, pair in found)
    cuts.sort()
    for (a0, a1), (b0, _) in zip(cuts, cuts[1:]):
        if b0 < a1:
            raise SpanError(f"markers overlap at character {b0}")

    def clean_pos(raw: int) -> int:  # raw position -> position once markers are gone
        return raw - sum(min(e, raw) - s for s, e in cuts if s < raw)

    clean = "".join(text[a:b] for a, b in zip([0] + [e for _, e in cuts], [s for s, _ in cuts] + [len(text)]))
    ranges: dict[tuple[str, str], list[Range]] = {pair: [] for pair in pairs}
    for at, close, pair in found:
        ranges[pair].append((clean_pos(at + len(pair[0])), clean_pos(close)))
    return clean, ranges


def _merged(ranges: Iterable[Range], length: int) -> list[Range]:
    """``ranges`` clipped to ``[0, length)``, sorted, overlapping or touching ones joined."""
    out: list[list[int]] = []
    for s, e in sorted((max(s, 0), min(e, length)) for s, e in ranges):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _minus(kept: list[Range], removed: list[Range]) -> list[Range]:
    """``kept`` without the tokens of ``removed`` (both merged)."""
    out, i = [], 0
    for s, e in kept:
        while i < len(removed) and removed[i][1] <= s:
            i += 1
        j = i
        while j < len(removed) and removed[j][0] < e:
            if removed[j][0] > s:
                out.append((s, removed[j][0]))
            s = max(s, removed[j][1])
            j += 1
        if s < e:
            out.append((s, e))
    return out


def _disjoint(length: int, trusted: Iterable[Range], untrusted: Iterable[Range]) -> tuple[tuple[Range, ...], tuple[Range, ...]]:
    # On ranges, not per token: a request's spans cost the same for any prompt length.
    untrusted_runs = _merged(untrusted, length)
    return tuple(_minus(_merged(trusted, length), untrusted_runs)), tuple(untrusted_runs)


def chat_spans(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    trusted_roles: Sequence[str] = TRUSTED_ROLES,
    neutral_roles: Sequence[str] = NEUTRAL_ROLES,
    add_generation_prompt: bool = True,
) -> PromptSpans:
    """Render ``messages`` with the chat template and locate each message's
    content tokens. Roles in ``trusted_roles`` are trusted, roles in
    ``neutral_roles`` are neither, every other role (tool, function,
    documents, ...) is untrusted."""
    found = chat_spans_many(tokenizer, [messages], trusted_roles=trusted_roles, neutral_roles=neutral_roles,
                            add_generation_prompt=add_generation_prompt)[0]
    if isinstance(found, SpanError):
        raise found
    return found


def chat_spans_many(
    tokenizer: Any,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    trusted_roles: Sequence[str] = TRUSTED_ROLES,
    neutral_roles: Sequence[str] = NEUTRAL_ROLES,
    add_generation_prompt: bool = True,
) -> list[PromptSpans | SpanError]:
    """:func:`chat_spans` of each conversation, tokenized in one call; a
    conversation that cannot be resolved gets its ``SpanError`` in its place."""
    texts: list[str | SpanError] = []
    for messages in conversations:
        try:
            texts.append(_render_chat(tokenizer, messages, add_generation_prompt))
        except SpanError as exc:
            texts.append(exc)
    encoded = iter(_offsets_many(tokenizer, [t for t in texts if isinstance(t, str)], add_special_tokens=False))
    out: list[PromptSpans | SpanError] = []
    for messages, text in zip(conversations, texts):
        if isinstance(text, SpanError):
            out.append(text)
            continue
        ids, offsets = next(encoded)
        try:
            out.append(_locate_messages(messages, text, ids, offsets, trusted_roles, neutral_roles))
        except SpanError as exc:
            out.append(exc)
    return out


def _render_chat(tokenizer: Any, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
    for i, message in enumerate(messages):
        if not isinstance(message.get("content"), str):
            raise SpanError(f"message {i} ({message.get('role')!r}) has no text content; only string content is supported")
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)


def _locate_messages(messages, text: str, ids: list[int], offsets: list[tuple[int, int]],
                     trusted_roles: Sequence[str], neutral_roles: Sequence[str]) -> PromptSpans:
    locate = _locator(offsets)
    found, cursor = [], 0
    for i, message in enumerate(messages):
        content = message["content"]
        at = text.find(content, cursor)
        if at < 0:
            raise SpanError(
                f"message {i} ({message['role']!r}): its content does not appear verbatim in the rendered chat template",
                hint="the template rewrites message text; pass explicit spans instead",
            )
        cursor = at + len(content)
        start, end = locate(at, cursor)
        found.append(MessageSpan(index=i, role=message["role"], start=start, end=end))
    trusted = [(m.start, m.end) for m in found if m.role in trusted_roles]
    untrusted = [(m.start, m.end) for m in found if m.role not in trusted_roles and m.role not in neutral_roles]
    trusted_r, untrusted_r = _disjoint(len(ids), trusted, untrusted)
    return PromptSpans(tuple(ids), trusted_r, untrusted_r, tuple(found), text, tuple(offsets))


def marker_spans(
    tokenizer: Any,
    text: str,
    *,
    open_marker: str = OPEN_MARKER,
    close_marker: str = CLOSE_MARKER,
    add_special_tokens: bool = True,
) -> PromptSpans:
    """A raw prompt with untrusted text between ``open_marker`` and
    ``close_marker``; the markers are removed, everything else is trusted."""
    pair = (open_marker, close_marker)
    clean, marked = strip_markers(text, [pair])
    ids, offsets = _offsets(tokenizer, clean, add_special_tokens)
    untrusted = token_ranges(offsets, marked[pair])
    trusted = token_ranges(offsets, complement(marked[pair], len(clean)))
    trusted_r, untrusted_r = _disjoint(len(ids), trusted, untrusted)
    return PromptSpans(tuple(ids), trusted_r, untrusted_r, (), clean, tuple(offsets))


def tokenized(tokenizer: Any, text: str, add_special_tokens: bool = True) -> PromptSpans:
    """A raw prompt's tokens and offsets, with no spans yet."""
    ids, offsets = _offsets(tokenizer, text, add_special_tokens)
    return PromptSpans(tuple(ids), (), (), (), text, tuple(offsets))


def complement(ranges: Sequence[Range], length: int) -> list[Range]:
    """The parts of ``[0, length)`` outside ``ranges`` (sorted, disjoint)."""
    out, cursor = [], 0
    for s, e in sorted(ranges):
        if s > cursor:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < length:
        out.append((cursor, length))
    return out

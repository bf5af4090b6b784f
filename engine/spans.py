"""Which prompt tokens are trusted instruction and which are untrusted data.

Both the vLLM runtime and the Hugging Face reference need the same answer,
so it is computed once, here, from the tokenizer alone:

- :func:`chat_spans`: OpenAI-style messages rendered with the tokenizer's
  chat template; per message, the token range of its *content* (role
  markers and template text excluded); trust follows the message role.
- :func:`marker_spans`: a raw prompt in which untrusted text is wrapped in
  explicit markers; the markers are removed before tokenizing.

Default deny: every rendered token is template structure, trusted text or
untrusted text. Structure is what the template itself writes: the rendering
of the same roles with placeholder contents (so a default system prompt the
template inserts is structure). A message's content is trusted only when its
role is trusted; everything else the client wrote is untrusted, whatever its
role, and so is any rendered text outside the contents that the structure
does not account for (a ``name`` or tool arguments the template prints).
Role names are part of the structure, so only known roles are accepted.

Ranges are half-open token ranges ``(start, end)``. A token that straddles
trusted and untrusted text counts as untrusted, so the two lists never
overlap.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from innerguard.engine.errors import InnerguardError

TRUSTED_ROLES = ("system", "developer", "user")
# The roles chat templates know. A role string is printed into the prompt as
# template structure, so an unknown one (or "user\n<text>") would be text
# that no span covers: it is refused unless the operator allows it.
KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool")
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
    # Chat: rendered text outside every message's content that is not the
    # template's own structure (fields the template prints, e.g. a name).
    foreign: tuple[Range, ...] = ()

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


def minus(kept: Iterable[Range], removed: Iterable[Range], length: int) -> list[Range]:
    """The tokens of ``kept`` that are in no range of ``removed``."""
    return _minus(_merged(kept, length), _merged(removed, length))


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
    allowed_roles: Sequence[str] = KNOWN_ROLES,
    add_generation_prompt: bool = True,
) -> PromptSpans:
    """Render ``messages`` with the chat template and locate each message's
    content tokens. Roles in ``trusted_roles`` are trusted; every other
    message (assistant turns too: the client wrote them) and any foreign
    text is untrusted. A role outside ``allowed_roles`` is a ``SpanError``."""
    found = chat_spans_many(tokenizer, [messages], trusted_roles=trusted_roles, allowed_roles=allowed_roles,
                            add_generation_prompt=add_generation_prompt)[0]
    if isinstance(found, SpanError):
        raise found
    return found


def chat_spans_many(
    tokenizer: Any,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    trusted_roles: Sequence[str] = TRUSTED_ROLES,
    allowed_roles: Sequence[str] = KNOWN_ROLES,
    add_generation_prompt: bool = True,
) -> list[PromptSpans | SpanError]:
    """:func:`chat_spans` of each conversation, tokenized in one call; a
    conversation that cannot be resolved gets its ``SpanError`` in its place."""
    texts: list[str | SpanError] = []
    for messages in conversations:
        try:
            texts.append(_render_chat(tokenizer, messages, add_generation_prompt, allowed_roles))
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
            contents = [text_content(m.get("content"), i, m.get("role")) for i, m in enumerate(messages)]
            skeleton = _skeleton(tokenizer, tuple(m["role"] for m in messages), add_generation_prompt)
            out.append(_locate_messages(messages, contents, skeleton, text, ids, offsets, trusted_roles))
        except SpanError as exc:
            out.append(exc)
    return out


def text_content(content: Any, index: int, role: Any) -> str:
    """A message's text: a string, or a list of text parts joined by newlines
    (as vLLM joins them for templates that take a string)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise SpanError(f"message {index} ({role!r}) has no text content; only string content or text parts are supported")


def check_roles(messages: Sequence[Mapping[str, Any]], allowed_roles: Sequence[str]) -> None:
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in allowed_roles:
            shown = repr(role) if isinstance(role, str) and len(role) <= 40 else "this role"
            raise SpanError(f"message {i}: {shown} is not an accepted chat role",
                            hint=f"use one of {', '.join(allowed_roles)}; an operator allows another by naming it "
                            "in a policy's spans")


def _render_chat(tokenizer: Any, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool,
                 allowed_roles: Sequence[str] = KNOWN_ROLES) -> str:
    check_roles(messages, allowed_roles)
    plain = [{**m, "content": text_content(m.get("content"), i, m.get("role"))} for i, m in enumerate(messages)]
    return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=add_generation_prompt)


# Placeholder contents for the skeleton: private-use characters no tokenizer
# merges with their neighbours' text in a way that matters here, and that
# client text cannot make the template print by accident.
def _placeholder(i: int) -> str:
    return f"\ue000innerguard-{i}\ue001"


@functools.lru_cache(maxsize=1024)
def _skeleton(tokenizer: Any, roles: tuple[str, ...], add_generation_prompt: bool) -> tuple[str, ...] | None:
    """The template's own text around each message: the conversation rendered
    with only the roles and placeholder contents, cut at the placeholders.
    None when the template does not print every placeholder once, in order.
    A function of the roles alone, so it is rendered once per role sequence
    (conversations repeat a few shapes), not once per request."""
    bare = [{"role": role, "content": _placeholder(i)} for i, role in enumerate(roles)]
    rendered = tokenizer.apply_chat_template(bare, tokenize=False, add_generation_prompt=add_generation_prompt)
    pieces, cursor = [], 0
    for i in range(len(roles)):
        at = rendered.find(_placeholder(i), cursor)
        if at < 0:
            return None
        pieces.append(rendered[cursor:at])
        cursor = at + len(_placeholder(i))
    pieces.append(rendered[cursor:])
    return tuple(pieces)


def _exact_layout(text: str, contents: Sequence[str], skeleton: Sequence[str]) -> list[Range] | None:
    """Each content's character range when ``text`` is exactly the skeleton
    with the contents in place; else None."""
    found, cursor = [], 0
    for piece, content in zip(skeleton, contents):
        if not text.startswith(piece, cursor) or not text.startswith(content, cursor + len(piece)):
            return None
        cursor += len(piece)
        found.append((cursor, cursor + len(content)))
        cursor += len(content)
    return found if text[cursor:] == skeleton[-1] else None


def _searched_layout(messages, text: str, contents: Sequence[str], skeleton: Sequence[str] | None
                     ) -> tuple[list[Range], list[Range]]:
    """Content ranges found by search, and the gaps between them that are not
    the skeleton's structure (all gaps when there is no skeleton)."""
    found, cursor = [], 0
    for i, content in enumerate(contents):
        at = text.find(content, cursor)
        if at < 0:
            raise SpanError(
                f"message {i} ({messages[i]['role']!r}): its content does not appear verbatim in the rendered chat template",
                hint="the template rewrites message text; pass explicit spans instead",
            )
        cursor = at + len(content)
        found.append((at, cursor))
    edges = [0] + [e for _, e in found]
    gaps = list(zip(edges, [s for s, _ in found] + [len(text)]))
    foreign = [(s, e) for k, (s, e) in enumerate(gaps)
               if e > s and (skeleton is None or text[s:e] != skeleton[k])]
    return found, foreign


def _locate_messages(messages, contents: Sequence[str], skeleton: Sequence[str] | None, text: str, ids: list[int],
                     offsets: list[tuple[int, int]], trusted_roles: Sequence[str]) -> PromptSpans:
    chars = _exact_layout(text, contents, skeleton) if skeleton is not None else None
    foreign_chars: list[Range] = []
    if chars is None:  # the template printed more than roles and contents: whatever it is, it is the client's
        chars, foreign_chars = _searched_layout(messages, text, contents, skeleton)
    locate = _locator(offsets)
    found = []
    for i, (message, (at, end)) in enumerate(zip(messages, chars)):
        start, stop = locate(at, end)
        found.append(MessageSpan(index=i, role=message["role"], start=start, end=stop))
    foreign = tuple(locate(s, e) for s, e in foreign_chars)
    trusted = [(m.start, m.end) for m in found if m.role in trusted_roles]
    untrusted = [(m.start, m.end) for m in found if m.role not in trusted_roles] + list(foreign)
    trusted_r, untrusted_r = _disjoint(len(ids), trusted, untrusted)
    return PromptSpans(tuple(ids), trusted_r, untrusted_r, tuple(found), text, tuple(offsets), foreign)


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

"""Characters a reader does not see, and what innerguard does with them
before the model reads a request.

Real text carries them by accident (a byte-order mark at the top of a
pasted file, a NUL from a broken export, U+2028 from a JavaScript string)
and attackers carry them on purpose: bidirectional overrides that make the
text shown differ from the text read, zero-width characters that split a
keyword, Unicode tag characters that spell a hidden instruction. The model
reads every one of them, and a token probe fitted on clean text scores the
odd tokens they make as unusual: benign e-mails with a NUL or a BOM were
blocked for that alone (issue 32).

Three modes, chosen by the operator (``innerguard serve
--invisible-characters``, ``GuardedLLM(invisible_characters=...)``):

- ``strip`` (the default): remove them from every message and prompt before
  anything renders it, so the text the model reads, the text the guard
  scores and the text a reviewer sees are the same; U+2028 and U+2029 become
  a line break;
- ``refuse``: a request that carries one is refused, naming the character
  and where it is;
- ``keep``: the text goes on as sent.

What counts as invisible: control characters other than tab, line feed and
carriage return; format characters (Unicode category Cf: zero-width
characters, bidirectional controls, the BOM, soft hyphens, tag characters);
noncharacters (U+FDD0..U+FDEF and every U+xxFFFE/U+xxFFFF); the line and
paragraph separators. Zero-width joiners and non-joiners stay where both
neighbours are outside ASCII: there they join emoji into one picture or
shape Persian and Indic words, and a reader sees the result.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import replace
from typing import Any, Mapping, Sequence

from innerguard.engine.requests.model import GuardRequest, RequestError

MODES = ("strip", "refuse", "keep")
_KEPT_CONTROLS = {"\t", "\n", "\r"}
_LINE_BREAKS = {"\u2028": "\n", "\u2029": "\n"}
_JOINERS = {"\u200c", "\u200d"}


def _invisible(text: str, i: int) -> bool:
    char = text[i]
    if char in _KEPT_CONTROLS:
        return False
    if char in _LINE_BREAKS:
        return True
    point = ord(char)
    if 0xFDD0 <= point <= 0xFDEF or (point & 0xFFFE) == 0xFFFE:
        return True
    category = unicodedata.category(char)
    if category == "Cc":
        return True
    if category != "Cf":
        return False
    if char in _JOINERS:
        before, after = text[i - 1:i], text[i + 1:i + 2]
        return not (before and after and ord(before) > 0x7F and ord(after) > 0x7F)
    return True


# Runs of text between the kept controls: every invisible character is
# unprintable, so a run that ``isprintable`` (one C call) has none. Most
# runs of real text do, and a per-character loop over a long document cost
# the front end more than the rest of preparing it.
_RUNS = re.compile(r"[^\t\n\r]+")


def first_invisible(text: str) -> int | None:
    """The offset of the first invisible character in ``text``, or None."""
    if text.isprintable():
        return None
    for run in _RUNS.finditer(text):
        if run.group().isprintable():
            continue
        for i in range(run.start(), run.end()):
            if not text[i].isprintable() and _invisible(text, i):
                return i
    return None


def strip(text: str) -> str:
    """``text`` without its invisible characters (line separators become ``\\n``)."""
    if first_invisible(text) is None:
        return text
    out = []
    for i, char in enumerate(text):
        if char.isprintable() or not _invisible(text, i):
            out.append(char)
        else:
            out.append(_LINE_BREAKS.get(char, ""))
    return "".join(out)


def describe(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``"""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


def apply(text: Any, mode: str, where: str) -> Any:
    """``text`` as the model should read it under ``mode``; anything that is
    not a string is returned as it is (the request's own checks refuse it)."""
    if mode == "keep" or not isinstance(text, str):
        return text
    if mode == "strip":
        return strip(text)
    position = first_invisible(text)
    if position is not None:
        raise RequestError(f"{where} has an invisible character, {describe(text[position])}, at offset {position}: "
                           "remove it (this guard refuses invisible characters)")
    return text


def apply_to_messages(messages: Sequence[Any], mode: str) -> list[Any]:
    """OpenAI-style messages with each text content, or text part, under ``mode``."""
    cleaned = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            cleaned.append(message)
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = [{**part, "text": apply(part.get("text"), mode, f"messages[{i}].content[{j}].text")}
                       if isinstance(part, Mapping) and "text" in part else part
                       for j, part in enumerate(content)]
        else:
            content = apply(content, mode, f"messages[{i}].content")
        cleaned.append({**message, "content": content} if "content" in message else message)
    return cleaned


def apply_to_prompt(prompt: Any, mode: str) -> Any:
    """A completion's prompt (a string or a list of them) under ``mode``."""
    if isinstance(prompt, list):
        return [apply(p, mode, f"prompt[{i}]") for i, p in enumerate(prompt)]
    return apply(prompt, mode, "prompt")


def apply_to_request(request: GuardRequest, mode: str) -> GuardRequest:
    """``GuardedLLM``'s requests under ``mode`` (the server applies it to the body instead)."""
    if mode == "keep":
        return request
    if request.messages is not None:
        return replace(request, messages=tuple(apply_to_messages(request.messages, mode)))
    return replace(request, prompt=apply_to_prompt(request.prompt, mode))

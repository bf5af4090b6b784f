"""Text conditions on the prompt and the generated text: keywords, regular
expressions, and repeats of a span of the prompt.

Evaluated outside the model with RE2 (``google-re2``), whose automata run in
time linear in the text whatever the pattern: a policy author cannot write
a pattern that stalls the server (no backtracking, so no back-references
or look-around: RE2 rejects those, and we say so).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import re2

from innerguard.engine.errors import InnerguardError


class TextPatternError(InnerguardError):
    """A keyword or regular expression that RE2 cannot compile."""


@dataclass(frozen=True)
class TextMatch:
    term: int  # index of the keyword/pattern that matched
    start: int  # character offsets in the text
    end: int
    text: str


def _options(case_sensitive: bool) -> "re2.Options":
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.log_errors = False  # errors are raised, not printed
    options.max_mem = 8 << 20  # bounds automaton size
    return options


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _compile(pattern: str, case_sensitive: bool, what: str):
    try:
        return re2.compile(pattern, _options(case_sensitive))
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise TextPatternError(
            f"{what}: RE2 cannot compile {pattern!r}: {reason}",
            hint="RE2 guarantees linear time and so has no back-references or look-around",
        ) from None


class TextMatcher:
    """A compiled set of terms. ``search`` finds the earliest match of any
    term; ``find_all`` every non-overlapping match of each term. ``group``
    is the capture group that is the match proper (keywords wrap theirs in
    boundary guards)."""

    def __init__(self, terms: Sequence[str], patterns: Sequence[str], case_sensitive: bool, label: str, group: int = 0):
        if not terms:
            raise TextPatternError(f"{label}: no terms given")
        self.terms = tuple(terms)
        self._group = group
        self._compiled = [
            _compile(p, case_sensitive, f"{label} {i} ({t!r})") for i, (t, p) in enumerate(zip(terms, patterns))
        ]

    def _match(self, term: int, m) -> TextMatch:
        g = self._group
        return TextMatch(term, m.start(g), m.end(g), m.group(g))

    def search(self, text: str) -> TextMatch | None:
        found = [self._match(i, m) for i, c in enumerate(self._compiled) if (m := c.search(text))]
        return min(found, key=lambda m: (m.start, m.term), default=None)

    def matches(self, text: str) -> bool:
        return any(c.search(text) for c in self._compiled)

    def find_all(self, text: str) -> list[TextMatch]:
        found = []
        for i, compiled in enumerate(self._compiled):
            pos = 0
            while pos <= len(text) and (m := compiled.search(text, pos)):
                found.append(self._match(i, m))
                # Resume at the match proper's end, so a boundary character
                # shared by two neighbouring keywords serves both.
                pos = max(m.end(self._group), pos + 1)
        return sorted(found, key=lambda m: (m.start, m.term))


def keywords(words: Sequence[str], *, whole_words: bool = True, case_sensitive: bool = False) -> TextMatcher:
    """Literal keywords or phrases, case-insensitive by default; any run of
    whitespace inside a phrase matches any run of whitespace in the text.
    With ``whole_words`` a keyword must not continue a word on either side
    ("cat" does not match "concatenate"); a side that ends in punctuation
    (as in "C++") needs no boundary there. Unicode letters count as word
    characters (RE2's own ``\\b`` is ASCII-only, so guards are spelled out)."""
    patterns = []
    for word in words:
        if not word or not word.strip():
            raise TextPatternError("keyword: empty keyword")
        word = word.strip()
        pattern = r"\s+".join(re2.escape(part) for part in word.split())
        if whole_words:
            left = r"(?:^|[^\pL\pN_])" if _is_word(word[0]) else ""
            right = r"(?:$|[^\pL\pN_])" if _is_word(word[-1]) else ""
            pattern = f"{left}({pattern}){right}"
        else:
            pattern = f"({pattern})"
        patterns.append(pattern)
    return TextMatcher(words, patterns, case_sensitive, "keyword", group=1)


def regexes(patterns: Sequence[str], *, case_sensitive: bool = True) -> TextMatcher:
    """RE2 regular expressions (inline flags such as ``(?i)`` work)."""
    return TextMatcher(patterns, patterns, case_sensitive, "regex")


_WORD = re2.compile(r"[\pL\pN_]+")  # Unicode letters and digits: RE2's own \w is ASCII-only


class RepeatMatcher:
    """True where a text repeats ``length`` consecutive words of ``source``
    in order; case and everything between words (spaces, punctuation,
    markup) are ignored, so a recital reformatted as a list or a code block
    still counts. ``search`` gives the earliest such run (its first word's
    start); ``scan()`` a search for one text that grows, as a generation
    does, which reads only what was added since its last call."""

    def __init__(self, source: str, length: int):
        if length < 1:
            raise TextPatternError(f"repeats: a run of {length} words")
        self.length = length
        words = [m.group(0).casefold() for m in _WORD.finditer(source)]
        self.runs = frozenset(tuple(words[i:i + length]) for i in range(len(words) - length + 1))

    def scan(self) -> "RepeatScan":
        return RepeatScan(self)

    def search(self, text: str) -> TextMatch | None:
        return RepeatScan(self).search(text)


class RepeatScan:
    """A :class:`RepeatMatcher`'s search through one growing text. Each call
    reads the words added since the last one (a generation's text is read
    after every step: reading it whole each time would cost its length
    squared), and starts over if the text no longer begins as it did."""

    def __init__(self, matcher: RepeatMatcher):
        self._matcher = matcher
        self._start()

    def _start(self) -> None:
        self._words: list[str] = []  # the complete words so far, casefolded
        self._starts: list[int] = []  # their first characters
        self._upto = 0  # characters read into _words: the last word may still grow past it
        self._prefix = ""
        self._next = 0  # the first run of words not yet looked up
        self._found: TextMatch | None = None

    def search(self, text: str) -> TextMatch | None:
        if not self._matcher.runs:
            return None
        if not text.startswith(self._prefix):
            self._start()
        if self._found is not None:
            return self._found
        length = self._matcher.length
        new = [(m.group(0).casefold(), m.start() + self._upto, m.end() + self._upto) for m in _WORD.finditer(text[self._upto:])]
        words = self._words + [w for w, _, _ in new]
        starts = self._starts + [s for _, s, _ in new]
        growing = bool(new) and new[-1][2] == len(text)  # the last word may go on in the next step
        for i in range(self._next, len(words) - length + 1):
            if tuple(words[i:i + length]) in self._matcher.runs:
                end = self._end(text, starts[i + length - 1])
                found = TextMatch(0, starts[i], end, text[starts[i]:end])
                if not (growing and i + length == len(words)):  # "Bank" may yet become "Banking"
                    self._found = found
                return found
        complete = len(words) - 1 if growing else len(words)
        self._words, self._starts = words[:complete], starts[:complete]
        self._upto = starts[-1] if growing else len(text)
        self._prefix = text[:self._upto]
        self._next = max(self._next, complete - length + 1)
        return None

    @staticmethod
    def _end(text: str, start: int) -> int:
        match = _WORD.search(text, start)
        return match.end() if match is not None else len(text)

"""Findings: what the loader and the linter report, with a location.

A finding prints as ``file:line:col: severity rule-id message`` (1-based line
and column, like compilers do). Rule ids and their explanations live in
``lint_rules`` beside this module; a finding only carries its id.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a policy file; ``line`` and ``col`` are 1-based (0 = unknown)."""

    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.col or 1}"


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str  # e.g. "IG101"
    severity: Severity
    message: str
    location: Location

    def __str__(self) -> str:
        return f"{self.location}: {self.severity.value} {self.rule} {self.message}"

    def sort_key(self) -> tuple:
        loc = self.location
        return (loc.file, loc.line, loc.col, self.rule, self.message)


def has_errors(findings) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)

"""Analyzers as units: one module declares everything about one analyzer.

An analyzer turns what the worker captured of a request into one signal.
Each stage that handles signals asks its analyzer instead of branching on
the analyzer's name:

==================  ==========================  ==================================
stage               asks                        module
==================  ==========================  ==================================
schema              ``keys``, ``required``      engine/policy/schema.py
policy model        ``params``, ``value_range`` engine/policy/build.py, model.py
linter              ``check``                   engine/lint/geometry.py
compiler            ``needs``                   engine/compiler.py
worker              ``compute``                 hooks/signals.py
reference           ``reference``               tests, the HF path
==================  ==========================  ==================================

Built-in analyzers are listed in ``BUILTIN``; anyone else's come from the
entry-point group ``innerguard.analyzers`` (``name = "pkg.module:Class"``),
loaded once per process, the vLLM worker's included. The attention tracker,
probe, token probe, reranker and text signals predate this table and are
still handled by name in those stages (issue 33 item 4: they move here one
by one).

This package is part of the contract the worker imports: it imports nothing
of innerguard's, and torch only inside the functions that compute.
"""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any, ClassVar, Mapping

log = logging.getLogger("innerguard")

ENTRY_POINT_GROUP = "innerguard.analyzers"
# "module:Class" of the analyzers innerguard ships as units.
BUILTIN = ("innerguard.engine.analyzers.residual_norm:ResidualNorm",)
# The analyzers still handled by name in each stage; no unit may take their names.
LEGACY = ("attention_tracker", "reranker", "probe", "token_probe", "text")


@dataclass(frozen=True)
class Needs:
    """What the worker must capture for one signal: the compiler turns it
    into the plan's captures, and ``describe`` into ``innerguard compile``'s
    list of needs."""

    describe: str
    residual_layers: tuple[int, ...] = ()  # the residual stream after these layers, at the last prompt token


@dataclass(frozen=True)
class Problem:
    """A signal that does not fit the model: ``key`` is the signal's key at
    fault (the linter points there), ``message`` says what is wrong and how
    to fix it, ``rule`` is the lint rule it reports (``innerguard lint
    --explain``): IG601 for a layer out of range, else IG605."""

    key: str
    message: str
    rule: str = "IG605"


class Analyzer:
    """One analyzer. Subclass it, set the class attributes, implement the
    methods; register the class in ``BUILTIN`` or through the entry-point
    group. Instances hold no state: every method takes the signal's
    ``params``, the plain-JSON mapping that ``params`` built."""

    kind: ClassVar[str]  # the value of the signal's ``analyzer`` key
    summary: ClassVar[str]  # what the signal measures: the schema's description
    keys: ClassVar[Mapping[str, Any]]  # JSON Schema of the signal's own keys (not analyzer, description)
    required: ClassVar[tuple[str, ...]] = ()
    value_range: ClassVar[tuple[float, float] | None] = None  # None: unbounded; the linter checks thresholds against it

    def params(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The signal's parameters from its schema-valid YAML mapping, with
        defaults applied: what the plan carries to the worker."""
        return {key: data[key] for key in self.keys if key in data}

    def check(self, params: Mapping[str, Any], geometry: Any) -> list[Problem]:
        """What does not fit the model (``geometry``: engine.plan.ModelGeometry)."""
        return []

    def needs(self, params: Mapping[str, Any]) -> Needs:
        raise NotImplementedError

    def compute(self, params: Mapping[str, Any], captures: Any) -> Any:
        """In the worker: the signal's value, a 0-dim tensor (brought to the
        host with the step's other values) or a python float. ``captures``
        holds what ``needs`` asked for: ``captures.residual_last[layer]``,
        the residual stream ``[hidden]`` on the model's device."""
        raise NotImplementedError

    def reference(self, params: Mapping[str, Any], model: Any, input_ids: list[int]) -> float:
        """The same value from plain Hugging Face transformers (``model``
        from engine.reference.model), by another route than ``compute``:
        the parity tests' yardstick."""
        raise NotImplementedError


class AnalyzerError(RuntimeError):
    pass


def _load(target: str, source: str) -> type[Analyzer]:
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Analyzer)):
        raise AnalyzerError(f"{source} {target!r} is not a subclass of innerguard.engine.analyzers.Analyzer")
    if cls.kind in LEGACY:
        raise AnalyzerError(f"{source} {target!r} takes the name {cls.kind!r} of a built-in analyzer")
    return cls


@lru_cache(maxsize=1)
def registered() -> dict[str, Analyzer]:
    """Every analyzer unit by kind: the built-in ones, then the entry
    points'. A broken entry point is logged once and left out (a policy that
    uses it then fails lint with "unknown analyzer"); it never stops the
    built-in ones."""
    table: dict[str, Analyzer] = {}
    for target in BUILTIN:
        cls = _load(target, "built-in analyzer")
        table[cls.kind] = cls()
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = _load(entry.value, f"entry point {entry.name!r} of {ENTRY_POINT_GROUP}")
            if cls.kind in table:
                raise AnalyzerError(f"entry point {entry.name!r} of {ENTRY_POINT_GROUP} takes the name {cls.kind!r} of another analyzer")
        except Exception as exc:  # one log line at first use, then the process goes on without it
            log.warning("innerguard: analyzer %r left out: %s: %s", entry.name, type(exc).__name__, exc)
            continue
        table[cls.kind] = cls()
    return table


def get(kind: str) -> Analyzer | None:
    """The unit for ``kind``, or None (a legacy analyzer, or no analyzer)."""
    return registered().get(kind)


def kinds() -> tuple[str, ...]:
    """Every analyzer name a policy may use: the legacy ones and the units."""
    return LEGACY + tuple(sorted(registered()))

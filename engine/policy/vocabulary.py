"""The policy language's fixed words that more than one layer reads: the
actions and their strength, the variables a message template may use, and
the sandbox every template is parsed and rendered in. The linter checks
policies against them and the decision semantics (``engine/decide.py``)
evaluates with them, so what lints clean renders the same way at run time.

Imported inside the vLLM worker (through ``decide``): the standard library
and ``jinja2`` only.
"""
from __future__ import annotations

from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

# A policy's decision is its strongest firing rule, in this order.
# ``stop`` ends a generation on what the model wrote (output rules); it is
# never weighed against ``block``, which is decided before any output exists.
ACTION_RANK = {"stop": 5, "block": 5, "steer": 4, "drop_documents": 3, "rerank": 2, "flag": 1, "allow": 0}

# What a rule's message may read: variable -> its attributes (None: any key).
TEMPLATE_VARIABLES = {
    "policy": ("name", "version", "mode"),
    "rule": ("id", "action"),
    "signals": None,  # this policy's signals by short name
}


def template_environment() -> SandboxedEnvironment:
    """The one environment message templates are parsed and rendered in:
    sandboxed (no attribute access to internals), strict about undefined
    variables, no autoescape (messages are plain text)."""
    return SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, trim_blocks=True, lstrip_blocks=True)

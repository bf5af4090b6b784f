"""The worker tells the scheduler which requests it blocked in a step.

The ids ride on that step's ``ModelRunnerOutput`` as one extra attribute:
the output is the only thing that travels from the worker to the scheduler
for every step, in order, whether the worker shares the EngineCore's process
(``UniProcExecutor``) or not (``MultiprocExecutor``, which pickles it; the
CPU platform always uses it). No import of vLLM here: both sides load it.
"""
from __future__ import annotations

import copy

ATTRIBUTE = "innerguard_blocked"
SCORED = "innerguard_scored_blocks"  # KV cache blocks whose token-probe scores the worker keeps (token_score_cache.py)


def attach(output, req_ids: frozenset[str], scored: dict[int, bytes] | None = None):
    """``output`` (a ``ModelRunnerOutput``, or an async one that makes it
    later) carrying ``req_ids`` and the ``scored`` blocks."""
    get_output = getattr(output, "get_output", None)
    if get_output is not None and not hasattr(output, "req_ids"):
        output.get_output = lambda: attach(get_output(), req_ids, scored)
        return output
    output = copy.copy(output)  # never write on vLLM's shared empty output
    setattr(output, ATTRIBUTE, req_ids)
    if scored:
        setattr(output, SCORED, scored)
    return output


def blocked_in(output) -> frozenset[str]:
    return getattr(output, ATTRIBUTE, None) or frozenset()


def scored_in(output) -> dict[int, bytes]:
    return getattr(output, SCORED, None) or {}

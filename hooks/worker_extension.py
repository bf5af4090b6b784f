"""The vLLM worker extension (``LLM(worker_extension_cls=...)``).

Its methods are called through ``collective_rpc``, between engine steps.
Installing a plan is two-phase: ``innerguard_install`` loads and hooks it
(staged: only requests naming its bundle run under it), the engine side runs
its self-check, then ``innerguard_commit`` makes it current or
``innerguard_rollback`` drops it. Any failure leaves the running plan as it
was. An older plan keeps its hooks until its last request finishes.
"""
from __future__ import annotations

from typing import Any

from innerguard.engine.contract import GUARD_POINT_OPS, SCHEDULER
from innerguard.engine.plan import Plan
from innerguard.hooks import cached_graphs
from innerguard.hooks.decisions import decide
from innerguard.hooks.lifecycle import Lifecycle
from innerguard.hooks.modules import ModelModules
from innerguard.hooks.record import RecordMixin
from innerguard.hooks.runner_view import reader_for, watch_steps
from innerguard.hooks.runtime import GuardRuntime
from innerguard.hooks.signals import start_signals
from innerguard.hooks.tensor_parallel import current_shard
from innerguard.hooks.vectors import load_vectors


class UnsupportedEngineError(RuntimeError):
    pass


def refuse_unsupported(vllm_config) -> None:
    """Engines innerguard cannot guard faithfully, refused in one line each."""
    parallel = vllm_config.parallel_config
    if parallel.pipeline_parallel_size > 1:
        # Each rank would see only its share of the layers.
        raise UnsupportedEngineError("innerguard refuses pipeline parallel engines (pipeline_parallel_size must be 1); "
                                     "tensor parallel is supported")
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None:
        raise UnsupportedEngineError(
            f"innerguard refuses speculative decoding ({getattr(spec, 'method', None) or 'enabled'}): "
            "its decision reads exactly one logits row per request"
        )
    skipped = _points_skipped_by_cuda_graphs(vllm_config)
    if skipped:
        # A replayed graph skips the guard points' Python bodies: a silent guard.
        raise UnsupportedEngineError(
            f"innerguard's guard points would not run: {skipped}; start the engine with "
            "guarded_engine_kwargs (piecewise CUDA graphs split at the points), "
            "compilation_config={'cudagraph_mode': 'NONE'} or --enforce-eager"
        )
    scheduler = vllm_config.scheduler_config.scheduler_cls
    name = scheduler if isinstance(scheduler, str) or scheduler is None else f"{scheduler.__module__}.{scheduler.__qualname__}"
    if name != SCHEDULER:
        raise UnsupportedEngineError(
            f"innerguard needs its scheduler (scheduler_cls={SCHEDULER}) to make a block final; "
            f"this engine runs {name or 'vLLM default'} (start it with guarded_engine_kwargs)"
        )


def refuse_unsharded_analyzers(plan: Plan, shard) -> None:
    """Analyzers that need every head on one rank, refused under tensor parallel."""
    if shard.whole:
        return
    rerankers = sorted(a.signal for a in plan.analyzers if a.kind == "reranker")
    if rerankers:
        raise UnsupportedEngineError(
            f"the reranker analyzers ({', '.join(rerankers)}) do not run under tensor parallel "
            f"(size {shard.size}): serve policies that rerank with tensor_parallel_size 1"
        )


def refuse_logits_on_one_rank(logits, shard) -> None:
    """Every rank must decide (steering changes the stream they all compute),
    and the decision runs where the logits are: a platform that gathers them
    on rank 0 only would leave the other ranks undecided."""
    if not shard.whole and not getattr(logits, "use_all_gather", False):
        raise UnsupportedEngineError(
            f"this platform gathers logits on rank 0 only; innerguard needs them on all {shard.size} "
            "tensor-parallel ranks (serve it with tensor_parallel_size 1)"
        )


def _points_skipped_by_cuda_graphs(vllm_config) -> str | None:
    """Why CUDA graphs would replay over the guard points, or None.

    Piecewise graphs must be split at both points, so that the points run
    between the pieces. Full graphs replay only for decode-only steps, and
    the worker sends every step that needs a point's Python elsewhere
    (``avoid_full_graphs``); a mode that replays full graphs for every
    step is refused."""
    if vllm_config.model_config.enforce_eager:
        return None
    compilation = vllm_config.compilation_config
    mode = getattr(compilation, "cudagraph_mode", None)
    mode = getattr(mode, "name", str(mode))
    if not getattr(compilation, "cudagraph_capture_sizes", None) or mode in ("NONE", "FULL_DECODE_ONLY"):
        return None
    if mode == "FULL":
        return "cudagraph_mode FULL replays whole forwards, prefill steps included"
    missing = [op for op in GUARD_POINT_OPS if op not in (compilation.splitting_ops or ())]
    if missing:
        return f"piecewise CUDA graphs are not split at {', '.join(missing)}"
    return None


class InnerguardWorkerExtension(RecordMixin):
    def _innerguard(self) -> Lifecycle:
        lifecycle = getattr(self, "_innerguard_lifecycle", None)
        if lifecycle is None:
            lifecycle = Lifecycle(reader_for(self.model_runner))
            watch_steps(self, lifecycle.on_schedule, lifecycle.on_output, lifecycle.end_step)
            self._innerguard_lifecycle = lifecycle
        return lifecycle

    def innerguard_install(self, plan_data: dict[str, Any]) -> dict[str, Any]:
        """Load ``plan_data`` (``Plan.to_dict()``) and hook it, staged."""
        runner = self.model_runner
        refuse_unsupported(runner.vllm_config)
        plan = Plan.from_dict(plan_data)
        hf_config = runner.model_config.hf_config
        if hf_config.num_hidden_layers != plan.model.num_layers or hf_config.hidden_size != plan.model.hidden_size:
            raise ValueError(
                f"plan was compiled for {plan.model.num_layers} layers / hidden {plan.model.hidden_size}, "
                f"but vLLM serves {hf_config.num_hidden_layers} / {hf_config.hidden_size}"
            )
        model = runner.get_model()
        shard = current_shard()
        refuse_unsharded_analyzers(plan, shard)
        modules = ModelModules.find(model, plan.model.num_layers, _eos_token_id(runner), shard)
        refuse_logits_on_one_rank(modules.logits, shard)
        vectors = load_vectors(plan, plan.model.hidden_size, next(model.parameters()).device)
        lifecycle = self._innerguard()
        runtime = GuardRuntime(plan, modules, vectors, start_signals, decide).install(lifecycle)
        lifecycle.attach()
        lifecycle.plans.stage(runtime)
        return {
            "runner": lifecycle.reader.name,
            "hook_points": runtime.hook_points,
            "bundle_hash": plan.bundle_hash,
            "enforce_eager": bool(runner.model_config.enforce_eager),
            "graphs": cached_graphs.origin(runner.model_config),
            "reads_kv_cache": lifecycle.prefix.reads_kv_cache(modules),
            "reads_token_scores": lifecycle.prefix.reads_token_scores(),
        }

    def innerguard_commit(self, bundle_hash: str) -> None:
        """The staged plan becomes current; the previous one retires."""
        self._innerguard().plans.commit(bundle_hash)

    def innerguard_rollback(self, bundle_hash: str | None = None) -> bool:
        """Drop the staged plan (its self-check failed); the current one stays."""
        return self._innerguard().plans.rollback(bundle_hash)

    def innerguard_hook_calls(self, reset: bool = False, bundle_hash: str | None = None) -> dict[str, int]:
        """Hook calls of the plan ``bundle_hash`` (default: the current one)."""
        lifecycle = self._innerguard()
        plans = lifecycle.plans
        runtime = next((r for r in plans.runtimes() if r.bundle == bundle_hash), None) if bundle_hash else None
        runtime = runtime or plans.current or plans.staged
        calls = {**(runtime.hook_calls if runtime else {}), "step": lifecycle.hook_calls["step"]}
        if reset:
            lifecycle.hook_calls.clear()
            if runtime is not None:
                runtime.hook_calls.clear()
        return calls

    def innerguard_kv_readback(self, enabled: bool) -> bool:
        """Whether K and token-probe scores of prefix-cached positions are
        read back; off once the install canary saw a cache hit decide otherwise."""
        prefix = self._innerguard().prefix
        prefix.kv_readback = bool(enabled)
        return prefix.kv_readback

    def innerguard_take_results(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        return self._innerguard().results.take(keys)

    def innerguard_take_decode(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The decode rules' records of these requests' completions so far
        (hooks/decode_probes.py), copied: the worker's own go on growing
        (lifecycle.take_decode)."""
        return self._innerguard().take_decode(keys)

    def innerguard_stats(self) -> dict[str, Any]:
        """Counts of what the worker holds: live request states, results and
        calibrations not yet taken, installed plans."""
        return self._innerguard().stats()

    def innerguard_configure(self, result_ttl_s: float | None = None, retire_grace_s: float | None = None) -> None:
        """``result_ttl_s``: how long a finished request's result (and a
        calibration whose request never came) waits to be taken.
        ``retire_grace_s``: how long a replaced plan keeps its hooks once idle,
        for requests prepared for it that the scheduler has not started yet."""
        lifecycle = self._innerguard()
        if result_ttl_s is not None:
            lifecycle.results.ttl_s = lifecycle.calibrations.ttl_s = float(result_ttl_s)
        if retire_grace_s is not None:
            lifecycle.plans.retire_grace_s = float(retire_grace_s)
            lifecycle.plans.drop_idle()

    def innerguard_uninstall(self) -> None:
        lifecycle = getattr(self, "_innerguard_lifecycle", None)
        if lifecycle is not None:
            lifecycle.detach()


def _eos_token_id(runner) -> int:
    config = runner.model_config.hf_config
    eos = getattr(getattr(runner.model_config, "hf_text_config", config), "eos_token_id", None)
    if eos is None:
        eos = config.eos_token_id
    return int(eos[0] if isinstance(eos, (list, tuple)) else eos)

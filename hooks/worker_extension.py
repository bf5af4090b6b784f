"""The vLLM worker extension (``LLM(worker_extension_cls=...)``).

Its methods are called through ``llm.collective_rpc``: install (or hot-swap) a
compiled plan, report which hooks fired, hand back per-request results. The
extension never overrides worker methods; hooks go on the loaded model.
"""
from __future__ import annotations

from typing import Any

import torch
from safetensors import safe_open

from innerguard.engine.plan import Plan
from innerguard.hooks.decisions import decide
from innerguard.hooks.modules import ModelModules
from innerguard.hooks.runner_view import reader_for
from innerguard.hooks.runtime import GuardRuntime
from innerguard.hooks.signals import compute_signals


def _load_vectors(plan: Plan, device) -> dict[str, torch.Tensor]:
    vectors = {}
    for name, ref in plan.vectors.items():
        with safe_open(ref.path, framework="pt") as f:  # safetensors only: no pickles
            vectors[name] = f.get_tensor(ref.key).to(device=device, dtype=torch.float32)
    return vectors


class InnerguardWorkerExtension:
    def innerguard_install(self, plan_data: dict[str, Any]) -> dict[str, Any]:
        """Install ``plan_data`` (``Plan.to_dict()``), replacing any plan before it.

        Runs between engine steps, so a swap is atomic for the batch; requests
        already in flight keep the policies they started with.
        """
        plan = Plan.from_dict(plan_data)
        runner = self.model_runner
        parallel = runner.vllm_config.parallel_config
        if parallel.tensor_parallel_size > 1 or parallel.pipeline_parallel_size > 1:
            # Each rank would see only its shard of heads or layers.
            raise ValueError("innerguard supports one GPU per engine (tensor and pipeline parallel size 1)")
        reader = getattr(self, "_innerguard_reader", None) or reader_for(runner)
        self._innerguard_reader = reader
        model = runner.get_model()
        hf_config = runner.model_config.hf_config
        modules = ModelModules.find(model, plan.model.num_layers, _eos_token_id(runner))
        if hf_config.num_hidden_layers != plan.model.num_layers or hf_config.hidden_size != plan.model.hidden_size:
            raise ValueError(
                f"plan was compiled for {plan.model.num_layers} layers / hidden {plan.model.hidden_size}, "
                f"but vLLM serves {hf_config.num_hidden_layers} / {hf_config.hidden_size}"
            )
        device = next(model.parameters()).device
        runtime = GuardRuntime(
            plan, modules, reader, _load_vectors(plan, device), compute_signals, decide
        ).install()
        old = getattr(self, "_innerguard_runtime", None)
        if old is not None:
            old.uninstall()
            runtime.results.update(old.results)
        self._innerguard_runtime = runtime
        return {
            "runner": reader.name,
            "hook_points": runtime.hook_points,
            "bundle_hash": plan.bundle_hash,
            "enforce_eager": bool(runner.model_config.enforce_eager),
        }

    def innerguard_hook_calls(self, reset: bool = False) -> dict[str, int]:
        runtime = self._innerguard_runtime
        calls = dict(runtime.hook_calls)
        if reset:
            runtime.hook_calls.clear()
        return calls

    def innerguard_take_results(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        results = self._innerguard_runtime.results
        return {key: results.pop(key) for key in keys if key in results}

    def innerguard_uninstall(self) -> None:
        runtime = getattr(self, "_innerguard_runtime", None)
        if runtime is not None:
            runtime.uninstall()
            self._innerguard_runtime = None


def _eos_token_id(runner) -> int:
    config = runner.model_config.hf_config
    eos = getattr(getattr(runner.model_config, "hf_text_config", config), "eos_token_id", None)
    if eos is None:
        eos = config.eos_token_id
    return int(eos[0] if isinstance(eos, (list, tuple)) else eos)

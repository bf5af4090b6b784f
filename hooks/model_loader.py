"""The model loader of guarded engines (``load_format="innerguard"``).

It loads the model with the loader the operator chose (the
``innerguard_load_format`` key of ``model_loader_extra_config``, default
``auto``), then places the guard points on it. Loading is the last moment
before vLLM traces the model for compilation, and a registered loader is
vLLM's own extension point for it.
"""
from __future__ import annotations

import dataclasses

from vllm.model_executor.model_loader import get_model_loader, register_model_loader
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from innerguard.engine.contract import INNER_LOAD_FORMAT_KEY, LOAD_FORMAT, SUPPORTED_FAMILIES, unsupported_family
from innerguard.hooks import cached_graphs, guard_points, probe_buffers, steering_buffers


@register_model_loader(LOAD_FORMAT)
class GuardPointLoader(BaseModelLoader):
    def __init__(self, load_config):
        super().__init__(load_config)
        extra = dict(load_config.model_loader_extra_config or {})
        inner = extra.pop(INNER_LOAD_FORMAT_KEY, "auto")
        if inner == LOAD_FORMAT:
            raise ValueError(f"{INNER_LOAD_FORMAT_KEY} cannot be {LOAD_FORMAT!r} itself")
        self.inner = get_model_loader(dataclasses.replace(load_config, load_format=inner, model_loader_extra_config=extra))

    def download_model(self, model_config) -> None:
        self.inner.download_model(model_config)

    def load_weights(self, model, model_config) -> None:
        self.inner.load_weights(model, model_config)

    def load_model(self, vllm_config, model_config, prefix: str = ""):
        model = self.inner.load_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
        # Engines started without innerguard's front door (``vllm serve
        # --load-format innerguard``) meet the family check here.
        if type(model).__name__ not in SUPPORTED_FAMILIES:
            raise ValueError(unsupported_family(type(model).__name__, "engine start"))
        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None:
            raise ValueError(f"innerguard cannot place its guard points on {type(model).__name__}: no model.layers")
        guard_points.place(layers)
        cached_graphs.allow_loading()  # vLLM compiles (or loads) the model after this returns
        # Before vLLM captures CUDA graphs: the graphs keep these addresses.
        max_tokens, device = vllm_config.scheduler_config.max_num_batched_tokens, next(model.parameters()).device
        steering_buffers.allocate_buffers(len(layers), model_config.get_hidden_size(), max_tokens, model_config.dtype, device)
        probe_buffers.allocate_buffers(len(layers), model_config.get_hidden_size(), max_tokens, device)
        return model

"""vLLM's parsed server options, with what a guarded engine needs: the
worker extension, scheduler and model loader that carry the guard (the
operator's ``--load-format`` is wrapped, not replaced), and the CPU defaults innerguard uses everywhere (``vllm_engine.guarded_engine_kwargs``).
An option the operator set explicitly wins, unless the guard cannot work
with it; then the server refuses to start and says why."""
from __future__ import annotations

from argparse import Namespace

from innerguard.engine.errors import EngineStartError
from innerguard.engine.vllm_engine import guarded_engine_kwargs

REQUIRED = ("worker_extension_cls", "scheduler_cls")
WRAPPED = ("load_format", "model_loader_extra_config", "additional_config")  # the operator's, inside innerguard's


def apply_guarded_defaults(args: Namespace, parser) -> None:
    chosen = {k: getattr(args, k) for k in WRAPPED if hasattr(args, k) and getattr(args, k) != parser.get_default(k)}
    for key, value in guarded_engine_kwargs(args.model, overrides=chosen).items():
        if key == "model" or not hasattr(args, key):
            continue
        current, default = getattr(args, key), parser.get_default(key)
        if key in REQUIRED and current not in (default, value):
            raise EngineStartError(f"--{key.replace('_', '-')} {current} cannot be combined with innerguard serve",
                                   hint=f"innerguard needs {value!r}")
        if key in REQUIRED or key in WRAPPED or current == default:
            setattr(args, key, value)

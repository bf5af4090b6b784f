"""vLLM general plugin (entry point group ``vllm.general_plugins``).

vLLM loads it in every process, the workers included. It registers the
guarded engines' model loader (``load_format="innerguard"``), and checks that
the worker side of innerguard imports there, so that a broken install fails
when the engine starts, not when the first guarded request arrives.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("innerguard")


def register() -> None:
    from innerguard.hooks import model_loader, worker_extension  # noqa: F401  (registers; fails at start if broken)

    logger.debug("innerguard vLLM plugin loaded")

"""A guarded engine is never a silent one: compiled engines are refused."""
from __future__ import annotations

import pytest

from innerguard.engine.errors import EngineStartError

pytestmark = pytest.mark.vllm


def test_asking_for_a_compiled_guarded_engine_is_refused(smollm2_dir, policy_dir):
    from innerguard.engine.guarded import GuardedLLM

    with pytest.raises(EngineStartError, match="cannot run compiled"):
        GuardedLLM(smollm2_dir, policy_dir, enforce_eager=False)


def test_hooks_in_a_compiled_engine_fail_the_self_check(smollm2_dir, guarded):
    # Bypass GuardedLLM's eager default: vLLM's own default on this CPU
    # compiles the model, and hooks added after load never fire there.
    from innerguard.engine.vllm_engine import guarded_engine_kwargs, install_plan, start_llm

    llm = start_llm(**guarded_engine_kwargs(str(smollm2_dir), eager=False))
    try:
        assert not llm.llm_engine.vllm_config.model_config.enforce_eager
        with pytest.raises(EngineStartError, match="self-check failed"):
            install_plan(llm, guarded.plan)
    finally:
        llm.llm_engine.engine_core.shutdown()

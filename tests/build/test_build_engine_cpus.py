"""A build's engine gives the model every CPU of the process (vLLM on CPU
otherwise keeps one for its idle scheduler), unless the operator chose."""
from __future__ import annotations

import os

from innerguard.engine.build.engine import _every_cpu_for_the_model


def test_the_model_gets_every_cpu_only_while_the_engine_starts(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    with _every_cpu_for_the_model(True):
        bound = os.environ["VLLM_CPU_OMP_THREADS_BIND"]
    assert [int(c) for c in bound.split(",")] == sorted(os.sched_getaffinity(0))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ  # later engines (serving, tests) keep vLLM's default


def test_an_operator_binding_and_gpus_are_left_alone(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    with _every_cpu_for_the_model(True):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    with _every_cpu_for_the_model(False):
        assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ

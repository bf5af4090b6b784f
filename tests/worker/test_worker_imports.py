"""The worker side's import boundary (issue 33, item 2).

vLLM loads ``innerguard.hooks`` inside its worker and EngineCore processes.
From the engine side it may take only the contract (shared names and the
compiled plan), the analyzer units and the decision semantics (with the
language's vocabulary they evaluate in): never engine start-up, request
preparation, the server or the audit trail, whose imports (and mistakes)
would then run inside every vLLM worker.
"""
from __future__ import annotations

import json
import subprocess
import sys

ALLOWED = {"innerguard", "innerguard.engine", "innerguard.engine.contract", "innerguard.engine.plan",
           "innerguard.engine.decide", "innerguard.engine.errors", "innerguard.engine.logging",
           # the words the decision semantics share with the language (actions, template sandbox)
           "innerguard.engine.policy", "innerguard.engine.policy.vocabulary",
           # the analyzer units, whose computations run in the worker (engine/analyzers)
           "innerguard.engine.analyzers", "innerguard.engine.analyzers.residual_norm"}

LIST_LOADED = """
import importlib, json, pkgutil, sys
import innerguard.hooks as hooks
for info in pkgutil.walk_packages(hooks.__path__, "innerguard.hooks."):
    importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("innerguard"))))
"""


def test_the_worker_side_loads_only_the_contract_and_the_decision_semantics():
    run = subprocess.run([sys.executable, "-c", LIST_LOADED], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    hooks = [m for m in loaded if m.startswith("innerguard.hooks.")]
    assert "innerguard.hooks.worker_extension" in hooks and "innerguard.hooks.scheduler" in hooks
    outside = sorted(m for m in loaded if not m.startswith("innerguard.hooks") and m not in ALLOWED)
    assert outside == [], f"the worker side imports engine-side modules: {outside}"


def test_the_contract_imports_nothing():
    # A fresh interpreter: the contract must load with no other innerguard
    # module and no third-party one beside it (the standard library's typing
    # declares the result's shape).
    code = ("import sys; before = set(sys.modules); import innerguard.engine.contract; "
            "print(sorted(set(sys.modules) - before))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = eval(run.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.startswith("innerguard")] == ["innerguard", "innerguard.engine", "innerguard.engine.contract"]
    outside = [m for m in loaded if not m.startswith("innerguard") and m.split(".")[0].lstrip("_") not in sys.stdlib_module_names
               and m.split(".")[0] not in sys.stdlib_module_names]
    assert outside == [], f"the contract loads modules outside the standard library: {outside}"


def test_every_rpc_name_of_the_contract_is_a_method_of_the_worker_extension():
    from innerguard.engine import contract
    from innerguard.hooks.worker_extension import InnerguardWorkerExtension

    names = {k: v for k, v in vars(contract).items() if k.startswith("RPC_")}
    assert len(names) >= 13
    missing = sorted(v for v in names.values() if not callable(getattr(InnerguardWorkerExtension, v, None)))
    assert missing == []
    offered = {m for m in dir(InnerguardWorkerExtension) if m.startswith("innerguard_") and callable(getattr(InnerguardWorkerExtension, m))}
    assert offered == set(names.values()), "a worker RPC method without its contract name, or the reverse"

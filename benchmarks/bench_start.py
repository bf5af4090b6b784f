"""How long a guarded engine takes to start, with vLLM's compile cache empty
(the first start on a machine) and holding that start's graphs (every start
after it), beside plain vLLM's second start.

    .venv/bin/python benchmarks/bench_start.py [--plain] [--json out.json]

Each start runs in a process of its own, as a restart does, against a compile
cache made for this run (``VLLM_CACHE_ROOT`` in a temporary folder), so the
machine's own cache is neither read nor changed. Engines: SmolLM2-135M-Instruct,
float32, vLLM's default (compiled) mode; guarded ones install the shipped
``policies/`` (self-check and canary included, as at every start). Times are
wall clock from the constructor's call to its return.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


def start_once(kind: str) -> dict:
    """Runs in the child: start one engine, report its time and graphs."""
    from innerguard.engine import models

    model_dir = models.resolve(MODEL)
    began = time.perf_counter()
    if kind == "guarded":
        from innerguard.engine.guarded import GuardedLLM

        llm = GuardedLLM(model_dir, REPO / "policies")
        seconds, graphs = time.perf_counter() - began, llm.install_info.get("graphs")
    else:
        from innerguard.engine.vllm_engine import engine_kwargs, start_llm

        llm = start_llm(**engine_kwargs(str(model_dir), eager=False))
        seconds, graphs = time.perf_counter() - began, None  # plain vLLM does not say
    return {"engine": kind, "seconds": round(seconds, 1), "graphs": graphs}


def start_in_child(kind: str, cache_root: str) -> dict:
    env = {**os.environ, "VLLM_CACHE_ROOT": cache_root}
    done = subprocess.run([sys.executable, __file__, "--child", kind], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plain", action="store_true",
                        help="also start plain vLLM twice (its second start compiles again)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--child", choices=("guarded", "plain"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(start_once(args.child)), flush=True)
        return
    starts = []
    with tempfile.TemporaryDirectory(prefix="innerguard-start-") as cache_root:
        plan = [("guarded", "empty cache"), ("guarded", "cache of the first start")]
        if args.plain:
            plan += [("plain", "empty cache"), ("plain", "cache of the first start")]
        for kind, cache in plan:
            result = {**start_in_child(kind, cache_root), "cache": cache}
            graphs = result["graphs"] or "-"
            print(f"{result['engine']:8} {result['cache']:26} {result['seconds']:7.1f} s  graphs: {graphs}", flush=True)
            starts.append(result)
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "starts": starts}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Plain vLLM vs guarded vLLM, side by side in one run, on the same prompts.

    .venv/bin/python benchmarks/bench_runtime.py [--requests 32] [--max-tokens 32] [--rounds 3]

Configurations (greedy, float32, SmolLM2-135M-Instruct on this machine):
  plain-default   vLLM's default mode (compiled where the platform compiles)
  plain-eager     vLLM with enforce_eager=True: the baseline for the hooks' own cost
  guarded-detect  attention tracker on 10 heads (prompt-injection detection only)
  guarded-steer   one steered layer, every generated token
  guarded-both    both policies on every request
Rounds alternate between configurations so that machine noise spreads evenly;
the median round is reported. Memory is the resident set of each engine's
processes after its runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _engine_rss_mib() -> float:
    import psutil

    me = psutil.Process()
    return sum(p.memory_info().rss for p in me.children(recursive=True)) / (1 << 20)


def _policies(folder: Path, model_dir: Path) -> Path:
    sys.path.insert(0, str(HERE.parent / "tests" / "runtime"))
    from helpers import make_vector  # the seeded artifact maker the tests use

    for name in ("injection.yaml", "steer.yaml"):
        shutil.copy(HERE.parent / "tests" / "runtime" / "policies" / name, folder / name)
    make_vector(folder / "artifacts" / "steer.safetensors", model_dir, layer=6, seed=2)
    return folder


def _rows(n: int, max_tokens: int, policies: list[str]) -> list[dict]:
    sys.path.insert(0, str(HERE.parent / "tests" / "runtime"))
    from helpers import long_text, row

    return [row(i, policies, data=long_text(4 + i % 5), max_tokens=max_tokens) for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    from vllm import SamplingParams

    from innerguard.engine import logging as ig_logging
    from innerguard.engine import models
    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    ig_logging.configure("console", "warning")
    model_dir = models.prepare("smollm2-135m-instruct")
    folder = _policies(Path(tempfile.mkdtemp(prefix="ig-bench-")), model_dir)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)

    engines = {}
    memory = {}
    rss0 = _engine_rss_mib()
    engines["plain-default"] = start_llm(**engine_kwargs(str(model_dir), eager=False))
    memory["plain-default"] = _engine_rss_mib() - rss0
    rss0 = _engine_rss_mib()
    engines["plain-eager"] = start_llm(**engine_kwargs(str(model_dir), eager=True))
    memory["plain-eager"] = _engine_rss_mib() - rss0
    rss0 = _engine_rss_mib()
    guarded = GuardedLLM(model_dir, folder)
    memory["guarded"] = _engine_rss_mib() - rss0

    tokenizer = guarded.tokenizer
    plain_rows = _rows(args.requests, args.max_tokens, [])
    prompts = [{"prompt_token_ids": list(tokenizer.apply_chat_template(
        [{"role": "system", "content": r["instruction"]}, {"role": "user", "content": r["data"]}],
        add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])} for r in plain_rows]
    prompt_tokens = sum(len(p["prompt_token_ids"]) for p in prompts)
    workloads = {
        "plain-default": lambda: engines["plain-default"].generate(prompts, params, use_tqdm=False),
        "plain-eager": lambda: engines["plain-eager"].generate(prompts, params, use_tqdm=False),
        "guarded-detect": lambda: guarded.run(_rows(args.requests, args.max_tokens, ["injection"]), params),
        "guarded-steer": lambda: guarded.run(_rows(args.requests, args.max_tokens, ["steer"]), params),
        "guarded-both": lambda: guarded.run(_rows(args.requests, args.max_tokens, ["injection", "steer"]), params),
    }
    for run in workloads.values():  # warm-up
        run()
    seconds = {name: [] for name in workloads}
    for _ in range(args.rounds):
        for name, run in workloads.items():
            started = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - started)
    out_tokens = args.requests * args.max_tokens
    figures = {}
    for name, runs in seconds.items():
        median = statistics.median(runs)
        figures[name] = {"seconds": median, "output_tok_s": out_tokens / median, "batch_latency_s": median}
    eager = figures["plain-eager"]["output_tok_s"]
    default = figures["plain-default"]["output_tok_s"]
    print(f"\n{args.requests} requests, {prompt_tokens} prompt tokens, {args.max_tokens} output tokens each, "
          f"median of {args.rounds} alternating rounds\n")
    print(f"{'configuration':<16} {'out tok/s':>10} {'batch s':>8} {'vs eager':>9} {'vs default':>10}")
    for name, f in figures.items():
        print(f"{name:<16} {f['output_tok_s']:>10.1f} {f['seconds']:>8.2f} "
              f"{f['output_tok_s'] / eager:>8.1%} {f['output_tok_s'] / default:>9.1%}")
    print("\nengine resident memory after start (MiB):",
          ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": figures, "memory_mib": memory, "args": vars(args)}, indent=2))
    guarded.shutdown()
    for llm in engines.values():
        llm.llm_engine.engine_core.shutdown()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    sys.exit(main())

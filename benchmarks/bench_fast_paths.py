"""The guard on vLLM's fast paths: compiled mode and the prefix cache, side by
side with plain vLLM in one run, on the same kinds of fresh prompts.

    .venv/bin/python benchmarks/bench_fast_paths.py [--rounds 3] [--json out.json]

Engines (SmolLM2-135M-Instruct, float32, greedy, ``ignore_eos``; vLLM's
prefix caching on, as by default):
  plain-default    vLLM's default mode (compiled on this CPU)
  guarded-default  GuardedLLM in the same mode, the shipped prompt-injection policy
                   in shadow mode (decided, not enforced: every request generates
                   the same tokens as on the plain engine)
  plain-eager, guarded-eager   the same, eager (with --eager)
Workloads, fresh text every round so that no round reuses another's cache:
  distinct  32 chat prompts of about 500 tokens, 16 output tokens each, submitted together
  shared    32 requests that share a fresh system prompt of about 1,000 tokens,
            each with its own short user turn, 16 output tokens, in 4 waves of 8
Rounds alternate between engines; the first round warms up and is dropped;
the median of the others is reported with the spread (max-min over median).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

WORDS = ("the of and to in is that for it as was with be by on not this are or from at which but have an they you "
         "were all there would their we been has when who will more no if out so what up its about into than them can "
         "only other new some could time these two may then do first any now such like our over even most made after "
         "also did many before must through back years where much your way well down should because each").split()


def make_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def workloads(rng: random.Random, tokenizer) -> dict[str, list[list[dict]]]:
    """Each workload: a list of waves, each a list of conversations."""
    distinct = [[{"role": "system", "content": "Summarize the following document in two sentences."},
                 {"role": "user", "content": make_text(rng, 430)}] for _ in range(32)]
    system = "You are a support assistant. Policy manual: " + make_text(rng, 930)
    shared = [[{"role": "system", "content": system}, {"role": "user", "content": make_text(rng, 20)}] for _ in range(32)]
    return {"distinct": [distinct], "shared": [shared[i:i + 8] for i in range(0, 32, 8)]}


def other_engines() -> list[str]:
    """vLLM processes already running here (vLLM names them ``VLLM::...``)."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:  # the process ended meanwhile
            continue
        if name.startswith("VLLM::"):
            found.append(f"{name} (pid {comm.parent.name})")
    return found


def prompt_tokens(tokenizer, conversation) -> list[int]:
    return list(tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (one warm-up round more)")
    parser.add_argument("--eager", action="store_true", help="also measure plain and guarded engines in eager mode")
    parser.add_argument("--policy", default="policies/prompt-injection.yaml")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--allow-other-engines", action="store_true",
                        help="measure even while other vLLM processes run on this machine (their polling skews the figures)")
    args = parser.parse_args()
    # Another engine's workers wake to poll even when idle and share these cores: ratios would measure them too.
    busy = other_engines()
    if busy and not args.allow_other_engines:
        parser.exit(2, f"bench_fast_paths: other vLLM processes are running ({', '.join(busy)}); stop them "
                       "(pkill -f 'VLLM::') or pass --allow-other-engines\n")

    from vllm import SamplingParams

    from innerguard.engine import models
    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    model_dir = models.prepare("smollm2-135m-instruct")
    policy_dir = Path(tempfile.mkdtemp(prefix="ig-fast-paths-"))
    shutil.copytree(Path(args.policy).parent / "artifacts", policy_dir / "artifacts")
    text = Path(args.policy).read_text()
    (policy_dir / Path(args.policy).name).write_text(re.sub(r"(?m)^mode: enforce$", "mode: shadow", text))
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    engines: dict[str, object] = {}
    modes = (False, True) if args.eager else (False,)
    for eager in modes:
        suffix = "eager" if eager else "default"
        started = time.perf_counter()
        engines[f"plain-{suffix}"] = start_llm(**engine_kwargs(str(model_dir), eager=eager))
        engines[f"guarded-{suffix}"] = GuardedLLM(model_dir, policy_dir, enforce_eager=eager)
        print(f"{suffix} engines started in {time.perf_counter() - started:.0f} s", flush=True)
    tokenizer = engines["guarded-default"].tokenizer

    def run(name: str, waves) -> float:
        engine = engines[name]
        started = time.perf_counter()
        for wave in waves:
            if name.startswith("guarded"):
                outs = engine.chat(wave, params)
                assert all(o.error is None and o.signals for o in outs), [o.error for o in outs]
            else:
                engine.generate([{"prompt_token_ids": prompt_tokens(tokenizer, c)} for c in wave], params, use_tqdm=False)
        return time.perf_counter() - started

    rng = random.Random(12)
    seconds: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds + 1):
        for workload in ("distinct", "shared"):
            for name in engines:
                waves = workloads(rng, tokenizer)[workload]  # fresh text for each engine and round
                took = run(name, waves)
                if round_:
                    seconds.setdefault((workload, name), []).append(took)
        print(f"round {round_} done{' (warm-up)' if not round_ else ''}", flush=True)

    result = {"rounds": args.rounds, "policy": args.policy, "cells": []}
    print(f"{'workload':<9} {'engine':<16} {'batch s':>8} {'spread':>7} {'out tok/s':>10} {'vs plain same mode':>19} {'vs plain default':>17}")
    for workload in ("distinct", "shared"):
        for name in engines:
            runs = seconds[(workload, name)]
            med = statistics.median(runs)
            tput = 32 * 16 / med
            same = statistics.median(seconds[(workload, "plain-" + name.split("-")[1])])
            default = statistics.median(seconds[(workload, "plain-default")])
            cell = {"workload": workload, "engine": name, "seconds": runs, "median_s": med, "spread": (max(runs) - min(runs)) / med,
                    "output_tok_s": tput, "vs_plain_same_mode": same / med, "vs_plain_default": default / med}
            result["cells"].append(cell)
            print(f"{workload:<9} {name:<16} {med:>8.2f} {cell['spread']:>7.0%} {tput:>10.1f} {cell['vs_plain_same_mode']:>19.1%} "
                  f"{cell['vs_plain_default']:>17.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    shutil.rmtree(policy_dir, ignore_errors=True)
    for name, engine in engines.items():
        if name.startswith("guarded"):
            engine.shutdown()
        else:
            engine.llm_engine.engine_core.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

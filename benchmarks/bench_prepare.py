"""Benchmark: what GuardedLLM does to a batch before the engine sees it
(render, tokenize with offsets, locate spans, text signals, wire arguments)
against plain vLLM's rendering and tokenizing of the same batch.

    .venv/bin/python benchmarks/bench_prepare.py [--requests 256] [--rounds 7]

SmolLM2-135M-Instruct's tokenizer and the shipped policies (``policies/``,
the operator's selection), chat requests of a one-line system instruction
and a ~480-token user document, fresh text every round. No engine: this is
the host work that runs before the first request reaches vLLM. Prints the
best round of each (the machine is noisy); not a timed test.
"""
from __future__ import annotations

import argparse
import random
import time

from innerguard.engine.compiler import compile_policies
from innerguard.engine.models import prepare as prepare_model
from innerguard.engine.requests import GuardRequest, prepare_many

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now").split()


def conversations(seed: int, n: int, words: int = 430) -> list[list[dict]]:
    rnd = random.Random(seed)
    return [[{"role": "system", "content": "Summarize the document."},
             {"role": "user", "content": " ".join(rnd.choice(WORDS) for _ in range(words))}] for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    model = prepare_model("smollm2-135m-instruct")
    plan, _ = compile_policies(["policies"], model)
    tokenizer = AutoTokenizer.from_pretrained(model)

    def plain(batch):
        texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in batch]
        return tokenizer(texts, add_special_tokens=False)["input_ids"]

    def guarded(batch):
        requests = [GuardRequest(id=str(i), messages=tuple(c)) for i, c in enumerate(batch)]
        prepared = list(prepare_many(plan, requests, tokenizer, share_prefix_cache=True, share_token_scores=True))
        assert not [p.error for p in prepared if p.error], "a request failed to prepare"
        return prepared

    times: dict[str, list[float]] = {"plain": [], "guarded": []}
    for r in range(args.rounds + 1):  # round 0 warms up
        batch = conversations(r, args.requests)
        for name, fn in (("plain", plain), ("guarded", guarded)) if r % 2 else (("guarded", guarded), ("plain", plain)):
            t = time.perf_counter()
            fn(batch)
            if r:
                times[name].append(time.perf_counter() - t)
    tokens = sum(len(ids) for ids in plain(conversations(0, args.requests)))
    print(f"{args.requests} requests, {tokens / args.requests:.0f} prompt tokens each, policies {sorted(p.name for p in plan.policies)}")
    for name, ts in times.items():
        print(f"{name:8s} best {min(ts):.3f} s  median {sorted(ts)[len(ts) // 2]:.3f} s  ({len(ts)} rounds)")


if __name__ == "__main__":
    main()

"""The cost of output rules on the CPU: plain vLLM against a guarded engine,
exactly two engines in a run, side by side.

    .venv/bin/python benchmarks/bench_output_rules.py [--requests 16] [--max-tokens 96] [--rounds 6] [--json out.json]
        [--prompt-words N]   (each user message carries N words of a real benign document, not a one-line request)

One run measures up to three pairs (--pairs), each with its own guarded engine:
  control   plain vLLM vs a guarded engine whose one policy selects no request
            (it must read 98-100 % of plain, or the setup is biased)
  output    plain vLLM vs a guarded engine whose output rule (a text signal on
            the generated text, never matched) reads every step of every request
  decode    plain vLLM vs a guarded engine whose decode rule (a token probe on the
            generated tokens, the shipped injection probe's 9 layers, window 16, read
            by a stop rule that never fires) scores every generated token in the worker
  focus     plain vLLM vs a guarded engine whose decode rule reads an attention tracker
            on the generated tokens (the shipped injection heads: 54 heads at 21 layers,
            toward the system prompt, window 8, a stop rule that never fires)
Both engines run in vLLM's default mode, greedy, ``ignore_eos`` (every request
writes --max-tokens tokens). Rounds alternate which engine goes first; every
round sends prompts neither engine has seen (no prefix-cache help). A stop in
a speed run would shorten the work: stops are counted and must be 0. The
figure is generated tokens per second, guarded / plain, the geometric mean of
the rounds' ratios; the offline batch has no per-token latency to report.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

# An output rule no model writes its way into: every step is read, nothing
# stops (bench_serve.py and bench_gpu.py measure the same rule).
OUTPUT_RULE = """\
signals:
  never:
    analyzer: text
    pattern: "QQQ-[0-9]+-never-written"
    span: generated
rules:
  - id: stop-never
    when: never
    action: stop
"""
POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: bench-output, version: 1.0.0, owner: benchmarks}}
{selector}
""" + OUTPUT_RULE.replace("{", "{{").replace("}", "}}")

# A decode rule: the worker scores every generated token; the threshold is out of reach.
DECODE_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: bench-decode, version: 1.0.0, owner: benchmarks}
signals:
  drifting:
    analyzer: token_probe
    layers: [3, 6, 9, 12, 15, 18, 21, 24, 27]
    span: generated
    window: 16
    weights: {artifact: artifacts/smollm2-135m-instruct.injection-token-probe.safetensors}
rules:
  - id: stop-drifting
    when: drifting > 1000
    action: stop
"""
# A decode rule on attention: each generated token's share toward the system prompt.
FOCUS_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: bench-focus, version: 1.0.0, owner: benchmarks}
spans:
  trusted: {roles: [system]}
  untrusted: {roles: [user]}
signals:
  reading:
    analyzer: attention_tracker
    span: generated
    toward: trusted
    window: 8
    heads: {artifact: artifacts/smollm2-135m-instruct.injection-heads.safetensors}
rules:
  - id: stop-reading
    when: reading >= 1.0
    action: stop
"""
SHIPPED = Path(__file__).resolve().parents[1] / "policies"

TOPICS = ("a lighthouse keeper", "a bakery at dawn", "a lost umbrella", "a train through the mountains",
          "a chess club", "a garden in winter", "a river town", "an old radio")


# Long prompts: benign third-party documents of the prompt-injection fit split (label 0), one per request.
DOCUMENTS = Path(__file__).resolve().parents[1] / "data" / "injection" / "real-fit.jsonl"


def documents(words: int) -> list[str]:
    """Every benign document of at least ``words`` words, cut to that many."""
    found = []
    for line in DOCUMENTS.read_text().split("\n"):
        if line.strip():
            row = json.loads(line)
            text = (row.get("data") or "").split()
            if row.get("label") == 0 and len(text) >= words:
                found.append(" ".join(text[:words]))
    return found


def _conversations(round_: int, n: int, docs: list[str] | None = None) -> list[list[dict]]:
    if docs:  # a different document for each request of each round: no prefix-cache help past the system prompt
        return [[{"role": "system", "content": "You are a helpful assistant."},
                 {"role": "user", "content": f"Summarise document {round_}-{i}.\n\n{docs[round_ * n + i]}"}]
                for i in range(n)]
    return [[{"role": "system", "content": "You are a helpful assistant."},
             {"role": "user", "content": f"Story {round_}-{i}: write about {TOPICS[i % len(TOPICS)]}, "
                                         f"chapter {round_ * 1000 + i}."}] for i in range(n)]


def _timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _pair(name: str, first_round: int, plain, guarded, params, args) -> dict:
    ratios, stops, prompt_tokens = [], 0, []
    for r in range(args.rounds):
        conversations = _conversations(first_round + r, args.requests, args.docs)
        order = ("plain", "guarded") if r % 2 == 0 else ("guarded", "plain")
        seconds, tokens = {}, {}
        for which in order:
            if which == "plain":
                outs, seconds[which] = _timed(lambda: plain.chat(conversations, params, use_tqdm=False))
                tokens[which] = sum(len(o.outputs[0].token_ids) for o in outs)
                prompt_tokens.append(sum(len(o.prompt_token_ids) for o in outs) / len(outs))
            else:
                outs, seconds[which] = _timed(lambda: guarded.chat(conversations, params))
                tokens[which] = sum(len(o.token_ids) for o in outs)
                stops += sum(o.action == "stop" or o.blocked for o in outs)
        ratio = (tokens["guarded"] / seconds["guarded"]) / (tokens["plain"] / seconds["plain"])
        ratios.append(ratio)
        print(f"{name} round {r + 1}: plain {tokens['plain'] / seconds['plain']:.1f} tok/s, "
              f"guarded {tokens['guarded'] / seconds['guarded']:.1f} tok/s, {100 * ratio:.1f} %", flush=True)
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return {"pair": name, "ratio": mean, "rounds": ratios, "stopped_or_blocked": stops,
            "mean_prompt_tokens": sum(prompt_tokens) / len(prompt_tokens)}


def policy_folder(folder: Path, pair: str) -> None:
    if pair in ("decode", "focus"):
        (folder / "artifacts").mkdir()
        kind = "token-probe" if pair == "decode" else "heads"
        artifact = f"smollm2-135m-instruct.injection-{kind}.safetensors"
        shutil.copy(SHIPPED / "artifacts" / artifact, folder / "artifacts" / artifact)
        (folder / f"bench-{pair}.yaml").write_text(DECODE_POLICY if pair == "decode" else FOCUS_POLICY)
    else:
        selector = "applies_to: {tags: [never-sent]}" if pair == "control" else ""
        (folder / "bench-output.yaml").write_text(POLICY.format(selector=selector))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=16, help="requests per round and engine")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens each request generates")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per pair (order alternates)")
    parser.add_argument("--pairs", nargs="+", default=["control", "output"], choices=["control", "output", "decode", "focus"])
    parser.add_argument("--prompt-words", type=int, default=0,
                        help="user messages of this many words of a real document (default: one-line requests)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    args.docs = documents(args.prompt_words) if args.prompt_words else None
    if args.docs is not None and len(args.docs) < args.rounds * args.requests * len(args.pairs):
        parser.error(f"only {len(args.docs)} documents have {args.prompt_words} words; "
                     f"a run needs {args.rounds * args.requests * len(args.pairs)}: ask for fewer words")

    from vllm import SamplingParams

    from innerguard.engine import models
    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    model_dir = models.prepare("smollm2-135m-instruct")
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    plain = start_llm(**engine_kwargs(str(model_dir), eager=False))
    results = []
    for index, name in enumerate(args.pairs):
        with tempfile.TemporaryDirectory() as folder:
            policy_folder(Path(folder), name)
            guarded = GuardedLLM(model_dir, folder)
            try:
                results.append(_pair(name, index * args.rounds, plain, guarded, params, args))  # fresh prompts for every round
            finally:
                guarded.shutdown()
    for r in results:
        print(f"{r['pair']}: guarded / plain = {100 * r['ratio']:.1f} % "
              f"(rounds {', '.join(f'{100 * x:.1f}' for x in r['rounds'])}); stopped or blocked: {r['stopped_or_blocked']}; "
              f"prompts of {r['mean_prompt_tokens']:.0f} tokens on average")
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "docs"}
        Path(args.json).write_text(json.dumps({"config": config, "results": results}, indent=2))
    return 0 if all(r["stopped_or_blocked"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

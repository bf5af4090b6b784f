#!/usr/bin/env python3
"""The guard on a GPU: guarded vs plain vLLM throughput, each engine in its
own process, on a random-weight 1.5B-shaped Llama in bfloat16.

    python benchmarks/bench_gpu.py make WORKDIR --tokenizer DIR   # model + policies
    python benchmarks/bench_gpu.py all WORKDIR [--modes ...]      # one process per mode, JSON summary
    python benchmarks/bench_gpu.py MODE WORKDIR                   # one mode
    python benchmarks/bench_gpu.py MODE WORKDIR --profile FILE    # one round under cProfile, engine in-process
    python benchmarks/bench_gpu.py paired WORKDIR --rounds N      # plain and guarded default in one process,
                                                                  # N pairs of rounds in alternating order
    python benchmarks/bench_gpu.py paired WORKDIR --modes plain-default plain-piecewise guarded-unguarded guarded-default
                                                                  # more engines side by side, each against plain-default
    python benchmarks/bench_gpu.py all WORKDIR --tp 2 --compare-with TP1/summary.json
                                                                  # tensor parallel 2, its focus vs TP=1's

Workload: 256 requests a round (BENCH_REQUESTS; use 640 on an H100, where 256 is too short to time),
each a ~480-token document under a one-line system
instruction (fresh text every round, so no round is served from the prefix
cache of the one before), 128 greedy output tokens with ``ignore_eos``; one
warm-up batch of 16, then the median of ``--rounds`` timed batches. Guarded
requests run two policies: an attention tracker on 48 heads over 18 layers
(flags only, so nothing is blocked and both engines generate the same number
of tokens) and an unconditional steer of one layer on every generated token.

Modes:
  plain-default     vLLM's default (compiled, CUDA graphs FULL_AND_PIECEWISE)
  plain-piecewise   compiled, piecewise CUDA graphs split like a guarded engine
  plain-eager       enforce_eager
  guarded-default   GuardedLLM's default (compiled, piecewise CUDA graphs split at the guard points)
  guarded-eager     GuardedLLM with enforce_eager
  guarded-unguarded GuardedLLM's default, its requests selecting no policy: what the guarded
                    engine costs before any request is guarded
  guarded-probe     GuardedLLM's default, its requests selecting only a token probe on every
                    fourth layer (window 16, random weights; flags only, never blocks)
  guarded-output    GuardedLLM's default, its requests selecting only an output rule: a text
                    signal on the generated text, read after every step, that never matches
                    (issue 35: the cost of watching what the model writes)
  guarded-decode    GuardedLLM's default, its requests selecting only a decode rule: a token
                    probe on the generated tokens (every fourth layer, window 16, random
                    weights) read by a stop rule after every token; never fires (issue 35)
  guarded-focus     GuardedLLM's default, its requests selecting only a decode rule on
                    attention: each generated token's share of the 48 tracked heads' span
                    attention toward the system prompt, window 8, read by a stop rule after
                    every token; never fires (issue 35)

Made for an H200 with the offline vLLM 0.24 kit (``../shared/gpukit``) and an
innerguard wheel installed; the model is random, so the figures are about
speed, not text.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output_rules import OUTPUT_RULE  # noqa: E402  (the same output rule as the CPU benchmarks)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN = 28, 1536, 12, 2, 8960
TRACKED_HEADS = [[layer, head] for layer in range(10, 28) for head in (0, 5, 9)][:48]
STEER_LAYER = 14
# BENCH_REQUESTS: requests per round. At 256 a round takes ~2 s on an H100
# and single V2 pairs ranged 75-122 %; at 640 (~4 s) within a few points
# (benchmarks/README.md, session 28).
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "256"))
OUTPUT_TOKENS, DOC_WORDS = 128, 430
PROBE_LAYERS = list(range(3, LAYERS, 4))
MODES = ("plain-default", "plain-piecewise", "plain-eager", "guarded-default", "guarded-eager", "guarded-unguarded",
         "guarded-probe", "guarded-output", "guarded-decode", "guarded-focus")
POLICIES_OF = {"guarded-unguarded": [], "guarded-probe": ["probe"], "guarded-output": ["output"],
               "guarded-decode": ["decode"], "guarded-focus": ["focus"]}  # default: ["injection", "steer"]
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now").split()


def _policy(name: str, description: str, body: str, spans: bool = True) -> str:
    """A bench policy: the shared header, then its signals and rules."""
    head = (f"apiVersion: innerguard/v1\nkind: Policy\n"
            f"metadata: {{name: {name}, version: 1.0.0, owner: bench, description: {json.dumps(description)}}}\n"
            "mode: enforce\non_error: fail-open\n")
    if spans:
        head += "spans:\n  trusted: {roles: [system]}\n  untrusted: {roles: [user]}\n"
    return head + body


def _token_probe(span: str, action: str) -> str:
    """A token probe on every fourth layer (random weights) and a rule on it
    whose threshold is out of reach: it never fires, so the engine pays for
    the probe and generates every token."""
    return f"""\
signals:
  scored:
    analyzer: token_probe
    layers: {json.dumps(PROBE_LAYERS)}
    span: {span}
    window: 16
    weights: {{artifact: artifacts/probe.safetensors}}
rules:
  - {{id: {action}-scored, when: scored > 1000, action: {action}}}
"""


POLICIES = {
    "injection.yaml": _policy("injection", "attention-tracker focus on 48 heads; flags only", f"""\
signals:
  focus:
    analyzer: attention_tracker
    heads: {json.dumps(TRACKED_HEADS)}
rules:
  - id: flag-low-focus
    when: focus < 0.01
    action: flag
"""),
    "steer.yaml": _policy("steer", "one steered layer on every generated token", f"""\
rules:
  - id: always-steer
    when: true
    action: steer
    steer:
      vector: {{artifact: artifacts/steer.safetensors, key: vector}}
      layer: {STEER_LAYER}
      coefficient: 0.5
      positions: generated
      method: add
""", spans=False),
    # The threshold is out of reach of a random probe: the rule never fires,
    # so the engine pays for the probe and generates every token.
    "probe.yaml": _policy("probe", "token probe on every fourth layer; flags only",
                          _token_probe(span="untrusted", action="flag")),
    "output.yaml": _policy("output", "an output rule read after every step; never matches", OUTPUT_RULE, spans=False),
    "decode.yaml": _policy("decode", "a token probe on every generated token, read by a stop rule that never fires",
                           _token_probe(span="generated", action="stop"), spans=False),
    # A share of 1.0 needs no attention at all on the user's message: never reached.
    "focus.yaml": _policy("focus", "attention toward the system prompt on every generated token; never fires", f"""\
signals:
  reading:
    analyzer: attention_tracker
    span: generated
    toward: trusted
    window: 8
    heads: {json.dumps(TRACKED_HEADS)}
rules:
  - id: stop-reading
    when: reading >= 1.0
    action: stop
"""),
}


def make(work: Path, tokenizer: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from innerguard.engine import models

    model_dir = work / "llama-1.5b-random"
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer / name, model_dir / name)
    config = LlamaConfig(
        vocab_size=len(AutoTokenizer.from_pretrained(model_dir)), hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=4096, initializer_range=0.02, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)
    policy_dir = work / "policies"
    (policy_dir / "artifacts").mkdir(parents=True, exist_ok=True)
    for name, text in POLICIES.items():
        (policy_dir / name).write_text(text)
    fingerprint = models.read_geometry(model_dir).fingerprint
    vector = torch.randn(HIDDEN, generator=torch.Generator().manual_seed(2))
    save_file({"vector": (vector / vector.norm()).contiguous()}, str(policy_dir / "artifacts" / "steer.safetensors"),
              metadata={"model_name": model_dir.name, "hidden_size": str(HIDDEN), "layer": str(STEER_LAYER),
                        "model_fingerprint": fingerprint})
    generator = torch.Generator().manual_seed(3)
    weights = {f"weight.{layer}": torch.randn(HIDDEN, generator=generator) / HIDDEN ** 0.5 for layer in PROBE_LAYERS}
    weights["bias"] = torch.zeros(1)
    save_file(weights, str(policy_dir / "artifacts" / "probe.safetensors"),
              metadata={"format": "innerguard.artifact/v1", "model_name": model_dir.name, "hidden_size": str(HIDDEN),
                        "layers": ",".join(map(str, PROBE_LAYERS)), "window": "16", "model_fingerprint": fingerprint})
    print(f"made {model_dir} and {policy_dir}", flush=True)


def rows(seed: int, n: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"id": f"r{seed}-{i}", "instruction": "Summarize the document.",
             "data": " ".join(rnd.choice(WORDS) for _ in range(DOC_WORDS)), "max_tokens": OUTPUT_TOKENS}
            for i in range(n)]


def engine_settings() -> dict:
    return {"dtype": "bfloat16", "gpu_memory_utilization": float(os.environ.get("BENCH_MEMORY", "0.6")),
            "max_model_len": 2048, "seed": 0,
            "tensor_parallel_size": int(os.environ.get("BENCH_TP", "1"))}


def engine(mode: str, work: Path):
    """(generate, result): ``generate(batch)`` runs a batch on a new engine
    of ``mode`` and returns (output tokens, checks)."""
    from vllm import SamplingParams

    model_dir = str(work / "llama-1.5b-random")
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    started = time.perf_counter()
    result: dict = {"mode": mode, "runner_v2": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
                    "tensor_parallel_size": engine_settings()["tensor_parallel_size"]}
    if mode.startswith("plain"):
        from vllm import LLM

        from innerguard.engine.vllm_engine import guarded_compilation_config

        extra = {"enforce_eager": True} if mode == "plain-eager" else {}
        if mode == "plain-piecewise":
            extra["compilation_config"] = guarded_compilation_config()
        llm = LLM(model=model_dir, **engine_settings(), **extra)
        tokenizer = llm.get_tokenizer()

        def prompts(batch):
            # Rendered, then tokenized in one call, as GuardedLLM does: the
            # two engines get the same preparation, so the ratio is the guard's.
            texts = [tokenizer.apply_chat_template(
                [{"role": "system", "content": r["instruction"]}, {"role": "user", "content": r["data"]}],
                add_generation_prompt=True, tokenize=False) for r in batch]
            return [{"prompt_token_ids": ids} for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]

        def generate(batch):
            t = time.perf_counter()
            ready = prompts(batch)
            prepare_s = time.perf_counter() - t
            outs = llm.generate(ready, params, use_tqdm=False)
            return sum(len(o.outputs[0].token_ids) for o in outs), {"prepare_s": round(prepare_s, 4)}

        config = llm.llm_engine.vllm_config
    else:
        from innerguard.engine.guarded import GuardedLLM

        selected = POLICIES_OF.get(mode, ["injection", "steer"])
        g = GuardedLLM(model_dir, [str(work / "policies")], **engine_settings(),
                       **({"enforce_eager": True} if mode == "guarded-eager" else {}))

        def generate(batch):
            outs = g.run([{**r, "policies": selected} for r in batch], params)
            errors = [o.error for o in outs if o.error]
            actions = sorted({o.action for o in outs})
            focus = {o.id: o.signals.get("injection.focus") for o in outs}
            return sum(o.num_output_tokens for o in outs), {
                "errors": len(errors), "first_error": errors[0] if errors else None, "actions": actions,
                "blocked": sum(o.blocked for o in outs), "stopped": sum(o.action == "stop" for o in outs),
                "decided_with_focus": sum(f is not None for f in focus.values()),
                "decided_with_probe": sum(o.signals.get("probe.scored") is not None for o in outs),
                "decode_scored": sum(bool(o.decode_scores) for o in outs), "focus": focus}

        config = g.llm.llm_engine.vllm_config
        result["kv_read_back"] = {k: g.install_info.get(k) for k in ("reads_kv_cache", "kv_canary_cached_tokens")}
    compilation = config.compilation_config
    result["start_s"] = round(time.perf_counter() - started, 1)
    result["cudagraph_mode"] = str(getattr(compilation, "cudagraph_mode", None))
    result["enforce_eager"] = bool(config.model_config.enforce_eager)
    # Every round's prompts are fresh text, but all share the chat template's
    # head: with prefix caching on, that much of each prompt is a hit.
    result["prefix_caching"] = getattr(config.cache_config, "enable_prefix_caching", None)
    generate(rows(1000, 16))  # warm-up
    return generate, result


def _timed(mode: str, generate, seed: int) -> tuple[float, int, dict]:
    t = time.perf_counter()
    tokens, check = generate(rows(seed, REQUESTS))
    seconds = time.perf_counter() - t
    shown = {k: v for k, v in check.items() if k != "focus"}
    print(f"[{mode}] round {seed}: {seconds:.2f} s, {tokens} tokens {shown}", flush=True)
    return seconds, tokens, check


def run(mode: str, work: Path, rounds: int, profile: Path | None = None) -> dict:
    generate, result = engine(mode, work)
    if profile is not None:
        return _profiled(generate, profile, result)
    times, checks = [], []
    for r in range(rounds):
        seconds, tokens, check = _timed(mode, generate, r)
        times.append(seconds)
        result["output_tokens"] = tokens
        focus = check.pop("focus", None)
        if r == 0 and focus is not None:
            result["focus_round_0"] = focus  # same prompts at any TP size: compared by --compare-with
        checks.append(check)
    result["seconds"] = [round(x, 3) for x in times]
    result["median_s"] = round(statistics.median(times), 3)
    result["out_tok_s"] = round(REQUESTS * OUTPUT_TOKENS / statistics.median(times), 1)
    result["checks"] = checks
    return result


def paired(work: Path, pairs: int, modes: list[str]) -> dict:
    """``modes`` (plain-default first) side by side in one process (each
    engine holds ``BENCH_MEMORY`` of the GPU), timed in alternating order on
    the same batches: a host that slows down for a while slows all of them.
    Each mode's ratio is plain-default's time over its own, per round."""
    if modes[0] != "plain-default":
        raise SystemExit("paired: the first mode must be plain-default, the one the others are compared with")
    engines = {mode: engine(mode, work) for mode in modes}
    times: dict[str, list[float]] = {mode: [] for mode in engines}
    checks: dict[str, list] = {mode: [] for mode in engines}
    for p in range(pairs):
        order = list(engines) if p % 2 == 0 else list(reversed(engines))
        for mode in order:
            seconds, _, check = _timed(mode, engines[mode][0], p)
            check.pop("focus", None)
            times[mode].append(seconds)
            checks[mode].append(check)
    plain = times["plain-default"]
    ratios = {m: [a / b for a, b in zip(plain, t)] for m, t in times.items() if m != "plain-default"}
    # Plain prepares (renders, tokenizes) the whole batch before its first
    # request runs, as vLLM's LLM.chat does; GuardedLLM overlaps preparing
    # with the engine. Against plain's time without its preparation, the
    # guard gets no credit for that overlap.
    engine_only = [s - c["prepare_s"] for s, c in zip(plain, checks["plain-default"])]
    return {"mode": "paired", "pairs": pairs, "seconds": {m: [round(x, 3) for x in t] for m, t in times.items()},
            "engines": {m: e[1] for m, e in engines.items()}, "checks": checks,
            "ratio_per_pair": {m: [round(r, 4) for r in rs] for m, rs in ratios.items()},
            # Flag-only policies: a blocked request would generate no tokens and flatter the guard.
            "blocked_per_round": {m: [c.get("blocked") for c in cs] for m, cs in checks.items() if m.startswith("guarded")},
            "stopped_per_round": {m: [c.get("stopped") for c in cs] for m, cs in checks.items() if m.startswith("guarded")},
            "median_ratio": {m: round(statistics.median(rs), 4) for m, rs in ratios.items()},
            "ratio_of_medians": {m: round(statistics.median(plain) / statistics.median(t), 4)
                                 for m, t in times.items() if m != "plain-default"},
            "median_ratio_to_plain_without_preparing": {m: round(statistics.median(a / b for a, b in zip(engine_only, t)), 4)
                                                         for m, t in times.items() if m != "plain-default"},
            "out_tok_s": {m: round(REQUESTS * OUTPUT_TOKENS / statistics.median(t), 1) for m, t in times.items()},
            "requests_per_round": REQUESTS}


def _profiled(generate, path: Path, result: dict) -> dict:
    """One round under cProfile; the worker's Python is in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM loads)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    t = time.perf_counter()
    profiler.enable()
    generate(rows(0, REQUESTS))
    profiler.disable()
    result["profiled_s"] = round(time.perf_counter() - t, 3)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    stats.print_stats(r"innerguard|execute_model|sample_tokens|prepare_inputs|_model_forward|propose|update_from_output", 70)
    stats.sort_stats("tottime").print_stats(40)
    path.write_text(text.getvalue())
    return result


def focus_agreement(ours: dict, theirs: dict) -> dict:
    """The focus of the same requests in two runs (e.g. TP=2 vs TP=1): the
    largest difference, and how many would be decided differently by a
    threshold at each decile of ``theirs``."""
    ids = sorted(set(ours) & set(theirs))
    a = [theirs[i] for i in ids]
    b = [ours[i] for i in ids]
    cuts = sorted(a)[len(a) // 10:: max(1, len(a) // 10)][:9]
    return {"requests": len(ids), "max_abs_diff": max(abs(x - y) for x, y in zip(a, b)),
            "decided_differently_at_deciles": {round(t, 6): sum((x < t) != (y < t) for x, y in zip(a, b)) for t in cuts}}


def run_all(work: Path, modes: list[str], rounds: int, timeout: float, out: Path, compare_with: Path | None = None) -> dict:
    summary: dict = {"runs": {}}
    for mode in modes:
        t0 = time.time()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), mode, str(work), "--rounds", str(rounds)],
                              capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        (out / f"{mode}.log").write_text(proc.stdout + proc.stderr)
        found = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        summary["runs"][mode] = found[-1] if found else {"rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]}
        summary["runs"][mode]["wall_s"] = round(time.time() - t0, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"{mode}: {summary['runs'][mode].get('out_tok_s')} tok/s", flush=True)
    base = summary["runs"].get("plain-default", {}).get("out_tok_s")
    if base:
        summary["vs_plain_default"] = {m: round(r["out_tok_s"] / base, 4) for m, r in summary["runs"].items() if r.get("out_tok_s")}
    if compare_with is not None:
        theirs = json.loads(compare_with.read_text())["runs"]
        summary["focus_vs"] = {"other": str(compare_with), **{
            m: focus_agreement(r["focus_round_0"], theirs[m]["focus_round_0"])
            for m, r in summary["runs"].items() if "focus_round_0" in r and "focus_round_0" in theirs.get(m, {})}}
        print("FOCUS " + json.dumps(summary["focus_vs"]), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("SUMMARY " + json.dumps(summary.get("vs_plain_default")), flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("mode", choices=["make", "all", "paired", *MODES])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--tokenizer", type=Path, help="for make: a folder with SmolLM2's tokenizer files")
    parser.add_argument("--modes", nargs="*", help="for all: which modes, in this order (default: every mode); for "
                        "paired: plain-default and the modes to compare with it (default: guarded-default)")
    parser.add_argument("--rounds", type=int, default=2, help="timed batches per mode (median)")
    parser.add_argument("--timeout", type=float, default=420, help="for all: seconds per mode")
    parser.add_argument("--profile", type=Path, help="for one mode: write a cProfile summary of one round here")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="for all: logs and summary.json")
    parser.add_argument("--tp", type=int, default=int(os.environ.get("BENCH_TP", "1")), help="tensor_parallel_size of every engine")
    parser.add_argument("--compare-with", type=Path, help="for all: another run's summary.json; compares the guarded focus values")
    args = parser.parse_args()
    os.environ["BENCH_TP"] = str(args.tp)  # the per-mode processes inherit it
    if args.mode == "make":
        make(args.workdir, args.tokenizer)
    elif args.mode == "all":
        args.out.mkdir(parents=True, exist_ok=True)
        run_all(args.workdir, args.modes or list(MODES), args.rounds, args.timeout, args.out, args.compare_with)
    elif args.mode == "paired":
        modes = args.modes or ["plain-default", "guarded-default"]
        os.environ.setdefault("BENCH_MEMORY", str(round(0.8 / len(modes), 2)))  # every engine on one GPU
        result = paired(args.workdir, args.rounds, modes)
        print("RESULT " + json.dumps(result), flush=True)
        if args.out:
            # Named by runner and modes, so several runs can share one --out folder.
            runner = {"1": "v2", "0": "v1"}.get(os.environ.get("VLLM_USE_V2_MODEL_RUNNER", ""), "default")
            name = "-".join(["paired", runner, *[m for m in modes if m != "plain-default"], str(args.rounds)])
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    else:
        if args.profile is not None:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        print("RESULT " + json.dumps(run(args.mode, args.workdir, args.rounds, args.profile)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""``innerguard serve`` against plain ``vllm serve`` on a GPU, measured by
vLLM's own ``vllm bench serve``.

    python3 scripts/gpu_serve_bench.py make WORKDIR --tokenizer DIR [--shape 8b|tiny]
    python3 scripts/gpu_serve_bench.py run WORKDIR --server plain|null|guarded --out OUT \\
        [--concurrency 256 64 16 1] [--num-prompts 256]
    python3 scripts/gpu_serve_bench.py table OUT     # the README table: each server against plain

The model has Llama 3 8B's shape (32 layers, hidden 4096, 32 query and 8 KV
heads, FFN 14336) in bfloat16, with vLLM's dummy weights (``--load-format
dummy``: random values, no checkpoint to write or read) and SmolLM2's
tokenizer (DIR: its config.json and tokenizer files), so the vocabulary is
49,152, not Llama 3's 128,256: a random model must never sample an id its
tokenizer cannot decode. ``--shape tiny`` is a 4-layer model of the same
layout, to try the script on a CPU.

One server at a time, the same vLLM flags for all; the guarded one runs
three policies of the kinds innerguard ships, all flag-only so that nothing
is blocked and both servers generate the same tokens:
  - a token probe on every fourth layer, window 16, random weights in the
    shipped artifact format (the prompt-injection policy's analyzer);
  - an attention tracker on 48 heads (prompt-injection-attention's);
  - a steer of one layer on every generated token (medical-topic-steer's).
The user message is untrusted, so every prompt token is scored. The null
server is the control: innerguard serve with the same three policies, each
applying only to a tag no request carries, so every hook is installed and
nothing is decided; what it costs is the server's own overhead.

Per concurrency (highest first, so a slow run loses the longest one last):
``vllm bench serve --backend openai-chat --dataset-name random
--random-input-len 480 --random-output-len 128 --ignore-eos``, then the raw
result JSON is kept in OUT. On the guarded server each bench run must raise
every policy's ``innerguard_decisions_total`` by at least the requests it
completed, none blocked; afterwards 16 direct chat requests must each carry
an ``innerguard`` verdict, examples/openai_client.py runs against the
server (its output in OUT/openai_client.txt), and the server log is searched
for tracebacks.
Writes OUT/serve_bench_SERVER.json as it goes.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from gpu_serve_check import Server, copy_tokenizer

SHAPES = {
    # layers, hidden, heads, kv heads, ffn
    "8b": (32, 4096, 32, 8, 14336),
    "tiny": (4, 256, 4, 2, 512),  # head size 64: the smallest vLLM's CPU attention takes
}
MODEL_NAME = "bench"
INPUT_TOKENS, OUTPUT_TOKENS = 480, 128
# What the summary keeps of each vllm bench serve result.
RAW_KEYS = ("completed", "failed", "duration", "total_output_tokens", "output_throughput", "request_throughput",
            "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_tpot_ms", "p99_tpot_ms")
VLLM_FLAGS = ["--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "2048",
              "--served-model-name", MODEL_NAME]


def probe_layers(layers: int) -> list[int]:
    return list(range(3, layers, 4)) or [layers - 1]


def policies(layers: int, heads: int) -> dict[str, str]:
    probed = probe_layers(layers)
    tracked = [[layer, head] for layer in range(layers // 3, layers) for head in range(0, heads, max(1, heads // 3))][:48]
    common = "mode: enforce\non_error: fail-open\nspans: {trusted: {roles: [system]}, untrusted: {roles: [user]}}\n"
    return {
        "probe.yaml": f"""apiVersion: innerguard/v1
kind: Policy
metadata: {{name: probe, version: 1.0.0, owner: bench, description: token probe on every fourth layer; flags only}}
{common}signals:
  injected:
    analyzer: token_probe
    layers: {json.dumps(probed)}
    span: untrusted
    window: 16
    weights: {{artifact: artifacts/probe.safetensors}}
rules:
  - {{id: flag-injected, when: injected > 1000, action: flag}}
""",
        "attention.yaml": f"""apiVersion: innerguard/v1
kind: Policy
metadata: {{name: attention, version: 1.0.0, owner: bench, description: attention tracker on 48 heads; flags only}}
{common}signals:
  focus: {{analyzer: attention_tracker, heads: {json.dumps(tracked)}}}
rules:
  - {{id: flag-low-focus, when: focus < 0.0001, action: flag}}
""",
        "steer.yaml": f"""apiVersion: innerguard/v1
kind: Policy
metadata: {{name: steer, version: 1.0.0, owner: bench, description: one steered layer on every generated token}}
mode: enforce
on_error: fail-open
rules:
  - id: always-steer
    when: true
    action: steer
    steer:
      vector: {{artifact: artifacts/steer.safetensors, key: vector}}
      layer: {layers // 2}
      coefficient: 0.5
      positions: generated
      method: add
""",
    }


def make(work: Path, tokenizer: Path, shape: str) -> None:
    import torch
    from safetensors.torch import save_file

    from innerguard.engine import models

    layers, hidden, heads, kv_heads, ffn = SHAPES[shape]
    model_dir = work / f"llama-{shape}-dummy"
    model_dir.mkdir(parents=True, exist_ok=True)
    copy_tokenizer(tokenizer, model_dir)
    source = json.loads((tokenizer / "config.json").read_text())
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
              "vocab_size": source["vocab_size"], "hidden_size": hidden, "intermediate_size": ffn,
              "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "tie_word_embeddings": False, "bos_token_id": source.get("bos_token_id", 1),
              "eos_token_id": source.get("eos_token_id", 2)}
    (model_dir / "config.json").write_text(json.dumps(config, indent=1))
    folder = work / "policies"
    (folder / "artifacts").mkdir(parents=True, exist_ok=True)
    for name, text in policies(layers, heads).items():
        (folder / name).write_text(text)
    fingerprint = models.read_geometry(model_dir).fingerprint
    generator = torch.Generator().manual_seed(0)
    probed = probe_layers(layers)
    weights = {f"weight.{layer}": torch.randn(hidden, generator=generator) / hidden ** 0.5 for layer in probed}
    weights["bias"] = torch.zeros(1)
    save_file(weights, str(folder / "artifacts" / "probe.safetensors"),
              metadata={"format": "innerguard.artifact/v1", "model_name": model_dir.name, "hidden_size": str(hidden),
                        "layers": ",".join(map(str, probed)), "window": "16", "model_fingerprint": fingerprint})
    vector = torch.randn(hidden, generator=generator)
    save_file({"vector": (vector / vector.norm()).contiguous()}, str(folder / "artifacts" / "steer.safetensors"),
              metadata={"format": "innerguard.artifact/v1", "model_name": model_dir.name, "hidden_size": str(hidden),
                        "layer": str(layers // 2), "model_fingerprint": fingerprint})
    print(f"made {model_dir} (Llama, {shape}: {layers} layers, hidden {hidden}) and {folder}", flush=True)


def null_policies(work: Path) -> Path:
    """The same policies, each applying only to a tag no request carries: the
    server installs every hook and decides nothing, the benchmark's control."""
    folder = work / "policies-null"
    if not folder.exists():
        shutil.copytree(work / "policies", folder)
        for path in folder.glob("*.yaml"):
            text = path.read_text()
            path.write_text(text.replace("mode: enforce\n", "mode: enforce\napplies_to: {tags: [never-sent]}\n", 1))
    return folder


def server_argv(kind: str, work: Path) -> list[str]:
    model_dir = next(work.glob("llama-*-dummy"))
    if kind == "plain":
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir), *VLLM_FLAGS]
    folder = null_policies(work) if kind == "null" else work / "policies"
    return [sys.executable, "-m", "innerguard.engine.cli", "serve", "--model", str(model_dir), *VLLM_FLAGS,
            "--policies", str(folder), "--watch-interval", "0"]


def decisions(url: str) -> Counter:
    """innerguard_decisions_total from /metrics, by (policy, action)."""
    import httpx

    counts: Counter = Counter()
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("innerguard_decisions_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            counts[(labels["policy"], labels["action"])] += float(line.rsplit(" ", 1)[1])
    return counts


def prefix_cache(url: str) -> dict[str, float]:
    import httpx

    found = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        match = re.match(r"vllm:prefix_cache_(hits|queries)(_total)?(\{[^}]*\})? ([0-9.e+]+)$", line)
        if match:
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(4))
    return found


def bench(server: Server, model_dir: Path, concurrency: int, num_prompts: int, out: Path, bench_cmd: list[str]) -> dict:
    name = f"{out.name}-c{concurrency}.json"
    command = [*bench_cmd, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
               "--base-url", server.url, "--model", MODEL_NAME, "--tokenizer", str(model_dir),
               "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS),
               "--random-output-len", str(OUTPUT_TOKENS), "--ignore-eos", "--num-prompts", str(num_prompts),
               "--max-concurrency", str(concurrency), "--request-rate", "inf", "--seed", str(concurrency),
               "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", str(out.parent), "--result-filename", name]
    t0 = time.time()
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    (out.parent / f"{out.name}-c{concurrency}.log").write_text(run.stdout[-20000:] + run.stderr[-20000:])
    if run.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {run.returncode}: {run.stderr[-1500:]}")
    raw = json.loads((out.parent / name).read_text())
    return {"concurrency": concurrency, "wall_s": round(time.time() - t0, 1), **{k: raw.get(k) for k in RAW_KEYS}}


def direct_verdicts(server: Server, count: int = 16) -> dict:
    import httpx

    carried = 0
    for i in range(count):
        body = {"model": MODEL_NAME, "max_tokens": 8,
                "messages": [{"role": "system", "content": "Summarise the text."},
                             {"role": "user", "content": f"Request {i}: the parcel arrived on time and intact."}]}
        reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
        carried += isinstance(reply.get("innerguard"), dict) and reply["innerguard"].get("verdict") is not None
    return {"sent": count, "with_verdict": carried}


def openai_client(server: Server, out: Path) -> dict:
    """examples/openai_client.py, the README's client, against this server."""
    example = Path(__file__).resolve().parent.parent / "examples" / "openai_client.py"
    done = subprocess.run([sys.executable, str(example), "--base-url", f"{server.url}/v1", "--model", MODEL_NAME],
                          capture_output=True, text=True, timeout=300)
    (out / "openai_client.txt").write_text(done.stdout + done.stderr)
    return {"rc": done.returncode, "verdict_lines": done.stdout.count("verdict=")}


def run(args) -> int:
    import vllm

    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / f"serve_bench_{args.server}.json"
    summary: dict = {"server": args.server, "vllm": vllm.__version__, "date": time.strftime("%Y-%m-%d"),
                     "input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "num_prompts": args.num_prompts,
                     "runs": [], "checks": {}}

    def save():
        summary_path.write_text(json.dumps(summary, indent=1))

    argv = server_argv(args.server, args.workdir)
    argv += shlex.split(args.server_args)  # both servers: the same flags
    t0 = time.time()
    server = Server(argv, args.out / f"serve_bench_{args.server}.log")
    summary["command"] = " ".join(server.command)
    try:
        started = server.wait_ready(args.start_timeout)
        summary["start_s"] = round(time.time() - t0, 1)
        summary["checks"]["started"] = started
        save()
        if not started:
            summary["tail"] = server.tail()
            return 1
        model_dir = next(args.workdir.glob("llama-*-dummy"))
        for concurrency in args.concurrency:
            before = decisions(server.url) if args.server == "guarded" else Counter()
            result = bench(server, model_dir, concurrency, args.num_prompts, args.out / args.server,
                           shlex.split(args.bench_cmd))
            if args.server == "guarded":
                grew = decisions(server.url) - before
                result["decisions"] = {f"{p}/{a}": n for (p, a), n in sorted(grew.items())}
                per_policy = Counter()
                for (policy, _action), n in grew.items():
                    per_policy[policy] += n
                result["every_request_decided"] = (len(per_policy) == 3
                                                   and min(per_policy.values()) >= result["completed"])
                result["blocked"] = sum(n for (_p, a), n in grew.items() if a == "block")
            summary["runs"].append(result)
            print(f"[{args.server}] c={concurrency}: {result['output_throughput']:.0f} tok/s, "
                  f"TTFT p50 {result['median_ttft_ms']:.1f} ms", flush=True)
            save()
        summary["prefix_cache"] = prefix_cache(server.url)
        if args.server == "guarded":
            summary["checks"]["direct"] = direct_verdicts(server)
            summary["checks"]["openai_client"] = openai_client(server, args.out)
            summary["checks"]["every_request_decided"] = all(r["every_request_decided"] for r in summary["runs"])
            summary["checks"]["none_blocked"] = not any(r["blocked"] for r in summary["runs"])
    except Exception as exc:  # reported in the summary, which still comes back
        summary["exception"] = f"{type(exc).__name__}: {exc}"
        summary["tail"] = server.tail()
    finally:
        server.stop()
        log = server.log_path.read_text(errors="replace")
        summary["log_tracebacks"] = log.count("Traceback (most recent call last)")
        summary["total_s"] = round(time.time() - t0, 1)
        save()
    return 0 if "exception" not in summary and summary["log_tracebacks"] == 0 else 1


def summary_of(out: Path, server: str) -> dict:
    """OUT/serve_bench_SERVER.json, or, where only vllm bench serve's raw
    results came back from the device, the runs rebuilt from those."""
    path = out / f"serve_bench_{server}.json"
    if path.exists():
        return json.loads(path.read_text())
    runs = []
    for raw_path in sorted(out.glob(f"{server}-c*.json")):
        raw = json.loads(raw_path.read_text())
        runs.append({"concurrency": raw["max_concurrency"], **{k: raw.get(k) for k in RAW_KEYS}})
    if not runs:
        raise SystemExit(f"{out} has neither serve_bench_{server}.json nor {server}-c*.json: run `run --server {server}` first")
    return {"server": server, "runs": runs, "rebuilt_from_raw": True}


def table(out: Path) -> str:
    """guarded (and, where it ran, the null control) against plain, per concurrency."""
    plain = {r["concurrency"]: r for r in summary_of(out, "plain")["runs"]}
    others = [(name, {r["concurrency"]: r for r in summary_of(out, name)["runs"]})
              for name in ("null", "guarded")
              if (out / f"serve_bench_{name}.json").exists() or any(out.glob(f"{name}-c*.json"))]
    lines = ["| concurrency | server | output tok/s | of plain | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |",
             "|---|---|---|---|---|---|"]
    for concurrency in sorted(plain, reverse=True):
        for name, runs in [("plain", plain), *others]:
            run = runs.get(concurrency)
            if run is None:
                continue
            ratio = f"{100 * run['output_throughput'] / plain[concurrency]['output_throughput']:.1f} %"
            lines.append(f"| {concurrency} | {name} | {run['output_throughput']:.0f} | {ratio} | "
                         f"{run['median_ttft_ms']:.1f} / {run['p99_ttft_ms']:.1f} | "
                         f"{run['median_itl_ms']:.2f} / {run['p99_itl_ms']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("workdir", type=Path)
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    p = sub.add_parser("run")
    p.add_argument("workdir", type=Path)
    p.add_argument("--server", choices=("plain", "guarded", "null"), required=True,
                   help="null: innerguard serve with every policy applying to no request (the control)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", type=int, nargs="+", default=[256, 64, 16, 1])
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--start-timeout", type=float, default=400)
    p.add_argument("--server-args", default="", help="more vllm serve flags, the same for both servers (one string)")
    p.add_argument("--bench-cmd", default=f"{sys.executable} -m vllm.entrypoints.cli.main bench serve",
                   help="how to call vllm bench serve (one string)")
    p = sub.add_parser("table")
    p.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "make":
        make(args.workdir, args.tokenizer, args.shape)
        return 0
    if args.command == "table":
        print(table(args.out))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

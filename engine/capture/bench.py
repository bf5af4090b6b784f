"""The capture benchmark grid: plain vLLM vs innerguard, one run, same
prompts, same engine settings (eager, float32, greedy, ``ignore_eos``).

Configurations: ``plain`` (no hooks), last-token and all-token capture of
1 layer, 4 layers, half the layers, all layers (recording engine, hooks
installed per cell and removed after), and on a guarded engine the
detection-only policy (attention tracker on 10 heads) and the steering-only
policy (one layer, every generated token). Prompt lengths ~16/64/256/512
tokens. Rounds alternate between configurations; each cell reports the
median over rounds and the spread (max-min over median).

Figures per cell: per-request latency (submission to finish; for the guarded
cells, the batch's wall time: all requests are submitted together and end in
the same step), output tokens per second, tensor bytes on disk per request,
and the worker's peak resident memory during the cell.
"""
from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from innerguard.engine.contract import RPC_RECORD_STATS

POOL = ("The cat sat on the mat all day and watched the birds outside. Quarterly revenue rose four percent, "
        "driven by strong sales in Europe. The recipe needs two eggs, a cup of flour and a pinch of salt. "
        "Our meeting moved to Thursday at ten; please bring the slides. Rain is expected tomorrow across the "
        "northern region. The museum opens a new exhibition on ancient maps next week. ").split()
INJECTION_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: injection, version: 1.0.0, owner: bench, description: Attention-tracker detection on ten heads.}
mode: enforce
on_error: fail-closed
spans:
  trusted: {roles: [system]}
  untrusted: {roles: [user]}
signals:
  focus:
    analyzer: attention_tracker
    heads: [[13, 0], [13, 4], [14, 2], [15, 1], [16, 3], [17, 5], [18, 6], [20, 7], [22, 8], [25, 2]]
rules:
  - {id: block-low-focus, when: focus < 0.05, action: block}
"""
STEER_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {name: steer, version: 1.0.0, owner: bench, description: Adds a vector at layer 6 to generated tokens.}
mode: enforce
on_error: fail-open
rules:
  - id: always-steer
    when: true
    action: steer
    steer:
      vector: {artifact: artifacts/steer.safetensors, key: vector}
      layer: 6
      coefficient: 6.0
      positions: generated
      method: add
"""


@dataclass(frozen=True)
class Config:
    name: str
    kind: str  # plain, capture, guarded
    layers: tuple[int, ...] = ()
    mode: str = "last_token"
    policy: str | None = None


def configs(num_layers: int, quick: bool) -> list[Config]:
    sets = {"1": (num_layers // 2,), "4": tuple(round(i * (num_layers - 1) / 3) for i in range(4)),
            "half": tuple(range(0, num_layers, 2)), "all": tuple(range(num_layers))}
    chosen = ("1", "all") if quick else ("1", "4", "half", "all")
    out = [Config("plain", "plain")]
    for mode, short in (("last_token", "last"), ("all_tokens", "alltok")):
        out += [Config(f"{short}-{k}({len(sets[k])})", "capture", sets[k], mode) for k in chosen]
    out += [Config("detect", "guarded", policy="injection"), Config("steer", "guarded", policy="steer")]
    return out


def make_rows(tokenizer, target: int, n: int, offset: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct instruction/data rows whose chat rendering is about ``target`` tokens."""
    from innerguard.engine.requests import GuardRequest
    from innerguard.engine.requests.spans import render

    rows = []
    for i in range(n):
        start = (offset + 7 * i) % len(POOL)
        words = lambda k: " ".join(POOL[(start + j) % len(POOL)] for j in range(k))  # noqa: E731
        lo, hi = 1, target * 2
        while lo < hi:  # the most words that stay within the target
            mid = (lo + hi + 1) // 2
            row = {"id": str(i), "instruction": "Summarise the text.", "data": words(mid)}
            if len(render(tokenizer, GuardRequest.from_row(row, str(i)), ()).input_ids) <= target:
                lo = mid
            else:
                hi = mid - 1
        rows.append({"id": str(i), "instruction": "Summarise the text.", "data": words(lo)})
    return rows


def _dir_bytes(folder: Path) -> tuple[int, int]:
    tensors = sum(p.stat().st_size for p in folder.glob("shard-*.safetensors"))
    return tensors, sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def run_grid(model: str, *, lengths=(16, 64, 256, 512), requests: int = 8, max_tokens: int = 8, repeats: int = 3,
             quick: bool = False, work: str | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    from vllm import SamplingParams

    from innerguard.engine import models
    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.requests import GuardRequest
    from innerguard.engine.requests.spans import render
    from innerguard.engine.vllm_engine import start_llm
    from innerguard.engine.capture.run import Limits, capture_to_disk, engine_kwargs
    from innerguard.engine.capture.spec import CaptureSpec

    model_dir = models.resolve(model)
    geometry = models.read_geometry(model_dir)
    grid = configs(geometry.num_layers, quick)
    work_dir = Path(work or tempfile.mkdtemp(prefix="ig-capture-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    setup = {"model": str(model_dir), "lengths": list(lengths), "requests": requests, "max_tokens": max_tokens,
             "repeats": repeats, "quick": quick, "engine": "eager, float32, greedy, ignore_eos, unique cache_salt per request"}

    def add(config: str, length: int, sample: dict[str, Any]) -> None:
        samples.setdefault((config, length), []).append(sample)

    # -- the recording engine: plain and capture cells ---------------------------
    llm = start_llm(**engine_kwargs(model_dir))
    tokenizer = llm.get_tokenizer()
    rows = {n: make_rows(tokenizer, n, requests) for n in lengths}
    prompt_tokens = {n: [len(render(tokenizer, GuardRequest.from_row(r, r["id"]), ()).input_ids) for r in rows[n]] for n in lengths}
    setup["prompt_tokens"] = {str(n): statistics.mean(v) for n, v in prompt_tokens.items()}

    def worker_peak(reset: bool) -> int | None:
        return llm.collective_rpc(RPC_RECORD_STATS, kwargs={"reset_peak": reset})[0].get("peak_rss_bytes")

    def plain(length: int) -> dict[str, Any]:
        engine = llm.llm_engine
        run = uuid.uuid4().hex[:8]
        submitted, latencies = {}, []
        started = time.perf_counter()
        for i, r in enumerate(rows[length]):
            ids = list(render(tokenizer, GuardRequest.from_row(r, r["id"]), ()).input_ids)
            rid = f"plain-{run}-{i}"
            submitted[rid] = time.perf_counter()
            engine.add_request(rid, {"prompt_token_ids": ids, "cache_salt": rid}, params.clone())
        while submitted:
            for out in engine.step():
                if out.finished and out.request_id in submitted:
                    latencies.append(time.perf_counter() - submitted.pop(out.request_id))
        return {"wall_s": time.perf_counter() - started, "latency_s": statistics.median(latencies),
                "tensor_bytes": 0, "disk_bytes": 0}

    def captured(config: Config, length: int) -> dict[str, Any]:
        folder = work_dir / f"{config.name}-{length}-{uuid.uuid4().hex[:6]}"
        spec = CaptureSpec(layers=config.layers, mode=config.mode, max_tokens=max_tokens)
        started = time.perf_counter()
        store = capture_to_disk(llm, rows[length], spec, folder, sampling_params=params, limits=Limits())
        wall = time.perf_counter() - started
        tensors, disk = _dir_bytes(folder)
        latencies = [r["latency_s"] for r in store.manifest["requests"]]
        errors = [r["error"] for r in store.manifest["requests"] if r.get("error")]
        if errors:
            raise RuntimeError(f"{config.name} at {length} tokens: {errors[0]}")
        shutil.rmtree(folder)
        return {"wall_s": wall, "latency_s": statistics.median(latencies), "tensor_bytes": tensors, "disk_bytes": disk}

    def measure(config: Config, length: int, fn) -> None:
        worker_peak(True)
        sample = fn()
        sample["worker_peak_rss"] = worker_peak(False)
        sample["output_tok_s"] = requests * max_tokens / sample["wall_s"]
        add(config.name, length, sample)

    for length in lengths:  # warm-up
        plain(length)
    engine_a = [c for c in grid if c.kind != "guarded"]
    for round_ in range(repeats):
        for length in lengths:
            for config in engine_a:
                measure(config, length, (lambda c=config, n=length: plain(n) if c.kind == "plain" else captured(c, n)))
        log(f"round {round_ + 1}/{repeats}: plain and capture cells done")
    llm.llm_engine.engine_core.shutdown()
    del llm

    # -- the guarded engine: detection-only and steering-only policies -------------
    policies = work_dir / "policies"
    (policies / "artifacts").mkdir(parents=True, exist_ok=True)
    (policies / "injection.yaml").write_text(INJECTION_POLICY)
    (policies / "steer.yaml").write_text(STEER_POLICY)
    _steer_vector(policies / "artifacts" / "steer.safetensors", geometry)
    guarded = GuardedLLM(model_dir, policies, enforce_eager=True)  # like the recording engine
    try:
        def guarded_run(config: Config, length: int) -> dict[str, Any]:
            batch = [{**r, "policies": [config.policy]} for r in rows[length]]
            started = time.perf_counter()
            outs = guarded.run(batch, params)
            wall = time.perf_counter() - started
            bad = [o.error for o in outs if o.error]
            if bad:
                raise RuntimeError(f"{config.name}: {bad[0]}")
            return {"wall_s": wall, "latency_s": wall, "tensor_bytes": 0, "disk_bytes": 0}

        def guarded_peak(reset: bool) -> int | None:
            return guarded.llm.collective_rpc(RPC_RECORD_STATS, kwargs={"reset_peak": reset})[0].get("peak_rss_bytes")

        guarded.run([{**r, "policies": ["injection"]} for r in rows[lengths[0]]], params)  # warm-up
        for round_ in range(repeats):
            for length in lengths:
                for config in [c for c in grid if c.kind == "guarded"]:
                    guarded_peak(True)
                    sample = guarded_run(config, length)
                    sample["worker_peak_rss"] = guarded_peak(False)
                    sample["output_tok_s"] = requests * max_tokens / sample["wall_s"]
                    add(config.name, length, sample)
            log(f"round {round_ + 1}/{repeats}: guarded cells done")
    finally:
        guarded.shutdown()
    shutil.rmtree(work_dir, ignore_errors=True)
    return summarise(grid, lengths, samples, setup, requests)


def _steer_vector(path: Path, geometry) -> None:
    import torch
    from safetensors.torch import save_file

    vector = torch.randn(geometry.hidden_size, generator=torch.Generator().manual_seed(2))
    save_file({"vector": (vector / vector.norm()).contiguous()}, str(path),
              metadata={"hidden_size": str(geometry.hidden_size), "layer": "6", "model_fingerprint": geometry.fingerprint})


def summarise(grid, lengths, samples, setup, requests: int) -> dict[str, Any]:
    cells = []
    for length in lengths:
        base = samples.get(("plain", length))
        base_latency = statistics.median(s["latency_s"] for s in base) if base else None
        base_tput = statistics.median(s["output_tok_s"] for s in base) if base else None
        for config in grid:
            runs = samples.get((config.name, length))
            if not runs:
                continue
            lat = [s["latency_s"] for s in runs]
            tput = [s["output_tok_s"] for s in runs]
            med = statistics.median(lat)
            peaks = [s["worker_peak_rss"] for s in runs if s.get("worker_peak_rss")]
            cells.append({
                "config": config.name, "kind": config.kind, "mode": config.mode if config.kind == "capture" else None,
                "layers": len(config.layers), "prompt_tokens": length,
                "latency_s": med, "latency_spread": (max(lat) - min(lat)) / med if med else None,
                "latency_runs": lat,
                "latency_ratio": med / base_latency if base_latency else None,
                "output_tok_s": statistics.median(tput),
                "throughput_ratio": statistics.median(tput) / base_tput if base_tput else None,
                "tensor_bytes_per_request": statistics.median(s["tensor_bytes"] for s in runs) / requests,
                "disk_bytes": statistics.median(s["disk_bytes"] for s in runs),
                "worker_peak_rss_mib": max(peaks) / (1 << 20) if peaks else None,
            })
    return {"setup": setup, "cells": cells}


def render_table(result: dict[str, Any]) -> str:
    s = result["setup"]
    lines = [f"{s['requests']} requests per cell, {s['max_tokens']} output tokens each, median of {s['repeats']} rounds "
             f"({s['engine']}); prompt tokens per length: {s['prompt_tokens']}",
             f"{'config':<16} {'prompt':>6} {'latency s':>10} {'spread':>7} {'x plain':>8} {'out tok/s':>10} "
             f"{'x plain':>8} {'bytes/req':>11} {'worker peak MiB':>16}"]
    for c in result["cells"]:
        lines.append(
            f"{c['config']:<16} {c['prompt_tokens']:>6} {c['latency_s']:>10.3f} {_pct(c['latency_spread']):>7} "
            f"{_x(c['latency_ratio']):>8} {c['output_tok_s']:>10.1f} {_x(c['throughput_ratio']):>8} "
            f"{_bytes(c['tensor_bytes_per_request']):>11} {_num(c['worker_peak_rss_mib']):>16}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str | Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    by_config: dict[str, list[dict[str, Any]]] = {}
    for c in result["cells"]:
        by_config.setdefault(c["config"], []).append(c)
    for name, cells in by_config.items():
        xs = [c["prompt_tokens"] for c in cells]
        style = "--" if name in ("detect", "steer") else ("-" if "last" in name or name == "plain" else ":")
        left.plot(xs, [c["latency_ratio"] for c in cells], style, marker="o", label=name)
        if any(c["tensor_bytes_per_request"] for c in cells):
            right.plot(xs, [c["tensor_bytes_per_request"] / 1024 for c in cells], style, marker="o", label=name)
    lengths = sorted({c["prompt_tokens"] for c in result["cells"]})
    for ax in (left, right):  # one labelled tick per measured length, no log-scale clutter
        ax.set_xscale("log")
        ax.set_xticks(lengths, [f"{x:g}" for x in lengths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    left.axhline(1.10, color="grey", linewidth=0.8)
    left.set(xlabel="prompt tokens", ylabel="latency / plain vLLM", title="latency vs plain (median)")
    right.set(yscale="log", xlabel="prompt tokens", ylabel="KiB per request on disk", title="capture size")
    left.legend(fontsize=7, ncol=2)
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pct(v):
    return "-" if v is None else f"{v:.0%}"


def _x(v):
    return "-" if v is None else f"{v:.2f}x"


def _num(v):
    return "-" if v is None else f"{v:.0f}"


def _bytes(v):
    if not v:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(v)


def write_json(result: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(result, indent=1))

"""Benchmark: linting 100 policy files, and evaluating rules per request.

    .venv/bin/python benchmarks/bench_lint.py [--files 100] [--requests 20000]

Targets (issue 3): 100 files linted in < 1 s without a model; the rules of a
compiled policy set evaluated for one request in < 20 µs. Not a timed test:
it prints a table.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from innerguard.engine.decide import Evaluator
from innerguard.engine.lint import lint_paths
from innerguard.engine.lint import load_policy_set

REPO = Path(__file__).resolve().parents[1]


def make_artifacts(folder: Path) -> None:
    art = folder / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    save_file({"heads": np.array([[13, 2], [15, 4], [20, 6], [24, 0]], dtype=np.int64)},
              str(art / "smollm2-135m-instruct.injection-heads.safetensors"),
              metadata={"model_name": "smollm2-135m-instruct", "num_layers": "30", "num_heads": "9"})
    vector = np.linspace(-1, 1, 576, dtype=np.float32)
    for name, tensors, layer in (("medical-concept", {"vector": vector, "weight": vector}, "16"), ("caution-steer", {"vector": vector}, "8")):
        save_file(tensors, str(art / f"smollm2-135m-instruct.{name}.safetensors"),
                  metadata={"model_name": "smollm2-135m-instruct", "hidden_size": "576", "layer": layer})


def make_policies(folder: Path, count: int) -> None:
    """``count`` files: the shipped policies, renamed, without ``model:`` so
    that no model geometry is read (the "without a model" case)."""
    shipped = sorted((REPO / "policies").glob("*.yaml"))
    for i in range(count):
        source = shipped[i % len(shipped)]
        text = source.read_text()
        name = text.split("  name: ", 1)[1].split("\n", 1)[0]
        text = text.replace(f"  name: {name}\n", f"  name: {name}-{i:03d}\n", 1)
        text = text.replace("model: smollm2-135m-instruct\n", "")
        text = text.replace("layer: 8\n      coefficient", "layer: 8\n      coefficient")
        (folder / f"{i:03d}-{source.name}").write_text(text)


def bench_lint(count: int, repeats: int = 5) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_artifacts(folder)
        make_policies(folder, count)
        lint_paths([folder])  # warm imports and caches once
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            report = lint_paths([folder])
            times.append(time.perf_counter() - start)
        return min(times), len(report.files), report.errors


def bench_decide(requests: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for f in (REPO / "policies").glob("*.yaml"):
            shutil.copy(f, folder / f.name)
        make_artifacts(folder)
        policies, _ = load_policy_set([folder])
    evaluator = Evaluator(policies.programs())
    benign = {
        "prompt-injection.focus": 0.81, "prompt-injection.override_phrase": False,
        "medical-topic-steer.medical": 0.12, "rag-relevance.relevance": [0.62, 0.2, 0.05, 0.4],
    }
    blocked = {**benign, "prompt-injection.focus": 0.2, "prompt-injection.override_phrase": True}
    request = {"tags": ["rag"], "tenant": "acme"}
    out = {}
    for label, signals in (("allow/rerank (3 policies)", benign), ("block + message (3 policies)", blocked)):
        for _ in range(1000):
            evaluator.evaluate(signals, request)
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(requests):
                evaluator.evaluate(signals, request)
            samples.append((time.perf_counter() - start) / requests * 1e6)
        out[label] = min(samples)
        out[label + " median"] = statistics.median(samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    seconds, files, errors = bench_lint(args.files)
    decide = bench_decide(args.requests)
    rows = [
        ("lint, no model", f"{files} files", f"{seconds * 1000:.0f} ms", "< 1000 ms", "ok" if seconds < 1 and errors == 0 else "MISSED"),
    ]
    for label in ("allow/rerank (3 policies)", "block + message (3 policies)"):
        us = decide[label]
        rows.append(("decide per request", label, f"{us:.1f} µs (median {decide[label + ' median']:.1f})", "< 20 µs", "ok" if us < 20 else "MISSED"))
    widths = [max(len(r[i]) for r in rows + [("what", "case", "time", "target", "")]) for i in range(5)]
    header = ("what", "case", "time", "target", "")
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if errors:
        print(f"(lint reported {errors} errors in the generated files)")


if __name__ == "__main__":
    main()

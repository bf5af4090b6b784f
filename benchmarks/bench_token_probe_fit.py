#!/usr/bin/env python3
"""How long ``innerguard build token-probe``'s fit takes on rows shaped like
the real-text splits (SmolLM2: 9 layers x 576 = 5,184 features a token;
documents of 150 to 3,000 tokens), without a model: random residuals with
a planted direction inside the attacks. ``--against REV`` times the same
fit from an older commit's engine/build/token_probe.py beside it.

    .venv/bin/python benchmarks/bench_token_probe_fit.py --rows 48 --against 7786912

On the 2-core machine, 2026-12-03, 48 rows (63 k tokens): 4.7 s for the fit
that ranks windows by their tokens' scores, 205.1 s for 7786912's (which
averaged every window's features in float64 to find each row's hardest
negative), with the same threshold and length_adjust.
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from innerguard.engine.build import token_probe

ROOT = Path(__file__).resolve().parents[1]


def _rows(count: int, features: int = 5184) -> list:
    torch.manual_seed(0)
    rng = random.Random(0)
    direction = torch.randn(features)
    rows = []
    for i in range(count):
        n = rng.choice([150, 600, 1500, 3000])
        x = torch.randn(n, features) * 0.5
        inserted = None
        if i % 2:
            a = rng.randrange(0, n - 40)
            inserted = (a, a + 40)
            x[a:a + 40] += 0.05 * direction
        rows.append(token_probe._Row(i % 2, f"g{i}", "-", x, inserted, True))
    return rows


def _module_at(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:engine/build/token_probe.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "token_probe_at_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"innerguard.engine.build.token_probe_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--against", metavar="REV", help="also time this commit's fit")
    args = parser.parse_args()
    rows = _rows(args.rows)
    params = token_probe.TokenProbeParams(model="m", data="d", window=16, folds=5, target_fpr=0.05,
                                          hard_negatives=2, length_adjust=True)
    modules = [("this tree", token_probe)] + ([(args.against, _module_at(args.against))] if args.against else [])
    for name, module in modules:
        t = time.perf_counter()
        fitted = module.fit_rows([module._Row(*vars(r).values()) for r in rows], params)
        print(f"{name}: {time.perf_counter() - t:.1f} s for {len(rows)} rows "
              f"({sum(len(r.tokens) for r in rows)} tokens); threshold {fitted.threshold}, "
              f"length_adjust {fitted.length_adjust}, oof AUROC {fitted.figures['cv_auroc']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

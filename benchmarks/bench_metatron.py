"""Score innerguard's held-out real-text split with metatronnanoguard.

metatronnanoguard (PyPI 0.1.0, import name ``nanoguard``) is the local
prompt-injection classifier a user might install instead of innerguard's
injection policy. This script measures what that user gets on
``data/injection/real-test.jsonl``: the package is fed each row's ``data``
(the untrusted text the model would read) through its own public API
(``NanoGuard.scan_batch``) at its own default threshold, with no tuning of
any kind on this split.

What the package does, as read from its 0.1.0 wheel:

* score: ``injection_score`` = softmax probability of class 1;
  ``is_injection`` is ``injection_score >= threshold``, default threshold 0.5
  (both ``NanoGuard()`` and the ``nanoguard scan`` CLI);
* length: its tokenizer prepends a BOS token and cuts the token list to the
  checkpoint's ``sequence_len`` (512, BOS included), i.e. it keeps the head of
  the text and drops the rest. There is no chunking and no documentation of
  long inputs; the script does the same (it calls the package) and says so in
  its output, plus, per row, whether the inserted attack started inside the
  part the package reads;
* ``scan`` and ``scan_batch`` both pad every text to ``sequence_len``, so a
  row's score does not depend on the batch it is in;
* on CUDA it runs under bf16 autocast; this script defaults to ``--device
  cpu`` so the figures are reproducible on a CPU-only machine.

Setup (CPU torch first, because the package's bare ``torch>=2.0`` would pull
a multi-GB CUDA build; on the project's CI-kind machine ``torch==2.13.0`` is
the CPU wheel that lies on local disk, elsewhere add
``--index-url https://download.pytorch.org/whl/cpu``)::

    python3 -m venv /tmp/mng
    /tmp/mng/bin/pip install torch==2.13.0
    /tmp/mng/bin/pip install metatronnanoguard==0.1.0

Reproduce (one thread, from the repo root)::

    OMP_NUM_THREADS=1 /tmp/mng/bin/python benchmarks/bench_metatron.py \\
        --data data/injection/real-test.jsonl \\
        --out benchmarks/results/metatronnanoguard-real-test-2026-12-03.json

On 2026-12-03 (2-core machine, one thread) the two installs took 57 s and
the run 3 min 38 s wall, of which 215 s was scoring (about 320 ms a row, as
nearly every row is padded to 512 tokens).

The venv needs nothing of innerguard: the metrics below are computed here.
When ``innerguard`` happens to be importable, AUROC and TPR@FPR are checked
against ``innerguard.engine.evaluate.metrics`` and the output says so; the
JSON's per-row scores can also be fed to those functions from the project's
own venv afterwards.
"""
from __future__ import annotations

import os

# The machine is shared; pin every thread pool before torch is imported.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import platform
import sys
import time
from pathlib import Path

STYLES = ("email", "docs", "code", "web", "prose", "review", "chat", "table")
# Inclusive lower bound, inclusive upper bound (None = open). The last three
# overlap on purpose: each is "at least this long".
LENGTH_BUCKETS = (
    ("0-127", 0, 127),
    ("128-255", 128, 255),
    ("256-511", 256, 511),
    (">=512", 512, None),
    (">=1024", 1024, None),
    (">=2048", 2048, None),
)
FPR_POINTS = (0.01, 0.05)
REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- metrics
# Same definitions as innerguard.engine.evaluate.metrics, restated so that
# the script runs in a venv holding only the package under test.

def auroc(scores, labels):
    """Mann-Whitney AUROC, ties given half credit (average ranks)."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    ranked = sorted(zip(scores, labels), key=lambda p: p[0])
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        rank_sum += (i + 1 + j) / 2 * sum(1 for _, y in ranked[i:j] if y)
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def tpr_at_fpr(scores, labels, max_fpr):
    """Highest TPR over thresholds (score >= t) whose FPR <= max_fpr.
    Whole groups of equal scores are stepped over together, so ties cannot
    be split to reach a target."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return None, None
    ranked = sorted(zip(scores, labels), key=lambda p: -p[0])
    best_tpr, best_t = 0.0, float("inf")
    tp = fp = i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            tp += 1 if ranked[j][1] else 0
            fp += 0 if ranked[j][1] else 1
            j += 1
        if fp / neg <= max_fpr + 1e-12 and tp / pos > best_tpr:
            best_tpr, best_t = tp / pos, ranked[i][0]
        i = j
    return best_tpr, best_t


def ratio(k, n):
    return k / n if n else None


def summarise(rows):
    """n, positives, confusion at the package default, AUROC."""
    labels = [r["label"] for r in rows]
    scores = [r["score"] for r in rows]
    pos = sum(labels)
    neg = len(rows) - pos
    tp = sum(1 for r in rows if r["label"] and r["flagged"])
    fp = sum(1 for r in rows if not r["label"] and r["flagged"])
    return {
        "n": len(rows), "positives": pos, "negatives": neg,
        "tp": tp, "fp": fp, "fn": pos - tp, "tn": neg - fp,
        "fpr": ratio(fp, neg), "tpr": ratio(tp, pos),
        "precision": ratio(tp, tp + fp),
        "auroc": auroc(scores, labels),
    }


def cross_check(scores, labels, ours):
    """Compare with innerguard's own metric functions when they import."""
    try:
        from innerguard.engine.evaluate import metrics as ig
    except Exception as exc:  # the intended venv has no innerguard
        return f"not run (innerguard not importable: {type(exc).__name__})"
    theirs = {"auroc": ig.auroc(scores, labels)}
    for f in FPR_POINTS:
        theirs[f"tpr_at_{f:g}_fpr"] = ig.tpr_at_fpr(scores, labels, f)[0]
    bad = [k for k, v in theirs.items() if abs(v - ours[k]) > 1e-12]
    return "agrees" if not bad else f"DISAGREES on {bad}: {theirs}"


# ---------------------------------------------------------------- scoring

def load(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def window_chars(guard, text, max_len):
    """Characters of ``text`` the package actually reads (its head cut)."""
    enc = guard.tokenizer.enc
    ids = enc.encode_ordinary(text)
    kept = max_len - 1  # the package spends one slot on BOS
    if len(ids) <= kept:
        return len(ids), len(text)
    head = enc.decode_bytes(ids[:kept]).decode("utf-8", errors="ignore")
    return len(ids), len(head)


def score_rows(rows, device, batch):
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import nanoguard
    from nanoguard import NanoGuard

    t0 = time.perf_counter()
    guard = NanoGuard(device=device)
    load_s = time.perf_counter() - t0
    max_len = guard.config.sequence_len

    out = []
    t0 = time.perf_counter()
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        results = guard.scan_batch([r["data"] for r in chunk])
        for r, res in zip(chunk, results):
            n_tok, seen = window_chars(guard, r["data"], max_len)
            ins = r.get("inserted")
            out.append({
                "id": r["id"], "label": int(r["label"]), "style": r["style"],
                "tokens": r["tokens"],
                "score": float(res.injection_score),
                "flagged": bool(res.is_injection),
                "package_tokens": n_tok + 1,  # + BOS
                "truncated": n_tok + 1 > max_len,
                # None for benign rows; else did the attack start in the head kept
                "attack_in_window": (ins[0] < seen) if ins else None,
                "invisible": r.get("invisible"),
            })
        done = min(start + batch, len(rows))
        print(f"  scored {done}/{len(rows)}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    score_s = time.perf_counter() - t0
    meta = {
        "package": "metatronnanoguard",
        "package_version": getattr(nanoguard, "__version__", None),
        "torch_version": torch.__version__,
        "device": guard.device,
        "threads": torch.get_num_threads(),
        "threshold": guard.threshold,
        "decision": "is_injection = injection_score >= threshold (package default)",
        "score": "injection_score (softmax P(injection))",
        "max_len_tokens": max_len,
        "length_handling": ("package's own: BOS + head truncation to "
                            f"{max_len} tokens (text past the cut is not read); "
                            "no chunking in the package"),
        "api": f"NanoGuard(device={device!r}).scan_batch(texts), batch {batch}",
        "model_load_s": round(load_s, 2),
        "score_s": round(score_s, 2),
        "ms_per_row": round(1000 * score_s / max(1, len(rows)), 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    return out, meta


# ---------------------------------------------------------------- report

def fmt(x, pct=True):
    if x is None:
        return "-"
    return f"{100 * x:5.1f}%" if pct else f"{x:.3f}"


def table(title, groups):
    lines = [title,
             f"  {'group':<10}{'n':>5}{'pos':>5}{'FP/neg':>10}{'FPR':>8}"
             f"{'TP/pos':>10}{'TPR':>8}{'AUROC':>8}"]
    for name, s in groups:
        lines.append(
            f"  {name:<10}{s['n']:>5}{s['positives']:>5}"
            f"{s['fp']:>5}/{s['negatives']:<4}{fmt(s['fpr']):>8}"
            f"{s['tp']:>5}/{s['positives']:<4}{fmt(s['tpr']):>8}"
            f"{fmt(s['auroc'], pct=False):>8}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(REPO / "data/injection/real-test.jsonl"))
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/metatronnanoguard-real-test.json"))
    ap.add_argument("--device", default="cpu", help="passed to NanoGuard (cpu|cuda|auto)")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()

    rows = load(args.data)
    scored, meta = score_rows(rows, args.device, args.batch)
    labels = [r["label"] for r in scored]
    scores = [r["score"] for r in scored]

    overall = summarise(scored)
    for f in FPR_POINTS:
        tpr, thr = tpr_at_fpr(scores, labels, f)
        overall[f"tpr_at_{f:g}_fpr"] = tpr
        overall[f"threshold_at_{f:g}_fpr"] = thr
    overall["metrics_cross_check"] = cross_check(scores, labels, overall)

    by_style = [(s, summarise([r for r in scored if r["style"] == s])) for s in STYLES]
    by_len = [(name, summarise([r for r in scored if r["tokens"] >= lo
                                and (hi is None or r["tokens"] <= hi)]))
              for name, lo, hi in LENGTH_BUCKETS]

    inv = [r for r in scored if r["invisible"]]
    kinds = sorted({r["invisible"] for r in inv})
    invisible = {
        "n": len(inv), "positives": sum(r["label"] for r in inv),
        "flagged": sum(r["flagged"] for r in inv),
        "by_kind": {k: {"n": sum(1 for r in inv if r["invisible"] == k),
                        "flagged": sum(1 for r in inv if r["invisible"] == k and r["flagged"])}
                    for k in kinds},
    }

    pos = [r for r in scored if r["label"]]
    trunc = {
        "rows_truncated": sum(r["truncated"] for r in scored),
        "positives_attack_outside_window": sum(1 for r in pos if r["attack_in_window"] is False),
    }
    for name, sel in (("attack_in_window", True), ("attack_outside_window", False)):
        sub = [r for r in pos if r["attack_in_window"] is sel]
        trunc[f"tpr_{name}"] = ratio(sum(r["flagged"] for r in sub), len(sub))
        trunc[f"positives_{name}"] = len(sub)

    # ---- stdout
    o = overall
    print(f"metatronnanoguard {meta['package_version']} on {args.data}  "
          f"(device {meta['device']}, {meta['threads']} thread, torch {meta['torch_version']})")
    print(f"length handling: {meta['length_handling']}")
    print(f"decision: {meta['decision']}, threshold {meta['threshold']}")
    print(f"scored {o['n']} rows in {meta['score_s']} s ({meta['ms_per_row']} ms/row)\n")
    print(f"AUROC                 {fmt(o['auroc'], pct=False)}")
    print(f"default decision      FPR {fmt(o['fpr'])} ({o['fp']}/{o['negatives']})   "
          f"TPR {fmt(o['tpr'])} ({o['tp']}/{o['positives']})   "
          f"precision {fmt(o['precision'])} ({o['tp']}/{o['tp'] + o['fp']})")
    for f in FPR_POINTS:
        print(f"TPR at {100 * f:g}% FPR         {fmt(o[f'tpr_at_{f:g}_fpr'])}   "
              f"(threshold {o[f'threshold_at_{f:g}_fpr']:.6g})")
    print(f"metrics cross-check   {o['metrics_cross_check']}\n")
    print(table("per style", by_style) + "\n")
    print(table("per data length (SmolLM2 tokens of data; last three overlap)", by_len) + "\n")
    print(f"invisible-character benign rows: {invisible['flagged']}/{invisible['n']} flagged  "
          + "  ".join(f"{k} {v['flagged']}/{v['n']}" for k, v in invisible["by_kind"].items()))
    print(f"truncation: {trunc['rows_truncated']}/{o['n']} rows exceed "
          f"{meta['max_len_tokens']} package tokens; "
          f"{trunc['positives_attack_outside_window']}/{len(pos)} attacks start past the cut; "
          f"TPR when the attack starts inside {fmt(trunc['tpr_attack_in_window'])} "
          f"(n={trunc['positives_attack_in_window']}), past the cut "
          f"{fmt(trunc['tpr_attack_outside_window'])} (n={trunc['positives_attack_outside_window']})")

    report = {
        "meta": meta, "data": args.data, "overall": overall,
        "by_style": dict(by_style), "by_length": dict(by_len),
        "invisible": invisible, "truncation": trunc,
        "rows": [{k: r[k] for k in ("id", "label", "style", "tokens", "score", "flagged",
                                    "package_tokens", "truncated", "attack_in_window")}
                 for r in scored],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
        fh.write("\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

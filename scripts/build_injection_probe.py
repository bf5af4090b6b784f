#!/usr/bin/env python
"""Fit the prompt-injection probes of the candidate policy
examples/prompt-injection-probe/prompt-injection-probe.yaml.

A logistic probe on the residual stream at the last prompt token (the
``probe`` analyzer with ``score: probability``), fitted on data/injection/fit.jsonl
only. Rows are laid out as the policy sees them: the instruction is the system
message, the data the user message (chat template of the model).

1. One forward pass per fit row through the independent Hugging Face
   reference (float32, eager): the residual after every decoder layer but the
   last at the last prompt token, and every head's Attention Tracker ratio
   (attention on the instruction / on instruction + data) at that token.
2. One probe per candidate layer (and L2 strength), scored by 5-fold
   cross-validation on fit with folds grouped by attack template, corpus row
   and benign note (rows that share such text never straddle folds: plain
   k-fold shared templates across folds and promised far more than dev
   gave). Up to ``--max-probes`` layers are chosen by
   greedy forward selection for the policy's rule "block when any probe says
   more than T" (the maximum of their probabilities): the objective is the
   out-of-fold TPR at ``--target-fpr`` and at twice that. T is chosen on the
   out-of-fold maximum for ``--target-fpr``.
3. Each chosen probe is fitted on all fit rows and written to its own
   artifact with its provenance (data hash, seed, layer, l2, date, CV
   figures, threshold) in the metadata.

For comparison the script also prints the cross-validated AUROC of the
shipped focus score (mean ratio over the shipped heads) and of a logistic
combination of all heads' ratios (per-head weights; the attention_tracker
analyzer takes no weights today).

dev.jsonl is never read here: it is measured inside vLLM with
``innerguard eval``.

    .venv/bin/python scripts/build_injection_probe.py
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from innerguard.engine.build.fit import fit_logistic  # noqa: E402  (the fit innerguard build probe uses)
from innerguard.engine.evaluate.metrics import auroc, threshold_for_fpr, tpr_at_fpr  # noqa: E402
from innerguard.engine.models import fingerprint, read_geometry, resolve  # noqa: E402
from innerguard.engine.reference import load_reference_model  # noqa: E402
from innerguard.engine.reference.model import run  # noqa: E402
from innerguard.engine.spans import chat_spans  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRUSTED = ("system", "developer")


def meta(name: str, model_dir: Path, layer: int, **extra: str) -> dict[str, str]:
    geometry = read_geometry(model_dir)
    return {"model_name": name, "hidden_size": str(geometry.hidden_size), "layer": str(layer),
            "model_fingerprint": fingerprint(model_dir), **{k: str(v) for k, v in extra.items()}}


def features(model, tokenizer, rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """residuals [rows, layers-1, hidden] and head ratios [rows, layers, heads]."""
    residuals, ratios = [], []
    for row in tqdm(rows, desc="reference forward", unit="row"):
        spans = chat_spans(tokenizer, [{"role": "system", "content": row["instruction"]},
                                       {"role": "user", "content": row["data"]}], trusted_roles=TRUSTED)
        out = run(model, spans.input_ids, attentions=True, hidden_states=True)
        # hidden_states[L + 1] is layer L's output except for the last layer (post-norm there).
        residuals.append(torch.stack([h[0, -1] for h in out.hidden_states[1:-1]]).numpy())
        inst = torch.zeros(len(spans.input_ids))
        data = torch.zeros(len(spans.input_ids))
        for a, b in spans.trusted:
            inst[a:b] = 1
        for a, b in spans.untrusted:
            data[a:b] = 1
        last = torch.stack([att[0, :, -1, :] for att in out.attentions])  # [layers, heads, T]
        a_inst, a_data = last @ inst, last @ data
        ratios.append((a_inst / (a_inst + a_data).clamp_min(1e-12)).numpy())
    return np.stack(residuals).astype(np.float32), np.stack(ratios).astype(np.float32)


def folds(rows: list[dict], k: int, seed: int) -> list[np.ndarray]:
    """k folds that keep each ``group`` (an attack template, a corpus row, a
    benign note) in one fold, so that cross-validation measures what dev
    measures: text the probe has never seen. Plain benign rows are free."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        key = row.get("group", "") if not str(row.get("group", "plain")).startswith("plain") else f"row:{i}"
        groups.setdefault(key, []).append(i)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    keys.sort(key=lambda g: -len(groups[g]))  # stable: big groups first, shuffled among equals
    parts: list[list[int]] = [[] for _ in range(k)]
    for key in keys:
        min(parts, key=len).extend(groups[key])
    return [np.array(sorted(p)) for p in parts]


def out_of_fold(x: np.ndarray, y: np.ndarray, parts: list[np.ndarray], l2: float) -> np.ndarray:
    """Probability for each row from a probe fitted without its fold."""
    prob = np.zeros(len(y), dtype=np.float64)
    for test in parts:
        train = np.setdiff1d(np.arange(len(y)), test)
        w, b = fit_logistic(torch.from_numpy(x[train]), torch.from_numpy(y[train]).float(), l2=l2)
        prob[test] = torch.sigmoid(torch.from_numpy(x[test]) @ w + b).numpy()
    return prob


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "injection" / "fit.jsonl")
    parser.add_argument("--layers", default="4-22", help="candidate layers, e.g. 4-28 or 10,14,18")
    parser.add_argument("--target-fpr", type=float, default=0.01, help="FPR on out-of-fold fit scores for the threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (more thrash on a shared 2-core machine)")
    parser.add_argument("--cache", type=Path, default=None, help="reuse/store the extracted features here (.npz)")
    parser.add_argument("--features-only", action="store_true", help="extract (and cache) the features, fit nothing")
    parser.add_argument("--l2", type=float, nargs="+", default=[1e-3, 1e-2], help="L2 strengths to try (standardised features)")
    parser.add_argument("--max-probes", type=int, default=3, help="at most this many layers, OR-ed by the policy")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "examples" / "prompt-injection-probe" / "artifacts")
    parser.add_argument("--heads", type=Path, default=ROOT / "policies" / "artifacts" / "smollm2-135m-instruct.injection-heads.safetensors")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    raw = args.data.read_bytes()
    data_hash = hashlib.sha256(raw).hexdigest()
    rows = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    y = np.array([int(r["label"]) for r in rows], dtype=np.float32)
    model_dir = resolve(args.model)
    if args.cache and args.cache.exists() and np.load(args.cache)["data_hash"].item() == data_hash:
        cached = np.load(args.cache)
        residuals, ratios = cached["residuals"], cached["ratios"]
    else:
        model, tokenizer = load_reference_model(model_dir)
        residuals, ratios = features(model, tokenizer, rows)
        if args.cache:
            np.savez(args.cache, residuals=residuals, ratios=ratios, data_hash=np.array(data_hash))
    if args.features_only:
        return 0
    parts = folds(rows, 5, args.seed)

    with safe_open(str(args.heads), "pt") as f:
        shipped = f.get_tensor("heads").tolist()
    focus = np.array([np.mean([r[layer, head] for layer, head in shipped]) for r in ratios])
    print(f"shipped focus ({len(shipped)} heads): AUROC on fit {auroc((-focus).tolist(), y.tolist()):.4f} (no fitting)")
    head_prob = out_of_fold(ratios.reshape(len(rows), -1), y, parts, l2=1e-2)
    print(f"per-head weighted focus (logistic over all {ratios.shape[1] * ratios.shape[2]} heads): "
          f"5-fold CV AUROC {auroc(head_prob.tolist(), y.tolist()):.4f}")

    lo, _, hi = args.layers.partition("-")
    layers = list(range(int(lo), int(hi) + 1)) if hi else [int(v) for v in args.layers.split(",")]
    oof, l2_of = {}, {}
    for layer in layers:
        tried = {l2: out_of_fold(residuals[:, layer], y, parts, l2) for l2 in args.l2}
        l2_of[layer] = max(tried, key=lambda v: auroc(tried[v].tolist(), y.tolist()))
        oof[layer] = tried[l2_of[layer]]
        print(f"layer {layer:2d}: grouped 5-fold CV AUROC " + ", ".join(
            f"{auroc(p.tolist(), y.tolist()):.4f} (l2 {v:g})" for v, p in tried.items()), flush=True)
    chosen = select_layers(oof, y, args.max_probes, args.target_fpr)
    combined = np.max(np.stack([oof[layer] for layer in chosen]), axis=0)
    threshold = threshold_for_fpr(combined.tolist(), y.tolist(), args.target_fpr)
    blocked = combined >= threshold
    cv = {"auroc": auroc(combined.tolist(), y.tolist()), "tpr": float(blocked[y == 1].mean()), "fpr": float(blocked[y == 0].mean())}
    print(f"chosen layers {chosen}: block when any probe > {threshold:.4f}; out-of-fold max-probability AUROC "
          f"{cv['auroc']:.4f}, TPR {cv['tpr']:.3f}, FPR {cv['fpr']:.3f} (target FPR {args.target_fpr})")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for layer in chosen:
        weight, bias = fit_logistic(torch.from_numpy(residuals[:, layer]), torch.from_numpy(y), l2=l2_of[layer])
        path = args.out_dir / f"{Path(str(args.model)).name}.injection-probe-l{layer}.safetensors"
        save_file(
            {"weight": weight.float().contiguous(), "bias": torch.tensor([bias], dtype=torch.float32)},
            str(path),
            metadata=meta(
                Path(str(args.model)).name, model_dir, layer,
                kind="logistic probe: sigmoid(weight . x + bias[0]) = P(untrusted data carries an injected instruction)",
                position="last prompt token; system message = instruction, user message = data",
                data=str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data),
                data_sha256=data_hash,
                rows=f"{len(rows)} ({int(y.sum())} injected)",
                seed=str(args.seed),
                l2=f"{l2_of[layer]:g}",
                cv="5-fold, grouped by attack template / corpus row / benign note",
                cv_auroc_this_layer=f"{auroc(oof[layer].tolist(), y.tolist()):.4f}",
                combined_layers=",".join(map(str, chosen)),
                combined_cv=f"AUROC {cv['auroc']:.4f}, TPR {cv['tpr']:.4f}, FPR {cv['fpr']:.4f}",
                threshold=f"{threshold:.4f}",
                threshold_rule=f"any probe > threshold; out-of-fold fit FPR <= {args.target_fpr}",
                fitted=dt.date.today().isoformat(),
                script="scripts/build_injection_probe.py",
            ),
        )
        print(f"wrote {path}")
    return 0


def select_layers(oof: dict[int, np.ndarray], y: np.ndarray, most: int, target_fpr: float) -> list[int]:
    """Greedy forward selection of probes whose maximum blocks best: the
    objective is TPR at target_fpr and at twice that, on out-of-fold scores."""
    def objective(layers):
        combined = np.max(np.stack([oof[v] for v in layers]), axis=0).tolist()
        return (tpr_at_fpr(combined, y.tolist(), target_fpr)[0] + tpr_at_fpr(combined, y.tolist(), 2 * target_fpr)[0],
                auroc(combined, y.tolist()))
    chosen: list[int] = []
    best = (-1.0, 0.0)
    while len(chosen) < most:
        candidates = [(objective(chosen + [v]), v) for v in oof if v not in chosen]
        score, layer = max(candidates)
        if score <= best:
            break
        best = score
        chosen.append(layer)
        print(f"  + layer {layer}: TPR@{target_fpr:g} + TPR@{2 * target_fpr:g} = {score[0]:.3f}, AUROC {score[1]:.4f}")
    return sorted(chosen)


if __name__ == "__main__":
    sys.exit(main())

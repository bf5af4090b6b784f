#!/usr/bin/env python3
"""Issue 32 on a GPU: the prompt-injection token probe fitted on real
third-party text, chosen on the development split, then measured once on
the held-out split, all with SmolLM2-135M-Instruct inside vLLM.

    python3 scripts/gpu_realtext.py capture OUT real-fit.jsonl     # one call each: the residuals,
    python3 scripts/gpu_realtext.py capture OUT fit.jsonl real-dev.jsonl  # kept in OUT/rows-*.pt
    python3 scripts/gpu_realtext.py fit OUT      # fit the candidates, choose on real-dev
    python3 scripts/gpu_realtext.py eval OUT real-test [test real-dev]  # innerguard eval of the chosen policy

A 2-core CPU captures about 150 prompt tokens a second; on an H200 the
capture ran at 6,362 data tokens a second (2026-12-03, ``timing``), and the
three splits fitted on hold 2.1 million. So the work is cut into calls
that each end well inside a device call's 600 s, and the captured rows
wait on the device's disk between them.
``scripts/gpu_realtext.sh`` installs the kit and the model on the device.

What chooses what (nothing here reads real-test.jsonl before ``eval``):
- fit: each candidate is fitted on its data (data/injection/real-fit.jsonl,
  alone or after the project's data/injection/fit.jsonl); its threshold
  keeps the grouped 5-fold out-of-fold FPR at 2 % and its length_adjust
  is fitted on the same out-of-fold benign scores (``--length-adjust``);
- dev: on data/injection/real-dev.jsonl (scored from the same capture
  path), the candidate with the highest TPR at its threshold among those
  whose FPR there is at most 2 % (else the highest AUROC) becomes the policy;
- eval: that policy, unchanged, on real-test (held out), on the project's
  test split and on real-dev (no longer clean: it chose).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "injection"
MODEL = "smollm2-135m-instruct"
LAYERS = (3, 6, 9, 12, 15, 18, 21, 24, 27)
ARTIFACT = f"{MODEL}.injection-token-probe.safetensors"
# name -> (data file, window); all with two rounds of hard negatives and a fitted length_adjust.
# (A third, both-w32, was dropped on 2026-12-04 before any was scored, for device time.)
CANDIDATES = {
    "real-w16": ("real-fit.jsonl", 16),
    "both-w16": ("fit-and-real-fit.jsonl", 16),
}
_ROWS: dict = {}  # the captured rows, by data file
# A smoke run on a CPU: only the first N rows under 300 data tokens of each file.
LIMIT = int(os.environ.get("REALTEXT_LIMIT", "0"))


def _log(message: str) -> None:
    print(f"[gpu_realtext {time.strftime('%H:%M:%S')}] {message}", flush=True)


def combined_data() -> Path:
    """fit.jsonl then real-fit.jsonl, byte for byte (``cat``): a file the
    recipe can name and a reader can rebuild."""
    path = DATA / "fit-and-real-fit.jsonl"
    path.write_bytes((DATA / "fit.jsonl").read_bytes() + (DATA / "real-fit.jsonl").read_bytes())
    return path


def _data_file(name: str, out: Path) -> Path:
    """``data/injection/NAME``, or its first LIMIT short rows (smoke runs)."""
    path = DATA / name
    if not LIMIT:
        return path
    rows = [line for line in path.read_text().splitlines() if json.loads(line).get("tokens", 0) < 300][:LIMIT]
    cut = out / "smoke" / name
    cut.parent.mkdir(parents=True, exist_ok=True)
    cut.write_text("\n".join(rows) + "\n")
    return cut


def _fit_one(name: str) -> tuple[str, dict]:
    import torch

    from innerguard.engine.build.token_probe import TokenProbeParams, fit_rows

    torch.set_num_threads(os.cpu_count() or 1)

    data, window = CANDIDATES[name]
    rows = _ROWS[data]
    params = TokenProbeParams(model=MODEL, data=f"data/injection/{data}", layers=LAYERS, window=window,
                              target_fpr=0.02, hard_negatives=2, length_adjust=True)
    t = time.time()
    fitted = fit_rows(rows, params)
    return name, {"params": params, "fitted": fitted, "seconds": round(time.time() - t, 1)}


def _dev_scores(rows, fitted, window: int) -> list[float]:
    import torch

    from innerguard.hooks.analyzers.token_probe import length_offset, window_max

    torch.set_num_threads(8)
    return [window_max(r.tokens @ fitted.weight + fitted.bias, window) - length_offset(len(r.tokens), window, fitted.length_adjust)
            for r in rows]


def _policy_text(name: str, threshold: float, window: int, length_adjust: float, figures: dict) -> str:
    """The shipped policy with the chosen probe's pooling and threshold; the
    header comment is rewritten by hand once the held-out figures exist."""
    text = (ROOT / "policies" / "prompt-injection.yaml").read_text()
    text = text.replace("    window: 16\n", f"    window: {window}\n    length_adjust: {length_adjust}\n", 1)
    text = text.replace("when: injected > 2.645", f"when: injected > {threshold}", 1)
    return f"# candidate {name} from scripts/gpu_realtext.py fit; out-of-fold on its fit data: {json.dumps(figures)}\n" + text


def choose(candidates: dict) -> str:
    """The highest dev TPR at the candidate's own threshold among those whose
    dev FPR there is at most 2 % (the shipped target); when none holds it, the
    highest dev AUROC."""
    holding = [n for n, c in candidates.items() if c["dev_at_threshold"]["fpr"] <= 0.02]
    if holding:
        return max(holding, key=lambda n: (candidates[n]["dev_at_threshold"]["recall"], candidates[n]["dev_auroc"]))
    return max(candidates, key=lambda n: candidates[n]["dev_auroc"])


def _rows_file(out: Path, name: str) -> Path:
    return out / f"rows-{name.removesuffix('.jsonl')}.pt"


def capture(out: Path, names: list[str]) -> int:
    """The data-token residuals of each named file, saved as float16 (half the
    disk; the probe's fit reads them back as float32)."""
    import torch

    from innerguard.engine.build import data as data_lib
    from innerguard.engine.build.engine import recording_engine
    from innerguard.engine.build.token_probe import captured_rows

    out.mkdir(parents=True, exist_ok=True)
    t = time.time()
    with recording_engine(MODEL) as llm:
        _log(f"engine started in {time.time() - t:.0f} s")
        for name in names:
            t = time.time()
            rows = captured_rows(llm, data_lib.read_jsonl(_data_file(name, out), "--data"), LAYERS, progress=False)
            tokens = sum(len(r.tokens) for r in rows)
            captured = time.time() - t
            torch.save([replace(r, tokens=r.tokens.half()) for r in rows], _rows_file(out, name))
            _log(f"captured {name}: {len(rows)} rows, {tokens} data tokens in {captured:.0f} s "
                 f"({tokens / captured:.0f}/s), saved in {time.time() - t - captured:.0f} s")
    return 0


def _load_rows(out: Path, name: str) -> list:
    import torch

    rows = torch.load(_rows_file(out, name), weights_only=False)
    return [replace(r, tokens=r.tokens.float()) for r in rows]


def fit(out: Path) -> int:
    from innerguard.engine import models
    from innerguard.engine.build import data as data_lib
    from innerguard.engine.build.recipe import save
    from innerguard.engine.build.token_probe import built_from_rows
    from innerguard.engine.evaluate.metrics import Confusion, auroc

    combined_data()
    summary: dict = {"candidates": {}, "layers": LAYERS}
    model_dir = models.resolve(MODEL)
    t = time.time()
    for name in ("fit.jsonl", "real-fit.jsonl", "real-dev.jsonl"):
        _ROWS[name] = _load_rows(out, name)
    _log(f"loaded the captured rows in {time.time() - t:.0f} s")
    _ROWS["fit-and-real-fit.jsonl"] = _ROWS["fit.jsonl"] + _ROWS["real-fit.jsonl"]
    dev_rows = _ROWS["real-dev.jsonl"]
    dev_labels = [r.label for r in dev_rows]
    # One after the other, in this process: forked fitting processes hung on
    # the H200 (2026-12-04: no candidate done in 585 s, while one fit of
    # real-dev's 512 rows takes 25 s in-process with 16 threads).
    fitted_all = dict(_fit_one(name) for name in CANDIDATES)
    for name, result in fitted_all.items():
        fitted, params = result["fitted"], result["params"]
        scores = _dev_scores(dev_rows, fitted, params.window)
        confusion = Confusion.of([s > fitted.threshold for s in scores], dev_labels).to_dict()
        summary["candidates"][name] = {"fit_seconds": result["seconds"], "threshold": fitted.threshold,
                                       "length_adjust": fitted.length_adjust, "figures": fitted.figures,
                                       "dev_auroc": auroc(scores, dev_labels), "dev_at_threshold": confusion}
        _log(f"{name}: oof AUROC {fitted.figures['cv_auroc']}, dev AUROC {summary['candidates'][name]['dev_auroc']:.4f}, "
             f"dev FPR {confusion['fpr']}, TPR {confusion['recall']}")
        (out / f"{name}.json").write_text(json.dumps(summary["candidates"][name], indent=1, default=str))
    chosen = choose(summary["candidates"])
    summary["chosen"] = chosen
    data, window = CANDIDATES[chosen]
    source = data_lib.read_jsonl(DATA / data if not LIMIT else _data_file("real-fit.jsonl", out), "--data")
    params = fitted_all[chosen]["params"]
    built = built_from_rows(_ROWS[data], params, model_dir, source, fitted=fitted_all[chosen]["fitted"])
    folder = out / "policy"
    (folder / "artifacts").mkdir(parents=True, exist_ok=True)
    saved = save(built, str(folder / "artifacts" / ARTIFACT), record_out=f"policies/artifacts/{ARTIFACT}")
    fitted = fitted_all[chosen]["fitted"]
    keep = {k: fitted.figures[k] for k in ("cv_auroc", "cv_fpr", "cv_tpr", "threshold", "length_adjust")}
    (folder / "prompt-injection.yaml").write_text(_policy_text(chosen, fitted.threshold, window, fitted.length_adjust, keep))
    summary["artifact"] = {"content_sha256": saved.content_sha256, "report": built.report}
    (out / "fit_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    _log(f"chose {chosen}; wrote {folder}")
    return 0


def evaluate(out: Path, splits: list[str]) -> int:
    """innerguard eval, the way a user runs it, on the chosen policy; the text
    report is made from the JSON one (one engine run per split)."""
    from innerguard.engine.evaluate.report import format_text

    # The policy this device session fitted, else the shipped one (a later
    # session measuring what was installed from an earlier fit).
    policy = out / "policy" / "prompt-injection.yaml"
    if not policy.exists():
        policy = ROOT / "policies" / "prompt-injection.yaml"
        (out / "policy").mkdir(parents=True, exist_ok=True)
    rc = 0
    for split in splits or ("real-test", "test", "real-dev"):
        t = time.time()
        argv = [sys.executable, "-m", "innerguard.engine.cli", "eval", "--policy", str(policy), "--model", MODEL,
                "--data", str(_data_file(f"{split}.jsonl", out)), "--no-progress", "--format", "json",
                "--scores-out", str(out / f"eval-{split}.scores.jsonl"), "--plot", str(out / f"eval-{split}.png")]
        done = subprocess.run(argv, capture_output=True, text=True)
        (out / f"eval-{split}.json").write_text(done.stdout)
        (out / f"eval-{split}.log").write_text(done.stderr[-20000:])
        _log(f"eval {split}: rc {done.returncode} in {time.time() - t:.0f} s")
        try:
            text = format_text(json.loads(done.stdout))
        except ValueError:
            text = done.stderr[-3000:]
        (out / f"eval-{split}.txt").write_text(text + "\n")
        print(text, flush=True)
        rc = rc or done.returncode
    return rc


def timing(out: Path) -> int:
    """Where the fit's time goes, on real-dev alone (447 k data tokens): the
    capture's rate, then one candidate's fit with every core and with one.
    Each figure is appended to OUT/timing.jsonl as soon as it exists, so a
    call cut off at its limit still brings back what it measured."""
    import torch

    from innerguard.engine.build import data as data_lib
    from innerguard.engine.build.engine import recording_engine
    from innerguard.engine.build.token_probe import TokenProbeParams, captured_rows, fit_rows

    out.mkdir(parents=True, exist_ok=True)
    log = out / "timing.jsonl"

    def note(**fields) -> None:
        with open(log, "a") as f:
            f.write(json.dumps(fields) + "\n")
        _log(json.dumps(fields))

    source = data_lib.read_jsonl(_data_file("real-dev.jsonl", out), "--data")
    t = time.time()
    with recording_engine(MODEL) as llm:
        note(step="engine_start", seconds=round(time.time() - t, 1))
        t = time.time()
        rows = captured_rows(llm, source, LAYERS, progress=False)
    tokens = sum(len(r.tokens) for r in rows)
    note(step="capture", rows=len(rows), tokens=tokens, seconds=round(time.time() - t, 1),
         tokens_per_s=round(tokens / (time.time() - t)), gib=round(tokens * len(LAYERS) * 576 * 4 / 2**30, 2))
    for threads in (os.cpu_count() or 1, 1):
        torch.set_num_threads(threads)
        params = TokenProbeParams(model=MODEL, data="data/injection/real-dev.jsonl", layers=LAYERS, window=16,
                                  target_fpr=0.02, hard_negatives=2, length_adjust=True)
        t = time.time()
        fitted = fit_rows(rows, params)
        note(step="fit", threads=threads, rows=len(rows), seconds=round(time.time() - t, 1), cv_auroc=fitted.figures["cv_auroc"])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("step", choices=["capture", "fit", "eval", "timing"])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", help="capture: data files under data/injection; eval: splits")
    args = parser.parse_args()
    if args.step == "capture":
        return capture(args.out, args.names)
    if args.step == "eval":
        return evaluate(args.out, args.names)
    return {"fit": fit, "timing": timing}[args.step](args.out)


if __name__ == "__main__":
    sys.exit(main())

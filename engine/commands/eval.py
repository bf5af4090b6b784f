"""``innerguard eval``: measure one policy on labelled data, inside vLLM."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from innerguard.engine.errors import InnerguardError
from innerguard.engine.commands.engine_options import add_enforce_eager


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="measure a policy on labelled JSONL data inside vLLM (AUROC, TPR at fixed FPR, confusion)",
        description=(
            "Run every labelled row through vLLM with the policy executing inside the worker (one forward "
            "pass, one generated token per row) and report how well the policy's score separates the labels "
            "and how its own thresholds decide."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
data rows (one JSON object per line):
  {"instruction": "Summarise the email.", "data": "untrusted text...", "label": 1, "style": "email"}
  {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}], "label": 0}
  {"messages": [...], "completion": "a given answer", "label": 1}
  label 1: the policy should act (block, or steer/flag/stop for a policy without a block rule); label 0: it should not. 'style' groups the per-style report.
  'completion': for a policy with output rules: the answer is teacher forced (its tokens follow the prompt; the worker reads
  them as if the model had written them, for token probes and attention trackers with span: generated, and the text rules
  read its text token by token); the score is the signal's value at the answer's end, and a stop counts as the policy acting.

the score: --score SIGNAL (or POLICY.SIGNAL, or A,B for their maximum); default: the numeric
signals the first block rule compares with a constant in the same direction, combined by max
('p8 > 0.9 or p12 > 0.9' -> max(p8, p12)) or min (for '<'). 'focus < 0.24': low = positive.
"acted" uses the policy's own rules and thresholds: the block rule, or for a policy that only steers or flags its
first such rule on a numeric signal (the rule's action, also in shadow/warn mode).

--calibrate proposes a threshold on the score for --target-fpr on THESE rows: calibrate on a
calibration split and report on a held-out one.
""",
    )
    parser.add_argument("--policy", required=True, help="the policy file")
    parser.add_argument("--model", required=True, help="a known model name or a Hugging Face checkpoint folder")
    parser.add_argument("--data", required=True, help="labelled rows, JSONL")
    parser.add_argument("--score", help="score signal, or several joined by commas (their max/min); default: see below")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--plot", help="write a PNG: ROC curve and score distributions with thresholds")
    parser.add_argument("--calibrate", action="store_true", help="propose a threshold for --target-fpr")
    parser.add_argument("--target-fpr", type=float, default=0.02, help="for --calibrate (default 0.02)")
    parser.add_argument("--scores-out", help="write one JSON line per row: id, label, style, tokens, acted (the measured rule fired), signals")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--cache-dir", help="model cache folder")
    add_enforce_eager(parser)
    parser.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    from innerguard.engine.evaluate import build_report, choose_score, format_text, load_rows
    from innerguard.engine.evaluate.runner import run_rows
    from innerguard.engine.evaluate.score import numeric_signals

    if not Path(args.policy).is_file():
        raise InnerguardError(f"--policy {args.policy}: not a file; evaluate one policy file")
    if not 0 < args.target_fpr < 1:
        raise InnerguardError(f"--target-fpr {args.target_fpr}: must be between 0 and 1")
    rows = load_rows(args.data)  # bad data fails before the engine starts
    from innerguard.engine.compiler import compile_policies
    from innerguard.engine.models import resolve

    model_dir = resolve(args.model, args.cache_dir)
    plan, _ = compile_policies([args.policy], model_dir)
    score = choose_score(plan, args.score)

    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(model_dir, plan, enforce_eager=args.enforce_eager)
    try:
        results = run_rows(llm, rows, score, progress=not args.no_progress)
    finally:
        llm.shutdown()
    others = [choose_score(plan, name) for name in numeric_signals(plan, score.policy, [r.signals for r in results])
              if (name,) != score.signals]
    version = next(p.version for p in plan.policies if p.name == score.policy)
    report = build_report(results, score, policy_version=version, data=args.data, other_signals=others,
                          target_fpr=args.target_fpr if args.calibrate else None)
    if args.scores_out:
        with open(args.scores_out, "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps({"id": r.id, "label": r.label, "style": r.style, "prompt_tokens": r.prompt_tokens,
                                    "acted": r.acted, "signals": r.signals, "error": r.error}) + "\n")
    if args.plot:
        from innerguard.engine.evaluate.plot import write_plot

        write_plot(args.plot, results, report)
    print(json.dumps(report, indent=2) if args.format == "json" else format_text(report))
    return 0

"""``innerguard bench``: the capture benchmark grid (a benchmark, never a test)."""
from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="plain vLLM vs innerguard capture and policies: latency, throughput, size on disk, memory",
        description="One run, same prompts and engine settings: plain vLLM vs last-token and all-token capture "
                    "of 1, 4, half and all layers, and the detection-only and steering-only policies, at prompt "
                    "lengths of about 16, 64, 256 and 512 tokens. Rounds alternate; medians and spreads are reported.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--lengths", type=int, nargs="+", help="prompt lengths in tokens (default 16 64 256 512)")
    parser.add_argument("--requests", type=int, default=8, help="requests per cell (default 8)")
    parser.add_argument("--max-tokens", type=int, default=8, help="output tokens per request (default 8)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="a small grid: 16 and 256 tokens, 1 and all layers, 1 round")
    parser.add_argument("--plot", default="capture-bench.png", help="PNG plot path (default capture-bench.png)")
    parser.add_argument("--json", dest="json_path", help="also write the figures to this JSON file")
    parser.add_argument("--work-dir", help="where cells write their captures (deleted after each cell)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from innerguard.engine.capture.bench import plot, render_table, run_grid, write_json

    lengths = tuple(args.lengths or ((16, 256) if args.quick else (16, 64, 256, 512)))
    repeats = 1 if args.quick and args.repeats == 3 else args.repeats
    result = run_grid(args.model, lengths=lengths, requests=args.requests, max_tokens=args.max_tokens,
                      repeats=repeats, quick=args.quick, work=args.work_dir,
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    result["setup"]["command"] = "innerguard " + " ".join(sys.argv[1:])
    if args.plot:
        plot(result, args.plot)
    if args.json_path:
        write_json(result, args.json_path)
    print(json.dumps(result, indent=1) if args.format == "json" else render_table(result))
    if args.plot and args.format == "text":
        print(f"plot: {args.plot}")
    return 0

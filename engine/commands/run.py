"""``innerguard run``: a batch of requests through a guarded vLLM engine."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from innerguard.engine.errors import InnerguardError
from innerguard.engine.jsonl import split_lines
from innerguard.engine.logging import get_logger
from innerguard.engine.commands.engine_options import add_enforce_eager

log = get_logger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a JSONL batch through vLLM with the policies enforced inside the model",
        description=(
            "Read requests from a JSONL file, run them through vLLM with the policies executing inside the "
            "worker (one forward pass per request), and write one result row per request, in input order."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
input rows (one JSON object per line):
  {"id": "a1", "instruction": "Summarise the text.", "data": "untrusted text...",
   "policies": ["prompt-injection"], "max_tokens": 64}
  {"id": "a2", "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}
  'instruction' becomes the system message (trusted), 'data' the user message (untrusted).
  'policies' omitted: policies are selected by their selectors; [] runs unguarded.

output rows:
  {"id", "text", "finish_reason", "num_output_tokens",
   "decisions": [{"policy", "version", "action", "mode", "rule", "signals"}]}
  A blocked request has finish_reason "content_filter" and the policy's refusal as text.
  A request with bad arguments has finish_reason "error" and an "error" field; the rest run.
""",
    )
    parser.add_argument("--policies", required=True, nargs="+", help="policy files or folders")
    parser.add_argument("--model", required=True, help="a known model name or a Hugging Face checkpoint folder")
    parser.add_argument("--input", required=True, help="requests, JSONL")
    parser.add_argument("--output", required=True, help="results, JSONL (overwritten)")
    parser.add_argument("--audit-log", help="write hash-chained audit records here (see 'innerguard audit --help')")
    parser.add_argument("--audit-key-file", help="operator key that signs audit checkpoints (or env INNERGUARD_AUDIT_KEY)")
    parser.add_argument("--audit-durability", choices=("sync", "batch", "none"), default="batch",
                        help="sync: each record is on disk before its result is returned (default: batch)")
    parser.add_argument("--max-tokens", type=int, default=64, help="default max_tokens per request (default 64)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--cache-dir", help="model cache folder")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, metavar="N",
                        help="GPUs per engine, as vLLM's option; the guard's attention heads are split across them (default 1)")
    add_enforce_eager(parser)
    parser.set_defaults(func=_run)


def read_rows(path: str) -> list[dict]:
    rows = []
    try:
        lines = split_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InnerguardError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            # One bad line must not sink the batch: it becomes an error row.
            rows.append({"id": f"line-{number}", "__error__": f"{path}:{number}: not JSON: {exc.msg}"})
    return rows


def _run(args: argparse.Namespace) -> int:
    from innerguard.engine.vllm_engine import import_vllm

    SamplingParams = import_vllm().SamplingParams
    from innerguard.engine.guarded import GuardedLLM

    rows = read_rows(args.input)
    llm = GuardedLLM(args.model, args.policies, audit_log=args.audit_log, audit_key_file=args.audit_key_file,
                     audit_durability=args.audit_durability, cache_dir=args.cache_dir,
                     enforce_eager=args.enforce_eager, tensor_parallel_size=args.tensor_parallel_size)
    outputs = llm.run(rows, SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens), use_tqdm=sys.stderr.isatty())
    with open(args.output, "w", encoding="utf-8") as f:
        for out in outputs:
            f.write(json.dumps(out.to_row(), ensure_ascii=False) + "\n")
    blocked = sum(o.blocked for o in outputs)
    errors = sum(o.error is not None and o.finish_reason == "error" for o in outputs)
    log.info("batch done", requests=len(outputs), blocked=blocked, errors=errors, output=args.output)
    return 0

"""``innerguard compile POLICY_DIR --model DIR``."""
from __future__ import annotations

import argparse
import sys

from innerguard.engine import models
from innerguard.engine.compiler import compile_policies, explain, plan_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile policies into a hook plan, analyzer chain and decision program",
        description=(
            "Lint the policies, then compile them for one model into the smallest plan that serves them: "
            "which Q/K heads and residual streams to capture at which layers, which vectors to add where, "
            "which analyzers yield which signals, and the rules in precedence order. The bundle hash covers "
            "the policy files, the artifacts and the model fingerprint, and goes into every audit record."
        ),
        epilog="example: innerguard compile policies/ --model smollm2-135m-instruct --format text",
    )
    parser.add_argument("paths", nargs="+", metavar="POLICY_PATH", help="policy files or folders")
    parser.add_argument("--model", required=True, help="a known model name or a Hugging Face checkpoint folder")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="text explains in words; json is the machine form (schemas/plan.schema.json)")
    parser.add_argument("--output", "-o", help="write the plan here instead of stdout")
    parser.add_argument("--cache-dir", help="model cache folder")
    parser.set_defaults(func=_compile)


def _compile(args: argparse.Namespace) -> int:
    model_dir = models.resolve(args.model, args.cache_dir)
    plan, needs = compile_policies(args.paths, model_dir)
    text = plan_json(plan) if args.format == "json" else explain(plan, needs)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0

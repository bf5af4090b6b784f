"""``innerguard lint PATH... [--model M] [--format text|json|sarif] [--explain ID]``.

Exit codes: 0 no error-level findings (warnings allowed), 1 error-level
findings, 2 the linter could not run (missing path, unusable model, internal
error).
"""
from __future__ import annotations

import argparse
import sys

from innerguard.engine.errors import InnerguardError
from innerguard.engine.lint import output
from innerguard.engine.policy.lint_rules import RULES, explain


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lint",
        help="check policy files: schema, semantics, artifacts, model geometry",
        description=(
            "Check policy files before they are deployed. Findings print as "
            "'file:line:col: severity rule-id message'. Exit 0 when there are no errors "
            "(warnings allowed), 1 when there are, 2 when linting could not run."
        ),
        epilog="Explain a finding: innerguard lint --explain IG205. All rules: docs/lint-rules.md.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="policy files or folders (searched for *.yaml, *.yml)")
    parser.add_argument("--model", help="check against this model: a known model name or a checkpoint folder")
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)")
    parser.add_argument("--explain", metavar="RULE-ID", help="print what a rule means and how to fix it, then exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.explain:
        text = explain(args.explain)
        if text is None:
            raise InnerguardError(f"unknown rule id {args.explain!r}", hint=f"rule ids run from {min(RULES)} to {max(RULES)}")
        sys.stdout.write(text)
        return 0
    if not args.paths:
        raise InnerguardError("no policy files given", hint="innerguard lint policies/")
    from innerguard.engine.lint.runner import lint_paths

    report = lint_paths(args.paths, model=args.model)
    if args.format == "json":
        sys.stdout.write(output.to_json(report.findings, report.files))
    elif args.format == "sarif":
        sys.stdout.write(output.to_sarif(report.findings))
    else:
        sys.stdout.write(output.to_text(report.findings, len(report.files)))
    if report.internal_error:
        return 2
    return 1 if report.errors else 0

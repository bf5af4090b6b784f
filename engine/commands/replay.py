"""``innerguard replay``: a policy revision on stored captures, diffed against an audit log."""
from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="evaluate policies on stored captures and compare with the decisions an audit log recorded",
        description=(
            "Compute the signals the policies need from captures stored by 'innerguard capture' (with the "
            "worker's own analyzer and rule code), decide each request, and, with --audit-log, show how many "
            "requests would change action."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
exit status: 0 replayed, 1 some requests would change action (with --audit-log) or could not be replayed,
2 the captures lack what the policies need (each missing layer/head/mode is named) or bad arguments.
Requests match audit records by id (the capture row's "id" = the record's request_id).
""",
    )
    parser.add_argument("--policies", required=True, nargs="+", help="policy files or folders (the revision to try)")
    parser.add_argument("--captures", required=True, help="a folder written by innerguard capture")
    parser.add_argument("--audit-log", nargs="+", help="audit log file(s) or folder holding the recorded decisions")
    parser.add_argument("--model", help="the model folder or name (default: the one in the manifest)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--examples", type=int, default=10, help="changed requests shown (text)")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from innerguard.engine.capture.replay import render_text, replay

    report = replay(args.policies, args.captures, model=args.model, audit=args.audit_log)
    if args.format == "json":
        print(json.dumps(report.to_dict(), default=str))
    else:
        print(render_text(report, args.examples))
    if report.missing:
        return 2
    changed = report.diff is not None and report.diff.changed
    failed = any(o.error for o in report.outcomes)
    return 1 if changed or failed else 0

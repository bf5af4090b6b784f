"""``innerguard audit verify|query|report``: tools for reviewers of audit logs."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from innerguard.engine.audit import KEY_ENV, load_key, verify
from innerguard.engine.audit.query import Filter, parse_time, read, table
from innerguard.engine.errors import InnerguardError

LOGS_HELP = "audit log files or folders (a folder means every *.jsonl in it: all streams and rotated segments)"

VERIFY_EPILOG = f"""\
checks, for every line: JSON, the audit schema (schemas/audit.schema.json), the hash chain
(prev = hash of the line before; hash = sha256 of the line as written), and with a key
every checkpoint's HMAC. Every file must end in a seal (written when a writer closes or
rotates): a file that just stops was truncated, or its writer is still running or died.
Across files, each stream's segments must be contiguous and chain to each other.

exit status: 0 intact, 1 broken (the first broken record is named as FILE:LINE), 2 unreadable.

examples:
  innerguard audit verify /var/log/innerguard/audit/
  innerguard audit verify audit/ --key-file /etc/innerguard/audit.key
  innerguard audit verify audit/ --allow-open --head 3f2a...   # a live log, against a published head
key: --key-file (hex or raw bytes) or ${KEY_ENV}; without one, signed checkpoints are not checked.
"""

QUERY_EPILOG = """\
examples:
  innerguard audit query audit/ --action block --since 2h
  innerguard audit query audit/ --policy prompt-injection --mode shadow --format json | jq .result
  innerguard audit query audit/ --tenant acme --since 2026-11-01 --until 2026-12-01
--action matches the action taken or, for shadow policies, the action that would have been.
Times: RFC 3339 (2026-11-29T10:00:00Z), a date (UTC midnight), or a duration back from now (15m, 2h, 7d).
"""

REPORT_EPILOG = """\
example:
  innerguard audit report audit/ -o report.html --key-file audit.key
The page is self-contained (inline CSS and SVG, no scripts or external assets): totals per
policy, action and mode; a timeline; each signal's distribution against its thresholds;
blocked requests with their evidence; policy revisions in force; the verification result.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "audit", help="verify, query and report on audit logs",
        description="Tools for reviewing innerguard's hash-chained audit logs (docs/audit.md).",
        epilog="examples:\n  innerguard audit verify audit/\n  innerguard audit query audit/ --action block\n"
               "  innerguard audit report audit/ -o report.html\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    p = _subcommand(sub, "verify", "check schema, hash chain, checkpoints and seals",
                    "Verify audit logs; report the first broken record of each file as FILE:LINE.", VERIFY_EPILOG)
    _logs_and_key(p)
    p.add_argument("--allow-open", action="store_true", help="accept a last file without a seal (and a torn last line): a live log")
    p.add_argument("--head", action="append", default=[], metavar="HASH", help="a published head hash that must be in the logs (repeatable)")
    p.add_argument("--no-schema", action="store_true", help="skip the JSON Schema check (fast, for very large logs); integrity checks still run")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_verify)

    p = _subcommand(sub, "query", "list decisions, filtered",
                    "List decision records, oldest first, as a table or JSON lines.", QUERY_EPILOG)
    p.add_argument("logs", nargs="+", metavar="LOG", help=LOGS_HELP)
    p.add_argument("--since", help="decided at or after this time")
    p.add_argument("--until", help="decided before this time")
    p.add_argument("--policy", help="policy name")
    p.add_argument("--action", help="block, steer, flag, rerank, drop_documents, allow")
    p.add_argument("--mode", choices=("enforce", "shadow", "warn"))
    p.add_argument("--tenant")
    p.add_argument("--type", dest="types", action="append", choices=("decision", "completion", "open", "repair", "checkpoint", "error"),
                   help="record types to list (default: decision; repeatable)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_query)

    p = _subcommand(sub, "report", "write a self-contained HTML report",
                    "Write one HTML page that summarises and verifies audit logs.", REPORT_EPILOG)
    _logs_and_key(p)
    p.add_argument("-o", "--output", required=True, help="the HTML file to write")
    p.add_argument("--allow-open", action="store_true", help="verify a live log (see verify --allow-open)")
    p.add_argument("--since", help="only decisions at or after this time")
    p.add_argument("--until", help="only decisions before this time")
    p.add_argument("--title", default="innerguard audit report")
    p.set_defaults(func=_report)


def _subcommand(sub, name: str, help: str, description: str, epilog: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _logs_and_key(p: argparse.ArgumentParser) -> None:
    p.add_argument("logs", nargs="+", metavar="LOG", help=LOGS_HELP)
    p.add_argument("--key-file", help=f"the operator key that signs checkpoints (hex or raw); default ${KEY_ENV}")


def _verify(args: argparse.Namespace) -> int:
    report = verify(args.logs, key=load_key(args.key_file), allow_open=args.allow_open, heads=args.head,
                    check_schema=not args.no_schema)
    if args.format == "json":
        json.dump({"status": ("intact", "broken", "unreadable")[report.status], "records": report.records,
                   "files": report.files, "problems": [vars(p) for p in report.problems], "unreadable": report.unreadable,
                   "warnings": report.warnings, "heads": report.heads}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return report.status
    for problem in report.problems:
        print(f"{problem}", file=sys.stderr)
    for line in report.unreadable:
        print(f"unreadable: {line}", file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for stream, head in report.heads.items():
        print(f"head {stream}: {head}")
    print(report.summary())
    return report.status


def _filter(args: argparse.Namespace, **extra) -> Filter:
    return Filter(since=parse_time(args.since) if args.since else None, until=parse_time(args.until) if args.until else None, **extra)


def _query(args: argparse.Namespace) -> int:
    where = _filter(args, policy=args.policy, action=args.action, mode=args.mode, tenant=args.tenant,
                    types=tuple(args.types or ("decision",)))
    records = [loc.record for loc in read(args.logs) if where(loc.record)]
    if args.format == "json":
        for record in records:
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(table(records))
    return 0


def _report(args: argparse.Namespace) -> int:
    from innerguard.engine.audit.report import render

    html = render(args.logs, key=load_key(args.key_file), allow_open=args.allow_open, where=_filter(args), title=args.title)
    try:
        Path(args.output).write_text(html, encoding="utf-8")
    except OSError as exc:
        raise InnerguardError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output}")
    return 0

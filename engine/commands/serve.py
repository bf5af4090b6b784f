"""``innerguard serve``: vLLM's OpenAI-compatible server with the guard inside.

Every ``vllm serve`` option works here too: the parser *is* vLLM's, with
innerguard's options added in front.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from .. import models
from ..errors import InnerguardError

DESCRIPTION = """\
Serve a model through vLLM's own OpenAI-compatible server (/v1/chat/completions,
/v1/completions, /v1/models; streaming, n, logprobs, usage) with innerguard's
policies running inside the engine. The operator decides which policies apply
(the policy folder, each policy's applies_to, and trusted metadata: the API
key's name or headers you name); a client can only add policies by name in an
"innerguard" body field. A blocked request gets HTTP 200 with the policy's
refusal and finish_reason "content_filter"; every guarded response carries a
top-level "innerguard" object (decision id, verdict, per-policy outcome)."""

EPILOG = """\
examples:
  innerguard serve --model smollm2-135m-instruct --policies policies/ --port 8000
  innerguard serve --model smollm2-135m-instruct --policies policies/ \\
      --admin-token "$ADMIN" --tenant-keys keys.yaml --audit-log audit/
  curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{
      "model": "smollm2-135m-instruct",
      "messages": [{"role": "system", "content": "Summarise the text."},
                   {"role": "user", "content": "...untrusted text..."}],
      "innerguard": {"policies": ["prompt-injection"]}}'
  curl -H "Authorization: Bearer $ADMIN" localhost:8000/innerguard/status
  curl -X POST -H "Authorization: Bearer $ADMIN" localhost:8000/innerguard/reload
  kill -HUP <pid>     # reload too; so does any change in the policy folder

The policy folder is watched; a new revision is linted, compiled and proved by
a self-check before it serves, and a broken one never replaces a good one.
Metrics: innerguard_decisions_total, innerguard_analysis_seconds,
innerguard_reload_total, innerguard_guard_errors_total on vLLM's /metrics.
"""


def register(subparsers) -> None:
    # Parsing is vLLM's (see main); this entry only lists the command.
    subparsers.add_parser("serve", help="serve an OpenAI-compatible API with the policies enforced inside vLLM",
                          add_help=False).set_defaults(func=None, delegate=main)


def build_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="innerguard serve", description=DESCRIPTION, epilog=EPILOG,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_argument_group("innerguard", "the guard (all other options are vllm serve's)")
    group.add_argument("--policies", required=True, nargs="+", metavar="PATH", help="policy files or folders (watched for changes)")
    group.add_argument("--admin-token", help="bearer token for /innerguard/status and /innerguard/reload (off without it)")
    group.add_argument("--audit-log", metavar="PATH", help="write hash-chained audit records here (a folder of segment files)")
    group.add_argument("--audit-key-file", metavar="FILE", help="operator key that signs audit checkpoints (or env INNERGUARD_AUDIT_KEY)")
    group.add_argument("--audit-durability", choices=("sync", "batch", "none"), default="batch",
                       help="sync: a record is on disk before its response returns (default: batch)")
    group.add_argument("--expose-signals", action="store_true",
                       help="include signal values in responses (off: they help an attacker tune)")
    group.add_argument("--tenant-keys", metavar="FILE",
                       help="YAML/JSON {tenant name: API key}; the key's name is the request's tenant (keys also authenticate)")
    group.add_argument("--tenant-header", metavar="NAME", help="trusted header naming the tenant (set by your gateway)")
    group.add_argument("--tags-header", metavar="NAME", help="trusted header with comma-separated request tags")
    group.add_argument("--isolate-tenants", action="store_true",
                       help="give each tenant its own prefix cache (a secret per-tenant cache salt): "
                            "no tenant reuses, or can time, another's cached prompts")
    group.add_argument("--watch-interval", type=float, default=2.0, metavar="SECONDS",
                       help="how often to look for policy changes (0: only SIGHUP and the reload endpoint)")
    group.add_argument("--cache-dir", help="innerguard's model cache folder")
    return make_arg_parser(parser)


def main(argv: list[str]) -> int:
    import uvloop

    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    from ..serve.app import serve
    from ..serve.guard import ServeOptions
    from ..serve.engine_args import apply_guarded_defaults
    from ..vllm_engine import import_vllm

    import_vllm()
    parser = build_parser()
    args = parser.parse_args(argv)
    name = args.model_tag or args.model
    model_dir = models.resolve(name, args.cache_dir)
    args.model = str(model_dir)
    args.model_tag = None
    if not args.served_model_name:
        args.served_model_name = [name]
    tenant_keys = _tenant_keys(args.tenant_keys)
    if tenant_keys:
        args.api_key = list(args.api_key or []) + list(tenant_keys)
    apply_guarded_defaults(args, parser)
    validate_parsed_serve_args(args)
    options = ServeOptions(
        expose_signals=args.expose_signals,
        admin_token=args.admin_token,
        tenant_keys=tenant_keys,
        tenant_header=args.tenant_header,
        tags_header=args.tags_header,
        isolate_tenants=args.isolate_tenants,
    )
    audit = None
    if args.audit_log:
        from ..serve.audit_sink import open_audit

        audit = open_audit(args.audit_log, key_file=args.audit_key_file, durability=args.audit_durability,
                           model_name=name)
    uvloop.run(serve(args, sources=[Path(p) for p in args.policies], model_dir=model_dir, options=options,
                     audit=audit, watch_interval=args.watch_interval))
    return 0


def _tenant_keys(path: str | None) -> dict[str, str]:
    """{API key: tenant name} from a {name: key} file."""
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InnerguardError(f"cannot read tenant keys {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in data.items()):
        raise InnerguardError(f"{path}: tenant keys must map tenant names to non-empty API keys", hint="e.g. acme: sk-acme-...")
    keys = {v: k for k, v in data.items()}
    if len(keys) != len(data):
        raise InnerguardError(f"{path}: two tenants share one API key")
    return keys




"""``innerguard serve``: vLLM's OpenAI-compatible server with the guard inside.

Every ``vllm serve`` option works here too: the parser *is* vLLM's, with
innerguard's options added in front.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from innerguard.engine import models
from innerguard.engine.errors import InnerguardError
from innerguard.engine.logging import get_logger

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
      --admin-token-file /run/secrets/innerguard-admin --tenant-keys keys.yaml \\
      --require-api-key-everywhere --audit-log audit/
  curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{
      "model": "smollm2-135m-instruct",
      "messages": [{"role": "system", "content": "Summarise the text."},
                   {"role": "user", "content": "...untrusted text..."}],
      "innerguard": {"policies": ["prompt-injection"]}}'
  curl -H "Authorization: Bearer $ADMIN" localhost:8000/innerguard/status
  curl -X POST -H "Authorization: Bearer $ADMIN" localhost:8000/innerguard/reload
  kill -HUP <pid>     # reload too; so does any change in the policy folder

Identity: a request carries one Authorization header; its key (--api-key, else
VLLM_API_KEY, or a --tenant-keys key) is checked before the body is read, and a
tenant key names the tenant. --tenant-header and --tags-header are trusted as
sent, once: put the server behind a gateway that strips them from clients
(docs/serving.md, "Behind a gateway").

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
    from innerguard.engine.serve import vllm_compat

    parser = vllm_compat.flexible_argument_parser(prog="innerguard serve", description=DESCRIPTION, epilog=EPILOG,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_argument_group("innerguard", "the guard (all other options are vllm serve's)")
    group.add_argument("--policies", required=True, nargs="+", metavar="PATH", help="policy files or folders (watched for changes)")
    group.add_argument("--admin-token-file", metavar="FILE",
                       help="file holding the bearer token for /innerguard/status and /innerguard/reload "
                            "(or env INNERGUARD_ADMIN_TOKEN; without either the admin endpoints are off)")
    group.add_argument("--admin-token", metavar="TOKEN",
                       help="the admin token itself; avoid: any local user sees it in the process list "
                            "(use --admin-token-file or INNERGUARD_ADMIN_TOKEN)")
    group.add_argument("--audit-log", metavar="PATH", help="write hash-chained audit records here (a folder of segment files)")
    group.add_argument("--audit-key-file", metavar="FILE", help="operator key that signs audit checkpoints (or env INNERGUARD_AUDIT_KEY)")
    group.add_argument("--audit-durability", choices=("sync", "batch", "none"), default="batch",
                       help="sync: a record is on disk before its response returns (default: batch)")
    group.add_argument("--expose-signals", action="store_true",
                       help="include signal values in responses (off: they help an attacker tune)")
    group.add_argument("--tenant-keys", metavar="FILE",
                       help="YAML/JSON {tenant name: API key}; the key's name is the request's tenant "
                            "(the keys authenticate beside --api-key or VLLM_API_KEY)")
    group.add_argument("--require-api-key-everywhere", action="store_true",
                       help="also require the API key on the service routes vLLM leaves open (/metrics, /docs, "
                            "/redoc, /openapi.json, /tokenize, /detokenize, /version, /load); /health and /ping "
                            "stay open for probes")
    group.add_argument("--tenant-header", metavar="NAME",
                       help="trusted header naming the tenant when the key is not a tenant key; your gateway "
                            "must set it and strip any the client sent (sent twice: 400)")
    group.add_argument("--tags-header", metavar="NAME",
                       help="trusted header with comma-separated request tags; your gateway must set it and "
                            "strip any the client sent (sent twice: 400)")
    group.add_argument("--isolate-tenants", action="store_true",
                       help="give each tenant its own prefix cache (a secret per-tenant cache salt): "
                            "no tenant reuses, or can time, another's cached prompts")
    group.add_argument("--invisible-characters", choices=("strip", "refuse", "keep"), default="strip",
                       help="control, zero-width, bidirectional-override and other characters a reader cannot see, "
                            "in messages and prompts: strip them before the model reads the request (default), "
                            "refuse the request with a 400 that names the character, or keep them")
    group.add_argument("--watch-interval", type=float, default=2.0, metavar="SECONDS",
                       help="how often to look for policy changes (0: only SIGHUP and the reload endpoint)")
    group.add_argument("--cache-dir", help="innerguard's model cache folder")
    return vllm_compat.make_arg_parser(parser)


def main(argv: list[str]) -> int:
    import uvloop

    from innerguard.engine.serve import vllm_compat
    from innerguard.engine.serve.app import serve
    from innerguard.engine.serve.guard import ServeOptions
    from innerguard.engine.serve.engine_args import apply_guarded_defaults
    from innerguard.engine.vllm_engine import import_vllm

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
    api_keys = _api_keys(args.api_key, tenant_keys)
    # vLLM's own check then holds exactly the keys our middleware checks first
    # (it would drop VLLM_API_KEY once --tenant-keys filled --api-key).
    args.api_key = list(api_keys) or None
    if args.require_api_key_everywhere and not api_keys:
        raise InnerguardError("--require-api-key-everywhere needs a key to require",
                              hint="give --api-key, VLLM_API_KEY or --tenant-keys")
    admin_token = _admin_token(args.admin_token, args.admin_token_file, os.environ)
    apply_guarded_defaults(args, parser)
    vllm_compat.validate_parsed_serve_args(args)
    options = ServeOptions(
        expose_signals=args.expose_signals,
        admin_token=admin_token,
        tenant_keys=tenant_keys,
        api_keys=api_keys,
        require_api_key_everywhere=args.require_api_key_everywhere,
        tenant_header=args.tenant_header,
        tags_header=args.tags_header,
        isolate_tenants=args.isolate_tenants,
        invisible_characters=args.invisible_characters,
    )
    audit = None
    if args.audit_log:
        from innerguard.engine.serve.audit_sink import open_audit

        audit = open_audit(args.audit_log, key_file=args.audit_key_file, durability=args.audit_durability,
                           model_name=name)
    uvloop.run(serve(args, sources=[Path(p) for p in args.policies], model_dir=model_dir, options=options,
                     audit=audit, watch_interval=args.watch_interval))
    return 0


def _api_keys(given: list[str] | None, tenant_keys: dict[str, str]) -> tuple[str, ...]:
    """The keys that authenticate: vLLM's rule (``--api-key``, else
    ``VLLM_API_KEY``; empty ones ignored), plus the tenant keys."""
    import vllm.envs as envs

    return tuple(dict.fromkeys([k for k in (given or [envs.VLLM_API_KEY]) if k] + list(tenant_keys)))


def _admin_token(flag: str | None, path: str | None, environ) -> str | None:
    """The admin token from ``--admin-token-file``, ``--admin-token`` (with a
    warning) or ``INNERGUARD_ADMIN_TOKEN``; a flag wins over the environment."""
    if flag is not None and path is not None:
        raise InnerguardError("--admin-token and --admin-token-file both given", hint="give --admin-token-file only")
    if path is not None:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InnerguardError(f"cannot read the admin token file {path}: {exc}") from None
        if not token:
            raise InnerguardError(f"admin token file {path} is empty", hint="write the token on one line")
        return token
    if flag is not None:
        get_logger("innerguard.serve").warning(
            "--admin-token is visible to every local user in the process list (ps, /proc/PID/cmdline)",
            fix="use --admin-token-file FILE or the INNERGUARD_ADMIN_TOKEN environment variable")
        return flag or None
    return environ.get("INNERGUARD_ADMIN_TOKEN") or None


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




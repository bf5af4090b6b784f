"""The ``innerguard`` command. Each subcommand lives in
``innerguard.engine.commands.<name>`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> exit code``."""
from __future__ import annotations

import argparse
import importlib
import sys

from innerguard.engine import logging as ig_logging
from innerguard.engine.errors import InnerguardError

COMMANDS = ("models", "lint", "compile", "run", "serve", "demo", "audit", "eval", "test", "capture", "replay", "bench", "build")

EPILOG = """\
workflow:
  innerguard models prepare smollm2-135m-instruct   # a real model, no hub needed
  innerguard lint policies/ --model smollm2-135m-instruct
  innerguard compile policies/ --model smollm2-135m-instruct --format text
  innerguard run --policies policies/ --model smollm2-135m-instruct \\
      --input in.jsonl --output out.jsonl --audit-log audit.jsonl
  innerguard audit verify audit.jsonl                # schema, hash chain, checkpoints
  innerguard build probe --model smollm2-135m-instruct --data labelled.jsonl --layer 16 --out probe.safetensors

Run 'innerguard COMMAND --help' for each command's options.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="innerguard",
        description="Declarative guardrails that run inside the vLLM inference engine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-format", choices=("console", "json"), help="log renderer (default: console; env INNERGUARD_LOG_FORMAT)")
    parser.add_argument("--log-level", default=None, help="debug, info, warning or error (default: info)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"innerguard.engine.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"innerguard.engine.commands.{name}":
                continue  # not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    ig_logging.configure(args.log_format, args.log_level)
    delegate = getattr(args, "delegate", None)  # a command that parses its own options (serve: vLLM's parser)
    if delegate is None and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if delegate is None and not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if delegate is not None:
            return int(delegate(rest) or 0)
        return int(args.func(args) or 0)
    except InnerguardError as exc:
        print(f"innerguard: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        install = _INSTALL_FOR.get((exc.name or "").split(".")[0])
        if install is None:
            raise
        # The base install is the policy tooling; the runtime and the lab come with extras.
        print(f"innerguard: error: innerguard {args.command} needs {exc.name}, which this install lacks ({install})",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("innerguard: interrupted", file=sys.stderr)
        return 130


# A missing third-party module -> how to install it (the extras of pyproject.toml).
_RUNTIME = "pip install 'innerguard[cpu]' on a CPU machine, 'innerguard[gpu]' with a GPU"
_INSTALL_FOR = {**dict.fromkeys(("torch", "numpy", "safetensors", "transformers", "tqdm"), _RUNTIME),
                "matplotlib": "pip install 'innerguard[lab]'",
                "gguf": "pip install 'innerguard[convert]'", "accelerate": "pip install 'innerguard[convert]'"}


if __name__ == "__main__":
    sys.exit(main())

"""The ``innerguard`` command. Each subcommand lives in
``innerguard.engine.commands.<name>`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> exit code``."""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

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
    sigterm = _SigtermStopsChildren()
    try:
        if delegate is not None:
            return int(delegate(rest) or 0)  # vLLM's server handles its own signals
        with sigterm:
            return int(args.func(args) or 0)
    except InnerguardError as exc:
        if sigterm.received:
            return sigterm.exit()
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
        if sigterm.received:
            return sigterm.exit()
        print("innerguard: interrupted", file=sys.stderr)
        return 130


class _SigtermStopsChildren:
    """SIGTERM (a job scheduler, ``timeout``, ``kill``) ends the command as
    Ctrl-C does, and stops the processes it started. By default Python dies
    at once: its ``finally: llm.shutdown()`` never runs, and vLLM's engine
    and worker processes live on as orphans holding the machine's memory.
    The handler stops the children itself and gives the command
    ``GRACE_S`` to unwind (audit logs are flushed in ``finally`` blocks),
    then exits: an exception raised in a signal handler is lost when it
    lands in vLLM's start-up wait (a ZeroMQ poll), which then waits for the
    stopped engine for minutes."""

    GRACE_S = 20.0

    def __init__(self):
        self.received = False
        self._installed = False
        self._deadline: threading.Timer | None = None

    def __enter__(self):
        # A caller that set its own handler keeps it; only the main thread may set one.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc):
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.received and exc[0] is None:
            raise KeyboardInterrupt  # the command ran to its end after all: still exit as terminated
        return False

    def _handle(self, signum, frame):
        if self.received:
            return
        self.received = True
        try:
            import psutil  # vLLM's dependency: present wherever a command starts an engine

            me = psutil.Process()
            everyone, direct = me.children(recursive=True), me.children()
            for child in direct:  # vLLM's engine core stops its own workers on SIGTERM
                child.terminate()
            psutil.wait_procs(direct, timeout=10)
            for left in [p for p in everyone if p.is_running()]:
                left.terminate()
            psutil.wait_procs(everyone, timeout=5)
        except Exception:  # noqa: BLE001 - nothing to stop, or no psutil: unwinding is what is left
            pass
        self._deadline = threading.Timer(self.GRACE_S, lambda: os._exit(self.exit()))
        self._deadline.daemon = True
        self._deadline.start()
        raise KeyboardInterrupt

    def exit(self) -> int:
        if self._deadline is not None:
            self._deadline.cancel()  # unwound in time (a no-op when the deadline itself calls)
        print("innerguard: terminated", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM


# A missing third-party module -> how to install it (the extras of pyproject.toml).
_RUNTIME = "pip install 'innerguard[cpu]' on a CPU machine, 'innerguard[gpu]' with a GPU"
_INSTALL_FOR = {**dict.fromkeys(("torch", "numpy", "safetensors", "transformers", "tqdm"), _RUNTIME),
                "matplotlib": "pip install 'innerguard[lab]'",
                "gguf": "pip install 'innerguard[convert]'", "accelerate": "pip install 'innerguard[convert]'"}


if __name__ == "__main__":
    sys.exit(main())

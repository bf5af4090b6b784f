"""Engine options shared by the commands that start a guarded engine."""
from __future__ import annotations

import argparse


def add_enforce_eager(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--enforce-eager", action="store_true",
                        help="run vLLM eager: starts about 1.5 min sooner on a small CPU, steps more slowly "
                        "(default: vLLM's compiled mode, with the guard inside the compiled graph)")

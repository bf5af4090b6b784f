"""``innerguard capture``: store internal states of a batch of prompts."""
from __future__ import annotations

import argparse
import json

from innerguard.engine.commands.run import read_rows


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "capture",
        help="store hidden states and/or Q/K of a batch of prompts (passive: generation unchanged)",
        description=(
            "Run prompts through vLLM with recording hooks and store the residual stream after chosen layers "
            "and/or post-RoPE Q/K of chosen heads as safetensors shards, with a manifest.json whose requests "
            "follow the input order."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
input rows (JSONL): {"id", "prompt"} or {"id", "messages": [...]} or {"id", "instruction", "data"}

examples:
  innerguard capture --model smollm2-135m-instruct --input prompts.jsonl --layers 0 5 29 --output caps/
  innerguard capture --model smollm2-135m-instruct --input prompts.jsonl --layers all \\
      --mode all_tokens --dtype float16 --output caps/
  innerguard capture ... --layers 15 --qk-heads 13:0 13:4 15:1,2 --output caps/   # what a policy replay needs

stored per request: hidden [layers, rows, hidden] (the residual stream = vLLM's hidden + residual after
layer L = Hugging Face's output_hidden_states[L + 1], before the final norm), positions [rows],
q.L [rows, heads, head_dim] of the chosen heads, k.L [prompt tokens, kv heads, head_dim] and k_positions.
last_token keeps the last prompt token's row (with --generated: also every generated token's row);
all_tokens keeps every prompt row (with --generated: every generated row too). The last generated token
is never run through the model, so it has no row.
""",
    )
    parser.add_argument("--model", required=True, help="a known model name or a Hugging Face checkpoint folder")
    parser.add_argument("--input", required=True, help="prompts, JSONL")
    parser.add_argument("--output", required=True, help="an empty folder for the shards and manifest.json")
    parser.add_argument("--layers", nargs="+", help="decoder layers (0-based), or 'all'")
    parser.add_argument("--qk-heads", nargs="+", metavar="L:H", help="post-RoPE Q/K of these heads, e.g. 13:0 15:1,2")
    parser.add_argument("--mode", choices=("last_token", "all_tokens"), default="last_token")
    parser.add_argument("--generated", action="store_true", help="also the generated tokens' rows")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                        help="stored precision, cast on the device (default float32)")
    parser.add_argument("--max-tokens", type=int, help="tokens generated per request (default 1; 16 with --generated)")
    parser.add_argument("--policies", nargs="+", help="render raw prompts with these policies' span markers "
                        "(as innerguard run would); not enforced")
    parser.add_argument("--budget-mib", type=int, default=512, help="bytes of captures held before the engine waits (MiB)")
    parser.add_argument("--cache-dir", help="model cache folder")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from innerguard.engine import models
    from innerguard.engine.capture import CaptureSpec, Limits, capture_to_disk, parse_layers, parse_qk_heads
    from innerguard.engine.compiler import compile_policies

    spec = CaptureSpec(layers=parse_layers(args.layers), qk=parse_qk_heads(args.qk_heads), mode=args.mode,
                       generated=args.generated, dtype=args.dtype, max_tokens=args.max_tokens)
    model_dir = models.resolve(args.model, args.cache_dir)
    spec.resolve(models.read_geometry(model_dir))  # fail before the engine starts
    rows = read_rows(args.input)
    plan = compile_policies(args.policies, model_dir)[0] if args.policies else None
    store = capture_to_disk(str(model_dir), rows, spec, args.output, plan=plan, progress=True,
                            limits=Limits(budget_bytes=args.budget_mib << 20))
    manifest = store.manifest
    failed = [r for r in manifest["requests"] if r.get("error")]
    summary = {"output": str(store.folder), "requests": len(manifest["requests"]), "failed": len(failed),
               "tensor_bytes": store.tensor_bytes(), "shards": len(manifest.get("shards", ())),
               "seconds": manifest.get("seconds")}
    if args.format == "json":
        print(json.dumps(summary))
    else:
        print(f"captured {summary['requests'] - summary['failed']}/{summary['requests']} requests into {summary['output']} "
              f"({summary['shards']} shards, {summary['tensor_bytes'] / (1 << 20):.2f} MiB of tensors, {summary['seconds']} s)")
        for r in failed[:10]:
            print(f"  {r['id']}: {r['error']}")
    return 1 if failed else 0

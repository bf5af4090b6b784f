"""The server's engine options: the guard's own are added, the operator's
wrapped ones are kept inside them."""
from __future__ import annotations

import pytest

from innerguard.engine.commands.serve import build_parser
from innerguard.engine.serve.engine_args import apply_guarded_defaults
from innerguard.engine.vllm_engine import COMPILE_CACHE_TAG


@pytest.mark.parametrize("given, expected", [
    ([], COMPILE_CACHE_TAG),
    (["--additional-config", '{"kv_tier": "fast"}'], {"kv_tier": "fast", **COMPILE_CACHE_TAG}),
])
def test_the_compile_cache_tag_joins_the_operators_additional_config(given, expected):
    parser = build_parser()
    args = parser.parse_args(["smollm2-135m-instruct", "--policies", "policies", *given])
    args.model = args.model_tag
    apply_guarded_defaults(args, parser)
    assert args.additional_config == expected

"""The names both sides of the engine/worker boundary must agree on.

The engine side (``vllm_engine.py``) writes them into vLLM's configuration;
the worker side (``innerguard.hooks``) is loaded by vLLM under them and
checks them. Kept here, free of imports, so that the worker never has to
import engine start-up to learn them (tests/worker/test_worker_imports.py).
The plan itself, the other half of the contract, is ``plan.py``.
"""
from typing import Any, TypedDict

# The key of a request's innerguard arguments in SamplingParams.extra_args.
# Over HTTP, vLLM's ``vllm_xargs`` body field fills the same, but it takes only
# scalars and lists, so the arguments travel as one JSON string.
REQUEST_KEY = "innerguard"
# vLLM's ParallelConfig.worker_extension_cls: the worker's RPC methods.
EXTENSION = "innerguard.hooks.worker_extension.InnerguardWorkerExtension"
# The extension's RPC methods, called by name through vLLM's collective_rpc
# (tests/worker/test_worker_imports.py checks that each one exists).
RPC_INSTALL = "innerguard_install"  # stage a plan: (plan dict) -> install info
RPC_COMMIT = "innerguard_commit"  # the staged plan becomes current: (bundle hash)
RPC_ROLLBACK = "innerguard_rollback"  # drop the staged plan: (bundle hash) -> bool
RPC_TAKE_RESULTS = "innerguard_take_results"  # finished requests' verdicts: (keys) -> {key: result}
RPC_TAKE_DECODE = "innerguard_take_decode"  # what decode rules found: (keys) -> {key: {vLLM request id: record}}
RPC_HOOK_CALLS = "innerguard_hook_calls"  # (reset, bundle_hash) -> calls per hook
RPC_KV_READBACK = "innerguard_kv_readback"  # read back prefix-cached K and scores: (enabled) -> bool
RPC_STATS = "innerguard_stats"  # what the worker holds
RPC_CONFIGURE = "innerguard_configure"  # (result_ttl_s, retire_grace_s)
RPC_UNINSTALL = "innerguard_uninstall"
RPC_RECORD_START = "innerguard_record_start"  # capture (hooks/record.py): (spec) -> info
RPC_RECORD_TAKE = "innerguard_record_take"  # (keys, call_bytes) -> records
RPC_RECORD_STATS = "innerguard_record_stats"  # (reset_peak) -> stats
RPC_RECORD_STOP = "innerguard_record_stop"  # -> stats
# SchedulerConfig.scheduler_cls: makes a block final inside the engine.
SCHEDULER = "innerguard.hooks.scheduler.InnerguardScheduler"
# LoadConfig.load_format of hooks/model_loader.py: the operator's loader, then
# the guard points; the operator's own format travels under this extra key.
LOAD_FORMAT = "innerguard"
INNER_LOAD_FORMAT_KEY = "innerguard_load_format"
# hooks/guard_points.py's custom ops. On a GPU they split vLLM's piecewise
# CUDA graphs: the graph pieces replay, the points run between them.
GUARD_POINT_OPS = ("innerguard::attention_point", "innerguard::layer_point")


class PolicyDecision(TypedDict, total=False):
    """One selected policy's part of a worker result."""
    policy: str
    version: str
    revision: str
    mode: str  # enforce | shadow
    action: str  # what was applied: allow | flag | steer | block
    rule_action: str  # what the matched rule asked for (shadow mode applies less)
    applied: bool
    rule: str | None
    signals: dict[str, Any]  # the values the rule read; None where a signal failed
    message: str | None
    error: str | None


class WorkerResult(TypedDict, total=False):
    """A request's verdict as the worker reports it (``RPC_TAKE_RESULTS``)
    and the engine side reads it: plain data, so it crosses processes as it
    is. Built in hooks/decisions.py and hooks/decide_step.py, and on the
    engine side by engine/verdicts.py when the worker reported nothing;
    tests/worker/test_worker_result.py holds every builder to these keys."""
    id: str  # the request's innerguard key
    action: str
    blocked: bool
    policy: str | None  # the policy whose rule decided
    rule: str | None
    message: str | None  # the refusal text of a block
    steers: list[str]  # steer ids to apply from the first generated token
    flags: list[dict[str, Any]]
    decisions: list[PolicyDecision]
    signals: dict[str, Any]
    details: dict[str, Any]  # per-document scores (the reranker)
    errors: dict[str, str]  # signal or "*" -> why it failed
    unknown_policies: list[str]
    bundle: str  # the plan the worker decided under
    prefill_tokens: int
    num_prompt_tokens: int
    analysis_ms: float
    decision_latency_ms: float



# The decoder families whose guard points, captures and analyzers are checked
# against the Hugging Face reference (tests/runtime/test_model_families.py),
# by the architecture name in config.json (vLLM's model class has the same
# name). The engine side refuses others when it reads a model
# (models.read_geometry), the worker's loader when vLLM loads one: a model
# shaped differently would put the guard points on the wrong tensors.
SUPPORTED_FAMILIES = {
    "LlamaForCausalLM": "Llama 3.x/SmolLM2",
    "MistralForCausalLM": "Mistral",
    "Qwen2ForCausalLM": "Qwen2/Qwen2.5",
    "Qwen3ForCausalLM": "Qwen3",
    "GraniteForCausalLM": "Granite",
    "Phi3ForCausalLM": "Phi-3",
    "Gemma2ForCausalLM": "Gemma 2",
    "Gemma3ForCausalLM": "Gemma 3",
    "Qwen3MoeForCausalLM": "Qwen3-MoE",
}


def unsupported_family(architecture: str, where: str) -> str:
    """The one-line refusal of a family outside ``SUPPORTED_FAMILIES``."""
    supported = ", ".join(f"{family} ({arch})" for arch, family in SUPPORTED_FAMILIES.items())
    return f"model family {architecture} is not supported by innerguard ({where}); supported families: {supported}"

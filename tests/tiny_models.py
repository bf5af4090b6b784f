"""Tiny random-weight decoder models for structural tests.

Built with transformers from a fixed seed and saved as safetensors, so a
test gets a real checkpoint folder (config.json + model.safetensors) in
milliseconds. Weights use a larger init range than usual so that attention
patterns are far from uniform and parity tests have something to compare.

    from tiny_models import build_tiny_model, TINY_SPECS   # tests/ on sys.path
    path = build_tiny_model("llama", tmp_path / "llama")

Pass ``tokenizer_dir`` (e.g. the prepared SmolLM2 folder) to copy its
tokenizer files in and size the vocabulary to match, which makes the
checkpoint loadable by vLLM too.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

SEED = 1234


@dataclass(frozen=True)
class TinySpec:
    architecture: str  # "llama" or "qwen2"
    num_layers: int = 4
    hidden_size: int = 64
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None  # None: hidden_size // num_heads
    vocab_size: int = 512
    # Family-specific config values (name, value), set away from their
    # defaults so that a capture ignoring one of them shows.
    extra: tuple = ()
    random_norms: bool = False  # norm weights start at one (or zero for Gemma's 1 + w); make them matter


TINY_SPECS = {
    "llama": TinySpec("llama"),
    # Qwen2 has biases on q/k/v: RoPE is applied after them, a detail the
    # capture has to get right.
    "qwen2": TinySpec("qwen2"),
    # head_dim (32) != hidden/heads (16): catches code that derives it.
    "llama_wide_heads": TinySpec("llama", head_dim=32),
    # The decoder families of tests/runtime/test_model_families.py; head size
    # 32, as llama_wide_heads, which vLLM's CPU attention takes.
    "mistral": TinySpec("mistral", head_dim=32),
    # QK-norm (RMSNorm over each head's q and k before RoPE), random weights.
    "qwen3": TinySpec("qwen3", head_dim=32, random_norms=True),
    # Granite scales embeddings, the residual branches, attention and logits.
    "granite": TinySpec("granite", hidden_size=128, extra=(
        ("embedding_multiplier", 3.0), ("residual_multiplier", 0.5),
        ("attention_multiplier", 0.09), ("logits_scaling", 2.0))),
    # Phi-3 fuses qkv and gate/up projections; its head size is hidden/heads.
    "phi3": TinySpec("phi3", hidden_size=128),
    # Gemma 2: attention logit soft-capping, sliding-window layers (even ones),
    # query scaling by query_pre_attn_scalar, final logit soft-capping.
    # vLLM's Gemma 2 always ties the output embedding to the input one.
    "gemma2": TinySpec("gemma2", head_dim=32, random_norms=True, extra=(
        ("tie_word_embeddings", True), ("query_pre_attn_scalar", 20), ("attn_logit_softcapping", 5.0),
        ("final_logit_softcapping", 10.0), ("sliding_window", 8))),
    # Gemma 3: QK-norm, query scaling, sliding-window layers with their own RoPE base.
    "gemma3": TinySpec("gemma3", head_dim=32, random_norms=True, extra=(
        ("query_pre_attn_scalar", 20), ("sliding_window", 8),
        ("layer_types", ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]))),
    # Mixture of experts: 4 experts, 2 per token, every layer sparse.
    "qwen3_moe": TinySpec("qwen3_moe", head_dim=32, random_norms=True, extra=(
        ("num_experts", 4), ("num_experts_per_tok", 2), ("moe_intermediate_size", 64),
        ("decoder_sparse_step", 1), ("norm_topk_prob", True))),
}


def _config(spec: TinySpec, vocab_size: int):
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.hidden_size * 2,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=512,
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    if spec.head_dim is not None:
        common["head_dim"] = spec.head_dim
    if spec.architecture == "llama":
        return LlamaConfig(**common)
    if spec.architecture == "qwen2":
        return Qwen2Config(**common, use_sliding_window=False)
    return _family_config(spec, common)


def _family_config(spec: TinySpec, common: dict):
    from transformers import (Gemma2Config, Gemma3TextConfig, GraniteConfig, MistralConfig, Phi3Config,
                              Qwen3Config, Qwen3MoeConfig)

    families = {
        "mistral": (MistralConfig, {"sliding_window": None}),
        "qwen3": (Qwen3Config, {"use_sliding_window": False}),
        "granite": (GraniteConfig, {}),
        "phi3": (Phi3Config, {"sliding_window": None}),
        "gemma2": (Gemma2Config, {}),
        "gemma3": (Gemma3TextConfig, {}),
        "qwen3_moe": (Qwen3MoeConfig, {"use_sliding_window": False}),
    }
    if spec.architecture in families:
        cls, defaults = families[spec.architecture]
        return cls(**{**common, **defaults, **dict(spec.extra)})
    raise ValueError(f"unknown tiny architecture {spec.architecture!r}")


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def build_tiny_model(name: str, out_dir: str | Path, tokenizer_dir: str | Path | None = None) -> Path:
    """Write the tiny model ``name`` (a key of ``TINY_SPECS``) to ``out_dir``; deterministic."""
    from transformers import AutoModelForCausalLM

    spec = TINY_SPECS[name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = spec.vocab_size
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(tokenizer_dir))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(SEED)
        model = AutoModelForCausalLM.from_config(_config(spec, vocab), dtype=torch.float32)
        with torch.no_grad():  # biases start at zero; make them matter
            for name_, param in model.named_parameters():
                if name_.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
                    param.normal_(0.0, 0.5)
                elif spec.random_norms and name_.endswith("norm.weight"):
                    param.add_(torch.empty_like(param).uniform_(-0.5, 0.5))
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer_dir is not None:
        for file in _TOKENIZER_FILES:
            if (Path(tokenizer_dir) / file).is_file():
                shutil.copy(Path(tokenizer_dir) / file, out / file)
    (out / "innerguard-tiny.json").write_text(json.dumps({"name": name, "seed": SEED}) + "\n")
    return out

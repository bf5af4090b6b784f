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


TINY_SPECS = {
    "llama": TinySpec("llama"),
    # Qwen2 has biases on q/k/v: RoPE is applied after them, a detail the
    # capture has to get right.
    "qwen2": TinySpec("qwen2"),
    # head_dim (32) != hidden/heads (16): catches code that derives it.
    "llama_wide_heads": TinySpec("llama", head_dim=32),
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
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer_dir is not None:
        for file in _TOKENIZER_FILES:
            if (Path(tokenizer_dir) / file).is_file():
                shutil.copy(Path(tokenizer_dir) / file, out / file)
    (out / "innerguard-tiny.json").write_text(json.dumps({"name": name, "seed": SEED}) + "\n")
    return out

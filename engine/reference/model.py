"""Loading a checkpoint the way the reference needs it, and running it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch


def load_reference_model(model_dir: str | os.PathLike) -> tuple[Any, Any]:
    """(model, tokenizer): float32, eager attention (the only implementation
    that returns attention weights), eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    # Tiny test models may ship without a tokenizer; do not let transformers
    # improvise one from the model type.
    has_tokenizer = any((Path(model_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if has_tokenizer else None
    return model, tokenizer


def as_batch(input_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """One sequence as a ``[1, T]`` long tensor."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError("the reference scores one sequence at a time")
        return ids
    return ids.reshape(1, -1)


def decoder_layers(model: Any) -> Any:
    return model.model.layers


def run(model: Any, input_ids: Sequence[int] | torch.Tensor, *, attentions: bool = False, hidden_states: bool = False) -> Any:
    if attentions and model.config._attn_implementation != "eager":
        raise ValueError("load the model with attn_implementation='eager' to get attention weights")
    ids = as_batch(input_ids).to(model.device)
    with torch.no_grad():
        return model(
            input_ids=ids,
            output_attentions=attentions,
            output_hidden_states=hidden_states,
            use_cache=False,
        )

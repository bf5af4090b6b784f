"""Greedy generation with a steering vector added after a decoder layer.

The yardstick for in-vLLM steering: float32, greedy, KV cache (so steered
prompt rows also shape the cached keys/values, as in vLLM). Positions are
absolute: ``prompt`` steers rows p < n (n = prompt length), ``generated``
rows p >= n (the decode steps, which feed back generated tokens), ``all``
both. Methods: ``add`` x + c·v; ``project`` sets the component along v/‖v‖
to c·‖v‖.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from innerguard.engine.reference.model import as_batch, decoder_layers


def reference_steered_generate(
    model: Any,
    input_ids: Sequence[int] | torch.Tensor,
    vector: torch.Tensor | None,
    layer: int,
    coefficient: float,
    positions: str = "generated",
    method: str = "add",
    max_new_tokens: int = 32,
    eos_token_id: int | Sequence[int] | None = None,
    from_position: int = 0,
) -> list[int]:
    """Generated token ids (the prompt excluded). ``vector=None`` or
    ``coefficient=0`` gives the unsteered greedy continuation. Rows before
    ``from_position`` (absolute) are never steered: a steer decided
    mid-generation."""
    from transformers import DynamicCache

    ids = as_batch(input_ids).to(model.device)
    prompt_len = ids.shape[1]
    if positions not in ("prompt", "generated", "all"):
        raise ValueError(f"unknown positions {positions!r}")
    if method not in ("add", "project"):
        raise ValueError(f"unknown method {method!r}")
    if eos_token_id is None:
        eos_token_id = model.generation_config.eos_token_id
    stop = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    seen_rows = [0]  # absolute position of the first row of the current forward

    def steer(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        pos = torch.arange(seen_rows[0], seen_rows[0] + hidden.shape[1], device=hidden.device)
        if positions == "prompt":
            rows = pos < prompt_len
        elif positions == "generated":
            rows = pos >= prompt_len
        else:
            rows = torch.ones_like(pos, dtype=torch.bool)
        rows = rows & (pos >= from_position)
        v = vector.to(hidden.device, torch.float32)
        if method == "add":
            change = (coefficient * v).expand_as(hidden)
        else:
            unit = v / v.norm()
            along = (hidden.float() * unit).sum(-1, keepdim=True)
            change = (coefficient * v.norm() - along) * unit
        steered = torch.where(rows[None, :, None], hidden + change.to(hidden.dtype), hidden)
        return (steered, *output[1:]) if isinstance(output, tuple) else steered

    handle = None
    if vector is not None and coefficient != 0:
        handle = decoder_layers(model)[layer].register_forward_hook(steer)
    generated: list[int] = []
    try:
        cache = DynamicCache(config=model.config)
        step_ids = ids
        with torch.no_grad():
            for _ in range(max_new_tokens):
                out = model(input_ids=step_ids, past_key_values=cache, use_cache=True)
                seen_rows[0] += step_ids.shape[1]
                token = int(out.logits[0, -1].argmax())
                generated.append(token)
                if token in stop:
                    break
                step_ids = torch.tensor([[token]], device=ids.device)
    finally:
        if handle is not None:
            handle.remove()
    return generated

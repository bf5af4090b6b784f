"""A plan's vectors, loaded from safetensors (never pickles) and checked:
the worker steers and probes with them, replay scores stored captures."""
from __future__ import annotations

import torch
from safetensors import safe_open

from innerguard.engine.plan import Plan


def load_vectors(plan: Plan, hidden_size: int, device="cpu") -> dict[str, torch.Tensor]:
    vectors = {}
    for name, ref in plan.vectors.items():
        with safe_open(ref.path, framework="pt") as f:
            vector = f.get_tensor(ref.key).to(device=device, dtype=torch.float32)
        if vector.shape != (hidden_size,) or not torch.isfinite(vector).all():
            raise ValueError(f"vector {name} ({ref.path}:{ref.key}) is {tuple(vector.shape)} or not finite; expected [{hidden_size}]")
        vectors[name] = vector
    return vectors

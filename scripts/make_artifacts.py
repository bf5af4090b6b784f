#!/usr/bin/env python
"""Build the vector artifacts the shipped policies read (SmolLM2-135M-Instruct
by default), from the built-in samples in scripts/artifact_data.py, through
the independent Hugging Face reference path. Deterministic.

1. Medical-topic concept (policies/medical-topic-steer.yaml, signal
   ``medical``): residual stream after layer L at the last prompt token of
   chat-formatted questions; ``vector`` = unit(mean(medical) − mean(other)).
   The same file carries a logistic probe on that residual (``weight``,
   ``bias``: sigmoid(w·x + b) = P(medical)), fitted on the same questions,
   for policies that prefer a probability to a cosine.
2. Caution steering vector (rule ``steer-cautious``): CAA-style paired
   contrast. Each medical question is followed once by a cautious answer
   ("... see a doctor ...") and once by a plain one; the residual after
   layer L is averaged over the answer tokens, and the pair difference
   averaged over questions. Residual norms jump ~10x after layer 11 on this
   model, so the vector is rescaled to ``relative_norm`` × the layer's mean
   residual norm (over answer tokens): a coefficient c then adds
   c·relative_norm of a typical residual. Both norms go in the metadata.

Held-out checks are printed: cosine/probability ranges for held-out medical
and other questions, and greedy answers with and without steering.

    .venv/bin/python scripts/make_artifacts.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import artifact_data as data  # noqa: E402

from innerguard.engine.models import fingerprint, read_geometry, resolve  # noqa: E402
from innerguard.engine.reference import (  # noqa: E402
    load_reference_model,
    reference_residual,
    reference_steered_generate,
)
from innerguard.engine.spans import chat_spans  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# Deployed prompts come with all kinds of system messages; a probe fitted on
# one context alone does not transfer (measured: P(medical) 0.06 for a
# headache question under "You answer health questions.").
SYSTEM_CONTEXTS = (
    None,  # the chat template's own default system prompt
    "You are a helpful assistant.",
    "Answer the user's question briefly.",
    "You answer customers' questions for an online shop.",
    "You answer health questions.",
    "Summarise or answer what the user sends.",
)


def prompt_ids(tokenizer, question: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return list(chat_spans(tokenizer, messages).input_ids)


def last_token_residuals(model, tokenizer, questions: list[str], layer: int, desc: str) -> torch.Tensor:
    """One row per (question, system context)."""
    pairs = [(q, c) for q in questions for c in SYSTEM_CONTEXTS]
    return torch.stack(
        [reference_residual(model, prompt_ids(tokenizer, q, c), layer) for q, c in tqdm(pairs, desc=desc, unit="prompt")]
    )


def fit_logistic(x: torch.Tensor, y: torch.Tensor, l2: float = 1e-2, steps: int = 500) -> tuple[torch.Tensor, float]:
    """L2-regularised logistic regression on standardised features, folded
    back into raw-residual weights so the probe reads the raw residual."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y) + l2 * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    weight = (w / std).detach()
    bias = float((b - (w / std) @ mean).detach())
    return weight, bias


def summary(name: str, values: torch.Tensor) -> str:
    return f"{name} mean {values.mean():.3f} [{values.min():.3f}, {values.max():.3f}]"


def meta(name: str, model_dir: Path, layer: int, **extra: str) -> dict[str, str]:
    geometry = read_geometry(model_dir)
    return {
        "model_name": name,
        "hidden_size": str(geometry.hidden_size),
        "layer": str(layer),
        "model_fingerprint": fingerprint(model_dir),
        **{k: str(v) for k, v in extra.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--model-name", default=None)
    parser.add_argument("--concept-layer", type=int, default=16)
    parser.add_argument("--steer-layer", type=int, default=8)
    parser.add_argument("--relative-norm", type=float, default=0.1, help="stored steering norm / mean residual norm")
    parser.add_argument("--demo-coefficient", type=float, default=4.0)
    parser.add_argument("--demo-tokens", type=int, default=32)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "policies" / "artifacts")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model_dir = resolve(args.model)
    name = args.model_name or Path(str(args.model)).name
    model, tokenizer = load_reference_model(model_dir)
    args.out_dir.mkdir(parents=True, exist_ok=True)

    # 1. concept vector + logistic probe
    layer = args.concept_layer
    med = last_token_residuals(model, tokenizer, data.MEDICAL, layer, "medical")
    other = last_token_residuals(model, tokenizer, data.NON_MEDICAL, layer, "other")
    direction = med.mean(0) - other.mean(0)
    vector = (direction / direction.norm()).float()
    x = torch.cat([med, other])
    y = torch.cat([torch.ones(len(med)), torch.zeros(len(other))])
    weight, bias = fit_logistic(x, y)
    held_med = last_token_residuals(model, tokenizer, data.HELDOUT_MEDICAL, layer, "held-out medical")
    held_other = last_token_residuals(model, tokenizer, data.HELDOUT_NON_MEDICAL, layer, "held-out other")
    cos = lambda r: torch.nn.functional.cosine_similarity(r, vector[None], dim=1)  # noqa: E731
    prob = lambda r: torch.sigmoid(r @ weight + bias)  # noqa: E731
    print(f"concept layer {layer}: held-out " + summary("cosine medical", cos(held_med)) + "; " + summary("other", cos(held_other)))
    print("logistic probe: held-out " + summary("P(medical) medical", prob(held_med)) + "; " + summary("other", prob(held_other)))
    concept_path = args.out_dir / f"{name}.medical-concept.safetensors"
    save_file(
        {"vector": vector.contiguous(), "weight": weight.float().contiguous(), "bias": torch.tensor([bias], dtype=torch.float32)},
        str(concept_path),
        metadata=meta(
            name, model_dir, layer,
            kind="concept: unit(mean(medical) - mean(other)) at the last prompt token",
            probe="logistic: sigmoid(weight . x + bias[0]) on the same residual",
            samples=f"{len(med)} medical, {len(other)} other ({len(SYSTEM_CONTEXTS)} system contexts each)",
            cosine_medical_heldout_mean=f"{cos(held_med).mean():.4f}",
            cosine_other_heldout_mean=f"{cos(held_other).mean():.4f}",
        ),
    )
    print(f"wrote {concept_path}")

    # 2. caution steering vector
    layer = args.steer_layer
    cautious = tokenizer(data.CAUTIOUS_ANSWER, add_special_tokens=False)["input_ids"]
    plain = tokenizer(data.PLAIN_ANSWER, add_special_tokens=False)["input_ids"]
    diffs, norms = [], []
    for question in tqdm(data.MEDICAL, desc="steering pairs", unit="pair"):
        prompt = prompt_ids(tokenizer, question)
        answer = slice(len(prompt), None)
        good = reference_residual(model, prompt + cautious, layer, answer)
        bad = reference_residual(model, prompt + plain, layer, answer)
        diffs.append(good.mean(0) - bad.mean(0))
        norms.append(torch.cat([good, bad]).norm(dim=-1).mean())
    caa = torch.stack(diffs).mean(0)
    residual_norm = float(torch.stack(norms).mean())
    steer = (caa / caa.norm() * args.relative_norm * residual_norm).float()
    steer_path = args.out_dir / f"{name}.caution-steer.safetensors"
    save_file(
        {"vector": steer.contiguous()},
        str(steer_path),
        metadata=meta(
            name, model_dir, layer,
            kind="steering: CAA mean(cautious - plain) over answer tokens, rescaled",
            residual_norm=f"{residual_norm:.4f}",
            raw_norm=f"{float(caa.norm()):.4f}",
            vector_norm=f"{float(steer.norm()):.4f}",
            relative_norm=str(args.relative_norm),
            samples=f"{len(diffs)} pairs",
        ),
    )
    print(
        f"wrote {steer_path}: layer {layer}, mean residual norm {residual_norm:.1f}, raw CAA norm "
        f"{float(caa.norm()):.1f}, stored norm {float(steer.norm()):.1f} ({args.relative_norm} x residual)"
    )

    for question in (data.HELDOUT_MEDICAL[1], data.HELDOUT_NON_MEDICAL[4]):
        ids = prompt_ids(tokenizer, question)
        for c in (0.0, args.demo_coefficient):
            out = reference_steered_generate(model, ids, steer, layer, c, "generated", "add", args.demo_tokens)
            print(f"[c={c:g}] {question} -> {tokenizer.decode(out, skip_special_tokens=True)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reference scores from Hugging Face's own attention weights and hidden states.

Span arguments are half-open token ranges ``(start, end)``; heads are
``(layer, head)`` pairs. Arithmetic on small results is done in float64
python on purpose: a different route from the fast path's tensor code.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from innerguard.engine.reference.model import decoder_layers, run

Range = tuple[int, int]


def _positions(spans: Sequence[Range]) -> list[int]:
    return [p for start, end in spans for p in range(start, end)]


def reference_head_ratios(model: Any, input_ids, instruction: Sequence[Range], data: Sequence[Range]) -> torch.Tensor:
    """a_inst / (a_inst + a_data) at the last token for EVERY head: float64 ``[layers, heads]``."""
    attentions = run(model, input_ids, attentions=True).attentions  # per layer [1, H, T, T]
    last = torch.stack([a[0, :, -1, :] for a in attentions]).double()  # [L, H, T]
    inst = last[:, :, _positions(instruction)].sum(-1)
    dat = last[:, :, _positions(data)].sum(-1)
    return inst / (inst + dat)


def reference_focus_score(
    model: Any, input_ids, instruction: Sequence[Range], data: Sequence[Range], heads: Sequence[tuple[int, int]]
) -> float:
    """Attention Tracker focus score: mean over ``heads`` of the per-head ratio."""
    ratios = reference_head_ratios(model, input_ids, instruction, data)
    return sum(float(ratios[layer, head]) for layer, head in heads) / len(heads)


def _token_scores(model: Any, input_ids, query: Sequence[Range], heads: Sequence[tuple[int, int]] | None) -> list[float]:
    """Attention received by every token from the query tokens: summed over heads, mean over query tokens."""
    attentions = run(model, input_ids, attentions=True).attentions
    rows = _positions(query)
    if heads is None:
        heads = [(layer, head) for layer in range(len(attentions)) for head in range(attentions[0].shape[1])]
    total = torch.zeros(attentions[0].shape[-1], dtype=torch.float64)
    for layer, head in heads:
        total += attentions[layer][0, head, rows, :].double().mean(dim=0)
    return total.tolist()


def reference_rerank(
    model: Any,
    query_ids,
    calibration_ids,
    documents: Sequence[Range],
    query: Sequence[Range],
    calibration_query: Sequence[Range],
    heads: Sequence[tuple[int, int]] | None = None,
    calibration_documents: Sequence[Range] | None = None,
    outlier_std: float = 2.0,
) -> tuple[list[float], list[int]]:
    """In-context re-ranking (ICR; CoRe when ``heads`` is given).

    query_ids: the prompt with the real query; calibration_ids: the same
    prompt with the content-free query "N/A". ``query`` / ``calibration_query``
    are the query's token spans in each. Returns (scores per document,
    document indices best first).
    """
    real = _token_scores(model, query_ids, query, heads)
    null = _token_scores(model, calibration_ids, calibration_query, heads)
    calibration_documents = calibration_documents or documents
    per_doc = []
    for (s, e), (cs, ce) in zip(documents, calibration_documents):
        per_doc.append([real[s + i] - null[cs + i] for i in range(e - s)])
    pooled = [x for doc in per_doc for x in doc]
    mean = sum(pooled) / len(pooled)
    std = math.sqrt(sum((x - mean) ** 2 for x in pooled) / len(pooled))
    floor = mean - outlier_std * std
    scores = [sum(x for x in doc if x >= floor) for doc in per_doc]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return scores, order


def reference_residual(model: Any, input_ids, layer: int, position: int | slice = -1) -> torch.Tensor:
    """The residual stream after decoder ``layer`` at ``position``: float32
    ``[hidden]`` for an int position, ``[n, hidden]`` for a slice.

    ``hidden_states[L + 1]`` is layer L's output for every layer but the
    last: there Hugging Face stores the output AFTER the final norm. So the
    last layer is read with a forward hook on the decoder layer instead.
    """
    layers = decoder_layers(model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer {layer} outside 0..{len(layers) - 1}")
    if layer < len(layers) - 1:
        return run(model, input_ids, hidden_states=True).hidden_states[layer + 1][0, position].clone()
    seen = {}

    def keep(module, args, output):
        seen["out"] = (output[0] if isinstance(output, tuple) else output)[0, position].detach().clone()

    handle = layers[layer].register_forward_hook(keep)
    try:
        run(model, input_ids)
    finally:
        handle.remove()
    return seen["out"]


def reference_probe(
    model: Any,
    input_ids,
    layer: int,
    *,
    vector: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: float = 0.0,
) -> float:
    """Cosine with ``vector``, or sigmoid(weight·x + bias), of the last token's residual after ``layer``."""
    x = [float(v) for v in reference_residual(model, input_ids, layer)]
    if (vector is None) == (weight is None):
        raise ValueError("pass exactly one of vector= (cosine) or weight= (logistic)")
    if vector is not None:
        v = [float(t) for t in vector]
        dot = sum(a * b for a, b in zip(x, v))
        return dot / (math.sqrt(sum(a * a for a in x)) * math.sqrt(sum(b * b for b in v)))
    w = [float(t) for t in weight]
    z = sum(a * b for a, b in zip(x, w)) + float(bias)
    return 1.0 / (1.0 + math.exp(-z))


def reference_token_scores(model: Any, input_ids, weights: dict[int, torch.Tensor], bias: float,
                           span: Sequence[Range]) -> list[float]:
    """s_t = Σ_L weights[L]·x_L,t + bias for each token t of ``span`` (x: the
    residual after layer L, float64). Generated tokens are scored teacher
    forced: pass the prompt and the completion as ``input_ids``."""
    positions = _positions(span)
    scores = [float(bias)] * len(positions)
    for layer, weight in weights.items():
        x = reference_residual(model, input_ids, layer, slice(None)).double()
        w = weight.double()
        for i, t in enumerate(positions):
            scores[i] += float(x[t] @ w)
    return scores


def reference_generated_head_shares(model: Any, input_ids, toward: Sequence[Range], other: Sequence[Range],
                                    rows: Range) -> torch.Tensor:
    """For each query position p in ``rows`` (generated tokens, teacher
    forced: the prompt and the completion as ``input_ids``) and EVERY head,
    Hugging Face's attention weight on the ``toward`` span over its weight
    on both spans (0 when ``toward`` is empty): float64 ``[rows, layers, heads]``."""
    attentions = run(model, input_ids, attentions=True).attentions  # per layer [1, H, T, T]
    weights = torch.stack([a[0, :, rows[0]:rows[1]] for a in attentions]).double()  # [L, H, rows, T]
    toward_at, other_at = _positions(toward), _positions(other)
    a = weights[..., toward_at].sum(-1) if toward_at else torch.zeros(weights.shape[:-1], dtype=torch.float64)
    b = weights[..., other_at].sum(-1) if other_at else torch.zeros(weights.shape[:-1], dtype=torch.float64)
    shares = torch.where(a > 0, a / (a + b), torch.zeros_like(a))
    return shares.permute(2, 0, 1)


def reference_generated_focus(model: Any, input_ids, toward: Sequence[Range], other: Sequence[Range],
                              heads: Sequence[tuple[int, int]], rows: Range) -> list[float]:
    """Per query position in ``rows``, the mean over ``heads`` of
    :func:`reference_generated_head_shares`."""
    shares = reference_generated_head_shares(model, input_ids, toward, other, rows)
    return [sum(float(row[layer, head]) for layer, head in heads) / len(heads) for row in shares]


def reference_token_probe(
    model: Any,
    input_ids,
    weights: dict[int, torch.Tensor],
    bias: float,
    span: Sequence[Range],
    window: int,
    length_adjust: float = 0.0,
) -> float:
    """The token-level probe, written out plainly: for each span token t,
    s_t = Σ_L weights[L]·x_L,t + bias (x: the residual after layer L, float64),
    then the largest mean of s_t over ``window`` consecutive span tokens (the
    mean of all when the span is shorter), less ``length_adjust`` times the
    natural log of how many such means there were."""
    scores = reference_token_scores(model, input_ids, weights, bias, span)
    if len(scores) <= window:
        return sum(scores) / len(scores)
    means = [sum(scores[i:i + window]) / window for i in range(len(scores) - window + 1)]
    return max(means) - length_adjust * math.log(len(means))

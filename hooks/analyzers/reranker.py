"""In-context re-ranking (Chen et al., "Attention in Large Language Models
Yields Efficient Zero-Shot Re-Rankers", ICLR 2025) and its CoRe variant
(the same score restricted to selected heads).

The prompt holds the documents and then the search query. Two passes:
the real query, and a content-free calibration query ("N/A") with the same
documents in the same places. For each pass and each key token j:

    s(j) = mean over query tokens of  Σ over chosen (layer, head) of attention(query token → j)

(mean over query tokens so that a 2-token "N/A" and a 20-token query are on
one scale). The calibrated token score is s_query(j) − s_N/A(j), which
removes the model's intrinsic bias toward some positions and tokens.
Calibrated scores of all document tokens are pooled; tokens below
mean − 2·std (population std) are dropped as outliers; a document's score
is the sum of its kept tokens' calibrated scores. Higher is more relevant.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from innerguard.hooks.analyzers.attention import Geometry, attention_rows


def token_attention(
    q_by_layer: Mapping[int, torch.Tensor],
    k_by_layer: Mapping[int, torch.Tensor],
    query_positions: Sequence[int] | torch.Tensor,
    heads: Sequence[tuple[int, int]],
    geometry: Geometry,
    scale: float,
) -> torch.Tensor:
    """Attention each key token receives from the query tokens: float32 ``[T]``,
    summed over ``heads`` (all layers' pairs together), averaged over query
    tokens.

    q_by_layer: layer -> post-RoPE Q of the query tokens ``[P, H*d]``, rows in
        the order of ``query_positions`` (absolute token positions).
    k_by_layer: layer -> post-RoPE K of all tokens ``[T, H_kv*d]``.
    heads: (layer, head) pairs; pass every head of every layer for plain ICR.
    """
    if not heads:
        raise ValueError("no heads chosen")
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        by_layer[layer].append(head)
    total = None
    for layer, layer_heads in by_layer.items():
        weights = attention_rows(
            q_by_layer[layer], k_by_layer[layer], layer_heads, geometry, scale, positions=query_positions
        )  # [n, P, T]
        part = weights.sum(dim=0).mean(dim=0)
        total = part if total is None else total + part
    return total


def _document_index(documents: Sequence[tuple[int, int]], length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token positions of all documents, and which document each belongs to."""
    positions, owner = [], []
    for i, (start, end) in enumerate(documents):
        if not 0 <= start < end <= length:
            raise ValueError(f"document span ({start}, {end}) is empty or outside 0..{length}")
        positions.append(torch.arange(start, end, device=device))
        owner.append(torch.full((end - start,), i, dtype=torch.long, device=device))
    return torch.cat(positions), torch.cat(owner)


def calibrated_document_scores(
    query_scores: torch.Tensor,
    calibration_scores: torch.Tensor,
    documents: Sequence[tuple[int, int]],
    calibration_documents: Sequence[tuple[int, int]] | None = None,
    outlier_std: float = 2.0,
) -> torch.Tensor:
    """Per-document calibrated scores, float32 ``[len(documents)]``.

    query_scores / calibration_scores: :func:`token_attention` of the query
        pass and of the "N/A" pass.
    documents: each document's token span in the query pass;
        calibration_documents: in the calibration pass (default: the same,
        which holds when the documents precede the query).
    outlier_std: tokens whose calibrated score is below mean − outlier_std·std
        are dropped.
    """
    if not documents:
        raise ValueError("no documents")
    calibration_documents = documents if calibration_documents is None else calibration_documents
    if [e - s for s, e in documents] != [e - s for s, e in calibration_documents]:
        raise ValueError("a document has different token lengths in the query and calibration passes")
    device = query_scores.device
    q_pos, owner = _document_index(documents, query_scores.shape[0], device)
    c_pos, _ = _document_index(calibration_documents, calibration_scores.shape[0], device)
    calibrated = query_scores.float()[q_pos] - calibration_scores.float().to(device)[c_pos]
    floor = calibrated.mean() - outlier_std * calibrated.std(correction=0)
    kept = torch.where(calibrated >= floor, calibrated, torch.zeros_like(calibrated))
    return torch.zeros(len(documents), dtype=torch.float32, device=device).index_add_(0, owner, kept)


@dataclass(frozen=True)
class RerankResult:
    scores: list[float]  # calibrated attention per document, request order (unbounded, may be < 0)
    order: list[int]  # document indices, most relevant first (ties: request order)
    shares: list[float]  # each document's part of the positive calibrated mass, in [0, 1], sums to 1 (or all 0)


def rerank(
    query_scores: torch.Tensor,
    calibration_scores: torch.Tensor,
    documents: Sequence[tuple[int, int]],
    calibration_documents: Sequence[tuple[int, int]] | None = None,
    outlier_std: float = 2.0,
) -> RerankResult:
    """:func:`calibrated_document_scores` as python floats plus the ranking."""
    scores = calibrated_document_scores(
        query_scores, calibration_scores, documents, calibration_documents, outlier_std
    ).tolist()
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    positive = [max(x, 0.0) for x in scores]
    total = sum(positive)
    shares = [x / total if total > 0 else 0.0 for x in positive]
    return RerankResult(scores=scores, order=order, shares=shares)

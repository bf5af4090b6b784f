"""In-context reranking inside vLLM, against the Hugging Face reference."""
from __future__ import annotations

import pytest

from innerguard.engine.plan import decode_request_args
from innerguard.engine.reference.scores import reference_rerank
from innerguard.engine.requests import GuardRequest, prepare

pytestmark = pytest.mark.vllm

HEADS = [(10, 1), (12, 3), (14, 0), (15, 6), (16, 2), (18, 4), (20, 5), (22, 8)]
DOCUMENTS = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It was designed by "
    "Gustave Eiffel's engineering company and completed in 1889 as the entrance arch to the World's Fair. "
    "At 330 metres it was the tallest man-made structure in the world for four decades.",
    "Photosynthesis is the process by which green plants, algae and some bacteria convert light energy "
    "into chemical energy. Chlorophyll in the chloroplasts absorbs sunlight, and the energy is used to turn "
    "carbon dioxide and water into glucose, releasing oxygen as a by-product.",
    "Paris is the capital and the largest city of France. Situated on the river Seine in the north of the "
    "country, it has been a major centre of finance, diplomacy, commerce, fashion and science for centuries, "
    "and it is home to the Louvre, the most visited art museum in the world.",
    "The stock market closed slightly lower on Tuesday after a quiet session. Technology shares gave back "
    "some of their recent gains while energy companies edged higher, and trading volumes stayed below "
    "their monthly average ahead of the central bank's statement.",
]
# CPU vLLM caches prefixes in blocks of 128 tokens: these documents span
# several blocks, so the calibration pass's documents can be reused.
REUSE_AT_LEAST = 128


def rag_row(i: int, question: str) -> dict:
    docs = DOCUMENTS[i % 2:] + DOCUMENTS[: i % 2]
    return {
        "id": f"rag{i}",
        "messages": [{"role": "system", "content": "Answer from the documents."}]
        + [{"role": "tool", "content": d} for d in docs]
        + [{"role": "user", "content": question}],
        "policies": ["rag"],
        "max_tokens": 8,
    }


def _check(llm, reference, rows, expect_reuse: bool):
    model, _ = reference
    outs = llm.run(rows)
    for r, out in zip(rows, outs):
        assert out.error is None, out.error
        p = prepare(llm.plan, GuardRequest.from_row(r, r["id"]), llm.tokenizer)
        spans = p.args["rerank"]["rag.relevance"]
        calibration = decode_request_args(p.calibration.extra_args)["rerank"]["rag.relevance"]
        ref_scores, ref_order = reference_rerank(
            model, list(p.prompt_token_ids), list(p.calibration.prompt_token_ids),
            [tuple(d) for d in spans["documents"]], [tuple(spans["query"][0])], [tuple(calibration["query"][0])], heads=HEADS,
        )
        got = out.documents["rag.relevance"]
        assert got["order"] == ref_order
        for a, b in zip(got["scores"], ref_scores):
            assert abs(a - b) <= 1e-3 * max(abs(b), 1e-3), (got["scores"], ref_scores)
        relevance = out.signals["rag.relevance"]
        assert len(relevance) == len(DOCUMENTS) and all(0.0 <= v <= 1.0 for v in relevance)
        if expect_reuse:
            # The documents were computed once, by the calibration pass.
            assert out.prefill_tokens <= len(p.prompt_token_ids) - REUSE_AT_LEAST
        else:
            assert out.prefill_tokens == len(p.prompt_token_ids)


def test_reranker_matches_reference_with_prefix_reuse(guarded, reference):
    rows = [rag_row(0, "What is the capital of France?"), rag_row(1, "How do plants make energy from light?")]
    _check(guarded, reference, rows, expect_reuse=True)
    outs = guarded.run(rows)
    paris = outs[0].documents["rag.relevance"]["order"]
    assert DOCUMENTS.index(DOCUMENTS[2]) in paris[:2]  # the Paris document ranks high for the Paris question


def test_reranker_matches_reference_with_chunked_prefill(chunked, reference):
    _check(chunked, reference, [rag_row(0, "When was the Eiffel Tower completed?")], expect_reuse=True)

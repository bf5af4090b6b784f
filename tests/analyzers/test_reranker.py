"""In-context reranker: token attention, calibration, outlier mask."""
import pytest
import torch

from innerguard.hooks.analyzers import HeadGeometry, calibrated_document_scores, rerank, token_attention

DOCS = [(0, 2), (2, 4), (4, 6)]


def test_calibration_subtracts_the_content_free_pass():
    query = torch.tensor([3.0, 3.0, 5.0, 5.0, 1.0, 1.0])
    null = torch.tensor([2.0, 2.0, 1.0, 1.0, 1.0, 1.0])  # doc 0 is attended whatever the query
    result = rerank(query, null, DOCS)
    assert result.scores == pytest.approx([2.0, 8.0, 0.0])
    assert result.order == [1, 0, 2]
    assert result.shares == pytest.approx([0.2, 0.8, 0.0])


def test_tokens_below_mean_minus_two_std_are_dropped():
    # calibrated [1, 1, 2, 2, 0, -10]: mean -2/3, population std 4.2295 -> floor -9.126
    calibrated = torch.tensor([1.0, 1.0, 2.0, 2.0, 0.0, -10.0])
    scores = calibrated_document_scores(calibrated, torch.zeros(6), DOCS)
    assert scores.tolist() == pytest.approx([2.0, 4.0, 0.0])
    kept_all = calibrated_document_scores(calibrated, torch.zeros(6), DOCS, outlier_std=10.0)
    assert kept_all.tolist() == pytest.approx([2.0, 4.0, -10.0])


def test_calibration_pass_may_place_documents_elsewhere():
    query = torch.tensor([9.0, 1.0, 2.0, 3.0, 4.0])
    null = torch.tensor([0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0])
    scores = calibrated_document_scores(query, null, [(1, 3), (3, 5)], calibration_documents=[(3, 5), (5, 7)])
    assert scores.tolist() == pytest.approx([(1 - 0.5) + (2 - 1), (3 - 1) + (4 - 1)])
    with pytest.raises(ValueError, match="different token lengths"):
        calibrated_document_scores(query, null, [(1, 3)], calibration_documents=[(3, 6)])


def test_ties_keep_request_order():
    assert rerank(torch.ones(6), torch.zeros(6), DOCS).order == [0, 1, 2]


def test_token_attention_averages_query_rows_and_sums_heads():
    # q = 0: every row attends uniformly to keys 0..p
    g = HeadGeometry(2, 1, 2)
    q = torch.zeros(2, 4)
    k = torch.randn(4, 2)
    got = token_attention({0: q, 1: q}, {0: k, 1: k}, [2, 3], [(0, 0), (0, 1), (1, 0)], g, 1.0)
    row2 = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0])
    row3 = torch.full((4,), 0.25)
    assert torch.allclose(got, 3 * (row2 + row3) / 2)

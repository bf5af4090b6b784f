"""The step's rows as arrays (hooks/runner_view.py StepView): spans made on
demand, and the token rows of many requests at once."""
import numpy as np

from innerguard.hooks.runner_view import RowSpan, StepView


def view():
    # three requests: a 4-token prefill chunk, then two decodes
    return StepView(["a", "b", "c"], [0, 4, 5, 6], [10, 30, 7], {"a": 20, "b": 12, "c": 3}.__getitem__)


def test_a_span_is_the_requests_rows_positions_and_prompt_length():
    v = view()
    assert len(v) == 3 and v.num_tokens == 6
    assert v.span(0) == RowSpan("a", 0, 0, 4, 10, 20)
    assert v.span(2) == RowSpan("c", 2, 5, 6, 7, 3)
    assert v.rows == (v.span(0), v.span(1), v.span(2))


def test_token_rows_of_decodes_and_of_runs():
    v = view()
    assert v.token_rows([1, 2]).tolist() == [4, 5]
    assert v.token_rows([2, 0]).tolist() == [5, 0, 1, 2, 3]
    assert v.token_rows([]).tolist() == []


def test_an_empty_view_has_no_rows():
    v = StepView()
    assert len(v) == 0 and v.num_tokens == 0 and v.rows == ()
    assert isinstance(v.token_rows([]), np.ndarray)

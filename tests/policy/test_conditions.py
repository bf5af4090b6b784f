"""The condition grammar: what parses, what it means, where errors are."""
from __future__ import annotations

import json

import pytest

from innerguard.engine.policy import conditions as c


@pytest.mark.parametrize("text, data", [
    ("focus < 0.4", {"op": "<", "args": [{"op": "signal", "name": "focus"}, {"op": "const", "value": 0.4}]}),
    ("phrase", {"op": "signal", "name": "phrase"}),
    ("not phrase", {"op": "not", "args": [{"op": "signal", "name": "phrase"}]}),
    ("max(rel) < .3", {"op": "<", "args": [{"op": "max", "signal": "rel"}, {"op": "const", "value": 0.3}]}),
    ("count(rel >= 0.5) >= 2", {"op": ">=", "args": [{"op": "count", "signal": "rel", "cmp": ">=", "value": 0.5}, {"op": "const", "value": 2}]}),
    ("any(rel > 1e-1)", {"op": "any", "signal": "rel", "cmp": ">", "value": 0.1}),
    ("x > -0.5", {"op": ">", "args": [{"op": "signal", "name": "x"}, {"op": "const", "value": -0.5}]}),
    ("true", {"op": "const", "value": True}),
])
def test_parses_to_plain_json(text, data):
    tree = c.to_data(c.parse(text))
    assert tree == data
    assert json.loads(json.dumps(tree)) == tree


def test_and_binds_tighter_than_or_and_not_tighter_than_and():
    tree = c.to_data(c.parse("a or b and not c"))
    assert tree["op"] == "or"
    assert tree["args"][1]["op"] == "and"
    assert tree["args"][1]["args"][1]["op"] == "not"


def test_parentheses_group():
    assert c.to_data(c.parse("(a or b) and c"))["op"] == "and"


def test_chains_of_and_are_flat():
    assert len(c.to_data(c.parse("a and b and c"))["args"]) == 3


def test_yaml_booleans_are_constants():
    assert c.from_yaml(True) == c.Const(True)


@pytest.mark.parametrize("text, offset", [
    ("focus <", 7),
    ("focus < 0.4 and", 15),
    ("0.2 < x < 0.5", 8),
    ("focus < 0.4 )", 12),
    ("median(x) > 1", 0),
    ("max(x > 1) < 2", 6),
    ("any(x) ", 5),
    ("a $ b", 2),
    ("", 0),
    ("(((a)", 5),
    ("x < and", 4),
    ("__import__('os')", 11),
])
def test_syntax_errors_carry_an_offset(text, offset):
    with pytest.raises(c.ConditionError) as err:
        c.parse(text)
    assert err.value.offset == offset


def test_nesting_and_length_are_bounded():
    with pytest.raises(c.ConditionError):
        c.parse("(" * 100 + "a" + ")" * 100)
    with pytest.raises(c.ConditionError):
        c.parse("not " * 100 + "a")
    with pytest.raises(c.ConditionError):
        c.parse(" or ".join(["a"] * 600))


def test_signals_in_lists_references_in_order():
    assert [n for n, _ in c.signals_in(c.parse("a < 1 or max(b) > 0 and not d"))] == ["a", "b", "d"]


def test_unparse_round_trips():
    for text in ["a < 0.5", "(a or not (b))", "count(r > 0.5) >= 2"]:
        assert c.to_data(c.parse(c.unparse(c.parse(text)))) == c.to_data(c.parse(text))

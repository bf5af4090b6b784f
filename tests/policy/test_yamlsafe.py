"""Hostile and broken YAML gets a finding at the right place, never a crash."""
from __future__ import annotations

import time

import pytest

from innerguard.engine.policy.yamlsafe import MAX_BYTES, load_document


def rules_of(raw: bytes):
    doc, findings = load_document(raw, "p.yaml")
    return doc, [(f.rule, f.location.line) for f in findings]


def test_plain_document_keeps_marks_for_values_and_keys():
    doc, findings = load_document(b"a:\n  b: [1, 2.5, true, null, x]\n  'on': yes\n", "p.yaml")
    assert findings == []
    assert doc.data == {"a": {"b": [1, 2.5, True, None, "x"], "on": True}}
    assert doc.marks.at(("a", "b", 1)).line == 2
    assert doc.marks.at(("a", "on"), key=True).line == 3
    assert str(doc.marks.at(("a", "b", 4))) == "p.yaml:2:27"


def test_keys_stay_strings_even_when_yaml_would_read_a_boolean():
    doc, _ = load_document(b"on: 1\nyes: 2\n", "p.yaml")
    assert doc.data == {"on": 1, "yes": 2}


def test_billion_laughs_stops_quickly():
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i-1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    start = time.perf_counter()
    doc, found = rules_of("\n".join(lines).encode())
    assert doc is None and found[0][0] == "IG008"
    assert time.perf_counter() - start < 1.0


def test_many_small_aliases_are_refused():
    text = "base: &b 1\nlist: [" + ", ".join(["*b"] * 150) + "]\n"
    assert rules_of(text.encode())[1] == [("IG008", 2)]


def test_a_few_aliases_are_fine_and_copy_marks():
    doc, found = rules_of(b"x: &x {k: 1}\ny: *x\n")
    assert found == [] and doc.data["y"] == {"k": 1}
    assert doc.marks.at(("y", "k")).line == 1


def test_deep_nesting_is_refused_without_recursion_error():
    raw = b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n"
    assert rules_of(raw)[1] == [("IG009", 1)]


def test_deep_block_nesting_is_refused():
    raw = "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n"
    doc, found = rules_of(raw.encode())
    assert found[0][0] == "IG009"


def test_huge_file_is_refused_before_parsing():
    raw = b"a: " + b"x" * (MAX_BYTES + 10) + b"\n"
    assert rules_of(raw)[1] == [("IG004", 1)]


def test_non_utf8_points_at_the_bad_byte():
    doc, findings = load_document(b"a: 1\nb: caf\xe9\n", "p.yaml")
    assert [(f.rule, f.location.line, f.location.col) for f in findings] == [("IG002", 2, 7)]


def test_utf8_bom_is_accepted():
    doc, findings = load_document("\ufeffa: é\n".encode("utf-8"), "p.yaml")
    assert findings == [] and doc.data == {"a": "é"}


@pytest.mark.parametrize("raw", [b"", b"   \n\n", b"# comment only\n", b"---\n...\n"])
def test_empty_files(raw):
    assert rules_of(raw)[1] == [("IG003", 1)]


def test_tabs_are_reported_where_they_are():
    assert rules_of(b"a:\n  b: 1\n\tc: 2\n")[1] == [("IG006", 3)]


def test_tab_inside_a_value_is_fine():
    doc, found = rules_of(b'a: "x\ty"\n')
    assert found == [] and doc.data == {"a": "x\ty"}


def test_duplicate_keys_name_the_first_definition():
    doc, findings = load_document(b"a: 1\nb: 2\na: 3\n", "p.yaml")
    assert [(f.rule, f.location.line) for f in findings] == [("IG007", 3)]
    assert "line 1" in findings[0].message


def test_complex_keys_are_refused():
    assert rules_of(b"? [a, b]\n: 1\n")[1][0][0] == "IG005"


def test_unknown_tags_are_refused():
    assert rules_of(b"a: !!python/object/apply:os.system ['true']\n")[1][0][0] == "IG005"


def test_control_characters_are_a_syntax_error():
    assert rules_of(b"a: \x00\n")[1][0][0] == "IG005"


def test_revision_is_the_sha256_of_the_bytes():
    import hashlib

    raw = b"a: 1\n"
    doc, _ = load_document(raw, "p.yaml")
    assert doc.sha256 == hashlib.sha256(raw).hexdigest()

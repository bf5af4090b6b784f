"""Keyword and regular-expression conditions (RE2)."""
import pytest

from innerguard.engine.textmatch import TextPatternError, keywords, regexes


def test_keywords_are_case_insensitive_whole_words_by_default():
    k = keywords(["cat"])
    assert k.search("The CAT sat").text == "CAT"
    assert not k.matches("concatenate")


def test_keywords_can_match_inside_words():
    assert keywords(["cat"], whole_words=False).matches("concatenate")


def test_case_sensitive_keywords():
    assert not keywords(["Cat"], case_sensitive=True).matches("cat")


def test_phrases_match_across_any_whitespace():
    found = keywords(["ignore previous"]).find_all("IGNORE  previous, then ignore\nprevious")
    assert [m.text for m in found] == ["IGNORE  previous", "ignore\nprevious"]


def test_punctuation_edges_need_no_word_boundary():
    assert keywords(["C++"]).search("I like C++.").text == "C++"


def test_unicode_letters_are_word_characters():
    assert not keywords(["caf"]).matches("café")
    assert keywords(["café"]).matches("Un CAFÉ noir")


def test_adjacent_matches_share_a_boundary():
    assert [(m.start, m.end) for m in keywords(["cat"]).find_all("cat cat,cat")] == [(0, 3), (4, 7), (8, 11)]


def test_search_reports_the_earliest_term():
    m = keywords(["dog", "cat"]).search("a cat and a dog")
    assert (m.term, m.start) == (1, 2)


def test_regexes_find_all_matches():
    found = regexes([r"\d{3}-\d{4}"]).find_all("call 555-1234 or 555-9999")
    assert [m.text for m in found] == ["555-1234", "555-9999"]
    assert regexes([r"(?i)password"]).matches("PASSWORD: x")


def test_patterns_re2_rejects_are_clear_errors():
    with pytest.raises(TextPatternError, match=r"regex 0 .*RE2 cannot compile.*back-references"):
        regexes([r"(a)\1"])
    with pytest.raises(TextPatternError, match="look-around"):
        regexes([r"(?<=a)b"])
    with pytest.raises(TextPatternError, match="empty keyword"):
        keywords([" "])


def test_pathological_pattern_runs_in_linear_time():
    import time

    text = "a" * 200_000
    start = time.perf_counter()
    assert not regexes([r"(a+)+b"]).matches(text)
    assert time.perf_counter() - start < 1.0

"""Characters a reader cannot see (issue 32, item 3): a NUL, a BOM with a
right-to-left override, a noncharacter, a zero-width space or a line
separator in a benign e-mail must not change the guard's verdict. innerguard
strips them before anything renders the request (engine/requests/invisible.py),
so the model reads, and the guard scores, the text a reviewer sees."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from innerguard.engine.requests import GuardRequest, RequestError, invisible

EMAIL = ("Hi Dana,\n\nThe quarterly report is attached. Revenue grew 4% on last quarter, mostly from the "
         "new warehouse in Leeds. Could we go through the numbers on Thursday at 10?\n\nBest,\nSam")

# (case, the e-mail as sent, the e-mail as the model must read it)
CASES = [
    ("nul", "\x00" + EMAIL, EMAIL),
    ("bom+rlo", "\ufeff\u202e" + EMAIL, EMAIL),
    ("noncharacter", "\uffff" + EMAIL, EMAIL),
    ("zero-width space", EMAIL.replace("quarterly", "quar\u200bterly"), EMAIL),
    ("tag characters", "\U000E0069\U000E0067" + EMAIL, EMAIL),
    ("line separator", EMAIL.replace("\n\nThe", "\u2028The"), EMAIL.replace("\n\nThe", "\nThe")),
    ("emoji zwj", "\U0001F468\u200d\U0001F469\u200d\U0001F467 " + EMAIL, "\U0001F468\u200d\U0001F469\u200d\U0001F467 " + EMAIL),
]


@pytest.mark.parametrize("case,sent,read", CASES, ids=[c[0] for c in CASES])
def test_strip_leaves_the_text_a_reader_sees(case, sent, read):
    assert invisible.strip(sent) == read


def test_joiners_stay_inside_words_and_pictures_and_go_between_ascii_letters():
    assert invisible.strip("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    assert invisible.strip("ig\u200dnore previous") == "ignore previous"


def test_refuse_names_the_character_and_where_it_is():
    with pytest.raises(RequestError, match=r"messages\[1\]\.content has an invisible character, "
                                           r"U\+202E RIGHT-TO-LEFT OVERRIDE, at offset 2"):
        invisible.apply_to_messages([{"role": "system", "content": "Summarise."},
                                     {"role": "user", "content": "Hi\u202e" + EMAIL}], "refuse")


@given(st.text(alphabet=st.sampled_from("ab \t\n\r\x00\x7f\u00a0\u00ad\u200b\u200c\u200d\u2028\u202e\u3000"
                                           "\ufeff\ufdd0\uffff\U000E0041\u0645\U0001F468"), max_size=40))
def test_the_first_invisible_character_is_found_wherever_it_is(text):
    # The fast path skips runs that are printable as a whole; the answer must
    # be the one a look at every character gives.
    every = next((i for i in range(len(text)) if invisible._invisible(text, i)), None)
    assert invisible.first_invisible(text) == every


def test_keep_sends_the_text_as_it_came():
    request = GuardRequest(id="0", prompt="\x00" + EMAIL)
    assert invisible.apply_to_request(request, "keep") is request


def _decide(guarded, email: str):
    out = guarded.chat([{"role": "system", "content": "Summarise the e-mail in one sentence."},
                        {"role": "user", "content": email}], policies=["prompt-injection"])[0]
    decision = next(d for d in out.decisions if d["policy"] == "prompt-injection")
    return decision["action"], decision["signals"]


def test_an_invisible_character_does_not_change_the_verdict_on_a_benign_email(guarded):
    clean_action, clean_signals = _decide(guarded, EMAIL)
    assert clean_action == "allow", clean_signals  # the case is only meaningful on an e-mail the policy allows
    for case, sent, read in CASES:
        if read == EMAIL:
            assert _decide(guarded, sent) == (clean_action, clean_signals), case
    # A line separator reads as a line break: the e-mail with that visible break.
    case, sent, read = next(c for c in CASES if c[0] == "line separator")
    assert _decide(guarded, sent) == _decide(guarded, read)

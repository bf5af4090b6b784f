"""Output rules inside a real vLLM engine (issue 35, first part): a ``stop``
rule on the generated text ends SmolLM2's completion where the violation
starts, returns nothing from that token on, aborts the rest of the
generation, and says where in the audit trail."""
from __future__ import annotations

import json
import re

import pytest

CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Describe a walk through a city park in spring, in a few sentences."}]

POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: words, version: 1.0.0}}
mode: {mode}
signals:
  word:
    analyzer: text
    keywords: [{word}]
    case_sensitive: true
    span: generated
rules:
  - id: stop-word
    when: word
    action: stop
    message: The answer was stopped by {{{{ rule.id }}}}.
"""


def _write(folder, word: str, mode: str = "enforce"):
    folder.mkdir(exist_ok=True)
    (folder / "words.yaml").write_text(POLICY.format(word=json.dumps(word), mode=mode))
    return folder


@pytest.fixture(scope="module")
def watched(smollm2_dir, tmp_path_factory, in_this_process):
    """An eager engine with an output rule that never fires, and the text
    SmolLM2 writes for CHAT under it (greedy)."""
    from vllm import SamplingParams

    from innerguard.engine.guarded import GuardedLLM

    folder = _write(tmp_path_factory.mktemp("output-rules"), "QQQ-never-written")
    audit = folder / "audit.jsonl"
    with in_this_process():
        llm = GuardedLLM(smollm2_dir, folder, enforce_eager=True, audit_log=str(audit))
    params = SamplingParams(temperature=0.0, max_tokens=48)
    (free,) = llm.chat(CHAT, params)
    yield llm, folder, audit, free, params
    llm.shutdown()


def _word_after(text: str, at: int) -> str:
    """A whole word of ``text`` that first occurs at or after character ``at``."""
    for word in text[at:].split():
        word = word.strip(".,;:!?\"'()")
        if len(word) >= 4 and word.isalpha() and text.find(word) >= at:
            return word
    raise AssertionError(f"no word to stop on after {at} in {text!r}")


def test_an_output_rule_that_never_fires_changes_nothing(watched):
    _, _, _, free, _ = watched
    assert free.action == "allow" and free.output_decisions == []
    assert free.finish_reason == "length" and len(free.token_ids) == 48


def test_a_stop_returns_nothing_from_the_token_where_the_match_starts(watched, tmp_path):
    llm, folder, audit, free, params = watched
    word = _word_after(free.text, len(free.text) // 3)
    start = free.text.find(word)
    llm.reload(_write(folder, word))
    (out,) = llm.chat(CHAT, params)
    tokens = len(out.token_ids)
    assert out.finish_reason == "content_filter" and out.action == "stop"
    assert tuple(free.token_ids[:tokens]) == out.token_ids  # the same greedy text, cut
    assert free.text.startswith(out.text) and word not in out.text
    # The cut is the token whose text holds the match's first character.
    assert len(llm.tokenizer.decode(free.token_ids[:tokens])) <= start < len(llm.tokenizer.decode(free.token_ids[:tokens + 1]))
    (event,) = out.output_decisions
    assert (event["rule"], event["action"], event["applied"], event["token_index"]) == ("stop-word", "stop", True, tokens)
    assert event["message"] == "The answer was stopped by stop-word."
    # The request was aborted at the stop, not run to max_tokens.
    assert len(out.output.outputs[0].token_ids) == tokens
    llm.audit.flush()
    completion = [json.loads(line) for line in audit.read_text().splitlines() if '"completion"' in line][-1]
    assert completion["finish_reason"] == "content_filter"
    (recorded,) = completion["output_decisions"]
    assert (recorded["rule"], recorded["token_index"], recorded["policy"]["name"]) == ("stop-word", tokens, "words")


def test_every_completion_of_n_is_watched_on_its_own(watched):
    from vllm import SamplingParams

    llm, folder, _, _, _ = watched
    llm.reload(_write(folder, "the"))  # sampled completions differ; "the" comes up in most
    (out,) = llm.chat(CHAT, SamplingParams(temperature=1.0, seed=7, max_tokens=48, n=3))
    completions = out.output.outputs
    assert [c.index for c in completions] == [0, 1, 2]
    stopped = [c.index for c in completions if c.finish_reason == "content_filter"]
    assert stopped and sorted(e["completion"] for e in out.output_decisions) == stopped
    for c in completions:
        assert not re.search(r"\bthe\b", c.text)  # stopped before it, or never written


def test_shadow_mode_records_the_stop_and_returns_everything(watched):
    llm, folder, _, free, params = watched
    word = _word_after(free.text, len(free.text) // 3)
    llm.reload(_write(folder, word, mode="shadow"))
    (out,) = llm.chat(CHAT, params)
    assert out.text == free.text and out.finish_reason == "length" and out.action == "allow"
    (event,) = out.output_decisions
    assert (event["rule_action"], event["applied"]) == ("stop", False)


def test_turning_detokenization_off_is_refused_while_output_rules_are_installed(watched):
    from vllm import SamplingParams

    from innerguard.engine.errors import InnerguardError

    llm = watched[0]
    with pytest.raises(InnerguardError, match="detokenize"):
        llm.chat(CHAT, SamplingParams(max_tokens=4, detokenize=False))

"""Output rules (issue 35): a rule on a ``span: generated`` text signal is
evaluated on the text written so far, after every step, and a stop cuts the
completion at the first token of the step where the violation starts."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from innerguard.engine.decide import Evaluator
from innerguard.engine.output_watch import OutputRules
from innerguard.engine.plan import AnalyzerSpec
from innerguard.engine.policy.loader import load_file

POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: leak, version: 1.0.0}}
mode: {mode}
spans:
  untrusted: {{roles: [user]}}
signals:
  canary:
    analyzer: text
    keywords: [ZEBRA-42]
    case_sensitive: true
    span: generated
  bad_word:
    analyzer: text
    pattern: "(?i)darn"
    span: generated
  asked:
    analyzer: text
    keywords: [secret]
    span: untrusted
rules:
  - id: stop-canary
    when: canary
    action: stop
    message: "stopped by {{{{ rule.id }}}}"
  - id: flag-bad-word
    when: bad_word
    action: flag
  - id: flag-asked
    when: asked
    action: flag
"""

# The steps of one completion: each adds one token's text.
STEPS = ["Sure", ", the", " code", " is", " ZE", "BRA", "-42", ". Darn", "."]


def _rules(tmp_path: Path, mode: str = "enforce"):
    path = tmp_path / "leak.yaml"
    path.write_text(POLICY.format(mode=mode))
    policy = load_file(path).policy
    assert policy is not None
    analyzers = [AnalyzerSpec(signal=policy.qualified(s.name), kind="text", params=s.params()) for s in policy.signals]
    program = policy.to_program()
    return OutputRules(SimpleNamespace(analyzers=analyzers)), program


def _run(watch, steps=STEPS):
    text, stops = "", []
    for i, piece in enumerate(steps):
        text += piece
        stops.append(watch.feed(text, i + 1))
    return text, stops


def test_the_cut_falls_before_the_step_where_the_match_starts(tmp_path):
    rules, program = _rules(tmp_path)
    watch = rules.watch([program])
    _, stops = _run(watch)
    assert stops[:6] == [None] * 6  # "ZE", "BRA": not yet the keyword
    stop = stops[6]
    assert (stop.token, stop.char, stop.rule) == (4, len("Sure, the code is"), "stop-canary")
    assert stop.message == "stopped by stop-canary"
    assert stops[7:] == [stop, stop]  # decided once; later steps change nothing
    assert [(e["rule"], e["token_index"], e["action"]) for e in watch.events] == [("stop-canary", 4, "stop")]


def test_flags_are_recorded_once_at_the_token_where_the_match_starts(tmp_path):
    rules, program = _rules(tmp_path)
    watch = rules.watch([program])
    _run(watch, ["Oh", " darn", " it", ", darn"])
    assert watch.stop is None
    assert [(e["rule"], e["token_index"], e["action"], e["applied"]) for e in watch.events] == [("flag-bad-word", 1, "flag", True)]


@pytest.mark.parametrize("mode,action,applied", [("shadow", "stop", False), ("warn", "flag", True)])
def test_shadow_and_warn_record_the_stop_but_generate_on(tmp_path, mode, action, applied):
    rules, program = _rules(tmp_path, mode)
    watch = rules.watch([program])
    _, stops = _run(watch)
    assert stops == [None] * len(STEPS)
    assert [(e["rule"], e["rule_action"], e["action"], e["applied"], e["token_index"]) for e in watch.events] == [
        ("stop-canary", "stop", action, applied, 4), ("flag-bad-word", "flag", "flag", applied, 7)]


def test_prompt_rules_never_see_generated_signals_and_output_rules_never_see_the_prompt(tmp_path):
    _, program = _rules(tmp_path)
    # The worker reads only the prompt's signal; the output rules are marked.
    assert program.signals == ("leak.asked",)
    assert {r.id: bool(r.params.get("output")) for r in program.rules} == {
        "stop-canary": True, "flag-bad-word": True, "flag-asked": False}
    prompt = Evaluator([program]).evaluate({"leak.asked": True})
    assert [h.rule for d in prompt.decisions for h in d.hits] == ["flag-asked"]
    output = Evaluator([program], phase="output").evaluate({"leak.canary": True, "leak.bad_word": False})
    assert (output.action, output.rule) == ("stop", "stop-canary")


def test_a_request_without_output_rules_is_not_watched(tmp_path):
    rules, program = _rules(tmp_path)
    prompt_only = type(program)(**{**program.__dict__, "rules": tuple(r for r in program.rules if not r.params.get("output"))})
    assert rules.watch([prompt_only]) is None
    assert rules.watch([]) is None


def test_a_rule_that_fires_without_a_match_cuts_at_the_newest_step(tmp_path):
    path = tmp_path / "quiet.yaml"
    path.write_text(POLICY.format(mode="enforce").replace("when: canary", "when: not canary"))
    policy = load_file(path).policy
    analyzers = [AnalyzerSpec(signal=policy.qualified(s.name), kind="text", params=s.params()) for s in policy.signals]
    watch = OutputRules(SimpleNamespace(analyzers=analyzers)).watch([policy.to_program()])
    assert watch.feed("Hello", 1) == watch.stop
    assert (watch.stop.token, watch.stop.char) == (0, 0)


def test_the_canary_example_lints_clean_and_stops_on_its_canary():
    from innerguard.engine.lint import lint_paths

    example = Path(__file__).resolve().parents[2] / "examples" / "canary-leak" / "canary-leak.yaml"
    report = lint_paths([example])
    assert not report.findings, report.findings
    policy = load_file(example).policy
    analyzers = [AnalyzerSpec(signal=policy.qualified(s.name), kind="text", params=s.params()) for s in policy.signals]
    watch = OutputRules(SimpleNamespace(analyzers=analyzers)).watch([policy.to_program()])
    _run(watch, ["My", " system prompt", " says:", " CAN", "ARY", "-7f3a"])
    assert [(e["rule"], e["token_index"]) for e in watch.events] == [("flag-instruction-talk", 0), ("stop-canary-leak", 3)]
    assert watch.stop.char == len("My system prompt says:")

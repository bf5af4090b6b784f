"""``innerguard audit query`` and ``report`` from the command line."""
from __future__ import annotations

import json
import time

import pytest

from audit_builders import decisions_per_request, write_log
from innerguard.engine.audit.query import parse_time
from innerguard.engine.cli import main


@pytest.fixture
def spread_log(tmp_path, plan):
    """200 requests decided over the last 10 hours."""
    write_log(tmp_path / "audit", 200, spread_s=10 * 3600)
    return tmp_path / "audit"


def _json(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_query_filters_by_action_policy_mode_and_tenant(spread_log, capsys):
    assert main(["audit", "query", str(spread_log), "--action", "block", "--format", "json"]) == 0
    blocked = _json(capsys)
    # shadow decisions match on what they would have done
    assert {(r["policy"]["mode"], r["result"]["action"], r["result"].get("would_action")) for r in blocked} == {
        ("enforce", "block", None), ("shadow", "allow", "block")}
    assert main(["audit", "query", str(spread_log), "--policy", "medical-topic-steer", "--action", "steer", "--format", "json"]) == 0
    shadow = _json(capsys)
    assert shadow and {(r["policy"]["mode"], r["result"]["action"], r["result"]["would_action"]) for r in shadow} == {("shadow", "allow", "steer")}
    assert main(["audit", "query", str(spread_log), "--tenant", "acme", "--mode", "enforce", "--format", "json"]) == 0
    acme = _json(capsys)
    assert acme and {(r["tenant"], r["policy"]["mode"]) for r in acme} == {("acme", "enforce")}


def test_query_by_time_window(spread_log, capsys):
    assert main(["audit", "query", str(spread_log), "--since", "2h", "--format", "json"]) == 0
    recent = _json(capsys)
    assert 38 <= len(recent) / decisions_per_request() <= 41  # about the last fifth of 200 requests
    assert main(["audit", "query", str(spread_log), "--until", "2h", "--format", "json"]) == 0
    assert len(_json(capsys)) + len(recent) == 200 * decisions_per_request()


def test_query_table_shows_the_evidence(spread_log, capsys):
    assert main(["audit", "query", str(spread_log), "--action", "block"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["time", "request", "tenant", "policy", "mode", "action", "rule", "evidence"]
    assert "prompt-injection@" in out[2] and "injected=" in out[2]


def test_report_writes_one_self_contained_page(spread_log, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["audit", "report", str(spread_log), "-o", str(out)]) == 0
    html = out.read_text()
    for section in ("verification", "totals", "timeline", "signals", "blocked", "revisions"):
        assert f'<section id="{section}">' in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert 'data-status="ok"' in html


def test_a_bad_time_is_one_line_without_a_traceback(spread_log, capsys):
    assert main(["audit", "query", str(spread_log), "--since", "last tuesday"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("innerguard: error: cannot read time 'last tuesday'") and err.count("\n") == 1


def test_times_are_rfc3339_dates_or_durations():
    assert parse_time("2026-11-29") == parse_time("2026-11-29T00:00:00Z")
    assert parse_time("2026-11-29T01:00:00+01:00") == parse_time("2026-11-29T00:00:00Z")
    assert abs(parse_time("15m") - (time.time() - 900)) < 5


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["audit", "verify", "--help"])
    text = capsys.readouterr().out
    assert "exit status: 0 intact, 1 broken" in text and "innerguard audit verify audit/ --key-file" in text

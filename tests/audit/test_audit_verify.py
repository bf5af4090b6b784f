"""``verify`` and ``innerguard audit verify``: an intact log passes; every kind
of tampering fails at the right file and line."""
from __future__ import annotations

import json

from audit_builders import KEY, decisions_per_request
from innerguard.engine.audit import chain, verify
from innerguard.engine.cli import main


def _closed_records() -> int:
    """closed_log's records: open, 20 requests' decisions, close."""
    return 2 + 20 * decisions_per_request()


def _lines(path):
    return path.read_bytes().splitlines(keepends=True)


def _write(path, lines):
    path.write_bytes(b"".join(lines))


def _first_problem(path, **kw):
    report = verify([path], key=KEY, **kw)
    assert report.status == 1, report.summary()
    return report.problems[0]


def test_a_closed_log_verifies_with_its_key(closed_log):
    report = verify([closed_log], key=KEY)
    assert report.ok, report.summary()
    assert report.records == len(_lines(closed_log)) == _closed_records()  # open, the decisions, close
    assert report.heads == {"audit": json.loads(_lines(closed_log)[-1])["hash"]}


def test_an_edited_record_fails_at_its_line(closed_log):
    lines = _lines(closed_log)
    lines[9] = lines[9].replace(b'"tenant":"acme"', b'"tenant":"evil"').replace(b'"tenant":"globex"', b'"tenant":"evil"').replace(b'"tenant":"initech"', b'"tenant":"evil"')
    _write(closed_log, lines)
    problem = _first_problem(closed_log)
    assert (problem.line, problem.message) == (10, "record altered: its hash does not match its content")


def test_a_deleted_record_fails_at_the_line_after_the_gap(closed_log):
    lines = _lines(closed_log)
    del lines[20]
    _write(closed_log, lines)
    problem = _first_problem(closed_log)
    assert problem.line == 21 and problem.message.startswith("chain broken")


def test_reordered_records_fail_at_the_first_moved_line(closed_log):
    lines = _lines(closed_log)
    lines[30], lines[31] = lines[31], lines[30]
    _write(closed_log, lines)
    problem = _first_problem(closed_log)
    assert problem.line == 31 and problem.message.startswith("chain broken")


def test_records_removed_at_the_end_are_detected(closed_log):
    lines = _lines(closed_log)
    _write(closed_log, lines[:-3])
    problem = _first_problem(closed_log)
    assert problem.line == len(lines) - 2 and "without a seal" in problem.message
    # A live log may be open-ended; a published head still catches the cut.
    assert verify([closed_log], key=KEY, allow_open=True).ok
    head = json.loads(lines[-2])["hash"]
    assert _first_problem(closed_log, allow_open=True, heads=[head]).message.startswith(f"head {head} is not in these logs")


def test_a_line_cut_mid_record_is_detected(closed_log):
    data = closed_log.read_bytes()
    closed_log.write_bytes(data[: len(data) - 40])
    problem = _first_problem(closed_log)
    assert (problem.line, problem.message) == (_closed_records(), "last line is cut mid-record (torn write or truncation)")


def test_a_rewrite_with_recomputed_hashes_fails_against_the_key(closed_log):
    """Without the key one can rewrite a whole file consistently; the signed
    checkpoints cannot be forged."""
    records = [json.loads(line) for line in _lines(closed_log)]
    prev = chain.GENESIS
    out = []
    for record in records:
        record.pop("hash")
        if record.get("type") == "decision":
            record["result"]["action"] = "allow"
        record["prev"] = prev
        prev, line = chain.seal_line(record)
        out.append(line.encode())
    _write(closed_log, out)
    assert verify([closed_log]).ok  # the chain alone is consistent again
    problem = _first_problem(closed_log)
    assert problem.line == _closed_records() and "signature does not match" in problem.message
    assert "signed checkpoints present but not checked" in verify([closed_log]).warnings[0]


def test_another_key_is_told_apart_from_tampering(closed_log):
    report = verify([closed_log], key=b"x" * 32)
    assert report.problems[0].message == "checkpoint is not signed with the given key (another key)"


def test_without_a_key_verify_warns_that_checkpoints_are_not_checked(closed_log):
    report = verify([closed_log])
    assert report.ok and any("not checked" in w for w in report.warnings)


def test_cli_exit_status_and_first_broken_record(closed_log, tmp_path, capsys):
    key_file = tmp_path / "audit.key"
    key_file.write_text(KEY.hex())
    assert main(["audit", "verify", str(closed_log.parent), "--key-file", str(key_file)]) == 0
    assert f"intact: {_closed_records()} records" in capsys.readouterr().out
    lines = _lines(closed_log)
    del lines[5]
    _write(closed_log, lines)
    assert main(["audit", "verify", str(closed_log), "--key-file", str(key_file)]) == 1
    assert f"{closed_log}:6: chain broken" in capsys.readouterr().err
    assert main(["audit", "verify", str(tmp_path / "missing.jsonl")]) == 2
    assert "No such file" in capsys.readouterr().err
    key_file.write_text("abc")
    assert main(["audit", "verify", str(closed_log), "--key-file", str(key_file)]) == 2
    assert capsys.readouterr().err.count("\n") == 1  # one line, no traceback


def test_a_record_that_breaks_the_schema_is_named(closed_log):
    lines = _lines(closed_log)
    record = json.loads(lines[3])
    record.pop("hash")
    record["policy"]["mode"] = "sometimes"
    _, line = chain.seal_line(record)  # hashed correctly: only the schema can tell
    lines[3] = line.encode()
    _write(closed_log, lines)
    problem = _first_problem(closed_log)
    assert problem.line == 4 and "schema at policy/mode" in problem.message

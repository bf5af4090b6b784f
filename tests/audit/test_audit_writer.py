"""The writer: durability, one writer per file, crash repair, rotation,
concurrency. Real processes and real files throughout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from audit_builders import KEY, decisions_per_request, request, result, write_log
from innerguard.engine.audit import AuditLog, verify
from innerguard.engine.audit.query import read

HERE = Path(__file__).parent


def _records(folder, kind=None):
    return [loc.record for loc in read([folder]) if kind is None or loc.record.get("type") == kind]


def _burst(folder, threads, requests, durability="batch"):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(HERE / "audit_burst.py"), str(folder), str(threads), str(requests), durability],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _go(*procs):
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()


def test_with_sync_durability_a_record_is_on_disk_when_its_ack_returns(tmp_path, plan):
    import random

    log = AuditLog(tmp_path, key=KEY, durability="sync")
    ack = log.record_decision(result(0, plan, random.Random(0)), plan=plan, request=request(0))
    assert ack.wait(10) and ack.done
    on_disk = log.path.read_text()
    assert all(decision_id in on_disk for decision_id in ack.decision_ids) and len(ack.decision_ids) == decisions_per_request()
    log.close()


def test_a_completion_record_links_the_output_to_its_decisions(tmp_path, plan):
    import random

    with AuditLog(tmp_path, key=KEY) as log:
        ack = log.record_decision(result(0, plan, random.Random(0)), plan=plan, request=request(7))
        log.record_completion("req-7", output="Le chat est assis.", output_tokens=6, finish_reason="stop")
    (completion,) = _records(tmp_path, "completion")
    assert completion["decision_ids"] == ack.decision_ids
    assert completion["output"]["length"] == 18 and "Le chat" not in json.dumps(completion)
    assert completion["metrics"]["gen_ai.usage.output_tokens"] == 6
    assert verify([tmp_path], key=KEY).ok


def test_a_malformed_result_is_recorded_as_an_error_and_the_writer_goes_on(tmp_path, plan):
    with AuditLog(tmp_path, key=KEY) as log:
        log.record_decision({"decisions": [{"policy": "p", "signals": ["not", "a", "map"]}]}, plan=plan, request=request(1))
        log.record_decision({"decisions": "garbage"}, plan=plan, request=request(2))
    kinds = [r["type"] for r in _records(tmp_path)]
    assert kinds.count("error") == 2 and kinds[-1] == "checkpoint"
    assert verify([tmp_path], key=KEY).ok


def test_two_logs_on_one_path_never_share_a_file(tmp_path, plan):
    first, second = AuditLog(tmp_path), AuditLog(tmp_path)
    assert (first.stream, second.stream) == ("audit", "audit-2") and first.path != second.path
    first.close(), second.close()
    assert verify([tmp_path]).ok


def test_a_closed_stream_is_resumed_by_the_next_writer(tmp_path, plan):
    write_log(tmp_path, 3)
    write_log(tmp_path, 3, seed=1)
    opens = _records(tmp_path, "open")
    assert [(o["reason"], o["previous_session"]) for o in opens] == [("new", None), ("resume", "closed")]
    assert len(list(tmp_path.glob("*.jsonl"))) == 1 and verify([tmp_path], key=KEY).ok


def test_a_torn_tail_is_cut_off_on_open_and_the_repair_is_recorded(tmp_path, plan):
    write_log(tmp_path, 3)
    path = tmp_path / "audit.jsonl"
    with path.open("ab") as f:
        f.write(b'{"schema_version":"innerguard.audit/v1","type":"decis')
    assert verify([tmp_path], key=KEY).problems[0].message.startswith("last line is cut")
    write_log(tmp_path, 2, seed=1)
    (repair,) = _records(tmp_path, "repair")
    assert repair["dropped_bytes"] == 53 and (tmp_path / repair["saved_to"]).read_bytes().endswith(b'"type":"decis')
    assert _records(tmp_path, "open")[-1]["previous_session"] == "closed"  # the garbage came after the seal
    assert verify([tmp_path], key=KEY).ok


def test_rotation_by_size_carries_the_chain_across_files(tmp_path, plan):
    write_log(tmp_path, 40, rotate_bytes=40_000)
    files = sorted(tmp_path.glob("audit*.jsonl"))
    assert len(files) >= 3 and tmp_path / "audit.jsonl" in files
    report = verify([tmp_path], key=KEY)
    assert report.ok, report.summary()
    assert len(_records(tmp_path, "decision")) == 40 * decisions_per_request()
    # Removing a middle segment breaks the stream.
    files[1].unlink()
    report = verify([tmp_path], key=KEY)
    assert report.status == 1 and "missing" in report.problems[0].message


def test_rotation_by_time(tmp_path, plan):
    import random

    with AuditLog(tmp_path, key=KEY, rotate_seconds=0.3, checkpoint_seconds=0.1) as log:
        for i in range(4):
            log.record_decision(result(i, plan, random.Random(i)), plan=plan, request=request(i)).wait()
            time.sleep(0.25)
    assert len(list(tmp_path.glob("audit.0*.jsonl"))) >= 2
    assert verify([tmp_path], key=KEY).ok


def test_kill_9_during_a_burst_leaves_a_verifiable_prefix_and_the_next_writer_continues(tmp_path, plan):
    proc = _burst(tmp_path, threads=2, requests=0)
    assert proc.stdout.readline().strip() == "audit"
    _go(proc)
    path = tmp_path / "audit.jsonl"
    deadline = time.time() + 60
    while (not path.exists() or path.stat().st_size < 300_000) and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    live = verify([tmp_path], key=KEY, allow_open=True)
    assert live.ok, live.summary()  # the intact prefix verifies
    assert live.records > 100
    strict = verify([tmp_path], key=KEY)
    assert strict.status == 1 and strict.problems[0].line >= live.records  # only the unsealed end is wrong
    write_log(tmp_path, 5, seed=3)
    report = verify([tmp_path], key=KEY)
    assert report.ok, report.summary()
    assert _records(tmp_path, "open")[-1]["previous_session"] == "unclean"


def test_two_processes_and_eight_threads_lose_nothing(tmp_path, plan):
    procs = [_burst(tmp_path, threads=4, requests=60) for _ in range(2)]
    streams = sorted(p.stdout.readline().strip() for p in procs)  # both hold their stream now
    _go(*procs)
    assert [p.wait(120) for p in procs] == [0, 0]
    assert streams == ["audit", "audit-2"]
    # ... and eight threads in this process.
    with AuditLog(tmp_path, key=KEY) as log:
        def work(t):
            import random
            rng = random.Random(t)
            for i in range(30):
                log.record_decision(result(i, plan, rng), plan=plan, request=request(10_000 * (t + 1) + i))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    report = verify([tmp_path], key=KEY)
    assert report.ok, report.summary()
    assert sorted(report.heads) == ["audit", "audit-2"]  # the third writer resumed a free stream
    decisions = _records(tmp_path, "decision")
    assert len(decisions) == (2 * 4 * 60 + 8 * 30) * decisions_per_request()
    assert len({d["request_id"] for d in decisions}) == 2 * 4 * 60 + 8 * 30


def test_output_decisions_are_chained_with_the_completion_and_shown_in_the_report(tmp_path, plan):
    import random

    from innerguard.engine.audit.report import render

    stop = {"policy": "canary-leak", "version": "0.1.0", "revision": "ab" * 32, "mode": "enforce", "rule": "stop-canary-leak",
            "rule_action": "stop", "action": "stop", "applied": True, "completion": 0, "token_index": 17,
            "signals": {"canary-leak.canary": True}, "message": "Withheld.", "error": None}
    with AuditLog(tmp_path, key=KEY) as log:
        log.record_decision(result(0, plan, random.Random(0)), plan=plan, request=request(7))
        log.record_completion("req-7", output="Sure, the code is", output_tokens=17, finish_reason="content_filter",
                              output_decisions=[stop])
    (completion,) = _records(tmp_path, "completion")
    (recorded,) = completion["output_decisions"]
    assert recorded["policy"] == {"name": "canary-leak", "version": "0.1.0", "revision": "ab" * 32}
    assert (recorded["rule"], recorded["action"], recorded["token_index"]) == ("stop-canary-leak", "stop", 17)
    schema = json.loads((HERE.parents[1] / "schemas" / "audit.schema.json").read_text())
    import jsonschema

    jsonschema.Draft202012Validator(schema).validate(completion)
    assert verify([tmp_path], key=KEY).ok  # the decisions are inside the chained record
    page = render([tmp_path], key=KEY)
    section = page[page.index('<section id="outputs">'):page.index('<section id="revisions">')]
    assert "1 output decision(s)" in section and "stop-canary-leak" in section and ">17<" in section

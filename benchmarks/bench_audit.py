"""Audit writer throughput and the caller's cost.

    .venv/bin/python benchmarks/bench_audit.py [--requests 10000] [--rounds 3]

Worker results for the shipped policies (four decisions per request) are
made up front; the timed part enqueues them as fast as one thread can and
waits until all are durable. Reported per durability mode: records/s from
the first enqueue to the last durable record, the caller's cost per
``record_decision`` (enqueue only), and a check that no record was dropped
(every decision record is read back and the log verifies).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "audit"))
from audit_builders import KEY, request, result, shipped_plan  # noqa: E402  the tests' seeded builders

from innerguard.engine.audit import AuditLog, verify  # noqa: E402
from innerguard.engine.audit.query import read  # noqa: E402


def one_round(folder: Path, items, plan, durability: str) -> dict:
    log = AuditLog(folder, key=KEY, durability=durability)
    start = time.perf_counter()
    for res, req in items:
        log.record_decision(res, plan=plan, request=req)
    enqueued = time.perf_counter()
    log.flush()
    done = time.perf_counter()
    log.close()
    expected = sum(len(res["decisions"]) for res, _ in items)
    written = sum(1 for loc in read([folder]) if loc.record.get("type") == "decision")
    check = verify([folder], key=KEY, check_schema=False)  # the schema is the tests' job
    return {"records_per_s": expected / (done - start), "enqueue_us": (enqueued - start) / len(items) * 1e6,
            "records": expected, "dropped": expected - written, "verified": check.ok}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--durability", nargs="+", default=["batch", "sync", "none"])
    args = parser.parse_args()
    plan = shipped_plan()
    rng = random.Random(0)
    items = [(result(i, plan, rng), request(i)) for i in range(args.requests)]
    print(f"{args.requests} requests x {len(items[0][0]['decisions'])} policies, median of {args.rounds} rounds")
    print(f"{'durability':<10} {'records/s':>10} {'enqueue µs/call':>16} {'records':>8} {'dropped':>8} verified")
    failed = False
    for durability in args.durability:
        rounds = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                rounds.append(one_round(Path(tmp), items, plan, durability))
        rate = statistics.median(r["records_per_s"] for r in rounds)
        enqueue = statistics.median(r["enqueue_us"] for r in rounds)
        dropped = max(r["dropped"] for r in rounds)
        verified = all(r["verified"] for r in rounds)
        failed |= dropped > 0 or not verified or rate < 10_000
        print(f"{durability:<10} {rate:>10,.0f} {enqueue:>16.2f} {rounds[0]['records']:>8} {dropped:>8} {verified}")
    print("target: >= 10,000 records/s, no drop, verified:", "FAILED" if failed else "met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A writer process for the audit tests: it opens the log at ``PATH``, prints
its stream, waits for a line on stdin, then ``THREADS`` threads each record
``REQUESTS`` decisions (0: until killed).

    python audit_burst.py PATH THREADS REQUESTS DURABILITY
"""
from __future__ import annotations

import os
import random
import sys
import threading

from audit_builders import KEY, request, result, shipped_plan
from innerguard.engine.audit import AuditLog


def main(path: str, threads: int, requests: int, durability: str) -> None:
    log = AuditLog(path, key=KEY, durability=durability)
    print(log.stream, flush=True)
    plan = shipped_plan()
    sys.stdin.readline()  # go

    def work(t: int) -> None:
        rng = random.Random(t)
        i = 0
        while requests == 0 or i < requests:
            n = (os.getpid() * 1000 + t) * 1_000_000 + i
            log.record_decision(result(i, plan, rng), plan=plan, request=request(n))
            i += 1

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    log.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

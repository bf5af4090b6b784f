"""The audit trail: one hash-chained, schema-described JSON line per policy
decision, written off the hot path, with tools to verify, query and report.

    log = AuditLog("audit/", key=key, durability="sync")
    ack = log.record_decision(result, plan=plan, request=RequestInfo(request_id="r1", prompt=text))
    ack.wait()                     # durable as ``durability`` says
    verify(["audit/"], key=key)    # Report: .ok, .problems, .heads

See docs/audit.md.
"""
from innerguard.engine.audit.chain import GENESIS, KEY_ENV, load_key
from innerguard.engine.audit.records import SCHEMA_VERSION, RecordBuilder, RequestInfo, parse_traceparent, rfc3339
from innerguard.engine.audit.verify import Problem, Report, verify
from innerguard.engine.audit.writer import Ack, AuditLog, AuditWriteError

__all__ = [
    "Ack", "AuditLog", "AuditWriteError", "GENESIS", "KEY_ENV", "Problem", "RecordBuilder", "Report",
    "RequestInfo", "SCHEMA_VERSION", "load_key", "parse_traceparent", "rfc3339", "verify",
]


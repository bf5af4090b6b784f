"""Builders for the audit tests and benchmark: the shipped policies compiled
for the real model, and worker results produced by the worker's own decision
code (``innerguard.hooks.decisions.decide``) from seeded signal values."""
from __future__ import annotations

import functools
import random
import time
from pathlib import Path

from innerguard.engine.audit import AuditLog, RequestInfo
from innerguard.hooks.decisions import decide

REPO = Path(__file__).resolve().parents[2]
KEY = bytes.fromhex("5e" * 32)


@functools.lru_cache(maxsize=1)
def shipped_plan():
    from innerguard.engine import models
    from innerguard.engine.compiler import compile_policies

    plan, _ = compile_policies([REPO / "policies"], models.prepare("smollm2-135m-instruct"))
    return plan


def decisions_per_request() -> int:
    """``result`` decides every shipped policy: one decision record each."""
    return len(shipped_plan().policies)


def result(i: int, plan, rng: random.Random) -> dict:
    """One request's worker result: injected about one time in five, medical
    one in four, a failed analyzer now and then."""
    injected = rng.random() < 0.2
    signals = {
        "prompt-injection.injected": rng.gauss(5.5, 1.5) if injected else rng.gauss(-2.0, 2.0),
        "prompt-injection-attention.focus": rng.betavariate(2, 6) if injected else rng.betavariate(6, 9),
        "prompt-injection-attention.override_phrase": injected and rng.random() < 0.6,
        "medical-topic-steer.medical": rng.betavariate(5, 2) if rng.random() < 0.25 else rng.betavariate(1, 8),
        "rag-relevance.relevance": [rng.random() ** 2 for _ in range(rng.randint(1, 5))],
    }
    errors = {}
    if i % 97 == 5:
        signals.pop("prompt-injection.injected")
        errors["prompt-injection.injected"] = "token_probe: no untrusted span in the prompt"
    out = decide(plan.policies, signals, errors, {})
    return {"id": f"k{i}", **out, "signals": signals, "details": {}, "errors": errors, "prefill_tokens": 90 + i % 40,
            "num_prompt_tokens": 90 + i % 40, "analysis_ms": 0.8 + (i % 7) * 0.1, "decision_latency_ms": 4.0 + i % 11}


def request(i: int, received_at: float | None = None) -> RequestInfo:
    return RequestInfo(
        request_id=f"req-{i}", correlation_id=f"corr-{i}", tenant=("acme", "globex", "initech")[i % 3],
        received_at=time.time() if received_at is None else received_at, model="smollm2-135m-instruct",
        prompt=f"Summarise the text. Document {i}: the cat sat on the mat.", prompt_tokens=90 + i % 40,
    )


def write_log(path, n: int, *, seed: int = 0, key: bytes | None = KEY, spread_s: float = 0.0, **options) -> list:
    """A closed log of ``n`` requests (``decisions_per_request()`` each); returns the acks."""
    plan = shipped_plan()
    rng = random.Random(seed)
    start = time.time() - spread_s
    with AuditLog(path, key=key, **options) as log:
        acks = []
        for i in range(n):
            at = start + spread_s * i / max(n, 1)
            acks.append(log.record_decision(result(i, plan, rng), plan=plan, request=request(i, at - 0.05), decided_at=at))
    return acks

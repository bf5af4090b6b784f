"""Run labelled rows through a guarded engine and read back, per row, the
policy's decision and its signals. Generation stops after one token: only
the decision matters."""
from __future__ import annotations

from typing import Any, Sequence

from innerguard.engine.evaluate.dataset import LabelledRow
from innerguard.engine.evaluate.report import RowResult
from innerguard.engine.evaluate.score import Score


def run_rows(llm, rows: Sequence[LabelledRow], score: Score, *, progress: bool = True) -> list[RowResult]:
    from vllm import SamplingParams

    outputs = llm.run([r.request for r in rows], SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=progress)
    return [result_of(row, out, score) for row, out in zip(rows, outputs)]


def result_of(row: LabelledRow, out: Any, score: Score) -> RowResult:
    decision = next((d for d in out.decisions if d.get("policy") == score.policy), None)
    signals = dict(out.signals or {})
    if decision:
        signals.update(decision.get("signals") or {})
    # Output rules read a teacher-forced completion: the decode signals' values at its end, and whether a rule fired.
    signals.update((getattr(out, "decode_values", None) or {}).get(0, {}))
    events = [e for e in getattr(out, "output_decisions", None) or () if e.get("policy") == score.policy]
    decoded = any(e.get("rule_action") == score.action for e in events)
    # A decode rule that could not be evaluated (its on_error decided) says nothing about the row.
    error = out.error if out.finish_reason == "error" else next((e["error"] for e in events if e.get("error")), None)
    return RowResult(
        id=out.id,
        label=row.label,
        style=row.style,
        prompt_tokens=out.prefill_tokens or 0,
        acted=decoded or (bool(decision) and (decision.get("rule_action") or decision.get("action")) == score.action),
        score=score.value(signals),
        signals=signals,
        error=error,
    )

"""Measure a policy on labelled data, inside vLLM: ``innerguard eval``.

``dataset`` reads labelled rows, ``score`` picks the score signal and its
orientation from the policy, ``runner`` runs the rows through a
``GuardedLLM``, ``report`` computes AUROC, TPR at fixed FPR, the confusion
at the policy's own thresholds, per-style and per-length figures, and
``plot`` draws them. ``metrics`` is plain Python and has no other imports.
``cases`` reads and checks policy unit tests (``innerguard test``).
"""
from innerguard.engine.evaluate.dataset import DataError, LabelledRow, load_rows
from innerguard.engine.evaluate.report import RowResult, build_report, format_text
from innerguard.engine.evaluate.score import Score, ScoreError, choose_score

__all__ = ["DataError", "LabelledRow", "RowResult", "Score", "ScoreError", "build_report", "choose_score", "format_text", "load_rows"]

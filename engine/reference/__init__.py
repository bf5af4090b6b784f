"""An independent reference in plain Hugging Face transformers.

Everything here is re-derived from ``output_attentions=True`` /
``output_hidden_states=True`` with eager attention and shares no code with
``innerguard.hooks.analyzers``: it is the yardstick that proves the fast
path (and, later, the in-vLLM capture) right. Slow and simple on purpose.
"""
from innerguard.engine.reference.model import load_reference_model
from innerguard.engine.reference.scores import (
    reference_focus_score,
    reference_head_ratios,
    reference_probe,
    reference_token_probe,
    reference_rerank,
    reference_residual,
)
from innerguard.engine.reference.steer import reference_steered_generate

__all__ = [
    "load_reference_model",
    "reference_focus_score",
    "reference_head_ratios",
    "reference_probe",
    "reference_token_probe",
    "reference_rerank",
    "reference_residual",
    "reference_steered_generate",
]

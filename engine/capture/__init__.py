"""Passive capture of internal states to storage, and replay of policy
revisions on stored captures. Worker side: ``innerguard.hooks.record``."""
from innerguard.engine.capture.run import RECORD_EXTENSION, CaptureError, Limits, capture, capture_to_disk, engine_kwargs
from innerguard.engine.capture.spec import CaptureSpec, CaptureSpecError, parse_layers, parse_qk_heads
from innerguard.engine.capture.store import CaptureResult, CaptureSet

__all__ = [
    "RECORD_EXTENSION", "CaptureError", "CaptureResult", "CaptureSet", "CaptureSpec", "CaptureSpecError", "Limits",
    "capture", "capture_to_disk", "engine_kwargs", "parse_layers", "parse_qk_heads",
]

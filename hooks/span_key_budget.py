"""How much memory the attention trackers on generated tokens may keep
outside vLLM's KV cache budget, in one worker.

A completion that such a tracker reads keeps its prompt's span keys
(``DecodeProbes.keep_span_keys``), and each step pads the decoding
requests' keys into one product (decode_focus.py): memory vLLM did not
plan for. On an H100, 640 requests a round reading 48 heads over ~480 span
tokens took ~15 GB in float32 and the engine ran out of memory
mid-generation (benchmarks/README.md, 2026-12-07). So a completion reserves
what it will keep before keeping it, and one that does not fit follows its
policies' ``on_error`` (a fail-closed policy stops it), never an engine
crash. Its siblings (``n > 1``) share one reservation, as they share the keys.

The limit: ``INNERGUARD_SPAN_KEYS_MAX_BYTES`` if set; else, on a GPU, the
device memory free when the first completion reserves, less a margin for a
layer's float32 product; on a CPU, none (host memory, as vLLM's own).
"""
from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("innerguard")

ENV = "INNERGUARD_SPAN_KEYS_MAX_BYTES"
MARGIN = 1 << 30  # left free on the device: the per-layer float32 upcast of the padded keys, fragmentation


class SpanKeysOverBudget(RuntimeError):
    pass


class SpanKeyBudget:
    def __init__(self, limit: int | None = None):
        self.limit = limit  # bytes; None: not known yet (resolved at the first reservation)
        self.resolved = limit is not None
        self.used = 0
        self.refused = 0

    def reserve(self, nbytes: int, device: torch.device) -> None:
        """Count ``nbytes`` as kept, or raise with a one-line reason."""
        if not self.resolved:
            self.limit, self.resolved = _limit(device), True
        if self.limit is not None and self.used + nbytes > self.limit:
            self.refused += 1
            message = (f"the attention tracker on generated tokens needs {nbytes / 2**20:.1f} MiB for this prompt's "
                       f"span keys, and {self.used / 2**20:.1f} of {self.limit / 2**20:.1f} MiB are in use: fewer "
                       f"concurrent requests, a shorter span, fewer heads, or a larger {ENV}")
            if self.refused == 1:
                log.warning("innerguard: %s (logged once; stats count every refusal)", message)
            raise SpanKeysOverBudget(message)
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        self.used = max(0, self.used - nbytes)

    def stats(self) -> dict:
        return {"used_bytes": self.used, "limit_bytes": self.limit, "refused": self.refused}


def _limit(device: torch.device) -> int | None:
    configured = os.environ.get(ENV, "").strip()
    if configured:
        if not configured.isdigit():
            raise ValueError(f"{ENV} must be a whole number of bytes, got {configured!r}")
        return int(configured)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return max(0, free - MARGIN)
    return None


BUDGET = SpanKeyBudget()  # one worker per process, as the guard points' callbacks

"""What a request served partly from vLLM's prefix cache did not compute:
the token-probe scores and the K of its cached prompt positions, read back
so that its decision equals the one a full prefill would give.

Scores come from the steps that computed those blocks
(hooks/token_score_cache.py); K from a sibling that computed them, the
reranker's calibration pass, or vLLM's KV cache itself (hooks/kv_cache.py).
``kv_readback`` is switched off by the engine side when its install canary
saw a cache hit decide otherwise; requests that need a read-back then fail.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from innerguard.hooks import kv_cache
from innerguard.hooks.calibration import CalibrationStore
from innerguard.hooks.request_state import RequestState
from innerguard.hooks.token_score_cache import CachedScoresMissing, PromptScores

log = logging.getLogger("innerguard")


class PrefixFill:
    def __init__(self, reader, states: dict[str, RequestState | None], calibrations: CalibrationStore,
                 counters: Counter[str]):
        self.reader = reader
        self.states = states  # the lifecycle's, by vLLM request id
        self.calibrations = calibrations
        self.counters = counters
        self.kv_readback = True
        self.prompt_scores = PromptScores(reader, counters)  # token-probe scores of cached positions
        self._said_scores_missing = False

    def fill(self, state: RequestState) -> None:
        """Prepend to ``state``'s captures what its cached prompt positions
        would have given."""
        start = state.captures.start
        if state.token_probes:
            if not self.kv_readback:
                raise RuntimeError(f"{start} prompt tokens came from the prefix cache and their token scores "
                                   "are not read back here")
            try:
                self.prompt_scores.fill(state, start)
            except CachedScoresMissing as exc:
                # The scheduler serves a token probe only blocks reported
                # scored (token_score_cache.ScoredBlocks): this is a bug, and
                # the request fails closed rather than decide on guesses.
                self.counters["token_scores_missing"] += 1
                if not self._said_scores_missing:
                    self._said_scores_missing = True
                    log.error("innerguard: a prefix-cache hit lacks token scores (%s); the request fails closed "
                              "(counted as token_scores_missing)", exc)
                raise
            state.captures.scores_filled = True
        if state.qk_layers:
            self._fill_keys(state, start, state.qk_layers)
        else:
            state.captures.prepend({})

    def _fill_keys(self, state: RequestState, start: int, layers) -> None:
        prefix = None
        for req_id in state.group.members:
            other = self.states.get(req_id)
            c = other.captures if other is not None and other is not state else None
            if c is not None and c.start == 0 and c.end >= start and all(l in c.k for l in layers):
                prefix = {l: c.keys(l) for l in layers}
                break
        if prefix is None:
            prefix = self.calibrations.prefix(state.key, layers, start)
        if prefix is None:
            prefix = self._cached_keys(state, layers, start)
        if prefix is None:
            raise RuntimeError(f"{start} prompt tokens came from the prefix cache and no captures exist for them")
        state.captures.prepend(prefix)

    def _cached_keys(self, state: RequestState, layers, start: int) -> dict[int, Any] | None:
        block_ids = self.reader.block_ids(state.req_id) if self.kv_readback else None
        if block_ids is None:
            return None
        prefix = {}
        for layer in layers:
            cache = self.reader.kv_cache(layer)
            layout = kv_cache.layout_of(state.runtime.modules.attention(layer), cache)
            if layout is None:
                return None
            prefix[layer] = kv_cache.cached_keys(cache, layout, block_ids, start)
        self.counters["keys_from_kv_cache"] += 1
        return prefix

    def reads_kv_cache(self, modules) -> bool:
        """Whether K of cached prompt positions can be read back here."""
        return self.kv_readback and kv_cache.layout_of(modules.attention(0), self.reader.kv_cache(0)) is not None

    def reads_token_scores(self) -> bool:
        """Whether token-probe scores of cached prompt positions can be read back here."""
        return self.kv_readback and self.prompt_scores.available()

    def keep_token_scores(self, runtime) -> None:
        """After a step's forward, before its decisions: the token scores it computed."""
        if self.kv_readback:
            self.prompt_scores.keep(runtime.rows)

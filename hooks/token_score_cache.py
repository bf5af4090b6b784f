"""Token-probe scores of prefix-cached prompt positions.

A token probe scores every prompt token while the prompt is computed
(capture.py); a position served from vLLM's prefix cache is never computed
again. So the scores a step computed are also kept in slots that mirror
vLLM's KV cache blocks (block id, offset), and a later request served from
those blocks reads its cached positions' scores there instead.

A block id is reused for other tokens once vLLM evicts it, so each block
also keeps a digest of every token before it and the token ids at its
slots. A read checks both against the reading request's own prompt and
fails, never guesses, when anything differs or was never written. Requests
with token probes share one cache salt per plan and set of probes
(engine/requests/prepare.py), so the blocks they hit were computed by
requests that scored them.
"""
from __future__ import annotations

import hashlib
import logging
from collections import Counter
from typing import Sequence

import numpy as np
import torch


log = logging.getLogger("innerguard")


class CachedScoresMissing(RuntimeError):
    pass


def prefix_digests(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """For each block of ``token_ids``, a digest of every token before it."""
    ids = np.asarray(token_ids, dtype=np.int64)
    digests, digest = [], b""
    for start in range(0, len(ids), block_size):
        digests.append(digest)
        digest = hashlib.blake2b(digest + ids[start:start + block_size].tobytes(), digest_size=16).digest()
    return digests


class TokenScoreCache:
    """Scores per signal for every slot of vLLM's ``num_blocks`` KV cache blocks."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.prefix: list[bytes | None] = [None] * num_blocks
        self.tokens = np.full((num_blocks, block_size), -1, dtype=np.int64)
        self.scores: dict[str, torch.Tensor] = {}  # signal -> [num_blocks * block_size], NaN where unwritten

    def _slots(self, block_ids: Sequence[int], start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        positions = np.arange(start, end)
        blocks = positions // self.block_size
        if end > start and blocks[-1] >= len(block_ids):
            raise CachedScoresMissing(f"{len(block_ids)} blocks of {self.block_size} hold fewer than {end} positions")
        ids = np.asarray(block_ids, dtype=np.int64)[blocks]
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_blocks):
            raise CachedScoresMissing(f"block ids outside the cache's {self.num_blocks} blocks")
        return ids, ids * self.block_size + positions % self.block_size

    def write(self, block_ids: Sequence[int], token_ids: Sequence[int], digests: Sequence[bytes], start: int,
              scores: dict[str, torch.Tensor]) -> None:
        """Each signal's scores of prompt positions ``[start, start + n)``."""
        n = len(next(iter(scores.values()))) if scores else 0
        if not n:
            return
        ids, slots = self._slots(block_ids, start, start + n)
        for block in np.unique(ids):  # a block that now holds other tokens starts over
            first = int(np.flatnonzero(ids == block)[0]) + start
            digest = digests[first // self.block_size]
            if self.prefix[block] != digest:
                self.prefix[block] = digest
                self.tokens[block] = -1
                for table in self.scores.values():
                    table[block * self.block_size:(block + 1) * self.block_size] = float("nan")
        self.tokens.reshape(-1)[slots] = np.asarray(token_ids[start:start + n], dtype=np.int64)
        for signal, values in scores.items():
            table = self.scores.get(signal)
            if table is None:
                table = self.scores[signal] = torch.full((self.num_blocks * self.block_size,), float("nan"),
                                                         dtype=torch.float32, device=values.device)
            table[torch.as_tensor(slots, device=table.device)] = values.to(table.dtype)

    def read(self, block_ids: Sequence[int], token_ids: Sequence[int], digests: Sequence[bytes], end: int,
             signal: str) -> torch.Tensor:
        """``signal``'s scores of prompt positions ``[0, end)``, or CachedScoresMissing."""
        ids, slots = self._slots(block_ids, 0, end)
        for block in np.unique(ids):
            first = int(np.flatnonzero(ids == block)[0])
            if self.prefix[block] != digests[first // self.block_size]:
                raise CachedScoresMissing(f"cache block {block} was scored after other tokens than this prompt's")
        if not np.array_equal(self.tokens.reshape(-1)[slots], np.asarray(token_ids[:end], dtype=np.int64)):
            raise CachedScoresMissing("some cached positions were never scored for these tokens")
        table = self.scores.get(signal)
        if table is None:
            raise CachedScoresMissing(f"no cached position was ever scored by {signal}")
        values = table[torch.as_tensor(slots, device=table.device)]
        if bool(torch.isnan(values).any()):  # written for these tokens, but under another set of probes
            raise CachedScoresMissing(f"some cached positions were never scored by {signal}")
        return values


class PromptScores:
    """The worker's side: what each step computed goes in, what a cache hit
    needs comes out, through the runner's block tables."""

    def __init__(self, reader, counters: Counter[str]):
        self.reader, self.counters = reader, counters
        self.cache: TokenScoreCache | None = None
        self._digests: dict[str, list[bytes]] = {}

    def available(self) -> bool:
        """Whether this runner shows every block of a request (not only those it was admitted with)."""
        return self._geometry() is not None

    def _geometry(self) -> tuple[int, int] | None:
        block_size = self.reader.block_size()
        cache = self.reader.kv_cache(0)
        return None if not block_size or cache is None else (int(cache.shape[0]), int(block_size))

    def _ready(self) -> TokenScoreCache:
        if self.cache is None:
            geometry = self._geometry()
            if geometry is None:
                raise CachedScoresMissing("this model runner does not show every KV cache block of a request")
            self.cache = TokenScoreCache(*geometry)
        return self.cache

    def _prompt(self, req_id: str) -> tuple[list[int], list[int], list[bytes]]:
        block_ids, token_ids = self.reader.block_ids(req_id), self.reader.prompt_token_ids(req_id)
        if block_ids is None or token_ids is None:
            raise CachedScoresMissing("the runner shows no block table or prompt for this request")
        digests = self._digests.get(req_id)
        if digests is None:
            digests = self._digests[req_id] = prefix_digests(token_ids, self._ready().block_size)
        return block_ids, list(token_ids), digests

    def keep(self, step_rows) -> None:
        """The scores of the prompt positions this step computed, per request."""
        for rows in step_rows:
            state = rows.state
            a, b = rows.prompt_rows
            scores = state.captures.token_scores
            if b <= a or not state.token_probes or not state.capturing or not scores or state.steers:
                continue  # a steered stream's scores must never serve another request
            start = rows.span.first_position + (a - rows.span.start)
            try:
                block_ids, token_ids, digests = self._prompt(state.req_id)
                self._ready().write(block_ids, token_ids, digests, start,
                                    {_key(state, signal): values[start:start + (b - a)] for signal, values in scores.items()})
            except Exception:  # this request decides on its own scores; a later hit on them fails closed
                self.counters["token_score_writes_failed"] += 1
                log.exception("innerguard: keeping token scores for prefix-cache hits failed")

    def fill(self, state, end: int) -> None:
        """Positions ``[0, end)`` of each of ``state``'s token scores, from the cache."""
        block_ids, token_ids, digests = self._prompt(state.req_id)
        for signal in state.token_probes:
            values = self._ready().read(block_ids, token_ids, digests, end, _key(state, signal))
            scores = state.captures.token_scores.get(signal)
            if scores is None:
                scores = state.captures.token_scores[signal] = values.new_zeros(state.num_prompt_tokens)
            scores[:end] = values.to(scores.device, scores.dtype)
        self.counters["token_scores_from_cache"] += 1

    def forget(self, req_id: str) -> None:
        self._digests.pop(req_id, None)

    def drop(self, bundle: str) -> None:
        """A retired plan's scores (its requests' salts are never sent again)."""
        if self.cache is not None:
            for key in [k for k in self.cache.scores if k.startswith(f"{bundle}/")]:
                del self.cache.scores[key]


def _key(state, signal: str) -> str:
    # One table per plan and probe: a reloaded probe of the same name has other weights.
    return f"{state.runtime.bundle}/{signal}"

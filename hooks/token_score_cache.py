"""Token-probe scores of prefix-cached prompt positions: exact or absent.

A token probe scores every prompt token while the prompt is computed
(capture.py); a position served from vLLM's prefix cache is never computed
again. So the scores a step computed are also kept in slots that mirror
vLLM's KV cache blocks (block id, offset), and a later request served from
those blocks reads its cached positions' scores there instead.

vLLM caches every full block a request computes, whether or not anything
scored it: a block is hashed when it is allocated, and a request that was
decided, then preempted, recomputes its prompt into fresh blocks that
nothing scores; a block that holds generated tokens was never a prompt.
Reading such a block fails (``CachedScoresMissing``) and, before this was
understood, failed the request closed: a false block on every later
request that shared the prefix. So the sharing is closed at both ends:

- the worker reports, with each step's output, every block it has scored
  whole, by its content (``prefix_digests`` through the block); the
  scheduler lets a request under a token probe's shared salt reuse only a
  leading run of blocks reported for exactly its own tokens
  (``ScoredBlocks``, hooks/scheduler.py). Any other block is computed, and
  scored, again: a cache hit is exact or it does not happen;
- each block is written by one request at a time (its ``writer``): a block
  taken over by another request starts over, so no slot mixes the scores of
  two prompts, and a read checks the digest of every token before the block
  and the token id at every slot it reads.

Requests with token probes share one cache salt per plan and set of probes
(engine/requests/prepare.py, ``SHARED_SALT_PREFIX``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
from collections import Counter
from typing import Sequence

import numpy as np
import torch


log = logging.getLogger("innerguard")

# The cache salt of requests that share token-probe scores starts so
# (engine/requests/prepare.py ``cache_salt``; the server only appends to it).
SHARED_SALT_PREFIX = "innerguard-tokens-"


class CachedScoresMissing(RuntimeError):
    pass


def prefix_digests(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """Entry ``k``: a digest of every token before block ``k`` of
    ``token_ids``; one more entry at the end, of every token. So entry
    ``k + 1`` names block ``k``'s content, its prefix included."""
    ids = np.asarray(token_ids, dtype=np.int64)
    digests, digest = [], b""
    for start in range(0, len(ids), block_size):
        digests.append(digest)
        digest = hashlib.blake2b(digest + ids[start:start + block_size].tobytes(), digest_size=16).digest()
    digests.append(digest)
    return digests


class TokenScoreCache:
    """Scores per signal for every slot of vLLM's ``num_blocks`` KV cache blocks."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.prefix: list[bytes | None] = [None] * num_blocks
        self.writer = np.full(num_blocks, -1, dtype=np.int64)  # the request whose scores a block holds
        self.tokens = np.full((num_blocks, block_size), -1, dtype=np.int64)
        self.scores: dict[str, torch.Tensor] = {}  # signal -> [num_blocks * block_size], on the scores' device
        # Which slots hold each signal's score, on the host: checking the
        # device table for NaN would synchronise with the GPU on every read.
        self.written: dict[str, np.ndarray] = {}

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
              scores: dict[str, torch.Tensor], writer: int = 0) -> list[tuple[int, bytes]]:
        """Each signal's scores of prompt positions ``[start, start + n)``,
        computed by request ``writer``. Returns the blocks this write made
        whole, each with its content's digest (``prefix_digests``)."""
        n = len(next(iter(scores.values()))) if scores else 0
        if not n:
            return []
        _, slots = self._slots(block_ids, start, start + n)
        # The positions run on, so the blocks they fall in are a run of the
        # request's block table: block ``first + k`` of the prompt is ``touched[k]``.
        first = start // self.block_size
        touched = np.asarray(block_ids[first:(start + n - 1) // self.block_size + 1], dtype=np.int64)
        for index, block in enumerate(touched.tolist(), first):
            # Another request's block, or one that now holds other tokens,
            # starts over: scores at a slot depend on every token before it,
            # so a block never keeps slots of two writers.
            if self.prefix[block] != digests[index] or self.writer[block] != writer:
                self.prefix[block], self.writer[block] = digests[index], writer
                self.tokens[block] = -1
                for written in self.written.values():
                    written[block * self.block_size:(block + 1) * self.block_size] = False
        self.tokens.reshape(-1)[slots] = np.asarray(token_ids[start:start + n], dtype=np.int64)
        index = None
        for signal, values in scores.items():
            table = self.scores.get(signal)
            if table is None:
                table = self.scores[signal] = torch.full((self.num_blocks * self.block_size,), float("nan"),
                                                         dtype=torch.float32, device=values.device)
                self.written[signal] = np.zeros(self.num_blocks * self.block_size, dtype=bool)
            if index is None or index.device != table.device:
                index = _on(slots, table.device)
            table[index] = values.to(table.dtype)
            self.written[signal][slots] = True
        # Whole: every slot holds this writer's token, hence (one writer,
        # one set of probes per salt) every one of its signals' scores.
        whole = (self.tokens[touched] >= 0).all(axis=1)
        return [(block, digests[index + 1]) for index, (block, full) in enumerate(zip(touched.tolist(), whole), first)
                if full and index + 1 < len(digests)]

    def read(self, block_ids: Sequence[int], token_ids: Sequence[int], digests: Sequence[bytes], end: int,
             signal: str) -> torch.Tensor:
        """``signal``'s scores of prompt positions ``[0, end)``, or CachedScoresMissing."""
        _, slots = self._slots(block_ids, 0, end)
        for index, block in enumerate(block_ids[:(end - 1) // self.block_size + 1] if end else []):
            if self.prefix[block] != digests[index]:
                raise CachedScoresMissing(f"cache block {block} was scored after other tokens than this prompt's")
        if not np.array_equal(self.tokens.reshape(-1)[slots], np.asarray(token_ids[:end], dtype=np.int64)):
            raise CachedScoresMissing("some cached positions were never scored for these tokens")
        table = self.scores.get(signal)
        if table is None:
            raise CachedScoresMissing(f"no cached position was ever scored by {signal}")
        if not self.written[signal][slots].all():  # written for these tokens, but under another set of probes
            raise CachedScoresMissing(f"some cached positions were never scored by {signal}")
        return table[_on(slots, table.device)]


def _on(slots: np.ndarray, device: torch.device) -> torch.Tensor:
    """``slots`` as an index on ``device``. To a GPU through pinned memory
    and without blocking: a copy from pageable memory waits for every kernel
    queued before it, which would stall each step that keeps scores."""
    index = torch.from_numpy(np.ascontiguousarray(slots, dtype=np.int64))
    if device.type == "cpu":
        return index
    return index.pin_memory().to(device, non_blocking=True)


class PromptScores:
    """The worker's side: what each step computed goes in, what a cache hit
    needs comes out, through the runner's block tables; the blocks made
    whole go to the scheduler with the step's output (``take_whole``)."""

    def __init__(self, reader, counters: Counter[str]):
        self.reader, self.counters = reader, counters
        self.cache: TokenScoreCache | None = None
        self._digests: dict[str, list[bytes]] = {}
        self._writers: dict[str, int] = {}
        self._next_writer = itertools.count()
        self._whole: dict[int, bytes] = {}  # made whole since the last step output: block -> content digest
        self._said_unavailable = False

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

    def _writer(self, req_id: str) -> int:
        writer = self._writers.get(req_id)
        if writer is None:
            writer = self._writers[req_id] = next(self._next_writer)
        return writer

    def keep(self, step_rows) -> None:
        """The scores of the prompt positions this step computed, per
        request: those of requests still capturing, and those a decided
        request recomputes after a preemption (``Rows.rescoring``): vLLM
        caches its blocks again, and they must be scored to be shared."""
        kept = [rows for rows in step_rows if _scored(rows)]
        if not kept:
            return
        if not self.available():
            # Model Runner V2 shows a request only the blocks it was admitted
            # with. Nothing is kept, so the scheduler never lets a cached
            # block serve a token probe, and the engine gives token-probe
            # requests a salt of their own (install info reads_token_scores).
            self.counters["token_scores_not_kept"] += len(kept)
            if not self._said_unavailable:
                self._said_unavailable = True
                log.warning("innerguard: this model runner does not show every KV cache block of a request; "
                            "token-probe scores are not shared through the prefix cache (counted as "
                            "token_scores_not_kept)")
            return
        for rows in kept:
            state = rows.state
            a, b = rows.prompt_rows
            start = rows.span.first_position + (a - rows.span.start)
            scores = state.captures.token_scores
            try:
                block_ids, token_ids, digests = self._prompt(state.req_id)
                whole = self._ready().write(
                    block_ids, token_ids, digests, start,
                    {_key(state, signal): values[start:start + (b - a)] for signal, values in scores.items()},
                    self._writer(state.req_id))
                self._whole.update(whole)
            except Exception:  # this request decides on its own scores; its blocks are never reported whole
                self.counters["token_score_writes_failed"] += 1
                log.exception("innerguard: keeping token scores for prefix-cache hits failed")
            if rows.rescoring:
                state.captures.token_scores = {}  # decided: these served the cache only

    def has_whole(self) -> bool:
        return bool(self._whole)

    def take_whole(self) -> dict[int, bytes]:
        """The blocks scored whole since the last call, for the scheduler."""
        whole, self._whole = self._whole, {}
        return whole

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
        self._writers.pop(req_id, None)

    def drop(self, bundle: str) -> None:
        """A retired plan's scores (its requests' salts are never sent again)."""
        if self.cache is not None:
            for key in [k for k in self.cache.scores if k.startswith(f"{bundle}/")]:
                del self.cache.scores[key], self.cache.written[key]


def _scored(rows) -> bool:
    """Whether ``rows`` carry prompt positions whose token scores are kept."""
    state = rows.state
    a, b = rows.prompt_rows
    # A steered stream's scores must never serve another request.
    return (b > a and bool(state.token_probes) and bool(state.captures.token_scores) and not state.steers
            and (state.capturing or rows.rescoring))


def _key(state, signal: str) -> str:
    # One table per plan and probe: a reloaded probe of the same name has other weights.
    return f"{state.runtime.bundle}/{signal}"


class ScoredBlocks:
    """The scheduler's side: the blocks the worker reported scored whole,
    by content, and the gate on vLLM's prefix-cache lookup (``gate``)."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.content: dict[int, bytes] = {}  # block id -> digest of the tokens it was scored for
        self.failed = 0  # lookups the gate could not check (logged once)

    def confirm(self, whole: dict[int, bytes]) -> None:
        self.content.update(whole)

    def usable(self, token_ids: Sequence[int], block_ids: Sequence[int]) -> int:
        """How many leading blocks of ``block_ids`` (a cache hit for
        ``token_ids``) were reported scored for exactly those tokens."""
        if not block_ids:
            return 0
        digests = prefix_digests(list(token_ids[: len(block_ids) * self.block_size]), self.block_size)
        for k, block in enumerate(block_ids):
            if self.content.get(block) != digests[k + 1]:
                return k
        return len(block_ids)

    @classmethod
    def gate(cls, manager, block_size: int) -> "ScoredBlocks":
        """Wrap ``manager.get_computed_blocks`` (vLLM's ``KVCacheManager``,
        on the instance): a request under a token probe's shared salt is
        served from the prefix cache up to its first block not reported
        scored for its own tokens, and computes (and scores) the rest. A
        block is hashed when it is allocated, so without this a request
        could hit blocks whose scores nobody kept, or will keep."""
        scored = cls(block_size)
        lookup = manager.get_computed_blocks

        def get_computed_blocks(request, *args, **kwargs):
            found = lookup(request, *args, **kwargs)
            blocks, num_tokens = found[0], found[1]
            if not num_tokens or not str(getattr(request, "cache_salt", None) or "").startswith(SHARED_SALT_PREFIX):
                return found
            try:
                groups = blocks.blocks
                # Scores are kept for one KV cache group (full attention) only.
                keep = scored.usable(request.all_token_ids, [b.block_id for b in groups[0]]) if len(groups) == 1 else 0
                if keep * block_size >= num_tokens:
                    return found
                return (dataclasses.replace(blocks, blocks=tuple(list(group[:keep]) for group in groups)),
                        keep * block_size, *found[2:])
            except Exception:
                # Never stop the scheduler: the hit goes through unchecked, and
                # a block without scores fails its request closed in the worker.
                scored.failed += 1
                if scored.failed == 1:
                    log.exception("innerguard: checking a prefix-cache hit against the scored blocks failed "
                                  "(this vLLM's KVCacheBlocks differ?); counted in ScoredBlocks.failed")
                return found

        manager.get_computed_blocks = get_computed_blocks
        return scored

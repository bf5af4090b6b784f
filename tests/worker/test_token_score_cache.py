"""Token-probe scores kept per KV cache block slot (hooks/token_score_cache.py):
a cache hit reads back exactly what the computed positions scored, and
never a slot that holds, or was scored for, other tokens."""
from __future__ import annotations

import pytest
import torch

from innerguard.hooks.token_score_cache import CachedScoresMissing, TokenScoreCache, prefix_digests

BS = 4


def _write(cache, blocks, tokens, start, end, signal="p.s", scale=1.0):
    scores = torch.arange(start, end, dtype=torch.float32) * scale
    cache.write(blocks, tokens, prefix_digests(tokens, BS), start, {signal: scores})


def _read(cache, blocks, tokens, end, signal="p.s"):
    return cache.read(blocks, tokens, prefix_digests(tokens, BS), end, signal)


def test_positions_written_in_chunks_read_back_through_the_block_table():
    cache, tokens, blocks = TokenScoreCache(8, BS), list(range(100, 111)), [5, 2, 7]
    _write(cache, blocks, tokens, 0, 6)
    _write(cache, blocks, tokens, 6, 11)
    assert _read(cache, blocks, tokens, 8).tolist() == list(range(8))
    assert _read(cache, blocks, tokens, 11).tolist() == list(range(11))


def test_a_later_prompt_with_the_same_start_reads_the_shared_part():
    # Multi-turn: the next prompt repeats the first one's tokens, then goes on.
    cache, first = TokenScoreCache(8, BS), [7, 8, 9, 10, 11, 12]
    _write(cache, [0, 1], first, 0, 6)
    second = first + [13, 14, 15]
    assert _read(cache, [0, 1, 3], second, 6).tolist() == list(range(6))


def test_a_block_reused_for_other_tokens_is_never_read_for_the_old_ones():
    cache, old, new = TokenScoreCache(8, BS), [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9]
    _write(cache, [0, 1], old, 0, 8)
    _write(cache, [0, 1], new, 4, 8, scale=-1.0)  # block 1 now holds new's second block
    with pytest.raises(CachedScoresMissing):
        _read(cache, [0, 1], old, 8)
    assert _read(cache, [0, 1], new, 8).tolist() == [0, 1, 2, 3, -4, -5, -6, -7]


def test_another_prefix_before_the_same_tokens_is_refused():
    cache = TokenScoreCache(8, BS)
    _write(cache, [0, 1], [1, 2, 3, 4, 5, 6, 7, 8], 0, 8)
    with pytest.raises(CachedScoresMissing, match="other tokens"):
        _read(cache, [3, 1], [0, 2, 3, 4, 5, 6, 7, 8], 8)  # block 1's tokens, after another first block


def test_unwritten_positions_and_unscored_signals_are_refused():
    cache, tokens = TokenScoreCache(8, BS), [1, 2, 3, 4, 5, 6, 7, 8]
    _write(cache, [0, 1], tokens, 0, 5)
    with pytest.raises(CachedScoresMissing, match="never scored"):
        _read(cache, [0, 1], tokens, 8)
    with pytest.raises(CachedScoresMissing):
        _read(cache, [0, 1], tokens, 4, signal="p.other")
    _write(cache, [0, 1], tokens, 0, 4, signal="p.other")
    assert _read(cache, [0, 1], tokens, 4, signal="p.other").tolist() == [0, 1, 2, 3]
    with pytest.raises(CachedScoresMissing, match="never scored by p.other"):  # position 4: scored by p.s only
        _read(cache, [0, 1], tokens, 5, signal="p.other")


def test_a_block_table_too_short_or_outside_the_cache_is_refused():
    cache, tokens = TokenScoreCache(4, BS), list(range(8))
    with pytest.raises(CachedScoresMissing, match="hold fewer"):
        _read(cache, [0], tokens, 8)
    with pytest.raises(CachedScoresMissing, match="outside"):
        _write(cache, [0, 9], tokens, 0, 8)

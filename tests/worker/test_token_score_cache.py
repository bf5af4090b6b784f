"""Token-probe scores kept per KV cache block slot (hooks/token_score_cache.py):
a cache hit reads back exactly what the computed positions scored, and
never a slot that holds, or was scored for, other tokens; the scheduler
serves a token probe only blocks reported scored for its own tokens."""
from __future__ import annotations

import pytest
import torch

from innerguard.hooks.token_score_cache import (CachedScoresMissing, PromptScores, ScoredBlocks, TokenScoreCache,
                                                prefix_digests)

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


def test_a_block_taken_over_by_another_request_starts_over():
    # Request 1 scored a whole block; request 2 (same tokens before it) got the
    # block next and wrote only its first half, with other tokens. A reader
    # with request 2's first half and request 1's second half must not get
    # request 1's scores there: they were computed after other tokens.
    cache = TokenScoreCache(8, BS)
    first, second = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9]
    cache.write([0, 1], first, prefix_digests(first, BS), 0, {"p.s": torch.arange(8.0)}, writer=1)
    cache.write([0, 1], second, prefix_digests(second, BS), 4, {"p.s": -torch.arange(4.0, 6.0)}, writer=2)
    mixed = [1, 2, 3, 4, 9, 9, 7, 8]
    with pytest.raises(CachedScoresMissing, match="never scored"):
        _read(cache, [0, 1], mixed, 8)
    assert _read(cache, [0, 1], second, 6).tolist() == [0, 1, 2, 3, -4, -5]


def test_a_write_names_the_blocks_it_made_whole_by_their_tokens():
    cache, tokens, blocks = TokenScoreCache(8, BS), list(range(100, 111)), [5, 2, 7]
    digests = prefix_digests(tokens, BS)
    assert cache.write(blocks, tokens, digests, 0, {"p.s": torch.zeros(6)}, writer=3) == [(5, digests[1])]
    assert cache.write(blocks, tokens, digests, 6, {"p.s": torch.zeros(5)}, writer=3) == [(2, digests[2])]  # 7: partial
    assert digests[2] == prefix_digests(tokens[:8], BS)[2]  # a block's name covers every token up to its end


def test_the_scheduler_serves_only_blocks_reported_scored_for_the_same_tokens():
    scored = ScoredBlocks(BS)
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    digests = prefix_digests(tokens, BS)
    assert scored.usable(tokens, [5, 2]) == 0  # hashed by vLLM, never reported scored
    scored.confirm({5: digests[1], 2: digests[2]})
    assert scored.usable(tokens, [5, 2]) == 2
    assert scored.usable(tokens, [5, 7]) == 1  # block 7 holds the same tokens, unscored
    assert scored.usable([1, 2, 3, 4, 5, 6, 0, 8], [5, 2]) == 1  # block 2 was scored for other tokens
    scored.confirm({5: prefix_digests([9, 9, 9, 9], BS)[1]})  # block 5 reused and scored for others since
    assert scored.usable(tokens, [5, 2]) == 0


class _RunnerWithoutBlocks:
    """What Model Runner V2 shows: no block size, so not every block of a request."""

    def block_size(self):
        return None

    def kv_cache(self, layer):
        return None


def test_a_runner_that_cannot_show_every_block_keeps_nothing_and_says_so_once(caplog):
    from collections import Counter
    from types import SimpleNamespace

    from innerguard.hooks.request_state import Group, RequestState, Rows
    from innerguard.hooks.runner_view import RowSpan

    counters: Counter[str] = Counter()
    scores = PromptScores(_RunnerWithoutBlocks(), counters)
    runtime = SimpleNamespace(bundle="b")
    rows = []
    for i in range(2):
        state = RequestState(f"r{i}", f"k{i}", runtime, Group(f"k{i}", i), {}, 8, token_probes=("p.s",))
        state.captures.token_scores["p.s"] = torch.zeros(8)
        rows.append(Rows(state, RowSpan(f"r{i}", i, 8 * i, 8 * i + 8, 0, 8), (8 * i, 8 * i + 8)))
    with caplog.at_level("WARNING", logger="innerguard"):
        scores.keep(rows)
        scores.keep(rows)
    assert counters["token_scores_not_kept"] == 4 and counters["token_score_writes_failed"] == 0
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    assert not scores.has_whole()


def test_scored_blocks_travel_with_the_step_output_through_pickle():
    import pickle

    from vllm.v1.outputs import ModelRunnerOutput

    from innerguard.hooks.verdicts import attach, blocked_in, scored_in

    output = ModelRunnerOutput(req_ids=["a"], req_id_to_index={"a": 0}, sampled_token_ids=[[2]])
    digest = prefix_digests([1, 2, 3, 4], BS)[1]
    tagged = pickle.loads(pickle.dumps(attach(output, frozenset(), {7: digest})))  # the multiprocess executor's way
    assert scored_in(tagged) == {7: digest} and blocked_in(tagged) == frozenset()
    assert scored_in(output) == {}  # vLLM's own output object stays as it was


class _Lookup:
    """Stands for vLLM's KVCacheManager: its prefix-cache lookup finds ``hit``."""

    def __init__(self, hit):
        self.hit = hit

    def get_computed_blocks(self, request):
        return self.hit, len(self.hit.blocks[0]) * BS, 0


def test_the_gate_cuts_a_shared_salt_hit_at_its_first_unscored_block():
    from types import SimpleNamespace

    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    from innerguard.hooks.token_score_cache import SHARED_SALT_PREFIX

    tokens = list(range(1, 14))
    manager = _Lookup(KVCacheBlocks(([KVCacheBlock(4), KVCacheBlock(9), KVCacheBlock(2)],)))
    scored = ScoredBlocks.gate(manager, BS)
    scored.confirm({4: prefix_digests(tokens, BS)[1], 2: prefix_digests(tokens, BS)[3]})  # 9: never reported
    shared = SimpleNamespace(cache_salt=f"{SHARED_SALT_PREFIX}abc-acme", all_token_ids=tokens)
    blocks, num_tokens, boundary = manager.get_computed_blocks(shared)
    assert [b.block_id for b in blocks.blocks[0]] == [4] and num_tokens == BS and boundary == 0
    other = SimpleNamespace(cache_salt=None, all_token_ids=tokens)  # no token probe: served as vLLM finds
    assert [b.block_id for b in manager.get_computed_blocks(other)[0].blocks[0]] == [4, 9, 2]

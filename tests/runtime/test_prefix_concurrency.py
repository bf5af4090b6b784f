"""Token-probe requests that share long prefixes, sent in concurrent bursts
through the real engine, decide exactly as each one sent alone: a prompt
position served from the prefix cache carries the scores its computation
gave, or it is not served from the cache (hooks/token_score_cache.py).

The engine here has 11 usable KV cache blocks of 128 tokens, so requests
that generate outgrow it and are preempted after their decision; resumed,
they recompute their prompt into blocks that vLLM caches again. Before the
fix nothing scored those blocks, and every later request served from them
was blocked (``CachedScoresMissing``); nor did a reinstall of the same
policies keep the scores of blocks cached before it."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from helpers import TEXTS, prepared

pytestmark = pytest.mark.vllm

POLICY = Path(__file__).resolve().parents[2] / "policies" / "prompt-injection.yaml"
SIGNAL = "prompt-injection.injected"
BLOCK = 128  # tokens per KV cache block on CPU
BENIGN = [t for i, t in enumerate(TEXTS) if i not in (2, 5)]
SUFFIXES = ["Thanks.", BENIGN[0], BENIGN[1], TEXTS[2]]  # the last one an injection: blocked
WORDS = "and then the small boat drifted slowly past the old stone bridge near the quiet harbour".split()
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def engine(smollm2_dir, in_this_process):
    from innerguard.engine.guarded import GuardedLLM

    with in_this_process():
        llm = GuardedLLM(smollm2_dir, [POLICY], enforce_eager=True, num_gpu_blocks_override=12, max_model_len=768,
                         max_num_seqs=16, max_num_batched_tokens=512)
    yield llm
    llm.shutdown()


def _row(n: int, data: str, max_tokens: int = 1) -> dict:
    return {"id": f"{n}", "instruction": "Summarise the document.", "data": data, "policies": ["prompt-injection"],
            "max_tokens": max_tokens}


def _shared(llm, document: str) -> int:
    """Prompt tokens that every suffix after ``document`` shares."""
    a, _ = prepared(llm, _row(0, f"{document} Thanks."))
    b, _ = prepared(llm, _row(0, f"{document} Rain is expected."))
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


def _document(llm, blocks: int, first: int) -> str:
    """Benign text whose prompt prefix fills ``blocks`` whole KV cache blocks
    and a few tokens more: a request computes little besides its suffix."""
    words, i = [], first
    while _shared(llm, " ".join(words)) < blocks * BLOCK - 20:
        words.append(BENIGN[i % len(BENIGN)])
        i += 1
    i = 0
    while _shared(llm, " ".join(words)) < blocks * BLOCK + 2:
        words.append(WORDS[i % len(WORDS)])
        i += 1
    return " ".join(words)


def _near_block_end(llm, document: str) -> str:
    """``document`` and a suffix that end its prompt 1 to 8 tokens before a
    block's end: a few tokens on, the request needs one more block."""
    words, i = [document], 0
    while len(prepared(llm, _row(0, " ".join(words)))[0]) % BLOCK < BLOCK - 8:
        words.append(BENIGN[i % len(BENIGN)] if i < 7 else WORDS[i % len(WORDS)])
        i += 1
    return " ".join(words)


@pytest.fixture(scope="module")
def documents(engine) -> list[str]:
    return [_document(engine, 1, 0), _document(engine, 1, 3), _document(engine, 2, 1)]


def _params():
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, ignore_eos=True)  # a request generates its max_tokens


def _stats(llm) -> dict:
    return llm.llm.collective_rpc("innerguard_stats")[0]


def _alone(llm, texts) -> dict[str, tuple[bool, float]]:
    """Each text's verdict and signal, its prompt computed whole: one request
    at a time, under a salt of its own."""
    llm.share_token_scores = False
    try:
        found = {}
        for text in texts:
            (out,) = llm.run([_row(0, text)], _params())
            assert out.error is None and out.prefill_tokens == len(out.output.prompt_token_ids), out.error
            found[text] = (out.blocked, out.signals[SIGNAL])
        return found
    finally:
        llm.share_token_scores = True


def _same(out, alone: tuple[bool, float], name: str) -> None:
    blocked, signal = alone
    assert out.error is None, (name, out.error)
    assert out.blocked == blocked, (name, out.blocked, blocked)
    assert abs(out.signals[SIGNAL] - signal) <= TOLERANCE, (name, out.signals[SIGNAL], signal)


def test_bursts_with_shared_prefixes_decide_as_each_request_sent_alone(engine, documents):
    assert engine.share_token_scores, "the engine must share token-probe scores through the prefix cache"
    short = [f"{d} {s}" for d in documents for s in SUFFIXES]
    long = [_near_block_end(engine, d) for d in documents]
    alone = _alone(engine, short + long)
    rng = random.Random(31)
    # 500 requests, identical prompts in every burst; five in a hundred, one
    # after the other, end near a block's end and generate 12 tokens: run
    # together, they need more blocks than there are. Then the same 500
    # again, in another order and other burst sizes.
    rows = [_row(n, rng.choice(long), 12) if n % 100 < 5 else _row(n, rng.choice(short)) for n in range(500)]
    before = _stats(engine)
    sent = 0
    for sizes, order in (((100, 150, 250), rows), ((40, 210, 250), rng.sample(rows, len(rows)))):
        start = 0
        for size in sizes:
            burst = order[start:start + size]
            start += size
            for row, out in zip(burst, engine.run(burst, _params())):
                _same(out, alone[row["data"]], row["id"])
                sent += 1
    after = _stats(engine)
    assert sent == 1000
    assert after["token_scores_missing"] == 0 and after["token_score_writes_failed"] == 0
    assert after["token_scores_from_cache"] - before["token_scores_from_cache"] >= 500  # the prefixes were shared
    assert after["preemptions"] > before["preemptions"]  # and requests were preempted


def test_a_prompt_recomputed_after_its_decision_serves_later_requests_exactly(engine):
    # Requests of five and four blocks, then a short new one of two: the 11
    # usable blocks are taken. The first two need one more block a few tokens
    # on, so vLLM preempts the short one, decided and generating, and gives
    # both its blocks away. Resumed, it recomputes its prompt into a fresh
    # block that vLLM caches; a later request with that prompt is served from it.
    fillers = [_fill_to(engine, " ".join(BENIGN[(k + i) % len(BENIGN)] for i in range(60)), blocks * BLOCK - 2)
               for k, blocks in ((1, 5), (3, 4))]
    text = f"{_document(engine, 1, 2)} Thanks."  # computed nowhere else
    alone = _alone(engine, [text])[text]
    before = _stats(engine)
    outs = engine.run([_row(1, fillers[0], 8), _row(2, fillers[1], 8), _row(3, text, 8)], _params())
    assert all(o.error is None for o in outs), [o.error for o in outs]
    assert _stats(engine)["preemptions"] > before["preemptions"]
    (out,) = engine.run([_row(4, text)], _params())
    _same(out, alone, "after the preemption")
    assert out.prefill_tokens < len(out.output.prompt_token_ids)  # served from the recomputed block, scored


def _fill_to(llm, text: str, length: int) -> str:
    """``text`` cut to a prompt of about ``length`` tokens (at most)."""
    words = text.split()
    while len(prepared(llm, _row(0, " ".join(words)))[0]) > length:
        words.pop()
    return " ".join(words)


def test_reinstalling_the_same_policies_keeps_the_scores_of_cached_prompts(engine, documents):
    texts = [f"{d} Thanks." for d in documents]
    first = engine.run([_row(1, t) for t in texts], _params())
    engine.reload([POLICY])  # the same bundle, installed again (a SIGHUP, a watched folder touched)
    engine.llm.collective_rpc("innerguard_configure", kwargs={"retire_grace_s": 0.0})  # the old copy retires now
    again = engine.run([_row(2, t) for t in texts], _params())
    for a, b in zip(first, again):
        assert b.prefill_tokens < len(b.output.prompt_token_ids)  # served from the prefix cache
        _same(b, (a.blocked, a.signals[SIGNAL]), "after the reinstall")

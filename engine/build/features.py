"""What builds learn from, read inside vLLM through innerguard's capture
path (``innerguard.engine.capture``): never through Hugging Face.

- ``last_token_residuals``: the residual stream after chosen layers at the
  last prompt token (what the ``probe`` analyzer reads).
- ``answer_token_residuals``: the residual stream at every token of a given
  answer (what ``token_probe`` with ``span: generated`` reads), and
  ``answer_residuals``: its average over the answer (CAA). The row is the
  conversation with the answer as its last (assistant) message, captured
  with ``mode="all_tokens"``; attention is causal, so the answer's rows are
  those of prompt + answer, as if the model had written it.
- ``head_ratios``: every head's Attention Tracker ratio at the last prompt
  token, from captured post-RoPE Q/K, by the analyzer's own code
  (``innerguard.hooks.analyzers.head_focus``).
- ``answer_head_shares``: every head's share of span attention toward one
  span at every token of a given answer (what an ``attention_tracker`` with
  ``span: generated`` reads), by the analyzer's own code.
- ``data_token_residuals``: the residual stream after chosen layers at every
  token of a row's untrusted data message (what the ``token_probe``
  analyzer reads), one row at a time.

Rows go to the engine in fixed-size chunks (memory stays bounded); the
chunking is part of the build, so two builds batch alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from tqdm import tqdm

from innerguard.hooks.analyzers import head_focus
from innerguard.hooks.analyzers.attention_tracker import generated_head_shares, span_keys
from innerguard.engine.capture import CaptureSpec, capture
from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import ModelGeometry

TRUSTED_ROLES = ("system", "developer")  # the instruction; every other role but assistant is data
NEUTRAL_ROLES = ("assistant",)


class FeatureError(InnerguardError):
    pass


def _chunks(rows: Sequence[Any], size: int):
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def _captured(target, rows, spec: CaptureSpec, desc: str, chunk: int, progress: bool):
    bar = tqdm(total=len(rows), desc=desc, unit="prompt", disable=not progress)
    try:
        for part in _chunks(list(rows), chunk):
            results = capture(target, part, spec)
            for row, result in zip(part, results):
                if result.error:
                    raise FeatureError(f"row {row.get('id')!r} could not be captured: {result.error}")
            bar.update(len(part))
            yield from zip(part, results)
    finally:
        bar.close()


def last_token_residuals(target, rows: Sequence[dict], layers: Sequence[int], *, progress: bool = False,
                         chunk: int = 64, desc: str = "residuals") -> torch.Tensor:
    """float32 ``[rows, len(layers), hidden]``."""
    spec = CaptureSpec(layers=tuple(layers), mode="last_token")
    out = []
    for _, result in _captured(target, rows, spec, desc, chunk, progress):
        index = [result.layers.index(layer) for layer in layers]
        out.append(result.hidden[index, -1].float())
    return torch.stack(out)


@dataclass
class AnswerStates:
    mean: torch.Tensor  # [rows, layers, hidden]: the residual averaged over the answer's tokens
    norm: torch.Tensor  # [rows, layers]: the mean per-token residual norm over them
    tokens: torch.Tensor  # [rows]: how many tokens the answer has


def answer_token_residuals(target, conversations: Sequence[list[dict]], answers: Sequence[str], layers: Sequence[int], *,
                           progress: bool = False, chunk: int = 16, desc: str = "answers"):
    """Yield float32 ``[len(layers), answer tokens, hidden]`` per answer, in
    order: the residual stream after ``layers`` at each token of the answer,
    with the answer as the conversation's last (assistant) message (what a
    ``token_probe`` with ``span: generated`` reads, teacher forced)."""
    rows = [{"id": str(i), "messages": [*conversation, {"role": "assistant", "content": answer}]}
            for i, (conversation, answer) in enumerate(zip(conversations, answers))]
    spec = CaptureSpec(layers=tuple(layers), mode="all_tokens")
    for row, result in _captured(target, rows, spec, desc, chunk, progress):
        if not result.messages or result.messages[-1][0] != "assistant":
            raise FeatureError(f"row {row['id']}: the capture carries no answer span (is it a chat rendering?)")
        _, start, end = result.messages[-1]
        if end <= start:
            raise FeatureError(f"row {row['id']}: the answer has no tokens")
        index = [result.layers.index(layer) for layer in layers]
        kept = (result.positions >= start) & (result.positions < end)
        if int(kept.sum()) != end - start:
            raise FeatureError(f"row {row['id']}: the capture lacks answer tokens (capture mode all_tokens?)")
        yield result.hidden[index][:, kept].float()


def answer_residuals(target, conversations: Sequence[list[dict]], answers: Sequence[str], layers: Sequence[int], *,
                     progress: bool = False, chunk: int = 16, desc: str = "answers") -> AnswerStates:
    """The residual stream after ``layers`` over each answer's tokens, with
    the answer as the conversation's last (assistant) message."""
    means, norms, counts = [], [], []
    for states in answer_token_residuals(target, conversations, answers, layers, progress=progress, chunk=chunk, desc=desc):
        means.append(states.mean(1))
        norms.append(states.norm(dim=-1).mean(1))
        counts.append(states.shape[1])
    return AnswerStates(torch.stack(means), torch.stack(norms), torch.tensor(counts))


def head_ratios(target, rows: Sequence[dict], geometry: ModelGeometry, *, progress: bool = False,
                chunk: int = 32, desc: str = "heads") -> torch.Tensor:
    """float32 ``[rows, layers, heads]``: a_inst / (a_inst + a_data) at the
    last prompt token, instruction = system/developer messages, data = every
    other message but the assistant's."""
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    spec = CaptureSpec(qk=tuple((layer, tuple(range(h))) for layer in range(geometry.num_layers)), mode="last_token")
    out = []
    for row, result in _captured(target, rows, spec, desc, chunk, progress):
        instruction = [(s, e) for role, s, e in result.messages if role in TRUSTED_ROLES and e > s]
        data = [(s, e) for role, s, e in result.messages if role not in TRUSTED_ROLES + NEUTRAL_ROLES and e > s]
        if not instruction or not data:
            raise FeatureError(f"row {row['id']!r}: needs a system (instruction) message and a user (data) message")
        ratios = torch.empty(geometry.num_layers, h)
        for layer in range(geometry.num_layers):
            if result.heads.get(layer) != tuple(range(h)):
                raise FeatureError(f"layer {layer}: the capture holds heads {result.heads.get(layer)}, not all {h}")
            q = result.query(layer).float().reshape(h * d)
            k = result.prompt_keys(layer).float().reshape(result.num_prompt_tokens, h_kv * d)
            ratios[layer] = head_focus({layer: q}, {layer: k}, [(layer, j) for j in range(h)], instruction, data,
                                       geometry, result.attention_scale[layer])
        out.append(ratios)
    return torch.stack(out)


def answer_head_shares(target, rows: Sequence[dict], answers: Sequence[str], geometry: ModelGeometry, toward: str, *,
                       progress: bool = False, chunk: int = 16, desc: str = "answers") -> list[torch.Tensor]:
    """Per row, float32 ``[answer tokens, layers, heads]``: at each token of
    the answer (the conversation's last, assistant, message), each head's
    share of its attention to the instruction (system/developer messages)
    and the data (every other message but the assistant's) that goes toward
    ``toward`` ("trusted": the instruction; "untrusted": the data)."""
    h, h_kv, d = geometry.num_heads, geometry.num_kv_heads, geometry.head_dim
    spec = CaptureSpec(qk=tuple((layer, tuple(range(h))) for layer in range(geometry.num_layers)), mode="all_tokens")
    with_answers = [{"id": row["id"], "messages": [*row["messages"], {"role": "assistant", "content": answer}]}
                    for row, answer in zip(rows, answers)]
    out = []
    for row, result in _captured(target, with_answers, spec, desc, chunk, progress):
        if not result.messages or result.messages[-1][0] != "assistant" or result.messages[-1][2] <= result.messages[-1][1]:
            raise FeatureError(f"row {row['id']!r}: the capture carries no answer tokens (is it a chat rendering?)")
        _, start, end = result.messages[-1]
        spans = {"trusted": [(s, e) for role, s, e in result.messages[:-1] if role in TRUSTED_ROLES and e > s],
                 "untrusted": [(s, e) for role, s, e in result.messages[:-1] if role not in TRUSTED_ROLES + NEUTRAL_ROLES and e > s]}
        other = "untrusted" if toward == "trusted" else "trusted"
        kept = (result.positions >= start) & (result.positions < end)
        if int(kept.sum()) != end - start:
            raise FeatureError(f"row {row['id']!r}: the capture lacks answer tokens (capture mode all_tokens?)")
        shares = torch.empty(end - start, geometry.num_layers, h)
        for layer in range(geometry.num_layers):
            if result.heads.get(layer) != tuple(range(h)):
                raise FeatureError(f"layer {layer}: the capture holds heads {result.heads.get(layer)}, not all {h}")
            k = result.prompt_keys(layer).float().reshape(result.num_prompt_tokens, h_kv * d)
            keys = span_keys(k, range(h), spans[toward], spans[other], geometry)
            q = result.q[layer][kept].float().reshape(end - start, h * d)
            shares[:, layer] = generated_head_shares(q, keys, geometry, result.attention_scale[layer])
        out.append(shares)
    return out


def data_token_residuals(target, rows: Sequence[dict], layers: Sequence[int], *, progress: bool = False,
                         chunk: int = 16, desc: str = "data tokens"):
    """Yield ``(row, start, states)`` per row, in order: ``start`` is the
    prompt position of the data message's first token, ``states`` float32
    ``[data tokens, len(layers), hidden]``. Only the data rows are kept, and
    only one chunk is held at a time (all-token captures are large)."""
    spec = CaptureSpec(layers=tuple(layers), mode="all_tokens")
    for row, result in _captured(target, rows, spec, desc, chunk, progress):
        data = [(s, e) for role, s, e in result.messages if role not in TRUSTED_ROLES + NEUTRAL_ROLES]
        if len(data) != 1 or data[0][1] <= data[0][0]:
            raise FeatureError(f"row {row['id']!r}: needs exactly one non-empty data (user) message; found {len(data)}")
        start, end = data[0]
        kept = (result.positions >= start) & (result.positions < end)
        if int(kept.sum()) != end - start:
            raise FeatureError(f"row {row['id']!r}: the capture lacks data tokens (capture mode all_tokens?)")
        index = [result.layers.index(layer) for layer in layers]
        yield row, start, result.hidden[index][:, kept].float().transpose(0, 1).contiguous()

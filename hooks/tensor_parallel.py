"""Tensor parallel: each rank holds a contiguous block of the attention
heads, and every rank must reach the same decisions.

Under vLLM's tensor parallelism, the attention points of rank r see Q of
query heads ``[r*H/tp, (r+1)*H/tp)`` and K of their key/value heads only,
while the residual stream (after each layer's all-reduce) is the same on
every rank. So an attention tracker scores its local heads on each rank and
the ranks add up their shares; every other signal is read on rank 0 and
sent to the others. The ranks must agree exactly: a block forces the row to
end-of-sequence and a steer changes the stream every rank computes, so a
rank that decided otherwise would corrupt the shared forward.

The agreement is one small collective over the tensor-parallel group's CPU
(gloo) group per decision step: first the shape of what each rank is about
to send, then the values. A rank whose step differs fails the step's
decisions closed on every rank, instead of deadlocking in a mismatched
collective.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import torch

from innerguard.hooks.analyzers.attention import HeadGeometry


@dataclass(frozen=True)
class Shard:
    """What one rank holds of the attention heads."""

    rank: int = 0
    size: int = 1

    @property
    def whole(self) -> bool:
        return self.size == 1

    def geometry(self, geometry) -> HeadGeometry:
        """The shapes the attention points of this rank see."""
        if geometry.num_heads % self.size:
            raise ValueError(f"{geometry.num_heads} attention heads do not split over {self.size} ranks")
        # vLLM replicates key/value heads when there are fewer than ranks.
        return HeadGeometry(geometry.num_heads // self.size, max(1, geometry.num_kv_heads // self.size), geometry.head_dim)

    def local_heads(self, heads: Sequence[tuple[int, int]], geometry) -> tuple[tuple[int, int], ...]:
        """The (layer, head) pairs of ``heads`` this rank holds, with head
        indices of its own Q."""
        per_rank = geometry.num_heads // self.size
        first = self.rank * per_rank
        return tuple((layer, head - first) for layer, head in heads if first <= head < first + per_rank)


def current_shard() -> Shard:
    """This worker's shard; a single rank when no tensor-parallel group exists."""
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return Shard()
    return Shard(parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_tensor_model_parallel_world_size())


class RanksDisagree(RuntimeError):
    pass


def combine(labels: Sequence[str], values: Sequence[float], group=None) -> list[float]:
    """The element-wise sum over the ranks of ``values``, one per label.

    Raises RanksDisagree, on every rank alike, when the ranks' labels differ.
    ``group``: a torch.distributed group (default: vLLM's tensor-parallel CPU group).
    """
    group = group if group is not None else _cpu_group()
    digest = zlib.crc32("\n".join(labels).encode()) & 0xFFFFF  # exact in float64 even squared
    shape = torch.tensor([len(labels), -len(labels), digest, -digest], dtype=torch.float64)
    torch.distributed.all_reduce(shape, op=torch.distributed.ReduceOp.MAX, group=group)
    if shape[0] != -shape[1] or shape[2] != -shape[3]:
        raise RanksDisagree("the tensor-parallel ranks disagree on this step's decisions; each is failed closed")
    if not labels:
        return []
    total = torch.tensor(list(values), dtype=torch.float64)
    torch.distributed.all_reduce(total, group=group)
    return total.tolist()


def _cpu_group():
    from vllm.distributed import get_tp_group

    return get_tp_group().cpu_group

"""topk of a few (k >= TOURNAMENT_MIN_K) among many by a tournament of blocks: a handful of kernels whatever k is.

topk picked its k elements one round at a time, a pass over the row and a kernel each: 50 of a 32000-long row
(sampling's top-k) was 51 kernels and ~12 ms of Python building them, where torch takes ~60 us. Here the row's unique
keys (`Tensor._sort_order_key`: larger for what comes first, the position in the low bits) are cut into blocks of B
(a power of two, at least 4k) and each level

1. counts, for each key, how many keys of its block are larger (its rank in the block: B compares a key), and
2. keeps each block's k largest, in order: the key ranked r put at r for r < k (a one-hot sum over the block, which a
   CPU-style device runs as its writes),

so n keys become ceil(n / B) * k <= n / 4 + k, and the last level is one block of what is left. Each element among
the row's k first is among its block's k first, so it survives every level. A long row is first cut into chunks of
c ~ sqrt(n / k): the tournament runs over the chunks' n / c maxima, then over the k c keys of the k chunks whose
maxima won (`top_keys`). A row of 32000, k = 50: chunks of 32, 1000 maxima -> 200 -> 50, then 1600 keys -> 350 -> 50,
~1 M compares in 15 kernels (k rounds: 51 kernels). Every step is replayed (built once per shape)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.replay import replay_call

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# topk goes through the tournament from this k (fewer: a round of selection each, a pass over the row, fewer kernels
# than the tournament's dozen: 256 rows of 1000, k = 5, 1.2 ms by rounds, 2.3 ms by the tournament, 2 busy cores)
TOURNAMENT_MIN_K = 9
# and up to this (blocks of up to 4 * 128 = 512: n * 512 compares at the first
# level); more: a sort of the row
TOURNAMENT_MAX_K = 128


def tournament_block(k: int) -> int:
    """The blocks' length for the k largest: the power of two at least 4k (each level keeps at most a quarter), and
    at least 16."""
    return max(16, 1 << (4 * k - 1).bit_length())


def chunk_size(n: int, k: int) -> int:
    """The chunks' length for `top_keys` to look only in the k chunks whose largest keys are largest: a power of two
    near sqrt(n / k) (the tournaments over the n / c maxima and over the k c keys of those chunks cost about the
    same), 1 (no chunks) where there would be fewer than 4k chunks or chunks of one."""
    c = 1 << max(0, round(math.log2(math.sqrt(n / k))))
    return c if c > 1 and n // c >= 4 * k else 1


def top_keys(key: Tensor, k: int, n: int) -> Tensor:
    """The k largest of `key` (..., n), `Tensor._sort_order_key`s of rows of n (unique, >= 0, the low 31 bits
    n - 1 - the position), in descending order: (..., k).

    Each of the k largest is in one of the k chunks (of c consecutive keys) whose largest keys are largest: a key in
    another chunk has that chunk's largest key above or equal to it, and those k chunks' largest keys above that. So
    a long row's tournament is over the chunks' n / c maxima and then over those k chunks' k c keys."""
    chunk = chunk_size(n, k)
    if chunk > 1:
        chunks = replay_call(_padded_blocks, (key,), block=chunk, level=0)[0].contiguous()
        # (a chunk's place follows from its largest key's position in the row: no chunks of chunks)
        best = _tournament(chunks.max(axis=-1), k, stored=False)
        picked = replay_call(_chunks_of, (chunks, best), n=n)[0].contiguous()
        return _tournament(picked.reshape(*picked.shape[:-2], k * chunk), k, stored=True)
    return _tournament(key, k, stored=False)


def _tournament(key: Tensor, k: int, stored: bool) -> Tensor:
    # (stored: whether `key` is a stored buffer's, which the ranks' kernel may read B times; levels count from 1: the
    # chunks' padding is level 0's)
    block = tournament_block(k)
    level = 1
    while True:
        m = key.shape[-1]
        b = min(block, m)
        if level == 1 and not stored:
            # (stored: the ranks' kernel reads each key B times; later levels' keys are stored already, and their
            # padding is a select in the kernels that read them)
            key = key.contiguous()
        if m % b:
            blocks = replay_call(_padded_blocks, (key,), block=b, level=level)[0]
        else:
            blocks = key.reshape(*key.shape[:-1], m // b, b)
        rank = replay_call(_ranks_in_blocks, (blocks,))[0].contiguous()
        tops = replay_call(_block_tops, (blocks, rank), k=k)[0].contiguous()
        key = tops.reshape(*tops.shape[:-2], tops.shape[-2] * k)
        if tops.shape[-2] == 1:
            return key
        level += 1


def _chunks_of(chunks: Tensor, best: Tensor, *, n: int) -> tuple[Tensor]:
    # (..., chunks, c) and the k largest chunk maxima (..., k) -> the chunks holding them (..., k, c)
    count, c = chunks.shape[-2:]
    # (a maximum is a real key, >= 0: every chunk holds one)
    which = (((n - 1) - (best & ((1 << 31) - 1))) // c).cast(dtypes.int32)
    hit = which.unsqueeze(-1) == Tensor.arange(count, device=best.device, dtype=dtypes.int32)
    zero = Tensor(0, device=chunks.device, dtype=chunks.dtype)
    picked = hit.unsqueeze(-1).where(chunks.unsqueeze(-3), zero).sum(-2, dtype=chunks.dtype)
    return (picked,)


def _padded_blocks(key: Tensor, *, block: int, level: int) -> tuple[Tensor]:
    # (..., m) -> (..., ceil(m / block), block), padded with keys below every real one (which are >= 0) and unique,
    # also against the padding of earlier levels (or of the chunks, level 0) that survived: -1 - j - level * 2**32
    lead, m = key.shape[:-1], key.shape[-1]
    size = -(-m // block) * block
    past = Tensor.arange(size, device=key.device, dtype=dtypes.int64) - m
    extra = (past >= 0).where(past, 0)
    key = key.pad(((0, 0),) * len(lead) + ((0, size - m),), value=-1 - (level << 32)) - extra
    return (key.reshape(*lead, size // block, block),)


def _ranks_in_blocks(blocks: Tensor) -> tuple[Tensor]:
    # (..., blocks, B): how many keys of its block are larger than each (the keys are unique: a permutation of 0..B-1)
    larger = blocks.unsqueeze(-2) > blocks.unsqueeze(-1)
    return (larger.cast(dtypes.int32).sum(-1),)


def _block_tops(blocks: Tensor, rank: Tensor, *, k: int) -> tuple[Tensor]:
    # (..., blocks, k): position r of each block's result holds its key ranked r
    at = rank.unsqueeze(-2) == Tensor.arange(k, device=rank.device, dtype=dtypes.int32).reshape(k, 1)
    zero = Tensor(0, device=blocks.device, dtype=blocks.dtype)
    return (at.where(blocks.unsqueeze(-2), zero).sum(-1, dtype=blocks.dtype),)

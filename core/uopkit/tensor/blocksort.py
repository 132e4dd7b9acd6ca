"""Sorting rows of a few hundred to a few thousand elements in a fixed handful of kernels, by ranks counted per block.

`sort` ranks short rows in one kernel of n^2 compares and long ones through a bitonic network, a kernel per two of
its log2(n) (log2(n) + 1) / 2 stages; between the two, each kernel's graph built in Python cost more than the whole
sort computes (argsort of 1000 floats: 31 kernels, ~3-8 ms warm where torch takes 13 us). Here the row is cut into
blocks of B and sorted in seven kernels whatever its length:

1. the keys in blocks, padded with elements that sort last (stored once: each is read by B compares);
2. each element's rank within its block and 3. the blocks in order (one kernel per column);
4. for each element and each block, how many of the block's elements come before it: a binary search unrolled as
   log2(B) + 1 dependent gathers, which the lowerer folds into loads at the computed positions; 5. their sum over the
   blocks: the element's rank in the row (the blocks sorted, ranks rise along each);
6. for each rank r < n and each block, the same search for r among the block's ranks: the position of the element
   ranked r where the block holds it, 0 elsewhere; 7. their sum over the blocks. (On a device that runs a scatter's
   writes one by one, the CPU, 6 and 7 are one kernel of n writes instead: each element's position at its rank.)

n * B compares and 2 n (n / B) (log2(B) + 1) loads: a few thousand elements are the range where that beats the
network. Every element is unique in the order (its position breaks ties), so ranks are a permutation and the sort is
stable. Only gathers and reduces: nothing CPU-specific."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.bitonic import _BITONIC_ORDERS
from uopkit.tensor.replay import replay_call
from uopkit.tensor.segments import writes_one_by_one

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def block_size(n: int) -> int:
    """The blocks' length for a row of n: about sqrt(90 n), the rank's n * B compares against the searches' n^2 / B
    loads, each ~10 compares' time (one thread, 1000 / 5000 floats: B = 256 / 512 fastest of 128, 256, 512)."""
    target = math.sqrt(90 * n)
    return min((128, 256, 512, 1024), key=lambda b: abs(math.log2(b / target)))


def sort_positions_by_blocks(columns: list[Tensor], n: int, order: str) -> Tensor:
    """The positions (..., n) that sort the last axis of `columns` (equal shapes ending in n) so that
    `_BITONIC_ORDERS[order](earlier, later)` holds for each pair; "keys descending": one column of unique keys >= 0
    (a position in their low 31 bits, reversed; a 64-bit dtype sorts by two such keys in turn: tensor/wordsort.py)."""
    block = block_size(n)
    # (every step replayed: built op by op, each graph cost more Python than its kernel's run. The keys stored: in the
    # rank's kernel each would be computed again for each of its B compares)
    columns = [c.contiguous() for c in replay_call(_in_blocks, tuple(columns), n=n, block=block, order=order)]
    rank = replay_call(_block_ranks, tuple(columns), order=order)[0].contiguous()
    blocks = [replay_call(_blocks_in_order, (c, rank))[0].contiguous() for c in columns]
    counts = replay_call(_counts_before, tuple(blocks), order=order)[0].contiguous()
    ranks = counts.sum(-1).contiguous()
    if writes_one_by_one(ranks.device):
        # each element written at its rank (the padding's ranks are n and up: no write)
        return replay_call(_written_at_ranks, (ranks, *blocks), n=n, order=order)[0]
    picked = replay_call(_positions_ranked, (ranks, *blocks), n=n, order=order)[0].contiguous()
    return picked.sum(-1)


def _in_blocks(*columns: Tensor, n: int, block: int, order: str) -> tuple[Tensor, ...]:
    # the columns (..., blocks, B), padded with elements that sort after every other, each unique (ranks must be a
    # permutation): keys -1, -2, ... below every key; the lowest value with positions past the row's
    lead = columns[0].shape[:-1]
    size = -(-n // block) * block
    if size != n:
        widths = ((0, 0),) * len(lead) + ((0, size - n),)
        past = Tensor.arange(size, device=columns[0].device, dtype=columns[-1].dtype) - n
        extra = (past >= 0).where(past, 0)
        if order == "keys descending":
            columns = (columns[0].pad(widths, value=-1) - extra,)
        else:
            value, position = columns
            columns = (value.pad(widths, value=dtypes.min(dtypes.int64)), position.pad(widths, value=n) + extra)
    return tuple(c.reshape(*lead, size // block, block) for c in columns)


def _gather(data: Tensor, index: Tensor) -> Tensor:
    # data[..., index] along the last axis, data broadcast against index's shape + (L,): a one-hot sum the lowerer
    # folds into a load at the index (0 where the index is out of range)
    width = data.shape[-1]
    hit = index.unsqueeze(-1) == Tensor.arange(width, device=data.device, dtype=index.dtype)
    return hit.where(data, Tensor(0, device=data.device, dtype=data.dtype)).sum(-1, dtype=data.dtype)


def _block_ranks(*cols: Tensor, order: str) -> tuple[Tensor]:
    # (..., blocks, B): how many elements of its block come before each
    before = _BITONIC_ORDERS[order]([c.unsqueeze(-2) for c in cols], [c.unsqueeze(-1) for c in cols])
    return (before.cast(dtypes.int32).sum(-1),)


def _blocks_in_order(col: Tensor, rank: Tensor) -> tuple[Tensor]:
    # position r of each block holds its element of rank r
    block = col.shape[-1]
    at = rank.unsqueeze(-2) == Tensor.arange(block, device=col.device, dtype=dtypes.int32).reshape(block, 1)
    return (at.where(col.unsqueeze(-2), Tensor(0, device=col.device, dtype=col.dtype)).sum(-1, dtype=col.dtype),)


def _search(blocks: list[Tensor], shape: tuple[int, ...], comes_before: Callable[[list[Tensor]], Tensor]) -> Tensor:
    # (shape: (..., blocks)) in each sorted block, how many elements come before the searched one: `comes_before(the
    # block's elements at the positions tried)` is true for a prefix of each block. Steps of B/2 ... 1, then the last
    # element tried once more (a whole block may come before)
    block = blocks[0].shape[-1]
    pos = Tensor.zeros(*shape, device=blocks[0].device, dtype=dtypes.int32)
    step = block // 2
    while step >= 1:
        ahead = comes_before([_gather(b, pos + (step - 1)) for b in blocks])
        pos = pos + ahead.where(step, 0)
        step //= 2
    return pos + comes_before([_gather(b, pos) for b in blocks]).cast(dtypes.int32)


def _counts_before(*blocks: Tensor, order: str) -> tuple[Tensor]:
    # (..., blocks, B, blocks): for each element (of the sorted blocks) and each block, how many of the block's
    # elements come before it
    mine = [b.unsqueeze(-1) for b in blocks]
    theirs = [b.unsqueeze(-3).unsqueeze(-3) for b in blocks]
    shape = (*blocks[0].shape, blocks[0].shape[-2])
    return (_search(theirs, shape, lambda tried: _BITONIC_ORDERS[order](tried, mine)),)


def _written_at_ranks(ranks: Tensor, *blocks: Tensor, n: int, order: str) -> tuple[Tensor]:
    # (..., n): at r the position of the element ranked r, a one-hot sum over the elements that a device running a
    # scatter's writes one by one (`writes_one_by_one`) runs as n writes, where the searches of `_positions_ranked`
    # are n (n / B) (log2(B) + 1) loads
    lead = ranks.shape[:-2]
    if order == "keys descending":
        position = (n - 1) - (blocks[0] & ((1 << 31) - 1))
    else:
        position = blocks[1]
    position = position.cast(dtypes.positions(n)).reshape(*lead, 1, -1)
    at = ranks.reshape(*lead, 1, -1) == Tensor.arange(n, device=ranks.device, dtype=dtypes.int32).reshape(n, 1)
    zero = Tensor(0, device=ranks.device, dtype=position.dtype)
    return (at.where(position, zero).sum(-1, dtype=position.dtype),)


def _positions_ranked(ranks: Tensor, *blocks: Tensor, n: int, order: str) -> tuple[Tensor]:
    # (..., n, blocks): the position of the element ranked r in the row where block t holds it, else 0. Ranks rise
    # along each sorted block: the element is the first whose rank is not below r, if its rank is r
    wanted = Tensor.arange(n, device=ranks.device, dtype=dtypes.int32).reshape(n, 1)
    per_block = ranks.unsqueeze(-3)
    shape = (*ranks.shape[:-2], n, ranks.shape[-2])
    at = _search([per_block], shape, lambda tried: tried[0] < wanted)
    found = _gather(per_block, at) == wanted
    if order == "keys descending":
        position = (n - 1) - (_gather(blocks[0].unsqueeze(-3), at) & ((1 << 31) - 1))
    else:
        position = _gather(blocks[1].unsqueeze(-3), at)
    position = position.cast(dtypes.positions(n))
    return (found.where(position, Tensor(0, device=ranks.device, dtype=position.dtype)),)

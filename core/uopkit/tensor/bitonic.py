"""The bitonic sorting network `sort` runs on rows too long to rank each element against all the others, or per block
(`uopkit.tensor.blocksort`, up to SORT_BY_BLOCKS), padded to a power of two N: log2(N) * (log2(N) + 1) / 2
compare-exchanges, run `EXCHANGES_PER_KERNEL` consecutive ones to a kernel. Each kernel is built by replaying its graph
(`replay_call`): the network's kernels at one distance are the same graph over the last one's outputs, so a sort records
each kind of kernel once and rebuilds the others."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.replay import replay_call
from uopkit.tensor.support import _with

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# consecutive exchanges (at distances d, d/2, ...) one kernel runs: the elements fall in groups of 2**k that exchange
# only among themselves, each group read once and sorted in registers. Every kernel reads and writes a buffer the size
# of the rows, a new one (a schedule's buffers all live until it ends): 2**20 floats, 210 kernels one exchange each,
# 110 two each: 144 -> 93 ms of CPU warm, 4.8 -> 1.5 s the first call (one thread). Three each (77 kernels) took more
# CPU (2**16: 11 ms two each, 17 ms three each; not looked into), and with four the scheduler stored the lanes
EXCHANGES_PER_KERNEL = 2


def bitonic_descending(columns: list[Tensor], n: int, pads: list[int], order: str) -> list[Tensor]:
    """Sort the last axis of `columns` (equal shapes, ending in n) so that `before(earlier, later)` holds for every
    pair `before` orders, `before` the function of `_BITONIC_ORDERS` named `order`. Padded to a power of two N (each
    column with its value in `pads`, which must sort after every real element), then log2(N) bitonic merges of
    blocks twice as long as the last ones, each a mirrored compare-exchange followed by half-cleaners, up to
    EXCHANGES_PER_KERNEL of them a kernel (`_bitonic_exchange`)."""
    lead = columns[0].shape[:-1]
    size = 1 << max(0, (n - 1).bit_length())
    if size != n:
        widths = ((0, 0),) * len(lead) + ((0, size - n),)
        columns = [c.pad(widths, value=v) for c, v in zip(columns, pads, strict=True)]
    merge = 2
    while merge <= size:
        # the merge's exchanges: distance merge/2 (mirrored), then merge/4 ... 1, cut into runs of a kernel each
        d = merge // 2
        while d >= 1:
            count = min(EXCHANGES_PER_KERNEL, d.bit_length())
            # (replayed: the network's kernels at one distance are the same graph over the last one's outputs)
            exchanged = replay_call(
                _bitonic_exchange, tuple(columns), d=d, count=count, mirror=d == merge // 2, order=order
            )
            columns = [c.contiguous().reshape(*lead, size) for c in exchanged]
            d >>= count
        merge *= 2
    if size != n:
        columns = [c.shrink(_with((None,) * c.ndim, c.ndim - 1, (0, n))) for c in columns]
    return columns


def _keys_descending(earlier: list[Tensor], later: list[Tensor]) -> Tensor:
    return earlier[0] > later[0]


# the orders `bitonic_descending` sorts by, named: a replayed exchange is keyed by its scalar arguments
_BITONIC_ORDERS = {"keys descending": _keys_descending}


def _bitonic_exchange(*cols: Tensor, d: int, count: int, mirror: bool, order: str) -> tuple[Tensor, ...]:
    """`count` consecutive compare-exchanges of `bitonic_descending` at distances d, d/2, ... over columns (..., N),
    by the order named `order`, the first mirrored if `mirror`, before each column is stored. Seen as (..., N / 2d,
    2, ..., 2, r) (count lane axes, r = 2d / 2**count), the elements of one block that share their position along r
    form a group that exchanges only among itself: each lane of the group is taken out of the view (no index is
    divided), the exchanges run on the lanes, and the lanes are put back by selects."""
    lead, size = cols[0].shape[:-1], cols[0].shape[-1]
    r = 2 * d >> count
    grid = (*lead, size // (2 * d), *(2,) * count, r)
    lane_axis = len(lead) + 1
    views = [c.reshape(grid) for c in cols]
    # lanes[i]: the columns at the group's lane i (bit count-1-k of i: lane axis k), each (..., N / 2d, 1, ..., 1, r)
    lanes = {}
    for i, bits in enumerate(itertools.product((0, 1), repeat=count)):
        window = (None,) * lane_axis + tuple((b, b + 1) for b in bits) + (None,)
        lanes[i] = [v.shrink(window) for v in views]
    for step in range(count):
        bit = 1 << (count - 1 - step)
        for i in [i for i in lanes if not i & bit]:
            # the first exchange of a merge is mirrored: element j of the block's first half meets 2d - 1 - j, the
            # lane with every bit flipped, at r - 1 - its position along r
            j = i ^ (2 * bit - 1) if mirror and step == 0 else i | bit
            lo, hi = lanes[i], lanes[j]
            if mirror and step == 0:
                hi = [h.flip(-1) for h in hi]
            swap = _BITONIC_ORDERS[order](hi, lo)
            first = [swap.where(b, a) for a, b in zip(lo, hi, strict=True)]
            second = [swap.where(a, b) for a, b in zip(lo, hi, strict=True)]
            if mirror and step == 0:
                second = [c.flip(-1) for c in second]
            lanes[i], lanes[j] = first, second
    # the lanes back in place: a select per lane axis, pairing lanes that differ in its bit
    for axis in reversed(range(count)):
        bit = 1 << (count - 1 - axis)
        shape = (1,) * (lane_axis + axis) + (2,) + (1,) * (count - axis)
        upper = Tensor.arange(2, device=cols[0].device, dtype=dtypes.int32).reshape(shape) == 1
        lanes = {
            i: [upper.where(b, a) for a, b in zip(lanes[i], lanes[i | bit], strict=True)] for i in lanes if not i & bit
        }
    return tuple(lanes[0])

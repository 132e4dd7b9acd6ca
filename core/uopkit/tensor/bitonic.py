"""The bitonic sorting network `sort` runs on rows too long to rank each element against all the others: a kernel
per exchange, log2(N) * (log2(N) + 1) / 2 of them for rows padded to N. Each exchange is built by replaying its graph
(`replay_call`): the network's exchanges at one distance are the same graph over the last one's outputs, so the first
sort of 128K elements records 33 of its 153 exchanges and rebuilds the others, and later sorts of that shape rebuild
all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.replay import replay_call
from uopkit.tensor.support import _with

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def bitonic_descending(columns: list[Tensor], n: int, pads: list[int], order: str) -> list[Tensor]:
    """Sort the last axis of `columns` (equal shapes, ending in n) so that `before(earlier, later)` holds for every
    pair `before` orders, `before` the function of `_BITONIC_ORDERS` named `order`. Padded to a power of two N (each
    column with its value in `pads`, which must sort after every real element), then log2(N) bitonic merges of
    blocks twice as long as the last ones, each a mirrored compare-exchange followed by half-cleaners. An exchange at
    distance d is one kernel over a view (..., N / 2d, 2, d) of the last one's output: lane 0 takes each pair's
    first, lane 1 its second (no index is divided)."""
    lead = columns[0].shape[:-1]
    size = 1 << max(0, (n - 1).bit_length())
    if size != n:
        widths = ((0, 0),) * len(lead) + ((0, size - n),)
        columns = [c.pad(widths, value=v) for c, v in zip(columns, pads, strict=True)]

    def exchange(cols: list[Tensor], d: int, mirror: bool) -> list[Tensor]:
        # (replayed: the network's exchanges at one distance are the same graph over the last one's outputs)
        exchanged = replay_call(_bitonic_exchange, tuple(cols), d=d, mirror=mirror, order=order)
        return [c.contiguous().reshape(*lead, size) for c in exchanged]

    merge = 2
    while merge <= size:
        columns = exchange(columns, merge // 2, True)
        d = merge // 4
        while d >= 1:
            columns = exchange(columns, d, False)
            d //= 2
        merge *= 2
    if size != n:
        columns = [c.shrink(_with((None,) * c.ndim, c.ndim - 1, (0, n))) for c in columns]
    return columns


def _keys_descending(earlier: list[Tensor], later: list[Tensor]) -> Tensor:
    return earlier[0] > later[0]


def _values_then_positions(earlier: list[Tensor], later: list[Tensor]) -> Tensor:
    return (earlier[0] > later[0]) | ((earlier[0] == later[0]) & (earlier[1] < later[1]))


# the orders `bitonic_descending` sorts by, named: a replayed exchange is keyed by its scalar arguments
_BITONIC_ORDERS = {"keys descending": _keys_descending, "values then positions": _values_then_positions}


def _bitonic_exchange(*cols: Tensor, d: int, mirror: bool, order: str) -> tuple[Tensor, ...]:
    """One compare-exchange of `bitonic_descending` at distance d over columns (..., N), by the order named `order`,
    before each column is stored."""
    lead, size = cols[0].shape[:-1], cols[0].shape[-1]
    lane0 = Tensor.arange(2, device=cols[0].device, dtype=dtypes.int32).reshape(2, 1) == 0
    halves = [c.reshape(*lead, size // (2 * d), 2, d) for c in cols]
    lo = [h.shrink(_with((None,) * h.ndim, h.ndim - 2, (0, 1))) for h in halves]
    hi = [h.shrink(_with((None,) * h.ndim, h.ndim - 2, (1, 2))) for h in halves]
    if mirror:
        # lo[i] meets hi[d - 1 - i]; the pair's second goes back to d - 1 - i in hi
        hi = [h.flip(-1) for h in hi]
    swap = _BITONIC_ORDERS[order](hi, lo)
    firsts = [swap.where(b, a) for a, b in zip(lo, hi, strict=True)]
    seconds = [swap.where(a, b) for a, b in zip(lo, hi, strict=True)]
    if mirror:
        seconds = [c.flip(-1) for c in seconds]
    return tuple(lane0.where(f, s) for f, s in zip(firsts, seconds, strict=True))

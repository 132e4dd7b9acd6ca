"""Sorting a 64-bit dtype's rows as two sorts of 32-bit words: a least-significant-digit radix sort of two digits.

A dtype up to 32 bits sorts by one unique int64 key an element (`Tensor._sort_order_key`: its order as a uint32 above
its position reversed in 31 bits), a single column through the network or the blocks. A 64-bit order and a position
don't fit one int64: they were sorted as a pair of columns, each exchange two kernels that each compared both (int64
sort of 10**5: 162 kernels of ~1.4 ms, ~500 ms, 2 busy cores). Here the order (`Tensor._order_as_int64`, larger for
what comes first) is cut into its low and high 32 bits and the row is sorted twice by keys of one word: first by the
low word, then, in that order, by the high word. Both sorts keep equal words in the order they get them, so the second
leaves elements of equal high word in the order of their low word, and elements of equal value in the row's order: the
stable sort by the whole order. Two single-column sorts and two gathers (~8 ms at 10**5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.replay import replay_call

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def positions_by_words(order: Tensor, sort_keys: Callable[[Tensor], Tensor]) -> Tensor:
    """The positions (..., n) that sort the last axis of `order` (int64, larger for what comes first; equals by
    position), given `sort_keys`: unique keys (..., n) >= 0 with the position reversed in their low 31 bits -> the
    positions that put them in descending order."""
    last = order.ndim - 1
    first = sort_keys(replay_call(_low_word_keys, (order,)))
    # (positions in range by construction: no bounds check, which would read them back)
    ordered = order._gather_checked(last, first)
    second = sort_keys(replay_call(_high_word_keys, (ordered,)))
    return first._gather_checked(last, second)


def _reversed_positions(order: Tensor) -> Tensor:
    n = order.shape[-1]
    return (n - 1) - Tensor.arange(n, device=order.device, dtype=dtypes.int64)


def _low_word_keys(order: Tensor) -> Tensor:
    # the low 32 bits, unsigned, above the position reversed: < 2**63
    return (order & 0xFFFFFFFF) * (1 << 31) + _reversed_positions(order)


def _high_word_keys(order: Tensor) -> Tensor:
    # the high 32 bits (signed: shifted up by 2**31 to a uint32) above the position reversed
    return ((order >> 32) + (1 << 31)) * (1 << 31) + _reversed_positions(order)

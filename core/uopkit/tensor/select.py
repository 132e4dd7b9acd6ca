"""The element of one rank along a long row without sorting the row: a radix select over unique keys.

`kthvalue`, `median` and `median(dim)` want one element of the sorted row; sorting a row of a million floats is a
bitonic network of ~110 kernels (~150 ms, two cores, and its graph built again each call), where the element alone
takes a few passes over the row. Each element gets a unique key, larger for what comes earlier in the stable ascending
order: its value's order above its position reversed (`Tensor._sort_order_key`, squeezed to 32 + log2(n) bits). The
key ranked r (r keys above it) is found a digit of `DIGIT_BITS` at a time, from the top: given the digits above, each
pass counts the keys at or above each of the 2**DIGIT_BITS - 1 candidates for the next digit (one kernel of n * 15
compares), and the digit is the largest candidate with more than r keys at or above it. A row of 10**6 float32: 13
passes, ~1.5 ms each (kthvalue ~180 -> ~40 ms). The key names the element's position, so the element is the one the
stable sort puts at r (a zero's sign, which NaN), whatever ties the row holds. Only compares and sums: nothing
device-specific."""

from __future__ import annotations

from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.tensor.replay import replay_call

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# rows longer than this select by digits (shorter: the sort, a handful of kernels there, `reduce.SORT_BY_BLOCKS`)
SELECT_MIN = 8192
# the bits of the key each pass finds: 2**DIGIT_BITS - 1 counts over the row a pass (kthvalue of 1e6 float32, 2 busy
# cores: 3, 4 and 5 bits about even, 33 / 38 / 32 ms with the graph built, within the noise; a pass of 4 ~1.5 ms)
DIGIT_BITS = 4


def position_of_rank(x: Tensor, r: int) -> Tensor:
    """The position (..., 1) along the last axis of x of the element that `x.sort(-1)` (stable, ascending, NaN last)
    puts at r."""
    n = x.shape[-1]
    key = x._sort_order_key(False) if n > SELECT_MIN else None
    if key is None:
        # (short rows, and 64-bit dtypes, whose order has no 32-bit key: the sort)
        position = x._sort_along(x.ndim - 1, False)[1]
        return position._slice_axis(x.ndim - 1, r, r + 1).contiguous()
    low = max(1, (n - 1).bit_length())
    # (the value's order in the top 32 bits, the reversed position below: stored, every pass reads it)
    key = replay_call(_squeezed, (key,), low=low)[0].contiguous()
    found = Tensor.zeros(*key.shape[:-1], 1, device=key.device, dtype=dtypes.int64).contiguous()
    shift = -(-(32 + low) // DIGIT_BITS) * DIGIT_BITS
    while shift > 0:
        shift -= DIGIT_BITS
        found = replay_call(_next_digit, (key, found), shift=shift, r=r)[0].contiguous()
    return ((n - 1) - (found & ((1 << low) - 1))).cast(dtypes.positions(n))


def _squeezed(key: Tensor, *, low: int) -> tuple[Tensor]:
    # `_sort_order_key`'s (order << 31) + reversed position, the position in the low `low` bits instead
    return (((key >> 31) << low) | (key & ((1 << low) - 1)),)


def _next_digit(key: Tensor, found: Tensor, *, shift: int, r: int) -> tuple[Tensor]:
    # found (..., 1): the key ranked r with its bits below `shift` + DIGIT_BITS cleared; the next digit is how many
    # candidates found + d << shift (d = 1 ... 2**DIGIT_BITS - 1) have more than r keys at or above them
    digits = Tensor.arange(1, 1 << DIGIT_BITS, device=key.device, dtype=dtypes.int64) << shift
    counts = (key.unsqueeze(-2) >= (found + digits).unsqueeze(-1)).cast(dtypes.int32).sum(-1)
    digit = (counts > r).cast(dtypes.int64).sum(-1, keepdim=True)
    return (found + (digit << shift),)

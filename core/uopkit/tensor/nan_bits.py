"""The bits of the NaN that PyTorch's CPU extremes return, which show in `signbit`, `bitcast` and torch's `view(dtype)`.

Its `amax`/`amin` (over any dims, all of them too) compute a NaN of their own: the positive quiet NaN C's `NAN`
spells. Its whole-tensor `max()`, `min()` and `aminmax()` fold vector lanes whose NaN has every bit set, a negative
one (float16 rounds it to 0xFE00, bfloat16 goes through float32 and back to 0x7FC0); of one element they return it.
A MAX reduction's NaN is otherwise the backend's (our CPU loops give NAN, or the element where the loop compares), and
`min`, a max of the negated values, negated back, flipped its sign."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from uopkit.dtype import DType, dtypes
from uopkit.gradient import set_gradient
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# each float dtype's NaN, as the signed int of its bits (and that int's dtype): torch's amax/amin's, then its max()'s
_AMAX_NAN: dict[DType, tuple[int, DType]] = {
    dtypes.float32: (0x7FC00000, dtypes.int32),
    dtypes.float64: (0x7FF8000000000000, dtypes.int64),
    dtypes.float16: (0x7E00, dtypes.int16),
    dtypes.bfloat16: (0x7FC0, dtypes.int16),
}
_MAX_ALL_NAN: dict[DType, tuple[int, DType]] = {
    dtypes.float32: (-1, dtypes.int32),
    dtypes.float64: (-1, dtypes.int64),
    dtypes.float16: (0xFE00 - 0x10000, dtypes.int16),
    dtypes.bfloat16: (0x7FC0, dtypes.int16),
}


def with_torch_nan(value: Tensor, all_of: Tensor | None = None) -> Tensor:
    """`value`, an extreme, with torch's NaN where it is NaN: amax's, or that of `max()` over every element of `all_of`
    (its one element's own). The gradient passes through unchanged (to the NaNs that made it, as before)."""
    one = all_of is not None and all_of.numel() == 1
    if one and value.dtype not in dtypes.halves:
        return value
    # (one half float: torch's goes through float32, which drops the payload; the sign only float16 keeps, not here)
    found = (_AMAX_NAN if all_of is None or one else _MAX_ALL_NAN).get(value.dtype)
    if found is None:
        return value
    # (the WHERE built directly: `where`'s checks and promotion cost as much again as a small max())
    nan = Tensor(_nan_uop(*found, value.dtype, value.device))._broadcast_to(value.shape)
    out = Tensor(UOp(Ops.WHERE, value.dtype, (value.isnan().uop, nan.uop, value.uop)))
    set_gradient(out.uop, (value.uop,), _passed_on)
    return out


@functools.cache
def _nan_uop(bits: int, int_dtype: DType, dtype: DType, device: str) -> UOp:
    # (a constant's bits, built once: a new one costs ~60 us of Python, as much as the rest of a small max())
    return Tensor(bits, device=device, dtype=int_dtype).bitcast(dtype).uop


def _passed_on(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    return (g,)

"""Inputs an op doesn't read that torch still gives a gradient of zeros: `addmm(i, a, b, beta=0)` leaves `i` unread
(its NaN don't show), `masked_scatter` with an all-False mask reads none of `source`, yet torch's backward gives both a
zeros `.grad`, not None. The input joins the graph in a select that always takes the value (folded in the kernel:
its buffer is passed but nothing of it is loaded), and that select's gradient is given: the value's passes on, the
input's is a constant of zeros (no kernel computes it)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from uopkit.gradient import set_gradient
from uopkit.tensor.support import _passed_and_zero

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def with_zero_gradient_to(value: Tensor, x: Tensor) -> Tensor:
    """`value`, tied to x (an input it doesn't read) so that backward gives x a gradient of zeros, as torch's; value
    itself when x doesn't require grad (the graph is then what it was)."""
    if not x.requires_grad:
        return value
    # (one element of x, any shape: an empty x's sum, the constant 0)
    flat = x.reshape(-1)
    one = flat.shrink(((0, 1),)) if flat.shape[0] else flat.sum()
    unread = one.reshape((1,) * value.ndim)._broadcast_to(value.shape).cast(value.dtype)
    node = Tensor(True, device=value.device).where(value, unread).uop
    set_gradient(node, (value.uop, x.uop), functools.partial(_passed_and_zero, x.shape, x.device))
    return Tensor(node)

"""torch.gradient (numpy.gradient's twin): the derivative of sampled values by central differences in the interior and
one-sided ones of order 1 or 2 at the edges, over uniform spacings or coordinates.

Its name is tinygrad's autograd method `Tensor.gradient(*targets)`, which keeps it: `x.gradient()` with no targets, or
with any of torch's keywords (`spacing=`, `dim=`, `edge_order=`), is torch's (see docs/semantics.md), and
`numerical_gradient(x, ...)` here is the same function under a name of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes
from uopkit.tensor.support import ArgumentError, ShapeError, _normalize_axis

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _along(v: Tensor, axis: int, ndim: int) -> Tensor:
    # a 1-D tensor of coefficients shaped to broadcast along `axis` of an ndim tensor
    return v.reshape(tuple(-1 if d == axis else 1 for d in range(ndim)))


def _uniform(f: Tensor, axis: int, h: float, edge_order: int) -> Tensor:
    n = f.shape[axis]

    def at(start: int, stop: int) -> Tensor:
        return f._slice_axis(axis, start, stop)

    interior = (at(2, n) - at(0, n - 2)) * (0.5 / h)
    if edge_order == 1:
        first, last = (at(1, 2) - at(0, 1)) / h, (at(n - 1, n) - at(n - 2, n - 1)) / h
    else:
        first = (at(0, 1) * -1.5 + at(1, 2) * 2 - at(2, 3) * 0.5) / h
        last = (at(n - 3, n - 2) * 0.5 - at(n - 2, n - 1) * 2 + at(n - 1, n) * 1.5) / h
    return first.cat(interior, last, dim=axis)


def _coordinates(f: Tensor, axis: int, c: Tensor, edge_order: int) -> Tensor:
    # second-order central differences over uneven steps (exact for quadratics), and one-sided ones at the edges
    n, nd = f.shape[axis], f.ndim
    c = c.cast(f.dtype)
    dx = c[1:] - c[:-1]

    def at(start: int, stop: int) -> Tensor:
        return f._slice_axis(axis, start, stop)

    hl, hr = dx[:-1], dx[1:]
    a, b, cc = -hr / (hl * (hl + hr)), (hr - hl) / (hl * hr), hl / (hr * (hl + hr))
    interior = at(0, n - 2) * _along(a, axis, nd) + at(1, n - 1) * _along(b, axis, nd) + at(2, n) * _along(cc, axis, nd)
    if edge_order == 1:
        first = (at(1, 2) - at(0, 1)) / _along(dx[:1], axis, nd)
        last = (at(n - 1, n) - at(n - 2, n - 1)) / _along(dx[-1:], axis, nd)
    else:
        d1, d2 = dx[:1], dx[1:2]
        coefs = (-(2 * d1 + d2) / (d1 * (d1 + d2)), (d1 + d2) / (d1 * d2), -d1 / (d2 * (d1 + d2)))
        first = at(0, 1) * _along(coefs[0], axis, nd) + at(1, 2) * _along(coefs[1], axis, nd)
        first = first + at(2, 3) * _along(coefs[2], axis, nd)
        d1, d2 = dx[-2:-1], dx[-1:]
        coefs = (d2 / (d1 * (d1 + d2)), -(d2 + d1) / (d1 * d2), (2 * d2 + d1) / (d2 * (d1 + d2)))
        last = at(n - 3, n - 2) * _along(coefs[0], axis, nd) + at(n - 2, n - 1) * _along(coefs[1], axis, nd)
        last = last + at(n - 1, n) * _along(coefs[2], axis, nd)
    return first.cat(interior, last, dim=axis)


def numerical_gradient(
    input: Tensor, *, spacing: Any = 1, dim: int | Sequence[int] | None = None, edge_order: int = 1
) -> tuple[Tensor, ...]:
    """torch.gradient: a tuple with the derivative of `input` along each of `dim` (every dim when None; a tuple of one
    for an int), from samples `spacing` apart: a number (every dim), a list of numbers (one per dim) or a list of 1-D
    coordinate tensors (one per dim, each as long as its dim). Central differences in the interior, one-sided ones of
    order `edge_order` (1 or 2) at the edges; each dim needs at least edge_order + 1 samples. Ints promote to the
    default float.

    >>> from uopkit import Tensor
    >>> numerical_gradient(Tensor([1.0, 2.0, 4.0, 8.0]))[0].tolist()
    [1.0, 1.5, 3.0, 4.0]
    """
    if edge_order not in (1, 2):
        raise ArgumentError(f"gradient: edge_order takes 1 or 2, got {edge_order!r}")
    x = input if dtypes.is_float(input.dtype) else input.cast(dtypes.default_float)
    if dim is None:
        axes = list(range(x.ndim))
    elif isinstance(dim, int):
        axes = [_normalize_axis(dim, x.ndim, "gradient", x.shape)]
    else:
        axes = [_normalize_axis(d, x.ndim, "gradient", x.shape) for d in dim]
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"gradient: dim {list(dim)} names a dimension twice")
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(axes):
            if dim is None:
                raise ArgumentError(
                    f"gradient: spacing takes a number or one entry per dim ({x.ndim} here, no dim given), got "
                    f"{len(spacing)} entries"
                )
            raise ArgumentError(
                f"gradient: spacing takes a number or one entry per dim in dim={dim} ({len(axes)}), got "
                f"{len(spacing)} entries"
            )
        steps = list(spacing)
    else:
        steps = [spacing] * len(axes)
    for axis in axes:
        if x.shape[axis] < edge_order + 1:
            raise ShapeError(
                f"gradient: edge_order={edge_order} needs at least {edge_order + 1} samples along dim {axis}, the "
                "input of shape "
                f"{x.shape} has {x.shape[axis]}"
            )
    out = []
    for axis, step in zip(axes, steps, strict=True):
        if hasattr(step, "shape"):
            if step.ndim != 1 or step.shape[0] != x.shape[axis]:
                raise ShapeError(
                    f"gradient: the coordinates along dim {axis} must be a 1-D tensor of {x.shape[axis]} points (the "
                    f"input's size there), got shape {step.shape}"
                )
            out.append(_coordinates(x, axis, step, edge_order))
        else:
            out.append(_uniform(x, axis, float(step), edge_order))
    return tuple(out)

"""PyTorch's other names for existing Tensor methods (`greater`, `moveaxis`, `absolute`, ...) and its short
compositions of them (`addmm`, `inner`, `rot90`, `hsplit`, ...), with torch's argument checks.

The methods here build on the other mixins' public methods only: a semantic change there reaches them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes, least_upper_float
from uopkit.tensor.support import ArgumentError, ShapeError, _normalize_axis

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _alias(name: str, target: str, doc: str | None = None) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, target)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc or f"torch's name for `{target}`."
    return method


def _need_dims(t: Tensor, n: int, op: str) -> None:
    if t.ndim < n:
        raise ShapeError(f"{op}: needs a tensor of {n} or more dims, got shape {t.shape}")


def _scaled_sum(
    base: Tensor,
    op: str,
    operands: tuple[Tensor, Tensor],
    ndims: tuple[int, int],
    product: Callable[[Tensor, Tensor], Tensor],
    beta: Any,
    alpha: Any,
) -> Tensor:
    """beta * base + alpha * product(*operands), torch's add*mm family (operands of `ndims` dims): with beta 0 `base`
    is not read (its NaN don't show)."""
    a, b = operands
    if (a.ndim, b.ndim) != ndims:
        raise ShapeError(f"{op}: needs operands of {ndims[0]} and {ndims[1]} dims, got shapes {a.shape} and {b.shape}")
    out = product(a, b)
    out = out if alpha == 1 else out * alpha
    if beta == 0:
        base._broadcast_to(out.shape)  # (still checks that it fits, as torch)
        return out
    return (base if beta == 1 else base * beta) + out


class TorchNamesMixin:
    __slots__ = ()

    absolute = _alias("absolute", "abs")
    arccos = _alias("arccos", "acos")
    arccosh = _alias("arccosh", "acosh")
    arcsin = _alias("arcsin", "asin")
    arcsinh = _alias("arcsinh", "asinh")
    arctan = _alias("arctan", "atan")
    arctan2 = _alias("arctan2", "atan2")
    arctanh = _alias("arctanh", "atanh")
    bitwise_left_shift = _alias("bitwise_left_shift", "__lshift__")
    bitwise_right_shift = _alias("bitwise_right_shift", "__rshift__")
    divide = _alias("divide", "div")
    true_divide = _alias("true_divide", "div")
    multiply = _alias("multiply", "mul")
    subtract = _alias("subtract", "sub")
    negative = _alias("negative", "neg")
    positive = _alias("positive", "__pos__")
    greater = _alias("greater", "gt")
    greater_equal = _alias("greater_equal", "ge")
    less = _alias("less", "lt")
    less_equal = _alias("less_equal", "le")
    not_equal = _alias("not_equal", "ne")
    fix = _alias("fix", "trunc")
    sgn = _alias("sgn", "sign")
    moveaxis = _alias("moveaxis", "movedim")
    swapdims = _alias("swapdims", "swapaxes")
    ndimension = _alias("ndimension", "dim")
    nelement = _alias("nelement", "numel")
    ger = _alias("ger", "outer")
    argwhere = _alias("argwhere", "nonzero", "The indices of the nonzero elements, (n, ndim) (torch.argwhere).")
    split_with_sizes = _alias("split_with_sizes", "split", "`split` by a list of sizes.")

    def byte(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Cast to uint8."""
        return self.cast(dtypes.uint8)

    def char(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Cast to int8."""
        return self.cast(dtypes.int8)

    def cpu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The tensor on the CPU backend (itself when it is there)."""
        return self.to("CPU")

    def is_signed(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether the dtype holds negative numbers (floats and signed ints)."""
        return self.dtype != dtypes.bool and not dtypes.is_unsigned(self.dtype)

    def is_complex(self: Tensor) -> bool:  # type: ignore[misc]
        """False: there are no complex dtypes."""
        return False

    def is_same_size(self: Tensor, other: Tensor) -> bool:  # type: ignore[misc]
        """Whether both tensors have the same shape."""
        return self.shape == other.shape

    def is_nonzero(self: Tensor) -> bool:  # type: ignore[misc]
        """The truth of a one-element tensor (reads it back)."""
        if self.numel() != 1:
            raise ShapeError(f"is_nonzero: needs a tensor of one element, got shape {self.shape}")
        return bool(self.item())

    def equal(self: Tensor, other: Tensor) -> bool:  # type: ignore[misc]
        """Whether both have the same shape and equal elements (torch.equal; NaN is unequal; reads back)."""
        return self.shape == other.shape and bool((self == other).all().item())

    def msort(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Sorted along dim 0."""
        return self.sort(0)[0]

    def aminmax(self: Tensor, *, dim: int | None = None, keepdim: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(min, max) over `dim` (every element when None), as torch.aminmax."""
        if dim is None and keepdim:
            shape = (1,) * self.ndim
            return self.min().reshape(shape), self.max().reshape(shape)
        return self.amin(dim, keepdim), self.amax(dim, keepdim)

    def broadcast_to(self: Tensor, shape: Sequence[int]) -> Tensor:  # type: ignore[misc]
        """`expand` to `shape` (-1 keeps a dim), torch.broadcast_to."""
        return self.expand(tuple(shape))

    def fliplr(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Reversed along dim 1 (needs 2 or more dims)."""
        _need_dims(self, 2, "fliplr")
        return self.flip(1)

    def flipud(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Reversed along dim 0 (needs 1 or more dims)."""
        _need_dims(self, 1, "flipud")
        return self.flip(0)

    def rot90(self: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:  # type: ignore[misc]
        """Rotated by 90 degrees k times in the plane of `dims`, from the first toward the second (torch.rot90).

        >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
        [[2, 4], [1, 3]]
        """
        if len(dims) != 2:
            raise ArgumentError(f"rot90: dims must name 2 axes, got {tuple(dims)}")
        _need_dims(self, 2, "rot90")
        a, b = (_normalize_axis(d, self.ndim, "rot90", self.shape) for d in dims)
        if a == b:
            raise ArgumentError(f"rot90: the two dims must differ, got {tuple(dims)}")
        k %= 4
        if k == 0:
            return self.clone()
        if k == 2:
            return self.flip((a, b))
        return self.flip(b).transpose(a, b) if k == 1 else self.transpose(a, b).flip(b)

    def deg2rad(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Degrees to radians (ints promote to float)."""
        return self.cast(least_upper_float(self.dtype)) * (math.pi / 180)

    def rad2deg(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Radians to degrees (ints promote to float)."""
        return self.cast(least_upper_float(self.dtype)) * (180 / math.pi)

    def float_power(self: Tensor, exponent: Any) -> Tensor:  # type: ignore[misc]
        """self ** exponent in float64 (torch.float_power)."""
        if isinstance(exponent, Tensor):
            exponent = exponent.cast(dtypes.float64)
        return self.cast(dtypes.float64).pow(float(exponent) if isinstance(exponent, (int, float)) else exponent)

    def sinc(self: Tensor) -> Tensor:  # type: ignore[misc]
        """sin(pi x) / (pi x), 1 at 0 (torch.sinc)."""
        x = self.cast(least_upper_float(self.dtype))
        px = x * math.pi
        return (x == 0).where(1.0, px.sin() / (x == 0).where(1.0, px))

    def logaddexp2(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
        """log2(2**self + 2**other) without overflow; equal infinities give themselves."""
        a, b = self._broadcasted(other, False, "logaddexp2")
        if not dtypes.is_float(a.dtype):
            a, b = a.float(), b.float()
        top = a.maximum(b)
        # (a tie as the mean of both plus 1: each gets half the gradient, as torch's)
        return (a == b).where((a + b) * 0.5 + 1, top + (1 + (-(a - b).abs()).exp2()).log2())

    def heaviside(self: Tensor, values: Tensor) -> Tensor:  # type: ignore[misc]
        """0 where self < 0, `values` where self == 0, 1 where self > 0 (NaN gives 0, as torch's)."""
        if isinstance(values, Tensor) and values.dtype != self.dtype:
            raise ArgumentError(
                f"heaviside: values must have the input's dtype ({self.dtype}), got {values.dtype} (as torch)"
            )
        return (self == 0).where(values, (self > 0).cast(self.dtype))

    def hardshrink(self: Tensor, lambd: float = 0.5) -> Tensor:  # type: ignore[misc]
        """x where |x| > lambd, else 0."""
        return (self.abs() > lambd).where(self, 0)

    def inner(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
        """Sums over the last dims of both: shape self.shape[:-1] + other.shape[:-1] (a 0-d operand multiplies)."""
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(f"inner: last dims differ, shapes {self.shape} and {other.shape}")
        n = self.shape[-1]
        flat = self.reshape(-1, n) @ other.reshape(-1, n).transpose(0, 1)
        return flat.reshape(self.shape[:-1] + other.shape[:-1])

    def vdot(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
        """The dot product of two 1-D tensors."""
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"vdot: needs two 1-D tensors, got shapes {self.shape} and {other.shape}")
        return self.dot(other)

    def dist(self: Tensor, other: Tensor, p: float = 2) -> Tensor:  # type: ignore[misc]
        """The p-norm of self - other (broadcast), torch.dist."""
        return (self - other).flatten().norm(p)

    def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (mat1 @ mat2), two matrices (torch.addmm)."""
        return _scaled_sum(self, "addmm", (mat1, mat2), (2, 2), lambda a, b: a @ b, beta, alpha)

    def addmv(self: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (mat @ vec), a matrix and a vector (torch.addmv)."""
        return _scaled_sum(self, "addmv", (mat, vec), (2, 1), lambda a, b: a @ b, beta, alpha)

    def addr(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * outer(vec1, vec2) (torch.addr)."""
        return _scaled_sum(self, "addr", (vec1, vec2), (1, 1), lambda a, b: a.outer(b), beta, alpha)

    def baddbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (batch1 @ batch2), batches of matrices (torch.baddbmm)."""
        return _scaled_sum(self, "baddbmm", (batch1, batch2), (3, 3), lambda a, b: a @ b, beta, alpha)

    def addbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * the sum over the batch of batch1[i] @ batch2[i] (torch.addbmm)."""
        return _scaled_sum(self, "addbmm", (batch1, batch2), (3, 3), lambda a, b: (a @ b).sum(0), beta, alpha)

    def matrix_power(self: Tensor, n: int) -> Tensor:  # type: ignore[misc]
        """self @ self ... n times by squaring (0 gives identities, a negative n the inverse's power); batched."""
        _need_dims(self, 2, "matrix_power")
        if self.shape[-1] != self.shape[-2]:
            raise ShapeError(f"matrix_power: needs square matrices, got shape {self.shape}")
        if n < 0:
            return self.inverse().matrix_power(-n)
        out: Tensor | None = None
        square = self
        while n:
            if n & 1:
                out = square if out is None else out @ square
            n >>= 1
            if n:
                square = square @ square
        if out is None:
            eye = Tensor.eye(self.shape[-1], dtype=self.dtype, device=self.device)
            return eye.expand(self.shape).contiguous()
        return out

    def select(self: Tensor, dim: int, index: int) -> Tensor:  # type: ignore[misc]
        """self[..., index, ...] at `dim` (the dim goes), torch.select."""
        dim = _normalize_axis(dim, self.ndim, "select", self.shape, scalar=False)
        return self[(slice(None),) * dim + (index,)]

    def _numpy_split(self: Tensor, sections: int | Sequence[int], dim: int, op: str) -> tuple[Tensor, ...]:
        if isinstance(sections, int) and (sections <= 0 or self.shape[dim] % sections):
            raise ArgumentError(
                f"{op}: dim {dim} of size {self.shape[dim]} doesn't split into {sections} equal parts (give indices)"
            )
        return self.tensor_split(sections, dim)

    def hsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 1 (dim 0 of a 1-D tensor) into equal parts or at indices, as numpy's hsplit."""
        _need_dims(self, 1, "hsplit")
        return self._numpy_split(sections, 1 if self.ndim > 1 else 0, "hsplit")

    def vsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 0 (2 or more dims) into equal parts or at indices, as numpy's vsplit."""
        _need_dims(self, 2, "vsplit")
        return self._numpy_split(sections, 0, "vsplit")

    def dsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 2 (3 or more dims) into equal parts or at indices, as numpy's dsplit."""
        _need_dims(self, 3, "dsplit")
        return self._numpy_split(sections, 2, "dsplit")

    def diag_embed(self: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # type: ignore[misc]
        """Matrices whose `offset` diagonal is the last dim, placed at dims dim1 and dim2 of the result.

        >>> Tensor([1, 2]).diag_embed().tolist()
        [[1, 0], [0, 2]]
        """
        _need_dims(self, 1, "diag_embed")
        ndim, n = self.ndim + 1, self.shape[-1]
        d1, d2 = (_normalize_axis(d, ndim, "diag_embed", None) for d in (dim1, dim2))
        if d1 == d2:
            raise ArgumentError(f"diag_embed: dim1 and dim2 must differ, got {dim1} and {dim2}")
        # (selects, no products: a NaN or inf stays on its diagonal, zeros keep their sign)
        eye = Tensor.eye(n, dtype=dtypes.bool, device=self.device)
        square = eye.where(self.unsqueeze(-1), Tensor.zeros((), dtype=self.dtype, device=self.device))
        k = abs(offset)
        lead = ((0, 0),) * (ndim - 2)
        out = square.pad(lead + (((0, k), (k, 0)) if offset >= 0 else ((k, 0), (0, k))))
        batch = iter(range(ndim - 2))
        return out.permute([ndim - 2 if j == d1 else ndim - 1 if j == d2 else next(batch) for j in range(ndim)])

    def diagflat(self: Tensor, offset: int = 0) -> Tensor:  # type: ignore[misc]
        """The flattened tensor as the `offset` diagonal of a square matrix."""
        return self.flatten().diag_embed(offset)

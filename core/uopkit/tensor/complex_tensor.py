"""Complex tensors: `ComplexTensor` holds a real and an imaginary part, two real float `Tensor`s of one shape, dtype
and device, and computes on them with real ops, so every kernel stays real and gradients flow through the two parts.
Its dtype is `dtypes.complex64` (float32 parts) or `dtypes.complex128` (float64 parts).

Gradients follow torch's convention: for a real loss L, a complex leaf's `.grad` is dL/dRe + i dL/dIm.

>>> z = Tensor.complex(Tensor([1.0, 0.0]), Tensor([2.0, 1.0]))
>>> (z * z).tolist(), z.abs().tolist()
([(-3+4j), (-1+0j)], [2.2360680103302, 1.0])
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import ComplexDType, DType, DTypeError, complex_dtype_for, dtypes, least_upper_dtype
from uopkit.tensor.complex_math import ComplexMathMixin, bind_complex_module, complex_where
from uopkit.tensor.indexing import update_all_in_place
from uopkit.tensor.support import ShapeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


class ComplexOpError(DTypeError):
    """An op complex tensors don't support here: a TypeError and torch's RuntimeError."""


def _unsupported(op: str, why: str = "") -> ComplexOpError:
    return ComplexOpError(
        f"{op}: complex tensors don't support it{why}; take .real/.imag/.abs() for a real tensor, or compute on the "
        "parts (Tensor.complex(re, im) builds the result)"
    )


def _float_part(t: Tensor, op: str) -> Tensor:
    # a part of a complex tensor: float32 or float64 (ints and bools promote to the default float, halves to float32)
    if t.dtype in (dtypes.float32, dtypes.float64):
        return t
    if t.dtype in dtypes.halves:
        return t.cast(dtypes.float32)
    return t.cast(least_upper_dtype(t.dtype, dtypes.default_float))


class ComplexTensor(ComplexMathMixin):
    """A tensor of complex numbers made of two real tensors, `real` and `imag` (see the module's docstring). Build one
    with `Tensor.complex(re, im)`, `Tensor.polar(abs, angle)`, `Tensor.view_as_complex(x)`, `Tensor.tensor(data)` /
    `Tensor.from_numpy(a)` of complex data, or `x.cfloat()` / `x.to(dtypes.complex64)`.

    It has the arithmetic operators (with real tensors and Python numbers, broadcast), `conj`, `abs`, `angle`, `exp`,
    `log`, `sqrt`, `pow` by a real number, the trigonometric and hyperbolic functions and their inverses, `sigmoid`,
    `log1p`/`expm1` and the other functions of tensor/complex_math.py, `sum`/`mean`/`prod`/`cumsum`/`cumprod`,
    `where`/`masked_fill`/`gather`/`index_select`, the view and movement methods, `matmul`, `einsum` of two,
    `cat`/`stack`, `roll`/`flip`/`pad`, autograd (`requires_grad_`, `.grad`, `backward`) and `numpy()`/`tolist()`;
    any other Tensor method raises a `ComplexOpError` (a TypeError and RuntimeError) naming it."""

    # (`_view_of`: the mark Tensor.stack's `_returns_copy` sets on a result, complex ones too; the parts carry theirs)
    __slots__ = ("_re", "_im", "_view_of", "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray * z` to z

    def __init__(self, real: Tensor, imag: Tensor) -> None:
        if real.shape != imag.shape or real.dtype != imag.dtype or real.device != imag.device:
            raise ShapeError(
                f"ComplexTensor: the parts must match, got {real.shape} {real.dtype} on {real.device} and "
                f"{imag.shape} {imag.dtype} on {imag.device}"
            )
        if real.dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(f"ComplexTensor: the parts must be float32 or float64, got {real.dtype}")
        self._re, self._im = real, imag

    # ---------------------------------------------------------------------------------------------------------------
    # attributes

    @property
    def real(self) -> Tensor:
        """The real part, a real tensor (read only here: assigning to `z.real`, as torch allows, is not supported)."""
        return self._re

    @property
    def imag(self) -> Tensor:
        """The imaginary part, a real tensor (read only here: assigning to `z.imag` is not supported)."""
        return self._im

    @property
    def dtype(self) -> ComplexDType:
        """`dtypes.complex64` (float32 parts) or `dtypes.complex128` (float64 parts)."""
        return complex_dtype_for(self._re.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape (each part's)."""
        return self._re.shape

    @property
    def device(self) -> str:
        """The device the parts live on."""
        return self._re.device

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self._re.ndim

    def dim(self) -> int:
        """The number of dims."""
        return self._re.ndim

    def numel(self) -> int:
        """The number of elements."""
        return self._re.numel()

    def size(self, dim: int | None = None) -> Any:
        """The shape, or its size along `dim`."""
        return self._re.size(dim) if dim is not None else self._re.size()

    def __len__(self) -> int:
        return len(self._re)

    @property
    def T(self) -> ComplexTensor:  # noqa: N802
        """The dims reversed (no conjugation, as torch's)."""
        return self._map(lambda t: t.T)

    @property
    def mT(self) -> ComplexTensor:  # noqa: N802
        """The last two dims swapped."""
        return self._map(lambda t: t.mT)

    @property
    def mH(self) -> ComplexTensor:  # noqa: N802
        """The conjugate transpose of the last two dims."""
        return self.conj().mT

    @property
    def H(self) -> ComplexTensor:  # noqa: N802
        """The conjugate transpose of a matrix."""
        return self.conj().T

    def adjoint(self) -> ComplexTensor:
        """The conjugate transpose of the last two dims."""
        return self.mH

    def is_complex(self) -> bool:
        """True."""
        return True

    def is_floating_point(self) -> bool:
        """False, as torch's for a complex tensor."""
        return False

    def element_size(self) -> int:
        """Bytes per element (both parts)."""
        return self.dtype.itemsize

    # ---------------------------------------------------------------------------------------------------------------
    # autograd

    @property
    def requires_grad(self) -> bool:
        """Whether either part requires a gradient."""
        return bool(self._re.requires_grad or self._im.requires_grad)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    @property
    def is_leaf(self) -> bool:
        """Whether both parts are leaves."""
        return bool(self._re.is_leaf and self._im.is_leaf)

    def requires_grad_(self, requires_grad: bool = True) -> ComplexTensor:
        """Make this complex tensor a leaf that wants (or no longer wants) a gradient; returns it. A part that was
        another tensor's (`Tensor.complex(a, b)`) is detached first, so `a` and `b` stay as they were."""
        if requires_grad and not self.requires_grad:
            if not self.is_leaf:
                raise RuntimeError(
                    "requires_grad_: only a leaf complex tensor can be made to require a gradient; use "
                    ".detach().requires_grad_()"
                )
            self._re = self._re.detach().requires_grad_(True)
            self._im = self._im.detach().requires_grad_(True)
        elif not requires_grad:
            self._re.requires_grad_(False)
            self._im.requires_grad_(False)
        return self

    @property
    def grad(self) -> ComplexTensor | None:
        """The gradient, complex: dL/dRe + i dL/dIm for a real loss L (torch's convention); None before backward."""
        gr, gi = self._re.grad, self._im.grad
        if gr is None and gi is None:
            return None
        gr = gr if gr is not None else self._re.zeros_like().detach()
        gi = gi if gi is not None else self._im.zeros_like().detach()
        return ComplexTensor(gr, gi)

    @grad.setter
    def grad(self, value: ComplexTensor | None) -> None:
        if value is None:
            self._re.grad = self._im.grad = None
        else:
            value = _as_complex(value, "grad")
            self._re.grad, self._im.grad = value._re, value._im

    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """Backpropagate from this complex tensor with `gradient` (complex, of its shape): the gradient of the real
        number sum(Re(conj(gradient) * self)), as torch's. Without a gradient it raises, as torch's (a loss must be
        real: `z.abs().sum().backward()`)."""
        if gradient is None:
            raise RuntimeError(
                "backward: a complex tensor needs gradient= (torch makes one implicitly only for a real scalar "
                "output); backpropagate from a real loss such as z.abs().sum()"
            )
        g = _as_complex(gradient, "backward")
        loss = (self._re * g._re.detach() + self._im * g._im.detach()).sum()
        loss.backward(retain_graph=retain_graph, create_graph=create_graph)

    def detach(self) -> ComplexTensor:
        """The values cut from the graph."""
        return self._map(lambda t: t.detach())

    def clone(self) -> ComplexTensor:
        """A copy (gradients flow back to this one)."""
        return self._map(lambda t: t.clone())

    def contiguous(self) -> ComplexTensor:
        """The values in contiguous storage."""
        return self._map(lambda t: t.contiguous())

    def realize(self) -> ComplexTensor:
        """Compute both parts now; returns self."""
        self._re.realize(self._im)
        return self

    # ---------------------------------------------------------------------------------------------------------------
    # conversions

    def numpy(self) -> np.ndarray:
        """A complex numpy array (complex64 or complex128) holding the values."""
        re, im = self._re.numpy(), self._im.numpy()
        out = np.empty(re.shape, np.complex128 if re.dtype == np.float64 else np.complex64)
        out.real, out.imag = re, im
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self) -> Any:
        """The values as (nested lists of) Python complex numbers."""
        return self.numpy().tolist()

    def item(self) -> complex:
        """The one element as a Python complex."""
        if self.numel() != 1:
            raise RuntimeError(f"item: the complex tensor has {self.numel()} elements, not one")
        return complex(self.numpy().reshape(-1)[0])

    def __complex__(self) -> complex:
        return self.item()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"bool: the truth of a complex tensor of {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        extra = f", dtype={self.dtype}" if self.dtype != dtypes.complex64 else ""  # type: ignore[attr-defined]
        if self.requires_grad:
            extra += ", requires_grad=True"
        return f"Tensor({body}{extra})"

    __str__ = __repr__

    def to(self, *args: Any, device: str | None = None, dtype: Any = None, **kwargs: Any) -> ComplexTensor:
        """On another device and/or another complex dtype (complex64, complex128). A real dtype raises: take `.real`,
        `.imag` or `.abs()` (torch discards the imaginary part with a warning)."""
        from uopkit.dtype import complex_dtype_of, is_dtype_like  # noqa: PLC0415

        for a in args:
            if complex_dtype_of(a) is not None:
                dtype = a
            elif is_dtype_like(a):
                raise _unsupported("to", f" into the real dtype {a}")
            elif isinstance(a, ComplexTensor):
                device, dtype = a.device, a.dtype
            else:
                device = a
        out = self
        if dtype is not None:
            cdt = complex_dtype_of(dtype)
            if cdt is None:
                raise _unsupported("to", f" into the real dtype {dtype}")
            out = out._map(lambda t: t.cast(cdt.real))
        if device is not None:
            out = out._map(lambda t: t.to(device))
        return out

    def cfloat(self) -> ComplexTensor:
        """As complex64."""
        return self.to(dtypes.complex64)  # type: ignore[attr-defined]

    def cdouble(self) -> ComplexTensor:
        """As complex128."""
        return self.to(dtypes.complex128)  # type: ignore[attr-defined]

    def cpu(self) -> ComplexTensor:
        """On the CPU device."""
        return self.to("CPU")

    def zeros_like(self, **kwargs: Any) -> Any:
        """Zeros of this shape, complex of this dtype unless `dtype=` says otherwise (torch.zeros_like)."""
        return Tensor.zeros_like(self, **kwargs)  # type: ignore[arg-type]

    def ones_like(self, **kwargs: Any) -> Any:
        """Ones of this shape and dtype (torch.ones_like)."""
        return Tensor.ones_like(self, **kwargs)  # type: ignore[arg-type]

    def full_like(self, fill_value: Any, **kwargs: Any) -> Any:
        """`fill_value` (a number, complex or real) in this shape and dtype (torch.full_like)."""
        return Tensor.full_like(self, fill_value, **kwargs)  # type: ignore[arg-type]

    def empty_like(self, **kwargs: Any) -> Any:
        """An unset tensor of this shape and dtype (torch.empty_like)."""
        return Tensor.empty_like(self, **kwargs)  # type: ignore[arg-type]

    def randn_like(self, **kwargs: Any) -> Any:
        """Complex normal samples of this shape and dtype: each part N(0, 1/2) (torch.randn_like)."""
        return Tensor.randn(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def rand_like(self, **kwargs: Any) -> Any:
        """Samples of this shape and dtype, each part uniform in [0, 1) (torch.rand_like)."""
        return Tensor.rand(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

    # ---------------------------------------------------------------------------------------------------------------
    # elementwise math

    def _map(self, fn: Callable[[Tensor], Tensor]) -> ComplexTensor:
        return ComplexTensor(fn(self._re), fn(self._im))

    def _parts_with(self, other: Any, op: str) -> tuple[Tensor, Tensor, Tensor | float, Tensor | float | None]:
        # (a, b, c, d) of self = a + bi and other = c + di, broadcast and promoted; d is None for a real operand
        a, b = self._re, self._im
        if isinstance(other, ComplexTensor):
            c, d = other._re, other._im
            dt = least_upper_dtype(a.dtype, c.dtype)
            a, b, c, d = (t.cast(dt) for t in (a, b, c, d))
            shape = _broadcast_shape(a.shape, c.shape, op)
            return a.expand(shape), b.expand(shape), c.expand(shape), d.expand(shape)
        if isinstance(other, Tensor):
            if other.dtype == dtypes.bool or not (dtypes.is_float(other.dtype) or dtypes.is_int(other.dtype)):
                other = other.cast(a.dtype)
            # a real float64 tensor makes the result complex128, as torch's; ints and smaller floats keep the parts'
            dt = dtypes.float64 if other.dtype == dtypes.float64 else a.dtype
            a, b, c = a.cast(dt), b.cast(dt), other.cast(dt)
            shape = _broadcast_shape(a.shape, c.shape, op)
            return a.expand(shape), b.expand(shape), c.expand(shape), None
        if isinstance(other, (complex, np.complexfloating)):
            return a, b, float(other.real), float(other.imag)
        if isinstance(other, (bool, int, float, np.integer, np.floating)):
            return a, b, float(other), None
        raise TypeError(f"{op}: a complex tensor can't be combined with {type(other).__name__}")

    def __add__(self, other: Any) -> ComplexTensor:
        a, b, c, d = self._parts_with(other, "add")
        return ComplexTensor(a + c, b + d if d is not None else b)

    __radd__ = __add__

    def __sub__(self, other: Any) -> ComplexTensor:
        a, b, c, d = self._parts_with(other, "sub")
        return ComplexTensor(a - c, b - d if d is not None else b)

    def __rsub__(self, other: Any) -> ComplexTensor:
        return (-self) + other

    def __mul__(self, other: Any) -> ComplexTensor:
        a, b, c, d = self._parts_with(other, "mul")
        if d is None:
            return ComplexTensor(a * c, b * c)
        return ComplexTensor(a * c - b * d, a * d + b * c)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> ComplexTensor:
        a, b, c, d = self._parts_with(other, "div")
        if d is None:
            return ComplexTensor(a / c, b / c)
        den = c * c + d * d
        return ComplexTensor((a * c + b * d) / den, (b * c - a * d) / den)

    def __rtruediv__(self, other: Any) -> ComplexTensor:
        return _as_complex(other, "div", like=self) / self

    def _with_real(self, t: Tensor, op: str, reverse: bool = False, alpha: Any = 1) -> ComplexTensor:
        # a real tensor t's Tensor.add/sub/mul/div/matmul with this complex one: t op alpha * self (alpha * self op t
        # when reverse), through this type's own ops (elementwise.py's _ComplexOperand, linalg's matmul)
        z = self if alpha == 1 else self * alpha
        if op == "add":
            return z + t
        if op == "sub":
            return z - t if reverse else (-z) + t
        if op == "mul":
            return z * t
        if op == "div":
            return z / t if reverse else z.__rtruediv__(t)
        matmul = lambda x, y: x.matmul(y)  # noqa: E731
        return _bilinear(z, t, matmul, "matmul") if reverse else _bilinear(t, z, matmul, "matmul")

    def __neg__(self) -> ComplexTensor:
        return self._map(lambda t: -t)

    def __pos__(self) -> ComplexTensor:
        return self

    def add(self, other: Any, alpha: Any = 1) -> ComplexTensor:
        """self + alpha * other."""
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other: Any, alpha: Any = 1) -> ComplexTensor:
        """self - alpha * other."""
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other: Any) -> ComplexTensor:
        """self * other."""
        return self * other

    def div(self, other: Any) -> ComplexTensor:
        """self / other."""
        return self / other

    def neg(self) -> ComplexTensor:
        """-self."""
        return -self

    def reciprocal(self) -> ComplexTensor:
        """1 / self."""
        return 1.0 / self

    def square(self) -> ComplexTensor:
        """self * self."""
        return self * self

    def conj(self) -> ComplexTensor:
        """The complex conjugate (a new tensor; torch's is a lazy view, with the same values)."""
        return ComplexTensor(self._re, -self._im)

    def conj_physical(self) -> ComplexTensor:
        """The complex conjugate."""
        return self.conj()

    def resolve_conj(self) -> ComplexTensor:
        """Itself (conjugates are never lazy here)."""
        return self

    def is_conj(self) -> bool:
        """False: conjugates are never lazy here."""
        return False

    def abs(self) -> Tensor:
        """|z|, a real tensor, without overflow or underflow on the way (`hypot`: |1e30 + 1e30j| is finite in
        float32); its gradient at 0 is 0, as torch's."""
        a, b = self._re, self._im
        nonzero = (a != 0) | (b != 0)
        # (at 0 the hypot of (1, 0) is taken and dropped: its gradient is hypot's NaN at (0, 0) otherwise)
        return nonzero.where(nonzero.where(a, 1.0).hypot(b), 0.0)

    __abs__ = abs

    def angle(self) -> Tensor:
        """The argument atan2(imag, real) of each element, a real tensor in (-pi, pi]."""
        return self._im.atan2(self._re)

    def sgn(self) -> ComplexTensor:
        """z / |z|, 0 at 0 (torch.sgn)."""
        r = self.abs()
        safe = (r > 0).where(r, 1.0)
        return ComplexTensor((r > 0).where(self._re / safe, 0.0), (r > 0).where(self._im / safe, 0.0))

    def exp(self) -> ComplexTensor:
        """e**z."""
        m = self._re.exp()
        return ComplexTensor(m * self._im.cos(), m * self._im.sin())

    def log(self) -> ComplexTensor:
        """The principal logarithm: log|z| + i angle(z)."""
        return ComplexTensor(self.abs().log(), self.angle())

    def sqrt(self) -> ComplexTensor:
        """The principal square root (real part >= 0)."""
        r = self.abs()
        re = ((r + self._re) * 0.5).relu().sqrt()
        im = ((r - self._re) * 0.5).relu().sqrt()
        return ComplexTensor(re, (self._im < 0).where(-im, im))

    def pow(self, exponent: Any) -> ComplexTensor:
        """z ** exponent for a real number exponent (a small whole one multiplies, others go through polar form)."""
        if isinstance(exponent, (ComplexTensor, complex)) or hasattr(exponent, "uop"):
            raise _unsupported("pow", " with a tensor or complex exponent (only a real number exponent)")
        p = float(exponent)
        if p == 0:
            return ComplexTensor(self._re.ones_like(), self._im.zeros_like())
        if p == int(p) and 1 <= p <= 8:
            out = self
            for _ in range(int(p) - 1):
                out = out * self
            return out
        if p == 0.5:
            return self.sqrt()
        r, th = self.abs(), self.angle()
        m = r.pow(p)
        return ComplexTensor(m * (th * p).cos(), m * (th * p).sin())

    __pow__ = pow

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        a, b, c, d = self._parts_with(other, "eq")
        return (a == c) & (b == (d if d is not None else 0.0))

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return (self == other).logical_not()

    __hash__ = object.__hash__

    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
        """|self - other| <= atol + rtol |other| elementwise (complex distance), as torch.isclose."""
        other_c = _as_complex(other, "isclose", like=self)
        a, b, c, d = self._parts_with(other_c, "isclose")
        exact = (a == c) & (b == d)
        dist = ComplexTensor(a - c, b - d).abs()  # type: ignore[operator]
        close = exact | (dist <= atol + rtol * ComplexTensor(c, d).abs())  # type: ignore[arg-type]
        if equal_nan:
            nan_a = a.isnan() | b.isnan()
            nan_c = c.isnan() | d.isnan()  # type: ignore[union-attr]
            close = close | (nan_a & nan_c)
        return close

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """Whether every element is close (`isclose`), as a Python bool."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def isnan(self) -> Tensor:
        """Whether either part is NaN."""
        return self._re.isnan() | self._im.isnan()

    def isfinite(self) -> Tensor:
        """Whether both parts are finite."""
        return self._re.isfinite() & self._im.isfinite()

    def isreal(self) -> Tensor:
        """Whether each imaginary part is 0."""
        return self._im == 0

    # ---------------------------------------------------------------------------------------------------------------
    # reductions and linear algebra

    def sum(self, *args: Any, **kwargs: Any) -> ComplexTensor:
        """The sum over dims (Tensor.sum's arguments)."""
        return self._map(lambda t: t.sum(*args, **kwargs))

    def mean(self, *args: Any, **kwargs: Any) -> ComplexTensor:
        """The mean over dims (Tensor.mean's arguments)."""
        return self._map(lambda t: t.mean(*args, **kwargs))

    def matmul(self, other: Any) -> ComplexTensor:
        """The matrix product with a complex or real tensor."""
        return _bilinear(self, other, lambda x, y: x.matmul(y), "matmul")

    __matmul__ = matmul

    def __rmatmul__(self, other: Any) -> ComplexTensor:
        return _bilinear(other, self, lambda x, y: x.matmul(y), "matmul")

    def dot(self, other: Any) -> ComplexTensor:
        """The dot product of two 1-D tensors (no conjugation, as torch.dot)."""
        return _bilinear(self, other, lambda x, y: x.dot(y), "dot")

    def vdot(self, other: Any) -> ComplexTensor:
        """The dot product with self conjugated (torch.vdot)."""
        return self.conj().dot(other)

    # ---------------------------------------------------------------------------------------------------------------
    # views and movement: the same method on both parts

    def __getitem__(self, index: Any) -> ComplexTensor:
        return self._map(lambda t: t[index])

    def __setitem__(self, index: Any, value: Any) -> None:
        # z[index] = value (complex, real or a number): each part written, with the real parts' indexing and autograd
        v = _as_complex(value, "setitem", like=self)
        self._re[index] = v._re
        self._im[index] = v._im

    # ---------------------------------------------------------------------------------------------------------------
    # in-place ops: the new parts computed from the old ones, then both written (the real in-place machinery: views
    # of the parts' storage see the write, autograd records it)

    def _write(self, new: Any, op: str) -> ComplexTensor:
        if not isinstance(new, ComplexTensor):
            new = _as_complex(new, op, like=self)
        if _broadcast_shape(self.shape, new.shape, op) != self.shape:
            raise ShapeError(f"{op}: a value of shape {new.shape} doesn't broadcast to the tensor's shape {self.shape}")
        re, im = new._re.expand(self.shape), new._im.expand(self.shape)
        update_all_in_place([self._re, self._im], [lambda: re, lambda: im], op)
        return self

    def __iadd__(self, other: Any) -> ComplexTensor:
        return self._write(self + other, "+=")

    def __isub__(self, other: Any) -> ComplexTensor:
        return self._write(self - other, "-=")

    def __imul__(self, other: Any) -> ComplexTensor:
        return self._write(self * other, "*=")

    def __itruediv__(self, other: Any) -> ComplexTensor:
        return self._write(self / other, "/=")

    def add_(self, other: Any, alpha: Any = 1) -> ComplexTensor:
        """self += alpha * other in place."""
        return self._write(self.add(other, alpha), "add_")

    def sub_(self, other: Any, alpha: Any = 1) -> ComplexTensor:
        """self -= alpha * other in place."""
        return self._write(self.sub(other, alpha), "sub_")

    def mul_(self, other: Any) -> ComplexTensor:
        """self *= other in place."""
        return self._write(self * other, "mul_")

    def div_(self, other: Any) -> ComplexTensor:
        """self /= other in place."""
        return self._write(self / other, "div_")

    def zero_(self) -> ComplexTensor:
        """Every element set to 0 in place."""
        return self._write(0.0, "zero_")

    def fill_(self, value: Any) -> ComplexTensor:
        """Every element set to `value` (a number, complex or real) in place."""
        return self._write(value, "fill_")

    def copy_(self, src: Any) -> ComplexTensor:
        """`src` (complex, real or a number; broadcast to this shape, cast to this dtype) written in place."""
        return self._write(src, "copy_")

    def __iter__(self) -> Any:
        return (self[i] for i in range(self.shape[0]))

    def cat(self, *others: Any, dim: int = 0) -> ComplexTensor:
        """Concatenate with other complex (or real) tensors along `dim`."""
        return ComplexTensor.concat([self, *others], dim)

    @staticmethod
    def concat(tensors: Sequence[Any], dim: int = 0) -> ComplexTensor:
        """torch.cat of complex (and real) tensors: the real parts concatenated and the imaginary parts."""
        zs = _promoted(tensors, "cat")
        first = zs[0]
        return ComplexTensor(
            first._re.cat(*(z._re for z in zs[1:]), dim=dim), first._im.cat(*(z._im for z in zs[1:]), dim=dim)
        )

    def stack(self, *others: Any, dim: int = 0) -> ComplexTensor:
        """Stack with other complex (or real) tensors along a new `dim`."""
        return ComplexTensor.stacked([self, *others], dim)

    @staticmethod
    def stacked(tensors: Sequence[Any], dim: int = 0) -> ComplexTensor:
        """torch.stack of complex (and real) tensors."""
        zs = _promoted(tensors, "stack")
        return ComplexTensor(
            zs[0]._re.stack(*(z._re for z in zs[1:]), dim=dim), zs[0]._im.stack(*(z._im for z in zs[1:]), dim=dim)
        )

    def pad(self, pad: Any, mode: str = "constant", value: Any = 0.0) -> ComplexTensor:
        """Pad with zeros (torch.nn.functional.pad's `pad`, mode "constant" and value 0 only)."""
        if mode != "constant" or value not in (0, 0.0, None):
            raise _unsupported("pad", f" with mode={mode!r} value={value!r} (only zeros)")
        return self._map(lambda t: t.pad(pad))

    def einsum_with(self, formula: str, other: Any) -> ComplexTensor:
        """einsum(formula, self, other) of a complex tensor with another (complex or real) one."""
        return _bilinear(self, other, lambda x, y: Tensor.einsum(formula, x, y), "einsum")

    def __getattr__(self, name: str) -> Any:
        # the view methods run on both parts; Tensor's other methods raise a named error, not a wrong real answer
        if name in _PART_METHODS:
            return lambda *args, **kwargs: self._map(lambda t: getattr(t, name)(*args, **kwargs))
        if not name.startswith("__") and hasattr(Tensor, name):
            raise _unsupported(_public_caller(name))
        raise AttributeError(f"'ComplexTensor' object has no attribute {name!r}")

    def _unordered(self, other: Any) -> Any:
        raise _unsupported("comparison", " (complex numbers have no order)")

    __lt__ = __le__ = __gt__ = __ge__ = _unordered


# the Tensor methods that do the same to each part (views, movement, copies): a complex tensor runs them on both
_PART_METHODS = frozenset(
    "reshape view permute transpose unsqueeze squeeze flatten unflatten expand expand_as broadcast_to movedim moveaxis "
    "swapaxes swapdims flip roll repeat narrow select shrink tril triu diagonal diag_embed t ravel "
    "view_as reshape_as repeat_interleave rot90 fliplr flipud".split()
)


def _public_caller(name: str) -> str:
    # the op to name in an error: `name`, or for an internal one (`Tensor.sin(z)` runs the real sin with z, which
    # reads z._float or z.uop) the public Tensor method that read it: the nearest frame above ComplexTensor.__getattr__
    # that is one (a method made from a table is a function `method` whose `name` is the op; torch_keywords' wrapper
    # holds it as `fn`). An error path only
    if not (name.startswith("_") or name == "uop"):
        return name
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        found = frame.f_locals.get("name"), getattr(frame.f_locals.get("fn"), "__name__", None), frame.f_code.co_name
        for candidate in found:
            if isinstance(candidate, str) and not candidate.startswith("_") and hasattr(Tensor, candidate):
                return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return name


def _broadcast_shape(s1: tuple[int, ...], s2: tuple[int, ...], op: str) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in np.broadcast_shapes(s1, s2))
    except ValueError:
        raise ShapeError(f"{op}: shapes {s1} and {s2} don't broadcast") from None


def _as_complex(x: Any, op: str, like: ComplexTensor | None = None) -> ComplexTensor:
    # x as a ComplexTensor: a complex one, a real tensor (imaginary part 0) or a number (on like's device and dtype)
    if isinstance(x, ComplexTensor):
        return x
    if isinstance(x, Tensor):
        re = _float_part(x, op)
        return ComplexTensor(re, re.zeros_like().detach())
    if isinstance(x, (bool, int, float, complex, np.number)):
        c = complex(x)
        dt = like._re.dtype if like is not None else dtypes.float32
        dev = like.device if like is not None else None
        return ComplexTensor(Tensor(c.real, dtype=dt, device=dev), Tensor(c.imag, dtype=dt, device=dev))
    raise TypeError(f"{op}: expected a complex or real tensor or a number, got {type(x).__name__}")


def _promoted(tensors: Sequence[Any], op: str) -> list[ComplexTensor]:
    # complex (or real) tensors as complex ones with parts of one dtype
    if not tensors:
        raise ShapeError(f"{op}: needs at least one tensor")
    zs = [_as_complex(t, op) for t in tensors]
    dt = least_upper_dtype(*(z._re.dtype for z in zs))
    return [z if z._re.dtype == dt else z._map(lambda t: t.cast(dt)) for z in zs]


def _bilinear(x: Any, y: Any, fn: Callable[[Tensor, Tensor], Tensor], op: str) -> ComplexTensor:
    # a bilinear map (matmul, einsum of two) of complex or real operands: (a + bi)(c + di) = ac - bd + (ad + bc)i
    if isinstance(x, ComplexTensor) and isinstance(y, ComplexTensor):
        dt = least_upper_dtype(x._re.dtype, y._re.dtype)
        a, b, c, d = (t.cast(dt) for t in (x._re, x._im, y._re, y._im))
        return ComplexTensor(fn(a, c) - fn(b, d), fn(a, d) + fn(b, c))
    if isinstance(x, ComplexTensor) and isinstance(y, Tensor):
        c = _float_part(y, op)
        dt = least_upper_dtype(x._re.dtype, c.dtype)
        return ComplexTensor(fn(x._re.cast(dt), c.cast(dt)), fn(x._im.cast(dt), c.cast(dt)))
    if isinstance(x, Tensor) and isinstance(y, ComplexTensor):
        a = _float_part(x, op)
        dt = least_upper_dtype(a.dtype, y._re.dtype)
        return ComplexTensor(fn(a.cast(dt), y._re.cast(dt)), fn(a.cast(dt), y._im.cast(dt)))
    raise TypeError(f"{op}: expected complex or real tensors, got {type(x).__name__} and {type(y).__name__}")


def complex_einsum(formula: str, operands: Sequence[Any]) -> ComplexTensor:
    """Tensor.einsum with complex (and real) operands: the formula is linear in each operand, so it is a sum of real
    einsums, one for each choice of a part of each complex operand (2**k for k complex ones), each times its power of
    i (i**m for m imaginary parts chosen)."""
    parts: list[tuple[Tensor, ...]] = [
        (t._re, t._im) if isinstance(t, ComplexTensor) else (_float_part(t, "einsum"),) for t in operands
    ]
    dt = least_upper_dtype(*(p[0].dtype for p in parts))
    parts = [tuple(t.cast(dt) for t in p) for p in parts]
    sums: list[Tensor | None] = [None, None]  # the real and the imaginary part
    for choice in itertools.product(*(range(len(p)) for p in parts)):
        m = sum(choice)
        term = Tensor.einsum(formula, *(p[c] for p, c in zip(parts, choice, strict=True)))
        so_far = sums[m % 2]
        if so_far is None:
            sums[m % 2] = -term if m % 4 >= 2 else term
        else:
            sums[m % 2] = so_far - term if m % 4 >= 2 else so_far + term
    re, im = sums
    assert re is not None and im is not None
    return ComplexTensor(re, im)


def polar_parts(abs_: Tensor, angle: Tensor) -> ComplexTensor:
    """abs * (cos(angle) + i sin(angle)) (torch.polar)."""
    if not (dtypes.is_float(abs_.dtype) and abs_.dtype == angle.dtype):
        raise DTypeError(f"polar: abs and angle must be float tensors of one dtype, got {abs_.dtype} and {angle.dtype}")
    return ComplexTensor(*(_float_part(t, "polar") for t in (abs_ * angle.cos(), abs_ * angle.sin())))


def from_complex_numpy(arr: np.ndarray, device: str | None = None, dtype: Any = None) -> ComplexTensor:
    """A complex numpy array (or one to make complex) as a ComplexTensor: complex64 stays, complex128 stays, unless
    `dtype` (a complex dtype) says otherwise."""
    arr = np.asarray(arr)
    part = np.float64 if arr.dtype == np.complex128 else np.float32
    cdt = dtype if isinstance(dtype, ComplexDType) else None
    if cdt is not None:
        part = np.float64 if cdt.real == dtypes.float64 else np.float32
    # (np.array, not np.ascontiguousarray: that makes a 0-d array 1-d, and a complex number was a 1-element tensor)
    re = Tensor(np.array(arr.real, dtype=part, order="C"), device=device)
    im = Tensor(np.array(arr.imag, dtype=part, order="C"), device=device)
    return ComplexTensor(re, im)


def complex_real_dtype(dt: DType) -> DType:
    """The part dtype of a complex tensor made from a real one of dtype `dt` (float64 stays, others float32)."""
    return dtypes.float64 if dt == dtypes.float64 else dtypes.float32


def is_complex_data(data: Any) -> bool:
    """Whether `data` (a numpy array, a Python number or a nested list of them) holds complex numbers."""
    if isinstance(data, np.ndarray):
        return data.dtype.kind == "c"
    if isinstance(data, (complex, np.complexfloating)):
        return True
    if isinstance(data, (list, tuple)):
        return any(is_complex_data(v) for v in data)
    return False


__all__ = ["ComplexTensor", "ComplexOpError", "complex_einsum", "polar_parts", "from_complex_numpy", "is_complex_data"]


# torch's functions that a port spells `Tensor.X(...)` (torch.angle(z), torch.conj(z), torch.cat([z, w]),
# torch.mul(x, z)) and that are also methods of the real Tensor: read from the class, `Tensor.X` hands complex
# operands to ComplexTensor's X (the real method would fail, or return a wrong answer: `conj` of a real tensor is
# the tensor itself)
FUNCTION_FORMS = _PART_METHODS | frozenset(
    "abs angle sgn exp log sqrt pow reciprocal square neg conj conj_physical resolve_conj is_conj isclose allclose "
    "isnan isfinite isreal sum mean matmul dot vdot add sub mul div cat concat stack real imag clone detach numel "
    "is_complex absolute adjoint broadcast_to diag_embed diagonal divide flatten flip fliplr flipud moveaxis movedim "
    "multiply narrow negative permute ravel repeat_interleave reshape roll rot90 select squeeze subtract swapaxes "
    "swapdims t tensordot tile transpose tril triu unflatten unsqueeze sin cos tan sinh cosh tanh sigmoid asin acos "
    "atan asinh acosh atanh arcsin arccos arctan arcsinh arccosh arctanh rsqrt log10 log2 exp2 expm1 log1p cumsum "
    "cumprod prod where masked_fill gather index_select take_along_dim isinf sign stft istft".split()
)
# the ones whose second operand may be the complex one (`torch.mul(x, z)`): the first then promotes to complex
_BINARY_FORMS = frozenset("add sub mul div matmul dot vdot isclose allclose".split())
_JOINS = {"cat": "concat", "concat": "concat", "stack": "stacked"}


def _complex_call(name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    # the function X of these arguments, one of them complex
    first = args[0]
    if name == "where" and len(args) == 3 and not kwargs:
        return complex_where(*args)
    if name in _JOINS:
        # torch's `cat([z, w], dim)` or tinygrad's `cat(z, w, dim=)`
        tensors, rest = (first, args[1:]) if isinstance(first, (list, tuple)) else (args, ())
        return getattr(ComplexTensor, _JOINS[name])(list(tensors), *rest, **kwargs)
    if not isinstance(first, ComplexTensor):
        first = _as_complex(first, name, like=args[1])
    attr = getattr(first, name)
    return attr if name in ("real", "imag") else attr(*args[1:], **kwargs)


def _has_complex(name: str, args: tuple) -> bool:
    if not args:
        return False
    if type(args[0]) is ComplexTensor:
        return True
    if name in _JOINS:
        seq = args[0] if isinstance(args[0], (list, tuple)) else args
        return any(type(t) is ComplexTensor for t in seq)
    if name == "where":  # (Tensor.where(condition, z, w))
        return any(type(t) is ComplexTensor for t in args[1:3])
    return name in _BINARY_FORMS and len(args) > 1 and type(args[1]) is ComplexTensor


class _FunctionForm:
    """The attribute X of Tensor's metaclass: `Tensor.X` read from the class is the real method X, which gives complex
    operands to ComplexTensor's X. A tensor's own `x.X` never reaches it (an instance's lookup doesn't read the
    metaclass), so a real tensor's method calls cost nothing more."""

    __slots__ = ("name", "forms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.forms: dict[type, Callable[..., Any]] = {}

    def __get__(self, cls: Any, meta: Any = None) -> Any:
        if cls is None:
            return self
        form = self.forms.get(cls)
        return form if form is not None else self._make(cls)

    def _make(self, cls: type) -> Callable[..., Any]:
        # (made once per class: Tensor, Parameter, ...)
        name = self.name
        raw = next(k.__dict__[name] for k in cls.__mro__ if name in k.__dict__)
        getter = raw.fget if isinstance(raw, property) else None
        real: Callable[..., Any] = getter if getter is not None else raw.__get__(None, cls)

        def form(*args: Any, **kwargs: Any) -> Any:
            if _has_complex(name, args):
                return _complex_call(name, args, kwargs)
            return real(*args, **kwargs)

        form.__name__ = form.__qualname__ = name
        form.__doc__ = raw.__doc__
        # (the real method: signature() follows its own wrappers' __wrapped__ from there, and every link of the chain
        # stays reachable, a table-made method under a wrapper of its own included)
        form.__wrapped__ = real  # type: ignore[attr-defined]
        self.forms[cls] = form
        return form

    # (replacing or deleting the class's attribute, as a test's monkeypatch and its undo do: this descriptor steps
    # aside while the class's own attribute changes, and makes its forms again from the new one)
    def __set__(self, cls: Any, value: Any) -> None:
        self._lifted(cls, lambda: type.__setattr__(cls, self.name, value))

    def __delete__(self, cls: Any) -> None:
        self._lifted(cls, lambda: type.__delattr__(cls, self.name))

    def _lifted(self, cls: Any, change: Callable[[], None]) -> None:
        meta = type(cls)
        self.forms.clear()
        delattr(meta, self.name)
        try:
            change()
        finally:
            setattr(meta, self.name, self)


bind_complex_module(sys.modules[__name__])


def install_function_forms(cls: type) -> None:
    """Make each name in `FUNCTION_FORMS` that `cls` has a `_FunctionForm` of its metaclass."""
    for name in sorted(FUNCTION_FORMS):
        if any(name in k.__dict__ for k in cls.__mro__):
            setattr(type(cls), name, _FunctionForm(name))

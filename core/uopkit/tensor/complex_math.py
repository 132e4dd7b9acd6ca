"""The elementwise functions, scans and selections of complex tensors (torch's, for complex input): each computed
from the real and imaginary parts with real ops, so gradients flow through the parts as everywhere in
tensor/complex_tensor.py. `ComplexMathMixin` gives them to `ComplexTensor`; `complex_where` is `Tensor.where` with a
complex value.

With z = a + bi: sin z = sin a cosh b + i cos a sinh b, sinh z = sinh a cos b + i cosh a sin b, tanh z = (sinh 2a +
i sin 2b) / (cosh 2a + cos 2b) (a clamped to +-20, where tanh is +-1 to float64's precision, so cosh doesn't
overflow), tan z = -i tanh(iz); the inverse functions are their principal logarithms (atanh z = (log1p(z) -
log1p(-z)) / 2, asinh z = log(z + sqrt(z^2 + 1)) taken on the half plane a >= 0 (as a log1p) and mirrored, acosh z =
log(z + sqrt(z + 1) sqrt(z - 1)), asin z = -i asinh(iz), atan z = -i atanh(iz), acos z = pi/2 - asin z).

>>> z = Tensor.complex(Tensor([0.0]), Tensor([1.0]))
>>> [round(v.imag, 4) for v in z.sin().tolist()]
[1.1752]
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes

if TYPE_CHECKING:
    from uopkit.tensor.complex_tensor import ComplexTensor
    from uopkit.tensor.tensor import Tensor

# |re z| past which tanh z is +-1 (to float64's precision): the parts are computed with a clamped there
_TANH_FLAT = 20.0


# tensor/complex_tensor.py, which imports this module for the mixin: it binds itself here once its class exists
# (`bind_complex_module`), and the ops below read its class and helpers from it when they run
_complex: Any = None


def bind_complex_module(module: Any) -> None:
    """Bind tensor/complex_tensor.py (ComplexTensor and its helpers) for the functions here."""
    global _complex
    _complex = module


def _complex_module() -> Any:
    return _complex


def _tanh_parts(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    a2 = a.clamp(-_TANH_FLAT, _TANH_FLAT) * 2
    den = a2.cosh() + (b * 2).cos()
    return a2.sinh() / den, (b * 2).sin() / den


class ComplexMathMixin:
    """The functions of complex tensors that `ComplexTensor` takes from here (see the module's docstring)."""

    __slots__ = ()
    _re: Tensor
    _im: Tensor

    def _z(self, re: Tensor, im: Tensor) -> ComplexTensor:
        return type(self)(re, im)  # type: ignore[call-arg, return-value]

    def _times_i(self, sign: float = 1.0) -> ComplexTensor:
        # sign * i * self: i (a + bi) = -b + ai
        return self._z(-self._im * sign, self._re * sign)

    # -------------------------------------------------------------------------------------------------------------
    # trigonometric and hyperbolic

    def sin(self) -> ComplexTensor:
        """sin z = sin a cosh b + i cos a sinh b."""
        a, b = self._re, self._im
        return self._z(a.sin() * b.cosh(), a.cos() * b.sinh())

    def cos(self) -> ComplexTensor:
        """cos z = cos a cosh b - i sin a sinh b."""
        a, b = self._re, self._im
        return self._z(a.cos() * b.cosh(), -(a.sin() * b.sinh()))

    def tan(self) -> ComplexTensor:
        """tan z = -i tanh(iz)."""
        p, q = _tanh_parts(-self._im, self._re)
        return self._z(q, -p)

    def sinh(self) -> ComplexTensor:
        """sinh z = sinh a cos b + i cosh a sin b."""
        a, b = self._re, self._im
        return self._z(a.sinh() * b.cos(), a.cosh() * b.sin())

    def cosh(self) -> ComplexTensor:
        """cosh z = cosh a cos b + i sinh a sin b."""
        a, b = self._re, self._im
        return self._z(a.cosh() * b.cos(), a.sinh() * b.sin())

    def tanh(self) -> ComplexTensor:
        """tanh z = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b)."""
        return self._z(*_tanh_parts(self._re, self._im))

    def sigmoid(self) -> ComplexTensor:
        """1 / (1 + e**-z)."""
        return 1.0 / (1.0 + (-self).exp())  # type: ignore[operator]

    def asinh(self) -> ComplexTensor:
        """The principal asinh: log(z + sqrt(z^2 + 1)), taken where re z >= 0 and mirrored (asinh(-z) = -asinh z),
        as log1p(w + w^2 / (sqrt(w^2 + 1) + 1)), so no digits cancel (near 0 either)."""
        neg = self._re < 0
        w = self._z(neg.where(-self._re, self._re), neg.where(-self._im, self._im))
        w2 = w * w  # type: ignore[operator]
        r = (w + w2 / ((w2 + 1.0).sqrt() + 1.0)).log1p()  # type: ignore[operator]
        return self._z(neg.where(-r._re, r._re), neg.where(-r._im, r._im))

    def acosh(self) -> ComplexTensor:
        """The principal acosh: log(z + sqrt(z + 1) sqrt(z - 1))."""
        return (self + (self + 1.0).sqrt() * (self - 1.0).sqrt()).log()  # type: ignore[operator, attr-defined]

    def atanh(self) -> ComplexTensor:
        """The principal atanh: (log1p(z) - log1p(-z)) / 2."""
        return (self.log1p() - (-self).log1p()) * 0.5  # type: ignore[operator]

    def asin(self) -> ComplexTensor:
        """asin z = -i asinh(iz)."""
        return self._times_i().asinh()._times_i(-1.0)

    def acos(self) -> ComplexTensor:
        """acos z = pi/2 - asin z."""
        s = self.asin()
        return self._z(math.pi / 2 - s._re, -s._im)

    def atan(self) -> ComplexTensor:
        """atan z = -i atanh(iz)."""
        return self._times_i().atanh()._times_i(-1.0)

    arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh

    # -------------------------------------------------------------------------------------------------------------
    # powers and logarithms

    def rsqrt(self) -> ComplexTensor:
        """1 / sqrt(z) (principal branch)."""
        return 1.0 / self.sqrt()  # type: ignore[attr-defined, operator]

    def log10(self) -> ComplexTensor:
        """The principal logarithm in base 10."""
        return self.log() * (1 / math.log(10))  # type: ignore[attr-defined, no-any-return]

    def log2(self) -> ComplexTensor:
        """The principal logarithm in base 2."""
        return self.log() * (1 / math.log(2))  # type: ignore[attr-defined, no-any-return]

    def exp2(self) -> ComplexTensor:
        """2**z."""
        return (self * math.log(2)).exp()  # type: ignore[operator, attr-defined, no-any-return]

    def expm1(self) -> ComplexTensor:
        """e**z - 1 without the cancellation near 0: expm1(a) cos b - 2 sin(b/2)^2 + i e**a sin b."""
        a, b = self._re, self._im
        return self._z(a.expm1() * b.cos() - (b * 0.5).sin().square() * 2, a.exp() * b.sin())

    def log1p(self) -> ComplexTensor:
        """log(1 + z) without the cancellation near 0: log|1 + z| = log1p(a (2 + a) + b^2) / 2."""
        a, b = self._re, self._im
        return self._z((a * (a + 2) + b * b).log1p() * 0.5, b.atan2(a + 1))

    # -------------------------------------------------------------------------------------------------------------
    # scans and products

    def cumsum(self, *args: Any, dtype: Any = None, **kwargs: Any) -> ComplexTensor:
        """The running sum along a dim (Tensor.cumsum's arguments; `dtype` a complex dtype)."""
        z = self if dtype is None else self.to(dtype)  # type: ignore[attr-defined]
        return z._z(z._re.cumsum(*args, **kwargs), z._im.cumsum(*args, **kwargs))

    def cumprod(self, axis: int = 0, *, dim: int | None = None, dtype: Any = None) -> ComplexTensor:
        """The running product along `dim`: log2(n) steps of products with the running products `shift` back
        (1 before the start), each a complex multiply, so values, zeros and gradients are exact products."""
        z: Any = self if dtype is None else self.to(dtype)  # type: ignore[attr-defined]
        d = dim if dim is not None else axis
        d = d + z._re.ndim if d < 0 else d
        if z._re.ndim == 0:
            return z
        out = z.movedim(d, -1)
        n, shift = out.shape[-1], 1
        while shift < n:
            ahead = [(0, 0)] * (out.ndim - 1) + [(shift, 0)]
            prev_re = out._re[..., : n - shift].pad(ahead, value=1.0)
            prev_im = out._im[..., : n - shift].pad(ahead)
            out = out * self._z(prev_re, prev_im)
            shift *= 2
        return out.movedim(-1, d)  # type: ignore[no-any-return]

    def prod(self, axis: Any = None, keepdim: bool = False, dtype: Any = None, *, dim: Any = None) -> ComplexTensor:
        """The product over one dim, or of every element (no dim)."""
        d = dim if dim is not None else axis
        if d is None:
            last = self.reshape(-1).cumprod(0, dtype=dtype)[-1]  # type: ignore[attr-defined]
            return last.reshape((1,) * self._re.ndim) if keepdim else last  # type: ignore[no-any-return]
        if isinstance(d, (tuple, list)):
            out = self
            for one in sorted((k % max(self._re.ndim, 1) for k in d), reverse=True):
                out = out.prod(one, keepdim=keepdim, dtype=dtype)
            return out  # type: ignore[return-value]
        d = d % max(self._re.ndim, 1)
        last = self.cumprod(d, dtype=dtype).narrow(d, self.shape[d] - 1, 1)  # type: ignore[attr-defined]
        return last if keepdim else last.squeeze(d)  # type: ignore[no-any-return]

    # -------------------------------------------------------------------------------------------------------------
    # selections

    def where(self, condition: Tensor, other: Any) -> ComplexTensor:
        """torch's `z.where(condition, other)`: self where `condition`, else other."""
        return complex_where(condition, self, other)

    def masked_fill(self, mask: Tensor, value: Any) -> ComplexTensor:
        """`value` (a number, complex or real, or a 0-d tensor) where `mask` is true, else self."""
        v = _complex_module()._as_complex(value, "masked_fill", like=self)
        if v.ndim:
            raise _complex_module().ShapeError(
                f"masked_fill: a tensor value must be 0-dimensional, got shape {v.shape}"
            )
        return complex_where(mask, v.to(dtype=self.dtype), self)  # type: ignore[attr-defined]

    def gather(self, dim: int, index: Tensor, **kwargs: Any) -> ComplexTensor:
        """The elements at `index` along `dim` (torch.gather), of each part."""
        return self._z(self._re.gather(dim, index, **kwargs), self._im.gather(dim, index, **kwargs))

    def index_select(self, dim: int, index: Tensor) -> ComplexTensor:
        """The slices at `index` along `dim` (torch.index_select), of each part."""
        return self._z(self._re.index_select(dim, index), self._im.index_select(dim, index))

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> ComplexTensor:
        """torch.take_along_dim of each part."""
        return self._z(self._re.take_along_dim(indices, dim), self._im.take_along_dim(indices, dim))

    def stft(self, *args: Any, **kwargs: Any) -> ComplexTensor:
        """torch.stft of this complex signal: `uopkit.fft.stft(self, n_fft, ...)` (two-sided)."""
        return importlib.import_module("uopkit.fft").stft(self, *args, **kwargs)  # type: ignore[no-any-return]

    def istft(self, *args: Any, **kwargs: Any) -> Any:
        """torch.istft of this complex spectrum: `uopkit.fft.istft(self, n_fft, ...)`."""
        return importlib.import_module("uopkit.fft").istft(self, *args, **kwargs)

    # -------------------------------------------------------------------------------------------------------------
    # tests of values

    def isinf(self) -> Tensor:
        """Whether either part is infinite."""
        return self._re.isinf() | self._im.isinf()

    def sign(self) -> Tensor:
        """Not defined for complex numbers (as torch's): `sgn` is z / |z|."""
        raise _complex_module()._unsupported("sign", " (use sgn, z / |z|)")


def complex_where(condition: Any, x: Any, y: Any) -> ComplexTensor:
    """`x if condition else y` elementwise, x or y (or both) complex: the parts chosen with the real where (real
    operands and numbers promote to complex)."""
    ct = _complex_module()
    like = x if isinstance(x, ct.ComplexTensor) else y
    xs, ys = ct._promoted([ct._as_complex(v, "where", like=like) for v in (x, y)], "where")
    if not (hasattr(condition, "uop") and condition.dtype == dtypes.bool):
        condition = (condition if hasattr(condition, "uop") else ct.Tensor(condition)).cast(dtypes.bool)
    return ct.ComplexTensor(condition.where(xs._re, ys._re), condition.where(xs._im, ys._im))


__all__ = ["ComplexMathMixin", "bind_complex_module", "complex_where"]

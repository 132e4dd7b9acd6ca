"""Tensor's ways into complex numbers (torch.complex, torch.polar, torch.view_as_complex, torch.view_as_real,
`cfloat`/`cdouble`, `to(complex dtype)`): each gives a `ComplexTensor` (tensor/complex_tensor.py) whose two real
parts are ordinary tensors."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import ComplexDType, DTypeError, complex_dtype_for, complex_dtype_of, dtypes
from uopkit.tensor.complex_tensor import ComplexTensor, complex_real_dtype, from_complex_numpy, polar_parts
from uopkit.tensor.support import ShapeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def as_complex(t: Tensor, cdt: ComplexDType) -> ComplexTensor:
    """A real tensor as a complex one of dtype `cdt` (imaginary part 0); gradients flow to the real part."""
    re = t.cast(cdt.real)
    return ComplexTensor(re, Tensor.zeros(*t.shape, dtype=cdt.real, device=t.device))


def to_complex(t: Tensor, cdt: ComplexDType, device: Any, copy: bool) -> ComplexTensor:
    """`t.to(device, complex dtype)`: t on `device` (None: where it is) as a complex tensor of dtype `cdt`."""
    out = as_complex(t if device is None else t.to(device), cdt)
    return out.clone() if copy else out


def complex_from_data(data: Any, dtype: Any = None, device: Any = None) -> ComplexTensor:
    """Complex data (a complex numpy array, Python complex numbers, nested lists of them) or real data with a complex
    `dtype`, as a ComplexTensor. Lists of Python numbers give complex64, as torch's default."""
    cdt = complex_dtype_of(dtype) if dtype is not None else None
    if dtype is not None and cdt is None:
        raise DTypeError(f"tensor: complex data can't be stored as the real dtype {dtype}; take .real or .abs() after")
    if isinstance(data, ComplexTensor):
        return data.to(dtype=cdt) if cdt is not None else data
    if not isinstance(data, np.ndarray):
        data = np.asarray(data, dtype=np.complex64 if cdt is None or cdt.real == dtypes.float32 else np.complex128)
    return from_complex_numpy(data, device, cdt)


# the constructors that make a complex tensor of a complex dtype (zeros, ones and the _like forms go through full or
# empty; rand_like/randn_like through rand/randn)
_COMPLEX_CONSTRUCTORS = frozenset(("full", "empty", "eye", "rand", "randn"))


class ComplexMixin:
    __slots__ = ()

    @staticmethod
    def complex(real: Tensor, imag: Tensor) -> ComplexTensor:
        """torch.complex: the complex tensor real + i imag of two float tensors of one dtype (float32 gives complex64,
        float64 complex128), broadcast to one shape; gradients flow back to both.

        >>> Tensor.complex(Tensor([1.0]), Tensor([2.0])).tolist()
        [(1+2j)]
        """
        if not all(hasattr(t, "uop") for t in (real, imag)):
            raise TypeError(f"complex: expects two real tensors, got {type(real).__name__} and {type(imag).__name__}")
        if real.dtype != imag.dtype or real.dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(
                f"complex: real and imag must both be float32 or both float64, got {real.dtype} and {imag.dtype} "
                "(cast them first; float16 parts, torch's complex32, aren't supported)"
            )
        shape = tuple(int(n) for n in np.broadcast_shapes(real.shape, imag.shape))
        return ComplexTensor(real.expand(shape), imag.expand(shape))

    @staticmethod
    def polar(abs: Tensor, angle: Tensor) -> ComplexTensor:  # noqa: A002
        """torch.polar: abs * (cos(angle) + i sin(angle)), a complex tensor (abs and angle float, of one dtype).

        >>> Tensor.polar(Tensor([2.0]), Tensor([0.0])).tolist()
        [(2+0j)]
        """
        return polar_parts(abs, angle)

    @staticmethod
    def view_as_complex(x: Tensor) -> ComplexTensor:
        """torch.view_as_complex: a float32 or float64 tensor whose last dim has size 2 (real, imaginary) as a complex
        tensor of the other dims (here its parts are views of x, so gradients flow back to x).

        >>> Tensor.view_as_complex(Tensor([[1.0, 2.0]])).tolist()
        [(1+2j)]
        """
        if x.ndim == 0 or x.shape[-1] != 2:
            raise ShapeError(f"view_as_complex: the last dim must have size 2 (real, imaginary), got shape {x.shape}")
        if x.dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(f"view_as_complex: expects a float32 or float64 tensor, got {x.dtype}")
        return ComplexTensor(x[..., 0], x[..., 1])

    @staticmethod
    def view_as_real(z: ComplexTensor) -> Tensor:
        """torch.view_as_real: a complex tensor as a real one with a last dim of 2 (real, imaginary); here a new
        tensor stacked from the parts (gradients flow back to z).

        >>> Tensor.view_as_real(Tensor.complex(Tensor([1.0]), Tensor([2.0]))).tolist()
        [[1.0, 2.0]]
        """
        if not isinstance(z, ComplexTensor):
            raise TypeError(f"view_as_real: expects a complex tensor, got {getattr(z, 'dtype', type(z).__name__)}")
        return z.real.stack(z.imag, dim=-1)

    @staticmethod
    def _complex_created(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], request: Exception) -> Any:
        # a constructor (fn, unwrapped) called with a complex dtype, or `full` with a complex fill and no dtype (it
        # raised dtype.ComplexDTypeRequest): the ComplexTensor torch makes, each part made by fn with the part dtype
        name, cdt = fn.__name__, request.cdt  # type: ignore[attr-defined]
        if name not in _COMPLEX_CONSTRUCTORS:
            raise request
        if name == "full" and kwargs.get("dtype") is None:
            cdt = complex_dtype_for(dtypes.default_float)  # a complex fill: complex64, as torch's default
        kwargs = {**kwargs, "dtype": cdt.real}
        if name == "full":
            bound = inspect.signature(fn).bind(*args, **kwargs)
            shape, fill = bound.arguments["shape"], bound.arguments["fill_value"]
            if isinstance(fill, (np.complexfloating, np.floating, np.integer, np.bool_)):
                fill = fill.item()
            kw = bound.arguments.get("kwargs", {})
            c = complex(fill)
            return ComplexTensor(fn(shape, c.real, **kw), fn(shape, c.imag, **kw))
        re, im = fn(*args, **kwargs), fn(*args, **kwargs)
        if name == "randn":  # each part N(0, 1/2): E|z|^2 = 1, as torch's complex randn
            return ComplexTensor(re * math.sqrt(0.5), im * math.sqrt(0.5))
        return ComplexTensor(re, re.zeros_like() if name == "eye" else im)

    def cfloat(self: Tensor) -> ComplexTensor:  # type: ignore[misc]
        """This real tensor as complex64 (imaginary part 0).

        >>> Tensor([1.0]).cfloat().dtype
        dtypes.complex64
        """
        return as_complex(self, dtypes.complex64)  # type: ignore[attr-defined]

    def cdouble(self: Tensor) -> ComplexTensor:  # type: ignore[misc]
        """This real tensor as complex128 (imaginary part 0).

        >>> Tensor([1.0]).cdouble().dtype
        dtypes.complex128
        """
        return as_complex(self, dtypes.complex128)  # type: ignore[attr-defined]


__all__ = ["ComplexMixin", "as_complex", "complex_from_data", "complex_real_dtype", "to_complex"]

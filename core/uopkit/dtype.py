"""Data types: scalar, vector and pointer dtypes, and tinygrad-style type promotion."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Final


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar type; `vec(n)` and `ptr()` derive vector and pointer types from it.

    Every dtype is made once (the scalars below, each `vec(n)` and `ptr(...)` of one remembered by it): equal dtypes are
    the same object, so equality and hashing are by identity, in C (every UOp built hashes its dtype; rules compare
    them all the time). Copies and pickles come back as that same object."""

    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int = 1

    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def __reduce__(self) -> tuple:
        return _scalar_named, (self.name,)

    def __repr__(self) -> str:
        # as written in code: dtypes.bfloat16, not its C name __bf16 (no such attribute)
        return f"dtypes.{_REPR_NAMES.get(self.name, self.name)}"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (
            other.priority,
            other.itemsize,
            other.name,
            other.count,
        )

    @property
    def base(self) -> DType:
        return self

    @property
    def scalar(self) -> DType:
        return self

    @property
    def vcount(self) -> int:
        return self.count

    # torch.dtype's questions, so `if x.dtype.is_floating_point:` reads as in a PyTorch program
    @property
    def is_floating_point(self) -> bool:
        """Whether this is a float dtype, as torch.dtype's (float16, bfloat16, float32, float64, the float8s)."""
        return dtypes.is_float(self)

    @property
    def is_signed(self) -> bool:
        """Whether this dtype holds negative numbers, as torch.dtype's (floats and signed ints; not bool or uints)."""
        return dtypes.is_float(self) or (dtypes.is_int(self) and not dtypes.is_unsigned(self))

    @property
    def is_complex(self) -> bool:
        """False: every DType is real, as torch.dtype's for a real dtype (the complex dtypes are `ComplexDType`s)."""
        return False

    def vec(self, count: int) -> DType:
        if count == 1:
            return self
        # (setdefault: threads making the same dtype at once all get the one stored first)
        made = self.__dict__.setdefault("_made", {})
        ret = made.get(("vec", count))
        if ret is None:
            vec = VecDType(self.priority, self.itemsize * count, f"{self.name}{count}", None, count, self)
            ret = made.setdefault(("vec", count), vec)
        return ret  # type: ignore[no-any-return]

    def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
        made = self.__dict__.setdefault("_made", {})
        ret = made.get(("ptr", size, local))
        if ret is None:
            ptr = PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self, size, local)
            ret = made.setdefault(("ptr", size, local), ptr)
        return ret  # type: ignore[no-any-return]


@dataclass(frozen=True, eq=False)
class VecDType(DType):
    _scalar: DType | None = None

    @property
    def scalar(self) -> DType:
        assert self._scalar is not None
        return self._scalar

    def __repr__(self) -> str:
        return f"{self.scalar!r}.vec({self.count})"

    def __reduce__(self) -> tuple:
        return DType.vec, (self.scalar, self.count)


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    _base: DType | None = None
    size: int = -1
    local: bool = False

    @property
    def base(self) -> DType:
        assert self._base is not None
        return self._base

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})"

    def __reduce__(self) -> tuple:
        return DType.ptr, (self.base, self.size, self.local)


_SCALARS: dict[str, DType] = {}
# scalar names that aren't attributes of `dtypes`
_REPR_NAMES = {"__bf16": "bfloat16"}


def _scalar(priority: int, itemsize: int, name: str, fmt: str | None) -> DType:
    dt = _SCALARS[name] = DType(priority, itemsize, name, fmt)
    return dt


def _scalar_named(name: str) -> DType:
    return _SCALARS[name]


def dtype_from_fields(cls: type[DType], **fields: Any) -> DType:
    """The dtype of class `cls` with these dataclass fields (a deserialized one; its scalar or base already one): the
    one object made for it."""
    if cls is VecDType:
        made = fields["_scalar"].vec(fields["count"])
    elif cls is PtrDType:
        made = fields["_base"].ptr(fields["size"], fields["local"])
    else:
        made = _SCALARS[fields["name"]]
    if type(made) is not cls or any(getattr(made, k) != v for k, v in fields.items()):
        raise ValueError(f"no dtype {cls.__name__}({fields})")
    return made


# the integer type of index arithmetic (loop counters, thread ids, addresses) in the kernel being compiled: 32 bits
# unless the kernel's buffers, views or loops can exceed them (codegen picks it per kernel, see `index_dtype`)
_index_dtype: ContextVar[DType] = ContextVar("index_dtype")


class _DtypesMeta(type):
    @property
    def index(cls) -> DType:
        return _index_dtype.get(dtypes.int32)


@contextlib.contextmanager
def index_dtype(dt: DType) -> Iterator[None]:
    """Make `dtypes.index` (the type of index arithmetic the code built inside creates) `dt`: int32 or int64."""
    if dt not in INDEX_DTYPES:
        raise ValueError(f"index arithmetic is int32 or int64, not {dt}")
    token = _index_dtype.set(dt)
    try:
        yield
    finally:
        _index_dtype.reset(token)


class dtypes(metaclass=_DtypesMeta):
    """Namespace of every dtype and helpers to classify them."""

    void: Final = _scalar(-1, 0, "void", None)
    bool: Final = _scalar(0, 1, "bool", "?")
    int8: Final = _scalar(1, 1, "char", "b")
    uint8: Final = _scalar(2, 1, "uchar", "B")
    int16: Final = _scalar(3, 2, "short", "h")
    uint16: Final = _scalar(4, 2, "ushort", "H")
    int32: Final = _scalar(5, 4, "int", "i")
    uint32: Final = _scalar(6, 4, "uint", "I")
    int64: Final = _scalar(7, 8, "long", "q")
    uint64: Final = _scalar(8, 8, "ulong", "Q")
    float16: Final = _scalar(11, 2, "half", "e")
    bfloat16: Final = _scalar(12, 2, "__bf16", None)
    float32: Final = _scalar(13, 4, "float", "f")
    float64: Final = _scalar(14, 8, "double", "d")
    # tinygrad-style aliases
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64
    default_float: DType = float32
    default_int: DType = int32
    # groups, filled in below the class (they list the members above)
    sints: ClassVar[tuple[DType, ...]]
    uints: ClassVar[tuple[DType, ...]]
    ints: ClassVar[tuple[DType, ...]]
    floats: ClassVar[tuple[DType, ...]]
    halves: ClassVar[tuple[DType, ...]]
    all: ClassVar[tuple[DType, ...]]

    @staticmethod
    def is_float(x: DType) -> bool:
        # (sets: one hash instead of an equality test per member; every Tensor op asks)
        return x.scalar in _FLOATS

    @staticmethod
    def is_int(x: DType) -> bool:
        return x.scalar in _INTS

    @staticmethod
    def is_unsigned(x: DType) -> bool:
        return x.scalar in _UINTS

    @staticmethod
    def is_bool(x: DType) -> bool:
        return x.scalar == dtypes.bool

    @staticmethod
    def positions(n: int) -> DType:
        """The dtype of index results along an axis of `n` elements (argmax, sort, topk, nonzero, ...): int32, or
        int64 once the axis reaches 2**31 (an int32 index would wrap negative; `n` itself serves as a sentinel)."""
        return dtypes.int32 if n <= dtypes.max(dtypes.int32) else dtypes.int64

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype a Python value (or nested list of them) gets by default."""
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            # an int the default int can't hold is int64 (as numpy picks), not wrapped
            return (
                dtypes.default_int
                if dtypes.min(dtypes.default_int) <= x <= dtypes.max(dtypes.default_int)
                else dtypes.int64
            )
        if isinstance(x, (list, tuple)):
            kinds = set(map(type, x))
            if kinds <= {bool, int, float}:
                # a flat list of plain numbers (the common, possibly huge, case) in a few passes over it
                if float in kinds:
                    return dtypes.default_float
                if int in kinds:
                    fits = dtypes.min(dtypes.default_int) <= min(x) and max(x) <= dtypes.max(dtypes.default_int)
                    return dtypes.default_int if fits else dtypes.int64
                return dtypes.bool if kinds else dtypes.default_float
            return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
        if isinstance(x, complex):
            raise ComplexDTypeRequest(
                f"cannot infer a dtype for {x!r}: Tensor(...) holds real values only; complex data makes a "
                "ComplexTensor through Tensor.tensor(data) or Tensor.complex(real, imag)",
                complex_dtype_for(dtypes.default_float),
            )
        raise TypeError(f"cannot infer a dtype for {x!r} of type {type(x).__name__}")

    @staticmethod
    def min(dt: DType) -> int | float | bool:
        dt = dt.scalar
        if dt == dtypes.bool:
            return False
        if dtypes.is_int(dt):
            return 0 if dtypes.is_unsigned(dt) else -(2 ** (8 * dt.itemsize - 1))
        return -math.inf

    @staticmethod
    def max(dt: DType) -> int | float | bool:
        dt = dt.scalar
        if dt == dtypes.bool:
            return True
        if dtypes.is_int(dt):
            return 2 ** (8 * dt.itemsize) - 1 if dtypes.is_unsigned(dt) else 2 ** (8 * dt.itemsize - 1) - 1
        return math.inf


dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.ints = dtypes.uints + dtypes.sints
dtypes.floats = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
# the half floats, which PyTorch computes in float32 (its math type for them)
dtypes.halves = (dtypes.float16, dtypes.bfloat16)
dtypes.all = (dtypes.bool, *dtypes.ints, *dtypes.floats)
# the same as sets: is_int and friends run for nearly every UOp simplified, and a tuple's `in` compares each member
_INTS, _UINTS, _FLOATS = frozenset(dtypes.ints), frozenset(dtypes.uints), frozenset(dtypes.floats)
# the types index arithmetic can have (`dtypes.index` is one of them, chosen per kernel)
INDEX_DTYPES = (dtypes.int32, dtypes.int64)

DTYPES_BY_NAME: dict[str, DType] = {
    name: getattr(dtypes, name)
    for name in (
        "bool int8 uint8 int16 uint16 int32 uint32 int64 uint64 float16 bfloat16 float32 float64 "
        "half float double char uchar short ushort int uint long ulong"
    ).split()
}

# Promotion lattice (as in tinygrad / JAX): a dtype promotes to its parents; the result of mixing two
# dtypes is the least upper bound of both.
_PROMO_PARENTS: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _upper_bounds(dt: DType) -> frozenset[DType]:
    return frozenset({dt}).union(*(_upper_bounds(p) for p in _PROMO_PARENTS[dt]))


# (remembered: every binary Tensor op of two tensors asks, and dtypes are few)
class DTypeError(TypeError, RuntimeError):
    """An op a dtype doesn't have (bitwise ops of floats; PyTorch raises NotImplementedError, a RuntimeError), or two
    dtypes that don't promote (uint64 with a signed int): a TypeError, and PyTorch's RuntimeError."""


class ComplexDTypeRequest(ValueError, TypeError):
    """A complex dtype (or complex data) where a real tensor was being built. The creation functions (`Tensor.zeros`,
    `full`, `randn`, ...) catch it and build a ComplexTensor instead, so their real path checks nothing; anywhere else
    it is the ValueError (an unknown dtype) or TypeError (complex data) it replaces. `cdt` is the complex dtype."""

    def __init__(self, message: str, cdt: object) -> None:
        super().__init__(message)
        self.cdt = cdt


class UnsupportedDTypeError(DTypeError, NotImplementedError):
    """A dtype an op has no kernel for, where PyTorch raises NotImplementedError ('"gcd_cpu" not implemented for
    'Float'') rather than a plain RuntimeError: caught as either, or as a TypeError."""


class ValueOverflowError(OverflowError, ValueError, RuntimeError):
    """A number a tensor's dtype can't hold, stored into it (`Tensor(300, dtype=uint8)`, `full`, `fill_`, `clamp`'s
    bounds, `where`, setitem): an OverflowError, as numpy's, and the RuntimeError PyTorch raises there (a ValueError
    for an int past int64), so code written for either catches it."""


@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to. Integers that no integer dtype holds together (uint64 with a
    signed int) raise a DTypeError (PyTorch's RuntimeError): the lattice's answer, float16, would lose or overflow
    their values (PyTorch doesn't promote uint64 either)."""
    common = min(frozenset.intersection(*(_upper_bounds(d.scalar) for d in ds)))
    if not dtypes.is_int(common) and all(dtypes.is_int(d.scalar) for d in ds):
        names = " and ".join(sorted({str(d.scalar) for d in ds}))
        raise DTypeError(
            f"no integer dtype holds the values of both {names}; cast one of them first (.cast(dtypes.int64) if the "
            "values fit, or .double())"
        )
    return common


def least_upper_float(dt: DType) -> DType:
    """`dt` if it is a float, else the default float (used by exp, sqrt, division, ...)."""
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def _is_torch_dtype(x: object) -> bool:
    # a torch.dtype, told without importing torch: str(torch.float16) is "torch.float16"
    return type(x).__name__ == "dtype" and type(x).__module__ == "torch"


def is_dtype_like(x: object) -> bool:
    """Whether `to_dtype` takes `x` as a dtype: a DType, a dtype's name, Python's bool, int or float, a torch.dtype, a
    Tensor cast method named as a torch dtype (`Tensor.long`)."""
    if isinstance(x, DType) or x is bool or x is int or x is float:
        return True
    if callable(x) and isinstance(getattr(x, "as_dtype", None), DType):
        return True
    return (isinstance(x, str) and x in DTYPES_BY_NAME) or _is_torch_dtype(x)


def to_dtype(x: DType | str | type | object) -> DType:
    """A DType from a DType, its name ("float16", "half"), a Python type as torch takes one (bool; int: the default int,
    int32, where torch's is int64; float: float64, as torch's and numpy's) or a torch.dtype (torch.float16)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES_BY_NAME:
        return DTYPES_BY_NAME[x]
    if x is bool:
        return dtypes.bool
    if x is int:
        return dtypes.default_int
    if x is float:
        return dtypes.float64
    if callable(x) and isinstance(getattr(x, "as_dtype", None), DType):
        # Tensor's cast methods named as torch's dtypes: `dtype=Tensor.long`, a port of `dtype=torch.long`
        return x.as_dtype  # type: ignore[attr-defined]
    if _is_torch_dtype(x):
        name = str(x).removeprefix("torch.")
        if name in DTYPES_BY_NAME:
            return DTYPES_BY_NAME[name]
    if (cdt := complex_dtype_of(x)) is not None:
        # (the creation functions catch this one and build a ComplexTensor)
        raise ComplexDTypeRequest(
            f"{cdt} is a complex dtype: a real tensor can't have it (Tensor.zeros/ones/full/empty/rand/randn/eye and "
            "their _like forms, Tensor.tensor, .to() and Tensor.complex make complex tensors)",
            cdt,
        )
    if _is_torch_dtype(x):
        raise ValueError(f"{x} has no uopkit dtype; known: {', '.join(sorted(DTYPES_BY_NAME))}")
    raise ValueError(f"unknown dtype {x!r}; known: {', '.join(sorted(DTYPES_BY_NAME))}")


def to_numpy_dtype(dt: DType):  # noqa: ANN201 - numpy is imported lazily
    import numpy as np

    if dt == dtypes.bfloat16:
        raise TypeError("numpy has no bfloat16; cast to float32 first")
    return np.dtype(dt.fmt)


def from_numpy_dtype(npdt) -> DType:  # noqa: ANN001
    import numpy as np

    npdt = np.dtype(npdt)
    for dt in dtypes.all:
        if dt.fmt is not None and np.dtype(dt.fmt) == npdt:
            return dt
    if npdt.kind == "c":
        raise ComplexDTypeRequest(
            f"numpy dtype {npdt}: Tensor(...) holds real values only; complex data makes a ComplexTensor through "
            "Tensor.tensor(data), Tensor.from_numpy(array) or Tensor.complex(real, imag)",
            complex_dtype_of(npdt),
        )
    raise TypeError(f"numpy dtype {npdt} has no uopkit dtype")


# (exponent bits, stored mantissa bits) of each float dtype's format, from which finfo's numbers follow
_FLOAT_FORMATS: dict[DType, tuple[int, int]] = {
    dtypes.float16: (5, 10),
    dtypes.bfloat16: (8, 7),
    dtypes.float32: (8, 23),
    dtypes.float64: (11, 52),
}


def _torch_name(dt: DType) -> str:
    # torch's name of a dtype, as its finfo and iinfo show it (float16, not uopkit's C name half)
    if dt == dtypes.bfloat16:
        return "bfloat16"
    kind = "float" if dtypes.is_float(dt) else "uint" if dtypes.is_unsigned(dt) else "int"
    return f"{kind}{8 * dt.itemsize}"


class finfo:
    """The numbers of a float dtype, as torch.finfo: bits, eps (the gap from 1 to the next float), max and min (the
    largest finite ones), tiny and smallest_normal (the smallest positive normal), resolution (10 ** -digits, the
    decimal precision) and dtype (its name). No dtype: the default float's.

    >>> finfo(dtypes.float16).max, finfo(dtypes.bfloat16).eps
    (65504.0, 0.0078125)
    """

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")

    def __init__(self, dtype: DType | str | None = None) -> None:
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        if dt not in _FLOAT_FORMATS:
            raise TypeError(f"finfo: needs a float dtype, got {dt}; use iinfo for an integer dtype")
        exponent_bits, mantissa_bits = _FLOAT_FORMATS[dt]
        bias = 2 ** (exponent_bits - 1) - 1
        self.bits = 8 * dt.itemsize
        self.eps = 2.0**-mantissa_bits
        self.max = (2 - self.eps) * 2.0**bias
        self.min = -self.max
        self.tiny = self.smallest_normal = 2.0 ** (1 - bias)
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))
        self.dtype = _torch_name(dt)

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
            f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})"
        )


class iinfo:
    """The range of an integer dtype, as torch.iinfo: bits, min, max and dtype (its name).

    >>> iinfo(dtypes.int8).min, iinfo(dtypes.uint16).max
    (-128, 65535)
    """

    __slots__ = ("bits", "min", "max", "dtype")

    def __init__(self, dtype: DType | str) -> None:
        dt = to_dtype(dtype)
        if not dtypes.is_int(dt):
            raise TypeError(f"iinfo: needs an integer dtype (bool isn't one, as torch's), got {dt}; finfo for a float")
        self.bits = 8 * dt.itemsize
        self.min, self.max = int(dtypes.min(dt)), int(dtypes.max(dt))
        self.dtype = _torch_name(dt)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


@dataclass(frozen=True, eq=False)
class ComplexDType:
    """A complex dtype (`dtypes.complex64`, `dtypes.complex128`): the dtype of a `ComplexTensor`, whose real and
    imaginary parts are two real tensors of dtype `real` (float32, float64). It is no `DType`: no kernel computes in
    it, and it takes no part in the real dtypes' promotion or tables (`dtypes.all`).

    >>> dtypes.complex64.is_complex, dtypes.complex64.itemsize, dtypes.cfloat.to_real()
    (True, 8, dtypes.float)
    """

    name: str
    real: DType

    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def __reduce__(self) -> tuple:
        return _complex_named, (self.name,)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    @property
    def itemsize(self) -> int:
        """Bytes per element: both parts (8 for complex64, 16 for complex128)."""
        return 2 * self.real.itemsize

    @property
    def is_complex(self) -> bool:
        """True, as torch.dtype's for a complex dtype."""
        return True

    @property
    def is_floating_point(self) -> bool:
        """False, as torch.dtype's for a complex dtype."""
        return False

    @property
    def is_signed(self) -> bool:
        """True, as torch.dtype's for a complex dtype."""
        return True

    def to_real(self) -> DType:
        """The dtype of each part (torch.dtype.to_real): float32 for complex64, float64 for complex128."""
        return self.real

    def to_complex(self) -> ComplexDType:
        """This dtype itself (torch.dtype.to_complex)."""
        return self


def _complex_named(name: str) -> ComplexDType:
    return COMPLEX_DTYPES[name]


dtypes.complex64 = dtypes.cfloat = ComplexDType("complex64", dtypes.float32)  # type: ignore[attr-defined]
dtypes.complex128 = dtypes.cdouble = ComplexDType("complex128", dtypes.float64)  # type: ignore[attr-defined]
# name (uopkit's and torch's) -> the complex dtype
COMPLEX_DTYPES: dict[str, ComplexDType] = {
    "complex64": dtypes.complex64,  # type: ignore[attr-defined]
    "cfloat": dtypes.complex64,  # type: ignore[attr-defined]
    "complex128": dtypes.complex128,  # type: ignore[attr-defined]
    "cdouble": dtypes.complex128,  # type: ignore[attr-defined]
}


def complex_dtype_of(x: object) -> ComplexDType | None:
    """The complex dtype `x` names (a ComplexDType, its name, Python's `complex` (complex128, as torch's), a torch or
    numpy complex dtype), or None when `x` names none."""
    if isinstance(x, ComplexDType):
        return x
    if x is complex:
        return COMPLEX_DTYPES["complex128"]
    if isinstance(x, str):
        return COMPLEX_DTYPES.get(x.removeprefix("torch."))
    if _is_torch_dtype(x):
        return COMPLEX_DTYPES.get(str(x).removeprefix("torch."))
    if isinstance(x, type):
        # numpy's scalar types (np.complex64)
        return COMPLEX_DTYPES.get(x.__name__) if x.__module__ == "numpy" else None
    if callable(x) and isinstance(as_dtype := getattr(x, "as_dtype", None), ComplexDType):
        # (the cast method `Tensor.cfloat` stands for its dtype, as `Tensor.long` does: a port's `dtype=torch.cfloat`)
        return as_dtype
    name = getattr(x, "name", None)
    return COMPLEX_DTYPES.get(name) if type(x).__module__.startswith("numpy") and isinstance(name, str) else None


def complex_dtype_for(real: DType) -> ComplexDType:
    """The complex dtype whose parts are `real`: complex128 for float64, else complex64."""
    return COMPLEX_DTYPES["complex128" if real == dtypes.float64 else "complex64"]

"""Elementwise arithmetic, comparisons, casts and logic, with broadcasting and dtype promotion (a mixin of `Tensor`)."""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import (
    DType,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    to_dtype,
)
from uopkit.tensor import segments
from uopkit.tensor.bits_gradients import set_cast_gradient
from uopkit.tensor.division import (
    _floor_division,
    _half_floor_division,
    _remainder_in_range,
    _truncated_division,
    _with_quotient_gradient,
    refuse_zero_divisor,
    remainder_against_divisor,
)
from uopkit.tensor.index_errors import described
from uopkit.tensor.replay import replayed
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    UnsupportedDTypeError,
    _broadcast_shape,
    _cast_py,
    _check_same_device,
    _check_stored_scalar,
    _dim_for_axis,
    _int_joining,
    _largest_finite,
    _py_number,
    _short_int,
    _storage_uop,
    binary_alu_method,
    cast_method,
    operator_method,
)
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# module constants for the ops every binary op builds (on Python 3.11 an `Ops.X` is a slow EnumType lookup, ~0.15 us)
_CONST, _DEVICE, _RESHAPE, _EXPAND, _CAST, _WHERE, _ADD, _NEG = (
    Ops.CONST,
    Ops.DEVICE,
    Ops.RESHAPE,
    Ops.EXPAND,
    Ops.CAST,
    Ops.WHERE,
    Ops.ADD,
    Ops.NEG,
)

# the broadcast nodes of recent Python numbers (`a + 1`, `0.9 * m`), by (dtype, device, shape, number): holding them
# keeps the hash-consed nodes alive between uses, so the next `a + 1` finds them instead of building and freeing four
# nodes each time (a tiny op or an optimizer step, once per call)
_recent_scalars: dict[tuple, UOp] = {}


class _ComplexOperand(DTypeError):
    """A ComplexTensor as the other operand of a real tensor's binary op (`window * Z`): `_broadcasted` raises it, add,
    sub, mul and div catch it and answer with the complex tensor's op (`Z._with_real`), so the real path checks
    nothing; any other op lets it out as the error it is (a TypeError and RuntimeError, as torch's)."""

    def __init__(self, message: str, z: Any) -> None:
        super().__init__(message)
        self.z = z


def _scaled_in_float32(x: Tensor, y: Any) -> bool:
    """Whether x * y or x / y runs in float32: x a half float and y a Python number it doesn't hold. PyTorch's CPU
    multiplies and divides by such a number in float32 and rounds once (x * 0.1 isn't x * float16(0.1)); its add,
    sub and comparisons take the number rounded to the half float, as the op in the tensor's dtype does. A numpy
    scalar counts as the Python number (`x * np.sqrt(768)` is `x * 27.71...`)."""
    if x.dtype not in dtypes.halves:
        return False
    if type(y) not in (float, int):
        y = _py_number(y)
    return type(y) in (float, int) and _inexact_in_half(y, x.dtype)


def _zero_dim_scale(x: Tensor, y: Any, reverse: bool) -> bool:
    """Whether x * y or x / y runs in float32 because y is a 0-d tensor of another dtype to the right of a half float
    tensor x that keeps x's dtype: PyTorch's CPU kernels take such a 0-d divisor or factor as a number, unrounded (a
    bfloat16 x times a float32 0-d scale is x * scale in float32, rounded once). On the left (`scale * x`) and in
    every other op it is rounded to x's dtype, as the dtype promotion has it."""
    return (
        not reverse
        and x.dtype in dtypes.halves
        and isinstance(y, Tensor)
        and y.ndim == 0
        and y.dtype is not x.dtype
        and x.ndim > 0
        and _operands_dtype(x, y) is x.dtype
    )


@functools.lru_cache(maxsize=256)
def _inexact_in_half(y: float | int, dt: DType) -> bool:
    with np.errstate(over="ignore"):
        if dt == dtypes.float16:
            return float(np.float16(y)) != y
        single = np.float32(y)
    return float(single) != y or bool(single.view(np.uint32) & 0xFFFF)


_RECENT_SCALARS_SIZE = 512


def _scalar_uop(y: float | int, dt: DType, device: str, shape: tuple[int, ...]) -> UOp:
    """A Python number (of the dtype `dt` it takes next to a tensor) broadcast to `shape`: the nodes of
    Tensor(y).expand(shape), built directly (`a + 1`)."""
    # (a zero by its text: 0.0 and -0.0 are equal keys but other constants)
    key = (dt, device, shape, type(y), y if y else repr(y))
    c = _recent_scalars.get(key)
    if c is None:
        c = UOp(_CONST, dt, (UOp(_DEVICE, arg=device),), _cast_py(y, dt))
        if shape:
            c = UOp(_RESHAPE, dt, (c,), (1,) * len(shape))
            if c.arg != shape:
                c = UOp(_EXPAND, dt, (c,), shape)
        # (not NaNs, which never equal their key)
        if y == y:
            if len(_recent_scalars) >= _RECENT_SCALARS_SIZE:
                _recent_scalars.pop(next(iter(_recent_scalars)), None)
            _recent_scalars[key] = c
    return c


_MAX_DOC = "Elementwise maximum (NaN wins, as in numpy)."


def _operands_dtype(x: Tensor, y: Tensor) -> DType:
    """The dtype two tensors compute in, by PyTorch's rule: a 0-d tensor beside a tensor with dimensions counts only by
    its kind (bool < int < float), as a Python number does (`half_t * Tensor(0.5)` stays float16, `int8_t + Tensor(3)`
    int8, `int_t + Tensor(1.5)` promotes)."""
    if (x.ndim == 0) == (y.ndim == 0):
        return least_upper_dtype(x.dtype, y.dtype)
    dim, zero = (y.dtype, x.dtype) if x.ndim == 0 else (x.dtype, y.dtype)
    if dtypes.is_float(dim) or (dim != dtypes.bool and not dtypes.is_float(zero)):
        return dim
    return least_upper_dtype(dim, zero)


def _scalar_in_dtype(value: Any, dt: DType, device: str) -> Tensor:
    # a Python number converted as torch stores it into a `dt` tensor: truncated to an int, wrapped into its bits
    if dtypes.is_float(dt):
        return Tensor(float(value), device=device, dtype=dt)
    if dt == dtypes.bool:
        return Tensor(bool(value), device=device, dtype=dt)
    v, bits = int(value), dt.itemsize * 8
    v %= 2**bits
    if not dtypes.is_unsigned(dt) and v >= 2 ** (bits - 1):
        v -= 2**bits
    return Tensor(v, device=device, dtype=dt)


def _number_first(number: Any, t: Any, op: str) -> Tensor:
    # torch.add(2.0, t), torch.sub(1, t): the number in the dtype it takes beside t; beside a number, a 0-d tensor
    if isinstance(t, ElementwiseMixin):
        return t._const_operand(_py_number(number), op)
    if isinstance(number, (bool, int, float)) and isinstance(t, (bool, int, float)):
        return Tensor(number)
    raise TypeError(f"{op}: needs a Tensor operand, got {type(number).__name__} and {type(t).__name__}")


def _alpha_first(op: str, alpha: Any, other: Any, keyword_alpha: Any = 1) -> tuple[Any, Any]:
    """(other, alpha) for torch's deprecated `add(alpha, other)` and `sub(alpha, other)` (older optimizers'
    `p.data.add_(-lr, d_p)`): a Python number first, then the tensor (or number) it scales."""
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or isinstance(other, bool):
        raise TypeError(
            f"{op}: the second positional argument is `reverse` (a bool), or, in torch's deprecated {op}(alpha, "
            f"other) form, the tensor a Python number alpha scales; got {type(alpha).__name__} and "
            f"{type(other).__name__} (write {op}(other, alpha=...))"
        )
    if type(keyword_alpha) is not int or keyword_alpha != 1:
        raise TypeError(f"{op}: alpha is given twice, as the first positional argument and as alpha=; give it once")
    _warn_number_first(op, f"{op}(alpha, other)", f"{op}(other, alpha=alpha)")
    return other, alpha


def _alpha_first_in_place(op: str, alpha: Any, rest: tuple, keyword_alpha: Any) -> tuple[Any, Any]:
    """(other, alpha) of torch's deprecated `add_(alpha, other)` / `sub_(alpha, other)`; any other second positional
    argument is refused, as torch's (alpha is keyword-only: `t.add_(g, 2.0)` is a TypeError)."""
    if len(rest) != 1 or not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        given = ", ".join(type(a).__name__ for a in (alpha, *rest))
        raise TypeError(
            f"{op}: takes one positional operand and alpha= as a keyword ({op}(other, alpha=a)), or, in torch's "
            f"deprecated form, {op}(alpha, other) with a Python number first; got {1 + len(rest)} positional "
            f"arguments ({given})"
        )
    return _alpha_first(op, alpha, rest[0], keyword_alpha)


# the ops whose deprecated number-first form has been warned about (once each, as torch warns once)
_WARNED_NUMBER_FIRST: set[str] = set()


def _warn_number_first(op: str, form: str, instead: str) -> None:
    # torch's deprecated number-first overloads still work, with a UserWarning the first time
    if op not in _WARNED_NUMBER_FIRST:
        _WARNED_NUMBER_FIRST.add(op)
        warnings.warn(
            f"{op}: the number-first form {form} is deprecated (as in PyTorch); write {instead}",
            UserWarning,
            stacklevel=4,
        )


def _value_first(op: str, tensor1: Any, tensor2: Any, rest: tuple, value: Any) -> tuple[Any, Any, Any]:
    """(tensor1, tensor2, value) of torch's deprecated `addcmul(value, tensor1, tensor2)` (and addcdiv's): a Python
    number first, then the two tensors. `value` is keyword-only in the current form, as torch's."""
    number = isinstance(tensor1, (int, float, np.number)) and not isinstance(tensor1, bool)
    if len(rest) != 1 or not number or not isinstance(tensor2, ElementwiseMixin):
        raise TypeError(
            f"{op}: takes two positional tensors and value= as a keyword ({op}(tensor1, tensor2, value=v)), or, in "
            f"torch's deprecated form, {op}(value, tensor1, tensor2) with a Python number first; got "
            f"{2 + len(rest)} positional arguments ({', '.join(type(a).__name__ for a in (tensor1, tensor2, *rest))})"
        )
    if type(value) is not int or value != 1:
        raise TypeError(f"{op}: value is given twice, as the first positional argument and as value=; give it once")
    _warn_number_first(op, f"{op}(value, tensor1, tensor2)", f"{op}(tensor1, tensor2, value=value)")
    return tensor2, rest[0], tensor1


def _scaled_operands(t: Tensor, x: Any, alpha: Any, op: str) -> tuple[Tensor, Tensor, DType]:
    """(t, alpha * x), broadcast, and the result's dtype, for torch's add/sub(other, alpha=): t and x promote as
    without alpha, and alpha is a number of their dtype, as torch's (checked as a stored value: an int dtype takes no
    float alpha nor one out of its range, only bool takes a bool alpha, and bool's alpha is its truth value). Half
    float dtypes come back in float32, for one rounding of the sum: the product of two halves is exact in float32."""
    alpha = _py_number(alpha)
    a, b = t._broadcasted(x, False, op)
    dt = a.dtype
    if isinstance(alpha, float) and not dtypes.is_float(dt):
        raise ArgumentError(f"{op}: a float alpha ({alpha}) needs a float operand; the operands are {dt}")
    if isinstance(alpha, bool) and dt != dtypes.bool:
        raise ArgumentError(f"{op}: a bool alpha is only for bool operands, got {dt}")
    if not isinstance(alpha, (bool, int, float)):
        raise TypeError(f"{op}: alpha must be a Python number, got {type(alpha).__name__}")
    _check_stored_scalar(alpha, dt, f"{op} (alpha)")
    if dtypes.is_float(dt) and dt not in dtypes.halves:
        # b * alpha as `b * scale` builds it (the scale's nodes broadcast, cached as `a + 1`'s), without its checks:
        # `p.add_(q, alpha=tau)` runs for every parameter, every step
        return a, b._alu(Ops.MUL, Tensor(_scalar_uop(float(alpha), dt, t.device, b.shape))), dt
    scale = _scalar_in_dtype(alpha, dt, t.device)
    if dt in dtypes.halves:
        return a.float(), b.float() * scale.float(), dt
    return a, b * scale, dt


def _addc_in_float32(t: Tensor, t1: Any, t2: Any, op: str) -> tuple[Tensor, Tensor, Tensor, DType] | None:
    """t, t1 and t2 broadcast and in float32, and the half float dtype they promote to, for addcmul/addcdiv with a
    value: torch computes those in float32 and rounds once. None for any other dtype."""
    a, b = t._broadcasted(t1, False, op)
    a, c = a._broadcasted(t2, False, op)
    if a.dtype not in dtypes.halves:
        return None
    # (t1 broadcast to the shape t2 may have grown)
    a, b = a._broadcasted(b, False, op)
    return a.float(), b.float(), c.float(), a.dtype


# where's x and y when left out (None can't stand for that: it is a value, an error there)
_NOT_GIVEN: Any = object()


def _where_parts(self: Any, x: Any, y: Any, condition: Any, input: Any, other: Any) -> tuple[Any, Any, Any]:  # noqa: A002
    # torch's keywords of where, by either form: torch.where(condition, input, other) and input.where(condition, other)
    cond, values, rest = (condition, self, x) if condition is not _NOT_GIVEN else (self, x, y)
    if condition is not _NOT_GIVEN and y is not _NOT_GIVEN:
        raise TypeError("where: with condition= give the values as self or input= and the other values as other=")
    for name, mine, torch_kw in (("condition", cond, _NOT_GIVEN), ("input", values, input), ("other", rest, other)):
        if mine is not _NOT_GIVEN and torch_kw is not _NOT_GIVEN:
            raise TypeError(f"where: got {name} twice, by position and as {name}=; give one")
    values = values if input is _NOT_GIVEN else input
    rest = rest if other is _NOT_GIVEN else other
    if cond is _NOT_GIVEN or values is _NOT_GIVEN or rest is _NOT_GIVEN:
        raise TypeError("where: needs condition, input and other, as torch.where(condition, input, other)")
    return cond, values, rest


class ElementwiseMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # elementwise

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        own = self.shape
        if own == shape:
            return self
        if len(shape) < len(own):
            raise ShapeError(f"can't broadcast {own} to {shape}")
        # the nodes of reshape(...).expand(shape), built directly: every binary op with a scalar or a bias comes here,
        # and the public methods' argument checks cost more than the nodes
        padded = (1,) * (len(shape) - len(own)) + own
        if any(c != n and c != 1 for c, n in zip(padded, shape, strict=True)):
            return self.reshape(padded).expand(shape)  # (raises the error expand gives)
        u = self.uop
        if padded != own:
            u = UOp(_RESHAPE, u.dtype, (u,), padded)
        if padded != shape:
            u = UOp(_EXPAND, u.dtype, (u,), tuple(shape))
        return Tensor(u)

    def _const_operand(self, y: Any, op: str = "op") -> Tensor:
        return Tensor(y, device=self.device, dtype=self._const_dtype(y, op))

    def _const_dtype(self, y: Any, op: str) -> DType:
        # a Python scalar takes the tensor's dtype unless its kind is "higher" (float into an int tensor)
        dt = self.dtype
        if isinstance(y, float) and not dtypes.is_float(self.dtype):
            dt = dtypes.default_float
        elif isinstance(y, int) and not isinstance(y, bool):
            dt = dtypes.default_int if self.dtype == dtypes.bool else self.dtype
            if dtypes.is_int(dt) and not dtypes.min(dt) <= y <= dtypes.max(dt):
                # the int would wrap in the tensor's dtype: compute in int64, which holds what torch's default int
                # tensors hold (torch itself wraps it into an int32 tensor silently)
                dt = dtypes.int64
            if not dtypes.is_float(dt) and not dtypes.min(dt) <= y <= dtypes.max(dt):
                raise OverflowError(
                    f"{op}: the Python int {_short_int(y)} doesn't fit any integer dtype (int64 at most)"
                )
            if dtypes.is_float(dt) and abs(y) >= 2**1024:
                raise OverflowError(f"{op}: the Python int {_short_int(y)} is too large for any float dtype")
        return dt

    def _broadcasted(
        self, y: Any, reverse: bool = False, op: str = "op", floats: bool = False
    ) -> tuple[Tensor, Tensor]:
        """(self, y) promoted to one dtype and broadcast to one shape. `floats`: for an op whose result is a float
        (true division, atan2): integer operands are converted each from its own dtype to the float they promote to,
        as torch's (a uint8 tensor over an int8 0-d -3 divides by -3.0, not by -3 wrapped into uint8's 253)."""
        x: Tensor = self
        if type(y) in (float, int):
            # a number seen lately with this dtype and shape: kept only when it takes the tensor's dtype (below)
            u = x.uop
            c = _recent_scalars.get((u.dtype, u.device, u.shape, type(y), y if y else repr(y)))
            if c is not None:
                return (Tensor(c), x) if reverse else (x, Tensor(c))
        if type(y) in (float, int) and x.dtype != dtypes.bfloat16 and (dt := x._const_dtype(y, op)) == x.dtype:
            c = _scalar_uop(y, dt, x.device, x.shape)
            return (Tensor(c), x) if reverse else (x, Tensor(c))
        if type(y) is Tensor and y.uop.dtype is x.uop.dtype and y.shape == x.shape and y.device == x.device:
            # (the common case, two tensors of one shape and dtype: nothing to promote or broadcast)
            return (y, x) if reverse else (x, y)
        # (a number's dtype is picked by `_const_dtype` already; only tensors and arrays promote by kind and dims)
        number = False
        if not isinstance(y, Tensor):
            if isinstance(y, (np.ndarray, list, tuple)):
                y = Tensor(y, device=x.device)
            elif isinstance(y, (np.integer, np.floating, np.bool_)):
                # a numpy scalar is the Python number, and takes its path (docs/semantics.md)
                return x._broadcasted(y.item(), reverse, op, floats)
            elif isinstance(y, (bool, int, float)):
                y = x._const_operand(y, op)
                number = True
            elif type(y).__name__ == "ComplexTensor":
                # (add, sub, mul and div catch it and answer with the complex tensor's op; other ops raise it)
                raise _ComplexOperand(
                    f"{op}: a real Tensor ({x.dtype}) with a complex one: {op} doesn't take complex tensors; compute "
                    "on the parts (z.real, z.imag) or take z.abs()",
                    y,
                )
            elif isinstance(y, (complex, np.complexfloating)):
                # (a Python complex number, `1j * t`: add, sub, mul and div answer with it as a 0-d complex64 tensor)
                raise _ComplexOperand(
                    f"{op}: a real Tensor ({x.dtype}) with the complex number {y!r}: {op} doesn't take complex "
                    "numbers; compute on the real and imaginary parts",
                    Tensor.complex(Tensor(float(y.real), device=x.device), Tensor(float(y.imag), device=x.device)),
                )
            else:
                raise TypeError(f"{op}: can't combine a Tensor with {type(y).__name__}")
        if x.device != y.device:
            raise ArgumentError(f"{op}: operands are on different devices ({x.device} and {y.device})")
        if reverse:
            x, y = y, x
        if x.dtype is not y.dtype:
            out = least_upper_dtype(x.dtype, y.dtype) if number else _operands_dtype(x, y)
            if floats and not dtypes.is_float(out):
                out = least_upper_float(out)
            x, y = x.cast(out), y.cast(out)
        shape = _broadcast_shape(x.shape, y.shape, op)
        return x._broadcast_to(shape), y._broadcast_to(shape)

    def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
        if self.dtype == dtypes.bfloat16:
            # no backend computes in bfloat16: compute in float32 and round the result back
            ret = self.float()._alu(op, *(s.float() for s in srcs))
            return ret if op in GroupOp.Comparison else ret.cast(dtypes.bfloat16)
        u = self.uop
        out_dt = dtypes.bool if op in GroupOp.Comparison else u.dtype
        # (most ops have one other operand: its node without a generator)
        return Tensor(UOp(op, out_dt, (u, srcs[0].uop) if len(srcs) == 1 else (u, *[s.uop for s in srcs])))

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (floats to ints truncate toward zero).

        >>> Tensor([1.7, -1.7]).cast("int32").tolist()
        [1, -1]
        """
        dt = to_dtype(dtype)
        if dt == self.dtype:
            return self
        if self.dtype == dtypes.bfloat16:
            # bfloat16 is the top half of a float32
            storage = _storage_uop(self.uop)
            bits = Tensor(storage).cast(dtypes.uint32).lshift(16)
            out = bits.bitcast(dtypes.float32).cast(dt)
            if dtypes.is_float(dt):
                set_cast_gradient(out.uop, storage, dtypes.float32, rounded=True)
            return out
        if dt == dtypes.bfloat16:
            f = self.cast(dtypes.float32)
            u = f.bitcast(dtypes.uint32)
            # round to nearest even on the 16 dropped bits; NaN stays a quiet NaN
            rounded = (u + (0x7FFF + (u.rshift(16) & 1))).rshift(16)
            bits = f.isnan().where(Tensor(0x7FC0, device=self.device, dtype=dtypes.uint32), rounded)
            stored = bits.cast(dtypes.uint16).uop
            out = Tensor(UOp(Ops.BITCAST, dt, (stored,)))
            if dtypes.is_float(self.dtype):
                # (given to the value's bits too, where a read of them passes its gradient: `bits_gradients`)
                set_cast_gradient(out.uop, self.uop, self.dtype)
            return out
        if dt == dtypes.float16 and self.dtype == dtypes.float64:
            # through float32 as torch's (rounded twice: 65519.99999 is inf, not 65504), on every backend alike
            return self.cast(dtypes.float32).cast(dt)
        return Tensor(UOp(_CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bits read as `dtype`. To a dtype of another item size the last dim is scaled by the ratio of the
        sizes, as tinygrad's (and torch's `view(dtype)`, with its layout rules: the last dim contiguous, and its size
        divisible by the ratio when the items grow).

        >>> Tensor([1.0]).bitcast("uint32").tolist()
        [1065353216]
        >>> Tensor([1.0]).bitcast("uint8").tolist()
        [0, 0, 128, 63]
        """
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            return self._bytes_as(dt, "bitcast")
        if dt == self.dtype:
            return self
        if self.dtype == dtypes.bfloat16:
            return Tensor(_storage_uop(self.uop)).bitcast(dt)
        if dt == dtypes.bfloat16:
            return Tensor(UOp(Ops.BITCAST, dt, (self.bitcast(dtypes.uint16).uop,)))
        return Tensor(UOp(Ops.BITCAST, dt, (self.uop,)))

    def _bytes_as(self, dt: DType, op: str = "view") -> Tensor:
        """torch's view(dtype) to a dtype of another item size: the bytes of each row read as `dt` (little-endian),
        the last dim scaled by the ratio of the sizes. A new tensor (bitcast's is too), not a view of self's storage."""
        small, big = sorted((self.dtype.itemsize, dt.itemsize))
        ratio, strides = big // small, self.stride()
        what = f"to read {self.dtype} as {dt} (different element sizes)"
        if self.ndim == 0:
            raise ShapeError(f"{op}: a 0-d tensor has no last dim {what}")
        # (torch's checks of the layout, stride() being torch's)
        if strides[-1] != 1:
            raise ShapeError(f"{op}: the last dim must have stride 1 {what}, got strides {strides}")
        if self.dtype.itemsize < dt.itemsize and (self.shape[-1] % ratio or any(st % ratio for st in strides[:-1])):
            raise ShapeError(
                f"{op}: the last dim's size and the other dims' strides must divide by {ratio} {what}; got shape "
                f"{self.shape}, strides {strides}"
            )
        # each element's bits as an unsigned int of its size, then split into (or joined from) pieces of the other
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        bits = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self.bitcast(unsigned[self.dtype.itemsize])
        if self.dtype.itemsize > dt.itemsize:
            mask = (1 << (8 * small)) - 1
            pieces = [((bits >> (8 * small * k)) & mask).cast(unsigned[small]) for k in range(ratio)]
            out = Tensor.stack(*pieces, dim=-1).flatten(-2, -1)
        else:
            grouped = bits.reshape(*self.shape[:-1], self.shape[-1] // ratio, ratio).cast(unsigned[big])
            out = grouped[..., 0]
            for k in range(1, ratio):
                out = out | (grouped[..., k] << (8 * small * k))
        return out.cast(dtypes.bool) if dt == dtypes.bool else out.bitcast(dt)

    # casts: name, dtype, docstring
    float = cast_method("float", dtypes.float32, "Cast to float32.")
    half = cast_method("half", dtypes.float16, "Cast to float16.")
    double = cast_method("double", dtypes.float64, "Cast to float64.")
    int = cast_method("int", dtypes.int32, "Cast to int32.")
    bool = cast_method("bool", dtypes.bool, "Cast to bool.")
    long = cast_method("long", dtypes.int64, "Cast to int64.")
    short = cast_method("short", dtypes.int16, "Cast to int16.")
    bfloat16 = cast_method("bfloat16", dtypes.bfloat16, "Cast to bfloat16.")

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float dtype."""
        return dtypes.is_float(self.dtype)

    # one ALU op on both operands, broadcast and promoted: name, op, docstring and its example
    def add(self, x: Any, reverse: bool = False, *, alpha: Any = 1) -> Tensor:
        """Elementwise sum; `alpha` scales `x` first (torch's add(other, alpha=)).

        >>> Tensor([1, 2]).add(1.5).tolist()
        [2.5, 3.5]
        >>> Tensor([1, 2]).add(Tensor([1, 1]), alpha=3).tolist()
        [4, 5]
        """
        try:
            if reverse is not False and reverse is not True:
                # torch's deprecated add(alpha, other)
                other, alpha = _alpha_first("add", x, reverse, alpha)
                return self.add(other, alpha=alpha)
            if not isinstance(self, ElementwiseMixin):
                return _number_first(self, x, "add").add(x, alpha=alpha)
            if type(alpha) is not int or alpha != 1:
                a, b, dt = _scaled_operands(self, x, alpha, "add")
                return (b._alu(_ADD, a) if reverse else a._alu(_ADD, b)).cast(dt)
            a, b = self._broadcasted(x, reverse, "add")
            return a._alu(_ADD, b)
        except _ComplexOperand as e:  # (a complex x: its own add, Python's reflected order)
            return e.z._with_real(self, "add", reverse, alpha)

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise product.

        >>> Tensor([1, 2]).mul(3).tolist()
        [3, 6]
        """
        try:
            if not isinstance(self, ElementwiseMixin):
                return _number_first(self, x, "mul").mul(x)
            if _scaled_in_float32(self, x) or _zero_dim_scale(self, x, reverse):
                return self.float().mul(x, reverse).cast(self.dtype)
            a, b = self._broadcasted(x, reverse, "mul")
            return a._alu(Ops.MUL, b)
        except _ComplexOperand as e:  # (a complex x: its own mul)
            return e.z._with_real(self, "mul", reverse)

    # (no `reverse`: max is symmetric)
    maximum = binary_alu_method("maximum", Ops.MAX, _MAX_DOC, "Tensor([1, 5]).maximum(3).tolist()", "[3, 5]", False)

    def sub(self, x: Any, reverse: bool = False, *, alpha: Any = 1) -> Tensor:
        """Elementwise difference; `alpha` scales `x` first (torch's sub(other, alpha=)).

        >>> Tensor([3, 4]).sub(1).tolist()
        [2, 3]
        """
        try:
            if reverse is not False and reverse is not True:
                # torch's deprecated sub(alpha, other)
                other, alpha = _alpha_first("sub", x, reverse, alpha)
                return self.sub(other, alpha=alpha)
            if not isinstance(self, ElementwiseMixin):
                return _number_first(self, x, "sub").sub(x, alpha=alpha)
            if type(alpha) is not int or alpha != 1:
                a, b, dt = _scaled_operands(self, x, alpha, "sub")
                if reverse:
                    a, b = b, a
            else:
                a, b = self._broadcasted(x, reverse, "sub")
                dt = a.dtype
            if dt == dtypes.bool:
                raise DTypeError("sub: subtracting bool tensors is not supported; use `^` or logical_xor")
            return a._alu(_ADD, b.neg()).cast(dt)
        except _ComplexOperand as e:  # (a complex x: its own sub, Python's reflected order)
            return e.z._with_real(self, "sub", reverse, alpha)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division (ints promote to float); rounding_mode "trunc" or "floor" as in PyTorch.

        >>> Tensor([7, -7]).div(2, rounding_mode="floor").tolist()
        [3, -4]
        """
        if rounding_mode not in (None, "trunc", "floor"):
            raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        if not isinstance(self, ElementwiseMixin):
            return _number_first(self, x, "div").div(x, rounding_mode=rounding_mode)
        if (
            reverse
            and rounding_mode is not None
            and self.dtype in dtypes.halves
            and type(_py_number(x)) in (float, int)
        ):
            # a number divided by a half float with rounding is taken in the half float first, as torch's (1e5 // x is
            # inf // x, NaN): only a number divisor goes into torch's float32 kernel
            x = _scalar_in_dtype(x, self.dtype, self.device)
        if _scaled_in_float32(self, x) or _zero_dim_scale(self, x, reverse):
            return self.float().div(x, reverse, rounding_mode).cast(self.dtype)
        try:
            a, b = self._broadcasted(x, reverse, "div", floats=rounding_mode is None)
        except _ComplexOperand as e:  # (a complex x: its own division; no rounding modes for complex numbers)
            if rounding_mode is not None:
                raise
            return e.z._with_real(self, "div", reverse)
        if rounding_mode is None:
            a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
            return a._alu(Ops.FDIV, b)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
        if dtypes.is_int(a.dtype):
            refuse_zero_divisor(a, x, reverse, "floor_divide" if rounding_mode == "floor" else "div")
            q = a._alu(Ops.IDIV, b)
            if rounding_mode == "trunc":
                return q
            # floor: step down where the signs differ and there is a remainder
            fix = remainder_against_divisor(a._alu(Ops.MOD, b), b, x, reverse)
            return q if fix is None else fix.where(q - 1, q)
        if rounding_mode == "trunc":
            return a._alu(Ops.FDIV, b).trunc()
        if a.dtype.itemsize < 4:
            return _half_floor_division(a, b)
        return _floor_division(a, b)[0]

    def floor_divide(self, x: Any) -> Tensor:
        """self // x (rounding toward -inf), as torch.floor_divide; `self` may be a number."""
        if not isinstance(self, ElementwiseMixin):
            return _number_first(self, x, "floor_divide").div(x, rounding_mode="floor")
        return self.div(x, rounding_mode="floor")

    def remainder(self, x: Any) -> Tensor:
        """self % x (the sign of x), as torch.remainder; `self` may be a number (torch.remainder(7, t))."""
        if not isinstance(self, ElementwiseMixin):
            return x.mod(self, reverse=True)
        return self.mod(x)

    def type_as(self, other: Tensor) -> Tensor:
        """Cast to other's dtype."""
        return self.cast(other.dtype)

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics).

        >>> Tensor([7, -7]).idiv(2).tolist()
        [3, -3]
        """
        a, b = self._broadcasted(x, reverse, "idiv")
        if not dtypes.is_int(a.dtype):
            raise DTypeError(f"idiv needs integer tensors, got {a.dtype}")
        return a._alu(Ops.IDIV, b)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor (Python / PyTorch `%`).

        >>> Tensor([5, -5]).mod(3).tolist()
        [2, 1]
        """
        a, b = self._broadcasted(x, reverse, "mod")
        if a.dtype == dtypes.bool:
            raise UnsupportedDTypeError("mod: not defined for bool tensors (as PyTorch); cast with .int() first")
        if dtypes.is_int(a.dtype):
            refuse_zero_divisor(a, x, reverse, "remainder")
            r = a._alu(Ops.MOD, b)
            fix = remainder_against_divisor(r, b, x, reverse)
            return r if fix is None else fix.where(r + b, r)
        if a.dtype.itemsize < 4:
            # the quotient and product need float32's precision (as torch computes half ops), then one rounding
            return a.float().mod(b.float()).cast(a.dtype)
        q, out = _floor_division(a, b)
        # torch's derivatives, 1 and -floor(a / b), given whole (the zero's sign select would cut the 1 to a)
        return _with_quotient_gradient(out, a, b, q.detach())

    def fmod(self, x: Any) -> Tensor:
        """Remainder with the sign of the dividend (C fmod, torch.fmod): self - trunc(self / x) * x, exact.

        >>> Tensor([5, -5]).fmod(3).tolist(), Tensor([-1.5]).fmod(-1.0).tolist()
        ([2, -2], [-0.5])
        """
        a, b = self._broadcasted(x, False, "fmod")
        if a.dtype == dtypes.bool:
            raise UnsupportedDTypeError("fmod: not defined for bool tensors (as PyTorch); cast with .int() first")
        if dtypes.is_int(a.dtype):
            # the ALU's MOD truncates, as C (an int tensor x fmod a tensor's 0 is whatever the backend's MOD gives)
            refuse_zero_divisor(a, x, False, "fmod")
            return a._alu(Ops.MOD, b)
        if a.dtype.itemsize < 4:
            return a.float().fmod(b.float()).cast(a.dtype)
        # torch's derivatives, 1 and -trunc(a / b), given whole
        r = _remainder_in_range(_truncated_division(a, b)[1], b, a)
        return _with_quotient_gradient(r, a, b, a._alu(Ops.FDIV, b).trunc().detach())

    def neg(self) -> Tensor:
        """-x (a bool tensor raises, as PyTorch: `~` or logical_not() inverts a mask).

        >>> Tensor([1, -2]).neg().tolist()
        [-1, 2]
        """
        if self.dtype == dtypes.bool:
            raise DTypeError("neg: negation (-) of a bool tensor isn't defined, as in PyTorch; use ~ or logical_not()")
        if dtypes.is_unsigned(self.dtype):
            # wraps like torch: x * (2**bits - 1) is -x modulo 2**bits (a -1 operand would widen to int64)
            return self * dtypes.max(self.dtype)
        return self * -1 if dtypes.is_int(self.dtype) else self._alu(_NEG)

    def minimum(self, x: Any) -> Tensor:
        """Elementwise minimum.

        >>> Tensor([1, 5]).minimum(3).tolist()
        [1, 3]
        """
        a, b = self._broadcasted(x, False, "minimum")
        return a._inverse()._alu(Ops.MAX, b._inverse())._inverse()

    def _inverse(self) -> Tensor:
        # an order-reversing map used to build min from max
        if dtypes.is_float(self.dtype):
            return self._alu(Ops.NEG)
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if dtypes.is_unsigned(self.dtype):
            return Tensor(dtypes.max(self.dtype), device=self.device, dtype=self.dtype)._broadcast_to(self.shape) - self
        return self._alu(Ops.XOR, self.full_like(-1))

    def where(
        self: Any = _NOT_GIVEN,
        x: Any = _NOT_GIVEN,
        y: Any = _NOT_GIVEN,
        *,
        condition: Any = _NOT_GIVEN,
        input: Any = _NOT_GIVEN,  # noqa: A002 (torch's name)
        other: Any = _NOT_GIVEN,
    ) -> Any:
        """Elementwise `x if self else y` (self is cast to bool; tinygrad's form). torch's form,
        `values.where(condition, other)`, is taken when self isn't bool and `x` is a bool tensor: `self if x else y`.
        With neither, torch.where(condition): the indices of the nonzero elements, `nonzero(as_tuple=True)`.
        torch's keywords name the parts: `Tensor.where(condition=c, input=x, other=y)`, `x.where(condition=c, other=y)`.

        >>> Tensor([True, False]).where(1, 2).tolist()
        [1, 2]
        >>> Tensor([1.0, 2.0]).where(Tensor([True, False]), 9.0).tolist()
        [1.0, 9.0]
        >>> [t.tolist() for t in Tensor([[0, 1], [2, 0]]).where()]
        [[0, 1], [1, 0]]
        """
        if condition is not _NOT_GIVEN or input is not _NOT_GIVEN or other is not _NOT_GIVEN:
            cond, x, y = _where_parts(self, x, y, condition, input, other)
            return Tensor.where(cond, x, y)
        if self is _NOT_GIVEN:
            raise TypeError("where: give the condition (cond.where(x, y), or Tensor.where(condition=c, input=x, ...))")
        if x is _NOT_GIVEN and y is _NOT_GIVEN:
            return self.nonzero(as_tuple=True)
        if x is _NOT_GIVEN or y is _NOT_GIVEN:
            raise TypeError("where: give both values (cond.where(x, y)), or neither (the nonzero indices of cond)")
        if self.dtype != dtypes.bool and isinstance(x, Tensor) and x.dtype == dtypes.bool:
            return x.where(self, y)
        cond = self.cast(dtypes.bool)
        # (numpy scalars as Python numbers, as torch's: `cond.where(np.log(2.0), 0.0)` is float32)
        x, y = _py_number(x), _py_number(y)
        try:
            if isinstance(x, Tensor):
                x_t, y_t = x._broadcasted(_int_joining(y, x.dtype, "where"), False, "where")
            elif isinstance(y, Tensor):
                y_t, x_t = y._broadcasted(_int_joining(x, y.dtype, "where"), False, "where")
            else:
                x_t = Tensor(x, device=self.device)
                x_t, y_t = x_t._broadcasted(y, False, "where")
        except TypeError:
            if "ComplexTensor" not in (type(x).__name__, type(y).__name__):
                raise
            # a complex value (`cond.where(z, w)`): torch's complex where, on the parts
            from uopkit.tensor.complex_math import complex_where  # noqa: PLC0415

            return complex_where(cond, x, y)
        for v in (x, y):
            if not isinstance(v, Tensor):
                _check_stored_scalar(v, x_t.dtype, "where", half_floats=False)
        _check_same_device("where", [cond, x_t, y_t])
        shape = _broadcast_shape(cond.shape, x_t.shape, "where")
        cond, x_t, y_t = cond._broadcast_to(shape), x_t._broadcast_to(shape), y_t._broadcast_to(shape)
        return Tensor(UOp(_WHERE, x_t.dtype, (cond.uop, x_t.uop, y_t.uop)))

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where `mask` (broadcast) is true, as a 1-D tensor. Its length depends on the data: the mask is
        read back to the host (a sync point), as torch's shape is.

        >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()
        [1, 3]
        """
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise DTypeError(f"masked_select: mask must be a bool tensor, got {described(mask)}; compare it (m != 0)")
        shape = _broadcast_shape(self.shape, mask.shape, "masked_select")
        picked = np.flatnonzero(mask._broadcast_to(shape).numpy())
        return self._broadcast_to(shape).reshape(-1)._take_counted(0, picked)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """`value` where `mask` is true, else self, in self's dtype as torch (a float value into an int tensor is
        truncated; a number the dtype can't hold raises OverflowError; a 0-d tensor value gets its gradient).

        >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
        [0, 2, 0]
        """
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise DTypeError(f"masked_fill: mask must be a bool tensor, got {described(mask)}; compare it (m != 0)")
        _broadcast_shape(self.shape, mask.shape, "masked_fill")
        if isinstance(value, Tensor):
            if value.ndim:
                raise ShapeError(f"masked_fill: a tensor value must be 0-dimensional, got shape {value.shape}")
            return mask.where(value.cast(self.dtype), self)
        _check_stored_scalar(value, self.dtype, "masked_fill")
        return mask.where(_scalar_in_dtype(value, self.dtype, self.device), self)

    def masked_fill_(self, mask: Tensor, value: Any) -> Tensor:
        """`masked_fill` in place (torch.Tensor.masked_fill_); through a view of an expand, every element of storage
        that a masked element shows takes the value, as PyTorch's.

        >>> t = Tensor([1, 2, 3]); t.masked_fill_(Tensor([True, False, True]), 0).tolist()
        [0, 2, 0]
        """
        return self._update_in_place(lambda: self.masked_fill(mask, value), "masked_fill_", lambda: mask)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + (end - self) * weight, computed from the nearer end as torch.lerp: end - (end - self) * (1 - weight)
        where |weight| >= 0.5 (weight 1 gives end exactly, an infinite self gives inf, not NaN).

        >>> Tensor([0.0, 1e8]).lerp(Tensor([10.0, 1.0]), 1.0).tolist()
        [10.0, 1.0]
        """
        # (a number as end takes self's dtype)
        ends_dtype = end.dtype if isinstance(end, Tensor) else self.dtype
        if not (dtypes.is_float(self.dtype) and dtypes.is_float(ends_dtype)):
            # torch refuses ints (an interpolation of counts is a slip: cast first if it is meant)
            raise UnsupportedDTypeError(
                f"lerp: needs float tensors, got {self.dtype} and {ends_dtype} (as PyTorch); cast with .float() first"
            )
        weight_dtype = weight.dtype if isinstance(weight, Tensor) and weight.ndim else self.dtype
        if ends_dtype is not self.dtype or weight_dtype is not self.dtype:
            # torch takes no promotion here: end (and a weight of 1 or more dims) must have self's dtype
            raise DTypeError(
                f"lerp: end and a non-scalar weight need the input's dtype {self.dtype}, got end {ends_dtype}"
                f"{f' and weight {weight.dtype}' if isinstance(weight, Tensor) else ''}; cast them with .cast() first"
            )
        x, end_t = self._broadcasted(end, False, "lerp")
        # (a numpy scalar weight as a Python number: its comparisons would be numpy bools)
        weight = _py_number(weight)
        if x.dtype in dtypes.halves:
            # in float32 and rounded once, as PyTorch's
            w = weight.float() if isinstance(weight, Tensor) else weight
            return x.float().lerp(end_t.float(), w).cast(x.dtype)
        # torch's vector loop: base + coeff * (end - self) as one fma, from self with coeff = weight below 0.5,
        # from end with coeff = weight - 1 above (both in the tensors' dtype); each step rounded apart, a quarter
        # of float32 results were an ulp off and Adam's moments of bfloat16 parameters came out different
        if isinstance(weight, Tensor):
            x, w = x._broadcasted(weight.cast(x.dtype), False, "lerp")
            end_t = end_t._broadcast_to(x.shape)
            near = w.abs() < 0.5
            coeff, base = near.where(w, w - 1), near.where(x, end_t)
        else:
            # (the weight's nodes broadcast already, cached as `a + 1`'s: a soft update `p.lerp_(q, tau)` of every
            # parameter, every step, builds this graph; the same value as `_scalar_in_dtype`'s float)
            w = Tensor(_scalar_uop(float(weight), x.dtype, x.device, x.shape))
            coeff, base = (w, x) if abs(weight) < 0.5 else (w - 1, end_t)
        # end - self, the nodes `sub` builds for two floats of one dtype and shape, without its checks
        diff = end_t._alu(_ADD, x._alu(_NEG))
        return diff._alu(Ops.MULACC, coeff._broadcast_to(diff.shape), base)

    def addcmul(self, tensor1: Any, tensor2: Any, *deprecated: Any, value: Any = 1) -> Tensor:
        """self + value * tensor1 * tensor2 (torch.addcmul).

        >>> Tensor([1.0, 1.0]).addcmul(Tensor([1.0, 2.0]), Tensor([4.0, 4.0]), value=0.5).tolist()
        [3.0, 5.0]
        """
        if deprecated:
            # torch's deprecated addcmul(value, tensor1, tensor2) (older optimizers' `v.addcmul_(1 - b2, g, g)`)
            tensor1, tensor2, value = _value_first("addcmul", tensor1, tensor2, deprecated, value)
        if value != 1 and (opmath := _addc_in_float32(self, tensor1, tensor2, "addcmul")) is not None:
            # torch's half floats: self + value * t1 * t2 in float32 (last multiply and add one fma), rounded once
            a, t1, t2, dt = opmath
            return (t1 * _scalar_in_dtype(value, dtypes.float32, self.device))._alu(Ops.MULACC, t2, a).cast(dt)
        product = self._broadcasted(tensor1, False, "addcmul")[1] * tensor2
        return self + (product if value == 1 else product * value)

    def addcdiv(self, tensor1: Any, tensor2: Any, *deprecated: Any, value: Any = 1) -> Tensor:
        """self + value * tensor1 / tensor2 (torch.addcdiv).

        >>> Tensor([1.0, 1.0]).addcdiv(Tensor([1.0, 2.0]), Tensor([4.0, 4.0]), value=2).tolist()
        [1.5, 2.0]
        """
        if deprecated:
            # torch's deprecated addcdiv(value, tensor1, tensor2) (older optimizers' `p.addcdiv_(-step, m, denom)`)
            tensor1, tensor2, value = _value_first("addcdiv", tensor1, tensor2, deprecated, value)
        if value != 1 and (opmath := _addc_in_float32(self, tensor1, tensor2, "addcdiv")) is not None:
            # torch's half floats: self + value * t1 / t2 in float32, in that order, rounded once
            a, t1, t2, dt = opmath
            return (a + t1 * _scalar_in_dtype(value, dtypes.float32, self.device) / t2).cast(dt)
        quotient = self._broadcasted(tensor1, False, "addcdiv")[1] / tensor2
        return self + (quotient if value == 1 else quotient * value)

    def _cmp(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        return a._alu(op, b)

    def __lt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x, reverse=True)

    def __le__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "le")
        # NaN compares false both ways, so a <= b is not (b < a) for floats
        return a._alu(Ops.CMPLT, b) | a._alu(Ops.CMPEQ, b)

    def __ge__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "ge")
        return b._alu(Ops.CMPLT, a) | a._alu(Ops.CMPEQ, b)

    # (== and != are tensor/operators.py's: they fall back to Python's identity test for other types)

    # the comparison operators under method names
    eq = operator_method("eq", operator.eq, "Elementwise ==.")
    ne = operator_method("ne", operator.ne, "Elementwise !=.")
    lt = operator_method("lt", operator.lt, "Elementwise <.")
    le = operator_method("le", operator.le, "Elementwise <=.")
    gt = operator_method("gt", operator.gt, "Elementwise >.")
    ge = operator_method("ge", operator.ge, "Elementwise >=.")

    def logical_not(self) -> Tensor:
        """Elementwise not (of the value cast to bool).

        >>> Tensor([0, 2]).logical_not().tolist()
        [True, False]
        """
        return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(True, device=self.device)._broadcast_to(self.shape))

    def logical_and(self, x: Any) -> Tensor:
        """Elementwise and of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_and")
        return a.cast(dtypes.bool)._alu(Ops.AND, b.cast(dtypes.bool))

    def logical_or(self, x: Any) -> Tensor:
        """Elementwise or of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_or")
        return a.cast(dtypes.bool)._alu(Ops.OR, b.cast(dtypes.bool))

    def logical_xor(self, x: Any) -> Tensor:
        """Elementwise xor of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_xor")
        return a.cast(dtypes.bool)._alu(Ops.CMPNE, b.cast(dtypes.bool))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        if not (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool):
            raise UnsupportedDTypeError(
                f"{op.name.lower()}: bitwise ops need integer or bool tensors, got {a.dtype} (as PyTorch)"
            )
        return a._alu(op, b)

    def bitwise_and(self, x: Any) -> Tensor:
        """Elementwise & of ints or bools.

        >>> Tensor([6]).bitwise_and(3).tolist()
        [2]
        """
        if not isinstance(self, ElementwiseMixin):
            # torch.bitwise_and(6, t): a number first
            return x._bitwise(Ops.AND, self, True)
        return self._bitwise(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Tensor:
        """Elementwise | of ints or bools (`self` may be a number, as torch.bitwise_or's)."""
        if not isinstance(self, ElementwiseMixin):
            return x._bitwise(Ops.OR, self, True)
        return self._bitwise(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Tensor:
        """Elementwise ^ of ints or bools (`self` may be a number, as torch.bitwise_xor's)."""
        if not isinstance(self, ElementwiseMixin):
            return x._bitwise(Ops.XOR, self, True)
        return self._bitwise(Ops.XOR, x)

    def xor(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise ^ of ints or bools, tinygrad's method form (`reverse`: x ^ self).

        >>> Tensor([True, False]).xor(True).tolist()
        [False, True]
        """
        return self._bitwise(Ops.XOR, x, reverse)

    def bitwise_not(self) -> Tensor:
        """Elementwise ~ (logical not for bool).

        >>> Tensor([0]).bitwise_not().tolist()
        [-1]
        """
        if not (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool):
            raise DTypeError(f"bitwise_not: needs an integer or bool tensor, got {self.dtype}")
        if self.dtype == dtypes.bool:
            return self.logical_not()
        # every bit set: -1, or the largest value of an unsigned dtype
        return self._alu(Ops.XOR, self.full_like(dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1))

    def lshift(self, x: Any, reverse: bool = False) -> Tensor:
        """Shift integer bits left by `x` (a number or a tensor, promoted as torch); a shift past the width (or
        negative) gives 0, as torch.

        >>> Tensor([1, 3]).lshift(2).tolist()
        [4, 12]
        """
        if not isinstance(self, ElementwiseMixin):
            # torch.bitwise_left_shift(1, t): a number shifted by a tensor
            return x._shift(Ops.SHL, self, not reverse, "lshift")
        return self._shift(Ops.SHL, x, reverse, "lshift")

    def rshift(self, x: Any, reverse: bool = False) -> Tensor:
        """Shift integer bits right (arithmetic for signed ints) by `x`; a shift past the width (or negative) gives
        0 or -1 (the sign), as torch.

        >>> Tensor([8, -8]).rshift(2).tolist()
        [2, -2]
        """
        if not isinstance(self, ElementwiseMixin):
            # torch.bitwise_right_shift(1, t): a number shifted by a tensor
            return x._shift(Ops.SHR, self, not reverse, "rshift")
        return self._shift(Ops.SHR, x, reverse, "rshift")

    def _shift(self, op: Ops, x: Any, reverse: bool, name: str) -> Tensor:
        if self.dtype == dtypes.bool and not reverse and not isinstance(x, (Tensor, bool, np.bool_)):
            # bool << number promotes like bool + number (bool << True stays bool, which doesn't shift: raises below)
            return self.cast(dtypes.default_int)._shift(op, x, reverse, name)
        bits = self.dtype.itemsize * 8
        if not reverse and type(x) is int and dtypes.is_int(self.dtype) and 0 <= x < bits:
            # (the common case, a constant shift within the width: no guard; the amount, which fits self's dtype, is
            # the broadcast scalar `+` takes, its nodes kept between calls: 5-10 us a shift, not 40 with three Tensors)
            return self._alu(op, self._broadcasted(x, False, name)[1])
        if not reverse and type(x) is int and dtypes.is_int(self.dtype):
            # a constant shift past the width, in self's dtype (torch doesn't widen for the amount)
            x = bits
        a, b = self._broadcasted(x, reverse, name)
        if not dtypes.is_int(a.dtype):
            raise UnsupportedDTypeError(f"{name}: needs integer tensors, got {a.dtype} (as PyTorch)")
        bits = a.dtype.itemsize * 8
        # C leaves a shift by the width or more (or a negative one) undefined: torch gives every bit shifted out
        out_of_range = (b >= bits) if dtypes.is_unsigned(b.dtype) else (b < 0) | (b >= bits)
        if op is Ops.SHL or dtypes.is_unsigned(a.dtype):
            return out_of_range.where(0, a._alu(op, out_of_range.where(0, b)))
        return a._alu(op, out_of_range.where(bits - 1, b))

    def __and__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x)

    def __or__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x)

    def __xor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x)

    def __rand__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x, True)

    def __ror__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x, True)

    def __rxor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x, True)

    def __invert__(self) -> Tensor:
        return self.bitwise_not()

    def __lshift__(self, x: Any) -> Tensor:
        return self.lshift(x)

    def __rshift__(self, x: Any) -> Tensor:
        return self.rshift(x)

    def __rlshift__(self, x: Any) -> Tensor:
        return self.lshift(x, True)

    def __rrshift__(self, x: Any) -> Tensor:
        return self.rshift(x, True)

    def isnan(self) -> Tensor:
        """Where the value is NaN.

        >>> Tensor([1.0, float("nan")]).isnan().tolist()
        [False, True]
        """
        return self != self if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)

    @replayed
    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """Where the value is +inf (detect_positive) or -inf (detect_negative).

        >>> Tensor([1.0, float("inf"), -float("inf")]).isinf().tolist()
        [False, True, True]
        """
        if not dtypes.is_float(self.dtype):
            return self.full_like(False, dtype=dtypes.bool)
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtype=dtypes.bool)
        neg = (self == -math.inf) if detect_negative else self.full_like(False, dtype=dtypes.bool)
        return pos | neg

    @replayed
    def isfinite(self) -> Tensor:
        """Where the value is neither inf nor NaN.

        >>> Tensor([1.0, float("inf")]).isfinite().tolist()
        [True, False]
        """
        return (self.isinf() | self.isnan()).logical_not()

    @replayed
    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
        """NaN replaced by `nan`, inf by `posinf` and -inf by `neginf` (by default the dtype's largest and lowest
        finite values), as torch.nan_to_num; the gradient passes where the value is finite. Integer and bool tensors
        come back as they are.

        >>> Tensor([float("nan"), float("inf"), 1.5]).nan_to_num(posinf=9.0).tolist()
        [0.0, 9.0, 1.5]
        """
        if not dtypes.is_float(self.dtype):
            return self
        largest = _largest_finite(self.dtype)
        # (a replacement beyond the dtype's range rounds to inf, as torch's: not a stored scalar that is refused)
        high = Tensor(largest if posinf is None else posinf, device=self.device, dtype=self.dtype)
        low = Tensor(-largest if neginf is None else neginf, device=self.device, dtype=self.dtype)
        nan_t = Tensor(nan, device=self.device, dtype=self.dtype)
        return self.isnan().where(nan_t, (self == math.inf).where(high, (self == -math.inf).where(low, self)))

    def nansum(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | None = None,
        *,
        dim: int | Sequence[int] | None = None,
    ) -> Tensor:
        """Sum over `axis` with NaNs counted as zero, as torch.nansum.

        >>> Tensor([1.0, float("nan"), 2.0]).nansum().item()
        3.0
        """
        # (a bad axis is nansum's, not the sum's)
        self._check_axes_of_composite(axis, dim, "nansum")
        if dtypes.is_float(self.dtype):
            self = self.isnan().where(Tensor(0, device=self.device, dtype=self.dtype), self)
        return self.sum(axis, keepdim, dtype, dim=dim)

    def nanmean(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        *,
        dtype: DType | None = None,
        dim: int | Sequence[int] | None = None,
    ) -> Tensor:
        """Mean over `axis` of the values that are not NaN (NaN where all are, with a gradient of 0 there where torch's
        is NaN), as torch.nanmean; `dtype` is the dtype the sum is taken in (the input cast to it first).

        >>> Tensor([[1.0, float("nan")], [2.0, 4.0]]).nanmean(1).tolist()
        [1.0, 3.0]
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(
                f"nanmean: needs a floating-point tensor, got {self.dtype} (as PyTorch); cast with .float() first"
            )
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "nanmean")
        self._check_axes_of_composite(axis, None, "nanmean")
        if dtype is not None and not dtypes.is_float(dtype := to_dtype(dtype)):
            raise DTypeError(f"nanmean: dtype must be a floating-point dtype (as PyTorch), got {dtype}")
        acc = dtype if dtype is not None else dtypes.float32 if self.dtype in dtypes.halves else self.dtype
        count = (~self.isnan()).sum(axis, keepdim, dtype=acc)
        return (self.nansum(axis, keepdim, dtype=acc) / count).cast(dtype if dtype is not None else self.dtype)

    def isin(self, test_elements: Any, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
        """Where an element equals one of `test_elements` (a tensor of any shape, a list or a number), compared in
        their common dtype (NaN equals nothing), as torch.isin; `invert` negates it. Each element is compared with
        every test element, or where that is a lot, the tests are sorted and searched (`assume_unique`, a hint for
        torch's sorting, changes nothing).

        >>> Tensor([1, 2, 3, 4]).isin(Tensor([2, 4])).tolist()
        [False, True, False, True]
        """
        tests = test_elements if isinstance(test_elements, Tensor) else Tensor(test_elements, device=self.device)
        if tests.device != self.device:
            raise ArgumentError(
                f"isin: elements are on {self.device}, test_elements on {tests.device}; use .to() first"
            )
        if self.numel() * tests.numel() >= segments.SCATTER_BY_SORTING:
            common = least_upper_dtype(self.dtype, tests.dtype)
            found = segments.contains(tests.cast(common), self.cast(common))
        else:
            found = (self.unsqueeze(-1) == tests.reshape(*((1,) * self.ndim), -1)).any(-1)
        return found.logical_not() if invert else found

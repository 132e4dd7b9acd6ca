"""Constants that a kernel takes as launch values instead of literals.

A program that computes the same graph with other numbers in it (`x * scale` for each of a list of scales, a sampler
whose coefficients change every step) would otherwise compile a kernel per number: the number is written into the
kernel's source. The schedule cache (`uopkit.engine.realize`) keys a float or int32/int64 constant of a tensor graph
(`LAUNCHABLE`) by its place alone and remembers the numbers it was scheduled with. When the same graph comes back with
another number in one of those places, it is scheduled again with the constants that changed as *launch constants*:
while the kernels are built (`consts_as_launch_values`), `grouper` turns each such CONST into a variable read as the
float32 bits of an int32 launch value, `BITCAST(CAST(DEFINE_VAR, int32), float32)` (then a CAST to float16 for a float16
constant, whose number float32 holds exactly), one the renderer contract passes as any other variable (`create_schedule`
gives its value). An int32 constant is its own launch value (a decode step's position: `arange(L) > pos`). Launch values
are 32-bit, so a float64 or int64 constant is two of them, its bits' low and high halves, put together in int64 (an lr
scheduler's float64 learning rate for a float64 model, an int64 position). The kernels no longer depend on the number,
so the next number replays the cached schedule with new launch values, compiling nothing. A number seen once stays a
literal (the compiler folds it).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import struct
from collections.abc import Iterator

from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp

# the prefix of a launch constant's variable name (the rest: the constant's place among the graph's launchable ones)
PREFIX = "lit"

# for the kernels being built (in this thread or task): each tensor-graph CONST that becomes a launch constant and its
# variable's name, and each variable's launch value (the float32 bits as an int32)
_active: contextvars.ContextVar[tuple[dict[UOp, str], dict[str, int]]] = contextvars.ContextVar(
    "launch_consts", default=({}, {})
)


# a float64 or int64 constant is two launch values (they are 32-bit): its low bits as `lit<k>`, its high bits as
# `lit<k>h`
HIGH = "h"


def name_of(k: int) -> str:
    """The variable of the graph's `k`-th launchable constant (of a float64 or int64 one, its low 32 bits)."""
    return f"{PREFIX}{k}"


def place_of(name: str) -> int | None:
    """`name_of`'s inverse (and of the high half's name): the constant's place, None for another variable."""
    rest = name[len(PREFIX) :].removesuffix(HIGH)
    return int(rest) if name.startswith(PREFIX) and rest.isdigit() else None


# the constants whose numbers can be launch values: floats, and ints that are values (a decode step's position in a
# mask `arange(L) > pos`, an `arange(pos, pos + 1)`), not index arithmetic (which the lowerer builds, never a CONST of
# the tensor graph)
LAUNCHABLE = frozenset({dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int64})
_WIDE = (dtypes.float64, dtypes.int64)


def names_of(k: int, const: UOp) -> tuple[str, ...]:
    """The variables that carry the `k`-th launchable constant `const`."""
    return (name_of(k), name_of(k) + HIGH) if const.dtype in _WIDE else (name_of(k),)


def bits_of(value: float) -> int:
    """A constant's float32 bits as the int32 a launch passes (a value beyond float32 is inf, as its literal; a float16
    constant's number is exact in float32)."""
    try:
        return _I32.unpack(_F32.pack(value))[0]
    except OverflowError:
        return _I32.unpack(_F32.pack(math.copysign(math.inf, value)))[0]


def launch_value(name: str, const: UOp) -> int:
    """The int32 launch value of variable `name` for the constant `const`: an int32's number, a float32's (or
    float16's) bits, or the low or high half of a float64's or int64's bits."""
    if const.dtype == dtypes.int32:
        return int(const.arg)
    if const.dtype == dtypes.int64:
        low, high = _TWO_I32.unpack(_I64.pack(int(const.arg)))
    elif const.dtype == dtypes.float64:
        low, high = _TWO_I32.unpack(_F64.pack(float(const.arg)))
    else:
        return bits_of(const.arg)
    return high if name.endswith(HIGH) else low


_F32, _I32, _F64, _I64 = struct.Struct("<f"), struct.Struct("<i"), struct.Struct("<d"), struct.Struct("<q")
_TWO_I32 = struct.Struct("<ii")


@contextlib.contextmanager
def consts_as_launch_values(consts: dict[UOp, int]) -> Iterator[None]:
    """While kernels are built: the CONSTs of `consts` (each with its place) become launch constants."""
    names = {u: name_of(k) for u, k in consts.items()}
    values = {name: launch_value(name, u) for u, k in consts.items() for name in names_of(k, u)}
    token = _active.set((names, values))
    try:
        yield
    finally:
        _active.reset(token)


def launch_const(u: UOp) -> UOp | None:
    """The kernel AST's form of the tensor-graph CONST `u` when it is a launch constant, else None."""
    name = _active.get()[0].get(u)
    if name is None:
        return None
    var = UOp.variable(name, -(2**31), 2**31 - 1)
    low = UOp(Ops.CAST, dtypes.int32, (var,))
    if u.dtype == dtypes.int32:
        return low
    if u.dtype in _WIDE:
        # high * 2**32 + the low half read unsigned, in int64: the number's bits
        high = UOp(Ops.CAST, dtypes.int32, (UOp.variable(name + HIGH, -(2**31), 2**31 - 1),))
        unsigned = UOp(Ops.CAST, dtypes.int64, (UOp(Ops.CAST, dtypes.uint32, (low,)),))
        scale = UOp(Ops.CONST, dtypes.int64, (), 2**32)
        shifted = UOp(Ops.MUL, dtypes.int64, (UOp(Ops.CAST, dtypes.int64, (high,)), scale))
        bits = UOp(Ops.ADD, dtypes.int64, (shifted, unsigned))
        return bits if u.dtype == dtypes.int64 else UOp(Ops.BITCAST, dtypes.float64, (bits,))
    value = UOp(Ops.BITCAST, dtypes.float32, (low,))
    return value if u.dtype == dtypes.float32 else UOp(Ops.CAST, u.dtype, (value,))


def launch_values(ast: UOp) -> dict[str, int]:
    """The launch values of the launch constants `ast` reads."""
    values = _active.get()[1]
    if not values:
        return {}
    return {u.arg[0]: values[u.arg[0]] for u in ast.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] in values}

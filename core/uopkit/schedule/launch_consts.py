"""Float constants that a kernel takes as launch values instead of literals.

A program that computes the same graph with other numbers in it (`x * scale` for each of a list of scales, a sampler
whose coefficients change every step) would otherwise compile a kernel per number: the number is written into the
kernel's source. The schedule cache (`uopkit.engine.realize`) keys a float32 or float16 constant of a tensor graph by
its place alone and remembers the numbers it was scheduled with. When the same graph comes back with another number in
one of those places, it is scheduled again with the constants that changed as *launch constants*: while the kernels are
built (`consts_as_launch_values`), `grouper` turns each such CONST into a variable read as the float32 bits of an int32
launch value, `BITCAST(CAST(DEFINE_VAR, int32), float32)` (then a CAST to float16 for a float16 constant, whose number
float32 holds exactly), one the renderer contract passes as any other variable (`create_schedule` gives its value).
The kernels no longer depend on the number, so the next number replays the cached schedule with new launch values,
compiling nothing. A number seen once stays a literal (the compiler folds it).
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


def name_of(k: int) -> str:
    """The variable of the graph's `k`-th float32 or float16 constant."""
    return f"{PREFIX}{k}"


def place_of(name: str) -> int | None:
    """`name_of`'s inverse: the constant's place, None for another variable."""
    rest = name[len(PREFIX) :]
    return int(rest) if name.startswith(PREFIX) and rest.isdigit() else None


def bits_of(value: float) -> int:
    """A constant's float32 bits as the int32 a launch passes (a value beyond float32 is inf, as its literal; a float16
    constant's number is exact in float32)."""
    try:
        return _I32.unpack(_F32.pack(value))[0]
    except OverflowError:
        return _I32.unpack(_F32.pack(math.copysign(math.inf, value)))[0]


_F32, _I32 = struct.Struct("<f"), struct.Struct("<i")


@contextlib.contextmanager
def consts_as_launch_values(consts: dict[UOp, int]) -> Iterator[None]:
    """While kernels are built: the CONSTs of `consts` (each with its place) become launch constants."""
    names = {u: name_of(k) for u, k in consts.items()}
    token = _active.set((names, {name_of(k): bits_of(u.arg) for u, k in consts.items()}))
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
    value = UOp(Ops.BITCAST, dtypes.float32, (UOp(Ops.CAST, dtypes.int32, (var,)),))
    return value if u.dtype == dtypes.float32 else UOp(Ops.CAST, u.dtype, (value,))


def launch_values(ast: UOp) -> dict[str, int]:
    """The launch values of the launch constants `ast` reads."""
    values = _active.get()[1]
    if not values:
        return {}
    return {u.arg[0]: values[u.arg[0]] for u in ast.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] in values}

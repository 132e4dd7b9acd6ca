"""What the Tensor modules share: error classes, argument helpers, host data, bfloat16 storage.

`Tensor` is bound in this module (and in each mixin module) by `uopkit.tensor.tensor` once the class exists:
the helpers build Tensors, and the class is made of the mixins that use them."""

from __future__ import annotations

import functools
import itertools
import math
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.device import Buffer, Device, TorchDevice
from uopkit.dtype import (
    DType,
    ValueOverflowError,
    dtypes,
    from_numpy_dtype,
    least_upper_dtype,
    to_numpy_dtype,
)

# the dtype errors live beside the promotion that raises one; every Tensor module takes them from here
from uopkit.dtype import DTypeError as DTypeError
from uopkit.dtype import UnsupportedDTypeError as UnsupportedDTypeError
from uopkit.engine.realize import buffers, capturing_checks
from uopkit.helpers import CHECK_INDEX
from uopkit.schedule import live_tensors
from uopkit.tensor import several_views

# the index errors, as the dtype errors above
from uopkit.tensor.index_errors import IndexRangeError as IndexRangeError
from uopkit.tensor.index_errors import IndexTensorError as IndexTensorError
from uopkit.tensor.replay import replay_call
from uopkit.uop.ops import GroupOp, Ops, UOp, cast_scalar
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_contiguous_ids = itertools.count()


class TensorsWithGrad:
    """The tensors given requires_grad=True, weakly held: what backward() looks among for the ones a loss depends on
    (a walk of every live tensor costs a step per weight, optimizer state and kept result).

    Keyed by id: adding a tensor again replaces its entry, and a dead tensor's entry (its id free for another) is
    dropped by the next walk, or once the entries outgrow the last walk's count."""

    __slots__ = ("_refs", "_limit", "_leaf_nodes")

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._limit = 1024
        # the graphs the tensors had when given requires_grad, held weakly, each -> (a weak reference to) its tensor: a
        # graph built on a leaf that is gone since (`(Tensor(x, requires_grad=True) * a).sum().backward()`) still
        # depends on one, as in PyTorch
        self._leaf_nodes = WeakKeyMap()

    def add(self, t: Any) -> None:
        ref = self._refs[id(t)] = weakref.ref(t)
        self._leaf_nodes[t.uop] = ref
        if len(self._refs) > self._limit:
            self.live()

    def forget_leaf(self, t: Any, nodes: Any) -> None:
        """`t` was frozen (`requires_grad_(False)`): the graphs among `nodes` that it had when given requires_grad are
        no leaf's any more, as torch's values computed from a frozen leaf don't require grad."""
        for node in nodes:
            ref = self._leaf_nodes.get(node)
            if ref is not None and ref() is t:
                self._leaf_nodes.pop(node)

    def was_given_requires_grad(self, nodes: Any) -> bool:
        """Whether one of `nodes` was the graph of a tensor when it was given requires_grad (a leaf, maybe dropped)."""
        return any(n in self._leaf_nodes for n in nodes)

    def dropped(self) -> list[UOp]:
        """The graphs tensors had when given requires_grad, of the tensors gone since (values computed from them can
        still hold them: `(Tensor.ones(2, requires_grad=True) * 2)` is no leaf)."""
        # (each node is held while its entry is read: the entry stays)
        leaves = self._leaf_nodes
        return [node for node in leaves.keys() if leaves[node]() is None]

    def any_given(self) -> bool:
        """Whether some tensor was given requires_grad whose entry or leaf graph is still here."""
        return bool(self._refs) or bool(len(self._leaf_nodes))

    def frozen(self) -> list[Any]:
        """The live tensors given requires_grad once that no longer want a gradient (`requires_grad_(False)`)."""
        return [t for ref in list(self._refs.values()) if (t := ref()) is not None and not t._requires_grad]

    def live(self) -> list[Any]:
        """The live tensors whose requires_grad is (still) true, in the order they were first given it."""
        out, dead = [], []
        for key, ref in list(self._refs.items()):
            t = ref()
            if t is None:
                dead.append(key)
            elif t._requires_grad:
                out.append(t)
        for key in dead:
            self._refs.pop(key, None)
        self._limit = 2 * len(self._refs) + 1024
        return out


tensors_with_grad = TensorsWithGrad()
# tensors given `retain_grad()`: their gradient is wanted, but they are not leaves, and backward() must follow a value
# realized since back through them (`Tensor._graph_stops`)
retaining_grad: weakref.WeakSet[Tensor] = weakref.WeakSet()


class ShapeError(ValueError, RuntimeError):
    """Shapes that don't fit an op: a ValueError, and a RuntimeError where PyTorch users catch one."""


class ArgumentError(ValueError, RuntimeError):
    """An argument an op can't take (PyTorch raises RuntimeError there): caught as either."""


class LinAlgError(ArgumentError):
    """A matrix a factorization or solve can't take: singular, or not positive-definite (torch.linalg.LinAlgError,
    a RuntimeError, is caught as this; an ArgumentError too, as uopkit raised before it had this name)."""


class UnknownModeError(ArgumentError, NotImplementedError):
    """A mode an op doesn't have (PyTorch's pad raises NotImplementedError there)."""


class EmptyReduceError(ValueError, IndexError, RuntimeError):
    """A max/min/argmax over an empty axis: PyTorch raises IndexError (RuntimeError without an axis)."""


def _canonical_device(device: Any) -> str:
    # a device name, a torch.device, or None for the default device. A device named here is opened now (once; then
    # a dict lookup), so that a tensor made on or moved to one that can't run here (`device="cuda"` without a GPU, an
    # unknown name) raises a DeviceError at once that says which and why, as torch's, not at its first realize
    if device is None:
        return Device.DEFAULT
    name = Device.canonicalize(device)
    Device[name]
    return name


def _is_device_object(x: Any) -> bool:
    # a torch.device (told without importing torch) or uopkit's (`Tensor.device("cuda")`): named as by its string
    return type(x) is TorchDevice or (type(x).__name__ == "device" and type(x).__module__ == "torch")


def _dim_for_axis(axis: Any, dim: Any, default: Any, op: str, name: str = "dim") -> Any:
    # torch's keyword `dim` (`dims` for flip and permute) for what tinygrad takes by position or calls `axis`
    if axis is not default and axis != default:
        raise TypeError(f"{op}: got both axis={axis!r} and {name}={dim!r}; give one")
    return dim


def _axis_for_dim(dim: Any, axis: Any, op: str) -> Any:
    # numpy's keyword `axis` (torch takes it too) for a method whose own name is torch's `dim` (amax, count_nonzero)
    if dim is not None:
        raise TypeError(f"{op}: got both dim={dim!r} and axis={axis!r}; give one")
    return axis


def _py_number(value: Any) -> Any:
    """A numpy scalar (np.float64 from np.log, np.int64 from a shape product, np.bool_) as the Python number of its
    kind, as torch takes one in `full`, `where`, `arange` and arithmetic: `torch.full((2,), np.log(2.0))` is float32,
    where Tensor(np.float64(...)) would keep float64 and spread it through a float32 program. Anything else is
    returned as it is."""
    return value.item() if isinstance(value, (np.integer, np.floating, np.bool_)) else value


def _normalize_axis(axis: int, ndim: int, op: str, shape: tuple[int, ...] | None = None, scalar: bool = True) -> int:
    # a 0-d tensor takes axis 0 and -1, as PyTorch's (`scalar`); ops that split or slice an axis need a real one
    if not scalar and ndim == 0:
        raise ShapeError(f"{op}: needs a tensor with at least one dimension, got a 0-d tensor")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        of = f"shape {shape}" if shape is not None else f"{ndim} dimensions"
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of {of}")
    return axis % ndim if ndim else 0


def _flatten_list(x: Any, typed: set[Any] | None = None) -> tuple[list[Any], tuple[int, ...]]:
    """A nested list's numbers in order and its shape; `typed` collects the numpy dtypes of its numpy arrays and
    scalars, the DTypes of its one-element Tensors and the Python types of its other numbers (torch.tensor keeps
    their dtypes: `[np.float64(0.1)]` and `[Tensor(0.1, dtype="float64")]` are float64)."""
    if isinstance(x, np.ndarray):
        if typed is not None:
            typed.add(x.dtype)
        return x.ravel().tolist(), x.shape
    # (a range is a list of its ints, as torch.tensor takes it)
    if not isinstance(x, (list, tuple, range)):
        if isinstance(x, np.generic):
            if typed is not None:
                typed.add(x.dtype)
            return [x.item()], ()
        if hasattr(x, "numel") and hasattr(x, "item"):
            # a tensor inside a list is one number, as in torch.tensor([t, 2.0]); more would be a stack
            if x.numel() != 1:
                raise ArgumentError(
                    f"Tensor(list): an element is a tensor of shape {tuple(x.shape)}; only one-element tensors can "
                    "be numbers in a list (use Tensor.stack to join tensors)"
                )
            if typed is not None and isinstance(x, Tensor):
                typed.add(x.dtype)
            return [x.item()], ()
        if typed is not None:
            typed.add(type(x))
        return [x], ()
    if len(x) == 0:
        return [], (0,)
    if (kinds := set(map(type, x))) <= {bool, int, float}:
        if typed is not None:
            typed.update(kinds)
        return list(x), (len(x),)  # a row of plain numbers, without a call per element
    parts = [_flatten_list(v, typed) for v in x]
    shapes = {p[1] for p in parts}
    if len(shapes) != 1:
        raise ArgumentError(f"ragged nested list: sub-lists have shapes {sorted(shapes)}")
    return [v for p in parts for v in p[0]], (len(x), *parts[0][1])


# ---------------------------------------------------------------------------------------------------------------------
# methods that are one call, defined from a row of a table: each keeps its name, signature and docstring (with its
# example, so help(Tensor.exp2) reads as before); autograd and dtype promotion come from what it calls


def in_float32(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A function of one tensor that, on float16 and bfloat16, is computed in float32 and rounded once at the end,
    as PyTorch computes it (float32 is its math type for half floats): each op of a formula rounded to half on the
    way (exp's argument, 1 + e, a row's shifted values) leaves a third or more of the results an ulp or a few off."""

    @functools.wraps(fn)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if self.dtype in dtypes.halves:
            return fn(self.cast(dtypes.float32), *args, **kwargs).cast(self.dtype)
        return fn(self, *args, **kwargs)

    return method


def _doc(summary: str, example: str, result: str) -> str:
    return f"{summary}\n\n>>> {example}\n{result}\n" if example else summary


def _named(fn: Callable[..., Any], name: str, doc: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def float_alu_method(name: str, op: Ops, summary: str, example: str = "", result: str = "") -> Callable[[Any], Tensor]:
    """`name(self)`: `op` on the value cast to the smallest float dtype that holds it (ints become float32)."""

    def method(self) -> Tensor:
        return self._float()._alu(op)

    return _named(method, name, _doc(summary, example, result))


def binary_alu_method(
    name: str, op: Ops, summary: str, example: str = "", result: str = "", reversible: bool = True
) -> Callable[..., Tensor]:
    """`name(self, x, reverse=False)` (without `reverse` when not `reversible`): `op` on both operands broadcast and
    promoted to a common dtype; `reverse` swaps them (for the reflected operators)."""
    if reversible:

        def method(self, x: Any, reverse: bool = False) -> Tensor:
            a, b = self._broadcasted(x, reverse, name)
            return a._alu(op, b)

    else:

        def method(self, x: Any) -> Tensor:
            a, b = self._broadcasted(x, False, name)
            return a._alu(op, b)

    return _named(method, name, _doc(summary, example, result))


def cast_method(name: str, dtype: DType, summary: str) -> Callable[[Any], Tensor]:
    """`name(self)`: the tensor cast to `dtype`."""

    def method(self) -> Tensor:
        return self.cast(dtype)

    return _named(method, name, summary)


def operator_method(name: str, fn: Callable[[Any, Any], Tensor], summary: str) -> Callable[[Any, Any], Tensor]:
    """`name(self, x)`: the Python operator `fn` (e.g. operator.lt for `self < x`), under a method name."""

    def method(self, x: Any) -> Tensor:
        return fn(self, x)

    return _named(method, name, summary)


# ---------------------------------------------------------------------------------------------------------------------
# helpers


def _cast_py(x: Any, dt: DType) -> Any:
    return cast_scalar(x, dt)


# conv windows by (input shape, dtype, pads, kernel, stride, dilation): the movement ops to apply, innermost first
_window_recipes: dict[tuple, tuple[tuple[Ops, Any, tuple[int, ...]], ...]] = {}


def _as_key(x: Any) -> Any:
    return tuple(x) if isinstance(x, (list, tuple)) else x


def _movement_recipe(top: UOp, bottom: UOp) -> tuple[tuple[Ops, Any, tuple[int, ...]], ...]:
    """The movement ops from `bottom` up to `top` (a chain of them), as (op, arg, resulting shape) triples for
    `replay_movement`, shortened: a reshape of a reshape is one reshape, two permutes are one, and a reshape or permute
    that changes nothing goes."""
    chain = top.movement_chain()
    assert bottom in chain, "not a chain of movement ops down to the input"
    out: list[tuple[Ops, Any, tuple[int, ...]]] = []
    for n in reversed(chain[: chain.index(bottom)]):
        op, arg, shape = n.op, n.arg, n.shape
        if out and op is out[-1][0] and op in (Ops.RESHAPE, Ops.PERMUTE):
            _, first, _ = out.pop()
            if op is Ops.PERMUTE:
                arg = tuple(first[i] for i in arg)
        below = out[-1][2] if out else bottom.shape
        if (op is Ops.RESHAPE and shape == below) or (op is Ops.PERMUTE and arg == tuple(range(len(arg)))):
            continue
        out.append((op, arg, shape))
    return tuple(out)


def _is_size(d: Any) -> bool:
    # one axis's length: an int, a numpy integer, or what converts to one as an index (a one-element integer tensor,
    # as torch takes `zeros(n)` with n = t.sum()); not a bool
    return not isinstance(d, bool) and (isinstance(d, (int, np.integer)) or hasattr(d, "__index__"))


def _as_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    if not isinstance(shape, (tuple, list)) and _is_size(shape) and getattr(shape, "ndim", 0) == 0:
        return (operator.index(shape),)
    return tuple(int(s) for s in shape)


def _dtype_arg(kwargs: dict[str, Any], default: Any) -> Any:
    """Pop the `dtype` keyword; None (torch's spelling of "the default") gives `default`, as a missing one."""
    dtype = kwargs.pop("dtype", None)
    return default if dtype is None else dtype


def _shape_args(shape: tuple) -> tuple[int, ...]:
    # a constructor's shape: ints, or one sequence of them (`rand(2, 3)` or `rand((2, 3))`), none negative
    dims = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if not all(_is_size(d) for d in dims):
        raise TypeError(f"a shape is ints or one sequence of ints, got {shape!r}")
    sizes = tuple(operator.index(d) for d in dims)
    if any(d < 0 for d in sizes):
        raise ShapeError(f"negative dimension in shape {sizes}")
    return sizes


def tied_to_empty(out: Tensor, *inputs: Tensor) -> Tensor:
    """`out`, a result made without reading `inputs` that have no elements (a factorization of 0 x 0 matrices, of an
    empty batch), with their graphs added in (their empty sums, a zero): it requires grad where one of them does and a
    backward gives them their zero-size gradients, as torch's results of empty matrices."""
    for x in inputs:
        if x.numel() == 0 and x.requires_grad:
            out = out + x.sum().cast(out.dtype)
    return out


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"{op}: shapes {a} and {b} can't be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)


def _sum_acc_dtype(dt: DType) -> DType:
    # tinygrad's rule: small ints and bool accumulate in (u)int32, half floats in float32
    if dtypes.is_unsigned(dt) and dt.itemsize < 4:
        return dtypes.uint32
    if (dtypes.is_int(dt) and dt.itemsize < 4) or dt == dtypes.bool:
        return dtypes.int32
    if dt in dtypes.halves:
        return dtypes.float32
    return dt


def _has_float64(device: Any) -> bool:
    """Whether the renderer of `device` computes float64 (a single device; a sharded tuple counts as none), as the
    ops that compute float32 more exactly in float64 ask (fmod, cumsum, var)."""
    return isinstance(device, str) and dtypes.float64 in Device[device].renderer.caps.supported_dtypes


def _in_float64(x: Tensor) -> bool:
    """Whether x is float32 on a device with float64, which cumsum, cumprod, var and std compute in, as PyTorch's CPU
    accumulates float32 in float64 (a running total drifts by ulps of the total per block, squares overflow)."""
    return x.dtype == dtypes.float32 and _has_float64(x.device)


def _cum_acc_dtype(x: Tensor, axis: int) -> DType:
    # what cumsum and cumprod accumulate in: float64 for float32 (`_in_float64`) along axes that go in blocks (a row of
    # 512 sums its prefixes in one kernel of n^2 / 2 taps, where float64 took 4x the time), else as sum's
    if x.ndim and x.shape[axis] > _CUM_BLOCK and _in_float64(x):
        return dtypes.float64
    return _sum_acc_dtype(x.dtype)


def _sum_op(dt: DType) -> Ops:
    # adding a one-hot selection: bool values combine with OR (MAX), everything else with ADD
    return Ops.MAX if dt == dtypes.bool else Ops.ADD


# cumulative ops on axes longer than this go in two levels (blocks, then the blocks' totals)
_CUM_BLOCK = 512


class _Mask:
    """A bool tensor used as an index (selects where true)."""

    def __init__(self, t: Tensor) -> None:
        self.t = t


def _with(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    return tuple(size if i == axis % len(shape) else s for i, s in enumerate(shape))


def _tuple_n(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(x, (int, np.integer)):
        return (int(x),) * n
    t = tuple(int(v) for v in x)
    if len(t) != n:
        raise ShapeError(f"{what}: expected {n} values, got {t}")
    return t


def _check_values_in(idx: Tensor, lo: int, hi: int, message: Callable[[int], str], ignore: int | None = None) -> None:
    """Raise IndexRangeError(message(v)) for a value v of the int tensor idx outside [lo, hi) (`ignore` is allowed).

    Values from the host are checked here and now. Values computed on the device are checked by reading back their
    min and max (a sync; CHECK_INDEX=0 skips it); the check is recorded by a capturing TinyJit, whose replays repeat
    it after their kernels. A stored index captured by a TinyJit is checked both ways: its replays take other
    inputs (checked only while capturing, a jitted lookup out of range gave zeros)."""
    if not idx.numel():
        return
    if idx._is_plain_buffer():
        vals = idx.numpy().reshape(-1)
        vals = vals[vals != ignore] if ignore is not None else vals
        bad = vals[(vals < lo) | (vals >= hi)]
        if bad.size:
            raise IndexRangeError(message(int(bad[0])))
        if not capturing_checks:
            return
    if not CHECK_INDEX:
        return
    idx.realize()
    vals = idx if ignore is None else (idx == ignore).where(lo, idx)
    # (its graph recorded once per index signature and rebuilt over each new index: an embedding lookup in a decode
    # loop checks its token at every step)
    bounds = replay_call(_min_and_max, (vals,)).realize()
    check = _DeviceRangeCheck(bounds._buffer(), lo, hi, message)
    for captured in capturing_checks:
        captured.append(check)
    check()


def _min_and_max(vals: Tensor) -> Tensor:
    # an int tensor's (min, max) as int64, as a plain tensor: `stack` marks its result a copy (of an int64 index, the
    # cast is no op), which `replay_call` doesn't replay, as it could be a view
    return Tensor(Tensor.stack(vals.min(), vals.max()).cast(dtypes.int64).uop)


class _DeviceRangeCheck:
    """Reads a realized (min, max) pair of device-computed indices and raises if either lies outside [lo, hi)."""

    def __init__(self, bounds: Buffer, lo: int, hi: int, message: Callable[[int], str]) -> None:
        self.bounds, self.lo, self.hi, self.message = bounds, lo, hi, message

    def __call__(self) -> None:
        mn, mx = (int(v) for v in self.bounds.as_numpy())
        if mn < self.lo or mx >= self.hi:
            bad = mn if mn < self.lo else mx
            raise IndexRangeError(self.message(bad) + " (read back from the device; CHECK_INDEX=0 skips this check)")


def _check_targets(Y: Tensor, C: int, ignore_index: int, op: str) -> None:
    # class targets in [0, C), ignore_index aside (torch raises "Target 5 is out of bounds")
    _check_values_in(Y, 0, C, lambda bad: f"{op}: target {bad} is out of bounds for {C} classes", ignore_index)


def _short_int(y: int) -> str:
    return str(y) if abs(y) < 10**30 else f"{'-' if y < 0 else ''}({y.bit_length()}-bit int)"


@functools.cache
def _largest_finite(dt: DType) -> float:
    # (dtypes.max of a float is inf; kept per dtype: every float `full`, `fill_` and setitem of a number asks)
    return float.fromhex("0x1.fep127") if dt == dtypes.bfloat16 else float(np.finfo(to_numpy_dtype(dt)).max)


def _rounded_to(value: float, dtype: DType) -> float:
    # a Python float rounded to a float dtype on the host (bfloat16: float32's top half, to nearest even)
    if dtype == dtypes.bfloat16:
        bits = int(np.array(value, np.float32).view(np.uint32))
        if not math.isfinite(value):
            return value
        return float(np.array(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16, np.uint32).view(np.float32))
    return float(np.array(value, to_numpy_dtype(dtype)))


def _check_stored_scalar(
    value: Any, dt: DType, op: str, *, half_floats: bool = True, negative_unsigned: bool = True
) -> None:
    """Refuse, as PyTorch does, a Python number that an op stores into a `dt` tensor (full, fill_, masked_fill,
    where, clamp's bounds, setitem, pad and scatter values) when `dt` can't hold it: a finite float beyond the dtype's
    largest (it would become inf), or NaN, inf or an out-of-range number for an int dtype. inf and NaN go into float
    dtypes, anything into bool, and a negative int above -2**bits into an unsigned dtype (wrapped, as torch's) unless
    `negative_unsigned` is False. Where torch rounds instead of checking (where and setitem into float16 and
    bfloat16: `half_floats` False) the number rounds, to inf. Arithmetic (`t + 1e40`) is not checked: there, as in
    torch, the number rounds to the dtype."""
    if isinstance(value, (bool, np.bool_)) or dt == dtypes.bool or not isinstance(value, (int, float, np.number)):
        return
    if not half_floats and dtypes.is_float(dt) and dt.itemsize == 2:
        return
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, int) and dtypes.is_int(dt):
        if negative_unsigned and dtypes.is_unsigned(dt) and dt.itemsize < 8 and -(1 << 8 * dt.itemsize) < value < 0:
            return
        fits = dtypes.min(dt) <= value <= dtypes.max(dt)
    elif dtypes.is_int(dt):
        fits = math.isfinite(value) and dtypes.min(dt) <= value <= dtypes.max(dt)
    else:
        try:
            fits = not math.isfinite(float(value)) or abs(value) <= _largest_finite(dt)
        except OverflowError:  # an int beyond float64
            fits = False
    if not fits:
        shown = _short_int(value) if isinstance(value, int) else repr(value)
        largest = f"{dtypes.min(dt)}..{dtypes.max(dt)}" if dtypes.is_int(dt) else f"+-{_largest_finite(dt):g}"
        raise ValueOverflowError(
            f"{op}: the value {shown} can't be converted to {dt} without overflow (its finite range is {largest}); "
            "use a value in range, or a wider dtype for the tensor"
        )


def _check_same_device(op: str, tensors: Sequence[Tensor]) -> None:
    """An op over tensors on different devices fails here, by name, not in a backend's program (PyTorch: "Expected
    all tensors to be on the same device")."""
    devices = list(dict.fromkeys(t.device for t in tensors))
    if len(devices) > 1:
        raise ArgumentError(f"{op}: operands are on different devices ({', '.join(devices)}); move them with .to()")


def _int_joining(value: Any, dt: DType, op: str) -> Any:
    """A Python int that an op puts beside an integer `dt` tensor as one of its values (clamp's bounds, where's
    branches): checked as stored into `dt` (`_check_stored_scalar`) and a negative one wrapped into an unsigned dtype,
    so the result keeps `dt`, as torch's (`uint8_t.clamp(min=-1)` clamps at 255; `int8_t.clamp(max=1000)` raises)
    instead of widening to int64 as arithmetic does. Any other value comes back as it is."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or not dtypes.is_int(dt):
        return value
    value = int(value)
    _check_stored_scalar(value, dt, op)
    return value % (1 << 8 * dt.itemsize) if value < 0 and dtypes.is_unsigned(dt) else value


def _positive_n(x: int | Sequence[int], n: int, what: str, op: str) -> tuple[int, ...]:
    """_tuple_n for a size, step or count that must be at least 1 (0 would divide by zero further on)."""
    t = _tuple_n(x, n, what)
    if any(v <= 0 for v in t):
        raise ArgumentError(f"{op}: {what} must be positive, got {x!r}")
    return t


def _conv_pads(
    padding: Any, n: int, ks: Sequence[int], dilation: Sequence[int], op: str
) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial axis from an int, one int per axis, 2 per axis (last axis first), or a string."""
    pads = _conv_pads_any(padding, n, ks, dilation, op)
    if any(v < 0 for pair in pads for v in pair):
        raise ArgumentError(f"{op}: padding must not be negative, got {padding!r}")
    return pads


def _conv_pads_any(
    padding: Any, n: int, ks: Sequence[int], dilation: Sequence[int], op: str
) -> tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            total = [d * (k - 1) for k, d in zip(ks, dilation, strict=True)]
            return tuple((t // 2, t - t // 2) for t in total)
        raise ArgumentError(f"{op}: padding must be an int, a sequence, 'valid' or 'same', got {padding!r}")
    if isinstance(padding, (int, np.integer)):
        return ((int(padding), int(padding)),) * n
    p = [int(v) for v in padding]
    if len(p) == n:
        return tuple((v, v) for v in p)
    if len(p) == 2 * n:
        pairs = [(p[i], p[i + 1]) for i in range(0, 2 * n, 2)]
        return tuple(pairs[::-1])
    raise ShapeError(f"{op}: padding {tuple(p)} needs 1, {n} or {2 * n} values for {n} spatial dims")


def _einsum_diagonal(t: Tensor, s: str) -> tuple[Tensor, str]:
    # a letter repeated within one operand: take the diagonal of those two axes
    while len(set(s)) != len(s):
        c = next(c for c in s if s.count(c) > 1)
        i = s.index(c)
        j = s.index(c, i + 1)
        n = t.shape[i]
        if t.shape[j] != n:
            raise ShapeError(f"einsum: repeated letter {c!r} has sizes {n} and {t.shape[j]}")
        rest = [a for a in range(t.ndim) if a not in (i, j)]
        x = t.permute(rest + [i, j]).flatten(-2, -1)
        # the diagonal of an n x n block is every (n+1)-th element of its flat form
        x = x.pad(((0, 0),) * (x.ndim - 1) + ((0, n),)).reshape(x.shape[:-1] + (n, n + 1))
        t = x._slice_axis(x.ndim - 1, 0, 1).reshape(x.shape[:-2] + (n,))
        s = "".join(s[a] for a in rest) + c
    return t, s


def _with_gradient_of(value: Tensor, surrogate: Tensor) -> Tensor:
    """`value`, with the gradient of `surrogate` (the same function, computed in a way whose derivatives stay finite).
    `surrogate` must be finite wherever `value` is: their difference to the detached copy is then exactly 0 (taken
    away rather than added, so a -0.0 value stays -0.0)."""
    return value.detach() - (surrogate.detach() - surrogate)


def _with_reduced_derivative(value: Tensor, x: Tensor, derivative: Callable[[Tensor], Tensor], axis: int) -> Tensor:
    """`value`, a reduction of x along `axis` (kept, size 1), whose gradient with respect to x is `derivative(x)` (x's
    shape) times the incoming one; its infinities and NaNs come through, as PyTorch's (the 1-norm's sign(x) at an
    infinite x, inf / inf at the 2-norm's). `derivative` builds it from x when a gradient is taken (it may compute the
    value again: a rule must not hold its own node), not detached, so second derivatives are the derivative's."""
    from uopkit.gradient import set_gradient

    x_uop = x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        x_now = Tensor(x_uop)
        d = derivative(x_now)
        return ((Tensor(g) * d.cast(g.dtype)).uop,)

    set_gradient(value.uop, (x_uop,), rule)
    return value


def _with_derivative(
    value: Tensor, x: Tensor, derivative: Derivative, *more: tuple[Tensor, Derivative], reads_input: bool = False
) -> Tensor:
    """`value` (a function of x, computed for accuracy), whose gradient is `derivative` (d value / dx, a textbook
    formula) times the incoming one; `more` holds (input, derivative) pairs of a function of several inputs. The
    value's own subgraph is never differentiated (its branches' inf and nan stay out), the forward computes the value
    alone, and the derivative's infinities and nans come through as PyTorch's do (asin' at 1 is inf, beyond it nan);
    second derivatives are the derivative's. A bool derivative is a mask, and a (mask, factor) pair the factor where
    the mask is set: the incoming gradient is selected there and is 0 elsewhere, also an inf or a nan, as torch's
    piecewise gradients (clamp, hardsigmoid, hardswish) select. `reads_input`: x's gradient is one torch computes
    with a backward kernel of its own that takes x (see `_reading_input`)."""
    from uopkit.gradient import set_gradient

    inputs = (x.uop, *(x_i.uop for x_i, _ in more))
    derivatives = tuple(_derivative_uops(d) for d in (derivative, *(d_i for _, d_i in more)))
    if value.uop in inputs:
        raise ArgumentError("_with_derivative: the value must be computed from its inputs, not be one of them")

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        grads = tuple(_times_derivative(g, d) if w else None for d, w in zip(derivatives, wanted, strict=True))
        if reads_input and grads[0] is not None:
            return (_reading_input(grads[0], inputs[0]), *grads[1:])
        return grads

    set_gradient(value.uop, inputs, rule)
    return value


def _with_derivative_of(value: Tensor, x: Tensor, derivative: Callable[[Tensor], Tensor]) -> Tensor:
    """`value` (a function of x), whose gradient is derivative(x) times the incoming one, as `_with_derivative`, but
    with the derivative built only when a backward pass asks for it: the gamma and Bessel functions' derivatives are
    functions of the family again (lgamma -> digamma -> polygamma(1) -> ...), so built at once each would build the
    next without end; and a derivative written through the function itself (tanh' = 1 - tanh^2) builds `value`'s own
    node again (nodes are shared), so its derivatives of every order follow the same rule."""
    from uopkit.gradient import set_gradient

    x_uop = x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        return (g * derivative(Tensor(x_uop)).cast(g.dtype).uop,)

    set_gradient(value.uop, (x_uop,), rule)
    return value


def _reading_input(grad: UOp, x: UOp) -> UOp:
    """`grad`, the gradient with respect to x of a piecewise-linear function torch differentiates with a backward
    kernel of its own that takes x (threshold_backward for relu and threshold, leaky_relu_backward, hardtanh_backward,
    the shrinks'), as a function of x too, with a zero derivative there: a backward through the gradient (a gradient
    penalty, a Hessian) reaches x and what x was computed from, and a parameter reached only that way gets a zero
    `.grad`, as torch's, not None (a WGAN-GP critic's biases before a LeakyReLU). A select on a mask of x does not
    (no gradient flows through a comparison), as with torch.where or clamp, whose gradients are such selects."""
    from uopkit.gradient import set_gradient

    # (the rule is carried by a reshape that changes nothing: the walk passes the gradient on to `grad` through it)
    node = UOp(Ops.RESHAPE, grad.dtype, (grad,), grad.shape)
    set_gradient(node, (grad, x), functools.partial(_passed_and_zero, x.shape or (), x.device))
    return node


def _passed_and_zero(
    shape: tuple[int, ...], device: str, g: UOp, wanted: tuple[bool, ...]
) -> tuple[UOp | None, UOp | None]:
    return (g if wanted[0] else None), (_zeros(g.dtype, device, shape) if wanted[1] else None)


def _gradient_stored_once(x: Tensor) -> Tensor:
    """x itself, whose gradient is stored by a kernel of its own when it is computed from other values: a consumer that
    reads the gradient in several reduces (BatchNorm's backward: sum(g), sum(g * x_hat) and dx) would otherwise compute
    it in each of them (a ReLU's mask, a residual add and a strided convolution's input gradient, every pass); a step
    of a recursion (ctc_loss) would fuse its gradient with the next step's, kernels growing with the square of the
    steps. A view of the result is no window of a buffer: store it with `.contiguous()` after this, not before."""
    from uopkit.gradient import set_gradient

    node = UOp(Ops.RESHAPE, x.dtype, (x.uop,), x.shape)
    set_gradient(node, (x.uop,), _stored_gradient_rule)
    return Tensor(node)


def _stored_gradient_rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
    from uopkit.schedule.grouper import is_realized_view

    # (a stored gradient or a broadcast constant is as cheap to read again as a copy of it)
    return (g if is_realized_view(g) or g.base.op is Ops.CONST else Tensor(g).contiguous().uop,)


# a derivative: its values, a mask (bool), or a mask and the values where it is set
Derivative = Any


def _derivative_uops(d: Derivative) -> UOp | tuple[UOp, UOp]:
    return (d[0].uop, d[1].uop) if isinstance(d, tuple) else d.uop


def _expanded_const(value: Any, dtype: DType, device: UOp, shape: tuple[int, ...]) -> UOp:
    # the nodes of Tensor.full(shape, value): a constant reshaped to ones and expanded (the tensor-graph form of a
    # constant: on a DEVICE, shaped)
    u = UOp(Ops.CONST, dtype, (device,), cast_scalar(value, dtype))
    ones = (1,) * len(shape)
    if ones:
        u = UOp(Ops.RESHAPE, dtype, (u,), ones)
    return u if shape == ones else UOp(Ops.EXPAND, dtype, (u,), shape)


def _zeros(dtype: DType, device: str | tuple[str, ...], shape: tuple[int, ...]) -> UOp:
    # Tensor.zeros(shape)'s nodes, for a gradient rule (a bare UOp.const would be no tensor-graph node: uop/spec.py)
    return _expanded_const(0, dtype, UOp(Ops.DEVICE, arg=device), shape)


def _zero_like(g: UOp) -> UOp:
    # 0 in g's dtype and shape, on g's device
    return _zeros(g.dtype, g.device, g.shape or ())


def _times_derivative(g: UOp, d: UOp | tuple[UOp, UOp]) -> UOp:
    # a mask (clip's "inside the bounds") selects the incoming gradient, as torch's: an inf or a nan coming back where
    # the mask is off gives 0, where a product would give nan
    if isinstance(d, tuple):
        mask, factor = d
        return mask.where(g * _cast_uop(factor, g.dtype), _zero_like(g))
    if d.dtype == dtypes.bool:
        return d.where(g, _zero_like(g))
    return g * _cast_uop(d, g.dtype)


def _cast_uop(u: UOp, dtype: DType) -> UOp:
    # (a bfloat16 value is read through its bits: cast as a Tensor)
    return Tensor(u).cast(dtype).uop if u.dtype == dtypes.bfloat16 else u.cast(dtype)


def _host_np_dtype(dtype: DType) -> Any:
    # bfloat16 goes from float32 (numpy has none); `_host_values` rounds to float16 through float32, as torch's C++
    return to_numpy_dtype(dtype) if dtype != dtypes.bfloat16 else np.float32


def _host_values(values: Any, dtype: DType) -> np.ndarray:
    with np.errstate(over="ignore"):
        arr = np.array(values, _host_np_dtype(dtypes.float32 if dtype == dtypes.float16 else dtype))
        return arr.astype(np.float16) if dtype == dtypes.float16 else arr


def _reshape_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), tuple(shape))


def _from_numpy(arr: np.ndarray, device: str, dtype: DType) -> UOp:
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    shape = np.shape(arr)
    if dtype == dtypes.bfloat16:
        # the top half of float32, rounded to nearest even (NaN stays a quiet NaN)
        f32 = np.ascontiguousarray(arr, dtype=np.float32)
        bits = f32.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        arr = np.where(np.isnan(f32), 0x7FC0, rounded).astype(np.uint16).reshape(shape)
        return UOp(Ops.BITCAST, dtype, (_from_numpy(arr, device, dtypes.uint16),))
    # (a bool array's bytes past 0 and 1, np.frombuffer's of raw bytes, are True: stored as 1, as torch reads them)
    arr = np.ascontiguousarray(arr) if dtype != dtypes.bool else np.ascontiguousarray(arr).view(np.uint8) != 0
    buf = UOp.new_buffer(device, arr.size, dtype)
    b = Buffer(device, arr.size, dtype).allocate()
    if arr.size:
        b.copyin(memoryview(arr.reshape(-1)).cast("B"))
    buffers[buf] = b
    return _reshape_uop(buf, shape)


# ---------------------------------------------------------------------------------------------------------------------
# bfloat16: no renderer computes in it, so a bfloat16 tensor is BITCAST(bfloat16, <uint16 graph>) (under movement ops,
# WHERE, CONTIGUOUS, ...). Arithmetic goes through float32; realizing computes the uint16 bits.


# uint16 BUFFERs sharing the memory of bfloat16 BUFFERs
_bf16_alias: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _mark_view(view: Tensor, of: Tensor) -> Tensor:
    """`view` shows `of`'s contents as a PyTorch view does (reshape, permute, a slice, expand, diagonal): an in-place
    write into either must show in the other, also while both are lazy values (`indexing._share_storage`). It
    remembers the oldest live tensor of the chain of views, weakly: a view doesn't keep its base alive, and once the
    base is gone no one can see the write."""
    if view is not of:
        if several_views.marked:
            several_views.inherit_mark(view, of)
        root = of._view_of
        if root is _A_RESHAPED_COPY:
            # (a view of such a copy is one too: realized alone, never making a large lazy base, an expand, compute
            # into storage for it; a write into it stays in it)
            view._view_of = root
            return view
        view._view_of = root if root is not None and root() is not None else of._live_ref
    return view


# the tensors a module's backward hooks handed out (its inputs as forward reads them, its outputs), by id -> a weak
# reference: torch forbids an in-place write into one or into a view of one (the hooks' gradients would be wrong)
_no_in_place: dict[int, weakref.ref] = {}

IN_PLACE_ERROR = (
    "in-place write into tensor {i} that a module's backward hooks pass through (a module input or output, or a view "
    "of one): the hooks' gradients would be wrong; write into a clone() of it instead"
)


def _hold_weakly(registry: dict[int, weakref.ref], t: Tensor) -> None:
    # `t` in `registry` by id while it lives
    key = id(t)
    registry[key] = weakref.ref(t, lambda _, key=key: registry.pop(key, None))


def mark_no_in_place(t: Tensor) -> None:
    """Forbid in-place writes into `t` and its views, as torch does for what a module's backward hooks hand out."""
    _hold_weakly(_no_in_place, t)


# the results of view(dtype), by id -> a weak reference: copies here (a buffer holds one dtype; a kernel that wrote
# one dtype's bits into another's buffer would escape the scheduler's checks of what reads what), where torch's view
# shares the source's storage. A write into one would be lost: it raises instead.
_dtype_views: dict[int, weakref.ref] = {}

DTYPE_VIEW_ERROR = (
    "{op}: this tensor is (a view of) the result of view({dtype}), which uopkit makes as a copy: the write would not "
    "reach the source tensor, where torch's would. Compute out of place and write the source instead, e.g. "
    "`x.copy_((x.view(dtypes.int32) & 0x7FFFFFFF).view(x.dtype))`, or clone() the view to write into a tensor of its "
    "own."
)


def mark_dtype_view(t: Tensor) -> None:
    """Forbid in-place writes into `t`, a view(dtype) result, and into its views."""
    _hold_weakly(_dtype_views, t)


def check_in_place_allowed(t: Tensor, op: str = "in-place write") -> None:
    """torch's error for an in-place write into a tensor `mark_no_in_place` marked, or into a view of one; ours for
    one into a view(dtype) result (`mark_dtype_view`) or a view of one."""
    if not _no_in_place and not _dtype_views:
        return
    root = t._view_of() if t._view_of is not None else None
    for u in (t, root):
        if u is None:
            continue
        ref = _no_in_place.get(id(u))
        if ref is not None and ref() is u:
            raise RuntimeError(IN_PLACE_ERROR.format(i=0))
        ref = _dtype_views.get(id(u))
        if ref is not None and ref() is u:
            raise ArgumentError(DTYPE_VIEW_ERROR.format(op=op, dtype=u.dtype))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _strides_after_reshape(
    shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The strides of `new` viewing the same elements as (shape, strides), None where no strides can (PyTorch's
    reshape then copies, its view() raises). Old dims whose elements follow on evenly (stride[i] = stride[i+1] *
    size[i+1]) form runs; each run must be covered exactly by consecutive new dims, which then step through it."""
    if math.prod(shape) == 0:
        return _contiguous_strides(new)
    out = [0] * len(new)
    j = len(new) - 1
    run_size, covered = 1, 1
    run_stride = strides[-1] if strides else 1
    for i in range(len(shape) - 1, -1, -1):
        run_size *= shape[i]
        # the run ends at i when the dim before it doesn't continue it (a size-1 dim continues any run)
        if i == 0 or (shape[i - 1] != 1 and strides[i - 1] != run_size * run_stride):
            while j >= 0 and (covered < run_size or new[j] == 1):
                out[j] = covered * run_stride
                covered *= new[j]
                j -= 1
            if covered != run_size:
                return None
            if i > 0:
                run_stride, run_size, covered = strides[i - 1], 1, 1
    return tuple(out) if j < 0 else None


def _torch_layout(
    u: UOp, base: UOp | None = None, base_strides: tuple[int, ...] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of the node `u` as PyTorch lays out that view: its movement ops (and detaches) applied to the
    layout of what they view (`base`, when known: the node of the tensor it is a view of, laid out as `base_strides`
    when that is a view itself; else contiguous). A flip, a pad or
    a reshape no strides can give (copies in PyTorch) starts a contiguous layout of its own, and so does a constant
    broadcast to a shape (`Tensor.ones`: a new tensor in PyTorch). Kept per node when no `base` is given: a chain is
    mostly the last one with a node more on top."""
    chain = []
    known = None
    while u.op in _VIEW_NODES and u is not base:
        if base is None:
            # (a layout already known ends the walk before the constant check, which walks down the chain itself)
            known = _layouts.get(u)
            if known is not None or _is_filled_constant(u):
                break
        chain.append(u)
        windows = _window_views.get(u)
        # (overlapping windows are read through a flattened expand, which no strides show: their own rule instead)
        u = u.src[0] if windows is None else windows[0]
    if known is not None:
        shape, strides = known
    else:
        shape = u.shape or ()
        strides = _contiguous_strides(shape) if base_strides is None or u is not base else base_strides
    for n in reversed(chain):
        op = n.op
        windows = _window_views.get(n)
        if windows is not None:
            # torch's unfold: the windowed (last) axis steps `step` elements of it, the new window axis one
            step = windows[1]
            shape, strides = n.shape or (), strides[:-1] + (strides[-1] * step, strides[-1])
        elif op is not Ops.DETACH:
            new = n.shape or ()
            if op is Ops.RESHAPE:
                strides = _strides_after_reshape(shape, strides, new) or _contiguous_strides(new)
            elif op is Ops.PERMUTE:
                strides = tuple([strides[i] for i in n.arg])
            elif op is Ops.EXPAND:
                strides = tuple([0 if old != size else st for old, size, st in zip(shape, new, strides, strict=True)])
            elif op is not Ops.SHRINK and not (op is Ops.PAD and base is not None):
                # (a PAD inside a view of a known base is a step slice's: the padding is never read, the strides hold)
                strides = _contiguous_strides(new)
            shape = new
        if base is None:
            _layouts[n] = (shape, strides)
    return shape, strides


def _is_filled_constant(u: UOp) -> bool:
    # a CONST broadcast to a shape (reshapes and expands only): what Tensor.full and its kin build
    if u.op is not Ops.EXPAND and u.op is not Ops.RESHAPE:
        return False
    while u.op is Ops.EXPAND or u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op is Ops.CONST


_layouts = WeakKeyMap()
# the windows `unfold` reads as movement ops (node of the (..., count, size) windows -> (node of the tensor windowed
# along its last axis, step)), for their torch strides
_window_views = WeakKeyMap()


def _remember_windows(windows: UOp, source: UOp, step: int) -> None:
    """`windows` (..., count, size) are the windows of `source`'s last axis `step` apart, made of movement ops."""
    _window_views[windows] = (source, step)


def _reshape_is_view(u: UOp, new: tuple[int, ...]) -> bool:
    """Whether PyTorch's reshape of a tensor whose node is `u` into `new` is a view (else a copy)."""
    shape = u.shape or ()
    if [s for s in shape if s != 1] == [s for s in new if s != 1]:
        # (only size-1 dims added or dropped, `x[None]`, squeeze, keepdim: always a view)
        return True
    node = u
    while node.op in _VIEW_NODES:
        if node.op in _STRIDED:
            shape, strides = _torch_layout(u)
            return _strides_after_reshape(shape, strides, new) is not None
        node = node.src[0]
    # (reshapes of contiguous values: always a view)
    return True


_VIEW_NODES = frozenset(GroupOp.Movement | {Ops.DETACH})
_STRIDED = frozenset({Ops.PERMUTE, Ops.SHRINK, Ops.EXPAND})


class _Dropped:
    pass


# the mark of a result PyTorch copies though built of views here (`repeat`, `pad`, `interpolate`): a dead ref (no base)
_A_COPY = weakref.ref(_Dropped())
# the mark of a reshape PyTorch copies (no strides show its elements in the new shape: `x.T.reshape(-1)`), and its views
_A_RESHAPED_COPY = weakref.ref(_Dropped())


def _returns_copy(method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """For a method whose result PyTorch copies: an in-place write into the result stays in it, even where it is
    a view of self here (and a write into self doesn't show in it: the value semantics of a lazy reader)."""

    @functools.wraps(method)
    def copying(self: Any, *args: Any, **kwargs: Any) -> Tensor:
        out = method(self, *args, **kwargs)
        if out is not self:
            out._view_of = _A_COPY
        return out

    return copying


def _storage_uop(u: UOp) -> UOp:
    """The graph of a bfloat16 value's uint16 bits (other dtypes are returned unchanged)."""
    if u.dtype != dtypes.bfloat16:
        return u
    memo: dict[UOp, UOp] = {}
    for node in u.toposort(gate=lambda n: n.dtype == dtypes.bfloat16):
        if node.dtype != dtypes.bfloat16:
            continue
        memo[node] = _bits_node(node, memo)
    return memo[u]


def _bits_node(node: UOp, memo: dict[UOp, UOp]) -> UOp:
    u16 = dtypes.uint16
    if node.op is Ops.BITCAST:
        src = node.src[0]
        return src if src.dtype == u16 else UOp(Ops.BITCAST, u16, (src,))
    if node.op is Ops.BUFFER:
        # a bfloat16 BUFFER made elsewhere: the same memory under a uint16 BUFFER
        if node not in _bf16_alias:
            alias = UOp.new_buffer(node.arg[1], node.arg[2], u16)
            if node in buffers:
                buffers[alias] = buffers[node]
            _bf16_alias[node] = alias
        return _bf16_alias[node]
    if node.op is Ops.CONST:
        with np.errstate(over="ignore"):  # (a number beyond float32 is inf, as it is in bfloat16)
            bits = int(np.array([node.arg], dtype=np.float32).view(np.uint32)[0])
        rounded = 0x7FC0 if math.isnan(node.arg) else (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return UOp(Ops.CONST, u16, node.src, rounded)
    if node.op is Ops.CAST:
        return Tensor(node.src[0]).cast(dtypes.bfloat16).uop.src[0]
    if node.op in GroupOp.Movement or node.op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.WHERE, Ops.STORE, Ops.COPY):
        return UOp(node.op, u16, tuple(memo.get(s, s) for s in node.src), node.arg)
    raise TypeError(f"bfloat16: {node.op.name} can't be computed in bfloat16; cast to float32 first")


def _bits_tensor(t: Tensor) -> Tensor:
    if t.dtype != dtypes.bfloat16:
        return t
    bits = _storage_uop(t.uop)
    out = Tensor(bits)
    if out.uop is not bits:
        # (under no_grad the constructor cuts a computed graph from the gradient: these bits are t's own, which a
        # realize must store as they are, or it forgets the graph that computed t, and t's views are left on it)
        live_tensors.set_uop(out, bits)
    return out


def _flat_index(tensors: list[tuple[int, Tensor]], sizes: tuple[int, ...], bshape: tuple[int, ...]) -> Tensor:
    """The flat position, in the indexed axes taken together (row-major, `sizes`), of each index tuple: the index
    tensors (in range, negatives counting from the end) broadcast to `bshape`, int32 unless the positions need int64."""
    wide = math.prod(sizes) > dtypes.max(dtypes.int32)
    flat: Tensor | None = None
    for (_, idx), n, stride in zip(tensors, sizes, _contiguous_strides(sizes), strict=True):
        idx = idx.cast(dtypes.int64 if wide else dtypes.int32) if wide or idx.dtype.itemsize < 4 else idx
        term = (idx < 0).where(idx + n, idx) * stride if stride != 1 else (idx < 0).where(idx + n, idx)
        flat = term if flat is None else flat + term
    assert flat is not None
    return flat._broadcast_to(bshape)


def _scalar_as_vector(method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A scatter into a 0-d tensor (dim 0 or -1, a 0-d or one-element index), as torch's: done on one-element 1-d
    tensors and reshaped back."""

    @functools.wraps(method)
    def scatter(self: Tensor, dim: int, index: Any, src: Any, *args: Any, **kwargs: Any) -> Tensor:
        if self.ndim != 0 or not isinstance(index, type(self)) or index.ndim > 1:
            return method(self, dim, index, src, *args, **kwargs)
        _normalize_axis(dim, 0, method.__name__, self.shape)
        src = src.reshape(-1) if isinstance(src, type(self)) and src.ndim == 0 else src
        return method(self.reshape(1), 0, index.reshape(-1), src, *args, **kwargs).reshape(())

    return scatter


class GradFn:
    """What `Tensor.grad_fn` gives for a computed value: `name()` is the op that computed it, as "MULBackward"."""

    __slots__ = ("_op",)

    def __init__(self, op: str) -> None:
        self._op = op

    def name(self) -> str:
        return f"{self._op}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _list_dtype(flat: list[Any], typed: set[Any]) -> DType | None:
    """The dtype of a list holding numpy arrays or scalars or one-element tensors: their dtypes promoted with the
    Python numbers' (a Python float beside int64 values is the default float, beside a float16 0-d tensor float32), as
    torch.tensor's; None for a list of Python numbers only."""
    stored_kinds = [
        d if isinstance(d, DType) else from_numpy_dtype(d) for d in typed if isinstance(d, (np.dtype, DType))
    ]
    if not stored_kinds:
        return None
    # (identity: a numpy dtype compares equal to the Python type it stands for)
    python_kinds = [dtypes.from_py(k()) for k in typed if k is bool or k is int or k is float]
    return least_upper_dtype(*stored_kinds, *python_kinds)

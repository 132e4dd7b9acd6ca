"""The UOp IR: the `Ops` enum, hash-consed `UOp` nodes, pattern matching and graph rewriting."""

from __future__ import annotations

import functools
import itertools
import math
import operator
import struct
import weakref
from _weakref import _remove_dead_weakref  # what weakref.WeakValueDictionary removes with: a compare-and-delete
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import Enum, auto
from typing import Any

from uopkit.dtype import DType, PtrDType, dtypes, least_upper_dtype


class Ops(Enum):
    # tensor graph: storage and the meaning of values
    SINK = auto()
    BUFFER = auto()
    CONST = auto()
    # 0, 1, ..., arg - 1 along its one axis: an arange of integers, computed where it is read (a one-hot compare
    # against it becomes an indexed load)
    IOTA = auto()
    DEFINE_VAR = auto()
    BIND = auto()
    DEVICE = auto()
    COPY = auto()
    CONTIGUOUS = auto()
    DETACH = auto()
    KERNEL = auto()
    # one op writes storage at every level: tensor assign, kernel output, memory and register writes
    STORE = auto()
    # movement: change how a value is viewed, never the values themselves
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    # reduce over axes of a shaped value (tensor graph and kernel AST)
    REDUCE_AXIS = auto()
    # kernels and programs: memory, loops and registers
    DEFINE_GLOBAL = auto()
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()
    SPECIAL = auto()
    RANGE = auto()
    END = auto()
    INDEX = auto()
    LOAD = auto()
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()
    VECTORIZE = auto()
    GEP = auto()
    WMMA = auto()
    NOOP = auto()
    # ALU: unary
    CAST = auto()
    BITCAST = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    TRUNC = auto()
    # ALU: binary
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    SHL = auto()
    SHR = auto()
    POW = auto()
    # ALU: ternary
    WHERE = auto()
    MULACC = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons: identity hashing in C, not Enum's Python-level hash of the name (UOps hash this a lot)
    __hash__ = object.__hash__


class GroupOp:
    Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC}
    Binary = {
        Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
        Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR, Ops.POW,
    }  # fmt: skip
    Ternary = {Ops.WHERE, Ops.MULACC}
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
    Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR}
    Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
    # ops whose result is garbage (or a trap) on the zeros a masked load returns: never pad through them
    UnsafePad = {Ops.RECIP, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.POW}
    Meta = {Ops.SINK, Ops.KERNEL, Ops.NOOP, Ops.BARRIER, Ops.END, Ops.ENDIF}


# the ops that node construction, hash-consing, device lookup and range analysis test for, as module constants: on
# Python 3.11 every `Ops.X` is a lookup through EnumType.__getattr__'s slow hook (~0.1-0.17 us), and these run for
# every node built (the main job's code generation read `Ops.X` ~740k times, a fifth of them in `_range_of`)
_CONST, _DEFINE_VAR, _RANGE, _SPECIAL, _BIND = Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL, Ops.BIND
_BUFFER, _DEVICE, _COPY, _IOTA = Ops.BUFFER, Ops.DEVICE, Ops.COPY, Ops.IOTA
# (UOp's slots: see the class)
_UOP_SLOTS = ("op", "dtype", "src", "arg", "seq", "_shape", "_device", "_iota", "has_users", "__weakref__", "__dict__")
_CAST, _ADD, _SUB, _MUL, _MAX, _IDIV, _MOD = Ops.CAST, Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD
_CMPLT, _CMPNE, _CMPEQ, _AND, _OR, _WHERE = Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.WHERE


# ---------------------------------------------------------------------------------------------------------------------
# executing ALU ops on Python values (constant folding, range analysis and the reference emulator)


def _wrap_int(x: int, dt: DType) -> int:
    bits = 8 * dt.itemsize
    x &= (1 << bits) - 1
    if not dtypes.is_unsigned(dt) and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def _c_idiv(a: int, b: int) -> int:
    # C semantics: truncate toward zero
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_idiv(a, b) * b if b != 0 else 0


def _safe_float(fn: Callable[..., float]) -> Callable[..., float]:
    def wrapped(*args: float) -> float:
        try:
            return fn(*args)
        except (ValueError, ZeroDivisionError, OverflowError):
            return math.nan

    return wrapped


def _log2(x: float) -> float:
    if x == 0:
        return -math.inf
    if x < 0 or math.isnan(x):
        return math.nan
    return math.log2(x) if x != math.inf else math.inf


def _exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _recip(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _fdiv(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _trunc(x: float) -> float:
    # C's trunc: inf and NaN are themselves, and a result of zero keeps the sign (trunc(-0.5) is -0.0)
    if isinstance(x, float):
        return x if math.isinf(x) or math.isnan(x) else math.copysign(float(math.trunc(x)), x)
    return math.trunc(x)


def _sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


python_alu: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: _exp2,
    Ops.LOG2: _log2,
    Ops.SIN: _safe_float(math.sin),
    Ops.SQRT: _sqrt,
    Ops.RECIP: _recip,
    Ops.NEG: operator.neg,
    Ops.TRUNC: _trunc,
    Ops.ADD: operator.add,
    Ops.SUB: operator.sub,
    Ops.MUL: operator.mul,
    Ops.FDIV: _fdiv,
    Ops.IDIV: _c_idiv,
    Ops.MOD: _c_mod,
    Ops.MAX: lambda a, b: a if (a != a or a > b) else b,
    Ops.CMPLT: operator.lt,
    Ops.CMPNE: operator.ne,
    Ops.CMPEQ: operator.eq,
    Ops.XOR: operator.xor,
    Ops.OR: operator.or_,
    Ops.AND: operator.and_,
    Ops.SHL: operator.lshift,
    Ops.SHR: operator.rshift,
    Ops.POW: _safe_float(operator.pow),
    Ops.WHERE: lambda c, a, b: a if c else b,
    Ops.MULACC: lambda a, b, c: a * b + c,
}


def cast_scalar(x: Any, dt: DType) -> Any:
    """Convert a Python value to what a `dt` holds (bools, wrapped ints, rounded floats)."""
    dt = dt.scalar
    if type(x) is int and dt in _INT_BOUNDS:
        # (the common case, an index constant that fits: every integer constant built comes here)
        lo, hi = _INT_BOUNDS[dt]
        if lo <= x <= hi:
            return x
    if dt == dtypes.bool:
        return bool(x)
    if dtypes.is_int(dt):
        if isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return 0
            x = int(x)
        return _wrap_int(int(x), dt)
    x = float(x)
    if dt == dtypes.float32 and math.isfinite(x):
        try:
            return struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == dtypes.float16 and math.isfinite(x):
        # through float32, as torch's C++ converts a double to Half (rounded twice: 65519.999 is inf, not 65504)
        try:
            return struct.unpack("e", struct.pack("e", struct.unpack("f", struct.pack("f", x))[0]))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    return x


# each dtype's (min, max), looked up for every integer constant built and every node range analysis looks at
_DTYPE_BOUNDS: dict[DType, tuple[Any, Any]] = {dt: (dtypes.min(dt), dtypes.max(dt)) for dt in dtypes.all}
_INT_BOUNDS = {dt: _DTYPE_BOUNDS[dt] for dt in dtypes.ints}


def exec_alu(op: Ops, dtype: DType, operands: Sequence[Any]) -> Any:
    """Evaluate one ALU op on Python scalars as a `dtype` result."""
    if dtypes.is_int(dtype) and op in (Ops.SHL, Ops.SHR):
        operands = [int(v) for v in operands]
    return cast_scalar(python_alu[op](*operands), dtype)


# ---------------------------------------------------------------------------------------------------------------------
# UOp


class _UOpRef(weakref.ref):
    """The table's weak reference to a node, carrying the node's key: the callback drops the entry without a second
    table from references to keys (a dict insert and a pop less per node)."""

    __slots__ = ("key",)
    key: tuple


# hash-consing: building the same (op, dtype, src, arg) twice gives the same object. The table holds weak references
# (a node lives as long as something uses it); plain dicts and weakref.ref are C calls, where WeakValueDictionary
# runs Python code on every insert and lookup, and building graphs inserts a lot
_uop_table: dict[tuple, _UOpRef] = {}
# creation order: a node is newer than its sources, so a graph whose root is older than a node can't hold it. Others
# draw from it too (`LiveTensors` stamps when a tensor's graph changed): a number drawn is later than every node built
uop_seq = itertools.count()
_new_object: Callable[[type], Any] = object.__new__


def _forget_uop(ref: _UOpRef, _drop_if_dead: Callable[[dict, Any], None] = _remove_dead_weakref) -> None:
    # one C call that drops the entry only while it is a dead reference: a check and a `del` in Python let another
    # thread put a new node in between, which the `del` then dropped (a later build made a second object for the key)
    _drop_if_dead(_uop_table, ref.key)


def _leaf_device(u: UOp) -> str | None:
    op = u.op
    return u.arg[1] if op is _BUFFER else u.arg if op is _DEVICE else None


def const_identity(arg: Any) -> Any:
    """A constant's value as a table key: 0.0 == -0.0 (the two must stay two nodes) and nan != nan (one node is
    enough) as Python compares floats, so those are keyed by their hex form."""
    if type(arg) is float:
        return arg.hex() if arg == 0 or arg != arg else arg
    if type(arg) is tuple:
        return tuple(const_identity(a) for a in arg)
    return arg


class UOpMeta(type):
    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        key = (op, dtype, src, arg if op is not _CONST else const_identity(arg))
        try:
            ref = _uop_table.get(key)
        except TypeError as e:
            raise TypeError(f"UOp arg must be hashable, got {arg!r} for {op}") from e
        if ref is not None and (ret := ref()) is not None:
            return ret
        # the node built here, not through type.__call__ and UOp.__init__: a Python frame less per new node
        ret = _new_object(cls)
        ret.op, ret.dtype, ret.src, ret.arg = op, dtype, src, arg
        ret._shape = ret._device = ret._iota = _UNSET
        ret.seq = next(uop_seq)
        ret.has_users = False
        for s in src:
            s.has_users = True
        ref = _UOpRef(ret, _forget_uop)
        ref.key = key
        # setdefault is one atomic C call: when two threads build the same node at once, both get the first one in
        winner = _uop_table.setdefault(key, ref)
        while winner is not ref:
            first = winner()
            if first is not None:
                return first
            # a dead node's entry whose callback hasn't run yet: dropped only while dead, then the race for the key
            # again (assigning over it would let two threads each keep their own node)
            _remove_dead_weakref(_uop_table, key)
            winner = _uop_table.setdefault(key, ref)
        return ret


_buffer_ids = itertools.count()
# what an unset lazy slot of a UOp holds (a shape can be None)
_UNSET: Any = object()


class UOp(metaclass=UOpMeta):
    """An immutable node: `op` with a `dtype`, source nodes `src` and an `arg`. Equal nodes are the same object."""

    # `shape`, `device` and `reads_iota` are computed on first use and kept in the slots `_shape`, `_device`, `_iota`
    # (a tensor graph's nodes need no __dict__: one object less per node for the garbage collector). Properties, not a
    # `__getattr__` that fills unset slots: with `__getattr__` every attribute read takes CPython's slow hook (`u.op`
    # costs 3x), and an unset slot raises an AttributeError (with a formatted message) before the hook is called.
    # `has_users`: some node was built with this one as a source (it may be gone since): a node without users is in
    # no graph but its own, so a realize that replaces only such nodes need not look for them in other tensors' graphs
    __slots__ = _UOP_SLOTS

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> None:
        # (the fields; UOpMeta.__call__ sets them itself and doesn't call this)
        self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
        self._shape = self._device = self._iota = _UNSET
        self.has_users = False

    @property
    def shape(self) -> tuple[int, ...] | None:
        shape = self._shape
        return shape if shape is not _UNSET else _fill_shape(self)

    @property
    def device(self) -> str:
        device = self._device
        return device if device is not _UNSET else _find_device(self)

    def __reduce__(self) -> tuple:
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def replace(self, **kwargs: Any) -> UOp:
        get = kwargs.get
        return UOp(get("op", self.op), get("dtype", self.dtype), tuple(get("src", self.src)), get("arg", self.arg))

    def __repr__(self) -> str:
        return pretty_print(self)

    # --- graph walking

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
        """Every node reachable from self, sources before users (iterative: graphs can be deep)."""
        visited: dict[UOp, None] = {}
        if gate is not None and not gate(self):
            return visited
        # depth first, sources in order: each frame holds a node and the sources it has yet to look at (a node is on
        # the stack once, as the graph has no cycles)
        stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
        while stack:
            node, srcs = stack[-1]
            for s in srcs:
                if s not in visited and (gate is None or gate(s)):
                    stack.append((s, iter(s.src)))
                    break
            else:
                stack.pop()
                visited[node] = None
        return visited

    @property
    def reads_iota(self) -> bool:  # computed from an IOTA? kept in a slot (a walk per reduce was quadratic)
        for n in self.toposort(gate=lambda n: n._iota is _UNSET) if self._iota is _UNSET else ():
            n._iota = n.op is _IOTA or any(s._iota for s in n.src)
        return self._iota

    @functools.cached_property
    def tuplize(self) -> tuple:
        _cache_sources_first(self, "tuplize")
        return (
            self.op.value,
            self.arg if isinstance(self.arg, (int, str, tuple)) else 0,
            self.dtype,
            *(s.tuplize for s in self.src),
        )

    # --- shapes (tensor graph and kernel AST)

    @property
    def ndim(self) -> int:
        assert self.shape is not None
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements: of a BUFFER its allocation, of a shaped value the product of its shape."""
        if self.op is Ops.BUFFER:
            return self.arg[2]
        assert self.shape is not None, f"{self.op} has no shape"
        return math.prod(self.shape)

    @property
    def base(self) -> UOp:
        """The node under any chain of movement ops."""
        node = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    def movement_chain(self) -> list[UOp]:
        """The movement ops from this node down to its base, outermost first."""
        chain: list[UOp] = []
        node = self
        while node.op in GroupOp.Movement:
            chain.append(node)
            node = node.src[0]
        return chain

    @property
    def buf_uop(self) -> UOp:
        """The BUFFER this value lives in (through movement ops, STOREs and KERNELs)."""
        node = self.base
        if node.op is Ops.STORE:
            node = node.src[0].base
        if node.op is not Ops.BUFFER:
            raise RuntimeError(f"{self.op} is not backed by a buffer (its base is {node.op}); realize it first")
        return node

    # --- constructors

    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        if isinstance(value, UOp):
            return value
        return UOp(_CONST, dtype, (), cast_scalar(value, dtype) if dtype.count == 1 else value)

    def const_like(self, value: Any) -> UOp:
        return UOp.const(self.dtype, value)

    @staticmethod
    def new_buffer(device: str, size: int, dtype: DType) -> UOp:
        return UOp(_BUFFER, dtype, (), (next(_buffer_ids), device, size))

    @staticmethod
    def variable(name: str, vmin: int, vmax: int, dtype: DType | None = None) -> UOp:
        # the index dtype where the variable is made (int64 inside `index_dtype(dtypes.int64)`), looked up at the
        # call: a default argument would be fixed to int32 when this module was imported
        return UOp(Ops.DEFINE_VAR, dtype if dtype is not None else dtypes.index, (), (name, vmin, vmax))

    def alu(self, op: Ops, *src: UOp | int | float | bool) -> UOp:
        # (most ops have one other operand, a node: no generator for it)
        if len(src) == 1 and isinstance(src[0], UOp):
            srcs: tuple[UOp, ...] = (self, src[0])
        else:
            srcs = (self, *(s if isinstance(s, UOp) else self.const_like(s) for s in src))
        if op in GroupOp.Comparison:
            out = dtypes.bool.vec(self.dtype.count)
        elif op is _WHERE:
            out = srcs[1].dtype
        else:
            out = self.dtype
        return UOp(op, out, srcs)

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        return UOp(Ops.BITCAST, dtype, (self,))

    def __add__(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.ADD, x)

    def __radd__(self, x: int | float) -> UOp:
        return self.const_like(x).alu(Ops.ADD, self)

    def __rsub__(self, x: int | float) -> UOp:
        return self.const_like(x).alu(Ops.ADD, self * -1)

    def __sub__(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.ADD, -x if not isinstance(x, UOp) else x.alu(Ops.MUL, -1))

    def __mul__(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.MUL, x)

    def __rmul__(self, x: int | float) -> UOp:
        return self.const_like(x).alu(Ops.MUL, self)

    def __floordiv__(self, x: UOp | int) -> UOp:
        return self.alu(Ops.IDIV, x)

    def __mod__(self, x: UOp | int) -> UOp:
        return self.alu(Ops.MOD, x)

    def __neg__(self) -> UOp:
        return self.alu(Ops.MUL, -1) if dtypes.is_int(self.dtype) else self.alu(Ops.NEG)

    def lt(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.CMPLT, x)

    def ne(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.CMPNE, x)

    def logical_and(self, x: UOp | bool) -> UOp:
        return self.alu(Ops.AND, x)

    def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
        if not isinstance(a, UOp):
            a = b.const_like(a) if isinstance(b, UOp) else UOp.const(dtypes.from_py(a), a)
        return self.alu(Ops.WHERE, a, b if isinstance(b, UOp) else a.const_like(b))

    def maximum(self, x: UOp | int | float) -> UOp:
        return self.alu(Ops.MAX, x)

    def sink(self, *srcs: UOp) -> UOp:
        return UOp(Ops.SINK, dtypes.void, (self, *srcs))

    # --- symbolic range analysis

    @property
    def _min_max(self) -> tuple[Any, Any]:
        # remembered in the node's __dict__ by hand: the rules ask for every index node's range, and a
        # functools.cached_property takes a lock on each first computation (Python 3.11)
        ret = self.__dict__.get("_range")
        if ret is None:
            if _range_reads_sources(self):
                _cache_ranges_first(self)
            ret = self.__dict__["_range"] = _range_of(self)
        return ret  # type: ignore[no-any-return]

    @property
    def vmin(self) -> Any:
        ret = self.__dict__.get("_range")
        return (ret if ret is not None else self._min_max)[0]

    @property
    def vmax(self) -> Any:
        ret = self.__dict__.get("_range")
        return (ret if ret is not None else self._min_max)[1]

    def const_value(self) -> Any:
        """The value of a CONST (or of a node whose range is a single value), else None."""
        if self.op is Ops.CONST:
            return self.arg
        return None

    def substitute(self, mapping: dict[UOp, UOp], name: str = "substitute") -> UOp:
        return graph_rewrite(self, _pm_substitute, ctx=mapping, name=name, bottom_up=True)

    def render(self) -> str:
        """A short human form of an index expression (for errors and debugging)."""
        return render_expr(self)


def with_shape(u: UOp, shape: tuple[int, ...] | None) -> UOp:
    """`u`, taking `shape` as its shape where it has none worked out yet: a replayed graph's node, of the shape it was
    recorded with (its sources' shapes are the recorded ones)."""
    if u._shape is _UNSET:
        u._shape = shape
    return u


def replay_movement(u: UOp, recipe: Sequence[tuple[Ops, Any, tuple[int, ...]]]) -> UOp:
    """`recipe`'s movement ops, (op, arg, resulting shape) recorded on a node of `u`'s shape, applied to `u`. Each node
    takes its recorded shape and `u`'s device as they are, so a convolution's twenty-odd window nodes need no walk
    down the chain to work them out when first asked."""
    device = u._device
    for op, arg, shape in recipe:
        u = UOp(op, u.dtype, (u,), arg)
        if u._shape is _UNSET:
            u._shape = shape
        if u._device is _UNSET and device is not _UNSET:
            u._device = device
    return u


def _fill_shape(u: UOp) -> tuple[int, ...] | None:
    # a shape is computed from its sources' shapes, which they almost always know already
    for s in u.src:
        if s._shape is _UNSET:
            _fill_source_shapes(u)
            break
    ret = u._shape = _infer_shape(u)
    return ret


def _fill_source_shapes(u: UOp) -> None:
    # a graph can be deeper than Python's recursion limit: the sources without a shape get theirs first, sources before
    # users, so each computation only looks one level down
    for s in u.src:
        if s._shape is not _UNSET:
            continue
        if all(x._shape is not _UNSET for x in s.src):
            # (the usual miss: a new node over nodes that know theirs, e.g. a constant a gradient rule made)
            s._shape = _infer_shape(s)
            continue
        for n in u.toposort(gate=lambda n: n is u or n._shape is _UNSET):
            if n is not u:
                n._shape = _infer_shape(n)
        return


def _find_device(u: UOp) -> str:
    # (remembered in the slot: every binary Tensor op asks, and the walk below is as long as the graph)
    # a COPY's value lives on its target device, whatever device its source is on
    if u.op is _COPY:
        ret: str = u.src[1].arg
        u._device = ret
        return ret
    # (the usual case: a node a Tensor op just built over a source that knows)
    if u.src:
        known = u.src[0]._device
        if known is not _UNSET and known is not None:
            u._device = known
            return known  # type: ignore[no-any-return]
    # down the first sources to one that knows (Tensor ops ask as they build, so it is near), remembering it on the way
    # back
    path: list[UOp] = []
    node = u
    known = None
    while known is None and node.src and node.op is not _COPY:
        path.append(node)
        node = node.src[0]
        known = node._device
        if known is _UNSET:
            known = _leaf_device(node)
    if known is not None:
        for n in path:
            n._device = known
        return known  # type: ignore[no-any-return]
    copies: list[UOp] = []

    def outside_copies(node: UOp) -> bool:
        if node.op is _COPY:
            copies.append(node)
            return False
        return True

    for node in u.toposort(gate=outside_copies):
        if (leaf := _leaf_device(node)) is not None:
            u._device = leaf
            return leaf
    if copies:
        ret = u._device = copies[0].src[1].arg
        return ret
    raise RuntimeError("this graph has no device")


def _cache_sources_first(u: UOp, attr: str, key: str | None = None) -> None:
    # a cached property computed from its sources' (shape, range, ...) recurses as deep as the graph: fill the
    # sources' caches first, sources before users, so each computation only looks one level down (`key`: where in
    # the node's __dict__ the property keeps its value, when not under its own name)
    key = key or attr
    if all(key in s.__dict__ for s in u.src):
        return
    for n in u.toposort(gate=lambda n: n is u or key not in n.__dict__):
        if n is not u:
            getattr(n, attr)


def _range_reads_sources(u: UOp) -> bool:
    # whether `_range_of(u)` looks at u's sources: not for a value whose range is its dtype's (a float, a store)
    return u.op in _RANGE_FROM_SOURCES or dtypes.is_int(u.dtype) or u.dtype == dtypes.bool


_RANGE_FROM_SOURCES = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.BIND})


def _cache_ranges_first(u: UOp) -> None:
    # `_cache_sources_first` for ranges, not walking below a node whose range doesn't read its sources: an index's
    # range walked (and computed the dtype's range of) every float op under a comparison, and every op ordered before
    # a register read, of the kernel below it
    if all("_range" in s.__dict__ for s in u.src):
        return
    for n in u.toposort(gate=lambda n: n is u or ("_range" not in n.__dict__ and _range_reads_sources(n))):
        if n is not u:
            n._min_max  # noqa: B018


# ---------------------------------------------------------------------------------------------------------------------
# shape inference for the tensor graph and the kernel AST


def _permute_shape(u: UOp) -> tuple[int, ...] | None:
    inner = u.src[0].shape
    return None if inner is None else tuple(inner[i] for i in u.arg)


def _pad_shape(u: UOp) -> tuple[int, ...] | None:
    inner = u.src[0].shape
    return None if inner is None else tuple(s + b + a for s, (b, a) in zip(inner, u.arg, strict=True))


def _shrink_shape(u: UOp) -> tuple[int, ...] | None:
    return None if u.src[0].shape is None else tuple(e - b for b, e in u.arg)


def _reduce_shape(u: UOp) -> tuple[int, ...] | None:
    inner = u.src[0].shape
    if inner is None:
        return None
    return tuple(1 if i in u.arg[1] else s for i, s in enumerate(inner))


def _define_global_shape(u: UOp) -> tuple[int, ...] | None:
    return (u.dtype.size,) if isinstance(u.dtype, PtrDType) else None


def _load_shape(u: UOp) -> tuple[int, ...] | None:
    # a kernel AST's windowed load, LOAD(DEFINE_GLOBAL, start), reads `arg` elements (uopkit.schedule.windows)
    if len(u.src) == 2 and u.src[0].op is Ops.DEFINE_GLOBAL:
        return (u.arg,)
    return _first_source_shape(u)


def _first_source_shape(u: UOp) -> tuple[int, ...] | None:
    # elementwise: the sources' common shape (constants of a kernel AST have none)
    for s in u.src:
        shape = s.shape
        if shape is not None:
            return shape
    return None


# a node's shape from its sources', by op (ops not here have none): a table, not a chain of `u.op is Ops.X` tests,
# because every tensor-graph node asks once and each `Ops.X` read is a slow metaclass hook on Python 3.11
_SHAPE_RULES: dict[Ops, Callable[[UOp], tuple[int, ...] | None]] = {
    **dict.fromkeys(GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY}, _first_source_shape),
    Ops.LOAD: _load_shape,
    Ops.BUFFER: lambda u: (u.arg[2],),
    Ops.CONST: lambda u: (),
    Ops.IOTA: lambda u: (u.arg,),
    Ops.DEFINE_VAR: lambda u: (),
    Ops.RESHAPE: lambda u: tuple(u.arg),
    Ops.EXPAND: lambda u: tuple(u.arg),
    Ops.PERMUTE: _permute_shape,
    Ops.PAD: _pad_shape,
    Ops.SHRINK: _shrink_shape,
    Ops.FLIP: lambda u: u.src[0].shape,
    Ops.REDUCE_AXIS: _reduce_shape,
    Ops.STORE: lambda u: u.src[0].shape,
    Ops.DEFINE_GLOBAL: _define_global_shape,
}


def _infer_shape(u: UOp) -> tuple[int, ...] | None:
    rule = _SHAPE_RULES.get(u.op)
    return None if rule is None else rule(u)


# ---------------------------------------------------------------------------------------------------------------------
# range analysis (vmin/vmax) used by symbolic simplification


def _bounds(dt: DType) -> tuple[Any, Any]:
    ret = _DTYPE_BOUNDS.get(dt)
    if ret is None:
        ret = _DTYPE_BOUNDS[dt] = (dtypes.min(dt), dtypes.max(dt))
    return ret


def _range_of(u: UOp) -> tuple[Any, Any]:
    if u.op is _CONST and not isinstance(u.arg, tuple):
        return u.arg, u.arg
    dt = u.dtype
    lo, hi = _bounds(dt)
    if u.op is _DEFINE_VAR:
        return u.arg[1], u.arg[2]
    if u.op is _RANGE:
        return 0, max(u.src[0].vmax - 1, 0)
    if u.op is _SPECIAL:
        return 0, max(u.src[0].vmax - 1, 0) if u.src else hi
    if u.op is _BIND:
        return u.src[0].vmin, u.src[0].vmax
    if u.op is _CAST and dtypes.is_int(dt) and dtypes.is_int(u.src[0].dtype):
        s = u.src[0]
        if lo <= s.vmin and s.vmax <= hi:
            return s.vmin, s.vmax
        return lo, hi
    if u.op is _CAST and dt == dtypes.bool:
        s = u.src[0]
        return bool(s.vmin) and s.vmin == s.vmax, bool(s.vmax) or s.vmin != s.vmax or bool(s.vmin)
    if not (dtypes.is_int(dt) or dt == dtypes.bool):
        return lo, hi
    if u.op in GroupOp.Binary and len(u.src) == 2:
        a, b = u.src
        (a0, a1), (b0, b1) = (a.vmin, a.vmax), (b.vmin, b.vmax)
        if u.op is _ADD:
            return _clamp(a0 + b0, a1 + b1, lo, hi)
        if u.op is _SUB:
            return _clamp(a0 - b1, a1 - b0, lo, hi)
        if u.op is _MUL:
            vals = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
            return _clamp(min(vals), max(vals), lo, hi)
        if u.op is _MAX:
            return max(a0, b0), max(a1, b1)
        if u.op is _IDIV and b0 == b1 and b0 != 0:
            vals = [_c_idiv(a0, b0), _c_idiv(a1, b0)]
            return min(vals), max(vals)
        if u.op is _IDIV and b0 > 0 and a0 >= 0:
            return a0 // b1, a1 // b0
        if u.op is _MOD and b0 > 0 and a0 >= 0:
            if b0 == b1 and a1 < b0:
                return a0, a1
            return 0, min(a1, b1 - 1)
        if u.op is _MOD and b0 > 0:
            return -(b1 - 1), b1 - 1
        if u.op is _CMPLT:
            return a1 < b0, a0 < b1
        if u.op is _CMPNE:
            sure_eq = a0 == a1 == b0 == b1
            disjoint = a1 < b0 or b1 < a0
            return disjoint, not sure_eq
        if u.op is _CMPEQ:
            sure_eq = a0 == a1 == b0 == b1
            disjoint = a1 < b0 or b1 < a0
            return sure_eq, not disjoint
        if u.op is _AND and dt == dtypes.bool:
            return a0 and b0, a1 and b1
        if u.op is _OR and dt == dtypes.bool:
            return a0 or b0, a1 or b1
        if u.op is _AND and a0 >= 0 and b0 >= 0:
            return 0, min(a1, b1)
    if u.op is _WHERE:
        c, a, b = u.src
        if c.vmin == c.vmax:
            return (a.vmin, a.vmax) if c.vmin else (b.vmin, b.vmax)
        a_lo, a_hi = _bounded_by(c, a)
        return min(a_lo, b.vmin), max(a_hi, b.vmax)
    return lo, hi


def _bounded_by(c: UOp, a: UOp) -> tuple[Any, Any]:
    """The range of `a` where condition `c` holds, when `c` bounds `a` itself (a < n, k < a and their AND: an
    index checked before it is used): where(0 <= i < n, i, 0) is in [0, n - 1] whatever i's own range."""
    a_lo, a_hi = a.vmin, a.vmax
    for t in c.src if c.op is Ops.AND else (c,):
        if t.op is Ops.CMPLT and t.src[1].op is Ops.CONST and t.src[0] is a:
            a_hi = min(a_hi, t.src[1].arg - 1)
        elif t.op is Ops.CMPLT and t.src[0].op is Ops.CONST and t.src[1] is a:
            a_lo = max(a_lo, t.src[0].arg + 1)
    return a_lo, a_hi


def _clamp(a: Any, b: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
    # outside the dtype's range the value wraps: no useful bound
    if a < lo or b > hi:
        return lo, hi
    return a, b


# ---------------------------------------------------------------------------------------------------------------------
# pattern matching


class UPat:
    """A pattern over UOps: op(s), dtype(s), sources, arg, and a name to capture the match under."""

    __slots__ = (
        "op", "dtype", "src", "arg", "name", "allow_any_len", "custom_early_reject", "simple", "_ops", "_dtypes",
        "_src_ops",
    )  # fmt: skip

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
    ) -> None:
        self.op: tuple[Ops, ...] | None = (op,) if isinstance(op, Ops) else (tuple(op) if op is not None else None)
        self.dtype: tuple[DType, ...] | None = (
            (dtype,) if isinstance(dtype, DType) else (tuple(dtype) if dtype is not None else None)
        )
        # a tuple must match in order; a list matches in any order (commutative ops); one UPat matches every source
        self.src: Any = src
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
        # the same as sets for `match` (a tuple's `in` calls DType.__eq__ on each member that isn't the same object)
        self._ops = frozenset(self.op) if self.op is not None else None
        self._dtypes = frozenset(self.dtype) if self.dtype is not None else None
        # matches or not on the node alone (op and dtype), capturing just it: `PatternMatcher.rewrite` tests it
        # without `match`
        self.simple = src is None and arg is None and name is not None
        # the op sets of the source patterns that name ops, by position (sources in order) or not (a list: in any
        # order): `match` rejects a node whose sources can't have them before it captures or recurses
        self._src_ops: tuple[tuple[int, frozenset[Ops]], ...] = ()
        if isinstance(src, (tuple, list)):
            named = [(i, p._ops) for i, p in enumerate(src) if p._ops is not None]
            self._src_ops = tuple((i if isinstance(src, tuple) else -1, ops) for i, ops in named)

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    def named(self, name: str) -> UPat:
        pat = UPat(self.op, self.dtype, self.src, self.arg, name, self.allow_any_len)
        return pat

    def __repr__(self) -> str:
        return f"UPat({self.op}, dtype={self.dtype}, arg={self.arg!r}, name={self.name!r}, src={self.src!r})"

    # builders so rules read like math
    def _bin(self, op: Ops, x: UPat | Any, commutative: bool = False) -> UPat:
        other = x if isinstance(x, UPat) else UPat.const(None, x)
        return UPat(op, src=[self, other] if commutative else (self, other))

    def __add__(self, x: UPat | Any) -> UPat:
        return self._bin(Ops.ADD, x, True)

    def __mul__(self, x: UPat | Any) -> UPat:
        return self._bin(Ops.MUL, x, True)

    def __floordiv__(self, x: UPat | Any) -> UPat:
        return self._bin(Ops.IDIV, x)

    def __mod__(self, x: UPat | Any) -> UPat:
        return self._bin(Ops.MOD, x)

    def lt(self, x: UPat | Any) -> UPat:
        return self._bin(Ops.CMPLT, x)

    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way `uop` matches this pattern, each a dict of captures extending `store`."""
        if self._ops is not None and uop.op not in self._ops:
            return []
        if self._dtypes is not None and uop.dtype not in self._dtypes and uop.dtype.scalar not in self._dtypes:
            return []
        if self.arg is not None and uop.arg != self.arg:
            return []
        if self._src_ops:
            src = uop.src
            if len(src) < len(self.src):
                return []
            for i, ops in self._src_ops:
                if (src[i].op not in ops) if i >= 0 else all(s.op not in ops for s in src):
                    return []
        name = self.name
        if name is not None:
            if name in store and store[name] is not uop:
                return []
            store = {**store, name: uop}
        pats = self.src
        if pats is None:
            return [store]
        if isinstance(pats, UPat):
            stores = [store]
            for s in uop.src:
                stores = [m for st in stores for m in pats.match(s, st)]
            return stores
        if len(uop.src) != len(pats) and not (self.allow_any_len and len(uop.src) >= len(pats)):
            return []
        if isinstance(pats, tuple):
            # (most patterns: one order of sources, tried without building the list of orders)
            stores = [store]
            for pat, s in zip(pats, uop.src, strict=False):
                if len(stores) == 1:
                    stores = pat.match(s, stores[0])
                else:
                    stores = [m for st in stores for m in pat.match(s, st)]
                if not stores:
                    return stores
            return stores
        results: list[dict[str, UOp]] = []
        for order in itertools.permutations(pats):
            stores = [store]
            for pat, s in zip(order, uop.src, strict=False):
                stores = [m for st in stores for m in pat.match(s, st)]
                if not stores:
                    break
            results.extend(stores)
        return results


# how a rule's function is called (the third field of a PatternMatcher entry): bit 0, with `ctx` first; bit 1, a
# pattern of one named node whose function takes that node as its next positional parameter, called with it
# positionally (a call with **{name: node} builds a dict and binds by name: gradient rules run per node of a graph)
_WITH_CTX, _CAPTURE_BY_POSITION = 1, 2


class PatternMatcher:
    """An ordered list of (UPat, fn) rules; `fn(ctx, **captures)` or `fn(**captures)` returns a UOp or None."""

    def __init__(self, patterns: Sequence[tuple[UPat, Callable[..., Any]]]) -> None:
        self.patterns = list(patterns)
        self.pdict: dict[Ops, list[tuple[UPat, Callable[..., Any], int]]] = {}
        self.any_op: list[tuple[UPat, Callable[..., Any], int]] = []
        for pat, fn in self.patterns:
            params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
            wants_ctx = "ctx" in params
            how = _WITH_CTX if wants_ctx else 0
            if pat.simple and params == ("ctx", pat.name)[1 - wants_ctx :]:
                how |= _CAPTURE_BY_POSITION
            entry = (pat, fn, how)
            if pat.op is None:
                self.any_op.append(entry)
            else:
                for op in pat.op:
                    self.pdict.setdefault(op, []).append(entry)
        # keep the written order of rules across the per-op lists and the any-op list
        order = {id(p): i for i, (p, _) in enumerate(self.patterns)}
        for op in self.pdict:
            self.pdict[op] = sorted(self.pdict[op] + self.any_op, key=lambda e: order[id(e[0])])

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        for pat, fn, how in self.pdict.get(uop.op, self.any_op):
            if pat.simple:
                # (the op already selected this rule's list; only a dtype can still reject the node)
                dts = pat._dtypes
                if dts is not None and uop.dtype not in dts and uop.dtype.scalar not in dts:
                    continue
                if pat._ops is not None and uop.op not in pat._ops:
                    continue
                if how == _WITH_CTX | _CAPTURE_BY_POSITION:
                    ret = fn(ctx, uop)
                elif how == _CAPTURE_BY_POSITION:
                    ret = fn(uop)
                else:
                    ret = fn(ctx, **{pat.name: uop}) if how else fn(**{pat.name: uop})  # type: ignore[dict-item]
                if ret is not None and ret is not uop:
                    return ret
                continue
            for captures in pat.match(uop, {}):
                ret = fn(ctx, **captures) if how & _WITH_CTX else fn(**captures)
                if ret is not None and ret is not uop:
                    return ret
        return None


class RewriteError(RuntimeError):
    pass


def graph_rewrite(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    name: str = "rewrite",
    bottom_up: bool = False,
    max_steps: int = 2_000_000,
    cache: dict[UOp, UOp] | None = None,
) -> UOp:
    """Rewrite the graph under `sink` with `pm` to a fixpoint: each node after its sources, until no rule fires.
    With `bottom_up=True` rules are also tried on a node before its sources are visited. `cache` carries results
    from one call to the next (same `pm`, no `ctx`), so graphs sharing nodes are not rewritten twice."""
    done: dict[UOp, UOp] = cache if cache is not None else {}
    steps = 0
    # frames: (node, stage, target); stage 0 visits sources, 1 rebuilds and tries rules, 2 copies target's result
    stack: list[tuple[UOp, int, UOp | None]] = [(sink, 0, None)]
    # (bound once: the loop runs per node of every pass of every kernel)
    pop, rewrite = stack.pop, pm.rewrite
    while stack:
        node, stage, target = pop()
        steps += 1
        if steps > max_steps:
            raise RewriteError(f"graph_rewrite {name!r} did not converge in {max_steps} steps")
        if stage == 2:
            assert target is not None
            done[node] = done[target]
            continue
        if node in done:
            continue
        if stage == 0:
            if bottom_up and (new := rewrite(node, ctx)) is not None:
                stack.append((node, 2, new))
                stack.append((new, 0, None))
                continue
            # (a node whose sources are all rewritten, a leaf's and most others', goes on to stage 1 without a frame)
            if pending := [(s, 0, None) for s in reversed(node.src) if s not in done]:
                stack.append((node, 1, None))
                stack.extend(pending)
                continue
        src = node.src
        new_src = tuple([done[s] for s in src])
        rebuilt = node if new_src == src else UOp(node.op, node.dtype, new_src, node.arg)
        new = rewrite(rebuilt, ctx)
        if new is None:
            # the rebuilt node's sources are final and no rule fires on it: it is a fixpoint too
            done[node] = rebuilt
            done.setdefault(rebuilt, rebuilt)
        else:
            stack.append((node, 2, new))
            stack.append((new, 0, None))
    return done[sink]


# ---------------------------------------------------------------------------------------------------------------------
# substitution and printing


def _do_substitute(ctx: dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


_pm_substitute = PatternMatcher([(UPat(name="x"), _do_substitute)])


def render_expr(u: UOp) -> str:
    """Render an index expression as a short infix string."""
    infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&"}
    if u.op is Ops.CONST:
        return str(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return u.arg[0]
    if u.op is Ops.RANGE:
        return f"r{u.arg[0]}"
    if u.op is Ops.SPECIAL:
        return str(u.arg)
    if u.op in infix:
        return f"({render_expr(u.src[0])}{infix[u.op]}{render_expr(u.src[1])})"
    if u.op is Ops.MAX:
        return f"max({render_expr(u.src[0])}, {render_expr(u.src[1])})"
    if u.op is Ops.WHERE:
        return f"({render_expr(u.src[0])} ? {render_expr(u.src[1])} : {render_expr(u.src[2])})"
    return f"<{u.op.name}>"


def pretty_print(u: UOp, max_nodes: int = 200) -> str:
    nodes = list(u.toposort())
    if len(nodes) > max_nodes:
        return f"UOp({u.op}, {u.dtype}, arg={u.arg!r}, <{len(nodes)} nodes>)"
    names = {n: f"x{i}" for i, n in enumerate(nodes)}
    lines = [
        f"{names[n]} = {n.op.name}({n.dtype}, arg={n.arg!r}, src=({', '.join(names[s] for s in n.src)}))" for n in nodes
    ]
    return "\n".join(lines)


def promote(*xs: UOp) -> DType:
    return least_upper_dtype(*(x.dtype for x in xs))


def is_one_hot_reduce(red: UOp) -> bool:
    """A sum (or max) over one axis of a select whose condition reads an IOTA (in a DETACH under no_grad): the form
    indexing, gather and embeddings take, which the lowerer turns into one load at the index (no split, no tiling)."""
    sel = red.src[0].src[0] if red.src[0].op is Ops.DETACH else red.src[0]
    return len(red.arg[1]) == 1 and red.arg[0] in (Ops.ADD, Ops.MAX) and sel.op is Ops.WHERE and sel.src[0].reads_iota

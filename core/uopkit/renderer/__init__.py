"""The Renderer base class: what a backend implements to turn a linear program into source code."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

from uopkit.dtype import DType, dtypes
from uopkit.renderer.tensor_cores import TensorCore, TileLayout
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.uop.ops import PatternMatcher, UOp


@dataclass(frozen=True)
class RendererCaps:
    """What a backend's hardware and renderer can do: the one object the core reads while optimizing and lowering.

    A renderer holds one in ``caps`` (a class default, replaced per instance when the device's limits are only known
    at run time, e.g. ``self.caps = replace(self.caps, local_max=...)``); ``EMULATE=NAME`` copies it whole.
    """

    # loops are launched as a grid of threads (GPU-style: SPECIAL ids) rather than written as for loops
    has_local: bool = False
    # loops can be shared among CPU threads (OptOps.THREAD: RANGE kind "thread", see `uopkit.renderer.loops`)
    has_threads: bool = False
    # work-group local memory (DEFINE_LOCAL) and barriers (BARRIER): OptOps.GROUP/GROUPTOP/STAGE
    has_shared: bool = False
    # the largest launch per dimension (None: no limit) and the largest work-group per dimension
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    # the most threads one work-group may hold, all dimensions together (None: ``local_max[0]``)
    workgroup_max: int | None = None
    # threads that run in lockstep (an NVIDIA warp: 32, an AMD wavefront: 64; 1: unknown or none): the optimizer
    # sizes work-groups in multiples of it where it can
    subgroup_width: int = 1
    # bytes of local memory per work-group
    shared_max: int = 0
    # local memory is on-chip, faster than global memory (False: kept in global memory, as on OpenCL for CPUs): the
    # GPU heuristic stages a matmul's operands in it (OptOps.STAGE) only where it is
    shared_on_chip: bool = True
    # the widest vector of each scalar type the backend renders natively
    max_vector_width: int = 1
    # how many vectors of `max_vector_width` 4-byte lanes the processor's registers hold (a CPU backend: the CPU
    # heuristic sizes a matmul's register tile to them; 0: unknown, taken as 32)
    vector_registers: int = 0
    # the ALU ops the backend renders on whole vectors; with none, upcast lanes stay scalar copies. A comparison here
    # runs on vectors of lanes `vector_mask_bytes` wide and gives a bool vector that is a mask of lanes as wide, -1
    # true and 0 false (as C's vector extensions and OpenCL give); WHERE here selects lanes by a mask of their own
    # width (or by one bool), and OR and AND here combine two masks of one width bit by bit (as on integer vectors).
    # BITCAST here reinterprets a whole vector as one of another scalar type of the same size
    vector_ops: frozenset[Ops] = frozenset()
    # the lane sizes, in bytes, that the comparisons and WHERE of `vector_ops` run on (`mask_bytes`)
    vector_mask_bytes: frozenset[int] = frozenset({4})
    # the casts the backend renders on whole vectors, as (from, to) scalar dtypes; every other cast of a vector runs
    # lane by lane (and the ops after it on the lanes' scalars)
    vector_casts: frozenset[tuple[DType, DType]] = frozenset()
    # bytes: vector loads and stores need an aligned address (a GPU's 16-byte load faults on a misaligned one), at
    # most this much (`vector_alignment`); 0: element alignment is enough (OpenCL's vloadN, a memcpy). The core then
    # makes a vector access only where it proves the element offset aligned for every work-item (else the lanes load
    # one by one), and relies on each buffer's base being aligned to it: the device's allocator for globals, the
    # renderer's declarations for locals and registers
    vector_align: int = 0
    # declarative matrix units (validated when built); the optimizer's OptOps.TC targets them
    tensor_cores: tuple[TensorCore, ...] = ()
    # the right operand of a large matmul, when read row by row (k far apart), is first copied into column panels
    # of this many elements, each contiguous over k (schedule/packing.py); 0: never. For caches and prefetchers.
    pack_panel: int = 0
    # transcendental ops rendered natively; the core decomposes each unclaimed one (EXP2, LOG2, SIN, SQRT) into +, *
    # and bit operations (codegen/transcendental.py)
    transcendental_ops: frozenset[Ops] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
    # the dtypes the backend computes with and stores; the conformance suite tests each of them
    supported_dtypes: tuple[DType, ...] = (dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.float32, dtypes.float64)
    # the reduce ops (Ops.ADD, Ops.MAX) whose innermost reduce loops the backend vectorizes by itself (the loops of
    # RANGE kinds "sum"/"max", see `uopkit.renderer.loops`): the optimizer then leaves such reductions as plain loops
    # instead of splitting them into one accumulator per vector lane
    simd_reduce_ops: frozenset[Ops] = frozenset()

    def __post_init__(self) -> None:
        # lists and sets are accepted for convenience and stored as immutable tuples/frozensets
        object.__setattr__(self, "tensor_cores", tuple(self.tensor_cores))
        object.__setattr__(self, "supported_dtypes", tuple(self.supported_dtypes))
        for name in ("vector_ops", "vector_mask_bytes", "vector_casts", "transcendental_ops", "simd_reduce_ops"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        for name in ("global_max", "local_max"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))


CAP_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RendererCaps))


def vector_alignment(vector_align: int, nbytes: int) -> int:
    """The byte alignment a vector access of `nbytes` bytes needs on a backend with `caps.vector_align`: the largest
    power of two dividing its size, at most `vector_align` (1 when that is 0: any element address will do)."""
    if vector_align <= 0 or nbytes <= 0:
        return 1
    return min(vector_align, nbytes & -nbytes)


def mask_bytes(mask: UOp) -> int:
    """The lane width, in bytes, of a bool vector that is a mask (see `RendererCaps.vector_ops`): a comparison's is its
    operands' lane width, OR and AND of masks keep their width."""
    while mask.op in (Ops.OR, Ops.AND):
        mask = mask.src[0]
    return mask.src[0].dtype.scalar.itemsize if mask.src and mask.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else 4


class _CapAttribute:
    """``renderer.<cap>`` (on the class or an instance) reads ``caps.<cap>``; assigning on an instance replaces the
    instance's ``caps``. Kept so code written against the older class-attribute contract still works."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Renderer | None, owner: type[Renderer]) -> Any:
        value = getattr((obj if obj is not None else owner).caps, self.name)
        # tensor_cores read as a list, as it was declared
        return list(value) if self.name == "tensor_cores" else value

    def __set__(self, obj: Renderer, value: Any) -> None:
        obj.caps = replace(obj.caps, **{self.name: value})


class Renderer:
    """Turns a linear program (a list of UOps, see `uopkit.uop.spec.spec_program`) into source code.

    A backend subclasses this (usually through `uopkit.renderer.cstyle.CStyleRenderer`) and declares what its
    hardware can do in ``caps`` (a `RendererCaps`); the core reads it while optimizing and lowering. For backward
    compatibility a subclass may still set the capabilities as class attributes (``has_local = True``): they are
    folded into the class's ``caps`` when the class is created, and ``renderer.has_local`` reads ``caps``.
    """

    device: ClassVar[str] = ""
    caps: RendererCaps = RendererCaps()
    # backend-specific rewrite rules applied to the program before rendering
    extra_matcher: ClassVar[PatternMatcher | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        legacy = {n: cls.__dict__[n] for n in CAP_NAMES if n in cls.__dict__}
        if legacy:
            cls.caps = replace(cls.caps, **legacy)
            for n in legacy:
                delattr(cls, n)

    def render(self, name: str, uops: list[UOp]) -> str | bytes:
        """Return the program of a kernel called `name` computing `uops`: source text (``str``), or ``bytes`` for a
        backend whose compiler takes a binary form (bitcode, a serialized module). The device's compiler gets
        exactly this value (`uopkit.device.Compiler.compile`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement render")

    def rename(self, src: str | bytes, name: str, uops: list[UOp]) -> str | bytes:
        """What `render(name, uops)` returns, given `src`, what this renderer's `render` returned for `uops` under
        another name (kernels compiled into one library need distinct names, `engine.kernel_names`). This renders
        again; a renderer that knows where the name is in its program may do less."""
        return self.render(name, uops)


for _name in CAP_NAMES:
    setattr(Renderer, _name, _CapAttribute(_name))

__all__ = ["Renderer", "RendererCaps", "TensorCore", "TileLayout", "mask_bytes", "vector_alignment"]

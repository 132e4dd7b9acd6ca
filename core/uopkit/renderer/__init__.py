"""The Renderer base class: what a backend implements to turn a linear program into source code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from uopkit.dtype import DType, dtypes
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.uop.ops import PatternMatcher, UOp


@dataclass(frozen=True)
class TileLayout:
    """Where each element of a per-thread fragment sits in one operand's tile, bit by bit.

    `rows` and `cols` name, least significant bit first, where each bit of the row and column index comes from:
    ``"t<k>"`` is bit k of the thread's lane id within the tensor core's threads, ``"e<k>"`` bit k of the element's
    index within the thread's fragment. So ``rows=("t2", "t3", "t4", "e1"), cols=("e0", "t0", "t1", "e2")`` puts
    element e of lane t at row ``(t >> 2) + 8 * ((e >> 1) & 1)`` and column ``(e & 1) + 2 * (t & 3) + 8 * (e >> 2)``.
    A thread bit that appears in neither is a replication: threads that differ only in it hold the same elements.
    """

    rows: tuple[str, ...]
    cols: tuple[str, ...]

    def coord(self, thread: Any, elem: Any) -> tuple[Any, Any]:
        """(row, col) of element `elem` of thread `thread`; works on ints, numpy arrays and index UOps alike."""
        return _bits_value(self.rows, thread, elem), _bits_value(self.cols, thread, elem)


def _bits_value(bits: tuple[str, ...], thread: Any, elem: Any) -> Any:
    value: Any = 0
    for position, name in enumerate(bits):
        source = thread if name[0] == "t" else elem
        k = int(name[1:])
        bit = (source // (1 << k) if k else source) % 2
        term = bit * (1 << position) if position else bit
        value = term if position == 0 else value + term
    return value


@dataclass(frozen=True)
class TensorCore:
    """A matrix-multiply-accumulate unit, described as data: D = A @ B + C on one tile, computed together by
    `threads` threads (a warp, a SIMD group; 1 for a CPU matrix unit).

    - `dims` = (M, N, K): A is M x K, B is K x N, C and D are M x N; each a power of two.
    - `dtype_in` is the dtype of A and B, `dtype_out` of C and D (the accumulation dtype).
    - `elements_per_thread` = (A, B, C): how many elements of each operand one thread holds (its fragment); the WMMA
      UOp takes the fragments as vectors of these widths and returns D's fragment in C's layout.
    - `a_layout`, `b_layout`, `c_layout`: the `TileLayout` of each operand (rows x cols: M x K, K x N, M x N).
    - `name`: the intrinsic's name, for renderers (defaults to ``WMMA_M_N_K_in_out``).

    A description is validated when it is built (`uopkit.renderer.tensor_cores.validate_tensor_core`), so a plugin
    with a malformed one fails to open with the reason. The reference emulator executes a WMMA exactly as described.
    """

    dims: tuple[int, int, int]
    dtype_in: DType
    dtype_out: DType
    threads: int
    elements_per_thread: tuple[int, int, int]
    a_layout: TileLayout
    b_layout: TileLayout
    c_layout: TileLayout
    name: str = ""

    def __post_init__(self) -> None:
        from uopkit.renderer.tensor_cores import validate_tensor_core

        if not self.name:
            m, n, k = self.dims
            object.__setattr__(self, "name", f"WMMA_{m}_{n}_{k}_{self.dtype_in.name}_{self.dtype_out.name}")
        validate_tensor_core(self)

    def validate(self) -> TensorCore:
        """Check the description again (it is checked when built); returns self. Raises `TensorCoreError`."""
        from uopkit.renderer.tensor_cores import validate_tensor_core

        validate_tensor_core(self)
        return self

    @property
    def layouts(self) -> tuple[TileLayout, TileLayout, TileLayout]:
        return (self.a_layout, self.b_layout, self.c_layout)

    def __str__(self) -> str:
        return f"{self.name} ({self.threads} threads, {self.elements_per_thread} elements per thread)"


class Renderer:
    """Turns a linear program (a list of UOps, see `uopkit.uop.spec.spec_program`) into source code.

    A backend subclasses this (usually through `uopkit.renderer.cstyle.CStyleRenderer`) and sets the class
    attributes that describe what its hardware can do; the core reads them while optimizing and lowering.
    """

    device: ClassVar[str] = ""
    # loops are launched as a grid of threads (GPU-style) rather than written as for loops
    has_local: ClassVar[bool] = False
    # loops can be shared among CPU threads (OptOps.THREAD)
    has_threads: ClassVar[bool] = False
    has_shared: ClassVar[bool] = False
    global_max: ClassVar[tuple[int, ...] | None] = None
    local_max: ClassVar[tuple[int, ...] | None] = None
    shared_max: ClassVar[int] = 0
    # the widest vector of each scalar type the backend renders natively
    max_vector_width: ClassVar[int] = 1
    # the ALU ops the backend renders on whole vectors; with none, upcast lanes stay scalar copies
    vector_ops: ClassVar[frozenset[Ops]] = frozenset()
    tensor_cores: ClassVar[list[TensorCore]] = []
    # the right operand of a large matmul, when read row by row (k far apart), is first copied into column panels
    # of this many elements, each contiguous over k (schedule/packing.py); 0: never. For caches and prefetchers.
    pack_panel: ClassVar[int] = 0
    # transcendental ops rendered natively; the core decomposes the others into +, * and bit operations
    transcendental_ops: ClassVar[frozenset[Ops]] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
    # the dtypes the backend computes with and stores; the conformance suite tests each of them
    supported_dtypes: ClassVar[tuple[DType, ...]] = (
        dtypes.bool,
        *dtypes.ints,
        dtypes.float16,
        dtypes.float32,
        dtypes.float64,
    )
    # backend-specific rewrite rules applied to the program before rendering
    extra_matcher: ClassVar[PatternMatcher | None] = None

    def render(self, name: str, uops: list[UOp]) -> str:
        """Return the source of a kernel called `name` computing `uops`."""
        raise NotImplementedError(f"{type(self).__name__} must implement render")

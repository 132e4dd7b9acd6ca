"""The Renderer base class: what a backend implements to turn a linear program into source code."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from uopkit.dtype import DType, dtypes
from uopkit.renderer.tensor_cores import TensorCore, TileLayout
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.uop.ops import PatternMatcher, UOp


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


__all__ = ["Renderer", "TensorCore", "TileLayout"]

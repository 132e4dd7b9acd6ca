"""The Renderer base class: what a backend implements to turn a linear program into source code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from uopkit.uop.ops import PatternMatcher, UOp


@dataclass(frozen=True)
class TensorCore:
    """A matrix-multiply-accumulate unit, described as data: dims (M, N, K), input and output dtypes, and how many
    threads take part (`threads`) with how many elements each holds (`elements_per_thread`: A, B, C)."""

    dims: tuple[int, int, int]
    dtype_in: str
    dtype_out: str
    threads: int
    elements_per_thread: tuple[int, int, int]
    opts: tuple[str, ...] = ()
    swizzle: tuple[tuple[str, ...], ...] = field(default_factory=tuple)


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
    tensor_cores: ClassVar[list[TensorCore]] = []
    # backend-specific rewrite rules applied to the program before rendering
    extra_matcher: ClassVar[PatternMatcher | None] = None

    def render(self, name: str, uops: list[UOp]) -> str:
        """Return the source of a kernel called `name` computing `uops`."""
        raise NotImplementedError(f"{type(self).__name__} must implement render")

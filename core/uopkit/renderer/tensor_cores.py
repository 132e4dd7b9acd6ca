"""Tensor cores as data: the `TensorCore` description (re-exported by `uopkit.renderer`), its validation, its
reference semantics, and the in-tree ones.

A `TensorCore` says which element of which operand tile every thread holds. From that alone this module can:

- check a description is consistent (`validate_tensor_core`) and usable by a renderer (`validate_for_renderer`),
- turn per-thread fragments into tiles and back (`fragments_to_tile`, `tile_to_fragments`),
- compute a WMMA exactly as described (`reference_wmma`, what the reference emulator runs),

`uopkit.testing.programs.wmma_matmul_program` builds a linear program that multiplies matrices with WMMA UOps, used by
the tests and the conformance suite to check a description on any device that renders WMMA, and on the emulator.

The WMMA UOp of the linear program is ``UOp(Ops.WMMA, dtype_out.vec(C), (a, b, c), arg=tc)``: `a`, `b`, `c` are
the calling thread's fragments (vectors of ``elements_per_thread`` A, B, C), the result is its fragment of D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uopkit.dtype import DType, dtypes

if TYPE_CHECKING:
    import numpy as np

    from uopkit.renderer import Renderer


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

    A description is validated when it is built (`validate_tensor_core`), so a plugin
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
        if not self.name:
            m, n, k = self.dims
            object.__setattr__(self, "name", f"WMMA_{m}_{n}_{k}_{self.dtype_in.name}_{self.dtype_out.name}")
        validate_tensor_core(self)

    def validate(self) -> TensorCore:
        """Check the description again (it is checked when built); returns self. Raises `TensorCoreError`."""
        validate_tensor_core(self)
        return self

    @property
    def layouts(self) -> tuple[TileLayout, TileLayout, TileLayout]:
        return (self.a_layout, self.b_layout, self.c_layout)

    def __str__(self) -> str:
        return f"{self.name} ({self.threads} threads, {self.elements_per_thread} elements per thread)"


class TensorCoreError(ValueError):
    """A TensorCore description that is inconsistent, or that a renderer cannot use."""


def _log2(x: int, what: str, tc_name: str) -> int:
    if not isinstance(x, int) or isinstance(x, bool) or x < 1 or x & (x - 1):
        raise TensorCoreError(f"tensor core {tc_name}: {what} must be a positive power of two, got {x!r}")
    return x.bit_length() - 1


def _check_layout(
    layout: Any, operand: str, shape: tuple[int, int], thread_bits: int, elem_bits: int, tc_name: str
) -> None:
    where = f"tensor core {tc_name}, {operand} layout"
    if not isinstance(layout, TileLayout):
        raise TensorCoreError(f"{where}: expected a TileLayout, got {type(layout).__name__}")
    for axis, bits, size in (("rows", layout.rows, shape[0]), ("cols", layout.cols, shape[1])):
        if not isinstance(bits, tuple) or not all(isinstance(b, str) for b in bits):
            raise TensorCoreError(f"{where}: {axis} must be a tuple of bit names like 't0' or 'e1', got {bits!r}")
        if len(bits) != size.bit_length() - 1:
            raise TensorCoreError(
                f"{where}: {axis} names {len(bits)} bits, but {size} {axis} need {size.bit_length() - 1}"
            )
    used = layout.rows + layout.cols
    for name in used:
        kind, index = name[:1], name[1:]
        limit = thread_bits if kind == "t" else elem_bits
        if kind not in ("t", "e") or not index.isdigit() or int(index) >= limit:
            source = "threads" if kind == "t" else "elements per thread"
            raise TensorCoreError(
                f"{where}: bit {name!r} does not exist (use 't0'..'t{thread_bits - 1}' for thread bits and "
                f"'e0'..'e{elem_bits - 1}' for element bits; {source} has {limit} bits)"
            )
    duplicates = sorted({n for n in used if used.count(n) > 1})
    if duplicates:
        raise TensorCoreError(f"{where}: bits {duplicates} are used twice, so two elements would share a place")
    missing = [f"e{k}" for k in range(elem_bits) if f"e{k}" not in used]
    if missing:
        raise TensorCoreError(
            f"{where}: element bits {missing} are unused, so a thread would hold the same element twice"
        )


def validate_tensor_core(tc: TensorCore) -> None:
    """Raise `TensorCoreError` unless `tc` is a consistent description.

    Checks: dims, threads and elements per thread are powers of two; dtypes are scalar DTypes; each layout names
    exactly the bits of its tile, each thread or element bit at most once and every element bit; A and B may
    replicate (leave thread bits unused) but every element of C belongs to exactly one (thread, element).
    """
    name = getattr(tc, "name", "") or "?"
    if not (isinstance(tc.dims, tuple) and len(tc.dims) == 3):
        raise TensorCoreError(f"tensor core {name}: dims must be (M, N, K), got {tc.dims!r}")
    m, n, k = (_log2(d, f"dim {axis}", name) for d, axis in zip(tc.dims, "MNK", strict=True))
    for label, dt in (("dtype_in", tc.dtype_in), ("dtype_out", tc.dtype_out)):
        if not isinstance(dt, DType) or dt.count != 1 or dt == dtypes.void:
            raise TensorCoreError(f"tensor core {name}: {label} must be a scalar dtype, got {dt!r}")
    thread_bits = _log2(tc.threads, "threads", name)
    if not (isinstance(tc.elements_per_thread, tuple) and len(tc.elements_per_thread) == 3):
        raise TensorCoreError(
            f"tensor core {name}: elements_per_thread must be (A, B, C), got {tc.elements_per_thread!r}"
        )
    ea, eb, ec = (
        _log2(e, f"elements_per_thread[{op}]", name) for e, op in zip(tc.elements_per_thread, "ABC", strict=True)
    )
    M, N, K = tc.dims
    _check_layout(tc.a_layout, "A", (M, K), thread_bits, ea, name)
    _check_layout(tc.b_layout, "B", (K, N), thread_bits, eb, name)
    _check_layout(tc.c_layout, "C", (M, N), thread_bits, ec, name)
    if thread_bits + ec != m + n:
        raise TensorCoreError(
            f"tensor core {name}: C has {M * N} elements but {tc.threads} threads x {tc.elements_per_thread[2]} "
            f"elements per thread hold {tc.threads * tc.elements_per_thread[2]}; each element of C needs one owner"
        )
    for operand, bits, size in (("A", ea, m + k), ("B", eb, k + n)):
        if bits > size:
            raise TensorCoreError(f"tensor core {name}: {operand} fragments are larger than the {operand} tile")


def validate_for_renderer(renderer: Renderer | type[Renderer]) -> None:
    """Check every tensor core of a renderer: valid, and usable with its capabilities (threads need locals)."""
    local_threads = math.prod(renderer.caps.local_max) if renderer.caps.local_max else None
    for tc in renderer.caps.tensor_cores:
        if not isinstance(tc, TensorCore):
            raise TensorCoreError(
                f"{renderer.device or type(renderer).__name__}: tensor_cores holds a {type(tc).__name__}"
            )
        tc.validate()
        who = f"{renderer.device or type(renderer).__name__} tensor core {tc.name}"
        if tc.threads > 1 and not renderer.caps.has_local:
            raise TensorCoreError(f"{who} needs {tc.threads} threads per tile, but the renderer has no local threads")
        if local_threads is not None and tc.threads > local_threads:
            raise TensorCoreError(f"{who} needs {tc.threads} threads, more than local_max {renderer.caps.local_max}")
        for dt in (tc.dtype_in, tc.dtype_out):
            if dt not in renderer.caps.supported_dtypes:
                raise TensorCoreError(f"{who} uses {dt}, which the renderer's supported_dtypes does not list")


# ------------------------------------------------------------------------------------------ reference semantics


def fragment_coords(tc: TensorCore, operand: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each of shape (threads, elements_per_thread[operand]): where every fragment element sits in
    the tile of operand 0 (A), 1 (B) or 2 (C)."""
    import numpy as np

    threads = np.arange(tc.threads).reshape(-1, 1)
    elems = np.arange(tc.elements_per_thread[operand]).reshape(1, -1)
    rows, cols = tc.layouts[operand].coord(threads, elems)
    shape = (tc.threads, tc.elements_per_thread[operand])
    return np.broadcast_to(rows, shape), np.broadcast_to(cols, shape)


def _tile_shape(tc: TensorCore, operand: int) -> tuple[int, int]:
    m, n, k = tc.dims
    return ((m, k), (k, n), (m, n))[operand]


def fragments_to_tile(tc: TensorCore, operand: int, frags: np.ndarray) -> np.ndarray:
    """Fragments of shape (..., threads, elements) -> tiles of shape (..., rows, cols).

    Replicated elements (A and B may have them) must agree; the copy of the lowest thread is taken."""
    import numpy as np

    rows, cols = fragment_coords(tc, operand)
    tile = np.zeros((*frags.shape[:-2], *_tile_shape(tc, operand)), dtype=frags.dtype)
    # assign from the highest thread down, so the lowest thread's copy of a replicated element wins
    tile[..., rows[::-1], cols[::-1]] = frags[..., ::-1, :]
    return tile


def tile_to_fragments(tc: TensorCore, operand: int, tile: np.ndarray) -> np.ndarray:
    """Tiles of shape (..., rows, cols) -> fragments of shape (..., threads, elements)."""
    rows, cols = fragment_coords(tc, operand)
    return tile[..., rows, cols]


def reference_wmma(tc: TensorCore, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A @ B + C from fragments of shape (..., threads, elements) of A, B, C; returns D's fragments.

    Products and sums are computed in float64 (int64 for integer dtypes) and rounded to `dtype_out` once."""
    import numpy as np

    from uopkit.dtype import to_numpy_dtype

    wide = np.int64 if dtypes.is_int(tc.dtype_out) else np.float64
    a_tile = fragments_to_tile(tc, 0, a).astype(wide)
    b_tile = fragments_to_tile(tc, 1, b).astype(wide)
    c_tile = fragments_to_tile(tc, 2, c).astype(wide)
    d_tile = np.matmul(a_tile, b_tile) + c_tile
    return tile_to_fragments(tc, 2, d_tile).astype(to_numpy_dtype(tc.dtype_out))


# ------------------------------------------------------------------------------------------ in-tree descriptions


def _layout(rows: str, cols: str) -> TileLayout:
    return TileLayout(tuple(rows.split()), tuple(cols.split()))


# NVIDIA mma.sync (PTX ISA, "Matrix fragments for mma.m16n8k16/m16n8k8"): lane = 4 * groupID + threadID_in_group,
# so t0 t1 are threadID_in_group and t2 t3 t4 are groupID.
_CUDA_C = _layout("t2 t3 t4 e1", "e0 t0 t1")
CUDA_TENSOR_CORES: list[TensorCore] = [
    TensorCore(
        dims=(16, 8, 16),
        dtype_in=dtypes.float16,
        dtype_out=dtypes.float32,
        threads=32,
        elements_per_thread=(8, 4, 4),
        a_layout=_layout("t2 t3 t4 e1", "e0 t0 t1 e2"),
        b_layout=_layout("e0 t0 t1 e1", "t2 t3 t4"),
        c_layout=_CUDA_C,
        name="mma_m16n8k16_f16_f32",
    ),
    TensorCore(
        dims=(16, 8, 16),
        dtype_in=dtypes.float16,
        dtype_out=dtypes.float16,
        threads=32,
        elements_per_thread=(8, 4, 4),
        a_layout=_layout("t2 t3 t4 e1", "e0 t0 t1 e2"),
        b_layout=_layout("e0 t0 t1 e1", "t2 t3 t4"),
        c_layout=_CUDA_C,
        name="mma_m16n8k16_f16_f16",
    ),
    TensorCore(
        dims=(16, 8, 8),
        dtype_in=dtypes.float16,
        dtype_out=dtypes.float32,
        threads=32,
        elements_per_thread=(4, 2, 4),
        a_layout=_layout("t2 t3 t4 e1", "e0 t0 t1"),
        b_layout=_layout("e0 t0 t1", "t2 t3 t4"),
        c_layout=_CUDA_C,
        name="mma_m16n8k8_f16_f32",
    ),
]

# bfloat16 in, float out on sm_80+: the same fragments as the half m16n8k16 above. Kept apart from CUDA_TENSOR_CORES
# because the core computes bfloat16 in float32 (no Tensor program reaches it)
CUDA_BF16_TENSOR_CORES: list[TensorCore] = [
    TensorCore(
        dims=(16, 8, 16),
        dtype_in=dtypes.bfloat16,
        dtype_out=dtypes.float32,
        threads=32,
        elements_per_thread=(8, 4, 4),
        a_layout=_layout("t2 t3 t4 e1", "e0 t0 t1 e2"),
        b_layout=_layout("e0 t0 t1 e1", "t2 t3 t4"),
        c_layout=_CUDA_C,
        name="mma_m16n8k16_bf16_f32",
    ),
]

# TF32 (float32 operands rounded to a 10-bit mantissa) on sm_80+, m16n8k8: a0 (g, t), a1 (g+8, t), a2 (g, t+4),
# a3 (g+8, t+4); b0 (t, g), b1 (t+4, g). Only for float32 matmuls when TF32 is asked for: it is less precise
CUDA_TF32_TENSOR_CORES: list[TensorCore] = [
    TensorCore(
        dims=(16, 8, 8),
        dtype_in=dtypes.float32,
        dtype_out=dtypes.float32,
        threads=32,
        elements_per_thread=(4, 2, 4),
        a_layout=_layout("t2 t3 t4 e0", "t0 t1 e1"),
        b_layout=_layout("t0 t1 e0", "t2 t3 t4"),
        c_layout=_CUDA_C,
        name="mma_m16n8k8_tf32_f32",
    ),
]

# AMD RDNA3 v_wmma_f32_16x16x16_f16 (wave32): lane l holds row l%16 of A and column l%16 of B (lanes 16-31 repeat
# lanes 0-15: t4 is unused), and D[2*v + l//16][l%16] as its element v.
AMD_RDNA3_TENSOR_CORES: list[TensorCore] = [
    TensorCore(
        dims=(16, 16, 16),
        dtype_in=dtypes.float16,
        dtype_out=dtypes.float32,
        threads=32,
        elements_per_thread=(16, 16, 8),
        a_layout=_layout("t0 t1 t2 t3", "e0 e1 e2 e3"),
        b_layout=_layout("e0 e1 e2 e3", "t0 t1 t2 t3"),
        c_layout=_layout("t4 e0 e1 e2", "t0 t1 t2 t3"),
        name="wmma_f32_16x16x16_f16_w32",
    ),
]

# a matrix unit driven by one thread that holds whole tiles in row-major order (CPU matrix extensions; the default
# emulator profile uses it so the optimizer's tensor-core path runs anywhere)
ONE_THREAD_TENSOR_CORES: list[TensorCore] = [
    TensorCore(
        dims=(4, 4, 4),
        dtype_in=dtypes.float32,
        dtype_out=dtypes.float32,
        threads=1,
        elements_per_thread=(16, 16, 16),
        a_layout=_layout("e2 e3", "e0 e1"),
        b_layout=_layout("e2 e3", "e0 e1"),
        c_layout=_layout("e2 e3", "e0 e1"),
        name="mma_4x4x4_f32",
    ),
]

IN_TREE_TENSOR_CORES: dict[str, list[TensorCore]] = {
    "CUDA": CUDA_TENSOR_CORES,
    "AMD_RDNA3": AMD_RDNA3_TENSOR_CORES,
    "ONE_THREAD": ONE_THREAD_TENSOR_CORES,
}

"""Tensor cores as data: validation of `TensorCore` descriptions, their reference semantics, and the in-tree ones.

A `TensorCore` (in `uopkit.renderer`) says which element of which operand tile every thread holds. From that alone
this module can:

- check a description is consistent (`validate_tensor_core`) and usable by a renderer (`validate_for_renderer`),
- turn per-thread fragments into tiles and back (`fragments_to_tile`, `tile_to_fragments`),
- compute a WMMA exactly as described (`reference_wmma`, what the reference emulator runs),
- build a linear program that multiplies matrices with WMMA UOps (`wmma_matmul_program`), used by the tests and
  the conformance suite to check a description on any device that renders WMMA, and on the emulator.

The WMMA UOp of the linear program is ``UOp(Ops.WMMA, dtype_out.vec(C), (a, b, c), arg=tc)``: `a`, `b`, `c` are
the calling thread's fragments (vectors of ``elements_per_thread`` A, B, C), the result is its fragment of D.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from uopkit.dtype import DType, dtypes
from uopkit.renderer import Renderer, TensorCore, TileLayout

if TYPE_CHECKING:
    import numpy as np

    from uopkit.uop.ops import UOp


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


# ------------------------------------------------------------------------------------------ a WMMA matmul program


def wmma_matmul_program(tc: TensorCore, tiles: tuple[int, int, int] = (2, 2, 2)) -> list[UOp]:
    """A linear program computing ``out = a @ b`` with WMMA UOps, for `tiles` = (tiles along M, N, K).

    Buffers: data0 = out (dtype_out, M x N), data1 = a (dtype_in, M x K), data2 = b (dtype_in, K x N), row-major,
    where M, N, K are the tile dims times `tiles`. A tile of the output is one workgroup of `tc.threads` threads
    (SPECIAL "gidx0"/"gidx1" for the tile, "lidx0" for the lane); with one thread the tiles are global loops instead.
    Each thread keeps its fragment of the accumulator in registers and loops over K one tile at a time.
    """
    from uopkit.codegen.linearizer import linearize
    from uopkit.dtype import PtrDType
    from uopkit.uop.ops import Ops, UOp

    tm, tn, tk = tiles
    m, n, k = tc.dims
    big_m, big_n, big_k = m * tm, n * tn, k * tk
    ea, eb, ec = tc.elements_per_thread

    def const(v: int) -> UOp:
        return UOp.const(dtypes.index, v)

    out = UOp(Ops.DEFINE_GLOBAL, tc.dtype_out.ptr(big_m * big_n), (), 0)
    a_buf = UOp(Ops.DEFINE_GLOBAL, tc.dtype_in.ptr(big_m * big_k), (), 1)
    b_buf = UOp(Ops.DEFINE_GLOBAL, tc.dtype_in.ptr(big_k * big_n), (), 2)
    if tc.threads > 1:
        tile_n = UOp(Ops.SPECIAL, dtypes.index, (const(tn),), "gidx0")
        tile_m = UOp(Ops.SPECIAL, dtypes.index, (const(tm),), "gidx1")
        lane: UOp | int = UOp(Ops.SPECIAL, dtypes.index, (const(tc.threads),), "lidx0")
        outer: list[UOp] = []
    else:
        tile_m = UOp(Ops.RANGE, dtypes.index, (const(tm),), (0, "loop"))
        tile_n = UOp(Ops.RANGE, dtypes.index, (const(tn),), (1, "loop"))
        lane = 0
        outer = [tile_m, tile_n]
    acc_dtype: PtrDType = tc.dtype_out.ptr(ec)
    acc = UOp(Ops.DEFINE_REG, acc_dtype, (), 0)
    slots = [UOp(Ops.INDEX, acc_dtype, (acc, const(e))) for e in range(ec)]
    inits = [UOp(Ops.STORE, dtypes.void, (slot, UOp.const(tc.dtype_out, 0), *outer)) for slot in slots]
    kt = UOp(Ops.RANGE, dtypes.index, (const(tk), *inits), (2, "loop"))

    def element(buf: UOp, layout: TileLayout, e: int, row0: UOp, col0: UOp, width: int) -> UOp:
        row, col = layout.coord(lane, e)
        offset = (row0 + row) * width + col0 + col
        return UOp(Ops.LOAD, buf.dtype.base, (UOp(Ops.INDEX, buf.dtype, (buf, offset)),))

    a_frag = [element(a_buf, tc.a_layout, e, tile_m * m, kt * k, big_k) for e in range(ea)]
    b_frag = [element(b_buf, tc.b_layout, e, kt * k, tile_n * n, big_n) for e in range(eb)]
    c_frag = [UOp(Ops.LOAD, tc.dtype_out, (slot, kt)) for slot in slots]
    a_vec = UOp(Ops.VECTORIZE, tc.dtype_in.vec(ea), tuple(a_frag))
    b_vec = UOp(Ops.VECTORIZE, tc.dtype_in.vec(eb), tuple(b_frag))
    c_vec = UOp(Ops.VECTORIZE, tc.dtype_out.vec(ec), tuple(c_frag))
    d_vec = UOp(Ops.WMMA, tc.dtype_out.vec(ec), (a_vec, b_vec, c_vec), tc)
    # stores are chained (each lists the previous one as an ordering dep) so one END closes the loop after all
    update: UOp | None = None
    for e, slot in enumerate(slots):
        value = UOp(Ops.GEP, tc.dtype_out, (d_vec,), (e,))
        update = UOp(Ops.STORE, dtypes.void, (slot, value) + ((update,) if update is not None else ()))
    assert update is not None
    done = UOp(Ops.END, dtypes.void, (update, kt))
    body: UOp = done
    for e, slot in enumerate(slots):
        row, col = tc.c_layout.coord(lane, e)
        offset = (tile_m * m + row) * big_n + tile_n * n + col
        value = UOp(Ops.LOAD, tc.dtype_out, (slot, done))
        body = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, offset)), value, body))
    for r in reversed(outer):
        body = UOp(Ops.END, dtypes.void, (body, r))
    return linearize(UOp(Ops.SINK, dtypes.void, (body,)))

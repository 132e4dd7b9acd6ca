"""Hand-built linear programs and a runner for them, so the conformance suite can test a backend on every form of
the program spec without depending on what the optimizer happens to produce.

Programs are built as UOp graphs with the lowerer's conventions (RANGE(end, deps...), END(effect, range),
register STOREs) and ordered by the core's linearizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from uopkit.codegen.linearizer import linearize
from uopkit.device import Buffer, Device
from uopkit.dtype import DType, PtrDType, dtypes, from_numpy_dtype
from uopkit.renderer import TensorCore, TileLayout
from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import verify_program

# every power-of-two vector width a backend may claim as caps.max_vector_width (the CPU plugin claims 16 with AVX-512)
VECTOR_WIDTHS = [2, 4, 8, 16]


def idx(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


def global_buf(i: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), i)


def loop(rid: int, end: int | UOp, kind: str = "loop", deps: tuple[UOp, ...] = ()) -> UOp:
    return UOp(Ops.RANGE, dtypes.index, (end if isinstance(end, UOp) else idx(end), *deps), (rid, kind))


def load(buf: UOp, offset: UOp | int, gate: UOp | None = None, dtype: DType | None = None) -> UOp:
    index = UOp(
        Ops.INDEX,
        buf.dtype,
        (buf, offset if isinstance(offset, UOp) else idx(offset), *([gate] if gate is not None else [])),
    )
    return UOp(Ops.LOAD, dtype or buf.dtype.base, (index,))


def store(buf: UOp, offset: UOp | int, value: UOp, gate: UOp | None = None, deps: tuple[UOp, ...] = ()) -> UOp:
    off = offset if isinstance(offset, UOp) else idx(offset)
    index = UOp(Ops.INDEX, buf.dtype, (buf, off, *([gate] if gate is not None else [])))
    return UOp(Ops.STORE, dtypes.void, (index, value, *deps))


def end(effect: UOp, *ranges: UOp) -> UOp:
    """Close `ranges`, innermost first."""
    for r in ranges:
        effect = UOp(Ops.END, dtypes.void, (effect, r))
    return effect


def chain(stores: Sequence[UOp]) -> UOp:
    """One effect that orders `stores` (each gets the previous one as an ordering dep)."""
    prev: UOp | None = None
    for s in stores:
        prev = s if prev is None else s.replace(src=(*s.src, prev))
    assert prev is not None
    return prev


def program(*effects: UOp) -> list[UOp]:
    """Order a program's effects into a linear program and check it against the spec."""
    uops = linearize(UOp(Ops.SINK, dtypes.void, effects))
    verify_program(uops)
    return uops


def launch_dims(uops: Sequence[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
    """(global_size in workgroups, local_size in threads) from the program's SPECIALs ("gidx<d>", "lidx<d>")."""
    groups, local = [1, 1, 1], [1, 1, 1]
    has_local = False
    for u in uops:
        if u.op is Ops.SPECIAL and u.src[0].op is Ops.CONST:
            name = u.arg[0] if isinstance(u.arg, tuple) else u.arg
            dim = int(name[-1]) if name[-1].isdigit() else 0
            if name.startswith("l"):
                local[dim], has_local = int(u.src[0].arg), True
            else:
                groups[dim] = int(u.src[0].arg)
    return (groups[0], groups[1], groups[2]), ((local[0], local[1], local[2]) if has_local else None)


def run_program(
    device: str,
    uops: list[UOp],
    arrays: Sequence[np.ndarray],
    vals: tuple[int, ...] = (),
    feature: str | None = None,
    name: str = "conformance",
    claimed: str | None = None,
) -> list[np.ndarray]:
    """Render, compile (through the disk cache), load and run `uops` on `device` with one buffer per array (in
    DEFINE_GLOBAL order); returns every buffer's contents afterwards, shaped like its array.

    When `feature` names an optional part of the spec (vectors, locals, WMMA) and the renderer raises
    NotImplementedError for it, the test is skipped with the renderer's message, unless `claimed` names the caps
    field by which the device claims that feature (``"caps.max_vector_width=8"``): the core sends a claimed feature's
    programs, so then the test fails, naming the claim."""
    dev = Device[device]
    try:
        src = dev.renderer.render(name, list(uops))
    except NotImplementedError as e:
        if feature is None:
            raise
        if claimed is not None:
            pytest.fail(
                f"{device} claims {feature} ({claimed}) but its renderer raised NotImplementedError: {e}\n"
                "the core sends programs with every claimed feature: render it, or drop the claim until it does",
                pytrace=False,
            )
        pytest.skip(f"{device} does not render {feature}: {e}")
    lib = dev.compiler.compile_cached(src)
    prg = dev.runtime(name, lib)
    bufs = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        bufs.append(Buffer(device, a.size, from_numpy_dtype(a.dtype)).copyin(memoryview(a.reshape(-1))))
    global_size, local_size = launch_dims(uops)
    prg(*[b.opaque for b in bufs], global_size=global_size, local_size=local_size, vals=vals, wait=True)
    dev.synchronize()
    return [b.numpy().reshape(np.shape(a)) for b, a in zip(bufs, arrays, strict=True)]


def wmma_matmul_program(tc: TensorCore, tiles: tuple[int, int, int] = (2, 2, 2)) -> list[UOp]:
    """A linear program computing ``out = a @ b`` with WMMA UOps, for `tiles` = (tiles along M, N, K).

    Buffers: data0 = out (dtype_out, M x N), data1 = a (dtype_in, M x K), data2 = b (dtype_in, K x N), row-major,
    where M, N, K are the tile dims times `tiles`. A tile of the output is one workgroup of `tc.threads` threads
    (SPECIAL "gidx0"/"gidx1" for the tile, "lidx0" for the lane); with one thread the tiles are global loops instead.
    Each thread keeps its fragment of the accumulator in registers and loops over K one tile at a time.
    """
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

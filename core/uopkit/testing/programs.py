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
from uopkit.dtype import DType, dtypes, from_numpy_dtype
from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import verify_program


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
) -> list[np.ndarray]:
    """Render, compile (through the disk cache), load and run `uops` on `device` with one buffer per array (in
    DEFINE_GLOBAL order); returns every buffer's contents afterwards, shaped like its array.

    When `feature` names an optional part of the spec (vectors, locals, WMMA) and the renderer raises
    NotImplementedError for it, the test is skipped with the renderer's message instead of failing."""
    dev = Device[device]
    try:
        src = dev.renderer.render(name, list(uops))
    except NotImplementedError as e:
        if feature is None:
            raise
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

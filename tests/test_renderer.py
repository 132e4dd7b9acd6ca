"""The C-style renderer on hand-built linear programs: vectors, gates, registers."""

import numpy as np

from uopkit import Device, dtypes
from uopkit.device import Buffer
from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import verify_program


def _run(uops, name, bufs):
    verify_program(uops)
    dev = Device["CPU"]
    src = dev.renderer.render(name, uops)
    prg = dev.runtime(name, dev.compiler.compile_cached(src))
    prg(*[b.opaque for b in bufs])
    return src


def _const(v):
    return UOp.const(dtypes.int32, v)


def test_vector_load_add_store():
    f4 = dtypes.float32.vec(4)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(8), (), 0)
    inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(8), (), 1)
    r = UOp(Ops.RANGE, dtypes.int32, (_const(2),), (0, "loop"))
    offset = UOp(Ops.MUL, dtypes.int32, (r, _const(4)))
    load = UOp(Ops.LOAD, f4, (UOp(Ops.INDEX, inp.dtype, (inp, offset)),))
    ones = UOp(Ops.VECTORIZE, f4, tuple(UOp.const(dtypes.float32, float(i)) for i in range(4)))
    added = UOp(Ops.ADD, f4, (load, ones))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, offset)), added))
    end = UOp(Ops.END, dtypes.void, (store, r))
    uops = [
        out,
        inp,
        _const(2),
        _const(4),
        r,
        offset,
        *ones.src,
        ones,
        load.src[0],
        load,
        added,
        store.src[0],
        store,
        end,
    ]
    a = Buffer("CPU", 8, dtypes.float32).allocate()
    b = Buffer("CPU", 8, dtypes.float32).allocate()
    b.copyin(memoryview(np.arange(8, dtype=np.float32)).cast("B"))
    src = _run(uops, "vec_add", [a, b])
    assert "vector_size(16)" in src
    np.testing.assert_equal(a.numpy(), np.arange(8, dtype=np.float32) + np.tile(np.arange(4, dtype=np.float32), 2))


def test_gep_reads_one_lane():
    f4 = dtypes.float32.vec(4)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1), (), 0)
    vec = UOp(Ops.VECTORIZE, f4, tuple(UOp.const(dtypes.float32, float(i) * 2) for i in range(4)))
    lane = UOp(Ops.GEP, dtypes.float32, (vec,), (3,))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, _const(0))), lane))
    a = Buffer("CPU", 1, dtypes.float32).allocate()
    _run([out, *vec.src, vec, lane, _const(0), store.src[0], store], "gep", [a])
    assert a.numpy()[0] == 6.0


def test_register_tile_slots_are_separate_variables():
    # a register tile read and written at constant offsets renders one C variable per slot (gcc keeps those in
    # registers; an array with memcpy'd vectors made it spill and copy registers in the hot loop)
    from uopkit import Tensor
    from uopkit.codegen import get_program
    from uopkit.codegen.opt import Opt, OptOps
    from uopkit.schedule import create_schedule, kernelize_tensors

    a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
    item = create_schedule(kernelize_tensors([a @ b]))[-1]
    renderer = Device["CPU"].renderer
    opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4)]
    src = get_program(item.ast, renderer, opts).src
    assert "acc0[" not in src and "float16 acc0_0;" in src and "float16 acc0_48;" in src
    out = (a @ b).numpy()
    np.testing.assert_allclose(out, a.numpy() @ b.numpy(), rtol=1e-5)

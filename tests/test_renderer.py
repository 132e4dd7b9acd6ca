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
    # (vectors one register wide: 16 floats on AVX-512, 8 on AVX2)
    w = renderer.caps.max_vector_width
    opts = [Opt(OptOps.UPCAST, 1, w), Opt(OptOps.UPCAST, 0, 4)]
    src = get_program(item.ast, renderer, opts).src
    assert "acc0[" not in src and f"float{w} acc0_0;" in src and f"float{w} acc0_{3 * w};" in src
    out = (a @ b).numpy()
    np.testing.assert_allclose(out, a.numpy() @ b.numpy(), rtol=1e-5)


# ---- capabilities, loop roles and the rule table


def _cpu_programs() -> list:
    from uopkit import Tensor
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    a = Tensor(np.random.default_rng(0).standard_normal((96, 256)).astype(np.float32))
    outs = [a.sum(1), a.max(axis=1), a.softmax(-1), a @ a.T, a.exp()]
    return [get_program(it.ast, Device["CPU"].renderer) for it in create_schedule(kernelize_tensors(outs))]


def test_caps_are_one_frozen_object_and_class_attributes_fold_into_it():
    import dataclasses

    import pytest

    from uopkit.renderer import Renderer, RendererCaps

    class Old(Renderer):
        has_local = True
        local_max = [64, 8, 1]
        tensor_cores = []

    assert Old.caps == RendererCaps(has_local=True, local_max=(64, 8, 1))
    r = Old()
    assert r.has_local and Old.has_local and r.local_max == (64, 8, 1) and r.tensor_cores == []
    r.shared_max = 1024
    # an instance's assignment replaces its own caps, not the class's
    assert r.caps.shared_max == 1024 and Old.caps.shared_max == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.caps.has_local = False  # type: ignore[misc]
    assert Ops.ADD in Device["CPU"].renderer.caps.simd_reduce_ops and Device["CPU"].renderer.caps.pack_panel


def test_loop_roles_mark_parallel_sum_and_max_loops():
    from uopkit.renderer.loops import loop_roles

    found = set()
    for p in _cpu_programs():
        for rng, role in loop_roles(list(p.uops)).items():
            assert role.end.op is Ops.END and role.end.src[1] is rng
            assert role.parallel == (rng.arg[1] == "thread")
            # the role is the kind the linearizer put in the RANGE's arg
            assert role.reduce == {"sum": Ops.ADD, "max": Ops.MAX}.get(rng.arg[1])
            if role.reduce is not None:
                assert role.registers and all(r.op is Ops.DEFINE_REG for r in role.registers)
                found.add(role.reduce)
            found |= {"parallel"} if role.parallel else set()
    assert {Ops.ADD, Ops.MAX} <= found
    src = "\n".join(p.src for p in _cpu_programs())
    assert "reduction(+:" in src and "reduction(max:" in src


def test_no_value_defined_in_a_loop_is_used_after_its_end():
    for p in _cpu_programs():
        uops, inside, open_loops = list(p.uops), {}, []
        for u in uops:
            for s in u.src:
                # a source defined in a loop is only used while that loop is still open
                assert inside.get(s, set()) <= set(open_loops) or u.op is Ops.END, (p.name, u.op, s.op)
            if u.op is Ops.RANGE:
                open_loops.append(u)
            elif u.op is Ops.END:
                open_loops.remove(u.src[1])
            inside[u] = set(open_loops)


def test_a_c_like_backend_adds_rules_in_front():
    from uopkit.renderer.cstyle import pm_cstyle
    from uopkit.uop.ops import PatternMatcher, UPat
    from uopkit_cpu.renderer import ClangRenderer

    class Traced(ClangRenderer):
        render_rules = PatternMatcher([(UPat(Ops.BARRIER), lambda: "/* barrier */")]) + pm_cstyle

    p = _cpu_programs()[0]
    uops = list(p.uops)
    assert Traced().render(p.name, uops) == ClangRenderer().render(p.name, uops)
    assert "/* barrier */" in Traced().render("k", [UOp(Ops.BARRIER, dtypes.void, ())])


def test_missing_pieces_say_what_to_add():
    """A C-like renderer's gaps name the piece to write: render_special for GPU ids, a type_map entry for a dtype."""
    import pytest

    from uopkit.renderer import RendererCaps
    from uopkit.renderer.cstyle import CStyleRenderer, RenderError
    from uopkit.testing.programs import global_buf, idx, program, store

    class GpuWithoutIds(CStyleRenderer):
        caps = RendererCaps(has_local=True, local_max=(8, 8, 8))

    out = global_buf(0, dtypes.float32, 4)
    gid = UOp(Ops.SPECIAL, dtypes.index, (idx(4),), "gidx0")
    with pytest.raises(RenderError, match=r"no GPU ids \(gidx0\).* overrides render_special\(u\)"):
        GpuWithoutIds().render("k", program(store(out, gid, UOp.const(dtypes.float32, 1.0))))
    half = global_buf(0, dtypes.bfloat16, 1)
    # the dtype as it is written in code (its C name, __bf16, is no attribute of dtypes)
    with pytest.raises(RenderError, match=r"has no type for dtypes\.bfloat16: add it to type_map"):
        CStyleRenderer().render("k", program(store(half, 0, UOp.const(dtypes.bfloat16, 1.0))))

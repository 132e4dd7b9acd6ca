"""The reference emulator: lanes vs plain loops, control flow, locals and barriers, bounds checks, EMULATE=NAME."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from uopkit.device import CompileError, Device, DeviceError
from uopkit.dtype import dtypes
from uopkit.emulator import (
    EmulatorCompiler,
    EmulatorError,
    EmulatorRenderer,
    Structure,
    open_emulator,
    run_uops,
)
from uopkit.plugin import BackendInfo, hookimpl
from uopkit.plugin.manager import get_manager
from uopkit.renderer import Renderer
from uopkit.renderer.tensor_cores import CUDA_TENSOR_CORES
from uopkit.tensor import Tensor
from uopkit.testing.programs import end, global_buf, idx, load, loop, program, store
from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import SPEC_VERSION


def sum_rows_program(rows: int, cols: int, dtype=dtypes.float32) -> list[UOp]:  # noqa: ANN001
    out, a = global_buf(0, dtype, rows), global_buf(1, dtype, rows * cols)
    r = loop(0, rows)
    acc = UOp(Ops.DEFINE_REG, dtype.ptr(1), (), 0)
    slot = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    init = UOp(Ops.STORE, dtypes.void, (slot, UOp.const(dtype, 0), r))
    c = loop(1, cols, deps=(init,))
    update = UOp(Ops.STORE, dtypes.void, (slot, UOp(Ops.LOAD, dtype, (slot, c)) + load(a, r * cols + c)))
    total = UOp(Ops.LOAD, dtype, (slot, end(update, c)))
    return program(end(store(out, r, total), r))


def test_loop_plans() -> None:
    uops = sum_rows_program(3, 5)
    plans = {uops[i].arg[0]: p.mode for i, p in Structure.of(uops).loops.items()}
    # the row loop gets a fresh accumulator each iteration; the column loop only adds into it
    assert plans == {0: "lanes", 1: "reduce"}


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.uint8])
def test_lanes_match_plain_loops(dtype) -> None:  # noqa: ANN001
    rows, cols = 4, 300
    uops = sum_rows_program(rows, cols, dtype)
    data = (np.arange(rows * cols) % 251).astype(dtype.fmt)
    fast, slow = np.zeros(rows, dtype.fmt), np.zeros(rows, dtype.fmt)
    run_uops(uops, [fast, data])
    run_uops(uops, [slow, data], vectorize=False)
    # integers wrap identically; float sums may differ only by reassociation
    np.testing.assert_allclose(fast, slow, rtol=1e-5)
    expected = data.reshape(rows, cols).astype(np.int64).sum(1).astype(dtype.fmt)
    np.testing.assert_allclose(fast, expected, rtol=1e-5)


def test_triangular_loop_with_lane_dependent_bound() -> None:
    """out[i] = sum(a[:i+1]): the inner bound differs per lane, finished lanes sit out."""
    n = 9
    out, a = global_buf(0, dtypes.int32, n), global_buf(1, dtypes.int32, n)
    i = loop(0, n)
    acc = UOp(Ops.DEFINE_REG, dtypes.int32.ptr(1), (), 0)
    slot = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    init = UOp(Ops.STORE, dtypes.void, (slot, UOp.const(dtypes.int32, 0), i))
    j = loop(1, i + 1, deps=(init,))
    update = UOp(Ops.STORE, dtypes.void, (slot, UOp(Ops.LOAD, dtypes.int32, (slot, j)) + load(a, j)))
    uops = program(end(store(out, i, UOp(Ops.LOAD, dtypes.int32, (slot, end(update, j)))), i))
    data = np.arange(1, n + 1, dtype=np.int32)
    got = np.zeros(n, np.int32)
    run_uops(uops, [got, data])
    np.testing.assert_array_equal(got, np.cumsum(data))


def test_if_endif_masks_lanes() -> None:
    n = 10
    out = global_buf(0, dtypes.int32, n)
    i = loop(0, n)
    cond = i.lt(4)
    if_ = UOp(Ops.IF, dtypes.void, (cond,))
    st = store(out, i, i * 10, deps=(if_,))
    endif = UOp(Ops.ENDIF, dtypes.void, (if_, st))
    uops = program(end(endif, i))
    assert [u.op for u in uops].count(Ops.IF) == 1
    got = np.full(n, -1, np.int32)
    run_uops(uops, [got])
    np.testing.assert_array_equal(got, [0, 10, 20, 30] + [-1] * 6)


def test_locals_barrier_and_specials() -> None:
    groups, threads = 4, 16
    out, a = global_buf(0, dtypes.float32, groups * threads), global_buf(1, dtypes.float32, groups * threads)
    g = UOp(Ops.SPECIAL, dtypes.index, (idx(groups),), "gidx0")
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(threads),), "lidx0")
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(threads, local=True), (), 0)
    staged = store(shared, lane, load(a, g * threads + lane))
    barrier = UOp(Ops.BARRIER, dtypes.void, (staged,))
    # every thread sums its whole group's slice from local memory
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 0)
    slot = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    init = UOp(Ops.STORE, dtypes.void, (slot, UOp.const(dtypes.float32, 0.0), barrier))
    k = loop(0, threads, deps=(init,))
    shared_k = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, k)),))
    update = UOp(Ops.STORE, dtypes.void, (slot, UOp(Ops.LOAD, dtypes.float32, (slot, k)) + shared_k))
    total = UOp(Ops.LOAD, dtypes.float32, (slot, end(update, k)))
    uops = program(store(out, g * threads + lane, total + lane.cast(dtypes.float32)))
    data = np.arange(groups * threads, dtype=np.float32)
    got = np.zeros_like(data)
    run_uops(uops, [got, data])
    expected = data.reshape(groups, threads).sum(1, keepdims=True) + np.arange(threads)
    np.testing.assert_array_equal(got, expected.reshape(-1))


def shared_sum_program(groups: int, threads: int, barrier: bool = True, slot=None, size=None) -> list[UOp]:  # noqa: ANN001
    """Each work-item stages a[g*threads + lane] in local memory at `slot(lane)`, then sums the whole group's slots
    (the pattern of a GROUP reduce); with `barrier=False` the BARRIER between the two is missing."""
    out, a = global_buf(0, dtypes.float32, groups * threads), global_buf(1, dtypes.float32, groups * threads)
    g = UOp(Ops.SPECIAL, dtypes.index, (idx(groups),), "gidx0")
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(threads),), "lidx0")
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(size or threads, local=True), (), "temp0")
    staged = store(shared, lane if slot is None else slot(lane), load(a, g * threads + lane))
    after = UOp(Ops.BARRIER, dtypes.void, (staged,)) if barrier else staged
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 0)
    at = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    init = UOp(Ops.STORE, dtypes.void, (at, UOp.const(dtypes.float32, 0.0), after))
    k = loop(0, threads, deps=(init,))
    shared_k = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, k)), after))
    update = UOp(Ops.STORE, dtypes.void, (at, UOp(Ops.LOAD, dtypes.float32, (at, k)) + shared_k))
    return program(store(out, g * threads + lane, UOp(Ops.LOAD, dtypes.float32, (at, end(update, k)))))


def test_local_read_without_barrier_is_a_race() -> None:
    data = np.arange(8, dtype=np.float32)
    got = np.zeros_like(data)
    run_uops(shared_sum_program(2, 4), [got, data])
    np.testing.assert_array_equal(got, np.repeat(data.reshape(2, 4).sum(1), 4))
    # lockstep lanes would give the same sums without the barrier; a GPU need not, so it is an error
    with pytest.raises(
        EmulatorError,
        match=r"LOAD reads local temp0\[1\], written by work-item gidx=\(0, 0, 0\) lidx=\(1, 0, 0\) with no BARRIER "
        r"since \(op \d+, work-item gidx=\(0, 0, 0\) lidx=\(0, 0, 0\)\)",
    ):
        run_uops(shared_sum_program(2, 4, barrier=False), [got, data])


def test_local_write_by_two_work_items_is_a_race() -> None:
    """Work-items 0 and 2 (and 1 and 3) stage into the same slot: which value stays depends on timing."""
    got, data = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    with pytest.raises(EmulatorError, match=r"STORE to local temp0\[0\] by two work-items with no BARRIER"):
        run_uops(shared_sum_program(2, 4, slot=lambda lane: lane % 2), [got, data])


@pytest.mark.parametrize("barrier", [True, False])
def test_local_write_after_another_work_items_read_is_a_race(barrier: bool) -> None:
    """Each work-item reads its right neighbour's slot, then overwrites its own: without a BARRIER between, the
    neighbour on its left may not have read it yet."""
    threads = 4
    out, a = global_buf(0, dtypes.float32, threads), global_buf(1, dtypes.float32, threads)
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(threads),), "lidx0")
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(threads, local=True), (), "temp0")
    first = UOp(Ops.BARRIER, dtypes.void, (store(shared, lane, load(a, lane)),))
    right = (lane + 1) % threads
    neighbour = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, right)), first))
    kept = store(out, lane, neighbour)
    after = UOp(Ops.BARRIER, dtypes.void, (kept,)) if barrier else kept
    uops = program(store(shared, lane, neighbour * 2.0, deps=(after,)))
    got, data = np.zeros(threads, np.float32), np.arange(threads, dtype=np.float32)
    if barrier:
        run_uops(uops, [got, data])
        np.testing.assert_array_equal(got, np.roll(data, -1))
        return
    with pytest.raises(
        EmulatorError,
        match=r"STORE overwrites local temp0\[0\], read by work-item gidx=\(0, 0, 0\) lidx=\(3, 0, 0\) with no "
        r"BARRIER since \(op \d+, work-item gidx=\(0, 0, 0\) lidx=\(0, 0, 0\)\)",
    ):
        run_uops(uops, [got, data])


def test_barrier_reached_by_part_of_a_group_is_an_error() -> None:
    """A BARRIER inside an IF that only some work-items of a group take: on a GPU the group never gets past it."""
    threads = 4
    out = global_buf(0, dtypes.int32, threads)
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(threads),), "lidx0")
    if_ = UOp(Ops.IF, dtypes.void, (lane.lt(2),))
    barrier = UOp(Ops.BARRIER, dtypes.void, (if_,))
    endif = UOp(Ops.ENDIF, dtypes.void, (if_, barrier))
    uops = program(store(out, lane, lane.cast(dtypes.int32), deps=(endif,)))
    with pytest.raises(
        EmulatorError,
        match=r"BARRIER reached by only some work-items of a group \(op \d+, work-item gidx=\(0, 0, 0\) "
        r"lidx=\(0, 0, 0\) waits; work-item gidx=\(0, 0, 0\) lidx=\(2, 0, 0\) never arrives\)",
    ):
        run_uops(uops, [np.zeros(threads, np.int32)])


def test_local_out_of_bounds_names_the_op_and_work_item() -> None:
    got, data = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    with pytest.raises(
        EmulatorError,
        match=r"STORE out of bounds: element 4\.\.4 of local temp0 which holds 4 elements \(op \d+, work-item "
        r"gidx=\(0, 0, 0\) lidx=\(1, 0, 0\)\)",
    ):
        run_uops(shared_sum_program(2, 4, slot=lambda lane: lane * 4), [got, data])


def test_out_of_bounds_is_an_error() -> None:
    out, a = global_buf(0, dtypes.float32, 4), global_buf(1, dtypes.float32, 4)
    i = loop(0, 4)
    uops = program(end(store(out, i, load(a, i + 1)), i))
    with pytest.raises(
        EmulatorError,
        match=r"LOAD out of bounds: element 4\.\.4 of global data1 which holds 4 elements \(op \d+, work-item",
    ):
        run_uops(uops, [np.zeros(4, np.float32), np.zeros(4, np.float32)])
    # the same access behind a gate is fine and reads 0
    gate = (i + 1).lt(4)
    uops = program(end(store(out, i, load(a, gate.where(i + 1, idx(0)), gate=gate)), i))
    got = np.zeros(4, np.float32)
    run_uops(uops, [got, np.arange(4, dtype=np.float32)])
    np.testing.assert_array_equal(got, [1, 2, 3, 0])


def test_wrong_argument_counts() -> None:
    uops = sum_rows_program(2, 2)
    with pytest.raises(EmulatorError, match="takes 2 buffers but got 1"):
        run_uops(uops, [np.zeros(2, np.float32)])
    n = UOp.variable("n", 0, 4)
    out = global_buf(0, dtypes.int32, 4)
    i = loop(0, n)
    with pytest.raises(EmulatorError, match=r"variables \['n'\] but got 0 values"):
        run_uops(program(end(store(out, i, i), i)), [np.zeros(4, np.int32)])


def test_compiler_checks_the_spec() -> None:
    renderer, compiler = EmulatorRenderer(), EmulatorCompiler()
    good = renderer.render("k", sum_rows_program(2, 3))
    assert good.startswith("// uopkit emulator program k") and "DEFINE_REG" in good
    assert compiler.compile(good)
    # an END that closes a loop that is not the innermost one breaks the spec
    out = global_buf(0, dtypes.int32, 4)
    r0, r1 = loop(0, 2), loop(1, 2)
    bad = [out, *[u for u in program(end(store(out, r0 * 2 + r1, r0), r1, r0)) if u.op is not Ops.DEFINE_GLOBAL]]
    ends = [u for u in bad if u.op is Ops.END]
    swapped = [ends[1] if u is ends[0] else ends[0] if u is ends[1] else u for u in bad]
    with pytest.raises(CompileError, match="doesn't close the innermost open loop"):
        compiler.compile(renderer.render("bad", swapped))
    with pytest.raises(CompileError, match="not an emulator program"):
        compiler.compile("void k() {}")


def test_tensor_programs_on_the_emulator() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((13, 7)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
    ta, tb = Tensor(a, device="EMULATOR"), Tensor(b, device="EMULATOR")
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.exp().sum(0).numpy(), np.exp(a).sum(0), rtol=1e-5)
    np.testing.assert_array_equal((ta.max(axis=1) > 0).numpy(), a.max(1) > 0)


# ---- EMULATE=NAME


class FakeGPURenderer(Renderer):
    device = "FAKEGPU"
    has_local = True
    has_shared = True
    local_max = (256, 256, 64)
    shared_max = 16384
    max_vector_width = 4
    tensor_cores = CUDA_TENSOR_CORES

    def render(self, name: str, uops: list[UOp]) -> str:
        raise NotImplementedError("no driver here")


def _no_device(device: str):  # noqa: ANN202
    raise RuntimeError("FAKEGPU has no device on this machine")


class FakeGPU:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [
            BackendInfo("FAKEGPU", "1.0", SPEC_VERSION, 0, _no_device, lambda: "no GPU", renderer=FakeGPURenderer),
            BackendInfo("NORENDERER", "1.0", SPEC_VERSION, 0, _no_device, lambda: "no GPU"),
            # available, but open fails (a driver error): EMULATE can't get a renderer either way
            BackendInfo("OPENFAILS", "1.0", SPEC_VERSION, 0, _no_device, lambda: None),
            # a renderer= that builds something else
            BackendInfo("BADRENDERER", "1.0", SPEC_VERSION, 0, _no_device, lambda: None, renderer=lambda: 42),
        ]


@pytest.fixture
def fake_gpu() -> Iterator[None]:
    get_manager().register(FakeGPU(), name="fake-gpu")
    yield
    get_manager().unregister("fake-gpu")


def test_emulate_takes_the_backends_settings(fake_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = open_emulator("EMULATOR:7", emulate="fakegpu")
    r = dev.renderer
    assert isinstance(r, EmulatorRenderer) and r.emulating == "FAKEGPU"
    assert r.has_local and r.has_shared and r.local_max == (256, 256, 64) and r.max_vector_width == 4
    assert r.tensor_cores == CUDA_TENSOR_CORES
    # the program renders for the emulator even though FAKEGPU's own renderer can't run here
    assert "emulating FAKEGPU" in r.render("k", sum_rows_program(2, 2))
    monkeypatch.setenv("EMULATE", "FAKEGPU")
    assert open_emulator("EMULATOR:8").renderer.tensor_cores == CUDA_TENSOR_CORES


def test_emulate_errors(fake_gpu: None) -> None:
    with pytest.raises(DeviceError, match="EMULATE=NOPE: no installed backend is called NOPE; installed: .*EMULATOR"):
        open_emulator("EMULATOR:9", emulate="NOPE")
    with pytest.raises(
        DeviceError, match="cannot be opened here \\(no GPU\\) and does not provide BackendInfo.renderer"
    ):
        open_emulator("EMULATOR:9", emulate="NORENDERER")
    renderer_hint = (
        "give its BackendInfo a renderer= \\(a function that builds the renderer without opening a device\\)"
    )
    with pytest.raises(DeviceError, match="does not provide BackendInfo.renderer.*; " + renderer_hint):
        open_emulator("EMULATOR:9", emulate="NORENDERER")
    with pytest.raises(
        DeviceError, match="(?s)EMULATE=OPENFAILS: backend OPENFAILS .* failed to open.*" + renderer_hint
    ):
        open_emulator("EMULATOR:9", emulate="OPENFAILS")
    # (it was AttributeError: 'int' object has no attribute 'caps')
    with pytest.raises(
        DeviceError, match="BackendInfo.renderer of BADRENDERER .* returned int, not a renderer with caps"
    ):
        open_emulator("EMULATOR:9", emulate="BADRENDERER")


def test_emulate_a_gpu_runs_gpu_style_programs(fake_gpu: None) -> None:
    """With a GPU's settings the codegen emits SPECIAL thread ids; the emulator runs them."""
    dev = open_emulator("EMULATOR:5", emulate="FAKEGPU")
    Device._opened["EMULATOR:5"] = dev
    try:
        a = np.arange(24, dtype=np.float32).reshape(4, 6)
        t = Tensor(a, device="EMULATOR:5")
        np.testing.assert_allclose(((t * 2).sum(1) + 1).numpy(), (a * 2).sum(1) + 1)
        from uopkit.codegen import get_program
        from uopkit.engine.realize import method_cache

        # (a compiled runner keeps no linear program: it is built again from the kernel's AST)
        renderer = Device["EMULATOR:5"].renderer
        specs = [get_program(ast, renderer) for (ast, device) in method_cache if device == "EMULATOR:5"]
        assert any(u.op is Ops.SPECIAL for s in specs for u in s.uops)
    finally:
        Device._opened.pop("EMULATOR:5", None)


def _programs(device: str) -> list:
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((128, 256)).astype(np.float32), device=device)
    b = Tensor(rng.standard_normal((256, 256)).astype(np.float32), device=device)
    outs = [a @ b, a.softmax(-1), a.sum(0), a.max(axis=1), (a * 2).exp()]
    items = create_schedule(kernelize_tensors(outs))
    return [get_program(item.ast, Device[device].renderer) for item in items]


def test_emulate_cpu_builds_the_cpus_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    # the whole capability object travels: vector ops, panel packing, threads, simd reduce loops, ...
    monkeypatch.setenv("EMULATE", "CPU")
    emulated = Device["EMULATOR:11"]
    cpu = Device["CPU"].renderer
    assert emulated.renderer.caps == cpu.caps and emulated.renderer.extra_matcher is cpu.extra_matcher
    want, got = _programs("CPU"), _programs("EMULATOR:11")
    # same kernels (the matmul's panel copy included), each the same linear program with the same opts and launch
    assert [p.uops for p in got] == [p.uops for p in want] and len(want) >= 5
    assert [(p.opts, p.global_size, p.local_size) for p in got] == [(p.opts, p.global_size, p.local_size) for p in want]
    # and they run here: a CPU register tile accumulates float4 vectors in its reduce loop (each vector update is a
    # reduction over four register columns when the emulator runs the loop's iterations as lanes)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 9)).astype(np.float32), rng.standard_normal((9, 4)).astype(np.float32)
    got = (Tensor(a, device="EMULATOR:11") @ Tensor(b, device="EMULATOR:11")).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    out = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="EMULATOR:11").softmax(-1).numpy()
    e = np.exp(np.arange(12, dtype=np.float32).reshape(3, 4) - np.arange(3, 12, 4, dtype=np.float32)[:, None])
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_bfloat16_helpers_match_torch() -> None:
    torch = pytest.importorskip("torch")
    from uopkit.emulator import bf16_to_float32, float32_to_bf16_bits

    rng = np.random.default_rng(5)
    x = np.concatenate(
        [
            rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-40, 39, 5000),
            np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 1.00390625, 1.01171875], np.float32),
        ]
    ).astype(np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(float32_to_bf16_bits(x), want)
    np.testing.assert_array_equal(bf16_to_float32(want), torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    assert np.isnan(bf16_to_float32(float32_to_bf16_bits(np.float32(np.nan))))


# ---- a renderer may return bytes: the compiler gets exactly that


class BytesRenderer(EmulatorRenderer):
    def render(self, name: str, uops: list[UOp]) -> bytes:  # type: ignore[override]
        from uopkit.emulator import encode_program

        return encode_program(name, uops)


class BytesCompiler(EmulatorCompiler):
    def __init__(self) -> None:
        super().__init__()
        self.cache_key = "bytes-test 1"
        self.seen: list[type] = []

    def compile(self, src: str | bytes) -> bytes:
        from uopkit.emulator import decode_program
        from uopkit.uop.spec import verify_program

        self.seen.append(type(src))
        assert isinstance(src, bytes)
        verify_program(decode_program(src)[1])
        return src


def test_render_may_return_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    dev = Device["EMULATOR:12"]
    compiler = BytesCompiler()
    monkeypatch.setattr(dev, "renderer", BytesRenderer())
    monkeypatch.setattr(dev, "compiler", compiler)
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    data = np.arange(10, dtype=np.float32)
    t = Tensor(data, device="EMULATOR:12")
    np.testing.assert_allclose(((t * 3) + 1).numpy(), data * 3 + 1)
    assert compiler.seen and set(compiler.seen) == {bytes}
    # the disk cache keys bytes as it keys text: the same program again is a hit, not a second compile
    from uopkit.device import compile_cache_stats

    lib = dev.renderer.render("k", sum_rows_program(2, 3))
    hits, n_compiles = compile_cache_stats.hits, len(compiler.seen)
    assert compiler.compile_cached(lib) == compiler.compile_cached(lib) == lib
    assert compile_cache_stats.hits == hits + 1 and len(compiler.seen) == n_compiles + 1


def test_old_import_path_is_an_alias() -> None:
    import uopkit.emulator
    import uopkit.testing.emulator
    from uopkit.testing.emulator import EmulatorRenderer as Old

    assert uopkit.testing.emulator is uopkit.emulator and Old is EmulatorRenderer

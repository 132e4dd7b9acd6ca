"""Conformance through the whole stack: Tensor programs scheduled, compiled and run on the device under test, then
compared with numpy — edge sizes, every claimed dtype, reductions, scatter-adds, padding (gated loads), assigns into
views, copies between devices, allocator reuse, and the compile cache."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.device import Buffer, CompileError, Device, LRUAllocator, compile_cache_stats
from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.helpers import CACHELEVEL
from uopkit.tensor import Tensor
from uopkit.testing.programs import end, global_buf, load, loop, program, run_program, store


@pytest.mark.parametrize("n", [0, 1, 7, 65537])
def test_elementwise_sizes(uopkit_device: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ta, tb = Tensor(a, device=uopkit_device), Tensor(b, device=uopkit_device)
    got = (ta * tb + ta.maximum(tb) - 1.5).numpy()
    np.testing.assert_allclose(got, a * b + np.maximum(a, b) - 1.5, rtol=1e-6, atol=1e-6)


def test_every_claimed_dtype_roundtrips_and_adds(uopkit_device: str) -> None:
    for dt in Device[uopkit_device].renderer.caps.supported_dtypes:
        if dt == dtypes.bfloat16:
            # numpy has no bfloat16: build it from float32 and read it back as float32 (small integers are exact)
            data32 = (np.arange(11) % 3).astype(np.float32)
            t = Tensor(data32, device=uopkit_device).cast(dt)
            np.testing.assert_array_equal(t.float().numpy(), data32, err_msg=f"roundtrip of {dt}")
            np.testing.assert_array_equal((t + t).float().numpy(), data32 + data32, err_msg=f"add on {dt}")
            continue
        np_dt = to_numpy_dtype(dt)
        data = (np.arange(11) % 3).astype(np_dt)
        t = Tensor(data, device=uopkit_device)
        np.testing.assert_array_equal(t.numpy(), data, err_msg=f"roundtrip of {dt}")
        np.testing.assert_array_equal((t + t).numpy(), data + data, err_msg=f"add on {dt}")


def test_integers_wrap_around_before_compares_divisions_and_masks(uopkit_device: str) -> None:
    # integer tensors wrap around (torch's and numpy's two's complement), then compare, divide and mask the wrapped
    # value: a rule that moves a constant across `<` or cancels a factor of `//` must not see through the wrap, and
    # signed overflow (undefined in C) must not let a compiler drop an `& 0x7FFFFFFF` or fold `x * k < 0`
    img = np.array([250, 5, 120, 99, 200, 3], np.uint8)
    u = Tensor(img, device=uopkit_device)
    np.testing.assert_array_equal(((u + 10) < 100).numpy(), (img + np.uint8(10)) < 100)
    np.testing.assert_array_equal(((u * 2) // 2).numpy(), (img * np.uint8(2)) // 2)
    np.testing.assert_array_equal((((u % 100) * 3) // 2).numpy(), ((img % 100) * np.uint8(3)) // 2)
    x = np.array([3, 5, 7, 1000, -9, 2**30], np.int32)
    t = Tensor(x, device=uopkit_device)
    with np.errstate(over="ignore"):
        h = x * np.int32(805459861)
        x4 = x * np.int32(4)
        lcg = x
        for _ in range(2):
            lcg = (lcg * np.int32(1103515245) + np.int32(12345)) & np.int32(0x7FFFFFFF)
    np.testing.assert_array_equal(((t * 805459861) < 0).numpy(), h < 0)
    np.testing.assert_array_equal((t * 805459861).abs().numpy(), np.abs(h))
    np.testing.assert_array_equal(((t * 4) // 4).numpy(), x4 // 4)
    v = t
    for _ in range(2):
        v = (v * 1103515245 + 12345) & 0x7FFFFFFF
    np.testing.assert_array_equal(v.numpy(), lcg)
    assert (v >= 0).numpy().all()


@pytest.mark.parametrize("shape, axis", [((5, 7), 1), ((5, 7), 0), ((3, 1, 9), (0, 2)), ((1,), 0), ((4, 0), 1)])
def test_reductions(uopkit_device: str, shape: tuple[int, ...], axis: int | tuple[int, ...]) -> None:
    data = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t = Tensor(data, device=uopkit_device)
    np.testing.assert_allclose(t.sum(axis).numpy(), data.sum(axis), rtol=1e-5, atol=1e-5)
    if 0 not in shape:
        np.testing.assert_allclose(t.max(axis=axis).numpy(), data.max(axis), rtol=0, atol=0)


def test_large_reduction(uopkit_device: str) -> None:
    data = np.random.default_rng(2).random(20000).astype(np.float32)
    got = Tensor(data, device=uopkit_device).sum().item()
    np.testing.assert_allclose(got, data.astype(np.float64).sum(), rtol=1e-4)


def test_scatter_adds_repeated_targets(uopkit_device: str) -> None:
    # a scatter-add with repeated, negative and out-of-order targets (CPU-style renderers get it as one loop over the
    # writes, each adding into a target read from memory: the loop must run in order); its gradient likewise
    rng = np.random.default_rng(3)
    idx = np.array([4, 0, 4, -1, 2, 4, 0])
    vals = rng.standard_normal((7, 5)).astype(np.float32)
    base = rng.standard_normal((6, 5)).astype(np.float32)
    got = Tensor(base, device=uopkit_device).index_add(
        0, Tensor(idx % 6, device=uopkit_device), Tensor(vals, device=uopkit_device)
    )
    want = base.copy()
    np.add.at(want, idx % 6, vals)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    table = Tensor(base, device=uopkit_device, requires_grad=True)
    (table[Tensor(idx, device=uopkit_device)] * Tensor(vals, device=uopkit_device)).sum().backward()
    assert table.grad is not None
    grad = np.zeros_like(base)
    np.add.at(grad, idx % 6, vals)
    np.testing.assert_allclose(table.grad.numpy(), grad, rtol=1e-5, atol=1e-5)


def test_scatter_adds_into_one_broadcast_target(uopkit_device: str) -> None:
    # an index broadcast from one element: no target (nor, in the second, value) depends on the write, yet each one
    # is added (a CPU-style renderer's load and store of the target stay in the writes' loop); an empty index adds
    # nothing
    idx = Tensor([2], device=uopkit_device).expand(5)
    got = Tensor.zeros(4, device=uopkit_device).index_add(0, idx, Tensor([1.0, 2, 3, 4, 5], device=uopkit_device))
    np.testing.assert_array_equal(got.numpy(), [0, 0, 15, 0])
    both = Tensor.zeros(4, device=uopkit_device).index_add(0, idx, Tensor([1.5], device=uopkit_device).expand(5))
    np.testing.assert_array_equal(both.numpy(), [0, 0, 7.5, 0])
    table = Tensor(np.ones((3, 4), np.float32), device=uopkit_device, requires_grad=True)
    table[Tensor(np.zeros(0, np.int32), device=uopkit_device)].sum().backward()
    assert table.grad is not None
    np.testing.assert_array_equal(table.grad.numpy(), np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 7), (16, 9, 4)])
def test_matmul(uopkit_device: str, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m * k * n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = (Tensor(a, device=uopkit_device) @ Tensor(b, device=uopkit_device)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_pad_shrink_flip(uopkit_device: str) -> None:
    """Padding becomes gated loads; shrink and flip become index arithmetic."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(data, device=uopkit_device)
    np.testing.assert_array_equal(t.pad(((1, 2), (0, 1))).numpy(), np.pad(data, ((1, 2), (0, 1))))
    np.testing.assert_array_equal(t.shrink(((1, 3), (1, 4))).flip(1).numpy(), data[1:3, 1:4][:, ::-1])


def test_assign_into_views(uopkit_device: str) -> None:
    data = np.zeros((4, 5), dtype=np.float32)
    t = Tensor(data, device=uopkit_device).contiguous().realize()
    t[1:3, 2:4] = Tensor(np.ones((2, 2), np.float32) * 7, device=uopkit_device)
    t.assign(t + 1).realize()
    expected = data.copy()
    expected[1:3, 2:4] = 7
    np.testing.assert_array_equal(t.numpy(), expected + 1)


def test_copies_between_devices(uopkit_device: str, uopkit_peer_device: str) -> None:
    data = np.arange(10, dtype=np.int32) * 3
    there = Tensor(data, device=uopkit_peer_device).to(uopkit_device)
    back = (there + 1).to(uopkit_peer_device)
    np.testing.assert_array_equal(back.numpy(), data + 1)


def test_copy_to_second_device_of_backend(uopkit_device: str) -> None:
    name = Device.canonicalize(uopkit_device).partition(":")[0]
    second = f"{name}:1"
    try:
        Device[second]
    except Exception as e:
        pytest.skip(f"{second} can't be opened: {e}")
    data = np.linspace(0, 1, 9, dtype=np.float32)
    moved = Tensor(data, device=uopkit_device).to(second)
    np.testing.assert_array_equal((moved * 2).numpy(), data * 2)


def test_allocator_reuses_freed_buffers(uopkit_device: str) -> None:
    allocator = Device[uopkit_device].allocator
    if not isinstance(allocator, LRUAllocator):
        pytest.skip(f"{uopkit_device}'s allocator is not an LRUAllocator")
    size = 4099 * 4
    buf = Buffer(uopkit_device, 4099, dtypes.float32).allocate()
    opaque = buf.opaque
    del buf
    again = Buffer(uopkit_device, 4099, dtypes.int32).allocate()
    assert again.opaque is opaque, "a freed buffer of the same size must come back from the cache"
    # the reused memory holds whatever a kernel writes, not stale values
    data = np.arange(4099, dtype=np.int32)
    again.copyin(memoryview(data))
    np.testing.assert_array_equal(again.numpy(), data)
    assert allocator.cached_bytes >= 0 and size > 0


def test_compile_cache_hits(uopkit_device: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = Device[uopkit_device].compiler
    if compiler.cache_key is None:
        pytest.skip(f"{uopkit_device}'s compiler opts out of the compile cache (cache_key is None)")
    if CACHELEVEL.value == 0:
        pytest.skip("CACHELEVEL=0 turns the compile cache off")
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    n = 13
    out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
    i = loop(0, n)
    uops = program(end(store(out, i, load(a, i) + 0.25), i))
    data = np.arange(n, dtype=np.float32)
    misses, hits = compile_cache_stats.misses, compile_cache_stats.hits
    first = run_program(uopkit_device, uops, [np.zeros(n, np.float32), data], name="cache_probe")[0]
    assert (compile_cache_stats.misses, compile_cache_stats.hits) == (misses + 1, hits)
    second = run_program(uopkit_device, uops, [np.zeros(n, np.float32), data], name="cache_probe")[0]
    assert (compile_cache_stats.misses, compile_cache_stats.hits) == (misses + 1, hits + 1)
    np.testing.assert_array_equal(first, data + 0.25)
    np.testing.assert_array_equal(second, first)
    assert any((tmp_path / "compile").iterdir())


def test_compile_error_shows_source(uopkit_device: str) -> None:
    """A compiler fed broken source raises CompileError carrying the source and the compiler's message. The broken
    source is of the kind the renderer returns (the compiler gets exactly that): text, or bytes for a renderer that
    emits a binary form, whose CompileError shows its size instead of its lines."""
    dev = Device[uopkit_device]
    n = 3
    out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
    i = loop(0, n)
    rendered = dev.renderer.render("probe", program(end(store(out, i, load(a, i)), i)))
    broken: str | bytes = "this is not a kernel {"
    if isinstance(rendered, bytes):
        broken = broken.encode()
    with pytest.raises(CompileError) as info:
        dev.compiler.compile(broken)
    assert info.value.src == broken and info.value.message.strip()
    shown = "this is not a kernel" if isinstance(broken, str) else f"{len(broken)} bytes"
    assert shown in str(info.value)


def test_views_and_loops_past_int32(uopkit_device: str) -> None:
    """Views, loops and reductions over more than 2**31 elements (of small buffers: padded or expanded)."""
    ones = Tensor.ones(2, device=uopkit_device)
    # a view of 10**12 elements: its tail, through the padding's 64-bit offset
    np.testing.assert_array_equal(ones.pad(((10**12, 0),))[-4:].numpy(), [0, 0, 1, 1])
    # a flat view of an expanded 2**33-element tensor: the row comes from flat // 4096 in 64 bits
    flat = Tensor.arange(4096, device=uopkit_device).float().reshape(1, 4096).expand(2**21, 4096).reshape(-1)
    np.testing.assert_array_equal(flat[2**33 - 5 :].numpy(), np.arange(4091, 4096, dtype=np.float32))
    # a reduce over a strided slice of a 2**31 + 16 wide row
    rows = Tensor.arange(3, device=uopkit_device).float().reshape(3, 1).expand(3, 2**31 + 16)[:, :: 2**20]
    np.testing.assert_array_equal(rows.sum(1).numpy(), np.arange(3) * 2049)

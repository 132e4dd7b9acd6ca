"""The conformance suite (`uopkit.testing`) itself: backends with a seeded bug fail it, with a message saying what is
wrong. Each test registers a small backend built from the CPU plugin's parts and runs one of the suite's tests on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from uopkit.device import Compiled, CompileError, Compiler, LRUAllocator
from uopkit.plugin import BackendInfo, hookimpl
from uopkit.plugin.manager import get_manager
from uopkit.testing.test_allocator import test_allocator_hands_out_the_bytes_asked_for as suite_allocator_test
from uopkit.testing.test_allocator import test_shared_memory_buffers_show_one_memory as suite_shared_memory_test
from uopkit.testing.test_allocator import test_writes_at_an_offset as suite_writes_at_offset_test
from uopkit.testing.test_alu import test_alu_ops as suite_alu_test
from uopkit.testing.test_programs import test_vectors as suite_vectors_test
from uopkit.testing.test_tensor import test_compile_error_shows_source as suite_compile_error_test
from uopkit.testing.test_vector_ops import test_vector_ops as suite_vector_ops_test
from uopkit.uop.spec import SPEC_VERSION

uopkit_cpu = pytest.importorskip("uopkit_cpu")
from uopkit_cpu.compiler import ClangCompiler  # noqa: E402
from uopkit_cpu.renderer import ClangRenderer  # noqa: E402
from uopkit_cpu.runtime import CPUAllocator, CPUProgram  # noqa: E402

WIDTH = 4


class SwappedVectorWhere(ClangRenderer):
    """A vector WHERE that picks the wrong operand (a mask-polarity slip); scalar WHERE stays right."""

    def render_alu(self, u: Any, args: list[str]) -> str:
        from uopkit.uop.ops import Ops

        if u.op is Ops.WHERE and u.dtype.count > 1:
            args = [args[0], args[2], args[1]]
        return super().render_alu(u, args)


class UnsignedZeroTrunc(ClangRenderer):
    """A TRUNC that loses the sign of a zero result (+0.0 for -0.5): what `assert_allclose` alone doesn't see."""

    def render_alu(self, u: Any, args: list[str]) -> str:
        from uopkit.dtype import dtypes
        from uopkit.uop.ops import Ops

        if u.op is Ops.TRUNC and u.dtype == dtypes.float32:
            return f"(truncf({args[0]})+0.0f)"
        return super().render_alu(u, args)


class NoVectorsYet(ClangRenderer):
    """Claims vectors (the CPU renderer's caps) but can't render them yet."""

    def render(self, name: str, uops: list) -> str:
        if any(u.dtype.count > 1 for u in uops):
            raise NotImplementedError("vectors are on the to-do list")
        return super().render(name, uops)


class BytesRenderer(ClangRenderer):
    """Emits a binary form (here the C source's bytes, standing in for bitcode)."""

    def render(self, name: str, uops: list) -> bytes:  # type: ignore[override]
        return super().render(name, uops).encode()


class BytesOnlyCompiler(Compiler):
    def compile(self, src: str | bytes) -> bytes:
        if not isinstance(src, bytes):
            raise TypeError(f"this compiler takes what its renderer returns, bytes; got {type(src).__name__}")
        if b"not a kernel" in src:
            raise CompileError("line 1: not a module", src, compiler="bytes-compiler")
        return src


class ShortArena(LRUAllocator):
    """A newcomer's allocator: one arena, and each buffer gets half the bytes asked for, so neighbours overlap (the
    same slip in C overruns the heap; here it stays inside Python memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.arena = bytearray(1 << 20)
        self.top = 0

    def _alloc(self, size: int) -> int:
        offset, self.top = self.top, self.top + max(size // 2, 1)
        return offset

    def copyin(self, dest: int, src: memoryview) -> None:
        self.arena[dest : dest + src.nbytes] = src

    def copyout(self, dest: memoryview, src: int) -> None:
        dest[:] = self.arena[src : src + dest.nbytes]


class PrivateSharedMemory(CPUAllocator):
    """Buffers "in shared memory" that are private copies: another process would never see their writes."""

    def adopt_shared(self, segment: Any) -> Any:
        return self._alloc(segment.size)


def _cpu_parts(renderer: Any, compiler: Compiler | None = None, allocator: Any = None) -> Any:
    def open_device(device: str) -> Compiled:
        return Compiled(device, allocator or CPUAllocator(), renderer, compiler or ClangCompiler(), CPUProgram)

    return open_device


class SeededBugs:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        def backend(name: str, open_device: Any) -> BackendInfo:
            return BackendInfo(name, "0.0", SPEC_VERSION, -100, open_device, lambda: None, "a seeded bug")

        return [
            backend("VWHERE", _cpu_parts(SwappedVectorWhere())),
            backend("NOVEC", _cpu_parts(NoVectorsYet())),
            backend("BYTESC", _cpu_parts(BytesRenderer(), BytesOnlyCompiler())),
            backend("SHORTMEM", _cpu_parts(ClangRenderer(), allocator=ShortArena())),
            backend("PLUSZERO", _cpu_parts(UnsignedZeroTrunc())),
            backend("PRIVSHM", _cpu_parts(ClangRenderer(), allocator=PrivateSharedMemory())),
        ]


@pytest.fixture(scope="module", autouse=True)
def seeded_bugs() -> Iterator[None]:
    from uopkit.device import Device

    get_manager().register(SeededBugs(), name="seeded-bugs")
    yield
    get_manager().unregister("seeded-bugs")
    for name in ("VWHERE", "NOVEC", "BYTESC", "SHORTMEM", "PLUSZERO", "PRIVSHM"):
        Device._opened.pop(name, None)


def _vector_width(device: str) -> int:
    from uopkit.device import Device

    if Device[device].renderer.caps.max_vector_width < WIDTH:
        pytest.skip(f"the CPU renderer renders no vectors of {WIDTH} on this machine")
    return WIDTH


def test_wrong_vector_where_fails_the_suite(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    width = _vector_width("VWHERE")
    # the vector test of float32 ADD, GEP and VECTORIZE (all the suite had) doesn't see it
    suite_vectors_test("VWHERE", width)
    with pytest.raises(AssertionError) as info:
        suite_vector_ops_test("VWHERE", width)
    text = str(info.value)
    assert f"WHERE(CMPLT(a, b), a, b) on dtypes.float.vec({width})" in text
    assert f"WHERE(one bool, a, b) on dtypes.int.vec({width})" in text
    # comparisons and the other ops are right: only the WHERE checks fail
    assert f"CMPLT of dtypes.float.vec({width}) (a mask" not in text and "ADD on" not in text


def test_zero_of_the_wrong_sign_fails_the_suite(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    with pytest.raises(AssertionError, match=r"TRUNC on dtypes.float: .*\n.*zeros of the wrong sign at \[0, 2\]"):
        suite_alu_test("PLUSZERO", "float")
    # float64's TRUNC is the CPU renderer's own
    suite_alu_test("PLUSZERO", "double")


def test_claimed_vectors_that_dont_render_fail_not_skip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from uopkit.device import Device

    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    width = _vector_width("NOVEC")
    claimed = Device["NOVEC"].renderer.caps.max_vector_width
    for suite_test in (suite_vectors_test, suite_vector_ops_test):
        with pytest.raises(pytest.fail.Exception) as info:
            suite_test("NOVEC", width)
        assert "NOVEC claims vector" in str(info.value) and f"(caps.max_vector_width={claimed}" in str(info.value)
        assert "raised NotImplementedError: vectors are on the to-do list" in str(info.value)


def test_unclaimed_feature_that_doesnt_render_is_skipped() -> None:
    import numpy as np

    from uopkit.dtype import dtypes
    from uopkit.testing.programs import end, global_buf, load, loop, program, run_program, store

    out, a = global_buf(0, dtypes.float32, 8), global_buf(1, dtypes.float32, 8)
    i = loop(0, 2)
    uops = program(end(store(out, i * 4, load(a, i * 4, dtype=dtypes.float32.vec(4))), i))
    arrays = [np.zeros(8, np.float32), np.ones(8, np.float32)]
    with pytest.raises(pytest.skip.Exception, match="NOVEC does not render an optional thing"):
        run_program("NOVEC", uops, arrays, feature="an optional thing")


def test_compile_error_test_sends_a_bytes_renderer_bytes() -> None:
    # it sent a str, which a compiler of bytes can't take (the contract: exactly what `render` returned)
    suite_compile_error_test("BYTESC")


def test_allocator_handing_out_too_little_stops_the_suite() -> None:
    with pytest.raises(pytest.exit.Exception) as info:
        suite_allocator_test("SHORTMEM")
    text = str(info.value)
    assert "SHORTMEM's allocator hands out less memory than asked for" in text
    assert "Allocator._alloc(size) must return at least `size` bytes" in text and "read back wrong from byte" in text


def test_allocator_check_passes_on_cpu() -> None:
    suite_allocator_test("CPU")
    suite_writes_at_offset_test("CPU")


def test_shared_memory_that_is_private_fails_the_suite() -> None:
    with pytest.raises(AssertionError, match="must return a handle to the segment's own memory"):
        suite_shared_memory_test("PRIVSHM")
    suite_shared_memory_test("CPU")

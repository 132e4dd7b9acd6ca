"""The OpenCL backend's device selection, compiler, allocator and program runtime, with hand-written kernels."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from uopkit.device import Buffer, CompileError, Device, DeviceError, compile_cache_stats
from uopkit.dtype import dtypes
from uopkit.uop.spec import SPEC_VERSION
from uopkit_opencl import uopkit_backends

# skipped as a whole without pyopencl (conftest.py turns that into a failure where UOPKIT_REQUIRE_OPENCL=1)
cl = pytest.importorskip("pyopencl")

from uopkit_opencl.runtime import CLDevice, CLProgram, launch_sizes, list_devices, open_opencl  # noqa: E402

SCALE_SRC = """
__kernel void scale(__global float* data0, const int var0) {
  int i = get_global_id(0);
  if (i < var0) data0[i] = data0[i] * 2.0f;
}
"""

# one work-group sums its slice of the input through local memory; group g writes out[g]
GROUP_SUM_SRC = """
__kernel void group_sum(__global float* out, __global const float* in) {
  __local float part[8];
  int g = get_group_id(0);
  int l = get_local_id(0);
  part[l] = in[g * 8 + l];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0) {
    float acc = 0.0f;
    for (int k = 0; k < 8; k++) acc += part[k];
    out[g] = acc;
  }
}
"""


def _upload(dev: CLDevice, arr: np.ndarray):  # noqa: ANN202
    mem = dev.allocator.alloc(arr.nbytes)
    dev.allocator.copyin(mem, memoryview(arr).cast("B"))
    return mem


def _download(dev: CLDevice, mem, like: np.ndarray) -> np.ndarray:  # noqa: ANN001
    out = np.empty_like(like)
    dev.allocator.copyout(memoryview(out).cast("B"), mem)
    return out


# ------------------------------------------------------------------------------------------------ selection


def test_backend_info_and_availability() -> None:
    (info,) = uopkit_backends()
    assert info.name == "OPENCL" and info.spec_version == SPEC_VERSION
    assert info.availability() is None
    assert Device.backends()["OPENCL"].usable


def test_device_indexing(dev: CLDevice) -> None:
    assert Device["opencl:0"] is dev and dev.device == "OPENCL"
    assert "Portable Computing Language" in dev.caps.platform
    n = len(list_devices())
    with pytest.raises(DeviceError, match=rf"OPENCL:{n + 5} does not exist: {n} OpenCL device"):
        Device[f"OPENCL:{n + 5}"]
    with pytest.raises(ValueError, match="index after ':' must be a non-negative number"):
        open_opencl("OPENCL:x")


def test_capabilities_come_from_the_device(dev: CLDevice) -> None:
    d = dev.cl_device
    assert dev.caps.max_work_group_size == d.max_work_group_size
    assert dev.caps.local_mem_size == d.local_mem_size == dev.renderer.shared_max
    assert dev.caps.fp64 == ("cl_khr_fp64" in d.extensions.split())
    assert dev.caps.fp16 == ("cl_khr_fp16" in d.extensions.split())
    assert dev.renderer.local_max[0] <= d.max_work_group_size
    assert dev.renderer.caps.workgroup_max == d.max_work_group_size
    # PoCL names no warp or wavefront: 1 (unknown)
    assert dev.caps.subgroup_width == dev.renderer.caps.subgroup_width == 1
    # PoCL's CPU device keeps local memory in global memory (CL_GLOBAL): no staging of matmul operands in it
    assert int(d.local_mem_type) == cl.device_local_mem_type.GLOBAL
    assert not dev.caps.local_mem_on_chip and not dev.renderer.caps.shared_on_chip


def test_unusable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    (info,) = uopkit_backends()
    monkeypatch.setenv("OPENCL_PLATFORM", "no such platform")
    reason = info.availability()
    assert reason is not None and "no OpenCL platform matches OPENCL_PLATFORM='no such platform'" in reason
    assert "Portable Computing Language" in reason
    monkeypatch.delenv("OPENCL_PLATFORM")

    def no_platform() -> list:
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platform)
    reason = info.availability()
    assert reason is not None and reason.startswith("no OpenCL platform found")
    monkeypatch.undo()
    # pyopencl missing altogether
    monkeypatch.setitem(sys.modules, "pyopencl", None)
    monkeypatch.delitem(sys.modules, "uopkit_opencl.runtime")
    reason = info.availability()
    assert reason is not None and reason.startswith("pyopencl is not importable")


def test_devices_cli_lists_platform_and_device(capsys: pytest.CaptureFixture[str]) -> None:
    from uopkit.cli import main

    assert main(["devices", "-v"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "OPENCL" in x)
    assert "usable" in line and "Portable Computing Language" in line
    assert Device["OPENCL"].caps.name in line


# ------------------------------------------------------------------------------------------------ compiler


def test_compile_returns_binary_and_caches(dev: CLDevice, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    binary = dev.compiler.compile(SCALE_SRC)
    assert isinstance(binary, bytes) and len(binary) > 0
    hits = compile_cache_stats.hits
    first = dev.compiler.compile_cached(SCALE_SRC)
    second = dev.compiler.compile_cached(SCALE_SRC)
    assert first == second and compile_cache_stats.hits == hits + 1
    key = dev.compiler.cache_key
    assert key is not None
    for part in (dev.cl_device.name.strip(), dev.cl_device.driver_version.strip(), dev.cl_device.platform.name):
        assert part in key


def test_compile_error_has_source_and_build_log(dev: CLDevice) -> None:
    with pytest.raises(CompileError) as info:
        dev.compiler.compile("__kernel void broken(__global float* data0) { data0[0] = undefined_name; }")
    text = str(info.value)
    assert "undefined_name" in info.value.message and "error" in info.value.message
    assert "__kernel void broken" in text and "clBuildProgram" in text


# ------------------------------------------------------------------------------------------------ runtime


def test_launch_with_symbolic_value_and_timing(dev: CLDevice) -> None:
    prg = dev.runtime("scale", dev.compiler.compile_cached(SCALE_SRC))
    x = np.arange(16, dtype=np.float32)
    mem = _upload(dev, x)
    elapsed = prg(mem, global_size=(16, 1, 1), vals=(10,), wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    expected = x.copy()
    expected[:10] *= 2
    np.testing.assert_array_equal(_download(dev, mem, x), expected)
    assert prg(mem, global_size=(16, 1, 1), vals=(0,)) is None


def test_work_groups_and_local_memory(dev: CLDevice) -> None:
    prg = dev.runtime("group_sum", dev.compiler.compile_cached(GROUP_SUM_SRC))
    x = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    out = np.zeros(4, dtype=np.float32)
    mem_out, mem_in = _upload(dev, out), _upload(dev, x)
    # global_size counts work-groups: 4 groups of 8 work-items
    prg(mem_out, mem_in, global_size=(4, 1, 1), local_size=(8, 1, 1), wait=True)
    np.testing.assert_allclose(_download(dev, mem_out, out), x.reshape(4, 8).sum(axis=1), rtol=1e-6)


def test_launch_size_errors(dev: CLDevice) -> None:
    assert launch_sizes((4, 2, 1), (8, 1, 1), 256).global_work == (32, 2, 1)
    assert launch_sizes((5, 1, 1), None, 256).local_work is None
    too_big = dev.caps.max_work_group_size * 2
    with pytest.raises(ValueError, match="work-items, the device allows"):
        launch_sizes((1, 1, 1), (too_big, 1, 1), dev.caps.max_work_group_size)
    with pytest.raises(ValueError, match="invalid launch sizes"):
        launch_sizes((1, 1, 1), (0, 1, 1), 256)
    prg = CLProgram(dev, "scale", dev.compiler.compile_cached(SCALE_SRC))
    with pytest.raises(TypeError, match="cl.Buffer arguments"):
        prg(np.zeros(4, dtype=np.float32), vals=(4,))


# ------------------------------------------------------------------------------------------------ memory


def test_copyin_copyout_and_readonly_source(dev: CLDevice) -> None:
    mem = dev.allocator.alloc(4)
    dev.allocator.copyin(mem, memoryview(b"\x01\x02\x03\x04"))
    out = bytearray(4)
    dev.allocator.copyout(memoryview(out), mem)
    assert bytes(out) == b"\x01\x02\x03\x04"
    with pytest.raises(MemoryError, match="max allocation"):
        dev.allocator.alloc(dev.cl_device.max_mem_alloc_size + 1)


def test_transfer_within_and_across_contexts(dev: CLDevice) -> None:
    x = np.arange(100, dtype=np.int32)
    src = _upload(dev, x)
    # a second device object in the same context: a direct buffer copy on its queue
    same = CLDevice("OPENCL:7", dev.cl_device, context=dev.context)
    dest = same.allocator.alloc(x.nbytes)
    same.allocator.transfer(dest, src, x.nbytes, dev, same)
    np.testing.assert_array_equal(_download(same, dest, x), x)
    # a separate context (as two platforms would have): staged through host memory
    other = CLDevice("OPENCL:8", dev.cl_device, context=cl.Context([dev.cl_device]))
    dest2 = other.allocator.alloc(x.nbytes)
    other.allocator.transfer(dest2, src, x.nbytes, dev, other)
    np.testing.assert_array_equal(_download(other, dest2, x), x)


def test_buffers_between_cpu_and_opencl() -> None:
    x = np.arange(7, dtype=np.float32)
    cpu = Buffer("CPU", 7, dtypes.float32).copyin(memoryview(x))
    gpu = Buffer("OPENCL", 7, dtypes.float32).copy_from(cpu)
    np.testing.assert_array_equal(gpu.as_numpy(), x)
    back = Buffer("CPU", 7, dtypes.float32).copy_from(gpu)
    np.testing.assert_array_equal(back.as_numpy(), x)

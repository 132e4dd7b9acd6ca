"""The CUDA renderer's source (golden checks), its errors, and NVRTC: compile errors, arch checks, the cache key."""

from __future__ import annotations

import pytest

from uopkit.device import CompileError
from uopkit.dtype import dtypes
from uopkit.renderer.cstyle import RenderError
from uopkit.renderer.tensor_cores import CUDA_BF16_TENSOR_CORES, CUDA_TENSOR_CORES
from uopkit.testing.programs import global_buf, idx, load, program, store, wmma_matmul_program
from uopkit.uop.ops import Ops, UOp
from uopkit_cuda.compiler import NVRTCCompiler, check_arch, nvrtc_problem, nvrtc_version
from uopkit_cuda.renderer import CUDACaps, CUDARenderer, parse_arch

needs_nvrtc = pytest.mark.skipif(nvrtc_problem() is not None, reason=f"NVRTC unusable here: {nvrtc_problem()}")


def scale_program(local: bool) -> list[UOp]:
    """out[i] = half(a[i] * 2) over 64 threads: 2 blocks of 32 (local) or 64 global ids."""
    out, a = global_buf(0, dtypes.float16, 64), global_buf(1, dtypes.float32, 64)
    if local:
        g = UOp(Ops.SPECIAL, dtypes.index, (idx(2),), "gidx0")
        lane = UOp(Ops.SPECIAL, dtypes.index, (idx(32),), "lidx0")
        i = g * 32 + lane
    else:
        i = UOp(Ops.SPECIAL, dtypes.index, (idx(64),), "gidx0")
    return program(store(out, i, (load(a, i) * 2.0).cast(dtypes.float16)))


GOLDEN_LOCAL = """\
#include <cuda_fp16.h>
#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fffffff))
template <class T, class F> __device__ __forceinline__ T uk_bitcast(F x) {
  static_assert(sizeof(T) == sizeof(F), "bitcast between sizes");
  T y;
  memcpy(&y, &x, sizeof(T));
  return y;
}
extern "C" __global__ void __launch_bounds__(32) scale(half* __restrict__ data0, float* __restrict__ data1) {
  int gidx0 = (int)blockIdx.x; /* 2 */
  int lidx0 = (int)threadIdx.x; /* 32 */
  int alu0 = (gidx0*32);
  int alu1 = (alu0+lidx0);
  float val0 = data1[alu1];
  float alu2 = (val0*2.0f);
  half cast0 = ((half)(alu2));
  data0[alu1] = cast0;
}"""


def test_golden_source_with_blocks_and_threads() -> None:
    assert CUDARenderer().render("scale", scale_program(local=True)) == GOLDEN_LOCAL


def test_global_ids_without_local_ids() -> None:
    src = CUDARenderer().render("scale", scale_program(local=False))
    # no lidx: gidx is the thread's global id and the runtime picks blocks of at most 128 threads
    assert "int gidx0 = (int)(blockIdx.x*blockDim.x+threadIdx.x); /* 64 */" in src
    assert "__launch_bounds__(128)" in src


def test_shared_memory_barrier_and_if() -> None:
    out = global_buf(0, dtypes.float32, 32)
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(32),), "lidx0")
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(32, local=True), (), "temp0")
    staged = store(shared, lane, lane.cast(dtypes.float32))
    barrier = UOp(Ops.BARRIER, dtypes.void, (staged,))
    back = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, 31 - lane)), barrier))
    src = CUDARenderer().render("rev", program(store(out, lane, back)))
    assert "__shared__ __align__(16) float temp0[32];" in src and "__syncthreads();" in src


def test_shared_memory_too_large_is_a_clear_error() -> None:
    out = global_buf(0, dtypes.float32, 1)
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(20000, local=True), (), "temp0")
    uops = program(store(out, 0, load(shared, 0)))
    with pytest.raises(RenderError, match=r"kernel big needs 80000 bytes of __shared__ memory, but a CUDA block has"):
        CUDARenderer(CUDACaps(shared_per_block=48 * 1024)).render("big", uops)


def test_mma_rendering_and_old_arch() -> None:
    uops = wmma_matmul_program(CUDA_TENSOR_CORES[0])
    src = CUDARenderer().render("mm", uops)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}" in src
    assert "uk_float4 wmma0 = mma_m16n8k16_f16_f32(vec0, vec1, vec2);" in src
    with pytest.raises(RenderError, match="needs sm_80 or newer, the target is sm_75"):
        CUDARenderer(CUDACaps(arch="sm_75")).render("mm", uops)


@pytest.mark.parametrize("arch", ["sm_90x", "90", "gfx1100", ""])
def test_bad_arch_names(arch: str) -> None:
    with pytest.raises(ValueError, match="bad CUDA arch"):
        parse_arch(arch)


@needs_nvrtc
def test_arch_nvrtc_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"can't compile for 'sm_12'; it knows .*sm_80.*sm_90"):
        check_arch("sm_12")


@needs_nvrtc
def test_compile_error_has_numbered_source_and_log() -> None:
    src = 'extern "C" __global__ void broken(float* a) {\n  a[0] = undefined_name;\n}'
    with pytest.raises(CompileError) as info:
        NVRTCCompiler("sm_90").compile(src)
    text = str(info.value)
    assert "NVRTC" in text and "sm_90" in text
    assert 'identifier "undefined_name" is undefined' in text
    assert "   2 |   a[0] = undefined_name;" in text


@needs_nvrtc
def test_cache_key_holds_arch_and_nvrtc_version() -> None:
    k80, k90 = NVRTCCompiler("sm_80").cache_key, NVRTCCompiler("sm_90").cache_key
    assert k80 != k90 and "sm_80" in k80 and f"nvrtc {nvrtc_version()}" in k80


@needs_nvrtc
@pytest.mark.parametrize("tc", CUDA_TENSOR_CORES + CUDA_BF16_TENSOR_CORES, ids=lambda tc: tc.name)
def test_every_mma_compiles_to_cubin(tc) -> None:  # noqa: ANN001
    cubin, log = NVRTCCompiler("sm_80").compile_with_log(CUDARenderer().render("mm", wmma_matmul_program(tc)))
    # an ELF image (CUBIN), and no warnings
    assert cubin[:4] == b"\x7fELF" and log == ""


def test_y_and_z_ids_step_through_grids_larger_than_the_limit() -> None:
    """A grid holds at most 65535 blocks in y and z: those ids loop by the grid's size (the runtime clamps it)."""
    out, a = global_buf(0, dtypes.float32, 70000 * 4), global_buf(1, dtypes.float32, 70000 * 4)
    g0 = UOp(Ops.SPECIAL, dtypes.index, (idx(4),), "gidx0")
    g1 = UOp(Ops.SPECIAL, dtypes.index, (idx(70000),), "gidx1")
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(4),), "lidx0")
    i = g1 * 16 + g0 * 4 + lane
    src = CUDARenderer().render("big", program(store(out, i, load(a, i) * 2.0)))
    assert (
        "  for (int gidx1 = blockIdx.y; gidx1 < 70000; gidx1 += gridDim.y) {\n    int gidx0 = (int)blockIdx.x;" in src
    )
    assert src.endswith("    data0[alu3] = alu4;\n  }\n}")
    ungrouped = CUDARenderer().render("big", program(store(out, g1 * 4 + g0, load(a, g1 * 4 + g0))))
    assert "gidx1 = blockIdx.y*blockDim.y+threadIdx.y; gidx1 < 70000; gidx1 += gridDim.y*blockDim.y) {" in ungrouped


def test_block_limits_and_warp_from_the_device() -> None:
    caps = CUDARenderer(CUDACaps(max_threads_per_block=512, max_block=(512, 512, 64), warp_size=32)).caps
    assert caps.workgroup_max == 512 and caps.local_max == (512, 512, 64) and caps.subgroup_width == 32

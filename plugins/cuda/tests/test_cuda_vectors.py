"""Vector loads and stores on CUDA: 16-byte accesses (``ld.global.v4.f32``) where the core proves the address aligned,
scalar ones elsewhere; checked in the PTX NVRTC makes for sm_90 and on the emulator with CUDA's settings (which
fails on a misaligned vector access). No GPU needed."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes
from uopkit.codegen import get_program
from uopkit.emulator import emulator_device
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.testing.programs import end, global_buf, load, loop, program, store
from uopkit.uop.ops import Ops, UOp
from uopkit_cuda.compiler import NVRTCCompiler, nvrtc_problem
from uopkit_cuda.renderer import CUDACaps, CUDARenderer

needs_nvrtc = pytest.mark.skipif(nvrtc_problem() is not None, reason=f"NVRTC unusable here: {nvrtc_problem()}")


def _memory_ops(t: Tensor) -> collections.Counter[str]:
    """The global loads and stores in the PTX of `t`'s last kernel, with the default opts, for sm_90."""
    item = create_schedule(kernelize_tensors([t]))[-1]
    src = get_program(item.ast, CUDARenderer(CUDACaps(arch="sm_90"))).src
    assert isinstance(src, str)
    ptx = NVRTCCompiler("sm_90").ptx(src)
    return collections.Counter(re.findall(r"\b(?:ld|st)\.global[\w.]*", ptx))


@pytest.fixture
def cuda_emulator() -> Iterator[str]:
    """An emulator device building CUDA's programs (vectors that must be aligned) and checking their alignment."""
    name = "EMULATOR:45"
    Device._opened[name] = emulator_device(name, CUDARenderer(CUDACaps()))
    yield name
    Device._opened.pop(name, None)


@needs_nvrtc
def test_elementwise_loads_and_stores_16_byte_vectors() -> None:
    # the elementwise kernel at its size: 4 vectors of 4 floats per thread, 3 loads and a store each
    a, b, c = (Tensor.empty(1 << 26) for _ in range(3))
    ops = _memory_ops((a * b + c).relu() * 2)
    assert ops == {"ld.global.nc.v4.f32": 12, "st.global.v4.f32": 4}, ops
    # half: 8 per vector (16 bytes)
    h = Tensor.empty(1 << 20, dtype=dtypes.float16)
    ops = _memory_ops(h * h + 1)
    assert ops == {"ld.global.nc.v4.u32": 1, "st.global.v4.u32": 1}, ops


@needs_nvrtc
def test_unaligned_views_load_scalars(cuda_emulator: str) -> None:
    # (scheduled for a device with CUDA's caps: a window's start keeps the alignment its constant start had)
    x, y = Tensor.empty(4100, device=cuda_emulator), Tensor.empty(4100, device=cuda_emulator)
    # x[1:] starts 4 bytes into its buffer: scalar loads; y and the output are aligned
    ops = _memory_ops(x[1:4097] * y[4:])
    assert ops["ld.global.nc.f32"] == 4 and ops["ld.global.nc.v4.f32"] == 1 and ops["st.global.v4.f32"] == 1, ops
    # an odd length padded to whole blocks: no vector of it fits under one gate, so nothing is a vector
    ops = _memory_ops(Tensor.empty(1 << 20 | 1) * 2)
    assert not any(".v" in op for op in ops), ops


def test_shared_and_register_arrays_are_declared_aligned() -> None:
    # the core takes every base as aligned to 16 bytes: a register kept as an array (indexed by a loop) and __shared__
    # memory are declared so
    out = global_buf(0, dtypes.float32, 8)
    reg = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(8), (), 0)
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(8, local=True), (), "temp0")
    i = loop(0, 8)
    staged = end(store(reg, i, i.cast(dtypes.float32)), i)
    j = loop(1, 8, deps=(staged,))
    copied = end(store(shared, j, UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, reg.dtype, (reg, j)), staged))), j)
    k = loop(2, 8, deps=(copied,))
    src = CUDARenderer().render("k", program(end(store(out, k, load(shared, k)), k)))
    assert "__align__(16) float acc0[8];" in src and "__shared__ __align__(16) float temp0[8];" in src, src


@pytest.mark.parametrize("n", [4096, 4097, 100003, 1 << 20])
def test_offset_views_and_odd_lengths_compute_right(cuda_emulator: str, n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n + 3).astype(np.float32), rng.standard_normal(n + 3).astype(np.float32)
    xt, yt = Tensor(x, device=cuda_emulator), Tensor(y, device=cuda_emulator)
    np.testing.assert_array_equal(((xt[:n] * yt[:n] + 1).relu() * 2).numpy(), np.maximum(x[:n] * y[:n] + 1, 0) * 2)
    np.testing.assert_array_equal((xt[1 : n + 1] * yt[:n]).numpy(), x[1 : n + 1] * y[:n])
    np.testing.assert_array_equal((xt[3:] + yt[2 : n + 2]).numpy(), x[3:] + y[2 : n + 2])

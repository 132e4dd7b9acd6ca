"""CUDA's tensor cores on the reference emulator (EMULATE=CUDA): the descriptions the CUDA renderer offers compute
right, and Tensor matmuls that reach them (half in, float accumulate) give PyTorch's answers. The same
descriptions are rendered as ``mma.sync`` and compiled by NVRTC in test_cuda_renderer.py / test_cuda_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.codegen import get_program
from uopkit.device import Device
from uopkit.emulator import run_uops
from uopkit.engine.realize import method_cache
from uopkit.renderer.tensor_cores import (
    CUDA_BF16_TENSOR_CORES,
    CUDA_TENSOR_CORES,
    CUDA_TF32_TENSOR_CORES,
)
from uopkit.tensor import Tensor
from uopkit.testing.programs import wmma_matmul_program
from uopkit.uop.ops import Ops
from uopkit_cuda.renderer import CUDACaps, CUDARenderer


@pytest.fixture
def cuda_emulator(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A fresh emulator device that takes the CUDA renderer's settings (tensor cores, locals, shared memory)."""
    monkeypatch.setenv("EMULATE", "CUDA")
    name = "EMULATOR:12"
    Device._opened.pop(name, None)
    yield name
    Device._opened.pop(name, None)


@pytest.mark.parametrize("tc", CUDA_TENSOR_CORES + CUDA_TF32_TENSOR_CORES, ids=lambda tc: tc.name)
def test_wmma_program_on_the_emulator(tc) -> None:  # noqa: ANN001
    tiles = (2, 3, 2)
    m, n, k = (d * t for d, t in zip(tc.dims, tiles, strict=True))
    rng = np.random.default_rng(3)
    in_np = np.float16 if tc.dtype_in.itemsize == 2 else np.float32
    out_np = np.float16 if tc.dtype_out.itemsize == 2 else np.float32
    a = rng.standard_normal((m, k)).astype(in_np)
    b = rng.standard_normal((k, n)).astype(in_np)
    out = np.zeros((m, n), out_np)
    run_uops(wmma_matmul_program(tc, tiles), [out, a, b])
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-2 if out_np == np.float16 else 1e-5
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test_bf16_wmma_program_on_the_emulator() -> None:
    """bfloat16 in, float out: the emulator keeps bfloat16 memory as 16-bit patterns."""
    from uopkit.emulator import bf16_to_float32, float32_to_bf16_bits

    (tc,) = CUDA_BF16_TENSOR_CORES
    tiles = (2, 3, 2)
    m, n, k = (d * t for d, t in zip(tc.dims, tiles, strict=True))
    rng = np.random.default_rng(4)
    a = float32_to_bf16_bits(rng.standard_normal((m, k)))
    b = float32_to_bf16_bits(rng.standard_normal((k, n)))
    out = np.zeros((m, n), np.float32)
    run_uops(wmma_matmul_program(tc, tiles), [out, a, b])
    want = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b).astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def _wmma_names(device: str) -> set[str]:
    # (a compiled runner keeps no linear program: it is built again from the kernel's AST)
    programs = [get_program(ast, Device[device].renderer) for (ast, d) in method_cache if d == device]
    return {u.arg.name for p in programs for u in p.uops if u.op is Ops.WMMA}


def _matmul_tensor_cores(device: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, set[str]]:
    """a @ b on `device` (as float32), and the tensor cores its kernels used."""
    for key in [k for k in method_cache if k[1] == device]:
        del method_cache[key]
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).float().numpy()
    return got, _wmma_names(device)


def test_half_matmul_uses_tensor_cores_on_emulated_cuda(cuda_emulator: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float16)
    b = rng.standard_normal((48, 32)).astype(np.float16)
    got, used = _matmul_tensor_cores(cuda_emulator, a, b)
    want = (torch.from_numpy(a).float() @ torch.from_numpy(b).float()).half().float().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    assert used & {"mma_m16n8k16_f16_f32", "mma_m16n8k8_f16_f32"}


def test_float_matmul_uses_tf32_only_when_asked(cuda_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    got, used = _matmul_tensor_cores(cuda_emulator, a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert not used
    assert CUDA_TF32_TENSOR_CORES[0] not in CUDARenderer().tensor_cores
    monkeypatch.setenv("TF32", "1")
    assert CUDA_TF32_TENSOR_CORES[0] in CUDARenderer().tensor_cores
    # a device opened with TF32=1 runs float32 matmuls on the TF32 core (exact on the emulator: float64 products)
    tf32_device = "EMULATOR:13"
    Device._opened.pop(tf32_device, None)
    try:
        got, used = _matmul_tensor_cores(tf32_device, a, b)
    finally:
        Device._opened.pop(tf32_device, None)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert "mma_m16n8k8_tf32_f32" in used
    # no tensor cores below sm_80 (mma.sync m16n8k16 needs Ampere)
    assert CUDARenderer(CUDACaps(arch="sm_75")).tensor_cores == []

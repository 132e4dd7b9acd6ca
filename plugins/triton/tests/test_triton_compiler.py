"""TritonCompiler: the module contract, CompileError with Triton's message, and triton.compile for sm_90 and sm_80
without a GPU (ptxas from the triton wheel, no driver)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from uopkit.codegen import get_program
from uopkit.device import CompileError
from uopkit.dtype import dtypes
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import Tensor
from uopkit.uop.ops import UOp
from uopkit_triton.compiler import TritonCompiler, compile_for_target, load_module, parse_targets, rebind_kernels
from uopkit_triton.renderer import TritonRenderer


def _ast(t: Tensor) -> UOp:
    return create_schedule(kernelize_tensors([t]))[-1].ast


SM90, SM80 = ("cuda", 90, 32), ("cuda", 80, 32)


def _kernels() -> list[str]:
    """Sources the optimizer produces: elementwise float16, a reduce, pow and int64 division, a matmul."""
    a = Tensor(np.ones((16, 8), np.float16), device="TRITON")
    b = Tensor(np.ones((8, 4), np.float32), device="TRITON")
    i = Tensor(np.arange(12, dtype=np.int64), device="TRITON")
    outs = [
        a * 2 + 1,
        a.float().max(axis=1),
        b.pow(Tensor(np.full((8, 4), 1.5, np.float32), device="TRITON")),
        i // 5,
        a.float() @ b,
    ]
    return [get_program(_ast(t), TritonRenderer()).src for t in outs]


@pytest.mark.parametrize("target", [SM90, SM80], ids=["sm_90", "sm_80"])
def test_kernels_compile_for_cuda_without_a_gpu(target: tuple[str, int, int]) -> None:
    for src in _kernels():
        compiled = compile_for_target(load_module(src), target)
        assert f".target sm_{target[1]}" in compiled.asm["ptx"]
        assert compiled.asm["cubin"], "ptxas produced no cubin"


def test_kernel_globals_pass_tritons_launch_check() -> None:
    # before each GPU launch Triton compares every global a kernel (or a helper it calls) read with the value it
    # compiled with; a NaN global never passed ("Global variable NAN has changed", seen on an H200): the same
    # comparison here, over the globals Triton records when it computes the kernel's cache key
    x = Tensor(np.array([1.0, -2.0, 0.5, 4.0], np.float32), device="TRITON")
    outs = [(x > 0).where(x, float("nan")), x.pow(x * 0.5) + float("nan"), x.max(), -x.abs().log(), x.float().isinf()]
    sources = [get_program(_ast(t), TritonRenderer()).src for t in outs]
    assert any("INF - INF" in src for src in sources), "no kernel here has a NaN constant"
    checked = 0
    for src in sources:
        kernel = rebind_kernels(load_module(src), interpreted=False)
        assert kernel.cache_key
        for (name, _), (value, module_globals) in kernel.used_global_vals.items():
            assert not module_globals.get(name) != value, f"Triton would refuse to launch: global {name} = {value}"
            checked += 1
    assert checked, "Triton recorded no globals: the check tested nothing"


def test_nan_constants_are_nan_in_the_interpreter() -> None:
    x = Tensor(np.array([1.0, -2.0, 0.5], np.float32), device="TRITON")
    np.testing.assert_array_equal((x > 0).where(x, float("nan")).numpy(), [1.0, np.nan, 0.5])
    np.testing.assert_array_equal(x.pow(Tensor([0.5, 0.5, 2.0], device="TRITON")).numpy(), [1.0, np.nan, 0.25])


def test_compiler_checks_each_target_and_returns_the_source() -> None:
    src = _kernels()[0]
    assert TritonCompiler((SM90, SM80)).compile(src) == src.encode()


def test_triton_rejection_is_a_compile_error_with_the_source() -> None:
    # tl.arange needs a power of two: Triton refuses it when compiling, not when importing
    src = re.sub(r"tl\.arange\(0, \d+\)", "tl.arange(0, 48)", _kernels()[0])
    assert "tl.arange(0, 48)" in src
    with pytest.raises(CompileError) as info:
        TritonCompiler((SM90,)).compile(src)
    assert info.value.src == src
    assert "sm_90" in info.value.compiler and "power of 2" in info.value.message
    assert "tl.arange(0, 48)" in str(info.value)


def test_bad_module_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="SyntaxError"):
        TritonCompiler().compile("def broken(:\n")
    with pytest.raises(CompileError, match="lacks"):
        TritonCompiler().compile("x = 1\n")


def test_targets_from_the_environment() -> None:
    assert parse_targets("sm_90, cuda:80") == (SM90, SM80)
    assert parse_targets("") == ()
    with pytest.raises(ValueError, match="sm_90"):
        parse_targets("hopper")


def test_cache_key_names_triton_and_targets() -> None:
    import triton

    key = TritonCompiler((SM90,)).cache_key
    assert key is not None and triton.__version__ in key and "cuda:90" in key
    assert TritonCompiler().cache_key != key


def test_float16_kernel_signature() -> None:
    src = _kernels()[0]
    module = load_module(src)
    assert set(module.SIGNATURE.values()) == {"*fp16"} and module.NUM_WARPS >= 1
    assert dtypes.float16 in TritonRenderer.supported_dtypes

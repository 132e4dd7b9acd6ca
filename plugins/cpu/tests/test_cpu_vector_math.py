"""sin and pow through glibc's vector math library: declared with vector variants where libmvec is there, same
answers."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.device import Device
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit_cpu.renderer import libm_declarations, libmvec_available


def test_libmvec_is_used_only_on_x86_64_glibc_2_22_and_later() -> None:
    assert libmvec_available("x86_64", ("glibc", "2.36"))
    assert libmvec_available("x86_64", ("glibc", "2.22"))
    assert not libmvec_available("x86_64", ("glibc", "2.21"))
    # musl, macOS, other CPUs, an unreadable version: the scalar libm call
    assert not libmvec_available("x86_64", ("", ""))
    assert not libmvec_available("arm64", ("glibc", "2.38"))
    assert not libmvec_available("x86_64", ("glibc", "unknown"))


def test_declarations_give_sin_and_pow_vector_variants_only_when_asked() -> None:
    vector, scalar = libm_declarations(True), libm_declarations(False)
    assert "#pragma omp declare simd notinbranch" not in scalar
    # the pragma sits right before each sin and pow declaration (float and double), and nothing else gets one
    marked = [vector[i + 1] for i, line in enumerate(vector) if line == "#pragma omp declare simd notinbranch"]
    assert marked == [
        "float sinf(float);",
        "float powf(float, float);",
        "double sin(double);",
        "double pow(double, double);",
    ]
    assert [line for line in vector if "pragma" not in line] == list(scalar)


def _library(y: Tensor) -> bytes:
    item = create_schedule(kernelize_tensors([y]))[-1]
    from uopkit.codegen import get_program

    cpu = Device["CPU"]
    return cpu.compiler.compile(get_program(item.ast, cpu.renderer).src)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sin_matches_numpy_through_the_vector_variants(dtype) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(-10, 10, 5000),
            rng.uniform(-1e6, 1e6, 2000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, np.pi, 1e-30, 3e38 if dtype == np.float32 else 1e300],
        ]
    ).astype(dtype)
    got = Tensor(x).sin().numpy()
    with np.errstate(invalid="ignore"):
        want = np.sin(x.astype(np.float64))
    # libmvec's variants are within 4 ulp (measured 2 for floats); specials and signed zeros exactly as libm
    ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    finite = np.isfinite(want)
    assert np.all(np.abs(got[finite] - want[finite]) <= 4 * ulp[finite])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()
    if libmvec_available():
        # the loop was vectorized: the library calls a vector variant of sin (_ZGV<isa>N<lanes>v_sin[f])
        assert b"_ZGV" in _library(Tensor(x).sin())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_matches_numpy_through_the_vector_variants(dtype) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    base = np.concatenate(
        [rng.uniform(0, 50, 4000), rng.uniform(-5, 5, 1000), [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0]]
    )
    exp = rng.uniform(-6, 6, base.size)
    exp[-12:] = [0.5, 1.5, -1.5, 2.0, 3.0, -2.0, 0.0, np.nan, np.inf, -np.inf, 0.5, 1.0]
    base, exp = base.astype(dtype), exp.astype(dtype)
    got = (Tensor(base) ** Tensor(exp)).numpy()
    with np.errstate(all="ignore"):
        want = np.power(base.astype(np.float64), exp.astype(np.float64))
    # within 4 ulp (libmvec's bound; measured 1 for floats), overflow, NaN (negative bases, fractional powers) and
    # C99's special values (pow(1, nan) = 1, pow(x, 0) = 1, signed zeros and infinities) as libm
    ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    finite = np.isfinite(want) & (np.abs(want) < np.finfo(dtype).max)
    assert np.all(np.abs(got[finite] - want[finite]) <= 4 * ulp[finite])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf].astype(dtype))
    zero = want == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    if libmvec_available():
        assert b"_ZGV" in _library(Tensor(base) ** 1.5)

"""The core's decompositions of EXP2, LOG2, SIN and SQRT (codegen/transcendental.py), run on the reference
emulator as a renderer that claims none of them would get them, and compared with numpy over the whole range of
each float type, special values included."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen.transcendental import _TWO_OVER_PI_WORDS, decompositions_for, xexp
from uopkit.dtype import dtypes, from_numpy_dtype
from uopkit.emulator import run_uops
from uopkit.testing.programs import end, global_buf, load, loop, program, store
from uopkit.uop.ops import Ops, UOp, graph_rewrite

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan]


def decomposed(op: Ops, x: np.ndarray) -> np.ndarray:
    """op(x) elementwise, decomposed as for a renderer that claims no transcendental op, on the emulator."""
    dt = from_numpy_dtype(x.dtype)
    out, inp = global_buf(0, dt, x.size), global_buf(1, dt, x.size)
    i = loop(0, x.size)
    value = graph_rewrite(UOp(op, dt, (load(inp, i),)), decompositions_for(frozenset()), name="transcendentals")
    assert op not in {u.op for u in value.toposort()}, f"{op} was not decomposed"
    result = np.zeros_like(x)
    run_uops(program(end(store(out, i, value), i)), [result, x.copy()])
    return result


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of `want` (in its own type); both finite."""
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing


def wide(rng: np.random.Generator, dtype: type, n: int, lo: int, hi: int) -> np.ndarray:
    """n values of both signs with exponents spread over [lo, hi)."""
    with np.errstate(over="ignore"):
        x = (rng.random(n) * 2 - 1) * 2.0 ** rng.integers(lo, hi, n).astype(np.float64)
    return x[np.abs(x) <= np.finfo(dtype).max].astype(dtype)


def test_two_over_pi_bits_match_the_published_ones():
    # 2/pi = 0.a2f9836e 4e441529 fc2757d1 f534ddc0 db629599 3c439041 fe5163ab ... (e.g. fdlibm's table)
    published = "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e0"
    assert "".join(f"{w:08x}" for w in _TWO_OVER_PI_WORDS)[: len(published)] == published


@pytest.mark.parametrize(
    "dtype, exponents, max_ulp",
    [(np.float32, (-30, 128), 2), (np.float64, (-40, 1024), 2), (np.float16, (-14, 16), 1)],
)
def test_sin_over_the_whole_range(dtype, exponents, max_ulp):
    rng = np.random.default_rng(0)
    x = wide(rng, dtype, 20000, *exponents)
    # near multiples of pi/2, where the reduction cancels most
    near = rng.integers(1, 2**20, 2000) * (np.pi / 2)
    near = near[near < np.finfo(dtype).max].astype(dtype)
    hard = {np.float64: [6381956970095103 * 2.0**797, 5261692873635770 * 2.0**499], np.float32: [1.5707964, 3.4e38]}
    x = np.concatenate([x, near, np.array(hard.get(dtype, []), dtype)])
    x = x[np.isfinite(x)]
    got = decomposed(Ops.SIN, x)
    want = np.sin(x.astype(np.float64)).astype(dtype)
    assert ulps(got, want).max() <= max_ulp


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sin_special_values(dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([*SPECIALS, tiny, -tiny, np.finfo(dtype).max, -np.finfo(dtype).max], dtype)
    got = decomposed(Ops.SIN, x)
    with np.errstate(invalid="ignore"):
        want = np.sin(x.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(got[:7], want[:7])
    assert list(np.signbit(got[:2])) == [False, True], "sin(-0) is -0"
    assert ulps(got[7:], want[7:]).max() <= 2


def test_sqrt_float32_is_correctly_rounded():
    # every 4099th bit pattern of the positive floats (denormals and both ends included), and the specials
    x = np.arange(0, 0x7F800000, 4099, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, np.array([*SPECIALS, -1.0, -1e-45, 1e-45, 3.4028235e38, 1.1754942e-38], np.float32)])
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    got = decomposed(Ops.SQRT, x)
    assert np.array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_sqrt_float16_float64(dtype):
    rng = np.random.default_rng(1)
    info = np.finfo(dtype)
    x = np.abs(wide(rng, dtype, 20000, int(np.log2(info.smallest_subnormal)), int(np.log2(info.max)) + 1))
    x = np.concatenate([x, np.array([*SPECIALS, -1.0, info.smallest_subnormal, info.tiny, info.max], dtype)])
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    got = decomposed(Ops.SQRT, x)
    finite = np.isfinite(want)
    # float16 via float32 is exact; float64 within 1 ulp
    assert ulps(got[finite], want[finite]).max() <= (0 if dtype == np.float16 else 1)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    assert np.signbit(decomposed(Ops.SQRT, np.array([-0.0], dtype))[0]), "sqrt(-0) is -0"


@pytest.fixture
def bare_emulator():
    """An emulator device whose renderer claims no transcendental op, as a backend without them would."""
    dev = Device["EMULATOR:5"]
    saved = dev.renderer.caps
    dev.renderer.caps = replace(saved, transcendental_ops=frozenset())
    yield "EMULATOR:5"
    dev.renderer.caps = saved


def test_tensor_sin_sqrt_exp_log_without_native_ops(bare_emulator):
    x = np.array([-1e6, -3.0, -0.5, 0.25, 1.0, 2.0, 100.0, 1e20], np.float32)
    t = Tensor(x, device=bare_emulator)
    np.testing.assert_allclose(t.sin().numpy(), np.sin(x.astype(np.float64)), rtol=3e-7, atol=1e-7)
    np.testing.assert_array_equal(t.abs().sqrt().numpy(), np.sqrt(np.abs(x)))
    np.testing.assert_allclose(t.abs().log2().numpy(), np.log2(np.abs(x)), rtol=1e-6)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose((t * 1e-3).exp2().numpy(), np.exp2(x * np.float32(1e-3)), rtol=1e-6)
    # the kernels were decomposed: the emulator got none of the four ops
    from uopkit.codegen import get_program
    from uopkit.engine.realize import method_cache

    # (a compiled runner keeps no linear program: it is built again from the kernel's AST)
    renderer = Device[bare_emulator].renderer
    ops = {u.op for (ast, device) in method_cache if device == bare_emulator for u in get_program(ast, renderer).uops}
    assert ops and not ops & {Ops.SIN, Ops.SQRT, Ops.EXP2, Ops.LOG2}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cos_keeps_its_relative_accuracy_next_to_its_zeros(dtype):
    # 1 - 2 sin(x/2)**2 cancelled to a few ulp of 1.0 there: cos(1.5707964) was 5.96e-08, not -4.37e-08
    # (float32 reduces exactly below |x| = 12000: the odd multiples of pi/2 up to there)
    x = ((np.arange(1, 3800) * 2 - 1) * (np.pi / 2)).astype(dtype)
    x = np.concatenate([x, -x, np.random.default_rng(3).uniform(-1e4, 1e4, 4000).astype(dtype)])
    want = np.cos(x.astype(np.float64))
    got = Tensor(x).cos().numpy().astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    assert (np.abs(got - want) / ulp).max() <= (2.0 if dtype == np.float32 else 4.0)
    # beyond the reduction's range, and the special values
    big = np.array([1e5, -3e7, 1e30, np.inf, -np.inf, np.nan, -0.0], dtype)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(Tensor(big).cos().numpy(), np.cos(big), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tan_keeps_its_relative_accuracy_next_to_its_poles(dtype):
    # tan reduced with three float32-sized parts of pi/2, also in float64: next to its poles float64 was off by
    # up to 8e11 ulp (and float32 by ~1000 ulp); it now shares cos's reduction
    x = np.concatenate([np.arange(-3000, 3000) * (np.pi / 4), np.random.default_rng(5).uniform(-1e4, 1e4, 4000)])
    x = x.astype(dtype)
    want = np.tan(x.astype(np.float64))
    got = Tensor(x).tan().numpy().astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    assert (np.abs(got - want) / ulp).max() <= (4.0 if dtype == np.float32 else 8.0)
    # beyond the reduction's range, and the special values (zeros keep their sign)
    big = np.array([1e5, -3e7, np.inf, -np.inf, np.nan, 0.0, -0.0], dtype)
    got = Tensor(big).tan().numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, np.tan(big), rtol=1e-5, atol=1e-6)
    assert list(np.signbit(got[-2:])) == [False, True]


def test_exp_polynomial_is_written_for_fma():
    # each step of exp's ln2 remainder and polynomial is one MULACC, a*b+c in one expression: C-style compilers
    # (OpenCL C, CUDA) contract only within an expression, the CPU backend writes each as an fma, and an FMA per step
    # is faster and rounds once; so is n = round(x / ln2) (x * log2e + the rounding constant)
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0)
    x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, buf.dtype, (buf, UOp.const(dtypes.int32, 0))),))
    fused = [u for u in xexp(x).toposort() if u.op is Ops.MULACC]
    assert len(fused) == 1 + 2 + 6, len(fused)


def test_log1p_of_large_values_and_floor_division_past_the_largest_float():
    torch = pytest.importorskip("torch")
    # log1p: log(1 + x) * x / x overflowed in its product past 1e37 (inf where the answer is 85-88)
    for dt, tdt, xs in (
        (dtypes.float32, torch.float32, [1e37, 3e38, 1e20, 1e-10, 0.1, -0.5, -1 + 1e-7]),
        (dtypes.float64, torch.float64, [1e307, 1e300, 1e-300, 0.1]),
    ):
        np.testing.assert_allclose(
            Tensor(xs, dtype=dt).log1p().numpy(), torch.tensor(xs, dtype=tdt).log1p().numpy(), rtol=2e-7
        )
    # a finite quotient too large for the dtype floors to inf, as torch's (it was nan); inf // x stays nan
    a, b = [7.0, -7.0, 3e38, float("inf"), 1.0, -1.0], [1e-38, 1e-38, 0.5, 1.5, 0.0, 0.0]
    want = (torch.tensor(a) // torch.tensor(b)).numpy()
    np.testing.assert_array_equal((Tensor(a) // Tensor(b)).numpy(), want)
    np.testing.assert_array_equal(Tensor(a).div(Tensor(b), rounding_mode="floor").numpy(), want)


def test_float64_inverse_trigonometry_and_erf_keep_float64_precision():
    # atan, asin, acos (built on atan) and erf once computed float64 inputs to float32's precision (atan(1) was
    # float32's pi/4, erf A&S 7.1.26's 2e-7)
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-1, 1, 500), rng.uniform(-30, 30, 500), [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300]])
    unit = np.clip(x, -1, 1)
    cases = {
        "atan": (x, np.vectorize(math.atan)(x)),
        "asin": (unit, np.vectorize(math.asin)(unit)),
        "acos": (unit, np.vectorize(math.acos)(unit)),
        "erf": (x, np.vectorize(math.erf)(x)),
    }
    for name, (inputs, want) in cases.items():
        got = getattr(Tensor(inputs), name)().numpy()
        assert got.dtype == np.float64
        ulps = np.abs(got - want) / np.spacing(np.maximum(np.abs(want), 1e-300))
        assert ulps.max() <= 4, (name, ulps.max(), inputs[ulps.argmax()])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinh_and_cosh_are_finite_up_to_the_largest_float(dtype):
    # e^x overflows before cosh(x) = (e^x + e^-x) / 2 does: float32 from 88.7, where cosh is finite up to 89.4
    top = 89.41 if dtype == np.float32 else 710.47
    x = np.array([top - 2, top - 0.5, top, -top, 25.0, -25.0, 19.5, top + 0.1], dtype)
    for name in ("sinh", "cosh"):
        want = np.array([getattr(math, name)(float(v)) if abs(v) < top + 0.05 else math.inf for v in x])
        want = np.where(x < 0, np.sign(want), 1) * np.abs(want) if name == "sinh" else want
        got = getattr(Tensor(x), name)().numpy().astype(np.float64)
        finite = np.isfinite(want) & (np.abs(want) < np.finfo(dtype).max)
        np.testing.assert_allclose(got[finite], want[finite], rtol=4 * np.finfo(dtype).eps)
        assert np.isinf(got[~finite]).all()
        t = Tensor(x[:3], requires_grad=True)
        getattr(t, name)().sum().backward()
        assert np.isfinite(t.grad.numpy()).all(), name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinh_and_cosh_second_derivatives_as_torch_at_large_x(dtype):
    # the derivative of sinh is cosh with cosh's own rule (and back): the chain through cosh's formula met e^89 = inf
    # in its unselected branch times a masked 0, a nan second derivative from |x| = 89 in float32
    torch = pytest.importorskip("torch")
    from uopkit.autograd import grad

    x0 = np.array([-89.0, -20.5, 0.3, 19.5, 88.0, 89.0, 89.5, 200.0, 709.0, 711.0], dtype)
    for name in ("sinh", "cosh"):
        x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        y, ty = getattr(x, name)(), getattr(torch, name)(tx)
        for order in (1, 2, 3):
            (y,) = grad(y.sum(), x, create_graph=True)
            (ty,) = torch.autograd.grad(ty.sum(), tx, create_graph=True)
            np.testing.assert_allclose(
                y.numpy(), ty.detach().numpy(), rtol=4 * np.finfo(dtype).eps, err_msg=f"{name}, order {order}"
            )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_derivatives_of_high_order_as_torch(dtype):
    # tanh' = 1 - tanh^2 of the value itself (torch's): the derivatives of every order are polynomials in tanh. Those
    # of float32's Taylor series lost its truncation error's digits (the 5th derivative 2e-3 off near |x| = 0.5)
    torch = pytest.importorskip("torch")
    from uopkit.autograd import grad

    x0 = np.array([-3.0, -1.2, -0.56, -0.5, -0.3, -0.0, 0.2, 0.45, 0.54, 0.55, 0.6, 1.0, 2.5, 9.0])
    x, ref = Tensor(x0.astype(dtype), requires_grad=True), torch.tensor(x0, requires_grad=True)
    y, want = x.tanh(), ref.tanh()
    for order in range(1, 6):
        (y,) = grad(y.sum(), x, create_graph=True)
        (want,) = torch.autograd.grad(want.sum(), ref, create_graph=True)
        # (within a few roundings of float32 of the largest derivative's size, as torch's float32 is)
        tol = 1e-13 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=tol, atol=tol, err_msg=f"order {order}")


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_atan2_is_computed_in_float32_and_rounded_once_as_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    ty, tx = (torch.tensor(rng.standard_normal(2000).astype(np.float32) * 3).to(getattr(torch, name)) for _ in "yx")
    uy, ux = (Tensor(t.float().numpy()).cast(getattr(dtypes, name)) for t in (ty, tx))
    got = uy.atan2(ux)
    assert got.dtype == getattr(dtypes, name)
    np.testing.assert_array_equal(got.float().numpy(), torch.atan2(ty, tx).float().numpy())

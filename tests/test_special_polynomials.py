"""torch.special's orthogonal polynomials (tensor/special_polynomials.py) against torch: values over x and n (the
interval's ends, the trigonometric forms, the recurrences, degrees past the 32 built into one graph), n a number or
a tensor per element, the dtypes and their promotion, and torch's edge values."""

import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes, special

torch = pytest.importorskip("torch")

CHEBYSHEV = [f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"]
NAMES = [*CHEBYSHEV, "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]
# the degree past which torch takes the trigonometric form inside (-1, 1)
TRIG_FROM = {"t": 6, "u": 8, "v": 8, "w": 8}
SHIFTED_TRIG_FROM = {"t": 6, "u": 6, "v": 6, "w": 4}
RNG = np.random.default_rng(7)


def _x(name):
    if name.startswith("shifted"):
        inner = RNG.uniform(-0.1, 1.1, 40)
    elif name.startswith("hermite"):
        inner = RNG.uniform(-6, 6, 40)
    elif name.startswith("laguerre"):
        inner = RNG.uniform(-2, 30, 40)
    else:
        inner = RNG.uniform(-1.2, 1.2, 40)
    return np.concatenate([inner, [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 3.0, 1 - 2**-20, -1 + 2**-20]])


def _scale(name, x, n):
    """The size of the values a recurrence of torch's adds on the way to P_n(x) (the same recurrence on magnitudes),
    or inside (-1, 1) for torch's trigonometric forms their bound 2n + 2: the rounding errors of a correct
    evaluation are a few times n ulps of it."""
    y = 2 * x - 1 if name.startswith("shifted") else x
    a = np.abs(y)
    kind = name[-1]
    if name in CHEBYSHEV:
        p, q = np.ones_like(a), 2 * a + 1
        coef = lambda m: (2 * a, 1.0, 1.0)
    elif name == "hermite_polynomial_h":
        p, q = np.ones_like(a), 2 * a
        coef = lambda m: (2 * a, 2.0 * (m - 1), 1.0)
    elif name == "hermite_polynomial_he":
        p, q = np.ones_like(a), a
        coef = lambda m: (a, m - 1.0, 1.0)
    elif name.startswith("laguerre"):
        p, q = np.ones_like(a), 1 + a
        coef = lambda m: (np.abs(2 * m - 1 - y), m - 1.0, float(m))
    else:
        p, q = np.ones_like(a), a
        coef = lambda m: ((2 * m - 1) * a, m - 1.0, float(m))
    for m in range(2, n + 1):
        alpha, beta, div = coef(m)
        p, q = q, (alpha * q + beta * p) / div
    scale = np.maximum(q, 1.0)
    if name in CHEBYSHEV:
        start = (SHIFTED_TRIG_FROM if name.startswith("shifted") else TRIG_FROM)[kind]
        if n > start:
            scale = np.where(a < 1, 2 * n + 2, scale)
    return scale


def _check(name, x, n, got, dtype):
    """Against torch's float64 values at the same x (torch's own errors in float64 are far below float32's): within
    8 (n + 1) ulps of the scale, or twice torch's own error in x's dtype where that is larger (its trigonometric
    forms near the ends, ill-conditioned there, lose as much)."""
    want = getattr(torch.special, name)(torch.from_numpy(x.astype(np.float64)), n).numpy()
    theirs = getattr(torch.special, name)(torch.from_numpy(x), n).numpy().astype(np.float64)
    scale = _scale(name, x.astype(np.float64), max(n, 0))
    eps = np.finfo(np.float32 if dtype == "float32" else np.float64).eps
    finite = np.isfinite(want) & np.isfinite(theirs) & (scale < (1e30 if dtype == "float32" else 1e300))
    bound = 8 * (max(n, 0) + 1) * eps * scale + 2 * np.abs(theirs - want)
    np.testing.assert_array_less(np.abs(got - want)[finite], bound[finite] + 1e-300)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_against_torch(name, dtype):
    npdt = np.float32 if dtype == "float32" else np.float64
    x = _x(name).astype(npdt)
    for n in (-3, 0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 13, 32):
        got = getattr(Tensor(x), name)(n).numpy().astype(np.float64)
        _check(name, x, n, got, dtype)
    # a degree per element (broadcast against x), the steps masked where each element's degree is reached
    n = RNG.integers(-2, 20, size=x.shape)
    got = getattr(Tensor(x), name)(Tensor(n.astype(npdt))).numpy().astype(np.float64)
    for k in np.unique(n):
        _check(name, x[n == k], int(k), got[n == k], dtype)


@pytest.mark.parametrize(
    "name",
    ["chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "hermite_polynomial_he", "legendre_polynomial_p"],
)
def test_degrees_past_one_graph(name):
    # past degree 32 the recurrence runs in kernels of 32 steps (one kernel, compiled once): a number n, and a tensor
    # n whose largest degree needing the recurrence sets how far it runs
    x = np.concatenate([RNG.uniform(-1.5, 1.5, 24), [1.25, -2.0]])
    for n in (33, 70):
        got = getattr(Tensor(x), name)(n).numpy()
        _check(name, x, n, got, "float64")
    n = RNG.integers(0, 80, size=x.shape)
    got = getattr(Tensor(x), name)(Tensor(n)).numpy()
    for k in np.unique(n):
        _check(name, x[n == k], int(k), got[n == k], "float64")
    # inside (-1, 1) torch's Chebyshev T is cos(n acos x) from n = 7: no recurrence to run at all
    x = np.array([0.5, -0.25])
    want = torch.special.chebyshev_polynomial_t(torch.from_numpy(x), 10**6).numpy()
    np.testing.assert_allclose(Tensor(x).chebyshev_polynomial_t(10**6).numpy(), want, atol=1e-8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_edges_as_torch(name, dtype):
    # the ends, infinities (a recurrence that overflows to inf, then NaN, as torch's), n < 0 (0 even at NaN), n = 0
    # (1 even at NaN), n = 1; fractional degrees truncate, as torch's cast to int64
    npdt = np.float32 if dtype == "float32" else np.float64
    x = np.array([-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.inf, 1e30, -1e30], dtype=npdt)
    for n in (-3, -1, 0, 1, 2, 3, 4, 9, 10, 2.7, -0.5):
        got = getattr(Tensor(x), name)(n).numpy()
        want = getattr(torch.special, name)(torch.from_numpy(x), n).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name} n={n}")
        atol = 1e-3 if dtype == "float32" else 1e-10
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol, equal_nan=True, err_msg=f"{name} n={n}")
    nan = Tensor([math.nan], dtype=dtype)
    assert getattr(nan, name)(-1).tolist() == [0.0] and getattr(nan, name)(0).tolist() == [1.0]
    # (torch reads an uninitialized value for a NaN x and n >= 2, Hermite's H aside: NaN here)
    assert math.isnan(getattr(nan, name)(1).item()) and math.isnan(getattr(nan, name)(5).item())
    # a NaN, infinite or huge float degree is torch's int64 cast's smallest value: n < 0
    n = Tensor([math.nan, math.inf, -math.inf, 1e30], dtype=dtype)
    assert getattr(Tensor([0.5, 0.5, 0.5, 0.5], dtype=dtype), name)(n).tolist() == [0.0] * 4


@pytest.mark.parametrize("name", ["hermite_polynomial_h", "hermite_polynomial_he"])
def test_hermite_limit(name):
    # torch's Hermite polynomials are NaN past degree 128 in float32 and 512 in float64
    for dtype, npdt, limit in (("float32", np.float32, 128), ("float64", np.float64, 512)):
        x = np.array([0.3, -0.7], dtype=npdt)
        for n in (limit, limit + 1):
            got = getattr(Tensor(x), name)(n).numpy()
            want = getattr(torch.special, name)(torch.from_numpy(x), n).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-11, equal_nan=True)
        n = np.array([20, limit + 1], dtype=npdt)
        got = getattr(Tensor(x), name)(Tensor(n)).numpy()
        want = getattr(torch.special, name)(torch.from_numpy(x), torch.from_numpy(n)).numpy()
        assert np.isfinite(got[0]) and math.isnan(got[1])
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-11, equal_nan=True)


TORCH_DTYPES = {
    dtypes.float32: torch.float32,
    dtypes.float64: torch.float64,
    dtypes.int32: torch.int32,
    dtypes.int64: torch.int64,
    dtypes.int8: torch.int8,
    dtypes.bool: torch.bool,
}


def test_dtypes_and_broadcast_as_torch():
    # the result's dtype is x's and n's promotion (a number n doesn't widen x; ints and bools become float32)
    for xd, xt in TORCH_DTYPES.items():
        for nd in [*TORCH_DTYPES, 3, 3.0]:
            x, xr = Tensor([1, 0], dtype=xd), torch.tensor([1, 0], dtype=xt)
            if isinstance(nd, int | float):
                n, nr = nd, nd
            else:
                n, nr = Tensor([3, 2], dtype=nd), torch.tensor([3, 2], dtype=TORCH_DTYPES[nd])
            got, want = x.legendre_polynomial_p(n), torch.special.legendre_polynomial_p(xr, nr)
            assert TORCH_DTYPES[got.dtype] == want.dtype
            assert got.tolist() == want.tolist()
    x, n = np.linspace(-1.5, 1.5, 3).reshape(3, 1), np.arange(4).reshape(1, 4)
    got = Tensor(x).hermite_polynomial_he(Tensor(n))
    assert got.shape == (3, 4)
    np.testing.assert_allclose(
        got.numpy(), torch.special.hermite_polynomial_he(torch.from_numpy(x), torch.from_numpy(n))
    )
    half = Tensor([0.3, 0.9], dtype=dtypes.float16).chebyshev_polynomial_u(4)
    assert half.dtype == dtypes.float16
    assert half.tolist() == Tensor([0.3, 0.9], dtype=dtypes.float16).float().chebyshev_polynomial_u(4).half().tolist()
    assert Tensor([]).legendre_polynomial_p(Tensor([])).shape == (0,)


@pytest.mark.parametrize("name", NAMES)
def test_special_namespace_and_no_gradient(name):
    # torch.special's (input, n), a number for either; neither operand gets a gradient, as torch's
    n = Tensor([2, 5])
    got = getattr(special, name)(0.25, n)
    want = getattr(torch.special, name)(0.25, torch.tensor([2, 5]))
    assert got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert getattr(special, name)(Tensor([0.25]), 3).tolist() == getattr(Tensor([0.25]), name)(3).tolist()
    with pytest.raises(TypeError, match="one operand must be a Tensor"):
        getattr(special, name)(0.25, 3)
    x = Tensor([0.5, 2.0], requires_grad=True)
    degree = Tensor([3.0, 4.0], requires_grad=True)
    out = getattr(x, name)(degree)
    assert not out.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()

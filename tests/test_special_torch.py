"""The torch.special functions of tensor/special_torch.py (ndtr, log_ndtr, ndtri, erfcx, xlog1py, entr, i0e, i1, i1e,
multigammaln, zeta), each compared with PyTorch over wide grids (tails, 0, negatives, +-inf, NaN) in float64 and
float32, half floats computed in float32, and their gradients with torch's autograd."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.autograd import grad

torch = pytest.importorskip("torch")
S = torch.special

X = np.concatenate(
    [
        np.linspace(-40, 40, 801),
        -np.logspace(-10, 3, 27),
        np.logspace(-10, 3, 27),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e150, -1e150],
    ]
)
P = np.concatenate(
    [np.linspace(0, 1, 101), np.logspace(-320, -1, 60), 1 - np.logspace(-16, -1, 20), [-0.1, 1.1, np.nan]]
)
DT = {np.float64: (dtypes.float64, torch.float64), np.float32: (dtypes.float32, torch.float32)}


def _check(ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float = 0.0) -> None:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    special = ~np.isfinite(ref)
    np.testing.assert_array_equal(ours[special], ref[special])
    err = np.abs(ours[~special] - ref[~special])
    bad = err > atol + rtol * np.abs(ref[~special])
    assert not bad.any(), list(zip(ours[~special][bad][:5], ref[~special][bad][:5], strict=True))


# name -> (grid, float64 rtol, float32 rtol, float32 atol); float32 is compared with torch's float64 of the same inputs
# (log_ndtr's right tail: x / sqrt 2 rounded in float32 moves erfc by 2 x**2 of its ulps)
CASES = {
    "log_ndtr": (X, 1e-14, 1.5e-5, 1e-37),
    "erfcx": (X, 1e-13, 1e-6, 0.0),
    "ndtri": (P, 1e-14, 5e-7, 1e-7),
    "entr": (X, 1e-15, 3e-7, 0.0),
    "i0e": (X, 1e-14, 5e-7, 0.0),
    "i1": (X[np.abs(X) < 700], 1e-14, 1e-6, 0.0),
    "i1e": (X, 1e-14, 5e-7, 0.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("np_dtype", [np.float64, np.float32])
def test_values_against_torch(name: str, np_dtype: type) -> None:
    grid, rtol64, rtol32, atol32 = CASES[name]
    data = grid.astype(np_dtype) if np_dtype is np.float64 else np.clip(grid, -3e38, 3e38).astype(np_dtype)
    ours = getattr(Tensor(data, dtype=DT[np_dtype][0]), name)()
    assert ours.dtype == DT[np_dtype][0]
    ref = getattr(S, name)(torch.tensor(data.astype(np.float64))).numpy()
    if np_dtype is np.float64:
        _check(ours.numpy(), ref, rtol64)
    else:
        # (where the float32 result is out of range, torch's float32 is the reference: inf, 0)
        theirs = getattr(S, name)(torch.tensor(data)).numpy().astype(np.float64)
        ref = np.where(np.isfinite(theirs) & (np.abs(ref) < 3e38), ref, theirs)
        _check(ours.numpy(), ref, rtol32, atol32)


def test_ndtr_keeps_the_left_tail() -> None:
    # torch's (1 + erf(x/sqrt 2)) / 2 rounds to 0 below -8.3 in float64; ours is erfc's 0.5 erfc(-x/sqrt 2)
    data = X.astype(np.float64)
    ref = (0.5 * S.erfc(-torch.tensor(data) / math.sqrt(2))).numpy()
    # (x / sqrt 2 rounds: a relative error of x**2 ulps in the tail; subnormal results keep fewer digits)
    _check(Tensor(data, dtype=dtypes.float64).ndtr().numpy(), ref, 5e-13, 1e-306)
    theirs = S.ndtr(torch.tensor(data)).numpy()
    usual = data > -5
    _check(Tensor(data[usual]).ndtr().numpy(), theirs[usual], 5e-7, 1e-8)
    assert Tensor([-30.0], dtype=dtypes.float64).ndtr().item() == pytest.approx(4.906713927148187e-198, rel=1e-13)


def test_tails_are_finite() -> None:
    assert Tensor([-40.0]).log_ndtr().item() == pytest.approx(S.log_ndtr(torch.tensor(-40.0)).item(), rel=1e-6)
    assert math.isfinite(Tensor([-1e4], dtype=dtypes.float64).log_ndtr().item())
    assert Tensor([1e30]).erfcx().item() == pytest.approx(1 / (1e30 * math.sqrt(math.pi)), rel=1e-6)
    assert Tensor([5e-324, 0.0, 1.0], dtype=dtypes.float64).ndtri().tolist()[1:] == [-math.inf, math.inf]
    assert Tensor([5e-324], dtype=dtypes.float64).ndtri().item() == pytest.approx(-38.4674, rel=1e-5)


@pytest.mark.parametrize("name", ["ndtr", "log_ndtr", "ndtri", "erfcx", "entr", "i0e", "i1", "i1e"])
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_floats_round_the_float32_value(name: str, dtype) -> None:
    data = np.linspace(0.01, 0.99, 13) if name == "ndtri" else np.linspace(-5, 5, 13)
    t = Tensor(data, dtype=dtypes.float32).cast(dtype)
    ours = getattr(t, name)()
    assert ours.dtype == dtype
    expected = getattr(t.float(), name)().cast(dtype)
    np.testing.assert_array_equal(ours.float().numpy(), expected.float().numpy())


def test_int_inputs_promote_to_float32() -> None:
    for name in ("ndtr", "erfcx", "entr", "i1"):
        assert getattr(Tensor([0, 1, 2]), name)().dtype == dtypes.float32


GRAD_POINTS = {
    "ndtr": [-30.0, -3.0, 0.0, 0.5, 4.0],
    "log_ndtr": [-30.0, -3.0, -1.0, 0.0, 2.0],
    "ndtri": [1e-30, 0.01, 0.5, 0.9, 1 - 1e-9],
    "erfcx": [-3.0, 0.0, 0.3, 2.0, 50.0],
    "entr": [0.0, 0.2, 1.0, 5.0],
    "i0e": [-20.0, -1.0, 0.0, 1.0, 9.0],
    "i1": [-10.0, -1.0, 0.0, 1.0, 9.0],
    "i1e": [-20.0, -1.0, 0.0, 1.0, 9.0],
}


@pytest.mark.parametrize("name", sorted(GRAD_POINTS))
def test_gradients_against_torch(name: str) -> None:
    data = np.array(GRAD_POINTS[name])
    x = Tensor(data, dtype=dtypes.float64, requires_grad=True)
    (g,) = grad(getattr(x, name)().sum(), x, create_graph=True)
    (gg,) = grad(g.sum(), x)
    tx = torch.tensor(data, requires_grad=True)
    (tg,) = torch.autograd.grad(getattr(S, name)(tx).sum(), tx, create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-11)
    if name != "entr":
        (tgg,) = torch.autograd.grad(tg.sum(), tx)
        np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-8, atol=1e-300)


def test_xlog1py_values_and_gradients() -> None:
    a = np.array([0.0, 0.0, 0.0, 2.0, -1.5, 3.0, 1.0, np.nan, 0.0])
    b = np.array([-1.0, -2.0, np.nan, 0.0, 3.0, -1.0, np.inf, 1.0, 5.0])
    x, y = Tensor(a, dtype=dtypes.float64, requires_grad=True), Tensor(b, dtype=dtypes.float64, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, tout = x.xlog1py(y), S.xlog1py(tx, ty)
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    gx, gy = grad(out.sum(), [x, y])
    tgx, tgy = torch.autograd.grad(tout.sum(), [tx, ty])
    np.testing.assert_array_equal(gx.numpy(), tgx.numpy())
    np.testing.assert_array_equal(gy.numpy(), tgy.numpy())
    # scalars and promotion
    assert Tensor([1, 2]).xlog1py(1.0).dtype == dtypes.float32
    np.testing.assert_allclose(Tensor([1.0, 2.0]).xlog1py(1.0).numpy(), [math.log(2), 2 * math.log(2)], rtol=1e-6)


def test_multigammaln_is_mvlgamma() -> None:
    data = np.array([2.5, 3.0, 10.0])
    ours = Tensor(data, dtype=dtypes.float64).multigammaln(3).numpy()
    np.testing.assert_allclose(ours, S.multigammaln(torch.tensor(data), 3).numpy(), rtol=1e-14)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_zeta_large_x_and_edges_are_torchs_limits(dtype) -> None:
    # x up to 6e4: the Euler-Maclaurin tail's x (x+1) ... overflowed where w^-x underflowed (0 * inf, NaN from
    # x ~ 400 in float32); torch gives the limit, q^-x's (1 at q = 1, 0 above, inf below). Half floats are torch's
    # float32 result rounded (torch has no half zeta)
    xs = np.concatenate([np.linspace(1.01, 60, 25), [80, 100, 200, 300, 400, 500, 1000, 1e4, 6e4, 1.0, 0.5, np.nan]])
    qs = np.array([1e-3, 0.1, 0.5, 0.9, 1.0, 1.5, 2.0, 3.0, 10.0, 1e3, np.inf, 0.0, -1.0, -3.0, np.nan])
    xg, qg = np.meshgrid(xs, qs)
    wide = torch.float32 if dtype in ("float16", "bfloat16") else getattr(torch, dtype)
    tx, tq = torch.tensor(xg).to(getattr(torch, dtype)), torch.tensor(qg).to(getattr(torch, dtype))
    ref = S.zeta(tx.to(wide), tq.to(wide)).to(getattr(torch, dtype)).double().numpy()
    ours = Tensor(tx.double().numpy()).cast(dtype).zeta(Tensor(tq.double().numpy()).cast(dtype))
    assert ours.dtype == getattr(dtypes, dtype)
    rtol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    # (float32's subnormal results, below 1e-37, keep only a few digits in torch's and ours)
    _check(ours.cast(dtypes.float64).numpy(), ref, rtol, 1e-37)
    assert np.isfinite(ref[(xg >= 400) & (qg == 1.0)]).all()
    if dtype in ("float64", "float32"):
        # past x ~ 1e15 and at x = inf torch's own tail overflows to NaN for q > 1; ours stays at the limit
        big = Tensor([1e20, 1e30, np.inf] * 3, dtype=dtype).zeta(Tensor([0.5] * 3 + [1.0] * 3 + [2.0] * 3, dtype=dtype))
        assert big.tolist() == [math.inf] * 3 + [1.0] * 3 + [0.0] * 3


def test_zeta_values_edges_and_gradient() -> None:
    xs = np.array([1.0001, 1.5, 2.0, 3.0, 4.5, 10.0, 30.0, 60.0])
    qs = np.array([1e-3, 0.5, 1.0, 2.5, 10.0, 1e4, 1e9])
    xg, qg = np.meshgrid(xs, qs)
    ours = Tensor(xg, dtype=dtypes.float64).zeta(Tensor(qg, dtype=dtypes.float64)).numpy()
    ref = S.zeta(torch.tensor(xg), torch.tensor(qg)).numpy()
    _check(ours, ref, 5e-14, 1e-300)
    x32, q32 = xg.astype(np.float32), qg.astype(np.float32)
    ref32 = S.zeta(torch.tensor(x32).double(), torch.tensor(q32).double()).numpy()
    ref32 = np.where(ref32 < 3e38, ref32, np.inf)
    _check(Tensor(x32).zeta(Tensor(q32)).numpy(), ref32, 2e-6, 1e-37)
    # torch's edges: a pole at x = 1 and at whole q <= 0, NaN for x < 1
    edge_x = np.array([1.0, 0.5, 2.0, 2.0, 2.0, 3.0, np.nan])
    edge_q = np.array([2.0, 2.0, 0.0, -3.0, np.inf, 1.0, 1.0])
    np.testing.assert_array_equal(
        Tensor(edge_x, dtype=dtypes.float64).zeta(Tensor(edge_q, dtype=dtypes.float64)).numpy(),
        S.zeta(torch.tensor(edge_x), torch.tensor(edge_q)).numpy(),
    )
    assert Tensor([2.0]).zeta(1.0).item() == pytest.approx(math.pi**2 / 6, rel=1e-6)
    q = Tensor([0.5, 2.0], dtype=dtypes.float64, requires_grad=True)
    (g,) = grad(Tensor([3.0, 2.0], dtype=dtypes.float64).zeta(q).sum(), q)
    tq = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
    (tg,) = torch.autograd.grad(S.zeta(torch.tensor([3.0, 2.0], dtype=torch.float64), tq).sum(), tq)
    np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-12)
    x = Tensor([3.0], dtype=dtypes.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="zeta"):
        grad(x.zeta(2.0).sum(), x)

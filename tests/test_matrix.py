"""torch.linalg's norms, cond, rank, lstsq, triangular solves, matrix_exp and products (tensor/matrix.py), against
PyTorch's CPU results."""

import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes, linalg
from uopkit.tensor.support import ArgumentError, ShapeError

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(11)


def _close(got, want, tol=1e-10):
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    got = got.numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_frobenius_norm_of_half_floats_sums_in_float32_as_torch(dtype):
    # 400 squares of 40 (1600 each) overflow float16; torch's vector norm sums them in float32
    a = np.full((2, 4, 100), 40.0, np.float32)
    a[1] *= 0.5
    ours, ref = (
        Tensor(a).cast(dtype).matrix_norm(),
        torch.linalg.matrix_norm(torch.from_numpy(a).to(getattr(torch, dtype))),
    )
    assert ours.dtype == getattr(dtypes, dtype)
    np.testing.assert_array_equal(ours.float().numpy(), ref.float().numpy())


@pytest.mark.parametrize("ord", ["fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2])
def test_matrix_norm_matches_torch(ord):
    a = RNG.standard_normal((2, 4, 3))
    _close(Tensor(a).matrix_norm(ord), torch.linalg.matrix_norm(torch.from_numpy(a), ord))
    want = torch.linalg.matrix_norm(torch.from_numpy(a), ord, dim=(0, 2), keepdim=True)
    _close(Tensor(a).matrix_norm(ord, dim=(0, 2), keepdim=True), want)


def test_vector_norm_and_norm_gradients():
    a = RNG.standard_normal((3, 4))
    for ord, dim in ((2, None), (1, 1), (math.inf, 0), (0, None), (-1, 1), (3.5, (0, 1))):
        _close(Tensor(a).vector_norm(ord, dim), torch.linalg.vector_norm(torch.from_numpy(a), ord, dim))
    ta = torch.from_numpy(a).requires_grad_()
    (torch.linalg.matrix_norm(ta, "nuc") + torch.linalg.matrix_norm(ta, 1)).backward()
    x = Tensor(a, requires_grad=True)
    (x.matrix_norm("nuc") + x.matrix_norm(1)).backward()
    _close(x.grad, ta.grad, 1e-9)
    with pytest.raises(ArgumentError, match="matrix_norm: ord must be"):
        Tensor(a).matrix_norm(3)
    with pytest.raises(ArgumentError, match="vector_norm: ord must be a number"):
        Tensor(a).vector_norm("fro")
    with pytest.raises(TypeError, match="matrix_norm: needs a floating-point tensor"):
        Tensor([[1, 2]]).matrix_norm()


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", math.inf, -math.inf, 1, -1])
def test_cond_matches_torch(p):
    a = RNG.standard_normal((2, 3, 3))
    _close(Tensor(a).cond(p), torch.linalg.cond(torch.from_numpy(a), p), 1e-9)


def test_cond_of_singular_and_matrix_rank():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    # torch's LAPACK leaves a smallest singular value of ~1e-16 (cond 2.5e16); Jacobi's is 0 (inf)
    assert Tensor(singular).cond().item() > 1e15
    a = RNG.standard_normal((3, 5, 2)) @ RNG.standard_normal((3, 2, 4))  # rank 2
    for kwargs in ({}, {"atol": 1.0}, {"rtol": 0.5}, {"atol": 0.1, "rtol": 0.01}):
        want = torch.linalg.matrix_rank(torch.from_numpy(a), **kwargs)
        got = Tensor(a).matrix_rank(**kwargs)
        assert got.dtype.name == "long" and got.tolist() == want.tolist()
    s = a[0] @ a[0].T
    assert Tensor(s).matrix_rank(hermitian=True).item() == 2
    assert Tensor.zeros(2, 0, 3).matrix_rank().tolist() == [0, 0]


def test_lstsq_matches_torch():
    a, b = RNG.standard_normal((2, 6, 3)), RNG.standard_normal((2, 6, 2))
    got, want = Tensor(a).lstsq(Tensor(b)), torch.linalg.lstsq(torch.from_numpy(a), torch.from_numpy(b))
    _close(got.solution, want.solution)
    assert got.rank.tolist() == want.rank.tolist() and got.residuals.shape == (0,) and got.singular_values.shape == (0,)
    solution, _, rank, _ = got  # a tuple too
    assert solution.shape == (2, 3, 2) and rank.tolist() == [3, 3]
    # deficient rank and wide: the least-norm solution
    wide = RNG.standard_normal((3, 2)) @ RNG.standard_normal((2, 5))
    rhs = RNG.standard_normal((3, 1))
    _close(Tensor(wide).lstsq(Tensor(rhs)).solution, np.linalg.pinv(wide) @ rhs, 1e-9)
    assert Tensor(wide).lstsq(Tensor(rhs)).rank.item() == 2
    with pytest.raises(ShapeError, match="lstsq: A .* has 6 rows"):
        Tensor(a).lstsq(Tensor.ones(2, 5, 1))


_LSTSQ_MATRICES = {
    "tall": RNG.standard_normal((5, 3)),
    "wide": RNG.standard_normal((3, 5)),
    "square": RNG.standard_normal((3, 3)),
    "tall, rank 2": RNG.standard_normal((5, 2)) @ RNG.standard_normal((2, 3)),
    "wide, rank 2": RNG.standard_normal((3, 2)) @ RNG.standard_normal((2, 5)),
    "batch": RNG.standard_normal((2, 5, 3)),
    "batch, one of rank 2": np.stack([RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2)) @ np.ones((2, 3))]),
    "no columns": np.zeros((5, 0)),
    "no rows": np.zeros((0, 3)),
}


@pytest.mark.parametrize(
    ("driver", "name"),
    # (gels assumes full rank: of a rank-2 matrix torch's results are what rounding leaves)
    [
        (d, name)
        for d in ("gelsd", "gelss", "gels", "gelsy")
        for name in _LSTSQ_MATRICES
        if d != "gels" or "rank" not in name
    ],
)
@pytest.mark.parametrize("vector", [False, True])
def test_lstsq_drivers_fill_results_and_gradients_as_torch(driver, name, vector):
    # gelsd/gelss: rank, singular values, and residuals where m > n and every matrix has full rank; gels: residuals
    # wherever m > n, no rank or singular values; the gradient is torch's (pinv's) for every driver
    a = _LSTSQ_MATRICES[name]
    rng = np.random.default_rng(len(name))
    b = rng.standard_normal(a.shape[:-1] if vector else (*a.shape[:-1], 2))
    ta, tb = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    want = torch.linalg.lstsq(ta, tb, driver=driver)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    got = linalg.lstsq(x, y, driver=driver)
    for field in ("solution", "residuals", "rank", "singular_values"):
        ours, theirs = getattr(got, field), getattr(want, field)
        assert ours.shape == tuple(theirs.shape), field
        assert ours.dtype.name == ("long" if field == "rank" else "double"), field
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-9, atol=1e-10, err_msg=field)
    assert not got.singular_values.requires_grad
    if a.size:
        weights = rng.standard_normal(tuple(want.solution.shape))
        loss = (want.solution * torch.from_numpy(weights)).sum() + want.residuals.sum()
        loss.backward()
        ((got.solution * Tensor(weights)).sum() + got.residuals.sum()).backward()
        np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(y.grad.numpy(), tb.grad.numpy(), rtol=1e-8, atol=1e-9)


def test_lstsq_gels_refuses_a_deficient_rank_as_torch():
    for a in ([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]):
        b = np.ones((len(a), 1))
        with pytest.raises(torch.linalg.LinAlgError):
            torch.linalg.lstsq(torch.tensor(a, dtype=torch.float64), torch.from_numpy(b), driver="gels")
        with pytest.raises(linalg.LinAlgError, match="driver 'gels' needs A of full rank: .* element 2 is zero"):
            linalg.lstsq(Tensor(a), Tensor(b), driver="gels")
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(torch.eye(2), torch.ones(2, 1), driver="gelsx")
    with pytest.raises(RuntimeError, match="lstsq: driver must be one of 'gels', 'gelsy', 'gelsd', 'gelss'"):
        linalg.lstsq(Tensor.eye(2), Tensor.ones(2, 1), driver="gelsx")


@pytest.mark.parametrize("driver", ["gelsd", "gelss", "gelsy"])
def test_lstsq_rcond_cuts_the_rank_as_torch(driver):
    a, b = np.diag([1.0, 1e-3, 1e-6]), np.ones((3, 1))
    # (torch's gelsy estimates the rank from a pivoted QR, and where rcond cuts it its estimate and its solution depend
    # on torch's thread count: at 1e-4 rank 2 with one thread, 1 with two; at 1e-2 a CI run gave [0, 0, 1e6] where
    # the SVD rule's rank-1 solution is [1, 0, 0]. Compared there for the full-rank cuts only; docs/semantics.md)
    rconds = (None, 0.0, -1.0) if driver == "gelsy" else (None, 1e-4, 1e-2, 0.0, -1.0)
    for rcond in rconds:
        want = torch.linalg.lstsq(torch.from_numpy(a), torch.from_numpy(b), rcond=rcond, driver=driver)
        got = Tensor(a).lstsq(Tensor(b), rcond, driver=driver)
        assert got.rank.item() == want.rank.item()
        _close(got.solution, want.solution, 1e-9)


def test_solve_triangular_and_cholesky_inverse():
    u = np.triu(RNG.standard_normal((2, 4, 4))) + 4 * np.eye(4)
    noisy = u + np.tril(RNG.standard_normal((4, 4)), -1)  # the other triangle is not read
    b = RNG.standard_normal((2, 4, 3))
    tu, tb = torch.from_numpy(noisy), torch.from_numpy(b)
    for kwargs in ({"upper": True}, {"upper": True, "unitriangular": True}):
        _close(Tensor(noisy).solve_triangular(Tensor(b), **kwargs), torch.linalg.solve_triangular(tu, tb, **kwargs))
    low = np.swapaxes(noisy, -1, -2)
    want = torch.linalg.solve_triangular(torch.from_numpy(low), tb.transpose(-1, -2), upper=False, left=False)
    _close(Tensor(low).solve_triangular(Tensor(np.swapaxes(b, -1, -2)), upper=False, left=False), want)
    spd = RNG.standard_normal((3, 3))
    factor = np.linalg.cholesky(spd @ spd.T + np.eye(3))
    _close(Tensor(factor).cholesky_inverse(), torch.cholesky_inverse(torch.from_numpy(factor)))
    _close(
        Tensor(factor.T).cholesky_inverse(upper=True), torch.cholesky_inverse(torch.from_numpy(factor.T), upper=True)
    )


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_zero_and_nonfinite_pivots_give_torchs_inf_and_nan(upper, left, unit):
    # substitution's IEEE results: a zero pivot gives inf (or 0/0 NaN) from its row on, the rows before it stay
    # finite, an inf in B reaches only the rows after it; an inverted diagonal block made NaN of all of them
    rng = np.random.default_rng(5)
    for n in (2, 3, 6, 9):
        a = rng.integers(-3, 4, (3, n, n)).astype(np.float64)
        a[rng.random((3, n, n)) < 0.25] = 0.0
        b = rng.integers(-3, 4, (3, n, 2) if left else (3, 2, n)).astype(np.float64)
        b[0].flat[1] = np.inf
        b[1].flat[-1] = -np.inf
        # what is not read (the other triangle, a unit diagonal) holds NaN
        rows, cols = np.indices((n, n))
        a[:, (rows > cols if upper else rows < cols) | ((rows == cols) & unit)] = np.nan
        kwargs = {"upper": upper, "left": left, "unitriangular": unit}
        want = torch.linalg.solve_triangular(torch.from_numpy(a), torch.from_numpy(b), **kwargs).numpy()
        got = Tensor(a).solve_triangular(Tensor(b), **kwargs).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
    rows = ([[0.0, 0.0], [1.0, 1.0]], [[2.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 3.0]])
    for low, rhs in zip(rows, ([[1.0], [1.0]], [[2.0], [1.0], [5.0]]), strict=True):
        got = Tensor(low).solve_triangular(Tensor(rhs), upper=False).numpy()
        want = torch.linalg.solve_triangular(torch.tensor(low), torch.tensor(rhs), upper=False).numpy()
        np.testing.assert_array_equal(got, want)


def test_matrix_exp_matches_torch_and_differentiates():
    for scale in (0.1, 3.0, 40.0):
        a = RNG.standard_normal((2, 3, 3)) * scale
        want = torch.linalg.matrix_exp(torch.from_numpy(a))
        np.testing.assert_allclose(Tensor(a).matrix_exp().numpy(), want.numpy(), rtol=1e-12 * scale, atol=0)
    a = RNG.standard_normal((3, 3))
    ta = torch.from_numpy(a).requires_grad_()
    torch.linalg.matrix_exp(ta).sum().backward()
    x = Tensor(a, requires_grad=True)
    x.matrix_exp().sum().backward()
    _close(x.grad, ta.grad, 1e-9)
    np.testing.assert_allclose(
        Tensor(a.astype(np.float32)).matrix_exp().numpy(), torch.linalg.matrix_exp(ta).detach().numpy(), rtol=1e-5
    )
    assert Tensor.zeros(0, 0).matrix_exp().shape == (0, 0)
    half = Tensor(a.astype(np.float16)).matrix_exp()
    want = torch.linalg.matrix_exp(torch.from_numpy(a.astype(np.float16)).float()).numpy()
    assert half.dtype.name == "half" and np.allclose(half.numpy(), want, rtol=2e-3, atol=2e-3)
    # a matrix with a NaN or inf gives NaN, as torch's; the others of the batch their exponentials
    batch = np.stack([a[:2, :2], [[1.0, math.nan], [0.0, 1.0]], [[math.inf, 0.0], [0.0, 1.0]], a[1:3, 1:3] * 9])
    want = torch.linalg.matrix_exp(torch.from_numpy(batch)).numpy()
    np.testing.assert_allclose(Tensor(batch).matrix_exp().numpy(), want, rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(Tensor([[math.inf]]).matrix_exp().numpy(), [[math.nan]])


def test_multi_dot_vecdot_vander():
    ms = [RNG.standard_normal(s) for s in ((5,), (5, 2), (2, 7), (7, 3), (3,))]
    _close(Tensor.multi_dot([Tensor(m) for m in ms]), torch.linalg.multi_dot([torch.from_numpy(m) for m in ms]))
    _close(
        Tensor.multi_dot([Tensor(m) for m in ms[1:3]]), torch.linalg.multi_dot([torch.from_numpy(m) for m in ms[1:3]])
    )
    with pytest.raises(ShapeError, match="multi_dot: tensors 0 .* and 1 .* can't be multiplied"):
        Tensor.multi_dot([Tensor.ones(2, 3), Tensor.ones(2, 3)])
    with pytest.raises(ArgumentError, match="at least 2"):
        Tensor.multi_dot([Tensor.ones(2, 3)])
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((4,))
    _close(Tensor(x).vecdot(Tensor(y)), torch.linalg.vecdot(torch.from_numpy(x), torch.from_numpy(y)))
    _close(Tensor(x).vecdot(Tensor(x), dim=0), torch.linalg.vecdot(torch.from_numpy(x), torch.from_numpy(x), dim=0))
    v = np.array([[1.0, 2.0, -3.0], [0.5, 0.0, 2.0]])
    _close(linalg.vander(Tensor(v)), torch.linalg.vander(torch.from_numpy(v)))
    _close(linalg.vander(Tensor(v), N=5), torch.linalg.vander(torch.from_numpy(v), N=5))
    assert linalg.vander(Tensor([2, 3])).tolist() == torch.linalg.vander(torch.tensor([2, 3])).tolist()


@pytest.mark.parametrize(
    ("values", "n"),
    [([2.0, 3.0], 0), ([2.0, 3.0], 1), ([2.0, 3.0], -1), ([], None), ([], 0), ([], 1), ([5.0], None), ([5.0], 1)],
)
def test_vander_refuses_n_below_2_as_torch(values, n):
    # torch.linalg.vander needs N > 1, also when N defaults to a last axis of 0 or 1 values (a RuntimeError)
    with pytest.raises(RuntimeError):
        torch.linalg.vander(torch.tensor(values), N=n)
    with pytest.raises(ArgumentError, match="vander: N must be greater than 1"):
        linalg.vander(Tensor(values), N=n)


def test_vander_of_empty_inputs_and_refusals_as_torch():
    for shape, n in (((0,), 2), ((0,), 4), ((2, 0), 3), ((3, 1), 2)):
        x = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) + 2
        want = torch.linalg.vander(torch.from_numpy(x), N=n)
        _close(linalg.vander(Tensor(x), N=n), want)
    with pytest.raises(RuntimeError):
        torch.linalg.vander(torch.tensor([True, False]))
    with pytest.raises(TypeError, match="vander: .*got bool"):
        linalg.vander(Tensor([True, False]))
    with pytest.raises(RuntimeError):
        torch.linalg.vander(torch.tensor(2.0))
    with pytest.raises(ShapeError, match="vander: needs at least one dim"):
        linalg.vander(Tensor(2.0))


def test_vander_is_torch_vander_decreasing_unless_increasing():
    # Tensor.vander is torch.vander (x^(N-1) .. x^0 by default), not torch.linalg.vander (x^0 .. x^(N-1))
    for values, tdt, dt in (
        ([1.5, -2.0, 0.5, 3.0], torch.float64, dtypes.float64),
        ([1, 2, 3], torch.int32, dtypes.int32),
        ([1.1, 2.3, -3.7], torch.float16, dtypes.float16),
        ([True, False], torch.bool, dtypes.bool),
    ):
        for n in (None, 0, 1, 2, 5):
            for increasing in (False, True):
                want = torch.vander(torch.tensor(values, dtype=tdt), N=n, increasing=increasing)
                got = Tensor(values, dtype=dt).vander(N=n, increasing=increasing)
                assert got.shape == tuple(want.shape)
                np.testing.assert_array_equal(got.numpy().astype(np.float64), want.numpy().astype(np.float64))
    assert Tensor([1, 2, 3]).vander(3).tolist() == torch.vander(torch.tensor([1, 2, 3]), 3).tolist()
    with pytest.raises(RuntimeError):
        torch.vander(torch.ones(2, 2))
    with pytest.raises(ShapeError, match="vander: x must be a one-dimensional tensor"):
        Tensor.ones(2, 2).vander()
    with pytest.raises(RuntimeError):
        torch.vander(torch.ones(2), N=-1)
    with pytest.raises(ArgumentError, match="vander: N must be non-negative"):
        Tensor.ones(2).vander(-1)


@pytest.mark.parametrize("op", ["svd", "qr", "det", "inverse", "cholesky", "eigh", "lu", "pinv", "matrix_rank"])
def test_half_matrices_are_refused_as_in_torch(op):
    with pytest.raises(TypeError, match=f"{op}: .*half isn't supported"):
        getattr(Tensor.eye(3, dtype="float16"), op)()


@pytest.mark.parametrize("shape", [(0, 2, 2), (0, 3, 2), (2, 0, 3, 3)])
def test_empty_batches_have_torchs_shapes(shape):
    x = np.zeros(shape)
    t, tt = Tensor(x), torch.from_numpy(x)
    for full in (True, False):
        got = [u.shape for u in t.svd(full_matrices=full)]
        assert got == [tuple(u.shape) for u in torch.linalg.svd(tt, full_matrices=full)]
    assert t.pinv().shape == tuple(torch.linalg.pinv(tt).shape)
    assert t.matrix_rank().shape == tuple(torch.linalg.matrix_rank(tt).shape)
    assert t.matrix_norm(2).shape == tuple(torch.linalg.matrix_norm(tt, 2).shape)
    assert t.lstsq(t).solution.shape == tuple(torch.linalg.lstsq(tt, tt).solution.shape)
    if shape[-1] == shape[-2]:
        assert [u.shape for u in t.eigh()] == [tuple(u.shape) for u in torch.linalg.eigh(tt)]
        assert t.cholesky().shape == t.inverse().shape == t.matrix_exp().shape == shape

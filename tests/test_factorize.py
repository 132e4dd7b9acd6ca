"""Tensor.qr and Tensor.svd against numpy's LAPACK (the conventions PyTorch's CPU results follow)."""

import math

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.helpers import Context
from uopkit.tensor.support import ArgumentError, ShapeError, UnknownModeError

RNG = np.random.default_rng(7)


def pytest_generate_tests(metafunc):
    # every test not pinned to one path runs with the CPU's factorizations on the host's LAPACK (the default) and on
    # its device kernels (LAPACK=0), the path of every device whose buffers are not host memory
    if not hasattr(metafunc.function, "pinned_path"):
        metafunc.parametrize("lapack", [1, 0], ids=["lapack", "device"])


@pytest.fixture
def lapack():
    return 1


@pytest.fixture(autouse=True)
def _on_path(lapack):
    with Context(LAPACK=lapack):
        yield


def _pinned(lapack):
    """A test of one path only (LAPACK=`lapack`), run once: the device path's kernel counts, the host path's."""

    def pin(test):
        pinned = Context(LAPACK=lapack)(test)
        pinned.pinned_path = lapack
        return pinned

    return pin


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_lapack_signs_included(shape, mode):
    a = RNG.standard_normal(shape).astype(np.float32)
    q, r = Tensor(a).qr(mode)
    want_r = np.linalg.qr(a, mode="r") if mode == "r" else np.linalg.qr(a, mode=mode)[1]
    np.testing.assert_allclose(r.numpy(), want_r, atol=1e-5)
    if mode == "r":
        assert q.shape == (0,)
    else:
        np.testing.assert_allclose(q.numpy(), np.linalg.qr(a, mode=mode)[0], atol=1e-5)


@pytest.mark.parametrize(
    "a",
    [
        [[0.0, 1.0], [0.0, 2.0]],  # a zero column: no reflector, R keeps its 0
        [[-2.0, 1.0], [0.0, 3.0]],  # already triangular: R keeps the negative diagonal entry, Q is I
        [[1.0, 2.0], [2.0, 4.0]],  # rank 1
        [[1e30, 1.0], [1e30, 2.0]],  # squares past float32's range
    ],
)
def test_qr_special_columns(a):
    a = np.array(a, np.float32)
    q, r = Tensor(a).qr()
    want_q, want_r = np.linalg.qr(a.astype(np.float64))
    np.testing.assert_allclose(r.numpy(), want_r, rtol=1e-6, atol=1e-6 * np.abs(a).max())
    np.testing.assert_allclose(q.numpy(), want_q, atol=1e-6)


def test_qr_gradient_empty_and_errors():
    a = np.array([[2.0, 1.0, 0.5], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    x = Tensor(a, requires_grad=True)
    q, r = x.qr()
    (q[:, 0].sum() + r[0, 1] * 2).backward()
    # central differences of the same function
    eps, want = 1e-6, np.zeros_like(a)
    for i, j in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i, j] = eps
        f = [(lambda qq, rr: qq[:, 0].sum() + rr[0, 1] * 2)(*np.linalg.qr(a + s * d)) for s in (1, -1)]
        want[i, j] = (f[0] - f[1]) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), want, atol=1e-6)
    q, r = Tensor.zeros(3, 0).qr()
    assert q.shape == (3, 0) and r.shape == (0, 0)
    with pytest.raises(ShapeError, match="qr: needs a matrix"):
        Tensor([1.0, 2.0]).qr()
    with pytest.raises(UnknownModeError, match="'full'"):
        Tensor.eye(2).qr("full")


def _check_svd(a, full_matrices, atol):
    u, s, vh = (t.numpy().astype(np.float64) for t in Tensor(a).svd(full_matrices=full_matrices))
    want_u, want_s, want_vh = np.linalg.svd(a, full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (want_u.shape, want_s.shape, want_vh.shape)
    scale = max(np.abs(a).max(initial=0.0), 1e-30)
    np.testing.assert_allclose(s, want_s, atol=atol * scale)
    k = s.shape[-1]
    np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=4 * atol * scale)
    eye_u, eye_v = np.eye(u.shape[-1]), np.eye(vh.shape[-2])
    np.testing.assert_allclose(
        np.swapaxes(u, -1, -2) @ u, np.broadcast_to(eye_u, u.shape[:-2] + eye_u.shape), atol=atol * 10
    )
    np.testing.assert_allclose(
        vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(eye_v, vh.shape[:-2] + eye_v.shape), atol=atol * 10
    )


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_reconstructs_with_orthonormal_bases(shape, full_matrices):
    _check_svd(RNG.standard_normal(shape).astype(np.float32), full_matrices, 1e-5)


@pytest.mark.parametrize(
    "a",
    [
        np.outer([1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 2.0]),  # rank 1: U still has orthonormal columns
        np.zeros((3, 3)),
        np.diag([1.0, 1.0, 2.0]),  # a repeated singular value
        RNG.standard_normal((3, 3)) * 1e30,  # squares past float32's range
    ],
)
def test_svd_of_special_matrices(a):
    _check_svd(a.astype(np.float32), True, 1e-5)


def test_svd_float64_gradient_empty_and_errors():
    _check_svd(RNG.standard_normal((4, 4)), True, 1e-12)
    a = RNG.standard_normal((4, 3))
    x = Tensor(a, requires_grad=True)
    x.svd(False)[1].sum().backward()
    # d(sum of singular values)/dA = U V^T
    want_u, _, want_vh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(x.grad.numpy(), want_u @ want_vh, atol=1e-10)
    u, s, vh = Tensor.zeros(2, 0, 3).svd(full_matrices=True)
    assert (u.shape, s.shape, vh.shape) == ((2, 0, 0), (2, 0), (2, 3, 3))
    with pytest.raises(ArgumentError, match="svd: the input has values that aren't finite"):
        Tensor([[1.0, float("nan")], [0.0, 1.0]]).svd()


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_det_slogdet_inverse_match_lapack(dtype, rtol):
    a = RNG.standard_normal((2, 5, 5)).astype(dtype)
    np.testing.assert_allclose(Tensor(a).det().numpy(), np.linalg.det(a), rtol=rtol * 10)
    sign, log_abs = Tensor(a).slogdet()
    want_sign, want_log = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign.numpy(), want_sign)
    np.testing.assert_allclose(log_abs.numpy(), want_log, rtol=rtol * 10)
    np.testing.assert_allclose(Tensor(a).inverse().numpy(), np.linalg.inv(a), rtol=rtol * 100, atol=rtol * 100)
    # an odd permutation: no rounding anywhere, det -1, logdet of a negative determinant NaN
    swap = np.array([[0.0, 1.0], [1.0, 0.0]], dtype)
    assert Tensor(swap).det().item() == -1.0 and math.isnan(Tensor(swap).logdet().item())
    np.testing.assert_array_equal(Tensor(swap).inverse().numpy(), swap)


def test_det_and_inverse_gradients_and_singular_matrices():
    a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.5, 1.0, 4.0]])
    x = Tensor(a, requires_grad=True)
    (x.det() + x.inverse().sum()).backward()
    inv = np.linalg.inv(a)
    # d det = det A^-T; d sum(A^-1) = -A^-T 1 1^T A^-T
    want = np.linalg.det(a) * inv.T - inv.T @ np.ones((3, 3)) @ inv.T
    np.testing.assert_allclose(x.grad.numpy(), want, atol=1e-12)
    singular = Tensor([[1.0, 2.0], [2.0, 4.0]])
    assert singular.det().item() == 0.0
    assert [t.item() for t in singular.slogdet()] == [0.0, -math.inf]
    with pytest.raises(ArgumentError, match="inverse: a matrix .* is singular"):
        Tensor([[0.0, 0.0], [0.0, 1.0]]).inverse()
    with pytest.raises(ShapeError, match="det: needs square matrices"):
        Tensor.ones(2, 3).det()


def _spd(n, batch=(), dtype=np.float64):
    x = RNG.standard_normal((*batch, n, n))
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


def test_solve_matches_torch_shapes_and_gradients():
    torch = pytest.importorskip("torch")
    a, b = RNG.standard_normal((2, 4, 4)), RNG.standard_normal((4, 3))
    cases = [(a, b), (a[0], b[:, 0]), (a, RNG.standard_normal((2, 4))), (a[0], RNG.standard_normal((5, 4, 2)))]
    for lhs, rhs in cases:
        want = torch.linalg.solve(torch.from_numpy(lhs), torch.from_numpy(rhs)).numpy()
        got = Tensor(lhs).solve(Tensor(rhs)).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    want = torch.linalg.solve(torch.from_numpy(a), torch.from_numpy(RNG.standard_normal((2, 3, 4))), left=False)
    rhs = want.numpy() @ a
    np.testing.assert_allclose(Tensor(a).solve(Tensor(rhs), left=False).numpy(), want.numpy(), atol=1e-10)
    ta, tb = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    (torch.linalg.solve(ta, tb) ** 2).sum().backward()
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (x.solve(y) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), tb.grad.numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(ArgumentError, match="solve: a matrix of A .* is singular"):
        Tensor([[1.0, 2.0], [2.0, 4.0]]).solve(Tensor([1.0, 1.0]))
    with pytest.raises(ShapeError, match="B needs 2 rows"):
        Tensor.eye(2).solve(Tensor.ones(3, 1))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch_reads_one_triangle_and_differentiates(upper):
    torch = pytest.importorskip("torch")
    a = _spd(4, (2,))
    # the ignored triangle holds garbage: torch reads only the other one
    noisy = a + (np.tril(RNG.standard_normal((4, 4)), -1) if upper else np.triu(RNG.standard_normal((4, 4)), 1))
    ta = torch.from_numpy(noisy).requires_grad_()
    want = torch.linalg.cholesky(ta, upper=upper)
    weights = RNG.standard_normal((2, 4, 4))
    (want * torch.from_numpy(weights)).sum().backward()
    x = Tensor(noisy, requires_grad=True)
    got = x.cholesky(upper=upper)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    (got * Tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(Tensor(a.astype(np.float32)).cholesky().numpy(), np.linalg.cholesky(a), rtol=1e-5)


def test_cholesky_refuses_matrices_that_are_not_positive_definite():
    with pytest.raises(ArgumentError, match="leading minor of order 2 is not"):
        Tensor([[1.0, 2.0], [2.0, 1.0]]).cholesky()
    batch = np.stack([np.eye(3), np.diag([1.0, 1.0, -1.0])])
    with pytest.raises(ArgumentError, match="batch element 1 .* order 3 is not"):
        Tensor(batch).cholesky()
    with pytest.raises(ArgumentError, match="order 1"):
        Tensor([[float("nan")]]).cholesky()
    assert Tensor.zeros(0, 0).cholesky().shape == (0, 0)


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_eigh_matches_lapack(n):
    a = _spd(n, (2,)) - n * 1.5 * np.eye(n)  # eigenvalues of both signs
    w, v = Tensor(a).eigh()
    want_w, want_v = np.linalg.eigh(a)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-12, atol=1e-12)
    # eigenvectors up to sign: V^T V_lapack is diagonal +-1 for distinct eigenvalues
    overlap = np.abs(np.swapaxes(v.numpy(), -1, -2) @ want_v)
    np.testing.assert_allclose(overlap, np.broadcast_to(np.eye(n), a.shape), atol=1e-10)
    np.testing.assert_allclose(Tensor(a).eigvalsh(UPLO="U").numpy(), want_w, rtol=1e-12, atol=1e-12)
    f32 = Tensor(a.astype(np.float32)).eigvalsh().numpy()
    np.testing.assert_allclose(f32, want_w, rtol=1e-5, atol=1e-5 * np.abs(want_w).max())


def test_eigh_special_matrices_gradient_and_errors():
    torch = pytest.importorskip("torch")
    w, v = Tensor(np.diag([3.0, -1.0, 2.0])).eigh()
    assert w.tolist() == [-1.0, 2.0, 3.0]
    np.testing.assert_array_equal(np.abs(v.numpy()), [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    assert Tensor.zeros(3, 3).eigvalsh().tolist() == [0.0, 0.0, 0.0]
    a = _spd(4) + np.triu(RNG.standard_normal((4, 4)), 1)  # only the lower triangle counts
    ta = torch.from_numpy(a).requires_grad_()
    tw, tv = torch.linalg.eigh(ta)
    (tw.square().sum() + (tv**2 * torch.arange(4.0, dtype=torch.float64)).sum()).backward()
    x = Tensor(a, requires_grad=True)
    xw, xv = x.eigh()
    (xw.square().sum() + (xv**2 * Tensor.arange(4.0).cast(xv.dtype)).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-7, atol=1e-9)
    # a matrix with a NaN or inf (in the triangle read) gets NaN eigenvalues and vectors, as torch's; the others of
    # the batch theirs
    nan, inf = float("nan"), float("inf")
    batch = np.array(
        [[[1.0, nan], [nan, 1.0]], [[2.0, 1.0], [1.0, 3.0]], [[1.0, inf], [inf, 1.0]], [[1.0, nan], [0, 2]]]
    )
    w, v = Tensor(batch).eigh()
    tw, tv = torch.linalg.eigh(torch.from_numpy(batch))
    np.testing.assert_allclose(w.numpy(), tw.numpy(), rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(np.abs(v.numpy()), np.abs(tv.numpy()), rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(
        np.isnan(Tensor(batch).eigvalsh("U").numpy()),
        torch.linalg.eigvalsh(torch.from_numpy(batch), "U").isnan().numpy(),
    )
    with pytest.raises(UnknownModeError, match="UPLO must be 'L' or 'U'"):
        Tensor.eye(2).eigh("X")
    with pytest.raises(ShapeError, match="eigh: needs square matrices"):
        Tensor.ones(2, 3).eigh()


def test_pinv_matches_torch():
    torch = pytest.importorskip("torch")
    for a in (RNG.standard_normal((5, 3)), RNG.standard_normal((2, 3, 4)), np.array([[1.0, 2.0], [2.0, 4.0]])):
        np.testing.assert_allclose(Tensor(a).pinv().numpy(), torch.linalg.pinv(torch.from_numpy(a)).numpy(), atol=1e-10)
    s = _spd(3) - 3 * np.eye(3)
    want = torch.linalg.pinv(torch.from_numpy(s), hermitian=True).numpy()
    np.testing.assert_allclose(Tensor(s).pinv(hermitian=True).numpy(), want, atol=1e-10)
    assert Tensor.zeros(0, 3).pinv().shape == (3, 0)
    np.testing.assert_allclose(Tensor(np.diag([1.0, 1e-20])).pinverse().numpy(), np.diag([1.0, 0.0]))


_SQUARE_PINV_CASES = ["spd", "indefinite", "rank 1 symmetric", "diagonal with zeros", "not symmetric", "batch"]


@pytest.mark.parametrize(
    ("name", "hermitian"),
    [(name, hermitian) for name in _SQUARE_PINV_CASES for hermitian in (True, False)] + [("3 x 5 rank 2", False)],
)
def test_pinv_gradient_matches_torch(name, hermitian):
    # torch's pinv has its own gradient, the constant-rank formula at A as given: with hermitian=True it is not the
    # symmetric gradient eigh's chain gives, and it stays finite where the rank is deficient
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    m = rng.standard_normal((4, 4))
    a = {
        "spd": m @ m.T + 4 * np.eye(4),
        "indefinite": m + m.T,
        "rank 1 symmetric": np.array([[1.0, 2.0], [2.0, 4.0]]),
        "diagonal with zeros": np.diag([1.0, 2.0, 0.0, 0.0]),
        "not symmetric": m,
        "3 x 5 rank 2": rng.standard_normal((3, 2)) @ rng.standard_normal((2, 5)),
        "batch": rng.standard_normal((2, 3, 3)) + 3 * np.eye(3),
    }[name]
    weights = rng.standard_normal((*a.shape[:-2], a.shape[-1], a.shape[-2]))
    ta = torch.from_numpy(a).requires_grad_()
    (torch.linalg.pinv(ta, hermitian=hermitian) * torch.from_numpy(weights)).sum().backward()
    x = Tensor(a, requires_grad=True)
    (x.pinv(hermitian=hermitian) * Tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 4), (0, 3)])
def test_lu_matches_torch_pivots_included(shape):
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal(shape)
    for got, want in zip(Tensor(a).lu(), torch.linalg.lu(torch.from_numpy(a)), strict=True):
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    if shape[-1] == shape[-2]:
        lu, pivots = Tensor(a).lu_factor()
        want_lu, want_pivots = torch.linalg.lu_factor(torch.from_numpy(a))
        np.testing.assert_allclose(lu.numpy(), want_lu.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pivots.numpy(), want_pivots.numpy())
        b = RNG.standard_normal((*shape[:-1], 2))
        want_x = torch.linalg.lu_solve(want_lu, want_pivots, torch.from_numpy(b)).numpy()
        np.testing.assert_allclose(Tensor(b).lu_solve(lu, pivots).numpy(), want_x, rtol=1e-10, atol=1e-12)


def test_lu_ties_singular_matrices_gradient_and_errors():
    torch = pytest.importorskip("torch")
    # ties in |pivot| go to the first row; a zero column is neither swapped nor eliminated
    for a in ([[1.0, 2.0], [-1.0, 3.0]], [[0.0, 1.0], [0.0, 2.0]], [[0.0, 0.0], [0.0, 0.0]]):
        for got, want in zip(Tensor(a).lu(), torch.linalg.lu(torch.tensor(a, dtype=torch.float64)), strict=True):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    a = RNG.standard_normal((3, 3))
    ta = torch.from_numpy(a).requires_grad_()
    _, tl, tu = torch.linalg.lu(ta)
    (tl.sum() + (tu**2).sum()).backward()
    x = Tensor(a, requires_grad=True)
    _, low, up = x.lu()
    (low.sum() + (up**2).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(ArgumentError, match="lu_factor: a matrix .* is singular"):
        Tensor([[0.0, 1.0], [0.0, 2.0]]).lu_factor()
    with pytest.raises(ArgumentError, match="pivot=False"):
        Tensor.eye(2).lu(pivot=False)
    lu, pivots = Tensor.eye(2).lu_factor()
    with pytest.raises(ShapeError, match="lu_solve: right-hand side"):
        Tensor.ones(3, 1).lu_solve(lu, pivots)


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5), (5, 3), (3, 1, 4, 4), (1, 1)])
def test_lu_unpack_matches_torch_gradient_included(shape):
    # Glow's LU-decomposed 1x1 convolution: P, L, U = torch.lu_unpack(*torch.linalg.lu_factor(w))
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal(shape)
    ta = torch.from_numpy(a).requires_grad_()
    x = Tensor(a, requires_grad=True)
    for data, pivots in ((True, True), (False, True), (True, False)):
        got = Tensor.lu_unpack(*x.lu_factor(), unpack_data=data, unpack_pivots=pivots)
        want = torch.lu_unpack(*torch.linalg.lu_factor(ta), unpack_data=data, unpack_pivots=pivots)
        for g, w in zip(got, want, strict=True):
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-12, atol=1e-12)
    weights = RNG.standard_normal(min(shape[-2:]) * shape[-2])
    p, low, up = torch.lu_unpack(*torch.linalg.lu_factor(ta))
    ((low.reshape(-1)[: weights.size] * torch.from_numpy(weights)).sum() + (up**2).sum() + p.sum()).backward()
    p, low, up = Tensor.lu_unpack(*x.lu_factor())
    ((low.reshape(-1)[: weights.size] * Tensor(weights)).sum() + (up**2).sum() + p.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12)
    lu, pivots = Tensor.eye(3).lu_factor()
    with pytest.raises(ArgumentError, match="lu_unpack: pivots must be lu_factor's"):
        Tensor.lu_unpack(lu, pivots.float())
    with pytest.raises(IndexError, match="lu_unpack: pivot 4 is outside 1..3"):
        Tensor.lu_unpack(lu, Tensor([1, 4, 3], dtype="int32"))


def test_ex_variants_report_info_without_reading_back():
    torch = pytest.importorskip("torch")
    from uopkit.jit import TinyJit

    mats = np.stack([_spd(3), np.diag([1.0, -1.0, 1.0]), np.diag([1.0, 1.0, 0.0])])
    low, info = Tensor(mats).cholesky_ex()
    want = torch.linalg.cholesky_ex(torch.from_numpy(mats))
    assert info.tolist() == want.info.tolist() == [0, 2, 3]
    np.testing.assert_allclose(low.numpy()[0], want.L.numpy()[0], rtol=1e-12)
    singular = np.stack([RNG.standard_normal((3, 3)), [[0.0, 1.0, 2.0], [0.0, 2.0, 1.0], [0.0, 3.0, 3.0]]])
    got, want = Tensor(singular).lu_factor_ex(), torch.linalg.lu_factor_ex(torch.from_numpy(singular))
    assert got.info.tolist() == want.info.tolist() == [0, 1]
    np.testing.assert_allclose(got.LU.numpy(), want.LU.numpy(), rtol=1e-12, atol=1e-12)
    assert got.pivots.tolist() == want.pivots.tolist()
    with pytest.raises(ArgumentError, match="not positive-definite"):
        Tensor(mats).cholesky_ex(check_errors=True)

    # no read-back: a TinyJit captures them and replays them on new inputs
    step = TinyJit(lambda x: [t.realize() for t in x.cholesky_ex()])
    for k in range(3):
        a = _spd(3) + k * np.eye(3)
        low, info = step(Tensor(a))
        np.testing.assert_allclose(low.numpy(), np.linalg.cholesky(a), rtol=1e-12)
        assert info.item() == 0


@_pinned(0)
def test_solve_inverse_det_take_a_few_kernels_a_column_and_match_torch():
    # Gauss-Jordan / LU with rows that carry their places: three kernels a column (the QR path took ~14)
    torch = pytest.importorskip("torch")
    from uopkit.engine.realize import stats

    n = 24
    a = RNG.standard_normal((n, n)).astype(np.float32)
    b = RNG.standard_normal((n, 2)).astype(np.float32)
    Tensor(a).solve(Tensor(b)).numpy()
    before = stats["kernels_run"]
    got = Tensor(a + 1).solve(Tensor(b)).numpy()
    assert stats["kernels_run"] - before <= 4 * n
    want = torch.linalg.solve(torch.from_numpy(a + 1), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    # ties among the pivots' sizes, an odd number of swaps: det and slogdet as torch's (the LU's)
    c = np.array([[1.0, 2.0, 2.0], [-2.0, 1.0, 0.0], [2.0, 0.0, 1.0]])
    assert Tensor(c).det().item() == pytest.approx(torch.linalg.det(torch.from_numpy(c)).item(), rel=1e-12)
    sign, log_abs = Tensor(c).slogdet()
    want_sign, want_log = torch.linalg.slogdet(torch.from_numpy(c))
    assert sign.item() == want_sign.item() and log_abs.item() == pytest.approx(want_log.item(), rel=1e-12)
    batch = RNG.standard_normal((3, 6, 6))
    np.testing.assert_allclose(
        Tensor(batch).inverse().numpy(), torch.linalg.inv(torch.from_numpy(batch)).numpy(), rtol=1e-9, atol=1e-10
    )


def test_a_singular_matrix_whose_elimination_cancels_exactly_is_refused_as_torch():
    # rows 1 and 2 of [[1, 2], [2, 4]] are parallel: LU's second pivot is an exact zero (a QR left 1e-16 there and
    # solve returned 2e15)
    torch = pytest.importorskip("torch")
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(ArgumentError, match="singular"):
        Tensor(s).solve(Tensor([1.0, 1.0]))
    with pytest.raises(ArgumentError, match="singular"):
        Tensor(s).inverse()
    assert Tensor(s).det().item() == torch.linalg.det(torch.from_numpy(s)).item() == 0.0
    sign, log_abs = Tensor(s).slogdet()
    assert sign.item() == 0.0 and log_abs.item() == -np.inf


@_pinned(0)
def test_blocked_cholesky_and_triangular_solves_take_few_kernels_and_match_torch():
    # blocked: a kernel per column of Cholesky (the same code for each) plus a matmul per 16, a triangular solve's work
    # in matmuls (the column loops took 7 and 3 kernels a column); accuracy, gradients and potrf's info as torch's past
    # a block's edge
    torch = pytest.importorskip("torch")
    from uopkit.engine.realize import stats

    n = 40
    x = np.sort(RNG.uniform(0, 10, n))
    # a GP's kernel matrix, condition number ~1e6
    k = np.exp(-0.5 * (x[:, None] - x[None]) ** 2) + 1e-5 * np.eye(n)
    y = RNG.standard_normal((n, 2))
    Tensor(k).cholesky().numpy()
    before = stats["kernels_run"]
    low = Tensor(k).cholesky().numpy()
    assert stats["kernels_run"] - before <= 2 * n
    np.testing.assert_allclose(low @ low.T, k, atol=1e-14)
    want = torch.linalg.cholesky(torch.from_numpy(k)).numpy()
    factor = Tensor(want)
    factor.solve_triangular(Tensor(y), upper=False).numpy()
    before = stats["kernels_run"]
    got = factor.solve_triangular(Tensor(y), upper=False).numpy()
    assert stats["kernels_run"] - before <= n
    reference = torch.linalg.solve_triangular(torch.from_numpy(want), torch.from_numpy(y), upper=False).numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-11, atol=1e-11 * np.abs(reference).max())

    a = RNG.standard_normal((2, 21, 21))
    spd = a @ np.swapaxes(a, -1, -2) / 21 + np.eye(21)
    w = RNG.standard_normal((2, 21, 21))
    t = Tensor(spd, requires_grad=True)
    (t.cholesky() * Tensor(w)).sum().backward()
    tt = torch.from_numpy(spd).requires_grad_()
    (torch.linalg.cholesky(tt) * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-12)
    for upper in (False, True):
        tri = np.tril(RNG.standard_normal((21, 21))) + 4 * np.eye(21)
        tri = tri.T if upper else tri
        u, v = Tensor(tri, requires_grad=True), Tensor(y[:21], requires_grad=True)
        (u.solve_triangular(v, upper=upper) * Tensor(y[:21])).sum().backward()
        tu, tv = torch.from_numpy(tri).requires_grad_(), torch.from_numpy(y[:21]).requires_grad_()
        (torch.linalg.solve_triangular(tu, tv, upper=upper) * torch.from_numpy(y[:21])).sum().backward()
        np.testing.assert_allclose(u.grad.numpy(), tu.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-9, atol=1e-12)

    bad = np.diag([1.0] * 20 + [-1.0, 1.0])
    assert Tensor(bad).cholesky_ex().info.item() == torch.linalg.cholesky_ex(torch.from_numpy(bad)).info.item() == 21
    with pytest.raises(ArgumentError, match="order 21"):
        Tensor(bad).cholesky()


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 2e-3)])
@pytest.mark.parametrize(
    "solve", ["solve_triangular", "solve_triangular_eye", "cholesky_solve", "cholesky_solve_upper"]
)
def test_a_solve_with_a_cholesky_factor_differentiates_after_its_result_was_realized(dtype, tol, solve):
    # x printed or cached (a GP's alpha) before backward: the solve's rule is on a reshape of its own, a view of x's
    # storage once realized, and cholesky() had already read its factor back; rebuilt over the factor's graph the view
    # was a new node without the rule, and the walk went through the blocked solve's steps: every gradient NaN
    torch = pytest.importorskip("torch")
    n = 19  # past a block's edge (a padded last block)
    a = _spd(n).astype(dtype)
    b = RNG.standard_normal((n, 2)).astype(dtype)
    weights = RNG.standard_normal((n, n if solve == "solve_triangular_eye" else 2)).astype(dtype)

    def forward(lib, m):
        if lib is torch:
            upper = solve == "cholesky_solve_upper"
            factor = torch.linalg.cholesky(m, upper=upper)
            if solve.startswith("cholesky_solve"):
                return torch.cholesky_solve(torch.from_numpy(b), factor, upper=upper)
            rhs = torch.eye(n, dtype=m.dtype) if solve == "solve_triangular_eye" else torch.from_numpy(b)
            return torch.linalg.solve_triangular(factor, rhs, upper=False)
        upper = solve == "cholesky_solve_upper"
        factor = m.cholesky(upper=upper)
        if solve.startswith("cholesky_solve"):
            return Tensor(b).cholesky_solve(factor, upper=upper)
        rhs = Tensor.eye(n, dtype=m.dtype) if solve == "solve_triangular_eye" else Tensor(b)
        return factor.solve_triangular(rhs, upper=False)

    ta = torch.from_numpy(a).requires_grad_()
    (forward(torch, ta) * torch.from_numpy(weights)).sum().backward()
    m = Tensor(a, requires_grad=True)
    x = forward(Tensor, m)
    x.realize()
    (x * Tensor(weights)).sum().backward()
    np.testing.assert_allclose(m.grad.numpy(), ta.grad.numpy(), rtol=tol, atol=tol * np.abs(ta.grad.numpy()).max())


@_pinned(0)
@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_jacobi_rounds_build_no_graph_of_their_own_and_match_torch(op):
    # each sweep's n - 1 rotation rounds once built, keyed and realized a graph each (~100x their kernels' time: a
    # 64 x 64 svd took seconds); now the first round's kernels run again for the others, and a sweep reads back once
    torch = pytest.importorskip("torch")
    from uopkit.engine.realize import stats

    n = 24
    a = RNG.standard_normal((40, n)).astype(np.float32)
    x = a if op == "svd" else a.T @ a
    run = (lambda t: t.svd(full_matrices=False)) if op == "svd" else (lambda t: t.eigh())
    [t.numpy() for t in run(Tensor(x + 1))]
    before = stats["schedule_hits"] + stats["schedule_misses"]
    got = [t.numpy().astype(np.float64) for t in run(Tensor(x))]
    # QR's two realizes a column (svd's U), one a sweep, a few more: not one a round (~8 sweeps of n - 1)
    assert stats["schedule_hits"] + stats["schedule_misses"] - before <= 3 * n + 20
    if op == "svd":
        u, s, vh = got
        want = torch.linalg.svdvals(torch.from_numpy(a)).numpy()
        np.testing.assert_allclose(s, want, rtol=0, atol=1e-5 * want[0])
        np.testing.assert_allclose((u * s) @ vh, a, atol=2e-5 * want[0])
        np.testing.assert_allclose(u.T @ u, np.eye(n), atol=1e-5)
    else:
        w, v = got
        want = torch.linalg.eigvalsh(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(w, want, rtol=0, atol=1e-5 * want[-1])
        np.testing.assert_allclose((v * w) @ v.T, x, atol=2e-5 * want[-1])
    np.testing.assert_allclose(vh @ vh.T if op == "svd" else v.T @ v, np.eye(n), atol=2e-5)


@_pinned(0)
def test_cholesky_compiles_the_same_kernels_for_sizes_that_pad_alike():
    # a panel is the same graph for every panel of every n in (32, 48]: a Bayesian-optimisation loop that adds a point
    # per iteration compiles the panels once per 16 sizes (every panel was code of its own, per n, ~20 s cold)
    torch = pytest.importorskip("torch")
    from uopkit.engine.realize import stats

    def spd(n: int, dtype) -> np.ndarray:
        a = RNG.standard_normal((n, n))
        return (a @ a.T / n + np.eye(n)).astype(dtype)

    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        Tensor(spd(40, dtype)).cholesky().numpy()
        for n in (33, 47, 48):
            s = spd(n, dtype)
            before = stats["kernels_compiled"]
            got = Tensor(s).cholesky().numpy()
            # (what reads or writes the n x n input and output: the mirror, the padding, the slice and the check)
            assert stats["kernels_compiled"] - before <= 5
            want = torch.linalg.cholesky(torch.from_numpy(s)).numpy()
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    batch = np.stack([spd(20, np.float64), spd(20, np.float64)])
    np.testing.assert_allclose(
        Tensor(batch).cholesky(upper=True).numpy(), torch.linalg.cholesky(torch.from_numpy(batch), upper=True), 1e-12
    )


def test_cholesky_ex_keeps_the_columns_before_a_failed_pivot():
    # L's columns before the first leading minor that is not positive definite are potrf's; the failed pivot's NaN or
    # inf reaches none of them (a panel's rows are stored with the finished columns)
    torch = pytest.importorskip("torch")
    n, bad = 40, 29
    a = RNG.standard_normal((n, n))
    s = a @ a.T / n + np.eye(n)
    s[bad, bad] = -5.0
    low, info = Tensor(s).cholesky_ex()
    assert info.item() == torch.linalg.cholesky_ex(torch.from_numpy(s)).info.item() == bad + 1
    # columns j < bad depend on s[:, :bad] alone: those of a positive-definite matrix with the same first columns
    fixed = s.copy()
    fixed[bad:, bad:] += 100 * np.eye(n - bad)
    want = np.linalg.cholesky(fixed)[:, :bad]
    np.testing.assert_allclose(low.numpy()[:, :bad], want, rtol=1e-12, atol=1e-13)
    assert not low.numpy()[bad, bad] > 0


@_pinned(0)
def test_a_second_solve_of_a_shape_launches_the_first_ones_kernels(monkeypatch):
    # the elimination's step counts itself (its record row): its kernels run again a column at a time, and a later
    # solve of the same shape builds no step's graph (a column's graph cost ~2 ms of Python, 100x its kernels)
    torch = pytest.importorskip("torch")
    from uopkit.tensor import rounds

    n = 30
    a = RNG.standard_normal((n, n))
    b = RNG.standard_normal((n, 2))
    Tensor(a).solve(Tensor(b)).numpy()
    built = []
    replay_call = rounds.replay_call
    monkeypatch.setattr(rounds, "replay_call", lambda fn, *args, **kw: built.append(fn) or replay_call(fn, *args, **kw))
    got = Tensor(a + np.eye(n)).solve(Tensor(b)).numpy()
    assert built == []
    # (an inverse's right-hand side is n columns wide: a shape of its own, whose first step is built once)
    Tensor(a).inverse().numpy()
    inv = Tensor(a + np.eye(n)).inverse().numpy()
    assert [fn.__name__ for fn in built] == ["_elimination_step"]
    want = torch.linalg.solve(torch.from_numpy(a + np.eye(n)), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(inv, np.linalg.inv(a + np.eye(n)), rtol=1e-10, atol=1e-12)


def test_pca_lowrank_and_svd_lowrank_are_torchs():
    # torch.pca_lowrank / torch.svd_lowrank draw a random test matrix, so compare what doesn't depend on it: at q equal
    # to the rank the factorization is exact (S, V's columns up to sign, U S V^T the centred data); a wide matrix and
    # a batch with svd_lowrank's M (subtracted) give torch's shapes and singular values
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    y = (rng.standard_normal((6, 3)) @ np.diag([4.0, 2.0, 0.5])).astype(np.float32)
    want = torch.pca_lowrank(torch.tensor(y), q=3)
    got = Tensor.pca_lowrank(Tensor(y), q=3)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-4)
    np.testing.assert_allclose(np.abs(got[2].numpy()), np.abs(want[2].numpy()), atol=1e-4)
    np.testing.assert_allclose((got[0] @ got[1].diag() @ got[2].mT).numpy(), y - y.mean(0), atol=1e-4)
    for call in (
        lambda lib, t: lib.svd_lowrank(t.mT, q=3),
        lambda lib, t: lib.svd_lowrank(t[None].expand(2, 6, 3), q=3, M=t.mean(0, keepdim=True)),
    ):
        ours, theirs = call(Tensor, Tensor(y)), call(torch, torch.tensor(y))
        assert [tuple(x.shape) for x in ours] == [tuple(x.shape) for x in theirs]
        np.testing.assert_allclose(ours[1].numpy(), theirs[1].numpy(), rtol=1e-4)
    with pytest.raises(ValueError, match="min"):
        Tensor.pca_lowrank(Tensor(y), q=4)
    with pytest.raises(ValueError):
        torch.pca_lowrank(torch.tensor(y), q=4)


@_pinned(1)
def test_cpu_factorizations_compute_on_the_host_in_their_dtype():
    # on a device whose buffers are host memory (`Allocator.host_memory`) the factorizations are LAPACK's, batched, in
    # the input's dtype, launching no kernel of their own (the device path: a few a column, or a round, hundreds here)
    torch = pytest.importorskip("torch")
    from uopkit.engine.realize import stats

    a = RNG.standard_normal((3, 24, 24)).astype(np.float32)
    s = a @ np.swapaxes(a, -1, -2) + 24 * np.eye(24, dtype=np.float32)
    b = RNG.standard_normal((3, 24, 2)).astype(np.float32)
    x, y, sym = Tensor(a), Tensor(b), Tensor(s)
    ta, tb, ts = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(s)
    cases = [
        (lambda: [x.solve(y)], lambda: [torch.linalg.solve(ta, tb)]),
        (lambda: [x.inverse()], lambda: [torch.linalg.inv(ta)]),
        (lambda: [x.det()], lambda: [torch.linalg.det(ta)]),
        (lambda: list(x.slogdet()), lambda: list(torch.linalg.slogdet(ta))),
        (lambda: [sym.cholesky()], lambda: [torch.linalg.cholesky(ts)]),
        (lambda: [sym.eigh()[0]], lambda: [torch.linalg.eigh(ts)[0]]),
        (lambda: [x.svd()[1]], lambda: [torch.linalg.svdvals(ta)]),
        (lambda: list(x.qr()), lambda: list(torch.linalg.qr(ta))),
    ]
    for ours, theirs in cases:
        before = stats["kernels_run"]
        got = [t.numpy() for t in ours()]
        # (a copy of the input or two: eigh's and cholesky's mirror of the triangle they read, solve's broadcast)
        assert stats["kernels_run"] - before <= 3
        for g, w in zip(got, theirs(), strict=True):
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, w.numpy(), rtol=2e-4, atol=2e-4 * np.abs(w.numpy()).max())


def _torch_grad_case(torch, op):
    """(uopkit function, torch function, input shapes) of one op or variant, each a sum of the results against fixed
    weights (the eigenvectors' and singular vectors' squares: their signs are arbitrary)."""
    tl = torch.linalg
    weighted = {
        "solve": (lambda a, b: a.solve(b), tl.solve, [(2, 4, 4), (2, 4, 3)]),
        "solve_vector": (lambda a, b: a.solve(b), tl.solve, [(4, 4), (4,)]),
        "solve_right": (lambda a, b: a.solve(b, left=False), lambda a, b: tl.solve(a, b, left=False), [(3, 3), (2, 3)]),
        "inv": (lambda a: a.inverse(), tl.inv, [(2, 3, 3)]),
        "det": (lambda a: a.det(), tl.det, [(2, 3, 3)]),
        "slogdet": (lambda a: a.slogdet()[1], lambda a: tl.slogdet(a)[1], [(2, 3, 3)]),
        "cholesky": (lambda a: a.cholesky(), tl.cholesky, [(2, 4, 4)]),
        "cholesky_upper": (lambda a: a.cholesky(upper=True), lambda a: tl.cholesky(a, upper=True), [(2, 4, 4)]),
        "eigh": (
            lambda a: (a.eigh()[0], a.eigh()[1].square()),
            lambda a: (tl.eigh(a)[0], tl.eigh(a)[1] ** 2),
            [(2, 4, 4)],
        ),
        "eigh_U": (
            lambda a: (a.eigh("U")[0], a.eigh("U")[1].square()),
            lambda a: (tl.eigh(a, UPLO="U")[0], tl.eigh(a, UPLO="U")[1] ** 2),
            [(2, 4, 4)],
        ),
    }
    for shape in ((2, 5, 3), (2, 3, 5), (4, 4)):
        for full in (False, True):
            weighted[f"svd{shape}{full}"] = (
                lambda a, full=full: _svd_parts(*a.svd(full_matrices=full)),
                lambda a, full=full: _svd_parts(*tl.svd(a, full_matrices=full)),
                [shape],
            )
        for mode in ("reduced", "complete"):
            if mode == "complete" and shape[-2] > shape[-1]:
                continue
            weighted[f"qr{shape}{mode}"] = (
                lambda a, mode=mode: a.qr(mode),
                lambda a, mode=mode: tl.qr(a, mode),
                [shape],
            )
    return weighted[op]


def _svd_parts(u, s, vh):
    # U and Vh through U Vh's product (sign-free) and U scaled by Vh's row sums (signs cancel), and S
    k = s.shape[-1]
    uk, vk = u[..., :, :k], vh[..., :k, :]
    return uk @ vk, uk * vk.sum(-1).unsqueeze(-2), s


GRAD_OPS = ["solve", "solve_vector", "solve_right", "inv", "det", "slogdet", "cholesky", "cholesky_upper", "eigh"]
GRAD_OPS += ["eigh_U"] + [f"svd{s}{f}" for s in ((2, 5, 3), (2, 3, 5), (4, 4)) for f in (False, True)]
GRAD_OPS += [
    f"qr{s}{m}"
    for s in ((2, 5, 3), (2, 3, 5), (4, 4))
    for m in ("reduced", "complete")
    if s != (2, 5, 3) or m != "complete"
]


@pytest.mark.parametrize("op", GRAD_OPS)
def test_factorization_values_and_gradients_match_torch_float64(op):
    torch = pytest.importorskip("torch")
    ours, theirs, shapes = _torch_grad_case(torch, op)
    arrays = [RNG.standard_normal(s) for s in shapes]
    if op.startswith(("cholesky", "eigh")):
        # symmetric positive definite in the triangle read (the lower, or the upper one), noise in the other
        a, noise = arrays[0], RNG.standard_normal((4, 4))
        ignored = np.triu(noise, 1) if op in ("cholesky", "eigh") else np.tril(noise, -1)
        arrays[0] = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4) + ignored
    xs = [Tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    got, want = ours(*xs), theirs(*ts)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    loss, reference = None, None
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-10, atol=1e-10)
        weights = RNG.standard_normal(tuple(w.shape))
        term, torch_term = (g * Tensor(weights)).sum(), (w * torch.from_numpy(weights)).sum()
        loss = term if loss is None else loss + term
        reference = torch_term if reference is None else reference + torch_term
    loss.backward()
    reference.backward()
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)


@_pinned(1)
def test_host_factorizations_differentiate_twice_and_at_a_singular_matrix():
    torch = pytest.importorskip("torch")
    from uopkit import autograd

    a = RNG.standard_normal((3, 3)) + 3 * np.eye(3)
    s = a @ a.T
    for m, f, tf in (
        (a, lambda m: m.inverse().sum() * m.det(), lambda m: torch.linalg.inv(m).sum() * torch.linalg.det(m)),
        (
            a,
            lambda m: m.solve(m.slogdet()[1].reshape(1, 1).expand(3, 2)).sum(),
            lambda m: torch.linalg.solve(m, torch.linalg.slogdet(m)[1].reshape(1, 1).expand(3, 2)).sum(),
        ),
        (
            s,
            lambda m: m.eigh()[0].square().sum() + m.cholesky().square().sum(),
            lambda m: torch.linalg.eigh(m)[0].square().sum() + torch.linalg.cholesky(m).square().sum(),
        ),
    ):
        x, t = Tensor(m, requires_grad=True), torch.from_numpy(m).requires_grad_()
        # the gradient's gradient: the rules' nodes are rebuilt with their own rules
        (g,) = autograd.grad(f(x), x, create_graph=True)
        (tg,) = torch.autograd.grad(tf(t), t, create_graph=True)
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-10, atol=1e-10)
        (g * g).sum().backward()
        (tg * tg).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-9)
    # det's gradient at a singular matrix: the adjugate's transpose, as the device path's
    s = Tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
    s.det().backward()
    np.testing.assert_allclose(s.grad.numpy(), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)


@_pinned(1)
def test_lu_lu_solve_and_triangular_solves_compute_on_the_host_as_torchs_cpu():
    # getrf's pivots exactly and its factors to rounding (torch's MKL fuses the update's multiply-subtract on a CPU with
    # FMA: bit for bit on one CI machine, an ulp apart on another), substitutions to rounding, launching no kernel; and
    # a solve, inverse or determinant of stored inputs reads their buffers (no copy kernel either)
    torch = pytest.importorskip("torch")
    from uopkit import linalg
    from uopkit.engine.realize import stats

    for dtype, tol in ((np.float64, 1e-13), (np.float32, 2e-6)):
        a = RNG.standard_normal((3, 6, 6)).astype(dtype)
        b = RNG.standard_normal((3, 6, 2)).astype(dtype)
        x, y, ta, tb = Tensor(a), Tensor(b), torch.from_numpy(a), torch.from_numpy(b)
        before = stats["kernels_run"]
        plu, factor, factor_ex = x.lu(), x.lu_factor(), x.lu_factor_ex()
        for i, (got, want) in enumerate(zip([*plu, *factor, *factor_ex], [*tl_lu(torch, ta)], strict=True)):
            if i == 0 or not got.is_floating_point():  # P, the pivots and info: exact
                np.testing.assert_array_equal(got.numpy(), want.numpy())
            else:
                ulps = 8 * np.finfo(dtype).eps * np.abs(want.numpy()).max()
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=ulps)
        solved = [y.lu_solve(*factor), linalg.lu_solve(*factor, y), linalg.solve_ex(x, y).result]
        wants = [torch.linalg.lu_solve(*torch.linalg.lu_factor(ta), tb)] * 2 + [torch.linalg.solve(ta, tb)]
        for upper in (False, True):
            for unit in (False, True):
                for left in (False, True):
                    rhs, trhs = (y, tb) if left else (y.mT, tb.mT)
                    kw = {"upper": upper, "unitriangular": unit, "left": left}
                    solved.append(linalg.solve_triangular(x, rhs, **kw))
                    wants.append(torch.linalg.solve_triangular(ta, trhs, **kw))
        for got, want in zip(solved, wants, strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol * 100, atol=tol * np.abs(want.numpy()).max())
        for got, want in ((x.solve(y), torch.linalg.solve(ta, tb)), (x.inverse(), torch.linalg.inv(ta))):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol * 100, atol=tol * 100)
        np.testing.assert_allclose(x.det().numpy(), torch.linalg.det(ta).numpy(), rtol=tol * 100)
        assert stats["kernels_run"] == before


def tl_lu(torch, ta):
    lu, pivots, info = torch.linalg.lu_factor_ex(ta)
    return (*torch.linalg.lu(ta), lu, pivots, lu, pivots, info)


@pytest.mark.parametrize("op", ["cholesky", "inverse", "eigvalsh", "det", "solve"])
def test_a_factorization_of_a_realized_value_differentiates_to_its_leaf(op):
    # MultivariateNormal(mu, covariance_matrix=diag_embed(log_std.exp() ** 2)): the covariance stored by a realize
    # (printed, deep enough to be kept, or factored before) was read behind the host result's detach, where backward
    # doesn't put realized values back as their graphs: 'no tensor with requires_grad' (torch: the gradient)
    torch = pytest.importorskip("torch")
    a = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)

    def run(lib, m):
        if op == "cholesky":
            return torch.linalg.cholesky(m) if lib is torch else m.cholesky()
        if op == "inverse":
            return torch.linalg.inv(m) if lib is torch else m.inverse()
        if op == "eigvalsh":
            return torch.linalg.eigvalsh(m) if lib is torch else m.eigvalsh()
        if op == "det":
            return torch.linalg.det(m) if lib is torch else m.det()
        rhs = np.array([[1.0], [-2.0]], np.float32)
        return torch.linalg.solve(m, torch.from_numpy(rhs)) if lib is torch else m.solve(Tensor(rhs))

    ta = torch.from_numpy(a).requires_grad_()
    run(torch, ta * 2).sum().backward()
    x = Tensor(a, requires_grad=True)
    m = x * 2
    m.realize()
    run(Tensor, m).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5), (2, 5, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_geqrf_orgqr_ormqr_match_torch(shape, dtype):
    # torch.geqrf's packed reflections, and Q built from them (orgqr) or multiplied in (ormqr, four ways): these were
    # missing, so `h, tau = torch.geqrf(A)` did not port
    torch = pytest.importorskip("torch")
    tol = 1e-12 if dtype == "float64" else 2e-6
    a = RNG.standard_normal(shape).astype(dtype)
    h, tau = torch.geqrf(torch.from_numpy(a))
    ours = Tensor(a).geqrf()
    np.testing.assert_allclose(ours.a.numpy(), h.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(ours.tau.numpy(), tau.numpy(), rtol=tol, atol=tol)
    assert ours.a.dtype == ours.tau.dtype == Tensor(a).dtype
    m, n = shape[-2:]
    if m >= n:
        np.testing.assert_allclose(Tensor.orgqr(*ours).numpy(), torch.orgqr(h, tau).numpy(), rtol=tol, atol=tol)
    for left in (True, False):
        for transpose in (False, True):
            c = RNG.standard_normal((*shape[:-2], m, 3) if left else (*shape[:-2], 3, m)).astype(dtype)
            want = torch.ormqr(h, tau, torch.from_numpy(c), left=left, transpose=transpose)
            got = Tensor.ormqr(ours.a, ours.tau, Tensor(c), left=left, transpose=transpose)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)
    with pytest.raises(ShapeError, match="ormqr: other"):
        Tensor.ormqr(ours.a, ours.tau, Tensor.ones(*shape[:-2], m + 1, 2, dtype=dtype))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_is_torch_svd_and_full_matrices_linalgs(shape):
    # torch.svd / A.svd(): (U, S, V), reduced unless some=False, V itself (linalg.svd's Vh is V.mT): a Kabsch
    # rotation `V @ U.mT` ported from torch must not get Vh
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal(shape)
    t, r = Tensor(a), torch.from_numpy(a)
    for some in (True, False):
        (u, s, v), (tu, ts, tv) = t.svd(some), torch.svd(r, some)
        assert (u.shape, s.shape, v.shape) == (tuple(tu.shape), tuple(ts.shape), tuple(tv.shape))
        np.testing.assert_allclose(s.numpy(), ts.numpy(), rtol=1e-10)
        k = min(shape[-2:])
        # the same subspaces (the vectors' signs are arbitrary): U diag(S) V^T and V's first k columns up to sign
        np.testing.assert_allclose((u[..., :k] * s.unsqueeze(-2)) @ v[..., :k].transpose(-1, -2).numpy(), a, atol=1e-10)
        np.testing.assert_allclose(np.abs(v[..., :k].numpy()), np.abs(tv[..., :k].numpy()), atol=1e-8)
    u, s, v = t.svd(compute_uv=False)
    _, _, tv = torch.svd(r, compute_uv=False)
    assert not u.numpy().any() and not v.numpy().any() and v.shape == tuple(tv.shape)
    assert t.svd(full_matrices=False)._fields == ("U", "S", "Vh") and t.svd()._fields == ("U", "S", "V")

"""Tensor.qr and Tensor.svd against numpy's LAPACK (the conventions PyTorch's CPU results follow)."""

import math

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.tensor.support import ArgumentError, ShapeError, UnknownModeError

RNG = np.random.default_rng(7)


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
    u, s, vh = (t.numpy().astype(np.float64) for t in Tensor(a).svd(full_matrices))
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
    u, s, vh = Tensor.zeros(2, 0, 3).svd()
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

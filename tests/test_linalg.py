"""uopkit.linalg (core/uopkit/linalg.py): every name against torch.linalg's function of that name, with torch's
defaults where they are not the Tensor method's (cross's dim, diagonal's dims, norm's choice of a vector or matrix
norm), and the module's doctest."""

import doctest

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, linalg
from uopkit.tensor.support import ArgumentError

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(7)
A = RNG.standard_normal((2, 4, 4))
SPD = A @ np.swapaxes(A, -1, -2) + 4 * np.eye(4)
B = RNG.standard_normal((2, 4, 3))
V = RNG.standard_normal((2, 3, 3))
TL = torch.linalg


def _close(got, want, tol=1e-9):
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w, tol)
        return
    got = got.numpy() if isinstance(got, Tensor) else np.asarray(got)
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


# name -> (uopkit.linalg call, torch.linalg call): results compared as they are (named tuples field by field)
CASES = {
    "det": (lambda: linalg.det(Tensor(A)), lambda: TL.det(_t(A))),
    "slogdet": (lambda: tuple(linalg.slogdet(Tensor(A))), lambda: tuple(TL.slogdet(_t(A)))),
    "solve": (lambda: linalg.solve(Tensor(A), Tensor(B)), lambda: TL.solve(_t(A), _t(B))),
    "solve_left_false": (
        lambda: linalg.solve(Tensor(A), Tensor(np.swapaxes(B, -1, -2)), left=False),
        lambda: TL.solve(_t(A), _t(np.swapaxes(B, -1, -2)), left=False),
    ),
    "solve_ex": (lambda: tuple(linalg.solve_ex(Tensor(A), Tensor(B))), lambda: tuple(TL.solve_ex(_t(A), _t(B)))),
    "solve_ex_vector": (
        lambda: tuple(linalg.solve_ex(Tensor(A), Tensor(B[..., 0]))),
        lambda: tuple(TL.solve_ex(_t(A), _t(B[..., 0]))),
    ),
    "solve_ex_left_false": (
        lambda: tuple(linalg.solve_ex(Tensor(A), Tensor(np.swapaxes(B, -1, -2)), left=False)),
        lambda: tuple(TL.solve_ex(_t(A), _t(np.swapaxes(B, -1, -2)), left=False)),
    ),
    "inv": (lambda: linalg.inv(Tensor(A)), lambda: TL.inv(_t(A))),
    "inv_ex": (lambda: tuple(linalg.inv_ex(Tensor(A))), lambda: tuple(TL.inv_ex(_t(A)))),
    "cholesky": (lambda: linalg.cholesky(Tensor(SPD)), lambda: TL.cholesky(_t(SPD))),
    "cholesky_upper": (lambda: linalg.cholesky(Tensor(SPD), upper=True), lambda: TL.cholesky(_t(SPD), upper=True)),
    "cholesky_ex": (lambda: tuple(linalg.cholesky_ex(Tensor(SPD))), lambda: tuple(TL.cholesky_ex(_t(SPD)))),
    "eigvalsh": (lambda: linalg.eigvalsh(Tensor(SPD)), lambda: TL.eigvalsh(_t(SPD))),
    "eigh_values": (lambda: linalg.eigh(Tensor(SPD)).eigenvalues, lambda: TL.eigh(_t(SPD)).eigenvalues),
    "svdvals": (lambda: linalg.svdvals(Tensor(A)), lambda: TL.svdvals(_t(A))),
    "svd_values": (lambda: linalg.svd(Tensor(A)).S, lambda: TL.svd(_t(A)).S),
    "qr_r_abs": (lambda: linalg.qr(Tensor(A)).R.abs(), lambda: TL.qr(_t(A)).R.abs()),
    "lu": (lambda: tuple(linalg.lu(Tensor(A))), lambda: tuple(TL.lu(_t(A)))),
    "lu_factor": (lambda: tuple(linalg.lu_factor(Tensor(A))), lambda: tuple(TL.lu_factor(_t(A)))),
    "lu_factor_ex": (lambda: tuple(linalg.lu_factor_ex(Tensor(A))), lambda: tuple(TL.lu_factor_ex(_t(A)))),
    "lu_solve": (
        lambda: linalg.lu_solve(*linalg.lu_factor(Tensor(A)), Tensor(B)),
        lambda: TL.lu_solve(*TL.lu_factor(_t(A)), _t(B)),
    ),
    "solve_triangular": (
        lambda: linalg.solve_triangular(Tensor(SPD), Tensor(B), upper=True),
        lambda: TL.solve_triangular(_t(SPD), _t(B), upper=True),
    ),
    "pinv": (lambda: linalg.pinv(Tensor(A[..., :3])), lambda: TL.pinv(_t(A[..., :3]))),
    "pinv_hermitian": (lambda: linalg.pinv(Tensor(SPD), hermitian=True), lambda: TL.pinv(_t(SPD), hermitian=True)),
    "lstsq": (lambda: linalg.lstsq(Tensor(A), Tensor(B)).solution, lambda: TL.lstsq(_t(A), _t(B)).solution),
    "matrix_exp": (lambda: linalg.matrix_exp(Tensor(A) / 4), lambda: TL.matrix_exp(_t(A) / 4)),
    "matrix_power": (lambda: linalg.matrix_power(Tensor(A), 3), lambda: TL.matrix_power(_t(A), 3)),
    "matrix_power_neg": (lambda: linalg.matrix_power(Tensor(SPD), -2), lambda: TL.matrix_power(_t(SPD), -2)),
    "matrix_rank": (lambda: linalg.matrix_rank(Tensor(A[..., :2] @ A[..., :2, :])), None),
    "cond": (lambda: linalg.cond(Tensor(SPD)), lambda: TL.cond(_t(SPD))),
    "cond_fro": (lambda: linalg.cond(Tensor(A), "fro"), lambda: TL.cond(_t(A), "fro")),
    "multi_dot": (
        lambda: linalg.multi_dot([Tensor(A[0]), Tensor(B[0]), Tensor(V[0])]),
        lambda: TL.multi_dot([_t(A[0]), _t(B[0]), _t(V[0])]),
    ),
    "matmul": (lambda: linalg.matmul(Tensor(A), Tensor(B)), lambda: TL.matmul(_t(A), _t(B))),
    "vecdot": (lambda: linalg.vecdot(Tensor(A), Tensor(SPD)), lambda: TL.vecdot(_t(A), _t(SPD))),
    "vecdot_dim": (lambda: linalg.vecdot(Tensor(A), Tensor(SPD), dim=0), lambda: TL.vecdot(_t(A), _t(SPD), dim=0)),
    # (3, 3) matrices: Tensor.cross would take dim 0 (the first of size 3), torch.linalg's takes the last
    "cross": (lambda: linalg.cross(Tensor(V[0]), Tensor(V[1])), lambda: TL.cross(_t(V[0]), _t(V[1]))),
    "cross_dim": (lambda: linalg.cross(Tensor(V), Tensor(V[::-1]), dim=1), lambda: TL.cross(_t(V), _t(V[::-1]), dim=1)),
    # the last two axes, where Tensor.diagonal takes the first two
    "diagonal": (lambda: linalg.diagonal(Tensor(B)), lambda: TL.diagonal(_t(B))),
    "diagonal_offset": (lambda: linalg.diagonal(Tensor(B), offset=1), lambda: TL.diagonal(_t(B), offset=1)),
    "vander": (lambda: linalg.vander(Tensor(V[0, 0]), N=4), lambda: TL.vander(_t(V[0, 0]), N=4)),
    "vector_norm": (lambda: linalg.vector_norm(Tensor(A)), lambda: TL.vector_norm(_t(A))),
    "vector_norm_ord": (
        lambda: linalg.vector_norm(Tensor(A), 1, dim=(0, 2), keepdim=True),
        lambda: TL.vector_norm(_t(A), 1, dim=(0, 2), keepdim=True),
    ),
    "vector_norm_dtype": (
        lambda: linalg.vector_norm(Tensor(A).float(), dtype="float64"),
        lambda: TL.vector_norm(_t(A).float(), dtype=torch.float64),
    ),
    "matrix_norm": (lambda: linalg.matrix_norm(Tensor(A)), lambda: TL.matrix_norm(_t(A))),
    "matrix_norm_nuc": (lambda: linalg.matrix_norm(Tensor(A), "nuc"), lambda: TL.matrix_norm(_t(A), "nuc")),
    # norm: no ord, no dim is the 2-norm of everything; an int dim a vector norm; two dims or a 2-d input a matrix one
    "norm": (lambda: linalg.norm(Tensor(A)), lambda: TL.norm(_t(A))),
    "norm_2d_ord": (lambda: linalg.norm(Tensor(A[0]), 2), lambda: TL.norm(_t(A[0]), 2)),
    "norm_1d_ord": (lambda: linalg.norm(Tensor(A[0, 0]), 3), lambda: TL.norm(_t(A[0, 0]), 3)),
    "norm_dim": (lambda: linalg.norm(Tensor(A), 1, dim=-1), lambda: TL.norm(_t(A), 1, dim=-1)),
    "norm_dims": (lambda: linalg.norm(Tensor(A), -1, dim=(0, 2)), lambda: TL.norm(_t(A), -1, dim=(0, 2))),
    "householder_product": (
        lambda: linalg.householder_product(Tensor(B), Tensor(V[..., 0, :2])),
        lambda: TL.householder_product(_t(B), _t(V[..., 0, :2])),
    ),
    "tensorinv": (
        lambda: linalg.tensorinv(Tensor(A[0].reshape(2, 2, 4)), ind=2),
        lambda: TL.tensorinv(_t(A[0].reshape(2, 2, 4)), ind=2),
    ),
    "tensorsolve": (
        lambda: linalg.tensorsolve(Tensor(A[0].reshape(2, 2, 4)), Tensor(B[0, :2, :2])),
        lambda: TL.tensorsolve(_t(A[0].reshape(2, 2, 4)), _t(B[0, :2, :2])),
    ),
    "tensorsolve_dims": (
        lambda: linalg.tensorsolve(Tensor(A[0].reshape(4, 2, 2)), Tensor(B[0, :2, :2]), dims=(0,)),
        lambda: TL.tensorsolve(_t(A[0].reshape(4, 2, 2)), _t(B[0, :2, :2]), dims=(0,)),
    ),
    "ldl_factor": (lambda: tuple(linalg.ldl_factor(Tensor(A + A.mT))), lambda: tuple(TL.ldl_factor(_t(A + A.mT)))),
    "ldl_factor_ex": (
        lambda: tuple(linalg.ldl_factor_ex(Tensor(A + A.mT))),
        lambda: tuple(TL.ldl_factor_ex(_t(A + A.mT))),
    ),
    "ldl_solve": (
        lambda: linalg.ldl_solve(*linalg.ldl_factor(Tensor(A + A.mT)), Tensor(B)),
        lambda: TL.ldl_solve(*TL.ldl_factor(_t(A + A.mT)), _t(B)),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_names_match_torch_linalg(name):
    ours, theirs = CASES[name]
    if theirs is None:
        assert linalg.matrix_rank(Tensor(A[..., :2] @ A[..., :2, :])).tolist() == [2, 2]
        return
    _close(ours(), theirs())


def test_every_name_is_torchs_and_exported():
    assert uopkit.linalg is linalg and "linalg" in uopkit.__all__
    for name in linalg.__all__:
        assert callable(getattr(linalg, name)) and hasattr(torch.linalg, name), name


def test_singular_matrices_solve_ex_and_inv_ex_report_info_without_raising():
    singular = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 1.0]]])
    ours, theirs = linalg.inv_ex(Tensor(singular)), TL.inv_ex(_t(singular))
    assert ours.info.tolist() == theirs.info.tolist() == [2, 0]
    _close(ours.inverse[1], theirs.inverse[1])
    assert linalg.solve_ex(Tensor(singular), Tensor(np.ones((2, 2)))).info.tolist() == [2, 0]
    with pytest.raises(ArgumentError, match="singular"):
        linalg.solve_ex(Tensor(singular), Tensor(np.ones((2, 2))), check_errors=True)
    with pytest.raises(ArgumentError, match="singular"):
        linalg.inv_ex(Tensor(singular), check_errors=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_householder_product_gradient_is_torchs(dtype):
    gen = torch.Generator().manual_seed(1)
    a, tau = torch.randn(2, 5, 3, generator=gen, dtype=dtype), torch.rand(2, 3, generator=gen, dtype=dtype)
    g = torch.randn(2, 5, 3, generator=gen, dtype=dtype)
    at, taut = a.clone().requires_grad_(), tau.clone().requires_grad_()
    (TL.householder_product(at, taut) * g).sum().backward()
    au, tauu = Tensor(a.numpy(), requires_grad=True), Tensor(tau.numpy(), requires_grad=True)
    (linalg.householder_product(au, tauu) * Tensor(g.numpy())).sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    _close(au.grad, at.grad, tol)
    _close(tauu.grad, taut.grad, tol)
    # geqrf's reflections give qr's Q
    packed, taus = torch.geqrf(a.double())
    _close(linalg.householder_product(Tensor(packed.numpy()), Tensor(taus.numpy())), TL.qr(a.double()).Q, 1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_ldl_factor_pivots_and_solve_are_lapacks(n):
    # Bunch-Kaufman's 1 x 1 and 2 x 2 pivots: zero diagonals and sparse matrices force the 2 x 2 blocks (negative
    # pivots), a zero column gives info; the upper triangle is never read
    gen = torch.Generator().manual_seed(n)
    a = torch.randn(6, n, n, generator=gen, dtype=torch.float64)
    a = a * (torch.rand(6, n, n, generator=gen, dtype=torch.float64) > 0.4)
    a = torch.tril(a) + torch.tril(a, -1).mT
    a[0].fill_diagonal_(0)
    a[1, :, 0] = a[1, 0, :] = 0
    upper_garbage = a + torch.triu(torch.ones_like(a), 1) * 7
    ours, theirs = linalg.ldl_factor_ex(Tensor(upper_garbage.numpy())), TL.ldl_factor_ex(a)
    assert ours.pivots.tolist() == theirs.pivots.tolist()
    assert ours.info.tolist() == theirs.info.tolist()
    _close(ours.LD, theirs.LD, 1e-12)
    if n > 1:
        assert (theirs.pivots < 0).any()
    solvable = [i for i in range(6) if theirs.info[i] == 0]
    b = torch.randn(len(solvable), n, 2, generator=gen, dtype=torch.float64)
    got = linalg.ldl_solve(ours.LD[solvable], ours.pivots[solvable], Tensor(b.numpy()))
    _close(got, TL.ldl_solve(theirs.LD[solvable], theirs.pivots[solvable], b), 1e-8)


def test_singular_inputs_raise_linalgerror_and_eig_has_no_gradient():
    # torch code catches torch.linalg.LinAlgError (a RuntimeError); ours is the same name, still an ArgumentError
    assert issubclass(linalg.LinAlgError, RuntimeError) and issubclass(linalg.LinAlgError, ArgumentError)
    singular = Tensor([[1.0, 2.0], [2.0, 4.0]])
    for call in (
        lambda: linalg.inv(singular),
        lambda: linalg.solve(singular, Tensor([1.0, 1.0])),
        lambda: linalg.lu_factor(singular),
        lambda: linalg.cholesky(singular),
        lambda: linalg.tensorinv(singular.reshape(2, 2, 1), ind=1),
        lambda: linalg.ldl_factor(Tensor.zeros(2, 2)),
        lambda: linalg.inv_ex(singular, check_errors=True),
    ):
        with pytest.raises(linalg.LinAlgError):
            call()
    with pytest.raises(NotImplementedError, match="no gradient"):
        linalg.eig(Tensor.eye(2).requires_grad_())
    with pytest.raises(NotImplementedError, match="no gradient"):
        linalg.eigvals(Tensor.eye(2).requires_grad_())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: linalg.householder_product(Tensor.ones(3, 4), Tensor.ones(2)), "m >= n"),
        (lambda: linalg.householder_product(Tensor.ones(4, 3), Tensor.ones(4)), "k <= n"),
        (lambda: linalg.householder_product(Tensor.ones(2, 4, 3), Tensor.ones(3, 2)), r"\(\*A.shape\[:-2\], k\)"),
        (lambda: linalg.tensorinv(Tensor.ones(4, 6, 8), ind=2), "24 x 8"),
        (lambda: linalg.tensorinv(Tensor.ones(4, 4), ind=0), "ind must be"),
        (lambda: linalg.tensorsolve(Tensor.ones(2, 3, 5), Tensor.ones(2, 3)), "6 x 5"),
        (lambda: linalg.ldl_factor(Tensor.ones(3, 4)), "square"),
        (lambda: linalg.ldl_factor(Tensor.ones(3, 3).half()), "float32 or float64"),
        (lambda: linalg.ldl_solve(*linalg.ldl_factor(Tensor.eye(3)), Tensor.ones(2, 2)), "n x k"),
    ],
)
def test_new_names_refuse_bad_shapes_clearly(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize(
    "cuts",
    [
        {"atol": 1e-3},
        {"atol": 0.1},
        {"atol": 1e-3, "rtol": 0.5},
        {"atol": 0.0},
        {"atol": [1e-3, 0.1, 0.0]},
        {"rtol": [1e-3, 0.1, 0.5], "atol": [1e-6, 1e-6, 1e-6]},
    ],
)
def test_pinv_atol_cuts_as_torchs(cuts, hermitian):
    # singular values 1, 1e-2 and 1e-4 (scaled by each matrix's draw): atol cuts absolutely, and given above 0 without
    # rtol it turns the default relative cut off, as torch's; a tensor gives one cut per matrix of the batch
    m = np.random.default_rng(3).standard_normal((3, 4, 3)) @ np.diag([1.0, 1e-2, 1e-4])
    if hermitian:
        m = np.swapaxes(m, -1, -2) @ m
    got = linalg.pinv(
        Tensor(m), hermitian=hermitian, **{k: Tensor(v) if isinstance(v, list) else v for k, v in cuts.items()}
    )
    want = TL.pinv(
        _t(m), hermitian=hermitian, **{k: torch.tensor(v) if isinstance(v, list) else v for k, v in cuts.items()}
    )
    _close(got, want, 1e-6 * np.abs(want.numpy()).max())


@pytest.mark.parametrize("hermitian", [False, True])
def test_pinv_takes_torchs_older_rcond(hermitian):
    # `torch.linalg.pinv(J, 1e-3)` / `rcond=` (robotics code's damped inverses): a relative cut alone, as rtol with
    # atol 0; a tensor gives one cut per matrix
    m = np.random.default_rng(4).standard_normal((3, 4, 3)) @ np.diag([1.0, 1e-2, 1e-4])
    if hermitian:
        m = np.swapaxes(m, -1, -2) @ m
    for rcond in (1e-3, 0.05, [1e-3, 0.05, 1e-6]):
        ours = Tensor(rcond) if isinstance(rcond, list) else rcond
        theirs = torch.tensor(rcond) if isinstance(rcond, list) else rcond
        want = TL.pinv(_t(m), theirs, hermitian)
        _close(linalg.pinv(Tensor(m), ours, hermitian), want, 1e-6 * np.abs(want.numpy()).max())
        _close(linalg.pinv(Tensor(m), rcond=ours, hermitian=hermitian), want, 1e-6 * np.abs(want.numpy()).max())
    with pytest.raises(TypeError, match="rcond"):
        linalg.pinv(Tensor(m), 1e-3, rtol=0.1)


def test_unsupported_arguments_raise_clearly():
    with pytest.raises(ArgumentError, match="driver must be one of 'gels', 'gelsy', 'gelsd', 'gelss'"):
        linalg.lstsq(Tensor(A), Tensor(B), driver="gelsx")
    with pytest.raises(NotImplementedError, match="left=True"):
        linalg.lu_solve(*linalg.lu_factor(Tensor(A)), Tensor(B), adjoint=True)
    with pytest.raises(ArgumentError, match="1-d or 2-d"):
        linalg.norm(Tensor(A), 2)
    with pytest.raises(ArgumentError, match="dim"):
        linalg.norm(Tensor(A), dim=(0, 1, 2))


def test_module_docstring_examples():
    assert doctest.testmod(linalg).failed == 0


EMPTY_LINALG = {
    "det": lambda L, a: L.det(a),
    "slogdet": lambda L, a: L.slogdet(a),
    "inv": lambda L, a: L.inv(a),
    "inv_ex": lambda L, a: L.inv_ex(a),
    "solve": lambda L, a: L.solve(a, a),
    "qr": lambda L, a: L.qr(a),
    "svd": lambda L, a: L.svd(a),
    "svdvals": lambda L, a: L.svdvals(a),
    "eigh": lambda L, a: L.eigh(a),
    "eigvalsh": lambda L, a: L.eigvalsh(a),
    "lu": lambda L, a: L.lu(a),
    "lu_factor": lambda L, a: L.lu_factor(a),
    "lu_factor_ex": lambda L, a: L.lu_factor_ex(a),
    "lu_solve": lambda L, a: L.lu_solve(*L.lu_factor(a), a),
    "pinv": lambda L, a: L.pinv(a),
    "lstsq": lambda L, a: L.lstsq(a, a)[:2],
    "cond": lambda L, a: L.cond(a),
    "cond fro": lambda L, a: L.cond(a, "fro"),
    "cholesky": lambda L, a: L.cholesky(a),
    "matrix_exp": lambda L, a: L.matrix_exp(a),
}


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
@pytest.mark.parametrize("name", list(EMPTY_LINALG))
def test_linalg_of_empty_matrices_requires_grad_as_torch(name, shape):
    # torch's results of 0 x 0 matrices (and of an empty batch) come from the input: they require grad where it does,
    # and a backward gives it a zero-size gradient; ours were made apart (lu_factor, det, inv, svd, ... didn't require
    # grad, and a backward raised); cond raised for no singular values, torch gives 0
    found = []
    for lib, L in ((torch, torch.linalg), (Tensor, linalg)):
        a = lib.zeros(shape).requires_grad_()
        out = EMPTY_LINALG[name](L, a)
        outs = list(out) if isinstance(out, tuple) else [out]
        floats = [t for t in outs if t.dtype in (torch.float32, uopkit.dtypes.float32)]
        result = [(tuple(t.shape), t.requires_grad, np.asarray(t.tolist()).tolist()) for t in outs]
        needing = [t for t in floats if t.requires_grad]
        if needing:
            sum(t.sum() for t in needing).backward()
        found.append((result, None if a.grad is None else tuple(a.grad.shape)))
    assert found[1] == found[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_det_and_slogdet_of_an_exactly_cancelling_matrix_are_torchs(dtype):
    # torch factors A^T (its row-major A is LAPACK's column-major A^T): [[1, 2, 3], [4, 5, 6], [7, 8, 9]] cancels
    # exactly there, so det 0 and slogdet (0, -inf); A's own LU leaves 1.1e-16 (we gave 6.7e-16 and sign 1)
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=dtype)
    ours = Tensor(a.numpy())
    assert linalg.det(ours).item() == TL.det(a).item() == 0.0
    sign, logabsdet = linalg.slogdet(ours)
    assert (sign.item(), logabsdet.item()) == tuple(t.item() for t in TL.slogdet(a)) == (0.0, -np.inf)
    gen = torch.Generator().manual_seed(2)
    batch = torch.randn(50, 4, 4, generator=gen, dtype=dtype)
    _close(linalg.det(Tensor(batch.numpy())), TL.det(batch), 1e-4 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("p", [1, -1, float("inf"), float("-inf"), "fro"])
def test_cond_of_a_singular_matrix_is_inf_as_torchs(p):
    # torch masks by inv_ex's info; we raised LinAlgError from inverse
    a = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]])
    _close(linalg.cond(Tensor(a), p), TL.cond(_t(a), p))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3), (2, 3, 0)])
@pytest.mark.parametrize("ord", [1, 2, float("inf"), "fro", "nuc"])
def test_matrix_norm_of_empty_matrices_is_torchs(shape, ord):
    # the largest of no row/column sums (or singular values) is 0, as torch's; we raised EmptyReduceError
    _close(linalg.matrix_norm(Tensor.zeros(*shape), ord), TL.matrix_norm(torch.zeros(shape), ord))

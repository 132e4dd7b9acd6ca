"""Tensor.lobpcg (torch.lobpcg): extreme eigenpairs of symmetric and generalized problems, compared with torch."""

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")


def _problem(m: int = 18) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(m, m))
    b = np.eye(m) + 0.2 * np.diag(rng.uniform(size=m))
    return a @ a.T, b, rng.normal(size=(m, 3))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("generalized", [False, True])
def test_lobpcg_matches_torch(largest: bool, generalized: bool) -> None:
    a, b, x0 = _problem()
    kw_t = {"B": torch.tensor(b)} if generalized else {}
    kw_u = {"B": Tensor(b)} if generalized else {}
    e_t, x_t = torch.lobpcg(torch.tensor(a), k=2, X=torch.tensor(x0), largest=largest, tol=1e-10, niter=-1, **kw_t)
    e_u, x_u = Tensor.lobpcg(Tensor(a), k=2, X=Tensor(x0), largest=largest, tol=1e-10, niter=-1, **kw_u)
    np.testing.assert_allclose(e_u.numpy(), e_t.numpy(), rtol=1e-8, atol=1e-9)
    # eigenvectors up to sign
    signs = np.sign((x_t.numpy() * x_u.numpy()).sum(0))
    np.testing.assert_allclose(x_u.numpy() * signs, x_t.numpy(), atol=1e-6)


def test_lobpcg_default_start_float32_and_gradient() -> None:
    a, _, _ = _problem()
    e_u, _ = Tensor.lobpcg(Tensor(a.astype(np.float32)), k=2)
    exact = torch.linalg.eigvalsh(torch.tensor(a)).flip(0)[:2].numpy()
    assert e_u.dtype == Tensor([1.0]).dtype
    np.testing.assert_allclose(e_u.numpy(), exact, rtol=1e-4)
    # the eigenvalues' gradient: x x^T for each pair, as torch.lobpcg's and eigh's
    at = torch.tensor(a, requires_grad=True)
    torch.linalg.eigh(at)[0][-2:].sum().backward()
    au = Tensor(a, requires_grad=True)
    Tensor.lobpcg(au, k=2, tol=1e-10)[0].sum().backward()
    np.testing.assert_allclose(au.grad.numpy(), at.grad.numpy(), atol=1e-6)


def test_lobpcg_too_small_raises_value_error() -> None:
    a, _, _ = _problem(5)
    with pytest.raises(ValueError):
        torch.lobpcg(torch.tensor(a), k=2)
    with pytest.raises(ValueError, match="lobpcg"):
        Tensor.lobpcg(Tensor(a), k=2)

"""Tensor methods added for tinygrad / PyTorch users (fmod) and float floor division / remainder at special values,
each compared with PyTorch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)

# every pair of these: zeros of both signs, infinities, NaN, exact multiples and plain values
SPECIAL = np.array([0.0, -0.0, 1.5, -1.5, 3.0, -3.0, 0.1, 7.25, np.inf, -np.inf, np.nan], np.float32)
SPECIAL_A, SPECIAL_B = np.repeat(SPECIAL, len(SPECIAL)), np.tile(SPECIAL, len(SPECIAL))


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _same_bits(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal values with equal signs of zero, NaN where torch has NaN."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape
    same = ((ours == theirs) & (np.signbit(ours) == np.signbit(theirs))) | (np.isnan(ours) & np.isnan(theirs))
    assert same.all(), list(zip(ours[~same][:6], theirs[~same][:6], strict=True))


def check_grad(fn: Callable, arrays: list[np.ndarray], torch_fn: Callable | None = None, atol: float = 1e-5) -> None:
    """Values and the gradients of sum(out * random upstream) against PyTorch."""
    torch_fn = torch_fn or fn
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), torch_fn(*theirs)
    assert out.shape == tuple(ref.shape)
    upstream = RNG.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        assert t.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient {i}")


# ---------------------------------------------------------------------------------------------------------------------
# fmod, floor division and remainder


def test_fmod_values_signs_and_specials_as_torch():
    a, b = _randn(200) * 50, _randn(200) * 3
    np.testing.assert_array_equal(Tensor(a).fmod(Tensor(b)).numpy(), torch.fmod(torch.tensor(a), torch.tensor(b)))
    _same_bits(
        Tensor(SPECIAL_A).fmod(Tensor(SPECIAL_B)).numpy(), torch.fmod(torch.tensor(SPECIAL_A), torch.tensor(SPECIAL_B))
    )
    ia, ib = np.array([7, -7, 7, -7, 0, 6], np.int32), np.array([3, 3, -3, -3, 5, -4], np.int32)
    out = Tensor(ia).fmod(Tensor(ib))
    assert out.dtype == dtypes.int32 and out.tolist() == torch.fmod(torch.tensor(ia), torch.tensor(ib)).tolist()
    assert Tensor([-5.5, 5.5]).fmod(2).tolist() == [-1.5, 1.5]
    h = Tensor(a[:20]).half().fmod(1.25)
    assert h.dtype == dtypes.float16
    np.testing.assert_array_equal(h.numpy(), torch.fmod(torch.tensor(a[:20]).half(), 1.25).numpy())
    with pytest.raises(TypeError):
        Tensor([True]).fmod(Tensor([True]))


def test_fmod_and_mod_gradients_as_torch():
    # away from the jumps: quotients not near an integer
    a = (RNG.integers(-5, 5, 12) + RNG.uniform(0.2, 0.8, 12)).astype(np.float32) * 1.5
    b = np.where(RNG.random(12) < 0.5, -1.5, 1.5).astype(np.float32)
    check_grad(lambda x, y: x.fmod(y), [a, b], torch.fmod)
    check_grad(lambda x, y: x % y, [a, b])


def test_float_floor_division_and_remainder_match_torch_at_special_values():
    ta, tb = torch.tensor(SPECIAL_A), torch.tensor(SPECIAL_B)
    _same_bits((Tensor(SPECIAL_A) // Tensor(SPECIAL_B)).numpy(), (ta // tb).numpy())
    _same_bits((Tensor(SPECIAL_A) % Tensor(SPECIAL_B)).numpy(), (ta % tb).numpy())
    # inf // finite is NaN (it was inf), and -1.5 % 1.5 is -0.0 (it was +0.0)
    assert np.isnan((Tensor([np.inf]) // 1.5).item())
    assert np.signbit((Tensor([-1.5]) % 1.5).item()) and np.signbit((Tensor([-0.0]) % 2.0).item())
    # a / b rounded up onto an integer the true quotient doesn't reach: the floor and remainder step back
    a, b = np.array([1.0, -163.24323, 238.74632], np.float32), np.array([0.1, 0.24401079, -1.0182287e-4], np.float32)
    np.testing.assert_array_equal((Tensor(a) // Tensor(b)).numpy(), (torch.tensor(a) // torch.tensor(b)).numpy())
    np.testing.assert_array_equal((Tensor(a) % Tensor(b)).numpy(), (torch.tensor(a) % torch.tensor(b)).numpy())
    ra, rb = _randn(2000) * 100, _randn(2000) * 3
    np.testing.assert_array_equal((Tensor(ra) // Tensor(rb)).numpy(), (torch.tensor(ra) // torch.tensor(rb)).numpy())
    np.testing.assert_array_equal((Tensor(ra) % Tensor(rb)).numpy(), (torch.tensor(ra) % torch.tensor(rb)).numpy())
    h = (Tensor(SPECIAL_A).half() // Tensor(SPECIAL_B).half()).numpy()
    _same_bits(h, (ta.half() // tb.half()).numpy())

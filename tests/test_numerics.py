"""Float32 results that need more than float32 on the way: fmod and % at huge quotients, long cumsums, var and std
of large values; compared with CPU PyTorch (whose kernels accumulate float32 in float64)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uopkit import Tensor  # noqa: E402

_SPECIAL = [
    (1.0, 1e-30),
    (3e30, 7.0),
    (1e20, 3.0),
    (-1e20, 3.0),
    (1e20, -3.0),
    (-1e20, -3.0),
    (3.4e38, 1.1e-38),
    (1e38, 3.0),
    (2.0**100, 2.0**-140),
    (1e-45, 3e-45),
    (5.0, 3.0),
    (-5.0, 3.0),
    (-0.0, 3.0),
    (0.0, -3.0),
    (-6.0, 3.0),
    (6.0, -3.0),
    (float("inf"), 3.0),
    (3.0, 0.0),
    (3.0, -0.0),
    (0.0, 0.0),
    (3.0, float("inf")),
    (-3.0, float("inf")),
    (3.0, float("-inf")),
    (float("inf"), float("inf")),
    (float("nan"), 2.0),
    (2.0, float("nan")),
]


def _reference(a: np.ndarray, b: np.ndarray, op: str) -> np.ndarray:
    # C's fmod (torch's scalar path; its vectorized one gives NaN where a / b overflows), and torch's remainder from it
    with np.errstate(all="ignore"):
        r = np.fmod(a, b)
        if op == "remainder":
            r = np.where((r != 0) & ((r < 0) != (b < 0)), r + b, r).astype(np.float32)
    return r


def _same_bits(ours: np.ndarray, ref: np.ndarray) -> None:
    ours, ref = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(ours[~nan], ref[~nan])
    np.testing.assert_array_equal(np.signbit(ours[~nan]), np.signbit(ref[~nan]))


@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_fmod_remainder_special_values(op: str) -> None:
    a = np.array([p[0] for p in _SPECIAL], np.float32)
    b = np.array([p[1] for p in _SPECIAL], np.float32)
    _same_bits(getattr(Tensor(a), op)(Tensor(b)).numpy(), _reference(a, b, op))


@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_fmod_remainder_every_quotient(op: str) -> None:
    # dividends and divisors across float32's whole range (subnormals too): quotients up to 2**277
    rng = np.random.default_rng(0)
    n = 4096
    a = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-149, 128, n) * rng.choice([-1, 1], n)).astype(np.float32)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-149, 128, n) * rng.choice([-1, 1], n)).astype(np.float32)
    b[b == 0] = 1.0
    _same_bits(getattr(Tensor(a), op)(Tensor(b)).numpy(), _reference(a, b, op))


@pytest.mark.parametrize("divisor", [3.0, -7.0, 1e-30, 0.1, 1e30])
def test_fmod_remainder_by_number(divisor: float) -> None:
    # a Python divisor takes fewer steps (its exponent is known): still exact for every float32 dividend
    rng = np.random.default_rng(1)
    a = (rng.uniform(1, 2, 2048) * 2.0 ** rng.integers(-149, 128, 2048) * rng.choice([-1, 1], 2048)).astype(np.float32)
    b = np.full_like(a, divisor)
    _same_bits(Tensor(a).fmod(divisor).numpy(), _reference(a, b, "fmod"))
    _same_bits((Tensor(a) % divisor).numpy(), _reference(a, b, "remainder"))


@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_float64_remainder_past_its_exact_quotients_is_never_out_of_range(op: str) -> None:
    # torch's (C's) at small quotients; past the two passes' reach, NaN where they leave a remainder of the wrong sign
    # or not below |b| (1e30 fmod 1e-30 was -8.6e-4, 3e38 fmod 1.5 was 1048576), never such a remainder
    rng = np.random.default_rng(2)
    n = 4096
    a = rng.uniform(1, 2, n) * 2.0 ** rng.integers(-1000, 1000, n) * rng.choice([-1, 1], n)
    b = rng.uniform(1, 2, n) * 2.0 ** rng.integers(-1000, 1000, n) * rng.choice([-1, 1], n)
    a[:3], b[:3] = [1e30, 3e38, 1e20], [1e-30, 1.5, 7.0]
    ours = getattr(Tensor(a), op)(Tensor(b)).numpy()
    ref = getattr(torch.from_numpy(a), op)(torch.from_numpy(b)).numpy()
    sign = a if op == "fmod" else b
    got = ~np.isnan(ours)
    assert not np.any((np.abs(ours[got]) >= np.abs(b[got])) & (ours[got] != ref[got]))
    assert not np.any((ours[got] != 0) & ((ours[got] < 0) != (sign[got] < 0)))
    with np.errstate(over="ignore"):
        # (divisors near float64's smallest normals left out: there the split products lose bits to underflow)
        near = (np.abs(a / b) < 2.0**60) & (np.abs(b) > 2.0**-900)
    np.testing.assert_array_equal(ours[near], ref[near])
    assert np.isnan(ours[:2]).all() and ours[2] == ref[2]


def test_fmod_gradient_unchanged() -> None:
    x, y = Tensor([5.5, -7.25], requires_grad=True), Tensor([2.0, 3.0], requires_grad=True)
    x.fmod(y).sum().backward()
    tx, ty = torch.tensor([5.5, -7.25], requires_grad=True), torch.tensor([2.0, 3.0], requires_grad=True)
    tx.fmod(ty).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())


def _cumsum_errors(x: np.ndarray) -> tuple[float, float]:
    ref = np.cumsum(x.astype(np.float64))
    scale = np.cumsum(np.abs(x.astype(np.float64)))
    ours = Tensor(x).cumsum().numpy().astype(np.float64)
    theirs = torch.from_numpy(x).cumsum(0).numpy().astype(np.float64)
    return float(np.max(np.abs(ours - ref) / scale)), float(np.max(np.abs(theirs - ref) / scale))


@pytest.mark.parametrize("n", [10**4, 10**6])
def test_cumsum_long_uniform(n: int) -> None:
    # each output within float32's last rounding of the float64 running total, as torch's
    ours, theirs = _cumsum_errors(np.random.default_rng(2).uniform(0, 1, n).astype(np.float32))
    assert ours <= 1.5 * theirs + 1e-12


def test_cumsum_long_cancelling() -> None:
    n = 10**5
    rng = np.random.default_rng(3)
    x = (np.where(np.arange(n) % 2 == 0, 1e4, 1e-3) * rng.choice([-1, 1], n)).astype(np.float32)
    ref = np.cumsum(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(Tensor(x).cumsum().numpy(), ref, rtol=1e-6, atol=1e-3)


def test_cumprod_long() -> None:
    x = np.random.default_rng(4).uniform(0.999, 1.001, 100_000).astype(np.float32)
    ref = torch.from_numpy(x).cumprod(0).numpy()
    np.testing.assert_allclose(Tensor(x).cumprod().numpy(), ref, rtol=2e-7)


def test_cumsum_gradient() -> None:
    x = Tensor(np.random.default_rng(5).uniform(0, 1, 2000).astype(np.float32), requires_grad=True)
    (x.cumsum() * Tensor.arange(2000).float()).sum().backward()
    t = torch.from_numpy(x.numpy()).requires_grad_()
    (t.cumsum(0) * torch.arange(2000).float()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)
    assert x.grad.dtype == x.dtype


@pytest.mark.parametrize(
    "values", [[1e30, -1e30, 3e30], [1e20, 1.0000001e20, 3e20], [3e38, -3e38], [1.0, 2.0, 3.0, 4.0]]
)
def test_var_std_large_values(values: list[float]) -> None:
    t, x = torch.tensor(values), Tensor(values)
    for got, want in [(x.std(), t.std()), (x.var(), t.var()), (x.std(correction=0), t.std(correction=0))]:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    std, _ = x.std_mean()
    var, _ = x.var_mean()
    np.testing.assert_allclose(std.numpy(), torch.std_mean(t)[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(var.numpy(), torch.var_mean(t)[0].numpy(), rtol=1e-6)
    assert x.std().dtype == x.dtype


def test_std_rows_gradient() -> None:
    v = np.array([[1e30, -1e30, 3e30], [1.0, 2.0, 4.0]], np.float32)
    x, t = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    x.std(1).sum().backward()
    t.std(1).sum().backward()
    np.testing.assert_allclose(x.std(1).numpy(), t.std(1).detach().numpy(), rtol=1e-6)
    # (row 0's x - mean cancels: torch's float32 mean and ours differ there by an ulp of 1e30)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-8)


def test_a_value_computed_in_two_kernels_rounds_the_same_in_both():
    # anchor matching (torchvision's Matcher): iou == iou.max(1) per row. The max's kernel and the compare's kernel each
    # compute iou; gcc fused area_a + w * h into one multiply-add in the large -O3 kernel and not in the small -O1 one,
    # so a row had no element equal to its max, and argmax (the first index equal to the max) gave n, out of range
    rng = np.random.default_rng(0)

    def boxes(n):
        xy = rng.uniform(0, 100, (n, 2))
        return np.concatenate([xy, xy + rng.uniform(5, 40, (n, 2))], 1).astype(np.float32)

    def iou(a, b, maximum, minimum):
        area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
        wh = (minimum(a[:, None, 2:], b[None, :, 2:]) - maximum(a[:, None, :2], b[None, :, :2])).clamp(min=0)
        inter = wh[..., 0] * wh[..., 1]
        return inter / (area(a)[:, None] + area(b)[None, :] - inter)

    g, anchors = boxes(4), boxes(200)
    ours = iou(Tensor(g), Tensor(anchors), Tensor.maximum, Tensor.minimum)
    theirs = iou(torch.tensor(g), torch.tensor(anchors), torch.maximum, torch.minimum)
    assert (ours == ours.max(dim=1).values[:, None]).sum(1).tolist() == [1, 1, 1, 1]
    np.testing.assert_array_equal(ours.max(dim=1).values.numpy(), theirs.max(1).values.numpy())
    assert ours.argmax(0).numpy().tolist() == theirs.argmax(0).tolist()

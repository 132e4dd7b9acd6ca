"""Tensor methods added for tinygrad / PyTorch users (allclose, diag, fmod, log10, logaddexp, softmin, normalize,
sparse_categorical_crossentropy, pad_to, shrink_to, empty_like, short, bfloat16, sequential, randperm, multinomial,
nonzero) and float floor division / remainder at special values, each compared with PyTorch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.tensor.support import ShapeError

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
# allclose, diag


def test_allclose_is_a_python_bool_as_torch():
    a = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    for b, kw in [
        (a + 1e-7, {}),
        (a + 1e-7, {"equal_nan": True}),
        (a * 1.01, {"equal_nan": True}),
        (a * 1.01, {"rtol": 0.02, "equal_nan": True}),
        (np.float32(1.0), {}),
    ]:
        ours = Tensor(a).allclose(Tensor(b) if isinstance(b, np.ndarray) else float(b), **kw)
        theirs = torch.allclose(
            torch.tensor(a), torch.tensor(b) if isinstance(b, np.ndarray) else torch.tensor(b), **kw
        )
        assert type(ours) is bool and ours == theirs, (b, kw)
    assert Tensor([[1, 2]]).allclose(Tensor([1, 2])) and not Tensor([1, 2]).allclose(3)


def test_diag_builds_and_reads_diagonals_as_torch():
    v, m = _randn(4), _randn(3, 5)
    for k in (0, 1, -2):
        np.testing.assert_array_equal(Tensor(v).diag(k).numpy(), torch.diag(torch.tensor(v), k).numpy())
        np.testing.assert_array_equal(Tensor(m).diag(k).numpy(), torch.diag(torch.tensor(m), k).numpy())
    assert Tensor([1, 2]).diag().tolist() == [[1, 0], [0, 2]] and Tensor([True]).diag().dtype == dtypes.bool
    assert Tensor.zeros(0).diag().shape == (0, 0)
    with pytest.raises(ShapeError, match="1-D or 2-D"):
        Tensor.zeros(2, 2, 2).diag()
    check_grad(lambda x: x.diag(1), [v], lambda x: torch.diag(x, 1))
    check_grad(lambda x: x.diag(-1), [m], lambda x: torch.diag(x, -1))


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


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "int8", "uint8"])
def test_integer_floor_division_and_remainder_by_numbers_and_tensors_match_torch(dt):
    # a number divisor's known sign picks the floor's correction with one compare: every sign of dividend and divisor,
    # the dtype's extremes, and tensor divisors of both signs, against torch
    info = np.iinfo(dt)
    a = np.array([info.min, info.min + 1, -7, -6, -1, 0, 1, 5, 6, 7, info.max - 1, info.max]).clip(info.min, info.max)
    a = a.astype(dt)
    ta, ua = torch.tensor(a), Tensor(a)
    # (a negative number beside a uint8 tensor computes in int64 here, where torch wraps it: docs/semantics.md)
    for number in (1, 2, 3, 7, 100, info.max) + ((-1, -3, -7) if info.min < 0 else ()):
        for op in (lambda x, n: x // n, lambda x, n: x % n, lambda x, n: x.div(n, rounding_mode="floor")):
            np.testing.assert_array_equal(op(ua, number).numpy(), op(ta, number).numpy(), err_msg=f"{dt} {number}")
    b = np.array([3, -3, 7, -7, 1, -1, 2, -2, 5, -5, 4, -4]) if dt != "uint8" else np.arange(1, 13)
    tb, ub = torch.tensor(b.astype(dt)), Tensor(b.astype(dt))
    np.testing.assert_array_equal((ua // ub).numpy(), (ta // tb).numpy())
    np.testing.assert_array_equal((ua % ub).numpy(), (ta % tb).numpy())
    np.testing.assert_array_equal((100 // ub).numpy(), (100 // tb).numpy())
    n = -100 if info.min < 0 else 100
    np.testing.assert_array_equal((n % ub).numpy(), (n % tb).numpy())


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "int8", "uint8", "bool"])
def test_integer_division_by_the_number_zero_raises_as_torch(dt):
    # torch's CPU refuses an int tensor // 0, % 0, fmod(0) and div(0, rounding_mode=...) with a RuntimeError; they gave
    # the backend's 0 here
    a = np.array([7, 5, 0, 1]).astype(dt)

    def inplace(x):
        x //= 0
        return x

    for op in (
        lambda x: x // 0,
        lambda x: x % 0,
        lambda x: x.fmod(0),
        lambda x: x.remainder(np.int64(0)),
        lambda x: x.div(0, rounding_mode="trunc"),
        lambda x: x.div(0, rounding_mode="floor"),
        lambda x: x // False,
        inplace,
    ):
        if dt == "bool" and op is inplace:
            continue
        with pytest.raises(RuntimeError):
            op(torch.tensor(a))
        with pytest.raises(RuntimeError) as raised:
            op(Tensor(a))
        assert isinstance(raised.value, ZeroDivisionError)
    # a float divisor, a float tensor, an empty tensor and a number divided by the tensor still compute, as torch's
    for op in (lambda x: x // 0.0, lambda x: x.float() % 0, lambda x: x[:0] // 0, lambda x: 7 // (x + 1)):
        np.testing.assert_array_equal(op(Tensor(a)).numpy(), op(torch.tensor(a)).numpy())


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_float_floor_division_rounds_each_step_as_torch(dt):
    # torch's kernel for two half tensors rounds every step to the half float (float16 5000 // 3 is 1667), and a number
    # divided by a half tensor is taken in the half float first (1e5 // x is inf // x: NaN; 1e-8 // -2.0 is -0.0)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(4000) * 10.0 ** rng.integers(-3, 5, 4000)).astype(np.float32)
    b = (rng.standard_normal(4000) * 10.0 ** rng.integers(-3, 3, 4000)).astype(np.float32)
    a[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 5000.0, 5000.0, -7.0]
    b[5:13] = [3.0, -3.5, 1.5, 0.0, -0.0, np.inf, -np.inf, np.nan]
    ta, tb = torch.tensor(a).to(getattr(torch, dt)), torch.tensor(b).to(getattr(torch, dt))
    ua, ub = Tensor(a).cast(getattr(dtypes, dt)), Tensor(b).cast(getattr(dtypes, dt))
    _same_bits((ua // ub).float().numpy(), (ta // tb).float().numpy())
    for number in (1e5, -1e5, 70000.0, 5001.0, 1e-8, 0.1, 3.0):
        _same_bits((number // ub).float().numpy(), (number // tb).float().numpy())
        # (a number divisor: float32, rounded once, as torch's)
        _same_bits((ub // number).float().numpy(), (tb // number).float().numpy())


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_float_power_takes_its_number_exponent_in_the_half_float_as_torch(dt):
    x = np.array([-np.inf, -0.0, 0.0, 4.0, -2.0, np.inf, np.nan, 0.1, -1.0, 1.0, 1.5], np.float32)
    tx, ux = torch.tensor(x).to(getattr(torch, dt)), Tensor(x).cast(getattr(dtypes, dt))
    for exponent in (5001, 5001.0, 65519.0, 3, -3.0, 0.3, 2.5, 1e-8, 7):
        try:
            want = (tx**exponent).float().numpy()
        except RuntimeError:
            with pytest.raises(OverflowError):
                ux**exponent
            continue
        _same_bits((ux**exponent).float().numpy(), want)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64"])
def test_clamp_keeps_x_where_it_equals_a_bound_as_torch(dt):
    # torch's max(x, lo) and min(., hi) give x on a tie: clamp(-0.0, min=0) is -0.0; a NaN anywhere gives NaN
    x = np.array([-0.0, 0.0, -1.0, 1.0, np.nan], np.float32)
    tx, ux = torch.tensor(x).to(getattr(torch, dt)), Tensor(x).cast(getattr(dtypes, dt))
    bounds = [None, 0.0, -0.0, float("nan")]
    for lo in bounds:
        for hi in bounds:
            if lo is None and hi is None:
                continue
            _same_bits(ux.clamp(lo, hi).float().numpy(), tx.clamp(lo, hi).float().numpy())
            # tensor bounds (torch's scalar loop, which a tensor this short takes, gives x on a tie too)
            tlo = None if lo is None else torch.full((5,), lo).to(tx.dtype)
            thi = None if hi is None else torch.full((5,), hi).to(tx.dtype)
            ulo = None if lo is None else Tensor(np.full(5, lo, np.float32)).cast(ux.dtype)
            uhi = None if hi is None else Tensor(np.full(5, hi, np.float32)).cast(ux.dtype)
            _same_bits(ux.clamp(ulo, uhi).float().numpy(), tx.clamp(tlo, thi).float().numpy())
    for name in ("hardtanh", "relu6"):
        want = getattr(torch.nn.functional, name)(tx).float().numpy()
        _same_bits(getattr(ux, name)().float().numpy(), want)


# ---------------------------------------------------------------------------------------------------------------------
# log10, logaddexp, softmin, normalize


def test_log10_as_torch():
    x = np.array([1e-3, 0.5, 1.0, 10.0, 1000.0, 0.0, -1.0, np.inf], np.float32)
    np.testing.assert_allclose(Tensor(x).log10().numpy(), torch.tensor(x).log10().numpy(), rtol=1e-6)
    assert Tensor([10, 100]).log10().dtype == dtypes.float32
    check_grad(lambda t: t.log10(), [np.abs(_randn(6)) + 0.1])


def test_logaddexp_values_specials_and_gradient_as_torch():
    ours = Tensor(SPECIAL_A).logaddexp(Tensor(SPECIAL_B)).numpy()
    theirs = torch.logaddexp(torch.tensor(SPECIAL_A), torch.tensor(SPECIAL_B)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    big = Tensor([1000.0, -1000.0]).logaddexp(Tensor([1000.0, -1000.0])).numpy()
    np.testing.assert_allclose(big, torch.logaddexp(torch.tensor([1000.0, -1000.0]), torch.tensor([1000.0, -1000.0])))
    a, b = _randn(3, 4) * 5, _randn(4) * 5
    check_grad(lambda x, y: x.logaddexp(y), [a, b], torch.logaddexp)
    check_grad(lambda x: x.logaddexp(x), [a], lambda x: torch.logaddexp(x, x))
    # the gradient at (-inf, -inf) is NaN in torch too (exp(-inf - -inf))
    x = Tensor([-np.inf, 0.0], requires_grad=True)
    x.logaddexp(Tensor([-np.inf, 0.0])).sum().backward()
    tx = torch.tensor([-np.inf, 0.0], requires_grad=True)
    torch.logaddexp(tx, torch.tensor([-np.inf, 0.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_softmin_as_torch():
    x = _randn(3, 5)
    check_grad(lambda t: t.softmin(), [x], lambda t: torch.nn.functional.softmin(t, dim=-1))
    check_grad(lambda t: t.softmin(0), [x], lambda t: torch.nn.functional.softmin(t, dim=0))
    out = Tensor([1, 2, 3]).softmin(dtype=dtypes.float64)
    assert out.dtype == dtypes.float64
    np.testing.assert_allclose(out.numpy(), torch.nn.functional.softmin(torch.tensor([1.0, 2, 3]), 0).numpy())


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, np.inf])
def test_normalize_as_torch(p):
    x = _randn(3, 4)
    x[1] = 0.0  # a zero row: the norm is clamped to eps and torch's gradient stays finite
    x[2, 0] = 0.0
    check_grad(lambda t: t.normalize(p), [x], lambda t: torch.nn.functional.normalize(t, p), atol=1e-4)
    check_grad(lambda t: t.normalize(p, dim=-1), [x], lambda t: torch.nn.functional.normalize(t, p, dim=-1), atol=1e-4)
    # NaN and inf rows, values as torch (a NaN norm stays NaN rather than being clamped to eps)
    special = np.array([[1.0, np.inf, 2.0], [np.nan, 1.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    ours = Tensor(special).normalize(p).numpy()
    np.testing.assert_array_equal(ours, torch.nn.functional.normalize(torch.tensor(special), p).numpy())


# ---------------------------------------------------------------------------------------------------------------------
# sparse_categorical_crossentropy


def test_sparse_categorical_crossentropy_as_torch_cross_entropy_on_the_last_axis():
    logits = _randn(4, 3, 5)
    y = RNG.integers(0, 5, (4, 3)).astype(np.int32)
    y[0, 1] = y[2, 2] = 2

    def torch_loss(t, **kw):
        return torch.nn.functional.cross_entropy(t.permute(0, 2, 1), torch.tensor(y, dtype=torch.int64), **kw)

    for kw in [{}, {"ignore_index": 2}, {"label_smoothing": 0.2, "reduction": "sum"}, {"reduction": "none"}]:
        torch_kw = dict(kw, ignore_index=kw.get("ignore_index", -1))
        check_grad(
            lambda t, kw=kw: t.sparse_categorical_crossentropy(Tensor(y), **kw),
            [logits],
            lambda t, torch_kw=torch_kw: torch_loss(t, **torch_kw),
        )
    flat = _randn(6, 5)
    yf = RNG.integers(0, 5, 6).astype(np.int32)
    ours = Tensor(flat).sparse_categorical_crossentropy(Tensor(yf)).item()
    theirs = torch.nn.functional.cross_entropy(torch.tensor(flat), torch.tensor(yf, dtype=torch.int64)).item()
    assert ours == pytest.approx(theirs, rel=1e-5)
    # tinygrad's example
    t = Tensor([[-1.0, 2.0, -3.0], [1.0, -2.0, 3.0]])
    theirs = torch.nn.functional.cross_entropy(torch.tensor(t.numpy()), torch.tensor([1, 2])).item()
    assert t.sparse_categorical_crossentropy(Tensor([1, 2])).item() == pytest.approx(theirs, rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# pad_to, shrink_to, empty_like, short, bfloat16, sequential


def test_pad_to_and_shrink_to():
    x = Tensor([[1, 2], [3, 4]])
    assert x.pad_to(3, None).tolist() == [[1, 2], [3, 4], [0, 0]]
    assert x.pad_to((2, 3), value=9).tolist() == [[1, 2, 9], [3, 4, 9]]
    assert x.pad_to(2, 2) is x
    assert x.shrink_to(1, None).tolist() == [[1, 2]] and x.shrink_to((2, 1)).tolist() == [[1], [3]]
    with pytest.raises(ShapeError, match="smaller"):
        x.pad_to(1, 2)
    with pytest.raises(ShapeError, match="larger"):
        x.shrink_to(3, 2)
    with pytest.raises(ShapeError, match="sizes"):
        x.pad_to(3)
    check_grad(
        lambda t: t.pad_to(3, 4).shrink_to(3, 3),
        [_randn(2, 4)],
        lambda t: torch.nn.functional.pad(t, (0, 0, 0, 1))[:, :3],
    )


def test_empty_like_short_bfloat16_sequential():
    x = Tensor([[1.5, -2.5, 70000.0]])
    e = x.empty_like()
    assert e.shape == (1, 3) and e.dtype == dtypes.float32 and e.device == x.device
    assert x.empty_like(dtype=dtypes.int16).dtype == dtypes.int16
    s = Tensor([1.5, -2.5, 300.7]).short()
    assert s.dtype == dtypes.int16 and s.tolist() == torch.tensor([1.5, -2.5, 300.7]).short().tolist()
    b = x.bfloat16()
    assert b.dtype == dtypes.bfloat16
    assert b.float().tolist() == torch.tensor([[1.5, -2.5, 70000.0]]).bfloat16().float().tolist()
    assert x.sequential([Tensor.relu, lambda t: t * 2]).tolist() == [[3.0, 0.0, 140000.0]]
    assert x.sequential([]) is x


# ---------------------------------------------------------------------------------------------------------------------
# randperm, multinomial


def test_randperm_is_a_reproducible_uniform_permutation():
    Tensor.manual_seed(3)
    p = Tensor.randperm(10)
    assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(10))
    Tensor.manual_seed(3)
    assert Tensor.randperm(10).tolist() == p.tolist()
    assert Tensor.randperm(5, dtype=dtypes.int64).dtype == dtypes.int64 and Tensor.randperm(0).shape == (0,)
    with pytest.raises(ValueError):
        Tensor.randperm(-1)
    # where 0 lands: each of 4 places about a quarter of 2000 draws (binomial sd ~19; bounds at ~5 sd)
    Tensor.manual_seed(0)
    firsts = np.bincount([Tensor.randperm(4).tolist().index(0) for _ in range(400)], minlength=4)
    assert ((firsts > 50) & (firsts < 150)).all(), firsts


def test_multinomial_with_and_without_replacement():
    Tensor.manual_seed(0)
    w = Tensor([1.0, 0.0, 3.0, 4.0])
    draws = w.multinomial(4000, replacement=True)
    assert draws.shape == (4000,) and draws.dtype == dtypes.int32
    freq = np.bincount(draws.numpy(), minlength=4) / 4000
    # expected 1/8, 0, 3/8, 1/2 (sd < 0.008)
    np.testing.assert_allclose(freq, [0.125, 0.0, 0.375, 0.5], atol=0.04)
    rows = Tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 5.0, 0.0, 1.0]]).multinomial(2)
    assert rows.shape == (2, 2)
    first, second = rows.tolist()
    assert len(set(first)) == 2 and 4 not in first and sorted(second) == [2, 4]
    # without replacement, more samples than positive weights: zero-weight categories come last, no repeats
    all_of_them = Tensor([0.0, 2.0, 0.0]).multinomial(3).tolist()
    assert sorted(all_of_them) == [0, 1, 2] and all_of_them[0] == 1
    # the first draw without replacement follows the weights
    firsts = np.bincount([Tensor([1.0, 3.0]).multinomial(2).tolist()[0] for _ in range(300)], minlength=2)
    assert 180 < firsts[1] < 270, firsts
    Tensor.manual_seed(5)
    a = w.multinomial(3).tolist()
    Tensor.manual_seed(5)
    assert w.multinomial(3).tolist() == a
    for bad, kw, match in [
        (Tensor([1.0, -1.0]), {}, "non-negative"),
        (Tensor([1.0, np.nan]), {}, "non-negative"),
        (Tensor([[1.0, 1.0], [0.0, 0.0]]), {}, "positive sum"),
        (Tensor([1.0, 1.0]), {"num_samples": 3}, "replacement"),
        (Tensor([1.0, 1.0]), {"num_samples": 0}, "positive"),
        (Tensor.ones(2, 2, 2), {}, "1-D or 2-D"),
    ]:
        with pytest.raises(ValueError, match=match):
            bad.multinomial(**kw)


def test_multinomial_edge_shapes_dtypes_and_torch_keywords_as_torch():
    # no rows: an empty (0, num_samples) draw, as torch's (uopkit raised numpy's "need at least one array to stack")
    for replacement in (True, False):
        ours = Tensor.ones(0, 4).multinomial(2, replacement)
        theirs = torch.multinomial(torch.ones(0, 4), 2, replacement)
        assert ours.shape == tuple(theirs.shape) and ours.dtype == dtypes.int32
    # what torch refuses raises here too, with the exception kind torch's RuntimeError maps to
    for weights, kind in [(np.ones((2, 0), np.float32), ValueError), (np.ones(0, np.float32), ValueError),
                          (np.array([1, 2]), TypeError), (np.array([True, False]), TypeError)]:  # fmt: skip
        with pytest.raises(RuntimeError):
            torch.multinomial(torch.tensor(weights), 1, True)
        with pytest.raises(kind, match="multinomial"):
            Tensor(weights).multinomial(1, True)
        with pytest.raises(RuntimeError):
            Tensor(weights).multinomial(1, True)
    # torch's keyword names: torch.multinomial(input=..., out=...), torch.bernoulli(input=...), torch.poisson(input=...)
    drawn = Tensor.multinomial(input=Tensor([0.0, 1.0, 0.0]), num_samples=3, replacement=True)
    theirs = torch.multinomial(input=torch.tensor([0.0, 1.0, 0.0]), num_samples=3, replacement=True)
    assert drawn.tolist() == theirs.tolist()
    out = Tensor.empty(2, dtype=dtypes.int64)
    assert Tensor.multinomial(Tensor([0.0, 0.0, 1.0]), 2, True, out=out) is out and out.tolist() == [2, 2]
    theirs = torch.bernoulli(input=torch.tensor([1.0, 0.0]))
    assert Tensor.bernoulli(input=Tensor([1.0, 0.0])).tolist() == theirs.tolist()
    assert Tensor.poisson(input=Tensor([0.0])).tolist() == torch.poisson(input=torch.tensor([0.0])).tolist()


# ---------------------------------------------------------------------------------------------------------------------
# nonzero


def test_nonzero_as_torch():
    x = np.array([[0.0, 1.5, 0.0], [np.nan, 0.0, -0.0], [2.0, 0.0, -1.0]], np.float32)
    for a in [x, x[0], np.zeros((2, 3), np.float32), np.array(3.0, np.float32), np.array(0.0, np.float32)]:
        ours, theirs = Tensor(a).nonzero(), torch.nonzero(torch.tensor(a))
        assert ours.dtype == dtypes.int32 and ours.shape == tuple(theirs.shape)
        assert ours.tolist() == theirs.tolist()
    assert Tensor([True, False, True]).nonzero().tolist() == [[0], [2]]


def test_unary_plus_clip_in_place_and_recomputed_scale_factors_as_torch():
    t = Tensor([1.0, -2.0])
    assert +t is t
    with pytest.raises(TypeError, match="bool"):
        +Tensor([True])
    w = Tensor([-1.0, 0.5, 5.0])
    assert w.clip_(0, 2) is w and w.tolist() == [0.0, 0.5, 2.0]
    # recompute_scale_factor: the output size from the scale, then positions mapped as for that size
    f = torch.nn.functional
    x = np.arange(30.0, dtype=np.float32).reshape(1, 1, 5, 6)
    for mode in ("nearest", "bilinear", "nearest-exact"):
        for sf in (1.3, (0.7, 2.5)):
            want = f.interpolate(torch.tensor(x), scale_factor=sf, mode=mode, recompute_scale_factor=True).numpy()
            got = Tensor(x).interpolate(scale_factor=sf, mode=mode, recompute_scale_factor=True).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{mode} {sf}")
    with pytest.raises(ValueError, match="recompute_scale_factor"):
        Tensor(x).interpolate(size=(3, 3), recompute_scale_factor=True)


def test_area_resize_to_nothing_and_gathers_from_a_0d_tensor_as_torch():
    f = torch.nn.functional
    x = np.arange(6.0, dtype=np.float32).reshape(1, 1, 2, 3)
    for sf in (0.4, (0.4, 1.0), 0.2):
        want = f.interpolate(torch.tensor(x), scale_factor=sf, mode="area")
        assert Tensor(x).interpolate(scale_factor=sf, mode="area").shape == tuple(want.shape)
    assert Tensor(x).adaptive_max_pool2d((0, 2)).shape == (1, 1, 0, 2)
    with pytest.raises(ShapeError, match="negative"):
        Tensor(x).adaptive_avg_pool2d((-1, 2))
    with pytest.raises(ValueError, match="positive"):
        Tensor(x).interpolate(scale_factor=0.2, mode="nearest")
    assert Tensor(5.0).gather(0, Tensor([0, 0])).tolist() == torch.tensor(5.0).gather(0, torch.tensor([0, 0])).tolist()
    assert Tensor(5.0).gather(0, Tensor(0)).tolist() == 5.0

"""schedule/launch_consts.py: a float32 constant whose number changes between realizes of the same graph becomes a
launch value of the kernels, so that the next numbers compile nothing (and stay exact)."""

import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.engine import realize
from uopkit.jit import TinyJit


def _compiled() -> int:
    return realize.stats["kernels_compiled"]


@pytest.fixture
def x_np() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32)


def test_a_changing_number_compiles_twice_then_replays(x_np):
    x = Tensor(x_np).realize()
    scales = [0.3, 1.7, -2.5, 1e-3, 7.0, 0.3, 123.25]
    before = _compiled()
    outs = [((x * s).tanh() + s).numpy() for s in scales]
    # the first number is a literal, the second makes it a launch value: nothing compiles after that
    assert _compiled() - before <= 2
    for s, out in zip(scales, outs, strict=True):
        want = np.tanh(x_np * np.float32(s)) + np.float32(s)
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=2e-7)
    hits = realize.stats["schedule_hits"]
    again = ((x * 0.5).tanh() + 0.5).numpy()
    assert realize.stats["schedule_hits"] == hits + 1
    np.testing.assert_allclose(again, np.tanh(x_np * np.float32(0.5)) + np.float32(0.5), rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("special", [-0.0, 0.0, math.inf, -math.inf, math.nan, 1e40, 2.0**-149])
def test_special_numbers_as_launch_values_are_exact(x_np, special):
    # signed zeros, infinities, NaN, a number beyond float32 (inf, as its literal) and the smallest subnormal: each
    # passed as its float32 bits
    x = Tensor(x_np).realize()
    (x * 0.75 + 1.5).numpy()
    (x * 0.5 + 2.5).numpy()
    got = (x * special + special).numpy()
    with np.errstate(all="ignore"):
        want = x_np * np.float32(special) + np.float32(special)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


def test_only_the_numbers_that_changed_become_launch_values(x_np):
    x = Tensor(x_np).realize()
    for b in (0.125, 0.375, 0.625):
        out = (x * 3.5 + b).numpy()
        np.testing.assert_array_equal(out, x_np * np.float32(3.5) + np.float32(b))
    entries = [e for e in realize.cached_schedules() if e.launch_consts]
    assert entries and all(len(e.launch_consts) == 1 for e in entries[-1:])
    # a change in the other number (a literal in the kernel) schedules again, with both as launch values
    before = _compiled()
    np.testing.assert_array_equal((x * 4.5 + 0.125).numpy(), x_np * np.float32(4.5) + np.float32(0.125))
    np.testing.assert_array_equal((x * 5.5 + 0.875).numpy(), x_np * np.float32(5.5) + np.float32(0.875))
    assert _compiled() - before <= 1


def test_windows_and_launch_values_move_together():
    # a batch window and a per-step number in one kernel: both launch values
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    d = Tensor(data).realize()
    before = _compiled()
    for i in range(6):
        c = 0.5 + i
        np.testing.assert_array_equal((d[i * 8 : i * 8 + 8] * c).numpy(), data[i * 8 : i * 8 + 8] * np.float32(c))
    assert _compiled() - before <= 3


def test_half_numbers_are_launch_values():
    # a float16 constant's number is exact in float32: it is passed so and cast (numbers a float16 holds exactly; others
    # compute in float32, another graph)
    h_np = np.linspace(-2, 2, 12, dtype=np.float16)
    h = Tensor(h_np)
    before = _compiled()
    for c in (0.5, 1.5, 3.25, -7.125, 65504.0, 2.0**-24):
        out = h * c
        assert out.dtype == dtypes.float16
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(out.numpy(), h_np * np.float16(c))
    assert _compiled() - before <= 2


@pytest.mark.parametrize("device", ["CPU", "EMULATOR"])
def test_int_numbers_are_launch_values(device):
    # a decode step's position in its mask (`arange(L) > pos`) or its `arange(pos, pos + 1)` compiled a kernel per
    # position: int32 numbers are launch values now, int64 ones two (their halves), exact at the ends of their ranges
    a32 = np.arange(-6, 6, dtype=np.int32)
    a64 = np.arange(-6, 6, dtype=np.int64)
    x32, x64 = Tensor(a32, device=device).realize(), Tensor(a64, device=device).realize()
    (x32 * 2 + 1).numpy(), (x64 * 2 + 1).numpy()
    before = _compiled()
    for c in (3, -7, 2**31 - 7, -(2**31) + 7, 0):
        np.testing.assert_array_equal((x32 * 2 + c).numpy(), a32 * 2 + np.int32(c))
    for c in (3, -7, 2**40 + 5, -(2**62) + 1, 2**32 - 1, -(2**32)):
        np.testing.assert_array_equal((x64 * 2 + c).numpy(), a64 * 2 + np.int64(c))
    assert _compiled() - before <= 2
    scores = Tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 12), device=device).realize()
    before = _compiled()
    for pos in range(3, 9):
        mask = Tensor.arange(12, device=device).reshape(1, 12) > pos
        got = scores.masked_fill(mask, -1e9).softmax(-1).numpy()
        want = np.where(np.arange(12) > pos, -1e9, scores.numpy())
        want = np.exp(want - want.max(-1, keepdims=True))
        np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert _compiled() - before <= 2


def test_gradients_and_a_jitted_step_with_changing_numbers(x_np):
    w = Tensor(x_np, requires_grad=True)
    for c in (0.25, 0.5, 0.75):
        w.grad = None
        (w * c).square().sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * np.float32(c) ** 2 * x_np, rtol=1e-6)

    @TinyJit
    def step(t: Tensor) -> Tensor:
        return (t * 1.25 + 0.5).realize()

    for _ in range(4):
        xs = np.random.default_rng(1).standard_normal(5).astype(np.float32)
        np.testing.assert_array_equal(step(Tensor(xs)).numpy(), xs * np.float32(1.25) + np.float32(0.5))


@pytest.mark.parametrize("device", ["CPU", "EMULATOR"])
def test_double_numbers_are_two_launch_values_and_exact(device):
    # a float64 number (an lr scheduler's learning rate for a float64 model) compiled a kernel per number: it is two
    # 32-bit launch values now, the halves of its bits, and exact (subnormals, signed zeros, NaN, beyond float32)
    d_np = np.linspace(-3, 3, 10)
    d = Tensor(d_np, device=device).realize()
    (d * 0.125).numpy()
    before = _compiled()
    for c in (1 / 3, -2.5e-310, 1e300, -0.0, math.inf, math.nan, 0.1, -(2.0**-1074)):
        got = (d * c).numpy()
        assert got.dtype == np.float64
        with np.errstate(all="ignore"):
            want = d_np * c
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    assert _compiled() - before <= 1


@pytest.mark.parametrize("device", ["CPU", "EMULATOR"])
def test_launch_values_inside_reduce_loops(device):
    # the value read once before a sum loop and used in every iteration (the reference emulator runs loops lane-wise:
    # the launch value, one scalar, must reach every lane)
    data = np.arange(30, dtype=np.float32).reshape(6, 5) / 10
    x = Tensor(data, device=device)
    for c in (0.5, 0.25, -1.5):
        got = ((x * c).exp() * (1 - c)).sum(1).numpy()
        want = (np.exp(data * np.float32(c)) * np.float32(1 - c)).sum(1)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _random_program(lib: str, x, y, shape_seed: int, consts: list[float]):  # noqa: ANN001, ANN202
    # a random chain of elementwise ops, reductions, softmax, pads and selects over x and y, its numbers from `consts`
    import random

    import torch

    rnd, numbers = random.Random(shape_seed), iter(consts)
    ours = lib == "uopkit"
    vals = [x, y]
    for _ in range(rnd.randint(2, 6)):
        a, b, k, c = rnd.choice(vals), rnd.choice(vals), rnd.randint(0, 8), next(numbers)
        if k == 0:
            v = (a - b) / (c * c + 1.0)
        elif k == 1:
            v = a.maximum(b * c) if ours else torch.maximum(a, b * c)
        elif k == 2:
            v = (a > c).where(a, b) if ours else torch.where(a > c, a, b)
        elif k == 3:
            v = (a * c).tanh()
        elif k == 4:
            v = a.sum(1, keepdim=True) * c + b
        elif k == 5:
            v = (a * c).softmax(-1) if ours else torch.softmax(a * c, -1)
        elif k == 6:
            v = (a.pad(((0, 0), (1, 0)), value=c) if ours else torch.nn.functional.pad(a, (1, 0), value=c))[:, :-1]
        elif k == 7:
            v = (a.max(axis=1, keepdim=True) if ours else a.amax(1, keepdim=True)) + b * c
        else:
            v = c - a * 0.5
        vals.append(v)
    return vals[-1]


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_with_new_numbers_match_torch(seed):
    import random

    import torch

    xs = np.random.default_rng(seed).standard_normal((5, 7)).astype(np.float32)
    ys = np.random.default_rng(seed + 100).standard_normal((5, 7)).astype(np.float32)
    x, y = Tensor(xs).realize(), Tensor(ys).realize()
    for rep in range(3):
        rnd = random.Random(seed * 10 + rep)
        consts = [round(rnd.uniform(-3, 3), 3) or 0.5 for _ in range(8)]
        got = _random_program("uopkit", x, y, seed, consts).numpy()
        want = _random_program("torch", torch.tensor(xs), torch.tensor(ys), seed, consts).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}, numbers {consts}")

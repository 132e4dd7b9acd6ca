"""Long reduces into few outputs split in two so that threads can share them (schedule/splitting.py)."""

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.engine.realize import method_cache
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.splitting import CPU_RULE, SUM_IN_ONE_PASS, SUM_SLICE, accurate_parts, split_parts

pytestmark = pytest.mark.skipif(not Device["CPU"].renderer.caps.has_threads, reason="the CPU renderer has no threads")


def _shapes(t: Tensor) -> list:
    return [item.ast.src[0].src[1].shape for item in create_schedule(kernelize_tensors([t]))]


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_split_parts_depend_on_shapes_only():
    # one output: 64 slices
    assert split_parts(1, 1 << 24) == 64
    # a few blocks of outputs (a 16x16 matmul over a long K): fewer slices
    assert split_parts(256, 1 << 16) == 16
    # every slice stays long
    for outputs, length in ((1, 1 << 22), (4, 1 << 20), (64, 1 << 16), (100, 3 * (1 << 15))):
        parts = split_parts(outputs, length)
        assert parts > 1 and length % parts == 0 and length // parts >= CPU_RULE.min_slice
    # small work, many outputs, or no divisor: left whole
    assert split_parts(1, 1 << 20) == 1
    assert split_parts(4096, 4096) == 1
    assert split_parts(1, 16_000_057) == 1


def test_full_sum_is_partial_sums_then_their_sum():
    x = _rand(1024, 4096)
    # the partial sums (the longer axis cut into its 4096 columns, each a sum of 1024 short enough to stay accurate,
    # shared among threads), then one kernel adds them up
    assert _shapes(Tensor(x).sum()) == [(1, 4096, 1), (1, 1, 1)]
    # a max is split for the threads alone: 64 slices (the second kernel stores max()'s result itself, after its
    # NaN check, `uopkit.tensor.nan_bits`)
    assert _shapes(Tensor(x).max()) == [(1, 64, 1), ()]
    assert _shapes(Tensor(x).sum(axis=1)) == [(1024, 1)]
    np.testing.assert_allclose(Tensor(x).sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize(
    "name",
    ["sum", "mean", "max", "min", "int_sum", "few_rows_sum", "small_matmul", "grad"],
)
def test_split_reduces_agree_with_numpy(name):
    x = _rand(1024, 4096)
    if name == "sum":
        got, want = Tensor(x).sum().numpy(), x.astype(np.float64).sum()
    elif name == "mean":
        got, want = Tensor(x).mean().numpy(), x.astype(np.float64).mean()
    elif name == "max":
        x[17, 900] = 50.0
        got, want = Tensor(x).max().numpy(), x.max()
    elif name == "min":
        got, want = Tensor(x).min().numpy(), x.min()
    elif name == "int_sum":
        xi = np.random.default_rng(1).integers(-1000, 1000, (1024, 4096)).astype(np.int32)
        got, want = Tensor(xi).sum().numpy(), xi.astype(np.int64).sum()
    elif name == "few_rows_sum":
        got, want = Tensor(x.reshape(4, -1)).sum(axis=1).numpy(), x.reshape(4, -1).astype(np.float64).sum(axis=1)
    elif name == "small_matmul":
        a, b = _rand(16, 32768, seed=2), _rand(32768, 8, seed=3)
        assert len(_shapes(Tensor(a) @ Tensor(b))) == 2
        got, want = (Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b
    else:
        t = Tensor(x, requires_grad=True)
        (t * t).sum().backward()
        got, want = t.grad.numpy(), 2 * x
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_nan_still_wins_a_split_max():
    x = _rand(1024, 4096)
    x[200, 3] = np.nan
    assert np.isnan(Tensor(x).max().numpy())
    # unsplit, over two axes (two nested max loops: a NaN found in one row must survive the next row's loop)
    y = _rand(8, 64)
    y[2, 5] = np.nan
    assert np.isnan(Tensor(y).max().numpy()) and np.isnan(Tensor(y).max(axis=(0, 1)).numpy())


def test_split_sum_gives_the_same_bits_at_any_thread_count(monkeypatch):
    x = _rand(1024, 4096)
    results = []
    for threads in (1, 2, 16):
        monkeypatch.setenv("UOPKIT_THREADS", str(threads))
        method_cache.clear()
        with Context(SCHEDULE_CACHE=0):
            results.append(Tensor(x).sum().numpy())
    method_cache.clear()
    assert results[0] == results[1] == results[2]


def test_accurate_parts_cut_long_sums_into_short_slices():
    # short enough in one pass: whole
    assert accurate_parts(4096, 4096) == 1 and accurate_parts(SUM_IN_ONE_PASS, SUM_IN_ONE_PASS) == 1
    # one long axis: slices of SUM_SLICE rows, or of a nearby row count that divides it
    assert accurate_parts(1 << 20, 1 << 20) == (1 << 20) // SUM_SLICE
    assert 1_000_000 % (1_000_000 // accurate_parts(1_000_000, 1_000_000)) == 0
    # a prime length: slices of SUM_SLICE rows, the rest apart
    assert accurate_parts(100_003, 100_003) == 100_003 // SUM_SLICE
    # rows longer than a slice: one row per slice
    assert accurate_parts(64, 64 * 4096) == 64


@pytest.mark.parametrize(
    "shape, axis",
    [((1_000_000,), None), ((100_003, 3), 0), ((3, 100_003), 1), ((64, 32, 32, 32), (0, 2, 3)), ((2, 3, 40_000), -1)],
)
def test_long_float_sums_stay_accurate(shape, axis):
    # one running float32 sum of a million 0.1s drifted by 6e-4 relative (torch: 6e-8); summed in slices of about
    # SUM_SLICE it stays within a few 1e-6 (prime lengths keep their last rows apart, which are added back). A constant
    # is the hard case: every rounding of a running sum goes the same way
    x = np.full(shape, 0.1, np.float32)
    want = x.astype(np.float64).sum(axis=axis)
    np.testing.assert_allclose(Tensor(x).sum(axis=axis).numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(Tensor(x).mean(axis=axis).numpy(), x.astype(np.float64).mean(axis=axis), rtol=1e-5)


def test_the_rows_no_slice_count_divides_are_summed_apart_and_added():
    x = _rand(100_003, 3, seed=6)
    with Context(SCHEDULE_CACHE=0):
        # the partials of the first 97 slices (1030 rows each), then their sum with the last 93 rows added
        assert _shapes(Tensor(x).sum(axis=0))[0] == (97, 1, 3)
    t = Tensor(x, requires_grad=True)
    (t.sum(axis=0) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.broadcast_to(np.array([1.0, 2.0, 3.0], np.float32), x.shape))
    np.testing.assert_allclose(Tensor(x).sum(axis=0).numpy(), x.astype(np.float64).sum(axis=0), rtol=1e-5)


def test_sums_of_products_and_int_sums_are_not_cut_for_accuracy():
    # a matmul's long K would need a copy of the output per slice: left to the thread split's few slices
    a, b = _rand(64, 65536, seed=7), _rand(65536, 64, seed=8)
    long_k, short_k = _shapes(Tensor(a) @ Tensor(b)), _shapes(Tensor(a[:, :4096]) @ Tensor(b[:4096]))
    assert len(long_k) == len(short_k) and long_k[-1] == short_k[-1] == (64, 64, 1)
    xi = np.ones((4, 65536), np.int32)
    assert len(_shapes(Tensor(xi).sum(axis=1))) == 1 and Tensor(xi).sum(axis=1).tolist() == [65536] * 4


def test_a_sum_of_products_under_no_grad_is_left_whole_as_with_gradients():
    # no_grad wraps the product in a DETACH (cut from the gradient): it was taken for a plain sum and cut into slices
    # for accuracy, a copy of the 2048 outputs per slice, and summed in another order than with gradients on
    import uopkit

    u, v = Tensor(_rand(1, 32768, seed=3), requires_grad=True), Tensor(_rand(2048, 1, seed=4))
    with_grad = (u * v).sum(axis=1)
    with uopkit.no_grad():
        without = (u * v).sum(axis=1)
    assert _shapes(without) == _shapes(with_grad) == [(2048, 1)]
    np.testing.assert_array_equal(without.numpy(), with_grad.numpy())


def test_indexing_picks_are_never_cut():
    # x[i], gather and an embedding lookup sum where(index == iota, x, 0) over a long axis: left whole, that sum is
    # one load at the index in codegen (cut into slices it would read every position: seconds for a 1e5 gather)
    n = 200_000
    x, rows = Tensor(_rand(n)), Tensor(_rand(n, 4))
    idx = np.random.default_rng(1).integers(0, n, 3000).astype(np.int32)
    for picked in (x[Tensor(5)], x.gather(0, Tensor(idx)), rows[Tensor(idx[:8])]):
        items = create_schedule(kernelize_tensors([picked]))
        assert len(items) == 1, [item.ast for item in items]
    np.testing.assert_array_equal(x.gather(0, Tensor(idx)).numpy(), x.numpy()[idx])
    np.testing.assert_array_equal(rows[Tensor(idx[:8])].numpy(), rows.numpy()[idx[:8]])
    assert x[Tensor(5)].item() == x.numpy()[5]


def test_sums_of_products_into_few_outputs_stay_accurate():
    # a squared error's sum, a dot product, a scaled sum: an elementwise product in front of a long sum into few
    # outputs is cut into slices too (one running float32 sum: 1e-6 relative, 10-100x torch's error)
    a = np.random.default_rng(0).random((4, 8, 64, 64)).astype(np.float32) + 0.5
    b = np.random.default_rng(1).random((4, 8, 64, 64)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    A, B = Tensor(a), Tensor(b)
    cases = [
        (A.square().sum(), (a64**2).sum()),
        (A.mse_loss(B), ((a64 - b64) ** 2).mean()),
        (A.square().sum((1, 2, 3)), (a64**2).sum((1, 2, 3))),
        ((A * 2).sum(), (a64 * 2).sum()),
        ((A.reshape(-1) * B.reshape(-1)).sum(), (a64 * b64).sum()),
    ]
    for i, (got, want) in enumerate(cases):
        np.testing.assert_allclose(got.numpy(), want, rtol=4e-7, err_msg=str(i))

"""Scatters by sorting (tensor/segments.py): large scatter, scatter_reduce, index_add and index writes, and the
gradients of large picks, as sorted segments instead of one-hot masks (on the CPU a large sum is added in place
instead: `uopkit.codegen.scatter`); searchsorted as PyTorch's binary search. Each form is checked against PyTorch,
the sorted one by lowering its size threshold."""

from __future__ import annotations

import numpy as np
import pytest

import uopkit.tensor.placing as placing
import uopkit.tensor.segments as segments
from uopkit import Tensor, dtypes

torch = pytest.importorskip("torch")

_DTYPES = [(np.float32, dtypes.float32), (np.int32, dtypes.int32), (np.float64, dtypes.float64)]


@pytest.fixture(params=["one-hot", "sorted", "written one by one"])
def form(request, monkeypatch):
    # "one-hot" and "sorted": the forms a GPU-style device builds; the CPU's scatters are its writes, one by one
    # (`segments.writes_one_by_one`, `uopkit.codegen.scatter`)
    if request.param != "one-hot":
        monkeypatch.setattr(segments, "SCATTER_BY_SORTING", 1)
    if request.param != "written one by one":
        monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    return request.param


def _same(ours: Tensor, theirs, rtol: float = 1e-6) -> None:
    expected = theirs.detach().numpy()
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours.numpy().astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("np_dtype,dtype", _DTYPES)
def test_scatters_agree_with_torch(form, np_dtype, dtype):
    rng = np.random.default_rng(5)
    base = rng.integers(-5, 5, (4, 6, 5)).astype(np_dtype)
    index = rng.integers(0, 6, (3, 9, 4))
    src = rng.integers(-9, 9, (3, 9, 5)).astype(np_dtype)
    for reduce in ("sum", "mean", "amax"):
        for include_self in (True, False):
            ours = Tensor(base).scatter_reduce(1, Tensor(index), Tensor(src), reduce, include_self=include_self)
            theirs = torch.tensor(base).scatter_reduce(
                1, torch.tensor(index), torch.tensor(src), reduce, include_self=include_self
            )
            assert ours.dtype == dtype
            _same(ours, theirs)
    # repeated targets: the last write in index order wins, as PyTorch's CPU scatter
    index0 = rng.integers(0, 4, (3, 6, 5))
    _same(
        Tensor(base).scatter(0, Tensor(index0), Tensor(src)),
        torch.tensor(base).scatter(0, torch.tensor(index0), torch.tensor(src)),
    )
    picks, rows = rng.integers(0, 6, 7), rng.integers(-9, 9, (4, 7, 5)).astype(np_dtype)
    _same(
        Tensor(base).index_add(1, Tensor(picks), Tensor(rows)),
        torch.tensor(base).index_add(1, torch.tensor(picks), torch.tensor(rows)),
    )
    ours_t, theirs_t = Tensor(base.copy()), torch.tensor(base.copy())
    at, values = rng.integers(0, 6, 10), np.arange(50).reshape(10, 5).astype(np_dtype)
    ours_t[:, Tensor(at)] = Tensor(values)
    theirs_t[:, torch.tensor(at)] = torch.tensor(values)
    _same(ours_t, theirs_t)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_gradients_agree_with_torch(form, reduce, include_self):
    rng = np.random.default_rng(6)
    base, src = rng.standard_normal((4, 6, 5)).astype(np.float32), rng.standard_normal((3, 9, 4)).astype(np.float32)
    index, weight = rng.integers(0, 6, (3, 9, 4)), rng.standard_normal((4, 6, 5)).astype(np.float32)
    a, b = Tensor(base, requires_grad=True), Tensor(src, requires_grad=True)
    c, d = torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)
    (a.scatter_reduce(1, Tensor(index), b, reduce, include_self=include_self) * Tensor(weight)).sum().backward()
    (
        c.scatter_reduce(1, torch.tensor(index), d, reduce, include_self=include_self) * torch.tensor(weight)
    ).sum().backward()
    _same(a.grad, c.grad, 1e-5)
    _same(b.grad, d.grad, 1e-5)


def test_index_write_gradients_agree_with_torch(form):
    rng = np.random.default_rng(7)
    base, weight = rng.standard_normal((4, 6, 5)).astype(np.float32), rng.standard_normal((4, 6, 5)).astype(np.float32)
    a, v = Tensor(base, requires_grad=True), Tensor(np.full((4, 3, 5), 2.0, np.float32), requires_grad=True)
    c, w = torch.tensor(base, requires_grad=True), torch.tensor(np.full((4, 3, 5), 2.0, np.float32), requires_grad=True)
    a2, c2, at = a * 1, c * 1, np.array([1, 4, 1])
    a2[:, Tensor(at)] = v
    c2[:, torch.tensor(at)] = w
    (a2 * Tensor(weight)).sum().backward()
    (c2 * torch.tensor(weight)).sum().backward()
    _same(a.grad, c.grad)
    _same(v.grad, w.grad)


@pytest.mark.parametrize("case", range(5))
def test_pick_gradients_agree_with_torch(form, case):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    picks = [
        lambda t, I: t[I(np.array([1, 1, 4, -1]))],
        lambda t, I: t[:, I(np.array([[0, 5], [5, 5]]))],
        lambda t, I: t[I(np.array([0, 0, 3])), :, I(np.array([6, 6, -7]))],
        lambda t, I: t.gather(2, I(np.array([[[0, 1, 1, 6, 6, 6]] * 4] * 5))),
        lambda t, I: t[I(np.array([1, 2])), 2:5, I(np.array([0, 0]))],
    ]
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = picks[case](ours, Tensor), picks[case](theirs, torch.tensor)
    _same(out, ref)
    weight = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    (out * Tensor(weight)).sum().backward()
    (ref * torch.tensor(weight)).sum().backward()
    _same(ours.grad, theirs.grad, 1e-5)


def test_large_scatters_are_sorted_and_right(monkeypatch):
    # 3e4 writes into 3e5 targets: 9e9 one-hot compares (seconds); sorted, a few dozen small kernels (on a GPU-style
    # device: the CPU adds a sum's writes one by one, tests/test_scatter.py)
    monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    rng = np.random.default_rng(9)
    n, m = 300_000, 30_000
    keys, vals = rng.integers(0, n, m), rng.standard_normal(m).astype(np.float32)
    assert n * m >= segments.SCATTER_BY_SORTING
    called = []
    original = segments.scatter_rows

    def spy(*args, **kwargs):
        called.append(args[3])
        return original(*args, **kwargs)

    segments.scatter_rows = spy
    try:
        total = Tensor.zeros(n).scatter_add(0, Tensor(keys), Tensor(vals))
        expected = np.zeros(n)
        np.add.at(expected, keys, vals.astype(np.float64))
        np.testing.assert_allclose(total.numpy(), expected, rtol=1e-6, atol=1e-6)
        written = Tensor.zeros(n).contiguous().realize()
        written[Tensor(keys)] = Tensor(vals)
        last = np.zeros(n, np.float32)
        last[keys] = vals  # numpy's assignment: the last write wins, as PyTorch's CPU
        np.testing.assert_array_equal(written.numpy(), last)
    finally:
        segments.scatter_rows = original
    assert called == ["sum", "replace"]


@pytest.mark.parametrize("halving", [False, True])
def test_searchsorted_follows_torchs_search_through_nans(monkeypatch, halving):
    if halving:
        monkeypatch.setattr(placing, "SEARCH_BY_HALVING", 1)
    rng = np.random.default_rng(4)
    for trial in range(12):
        m = int(rng.integers(1, 30))
        seq = np.sort(rng.integers(0, 8, m).astype(np.float32))
        if trial % 2:
            seq[-int(rng.integers(1, m + 1)) :] = np.nan  # torch.sort leaves NaNs last
        values = rng.integers(-1, 10, (3, 4)).astype(np.float32)
        values[0, 0] = np.nan
        for right in (False, True):
            ours = Tensor(seq).searchsorted(Tensor(values), right=right).numpy()
            theirs = torch.searchsorted(torch.tensor(seq), torch.tensor(values), right=right).numpy()
            np.testing.assert_array_equal(ours, theirs)
        rows, row_values = np.sort(rng.integers(0, 8, (3, m)), axis=1), rng.integers(-1, 10, (3, 5))
        ours = Tensor(rows).searchsorted(Tensor(row_values), side="right").numpy()
        np.testing.assert_array_equal(
            ours, torch.searchsorted(torch.tensor(rows), torch.tensor(row_values), side="right").numpy()
        )


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_extremes_share_their_gradient_among_ties_as_torch(form, reduce, include_self):
    # small integers: many ties; a NaN in each input (it wins, and its target's gradient is NaN, as torch's)
    rng = np.random.default_rng(11)
    for with_nan in (False, True):
        base = rng.integers(-3, 3, (4, 6, 5)).astype(np.float32)
        src = rng.integers(-3, 3, (3, 9, 4)).astype(np.float32)
        index, weight = rng.integers(0, 6, (3, 9, 4)), rng.standard_normal((4, 6, 5)).astype(np.float32)
        if with_nan:
            base[0, 0, 0] = src[1, 1, 1] = np.nan
        a, b = Tensor(base, requires_grad=True), Tensor(src, requires_grad=True)
        c, d = torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)
        out = a.scatter_reduce(1, Tensor(index), b, reduce, include_self=include_self)
        ref = c.scatter_reduce(1, torch.tensor(index), d, reduce, include_self=include_self)
        _same(out, ref)
        (out * Tensor(weight)).sum().backward()
        (ref * torch.tensor(weight)).sum().backward()
        _same(a.grad, c.grad, 1e-5)
        _same(b.grad, d.grad, 1e-5)


def test_isin_and_bincount_agree_with_torch(form):
    rng = np.random.default_rng(12)
    values, tests = rng.integers(0, 20, (4, 7)).astype(np.float32), rng.integers(5, 30, 13).astype(np.float32)
    values[0, 0] = tests[3] = np.nan  # NaN equals nothing
    for invert in (False, True):
        ours = Tensor(values).isin(Tensor(tests), invert=invert).numpy()
        np.testing.assert_array_equal(
            ours, torch.isin(torch.tensor(values), torch.tensor(tests), invert=invert).numpy()
        )
    # mixed dtypes compare in their common one
    ints = rng.integers(0, 10, 9)
    np.testing.assert_array_equal(Tensor(ints).isin(Tensor([2.5, 3.0, 7.0])).numpy(), np.isin(ints, [3, 7]))
    counted, weights = rng.integers(0, 12, 40), rng.standard_normal(40).astype(np.float32)
    assert (
        Tensor(counted).bincount(minlength=15).tolist() == torch.bincount(torch.tensor(counted), minlength=15).tolist()
    )
    np.testing.assert_allclose(
        Tensor(counted).bincount(Tensor(weights)).numpy(),
        torch.bincount(torch.tensor(counted), torch.tensor(weights)).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )


def test_half_float_scatter_sums_round_once_as_torch(form):
    # a running float16 sum of 2000 values in [0, 1) drifted by 5 ulps; torch sums in float32 and rounds once
    rng = np.random.default_rng(13)
    index, src = rng.integers(0, 10, 2000), rng.random(2000).astype(np.float16)
    ours = Tensor.zeros(10, dtype=dtypes.float16).scatter_add(0, Tensor(index), Tensor(src))
    theirs = torch.zeros(10, dtype=torch.float16).scatter_add(0, torch.tensor(index), torch.tensor(src))
    assert ours.dtype == dtypes.float16
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())

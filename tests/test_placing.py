"""The *_scatter family and the put-like methods (tensor/placing.py) against torch: values, dtypes, gradients, the
in-place variants (also through views) and the errors."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes
from uopkit.tensor.support import ArgumentError, DTypeError, ShapeError

RNG = np.random.default_rng(5)


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _same(ours: Tensor, theirs: torch.Tensor) -> None:
    """The same shape, dtype (uopkit's int32 for torch's int64) and values."""
    assert ours.shape == tuple(theirs.shape), (ours.shape, tuple(theirs.shape))
    want = theirs.detach().numpy()
    got = ours.numpy()
    assert got.dtype == want.dtype or (got.dtype == np.int32 and want.dtype == np.int64), (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _check_grad(fn: Callable, torch_fn: Callable, arrays: list[np.ndarray]) -> None:
    """Values and the gradients of sum(out * random upstream) for every input against torch autograd."""
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), torch_fn(*theirs)
    _same(out, ref)
    upstream = _randn(*out.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        assert t.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"gradient {i}")


def _index(*values) -> tuple[Tensor, torch.Tensor]:
    return Tensor(np.array(values, np.int32)), torch.tensor(values)


# ---------------------------------------------------------------------------------------------------------------------
# slice_scatter, select_scatter, diagonal_scatter


def test_scatter_family_values_dims_and_casts_as_torch():
    x = _randn(3, 5, 4)
    ux, tx = Tensor(x), torch.from_numpy(x)
    cases = [
        ("slice_scatter", (3, 2, 4), dict(dim=1, start=1, end=None, step=2)),
        ("slice_scatter", (3, 2, 4), dict(dim=-2, start=-3, end=10, step=2)),
        ("slice_scatter", (3, 5, 1), dict(dim=2, start=3, end=4)),
        ("slice_scatter", (3, 0, 4), dict(dim=1, start=4, end=1)),
        ("slice_scatter", (1, 5, 4), dict(start=2)),
        ("select_scatter", (3, 4), dict(dim=1, index=-1)),
        ("select_scatter", (5, 4), dict(dim=0, index=2)),
        ("diagonal_scatter", (4, 3), dict()),
        ("diagonal_scatter", (5, 2), dict(offset=1, dim1=-1, dim2=0)),
        ("diagonal_scatter", (3, 2), dict(offset=-3, dim1=1, dim2=2)),
        ("diagonal_scatter", (4, 0), dict(offset=7)),
    ]
    for name, src_shape, kwargs in cases:
        src = _randn(*src_shape)
        _same(getattr(ux, name)(Tensor(src), **kwargs), getattr(tx, name)(torch.from_numpy(src), **kwargs))
    # src is cast to self's dtype, as torch's (a float src into an int tensor truncates)
    m = np.arange(12, dtype=np.int32).reshape(3, 4)
    um, tm = Tensor(m), torch.from_numpy(m)
    src = np.array([1.7, -2.5, 3.2], np.float32)
    _same(um.diagonal_scatter(Tensor(src)), tm.diagonal_scatter(torch.from_numpy(src)))
    _same(um.select_scatter(Tensor(src), 1, 2), tm.select_scatter(torch.from_numpy(src), 1, 2))
    flags = np.array([True, False, True])
    _same(
        Tensor(m > 5).slice_scatter(Tensor(flags[:2].reshape(1, 2).repeat(3, 0)), 1, 0, 4, 3),
        torch.from_numpy(m > 5).slice_scatter(torch.from_numpy(flags[:2].reshape(1, 2).repeat(3, 0)), 1, 0, 4, 3),
    )
    # a NaN or inf in src stays on its position (selects, no products)
    special = np.array([np.nan, np.inf, -0.0], np.float32)
    _same(
        Tensor(x[0, :3]).diagonal_scatter(Tensor(special)),
        torch.from_numpy(x[0, :3]).diagonal_scatter(torch.tensor(special)),
    )
    # out of place: self is unchanged, and the result is a tensor of its own
    base = Tensor(x).realize()
    out = base.slice_scatter(Tensor.zeros(3, 5, 2), 2, 0, 2)
    out.add_(1)
    np.testing.assert_array_equal(base.numpy(), x)


def test_scatter_family_gradients_as_torch():
    _check_grad(
        lambda a, s: a.slice_scatter(s * 2, 1, 1, None, 2),
        lambda a, s: a.slice_scatter(s * 2, 1, 1, None, 2),
        [_randn(2, 5), _randn(2, 2)],
    )
    _check_grad(
        lambda a, s: a.select_scatter(s, -1, 0).exp(),
        lambda a, s: a.select_scatter(s, -1, 0).exp(),
        [_randn(3, 2), _randn(3)],
    )
    _check_grad(
        lambda a, s: a.diagonal_scatter(s, -1, 2, 0),
        lambda a, s: a.diagonal_scatter(s, -1, 2, 0),
        [_randn(3, 2, 4), _randn(2, 3)],
    )


def test_scatter_family_errors_name_the_op_and_shapes():
    x = Tensor.zeros(3, 4)
    with pytest.raises(ShapeError, match=r"slice_scatter: src has shape \(3, 3\).*\(3, 2\)"):
        x.slice_scatter(Tensor.ones(3, 3), 1, 1, None, 2)
    with pytest.raises(ArgumentError, match="step must be positive"):
        x.slice_scatter(Tensor.ones(3, 2), 1, step=0)
    with pytest.raises(ShapeError, match="0-d"):
        Tensor(1.0).slice_scatter(Tensor(2.0))
    with pytest.raises(IndexError, match="select_scatter: index 3 is out of range for dim 0 of size 3"):
        x.select_scatter(Tensor.ones(4), 0, 3)
    with pytest.raises(ShapeError, match=r"select_scatter: src has shape \(3, 1\)"):
        x.select_scatter(Tensor.ones(3, 1), 1, 0)
    with pytest.raises(ShapeError, match=r"diagonal_scatter: src has shape \(2,\).*\(3,\)"):
        x.diagonal_scatter(Tensor.ones(2))
    with pytest.raises(ShapeError, match="same axis"):
        x.diagonal_scatter(Tensor.ones(3), 0, 1, -1)
    with pytest.raises(IndexError, match="diagonal_scatter: axis 2 is out of range"):
        x.diagonal_scatter(Tensor.ones(3), 0, 0, 2)
    with pytest.raises(TypeError, match="src must be a Tensor"):
        x.select_scatter([1.0, 2.0, 3.0, 4.0], 0, 0)


# ---------------------------------------------------------------------------------------------------------------------
# index_put and put


def test_index_put_indices_masks_broadcasting_and_accumulate_as_torch():
    x = _randn(3, 4)
    ux, tx = Tensor(x), torch.from_numpy(x)
    rows, trows = _index(0, 2, 0)
    cols, tcols = _index(1, -1, 1)
    vals = np.array([5.0, 6.0, 7.0], np.float32)
    for accumulate in (False, True):
        _same(
            ux.index_put((rows, cols), Tensor(vals), accumulate),
            tx.index_put((trows, tcols), torch.from_numpy(vals), accumulate),
        )
        # one index: whole rows, a value broadcast along them
        _same(
            ux.index_put((rows,), Tensor(vals[:1]), accumulate=accumulate),
            tx.index_put((trows,), torch.from_numpy(vals[:1]), accumulate=accumulate),
        )
    # a bool mask (of one dim, or of all), and 2-D index tensors
    mask = np.array([True, False, True])
    row = _randn(4)
    _same(
        ux.index_put((Tensor(mask),), Tensor(row), accumulate=True),
        tx.index_put((torch.from_numpy(mask),), torch.from_numpy(row), accumulate=True),
    )
    _same(ux.index_put((Tensor(x > 0),), Tensor(2.0)), tx.index_put((torch.from_numpy(x > 0),), torch.tensor(2.0)))
    grid, tgrid = _index([0, 1], [2, 1])
    g = _randn(2, 2, 1)
    _same(ux.index_put((grid,), Tensor(g)), tx.index_put((tgrid,), torch.from_numpy(g)))
    # integer and bool tensors: an accumulate sums (bool: or)
    m = np.arange(6, dtype=np.int32).reshape(2, 3)
    i, ti = _index(1, 1, 0)
    j, tj = _index(2, 2, 0)
    mv = np.array([10, 20, 30], np.int32)
    _same(
        Tensor(m).index_put((i, j), Tensor(mv), accumulate=True),
        torch.from_numpy(m).index_put((ti, tj), torch.from_numpy(mv), accumulate=True),
    )
    b = np.zeros((2, 3), bool)
    bv = np.array([True, False, False])
    _same(
        Tensor(b).index_put((i, j), Tensor(bv), accumulate=True),
        torch.from_numpy(b).index_put((ti, tj), torch.from_numpy(bv), accumulate=True),
    )


def test_index_put_and_put_gradients_as_torch():
    rows, trows = _index(2, 0, 2)
    cols, tcols = _index(1, 1, 1)
    for accumulate in (False, True):
        _check_grad(
            lambda a, v, acc=accumulate: a.index_put((rows, cols), v * 3, acc),
            lambda a, v, acc=accumulate: a.index_put((trows, tcols), v * 3, acc),
            [_randn(3, 2), _randn(3)],
        )
    flat, tflat = _index([-1, 0], [4, 0])
    _check_grad(
        lambda a, s: a.put(flat, s, accumulate=True),
        lambda a, s: a.put(tflat, s, accumulate=True),
        [_randn(2, 3), _randn(2, 2)],
    )


def test_put_negative_indices_repeats_and_shapes_as_torch():
    x = _randn(2, 3)
    ux, tx = Tensor(x), torch.from_numpy(x)
    idx, tidx = _index([0, -1], [3, 0])
    src = _randn(4)
    for accumulate in (False, True):
        _same(ux.put(idx, Tensor(src), accumulate), tx.put(tidx, torch.from_numpy(src), accumulate=accumulate))
    # a 0-d tensor, an index of another int dtype, an empty index
    _same(Tensor(3.0).put(Tensor([0]), Tensor([5.0])), torch.tensor(3.0).put(torch.tensor([0]), torch.tensor([5.0])))
    _same(ux.put(Tensor(np.array([-6], np.int8)), Tensor([1.0])), tx.put(torch.tensor([-6]), torch.tensor([1.0])))
    empty = Tensor(np.zeros(0, np.int32))
    _same(ux.put(empty, Tensor.zeros(0)), tx.put(torch.zeros(0, dtype=torch.int64), torch.zeros(0)))


def test_index_put_and_put_errors_name_the_op_index_and_shapes():
    x = Tensor.zeros(3, 4)
    with pytest.raises(IndexError, match="index_put: index 5 is out of bounds for axis 0 with size 3"):
        x.index_put((Tensor([0, 5]),), Tensor.ones(4))
    with pytest.raises(DTypeError, match="index_put: values is dtypes.int but the tensor is dtypes.float"):
        x.index_put((Tensor([0]),), Tensor([1, 2, 3, 4]))
    with pytest.raises(
        ShapeError, match=r"values of shape \(1, 2, 4\) can't be broadcast to the indexed shape \(2, 4\)"
    ):
        x.index_put((Tensor([0, 1]),), Tensor.ones(1, 2, 4))
    with pytest.raises(TypeError, match="tuple of index tensors"):
        x.index_put(Tensor([0, 1]), Tensor.ones(4))
    with pytest.raises(TypeError, match=r"indices\[0\] must be a Tensor"):
        x.index_put(([0, 1],), Tensor.ones(4))
    with pytest.raises(IndexError, match="integer or bool"):
        x.index_put((Tensor([0.0]),), Tensor.ones(4))
    flat = Tensor.zeros(2, 3)
    with pytest.raises(IndexError, match=r"put: index 6 is out of range for a tensor of 6 elements \(shape \(2, 3\)\)"):
        flat.put(Tensor([0, 6]), Tensor([1.0, 2.0]))
    # an index computed on the device is read back for the check
    with pytest.raises(IndexError, match="put: index -7 is out of range"):
        flat.put(Tensor([1, 2]) - 8, Tensor([1.0, 2.0]))
    with pytest.raises(IndexError, match="put: index and source must have as many elements, got 2 .* 3"):
        flat.put(Tensor([0, 1]), Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(DTypeError, match="put: source is dtypes.int"):
        flat.put(Tensor([0, 1]), Tensor([1, 2]))
    with pytest.raises(DTypeError, match="put: index must be an integer tensor"):
        flat.put(Tensor([0.0]), Tensor([1.0]))
    with pytest.raises(IndexError, match="empty tensor"):
        Tensor.zeros(0).put(Tensor([0]), Tensor([1.0]))


# ---------------------------------------------------------------------------------------------------------------------
# masked_scatter


def test_masked_scatter_values_broadcasting_gradient_and_errors_as_torch():
    mask = np.array([[True, False, True], [False, True, True]])
    x, src = _randn(2, 3), _randn(7)
    _same(
        Tensor(x).masked_scatter(Tensor(mask), Tensor(src)),
        torch.from_numpy(x).masked_scatter(torch.from_numpy(mask), torch.from_numpy(src)),
    )
    # the mask and self broadcast together (out of place), source of any shape
    _same(
        Tensor(x[:1]).masked_scatter(Tensor(mask[:, :1]), Tensor(src[:6].reshape(3, 2))),
        torch.from_numpy(x[:1]).masked_scatter(torch.from_numpy(mask[:, :1]), torch.from_numpy(src[:6].reshape(3, 2))),
    )
    # no True position: source may be empty
    none = np.zeros((2, 3), bool)
    _same(
        Tensor(x).masked_scatter(Tensor(none), Tensor.zeros(0)),
        torch.from_numpy(x).masked_scatter(torch.from_numpy(none), torch.zeros(0)),
    )
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    _same(
        Tensor(ints).masked_scatter(Tensor(mask), Tensor(-ints)),
        torch.from_numpy(ints).masked_scatter(torch.from_numpy(mask), torch.from_numpy(-ints)),
    )
    tmask = torch.from_numpy(mask)
    _check_grad(
        lambda a, s: a.masked_scatter(Tensor(mask), s).sin(),
        lambda a, s: a.masked_scatter(tmask, s).sin(),
        [x, src],
    )
    with pytest.raises(ShapeError, match=r"masked_scatter: the mask \(shape \(2, 3\)\) has 4 True positions .* only 3"):
        Tensor(x).masked_scatter(Tensor(mask), Tensor(src[:3]))
    with pytest.raises(DTypeError, match="masked_scatter: mask must be a bool tensor, got dtypes.int"):
        Tensor(x).masked_scatter(Tensor(ints), Tensor(src))
    with pytest.raises(DTypeError, match="masked_scatter: source is dtypes.int but the tensor is dtypes.float"):
        Tensor(x).masked_scatter(Tensor(mask), Tensor(ints))
    with pytest.raises(ShapeError, match="can't be broadcast"):
        Tensor(x).masked_scatter(Tensor(mask[:, :2]), Tensor(src))
    with pytest.raises(ShapeError, match=r"masked_scatter_: mask of shape \(2, 1\) doesn't broadcast"):
        Tensor(x[:1]).masked_scatter_(Tensor(mask[:, :1]), Tensor(src))


# ---------------------------------------------------------------------------------------------------------------------
# index_reduce


@pytest.mark.filterwarnings("ignore:index_reduce.. is in beta")
def test_an_int_literal_source_goes_into_an_int64_tensor_as_torchs():
    # torch's `torch.tensor([7, 9])` is int64, ours int32: the put-like methods refused it for an int64 tensor, where
    # index_add, index_copy and the scatters cast it. A source that widens without loss is taken; a narrowing one and
    # another kind are still refused, as torch's
    index, values = [0, 3, 3], [7, -9, 2**20]
    ux, tx = Tensor.zeros(5, dtype=dtypes.int64), torch.zeros(5, dtype=torch.int64)
    mask = [1, 0, 1, 0, 1]
    for op in (
        lambda x, i, v: x.index_put((i,), v),
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda x, i, v: x.put(i, v, accumulate=True),
        lambda x, i, v: x.index_reduce(0, i, v, "amax", include_self=False),
        lambda x, i, v: x.masked_scatter(i.new_tensor(mask) != 0, v),
    ):
        ours = op(ux.clone(), Tensor(index), Tensor(values))
        assert ours.dtype == dtypes.int64
        np.testing.assert_array_equal(ours.numpy(), op(tx.clone(), torch.tensor(index), torch.tensor(values)).numpy())
    # in place too, and a 0-d literal
    got = ux.clone()
    got.index_put_((Tensor(index),), Tensor(1), accumulate=True)
    want = tx.clone().index_put_((torch.tensor(index),), torch.tensor(1), accumulate=True)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(DTypeError, match="index_put: values is dtypes.long but the tensor is dtypes.int"):
        Tensor.zeros(5, dtype=dtypes.int32).index_put((Tensor(index),), Tensor(values, dtype=dtypes.int64))
    with pytest.raises(DTypeError, match="put: source is dtypes.float but the tensor is dtypes.long"):
        ux.put(Tensor(index), Tensor([1.0, 2.0, 3.0]))


def test_index_reduce_every_reduction_dtype_and_gradient_as_torch():
    x = _randn(3, 2)
    src = _randn(4, 2)
    idx, tidx = _index(0, 2, 0, 0)
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            _check_grad(
                lambda a, s, r=reduce, inc=include_self: a.index_reduce(0, idx, s, r, include_self=inc),
                lambda a, s, r=reduce, inc=include_self: a.index_reduce(0, tidx, s, r, include_self=inc),
                [x, src],
            )
    # ties share the gradient of a max as torch's, and a product with zeros gets torch's gradient
    pair, tpair = _index(0, 0)
    base = np.array([[1.0, 5.0], [7.0, 0.0]], np.float32)
    for reduce, s in (("amax", [[1.0, 5.0], [3.0, 5.0]]), ("prod", [[0.0, 2.0], [0.0, 3.0]])):
        _check_grad(
            lambda a, v, r=reduce: a.index_reduce(0, pair, v, r),
            lambda a, v, r=reduce: a.index_reduce(0, tpair, v, r),
            [base, np.array(s, np.float32)],
        )
    # an integer mean rounds down, as torch's; another dim, counted from the end
    m = np.arange(1, 7, dtype=np.int64).reshape(3, 2)
    s = -np.array([[2, 3], [4, 5], [6, 7], [1, 1]], np.int64)
    _same(
        Tensor(m).index_reduce(0, idx, Tensor(s), "mean"),
        torch.from_numpy(m).index_reduce(0, tidx, torch.from_numpy(s), "mean"),
    )
    cols, tcols = _index(1, 1, 0)
    wide = _randn(3, 3)
    _same(
        Tensor(x).index_reduce(-1, cols, Tensor(wide), "amax", include_self=False),
        torch.from_numpy(x).index_reduce(-1, tcols, torch.from_numpy(wide), "amax", include_self=False),
    )
    # a 0-d tensor with a 0-d source
    _same(
        Tensor(2.0).index_reduce(0, Tensor([0]), Tensor(3.0), "prod"),
        torch.tensor(2.0).index_reduce(0, torch.tensor([0]), torch.tensor(3.0), "prod"),
    )
    ux = Tensor(x)
    with pytest.raises(ArgumentError, match="index_reduce: reduce takes 'prod', 'mean', 'amax' or 'amin', got 'sum'"):
        ux.index_reduce(0, idx, Tensor(src), "sum")
    with pytest.raises(IndexError, match="index_reduce: index -1 is out of bounds for axis 0 with size 3"):
        ux.index_reduce(0, Tensor([0, -1, 0, 0]), Tensor(src), "prod")
    with pytest.raises(ShapeError, match=r"index_reduce: source has shape \(4, 2\), should be \(3, 2\)"):
        ux.index_reduce(0, Tensor([0, 1, 2]), Tensor(src), "prod")
    with pytest.raises(IndexError, match="0-d or 1-D"):
        ux.index_reduce(0, Tensor([[0, 1], [1, 0]]), Tensor(src), "prod")
    with pytest.raises(DTypeError, match="source is dtypes.long"):
        ux.index_reduce(0, idx, Tensor(s), "prod")


def test_scatter_reduce_extreme_with_no_write_gives_an_empty_source_its_empty_gradient():
    # (a graph's node features with no edge: torch's gradient is the empty zeros, not None)
    for reduce in ("amax", "amin"):
        _check_grad(
            lambda b, v, r=reduce: b.scatter_reduce(1, Tensor.zeros(2, 0, 3, dtype=dtypes.int32), v, r),
            lambda b, v, r=reduce: b.scatter_reduce(1, torch.zeros(2, 0, 3, dtype=torch.int64), v, r),
            [_randn(2, 4, 3), _randn(2, 0, 3)],
        )


# ---------------------------------------------------------------------------------------------------------------------
# segment_reduce


def test_segment_reduce_values_empty_segments_initial_and_gradients_as_torch():
    data = _randn(7, 3)
    lengths = np.array([2, 0, 4, 1])
    offsets = np.array([1, 3, 3, 6])
    for reduce in ("sum", "mean", "max", "min", "prod", "amax"):
        for initial in (None, 0.5):
            kw = dict(initial=initial)
            _check_grad(
                lambda d, r=reduce, kw=kw: Tensor.segment_reduce(d, r, lengths=Tensor(lengths), **kw),
                lambda d, r=reduce, kw=kw: torch.segment_reduce(d, r, lengths=torch.from_numpy(lengths), **kw),
                [data],
            )
            _check_grad(
                lambda d, r=reduce, kw=kw: Tensor.segment_reduce(d, r, offsets=Tensor(offsets), **kw),
                lambda d, r=reduce, kw=kw: torch.segment_reduce(d, r, offsets=torch.from_numpy(offsets), **kw),
                [data],
            )
    # batched segments along axis 1 (lengths of data's shape before it), float64 kept
    batched = RNG.standard_normal((2, 5, 3))
    rows = np.array([[2, 3], [0, 5]])
    for reduce in ("sum", "max"):
        _check_grad(
            lambda d, r=reduce: Tensor.segment_reduce(d, r, lengths=Tensor(rows), axis=1),
            lambda d, r=reduce: torch.segment_reduce(d, r, lengths=torch.from_numpy(rows), axis=1),
            [batched],
        )
    # a value tied with `initial` keeps the whole gradient, as torch's
    _check_grad(
        lambda d: Tensor.segment_reduce(d, "max", lengths=Tensor([2, 1]), initial=2.0),
        lambda d: torch.segment_reduce(d, "max", lengths=torch.tensor([2, 1]), initial=2.0),
        [np.array([2.0, 1.0, 3.0], np.float32)],
    )
    ux = Tensor(data)
    with pytest.raises(ArgumentError, match="segment_reduce: every row of lengths must sum to data's size 7"):
        Tensor.segment_reduce(ux, "sum", lengths=Tensor([2, 2]))
    with pytest.raises(ArgumentError, match="segment_reduce: lengths must not be negative"):
        Tensor.segment_reduce(ux, "sum", lengths=Tensor([8, -1]))
    with pytest.raises(ArgumentError, match="segment_reduce: reduce must be 'sum', 'mean'"):
        Tensor.segment_reduce(ux, "median", lengths=Tensor([7]))
    with pytest.raises(ArgumentError, match="either lengths or offsets"):
        Tensor.segment_reduce(ux, "sum")
    with pytest.raises(
        ShapeError, match=r"segment_reduce: lengths of shape \(1,\) must have data's shape before axis 1"
    ):
        Tensor.segment_reduce(ux, "sum", lengths=Tensor([3]), axis=1)
    with pytest.raises(NotImplementedError, match="segment_reduce: data must be a float tensor"):
        Tensor.segment_reduce(Tensor([1, 2]), "sum", lengths=Tensor([2]))


# ---------------------------------------------------------------------------------------------------------------------
# the in-place variants


def test_in_place_variants_change_the_tensor_its_views_and_keep_gradients_as_torch():
    x = _randn(3, 4)
    rows, trows = _index(2, 0)
    mask = np.array([True, False, True, True])
    src = _randn(12)
    calls = [
        ("index_put_", ((rows,), Tensor(src[:4])), ((trows,), torch.from_numpy(src[:4]))),
        ("put_", (Tensor([1, -1]), Tensor(src[:2]), True), (torch.tensor([1, -1]), torch.from_numpy(src[:2]), True)),
        ("masked_scatter_", (Tensor(mask), Tensor(src)), (torch.from_numpy(mask), torch.from_numpy(src))),
        (
            "index_reduce_",
            (1, Tensor([3, 3]), Tensor(x[:, :2]), "amin"),
            (1, torch.tensor([3, 3]), torch.from_numpy(x[:, :2]), "amin"),
        ),
    ]
    for name, args, targs in calls:
        # a realized tensor: the object returned is the tensor itself, changed
        t, tt = Tensor(x).realize(), torch.from_numpy(x.copy())
        assert getattr(t, name)(*args) is t
        getattr(tt, name)(*targs)
        _same(t, tt)
    # written through a view (a row of a realized tensor, a column of a lazy value): the base shows it
    base, tbase = Tensor(x).realize(), torch.from_numpy(x.copy())
    base[1].masked_scatter_(Tensor(mask), Tensor(src))
    tbase[1].masked_scatter_(torch.from_numpy(mask), torch.from_numpy(src))
    _same(base, tbase)
    lazy, tlazy = Tensor(x) * 2, torch.from_numpy(x) * 2
    lazy[:, 1].put_(Tensor([0, 2]), Tensor(src[:2]))
    tlazy[:, 1].put_(torch.tensor([0, 2]), torch.from_numpy(src[:2]))
    _same(lazy, tlazy)
    # a lazy intermediate written in place keeps the gradient to both the tensor and the values
    a, v = Tensor(x, requires_grad=True), Tensor(src[:4], requires_grad=True)
    ta, tv = torch.tensor(x, requires_grad=True), torch.tensor(src[:4], requires_grad=True)
    h, th = a * 2, ta * 2
    h.index_put_((rows,), v * 3, accumulate=True)
    th.index_put_((trows,), tv * 3, accumulate=True)
    upstream = _randn(3, 4)
    (h * Tensor(upstream)).sum().backward()
    (th * torch.from_numpy(upstream)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-6)
    # a value of another dtype is refused, as torch's, before anything is written
    t = Tensor(x).realize()
    with pytest.raises(DTypeError):
        t.put_(Tensor([0]), Tensor([1]))
    np.testing.assert_array_equal(t.numpy(), x)
    assert t.dtype == dtypes.float32


# ---------------------------------------------------------------------------------------------------------------------
# index_add, index_copy and the scatters with nothing to write, and the errors naming the op called

EMPTY_1D, EMPTY_ROWS = np.zeros(0, np.int64), np.zeros((3, 0), np.int64)
# (input, op of (tensor, index from an array, src from an array)): each writes nothing
EMPTY_INDEX_CASES = [
    ((5,), lambda t, i, s: t.scatter(0, i(EMPTY_1D), s(np.zeros(0, np.float32)))),
    ((5,), lambda t, i, s: t.scatter(-1, i(EMPTY_1D), 2.5)),
    ((3, 4), lambda t, i, s: t.scatter(1, i(EMPTY_ROWS), s(np.zeros((3, 0), np.float32)))),
    ((3, 4), lambda t, i, s: t.scatter(1, i(EMPTY_ROWS), 2.5)),
    ((3, 4), lambda t, i, s: t.scatter(0, i(np.zeros((0, 4), np.int64)), s(np.ones((2, 4), np.float32)))),
    ((3, 4), lambda t, i, s: t.scatter(1, i(EMPTY_ROWS), s(np.ones((3, 0), np.float32)), reduce="add")),
    ((3, 4), lambda t, i, s: t.scatter(1, i(EMPTY_ROWS), 2.0, reduce="multiply")),
    ((3, 4), lambda t, i, s: t.scatter_add(1, i(EMPTY_ROWS), s(np.ones((3, 0), np.float32)))),
    *[
        ((3, 4), lambda t, i, s, r=r, inc=inc: t.scatter_reduce(1, i(EMPTY_ROWS), s(np.ones((3, 0), np.float32)), r,
                                                                include_self=inc))
        for r in ("sum", "prod", "mean", "amax", "amin")
        for inc in (True, False)
    ],
    ((5,), lambda t, i, s: t.index_copy(0, i(EMPTY_1D), s(np.zeros(0, np.float32)))),
    ((3, 4), lambda t, i, s: t.index_copy(1, i(EMPTY_1D), s(np.zeros((3, 0), np.float32)))),
    ((3, 4), lambda t, i, s: t.index_copy(-2, i(EMPTY_1D), s(np.zeros((0, 4), np.float32)))),
    ((3, 4), lambda t, i, s: t.index_add(1, i(EMPTY_1D), s(np.zeros((3, 0), np.float32)), alpha=2)),
    ((3, 4), lambda t, i, s: t.index_fill(0, i(EMPTY_1D), -1.0)),
    ((3, 4), lambda t, i, s: t.index_reduce(1, i(EMPTY_1D), s(np.zeros((3, 0), np.float32)), "amax")),
    ((3, 4), lambda t, i, s: t.index_put((i(EMPTY_1D),), s(np.float32(5.0)))),
    ((3, 4), lambda t, i, s: t.index_put((i(EMPTY_1D),), s(np.float32(5.0)), accumulate=True)),
    ((3, 4), lambda t, i, s: t.put(i(EMPTY_1D), s(np.zeros(0, np.float32)))),
    ((3, 4), lambda t, i, s: t.masked_scatter(s(np.zeros((3, 4), bool)), s(np.ones(2, np.float32)))),
    ((3, 4), lambda t, i, s: t.gather(1, i(EMPTY_ROWS))),
    ((3, 4), lambda t, i, s: t.take_along_dim(i(EMPTY_ROWS), 1)),
    ((3, 4), lambda t, i, s: t.index_select(0, i(EMPTY_1D))),
    ((3, 4), lambda t, i, s: t.take(i(EMPTY_1D))),
]  # fmt: skip


# (torch warns that scatter's reduce= is deprecated)
@pytest.mark.filterwarnings("ignore:The reduce argument")
@pytest.mark.parametrize("shape, op", EMPTY_INDEX_CASES)
def test_the_scatter_and_index_families_with_an_empty_index_as_torch(shape, op):
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    base = Tensor(x).realize()
    ours = op(base, Tensor, Tensor)
    _same(ours, op(torch.from_numpy(x.copy()), torch.from_numpy, lambda a: torch.from_numpy(np.asarray(a))))
    if ours.shape == base.shape:
        # a tensor of its own: writing into it leaves the input alone
        ours.add_(1)
        np.testing.assert_array_equal(base.numpy(), x)


def test_in_place_scatters_and_setitem_with_an_empty_index_as_torch():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for name, args in [
        ("scatter_", (1, EMPTY_ROWS, np.zeros((3, 0), np.float32))),
        ("scatter_", (1, EMPTY_ROWS, 2.5)),
        ("index_copy_", (0, EMPTY_1D, np.zeros((0, 4), np.float32))),
        ("index_add_", (0, EMPTY_1D, np.zeros((0, 4), np.float32))),
    ]:
        t, tt = Tensor(x).realize(), torch.from_numpy(x.copy())
        assert getattr(t, name)(*[Tensor(a) if isinstance(a, np.ndarray) else a for a in args]) is t
        getattr(tt, name)(*[torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args])
        _same(t, tt)
    t, tt = Tensor(x).realize(), torch.from_numpy(x.copy())
    t[Tensor(EMPTY_1D)] = 7.0
    tt[torch.from_numpy(EMPTY_1D)] = 7.0
    _same(t, tt)


def test_index_add_index_copy_and_scatters_name_the_op_called_in_errors():
    # each is refused by torch too; the message names the method the user called, not the one it is built on
    cases = [
        (IndexError, r"index_add: index -1 is out of bounds for axis 0 with size 3",
         lambda lib: lib.tensor([0, 0, 0]).index_add(0, lib.tensor([1, -1]), lib.tensor([5, 6]))),
        (IndexError, r"index_copy: index 3 is out of bounds for axis 0 with size 3",
         lambda lib: lib.zeros(3).index_copy(0, lib.tensor([3]), lib.tensor([1.0]))),
        (IndexError, r"scatter_add: axis 2 is out of range for a tensor of shape \(2, 3\)",
         lambda lib: lib.zeros(2, 3).scatter_add(2, lib.tensor([[0]]), lib.tensor([[1.0]]))),
        (IndexError, r"scatter_add: index 3 is out of bounds for axis 1 with size 3",
         lambda lib: lib.zeros(2, 3).scatter_add(1, lib.tensor([[3]]), lib.tensor([[1.0]]))),
        (IndexError, r"scatter: index 5 is out of bounds for axis 0 with size 3",
         lambda lib: lib.zeros(3).scatter(0, lib.tensor([5]), 1.0, reduce="add")),
        (ShapeError, r"index_add: source shape \(2, 3\) should be \(2, 2\)",
         lambda lib: lib.zeros(2, 2).index_add(1, lib.tensor([0, 1]), lib.ones(2, 3))),
    ]  # fmt: skip

    class Ours:
        tensor, zeros, ones = Tensor, Tensor.zeros, Tensor.ones

    for error, message, call in cases:
        with pytest.raises((IndexError, RuntimeError)):
            call(torch)
        with pytest.raises(error, match=message):
            call(Ours)


def test_unchecked_out_of_range_index_put_is_dropped():
    # with CHECK_INDEX=0 the write to an out-of-range index landed on element 0 (it read as position 0)
    from uopkit.helpers import Context

    base = Tensor([10.0, 11.0, 12.0, 13.0])
    with Context(CHECK_INDEX=0):
        for bad in (9, -9):
            index = (Tensor([1, bad]) * 1,)
            assert base.index_put(index, Tensor([5.0, 3.0])).tolist() == [10.0, 5.0, 12.0, 13.0]
            assert base.index_put(index, Tensor([5.0, 3.0]), accumulate=True).tolist() == [10.0, 16.0, 12.0, 13.0]

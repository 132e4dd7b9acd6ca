"""Indexing: __getitem__ (ints, slices with steps, None, ..., int/bool tensors and lists), __setitem__ as STORE,
gather/scatter/one_hot, compared with numpy and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.dtype import dtypes
from uopkit.tensor import ShapeError, Tensor
from uopkit.uop.ops import Ops

torch = pytest.importorskip("torch")

rng = np.random.default_rng(1)
X = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)


def check(index: object, ref: str = "torch") -> None:
    t = Tensor(X)
    tindex = _to_ours(index)
    got = t[tindex].numpy()
    # numpy for basic indexing (torch has no negative steps), torch for advanced (ints are basic there)
    want = X[index] if ref == "numpy" else torch.tensor(X)[_to_torch(index)].numpy()
    assert got.shape == want.shape, f"{index}: {got.shape} != {want.shape}"
    np.testing.assert_array_equal(got, want)


def _to_ours(index: object) -> object:
    if isinstance(index, tuple):
        return tuple(_to_ours(i) for i in index)
    return Tensor(index) if isinstance(index, np.ndarray) else index


def _to_torch(index: object) -> object:
    if isinstance(index, tuple):
        return tuple(_to_torch(i) for i in index)
    return torch.tensor(index) if isinstance(index, np.ndarray) else index


BASIC = [
    0,
    -1,
    (1, 2),
    (1, -1, -2),
    slice(None),
    (slice(None), slice(1, 4)),
    (slice(None), slice(None, None, 2)),
    (slice(None), slice(1, None, 3), slice(None, None, 4)),
    (slice(None), slice(None, None, -1)),
    (slice(None), slice(4, 0, -2), slice(None, None, -3)),
    (slice(None), slice(3, 3)),
    (slice(None), slice(10, 20)),
    (None, 0),
    (Ellipsis, 1),
    (0, Ellipsis, None),
    (Ellipsis, None, slice(1, 3)),
    (1, slice(None, None, 2), None, -1),
]


@pytest.mark.parametrize("index", BASIC, ids=[str(i) for i in BASIC])
def test_basic_getitem(index):
    check(index, ref="numpy")


ADVANCED = [
    np.array([1, 0, 1]),
    (slice(None), np.array([4, 0, -1])),
    (slice(None), np.array([[0, 1], [2, 3]])),
    (0, slice(None), np.array([1, 2])),
    (np.array([0, 1]), slice(None), np.array([1, 2])),
    (slice(None), np.array([0, 1]), np.array([1, 2])),
    (np.array([[0], [1]]), np.array([0, 2, 4])),
    (None, np.array([0, 1]), 0),
    (Ellipsis, np.array([0, 5])),
    (slice(None), slice(None, None, 2), np.array([3])),
    X[0, :, 0] > 10,
    (1, X[0] > 30),
    (slice(None), np.array([True, False, True, False, True])),
]


@pytest.mark.parametrize("index", ADVANCED, ids=[f"adv{i}" for i in range(len(ADVANCED))])
def test_advanced_getitem(index):
    if isinstance(index, np.ndarray) and index.dtype == bool and index.shape != X.shape[: index.ndim]:
        index = np.zeros(2, dtype=bool) | True
    check(index)


def test_list_indices_and_errors():
    t = Tensor(X)
    np.testing.assert_array_equal(t[[1, 0]].numpy(), X[[1, 0]])
    np.testing.assert_array_equal(t[:, [0, 2], 1].numpy(), torch.tensor(X)[:, [0, 2], 1].numpy())
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 1 with size 5"):
        t[0, 5]
    with pytest.raises(IndexError, match=r"out of bounds.*size 2"):
        t[[0, 2]]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        t[..., 0, ...]
    with pytest.raises(IndexError, match="integer or bool"):
        t[Tensor([0.5])]
    with pytest.raises(IndexError, match="bool index"):
        t[Tensor([True, False, True])]


def test_getitem_zero_size_and_scalar():
    t = Tensor(X)
    assert t[:, 2:2].shape == (2, 0, 6)
    assert t[:, 2:2].sum().item() == 0
    s = Tensor(5.0)
    assert s[None].shape == (1,) and s[...].item() == 5.0
    assert t[0, 0, 0].shape == () and t[0, 0, 0].item() == 0.0
    assert t[Tensor(np.zeros(0, dtype=np.int32))].shape == (0, 5, 6)


SETITEM = [
    (1, 2),
    (slice(None), 2, slice(1, 4)),
    (slice(None), slice(None, None, 2)),
    (slice(None), slice(None, None, 3)),
    (0, slice(None, None, -2), slice(1, None, 4)),
    (Ellipsis, 0),
    (slice(None), np.array([0, 3])),
    (np.array([1, 0]), slice(None), np.array([5, 1])),
    X > 40,
]


@pytest.mark.parametrize("index", SETITEM, ids=[f"set{i}" for i in range(len(SETITEM))])
def test_setitem(index):
    # numpy's semantics equal torch's for these indices, and numpy also has negative steps
    ours = Tensor(X.copy())
    ref = X.copy()
    value = rng.uniform(-1, 1, ref[index].shape).astype(np.float32)
    ours[_to_ours(index)] = Tensor(value)
    ref[index] = value
    np.testing.assert_array_equal(ours.numpy(), ref)
    # a scalar broadcast into the same positions
    ours[_to_ours(index)] = -7.0
    ref[index] = -7.0
    np.testing.assert_array_equal(ours.numpy(), ref)


def test_setitem_writes_shared_buffer_and_casts():
    base = Tensor(np.zeros((4, 4), dtype=np.int32))
    base[1] = Tensor([1.9, 2.0, 3.0, 4.0])
    assert base.numpy()[1].tolist() == [1, 2, 3, 4]
    z = Tensor.zeros(3, 3)
    z[0, 0] = 5.0
    z[:, 2] = Tensor([1.0, 2.0, 3.0])
    assert z.tolist() == [[5.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 0.0, 3.0]]


def test_gather():
    x = rng.uniform(size=(4, 5, 6)).astype(np.float32)
    for dim in (0, 1, 2, -1):
        d = dim % 3
        shape = [3, 4, 5]
        idx = rng.integers(0, x.shape[d], shape)
        got = Tensor(x).gather(dim, Tensor(idx.astype(np.int32)))
        want = torch.gather(torch.tensor(x), dim, torch.tensor(idx))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(ShapeError, match="gather"):
        Tensor(x).gather(0, Tensor(np.zeros((1, 6, 1), dtype=np.int32)))
    with pytest.raises(IndexError, match="out of bounds"):
        Tensor(x).gather(0, Tensor(np.full((1, 1, 1), 4, dtype=np.int32)))


def test_gather_of_one_element_by_a_0d_index_as_torch():
    # a 1-D input and a 0-d index read one element, a 0-d input and a 0-d or 1-D index as many as the index holds
    v = np.array([3.0, -1.0, 7.5], np.float32)
    for data, index in [(v, 2), (v, 0), (np.float32(4.0), 0), (np.float32(4.0), [0, 0])]:
        for dim in (0, -1):
            got = Tensor(data).gather(dim, Tensor(np.array(index)))
            want = torch.tensor(data).gather(dim, torch.tensor(index))
            assert got.shape == tuple(want.shape) and got.tolist() == want.tolist()
    with pytest.raises(IndexError, match="gather: index 3 is out of bounds"):
        Tensor(v).gather(0, Tensor(3))


def test_gather_takes_torchs_sparse_grad_keyword():
    # torch.gather(input, dim, index, sparse_grad=True) (pointer-net and sampled-softmax code passes it) raised a
    # TypeError here; the values and the gradient (dense here, torch's sparse one made dense) are torch's
    x = rng.uniform(size=(3, 4)).astype(np.float32)
    idx = np.array([[0, 3], [2, 2], [1, 0]])
    up = np.arange(6, dtype=np.float32).reshape(3, 2)
    for sparse_grad in (False, True):
        ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got = Tensor.gather(ours, 1, Tensor(idx), sparse_grad=sparse_grad)
        want = torch.gather(theirs, 1, torch.tensor(idx), sparse_grad=sparse_grad)
        np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
        (got * Tensor(up)).sum().backward()
        (want * torch.tensor(up)).sum().backward()
        np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.to_dense().numpy())


def test_setitem_with_a_value_of_the_wrong_shape_names_both_shapes():
    # torch: "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [2]"
    for index in ([True, True, False], slice(None, 2), [0, 2], (Ellipsis, slice(1, None))):
        t, tt = Tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
        ours_index = Tensor(index) if isinstance(index, list) else index
        with pytest.raises(RuntimeError):
            tt[torch.tensor(index) if isinstance(index, list) else index] = torch.tensor([4.0, 5.0, 6.0])
        with pytest.raises(
            ShapeError,
            match=r"setitem: shape mismatch: value tensor of shape \(3,\) can't be broadcast to the indexing result "
            r"of shape \(2,\)",
        ):
            t[ours_index] = Tensor([4.0, 5.0, 6.0])
        assert t.tolist() == [1.0, 2.0, 3.0]
    # an empty selection still checks the value, and a broadcastable value (leading ones too) still goes in
    with pytest.raises(ShapeError, match=r"value tensor of shape \(3,\) .* indexing result of shape \(0,\)"):
        Tensor([1.0, 2.0])[Tensor([False, False])] = Tensor([4.0, 5.0, 6.0])
    t, tt = Tensor.zeros(2, 3), torch.zeros(2, 3)
    t[Tensor([True, False])] = Tensor([[[1.0, 2.0, 3.0]]])
    tt[torch.tensor([True, False])] = torch.tensor([[1.0, 2.0, 3.0]])
    assert t.tolist() == tt.tolist()


@pytest.mark.filterwarnings("ignore:The reduce argument")
@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
def test_scatter(reduce):
    x = rng.uniform(size=(4, 5)).astype(np.float32)
    src = rng.uniform(size=(3, 5)).astype(np.float32)
    for dim in (0, 1):
        # distinct target positions per column/row for the replace mode
        idx = np.stack([rng.permutation(4)[:3] for _ in range(4)], axis=1) if dim == 0 else None
        if dim == 1:
            idx = np.stack([rng.permutation(5)[:3] for _ in range(3)], axis=0)
        kw = {} if reduce is None else {"reduce": reduce}
        got = Tensor(x).scatter(dim, Tensor(idx.astype(np.int32)), Tensor(src), **kw)
        want = torch.tensor(x).scatter(dim, torch.tensor(idx, dtype=torch.int64), torch.tensor(src), **kw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    got = Tensor(x).scatter(1, Tensor(np.array([[0, 2]], dtype=np.int32)), 9.0)
    want = torch.tensor(x).scatter(1, torch.tensor([[0, 2]]), 9.0)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.filterwarnings("ignore:The reduce argument")
def test_scatter_takes_torchs_value_keyword():
    # torch's scalar overload names the number `value`: a one-hot label map, zeros(N, C, ...).scatter_(1, y, value=1)
    y = rng.integers(0, 3, size=(2, 1, 4, 5))
    want = torch.zeros(2, 3, 4, 5).scatter_(1, torch.tensor(y), value=1.0)
    got = Tensor.zeros(2, 3, 4, 5)
    got.scatter_(1, Tensor(y), value=1.0)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    idx = Tensor(y)
    want = torch.scatter(torch.ones(2, 3, 4, 5), 1, torch.tensor(y), value=2.0, reduce="add")
    np.testing.assert_array_equal(
        Tensor.scatter(Tensor.ones(2, 3, 4, 5), 1, idx, value=2.0, reduce="add").numpy(), want
    )
    with pytest.raises(TypeError, match="scatter"):
        Tensor.zeros(2, 3, 4, 5).scatter(1, idx, 1.0, value=1.0)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = rng.uniform(0.5, 2, size=(4, 5)).astype(np.float32)
    src = rng.uniform(0.5, 2, size=(6, 5)).astype(np.float32)
    idx = rng.integers(0, 4, (6, 5))
    got = Tensor(x).scatter_reduce(0, Tensor(idx.astype(np.int32)), Tensor(src), reduce, include_self=include_self)
    want = torch.tensor(x).scatter_reduce(0, torch.tensor(idx), torch.tensor(src), reduce, include_self=include_self)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_one_hot():
    y = np.array([[0, 3], [2, 1]])
    got = Tensor(y.astype(np.int32)).one_hot(4)
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), torch.nn.functional.one_hot(torch.tensor(y), 4).numpy())
    assert Tensor([0, 2]).one_hot().shape == (2, 3)


def test_one_hot_of_floats_raises_torchs_runtime_error():
    # torch.nn.functional.one_hot of a float tensor raises a RuntimeError (a `except RuntimeError` in a port catches it)
    with pytest.raises(RuntimeError):
        torch.nn.functional.one_hot(torch.tensor([1.0, 0.0]))
    with pytest.raises(RuntimeError, match=r"one_hot: needs an integer tensor.*\.long\(\)"):
        Tensor([1.0, 0.0]).one_hot(2)


def _kernel_sources(t: Tensor) -> list[str]:
    from uopkit import Device
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    return [get_program(item.ast, Device["CPU"].renderer).src for item in create_schedule(kernelize_tensors([t]))]


def test_integer_index_is_one_load_not_a_pass_over_every_row():
    # indexing compares the index with an iota and sums: the lowerer folds that into one load at the index
    table = np.arange(1000 * 8, dtype=np.float32).reshape(1000, 8)
    idx = np.array([3, 999, -1, -1000, 0, 512], np.int32)
    t = Tensor(table)[Tensor(idx)]
    np.testing.assert_array_equal(t.numpy(), table[idx])
    (src,) = _kernel_sources(Tensor(table)[Tensor(idx)])
    assert "< 1000;" not in src  # no loop over the table's rows
    # gather and a boolean table take the same path
    g = Tensor(table).gather(0, Tensor(np.array([[5] * 8, [998] * 8], np.int32)))
    np.testing.assert_array_equal(g.numpy(), table[[5, 998]])
    flags = np.arange(20) % 3 == 0
    picks = np.array([0, 1, 3, -2], np.int32)
    np.testing.assert_array_equal(Tensor(flags)[Tensor(picks)].numpy(), flags[picks])


def test_arange_of_integers_is_computed_where_it_is_read():
    for args in ((5,), (2, 11, 3), (10, 0, -3), (-4, 4), (0,), (3, 3)):
        np.testing.assert_array_equal(Tensor.arange(*args).numpy(), np.arange(*args))
    big = Tensor.arange(2**31 - 5, 2**31 + 5, dtype=dtypes.int64)
    np.testing.assert_array_equal(big.numpy(), np.arange(2**31 - 5, 2**31 + 5))
    assert Tensor.arange(4).uop.op is Ops.IOTA and Tensor.arange(4.0).uop.base.op is not Ops.IOTA
    np.testing.assert_array_equal(Tensor.arange(0, 1, 0.25).numpy(), np.arange(0, 1, 0.25, dtype=np.float32))


def test_several_index_tensors_read_each_element_with_one_load():
    # a batch of random crops, x[b, c, rows, cols]: one flat index into the indexed axes, whose one-hot sum the lowerer
    # folds into a load (one compare per axis, and-ed, compared every output with every element: 25-100 ms)
    from uopkit.codegen.opt.analysis import reduce_folds_away
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    rows, cols = rng.integers(-16, 16, (6,)), rng.integers(0, 16, (6,))
    x = Tensor(xs).realize()
    idx = (Tensor.arange(4)[:, None, None, None], Tensor.arange(3)[None, :, None, None])
    crop = x[(*idx, Tensor(rows[None, None, :, None]), Tensor(cols[None, None, None, :]))]
    assert reduce_folds_away(create_schedule(kernelize_tensors([crop]))[-1].ast)
    want = xs[np.arange(4)[:, None, None, None], np.arange(3)[None, :, None, None], rows[None, None, :, None], cols]
    np.testing.assert_array_equal(crop.numpy(), want)
    # every placement of the indexed axes (adjacent or not, with slices between), negative indices, and the gradient
    tx = torch.tensor(xs, requires_grad=True)
    ux = Tensor(xs, requires_grad=True)
    cases = [
        lambda t, i: t[i([1, -1, 2]), i([0, 2, -2])],
        lambda t, i: t[:, i([[1], [2]]), i([0, 5, -1])],
        lambda t, i: t[i([0, 3]), :, i([1, 2])],
        lambda t, i: t[i([[0, 1]]), 1:3, :, i([[1], [15]])],
        lambda t, i: t[..., i([1, 2, 1]), i([3, 4, 3])],
        lambda t, i: t[i([0]), i([1]), i([2]), i([3])],
    ]
    for k, case in enumerate(cases):
        ours = case(ux, lambda v: Tensor(np.array(v, np.int32)))
        theirs = case(tx, lambda v: torch.tensor(v))
        np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy(), err_msg=str(k))
        g = rng.standard_normal(tuple(theirs.shape)).astype(np.float32)
        (ours * Tensor(g)).sum().backward()
        (theirs * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6, err_msg=str(k))


@pytest.mark.parametrize("bad", [1000, 4, -5, 2**31 - 1])
def test_unchecked_out_of_range_setitem_is_dropped(bad: int) -> None:
    # with CHECK_INDEX=0 an out-of-range index reads as 0, so the write went to element 0 (a real element); it is
    # dropped now, the in-range writes beside it kept (torch raises, as CHECK_INDEX=1 does here)
    from uopkit.helpers import Context

    base = np.array([10.0, 11.0, 12.0, 13.0], np.float32)
    with Context(CHECK_INDEX=0):
        a = Tensor(base).contiguous().realize()
        a[Tensor([bad]) * 1] = 3.0
        b = Tensor(base).contiguous().realize()
        b[Tensor([1, bad]) * 1] = Tensor([5.0, 3.0])
        c = Tensor(base.reshape(2, 2)).contiguous().realize()
        c[Tensor([bad]) * 1, Tensor([1])] = 3.0
        assert a.tolist() == base.tolist()
        assert b.tolist() == [10.0, 5.0, 12.0, 13.0]
        assert c.tolist() == base.reshape(2, 2).tolist()


def test_unchecked_out_of_range_setitem_is_dropped_when_scattered_by_sorting(monkeypatch) -> None:
    # (a large write goes through the sort-by-target scatter, which has no "no match": a spare slot takes the drops)
    from uopkit.helpers import Context
    from uopkit.tensor import segments

    monkeypatch.setattr(segments, "SCATTER_BY_SORTING", 1)
    with Context(CHECK_INDEX=0):
        a = Tensor(np.arange(6, dtype=np.float32)).contiguous().realize()
        a[Tensor([3, 0, 9, -7, 3]) * 1] = Tensor([-1.0, -4.0, -2.0, -3.0, -5.0])
        assert a.tolist() == [-4.0, 1.0, 2.0, -5.0, 4.0, 5.0]


def test_setitem_of_a_row_or_a_run_of_rows_builds_its_view_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    # a replay buffer's slot written every step (`buf[i] = obs`): the view is built as getitem's fast path builds it,
    # not through the general index parser (a fifth of the write's time); other indices still take the general path
    ref = X.copy()
    t = Tensor(X).contiguous().realize()
    general = Tensor._basic_view

    def refused(self: Tensor, items: list) -> object:
        if len(items) == 1 and isinstance(items[0], (int, slice)) and items[0] not in (slice(None),):
            raise AssertionError(f"index {items} took the general path")
        return general(self, items)

    monkeypatch.setattr(Tensor, "_basic_view", refused)
    for index, value in [(1, 7.0), (-1, np.arange(30, dtype=np.float32).reshape(5, 6)), (slice(0, 1), -2.0)]:
        t[index] = value if isinstance(value, float) else Tensor(value)
        ref[index] = value
        np.testing.assert_array_equal(t.numpy(), ref)
    row = t[0]
    row[2] = Tensor(np.full(6, 3.0, np.float32))
    ref[0, 2] = 3.0
    t[1, 4] = Tensor(np.full(6, 5.0, np.float32))
    ref[1, 4] = 5.0
    np.testing.assert_array_equal(t.numpy(), ref)
    monkeypatch.setattr(Tensor, "_basic_view", general)
    with pytest.raises(IndexError, match="out of bounds"):
        t[2] = 1.0
    t[:, 1] = 9.0
    ref[:, 1] = 9.0
    np.testing.assert_array_equal(t.numpy(), ref)
    ints = Tensor.zeros(6, dtype=dtypes.int64).contiguous().realize()
    ints[3] = 2
    assert ints.tolist() == [0, 0, 0, 2, 0, 0]


def test_mask_select_counts_share_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # a data-dependent count of hits is taken padded to a power of two (one kernel per size class, not per count),
    # the result its prefix: values as torch's for every count, a gradient too
    lengths: list[int] = []
    take = Tensor._take

    def recorded(self: Tensor, axis: int, idx: np.ndarray) -> Tensor:
        lengths.append(len(idx))
        return take(self, axis, idx)

    monkeypatch.setattr(Tensor, "_take", recorded)
    for x in [rng.standard_normal(1000).astype(np.float32), rng.standard_normal((7, 9)).astype(np.float32)]:
        for cut in [-9.0, 9.0, 0.0, 0.3, 1.1]:
            want = torch.tensor(x)[torch.tensor(x) > cut].numpy()
            t = Tensor(x)
            np.testing.assert_array_equal(t[t > cut].numpy(), want)
            np.testing.assert_array_equal(t.masked_select(t > cut).numpy(), want)
    padded = [n for n in lengths if n & (n - 1)]
    assert not padded or all(n in (1000, 63) for n in padded), padded  # (all hits: a slice, not a gather)
    values = Tensor([3, 1, 3, 2, 7, 1, 1, 9, 2])
    assert values.unique().tolist() == [1, 2, 3, 7, 9]
    monkeypatch.setattr(Tensor, "_take", take)
    w = Tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    (w[w > 0] * 2).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [2.0, 0.0, 2.0]


_BAD_INDEX = {
    # op: a call with an out-of-range or wrong-dtype index, given the library's tensor constructor
    "gather": lambda x, t: x.gather(0, t([[4]])),
    "scatter": lambda x, t: x.scatter(0, t([[-1]]), 1.0),
    "scatter_add": lambda x, t: x.scatter_add(1, t([[5]]), x[:1, :1]),
    "scatter_reduce": lambda x, t: x.scatter_reduce(1, t([[5]]), x[:1, :1], "amax"),
    "index_select": lambda x, t: x.index_select(1, t([5])),
    "index_select -1": lambda x, t: x.index_select(0, t([-1])),
    "index_add": lambda x, t: x.index_add(0, t([4]), x[:1]),
    "index_copy": lambda x, t: x.index_copy(0, t([4]), x[:1]),
    "index_fill": lambda x, t: x.index_fill(0, t([4]), 1.0),
    "index_put": lambda x, t: x.index_put((t([4]),), x[0]),
    "take": lambda x, t: x.take(t([20])),
    "put": lambda x, t: x.put(t([-21]), x[0, :1]),
    "getitem": lambda x, t: x[t([0, 4])],
    "narrow": lambda x, t: x.narrow(1, 3, 4),
    "gather of floats": lambda x, t: x.gather(0, t([[1.0]])),
    "scatter of floats": lambda x, t: x.scatter(0, t([[1.0]]), 1.0),
    "index_select of floats": lambda x, t: x.index_select(0, t([1.0])),
    "index_select of a matrix": lambda x, t: x.index_select(0, t([[1]])),
    "index_add of floats": lambda x, t: x.index_add(0, t([1.0]), x[:1]),
    "index_add of a matrix": lambda x, t: x.index_add(0, t([[1]]), x[:1]),
    "index_copy of a matrix": lambda x, t: x.index_copy(0, t([[1]]), x[:1]),
    "index_fill of floats": lambda x, t: x.index_fill(0, t([1.0]), 1.0),
    "index_fill of a matrix": lambda x, t: x.index_fill(0, t([[1]]), 1.0),
    "take of floats": lambda x, t: x.take(t([1.0])),
    "masked_fill of ints": lambda x, t: x.masked_fill(t([1, 0, 1, 0, 1]), 1.0),
    "masked_select of ints": lambda x, t: x.masked_select(t([1, 0, 1, 0, 1])),
}


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("op", list(_BAD_INDEX))
def test_a_bad_index_raises_what_torch_raises(op):
    # torch raises IndexError for some ops and RuntimeError for others (gather, scatter*, index_select, index_add,
    # narrow; a float index or a mask of ints): code written for torch catches ours by torch's type, and the message
    # names our op
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises((IndexError, RuntimeError)) as theirs:
        _BAD_INDEX[op](torch.tensor(x), torch.tensor)
    with pytest.raises(type(theirs.value), match=op.split()[0]):
        _BAD_INDEX[op](Tensor(x), Tensor)


def test_bool_mask_setitem_of_a_number_is_a_masked_fill_that_tinyjit_replays() -> None:
    # `mem[mem > thr] = 0.0`, a spiking neuron's reset: the elements the mask picks are set, as torch's, and a TinyJit
    # replay picks them from the new mask (the count of the mask used to be read back at capture, and replays wrote
    # the captured positions: a neuron over threshold later kept its value)
    from uopkit import TinyJit

    @TinyJit
    def step(v: Tensor, inp: Tensor) -> Tensor:
        v = v * 0.9 + inp
        v[v > 1.0] = 0.0
        return v.realize()

    rng = np.random.default_rng(0)
    v = Tensor.zeros(6).contiguous().realize()
    ref = torch.zeros(6)
    for _ in range(6):
        x = rng.random(6).astype(np.float32)
        v = step(v, Tensor(x).realize())
        ref = ref * 0.9 + torch.from_numpy(x)
        ref[ref > 1.0] = 0.0
        np.testing.assert_allclose(v.numpy(), ref.numpy(), rtol=1e-6)
    # a mask of the leading dims, through a view, into ints; and the gradient through the write
    a = rng.standard_normal((4, 5)).astype(np.float32)
    for index in (lambda m: m[:, 0] > 0, lambda m: (m[:, 0] > 0,)):
        t, u = torch.from_numpy(a.copy()), Tensor(a.copy())
        t[index(t)] = 7
        u[index(u)] = 7
        np.testing.assert_array_equal(u.numpy(), t.numpy())
    t, u = torch.from_numpy(a.copy()), Tensor(a.copy())
    t.T[t.T > 0] = -1.5
    u.T[u.T > 0] = -1.5
    np.testing.assert_array_equal(u.numpy(), t.numpy())
    ti, ui = torch.arange(6), Tensor.arange(6)
    ti[ti > 2] = 9
    ui[ui > 2] = 9
    assert ui.tolist() == ti.tolist()
    xt = torch.from_numpy(a.copy()).requires_grad_(True)
    yt = xt * 2
    yt[yt > 0] = 0.0
    (yt * yt).sum().backward()
    xu = Tensor(a.copy()).requires_grad_(True)
    yu = xu * 2
    yu[yu > 0] = 0.0
    (yu * yu).sum().backward()
    np.testing.assert_allclose(xu.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


# ints mixed with unit-step slices (`dY[i, :] = row`, `w[:, i:i + 1]`) take `_plain_view`'s short path: the same nodes
# as the general path's, the same values and gradients as torch's, and writes seen through views
MIXED = [
    (1, slice(None)),
    (slice(None), 2),
    (slice(None), slice(1, 2)),
    (-1, slice(2, 5), 0),
    (slice(1, 3), slice(None), -2),
    (0, slice(-3, None)),
    (slice(0, 4), 3, slice(None)),
]


@pytest.mark.parametrize("index", MIXED, ids=str)
@pytest.mark.parametrize("lazy", [False, True])
def test_mixed_plain_view_same_nodes_as_basic_view(index: tuple, lazy: bool) -> None:
    t = Tensor(np.arange(5 * 6 * 4, dtype=np.float32).reshape(5, 6, 4))
    if lazy:
        t = t * 2 + 1
    fast = t._plain_view(index)  # (the short path: `view_writes._plain_mixed_view`)
    assert fast is not None, index
    general, tensors, padded = t._basic_view(t._parse_index(index))
    assert fast.uop is general.uop and not tensors and not padded


@pytest.mark.parametrize(
    "index", [(2, slice(3, 3)), (slice(0, 4, 2), 1), (None, 1), (Ellipsis, 1), (1, [0, 2])], ids=str
)
def test_mixed_plain_view_leaves_other_indices(index: tuple) -> None:
    t = Tensor(np.zeros((5, 6, 4), np.float32))
    assert t._plain_view(index) is None
    want = torch.zeros(5, 6, 4)[index]
    assert t[index].shape == tuple(want.shape)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_mixed_setitem_rows_match_torch(dtype: str) -> None:
    base = rng.integers(0, 3, size=(5, 6, 4)).astype(dtype)
    ours, ref = Tensor(base), torch.tensor(base)
    alias_ours, alias_ref = ours[:, 1], ref[:, 1]  # a view made before the writes shows them
    for k, index in enumerate(MIXED):
        value = rng.integers(0, 3, size=tuple(ref[index].shape)).astype(dtype)
        ours[index] = Tensor(value)
        ref[index] = torch.tensor(value)
        np.testing.assert_array_equal(ours[index].numpy(), ref[index].numpy())
        # a number into the next index, before its value goes in
        nxt = MIXED[(k + 1) % len(MIXED)]
        ours[nxt], ref[nxt] = k % 2, k % 2
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(alias_ours.numpy(), alias_ref.numpy())


def test_mixed_setitem_row_loop_gradient_matches_torch() -> None:
    # t-SNE's gradient row by row, and a recurrence written a row at a time, with autograd through the writes
    y0 = rng.standard_normal((6, 2)).astype(np.float32)
    w0 = rng.standard_normal((6, 6)).astype(np.float32)
    results = []
    for lib in ("ours", "torch"):
        make = Tensor if lib == "ours" else torch.tensor
        y, w = make(y0).requires_grad_(True), make(w0).requires_grad_(True)
        out = Tensor.zeros(6, 2) if lib == "ours" else torch.zeros(6, 2)
        for i in range(6):
            out[i, :] = ((y[i, :] - y) * w[:, i : i + 1]).sum(0)
        (out * out).sum().backward()
        results.append((out.detach().numpy(), y.grad.numpy(), w.grad.numpy()))
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

"""tensor/torch_extras.py (and igamma/igammac of tensor/special.py) compared with torch: values, dtypes, shapes,
gradients, and the errors torch raises."""

import math

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes, nn

scipy_special = pytest.importorskip("scipy.special")


def close(ours, theirs, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(ours.numpy(), dtype=np.float64), theirs.detach().double().numpy(), rtol, atol)


# ---------------------------------------------------------------------------------------------------------------------
# as_strided


@pytest.mark.parametrize(
    "view, size, stride, offset",
    [
        (lambda x: x, (2, 2), (1, 2), None),
        (lambda x: x, (3, 2), (2, 1), 1),
        (lambda x: x, (4,), (0,), 5),
        (lambda x: x[1], (2,), (1,), None),
        (lambda x: x[:, 1:], (2, 2), (3, 1), None),
        (lambda x: x.T[1:], (2,), (3,), None),
        (lambda x: x.reshape(3, 4)[1:, ::2], (3,), (2,), None),
        (lambda x: x, (0, 3), (1, 1), None),
    ],
)
def test_as_strided_matches_torch(view, size, stride, offset):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    ours, theirs = view(Tensor(data)), view(torch.tensor(data))
    assert ours.storage_offset() == theirs.storage_offset()
    assert ours.as_strided(size, stride, offset).tolist() == theirs.as_strided(size, stride, offset).tolist()


def test_as_strided_gradient():
    data = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    w = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)
    x = Tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    (x.as_strided((3, 3), (4, 1), 1) * Tensor(w)).sum().backward()
    (tx.as_strided((3, 3), (4, 1), 1) * torch.tensor(w)).sum().backward()
    close(x.grad, tx.grad)


@pytest.mark.parametrize("second", [False, True])
def test_as_strided_overlapping_windows_gradient_is_a_gather(second):
    # Longformer's chunked values: windows of 6 rows every 2 rows of a padded (batch, seq, dim) tensor, each row read
    # by up to 3 windows (and a slice of a view, read at an offset). The gradient sums each element's readers: before,
    # a one-hot of every window element against every storage element (0.12 s for 64 x 36 x 8 on one thread,
    # where this takes 2 ms)
    from uopkit.gradient import given_gradient
    from uopkit.uop.ops import Ops

    data = np.random.default_rng(2).normal(size=(4, 12, 3)).astype(np.float32)
    windows = 3 if second else 4
    w = np.random.default_rng(3).normal(size=(4, windows, 6, 3)).astype(np.float32)
    x, tx = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    views = []
    for t in (x, tx):
        padded = (t * 1)[:, 1:] if second else t * 1
        s = padded.stride()
        views.append(padded.as_strided((4, windows, 6, 3), (s[0], 2 * s[1], s[1], s[2]), padded.storage_offset()))
    (views[0] * Tensor(w)).sum().backward()
    (views[1] * torch.tensor(w)).sum().backward()
    # (the flat read under the view's reshape has its gradient given: the readers' gather)
    assert views[0].uop.op is Ops.RESHAPE and given_gradient(views[0].uop.src[0]) is not None
    close(views[0], views[1])
    close(x.grad, tx.grad)


def test_as_strided_errors():
    x = Tensor.arange(6.0).reshape(2, 3)
    for args in [((2,), (-1,)), ((2,), (1, 1)), ((2,), (4,), 3), ((2,), (1,), -1)]:
        with pytest.raises(RuntimeError):
            torch.arange(6.0).reshape(2, 3).as_strided(*args)
        with pytest.raises(RuntimeError, match="as_strided"):
            x.as_strided(*args)


def test_as_strided_in_place():
    t, tt = Tensor.arange(6.0), torch.arange(6.0)
    assert t.as_strided_((2, 2), (2, 1), 1) is t
    tt.as_strided_((2, 2), (2, 1), 1)
    assert t.shape == tuple(tt.shape) and t.tolist() == tt.tolist()
    with pytest.raises(RuntimeError, match="leaf"):
        Tensor.zeros(4, requires_grad=True).as_strided_((2,), (1,))


@pytest.mark.parametrize("view", [lambda x: x, lambda x: x.T, lambda x: x[:, 1:], lambda x: x[1:]])
@pytest.mark.parametrize("offset", [None, 1, 3])
def test_as_strided_scatter_matches_torch(view, offset):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    src = np.array([100.0, 200.0, 300.0], dtype=np.float32)
    ours = view(Tensor(data)).as_strided_scatter(Tensor(src), (3,), (2,), offset)
    theirs = torch.as_strided_scatter(view(torch.tensor(data)), torch.tensor(src), (3,), (2,), offset)
    assert ours.tolist() == theirs.tolist()


def test_as_strided_scatter_gradients_and_errors():
    data = np.random.default_rng(2).normal(size=(2, 3)).astype(np.float32)
    src = np.random.default_rng(3).normal(size=(2,)).astype(np.float32)
    w = np.random.default_rng(4).normal(size=(2, 3)).astype(np.float32)
    x, s = Tensor(data, requires_grad=True), Tensor(src, requires_grad=True)
    tx, ts = torch.tensor(data, requires_grad=True), torch.tensor(src, requires_grad=True)
    (x.as_strided_scatter(s, (2,), (4,), 0) * Tensor(w)).sum().backward()
    (torch.as_strided_scatter(tx, ts, (2,), (4,), 0) * torch.tensor(w)).sum().backward()
    close(s.grad, ts.grad)
    # (torch's gradient for self is w at the written positions, which its gradcheck refutes: the true one is w
    # everywhere else)
    written = np.zeros((2, 3), dtype=bool)
    written[0, 0] = written[1, 1] = True
    np.testing.assert_allclose(x.grad.numpy(), np.where(written, 0, w))
    with pytest.raises(RuntimeError, match="src"):
        Tensor.zeros(2, 3).as_strided_scatter(Tensor([1.0, 2.0, 3.0]), (2,), (2,))
    with pytest.raises(RuntimeError, match="src"):
        torch.zeros(2, 3).as_strided_scatter(torch.tensor([1.0, 2.0, 3.0]), (2,), (2,))
    with pytest.raises(TypeError, match="dtype"):
        Tensor.zeros(2, 3).as_strided_scatter(Tensor([1, 2]), (2,), (2,))
    with pytest.raises(RuntimeError, match="out of bounds"):
        Tensor.zeros(2, 3).as_strided_scatter(Tensor([1.0, 2.0]), (2,), (6,))


# ---------------------------------------------------------------------------------------------------------------------
# fill_diagonal_


@pytest.mark.parametrize("shape", [(5, 2), (7, 3), (3, 3), (2, 5), (4, 3), (3, 3, 3), (2, 2, 2, 2)])
@pytest.mark.parametrize("wrap", [False, True])
def test_fill_diagonal_matches_torch(shape, wrap):
    t = Tensor.zeros(*shape)
    assert t.fill_diagonal_(7.0, wrap=wrap) is t
    assert t.tolist() == torch.zeros(*shape).fill_diagonal_(7.0, wrap=wrap).tolist()


def test_fill_diagonal_dtype_view_and_errors():
    t = Tensor.zeros(2, 2, dtype=dtypes.int32)
    assert t.fill_diagonal_(3).tolist() == [[3, 0], [0, 3]]
    x = Tensor.zeros(3, 4)
    x[1:].fill_diagonal_(1.0)
    tx = torch.zeros(3, 4)
    tx[1:].fill_diagonal_(1.0)
    assert x.tolist() == tx.tolist()
    with pytest.raises(RuntimeError):
        Tensor.zeros(3).fill_diagonal_(1)
    with pytest.raises(RuntimeError, match="equal"):
        Tensor.zeros(2, 2, 3).fill_diagonal_(1)
    with pytest.raises(OverflowError):
        Tensor.zeros(2, 2, dtype=dtypes.uint8).fill_diagonal_(300)


# ---------------------------------------------------------------------------------------------------------------------
# histogram


@pytest.mark.parametrize(
    "data, bins, kwargs",
    [
        (np.random.default_rng(5).normal(size=50), 7, {}),
        (np.random.default_rng(6).uniform(size=(4, 5)), 4, {"density": True}),
        (np.array([0.0, 1.0, 1.0, 2.0, 3.0, 3.0]), 3, {}),
        (np.array([1.0, 1.0]), 3, {}),
        (np.array([-1.0, 0.5, 2.0, 4.0, 5.0]), 4, {"range": (0.0, 4.0)}),
        (np.array([0.5, 1.0, 2.5, 3.0, 9.0]), np.array([0.0, 1.0, 2.5, 3.0]), {}),
        (np.random.default_rng(7).normal(size=20), 5, {"weight": np.random.default_rng(8).uniform(size=20)}),
        (np.random.default_rng(9).normal(size=20), 5, {"weight": np.ones(20), "density": True}),
        (np.zeros(0), 3, {}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogram_matches_torch(data, bins, kwargs, dtype):
    ours_bins = Tensor(bins.astype(dtype)) if isinstance(bins, np.ndarray) else bins
    their_bins = torch.tensor(bins.astype(dtype)) if isinstance(bins, np.ndarray) else bins
    ours_kw = {k: Tensor(v.astype(dtype)) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    their_kw = {k: torch.tensor(v.astype(dtype)) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    hist, edges = Tensor(data.astype(dtype)).histogram(ours_bins, **ours_kw)
    their = torch.histogram(torch.tensor(data.astype(dtype)), their_bins, **their_kw)
    assert hist.dtype == edges.dtype == (dtypes.float32 if dtype == np.float32 else dtypes.float64)
    close(edges, their.bin_edges)
    close(hist, their.hist)


def test_histogram_errors():
    x = Tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        Tensor([1, 2]).histogram(3)
    for bad in [
        lambda: x.histogram(0),
        lambda: x.histogram(3, range=(2.0, 1.0)),
        lambda: Tensor([1.0, math.nan]).histogram(3),
        lambda: Tensor([1.0, math.inf]).histogram(3),
        lambda: x.histogram(Tensor([[1.0, 2.0]])),
    ]:
        with pytest.raises(RuntimeError, match="histogram"):
            bad()
    with pytest.raises(TypeError, match="dtype"):
        x.histogram(Tensor([1.0, 2.0], dtype=dtypes.float64))
    with pytest.raises(TypeError, match="dtype"):
        x.histogram(2, weight=Tensor([1, 2]))
    with pytest.raises(RuntimeError, match="shape"):
        x.histogram(2, weight=Tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize(
    "shape, bins, kwargs",
    [
        ((40, 2), 4, {}),
        ((40, 3), [3, 2, 4], {"density": True}),
        ((2, 10, 2), 3, {"range": [0.2, 0.8, -1.0, 1.0]}),
        ((30, 2), [4, 3], {"weight": (30,), "density": True}),
        ((25, 2), "edges", {"weight": (25,)}),
        ((20, 1), 5, {}),
        ((0, 2), 3, {}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogramdd_matches_torch(shape, bins, kwargs, dtype):
    rng = np.random.default_rng(12)
    data = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    data[:3, 0] = 0.25  # ties on an edge
    their_kw = {k: torch.tensor(rng.uniform(size=v).astype(dtype)) if k == "weight" else v for k, v in kwargs.items()}
    ours_kw = {k: Tensor(v.numpy()) if k == "weight" else v for k, v in their_kw.items()}
    if bins == "edges":
        their_bins = [
            torch.tensor([-1.0, 0.0, 0.25, 1.0], dtype=their_kw["weight"].dtype),
            torch.linspace(-0.5, 0.5, 4, dtype=their_kw["weight"].dtype),
        ]
        ours_bins = [Tensor(e.numpy()) for e in their_bins]
    else:
        their_bins = ours_bins = bins
    theirs = torch.histogramdd(torch.tensor(data), their_bins, **their_kw)
    ours = Tensor(data).histogramdd(ours_bins, **ours_kw)
    assert isinstance(ours.bin_edges, tuple) and len(ours.bin_edges) == len(theirs.bin_edges)
    for edges, their_edges in zip(ours.bin_edges, theirs.bin_edges, strict=True):
        close(edges, their_edges)
    assert ours.hist.shape == tuple(theirs.hist.shape)
    close(ours.hist, theirs.hist)


def test_histogramdd_errors():
    x = Tensor.rand(5, 2)
    for bad in [
        lambda: Tensor.rand(5).histogramdd(2),
        lambda: x.histogramdd([2]),
        lambda: x.histogramdd(2, range=[0.0, 1.0]),
        lambda: x.histogramdd(2, weight=Tensor.rand(5, 2)),
    ]:
        with pytest.raises(RuntimeError, match="histogramdd"):
            bad()
    with pytest.raises(TypeError, match="histogramdd"):
        Tensor([[1, 2]]).histogramdd(2)


# ---------------------------------------------------------------------------------------------------------------------
# triangular_solve


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("unitriangular", [False, True])
@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
def test_triangular_solve_matches_torch(upper, transpose, unitriangular):
    rng = np.random.default_rng(10)
    a = (rng.normal(size=(2, 3, 3)) + 4 * np.eye(3)).astype(np.float32)
    b = rng.normal(size=(3, 2)).astype(np.float32)
    A, B = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    tA, tB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    sol, coef = B.triangular_solve(A, upper, transpose, unitriangular)
    tsol, tcoef = tB.triangular_solve(tA, upper, transpose, unitriangular)
    assert sol.shape == tuple(tsol.shape) and coef.shape == tuple(tcoef.shape)
    close(sol, tsol, 1e-5, 1e-5)
    close(coef, tcoef)
    (sol * sol).sum().backward()
    (tsol * tsol).sum().backward()
    close(A.grad, tA.grad, 1e-4, 1e-4)
    close(B.grad, tB.grad, 1e-4, 1e-4)


def test_triangular_solve_errors():
    A, b = Tensor([[2.0, 1.0], [0.0, 4.0]]), Tensor([[4.0], [8.0]])
    assert b.triangular_solve(A).solution.tolist() == [[1.0], [2.0]]
    with pytest.raises(TypeError, match="dtype"):
        b.cast(dtypes.float64).triangular_solve(A)
    with pytest.raises(RuntimeError, match="2 dims"):
        Tensor([4.0, 8.0]).triangular_solve(A)
    with pytest.raises(RuntimeError, match="square"):
        b.triangular_solve(Tensor.ones(2, 3))
    with pytest.raises(TypeError):
        b.cast(dtypes.int32).triangular_solve(A.cast(dtypes.int32))


# ---------------------------------------------------------------------------------------------------------------------
# igamma / igammac


def _grid():
    rng = np.random.default_rng(11)
    a = np.concatenate([10 ** rng.uniform(-3, 3, 300), [0.5, 1, 2, 25, 25, 150, 1000, 1e4]])
    x = np.concatenate([a[:300] * np.exp(rng.normal(0, 1.5, 300)), [1e-5, 30, 1e-3, 20, 30, 160, 900, 1.1e4]])
    return a, x


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-6)])
def test_igamma_accuracy(dtype, tol):
    a, x = _grid()
    a, x = a.astype(dtype), x.astype(dtype)
    p = Tensor(a).igamma(Tensor(x)).numpy().astype(np.float64)
    q = Tensor(a).igammac(Tensor(x)).numpy().astype(np.float64)
    ap, xp = a.astype(np.float64), x.astype(np.float64)
    rp, rq = scipy_special.gammainc(ap, xp), scipy_special.gammaincc(ap, xp)
    tiny = 1e-290 if dtype == np.float64 else 1e-30
    for ours, ref in ((p, rp), (q, rq)):
        ok = ref > tiny
        np.testing.assert_allclose(ours[ok], ref[ok], rtol=tol, atol=0)
        np.testing.assert_allclose(ours, ref, rtol=tol, atol=tiny)


def test_igamma_matches_torch_and_edges():
    a = [0.0, 0.0, 1.0, math.inf, math.inf, 1.0, -1.0, 1.0, 2.0, math.nan, 3.0, 0.5]
    x = [0.0, 1.0, 0.0, 1.0, math.inf, math.inf, 1.0, -1.0, math.nan, 1.0, 2.5, 1e-3]
    for dt, tdt in ((dtypes.float32, torch.float32), (dtypes.float64, torch.float64)):
        for name in ("igamma", "igammac"):
            ours = getattr(Tensor(a, dtype=dt), name)(Tensor(x, dtype=dt))
            theirs = getattr(torch.tensor(a, dtype=tdt), name)(torch.tensor(x, dtype=tdt))
            assert ours.dtype == dt
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, equal_nan=True)


def test_igamma_promotion_in_place_and_errors():
    out = Tensor([1, 2]).igamma(Tensor([1.0]))
    assert out.dtype == dtypes.float32 and out.shape == (2,)
    close(out, torch.igamma(torch.tensor([1, 2]), torch.tensor([1.0])))
    t, tt = Tensor([2.0, 3.0]), torch.tensor([2.0, 3.0])
    assert t.igammac_(Tensor([1.0, 4.0])) is t
    close(t, tt.igammac_(torch.tensor([1.0, 4.0])))
    t, tt = Tensor([2.0, 3.0]), torch.tensor([2.0, 3.0])
    close(t.igamma_(Tensor([1.0, 4.0])), tt.igamma_(torch.tensor([1.0, 4.0])))
    with pytest.raises(NotImplementedError):
        Tensor([1, 2]).igamma(Tensor([1, 2]))
    with pytest.raises(TypeError, match="Tensor"):
        Tensor([1.0]).igamma(1.0)
    with pytest.raises(RuntimeError):
        Tensor(2.0).igamma_(Tensor([1.0, 2.0]))


def test_igamma_gradients():
    a = np.array([0.5, 1.5, 3.0, 30.0], dtype=np.float64)
    x = np.array([0.2, 2.0, 1.0, 28.0], dtype=np.float64)
    for name in ("igamma", "igammac"):
        X, tX = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        getattr(Tensor(a), name)(X).sum().backward()
        getattr(torch.tensor(a), name)(tX).sum().backward()
        close(X.grad, tX.grad, 1e-10, 1e-12)
        # (torch has no derivative with respect to a, and says so at backward)
        A = Tensor(a, requires_grad=True)
        with pytest.raises(NotImplementedError, match="derivative"):
            getattr(A, name)(Tensor(x)).sum().backward()


# ---------------------------------------------------------------------------------------------------------------------
# storage and layout queries


def test_flags_are_torchs_properties_and_methods():
    t, tt = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    for name in (
        "is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_mkldnn", "is_nested", "is_vulkan", "is_xpu",
        "is_ipu", "is_mps", "is_xla", "is_mtia", "is_maia", "retains_grad",
    ):  # fmt: skip
        assert not callable(getattr(torch.Tensor, name)) and isinstance(getattr(Tensor, name), property)
        assert getattr(t, name) is getattr(tt, name) is False
    for name in ("is_inference", "is_pinned", "is_shared", "dim_order", "data_ptr", "storage_offset"):
        assert callable(getattr(tt, name)) and callable(getattr(t, name))
    assert t.is_inference() is t.is_pinned() is t.is_shared() is False
    assert t.pin_memory() is t and t.share_memory_() is t and t.is_shared()


def test_retains_grad():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert not y.retains_grad
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad


def test_storage_offset_and_data_ptr():
    x, tx = Tensor.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    y, ty = x[1:], tx[1:]
    assert y[1].storage_offset() == ty[1].storage_offset() == 8
    assert y[1].data_ptr() - x.data_ptr() == ty[1].data_ptr() - tx.data_ptr()
    for view in (lambda v: v, lambda v: v[1], lambda v: v[1:, 2:], lambda v: v.T[2:], lambda v: v[:, 1].reshape(3, 1)):
        assert view(x).storage_offset() == view(tx).storage_offset()
        assert view(x).data_ptr() - x.data_ptr() == view(tx).data_ptr() - tx.data_ptr()
    assert Tensor.arange(3.0).data_ptr() != x.data_ptr()
    assert Tensor.zeros(0).data_ptr() == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.zeros(2, 1, 3),
        lambda m: m.zeros(2, 3).T,
        lambda m: m.zeros(1, 1),
        lambda m: m.zeros(2, 3, 4).permute(2, 0, 1),
        lambda m: m.zeros(3, 1).expand(3, 4),
    ],
)
def test_dim_order(make):
    assert make(Tensor).dim_order() == make(torch).dim_order()


def test_type():
    for dt, tdt in [(dtypes.float32, torch.float32), (dtypes.int64, torch.int64), (dtypes.bool, torch.bool),
                    (dtypes.uint8, torch.uint8), (dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16),
                    (dtypes.int8, torch.int8), (dtypes.float64, torch.float64)]:  # fmt: skip
        assert Tensor([1], dtype=dt).type() == torch.tensor([1], dtype=tdt).type()
    t = Tensor([1.5, -2.5])
    assert t.type("torch.IntTensor").dtype == dtypes.int32
    assert t.type("torch.IntTensor").tolist() == torch.tensor([1.5, -2.5]).type("torch.IntTensor").tolist()
    assert t.type(torch.int64).dtype == dtypes.int64
    assert t.type(torch.DoubleTensor).dtype == dtypes.float64
    assert t.type(dtypes.float32) is t and t.type("float16").dtype == dtypes.float16
    with pytest.raises(ValueError, match="invalid type"):
        t.type("torch.NoSuchTensor")


def test_new_empty_strided_nonzero_static_and_unsafe_splits():
    t = Tensor.ones(2, dtype=dtypes.float64)
    e = t.new_empty_strided((2, 3), (1, 2))
    assert e.shape == (2, 3) and e.dtype == dtypes.float64
    with pytest.raises(RuntimeError):
        t.new_empty_strided((2, 3), (1,))
    v, tv = Tensor([1, 0, 2, 0, 3]), torch.tensor([1, 0, 2, 0, 3])
    assert v.nonzero_static(size=2).tolist() == tv.nonzero_static(size=2).tolist()
    assert v.nonzero_static(size=5, fill_value=7).tolist() == tv.nonzero_static(size=5, fill_value=7).tolist()
    m = Tensor([[0, 1], [2, 0]])
    assert m.nonzero_static(size=3).tolist() == torch.tensor([[0, 1], [2, 0]]).nonzero_static(size=3).tolist()
    with pytest.raises(RuntimeError, match="size"):
        v.nonzero_static(size=-1)
    x, tx = Tensor.arange(10.0).reshape(5, 2), torch.arange(10.0).reshape(5, 2)
    for ours, theirs in [
        (x.unsafe_split(2), tx.unsafe_split(2)),
        (x.unsafe_chunk(3), tx.unsafe_chunk(3)),
        (x.unsafe_split_with_sizes([1, 4]), tx.unsafe_split_with_sizes([1, 4])),
        (x.unsafe_split(1, dim=1), tx.unsafe_split(1, dim=1)),
    ]:
        assert [p.tolist() for p in ours] == [p.tolist() for p in theirs]


# ---------------------------------------------------------------------------------------------------------------------
# Python functions per element, resizing, devices


def test_apply_map_map2():
    t, tt = Tensor([1, 2, 3]), torch.tensor([1, 2, 3])
    assert t.apply_(lambda v: v * 2.7) is t
    assert t.tolist() == tt.apply_(lambda v: v * 2.7).tolist() and t.dtype == dtypes.int32
    f, tf = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    f.map_(Tensor([3.0]), lambda a, b: a * b)
    assert f.tolist() == tf.map_(torch.tensor([3.0]), lambda a, b: a * b).tolist()
    f.map2_(Tensor([1.0, 1.0]), Tensor([2.0]), lambda a, b, c: a + b - c)
    assert f.tolist() == tf.map2_(torch.tensor([1.0, 1.0]), torch.tensor([2.0]), lambda a, b, c: a + b - c).tolist()
    # through a view: the base sees it
    base = Tensor([1.0, 2.0, 3.0])
    base[1:].apply_(lambda v: -v)
    assert base.tolist() == [1.0, -2.0, -3.0]
    with pytest.raises(RuntimeError, match="grad"):
        Tensor([1.0], requires_grad=True).apply_(lambda v: v)
    with pytest.raises(TypeError, match="expected"):
        Tensor([1.0]).map_(Tensor([1.0], dtype=dtypes.float64), lambda a, b: a)
    with pytest.raises(RuntimeError, match="broadcast"):
        Tensor([1.0]).map_(Tensor([1.0, 2.0]), lambda a, b: a)
    with pytest.raises(TypeError, match="number"):
        Tensor([1.0]).apply_(lambda v: "x")


def test_resize():
    t = Tensor([1.0, 2.0, 3.0])
    assert t.resize_(2, 2) is t and t.shape == (2, 2)
    assert t.tolist()[0] == [1.0, 2.0] and t.tolist()[1][0] == 3.0
    t.resize_((1, 2))
    assert t.tolist() == torch.tensor([1.0, 2.0, 3.0]).resize_((1, 2)).tolist()
    u = Tensor([5, 6, 7, 8])
    u.resize_as_(Tensor.zeros(3))
    assert u.tolist() == [5, 6, 7]
    with pytest.raises(RuntimeError, match="grad"):
        Tensor([1.0], requires_grad=True).resize_(2)
    with pytest.raises(RuntimeError):
        Tensor([1.0]).resize_(-1)


def test_cuda_names_what_to_install():
    from uopkit.device import Device, DeviceError

    try:
        Device["CUDA"]
    except DeviceError:
        with pytest.raises(DeviceError, match="plugins/cuda"):
            Tensor([1.0]).cuda()
    else:
        assert Tensor([1.0]).cuda().device == "CUDA"


@pytest.mark.parametrize("name", ["to_sparse", "to_sparse_csr", "q_scale", "int_repr", "chalf", "storage"])
def test_sparse_quantized_complex_methods_say_why(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(Tensor([1.0]), name)()


# ---------------------------------------------------------------------------------------------------------------------
# randint_like, dequantize


def test_randint_like_and_dequantize_are_torchs() -> None:
    # randint_like: the input's shape, dtype (a float tensor's draws are floats) and device; torch's (high) and
    # (low, high) forms. dequantize of a tensor that isn't quantized: float32 values (a float32 tensor itself)
    for like, args, tlike in [
        (Tensor.zeros(2, 3, dtype=dtypes.int32), (5,), torch.zeros(2, 3, dtype=torch.int32)),
        (Tensor.zeros(4), (3, 7), torch.zeros(4)),
        (Tensor.zeros(5, dtype=dtypes.uint8), (250, 256), torch.zeros(5, dtype=torch.uint8)),
    ]:
        ours, theirs = like.randint_like(*args), torch.randint_like(tlike, *args)
        assert ours.shape == tuple(theirs.shape) and ours.device == like.device
        assert str(ours.numpy().dtype) == str(theirs.numpy().dtype)
        low, high = (0, args[0]) if len(args) == 1 else args
        assert ((ours.numpy() >= low) & (ours.numpy() < high)).all()
    assert Tensor.zeros(3).randint_like(2, dtype=dtypes.int64).dtype == dtypes.int64
    assert Tensor.zeros(1000, dtype=dtypes.int32).randint_like(0, 4).numpy().tolist().count(3) > 150
    t = Tensor([1.0, 2.5])
    assert t.dequantize() is t
    for dt, tdt in [(dtypes.float16, torch.float16), (dtypes.int32, torch.int32), (dtypes.float64, torch.float64)]:
        ours, theirs = Tensor([1, 2], dtype=dt).dequantize(), torch.tensor([1, 2], dtype=tdt).dequantize()
        assert ours.dtype == dtypes.float32 and theirs.dtype == torch.float32 and ours.tolist() == theirs.tolist()


def test_to_dense_of_a_dense_tensor_is_torchs() -> None:
    # fastText-style code reads `emb.weight.grad.to_dense()` after Embedding(sparse=True): torch gives the tensor itself
    # for a strided tensor (uopkit raised AttributeError)
    for sparse in (False, True):
        ours = nn.EmbeddingBag(5, 3, mode="sum", sparse=sparse)
        theirs = torch.nn.EmbeddingBag(5, 3, mode="sum", sparse=sparse)
        ours.load_state_dict({"weight": theirs.weight.detach().numpy()})
        idx, offsets = np.array([1, 3, 3, 0]), np.array([0, 2])
        ours(Tensor(idx), Tensor(offsets)).pow(2).sum().backward()
        theirs(torch.tensor(idx), torch.tensor(offsets)).pow(2).sum().backward()
        grads = ours.weight.grad.to_dense().numpy(), theirs.weight.grad.to_dense().numpy()
        np.testing.assert_allclose(*grads, rtol=1e-6)
    t, tt = Tensor([1.0, 0.0], requires_grad=True), torch.tensor([1.0, 0.0], requires_grad=True)
    assert t.to_dense() is t and tt.to_dense() is tt
    assert t.to_dense(dtypes.float32) is t and tt.to_dense(torch.float32) is tt
    ours, theirs = t.to_dense(dtypes.float64), tt.to_dense(torch.float64)
    assert ours.dtype == dtypes.float64 and theirs.dtype == torch.float64 and ours is not t
    (ours * 3).sum().backward()
    (theirs * 3).sum().backward()
    assert t.grad.tolist() == tt.grad.tolist()


def test_module_constants_and_vmap():
    # a port reads Tensor.X (or uopkit.X) for torch's constants torch.pi, torch.inf, ...
    import uopkit

    for name in ("pi", "e", "inf", "nan", "newaxis"):
        want = getattr(torch, name)
        for got in (getattr(Tensor, name), getattr(uopkit, name)):
            assert got is want or got == want or (math.isnan(got) and math.isnan(want))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert Tensor(x)[Tensor.newaxis].shape == torch.from_numpy(x)[torch.newaxis].shape
    np.testing.assert_allclose(
        Tensor.cos(2 * Tensor.pi * Tensor(x)).numpy(), torch.cos(2 * torch.pi * torch.from_numpy(x)).numpy(), atol=1e-6
    )
    # torch.vmap is uopkit.vmap (uopkit.func.vmap)
    got = uopkit.vmap(lambda row, w: (row * w).sum(), in_dims=(0, None))(Tensor(x), Tensor([1.0, 2.0, 3.0]))
    want = torch.vmap(lambda row, w: (row * w).sum(), in_dims=(0, None))(
        torch.from_numpy(x), torch.tensor([1.0, 2.0, 3.0])
    )
    np.testing.assert_allclose(got.numpy(), want.numpy())


# ---------------------------------------------------------------------------------------------------------------------
# rsub


@pytest.mark.parametrize(
    "values, other, alpha", [([1, 2], 10, 1), ([1, 2], 10, 3), ([1.0, 2.0], 10, 2.5), ([1, 2], 2.5, 1)]
)
def test_rsub_matches_torch(values, other, alpha):
    # torch.rsub(input, other, alpha) = other - alpha * input; it was missing
    want = torch.rsub(torch.tensor(values), other, alpha=alpha)
    got = Tensor.rsub(Tensor(values), other, alpha=alpha)
    close(got, want)
    assert dtypes.is_float(got.dtype) == want.dtype.is_floating_point
    close(
        Tensor(values).rsub(Tensor([5, 7]), alpha=alpha),
        torch.rsub(torch.tensor(values), torch.tensor([5, 7]), alpha=alpha),
    )

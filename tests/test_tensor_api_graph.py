"""Ops of graph and tabular workloads (message passing, embedding bags, binning): scatter_add, index_add,
index_select, searchsorted, bucketize, nansum and nanmean, values and gradients compared with PyTorch (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.tensor.support import ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)


def test_message_passing_with_index_select_index_add_and_scatter_add_as_torch():
    # a graph layer: features of each edge's source node, summed into its destination node, divided by the degree
    nodes, edges, features = 6, 9, 4
    x = RNG.standard_normal((nodes, features)).astype(np.float32)
    src, dst = RNG.integers(0, nodes, edges), RNG.integers(0, nodes, edges)

    def layer(lib, x, src, dst):
        zeros = (lambda *s: torch.zeros(*s)) if lib is torch else Tensor.zeros
        msg = x.index_select(0, src) * 2
        summed = zeros(nodes, features).index_add(0, dst, msg, alpha=0.5)
        deg = zeros(nodes).scatter_add(0, dst, msg[:, 0] * 0 + 1).clamp(min=1)
        # and scatter_add along dim 1 with an index smaller than self (torch's rule: only its extent is written)
        cols = zeros(nodes, features + 2).scatter_add(1, dst[:nodes, None].expand(nodes, 2) % features, x[:, :2])
        return summed / deg[:, None], cols

    tx = torch.tensor(x, requires_grad=True)
    ux = Tensor(x, requires_grad=True)
    want = layer(torch, tx, torch.tensor(src), torch.tensor(dst))
    got = layer(Tensor, ux, Tensor(src.astype(np.int32)), Tensor(dst.astype(np.int32)))
    upstream = [RNG.standard_normal(tuple(w.shape)).astype(np.float32) for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-6)
    sum((w * torch.tensor(u)).sum() for w, u in zip(want, upstream, strict=True)).backward()
    Tensor.stack(*[(g * Tensor(u)).sum() for g, u in zip(got, upstream, strict=True)]).sum().backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="index_add"):
        Tensor.zeros(3, 2).index_add(0, Tensor([0, 1]), Tensor.ones(3, 2))
    with pytest.raises(TypeError, match="index_select"):
        Tensor.zeros(3, 2).index_select(0, Tensor([[0]]))


def test_searchsorted_and_bucketize_as_torch():
    nan = float("nan")
    # (a NaN in the sorted sequence breaks torch's binary search: where it lands depends on the search path)
    seq = np.array([[-1.0, 0.0, 0.0, 2.5, 2.5], [1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    values = np.array([[0.0, -5.0, 2.5, 9.0, nan], [3.0, 3.5, 0.0, 5.0, 1.0]], np.float32)
    for right in (False, True):
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(values), right=right)
        got = Tensor(seq).searchsorted(Tensor(values), right=right)
        assert got.dtype == dtypes.int32
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        # one sorted row for every value (of any shape), and bucketize's reversed roles
        want = torch.searchsorted(torch.tensor(seq[1]), torch.tensor(values), side="right" if right else "left")
        got = Tensor(seq[1]).searchsorted(Tensor(values), side="right" if right else "left")
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        want = torch.bucketize(torch.tensor(values), torch.tensor(seq[0]), right=right)
        np.testing.assert_array_equal(Tensor(values).bucketize(Tensor(seq[0]), right=right).numpy(), want.numpy())
    with pytest.raises(ShapeError, match="searchsorted"):
        Tensor(seq).searchsorted(Tensor(values[:1]))
    # side="left" with right=True asks for both sides: torch raises (a RuntimeError), and so do we
    with pytest.raises(RuntimeError):
        torch.searchsorted(torch.tensor(seq), torch.tensor(values), side="left", right=True)
    with pytest.raises(RuntimeError, match="searchsorted"):
        Tensor(seq).searchsorted(Tensor(values), side="left", right=True)
    want = torch.searchsorted(torch.tensor(seq), torch.tensor(values), side="right", right=False)
    assert Tensor(seq).searchsorted(Tensor(values), side="right", right=False).tolist() == want.tolist()
    # torch's out_int32=: int32 as asked (ours are int32 without it too), the same positions
    for out_int32 in (True, False):
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(values), out_int32=out_int32, right=True)
        got = Tensor(seq).searchsorted(Tensor(values), right=True, out_int32=out_int32)
        assert got.dtype == dtypes.int32 and got.tolist() == want.tolist()
        want = torch.bucketize(torch.tensor(values), torch.tensor(seq[1]), out_int32=out_int32)
        got = Tensor(values).bucketize(Tensor(seq[1]), out_int32=out_int32)
        assert got.dtype == dtypes.int32 and got.tolist() == want.tolist()
    assert torch.searchsorted(torch.tensor(seq[1]), torch.tensor(1.5), out_int32=True).dtype == torch.int32
    assert Tensor(seq[1]).searchsorted(1.5, out_int32=True).shape == ()


def test_nansum_and_nanmean_values_and_gradients_as_torch():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[0, 1] = x[2, 1:] = float("nan")
    for fn in (
        lambda t: t.nansum(),
        lambda t: t.nansum(1),
        lambda t: t.nanmean(dim=0, keepdim=True),
        lambda t: t.nanmean(1),
    ):
        tx, ux = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
        want, got = fn(tx), fn(ux)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6)
        want.sum().backward()
        got.sum().backward()
        np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    # a row of NaNs only: NaN mean (its gradient 0, where torch's is NaN)
    assert np.isnan(Tensor([[float("nan")] * 2]).nanmean(1).item())
    assert Tensor([1, 2, 3]).nansum().item() == 6
    assert Tensor(x).half().nanmean().dtype == dtypes.float16


def test_nanmean_takes_torchs_dtype_keyword():
    # z-normalizing a series with gaps in float64: torch.nanmean(x, dim, keepdim, dtype=...) (it raised a TypeError)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    x[0, 2] = x[1, :] = float("nan")
    for dt, tdt in ((dtypes.float64, torch.float64), (dtypes.float32, torch.float32)):
        want = torch.nanmean(torch.tensor(x), 1, True, dtype=tdt)
        got = Tensor.nanmean(Tensor(x), 1, True, dtype=dt)
        assert got.dtype == dt and got.shape == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    got = Tensor(x).half().nanmean(dim=1, dtype=dtypes.float32)
    assert got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), torch.tensor(x).half().nanmean(1, dtype=torch.float32).numpy(), rtol=1e-3)
    # an integer dtype is refused, as torch's RuntimeError
    with pytest.raises(RuntimeError, match="nanmean: dtype must be a floating-point dtype"):
        Tensor(x).nanmean(dtype=dtypes.int64)

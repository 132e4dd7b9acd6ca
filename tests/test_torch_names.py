"""PyTorch's other names and short compositions (tensor/torch_names.py) against torch itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.dtype import to_numpy_dtype
from uopkit.tensor import ArgumentError, ShapeError

RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
V = (RNG.random(4) * 1.8 - 0.9).astype(np.float32)


def _same(got, want, atol=1e-5):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, atol)
        return
    if isinstance(want, torch.Tensor):
        assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
        mine, theirs = np.dtype(to_numpy_dtype(got.dtype)), want.numpy().dtype
        # (index results are int32 here, int64 in torch: docs/semantics.md)
        assert mine == theirs or (mine == np.int32 and theirs == np.int64), (got.dtype, want.dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.double().numpy(), atol=atol, rtol=1e-5)
    else:
        assert got == want


UNARY = ["absolute", "arcsin", "arctan", "arcsinh", "negative", "positive", "fix", "sgn", "deg2rad", "rad2deg",
         "sinc", "fliplr", "flipud", "msort", "rot90", "hardshrink", "byte", "char", "argwhere", "ndimension",
         "nelement", "is_signed", "is_complex"]  # fmt: skip


@pytest.mark.parametrize("name", UNARY)
def test_unary_names(name):
    x = V if name in ("arcsin", "arctanh") else A
    if name == "hardshrink":
        _same(Tensor(x).hardshrink(0.3), torch.nn.functional.hardshrink(torch.from_numpy(x), 0.3))
        return
    _same(getattr(Tensor(x), name)(), getattr(torch.from_numpy(x), name)())


BINARY = ["arctan2", "divide", "true_divide", "multiply", "subtract", "greater", "greater_equal", "less",
          "less_equal", "not_equal", "logaddexp2", "dist", "inner", "is_same_size"]  # fmt: skip


@pytest.mark.parametrize("name", BINARY)
def test_binary_names(name):
    got = getattr(Tensor(A), name)(Tensor(B))
    _same(got, getattr(torch.from_numpy(A), name)(torch.from_numpy(B)))


def test_compositions_match_torch():
    ta, tb, tv = torch.from_numpy(A), torch.from_numpy(B), torch.from_numpy(V)
    a, b, v = Tensor(A), Tensor(B), Tensor(V)
    m = RNG.standard_normal((4, 4)).astype(np.float32)
    tm, um = torch.from_numpy(m), Tensor(m)
    _same(a.addmm(a, um, beta=0.5, alpha=2), ta.addmm(ta, tm, beta=0.5, alpha=2))
    # beta 0: self isn't read, so its NaN don't show
    nan = np.full((3, 4), np.nan, np.float32)
    _same(Tensor(nan).addmm(a, um, beta=0), torch.from_numpy(nan).addmm(ta, tm, beta=0))
    _same(v.addmv(um, v, alpha=3), tv.addmv(tm, tv, alpha=3))
    _same(a.addr(Tensor(A[:, 0]), v), ta.addr(ta[:, 0], tv))
    batch = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    tbatch = torch.from_numpy(batch)
    _same(a.addbmm(Tensor(batch), um.expand(2, 4, 4)), ta.addbmm(tbatch, tm.expand(2, 4, 4)))
    _same(
        a.unsqueeze(0).baddbmm(Tensor(batch), um.expand(2, 4, 4), beta=2),
        ta.unsqueeze(0).baddbmm(tbatch, tm.expand(2, 4, 4), beta=2),
    )
    for n in (0, 1, 2, 5, -1, -2):
        _same(um.matrix_power(n), tm.matrix_power(n), atol=1e-3)
    _same(v.vdot(v), tv.vdot(tv))
    for p in (0, 1, 2, 3, math.inf, -math.inf):
        _same(a.dist(b, p), ta.dist(tb, p))
    _same(a.inner(Tensor(2.0)), ta.inner(torch.tensor(2.0)))
    _same(a.inner(v), ta.inner(tv))
    _same(a.aminmax(), ta.aminmax())
    _same(a.aminmax(dim=1, keepdim=True), ta.aminmax(dim=1, keepdim=True))
    _same(Tensor([0.0, 1.0, 0.5]).float_power(2), torch.tensor([0.0, 1.0, 0.5]).float_power(2))
    x = Tensor([-1.0, 0.0, 2.0, float("nan")])
    _same(x.heaviside(Tensor([0.5])), torch.tensor([-1.0, 0.0, 2.0, float("nan")]).heaviside(torch.tensor([0.5])))
    _same(
        Tensor([-math.inf, 3.0, math.inf]).logaddexp2(Tensor([-math.inf, 3.0, 1.0])),
        torch.tensor([-math.inf, 3.0, math.inf]).logaddexp2(torch.tensor([-math.inf, 3.0, 1.0])),
    )


def test_shape_compositions_match_torch():
    x = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)
    t, tt = Tensor(x), torch.from_numpy(x)
    for k in (-3, -1, 0, 1, 2, 5):
        _same(t.rot90(k, (1, 2)), tt.rot90(k, (1, 2)))
    _same(t.broadcast_to((3, 2, 4, 6)), tt.broadcast_to((3, 2, 4, 6)))
    _same(t.broadcast_to((-1, 4, 6)), tt.broadcast_to((-1, 4, 6)))
    _same(t.hsplit(2), tt.hsplit(2))
    _same(t.hsplit([1, 3]), tt.hsplit([1, 3]))
    _same(t.vsplit(2), tt.vsplit(2))
    _same(t.dsplit([2]), tt.dsplit([2]))
    _same(Tensor(x[0, 0]).hsplit(3), tt[0, 0].hsplit(3))
    _same(t.split_with_sizes([1, 3], 1), tt.split_with_sizes([1, 3], 1))
    _same(t.select(1, -1), tt.select(1, -1))
    _same(t.moveaxis(0, -1), tt.moveaxis(0, -1))
    _same(t.swapdims(0, 2), tt.swapdims(0, 2))
    for offset in (0, 1, -2):
        _same(Tensor(A).diag_embed(offset), torch.from_numpy(A).diag_embed(offset))
        _same(Tensor(A).diag_embed(offset, 0, 2), torch.from_numpy(A).diag_embed(offset, 0, 2))
        _same(Tensor(A).diagflat(offset), torch.from_numpy(A).diagflat(offset))
    assert Tensor([-0.0, math.nan]).diag_embed().numpy()[0, 0] == 0 and np.signbit(
        Tensor([-0.0]).diag_embed().numpy()[0, 0]
    )
    assert Tensor(A).equal(Tensor(A)) and not Tensor(A).equal(Tensor(B)) and not Tensor(A).equal(Tensor(A[:2]))
    assert Tensor([2]).is_nonzero() and not Tensor([0.0]).is_nonzero()
    assert Tensor(A).cpu().device == "CPU"


def test_add_and_sub_take_alpha():
    ta, tb = torch.from_numpy(A), torch.from_numpy(B)
    _same(Tensor(A).add(Tensor(B), alpha=2.5), ta.add(tb, alpha=2.5))
    _same(Tensor(A).sub(Tensor(B), alpha=-2), ta.sub(tb, alpha=-2))
    _same(
        Tensor([1, 2]).add(Tensor([3, 4]), alpha=3),
        torch.tensor([1, 2], dtype=torch.int32).add(torch.tensor([3, 4], dtype=torch.int32), alpha=3),
    )
    _same(Tensor(A).subtract(1.5, alpha=2), ta.subtract(1.5, alpha=2))
    with pytest.raises(ArgumentError, match="float alpha"):
        Tensor([1, 2]).add(Tensor([3, 4]), alpha=0.5)


def test_bad_arguments_raise_clearly():
    with pytest.raises(ShapeError, match="fliplr: needs a tensor of 2 or more dims"):
        Tensor([1.0]).fliplr()
    with pytest.raises(ArgumentError, match="rot90: the two dims must differ"):
        Tensor(A).rot90(1, (1, 1))
    with pytest.raises(ArgumentError, match="hsplit: dim 1 of size 4 doesn't split into 3 equal parts"):
        Tensor(A).hsplit(3)
    with pytest.raises(ShapeError, match=r"addmm: needs operands of 2 and 2 dims, got shapes \(4,\) and \(3, 4\)"):
        Tensor(A).addmm(Tensor(V), Tensor(A))
    with pytest.raises(ShapeError, match="is_nonzero: needs a tensor of one element"):
        Tensor(A).is_nonzero()
    with pytest.raises(ArgumentError, match="heaviside: values must have the input's dtype"):
        Tensor(A).heaviside(Tensor([1]))

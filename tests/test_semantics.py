"""Tensor semantics compared with PyTorch: value semantics of assign (STORE), autograd on constructed tensors,
zero-size shapes, errors, numerics and the ops PyTorch users reach for."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.engine.jit import TinyJit
from uopkit.engine.realize import copy_on_write_buffers
from uopkit.nn import BatchNorm2d
from uopkit.nn.optim import SGD, Adam

# ---------------------------------------------------------------------------------------------------------------------
# 1. a lazy value never sees a later assign


def test_lazy_value_keeps_value_after_assign():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    x = Tensor([3.0, 4.0])
    loss = (w * x).sum()
    w.assign(w * 10).realize()
    assert loss.item() == 11.0
    assert w.tolist() == [10.0, 20.0]


def test_large_reader_gets_copy_on_write():
    # a reader bigger than the buffer keeps the old contents through a copy instead of being computed now
    w = Tensor(np.arange(4, dtype=np.float32)).contiguous().realize()
    big = w.reshape(1, 4).expand(64, 4) + Tensor(np.ones((64, 4), np.float32))
    before = set(map(id, copy_on_write_buffers))
    w.assign(w * 0).realize()
    assert [b.size for b in copy_on_write_buffers if id(b) not in before] == [4]
    np.testing.assert_array_equal(big.numpy(), np.arange(4, dtype=np.float32)[None] + 1 + np.zeros((64, 1)))


def test_reader_of_old_and_new_contents():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    old = w * 1
    w.assign(Tensor([5.0, 6.0]))
    both = old + w
    both.realize()
    assert both.tolist() == [6.0, 8.0]
    assert old.tolist() == [1.0, 2.0]


def test_views_see_the_assign():
    # a reshape or slice is a view (as in PyTorch): it shows the new contents
    a = Tensor([1, 2, 3]).contiguous().realize()
    v, s = a.reshape(3, 1), a[1:]
    a.assign(Tensor([7, 8, 9])).realize()
    assert v.tolist() == [[7], [8], [9]]
    assert s.tolist() == [8, 9]


def test_setitem_keeps_lazy_values():
    a = Tensor([1, 2, 3]).contiguous().realize()
    b = a + 1
    a[0] = 5
    ta = torch.tensor([1, 2, 3])
    tb = ta + 1
    ta[0] = 5
    assert b.tolist() == tb.tolist()
    assert a.tolist() == ta.tolist()


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_loss_after_optimizer_step(opt_cls):
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0])
    opt = opt_cls([w], lr=0.5)
    loss = (w * x).sum()
    loss.backward()
    grad = w.grad
    opt.step()
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    topt = {SGD: torch.optim.SGD, Adam: torch.optim.Adam}[opt_cls]([tw], lr=0.5)
    tloss = (tw * torch.tensor([3.0, 4.0])).sum()
    tloss.backward()
    topt.step()
    assert loss.item() == tloss.item() == 11.0
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    # the gradient is the one of the step's loss, not recomputed from the updated weights
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy())


def test_gradient_reading_updated_weights():
    # dL/dw1 reads w2: after the step it still holds the gradient at the old w2
    w1 = Tensor([[1.0, 2.0]], requires_grad=True)
    w2 = Tensor([[3.0], [4.0]], requires_grad=True)
    opt = SGD([w1, w2], lr=1.0)
    x = Tensor([[1.0], [2.0]])
    (x @ w1 @ w2).sum().backward()
    g1 = w1.grad
    opt.step()
    tw1 = torch.tensor([[1.0, 2.0]], requires_grad=True)
    tw2 = torch.tensor([[3.0], [4.0]], requires_grad=True)
    (torch.tensor([[1.0], [2.0]]) @ tw1 @ tw2).sum().backward()
    np.testing.assert_allclose(g1.numpy(), tw1.grad.numpy())
    np.testing.assert_allclose(w2.numpy(), (tw2 - tw2.grad).detach().numpy())


def test_batchnorm_running_stats_keep_lazy_reads():
    bn = BatchNorm2d(2)
    before = bn.running_mean * 1
    x = Tensor(np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
    with Tensor.train():
        bn(x).realize()
    tbn = torch.nn.BatchNorm2d(2)
    tbn(torch.arange(16, dtype=torch.float32).reshape(2, 2, 2, 2))
    assert before.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-6)


def test_jit_step_with_value_semantics():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(5)]
    w = Tensor(w0, requires_grad=True)
    opt = SGD([w], lr=0.1)

    @TinyJit
    def step(x):
        opt.zero_grad()
        loss = (x @ w).square().sum()
        loss.backward()
        opt.step()
        return loss

    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    for xn in xs:
        loss = step(Tensor(xn)).item()
        topt.zero_grad()
        tloss = (torch.tensor(xn) @ tw).square().sum()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss, tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# 2. every tensor that asks for a gradient gets its own

CONSTRUCTORS = {
    "ones": (lambda: Tensor.ones(3, requires_grad=True), lambda: torch.ones(3, requires_grad=True)),
    "zeros": (lambda: Tensor.zeros(3, requires_grad=True), lambda: torch.zeros(3, requires_grad=True)),
    "full": (lambda: Tensor.full((3,), 2.0, requires_grad=True), lambda: torch.full((3,), 2.0, requires_grad=True)),
    "arange": (
        lambda: Tensor.arange(3, dtype="float32", requires_grad=True),
        lambda: torch.arange(3, dtype=torch.float32, requires_grad=True),
    ),
    "eye": (lambda: Tensor.eye(3, requires_grad=True), lambda: torch.eye(3, requires_grad=True)),
    "rand": (lambda: Tensor.rand(3, requires_grad=True), lambda: torch.rand(3, requires_grad=True)),
    "randn": (lambda: Tensor.randn(3, requires_grad=True), lambda: torch.randn(3, requires_grad=True)),
    "list": (lambda: Tensor([1.0, 1.0, 1.0], requires_grad=True), lambda: torch.tensor([1.0] * 3, requires_grad=True)),
    "numpy": (
        lambda: Tensor(np.ones(3, np.float32), requires_grad=True),
        lambda: torch.tensor(np.ones(3, np.float32), requires_grad=True),
    ),
    "scalar": (lambda: Tensor(2.0, requires_grad=True), lambda: torch.tensor(2.0, requires_grad=True)),
    "zeros_like": (
        lambda: Tensor.ones(2, 3).zeros_like(requires_grad=True),
        lambda: torch.zeros_like(torch.ones(2, 3), requires_grad=True),
    ),
    "empty": (lambda: Tensor.empty(3, requires_grad=True), lambda: torch.empty(3, requires_grad=True)),
}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_constructor_leaves_get_their_own_gradient(name):
    ours, theirs = CONSTRUCTORS[name]
    a, b = ours(), ours()
    ta, tb = theirs(), theirs()
    assert a.requires_grad and b.requires_grad
    (a * 2 + b * 3).sum().backward()
    (ta * 2 + tb * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())


def test_constructor_leaf_values_unchanged():
    assert Tensor.ones(2, requires_grad=True).tolist() == [1.0, 1.0]
    assert Tensor.full((2,), 3.5, requires_grad=True).tolist() == [3.5, 3.5]
    assert Tensor(2.0, requires_grad=True).item() == 2.0
    assert Tensor.eye(2, requires_grad=True).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert Tensor.ones(2, requires_grad=False).requires_grad is False

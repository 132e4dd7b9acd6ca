"""Deep graphs: long chains of lazy ops realize, differentiate and print without recursing once per node.

Every walk over a graph (toposort, rewrites, shapes and ranges, kernelize, lowering, gradients) must be iterative. The
chains here run under a recursion limit only a few hundred frames above the test's own depth, so any walk that
recurses once per node fails with RecursionError long before the chain ends.
"""

import contextlib
import sys

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.uop.ops import Ops, PatternMatcher, UOp, graph_rewrite


@contextlib.contextmanager
def shallow_stack(headroom: int = 400):
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + headroom)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


# deeper than the headroom of shallow_stack: one frame per node overflows it
N = 1000


def _chains():
    # (name, lazy tensor, expected values), built one at a time
    x = Tensor.arange(6).float()
    y = Tensor.arange(6).float() * 0.5
    for _ in range(N):
        x = x + y
    yield "add", x, np.arange(6) * (1 + 0.5 * N)
    x = Tensor.arange(6).cast(dtypes.int32)
    y = Tensor.ones(6, dtype=dtypes.int32)
    for _ in range(N):
        x = x + y
    yield "int add", x, np.arange(6) + N
    x = Tensor.arange(6).float()
    for _ in range(N):
        x = (x + 1).reshape(2, 3).permute(1, 0).permute(1, 0).reshape(6)
    yield "movement", x, np.arange(6) + N
    x = Tensor.arange(6).float()
    for _ in range(N):
        x = (x < 1e9).where(x + 1, x)
    yield "where", x, np.arange(6) + N
    x = Tensor.arange(6).float()
    for _ in range(N):
        x = x.pad(((1, 0),))[1:] * 1.0
    yield "pad and shrink", x, np.arange(6)


@pytest.mark.parametrize("name", ["add", "int add", "movement", "where", "pad and shrink"])
def test_long_chain_realizes_without_recursion(name):
    x, want = next((x, want) for n, x, want in _chains() if n == name)
    with shallow_stack():
        got = x.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_gradient_of_a_long_chain():
    w_np = np.array([1.0, 2.0, 3.0], np.float32)
    w = Tensor(w_np, requires_grad=True)
    x = w
    n = 5000
    for _ in range(n):
        x = x * 1.0001 + 0.5
    with shallow_stack():
        (x * x).sum().backward()
        g = w.grad.numpy()
    k = 1.0001**n
    # x = k*w + c with c = 0.5 * (k - 1) / 0.0001
    c = 0.5 * (k - 1) / 0.0001
    np.testing.assert_allclose(g, 2 * (k * w_np + c) * k, rtol=1e-3)


def test_deep_uop_graph_walks():
    # the UOp layer on its own: building, toposort, rewriting, range analysis and printing of a deep graph
    x = UOp.variable("x", 0, 10)
    y = x
    for _ in range(20_000):
        y = y + 1
    with shallow_stack():
        assert len(y.toposort()) == 20_000 + 2
        assert (y.vmin, y.vmax) == (20_000, 20_010)
        assert "nodes>" in repr(y)
        folded = graph_rewrite(y, PatternMatcher([]), name="identity")
        assert folded is y
        z = y.substitute({x: UOp.variable("z", 0, 1)})
        assert z.vmax == 20_001
        assert y.tuplize[0] == Ops.ADD.value


def test_a_100k_op_chain_realizes():
    # the acceptance case: an unrolled loop of 100 000 small updates is one lazy graph, realized at once
    x = Tensor.ones(4)
    for _ in range(100_000):
        x = x + 1
    with shallow_stack():
        np.testing.assert_allclose(x.numpy(), np.full(4, 100_001.0))


def test_backward_walks_each_realized_value_once(monkeypatch):
    # backward() puts each realized value back as the graph that computed it; a graph read by several later realized
    # values (each layer realizing two values that both read the layer before, as a sort and a gather inside
    # sparsemax do) is walked once, not once per path to it (2**layers walks: a 2-step TabNet's backward ran past
    # 10 minutes)
    import torch

    import uopkit.schedule.unrealized

    walks = []
    real_walk = uopkit.schedule.unrealized._forms_walk

    def counted(*args, **kwargs):
        walks.append(args[0])
        return real_walk(*args, **kwargs)

    monkeypatch.setattr(uopkit.schedule.unrealized, "_forms_walk", counted)
    layers = 12
    x_np = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    h, th = x, tx
    for _ in range(layers):
        a, b = (h * 0.5).realize(), (h.tanh() + 1).realize()
        h, th = a * b, (th * 0.5) * (th.tanh() + 1)
    h.sum().backward()
    th.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert len(walks) <= 2 * layers + 1, len(walks)


def test_backward_through_a_time_loop_that_stores_its_state_every_step():
    # a simulation loop that reads its state back at every step (a logged value, `.item()`) realizes a chain of values
    # as long as the loop, each computed from the one before; backward() puts each back as the graph that computed it,
    # one walk after another, not one Python frame per step (a thousand steps raised RecursionError)
    torch = pytest.importorskip("torch")
    k, tk = Tensor(0.999, requires_grad=True), torch.tensor(0.999, requires_grad=True)
    x, tx = k * 1.0, tk * 1.0
    for _ in range(N):
        x, tx = x * k + 0.001, tx * tk + 0.001
        x.realize()
    tx.backward()
    with shallow_stack():
        x.backward()
        got = k.grad.numpy()
    np.testing.assert_allclose(got, tk.grad.numpy(), rtol=1e-4)

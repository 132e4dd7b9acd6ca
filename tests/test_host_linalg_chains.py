"""Loops of host (LAPACK) factorizations over values computed from the step before (a Kalman filter's covariance):
each host computation realizes its input once, and the later steps read that stored value, not the graph that
computed it, so a loop of T steps runs O(T) kernels, as torch's eager steps do; in backward likewise, where a rule
that solves on the host reads the gradient flowing back. Gradients against torch's."""

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, autograd
from uopkit.engine import realize
from uopkit.tensor.lapack import on_host

torch = pytest.importorskip("torch")

STEPS = 8


def _step(lib, op, p, q, fm, eye):
    # one step of a Kalman-like covariance recursion, through the host op `op`
    if lib is torch:
        pp = fm @ p @ fm.T + torch.diag(q.exp())
    else:
        pp = fm @ p @ fm.T + q.exp().diag()
    s = pp + eye
    la = lib.linalg
    if op == "solve":
        k = la.solve(s, pp)
    elif op == "inv":
        k = la.inv(s) @ pp
    elif op == "cholesky":
        low = la.cholesky(s)
        k = low @ low.T @ pp * 0.1
    elif op == "det":
        k = pp * la.det(s) * 0.01
    elif op == "eigh":
        w, v = la.eigh(s)
        k = v @ (v.T @ pp) * w.mean() * 0.1
    return pp - k @ pp


def _loss(lib, op, steps, kernels_per_step=None):
    make = torch.tensor if lib is torch else Tensor
    q = make(np.full(3, 0.1), requires_grad=True)
    fm, eye = make(np.eye(3) + np.diag([0.5, 0.5], 1)), make(np.eye(3))
    p, total = make(np.eye(3)), 0
    for _ in range(steps):
        before = realize.stats["kernels_run"]
        p = _step(lib, op, p, q, fm, eye)
        total = total + p.sum()
        if kernels_per_step is not None:
            kernels_per_step.append(realize.stats["kernels_run"] - before)
    return q, total


def _run(lib, op, kernels_per_step=None):
    q, total = _loss(lib, op, STEPS, kernels_per_step)
    total.backward()
    return q.grad.numpy()


def _skip_off_host():
    if not on_host(Tensor.zeros(1)):
        pytest.skip("the host LAPACK path is off (LAPACK=0, or the device's buffers are not host memory)")


@pytest.mark.parametrize("op", ["solve", "inv", "cholesky", "det", "eigh"])
def test_a_loop_of_host_factorizations_reads_each_input_stored_once(op):
    _skip_off_host()
    per_step: list[int] = []
    got = _run(uopkit, op, per_step)
    # the first steps start from leaves; past them every step is the same work (before: each step computed every
    # earlier step's graph again, one more step each time)
    assert per_step[-1] == per_step[3], per_step
    np.testing.assert_allclose(got, _run(torch, op), rtol=1e-9, atol=1e-12)


def _backward_kernels(steps):
    q, total = _loss(uopkit, "solve", steps)
    before = realize.stats["kernels_run"]
    total.backward()
    # (the kernels backward() itself runs: each solve's rule solves on the host, reading the gradient that reached it)
    ran = realize.stats["kernels_run"] - before
    return ran, q.grad.numpy()


def test_the_backward_of_a_loop_of_host_solves_runs_linear_work():
    _skip_off_host()
    short, _ = _backward_kernels(STEPS)
    long, got = _backward_kernels(2 * STEPS)
    # O(T): twice the steps, about twice the kernels (before: each rule computed the gradient again from the loss
    # back to its step, 495 kernels for 8 steps and 2015 for 16)
    assert long <= 2.5 * short, (short, long)
    q, total = _loss(torch, "solve", 2 * STEPS)
    total.backward()
    np.testing.assert_allclose(got, q.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_a_gradient_of_a_loop_of_host_solves_differentiates_again_as_torchs():
    # the gradients a solve's rule stores on the way are followed back to what computed them
    _skip_off_host()
    results = []
    for lib in (uopkit, torch):
        q, total = _loss(lib, "solve", 4)
        (g,) = (autograd if lib is uopkit else torch.autograd).grad(total, q, create_graph=True)
        (g * g).sum().backward()
        results.append((g.detach().numpy(), q.grad.numpy()))
    for got, want in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)

"""Whole Jacobians and Hessians by one batched backward pass (uopkit.tensor.batched_backward), compared with PyTorch:
autograd.functional.jacobian/hessian, torch.func.jacrev/jacfwd/hessian and autograd.grad(is_grads_batched=True). The
rows of a Jacobian come from one backward walk (not one per row), in chunks, with a fallback to one pass per row."""

from __future__ import annotations

import numpy as np
import pytest

import uopkit.func
import uopkit.tensor.autograd as uopkit_autograd
import uopkit.tensor.batched_backward as bb
from uopkit import Tensor
from uopkit.autograd import functional as F
from uopkit.autograd import grad
from uopkit.uop.ops import Ops, UOp

torch = pytest.importorskip("torch")
TF = torch.autograd.functional
RNG = np.random.default_rng(7)


def _close(ours, theirs, atol=1e-5):
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _close(a, b, atol)
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-4, atol=atol)


@pytest.fixture
def walks(monkeypatch):
    """How many backward walks (autograd.grad's compute_gradient calls) ran."""
    count = [0]
    real = uopkit_autograd.compute_gradient

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(uopkit_autograd, "compute_gradient", counted)
    return count


# ---------------------------------------------------------------------------------------------------------------------
# the cases of bench/jacobians.py, smaller


def _mlp_loss(data, target, n_in, hid, n_out):
    def loss(flat):
        w1 = flat[: hid * n_in].reshape(hid, n_in)
        b1 = flat[hid * n_in : hid * n_in + hid]
        w2 = flat[hid * n_in + hid : hid * n_in + hid + n_out * hid].reshape(n_out, hid)
        b2 = flat[hid * n_in + hid + n_out * hid :]
        h = (data @ w1.T + b1).tanh()
        return ((h @ w2.T + b2 - target) ** 2).mean()

    return loss


def test_hessian_of_mlp_loss_wrt_flat_params_one_walk_per_pass(walks):
    n_in, hid, n_out = 5, 8, 3
    flat = (RNG.standard_normal(hid * n_in + hid + n_out * hid + n_out) * 0.5).astype(np.float32)
    data = RNG.standard_normal((4, n_in)).astype(np.float32)
    target = RNG.standard_normal((4, n_out)).astype(np.float32)
    ours = F.hessian(_mlp_loss(Tensor(data), Tensor(target), n_in, hid, n_out), Tensor(flat))
    theirs = TF.hessian(_mlp_loss(torch.tensor(data), torch.tensor(target), n_in, hid, n_out), torch.tensor(flat))
    _close(ours, theirs)
    # the gradient (one walk) and the batched walk of its Jacobian: not one walk per parameter (83 of them)
    assert walks[0] <= 3


def test_jacobian_of_tanh_mlp_wrt_input(walks):
    w1, w2 = (RNG.standard_normal((2, 64, 64)) / 8).astype(np.float32)
    x = RNG.standard_normal((1, 64)).astype(np.float32)

    def mlp(lib_w1, lib_w2):
        return lambda t: ((t @ lib_w1).tanh() @ lib_w2).tanh()

    for vectorize in (False, True):
        walks[0] = 0
        ours = F.jacobian(mlp(Tensor(w1), Tensor(w2)), Tensor(x), vectorize=vectorize)
        _close(ours, TF.jacobian(mlp(torch.tensor(w1), torch.tensor(w2)), torch.tensor(x), vectorize=vectorize))
        assert walks[0] == 1


def _elementwise(x):
    return (x.sin() * x + x.exp() * 0.5).tanh()


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_func_jacobian_of_elementwise_256(walks, transform):
    v = RNG.standard_normal(256).astype(np.float32)
    ours = getattr(uopkit.func, transform)(_elementwise)(Tensor(v))
    _close(ours, getattr(torch.func, transform)(_elementwise)(torch.tensor(v)))
    assert walks[0] == 1


def test_func_hessian_and_jacrev_chunk_size():
    v = RNG.standard_normal(7).astype(np.float32)

    def f(x):
        return (x.sin() * x.sum()).sum()

    _close(uopkit.func.hessian(f)(Tensor(v)), torch.func.hessian(f)(torch.tensor(v)))
    ours = uopkit.func.jacrev(_elementwise, chunk_size=3)(Tensor(v))
    _close(ours, torch.func.jacrev(_elementwise, chunk_size=3)(torch.tensor(v)))


def test_chunks_padded_to_one_size(monkeypatch, walks):
    # a tiny budget: many chunks of rows, the last one padded with zero rows, still torch's values
    monkeypatch.setattr(bb, "ROW_BUDGET", 12)
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    def f(t):
        return (t.exp() @ t.T).sin()

    _close(F.jacobian(f, Tensor(x)), TF.jacobian(f, torch.tensor(x)))
    assert walks[0] == 1


# ---------------------------------------------------------------------------------------------------------------------
# tuples, create_graph, independent outputs, control flow


def test_tuple_inputs_and_outputs():
    a, b = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)

    def f(x, y):
        return x * y.exp(), (x.tanh() @ y).sum(), y.sin()

    ours = F.jacobian(f, (Tensor(a), Tensor(b)))
    theirs = TF.jacobian(f, (torch.tensor(a), torch.tensor(b)))
    _close(ours, theirs)

    def g(x, y):
        return ((x @ y) ** 2).sum() + (y**3).sum()

    _close(F.hessian(g, (Tensor(a), Tensor(b))), TF.hessian(g, (torch.tensor(a), torch.tensor(b))))


def test_create_graph_double_backward():
    x0 = RNG.standard_normal(4).astype(np.float32)

    def f(x):
        return (x**3).sin() * x.sum()

    ours_x = Tensor(x0, requires_grad=True)
    theirs_x = torch.tensor(x0, requires_grad=True)
    ours = F.jacobian(f, ours_x, create_graph=True)
    theirs = TF.jacobian(f, theirs_x, create_graph=True)
    assert ours.requires_grad
    _close(ours, theirs)
    (ours_g,) = grad((ours**2).sum(), ours_x)
    (theirs_g,) = torch.autograd.grad((theirs**2).sum(), theirs_x)
    _close(ours_g, theirs_g, atol=1e-4)
    # a Hessian with create_graph: its own gradient (third derivatives)
    ours_h = F.hessian(lambda x: (x**4).sum() * x.prod(), ours_x, create_graph=True)
    theirs_h = TF.hessian(lambda x: (x**4).sum() * x.prod(), theirs_x, create_graph=True)
    _close(grad(ours_h.sum(), ours_x)[0], torch.autograd.grad(theirs_h.sum(), theirs_x)[0], atol=1e-3)


def test_output_independent_of_an_input():
    a, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(2).astype(np.float32)

    def f(x, y):
        return x.exp(), y * 2, x.detach() * 3

    _close(F.jacobian(f, (Tensor(a), Tensor(b))), TF.jacobian(f, (torch.tensor(a), torch.tensor(b))))
    with pytest.raises(RuntimeError):
        TF.jacobian(f, (torch.tensor(a), torch.tensor(b)), strict=True)
    with pytest.raises(RuntimeError, match="strict"):
        F.jacobian(f, (Tensor(a), Tensor(b)), strict=True)
    with pytest.raises(RuntimeError):
        TF.jacobian(f, (torch.tensor(a), torch.tensor(b)), strict=True, vectorize=True)
    with pytest.raises(RuntimeError, match="strict"):
        F.jacobian(f, (Tensor(a), Tensor(b)), strict=True, vectorize=True)
    ours = uopkit.func.jacrev(f, argnums=(0, 1))(Tensor(a), Tensor(b))
    _close(ours[1][0], torch.func.jacrev(f, argnums=(0, 1))(torch.tensor(a), torch.tensor(b))[1][0])


def test_data_dependent_control_flow():
    def f(x):
        if x.sum().item() > 0:
            return x.exp() * x[0]
        out = x * x
        for _ in range(int(abs(x[1].item())) + 1):
            out = out.sin() + x
        return out

    for sign in (1.0, -1.0):
        x = (sign * np.abs(RNG.standard_normal(5)) + sign * 0.1).astype(np.float32)
        _close(F.jacobian(f, Tensor(x)), TF.jacobian(f, torch.tensor(x)))
        _close(uopkit.func.jacrev(f)(Tensor(x)), torch.func.jacrev(f)(torch.tensor(x)))


def test_grad_is_grads_batched(walks):
    x0 = RNG.standard_normal((3, 2)).astype(np.float32)
    v = RNG.standard_normal((5, 3, 3)).astype(np.float32)
    ours_x, theirs_x = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (ours,) = grad(ours_x @ ours_x.T, ours_x, Tensor(v), is_grads_batched=True)
    (theirs,) = torch.autograd.grad(theirs_x @ theirs_x.T, theirs_x, torch.tensor(v), is_grads_batched=True)
    _close(ours, theirs)
    assert walks[0] == 1


# ---------------------------------------------------------------------------------------------------------------------
# what can't be batched


def test_batch_graph_refuses_an_unknown_op():
    seed = UOp.new_buffer("CPU", 4, Tensor([1.0]).dtype)
    odd = UOp(Ops.STORE, seed.dtype, (UOp.new_buffer("CPU", 4, seed.dtype), seed))
    with pytest.raises(bb.NotBatchable):
        bb.batch_graph([odd], {seed: UOp.new_buffer("CPU", 8, seed.dtype)}, 2)


def test_falls_back_to_one_pass_per_row(monkeypatch, walks):
    def refuse(*args, **kwargs):
        raise bb.NotBatchable("refused for the test")

    monkeypatch.setattr(bb, "_batched", refuse)
    x = RNG.standard_normal(3).astype(np.float32)

    def f(t):
        return t.exp() * t.sum()

    _close(F.jacobian(f, Tensor(x)), TF.jacobian(f, torch.tensor(x)))
    assert walks[0] == 1 + 3
    walks[0] = 0
    _close(uopkit.func.jacrev(f)(Tensor(x)), torch.func.jacrev(f)(torch.tensor(x)))
    assert walks[0] == 1 + 3


def test_hooks_see_each_row_as_torchs():
    x = np.arange(3, dtype=np.float32) + 0.5

    def run(lib_tensor, jac):
        seen = []

        def f(t):
            y = t.exp()
            y.register_hook(lambda g: (seen.append(g.detach().numpy().copy()), g * 2)[1])
            return y * t

        return jac(f, lib_tensor(x)), seen

    ours, ours_seen = run(Tensor, F.jacobian)
    theirs, theirs_seen = run(torch.tensor, TF.jacobian)
    _close(ours, theirs)
    np.testing.assert_allclose(np.stack(ours_seen), np.stack(theirs_seen), rtol=1e-6)


def test_a_backward_that_reads_the_cotangent_takes_one_pass_per_row():
    # a custom Function whose backward looks at its gradient's value on the host: the batched pass would hand it the
    # placeholder's unset memory (all its rows came out 0 here), so each row takes a pass of its own, as torch's
    from uopkit.autograd import Function

    def gated(base: type, peak) -> type:
        class Gated(base):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * g * x * float(peak(g) > 0.5)

        return Gated

    Gated = gated(Function, lambda g: np.abs(g.numpy()).max())
    TorchGated = gated(torch.autograd.Function, lambda g: g.abs().max())
    x = np.array([1.0, 2.0, 3.0], np.float32)
    _close(F.jacobian(Gated.apply, Tensor(x)), TF.jacobian(TorchGated.apply, torch.tensor(x)))

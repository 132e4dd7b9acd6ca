"""uopkit.autograd against torch.autograd: grad (first and second derivatives), backward, and custom Functions (each
written once, against the API both share, and run as a subclass of either library's Function)."""

from __future__ import annotations

import doctest
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, dtypes, no_grad
from uopkit.tensor import autograd

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _close(ours: Any, theirs: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert ours is not None and theirs is not None
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


def _pair(*arrays: np.ndarray) -> tuple[list[Tensor], list[Any]]:
    return [Tensor(a, requires_grad=True) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]


# ---------------------------------------------------------------------------------------------------------------------
# grad: first and higher derivatives


@pytest.mark.parametrize(
    "fn",
    [lambda x: x**3, lambda x: x.sin(), lambda x: x.tanh() * x, lambda x: (x * x).exp() / (1 + x * x)],
    ids=["cube", "sin", "tanh_x", "exp_ratio"],
)
def test_second_and_third_derivatives_match_torch(fn: Callable) -> None:
    (x,), (tx,) = _pair(_randn(5) * 0.7)
    (g1,) = autograd.grad(fn(x).sum(), x, create_graph=True)
    (g2,) = autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = autograd.grad(g2.sum(), x)
    (t1,) = torch.autograd.grad(fn(tx).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad(t1.sum(), tx, create_graph=True)
    (t3,) = torch.autograd.grad(t2.sum(), tx)
    for ours, theirs in ((g1, t1), (g2, t2), (g3, t3)):
        _close(ours, theirs)


def _mlp(x: Any, w1: Any, b1: Any, w2: Any) -> Any:
    return (x @ w1 + b1).tanh() @ w2


def test_gradient_penalty_reaches_the_weights_as_torch() -> None:
    # WGAN-GP: the norm of the input gradient, pushed towards 1, trains the weights through a second derivative
    arrays = _randn(6, 4), _randn(4, 8) * 0.5, _randn(8) * 0.1, _randn(8, 1) * 0.5
    (x, w1, b1, w2), (tx, tw1, tb1, tw2) = _pair(*arrays)
    (g,) = autograd.grad(_mlp(x, w1, b1, w2).sum(), x, create_graph=True)
    ((g.square().sum(1).sqrt() - 1) ** 2).mean().backward()
    (tg,) = torch.autograd.grad(_mlp(tx, tw1, tb1, tw2).sum(), tx, create_graph=True)
    ((tg.norm(dim=1) - 1) ** 2).mean().backward()
    _close(g, tg)
    for ours, theirs in ((x, tx), (w1, tw1), (b1, tb1), (w2, tw2)):
        _close(ours.grad, theirs.grad)


def test_penalty_of_the_whole_gradient_norm() -> None:
    arrays = _randn(3, 4), _randn(4, 5) * 0.5, _randn(5) * 0.1, _randn(5, 2) * 0.5
    (x, w1, b1, w2), (tx, tw1, tb1, tw2) = _pair(*arrays)
    (g,) = autograd.grad(_mlp(x, w1, b1, w2).sum(), x, create_graph=True)
    ((g.square().sum().sqrt() - 1) ** 2).backward()
    (tg,) = torch.autograd.grad(_mlp(tx, tw1, tb1, tw2).sum(), tx, create_graph=True)
    ((tg.norm() - 1) ** 2).backward()
    for ours, theirs in ((w1, tw1), (b1, tb1), (w2, tw2)):
        _close(ours.grad, theirs.grad)


def test_several_outputs_inputs_and_grad_outputs() -> None:
    (a, b), (ta, tb) = _pair(_randn(3, 2), _randn(2))
    v = _randn(3, 2)
    ours = autograd.grad([a * b, (a.exp() * b).sum()], [a, b], [Tensor(v), None])
    theirs = torch.autograd.grad([ta * tb, (ta.exp() * tb).sum()], [ta, tb], [torch.tensor(v), None])
    for o, t in zip(ours, theirs, strict=True):
        _close(o, t)


def test_grad_leaves_dot_grad_alone_and_detaches_without_create_graph() -> None:
    x, w = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
    (g,) = autograd.grad((x * x).sum(), x)
    assert x.grad is None and g.tolist() == [2.0, 4.0]
    # (as torch's: the gradient is a constant for what follows, so no second derivative reaches x)
    (g * w).sum().backward()
    assert x.grad is None and w.grad.tolist() == [2.0, 4.0]


def test_grad_with_respect_to_an_intermediate_and_twice() -> None:
    (x,), (tx,) = _pair(_randn(4))
    h, th = x * 2 + 1, tx * 2 + 1
    out, tout = (h.sin() * h).sum(), (th.sin() * th).sum()
    (gh, gx), (tgh, tgx) = autograd.grad(out, [h, x]), torch.autograd.grad(tout, [th, tx])
    _close(gh, tgh)
    _close(gx, tgx)
    # (no graph is freed: retain_graph means nothing, and asking again gives the same)
    (again,) = autograd.grad(out, x, retain_graph=False)
    _close(again, tgx)


def test_hooks_run_in_grad_as_torchs() -> None:
    x, tx = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g * 10)
    tx.register_hook(lambda g: g * 10)
    h, th = x * 2, tx * 2
    h.register_hook(lambda g: g + 1)
    th.register_hook(lambda g: g + 1)
    _close(autograd.grad((h * h).sum(), x)[0], torch.autograd.grad((th * th).sum(), tx)[0])


def test_unused_inputs() -> None:
    x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    out = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"grad: input 1 \(shape \(1,\)\) is not used"):
        autograd.grad(out, [x, y])
    gx, gy = autograd.grad(out, [x, y], allow_unused=True)
    assert gx.tolist() == [2.0, 2.0] and gy is None
    _, gy = autograd.grad(out, [x, y], materialize_grads=True)
    assert gy.tolist() == [0.0]
    with pytest.raises(ValueError, match="allow_unused"):
        autograd.grad(out, [x, y], allow_unused=False, materialize_grads=True)
    # only through a detach is not used either
    (gy,) = autograd.grad((x + y.detach()).sum(), y, allow_unused=True)
    assert gy is None


def test_grad_errors_as_torchs() -> None:
    x, c = Tensor([1.0, 2.0], requires_grad=True), Tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"shape \(2,\) has more than one element"):
        autograd.grad(x * 2, x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad((x * c).sum(), c)
    with pytest.raises(RuntimeError, match="output 0 .* does not require grad"):
        autograd.grad((c * 2).sum(), x)
    with pytest.raises(RuntimeError, match="output 0 .* does not require grad"):
        autograd.grad((x.detach() * 2).sum(), x)
    with no_grad():
        out = (x * 2).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad(out, x)
    with pytest.raises(RuntimeError, match="one per output"):
        autograd.grad([x.sum(), x.sum()], x, [None])


def test_grad_is_grads_batched_as_torchs() -> None:
    # the first dim of each grad_output is a batch (torch vmaps the backward over it): a Jacobian's rows in one call,
    # unused inputs None (or zeros, unbatched as torch's), differentiable with create_graph, torch's exception types
    w = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)
    xv = np.array([0.3, -0.2, 0.9], dtype=np.float32)
    x, c = Tensor(xv, requires_grad=True), Tensor(xv, requires_grad=True)
    tx, tc = torch.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    ours = autograd.grad(
        [(Tensor(w) @ x).tanh(), (x**3).sum()],
        (x, c),
        [Tensor.eye(2), Tensor([1.0, 2.0])],
        is_grads_batched=True,
        allow_unused=True,
        create_graph=True,
    )
    theirs = torch.autograd.grad(
        [(torch.tensor(w) @ tx).tanh(), (tx**3).sum()],
        (tx, tc),
        [torch.eye(2), torch.tensor([1.0, 2.0])],
        is_grads_batched=True,
        allow_unused=True,
        create_graph=True,
    )
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].detach().numpy(), rtol=1e-6)
    assert ours[1] is None and theirs[1] is None
    (second,), (tsecond,) = autograd.grad(ours[0].sum(), x), torch.autograd.grad(theirs[0].sum(), tx)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), rtol=1e-5)
    zeros = autograd.grad(x * x, (x, c), Tensor.eye(3), is_grads_batched=True, materialize_grads=True)[1]
    assert (
        zeros.shape
        == torch.autograd.grad(tx * tx, (tx, tc), torch.eye(3), is_grads_batched=True, materialize_grads=True)[1].shape
    )
    with pytest.raises(ValueError, match="batch sizes differ"):
        autograd.grad([x * x, (x * x).sum()], x, [Tensor.eye(3), Tensor([1.0, 2.0])], is_grads_batched=True)
    with pytest.raises(ValueError, match="grad_output 0 is None"):
        autograd.grad((x * x).sum(), x, is_grads_batched=True)
    with pytest.raises(RuntimeError, match=r"a batch of \(\), but its output has shape \(3,\)"):
        autograd.grad(x * x, x, Tensor.ones(3), is_grads_batched=True)


def test_grad_of_a_realized_output() -> None:
    # an output read back already: its graph is followed back to what computed it
    (x,), (tx,) = _pair(_randn(3))
    out, tout = (x.exp() * x).sum(), (tx.exp() * tx).sum()
    out.numpy()
    _close(autograd.grad(out, x)[0], torch.autograd.grad(tout, tx)[0])


# ---------------------------------------------------------------------------------------------------------------------
# backward


def test_backward_of_several_tensors_as_torchs() -> None:
    (a, b), (ta, tb) = _pair(_randn(3), _randn(3))
    v = _randn(3)
    autograd.backward([a * b, (a * a).sum()], [Tensor(v), None])
    torch.autograd.backward([ta * tb, (ta * ta).sum()], [torch.tensor(v), None])
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)
    # one tensor, and only some inputs
    autograd.backward((a * b).sum(), inputs=[b])
    torch.autograd.backward((ta * tb).sum(), inputs=[tb])
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)


# ---------------------------------------------------------------------------------------------------------------------
# Function: each one written once, for either library


def _custom_exp(base: type) -> type:
    class Exp(base):
        @staticmethod
        def forward(ctx, x):
            result = x.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, g):
            (result,) = ctx.saved_tensors
            return g * result

    return Exp


def _straight_through_round(base: type) -> type:
    class Round(base):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    return Round


def _clamp_with_gradient(base: type) -> type:
    # the gradient passes inside the bounds and is halved outside (not the derivative of clamp)
    class Clamp(base):
        @staticmethod
        def forward(ctx, x, lo, hi):
            ctx.save_for_backward(x)
            ctx.lo, ctx.hi = lo, hi
            return x.clamp(lo, hi)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            inside = (x >= ctx.lo) & (x <= ctx.hi)
            assert ctx.needs_input_grad == (True, False, False)
            return g * (0.5 + 0.5 * inside.float()), None, None

    return Clamp


def _sin_cos(base: type) -> type:
    class SinCos(base):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x.sin() * scale, x.cos()

        @staticmethod
        def backward(ctx, g_sin, g_cos):
            (x,) = ctx.saved_tensors
            return g_sin * x.cos() * ctx.scale - g_cos * x.sin(), None

    return SinCos


def _scaled_product(base: type) -> type:
    # two tensor inputs and a non-tensor one in between
    class ScaledProduct(base):
        @staticmethod
        def forward(ctx, a, k, b):
            ctx.save_for_backward(a, b)
            ctx.k = k
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b * ctx.k, None, g * a * ctx.k

    return ScaledProduct


def _both(make: Callable[[type], type]) -> tuple[type, type]:
    return make(autograd.Function), make(torch.autograd.Function)


def test_custom_exp_values_first_and_second_derivatives() -> None:
    ours, theirs = _both(_custom_exp)
    (x,), (tx,) = _pair(_randn(5))
    y, ty = ours.apply(x), theirs.apply(tx)
    _close(y, ty)
    (g,) = autograd.grad((y * y).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((ty * ty).sum(), tx, create_graph=True)
    _close(g, tg)
    # through the saved output: backward's own ops are differentiated, the Function again at the output
    _close(autograd.grad(g.sum(), x)[0], torch.autograd.grad(tg.sum(), tx)[0])


def test_straight_through_estimator() -> None:
    ours, theirs = _both(_straight_through_round)
    (x, w), (tx, tw) = _pair(_randn(4, 3) * 3, _randn(3, 2))
    out, tout = ours.apply(x * 2) @ w, theirs.apply(tx * 2) @ tw
    _close(out, tout)
    (out.square()).sum().backward()
    (tout.square()).sum().backward()
    _close(x.grad, tx.grad)
    _close(w.grad, tw.grad)
    assert np.abs(x.grad.numpy()).sum() > 0


def test_clamp_with_its_own_gradient() -> None:
    ours, theirs = _both(_clamp_with_gradient)
    (x,), (tx,) = _pair(_randn(10) * 2)
    v = _randn(10)
    out, tout = ours.apply(x, -0.5, 1.0), theirs.apply(tx, -0.5, 1.0)
    _close(out, tout)
    (out * Tensor(v)).sum().backward()
    (tout * torch.tensor(v)).sum().backward()
    _close(x.grad, tx.grad)


@pytest.mark.parametrize("used", ["both", "first", "second"])
def test_multi_output_function(used: str) -> None:
    ours, theirs = _both(_sin_cos)
    (x,), (tx,) = _pair(_randn(2, 3))
    (s, c), (ts, tc) = ours.apply(x, 3.0), theirs.apply(tx, 3.0)
    _close(s, ts)
    _close(c, tc)
    pick = {"both": lambda a, b: (a * b).sum() + a.sum(), "first": lambda a, b: a.sum(), "second": lambda a, b: b.sum()}
    pick[used](s, c).backward()
    pick[used](ts, tc).backward()
    _close(x.grad, tx.grad)


def test_non_tensor_argument_between_tensors() -> None:
    ours, theirs = _both(_scaled_product)
    (a, b), (ta, tb) = _pair(_randn(3), _randn(3))
    ours.apply(a, 2.5, b).sum().backward()
    theirs.apply(ta, 2.5, tb).sum().backward()
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)


def test_function_nested_in_a_graph() -> None:
    # ops before (a matmul with weights) and after (a nonlinearity, another Function, a reduction)
    exp, texp = _both(_custom_exp)
    clamp, tclamp = _both(_clamp_with_gradient)
    (x, w, v), (tx, tw, tv) = _pair(_randn(4, 3), _randn(3, 5) * 0.5, _randn(5))
    out = (clamp.apply(exp.apply(x @ w).tanh() * v, -0.3, 0.3) + x.sum()).square().mean()
    tout = (tclamp.apply(texp.apply(tx @ tw).tanh() * tv, -0.3, 0.3) + tx.sum()).square().mean()
    out.backward()
    tout.backward()
    _close(out, tout)
    for o, t in ((x, tx), (w, tw), (v, tv)):
        _close(o.grad, t.grad)


def test_gradient_is_backwards_not_forwards_derivative() -> None:
    class Liar(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = Tensor([1.0, 2.0], requires_grad=True)
    y = Liar.apply(x)
    assert y.tolist() == [2.0, 4.0]
    (y * y).sum().backward()
    assert x.grad.tolist() == [20.0, 40.0]
    # two uses of the same forward on the same input are two nodes, each with its own backward
    x2 = Tensor([1.0, 2.0], requires_grad=True)
    (Liar.apply(x2) + x2 * 2).sum().backward()
    assert x2.grad.tolist() == [7.0, 7.0]


def test_setup_context_style() -> None:
    class Cube(autograd.Function):
        @staticmethod
        def forward(x, k):
            return x**3 * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.save_for_backward(x)
            ctx.k = k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x * ctx.k, None

    x = Tensor([1.0, -2.0], requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y.tolist() == [2.0, -16.0]
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 24.0]


def _max_with_index(base: type) -> type:
    # an integer output that is marked non-differentiable, as torch.max(dim)'s indices
    class MaxWithIndex(base):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax(-1)
            ctx.save_for_backward(x, idx)
            ctx.mark_non_differentiable(idx)
            return x.amax(-1), idx

        @staticmethod
        def backward(ctx, g, g_idx):
            x, idx = ctx.saved_tensors
            assert g_idx is not None and g_idx.shape == idx.shape
            return (idx.unsqueeze(-1) == _arange_like(x)).float() * g.unsqueeze(-1)

    return MaxWithIndex


def _arange_like(x: Any) -> Any:
    n = x.shape[-1]
    return (torch.arange(n) if isinstance(x, torch.Tensor) else Tensor.arange(n)).reshape(1, n)


def test_non_differentiable_integer_output() -> None:
    ours, theirs = _both(_max_with_index)
    (x,), (tx,) = _pair(_randn(3, 4))
    (m, i), (tm, ti) = ours.apply(x), theirs.apply(tx)
    assert i.tolist() == ti.tolist()
    (m * Tensor([1.0, 2.0, 3.0])).sum().backward()
    (tm * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    _close(x.grad, tx.grad)


def test_materialize_grads_off_gives_none_for_an_output_without_gradient() -> None:
    seen = []

    class Pair(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            idx = (x > 0).float()
            ctx.mark_non_differentiable(idx)
            return x * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            seen.append(g_idx)
            return g * 2

    x = Tensor([1.0, -1.0], requires_grad=True)
    Pair.apply(x)[0].sum().backward()
    assert seen == [None] and x.grad.tolist() == [2.0, 2.0]


def test_backward_results_checked_as_torchs() -> None:
    def make(backward: Callable) -> type:
        class Bad(autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k

        Bad.backward = staticmethod(backward)
        return Bad

    x = Tensor([[1.0, 2.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="returned 1 gradients for the 2 inputs"):
        make(lambda ctx, g: g).apply(x, 3).sum().backward()
    with pytest.raises(RuntimeError, match="gradient for forward's argument 2, which is not a tensor"):
        make(lambda ctx, g: (g, g)).apply(x, 3).sum().backward()
    with pytest.raises(RuntimeError, match=r"gradient for argument 0 has shape \(\)"):
        make(lambda ctx, g: (g.sum(), None)).apply(x, 3).sum().backward()
    # extra trailing Nones are fine; a gradient of a broadcast of the input is summed back to its shape
    make(lambda ctx, g: (g.expand(3, 1, 2), None, None)).apply(x, 3).sum().backward()
    assert x.grad.tolist() == [[3.0, 3.0]]


def test_no_input_needs_grad_and_no_grad_mode() -> None:
    exp = _custom_exp(autograd.Function)
    y = exp.apply(Tensor([0.0, 1.0]))
    np.testing.assert_allclose(y.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    x = Tensor([0.0, 1.0], requires_grad=True)
    with no_grad():
        y = exp.apply(x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad(y.sum(), x)


def test_forward_that_ignores_an_input_still_gives_it_backwards_gradient() -> None:
    def make(base: type) -> type:
        class Ignore(base):
            @staticmethod
            def forward(ctx, x, y):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2, g.sum(0) * 3

        return Ignore

    ours, theirs = _both(make)
    (x, y), (tx, ty) = _pair(_randn(2, 3), _randn(3))
    ours.apply(x, y).sum().backward()
    theirs.apply(tx, ty).sum().backward()
    _close(x.grad, tx.grad)
    _close(y.grad, ty.grad)


def test_forward_returning_its_input_and_once_differentiable() -> None:
    class Identity(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        @autograd.once_differentiable
        def backward(ctx, g):
            return g * 4

    x = Tensor([1.0, 2.0], requires_grad=True)
    (Identity.apply(x) * x).sum().backward()
    assert x.grad.tolist() == [5.0, 10.0]


def _square_and_product(base: type) -> type:
    class SquareAndProduct(base):
        # two outputs, backward's own rule (x's gradient taken 3 times its true value): a gradient that reaches x
        # went through this backward
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * x, x * y

        @staticmethod
        def backward(ctx, gsq, gxy):
            x, y = ctx.saved_tensors
            return 3 * (2 * x * gsq + y * gxy), x * gxy

    return SquareAndProduct


@pytest.mark.parametrize("view", [False, True])
def test_function_of_a_realized_intermediate_reaches_the_weights_as_torch(view: bool) -> None:
    # a Function's input realized since it was computed (`h.realize()`, a hidden state stored in a loop) is followed
    # back to the graph that computed it: backward raised "no tensor with requires_grad=True" (one output) or gave
    # the weights no gradient (two)
    ours, theirs = _both(_square_and_product)
    (w, y), (tw, ty) = _pair(_randn(3, 4), _randn(3, 3) if view else _randn(3, 4))
    h = (w * 2).realize()
    th = tw * 2
    x, tx = (h[:, 1:].T, th[:, 1:].T) if view else (h, th)
    a, b = ours.apply(x, y)
    ta, tb = theirs.apply(tx, ty)
    (a.sum() + (b * 2).sum()).backward()
    (ta.sum() + (tb * 2).sum()).backward()
    _close(w.grad, tw.grad)
    _close(y.grad, ty.grad)
    # one output used: the other's gradient is zeros
    w.grad, tw.grad = None, None
    ours.apply(x, y)[0].sum().backward()
    theirs.apply(tw[:, 1:].T * 2 if view else tw * 2, ty)[0].sum().backward()
    _close(w.grad, tw.grad)


def _reversible_layers(base: type) -> type:
    class ReversibleLayers(base):
        # Reformer's reversible layers: forward runs each layer under no_grad, where a gather's index check (the
        # indices sorted from the input) realizes the Function's input along the way; backward is its own (3 g here)
        @staticmethod
        def forward(ctx, x, layers):
            for _ in range(layers):
                x1, x2 = x.chunk(2, dim=-1)
                with no_grad() if base is autograd.Function else torch.no_grad():
                    y1 = x1 + x2.gather(-1, x2.argsort(-1))
                    y2 = x2 + y1
                x = (Tensor if base is autograd.Function else torch).cat([y1, y2], dim=-1)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3, None

    return ReversibleLayers


def test_function_whose_forward_realizes_its_input_reaches_the_weights_as_torch() -> None:
    # the input (a cat of embeddings) stored by a realize inside forward and read there in other forms: it was tied
    # to the Function's node behind a detach, where backward doesn't put realized values back as their graphs, and
    # every weight before the Function got no gradient (None)
    ours, theirs = _both(_reversible_layers)
    (w,), (tw,) = _pair(_randn(5, 3))
    tokens = np.array([[1, 4, 4, 0], [2, 3, 1, 1]])
    e, te = w[Tensor(tokens)], tw[torch.tensor(tokens)]
    out, tout = ours.apply(Tensor.cat([e, e], dim=-1), 2), theirs.apply(torch.cat([te, te], dim=-1), 2)
    scale = _randn(2, 4, 6)
    (out * Tensor(scale)).sum().backward()
    (tout * torch.tensor(scale)).sum().backward()
    _close(out, tout)
    _close(w.grad, tw.grad)


def _double_in_place(base: type) -> type:
    class DoubleInPlace(base):
        # backward's rule (5) is not forward's derivative (2): a gradient through it is backward's
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    return DoubleInPlace


def test_mark_dirty_makes_the_input_the_output_as_torch() -> None:
    # the tensor forward changed in place is the output: apply returns that object and a gradient through it is
    # backward's (it kept the graph from before the write, the Function cut out)
    ours, theirs = _both(_double_in_place)
    (w,), (tw,) = _pair(_randn(4))
    h, th = w * 1.5, tw * 1.5
    out, tout = ours.apply(h), theirs.apply(th)
    assert out is h and tout is th
    _close(h, th)
    scale = _randn(4)
    (h * Tensor(scale)).sum().backward()
    (th * torch.tensor(scale)).sum().backward()
    _close(w.grad, tw.grad)
    # into a leaf that requires grad: torch's RuntimeError
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place"):
        ours.apply(Tensor(_randn(2), requires_grad=True))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place"):
        theirs.apply(torch.tensor(_randn(2), requires_grad=True))


def test_torch_autograd_function_module_names() -> None:
    # `from torch.autograd.function import once_differentiable`, as torch programs import it
    from uopkit.autograd.function import Function, FunctionCtx, once_differentiable

    assert Function is autograd.Function and FunctionCtx is autograd.FunctionCtx
    assert once_differentiable is autograd.once_differentiable


def test_legacy_variable_as_torchs() -> None:
    # older programs (capsule networks, NTMs) wrap tensors in torch.autograd.Variable: a detached alias of the data
    from uopkit.autograd import Variable

    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    tx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v, tv = Variable(x * 2), torch.autograd.Variable(tx * 2)
    assert v.requires_grad is tv.requires_grad is False
    w, tw = Variable(Tensor([1.0, 2.0]), True), torch.autograd.Variable(torch.tensor([1.0, 2.0]), True)
    assert w.requires_grad and w.is_leaf and tw.requires_grad and tw.is_leaf
    (w * w).sum().backward()
    (tw * tw).sum().backward()
    _close(w.grad, tw.grad)
    # the same storage as the data, as torch's
    d = Tensor([1.0, 2.0])
    Variable(d).add_(1.0)
    assert d.tolist() == [2.0, 3.0]
    assert isinstance(d, Variable) and not isinstance(1.0, Variable)
    e, te = Variable(), torch.autograd.Variable()
    assert e.shape == tuple(te.shape) == (0,) and e.dtype == dtypes.float32
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        Variable([1.0, 2.0])
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        torch.autograd.Variable([1.0, 2.0])
    with pytest.warns(UserWarning, match="volatile"):
        Variable(d, volatile=True)


def test_function_output_through_grad_and_a_realized_output() -> None:
    ours, theirs = _both(_sin_cos)
    (x,), (tx,) = _pair(_randn(4))
    s, _ = ours.apply(x, 2.0)
    ts, _ = theirs.apply(tx, 2.0)
    s.numpy()
    (g,) = autograd.grad(s.sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(ts.sum(), tx, create_graph=True)
    _close(g, tg)
    _close(autograd.grad(g.sum(), x)[0], torch.autograd.grad(tg.sum(), tx)[0])


def test_bfloat16_function() -> None:
    exp = _custom_exp(autograd.Function)
    x = Tensor([0.5, 1.0], dtype=dtypes.bfloat16, requires_grad=True)
    y = exp.apply(x)
    assert y.dtype == dtypes.bfloat16
    (y.float() * Tensor([1.0, 2.0])).sum().backward()
    assert x.grad.dtype == dtypes.bfloat16
    np.testing.assert_allclose(x.grad.float().numpy(), np.exp([0.5, 1.0]) * [1.0, 2.0], rtol=1e-2)


def test_training_loop_with_a_function() -> None:
    # a few SGD steps through a straight-through round: the same as torch's, step by step
    ours, theirs = _both(_straight_through_round)
    (w,), (tw,) = _pair(_randn(3, 2))
    x = _randn(5, 3)
    for _ in range(3):
        loss = (ours.apply(Tensor(x) @ w * 4) / 4).square().mean()
        tloss = (theirs.apply(torch.tensor(x) @ tw * 4) / 4).square().mean()
        loss.backward()
        tloss.backward()
        _close(loss, tloss)
        w = Tensor((w - w.grad * 0.1).numpy(), requires_grad=True)
        with torch.no_grad():
            tw -= tw.grad * 0.1
            tw.grad = None
    _close(w, tw)


def test_module_examples() -> None:
    failed, _ = doctest.testmod(autograd, optionflags=doctest.ELLIPSIS)
    assert failed == 0


@pytest.mark.usefixtures("gc_of_this_test")
def test_a_function_and_its_saved_tensors_are_freed_after_backward():
    # the rule given to a Function's output must not keep itself alive: through its input, the input's `.grad` and the
    # graph that computed it, it once did (one leaked output and rule per call)
    import gc

    from uopkit.gradient import _gradient_rules

    class Exp(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            _, y = ctx.saved_tensors
            return g * y

    def step():
        x = Tensor([1.0, 2.0], requires_grad=True)
        Exp.apply(x).sum().backward()
        return x.grad.numpy()

    step()
    gc.collect()
    before = len(_gradient_rules)
    for _ in range(3):
        np.testing.assert_allclose(step(), np.exp([1.0, 2.0]), rtol=1e-6)
    gc.collect()
    assert len(_gradient_rules) == before


def _input_gradient(m: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # d sum(m(x)) / dx of a Linear-Tanh-Linear: from autograd.grad, and what numpy gives with m's weights now
    w1, b1, w2, _ = (p.numpy().astype(np.float64) for p in m.parameters())
    xa = Tensor(x, requires_grad=True)
    (got,) = autograd.grad(m(xa).sum(), xa)
    h = np.tanh(x.astype(np.float64) @ w1.T + b1)
    return got.numpy(), ((1 - h**2) * w2) @ w1


@pytest.mark.parametrize("convert", ["none", "double", "half_float"])
def test_grad_of_an_input_sees_weights_loaded_over_a_computed_init(convert: str) -> None:
    # a weight made by a computation (a custom init `Parameter(randn(...) * 0.5)`, a .double()) and then overwritten
    # (load_state_dict, an optimizer step): autograd.grad followed the weight back to that computation and took tanh'
    # from the old values (an error of 0.54 for a gradient of 0.65). Twice: the second load replays a cached schedule
    import uopkit.nn as unn

    for _ in range(2):
        Tensor.manual_seed(0)
        m = unn.Sequential(unn.Linear(5, 7), unn.Tanh(), unn.Linear(7, 1))
        m[0].weight = unn.Parameter(Tensor.randn(7, 5) * 0.5)
        if convert == "double":
            m.double()
        elif convert == "half_float":
            m.half().float()
        m.load_state_dict({k: Tensor(v.numpy() * 1.5) for k, v in m.state_dict().items()})
        x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float64 if convert == "double" else np.float32)
        got, want = _input_gradient(m, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        opt = unn.optim.SGD(m.parameters(), lr=0.5)
        (m(Tensor(np.ones((4, 5), x.dtype))) ** 2).sum().backward()
        opt.step()
        got, want = _input_gradient(m, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_grad_of_a_detached_value_given_requires_grad_after_double() -> None:
    # WGAN-GP's interpolate in float64: the generator's weights (realized by .double()) were followed back to their
    # cast under the interpolate, which rebuilt the interpolate's node: "appears to not have been used in the graph"
    import uopkit.nn as unn

    g = unn.Linear(2, 2).double()
    fake = g(Tensor(np.ones((3, 2)))).detach()
    interp = (fake * 0.5).requires_grad_(True)
    (got,) = autograd.grad((interp**2).sum(), interp)
    np.testing.assert_allclose(got.numpy(), fake.numpy(), rtol=1e-12)


def test_gradient_through_a_value_whose_inputs_were_overwritten_is_torchs() -> None:
    # W was realized, then what it was computed from was overwritten: following W back to its graph gave 2 * [10, 20]
    # for x's gradient (silently, before a check raised, saying torch raises). Torch reads W as computed, [2, 4]; W's
    # storage holds it. Where the gradient needs p itself (W = p * p), both raise
    import torch

    p = Tensor([1.0, 2.0], requires_grad=True)
    w = (p * 2).realize()
    with no_grad():
        p.assign(Tensor([10.0, 20.0])).realize()
    x = Tensor([1.0, 1.0], requires_grad=True)
    out = (x * w).sum()
    assert autograd.grad(out, x)[0].tolist() == [2.0, 4.0]
    out.backward()
    tp, tx = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 1.0], requires_grad=True)
    tw = tp * 2
    with torch.no_grad():
        tp.copy_(torch.tensor([10.0, 20.0]))
    (tx * tw).sum().backward()
    assert x.grad.tolist() == tx.grad.tolist() == [2.0, 4.0] and p.grad.tolist() == tp.grad.tolist() == [2.0, 2.0]
    squared = (p * p).realize()
    with no_grad():
        p.assign(Tensor([1.0, 1.0])).realize()
    with pytest.raises(RuntimeError, match="overwritten in place"):
        (x * squared).sum().backward()
    # computed again after the write, it is fine
    x2 = Tensor([1.0, 1.0], requires_grad=True)
    p.grad = None
    (x2 * (p * 2)).sum().backward()
    assert x2.grad.tolist() == [2.0, 2.0] and p.grad.tolist() == [2.0, 2.0]


def test_requires_grad_of_computed_tensors_is_torchs() -> None:
    # a result computed from a tensor that requires grad requires grad (it was None, tinygrad's "not set"); under
    # no_grad, through a detach or from plain tensors it doesn't; only a leaf's flag can be cleared
    import torch

    x, tx = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    ours = [x * 2, (x * 2).detach(), Tensor([1.0]) * 2, x.sum() + Tensor([1.0]), Tensor([1.0]), (x > 1)]
    theirs = [tx * 2, (tx * 2).detach(), torch.tensor([1.0]) * 2, tx.sum() + torch.tensor([1.0]), torch.tensor([1.0])]
    theirs.append(tx > 1)
    with no_grad():
        ours.append(x * 2)
    with torch.no_grad():
        theirs.append(tx * 2)
    assert (
        [t.requires_grad for t in ours] == [t.requires_grad for t in theirs] == [True, False, False, True] + [False] * 3
    )
    y = x * 2
    with pytest.raises(RuntimeError, match="not a leaf"):
        y.requires_grad_(False)
    z = Tensor([1.0]) * 2
    assert z.requires_grad_().requires_grad and z.is_leaf


def test_a_float_cast_of_an_integer_or_bool_value_does_not_require_grad() -> None:
    # a mask or a rounded index cast back to float carries no gradient (backward raises through it), so its flag is
    # False, as torch's; it said True, walking through the cast to the tensor that requires grad
    import torch

    v = [1.5, -2.5, 3.7]
    x, tx = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    ours = [x.long().float(), (x > 0).float(), x.int().double(), x.bool().float(), x.long().float() * x]
    theirs = [tx.long().float(), (tx > 0).float(), tx.int().double(), tx.bool().float(), tx.long().float() * tx]
    assert [t.requires_grad for t in ours] == [t.requires_grad for t in theirs]
    # the gradient through the product is the integer part, as torch's
    ours[-1].sum().backward()
    theirs[-1].sum().backward()
    _close(x.grad, tx.grad)


def test_a_select_or_fill_on_a_mask_only_does_not_require_grad_as_torch() -> None:
    # no gradient flows through a mask: `where(x > 0, 1.0, 0.0)` said requires_grad True (walking through the
    # comparison to x), torch's False; backward raises in both, with torch's words
    v = [1.5, -2.5, 3.7]
    x, tx = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    ours = [Tensor.where(x > 0, 1.0, 0.0), Tensor.zeros(3).masked_fill(x > 0, 1.0), Tensor.where(x > 0, x, 0.0)]
    theirs = [torch.where(tx > 0, 1.0, 0.0), torch.zeros(3).masked_fill(tx > 0, 1.0), torch.where(tx > 0, tx, 0.0)]
    assert [t.requires_grad for t in ours] == [t.requires_grad for t in theirs] == [False, False, True]
    for t in ours[:2]:
        with pytest.raises(RuntimeError, match="does not require grad"):
            t.sum().backward()
    # a bool or integer tensor: a RuntimeError too, as torch's (and still the TypeError it was)
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x > 0).sum().backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        (tx > 0).sum().backward()


def test_norm_p0_requires_grad_and_gives_no_gradient_as_torch() -> None:
    # the count of nonzeros: torch's result requires grad, its backward leaves x.grad None (norm) or gives zeros
    # (cdist); ours was detached, so backward raised "doesn't require a gradient"
    v = _randn(2, 5)
    x, tx = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    ours, theirs = x.norm(0), torch.linalg.vector_norm(tx, 0)
    assert ours.requires_grad and theirs.requires_grad
    ours.backward()
    theirs.backward()
    assert x.grad is None and tx.grad is None
    # with a dim, and with another term in the loss: the other term's gradient
    (x.norm(0, dim=1).sum() + (x * x).sum()).backward()
    (torch.linalg.vector_norm(tx, 0, dim=1).sum() + (tx * tx).sum()).backward()
    _close(x.grad, tx.grad)
    # autograd.grad of it alone: an unused input, as torch's
    assert autograd.grad(x.norm(0), x, allow_unused=True) == (None,)
    assert torch.autograd.grad(torch.linalg.vector_norm(tx, 0), tx, allow_unused=True) == (None,)
    # cdist: zeros for both operands
    a, b = _pair(_randn(1, 3, 2), _randn(1, 4, 2))
    ours, theirs = a[0].cdist(a[1], p=0), torch.cdist(b[0], b[1], p=0)
    assert ours.requires_grad and theirs.requires_grad
    ours.sum().backward()
    theirs.sum().backward()
    for o, t in zip(a, b, strict=True):
        _close(o.grad, t.grad)
        assert not t.grad.any()


def test_norm_p0_realized_before_backward_still_requires_grad() -> None:
    # a count of nonzeros read (`.numpy()`, `.item()`) before its backward: its gradient rule sits on a view, and
    # the graph below it reaches x only through a mask; it stopped requiring grad once realized, and backward raised
    # "no tensor with requires_grad=True was used" where torch's runs (None for norm, zeros for cdist)
    v = _randn(2, 5)
    x, tx = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    ours, theirs = x.norm(0) * 2, torch.linalg.vector_norm(tx, 0) * 2
    assert ours.item() == theirs.item()
    assert ours.requires_grad
    ours.backward()
    theirs.backward()
    assert x.grad is None and tx.grad is None
    a, b = _pair(_randn(3, 2), _randn(4, 2))
    ours, theirs = a[0].cdist(a[1], p=0), torch.cdist(b[0], b[1], p=0)
    _close(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    for o, t in zip(a, b, strict=True):
        _close(o.grad, t.grad)


@pytest.mark.parametrize("realized", [True, False])
def test_a_value_computed_under_no_grad_keeps_its_value_after_the_weights_change(realized: bool) -> None:
    # PPO's old log-probabilities: computed under no_grad from the weights, then read by the loss of several optimizer
    # steps. No gradient flows through it, so the weights' overwriting doesn't matter: it is a constant (a realized
    # one raised "overwritten in place" before, where torch trains on)
    import torch

    from uopkit.nn.optim import SGD

    w0, x = np.array([0.5, -1.0], np.float32), np.array([1.0, 2.0], np.float32)
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    with torch.no_grad():
        told = (tw * torch.tensor(x)).sum()
    uw = Tensor(w0, requires_grad=True)
    uopt = SGD([uw], lr=0.1)
    with no_grad():
        uold = (uw * Tensor(x)).sum()
    if realized:
        uold.realize()
    for _ in range(3):
        tloss = ((tw * torch.tensor(x)).sum() - told) ** 2 + (tw**2).sum()
        topt.zero_grad()
        tloss.backward()
        topt.step()
        loss = ((uw * Tensor(x)).sum() - uold) ** 2 + (uw**2).sum()
        uopt.zero_grad()
        loss.backward()
        uopt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-6)
    np.testing.assert_allclose(uw.numpy(), tw.detach().numpy(), rtol=1e-6)
    assert uold.item() == told.item() == -1.5


def test_reading_one_gradient_realizes_the_others_of_its_backward() -> None:
    # a per-parameter log of gradient norms read `.grad` one at a time: each read computed the backward chain the
    # gradients share again (kernels per step grew with depth squared). As torch's backward, they come together.
    import uopkit.nn as unn
    from uopkit.uop.ops import Ops

    m = unn.Sequential(unn.Linear(6, 6), unn.Tanh(), unn.Linear(6, 6), unn.Tanh(), unn.Linear(6, 1))
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    (m(Tensor(x)) ** 2).mean().backward()
    params = list(m.parameters())
    first = params[0].grad.numpy()
    assert all(p.grad.uop.base.op is Ops.BUFFER for p in params)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6), torch.nn.Tanh(),
                             torch.nn.Linear(6, 1))  # fmt: skip
    with torch.no_grad():
        for p, q in zip(params, tm.parameters(), strict=True):
            q.copy_(torch.from_numpy(p.numpy()))
    (tm(torch.from_numpy(x)) ** 2).mean().backward()
    np.testing.assert_allclose(first, tm[0].weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    for p, q in zip(params, tm.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)


GRAD_ASSIGNMENTS = [
    # (what, ours, torch's, the error both raise, our message)
    ("a different size", lambda: Tensor.zeros(5), lambda t: t.zeros(5), RuntimeError, r"size \(5,\) to .* \(3,\)"),
    ("a size with a 1", lambda: Tensor.zeros(1, 3), lambda t: t.zeros(1, 3), RuntimeError, r"size \(1, 3\)"),
    ("a different dtype", lambda: Tensor.zeros(3, dtype=dtypes.float64), lambda t: t.zeros(3).double(), RuntimeError,
     "dtype"),
    ("a number", lambda: 3.0, lambda t: 3.0, TypeError, "Tensor or None"),
]  # fmt: skip


@pytest.mark.parametrize("what,ours,theirs,error,match", GRAD_ASSIGNMENTS, ids=[g[0] for g in GRAD_ASSIGNMENTS])
def test_assigning_a_grad_of_another_shape_or_dtype_raises_as_torch(what, ours, theirs, error, match) -> None:
    # torch's `.grad` setter checks what it is given (here it was kept: an optimizer then stepped by a broadcast one)
    import torch

    tx = torch.zeros(3, requires_grad=True)
    with pytest.raises(error):
        tx.grad = theirs(torch)
    x = Tensor.zeros(3, requires_grad=True)
    with pytest.raises(error, match=match):
        x.grad = ours()
    assert x.grad is None
    # a gradient of the same shape and dtype, and None, go in
    x.grad = Tensor.ones(3)
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    x.grad = None
    assert x.grad is None


def _surrogate_spiking_grad(
    lib: Any, nn: Any, function: type, mk: Callable, realize_between: Callable | None, steps: int
):
    # a leaky integrate-and-fire layer behind a BatchNorm in training mode, its spikes a Function (Heaviside forward,
    # fast-sigmoid backward): the loss reads the states only through the Function's output, whose forward ran on
    # detached inputs
    class Spike(function):
        @staticmethod
        def forward(ctx, v):
            ctx.save_for_backward(v)
            return (v > 0).float()

        @staticmethod
        def backward(ctx, g):
            (v,) = ctx.saved_tensors
            return g / (1 + 5 * v.abs()) ** 2

    rng = np.random.default_rng(0)
    lin = nn.Linear(6, 8)
    lin.load_state_dict(
        {"weight": mk(rng.standard_normal((8, 6)).astype(np.float32)), "bias": mk(np.zeros(8, np.float32))}
    )
    bn = nn.BatchNorm1d(8).train()
    data = mk(rng.standard_normal((9, 6)).astype(np.float32))
    h = bn(lin(data[lib.arange(2, 7)]))
    v = h * 0
    states, spikes = [], []
    for _ in range(steps):
        v = 0.9 * v + h
        z = Spike.apply(v - 0.5)
        v = v - z.detach() * 0.5
        states.append(v)
        spikes.append(z)
    loss = (lib.stack(spikes) * mk(np.arange(steps * 40, dtype=np.float32).reshape(steps, 5, 8) / 100)).sum()
    if realize_between is not None:
        realize_between()
    loss.backward()
    return lin.weight.grad.detach().numpy()


@pytest.mark.parametrize("steps", [4, 20])
def test_function_gradient_survives_a_realize_that_runs_batchnorm_updates(steps: int) -> None:
    # a realize between the forward pass and backward() (a target's index check, a logged value) ran the BatchNorm's
    # running-statistic assigns and stored the states the loss reads: the loss's graph, which reads them only through
    # the Function (behind a DETACH), was taken as changed by the assigns alone and not remembered, so backward()
    # lost the Function's gradient (raised here; the weights before the Function got no .grad in a spiking network)
    import uopkit.nn as unn

    ref = _surrogate_spiking_grad(torch, torch.nn, torch.autograd.Function, torch.from_numpy, None, steps)
    got = _surrogate_spiking_grad(Tensor, unn, autograd.Function, Tensor, lambda: Tensor.ones(3).realize(), steps)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_backward_returns_none_as_torchs() -> None:
    # torch's Tensor.backward returns None (uopkit's returned the loss, so `loss.backward().item()` ran here only);
    # also where no gradient reaches a leaf and where the leaves are gone
    w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    assert (w * w).sum().backward() is None and (tw * tw).sum().backward() is None
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    assert w.norm(p=0).backward() is None and tw.norm(p=0).backward() is None
    assert (Tensor([1.0], requires_grad=True) * 2).sum().backward() is None
    assert (torch.tensor([1.0], requires_grad=True) * 2).sum().backward() is None

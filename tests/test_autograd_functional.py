"""uopkit.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp), gradcheck/gradgradcheck and torch.gradient
(`Tensor.gradient` with torch's keywords), compared with PyTorch: values, shapes and the nesting of the results for
Tensor and tuple inputs and outputs, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.autograd import Function, GradcheckError, gradcheck, gradgradcheck
from uopkit.autograd import functional as F
from uopkit.tensor.finite_differences import numerical_gradient

torch = pytest.importorskip("torch")
TF = torch.autograd.functional
RNG = np.random.default_rng(3)
A = RNG.standard_normal((2, 3))
B = RNG.standard_normal(3)


def _pair(fn_name: str):
    # the same function for both libraries: (one output, two outputs) of one or two inputs
    def one(x, y=None):
        return (x * x).sin() * 2 if y is None else (x.exp() * y).sum(-1)

    def two(x, y=None):
        return (x.exp(), (x * x).sum()) if y is None else (x * y, (x * y.tanh()).sum())

    return {"one": one, "two": two}[fn_name]


def _same(ours, theirs, rtol=1e-10):
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _same(a, b, rtol)
        return
    assert isinstance(ours, Tensor), type(ours)
    assert ours.shape == tuple(theirs.shape), (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=1e-12)


def _inputs(tupled: bool):
    ours = (Tensor(A, dtype=dtypes.float64), Tensor(B, dtype=dtypes.float64))
    theirs = (torch.tensor(A), torch.tensor(B))
    return (ours, theirs) if tupled else (ours[0], theirs[0])


@pytest.mark.parametrize("outputs", ["one", "two"])
@pytest.mark.parametrize("tupled", [False, True])
def test_jacobian_nesting_and_values(outputs: str, tupled: bool) -> None:
    fn = _pair(outputs)
    ours, theirs = _inputs(tupled)
    args = ours if tupled else (ours,)
    targs = theirs if tupled else (theirs,)
    _same(F.jacobian(lambda *a: fn(*a), ours), TF.jacobian(lambda *a: fn(*a), theirs))
    _same(F.jacobian(lambda *a: fn(*a), ours, vectorize=True), TF.jacobian(lambda *a: fn(*a), theirs))
    out = fn(*args)
    tout = fn(*targs)
    v = tuple(Tensor(np.ones(o.shape)) for o in out) if isinstance(out, tuple) else Tensor(np.ones(out.shape))
    tv = (
        tuple(torch.ones(o.shape, dtype=torch.float64) for o in tout)
        if isinstance(tout, tuple)
        else torch.ones(tout.shape, dtype=torch.float64)
    )
    tv = tuple(t.double() for t in tv) if isinstance(tv, tuple) else tv
    v = tuple(t.double() for t in v) if isinstance(v, tuple) else v.double()
    _same(F.vjp(lambda *a: fn(*a), ours, v), TF.vjp(lambda *a: fn(*a), theirs, tv))
    w = tuple(Tensor(np.full(t.shape, 0.5)) for t in args) if tupled else Tensor(np.full(args[0].shape, 0.5))
    tw = (
        tuple(torch.full(t.shape, 0.5, dtype=torch.float64) for t in targs)
        if tupled
        else torch.full(targs[0].shape, 0.5, dtype=torch.float64)
    )
    _same(F.jvp(lambda *a: fn(*a), ours, w), TF.jvp(lambda *a: fn(*a), theirs, tw))


@pytest.mark.parametrize("tupled", [False, True])
def test_hessian_vhp_hvp(tupled: bool) -> None:
    def f(x, y=None):
        return (x.sin() * x).sum() if y is None else ((x * x).sum(0) * y.exp()).sum()

    ours, theirs = _inputs(tupled)
    _same(F.hessian(f, ours), TF.hessian(f, theirs))
    args = ours if tupled else (ours,)
    v = tuple(Tensor(np.linspace(-1, 1, t.numel()).reshape(t.shape)) for t in args)
    tv = tuple(torch.tensor(np.linspace(-1, 1, t.numel()).reshape(t.shape)) for t in args)
    v, tv = (v, tv) if tupled else (v[0], tv[0])
    _same(F.vhp(f, ours, v), TF.vhp(f, theirs, tv))
    _same(F.hvp(f, ours, v), TF.hvp(f, theirs, tv))


# functions whose output (or whose gradient) reads the input in the same kernel as a reduce of it: functional.jacobian
# and hessian detach their inputs and take one backward pass per output element, the first one realizing values the
# next ones share (a detached leaf lost them: rows after the first were 0)
_FUSED = {
    "x/|x|": (lambda x: x / (x * x).sum().sqrt(), (3,)),
    "softmax": (lambda x: x.exp() / x.exp().sum(), (4,)),
    "a*exp(b)*sum(a)": (lambda a, b: a * b.exp() * a.sum(), (2,), (2,)),
}
_SCALAR = {
    "logsumexp": (lambda x: x.logsumexp(0), (3,)),
    "sum(a*exp(b))*sum(a)": (lambda a, b: (a * b.exp()).sum() * a.sum(), (2,), (2,)),
    "sum(x)^2": (lambda x: (x * x.sum()).sum(), (3,)),
}
_MAKE = {
    "plain": lambda a: Tensor(a),
    "requires_grad": lambda a: Tensor(a, requires_grad=True),
    "detached": lambda a: Tensor(a).detach(),
    "detached leaf": lambda a: Tensor(a).detach().requires_grad_(True),
}
# (float32 and float64 take other paths: a float64 logsumexp was right, a float32 one wrong)
_DTYPES = {"float32": (np.float32, 1e-5), "float64": (np.float64, 1e-9)}


def _args(shapes: tuple, make: str, dtype: type) -> tuple[tuple, tuple]:
    arrays = [
        (np.linspace(-0.7, 0.9, int(np.prod(s))).reshape(s) + 0.1 * i).astype(dtype) for i, s in enumerate(shapes)
    ]
    return tuple(_MAKE[make](a) for a in arrays), tuple(torch.tensor(a) for a in arrays)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("make", _MAKE)
@pytest.mark.parametrize("name", _FUSED)
def test_jacobian_of_fused_functions(name: str, make: str, dtype: str) -> None:
    (fn, *shapes), (np_dtype, rtol) = _FUSED[name], _DTYPES[dtype]
    ours, theirs = _args(tuple(shapes), make, np_dtype)
    if len(ours) == 1:
        _same(F.jacobian(fn, ours[0]), TF.jacobian(fn, theirs[0]), rtol)
    else:
        _same(F.jacobian(fn, ours), TF.jacobian(fn, theirs), rtol)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("make", _MAKE)
@pytest.mark.parametrize("name", _SCALAR)
def test_hessian_of_fused_functions(name: str, make: str, dtype: str) -> None:
    (fn, *shapes), (np_dtype, rtol) = _SCALAR[name], _DTYPES[dtype]
    ours, theirs = _args(tuple(shapes), make, np_dtype)
    if len(ours) == 1:
        _same(F.hessian(fn, ours[0]), TF.hessian(fn, theirs[0]), rtol)
    else:
        _same(F.hessian(fn, ours), TF.hessian(fn, theirs), rtol)


def test_unused_inputs_strict_and_create_graph() -> None:
    x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0])
    jx, jy = F.jacobian(lambda a, b: a * a, (x, y))
    assert jy.tolist() == [[0.0], [0.0]] and jx.tolist() == [[2.0, 0.0], [0.0, 4.0]]
    with pytest.raises(RuntimeError, match="output 0 doesn't depend on input 1"):
        F.jacobian(lambda a, b: a * a, (x, y), strict=True)
    with pytest.raises(RuntimeError, match="don't depend on input 1"):
        F.vjp(lambda a, b: (a * a).sum(), (x, y), strict=True)
    # create_graph: the Jacobian can be differentiated again, with respect to the original input
    j = F.jacobian(lambda a: a**3, x, create_graph=True)
    assert j.requires_grad
    (g,) = torch_free_grad(j.sum(), x)
    assert g.tolist() == [6.0, 12.0]
    assert not F.jacobian(lambda a: a**3, x).requires_grad


def torch_free_grad(out, x):
    from uopkit.autograd import grad

    return grad(out, x)


def test_errors_are_torchs() -> None:
    x = Tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="jacobian: the inputs must be a Tensor or a tuple of Tensors; got a list"):
        F.jacobian(lambda a: a, [x])
    with pytest.raises(RuntimeError, match=r"vjp: v=None .* outputs of shapes \[\(2,\)\]"):
        F.vjp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match=r"v has shape \(1,\), the tensor it goes with has shape \(2,\)"):
        F.vjp(lambda a: a * 2, x, Tensor([1.0]))
    with pytest.raises(RuntimeError, match=r"v=None .* inputs of shapes \[\(2,\)\]"):
        F.jvp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match=r"hessian: the function must return a single element, got shape \(2,\)"):
        F.hessian(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="vhp: the function must return one tensor, got a tuple of 2"):
        F.vhp(lambda a: (a.sum(), a.sum()), x, x)
    with pytest.raises(ValueError, match="strategy takes .* got 'sideways'"):
        F.jacobian(lambda a: a, x, strategy="sideways")
    with pytest.raises(NotImplementedError, match="forward-mode.* vectorize=True"):
        F.jacobian(lambda a: a, x, strategy="forward-mode")
    assert F.jacobian(lambda a: a * 3, x, vectorize=True, strategy="forward-mode").tolist() == [[3.0, 0.0], [0.0, 3.0]]


# ---------------------------------------------------------------------------------------------------------------------
# gradcheck


class _WrongBackward(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x


def test_gradcheck_passes_and_fails_as_torch() -> None:
    x = Tensor(RNG.standard_normal(4), dtype=dtypes.float64, requires_grad=True)
    y = Tensor(RNG.standard_normal(4), dtype=dtypes.float64, requires_grad=True)
    assert gradcheck(lambda a, b: ((a * b).tanh(), a.exp().sum()), (x, y))
    assert gradgradcheck(lambda a, b: (a * b).tanh(), (x, y))
    with pytest.raises(GradcheckError, match=r"d\(output 0\)/d\(input 0\) differs"):
        gradcheck(_WrongBackward.apply, (x,))
    assert gradcheck(_WrongBackward.apply, (x,), raise_exception=False) is False
    assert issubclass(GradcheckError, RuntimeError)
    with pytest.raises(ValueError, match="gradcheck: no input has requires_grad=True"):
        gradcheck(lambda a: a * 2, (Tensor([1.0], dtype=dtypes.float64),))
    with pytest.warns(UserWarning, match="gradcheck: input 0 requires grad but is dtypes.float"):
        gradcheck(lambda a: a * 2, (Tensor([1.0], requires_grad=True),), eps=1e-2, atol=1e-2)

    # a wrong second derivative: the first is right, its own gradient is not
    class WrongSecond(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a**3

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 3 * (a.detach() ** 2)

    assert gradcheck(WrongSecond.apply, (x,))
    assert not gradgradcheck(WrongSecond.apply, (x,), raise_exception=False)


# ---------------------------------------------------------------------------------------------------------------------
# torch.gradient


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"spacing": 2.0},
        {"spacing": [0.5, 3.0, 1.0]},
        {"dim": 1},
        {"dim": [0, -1], "edge_order": 2},
        {"spacing": 0.25, "dim": [2], "edge_order": 2},
        {"edge_order": 2},
    ],
)
def test_torch_gradient_uniform(kwargs: dict) -> None:
    data = RNG.standard_normal((3, 4, 5))
    ours = Tensor(data, dtype=dtypes.float64).gradient(**kwargs)
    _same(ours, torch.gradient(torch.tensor(data), **kwargs))
    _same(
        numerical_gradient(Tensor(data, dtype=dtypes.float64), **kwargs), torch.gradient(torch.tensor(data), **kwargs)
    )


@pytest.mark.parametrize("edge_order", [1, 2])
def test_torch_gradient_coordinates_and_ints(edge_order: int) -> None:
    data = RNG.standard_normal((4, 6))
    c0, c1 = np.array([0.0, 0.5, 2.0, 2.5]), np.cumsum(RNG.uniform(0.1, 1.0, 6))
    ours = Tensor(data, dtype=dtypes.float64).gradient(
        spacing=[Tensor(c0, dtype=dtypes.float64), Tensor(c1, dtype=dtypes.float64)], edge_order=edge_order
    )
    _same(ours, torch.gradient(torch.tensor(data), spacing=[torch.tensor(c0), torch.tensor(c1)], edge_order=edge_order))
    ints = Tensor([1, 2, 4, 8]).gradient()
    assert ints[0].dtype == dtypes.float32 and ints[0].tolist() == [1.0, 1.5, 3.0, 4.0]


def test_torch_gradient_errors_and_the_autograd_name() -> None:
    with pytest.raises(RuntimeError, match=r"edge_order=2 needs at least 3 samples along dim 0"):
        Tensor([1.0, 2.0]).gradient(edge_order=2)
    with pytest.raises(RuntimeError, match="edge_order takes 1 or 2, got 3"):
        Tensor([1.0, 2.0]).gradient(edge_order=3)
    with pytest.raises(RuntimeError, match=r"one entry per dim \(2 here, no dim given\), got 3"):
        Tensor([[1.0, 2.0], [3.0, 4.0]]).gradient(spacing=[1.0, 2.0, 3.0])
    x = Tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="torch.gradient's keywords"):
        (x * x).sum().gradient(x, dim=0)
    # tinygrad's autograd method is unchanged with targets
    assert (x * x).sum().gradient(x)[0].tolist() == [2.0, 4.0]

"""uopkit.func's transforms (grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap, stack_module_state,
replace_all_batch_norm_modules_) against torch.func's on the same inputs: values, shapes and trees of the results,
their composition (vmap(grad), jacrev(jacrev), grad(grad), vmap(jacrev), nested vmap), torch's tutorials (per-sample
gradients, model ensembling) at small sizes, `.grad` left alone, randomness, and torch's errors."""

import copy
import doctest
import importlib

import numpy as np
import pytest

from uopkit import Tensor, func, nn, no_grad
from uopkit.func import pytree, transforms, vmapping
from uopkit.nn import functional as F

torch = pytest.importorskip("torch")
tfunc = importlib.import_module("torch.func")


def _pair(*shape, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(a), torch.from_numpy(a.copy())


def _same(ours, theirs, rtol=1e-5, atol=1e-6):
    """The two trees have one structure, and tensors of the same shapes and values at each place."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, Tensor), type(ours)
        assert ours.shape == tuple(theirs.shape), (ours.shape, theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)
    elif isinstance(theirs, (tuple, list, dict)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), (ours, theirs)
        if isinstance(theirs, dict):
            assert list(ours) == list(theirs), (list(ours), list(theirs))
            ours, theirs = list(ours.values()), list(theirs.values())
        for a, b in zip(ours, theirs, strict=True):
            _same(a, b, rtol, atol)
    else:
        assert ours == theirs, (ours, theirs)


def test_docstring_examples():
    for module in (func, transforms, vmapping, pytree):
        assert doctest.testmod(module, extraglobs={"Tensor": Tensor}).failed == 0


# ---------------------------------------------------------------------------------------------------------------------
# grad and grad_and_value


def _f(x, y):
    return (x.sin() * y).sum() + (x * x).sum()


def _tf(x, y):
    return (x.sin() * y).sum() + (x * x).sum()


@pytest.mark.parametrize("argnums", [0, 1, -1, (0, 1), (1, 0)])
def test_grad_argnums(argnums):
    (x, tx), (y, ty) = _pair(3, seed=1), _pair(3, seed=2)
    _same(func.grad(_f, argnums)(x, y), tfunc.grad(_tf, argnums)(tx, ty))
    _same(func.grad_and_value(_f, argnums)(x, y), tfunc.grad_and_value(_tf, argnums)(tx, ty))


def test_grad_trees_aux_and_kwargs():
    (x, tx), (y, ty) = _pair(2, 3, seed=1), _pair(3, seed=2)

    def f(p, scale=1.0):
        loss = (p["w"] @ p["b"][0]).square().sum() * scale
        return loss, {"out": loss * 2, "pair": (p["w"].sum(), p["b"][1])}

    def tf(p, scale=1.0):
        loss = (p["w"] @ p["b"][0]).square().sum() * scale
        return loss, {"out": loss * 2, "pair": (p["w"].sum(), p["b"][1])}

    ours = func.grad(f, has_aux=True)({"w": x, "b": [y, y * 2]}, scale=3.0)
    theirs = tfunc.grad(tf, has_aux=True)({"w": tx, "b": [ty, ty * 2]}, scale=3.0)
    _same(ours, theirs, rtol=1e-5, atol=1e-5)
    ours = func.grad_and_value(f, has_aux=True)({"w": x, "b": [y, y * 2]})
    theirs = tfunc.grad_and_value(tf, has_aux=True)({"w": tx, "b": [ty, ty * 2]})
    _same(ours, theirs, rtol=1e-5, atol=1e-5)


def test_grad_unused_input_and_constant_output_give_zeros():
    (x, tx), (y, ty) = _pair(3), _pair(3, seed=1)
    _same(func.grad(lambda a, b: a.sum(), argnums=(0, 1))(x, y), tfunc.grad(lambda a, b: a.sum(), (0, 1))(tx, ty))
    _same(func.grad(lambda a: Tensor(1.0))(x), tfunc.grad(lambda a: torch.tensor(1.0))(tx))
    _same(func.grad(lambda a: (a > 0).float().sum())(x), tfunc.grad(lambda a: (a > 0).float().sum())(tx))


def test_grad_of_grad_and_closures():
    x, tx = _pair(3)
    f = func.grad(lambda a: func.grad(lambda b: (b**3).sum())(a).sum())
    tf = tfunc.grad(lambda a: tfunc.grad(lambda b: (b**3).sum())(a).sum())
    _same(f(x), tf(tx))
    s, ts = Tensor(0.7), torch.tensor(0.7)
    _same(func.grad(func.grad(lambda a: a.sin() * a))(s), tfunc.grad(tfunc.grad(lambda a: a.sin() * a))(ts))
    # the inner gradient is the one through its own argument only, not through the closure over the same tensor
    f = func.grad(lambda a: func.grad(lambda b: (a * b * b).sum())(a).square().sum())
    tf = tfunc.grad(lambda a: tfunc.grad(lambda b: (a * b * b).sum())(a).square().sum())
    _same(f(x), tf(tx))


def test_grad_leaves_dot_grad_alone_and_composes_with_autograd():
    x, tx = _pair(3)
    for a, ta in ((x, tx), (x.detach().requires_grad_(), tx.detach().requires_grad_())):
        g, tg = func.grad(lambda v: (v**3).sum())(a), tfunc.grad(lambda v: (v**3).sum())(ta)
        _same(g, tg)
        assert g.requires_grad == tg.requires_grad
        assert a.grad is None and ta.grad is None
    # a gradient of an input that requires grad is attached to it: backward through it gives the second derivative
    g.sum().backward()
    tg.sum().backward()
    _same(a.grad, ta.grad)
    # a module's own parameters don't get a .grad from a gradient computed with them
    model, tmodel = _mlp()
    (xb, txb), target = _pair(4, 5, seed=3), np.array([0, 2, 1, 0])
    target_t = torch.from_numpy(target)
    loss = func.grad(lambda p: F.cross_entropy(func.functional_call(model, p, (xb,)), Tensor(target)))
    tloss = tfunc.grad(lambda p: torch.nn.functional.cross_entropy(tfunc.functional_call(tmodel, p, (txb,)), target_t))
    _same(loss(dict(model.named_parameters())), tloss(dict(tmodel.named_parameters())), atol=1e-5)
    assert all(p.grad is None for p in model.parameters())


def test_grad_under_no_grad():
    x, tx = _pair(3)
    a, ta = x.detach().requires_grad_(), tx.detach().requires_grad_()
    with no_grad(), torch.no_grad():
        g, tg = func.grad(lambda v: (v**3).sum())(a), tfunc.grad(lambda v: (v**3).sum())(ta)
    _same(g, tg)
    assert not g.requires_grad and not tg.requires_grad


def test_grad_errors():
    x, tx = _pair(3)
    cases = [
        (lambda g: g(lambda a: a)(x), lambda g: g(lambda a: a)(tx)),
        (lambda g: g(lambda a: a.sum().reshape(1))(x), lambda g: g(lambda a: a.sum().reshape(1))(tx)),
        (lambda g: g(lambda a: 1.0)(x), lambda g: g(lambda a: 1.0)(tx)),
        (lambda g: g(lambda a: a.sum(), has_aux=True)(x), lambda g: g(lambda a: a.sum(), has_aux=True)(tx)),
        (lambda g: g(lambda a: (a.sum(), 1), has_aux=True)(x), lambda g: g(lambda a: (a.sum(), 1), has_aux=True)(tx)),
        (lambda g: g(lambda a: a.sum(), argnums=2)(x), lambda g: g(lambda a: a.sum(), argnums=2)(tx)),
        (lambda g: g(lambda a: a.sum(), argnums=())(x), lambda g: g(lambda a: a.sum(), argnums=())(tx)),
        (lambda g: g(lambda a: a.sum(), argnums=[0])(x), lambda g: g(lambda a: a.sum(), argnums=[0])(tx)),
        (lambda g: g(lambda a, b: a.sum(), (0, 0))(x, x), lambda g: g(lambda a, b: a.sum(), (0, 0))(tx, tx)),
        (lambda g: g(lambda d: d[0].sum())([x, 1]), lambda g: g(lambda d: d[0].sum())([tx, 1])),
        (lambda g: g(lambda a: a.sum())(Tensor([1, 2])), lambda g: g(lambda a: a.sum())(torch.tensor([1, 2]))),
        (lambda g: g(lambda: x.sum())(), lambda g: g(lambda: tx.sum())()),
    ]
    for ours, theirs in cases:
        with pytest.raises(Exception) as theirs_info:
            theirs(tfunc.grad)
        # (torch's exception type; the message is ours, naming the transform)
        with pytest.raises(theirs_info.type, match="func transform|argnums|grad|aux"):
            ours(func.grad)


# ---------------------------------------------------------------------------------------------------------------------
# vjp and jvp


def test_vjp():
    (x, tx), (y, ty) = _pair(2, 3), _pair(3, seed=1)

    def f(a, b):
        return {"p": a * b.exp(), "s": (a.sum(), b.sin())}, a.mean()

    def tf(a, b):
        return {"p": a * b.exp(), "s": (a.sum(), b.sin())}, a.mean()

    out, fn, aux = func.vjp(f, x, y, has_aux=True)
    tout, tfn, taux = tfunc.vjp(tf, tx, ty, has_aux=True)
    _same(out, tout)
    _same(aux, taux)
    (c1, tc1), (c2, tc2), (c3, tc3) = _pair(2, 3, seed=4), _pair(seed=5), _pair(3, seed=6)
    _same(fn({"p": c1, "s": (c2, c3)}), tfn({"p": tc1, "s": (tc2, tc3)}), atol=1e-5)
    # called again with other cotangents
    _same(fn({"p": c1 * 2, "s": (c2, c3)}), tfn({"p": tc1 * 2, "s": (tc2, tc3)}), atol=1e-5)
    assert not out["p"].requires_grad
    for ours, theirs in [
        (lambda: fn(c1), lambda: tfn(tc1)),
        (lambda: func.vjp(lambda a: a * 2, x)[1](c3), lambda: tfunc.vjp(lambda a: a * 2, tx)[1](tc3)),
        (lambda: func.vjp(lambda a: 1.0, x), lambda: tfunc.vjp(lambda a: 1.0, tx)),
        (lambda: func.vjp(lambda a: a, 1.0), lambda: tfunc.vjp(lambda a: a, 1.0)),
        (lambda: func.vjp(lambda a: a, x, has_aux=True), lambda: tfunc.vjp(lambda a: a, tx, has_aux=True)),
    ]:
        with pytest.raises(Exception) as theirs_info:
            theirs()
        with pytest.raises(theirs_info.type):
            ours()


def test_jvp():
    (x, tx), (y, ty) = _pair(2, 3), _pair(3, seed=1)
    (u, tu), (v, tv) = _pair(2, 3, seed=2), _pair(3, seed=3)

    def f(a, b):
        return (a * b.exp()).tanh(), (a.sum(1), b * b), {"m": a.mean()}

    def tf(a, b):
        return (a * b.exp()).tanh(), (a.sum(1), b * b), {"m": a.mean()}

    _same(func.jvp(f, (x, y), (u, v)), tfunc.jvp(tf, (tx, ty), (tu, tv)), atol=1e-5)
    ours = func.jvp(lambda d: (d["a"].sin(), d["a"].sum()), ({"a": x},), ({"a": u},), has_aux=True)
    theirs = tfunc.jvp(lambda d: (d["a"].sin(), d["a"].sum()), ({"a": tx},), ({"a": tu},), has_aux=True)
    _same(ours, theirs, atol=1e-5)
    for ours, theirs in [
        (lambda: func.jvp(lambda a: a, x, u), lambda: tfunc.jvp(lambda a: a, tx, tu)),
        (lambda: func.jvp(lambda a: a, (x,), u), lambda: tfunc.jvp(lambda a: a, (tx,), tu)),
        (lambda: func.jvp(lambda a: a, (x,), (v,)), lambda: tfunc.jvp(lambda a: a, (tx,), (tv,))),
        (lambda: func.jvp(lambda a: 1.0, (x,), (u,)), lambda: tfunc.jvp(lambda a: 1.0, (tx,), (tu,))),
        (lambda: func.jvp(lambda a: a, (1.0,), (1.0,)), lambda: tfunc.jvp(lambda a: a, (1.0,), (1.0,))),
        (
            lambda: func.jvp(lambda a: a, (Tensor([1, 2]),), (Tensor([1, 2]),)),
            lambda: tfunc.jvp(lambda a: a, (torch.tensor([1, 2]),), (torch.tensor([1, 2]),)),
        ),
    ]:
        with pytest.raises(Exception) as theirs_info:
            theirs()
        with pytest.raises(theirs_info.type):
            ours()


def test_linearize_as_torchs():
    # torch.func.linearize: the output, and a jvp_fn taking tangents shaped as the primals (a tree), torch's checks
    (x, tx), (y, ty) = _pair(3), _pair(3, seed=1)
    (u, tu), (v, tv) = _pair(3, seed=2), _pair(3, seed=3)
    out, jvp_fn = func.linearize(_f, x, y)
    tout, tjvp_fn = tfunc.linearize(_tf, tx, ty)
    _same(out, tout)
    _same(jvp_fn(u, v), tjvp_fn(tu, tv))
    _same(jvp_fn(u.zeros_like(), v), tjvp_fn(torch.zeros(3), tv))
    tree_out, tree_fn = func.linearize(lambda d: {"s": d["a"].sin(), "t": d["a"].sum()}, {"a": x})
    ttree_out, ttree_fn = tfunc.linearize(lambda d: {"s": d["a"].sin(), "t": d["a"].sum()}, {"a": tx})
    _same(tree_out, ttree_out)
    _same(tree_fn({"a": u}), ttree_fn({"a": tu}))
    with pytest.raises(RuntimeError, match="structure"):
        jvp_fn(u)
    with pytest.raises(RuntimeError, match="shape"):
        jvp_fn(u, v[:2])
    with pytest.raises(RuntimeError, match="dtype"):
        jvp_fn(u.double(), v)


# ---------------------------------------------------------------------------------------------------------------------
# Jacobians and Hessians


def _g(a, b):
    return {"y": (a[:, None] * b).sin(), "z": a.square().sum()}


def _tg(a, b):
    return {"y": (a[:, None] * b).sin(), "z": a.square().sum()}


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_jacrev_jacfwd(argnums):
    (x, tx), (y, ty) = _pair(3), _pair(2, seed=1)
    _same(func.jacrev(_g, argnums)(x, y), tfunc.jacrev(_tg, argnums)(tx, ty))
    _same(func.jacfwd(_g, argnums)(x, y), tfunc.jacfwd(_tg, argnums)(tx, ty))


def test_jacobian_aux_trees_and_errors():
    x, tx = _pair(2, 2)
    _same(
        func.jacrev(lambda d: (d["a"] @ d["a"], d["a"].sum()), has_aux=True)({"a": x}),
        tfunc.jacrev(lambda d: (d["a"] @ d["a"], d["a"].sum()), has_aux=True)({"a": tx}),
    )
    _same(
        func.jacfwd(lambda d: (d["a"] @ d["a"], d["a"].sum()), has_aux=True)({"a": x}),
        tfunc.jacfwd(lambda d: (d["a"] @ d["a"], d["a"].sum()), has_aux=True)({"a": tx}),
    )
    for name in ("jacrev", "jacfwd"):
        ours, theirs = getattr(func, name), getattr(tfunc, name)
        for call in (
            lambda j: j(lambda a: 1.0),
            lambda j: j(lambda a: a, argnums=1),
            lambda j: j(lambda a: a, 2, True),
        ):
            with pytest.raises(Exception) as theirs_info:
                call(theirs)(tx)
            with pytest.raises(theirs_info.type):
                call(ours)(x)
    with pytest.raises(ValueError, match="chunk_size"):
        func.jacrev(lambda a: a, chunk_size=0)
    with pytest.raises(RuntimeError, match="randomness=.error."):
        func.jacfwd(lambda a: a + Tensor.rand(2, 2))(x)
    _same(func.jacrev(lambda a: a + Tensor.rand(2, 2))(x), tfunc.jacrev(lambda a: a + torch.rand(2, 2))(tx))


def test_hessian_and_composed_jacobians():
    (x, tx), (y, ty) = _pair(3), _pair(3, seed=1)

    def h(a, b):
        return (a.sin() * b * b).sum() + (a * a * a).sum()

    def th(a, b):
        return (a.sin() * b * b).sum() + (a * a * a).sum()

    _same(func.hessian(h)(x, y), tfunc.hessian(th)(tx, ty), atol=1e-5)
    _same(func.hessian(h, argnums=(0, 1))(x, y), tfunc.hessian(th, argnums=(0, 1))(tx, ty), atol=1e-5)
    _same(
        func.jacrev(func.jacrev(lambda a: a.sin() * a.sum()))(x),
        tfunc.jacrev(tfunc.jacrev(lambda a: a.sin() * a.sum()))(tx),
        atol=1e-5,
    )
    xs, txs = _pair(4, 3, seed=2)
    _same(
        func.vmap(func.jacrev(lambda a: a.sin() * a.sum()))(xs),
        tfunc.vmap(tfunc.jacrev(lambda a: a.sin() * a.sum()))(txs),
        atol=1e-5,
    )
    _same(
        func.vmap(func.hessian(lambda a: (a**3).sum()))(xs),
        tfunc.vmap(tfunc.hessian(lambda a: (a**3).sum()))(txs),
        atol=1e-5,
    )


# ---------------------------------------------------------------------------------------------------------------------
# vmap


def test_vmap_in_dims_out_dims():
    (x, tx), (y, ty) = _pair(4, 3), _pair(3, 4, seed=1)
    _same(func.vmap(lambda a, b: a * b, in_dims=(0, 1))(x, y), tfunc.vmap(lambda a, b: a * b, in_dims=(0, 1))(tx, ty))
    _same(
        func.vmap(lambda a, b: a * b, in_dims=(-2, -1))(x, y), tfunc.vmap(lambda a, b: a * b, in_dims=(-2, -1))(tx, ty)
    )
    _same(func.vmap(lambda a: a.sum(), in_dims=1)(x), tfunc.vmap(lambda a: a.sum(), in_dims=1)(tx))
    _same(
        func.vmap(lambda a, b: a @ b, in_dims=(0, None))(x, y),
        tfunc.vmap(lambda a, b: a @ b, in_dims=(0, None))(tx, ty),
    )
    for od in (1, -1, (1,), 0):
        _same(func.vmap(lambda a: a * 2, out_dims=od)(x), tfunc.vmap(lambda a: a * 2, out_dims=od)(tx))
    # trees in, trees out, per-tree in_dims and out_dims, None outputs, kwargs
    d, td = {"a": x, "b": [y, 3]}, {"a": tx, "b": [ty, 3]}
    dims = ({"a": 0, "b": [1, None]},)

    def make(const):
        def f(p, scale=1.0):
            return (p["a"] * p["b"][0] * p["b"][1] * scale, {"s": p["a"].sum()}), const * 2, 7

        return f

    (c, tc), out_dims = _pair(2, seed=2), ((1, {"s": 0}), None, None)
    ours = func.vmap(make(c), in_dims=dims, out_dims=out_dims)(d, scale=2.0)
    theirs = tfunc.vmap(make(tc), in_dims=dims, out_dims=out_dims)(td, scale=2.0)
    _same(ours, theirs)


def test_vmap_nested_chunked_and_empty():
    x, tx = _pair(2, 3, 4)
    _same(func.vmap(func.vmap(lambda a: a.softmax(0)))(x), tfunc.vmap(tfunc.vmap(lambda a: a.softmax(0)))(tx))
    _same(
        func.vmap(func.vmap(lambda a: a.sum(), in_dims=1), in_dims=2)(x),
        tfunc.vmap(tfunc.vmap(lambda a: a.sum(), in_dims=1), in_dims=2)(tx),
    )
    _same(func.vmap(lambda a: a.exp(), chunk_size=1)(x), tfunc.vmap(lambda a: a.exp(), chunk_size=1)(tx))
    e, te = _pair(0, 2)
    _same(func.vmap(lambda a: a * 2)(e), tfunc.vmap(lambda a: a * 2)(te))
    _same(func.vmap(lambda a: a.sum(), out_dims=0)(e), tfunc.vmap(lambda a: a.sum(), out_dims=0)(te))


def test_vmap_errors():
    (x, tx), (y, ty) = _pair(3), _pair(4, seed=1)

    cases = [
        lambda v, a, b: v(lambda p: p, in_dims=[0])(a),
        lambda v, a, b: v(lambda p: p, in_dims="a")(a),
        lambda v, a, b: v(lambda p, q: p, in_dims=(0,))(a, a),
        lambda v, a, b: v(lambda p: p, in_dims=(0.0,))(a),
        lambda v, a, b: v(lambda p: p, in_dims=(1,))(a),
        lambda v, a, b: v(lambda p: p, in_dims=(-2,))(a),
        lambda v, a, b: v(lambda p, q: p, in_dims=(0, 0))(a, 1.0),
        lambda v, a, b: v(lambda p, q: p + q)(a, b),
        lambda v, a, b: v(lambda p: p, in_dims=(None,))(a),
        lambda v, a, b: v(lambda: a)(),
        lambda v, a, b: v(lambda p: 1.0)(a),
        lambda v, a, b: v(lambda p: (p, None))(a),
        lambda v, a, b: v(lambda p: p, out_dims=None)(a),
        lambda v, a, b: v(lambda p: p, out_dims=1)(a),
        lambda v, a, b: v(lambda p: p, out_dims=-3)(a),
        lambda v, a, b: v(lambda p: (p, p), out_dims=(0,))(a),
        lambda v, a, b: v(lambda p: p, out_dims="a")(a),
        lambda v, a, b: v(lambda p: p, chunk_size=0)(a),
        lambda v, a, b: v(lambda p: p, randomness="foo")(a),
        lambda v, a, b: v(lambda p: p)(a.sum()),
    ]
    for case in cases:
        with pytest.raises(Exception) as theirs_info:
            case(tfunc.vmap, tx, ty)
        # (torch's exception type; the message is ours, naming vmap)
        with pytest.raises(theirs_info.type, match="vmap"):
            case(func.vmap, x, y)


def test_vmap_randomness():
    x = Tensor.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness=.error."):
        func.vmap(lambda a: a + Tensor.rand(3))(x)
    with pytest.raises(RuntimeError, match="randomness=.error."):
        func.vmap(lambda a: F.dropout(a, 0.5))(x)
    # (no draw: no error, as torch's)
    func.vmap(lambda a: F.dropout(a, 0.5, training=False))(x).numpy()
    Tensor.manual_seed(0)
    same = func.vmap(lambda a: a + Tensor.rand(3), randomness="same")(x).numpy()
    assert (same == same[0]).all()
    # the stream moved as by one draw: the next draw is the one after
    Tensor.manual_seed(0)
    first, second = Tensor.rand(3).numpy(), Tensor.rand(3).numpy()
    np.testing.assert_array_equal(same[0], first)
    Tensor.manual_seed(0)
    func.vmap(lambda a: a + Tensor.rand(3), randomness="same")(x).numpy()
    np.testing.assert_array_equal(Tensor.rand(3).numpy(), second)
    different = func.vmap(lambda a: a + Tensor.rand(3), randomness="different")(x).numpy()
    assert len({tuple(r) for r in different.tolist()}) == 4
    # nested: an outer "error" still refuses
    with pytest.raises(RuntimeError, match="randomness=.error."):
        func.vmap(func.vmap(lambda a: a + Tensor.rand(()), randomness="different"))(x)


@pytest.mark.parametrize("chunk", [None, 2])
def test_vmap_of_grad_and_grad_of_vmap(chunk):
    (x, tx), (w, tw) = _pair(5, 3), _pair(3, seed=1)
    ours = func.vmap(func.grad(lambda p, a: (p * a).sin().sum(), argnums=(0, 1)), in_dims=(None, 0), chunk_size=chunk)
    theirs = tfunc.vmap(tfunc.grad(lambda p, a: (p * a).sin().sum(), argnums=(0, 1)), in_dims=(None, 0))
    _same(ours(w, x), theirs(tw, tx), atol=1e-5)
    # a gradient through a vmap (realized chunk by chunk with chunk_size: followed back all the same)
    ours = func.grad(lambda p: func.vmap(lambda a: (p * a).sin().sum(), chunk_size=chunk)(x).square().sum())(w)
    theirs = tfunc.grad(lambda p: tfunc.vmap(lambda a: (p * a).sin().sum(), chunk_size=chunk)(tx).square().sum())(tw)
    _same(ours, theirs, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# torch's tutorials, small: per-sample gradients and model ensembling


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _mlp(seed=0):
    torch.manual_seed(seed)
    theirs = torch.nn.Sequential()
    theirs.fc1, theirs.act, theirs.fc2 = torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ours = _MLP()
    ours.load_state_dict({k: Tensor(v.numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_per_sample_gradients_tutorial():
    model, tmodel = _mlp()
    (data, tdata), targets = _pair(6, 5, seed=4), np.array([0, 1, 2, 1, 0, 2])
    params = {k: v.detach() for k, v in model.named_parameters()}
    tparams = {k: v.detach() for k, v in tmodel.named_parameters()}
    buffers, tbuffers = dict(model.named_buffers()), dict(tmodel.named_buffers())

    def compute_loss(params, buffers, sample, target):
        predictions = func.functional_call(model, (params, buffers), (sample.unsqueeze(0),))
        return F.cross_entropy(predictions, target.unsqueeze(0))

    def tcompute_loss(params, buffers, sample, target):
        predictions = tfunc.functional_call(tmodel, (params, buffers), (sample.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(predictions, target.unsqueeze(0))

    ours = func.vmap(func.grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data, Tensor(targets))
    theirs = tfunc.vmap(tfunc.grad(tcompute_loss), in_dims=(None, None, 0, 0))(
        tparams, tbuffers, tdata, torch.from_numpy(targets)
    )
    _same(ours, theirs, atol=1e-5)
    assert ours["fc1.weight"].shape == (6, 8, 5)
    assert all(p.grad is None for p in model.parameters())
    # the same as one gradient per sample, taken one at a time
    for i in range(6):
        loss = compute_loss(dict(model.named_parameters()), buffers, data[i], Tensor(targets)[i])
        loss.backward()
        for k, p in model.named_parameters():
            np.testing.assert_allclose(ours[k][i].numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)
            p.grad = None


def test_model_ensembling_tutorial():
    pairs = [_mlp(seed) for seed in range(3)]
    models, tmodels = [p[0] for p in pairs], [p[1] for p in pairs]
    params, buffers = func.stack_module_state(models)
    tparams, tbuffers = tfunc.stack_module_state(tmodels)
    _same(params, tparams)
    assert all(p.requires_grad for p in params.values())
    # the tutorial's stateless template: a copy moved to torch's meta device (no meta device here: it stays put)
    base = copy.deepcopy(models[0]).to("meta")
    tbase = copy.deepcopy(tmodels[0]).to("meta")

    def fmodel(params, buffers, x):
        return func.functional_call(base, (params, buffers), (x,))

    def tfmodel(params, buffers, x):
        return tfunc.functional_call(tbase, (params, buffers), (x,))

    (minibatches, tminibatches), (minibatch, tminibatch) = _pair(3, 4, 5, seed=5), _pair(4, 5, seed=6)
    _same(
        func.vmap(fmodel)(params, buffers, minibatches), tfunc.vmap(tfmodel)(tparams, tbuffers, tminibatches), atol=1e-5
    )
    ours = func.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    theirs = tfunc.vmap(tfmodel, in_dims=(0, 0, None))(tparams, tbuffers, tminibatch)
    _same(ours, theirs, atol=1e-5)
    # the stacked parameters are leaves an optimizer can train: gradients reach them through the vmap
    ours.square().sum().backward()
    theirs.square().sum().backward()
    for k in params:
        np.testing.assert_allclose(params[k].grad.numpy(), tparams[k].grad.numpy(), rtol=1e-4, atol=1e-5)


def test_ensemble_with_batch_norms_replaced():
    # torch.func's answer to batch norms in a vmapped ensemble: no running statistics, the batch's own in eval too
    def pair(seed):
        torch.manual_seed(seed)
        theirs = torch.nn.Sequential(
            torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.Tanh(), torch.nn.Linear(6, 2)
        )
        ours = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 2))
        ours.load_state_dict({k: Tensor(v.numpy().copy()) for k, v in theirs.state_dict().items()})
        assert func.replace_all_batch_norm_modules_(ours) is ours
        tfunc.replace_all_batch_norm_modules_(theirs)
        return ours.eval(), theirs.eval()

    pairs = [pair(seed) for seed in range(3)]
    for ours, theirs in pairs:
        bn, tbn = ours[1], theirs[1]
        assert (bn.running_mean, bn.running_var, bn.num_batches_tracked) == (None, None, None)
        assert bn.track_running_stats is tbn.track_running_stats is False
        assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    params, buffers = func.stack_module_state([p[0] for p in pairs])
    tparams, tbuffers = tfunc.stack_module_state([p[1] for p in pairs])
    assert buffers == {} and tbuffers == {}
    base, tbase = copy.deepcopy(pairs[0][0]).to("meta"), copy.deepcopy(pairs[0][1]).to("meta")
    x, tx = _pair(4, 5, seed=7)
    ours = func.vmap(lambda p, b, x: func.functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(params, buffers, x)
    theirs = tfunc.vmap(lambda p, b, x: tfunc.functional_call(tbase, (p, b), (x,)), in_dims=(0, 0, None))(
        tparams, tbuffers, tx
    )
    _same(ours, theirs, atol=1e-5)
    ours.square().sum().backward()
    theirs.square().sum().backward()
    for k in params:
        np.testing.assert_allclose(params[k].grad.numpy(), tparams[k].grad.numpy(), rtol=1e-4, atol=1e-5)


def test_stack_module_state_errors():
    for make in (
        lambda lin: [],
        lambda lin: [lin(2, 2), lin(2, 2).eval()],
        lambda lin: [lin(2, 2), nn.ReLU() if lin is nn.Linear else torch.nn.ReLU()],
    ):
        with pytest.raises(RuntimeError):
            tfunc.stack_module_state(make(torch.nn.Linear))
        with pytest.raises(RuntimeError, match="stack_module_state"):
            func.stack_module_state(make(nn.Linear))


def test_transforms_compose_with_autograd_and_each_other():
    # per-sample gradients of parameters that require grad: attached to them, so a penalty on them trains the model
    model, tmodel = _mlp()
    (data, tdata), targets = _pair(4, 5, seed=4), np.array([0, 1, 2, 1])

    def cl(params, sample, target):
        return F.cross_entropy(func.functional_call(model, params, (sample.unsqueeze(0),)), target.unsqueeze(0))

    def tcl(params, sample, target):
        out = tfunc.functional_call(tmodel, params, (sample.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(out, target.unsqueeze(0))

    g = func.vmap(func.grad(cl), in_dims=(None, 0, 0))(dict(model.named_parameters()), data, Tensor(targets))
    tg = tfunc.vmap(tfunc.grad(tcl), in_dims=(None, 0, 0))(
        dict(tmodel.named_parameters()), tdata, torch.from_numpy(targets)
    )
    _same(g, tg, atol=1e-5)
    assert g["fc1.weight"].requires_grad and model.fc1.weight.grad is None
    sum(v.square().sum() for v in g.values()).backward()
    sum(v.square().sum() for v in tg.values()).backward()
    for (k, p), tp in zip(model.named_parameters(), tmodel.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    # a closure over a tensor that requires grad, through vmap(grad)
    (xs, txs), w, tw = _pair(4, 3, seed=5), Tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([1.0, 2.0, 3.0])
    tw.requires_grad_()
    r = func.vmap(func.grad(lambda a: (a * w).sin().sum()))(xs)
    tr = tfunc.vmap(tfunc.grad(lambda a: (a * tw).sin().sum()))(txs)
    _same(r, tr, atol=1e-5)
    r.sum().backward()
    tr.sum().backward()
    _same(w.grad, tw.grad, atol=1e-5)
    # grad of jvp, vmap of vjp and of jvp
    (x, tx), (v, tv) = _pair(3), _pair(3, seed=2)

    def f(a):
        return a.sin() * a.sum()

    _same(
        func.grad(lambda a: func.jvp(f, (a,), (v,))[1].sum())(x),
        tfunc.grad(lambda a: tfunc.jvp(f, (a,), (tv,))[1].sum())(tx),
        atol=1e-5,
    )
    _same(
        func.vmap(lambda a: func.vjp(f, a)[1](Tensor.ones(3))[0])(xs),
        tfunc.vmap(lambda a: tfunc.vjp(f, a)[1](torch.ones(3))[0])(txs),
        atol=1e-5,
    )
    _same(
        func.vmap(lambda a: func.jvp(f, (a,), (v,))[1])(xs),
        tfunc.vmap(lambda a: tfunc.jvp(f, (a,), (tv,))[1])(txs),
        atol=1e-5,
    )

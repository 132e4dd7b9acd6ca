"""uopkit.func.functional_call and uopkit.nn.utils.stateless.functional_call against torch's: MAML's fast weights
(losses and meta-gradients), buffers written in place, tied weights, strict keys, a tuple of dicts, parametrized
modules, the module's own tensors put back (also when the call raises), and the errors."""

import doctest
import importlib

import numpy as np
import pytest

from uopkit import Tensor, autograd, func, nn
from uopkit.nn.utils import parametrizations, stateless

torch = pytest.importorskip("torch")
tfunc = importlib.import_module("torch.func")


def _close(a, b, rtol=1e-5, atol=1e-6, msg=""):
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=rtol, atol=atol, err_msg=msg)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)).tanh())


def _nets():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential()
    theirs.fc1, theirs.bn, theirs.act, theirs.fc2 = (
        torch.nn.Linear(3, 8),
        torch.nn.BatchNorm1d(8),
        torch.nn.Tanh(),
        torch.nn.Linear(8, 2),
    )
    ours = _Net()
    ours.load_state_dict({k: Tensor(v.numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_docstring_examples():
    for module in (func, stateless):
        assert doctest.testmod(module, extraglobs={"Tensor": Tensor}).failed == 0


@pytest.mark.parametrize("inner_steps", [1, 2])
def test_maml_matches_torch(inner_steps):
    # fast weights from inner SGD steps (create_graph), a query loss through them, its gradient on the meta-parameters
    ours, theirs = _nets()
    rng = np.random.default_rng(0)
    xs, ys, xq, yq = (rng.standard_normal(s).astype(np.float32) for s in [(6, 3), (6, 2), (5, 3), (5, 2)])
    params = dict(ours.named_parameters())
    tparams = dict(theirs.named_parameters())
    own = {k: v.numpy().copy() for k, v in ours.state_dict().items()}
    meta_loss, tmeta_loss = Tensor(0.0), torch.tensor(0.0)
    for task in range(2):
        fast, tfast = dict(params), dict(tparams)
        for _ in range(inner_steps):
            loss = (func.functional_call(ours, fast, Tensor(xs + task)) - Tensor(ys)).square().mean()
            tloss = tfunc.functional_call(theirs, tfast, torch.from_numpy(xs + task)) - torch.from_numpy(ys)
            tloss = tloss.square().mean()
            np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
            grads = autograd.grad(loss, list(fast.values()), create_graph=True)
            tgrads = torch.autograd.grad(tloss, list(tfast.values()), create_graph=True)
            fast = {k: w - 0.1 * g for (k, w), g in zip(fast.items(), grads, strict=True)}
            tfast = {k: w - 0.1 * g for (k, w), g in zip(tfast.items(), tgrads, strict=True)}
        meta_loss = meta_loss + (func.functional_call(ours, fast, (Tensor(xq),)) - Tensor(yq)).square().mean()
        tq = tfunc.functional_call(theirs, tfast, (torch.from_numpy(xq),))
        tmeta_loss = tmeta_loss + (tq - torch.from_numpy(yq)).square().mean()
    np.testing.assert_allclose(meta_loss.item(), tmeta_loss.item(), rtol=1e-5)
    meta_loss.backward()
    tmeta_loss.backward()
    for k, p in params.items():
        _close(p.grad, tparams[k].grad, rtol=1e-4, atol=1e-5, msg=k)
    # the module's own tensors are back (the BatchNorm statistics moved, in place, as torch's)
    for k, p in params.items():
        assert ours.get_parameter(k) is p
        np.testing.assert_array_equal(p.numpy(), own[k])
    _close(ours.bn.running_mean, theirs.bn.running_mean, msg="running_mean")


def test_given_buffers_are_written_in_place_and_the_modules_kept():
    ours, theirs = _nets()
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    buffers = {k: Tensor(v.numpy().copy()) for k, v in ours.state_dict().items() if k.startswith("bn.running")}
    tbuffers = {k: v.clone() for k, v in theirs.state_dict().items() if k.startswith("bn.running")}
    own_mean = ours.bn.running_mean.numpy().copy()
    out = func.functional_call(ours, (dict(ours.named_parameters()), buffers), Tensor(x))
    tout = tfunc.functional_call(theirs, (dict(theirs.named_parameters()), tbuffers), torch.from_numpy(x))
    _close(out, tout)
    for k in buffers:
        _close(buffers[k], tbuffers[k], msg=k)
    assert not np.allclose(buffers["bn.running_mean"].numpy(), own_mean)
    # the module's own statistics didn't move
    np.testing.assert_array_equal(ours.bn.running_mean.numpy(), own_mean)

    # a replaced buffer (not written in place) is updated in the dict, as torch's
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", Tensor.zeros(()))

        def forward(self, x):
            self.count = self.count + 1
            return x

    counter, given = Counter(), {"count": Tensor(5.0)}
    stateless.functional_call(counter, given, Tensor(1.0))
    assert given["count"].item() == 6.0 and counter.count.item() == 0.0


def test_gradients_reach_the_given_tensors_only():
    layer = nn.Linear(3, 2)
    w = Tensor.ones(2, 3, requires_grad=True)
    func.functional_call(layer, {"weight": w}, Tensor.ones(1, 3)).sum().backward()
    assert w.grad.tolist() == [[1.0] * 3] * 2
    assert layer.weight.grad is None and layer.bias.grad.tolist() == [1.0, 1.0]


def test_own_tensors_put_back_when_the_call_raises():
    layer = nn.Linear(3, 2)
    weight, bias = layer.weight, layer.bias
    with pytest.raises(Exception, match="Linear"):
        func.functional_call(layer, {"weight": Tensor.ones(2, 3), "bias": None}, Tensor.ones(1, 4))
    assert layer.weight is weight and layer.bias is bias
    # a bad entry after good ones: the good ones are put back too
    with pytest.raises(TypeError, match="must be a Tensor or None"):
        func.functional_call(layer, {"weight": Tensor.ones(2, 3), "bias": 3.0}, Tensor.ones(1, 3))
    assert layer.weight is weight and layer.bias is bias
    # None is a value (no bias for the call), as torch's
    out = func.functional_call(layer, {"weight": Tensor.ones(2, 3), "bias": None}, Tensor.ones(1, 3))
    assert out.tolist() == [[3.0, 3.0]] and layer.bias is bias


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


class _TorchTied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_tied_weights_match_torch():
    ours, theirs = _Tied(), _TorchTied()
    ours.load_state_dict({"a.weight": Tensor(theirs.a.weight.detach().numpy().copy())}, strict=False)
    assert ours.b.weight is ours.a.weight
    assert [n for n, _ in ours.named_parameters(remove_duplicate=False)] == ["a.weight", "b.weight"]
    w = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    x = np.array([[1.0, -1.0]], np.float32)
    for kwargs in ({}, {"tie_weights": False}):
        out = func.functional_call(ours, {"a.weight": Tensor(w)}, Tensor(x), **kwargs)
        tout = tfunc.functional_call(theirs, {"a.weight": torch.from_numpy(w)}, torch.from_numpy(x), **kwargs)
        _close(out, tout, msg=str(kwargs))
    # different values for one tied tensor: an error (the same value twice is fine)
    w2 = Tensor(w * 2)
    with pytest.raises(ValueError, match=r"\['a.weight', 'b.weight'\] name one tied tensor"):
        func.functional_call(ours, {"a.weight": Tensor(w), "b.weight": w2}, Tensor(x))
    func.functional_call(ours, {"a.weight": w2, "b.weight": w2}, Tensor(x))
    _close(
        func.functional_call(ours, {"a.weight": Tensor(w), "b.weight": w2}, Tensor(x), tie_weights=False),
        torch.from_numpy(x) @ torch.from_numpy(w).T @ torch.from_numpy(w * 2).T,
    )
    # strict counts the tied names filled in
    func.functional_call(ours, {"a.weight": Tensor(w)}, Tensor(x), strict=True)


def test_a_module_held_twice_gets_its_own_weight_back():
    # one place swapped under two names: put back last first (torch leaves the given tensor there)
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 1)
            self.b = self.a

        def forward(self, x):
            return self.a(x) + self.b(x)

    net = Twice()
    weight = net.a.weight
    func.functional_call(net, {"a.weight": Tensor.ones(1, 2)}, Tensor.ones(1, 2))
    assert net.a.weight is weight


def test_strict_and_errors_match_torch():
    ours, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2)

    def both(fn, tfn, *args, **kwargs):
        with pytest.raises(Exception) as ours_error:
            fn(ours, *args[:1], Tensor.ones(1, 3), **kwargs)
        converted = args[0]
        if isinstance(converted, dict):
            converted = {k: torch.ones(v.shape) if isinstance(v, Tensor) else v for k, v in converted.items()}
        with pytest.raises(Exception) as torch_error:
            tfn(theirs, converted, torch.ones(1, 3), **kwargs)
        assert type(ours_error.value) is type(torch_error.value), (ours_error.value, torch_error.value)
        return str(ours_error.value), str(torch_error.value)

    # (same exception types as torch; the messages are ours: the module, and the names missing or extra)
    ours_msg, _ = both(func.functional_call, tfunc.functional_call, {"weight": Tensor.ones(2, 3)}, strict=True)
    assert "on Linear" in ours_msg and "names missing: ['bias']" in ours_msg
    given = {"weight": Tensor.ones(2, 3), "bias": Tensor.ones(2), "extra": Tensor.ones(1)}
    ours_msg, _ = both(func.functional_call, tfunc.functional_call, given, strict=True)
    assert "names the module doesn't have: ['extra']" in ours_msg and "missing" not in ours_msg
    repeated = ({"weight": Tensor.ones(2, 3)}, {"weight": Tensor.ones(2, 3)})
    assert "['weight'] are given by more than one" in both(func.functional_call, tfunc.functional_call, repeated)[0]
    assert "got int" in both(func.functional_call, tfunc.functional_call, 5)[0]
    mixed = [{"weight": Tensor.ones(2, 3)}, 5]
    assert "['dict', 'int']" in both(func.functional_call, tfunc.functional_call, mixed)[0]
    both(func.functional_call, tfunc.functional_call, {"x.y": Tensor.ones(1)})
    both(func.functional_call, tfunc.functional_call, {"weight.x": Tensor.ones(1)})
    both(func.functional_call, tfunc.functional_call, {"training": Tensor.ones(1)})
    both(func.functional_call, tfunc.functional_call, {"weight": 3.0})
    # a name the module doesn't have: set for the call, gone afterwards
    func.functional_call(ours, {"foo": Tensor.ones(1)}, Tensor.ones(1, 3))
    assert "foo" not in vars(ours)
    with pytest.raises(TypeError, match="tuple of dicts"):
        stateless.functional_call(ours, ({"weight": Tensor.ones(2, 3)},), Tensor.ones(1, 3))
    with pytest.raises(TypeError, match="uopkit.nn.Module"):
        func.functional_call(lambda x: x, {}, Tensor.ones(1))


def test_args_and_kwargs():
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Tensor([2.0], requires_grad=True)

        def forward(self, x, shift=0.0):
            return x * self.scale + shift

    m = Affine()
    assert func.functional_call(m, {"scale": Tensor([3.0])}, Tensor([1.0])).tolist() == [3.0]
    assert func.functional_call(m, {}, (Tensor([1.0]),), {"shift": 1.0}).tolist() == [3.0]
    out = func.functional_call(m, {"scale": Tensor([0.0])}, args=(Tensor([1.0]),), kwargs={"shift": 5.0})
    assert out.tolist() == [5.0]


def test_parametrized_module():
    layer = parametrizations.weight_norm(nn.Linear(3, 2))
    g, v = (t.numpy().copy() for t in layer.parametrizations.weight.originals())
    x = Tensor.ones(1, 3)
    # the parametrized name: the given tensor is the weight for the call, gradients reach it, originals untouched
    w = Tensor([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]], requires_grad=True)
    out = func.functional_call(layer, {"weight": w}, x)
    np.testing.assert_allclose(out.numpy(), (x @ w.T + layer.bias).numpy())
    out.sum().backward()
    assert w.grad.tolist() == [[1.0] * 3] * 2
    np.testing.assert_array_equal(layer.parametrizations.weight.original0.numpy(), g)
    np.testing.assert_array_equal(layer.parametrizations.weight.original1.numpy(), v)
    assert "weight" not in vars(layer)
    # an original: the parametrization runs on the given tensor (as torch's)
    theirs = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 2))
    theirs.load_state_dict({k: torch.from_numpy(t.numpy().copy()) for k, t in layer.state_dict().items()})
    v2 = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    out = func.functional_call(layer, {"parametrizations.weight.original1": Tensor(v2)}, x)
    tout = tfunc.functional_call(theirs, {"parametrizations.weight.original1": torch.from_numpy(v2)}, torch.ones(1, 3))
    _close(out, tout)
    np.testing.assert_array_equal(layer.parametrizations.weight.original1.numpy(), v)

"""`Tensor.X(z, ...)`, a port's `torch.X(z, ...)`, of a complex tensor z runs the complex method (tensor_type.py,
`_ComplexFirst`): S4D's `torch.exp(dtA)`, LRU's `torch.log(Lambda)`, compared with torch; real tensors and
monkeypatching the class are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
RE = RNG.standard_normal((3, 4)).astype(np.float32)
IM = RNG.standard_normal((3, 4)).astype(np.float32)


def _pair():
    return Tensor.complex(Tensor(RE), Tensor(IM)), torch.complex(torch.tensor(RE), torch.tensor(IM))


def _np(t):
    return t.detach().resolve_conj().numpy() if isinstance(t, torch.Tensor) else t.numpy()


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "abs", "angle", "sgn", "conj", "reciprocal", "square"])
def test_unary_class_call_matches_torch(name):
    z, zt = _pair()
    got, want = _np(getattr(Tensor, name)(z)), _np(getattr(torch, name)(zt))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "name,args,kwargs",
    [
        ("pow", (2.0,), {}),
        ("reshape", ((4, 3),), {}),
        ("transpose", (0, 1), {}),
        ("unsqueeze", (1,), {}),
        ("flip", ((1,),), {}),
        ("roll", (1,), {"dims": 1}),
        ("sum", (), {"dim": 1}),
        ("mean", (), {}),
    ],
)
def test_method_class_call_matches_torch(name, args, kwargs):
    z, zt = _pair()
    got, want = _np(getattr(Tensor, name)(z, *args, **kwargs)), _np(getattr(torch, name)(zt, *args, **kwargs))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_class_call_of_two_complex_and_gradient():
    # S4D's kernel: C * (exp(dtA) - 1) / A, then a real loss; gradients reach the real parameters
    re, im = Tensor(RE, requires_grad=True), Tensor(IM, requires_grad=True)
    tre, tim = torch.tensor(RE, requires_grad=True), torch.tensor(IM, requires_grad=True)
    z, zt = Tensor.complex(re, im), torch.complex(tre, tim)
    w, wt = Tensor.matmul(z, z.mT), torch.matmul(zt, zt.mT)
    Tensor.exp(w * 0.1).abs().sum().backward()
    torch.exp(wt * 0.1).abs().sum().backward()
    np.testing.assert_allclose(re.grad.numpy(), tre.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(im.grad.numpy(), tim.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_real_class_calls_and_docs_unchanged():
    x = Tensor(RE)
    np.testing.assert_allclose(Tensor.exp(x).numpy(), np.exp(RE), rtol=1e-6)
    np.testing.assert_allclose(Tensor.sum(x, 1).numpy(), RE.sum(1), rtol=1e-5)
    assert Tensor.exp.__doc__ == x.exp.__doc__ and Tensor.exp.__name__ == "exp"


def test_monkeypatching_the_class_still_replaces_the_method(monkeypatch):
    monkeypatch.setattr(Tensor, "exp", lambda self: "patched")
    assert Tensor(RE).exp() == "patched" and Tensor.exp(Tensor(RE)) == "patched"
    monkeypatch.undo()
    z, zt = _pair()
    np.testing.assert_allclose(_np(Tensor.exp(z)), _np(torch.exp(zt)), rtol=2e-5, atol=2e-5)
    assert isinstance(Tensor(RE).exp(), Tensor)

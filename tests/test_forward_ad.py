"""uopkit.autograd.forward_ad against torch.autograd.forward_ad: tangents of a network's output (a PINN's u_x),
forward-over-reverse second derivatives, gradients of a loss on tangents to the weights, and the level's rules."""

import doctest

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, nn
from uopkit.autograd import forward_ad

torch = pytest.importorskip("torch")
tfw = torch.autograd.forward_ad


def test_docstring_examples():
    assert doctest.testmod(forward_ad).failed == 0


def _nets():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ours = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _pinn_terms(fw, net, make, grad):
    # u_x by a dual input, u_xx forward-over-reverse, and a loss on both trained through the weights
    x = make(np.random.default_rng(0).uniform(-1, 1, (16, 2)).astype(np.float32))
    e0 = make(np.tile(np.array([1, 0], np.float32), (16, 1)))
    with fw.dual_level():
        u = net(fw.make_dual(x, e0))
        primal, ux = fw.unpack_dual(u)
    with fw.dual_level():
        xr = x.clone().requires_grad_(True)
        u2 = net(fw.make_dual(xr, e0))
        g = grad(u2.sum(), xr, create_graph=True)[0]
        uxx = fw.unpack_dual(g).tangent[:, 0]
    ((ux**2).mean() + (uxx**2).mean()).backward()
    return [primal.detach().numpy(), ux.detach().numpy(), uxx.detach().numpy(), net[0].weight.grad.numpy()]


def test_tangents_and_their_gradients_match_torch():
    theirs, ours = _nets()
    expected = _pinn_terms(tfw, theirs, torch.tensor, torch.autograd.grad)
    got = _pinn_terms(forward_ad, ours, Tensor, uopkit.autograd.grad)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_tangent_of_a_dual_and_of_what_does_not_depend_on_it():
    for fw, make in ((tfw, torch.tensor), (forward_ad, Tensor)):
        x, t = make([1.0, 2.0]), make([0.5, -1.0])
        with fw.dual_level():
            d = fw.make_dual(x, t)
            assert fw.unpack_dual(d).tangent.tolist() == [0.5, -1.0]
            assert fw.unpack_dual(make([3.0])).tangent is None
            tangent = fw.unpack_dual((d * d).sum() + d[0].exp()).tangent
            assert abs(tangent.item() - (2 * 0.5 - 2 * 2 * 1.0 + 0.5 * np.exp(1.0))) < 1e-5
        # the level closed: no tangents, and unpack_dual returns the namedtuple
        unpacked = fw.unpack_dual(d)
        assert unpacked.tangent is None and type(unpacked).__name__ == "UnpackedDualTensor"


def test_errors_as_torch():
    for fw, make in ((tfw, torch.tensor), (forward_ad, Tensor)):
        with pytest.raises(RuntimeError):
            fw.make_dual(make([1.0]), make([1.0]))  # no level open
        with fw.dual_level():
            with pytest.raises(RuntimeError):
                fw.make_dual(make([1.0, 2.0]), make([1.0]))  # tangent of another shape
            with pytest.raises(RuntimeError):
                fw.enter_dual_level()  # one level at a time

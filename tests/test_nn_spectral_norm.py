"""Spectral normalization against torch: nn.utils.spectral_norm (the hook-based form: weight_orig, weight_u, weight_v)
and nn.utils.parametrizations.spectral_norm, with torch's power-iteration vectors copied into ours so that values
match: forward in training and eval mode, the buffers' updates, gradients, SN-GAN critic steps, state dicts both ways,
removal."""

import importlib

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import utils
from uopkit.nn.utils import parametrize

torch = pytest.importorskip("torch")
P, TP = utils.parametrizations, torch.nn.utils.parametrizations


def _to_ours(sd):
    return {k: Tensor(v.detach().numpy().copy()) for k, v in sd.items()}


def _to_torch(sd):
    return {k: torch.from_numpy(v.numpy().copy()) for k, v in sd.items()}


def _close(a, b, rtol=1e-5, atol=1e-6, msg=""):
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=rtol, atol=atol, err_msg=msg)


LAYERS = [
    ("Linear", (5, 4), (3, 5)),
    ("Conv2d", (2, 3, 3), (2, 2, 6, 6)),
    ("Conv1d", (2, 4, 3), (2, 2, 7)),
    ("ConvTranspose2d", (3, 2, 3), (2, 3, 4, 4)),
]


def _pair(kind, args, seed=0):
    # the same layer in both libraries, torch's weights loaded into ours
    torch.manual_seed(seed)
    theirs = getattr(torch.nn, kind)(*args)
    ours = getattr(nn, kind)(*args)
    ours.load_state_dict(_to_ours(theirs.state_dict()))
    return ours.train(), theirs.train()


def _match_forward_and_grads(ours, theirs, x, names):
    out, tout = ours(Tensor(x)), theirs(torch.from_numpy(x))
    _close(out, tout, msg="output")
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    for n in names:
        _close(ours.get_parameter(n).grad, theirs.get_parameter(n).grad, rtol=1e-4, atol=1e-5, msg=n)


def _state_matches(ours, theirs):
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(tsd)
    for k in sd:
        _close(sd[k], tsd[k], msg=k)


def test_docstring_examples():
    import doctest

    for name in ("uopkit.nn.utils.spectral_norm", "uopkit.nn.utils.parametrizations"):
        assert doctest.testmod(importlib.import_module(name), extraglobs={"Tensor": Tensor}).failed == 0


@pytest.mark.parametrize("kind, args, xshape", LAYERS, ids=[k for k, _, _ in LAYERS])
@pytest.mark.parametrize("n_power_iterations", [1, 3])
def test_hook_spectral_norm_matches_torch(kind, args, xshape, n_power_iterations):
    ours, theirs = _pair(kind, args)
    weight = ours.weight
    utils.spectral_norm(ours, n_power_iterations=n_power_iterations)
    assert ours.weight_orig is weight
    torch.nn.utils.spectral_norm(theirs, n_power_iterations=n_power_iterations)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert ours.weight_orig.shape == tuple(theirs.weight_orig.shape)
    assert ours.weight_u.shape == tuple(theirs.weight_u.shape) and ours.weight_v.shape == tuple(theirs.weight_v.shape)
    # torch's random u and v, loaded with its state dict
    ours.load_state_dict(_to_ours(theirs.state_dict()))
    x = np.random.default_rng(1).standard_normal(xshape).astype(np.float32)
    # training mode: each forward iterates and updates u and v in place; the gradient treats them as constants
    for _ in range(2):
        ours.zero_grad()
        theirs.zero_grad()
        _match_forward_and_grads(ours, theirs, x, ["weight_orig", "bias"])
        _state_matches(ours, theirs)
    _close(ours.weight, theirs.weight, msg="weight")
    # eval mode: u and v as they are
    ours.eval(), theirs.eval()
    u = ours.weight_u.numpy().copy()
    _close(ours(Tensor(x)), theirs(torch.from_numpy(x)), msg="eval output")
    np.testing.assert_array_equal(ours.weight_u.numpy(), u)
    _state_matches(ours, theirs)
    # removed: a plain weight holding weight_orig / sigma
    utils.remove_spectral_norm(ours)
    torch.nn.utils.remove_spectral_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _state_matches(ours, theirs)
    _close(ours(Tensor(x)), theirs(torch.from_numpy(x)), msg="after removal")


@pytest.mark.parametrize("kind, args, xshape", LAYERS, ids=[k for k, _, _ in LAYERS])
def test_parametrized_spectral_norm_matches_torch(kind, args, xshape):
    ours, theirs = _pair(kind, args)
    P.spectral_norm(ours)
    TP.spectral_norm(theirs)
    assert type(ours).__name__ == type(theirs).__name__ == f"Parametrized{kind}"
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(_to_ours(theirs.state_dict()))
    x = np.random.default_rng(1).standard_normal(xshape).astype(np.float32)
    for _ in range(2):
        ours.zero_grad()
        theirs.zero_grad()
        _match_forward_and_grads(ours, theirs, x, ["parametrizations.weight.original", "bias"])
        _state_matches(ours, theirs)
    ours.eval(), theirs.eval()
    u = ours.parametrizations.weight[0]._u.numpy().copy()
    _close(ours.weight, theirs.weight, msg="eval weight")
    _close(ours(Tensor(x)), theirs(torch.from_numpy(x)), msg="eval output")
    np.testing.assert_array_equal(ours.parametrizations.weight[0]._u.numpy(), u)
    # our state dict into a fresh torch layer, and back
    _, fresh = _pair(kind, args, seed=3)
    TP.spectral_norm(fresh).eval()
    fresh.load_state_dict(_to_torch(ours.state_dict()))
    _close(ours.weight, fresh.weight, msg="loaded into torch")
    parametrize.remove_parametrizations(ours, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(theirs, "weight")
    assert type(ours) is getattr(nn, kind) and list(ours.state_dict()) == list(theirs.state_dict())
    _state_matches(ours, theirs)


def test_parametrized_spectral_norm_of_a_vector_normalizes_it():
    ours, theirs = _pair("Linear", (3, 4))
    P.spectral_norm(ours, "bias")
    TP.spectral_norm(theirs, "bias")
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "parametrizations.bias.original"]
    _close(ours.bias, theirs.bias)


def test_sigma_is_the_largest_singular_value_once_converged():
    # (seeded: how fast the power iteration converges depends on the drawn weights' two largest singular values, and
    # the global stream's state on the tests run before this one)
    Tensor.manual_seed(0)
    layer = P.spectral_norm(nn.Linear(6, 5), n_power_iterations=20).train()
    # (a layer reads its parametrized weight once per access: each access iterates in training mode)
    np.testing.assert_allclose(np.linalg.svd(layer.weight.numpy(), compute_uv=False)[0], 1.0, rtol=1e-4)
    old = utils.spectral_norm(nn.Conv2d(3, 4, 3), n_power_iterations=30).train()
    old(Tensor.ones(1, 3, 5, 5))
    w = old.weight.numpy().reshape(4, -1)
    np.testing.assert_allclose(np.linalg.svd(w, compute_uv=False)[0], 1.0, rtol=1e-4)


class _Critic(nn.Module):
    def __init__(self, sn):
        super().__init__()
        self.conv1 = sn(nn.Conv2d(1, 4, 3, padding=1))
        self.conv2 = sn(nn.Conv2d(4, 4, 3, stride=2, padding=1))
        self.fc = sn(nn.Linear(4 * 4 * 4, 1))

    def forward(self, x):
        h = self.conv1(x).leaky_relu(0.1)
        h = self.conv2(h).leaky_relu(0.1)
        return self.fc(h.reshape(h.shape[0], -1))


class _TorchCritic(torch.nn.Module):
    def __init__(self, sn):
        super().__init__()
        self.conv1 = sn(torch.nn.Conv2d(1, 4, 3, padding=1))
        self.conv2 = sn(torch.nn.Conv2d(4, 4, 3, stride=2, padding=1))
        self.fc = sn(torch.nn.Linear(4 * 4 * 4, 1))

    def forward(self, x):
        h = torch.nn.functional.leaky_relu(self.conv1(x), 0.1)
        h = torch.nn.functional.leaky_relu(self.conv2(h), 0.1)
        return self.fc(h.reshape(h.shape[0], -1))


@pytest.mark.parametrize("form", ["hook", "parametrization"])
def test_sn_gan_critic_steps_match_torch(form):
    sn, tsn = (P.spectral_norm, TP.spectral_norm)
    if form == "hook":
        sn, tsn = utils.spectral_norm, torch.nn.utils.spectral_norm
    torch.manual_seed(0)
    theirs = _TorchCritic(tsn)
    ours = _Critic(sn)
    ours.load_state_dict(_to_ours(theirs.state_dict()))
    opt = nn.optim.Adam(ours.parameters(), lr=1e-2, betas=(0.0, 0.9))
    topt = torch.optim.Adam(theirs.parameters(), lr=1e-2, betas=(0.0, 0.9))
    rng = np.random.default_rng(0)
    for step in range(3):
        real = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
        fake = rng.standard_normal((4, 1, 8, 8)).astype(np.float32) * 0.5
        # the hinge loss, real and fake batches through the critic in one step (two power iterations per step)
        loss = (1 - ours(Tensor(real))).relu().mean() + (1 + ours(Tensor(fake))).relu().mean()
        tloss = (1 - theirs(torch.from_numpy(real))).relu().mean() + (1 + theirs(torch.from_numpy(fake))).relu().mean()
        opt.zero_grad()
        topt.zero_grad()
        loss.backward()
        tloss.backward()
        opt.step()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5, err_msg=f"step {step}")
        _state_matches(ours, theirs)
    ours.eval(), theirs.eval()
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    _close(ours(Tensor(x)), theirs(torch.from_numpy(x)), msg="eval critic")


def test_mode_follows_the_layer():
    # a new built-in layer trains, as torch's, its spectral norm too (both forms); eval() stops the power iteration
    # whatever the global Tensor.training says
    forms = [(utils.spectral_norm, lambda m: m.weight_u), (P.spectral_norm, lambda m: m.parametrizations.weight[0]._u)]
    for sn, u_of in forms:
        layer = sn(nn.Linear(4, 3))
        # (u set away from the converged vector, 15 power iterations at registration may have reached it exactly:
        # then a step in training mode would leave it unchanged too)
        u_of(layer).assign(Tensor([1.0, 0.0, 0.0])).realize()
        u = u_of(layer).numpy().copy()
        layer.eval()
        with Tensor.train():
            layer(Tensor.ones(1, 4)).realize()
        np.testing.assert_array_equal(u_of(layer).numpy(), u)
        layer.train()
        layer(Tensor.ones(1, 4)).realize()
        assert not np.array_equal(u_of(layer).numpy(), u)
    # the layer's mode at registration is the parametrization's, and a Module's eval() reaches it, as torch's
    for lib in (nn, torch.nn):
        layer = (P if lib is nn else torch.nn.utils.parametrizations).spectral_norm(lib.Linear(4, 3))
        assert layer.training is True and layer.parametrizations.weight[0].training is True
        net = lib.Sequential(layer)
        net.eval()
        assert layer.parametrizations.weight[0].training is False


def test_errors():
    layer = utils.spectral_norm(nn.Linear(3, 2))
    with pytest.raises(RuntimeError, match="'weight' of Linear already has a spectral_norm hook"):
        utils.spectral_norm(layer)
    with pytest.raises(ValueError, match="n_power_iterations"):
        utils.spectral_norm(nn.Linear(3, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="n_power_iterations"):
        P.spectral_norm(nn.Linear(3, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="no parameter"):
        utils.spectral_norm(nn.Linear(3, 2), name="nothing")
    with pytest.raises(ValueError, match="no parameter or buffer"):
        P.spectral_norm(nn.Linear(3, 2), name="nothing")
    with pytest.raises(IndexError, match="spectral_norm: dim=2 is not a dim of the 2-D weight"):
        utils.spectral_norm(nn.Linear(3, 2), dim=2)
    with pytest.raises(IndexError, match="spectral_norm: dim=-3 is not a dim of the 2-D weight"):
        P.spectral_norm(nn.Linear(3, 2), dim=-3)
    with pytest.raises(ValueError, match="not found"):
        utils.remove_spectral_norm(nn.Linear(3, 2))
    # removal leaves no trace of the buffers
    utils.remove_spectral_norm(layer)
    assert list(layer.state_dict()) == ["bias", "weight"] and not layer._state().pre_hooks

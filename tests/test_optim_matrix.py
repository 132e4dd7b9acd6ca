"""Muon against torch.optim.Muon (an MLP with Muon on its weights and AdamW on its biases, float32; bfloat16 matrices
with given gradients), LARS against a numpy transcription of tinygrad's rule, and OptimizerGroup; each with state
dicts, copies and TinyJit replays."""

from __future__ import annotations

import copy
import doctest
import pickle

import numpy as np
import pytest

from uopkit import GlobalCounters, Tensor, TinyJit
from uopkit.nn import Linear, Module, optim, optim_matrix
from uopkit.nn.lr_scheduler import StepLR

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((16, 5)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)


class Net(Module):
    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.l1, self.l2 = Linear(5, 8), Linear(8, 3)
        if device is not None:
            self.l2.to(device)

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu().to(self.l2.weight.device))


def _nets(device: str | None = None) -> tuple[Net, torch.nn.Sequential]:
    Tensor.manual_seed(5)
    net = Net(device)
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for t, o in ((theirs[0], net.l1), (theirs[2], net.l2)):
            t.weight.copy_(torch.tensor(o.weight.numpy()))
            t.bias.copy_(torch.tensor(o.bias.numpy()))
    return net, theirs


def _ours(net: Net, **kwargs) -> optim.OptimizerGroup:
    # the usual split: Muon for the 2-D weights, AdamW for the rest
    muon = optim.Muon([net.l1.weight, net.l2.weight], **kwargs)
    return optim.OptimizerGroup(muon, optim.AdamW([net.l1.bias, net.l2.bias], lr=0.01))


def _theirs(model: torch.nn.Sequential, **kwargs) -> list:
    return [
        torch.optim.Muon([model[0].weight, model[2].weight], **kwargs),
        torch.optim.AdamW([model[0].bias, model[2].bias], lr=0.01),
    ]


def _step(net: Net, opt: optim.Optimizer) -> float:
    opt.zero_grad()
    loss = ((net(Tensor(X)) - Tensor(Y).to(net.l2.weight.device)) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def _torch_step(model: torch.nn.Sequential, opts: list) -> float:
    for o in opts:
        o.zero_grad()
    loss = ((model(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean()
    loss.backward()
    for o in opts:
        o.step()
    return loss.item()


def _assert_same_weights(net: Net, model: torch.nn.Sequential, atol: float = 1e-5) -> None:
    pairs = ((net.l1.weight, model[0].weight), (net.l2.weight, model[2].weight), (net.l2.bias, model[2].bias))
    for o, t in pairs:
        # (a float32 ulp in a gradient can flip a bfloat16 rounding inside the Newton-Schulz iteration: lr * 2^-8)
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=atol, rtol=1e-4)


# ---- Muon against torch.optim.Muon


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 0.02},
        {"lr": 0.02, "nesterov": False},
        {"lr": 0.02, "adjust_lr_fn": "original", "weight_decay": 0.0},
        {"lr": 0.02, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.05},
        {"lr": 0.05, "momentum": 0.8, "nesterov": False, "adjust_lr_fn": "match_rms_adamw"},
        {"lr": 0.02, "momentum": 0.0, "ns_steps": 3, "ns_coefficients": (2.0, -1.5, 0.5), "eps": 1e-5},
    ],
)
def test_muon_with_adamw_trains_an_mlp_as_torchs(kwargs: dict) -> None:
    net, model = _nets()
    opt, topts = _ours(net, **kwargs), _theirs(model, **kwargs)
    for _ in range(5):
        np.testing.assert_allclose(_step(net, opt), _torch_step(model, topts), rtol=1e-5)
    _assert_same_weights(net, model)


@pytest.fixture
def torch_muon_without_aliasing(monkeypatch):
    # torch 2.13's Newton-Schulz divides its input in place when it already is bfloat16 (`grad.bfloat16()` is the
    # tensor itself): with nesterov=False that input is the momentum buffer, which each step then normalizes. Fixed
    # upstream (pytorch#194664, a copy first); the reference here is the fixed step, which is ours
    from torch.optim import _muon

    original = _muon._zeropower_via_newtonschulz
    monkeypatch.setattr(_muon, "_zeropower_via_newtonschulz", lambda g, *args: original(g.clone(), *args))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(8, 16), (16, 8), (24, 24)])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 0.02},
        {"lr": 0.02, "nesterov": False, "weight_decay": 0.0},
        {"lr": 0.03, "nesterov": False, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.2},
    ],
)
def test_muon_steps_a_matrix_as_torchs(torch_muon_without_aliasing, dtype: str, shape: tuple, kwargs: dict) -> None:
    rng = np.random.default_rng([*shape, len(dtype)])
    w0 = rng.standard_normal(shape).astype(np.float32)
    tw = torch.tensor(w0).to(getattr(torch, dtype)).requires_grad_()
    w = Tensor(w0).cast(dtype).contiguous().realize().requires_grad_()
    opt, topt = optim.Muon([w], **kwargs), torch.optim.Muon([tw], **kwargs)
    for _ in range(4):
        g = rng.standard_normal(shape).astype(np.float32)
        tw.grad = torch.tensor(g).to(tw.dtype)
        w.grad = Tensor(g).cast(dtype).contiguous()
        topt.step()
        opt.step()
    ours, theirs = w.float().numpy(), tw.detach().float().numpy()
    buf, tbuf = opt.state[w]["momentum_buffer"].float().numpy(), topt.state[tw]["momentum_buffer"].float().numpy()
    if dtype == "float32":
        # (the iteration is in bfloat16 for float32 weights too: a rounding flipped by the summation order of a matrix
        # product moves the update by lr * 2^-8 relative)
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(buf, tbuf, atol=1e-6, rtol=1e-6)
    else:
        # bfloat16 throughout, torch's roundings op by op: bit for bit but where the summation order of a matrix
        # product flips a rounding (an element or two, one ulp)
        assert (ours != theirs).mean() < 0.05
        np.testing.assert_allclose(ours, theirs, atol=2**-6, rtol=2**-7)
        np.testing.assert_array_equal(buf, tbuf)


def test_muon_keeps_the_momentum_buffer_of_a_bfloat16_matrix() -> None:
    # nesterov=False orthogonalizes the buffer itself: it stays the running average of the gradients (torch 2.13's
    # normalizes it in place, see torch_muon_without_aliasing)
    w = Tensor.zeros(4, 6, dtype="bfloat16").contiguous().realize().requires_grad_()
    opt = optim.Muon([w], lr=0.0, weight_decay=0.0, momentum=0.5, nesterov=False)
    w.grad = Tensor.ones(4, 6, dtype="bfloat16").contiguous()
    opt.step()
    np.testing.assert_array_equal(opt.state[w]["momentum_buffer"].float().numpy(), np.full((4, 6), 0.5, np.float32))


def test_muon_only_takes_matrices() -> None:
    bias = Tensor.zeros(3).requires_grad_()
    message = r"Muon: works on 2-D \(matrix\) parameters only, got one of shape"
    with pytest.raises(ValueError):
        torch.optim.Muon([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match=message):
        optim.Muon([Tensor.zeros(2, 3).requires_grad_(), bias])
    with pytest.raises(ValueError, match=message):
        optim.Muon([Tensor.zeros(2, 3, 4).requires_grad_()])
    opt = optim.Muon([Tensor.zeros(2, 3).requires_grad_()])
    # (a group added later too; torch's checks only the constructor's and fails at the step)
    with pytest.raises(ValueError, match=message):
        opt.add_param_group({"params": [bias]})
    assert len(opt.param_groups) == 1


def test_muon_checks_its_hyperparameters() -> None:
    w = Tensor.zeros(2, 3).requires_grad_()
    for kwargs, match in (
        ({"lr": -1.0}, "learning rate"),
        ({"momentum": -0.1}, "momentum should be >= 0"),
        ({"weight_decay": -0.1}, "weight_decay should be >= 0"),
        ({"adjust_lr_fn": "other"}, "Adjust learning rate function other is not supported"),
        ({"ns_coefficients": (1.0, 2.0)}, "ns_coefficients takes 3 numbers"),
        ({"ns_steps": 100}, "ns_steps must be below 100, got 100"),
        ({"ns_steps": 2.5}, "ns_steps must be an int"),
    ):
        with pytest.raises(ValueError, match=match):
            optim.Muon([w], **kwargs)
    assert optim.Muon([w]).defaults == torch.optim.Muon([torch.nn.Parameter(torch.zeros(2, 3))]).defaults


def test_muon_state_dict_loads_torchs_and_resumes_as_torch() -> None:
    net, model = _nets()
    kwargs = {"lr": 0.02, "weight_decay": 0.05}
    topts = _theirs(model, **kwargs)
    for _ in range(2):
        _torch_step(model, topts)
    with torch.no_grad():
        for t, o in ((model[0], net.l1), (model[2], net.l2)):
            o.weight.assign(Tensor(t.weight.numpy())).realize()
            o.bias.assign(Tensor(t.bias.numpy())).realize()
    opt = _ours(net, **kwargs)
    opt[0].load_state_dict(topts[0].state_dict())
    opt[1].load_state_dict(topts[1].state_dict())
    saved = opt.state_dict()
    assert set(saved["optimizers"][0]["state"][0]) == {"momentum_buffer"}
    assert saved["optimizers"][0]["param_groups"][0].keys() == topts[0].state_dict()["param_groups"][0].keys()
    for _ in range(2):
        _step(net, opt)
        _torch_step(model, topts)
    _assert_same_weights(net, model)


def test_muon_momentum_changed_between_steps_as_torchs() -> None:
    # "momentum" is dynamic: a 0-d tensor once changed, the step recompiles nothing
    net, model = _nets()
    opt, topts = _ours(net, lr=0.02), _theirs(model, lr=0.02)
    for momentum in (0.95, 0.7, 0.9):
        opt[0].param_groups[0]["momentum"] = momentum
        topts[0].param_groups[0]["momentum"] = momentum
        _step(net, opt)
        _torch_step(model, topts)
    _assert_same_weights(net, model)


def test_muon_over_two_devices_steps_as_on_one() -> None:
    one, _ = _nets()
    two, _ = _nets("CPU:1")
    assert two.l2.weight.device == "CPU:1"
    opts = [optim.Muon([n.l1.weight, n.l2.weight], lr=0.02, weight_decay=0.1) for n in (one, two)]
    for _ in range(3):
        for n, o in zip((one, two), opts, strict=True):
            _step(n, o)
    for a, b in ((one.l1.weight, two.l1.weight), (one.l2.weight, two.l2.weight)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_muon_copies_and_pickles_train_on_as_the_original() -> None:
    net, _ = _nets()
    opt = _ours(net, lr=0.02)
    _step(net, opt)
    copied_net, copied_opt = copy.deepcopy((net, opt))
    pickled_net, pickled_opt = pickle.loads(pickle.dumps((net, opt)))
    # (interleaved: on main, a deep copy whose original has stepped twice since fails its first backward with an
    # "overwritten in place" error, whatever the optimizer; SGD's too)
    for _ in range(2):
        for n, o in ((copied_net, copied_opt), (pickled_net, pickled_opt), (net, opt)):
            _step(n, o)
    for other in (copied_net, pickled_net):
        for a, b in zip(net.parameters(), other.parameters(), strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_jitted_muon_step_gives_the_weights_of_the_plain_step() -> None:
    def run(jit: bool) -> list[np.ndarray]:
        net, _ = _nets()
        opt = _ours(net, lr=0.02, weight_decay=0.05)

        def train(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = TinyJit(train) if jit else train
        for i in range(5):
            if i == 3:
                # (a learning rate set after the capture reaches the replays)
                opt[0].param_groups[0]["lr"] = 0.01
            f(Tensor(X * (1 + i / 10)), Tensor(Y))
        return [p.numpy() for p in net.parameters()]

    for got, want in zip(run(jit=True), run(jit=False), strict=True):
        np.testing.assert_array_equal(got, want)


def test_muon_step_is_a_few_kernels_per_newton_schulz_iteration() -> None:
    # the momentum, the norm, then three matrix products per iteration; the weight's update fused into the last
    w = Tensor(RNG.standard_normal((16, 8)).astype(np.float32)).realize().requires_grad_()
    g = Tensor(RNG.standard_normal((16, 8)).astype(np.float32)).realize()
    for steps in (5, 2):
        opt = optim.Muon([w], lr=0.01, ns_steps=steps)
        for _ in range(2):
            w.grad = g
            GlobalCounters.reset()
            opt.step()
        assert GlobalCounters.kernel_count <= 2 + 3 * steps


# ---- LARS against tinygrad's rule, in float64


def _tinygrad_ns(x: np.ndarray, steps: int, coefficients: tuple, eps: float = 1e-7) -> np.ndarray:
    if x.shape[0] > x.shape[1]:
        return _tinygrad_ns(x.T, steps, coefficients, eps).T
    x = x / (np.sqrt((x * x).sum()) + eps)
    for _ in range(steps):
        terms, power = [], x
        for i, c in enumerate(coefficients):
            if i:
                power = (x @ x.T) @ power
            terms.append(c * power)
        x = sum(terms)
    return x


def _lars_reference(w, grads, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic, pre_wd, tcoef):
    # tinygrad's LARS._step, line by line
    w, b = w.astype(np.float64), np.zeros(w.shape)
    for g in grads:
        g = g.astype(np.float64)
        r = 1.0
        if tcoef:
            r1, r2 = np.sqrt((w * w).sum()), np.sqrt((g * g).sum())
            r = tcoef * r1 / (r2 + weight_decay * r1) if r1 > 0 and r2 > 0 else 1.0
        if pre_wd and weight_decay > 0:
            g = g + weight_decay * w
        if classic:
            g = g * r * lr
        if momentum:
            b = momentum * b + g
            g = g + momentum * b if nesterov else b
        if ns_coefficients:
            g = _tinygrad_ns(g.reshape(g.shape[0], -1), ns_steps, ns_coefficients).reshape(g.shape)
        if not classic:
            g = g * r * lr
        if not pre_wd and weight_decay > 0:
            g = g + weight_decay * lr * w
        w = w - g
    return w


LARS_DEFAULTS = dict(
    lr=0.001, momentum=0.9, weight_decay=1e-4, ns_steps=0, ns_coefficients=None, nesterov=False, classic=True,
    pre_wd=True, tcoef=0.001,
)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 0.5},
        {"lr": 0.5, "nesterov": True, "weight_decay": 0.01},
        {"lr": 0.1, "classic": False, "tcoef": 0.02, "momentum": 0.5},
        {"lr": 0.1, "pre_wd": False, "weight_decay": 0.1, "tcoef": 0.0},
        {"lr": 0.1, "momentum": 0.0, "tcoef": 0.01},
        # tinygrad's Muon: LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False,
        # pre_wd=False, tcoef=0.0)
        {
            "lr": 0.02,
            "momentum": 0.95,
            "weight_decay": 0.1,
            "ns_steps": 5,
            "ns_coefficients": (3.4445, -4.775, 2.0315),
            "nesterov": True,
            "classic": False,
            "pre_wd": False,
            "tcoef": 0.0,
        },  # fmt: skip
        {"lr": 0.05, "ns_steps": 3, "ns_coefficients": (1.5, -0.5), "classic": False},
    ],
)
@pytest.mark.parametrize("shape", [(6, 4), (3, 2, 2, 2), (5,)])
def test_lars_follows_tinygrads_rule(kwargs: dict, shape: tuple) -> None:
    rng = np.random.default_rng(len(shape))
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    w = Tensor(w0).requires_grad_()
    opt = optim.LARS([w], **kwargs)
    for g in grads:
        w.grad = Tensor(g)
        opt.step()
    want = _lars_reference(w0, grads, **(LARS_DEFAULTS | kwargs))
    np.testing.assert_allclose(w.numpy(), want, rtol=2e-5, atol=1e-6)


def test_lars_takes_tinygrads_positional_arguments_and_checks_them() -> None:
    w = Tensor.ones(2, 2).requires_grad_()
    group = optim.LARS([w], 0.1, 0.8, 0.01, 2, (1.5, -0.5), True, False, False, 0.0).param_groups[0]
    assert (group["momentum"], group["weight_decay"], group["ns_steps"], group["ns_coefficients"]) == (
        0.8, 0.01, 2, (1.5, -0.5),
    )  # fmt: skip
    assert (group["nesterov"], group["classic"], group["pre_wd"], group["tcoef"]) == (True, False, False, 0.0)
    for kwargs, match in (({"momentum": -1.0}, "momentum"), ({"tcoef": -1.0}, "tcoef"), ({"ns_steps": -1}, "ns_steps")):
        with pytest.raises(ValueError, match=match):
            optim.LARS([w], **kwargs)
    with pytest.raises(ValueError, match=r"1\+ dims"):
        optim.LARS([Tensor(1.0).requires_grad_()], ns_steps=1, ns_coefficients=(1.0,))


def test_lars_state_dict_and_jit() -> None:
    def run(jit: bool, resume: bool) -> np.ndarray:
        Tensor.manual_seed(2)
        net = Net()
        opt = optim.LARS(net.parameters(), lr=0.5, momentum=0.9, nesterov=True)

        def train(x: Tensor, y: Tensor) -> None:
            opt.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            opt.step()

        f = TinyJit(train) if jit else train
        for i in range(4):
            if resume and i == 2:
                saved = copy.deepcopy(opt.state_dict())
                opt = optim.LARS(net.parameters(), lr=0.5, momentum=0.9, nesterov=True)
                opt.load_state_dict(saved)
                f = train
            f(Tensor(X * (1 + i / 10)), Tensor(Y))
        return np.concatenate([p.numpy().ravel() for p in net.parameters()])

    want = run(jit=False, resume=False)
    np.testing.assert_array_equal(run(jit=True, resume=False), want)
    np.testing.assert_array_equal(run(jit=False, resume=True), want)


# ---- OptimizerGroup


def test_optimizer_group_steps_and_clears_each() -> None:
    net, _ = _nets()
    group = _ours(net, lr=0.02)
    assert isinstance(group, optim.Optimizer) and len(group) == 2 and isinstance(group[0], optim.Muon)
    assert [id(p) for p in group.params] == [id(p) for p in (net.l1.weight, net.l2.weight, net.l1.bias, net.l2.bias)]
    before = [p.numpy() for p in group.params]
    _step(net, group)
    assert all((p.numpy() != b).any() for p, b in zip(group.params, before, strict=True))
    assert len(group.state) == 4
    group.zero_grad()
    assert all(p.grad is None for p in group.params)


def test_optimizer_group_lr_scheduler_and_state_dict() -> None:
    net, _ = _nets()
    group = _ours(net, lr=0.02)
    scheduler = StepLR(group, step_size=1, gamma=0.5)
    _step(net, group)
    scheduler.step()
    assert [g["lr"] for g in group.param_groups] == [0.01, 0.005]
    saved = copy.deepcopy(group.state_dict())
    _step(net, group)
    after = [p.numpy() for p in net.parameters()]
    group.load_state_dict(saved)
    with pytest.raises(ValueError, match="2 state dicts"):
        group.load_state_dict({"optimizers": saved["optimizers"][:1]})
    copied = pickle.loads(pickle.dumps(group))
    assert isinstance(copied, optim.OptimizerGroup) and len(copied.state_dict()["optimizers"]) == 2
    assert after


def test_optimizer_group_refuses_what_it_cannot_step() -> None:
    w = Tensor.zeros(2, 2).requires_grad_()
    with pytest.raises(ValueError, match="two of the optimizers"):
        optim.OptimizerGroup(optim.SGD([w]), optim.Muon([w]))
    with pytest.raises(TypeError, match="takes optimizers"):
        optim.OptimizerGroup(optim.SGD([w]), [w])
    with pytest.raises(ValueError, match="at least one"):
        optim.OptimizerGroup()
    with pytest.raises(TypeError, match="add the group to one of its optimizers"):
        optim.OptimizerGroup(optim.SGD([w])).add_param_group({"params": [Tensor.zeros(2).requires_grad_()]})


def test_a_failed_group_step_changes_no_optimizers_bookkeeping(monkeypatch) -> None:
    net, _ = _nets()
    group = _ours(net, lr=0.02)
    loss = ((net(Tensor(X)) - Tensor(Y)) ** 2).mean()
    loss.backward()

    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(Tensor, "realize", fail)
    with pytest.raises(RuntimeError, match="boom"):
        group.step()
    assert not group[0]._started and not group[1]._started


def test_docstring_examples() -> None:
    assert doctest.testmod(optim_matrix).failed == 0

"""An optimizer's state through `copy.deepcopy`, `copy.copy` and pickle, a model converted in place (`model.to(...)`,
`.double()`) after its optimizer was built, and one optimizer over parameters on two devices: each run beside
torch's, from the same weights."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.nn import Linear, Module, optim

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
X = RNG.standard_normal((16, 5)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)
# a second device: another CPU (its own buffers; ops between the two raise, as between CPU and a GPU)
OTHER = "CPU:1"


class Net(Module):
    """Two layers, the second one optionally on another device (a model split over two devices)."""

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.l1, self.l2 = Linear(5, 8), Linear(8, 3)
        if device is not None:
            self.l2.to(device)

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu().to(self.l2.weight.device))


class Pair:
    """A `Net` and the same network in torch, with the same weights."""

    def __init__(self, device: str | None = None) -> None:
        Tensor.manual_seed(3)
        self.net = Net(device)
        self.t = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        with torch.no_grad():
            for t, o in ((self.t[0], self.net.l1), (self.t[2], self.net.l2)):
                t.weight.copy_(torch.tensor(o.weight.numpy()))
                t.bias.copy_(torch.tensor(o.bias.numpy()))


def step(net: Module, opt: optim.Optimizer, dtype: str = "float32") -> float:
    opt.zero_grad()
    x, y = Tensor(X, dtype=dtype), Tensor(Y, dtype=dtype)
    out = net(x.to(net.l1.weight.device))
    loss = ((out - y.to(out.device)) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def torch_step(net: torch.nn.Module, opt: torch.optim.Optimizer, dtype: torch.dtype = torch.float32) -> float:
    opt.zero_grad()
    loss = ((net(torch.tensor(X, dtype=dtype)) - torch.tensor(Y, dtype=dtype)) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def check(net: Module, tnet: torch.nn.Module, rtol: float = 1e-5, atol: float = 2e-6) -> None:
    ours = [net.l1.weight, net.l1.bias, net.l2.weight, net.l2.bias]
    for o, t in zip(ours, tnet.parameters(), strict=True):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol)


# (name, arguments): every optimizer of nn/optim.py and nn/optim_more.py that torch has
OPTIMIZERS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.1}),
    ("Adadelta", {"lr": 0.5}),
    ("Adamax", {"lr": 0.01}),
    ("NAdam", {"lr": 0.01}),
    ("RAdam", {"lr": 0.01, "betas": (0.5, 0.6)}),
    ("Rprop", {"lr": 0.01}),
    ("ASGD", {"lr": 0.05, "t0": 1}),
    ("Adafactor", {"lr": 0.05, "weight_decay": 0.1}),
]
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(OPTIMIZERS)]


def make(name: str, kwargs: dict, params: list, tparams: list) -> tuple[optim.Optimizer, torch.optim.Optimizer]:
    return getattr(optim, name)(params, **kwargs), getattr(torch.optim, name)(tparams, **kwargs)


def change_hyperparameters(groups: list[dict], i: int) -> None:
    # what schedulers do between steps: the lr, and the momentum or betas that OneCycleLR and CyclicLR cycle
    for g in groups:
        g["lr"] = g["lr"] * 0.7
        if i == 1 and "betas" in g:
            g["betas"] = (0.8, 0.95)
        if i == 1 and g.get("momentum"):
            g["momentum"] = 0.6


# ---- copy.deepcopy, copy.copy, pickle


@pytest.mark.parametrize("name, kwargs", OPTIMIZERS, ids=IDS)
def test_deepcopy_of_model_and_optimizer_keeps_the_state(name: str, kwargs: dict) -> None:
    # the state was keyed by id(param): the copy's state_dict was empty, and its next Adam step a first one (the weight
    # moved by lr, 0.1, where torch's moved 0.005)
    pair = Pair()
    opt, topt = make(name, kwargs, list(pair.net.parameters()), list(pair.t.parameters()))
    for _ in range(2):
        step(pair.net, opt), torch_step(pair.t, topt)
    net2, opt2 = copy.deepcopy((pair.net, opt))
    tnet2, topt2 = copy.deepcopy((pair.t, topt))
    assert opt2.param_groups[0]["params"][0] is net2.l1.weight
    assert len(opt2.state_dict()["state"]) == len(opt.state_dict()["state"]) == 4
    assert len(topt2.state_dict()["state"]) == len(topt.state_dict()["state"])
    for _ in range(3):
        step(net2, opt2), torch_step(tnet2, topt2)
    check(net2, tnet2)
    # the original is left as it was, and goes on as torch's
    step(pair.net, opt), torch_step(pair.t, topt)
    check(pair.net, pair.t)


# which of the two trains at each step after the copy: in bursts of each, then alternately
SCHEDULE = "ooccooocococ"


@pytest.mark.parametrize("name, kwargs", [OPTIMIZERS[0], OPTIMIZERS[1], OPTIMIZERS[2]], ids=["SGD", "SGD-m", "Adam"])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_deepcopy_trains_independently_of_the_original(name: str, kwargs: dict, k: int) -> None:
    # the copy's weights were lazy reads of the original's buffers: the original's next step gave them copy-on-write
    # snapshots whose remembered source was the original's (overwritten) buffers, and the copy's first backward()
    # raised "overwritten in place"
    pair = Pair()
    opt, topt = make(name, kwargs, list(pair.net.parameters()), list(pair.t.parameters()))
    for _ in range(k):
        step(pair.net, opt), torch_step(pair.t, topt)
    net2, opt2 = copy.deepcopy((pair.net, opt))
    tnet2, topt2 = copy.deepcopy((pair.t, topt))
    for who in SCHEDULE:
        ours, theirs = ((pair.net, opt), (pair.t, topt)) if who == "o" else ((net2, opt2), (tnet2, topt2))
        np.testing.assert_allclose(step(*ours), torch_step(*theirs), rtol=1e-5)
        # (only the one that stepped is read: reading the other realizes it, which hid the bug)
        check(ours[0], theirs[0])
        grad, tgrad = ours[0].l1.weight.grad, theirs[0][0].weight.grad
        np.testing.assert_allclose(grad.numpy(), tgrad.numpy(), rtol=1e-5, atol=1e-6)
    # an in-place write into the original's weights leaves the copy's alone, and its backward() still runs
    pair.net.l1.weight.assign(pair.net.l1.weight * 0).realize()
    with torch.no_grad():
        pair.t[0].weight.mul_(0)
    np.testing.assert_allclose(step(net2, opt2), torch_step(tnet2, topt2), rtol=1e-5)
    check(net2, tnet2)


def test_a_lazy_clone_of_the_weights_trains_after_the_original_steps() -> None:
    # the same without deepcopy: `w.detach().clone()` left lazy, then the original stepped twice; backward() through the
    # clone followed the copy-on-write snapshot behind its DETACH back to the overwritten weight and raised
    pair = Pair()
    opt = optim.SGD(list(pair.net.parameters()), lr=0.1)
    topt = torch.optim.SGD(list(pair.t.parameters()), lr=0.1)
    step(pair.net, opt), torch_step(pair.t, topt)
    net2, tnet2 = Net(), copy.deepcopy(pair.t)
    for layer, twin in ((net2.l1, pair.net.l1), (net2.l2, pair.net.l2)):
        layer.weight = twin.weight.detach().clone().requires_grad_()
        layer.bias = twin.bias.detach().clone().requires_grad_()
    opt2, topt2 = optim.SGD(list(net2.parameters()), lr=0.1), torch.optim.SGD(list(tnet2.parameters()), lr=0.1)
    for _ in range(2):
        step(pair.net, opt), torch_step(pair.t, topt)
    for _ in range(2):
        np.testing.assert_allclose(step(net2, opt2), torch_step(tnet2, topt2), rtol=1e-5)
    check(net2, tnet2)
    check(pair.net, pair.t)


@pytest.mark.usefixtures("gc_of_this_test")
def test_deepcopy_of_an_optimizer_follows_lr_changes_once_the_original_is_gone() -> None:
    # the copy's groups held a weak reference to the original optimizer: with it gone, `group["lr"] = 0` was ignored
    def run(keep_original: bool) -> float:
        net = Net()
        opt = optim.SGD(net.parameters(), lr=0.5)
        sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.0)
        net2, opt2, sched2 = copy.deepcopy((net, opt, sched))
        assert sched2.optimizer is opt2
        if not keep_original:
            del net, opt, sched
            gc.collect()
        sched2.step()
        w = net2.l1.weight.numpy().copy()
        step(net2, opt2)
        return float(np.abs(net2.l1.weight.numpy() - w).max())

    assert run(True) == run(False) == 0.0


def test_deepcopy_of_an_optimizer_alone_copies_its_parameters_too() -> None:
    # as torch's: the copy's groups hold copies of the parameters, its state keyed by them
    w, tw = Tensor([1.0, -2.0], requires_grad=True), torch.tensor([1.0, -2.0], requires_grad=True)
    opt, topt = optim.Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    (w * w).sum().backward()
    (tw * tw).sum().backward()
    opt.step(), topt.step()
    opt2, topt2 = copy.deepcopy(opt), copy.deepcopy(topt)
    w2, tw2 = opt2.param_groups[0]["params"][0], topt2.param_groups[0]["params"][0]
    assert w2 is not w and tw2 is not tw
    np.testing.assert_allclose(opt2.state[w2]["exp_avg"].numpy(), topt2.state[tw2]["exp_avg"].numpy(), rtol=1e-6)
    w2.grad, tw2.grad = Tensor([1.0, 1.0]), torch.tensor([1.0, 1.0])
    opt2.step(), topt2.step()
    np.testing.assert_allclose(w2.numpy(), tw2.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)


def test_shallow_copy_shares_groups_and_state_as_torch() -> None:
    pair = Pair()
    opt, topt = make("Adam", {"lr": 0.01}, list(pair.net.parameters()), list(pair.t.parameters()))
    step(pair.net, opt), torch_step(pair.t, topt)
    opt2, topt2 = copy.copy(opt), copy.copy(topt)
    assert (opt2.param_groups is opt.param_groups) and (topt2.param_groups is topt.param_groups)
    # a step of the copy is a step of the original's state: the original's next step is the third
    step(pair.net, opt2), torch_step(pair.t, topt2)
    opt2.param_groups[0]["lr"] = 0.003
    assert topt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["lr"] == 0.003
    topt2.param_groups[0]["lr"] = 0.003
    step(pair.net, opt), torch_step(pair.t, topt)
    w = pair.net.l1.weight
    assert opt.state[w]["step"].item() == topt.state[pair.t[0].weight]["step"].item() == 3
    check(pair.net, pair.t)


def test_pickled_model_and_optimizer_train_on_as_the_original() -> None:
    # pickle raised "cannot pickle 'weakref.ReferenceType' object"
    pair = Pair()
    opt, topt = make("Adam", {"lr": 0.01, "amsgrad": True}, list(pair.net.parameters()), list(pair.t.parameters()))
    for _ in range(2):
        step(pair.net, opt), torch_step(pair.t, topt)
    opt.param_groups[0]["betas"] = (0.8, 0.9)
    topt.param_groups[0]["betas"] = (0.8, 0.9)
    net2, opt2 = pickle.loads(pickle.dumps((pair.net, opt)))
    tnet2, topt2 = pickle.loads(pickle.dumps((pair.t, topt)))
    assert opt2.param_groups[0]["params"][0] is net2.l1.weight
    assert len(opt2.state_dict()["state"]) == 4
    for _ in range(3):
        step(net2, opt2), torch_step(tnet2, topt2)
        step(pair.net, opt), torch_step(pair.t, topt)
    check(net2, tnet2)
    check(pair.net, pair.t)
    for a, b in zip(net2.parameters(), pair.net.parameters(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# ---- a model converted in place after its optimizer was built


@pytest.mark.parametrize("name, kwargs", [OPTIMIZERS[1], OPTIMIZERS[3], OPTIMIZERS[9]], ids=["SGD", "Adam", "NAdam"])
@pytest.mark.parametrize("convert", ["double", "to"])
def test_conversion_after_building_the_optimizer_keeps_training(name: str, kwargs: dict, convert: str) -> None:
    # Module.to/double replaced the Parameter objects: the optimizer went on updating the old ones and the model stopped
    # learning (the weight moved by 0, torch's by 0.6 in three SGD steps)
    pair = Pair()
    params = list(pair.net.parameters())
    opt, topt = make(name, kwargs, params, list(pair.t.parameters()))
    dtype, tdtype = ("float64", torch.float64) if convert == "double" else ("float32", torch.float32)
    if convert == "double":
        pair.net.double()
        pair.t.double()
    else:
        pair.net.to(OTHER)
    assert all(a is b for a, b in zip(pair.net.parameters(), params, strict=True))
    assert all(p.requires_grad for p in params) and opt.param_groups[0]["params"][0] is pair.net.l1.weight
    assert {p.dtype for p in params} == {dtypes.float64 if convert == "double" else dtypes.float32}
    for _ in range(3):
        step(pair.net, opt, dtype), torch_step(pair.t, topt, tdtype)
    assert {p.device for p in params} == {OTHER if convert == "to" else "CPU"}
    check(pair.net, pair.t, rtol=1e-6 if convert == "double" else 1e-5)


def test_conversion_keeps_identity_grad_and_frozen_flags_as_torch() -> None:
    net, tnet = Net(), torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Linear(8, 3))
    net.l1.bias.requires_grad_(False)
    tnet[0].bias.requires_grad_(False)
    net(Tensor(X)).sum().backward()
    tnet(torch.tensor(X)).sum().backward()
    w, tw, grad = net.l1.weight, tnet[0].weight, net.l1.weight.grad.numpy()
    for convert, ours, want in (("double", dtypes.float64, torch.float64), ("half", dtypes.float16, torch.float16)):
        getattr(net, convert)(), getattr(tnet, convert)()
        assert net.l1.weight is w and tnet[0].weight is tw
        assert (w.dtype, w.grad.dtype, tw.dtype, tw.grad.dtype) == (ours, ours, want, want)
        assert (net.l1.bias.requires_grad, w.requires_grad) == (tnet[0].bias.requires_grad, tw.requires_grad)
        np.testing.assert_allclose(w.grad.numpy().astype(np.float32), grad, rtol=1e-3)
    net.to(OTHER).float()
    assert net.l1.weight is w and w.device == OTHER and w.grad.device == OTHER and w.grad.dtype == dtypes.float32


def test_conversion_after_steps_names_the_parameter_then_loads_its_state_over() -> None:
    # torch's Adam raises too (its state stays float32 beside float64 parameters); its load_state_dict moves the state
    # to the parameters, and so does ours
    pair = Pair()
    opt, topt = make("Adam", {"lr": 0.01}, list(pair.net.parameters()), list(pair.t.parameters()))
    for _ in range(2):
        step(pair.net, opt), torch_step(pair.t, topt)
    pair.net.double()
    pair.t.double()
    with pytest.raises(RuntimeError, match=r"parameter 0 of group 0 \(shape \(8, 5\)\) is now double on CPU.*float"):
        step(pair.net, opt, "float64")
    with pytest.raises(RuntimeError):
        # (on a copy: torch's failed step has counted a step already)
        torch_step(*copy.deepcopy((pair.t, topt)), torch.float64)
    opt.load_state_dict(opt.state_dict())
    topt.load_state_dict(topt.state_dict())
    assert opt.state[pair.net.l1.weight]["exp_avg"].dtype == dtypes.float64
    for _ in range(3):
        step(pair.net, opt, "float64"), torch_step(pair.t, topt, torch.float64)
    check(pair.net, pair.t)


# ---- one optimizer over parameters on two devices


@pytest.mark.parametrize("name, kwargs", OPTIMIZERS, ids=IDS)
def test_one_optimizer_over_two_devices_matches_torch(name: str, kwargs: dict) -> None:
    # step() raised "mul: operands are on different devices": the group's lr (and step, betas) lived on one device
    pair = Pair(OTHER)
    assert pair.net.l1.weight.device == "CPU" and pair.net.l2.weight.device == OTHER
    opt, topt = make(name, kwargs, list(pair.net.parameters()), list(pair.t.parameters()))
    for i in range(4):
        np.testing.assert_allclose(step(pair.net, opt), torch_step(pair.t, topt), rtol=1e-5)
        change_hyperparameters(opt.param_groups, i)
        change_hyperparameters(topt.param_groups, i)
    check(pair.net, pair.t)
    assert pair.net.l2.weight.device == OTHER
    # the state is on each parameter's device
    assert {t.device for t in opt.state[pair.net.l2.weight].values()} <= {OTHER}


def test_lamb_over_two_devices_steps_as_on_one() -> None:
    # (torch has no LAMB: the split model against the same model on one device)
    one, two = Pair(), Pair(OTHER)
    opt1, opt2 = optim.LAMB(list(one.net.parameters()), lr=0.01), optim.LAMB(list(two.net.parameters()), lr=0.01)
    for i in range(3):
        step(one.net, opt1), step(two.net, opt2)
        change_hyperparameters(opt1.param_groups, i)
        change_hyperparameters(opt2.param_groups, i)
    for a, b in zip(one.net.parameters(), two.net.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_a_scheduler_and_a_tensor_lr_reach_every_device() -> None:
    pair = Pair(OTHER)
    opt, topt = make("SGD", {"lr": 0.1, "momentum": 0.9}, list(pair.net.parameters()), list(pair.t.parameters()))
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=10)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.2, total_steps=10)
    for _ in range(4):
        step(pair.net, opt), torch_step(pair.t, topt)
        sched.step(), tsched.step()
    check(pair.net, pair.t)
    # `opt.lr = tensor`: that tensor is the lr on every device (read from where it is)
    lr = Tensor(0.05)
    opt.lr = lr
    for g in topt.param_groups:
        g["lr"] = 0.05
    step(pair.net, opt), torch_step(pair.t, topt)
    lr.assign(Tensor(0.01)).realize()
    for g in topt.param_groups:
        g["lr"] = 0.01
    step(pair.net, opt), torch_step(pair.t, topt)
    check(pair.net, pair.t)

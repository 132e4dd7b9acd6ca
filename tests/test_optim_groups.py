"""torch.optim's Optimizer API on uopkit's optimizers: parameter groups, state dicts (ours and torch's), and the other
optimizers (RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD), each run beside torch's from the same
weights."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.nn import Linear, optim

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((16, 5)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)


class Pair:
    """An MLP in uopkit and the same one in torch, with the same weights."""

    def __init__(self) -> None:
        # (the same weights whatever ran before: with the weights that the suite's order of draws gave, RMSprop with
        # maximize differed from torch by 8e-6, past the tolerance, after 5 steps)
        Tensor.manual_seed(3)
        self.l1, self.l2 = Linear(5, 8), Linear(8, 3)
        self.t = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        with torch.no_grad():
            for t, o in ((self.t[0], self.l1), (self.t[2], self.l2)):
                t.weight.copy_(torch.tensor(o.weight.numpy()))
                t.bias.copy_(torch.tensor(o.bias.numpy()))

    def ours(self) -> list[Tensor]:
        return [self.l1.weight, self.l1.bias, self.l2.weight, self.l2.bias]

    def groups(self, **second: float) -> tuple[list[dict], list[dict]]:
        # the first layer in group 0 (the constructor's defaults), the second in group 1 with overrides
        ours = [{"params": self.ours()[:2]}, {"params": self.ours()[2:], **second}]
        theirs = [{"params": list(self.t[0].parameters())}, {"params": list(self.t[2].parameters()), **second}]
        return ours, theirs

    def losses(self, opt, topt, between: Callable[[int], None] | None = None) -> tuple[Tensor, torch.Tensor]:
        opt.zero_grad()
        loss = ((self.l2(self.l1(Tensor(X)).relu()) - Tensor(Y)) ** 2).mean()
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        topt.zero_grad()
        tloss = ((self.t(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean()
        tloss.backward()
        topt.step()
        return loss, tloss

    def check(self, rtol: float = 1e-5, atol: float = 2e-6) -> None:
        for o, t in zip(self.ours(), self.t.parameters(), strict=True):
            np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol)


def run(name: str, kwargs: dict, second: dict | None = None, steps: int = 6, rtol: float = 1e-5) -> Pair:
    pair = Pair()
    ours, theirs = pair.groups(**(second or {}))
    opt, topt = getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)
    for _ in range(steps):
        loss, tloss = pair.losses(opt, topt)
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=rtol)
    pair.check(rtol=rtol)
    return pair


CASES = [
    ("SGD", {"lr": 0.05, "momentum": 0.9}, {"lr": 0.1, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}, {"momentum": 0.5, "maximize": True}),
    ("Adam", {"lr": 0.01}, {"lr": 0.03, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True}, {"eps": 1e-3}),
    ("Adam", {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1}, {"lr": 0.02}),
    ("AdamW", {"lr": 0.01}, {"weight_decay": 0.3, "amsgrad": True}),
    ("RMSprop", {"lr": 0.01}, {"lr": 0.02}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True}, {"alpha": 0.9, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.005, "alpha": 0.8, "eps": 1e-4, "centered": True, "maximize": True}, {"momentum": 0.5}),
    ("Adagrad", {"lr": 0.1}, {"lr": 0.2}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.1, "initial_accumulator_value": 0.5}, {"weight_decay": 0.1, "eps": 1e-3}),
    ("Adadelta", {}, {"lr": 0.5}),
    ("Adadelta", {"lr": 2.0, "rho": 0.7, "eps": 1e-4, "weight_decay": 0.1}, {"maximize": True}),
    ("Adamax", {}, {"lr": 0.01}),
    ("Adamax", {"lr": 0.01, "betas": (0.8, 0.95), "weight_decay": 0.1}, {"eps": 1e-3}),
    ("NAdam", {}, {"lr": 0.01}),
    ("NAdam", {"lr": 0.01, "momentum_decay": 0.1, "weight_decay": 0.1}, {"betas": (0.7, 0.9)}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}, {"maximize": True}),
    ("RAdam", {"lr": 0.01}, {"lr": 0.02}),
    # (betas (0.5, 0.6): rho_t passes 5 at step 3, so the steps after use the rectified adaptive update)
    ("RAdam", {"lr": 0.01, "betas": (0.5, 0.6), "weight_decay": 0.1}, {"eps": 1e-3}),
    ("RAdam", {"lr": 0.01, "betas": (0.5, 0.6), "weight_decay": 0.1, "decoupled_weight_decay": True}, {}),
    ("Rprop", {"lr": 0.01}, {"lr": 0.02}),
    ("Rprop", {"lr": 0.02, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.05)}, {"maximize": True}),
    ("ASGD", {"lr": 0.05}, {"lr": 0.1, "weight_decay": 0.1}),
    # (t0 = 3: the average starts at step 4)
    ("ASGD", {"lr": 0.05, "lambd": 0.01, "alpha": 0.6, "t0": 3}, {"maximize": True, "t0": 0}),
    ("Adafactor", {"lr": 0.05}, {"lr": 0.02, "weight_decay": 0.1}),
    ("Adafactor", {"lr": 0.1, "beta2_decay": -0.5, "eps": (1e-4, 1e-2), "d": 2.0}, {"maximize": True}),
]


@pytest.mark.parametrize("name, kwargs, second", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_two_groups_match_torch(name: str, kwargs: dict, second: dict) -> None:
    run(name, kwargs, second, steps=8)


# every optimizer these tests run against torch
ALL = [
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "NAdam",
    "RAdam",
    "Rprop",
    "ASGD",
    "Adafactor",
]


@pytest.mark.parametrize(
    "name",
    ALL,
)
def test_defaults_single_group_maximize_and_signature(name: str) -> None:
    import inspect

    # torch's positional order and defaults (Adam and AdamW keep tinygrad's b1, b2 third and fourth: torch's betas by
    # name)
    ours, theirs = inspect.signature(getattr(optim, name)), inspect.signature(getattr(torch.optim, name))
    if name not in ("Adam", "AdamW"):
        for (a, pa), (b, pb) in zip(ours.parameters.items(), theirs.parameters.items(), strict=False):
            assert a == b and pa.kind == pb.kind, (a, b)
            if pa.default is not inspect.Parameter.empty:
                assert pa.default == pb.default or (pa.default == 0 and pb.default == 0), a
    kwargs = {"lr": 0.05} if name == "SGD" else {}
    pair = Pair()
    opt = getattr(optim, name)(pair.ours(), maximize=True, **kwargs)
    topt = getattr(torch.optim, name)(pair.t.parameters(), maximize=True, **kwargs)
    for _ in range(5):
        pair.losses(opt, topt)
    pair.check()
    # the groups have torch's keys
    assert set(opt.param_groups[0]) == set(topt.param_groups[0]), name
    assert opt.defaults.keys() == topt.defaults.keys()


def test_group_lr_change_is_used_by_the_next_step_without_recompiling() -> None:
    from uopkit.engine.realize import stats

    pair = Pair()
    ours, theirs = pair.groups(lr=0.1)
    opt, topt = optim.SGD(ours, lr=0.05, momentum=0.9), torch.optim.SGD(theirs, lr=0.05, momentum=0.9)
    for i in range(6):
        if i >= 2:
            before = stats["kernels_compiled"]
        pair.losses(opt, topt)
        if i >= 2:
            assert stats["kernels_compiled"] == before
        for g, tg in zip(opt.param_groups, topt.param_groups, strict=True):
            g["lr"] *= 0.7
            tg["lr"] *= 0.7
    pair.check()
    assert opt.param_groups[1]["lr"] == pytest.approx(0.1 * 0.7**6)
    assert opt.param_groups[1].tensors["lr"][0].item() == pytest.approx(0.1 * 0.7**6)


def test_add_param_group_duplicates_and_defaults() -> None:
    a, b, c = (Tensor([1.0, 2.0], requires_grad=True) for _ in range(3))
    opt = optim.Adam([a], lr=0.1)
    assert opt.defaults["lr"] == 0.1 and opt.defaults["betas"] == (0.9, 0.999)
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="already in another group"):
        opt.add_param_group({"params": [c, a]})
    with pytest.raises(ValueError, match="already in another group"):
        optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    # a tensor given twice within a group is taken once
    assert optim.SGD([a, a, b], lr=0.1).params == [a, b]
    # named parameters, as model.named_parameters() gives
    named = optim.SGD([("w", a), ("v", b)], lr=0.1)
    assert named.params == [a, b] and named.param_groups[0]["param_names"] == ["w", "v"]
    # torch's options that change nothing here are taken and kept in the groups
    kept = optim.Adam([a], foreach=False, fused=None, capturable=True, differentiable=False)
    assert kept.param_groups[0]["capturable"] is True
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        optim.SGD([a], bogus=1)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "LBFGS", "NAdam", "ASGD", "Muon"])
def test_a_lone_tensor_or_a_group_s_set_is_refused_as_torch(name: str) -> None:
    # a lone tensor was taken as [t]; torch raises TypeError (a tensor iterates over its rows), and so do tinygrad's
    # LAMB and LARS here, which take a list as tinygrad's do
    torch = pytest.importorskip("torch")
    ours, theirs = Tensor.ones(3, 3, requires_grad=True), torch.ones(3, 3, requires_grad=True)
    cases = [
        (ours, theirs, rf"{name}: params takes an iterable .* got a single Tensor of shape \(3, 3\)"),
        ([{"params": {ours}}], [{"params": {theirs}}], f"{name}: params given as a set"),
    ]
    for given_ours, given_theirs, fact in cases:
        with pytest.raises(TypeError):
            getattr(torch.optim, name)(given_theirs, lr=0.1)
        with pytest.raises(TypeError, match=fact):
            getattr(optim, name)(given_ours, lr=0.1)
    # a set given as params itself, and a lone tensor as a group's params, are taken, as torch's
    assert getattr(optim, name)({ours}, lr=0.1).params == [ours]
    assert getattr(optim, name)([{"params": ours}], lr=0.1).params == [ours]
    for tinygrad_name in ("LAMB", "LARS"):
        with pytest.raises(TypeError, match="params takes an iterable of tensors"):
            getattr(optim, tinygrad_name)(ours, lr=0.1)


def test_zero_grad_set_to_none() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1, weight_decay=0.5)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0]
    # a zero gradient still steps (the weight decay), as torch's
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.95, 1.9], rtol=1e-6)
    opt.zero_grad()
    assert w.grad is None


def test_parameters_that_skip_steps_count_their_own_steps() -> None:
    # a parameter without a gradient in some steps: torch's per-parameter step count (the Adam bias corrections)
    wa, wb = np.array([1.0, -2.0], np.float32), np.array([0.5, 3.0], np.float32)
    a, b = Tensor(wa, requires_grad=True), Tensor(wb, requires_grad=True)
    ta, tb = torch.tensor(wa, requires_grad=True), torch.tensor(wb, requires_grad=True)
    opt, topt = optim.Adam([a, b], lr=0.1), torch.optim.Adam([ta, tb], lr=0.1)
    for i in range(6):
        opt.zero_grad()
        topt.zero_grad()
        loss = (a * a).sum() + ((b * b * b).sum() if i % 3 == 1 else 0)
        tloss = (ta * ta).sum() + ((tb * tb * tb).sum() if i % 3 == 1 else 0)
        loss.backward()
        tloss.backward()
        if i % 3 != 1:
            b.grad, tb.grad = None, None
        opt.step()
        topt.step()
    np.testing.assert_allclose(a.numpy(), ta.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [float(sd["state"][i]["step"].item()) for i in (0, 1)] == [float(tsd["state"][i]["step"]) for i in (0, 1)]


def _numpy_state(sd: dict) -> dict:
    # a torch state dict with its tensors as numpy arrays (what a checkpoint converted for uopkit holds)
    state = {i: {k: (v.detach().numpy() if isinstance(v, torch.Tensor) else v) for k, v in s.items()}
             for i, s in sd["state"].items()}  # fmt: skip
    return {"state": state, "param_groups": sd["param_groups"]}


LOADABLE = [
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.05}),
    ("Adadelta", {"lr": 0.5}),
    ("Adamax", {"lr": 0.01}),
    ("NAdam", {"lr": 0.01}),
    ("RAdam", {"lr": 0.01, "betas": (0.5, 0.6)}),
    ("Rprop", {"lr": 0.01, "etas": (0.4, 1.3)}),
    ("ASGD", {"lr": 0.05, "t0": 2}),
    ("Adafactor", {"lr": 0.05, "weight_decay": 0.1}),
]


@pytest.mark.parametrize("name, kwargs", LOADABLE, ids=[c[0] for c in LOADABLE])
def test_load_torchs_state_dict_then_train_on(name: str, kwargs: dict) -> None:
    pair = Pair()
    ours, theirs = pair.groups(lr=kwargs["lr"] * 2)
    topt = getattr(torch.optim, name)(theirs, **kwargs)
    warm = optim.SGD(pair.ours(), lr=0.0)
    for _ in range(3):
        pair.losses(warm, topt)
    # torch's weights and optimizer state into ours
    for o, t in zip(pair.ours(), pair.t.parameters(), strict=True):
        o.assign(Tensor(t.detach().numpy())).realize()
    opt = getattr(optim, name)(ours, **kwargs)
    opt.load_state_dict(_numpy_state(topt.state_dict()))
    assert opt.param_groups[1]["lr"] == kwargs["lr"] * 2
    for _ in range(4):
        pair.losses(opt, topt)
    pair.check()
    # and ours saved and loaded into a fresh optimizer goes on as the first would
    sd = opt.state_dict()
    tsd = topt.state_dict()
    assert sd["param_groups"][1]["params"] == tsd["param_groups"][1]["params"] == [2, 3]
    assert set(sd["state"][0]) == set(tsd["state"][0])


@pytest.mark.parametrize("name, kwargs", LOADABLE, ids=[c[0] for c in LOADABLE])
def test_state_dict_round_trip(name: str, kwargs: dict) -> None:
    pair = Pair()
    ours, theirs = pair.groups(lr=kwargs["lr"] * 0.5)
    opt, topt = getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)
    for _ in range(3):
        pair.losses(opt, topt)
    saved = opt.state_dict()
    copied = {"state": {i: {k: v.numpy().copy() for k, v in s.items()} for i, s in saved["state"].items()},
              "param_groups": saved["param_groups"]}  # fmt: skip
    # a fresh optimizer on the same parameters, loaded, takes over
    fresh = getattr(optim, name)(pair.groups(lr=1.0)[0], **kwargs)
    fresh.load_state_dict(copied)
    assert fresh.param_groups[1]["lr"] == kwargs["lr"] * 0.5
    for _ in range(3):
        pair.losses(fresh, topt)
    pair.check()


def test_state_matches_torchs_names_and_load_errors() -> None:
    pair = Pair()
    opt, topt = optim.Adam(pair.ours(), lr=0.01), torch.optim.Adam(pair.t.parameters(), lr=0.01)
    assert opt.state_dict()["state"] == {} and opt.state == {}
    pair.losses(opt, topt)
    assert set(opt.state[pair.l1.weight]) == {"step", "exp_avg", "exp_avg_sq"}
    np.testing.assert_allclose(
        opt.state[pair.l1.weight]["exp_avg"].numpy(), topt.state[pair.t[0].weight]["exp_avg"].numpy(), rtol=1e-5
    )
    with pytest.raises(ValueError, match="the state dict holds 0 param groups, this optimizer 1"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(ValueError, match="another number of tensors than the optimizer's"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}]})


def test_cycled_momentum_is_data_after_the_first_change() -> None:
    # momentum set through param_groups becomes a 0-d tensor: later changes recompile nothing
    from uopkit.engine.realize import stats

    w, tw = Tensor([1.0, -2.0], requires_grad=True), torch.tensor([1.0, -2.0], requires_grad=True)
    opt, topt = optim.SGD([w], lr=0.1, momentum=0.9), torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    for i in range(6):
        for o in (opt, topt):
            o.param_groups[0]["momentum"] = 0.5 + 0.05 * i
        w.grad, tw.grad = w.detach() * 2, tw.detach() * 2
        before = stats["kernels_compiled"]
        opt.step()
        topt.step()
        if i >= 3:
            assert stats["kernels_compiled"] == before
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "NAdam", "RAdam", "Adamax"])
def test_betas_set_as_numbers_after_construction_match_torch(name: str) -> None:
    # OneCycleLR and CyclicLR set group["betas"] (the betas become 0-d tensors): 1 - beta is torch's 1 - beta in
    # float64, not 1 - float32(beta) (which was 1.3e-5 off in exp_avg_sq for beta2 = 0.999)
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(5).astype(np.float32)
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = getattr(optim, name)([w], lr=0.01), getattr(torch.optim, name)([tw], lr=0.01)
    for i in range(4):
        for o in (opt, topt):
            o.param_groups[0]["betas"] = (0.95 - 0.01 * i, 0.999)
        g = rng.standard_normal(5).astype(np.float32)
        w.grad, tw.grad = Tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    for key in topt.state[tw]:
        if key != "step":
            np.testing.assert_allclose(opt.state[w][key].numpy(), topt.state[tw][key].numpy(), rtol=2e-7, err_msg=key)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=2e-7)


def test_zero_grad_keeps_the_gradient_object() -> None:
    # set_to_none=False zeroes `.grad` in place, as torch's: a reference taken before sees the zeros and what the next
    # backward adds
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    held = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is held and held.tolist() == [0.0, 0.0]
    (w * 5).sum().backward()
    assert w.grad is held and held.tolist() == [5.0, 5.0]


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_first_step_takes_the_lr_of_that_step(name: str) -> None:
    # torch makes Rprop's step sizes and ASGD's eta from the lr at a parameter's first step: a scheduler built between
    # the optimizer and that step (OneCycleLR sets the lr to max_lr / div_factor) changes them, and so do later changes
    # of ASGD's lr
    from uopkit.nn.optim import lr_scheduler

    w0 = np.array([1.0, -2.0, 0.5], np.float32)
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = getattr(optim, name)([w], lr=0.1), getattr(torch.optim, name)([tw], lr=0.1)
    sched = lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10, cycle_momentum=False)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.5, total_steps=10, cycle_momentum=False)
    for _ in range(6):
        opt.zero_grad()
        topt.zero_grad()
        (w * w).sum().backward()
        (tw * tw).sum().backward()
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6, atol=1e-7)
        for key, value in topt.state[tw].items():
            np.testing.assert_allclose(opt.state[w][key].numpy(), value.numpy(), rtol=1e-6, atol=1e-7, err_msg=key)


# (momentum and weight decay where the optimizer has them: a frozen layer with a zero gradient keeps moving)
FREEZE_KWARGS = {
    "SGD": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.1},
    "Adagrad": {"lr": 0.1},
    "Rprop": {},
    "ASGD": {},
}


def _set_requires_grad(ours: list[Tensor], theirs: list, flag: bool) -> None:
    for o, t in zip(ours, theirs, strict=True):
        o.requires_grad_(flag)
        t.requires_grad_(flag)


@pytest.mark.parametrize("name", ALL)
def test_freezing_a_layer_mid_training_follows_torch(name: str) -> None:
    # torch goes by group membership and `p.grad is None`, not by requires_grad: zero_grad() clears a frozen layer's
    # gradient (else its next backward after unfreezing adds to the stale one), and after zero_grad(set_to_none=False)
    # the frozen layer's zero gradient still steps it (momentum, weight decay)
    pair = Pair()
    kwargs = FREEZE_KWARGS.get(name, {"lr": 0.01, "weight_decay": 0.1})
    opt, topt = getattr(optim, name)(pair.ours(), **kwargs), getattr(torch.optim, name)(pair.t.parameters(), **kwargs)
    first, tfirst = pair.ours()[:2], list(pair.t[0].parameters())
    for i in range(9):
        if i in (2, 7):
            _set_requires_grad(first, tfirst, i == 7)
        set_to_none = i not in (2, 3)
        opt.zero_grad(set_to_none=set_to_none)
        topt.zero_grad(set_to_none=set_to_none)
        assert [p.grad is None for p in first] == [p.grad is None for p in tfirst], i
        loss = ((pair.l2(pair.l1(Tensor(X)).relu()) - Tensor(Y)) ** 2).mean()
        loss.backward()
        loss.realize()
        opt.step()
        tloss = ((pair.t(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        pair.check()


@pytest.mark.parametrize("name", ALL)
def test_a_parameter_frozen_when_the_optimizer_was_built_trains_once_unfrozen(name: str) -> None:
    # the fine-tuning pattern: build the optimizer over a model with a frozen layer, unfreeze it later (its state is
    # made at its first step with a gradient, as torch's); then resume from a state dict loaded while it is frozen
    # again: its saved state is loaded too, as torch's
    pair = Pair()
    kwargs = FREEZE_KWARGS.get(name, {"lr": 0.01})
    first, tfirst = pair.ours()[:2], list(pair.t[0].parameters())
    _set_requires_grad(first, tfirst, False)
    opt, topt = getattr(optim, name)(pair.ours(), **kwargs), getattr(torch.optim, name)(pair.t.parameters(), **kwargs)
    # (reading a parameter's entry adds it to the defaultdict, as torch's)
    assert opt.state[first[0]] == {} and list(opt.state) == [first[0]]
    for i in range(4):
        if i == 1:
            _set_requires_grad(first, tfirst, True)
        pair.losses(opt, topt)
        pair.check()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sorted(sd["state"]) == sorted(tsd["state"])
    _set_requires_grad(first, tfirst, False)
    opt, topt = getattr(optim, name)(pair.ours(), **kwargs), getattr(torch.optim, name)(pair.t.parameters(), **kwargs)
    opt.load_state_dict(sd)
    topt.load_state_dict(tsd)
    _set_requires_grad(first, tfirst, True)
    for _ in range(3):
        pair.losses(opt, topt)
        pair.check()
    for key, value in topt.state[tfirst[0]].items():
        np.testing.assert_allclose(opt.state[first[0]][key].numpy(), value.numpy(), rtol=1e-5, atol=1e-7, err_msg=key)


def test_state_and_hooks_as_torchs() -> None:
    # `state` is a defaultdict (a parameter that hasn't stepped reads {}), and the step, state_dict and
    # load_state_dict hooks get what torch's get, in torch's order, and go away with their handle's remove()
    from collections import defaultdict

    w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    opt, topt = optim.SGD([w], lr=0.1, momentum=0.9), torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    assert isinstance(opt.state, defaultdict) and opt.state[w] == topt.state[tw] == {}
    calls: dict[str, list] = {"ours": [], "torch": []}
    for key, o in (("ours", opt), ("torch", topt)):
        log = calls[key]

        def pre(o_, args, kwargs, log=log, o=o):
            log.append(("pre", o_ is o, args[0] is o, len(args), dict(kwargs)))
            return (args, {**kwargs, "closure": None}) if kwargs else None

        handles = [
            o.register_step_pre_hook(pre),
            o.register_step_post_hook(lambda o_, args, kwargs, log=log: log.append(("post", dict(kwargs)))),
            o.register_state_dict_pre_hook(lambda o_, log=log: log.append("sd_pre")),
            o.register_state_dict_post_hook(lambda o_, sd, log=log: log.append("sd_post") or {**sd, "extra": 1}),
            o.register_state_dict_pre_hook(lambda o_, log=log: log.append("sd_pre_first"), prepend=True),
            o.register_load_state_dict_pre_hook(
                lambda o_, sd, log=log: log.append("load_pre") or {k: v for k, v in sd.items() if k != "extra"}
            ),
            o.register_load_state_dict_post_hook(lambda o_, log=log: log.append("load_post")),
        ]
        assert all(callable(h.remove) for h in handles)
        calls[key].append(handles)
    (w * w).sum().backward()
    (tw * tw).sum().backward()
    opt.step()
    topt.step()
    opt.step(closure=None)
    topt.step(closure=None)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["extra"] == tsd["extra"] == 1
    opt.load_state_dict(sd)
    topt.load_state_dict(tsd)
    for key in calls:
        for h in calls[key].pop(0):
            h.remove()
    opt.step()
    topt.step()
    opt.state_dict()
    assert calls["ours"] == calls["torch"]
    assert calls["ours"][0] == ("pre", True, True, 1, {})
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)


def test_step_hooks_run_once_around_a_subclass_step() -> None:
    # a custom optimizer's own step runs the hooks (torch patches it), once when it calls super().step()
    class Halved(optim.SGD):
        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    p.grad = p.grad / 2
            return super().step(closure)

    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = Halved([w], lr=0.1)
    seen = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append("post"))
    (w * w).sum().backward()
    opt.step()
    assert seen == ["pre", "post"]
    np.testing.assert_allclose(w.numpy(), [0.9, 1.8], rtol=1e-6)
    with pytest.raises(RuntimeError, match="tuple"):
        opt.register_step_pre_hook(lambda o, args, kwargs: 3)
        opt.step()


def _torch_style_lars(base: type, no_grad: Callable) -> type:
    """Barlow Twins' LARS, written torch's way (a subclass with its own step, momentum kept in `self.state[p]`), over
    either framework's Optimizer and tensor functions."""
    lib = Tensor if base is optim.Optimizer else torch

    class LARS(base):  # type: ignore[misc,valid-type]
        def __init__(self, params, lr, weight_decay=0.0, momentum=0.9, eta=0.001, exclude=None):
            super().__init__(
                params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta, exclude=exclude)
            )

        @no_grad()
        def step(self):
            for g in self.param_groups:
                for p in g["params"]:
                    dp = p.grad
                    if dp is None:
                        continue
                    if g["exclude"] is None or not g["exclude"](p):
                        dp = dp.add(p, alpha=g["weight_decay"])
                        param_norm, update_norm = lib.norm(p), lib.norm(dp)
                        one = lib.ones_like(param_norm)
                        q = lib.where(
                            param_norm > 0.0,
                            lib.where(update_norm > 0, (g["eta"] * param_norm / update_norm), one),
                            one,
                        )
                        dp = dp.mul(q)
                    param_state = self.state[p]
                    if "mu" not in param_state:
                        param_state["mu"] = lib.zeros_like(p)
                    mu = param_state["mu"]
                    mu.mul_(g["momentum"]).add_(dp)
                    p.add_(mu, alpha=-g["lr"])

    return LARS


def test_a_torch_style_custom_optimizer_keeps_its_state_between_steps() -> None:
    # a subclass with its own step keeps per-parameter state in `self.state[p]`, torch's way: it must be there at the
    # next step (it was a new dict at every read: the momentum started from zero at every step), be saved by
    # state_dict() and come back with load_state_dict(), torch's dict included
    import uopkit

    pair = Pair()
    ours_cls, theirs_cls = (
        _torch_style_lars(optim.Optimizer, uopkit.no_grad),
        _torch_style_lars(torch.optim.Optimizer, torch.no_grad),
    )
    kwargs = {"lr": 0.5, "weight_decay": 1e-4, "exclude": lambda p: p.ndim == 1}
    opt, topt = ours_cls(pair.ours(), **kwargs), theirs_cls(list(pair.t.parameters()), **kwargs)
    for _ in range(4):
        for o in (opt, topt):
            o.zero_grad()
        loss = ((pair.l2(pair.l1(Tensor(X)).relu()) - Tensor(Y)) ** 2).mean()
        loss.backward()
        opt.step()
        tloss = ((pair.t(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    pair.check()
    w, tw = pair.l1.weight, pair.t[0].weight
    assert opt.state[w] is opt.state[w] and set(opt.state[w]) == set(topt.state[tw]) == {"mu"}
    np.testing.assert_allclose(opt.state[w]["mu"].numpy(), topt.state[tw]["mu"].numpy(), rtol=1e-5, atol=1e-7)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sorted(sd["state"]) == sorted(tsd["state"]) == [0, 1, 2, 3]
    # torch's state dict into a new optimizer of ours: the momentum resumes, on the parameter and in its dtype
    pair2 = Pair()
    for o, t in zip(pair2.ours(), pair.t.parameters(), strict=True):
        o.assign(Tensor(t.detach().numpy())).realize()
    opt2 = ours_cls(pair2.ours(), **kwargs)
    opt2.load_state_dict(tsd)
    assert opt2.state[pair2.l1.weight]["mu"].dtype == pair2.l1.weight.dtype
    for _ in range(2):
        opt2.zero_grad()
        ((pair2.l2(pair2.l1(Tensor(X)).relu()) - Tensor(Y)) ** 2).mean().backward()
        opt2.step()
        topt.zero_grad()
        ((pair.t(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean().backward()
        topt.step()
    for o, t in zip(pair2.ours(), pair.t.parameters(), strict=True):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=1e-5, atol=2e-6)


def test_entries_set_in_a_builtin_optimizers_state_stay() -> None:
    # a built-in optimizer's `state` is the same dict at every read: an entry a program adds stays, and is saved,
    # beside the update rule's own tensors, which follow the steps
    pair = Pair()
    opt = optim.SGD(pair.ours(), lr=0.05, momentum=0.9)
    w = pair.l1.weight
    for _ in range(2):
        pair.losses(opt, torch.optim.SGD(pair.t.parameters(), lr=0.05, momentum=0.9))
    opt.state[w]["note"] = 7
    first = opt.state[w]["momentum_buffer"].numpy().copy()
    pair.losses(opt, torch.optim.SGD(pair.t.parameters(), lr=0.05, momentum=0.9))
    assert opt.state[w]["note"] == 7 and not np.allclose(opt.state[w]["momentum_buffer"].numpy(), first)
    assert opt.state_dict()["state"][0]["note"] == 7


def _state_surgery(lib: object, make: Callable[[list[float]], object], case: str) -> np.ndarray:
    # one program written once for torch and for uopkit (`lib` gives Parameter and the optimizers): two steps with a
    # write into `optimizer.state` between them
    nn, opt_mod = lib.nn, lib.optim  # type: ignore[attr-defined]
    p = nn.Parameter(make([1.0, 2.0, 3.0]))
    opt = opt_mod.SGD([p], lr=0.1, momentum=0.9) if case != "reset" else opt_mod.Adam([p], lr=0.1)
    p.grad = make([1.0, -2.0, 0.5])
    opt.step()
    if case == "entry":
        opt.state[p]["momentum_buffer"] = make([5.0, -1.0, 0.0])
    elif case == "reset":
        del opt.state[p]
    elif case == "step":
        opt.state[p]["step"] = make(3.0)
    elif case == "swap":
        # channel pruning: the parameter replaced by its first two entries, its momentum sliced to match
        q = nn.Parameter(p.detach()[:2].clone())
        st = opt.state.pop(p)
        opt.state[q] = {"momentum_buffer": st["momentum_buffer"][:2].clone()}
        opt.param_groups[0]["params"][0] = q
        p = q
    p.grad = make([0.5, 0.5, 0.5][: p.shape[0]])
    opt.step()
    return p.detach().numpy().copy()


@pytest.mark.parametrize("case", ["entry", "reset", "swap"])
def test_writes_into_optimizer_state_reach_the_next_step_as_torchs(case: str) -> None:
    import types

    import uopkit.nn as unn

    ours = _state_surgery(types.SimpleNamespace(nn=unn, optim=optim), lambda v: Tensor(v), case)
    theirs = _state_surgery(torch, lambda v: torch.tensor(v), case)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_a_step_count_written_into_adams_state_is_used() -> None:
    # Adam's bias correction reads the step written into its state (a checkpoint's count set by hand)
    results = []
    for lib, make in ((optim, Tensor), (torch.optim, torch.tensor)):
        p = (torch.nn.Parameter if lib is torch.optim else lambda t: t.requires_grad_())(make([1.0, 2.0]))
        opt = lib.Adam([p], lr=0.1)
        p.grad = make([1.0, -1.0])
        opt.step()
        opt.state[p]["step"] = make(10.0)
        opt.state[p]["exp_avg_sq"] = make([0.25, 4.0])
        p.grad = make([0.5, 0.5])
        opt.step()
        results.append((p.detach().numpy().copy(), float(opt.state[p]["step"])))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    assert results[0][1] == results[1][1] == 11.0
    with pytest.raises(RuntimeError, match="shape"):
        w = Tensor([1.0, 2.0]).requires_grad_()
        o = optim.SGD([w], lr=0.1, momentum=0.9)
        o.state[w]["momentum_buffer"] = Tensor([1.0, 2.0, 3.0])
        w.grad = Tensor([1.0, 1.0])
        o.step()


def test_a_custom_sgld_optimizer_with_required_lr_and_the_deprecated_add_runs_as_torchs() -> None:
    # the SGLD/pSGLD code of Bayesian deep learning: `from torch.optim.optimizer import Optimizer, required`, a group
    # without lr is a ValueError, and the update is written in torch's deprecated `p.data.add_(-lr, d_p)` form
    import warnings

    from torch.optim.optimizer import Optimizer as TorchOptimizer
    from torch.optim.optimizer import required as torch_required

    import uopkit
    from uopkit.nn.optim.optimizer import Optimizer as OurOptimizer
    from uopkit.nn.optim.optimizer import required as our_required

    noise = [RNG.standard_normal((8, 5)).astype(np.float32) for _ in range(3)]

    def sgld(base: type, required: object, wrap: Callable, no_grad: Callable) -> type:
        class SGLD(base):
            def __init__(self, params, lr=required, weight_decay=0.0):
                super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

            @no_grad()
            def step(self, closure=None):
                for group in self.param_groups:
                    for p in group["params"]:
                        state = self.state[p]
                        state["step"] = state.get("step", 0) + 1
                        d_p = p.grad.data.add(group["weight_decay"], p.data)
                        p.data.add_(-0.5 * group["lr"], d_p)
                        p.data.add_(group["lr"] ** 0.5, wrap(noise[state["step"] - 1]))

        return SGLD

    pair = Pair()
    ours = sgld(OurOptimizer, our_required, Tensor, uopkit.no_grad)
    theirs = sgld(TorchOptimizer, torch_required, torch.from_numpy, torch.no_grad)
    with pytest.raises(ValueError, match="lr"):
        theirs(pair.t[0].parameters())
    with pytest.raises(ValueError, match="lr"):
        ours([pair.l1.weight])
    opt, topt = ours([pair.l1.weight], lr=0.01, weight_decay=0.1), theirs([pair.t[0].weight], lr=0.01, weight_decay=0.1)
    assert repr(our_required) == repr(torch_required)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(3):
            opt.zero_grad()
            ((pair.l2(pair.l1(Tensor(X)).relu()) - Tensor(Y)) ** 2).mean().backward()
            opt.step()
            topt.zero_grad()
            ((pair.t(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean().backward()
            topt.step()
    np.testing.assert_allclose(pair.l1.weight.numpy(), pair.t[0].weight.detach().numpy(), rtol=1e-5, atol=1e-6)

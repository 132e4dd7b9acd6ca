"""torch.optim.lr_scheduler's schedulers on uopkit's optimizers: the same learning rates (and cycled momentum), step
after step, with two parameter groups; a TinyJit-ed step reads the lr a scheduler writes."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import optim
from uopkit.nn.optim import lr_scheduler

torch = pytest.importorskip("torch")
tsched = torch.optim.lr_scheduler


def _optimizers(name: str = "SGD", **kwargs: float) -> tuple:
    ours = [{"params": [Tensor([1.0, 2.0], requires_grad=True)]},
            {"params": [Tensor([3.0], requires_grad=True)], "lr": 0.3}]  # fmt: skip
    theirs = [{"params": [torch.tensor([1.0, 2.0], requires_grad=True)]},
              {"params": [torch.tensor([3.0], requires_grad=True)], "lr": 0.3}]  # fmt: skip
    kwargs = {"lr": 0.1} | kwargs
    return getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)


def _momenta(opt) -> list[float]:
    return [g["betas"][0] if "betas" in g else g.get("momentum", 0.0) for g in opt.param_groups]


CASES: dict[str, tuple[Callable, dict]] = {
    "StepLR": (lambda m, o: m.StepLR(o, step_size=4, gamma=0.5), {}),
    "MultiStepLR": (lambda m, o: m.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3), {}),
    "ExponentialLR": (lambda m, o: m.ExponentialLR(o, gamma=0.9), {}),
    "LambdaLR": (lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + e)), {}),
    "LambdaLR-per-group": (lambda m, o: m.LambdaLR(o, [lambda e: 0.9**e, lambda e: 1 + math.sin(e)]), {}),
    "MultiplicativeLR": (lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95), {}),
    "CosineAnnealingLR": (lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=0.01), {}),
    "CosineAnnealingWarmRestarts": (lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=1e-3), {}),
    "LinearLR": (lambda m, o: m.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=8), {}),
    "ConstantLR": (lambda m, o: m.ConstantLR(o, factor=0.4, total_iters=6), {}),
    "PolynomialLR": (lambda m, o: m.PolynomialLR(o, total_iters=12, power=2.0), {}),
    "OneCycleLR": (lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=31), {"momentum": 0.9}),
    "OneCycleLR-3phase-linear": (
        lambda m, o: m.OneCycleLR(
            o, max_lr=0.5, epochs=4, steps_per_epoch=8, three_phase=True, anneal_strategy="linear", div_factor=10.0
        ),  # fmt: skip
        {"momentum": 0.9},
    ),
    "OneCycleLR-Adam": (lambda m, o: m.OneCycleLR(o, max_lr=0.01, total_steps=40, pct_start=0.25), {"_opt": "Adam"}),
    "CyclicLR": (lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=4), {"momentum": 0.9}),
    "CyclicLR-triangular2": (
        lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, step_size_down=5, mode="triangular2"),
        {"momentum": 0.9},
    ),
    "CyclicLR-exp_range-Adam": (
        lambda m, o: m.CyclicLR(o, 0.001, 0.01, step_size_up=4, mode="exp_range", gamma=0.9),
        {"_opt": "Adam"},
    ),
    "CyclicLR-no-momentum": (lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=5, cycle_momentum=False), {}),
    "SequentialLR": (
        lambda m, o: m.SequentialLR(
            o, [m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=12)], milestones=[5]
        ),
        {},
    ),
    "SequentialLR-3": (
        lambda m, o: m.SequentialLR(
            o,
            [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, gamma=0.8), m.StepLR(o, 3)],
            milestones=[4, 10],
        ),
        {},
    ),
    "ChainedScheduler": (
        lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.5, total_iters=4), m.ExponentialLR(o, gamma=0.9)]),
        {},
    ),
    # a ChainedScheduler inside a SequentialLR: its schedulers' initial steps are undone too
    "SequentialLR-chained": (
        lambda m, o: m.SequentialLR(
            o,
            [
                m.ChainedScheduler([m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, gamma=0.9)]),
                m.StepLR(o, 3, gamma=0.5),
            ],
            milestones=[8],
        ),
        {},
    ),
    # a milestone at 0: the second scheduler runs from the start
    "SequentialLR-milestone-0": (
        lambda m, o: m.SequentialLR(
            o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, gamma=0.9)], milestones=[0]
        ),
        {},
    ),
    # a MultiplicativeLR switched to at a milestone multiplies there too, as torch's
    "SequentialLR-multiplicative": (
        lambda m, o: m.SequentialLR(
            o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.MultiplicativeLR(o, lambda e: 0.9)], milestones=[5]
        ),
        {},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lr_sequence_matches_torch(case: str) -> None:
    make, kwargs = CASES[case]
    kwargs = dict(kwargs)
    name = kwargs.pop("_opt", "SGD")
    opt, topt = _optimizers(name, **kwargs)
    sched, tsch = make(lr_scheduler, opt), make(tsched, topt)
    lrs, tlrs = [sched.get_last_lr()], [tsch.get_last_lr()]
    moms, tmoms = [_momenta(opt)], [_momenta(topt)]
    for _ in range(30):
        opt.step()
        topt.step()
        sched.step()
        tsch.step()
        lrs.append(sched.get_last_lr())
        tlrs.append(tsch.get_last_lr())
        moms.append(_momenta(opt))
        tmoms.append(_momenta(topt))
    np.testing.assert_allclose(np.array(lrs), np.array(tlrs), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(np.array(moms), np.array(tmoms), rtol=1e-7)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups], rel=1e-7)
    # the tensor the step reads holds the lr
    for g in opt.param_groups:
        assert g.tensors["lr"][0].item() == pytest.approx(g["lr"], rel=1e-6)
    if hasattr(tsch, "last_epoch"):
        assert sched.last_epoch == tsch.last_epoch


def test_reduce_lr_on_plateau_matches_torch() -> None:
    metrics = [1.0, 0.9, 0.91, 0.92, 0.93, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.7, 0.75, 0.75, 0.75, 0.75] * 2
    for kwargs in (
        {"patience": 2},
        {"mode": "max", "factor": 0.5, "patience": 1, "threshold": 0.05, "threshold_mode": "abs", "cooldown": 2},
        {"patience": 0, "min_lr": [0.05, 0.001], "factor": 0.3},
    ):
        opt, topt = _optimizers()
        sched, tsch = lr_scheduler.ReduceLROnPlateau(opt, **kwargs), tsched.ReduceLROnPlateau(topt, **kwargs)
        for m in metrics:
            sched.step(Tensor(m) if m < 0.8 else m)
            tsch.step(m)
            assert sched.get_last_lr() == pytest.approx(tsch.get_last_lr(), rel=1e-7)
            assert sched.num_bad_epochs == tsch.num_bad_epochs and sched.best == pytest.approx(tsch.best, rel=1e-7)


def test_scheduler_state_dict_resumes() -> None:
    opt, _ = _optimizers()
    sched = lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2)
    for _ in range(5):
        sched.step()
    saved = sched.state_dict()
    assert "optimizer" not in saved and saved["last_epoch"] == 5
    opt2, _ = _optimizers()
    for g, g2 in zip(opt.param_groups, opt2.param_groups, strict=True):
        g2["initial_lr"] = g["initial_lr"]
    other = lr_scheduler.CosineAnnealingWarmRestarts(opt2, T_0=3, T_mult=2, last_epoch=0)
    other.load_state_dict(saved)
    for _ in range(6):
        sched.step()
        other.step()
        assert other.get_last_lr() == sched.get_last_lr()
    # LambdaLR: functions aren't saved, as torch's
    opt3, topt3 = _optimizers()
    lam, tlam = lr_scheduler.LambdaLR(opt3, lambda e: 0.5), tsched.LambdaLR(topt3, lambda e: 0.5)
    assert lam.state_dict()["lr_lambdas"] == tlam.state_dict()["lr_lambdas"] == [None, None]
    # resuming without initial_lr in the groups raises, as torch's
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(_optimizers()[0], 3, last_epoch=4)


RESUMED = {
    "ExponentialLR": lambda m, o, e: m.ExponentialLR(o, gamma=0.9, last_epoch=e),
    "CosineAnnealingLR": lambda m, o, e: m.CosineAnnealingLR(o, T_max=10, eta_min=0.01, last_epoch=e),
    "LinearLR": lambda m, o, e: m.LinearLR(o, start_factor=0.1, total_iters=8, last_epoch=e),
    "PolynomialLR": lambda m, o, e: m.PolynomialLR(o, total_iters=10, power=2.0, last_epoch=e),
    "MultiplicativeLR": lambda m, o, e: m.MultiplicativeLR(o, lambda _: 0.95, last_epoch=e),
    "StepLR": lambda m, o, e: m.StepLR(o, step_size=3, gamma=0.5, last_epoch=e),
    # (resumed past several periods: the first step takes T_cur modulo the period, as torch's)
    "CosineAnnealingWarmRestarts": lambda m, o, e: m.CosineAnnealingWarmRestarts(o, T_0=3, last_epoch=e),
    "CosineAnnealingWarmRestarts-T_mult": lambda m, o, e: m.CosineAnnealingWarmRestarts(o, 2, T_mult=3, last_epoch=e),
}


@pytest.mark.parametrize("name", list(RESUMED))
def test_resuming_with_last_epoch_keeps_the_lr_as_torch(name: str) -> None:
    # a scheduler built with last_epoch >= 0 (resuming, the optimizer's lr already scheduled) leaves the lr as it
    # finds it in its constructor, then goes on from there, as torch's
    opt, topt = _optimizers()
    for o in (opt, topt):
        for g in o.param_groups:
            g["initial_lr"] = g["lr"]
            g["lr"] = g["lr"] * 0.7
    sched, tsch = RESUMED[name](lr_scheduler, opt, 5), RESUMED[name](tsched, topt, 5)
    lrs, tlrs = [sched.get_last_lr()], [tsch.get_last_lr()]
    for _ in range(12):
        for o, s in ((opt, sched), (topt, tsch)):
            o.step()
            s.step()
        lrs.append(sched.get_last_lr())
        tlrs.append(tsch.get_last_lr())
    np.testing.assert_allclose(np.array(lrs), np.array(tlrs), rtol=1e-7, atol=1e-12)
    assert sched.last_epoch == tsch.last_epoch


def _copy_groups(src, dst) -> None:
    # the hyperparameters a scheduler reads and writes (the lr, momentum or betas, initial_lr, max_lr, ...)
    for g, h in zip(src.param_groups, dst.param_groups, strict=True):
        for k, v in g.items():
            if k != "params":
                h[k] = tuple(v) if isinstance(v, (tuple, list)) else v


class _Halving:
    # a callable object as CyclicLR's scale_fn: its attributes are saved, as torch's
    def __init__(self) -> None:
        self.base = 2.0

    def __call__(self, x: float) -> float:
        return 1 / self.base ** (x - 1)


XLOAD = CASES | {
    "CyclicLR-scale_fn-object": (lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, scale_fn=_Halving()), {}),
}


@pytest.mark.parametrize("case", list(XLOAD))
def test_state_dict_loads_across_torch_and_uopkit(case: str) -> None:
    # a scheduler's state_dict() loads into the other library's scheduler (plain Python data in torch's layout, as
    # torch.save/torch_load carry it), both ways, and the lrs (and cycled momentum) go on as the source's would
    make, kwargs = XLOAD[case]
    kwargs = dict(kwargs)
    name = kwargs.pop("_opt", "SGD")
    ours, theirs = _optimizers(name, **kwargs)
    sched, tsch = make(lr_scheduler, ours), make(tsched, theirs)
    for _ in range(7):
        ours.step()
        theirs.step()
        sched.step()
        tsch.step()
    if isinstance(sched.state_dict().get("_scale_fn_custom"), dict):
        sched._scale_fn_custom.base = tsch._scale_fn_custom.base = 3.0
    # torch's into a fresh uopkit scheduler and ours into a fresh torch one
    ours2, theirs2 = _optimizers(name, **kwargs)
    sched2, tsch2 = make(lr_scheduler, ours2), make(tsched, theirs2)
    _copy_groups(theirs, ours2)
    _copy_groups(ours, theirs2)
    sched2.load_state_dict(tsch.state_dict())
    tsch2.load_state_dict(sched.state_dict())
    for _ in range(12):
        for o, s in ((ours, sched), (theirs, tsch), (ours2, sched2), (theirs2, tsch2)):
            o.step()
            s.step()
        for a, b in ((sched2, tsch), (tsch2, sched)):
            np.testing.assert_allclose(a.get_last_lr(), b.get_last_lr(), rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(_momenta(ours2), _momenta(theirs), rtol=1e-7)
        np.testing.assert_allclose(_momenta(theirs2), _momenta(ours), rtol=1e-7)


def test_torch_style_import_paths() -> None:
    from uopkit.nn.optim.lr_scheduler import OneCycleLR

    assert OneCycleLR is lr_scheduler.OneCycleLR and optim.lr_scheduler is lr_scheduler


def _train(jit: bool, name: str, make_sched: Callable, steps: int = 12) -> tuple[list[float], np.ndarray]:
    from uopkit.jit import TinyJit

    rng = np.random.default_rng(3)
    x, y = (
        Tensor(rng.standard_normal((8, 4)).astype(np.float32)),
        Tensor(rng.standard_normal((8, 2)).astype(np.float32)),
    )
    w = Tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), requires_grad=True)
    b = Tensor(np.zeros(2, np.float32), requires_grad=True)
    opt = getattr(optim, name)([{"params": [w]}, {"params": [b], "lr": 0.05}], lr=0.1, momentum=0.9) if name == "SGD" \
        else getattr(optim, name)([{"params": [w]}, {"params": [b], "lr": 0.05}], lr=0.1)  # fmt: skip
    sched = make_sched(opt)

    def step() -> Tensor:
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        return loss

    run = TinyJit(step) if jit else step
    losses = []
    for _ in range(steps):
        losses.append(run().item())
        sched.step()
    return losses, w.numpy()


@pytest.mark.parametrize(
    "name, make",
    [
        ("SGD", lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
        # (momentum cycled too: a 0-d tensor from the scheduler's construction on, before the capture)
        ("SGD", lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=12)),
        ("Adam", lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=12)),
        ("RAdam", lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=5)),
        # (Adafactor's rho = min(lr, 1 / sqrt(t)): the lr of each step and its step count, both read by the replay)
        ("Adafactor", lambda o: lr_scheduler.ExponentialLR(o, gamma=0.5)),
    ],
)
def test_jitted_step_reads_the_scheduled_lr(name: str, make: Callable) -> None:
    eager_losses, eager_w = _train(False, name, make)
    jit_losses, jit_w = _train(True, name, make)
    np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-6)
    np.testing.assert_allclose(jit_w, eager_w, rtol=1e-6, atol=1e-7)


def test_one_cycle_adam_training_matches_torch() -> None:
    # betas cycled by OneCycleLR: torch's bias correction 1 - beta1^t with the beta1 of each step
    w0 = np.array([[1.0, -2.0, 0.5], [0.3, 0.2, -1.0]], np.float32)
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    for name in ("Adam", "AdamW", "NAdam", "RAdam", "Adamax"):
        w.assign(Tensor(w0)).realize()
        with torch.no_grad():
            tw.copy_(torch.tensor(w0))
        opt, topt = getattr(optim, name)([w], lr=0.01), getattr(torch.optim, name)([tw], lr=0.01)
        sched = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20)
        tsch = tsched.OneCycleLR(topt, max_lr=0.1, total_steps=20)
        for _ in range(20):
            opt.zero_grad()
            topt.zero_grad()
            (w * w * w).sum().backward()
            (tw * tw * tw).sum().backward()
            opt.step()
            topt.step()
            sched.step()
            tsch.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_reduce_lr_on_plateau_after_add_param_group_as_torch() -> None:
    # one min_lr covers a group added later; a per-group list of them raises a clear error, as torch's
    opt, topt = _optimizers()
    sched, tsch = lr_scheduler.ReduceLROnPlateau(opt, patience=0), tsched.ReduceLROnPlateau(topt, patience=0)
    opt.add_param_group({"params": [Tensor([4.0], requires_grad=True)], "lr": 0.05})
    topt.add_param_group({"params": [torch.tensor([4.0], requires_grad=True)], "lr": 0.05})
    for _ in range(4):
        sched.step(1.0)
        tsch.step(1.0)
        assert sched.get_last_lr() == pytest.approx(tsch.get_last_lr(), rel=1e-7)
    opt2, _ = _optimizers()
    listed = lr_scheduler.ReduceLROnPlateau(opt2, patience=0, min_lr=[0.0, 0.0])
    opt2.add_param_group({"params": [Tensor([4.0], requires_grad=True)]})
    listed.step(1.0)
    with pytest.raises(RuntimeError, match="ReduceLROnPlateau: the optimizer has 3 param groups"):
        listed.step(1.0)


@pytest.mark.parametrize("owner", ["SequentialLR", "ChainedScheduler"])
def test_composites_refuse_reduce_lr_on_plateau(owner: str) -> None:
    # its step needs a metric the composite can't pass: refused when built, as torch's, not at the first step
    opt, _ = _optimizers()
    parts = [lr_scheduler.StepLR(opt, 2), lr_scheduler.ReduceLROnPlateau(opt)]
    with pytest.raises(ValueError, match=f"{owner} can't hold a ReduceLROnPlateau \\(at index 1\\)"):
        if owner == "SequentialLR":
            lr_scheduler.SequentialLR(opt, parts, milestones=[3])
        else:
            lr_scheduler.ChainedScheduler(parts)


@pytest.mark.parametrize(
    "make",
    [
        lambda s, o: s.StepLR(o, 2),
        lambda s, o: s.CosineAnnealingWarmRestarts(o, 3),
        lambda s, o: s.CyclicLR(o, 0.01, 0.1),
        lambda s, o: s.OneCycleLR(o, 0.1, total_steps=10),
        lambda s, o: s.ReduceLROnPlateau(o),
    ],
)
def test_a_model_given_for_the_optimizer_is_torchs_type_error(make: Callable) -> None:
    # (`StepLR(model, 10)`: an AttributeError about param_groups before)
    with pytest.raises(TypeError, match="is not an Optimizer"):
        make(tsched, torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="Linear is not an Optimizer"):
        make(lr_scheduler, nn.Linear(2, 2))


@pytest.mark.parametrize("mode", ["min", "max"])
def test_reduce_lr_on_plateau_state_dict_keys_are_torchs(mode: str) -> None:
    opt, topt = _optimizers()
    sched, tsch = lr_scheduler.ReduceLROnPlateau(opt, mode=mode), tsched.ReduceLROnPlateau(topt, mode=mode)
    ours, theirs = sched.state_dict(), tsch.state_dict()
    assert sorted(ours) == sorted(theirs)
    assert ours["mode_worse"] == theirs["mode_worse"] and ours["best"] == theirs["best"]

"""uopkit.nn.optim.swa_utils against torch.optim.swa_utils: AveragedModel (SWA, EMA per tensor and over lists, with
and without buffers), SWALR's lrs and state dict, update_bn's running statistics, on the same model and data."""

import doctest

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import swa_utils
from uopkit.nn.optim import SGD, lr_scheduler

torch = pytest.importorskip("torch")
tswa = torch.optim.swa_utils

RNG = np.random.default_rng(4)
BATCHES = [RNG.standard_normal((6, 3)).astype(np.float32) for _ in range(4)]


def test_docstring_examples():
    assert doctest.testmod(swa_utils).failed == 0


def _models():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ours = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def _same(ours_sd: dict, theirs_sd: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert list(ours_sd) == list(theirs_sd)
    for k, v in theirs_sd.items():
        np.testing.assert_allclose(ours_sd[k].numpy(), v.detach().numpy(), rtol=rtol, atol=atol, err_msg=k)


def _train(ours, theirs, averaged, taveraged, sched, tsched, steps: int = 6, swa_start: int = 2) -> None:
    opt, topt = SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)
    swa, tswalr = (sched(opt), tsched(topt)) if sched is not None else (None, None)
    for i in range(steps):
        x = BATCHES[i % len(BATCHES)]
        opt.zero_grad()
        topt.zero_grad()
        (ours(Tensor(x)) ** 2).mean().backward()
        (theirs(torch.from_numpy(x)) ** 2).mean().backward()
        opt.step()
        topt.step()
        if i >= swa_start:
            averaged.update_parameters(ours)
            taveraged.update_parameters(theirs)
            if swa is not None:
                swa.step()
                tswalr.step()
                assert swa.get_last_lr() == pytest.approx(tswalr.get_last_lr(), rel=1e-12)


def test_swa_averaged_model_update_bn_and_swalr_match_torch():
    ours, theirs = _models()
    averaged, taveraged = swa_utils.AveragedModel(ours), tswa.AveragedModel(theirs)
    _train(
        ours,
        theirs,
        averaged,
        taveraged,
        lambda o: swa_utils.SWALR(o, swa_lr=0.05, anneal_epochs=2),
        lambda o: tswa.SWALR(o, swa_lr=0.05, anneal_epochs=2),
    )
    assert averaged.n_averaged.item() == taveraged.n_averaged.item() == 4
    # torch's state dict keys ("n_averaged", "module.0.weight", ...): the buffers copied from the model
    _same(averaged.state_dict(), taveraged.state_dict())
    # the averaged model's BatchNorm statistics recomputed over a loader of (input, target) batches
    loader = [(x, 0) for x in BATCHES]
    swa_utils.update_bn([(Tensor(x), y) for x, y in loader], averaged)
    tswa.update_bn([(torch.from_numpy(x), y) for x, y in loader], taveraged)
    _same(averaged.state_dict(), taveraged.state_dict())
    assert averaged.module[1].momentum == taveraged.module[1].momentum == 0.1
    averaged.eval()
    taveraged.eval()
    out, tout = averaged(Tensor(BATCHES[0])), taveraged(torch.from_numpy(BATCHES[0]))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    # and the averaged model's state dict loads into torch's
    fresh = tswa.AveragedModel(_models()[1])
    fresh.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in averaged.state_dict().items()})
    assert fresh.n_averaged.item() == 4


@pytest.mark.parametrize("kind", ["ema-multi-buffers", "ema-per-tensor", "swa-multi", "custom"])
def test_averaging_functions_match_torch(kind):
    ours, theirs = _models()
    if kind == "ema-multi-buffers":
        kwargs, tkwargs = (
            {"multi_avg_fn": swa_utils.get_ema_multi_avg_fn(0.9), "use_buffers": True},
            {"multi_avg_fn": tswa.get_ema_multi_avg_fn(0.9), "use_buffers": True},
        )
    elif kind == "ema-per-tensor":
        kwargs, tkwargs = {"avg_fn": swa_utils.get_ema_avg_fn(0.8)}, {"avg_fn": tswa.get_ema_avg_fn(0.8)}
    elif kind == "swa-multi":
        kwargs = {"multi_avg_fn": swa_utils.get_swa_multi_avg_fn()}
        tkwargs = {"multi_avg_fn": tswa.get_swa_multi_avg_fn()}
    else:
        kwargs = tkwargs = {"avg_fn": lambda avg, cur, n: avg * 0.5 + cur * 0.5}
    averaged, taveraged = swa_utils.AveragedModel(ours, **kwargs), tswa.AveragedModel(theirs, **tkwargs)
    _train(ours, theirs, averaged, taveraged, None, None, steps=5, swa_start=1)
    _same(averaged.state_dict(), taveraged.state_dict())
    with pytest.raises(AssertionError, match="avg_fn or multi_avg_fn, not both"):
        swa_utils.AveragedModel(ours, avg_fn=swa_utils.get_swa_avg_fn(), multi_avg_fn=swa_utils.get_swa_multi_avg_fn())
    with pytest.raises(ValueError, match=r"decay must lie in \[0, 1\]"):
        swa_utils.get_ema_avg_fn(1.5)


@pytest.mark.parametrize("strategy, epochs", [("cos", 3), ("linear", 4), ("cos", 0)])
def test_swalr_after_another_scheduler_matches_torch(strategy, epochs):
    # the usual SWA schedule: cosine annealing first, SWALR from epoch 5 on; then its state dict both ways
    ours = SGD([{"params": [Tensor([1.0], requires_grad=True)]}, {"params": [Tensor([2.0], requires_grad=True)]}], 0.2)
    theirs = torch.optim.SGD(
        [{"params": [torch.ones(1, requires_grad=True)]}, {"params": [torch.ones(1, requires_grad=True)]}], 0.2
    )
    cos, tcos = lr_scheduler.CosineAnnealingLR(ours, T_max=20), torch.optim.lr_scheduler.CosineAnnealingLR(theirs, 20)
    swa = swa_utils.SWALR(ours, swa_lr=[0.05, 0.01], anneal_epochs=epochs, anneal_strategy=strategy)
    tswalr = tswa.SWALR(theirs, swa_lr=[0.05, 0.01], anneal_epochs=epochs, anneal_strategy=strategy)
    for epoch in range(12):
        ours.step()
        theirs.step()
        (swa if epoch >= 5 else cos).step()
        (tswalr if epoch >= 5 else tcos).step()
        assert [g["lr"] for g in ours.param_groups] == pytest.approx([g["lr"] for g in theirs.param_groups], rel=1e-12)
    state, tstate = swa.state_dict(), tswalr.state_dict()
    assert set(state) <= set(tstate) and "anneal_func" not in state
    swa.load_state_dict(tstate)
    tswalr.load_state_dict(state)
    assert swa.anneal_func(0.25) == pytest.approx(tswalr.anneal_func(0.25))
    with pytest.raises(ValueError, match="anneal_strategy"):
        swa_utils.SWALR(ours, 0.1, anneal_strategy="exp")

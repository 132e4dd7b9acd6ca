"""uopkit.nn.optim.Adafactor (nn/optim_more.py) against torch.optim.Adafactor: the same parameters and state step after
step for 0-d, 1-d (the full second moment) and 2-d, 3-d and 4-d parameters (the factored one: a row and a column
average over the last two dims), over the constructor's corners; torch's argument checks, state names and shapes, and
state dicts both ways."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.dtype import dtypes
from uopkit.nn.optim import Adafactor

torch = pytest.importorskip("torch")

SHAPES = [(7,), (4, 5), (3, 4, 6), (), (1, 8), (2, 1, 3, 5)]
DTYPES = {"float32": (dtypes.float32, torch.float32), "float64": (dtypes.float64, torch.float64),
          "float16": (dtypes.float16, torch.float16), "bfloat16": (dtypes.bfloat16, torch.bfloat16)}  # fmt: skip


def _pairs(dtype: str = "float32", seed: int = 0) -> tuple[list[Tensor], list[torch.Tensor]]:
    ours_dt, torch_dt = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours = [Tensor(v).cast(ours_dt).realize().requires_grad_() for v in values]
    theirs = [torch.tensor(v).to(torch_dt).requires_grad_() for v in values]
    return ours, theirs


def _set_grads(ours: list[Tensor], theirs: list[torch.Tensor], rng: np.random.Generator, scale: float = 1.0) -> None:
    for o, t in zip(ours, theirs, strict=True):
        g = (rng.standard_normal(t.shape) * scale).astype(np.float32)
        o.grad, t.grad = Tensor(g).cast(o.dtype), torch.tensor(g).to(t.dtype)


def _host(t: Tensor | torch.Tensor) -> np.ndarray:
    return (t.float().numpy() if isinstance(t, Tensor) else t.detach().float().numpy()).astype(np.float64)


def _check(ours: list[Tensor], theirs: list[torch.Tensor], rtol: float, atol: float) -> None:
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(_host(o), _host(t), rtol=rtol, atol=atol)


CASES = [
    {},
    {"lr": 0.1},
    {"lr": 0.5, "beta2_decay": -0.5, "eps": (1e-3, 1e-2), "d": 1.5, "weight_decay": 0.1},
    {"maximize": True, "weight_decay": 0.2},
    # (eps2 0: the step scales with the parameter's RMS alone; a tiny eps1)
    {"eps": (1e-30, 0.0)},
    # (d 5: the update's RMS is rarely clipped)
    {"lr": 0.3, "d": 5.0},
    # (beta2_decay 0: the second moment is the last step's g^2)
    {"beta2_decay": 0.0},
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kwargs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_steps_match_torch(kwargs: dict, dtype: str) -> None:
    ours, theirs = _pairs(dtype)
    opt, topt = Adafactor(ours, **kwargs), torch.optim.Adafactor(theirs, **kwargs)
    rng = np.random.default_rng(1)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-14}
    for _ in range(12):
        _set_grads(ours, theirs, rng)
        opt.step()
        topt.step()
        _check(ours, theirs, **tol)
    # torch's state names, shapes and values: row_var [..., m, 1] and col_var [..., 1, n] for 2 or more dims,
    # variance for 0-d and 1-d parameters
    for o, t in zip(ours, theirs, strict=True):
        state, tstate = opt.state[o], topt.state[t]
        assert set(state) == set(tstate)
        assert float(state["step"].item()) == float(tstate["step"].item()) == 12
        for key in set(tstate) - {"step"}:
            assert state[key].shape == tuple(tstate[key].shape), key
            np.testing.assert_allclose(_host(state[key]), _host(tstate[key]), rtol=1e-4, atol=1e-12, err_msg=key)


def test_small_gradients_meet_the_eps_floors_as_torchs() -> None:
    # gradients of 1e-5: the mean of the row factors falls under eps1 (float32's eps, the default) and is clamped
    ours, theirs = _pairs()
    opt, topt = Adafactor(ours, lr=0.1), torch.optim.Adafactor(theirs, lr=0.1)
    rng = np.random.default_rng(2)
    for _ in range(8):
        _set_grads(ours, theirs, rng, scale=1e-5)
        opt.step()
        topt.step()
        _check(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_float_parameters_step_as_torchs(dtype: str) -> None:
    # torch's step rounds each op to the parameter's dtype; ours computes some of them in float32 and rounds once:
    # the parameters agree to about one unit in the last place of their largest element
    ours, theirs = _pairs(dtype)
    kwargs = {"lr": 0.1, "weight_decay": 0.1}
    opt, topt = Adafactor(ours, **kwargs), torch.optim.Adafactor(theirs, **kwargs)
    rng = np.random.default_rng(3)
    for _ in range(10):
        _set_grads(ours, theirs, rng)
        opt.step()
        topt.step()
    ulp = 2.0**-10 if dtype == "float16" else 2.0**-7
    for o, t in zip(ours, theirs, strict=True):
        assert o.dtype == DTYPES[dtype][0]
        scale = max(np.abs(_host(t)).max(), 1e-3)
        assert np.abs(_host(o) - _host(t)).max() <= 1.5 * ulp * scale


def test_groups_missing_gradients_lr_changes_and_state_dicts_as_torchs() -> None:
    ours, theirs = _pairs()
    groups = [{"params": ours[:3]}, {"params": ours[3:], "lr": 0.05, "weight_decay": 0.1, "maximize": True}]
    tgroups = [{"params": theirs[:3]}, {"params": theirs[3:], "lr": 0.05, "weight_decay": 0.1, "maximize": True}]
    opt, topt = Adafactor(groups, lr=0.2), torch.optim.Adafactor(tgroups, lr=0.2)
    rng = np.random.default_rng(4)
    for i in range(10):
        _set_grads(ours, theirs, rng)
        if i % 3 == 1:
            # (a parameter without a gradient skips the step and keeps its own step count)
            ours[2].grad = theirs[2].grad = None
        if i == 4:
            opt.param_groups[0]["lr"] = topt.param_groups[0]["lr"] = 0.03
        opt.step()
        topt.step()
        _check(ours, theirs, rtol=1e-5, atol=1e-6)
        if i == 5:
            # ours saved and loaded into a fresh optimizer, torch's loaded into another: both go on as before
            saved = opt.state_dict()
            opt = Adafactor([{"params": ours[:3]}, {"params": ours[3:]}], lr=1.0)
            opt.load_state_dict(saved)
    assert float(opt.state[ours[2]]["step"].item()) == float(topt.state[theirs[2]]["step"].item()) == 7
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert {k: v for k, v in sd["param_groups"][1].items() if k != "lr"} == {
        k: v for k, v in tsd["param_groups"][1].items() if k != "lr"
    }
    # torch's state dict (its tensors as numpy arrays) into ours
    loaded = {"state": {i: {k: v.numpy() for k, v in s.items()} for i, s in tsd["state"].items()},
              "param_groups": tsd["param_groups"]}  # fmt: skip
    fresh = Adafactor([{"params": ours[:3]}, {"params": ours[3:]}])
    fresh.load_state_dict(loaded)
    for _ in range(3):
        _set_grads(ours, theirs, rng)
        fresh.step()
        topt.step()
        _check(ours, theirs, rtol=1e-5, atol=1e-6)


def test_defaults_signature_and_argument_checks_as_torchs() -> None:
    import inspect

    w = Tensor([1.0, 2.0], requires_grad=True)
    assert Adafactor([w]).defaults == torch.optim.Adafactor([torch.zeros(2, requires_grad=True)]).defaults
    assert list(inspect.signature(Adafactor).parameters) == list(inspect.signature(torch.optim.Adafactor).parameters)
    for kwargs, message in [
        ({"lr": -1.0}, "learning rate must be >= 0"),
        ({"beta2_decay": 0.5}, "beta2_decay must be <= 0"),
        ({"eps": (-1.0, 1e-3)}, "eps"),
        ({"eps": (None, -1.0)}, "eps"),
        ({"d": 0.5}, "clipping threshold d must be >= 1"),
        ({"weight_decay": -1.0}, "weight_decay must be >= 0"),
        ({"lr": Tensor([0.1, 0.2])}, "one element"),
    ]:
        with pytest.raises(ValueError):
            tkwargs = {k: torch.tensor(v.numpy()) if isinstance(v, Tensor) else v for k, v in kwargs.items()}
            torch.optim.Adafactor([torch.zeros(2, requires_grad=True)], **tkwargs)
        with pytest.raises(ValueError, match=f"Adafactor: .*{message}"):
            Adafactor([w], **kwargs)

"""nn.optim.LBFGS against torch.optim.LBFGS: the iterates on Rosenbrock's function (with and without the strong-Wolfe
line search, a short history that drops pairs, max_iter and max_eval), a small regression network, the number of
closure evaluations, resuming from a state dict (ours and torch's), and the errors."""

import doctest

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import lbfgs
from uopkit.nn.optim import LBFGS

torch = pytest.importorskip("torch")


def test_docstring_examples():
    assert doctest.testmod(lbfgs).failed == 0


def _rosenbrock(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def _run(lib, start, steps, **options):
    x = (
        torch.tensor(start, dtype=torch.float64, requires_grad=True)
        if lib == "torch"
        else Tensor(np.array(start, np.float64), requires_grad=True)
    )
    opt = (torch.optim.LBFGS if lib == "torch" else LBFGS)([x], **options)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = _rosenbrock(x)
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach() if lib == "torch" else opt.step(closure)) for _ in range(steps)]
    value = x.detach().numpy() if lib == "torch" else x.numpy()
    return value, losses, calls[0], opt


@pytest.mark.parametrize(
    "steps, options",
    [
        # (without a line search the unit steps along Rosenbrock's valley amplify the last bits of a dot product, in
        # both: 1.5e-13 apart after 20 iterations, 5e-11 after 40, 7e-7 after 60, 1.3e-4 after 80)
        (2, {}),
        (4, {"line_search_fn": "strong_wolfe"}),
        (4, {"line_search_fn": "strong_wolfe", "history_size": 2, "max_iter": 7}),
        (4, {"lr": 0.5, "history_size": 3, "max_iter": 5, "max_eval": 4}),
        # the line search takes at most what is left of max_eval (torch >= 2.5)
        (3, {"line_search_fn": "strong_wolfe", "max_iter": 1}),
        (3, {"line_search_fn": "strong_wolfe", "max_iter": 2}),
        (2, {"line_search_fn": "strong_wolfe", "max_iter": 5, "max_eval": 5}),
        # tolerance_change is the iterations' stopping test only: torch's line search keeps its own 1e-9, so a large
        # one doesn't end the search (at t = 0, no move) before its first zoom
        (2, {"line_search_fn": "strong_wolfe", "tolerance_change": 1.0}),
        (3, {"line_search_fn": "strong_wolfe", "tolerance_change": 1e-2, "max_iter": 4}),
    ],
)
def test_rosenbrock_iterates_match_torch(steps, options):
    ours = _run("uopkit", [-1.5, 2.0], steps, **options)
    theirs = _run("torch", [-1.5, 2.0], steps, **options)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-9, atol=1e-12)
    assert ours[2] == theirs[2]
    assert ours[3].state_dict()["state"][0]["func_evals"] == theirs[3].state_dict()["state"][0]["func_evals"]
    assert ours[3].state_dict()["state"][0]["n_iter"] == theirs[3].state_dict()["state"][0]["n_iter"]


def test_strong_wolfe_solves_rosenbrock():
    x, losses, _, _ = _run("uopkit", [-1.5, 2.0], 5, line_search_fn="strong_wolfe")
    # (it stops where the loss changes by less than tolerance_change, as torch's: 2e-6 from the minimum)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-5)
    assert losses[-1] < 1e-9


def test_regression_network_float32():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((32, 3)).astype(np.float32), rng.standard_normal((32, 1)).astype(np.float32)
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ours = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    results = []
    for model, X_, Y_, opt_cls in (
        (ours, Tensor(X), Tensor(Y), LBFGS),
        (theirs, torch.tensor(X), torch.tensor(Y), torch.optim.LBFGS),
    ):
        opt = opt_cls(model.parameters(), max_iter=10, history_size=5, line_search_fn="strong_wolfe")

        def closure(model=model, opt=opt, X_=X_, Y_=Y_):
            opt.zero_grad()
            loss = ((model(X_) - Y_) ** 2).mean()
            loss.backward()
            return loss

        losses = [float(opt.step(closure)) for _ in range(3)]
        results.append((losses, float(closure())))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=2e-3)
    assert results[0][1] < results[0][0][0]


def test_resume_from_a_state_dict_ours_and_torchs():
    whole = _run("uopkit", [-1.5, 2.0], 3, history_size=4, max_iter=4)
    first = _run("uopkit", [-1.5, 2.0], 2, history_size=4, max_iter=4)
    theirs = _run("torch", [-1.5, 2.0], 2, history_size=4, max_iter=4)
    for saved in (first[3].state_dict(), theirs[3].state_dict()):
        x = Tensor(first[0].copy(), requires_grad=True)
        opt = LBFGS([x], history_size=4, max_iter=4)
        opt.load_state_dict(saved)

        def closure(x=x, opt=opt):
            opt.zero_grad()
            loss = _rosenbrock(x)
            loss.backward()
            return loss

        opt.step(closure)
        np.testing.assert_allclose(x.numpy(), whole[0], rtol=1e-9)


def test_errors():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="needs a closure"):
        LBFGS([x]).step()
    with pytest.raises(ValueError, match="strong_wolfe"):
        LBFGS([x], line_search_fn="backtracking")
    y = Tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="LBFGS takes a single parameter group, got 2"):
        LBFGS([{"params": [x]}, {"params": [y], "lr": 0.1}])


def test_params_attribute_reads_the_state_as_torch():
    # PINN training loops read the iteration count as opt.state[opt._params[0]]["n_iter"] (torch's private list)
    counts = []
    for lib in ("torch", "uopkit"):
        start = np.array([-1.2, 1.0], np.float64)
        x = torch.tensor(start, requires_grad=True) if lib == "torch" else Tensor(start, requires_grad=True)
        opt = (torch.optim.LBFGS if lib == "torch" else LBFGS)([x], max_iter=7)
        assert opt._params[0] is x and len(opt._params) == 1

        def closure(opt=opt, x=x):
            opt.zero_grad()
            loss = _rosenbrock(x)
            loss.backward()
            return loss

        opt.step(closure)
        opt.step(closure)
        counts.append((int(opt.state[opt._params[0]]["n_iter"]), int(opt.state[opt._params[0]]["func_evals"])))
    assert counts[0] == counts[1]

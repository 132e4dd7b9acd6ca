"""Tensor hooks and retain_grad() in backward passes asked for some inputs only (autograd.grad, backward(inputs=...))
and across backward calls, against torch: which hooks run, what each sees, what grad() returns for a hooked input and
which retained tensors get `.grad` (tensor/tensor_hooks.py's `reaching`, autograd.grad, Tensor.backward)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import uopkit

from .test_shared_value_hooks import _leaf, _values  # rounded values of either library; a leaf of either

torch = pytest.importorskip("torch")


def _autograd(lib: str) -> Any:
    return uopkit.autograd if lib == "uopkit" else torch.autograd


def _both(run: Callable[[str], Any]) -> None:
    ours, theirs = run("uopkit"), run("torch")
    assert ours == theirs, f"\nuopkit {ours}\ntorch  {theirs}"


@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("hooks", ["returns", "none_then_returns"])
@pytest.mark.parametrize(
    "mode", ["grad_a", "grad_a_x", "grad_x", "inputs_a", "inputs_x", "inputs_a_x", "autograd_backward_a"]
)
def test_hooked_non_leaf_as_an_input_as_torchs(mode: str, hooks: str, retain: bool) -> None:
    # grad() of a hooked non-leaf gives the gradient after its hooks when nothing flows on from it to another input,
    # before them when something does (torch runs the hooks with the node then); retained tensors on the way get
    # `.grad` in grad() too; a non-leaf in backward(inputs=...) is retained from then on
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, 2.0])
        a = x * 3
        calls: list = []
        if hooks == "none_then_returns":
            a.register_hook(lambda g: (calls.append(("first", _values(g))), None)[1])
        a.register_hook(lambda g: (calls.append(("second", _values(g))), g * 2)[1])
        if retain:
            a.retain_grad()
        loss = (a * a).sum()
        out = None
        if mode.startswith("grad"):
            ins = {"grad_a": [a], "grad_a_x": [a, x], "grad_x": [x]}[mode]
            out = [_values(g) for g in _autograd(lib).grad(loss, ins)]
        elif mode == "autograd_backward_a":
            _autograd(lib).backward(loss, inputs=[a])
        else:
            loss.backward(inputs={"inputs_a": [a], "inputs_x": [x], "inputs_a_x": [a, x]}[mode])
        retained = _values(a.grad) if a.retains_grad else None
        return calls, out, retained, _values(x.grad), a.retains_grad

    _both(run)


@pytest.mark.parametrize(
    "mode", ["grad_x", "grad_a", "grad_c", "grad_a_c", "inputs_x", "inputs_a", "inputs_b_x", "all"]
)
def test_hooks_off_the_way_to_the_inputs_dont_run_as_torchs(mode: str) -> None:
    # only the nodes on the way to the inputs run in torch: a hook (or retain_grad) elsewhere is left out
    def run(lib: str) -> Any:
        x, y = _leaf(lib, [1.0, 2.0]), _leaf(lib, [3.0, 4.0])
        a, b = x * 3, y * 5
        c = a * b
        calls: list = []
        for name, t in (("a", a), ("b", b), ("c", c)):
            t.register_hook(lambda g, name=name: (calls.append((name, _values(g))), g * 2)[1])
            t.retain_grad()
        loss = (c * c).sum() + a.sum()
        out = None
        if mode.startswith("grad"):
            ins = {"grad_x": [x], "grad_a": [a], "grad_c": [c], "grad_a_c": [a, c]}[mode]
            out = [_values(g) for g in _autograd(lib).grad(loss, ins)]
        elif mode == "all":
            loss.backward()
        else:
            loss.backward(inputs={"inputs_x": [x], "inputs_a": [a], "inputs_b_x": [b, x]}[mode])
        return sorted(calls), out, _values(x.grad), _values(y.grad), [_values(t.grad) for t in (a, b, c)]

    _both(run)


def test_register_hook_on_a_stored_value_as_torchs() -> None:
    # a value a realize stored still requires grad: its hook runs on its gradient (it raised "doesn't require grad")
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, 2.0])
        y = x * 2
        if lib == "uopkit":
            y.realize()
        calls: list = []
        y.register_hook(lambda g: (calls.append(_values(g)), g * 3)[1])
        (y * y).sum().backward()
        return calls, _values(x.grad)

    _both(run)


def test_leaf_hooks_over_two_backward_calls_as_torchs() -> None:
    # a leaf's hook scales each backward's share before it is added into `.grad`; the post-accumulate hook sees the
    # sum so far; a removed hook no longer runs; a hook that changes the gradient in place changes what is added
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, 2.0])
        seen: list = []
        handle = x.register_hook(lambda g: g * 2)
        x.register_post_accumulate_grad_hook(lambda p: seen.append(_values(p.grad)))
        (x * x).sum().backward()
        (x * 3).sum().backward()
        handle.remove()
        x.register_hook(lambda g: g.mul_(10))
        (x * 3).sum().backward()
        return seen, _values(x.grad)

    _both(run)


@pytest.mark.parametrize("remove", [(), (1, 2)])
def test_hooks_on_a_loops_state_as_torchs(remove: tuple[int, ...]) -> None:
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, 2.0])
        h, calls, handles = x, [], []
        for i in range(4):
            h = h * 1.5 + x
            handles.append(h.register_hook(lambda g, i=i: (calls.append((i, _values(g))), g * (1 + 0.25 * i))[1]))
            h.retain_grad()
        for i in remove:
            handles[i].remove()
        h.sum().backward()
        return calls, _values(x.grad), _values(h.grad)

    _both(run)

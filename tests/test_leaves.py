"""Leaves and requires_grad flags (uopkit.tensor.leaves) against torch's table: is_leaf, requires_grad, the setter and
requires_grad_(), retain_grad() and detach_() on leaves, frozen leaves, computed values and views; raising where torch
raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")


class _Lib:
    def __init__(self, is_torch: bool) -> None:
        self.torch = is_torch

    def leaf(self, requires_grad: bool = False) -> Any:
        a = np.array([1.0, 2.0], np.float32)
        return torch.tensor(a, requires_grad=requires_grad) if self.torch else Tensor(a, requires_grad=requires_grad)


def _outcome(fn: Callable[[_Lib], Any], lib: _Lib) -> Any:
    # what a call gives, or the type of what it raises (the messages are each library's own)
    try:
        return fn(lib)
    except (RuntimeError, TypeError) as e:
        return (type(e).__name__,)


def _both(fn: Callable[[_Lib], Any]) -> tuple[Any, Any]:
    return _outcome(fn, _Lib(False)), _outcome(fn, _Lib(True))


def _flags(t: Any) -> tuple[bool, bool, bool]:
    return t.requires_grad, t.is_leaf, t.grad_fn is None


def _frozen_then_computed(lib: _Lib) -> Any:
    w = lib.leaf(True)
    w.requires_grad_(False)
    return _flags(w), _flags(w * 2)


def _frozen_then_backward(lib: _Lib) -> Any:
    w = lib.leaf(True)
    w.requires_grad_(False)
    (w * 2).sum().backward()


def _frozen_one_of_two(lib: _Lib) -> Any:
    a, b = lib.leaf(True), lib.leaf(True)
    a.requires_grad_(False)
    (a * b).sum().backward()
    return _flags(a * b), a.grad is None, b.grad.tolist()


def _frozen_then_thawed(lib: _Lib) -> Any:
    w = lib.leaf(True)
    w.requires_grad_(False)
    w.requires_grad_(True)
    (w * 3).sum().backward()
    return _flags(w * 2), w.grad.tolist()


def _frozen_and_dropped(lib: _Lib) -> Any:
    w = lib.leaf(True)
    w.requires_grad_(False)
    y = w * 2
    del w
    return _flags(y)


def _setter_on_computed(value: bool) -> Callable[[_Lib], Any]:
    def run(lib: _Lib) -> Any:
        y = lib.leaf(True) * 2
        y.requires_grad = value

    return run


def _method_on_computed(value: bool) -> Callable[[_Lib], Any]:
    def run(lib: _Lib) -> Any:
        x = lib.leaf(True)
        y = x * 2
        y.requires_grad_(value)
        y.sum().backward()
        return _flags(y), y.grad is None, x.grad.tolist()

    return run


def _computed_without_grad_given_it(lib: _Lib) -> Any:
    c = lib.leaf() * 3
    before = _flags(c)
    c.requires_grad = True
    (c * c).sum().backward()
    c.requires_grad = False
    return before, c.grad.tolist(), _flags(c)


def _not_a_bool(value: Any, method: bool) -> Callable[[_Lib], Any]:
    def run(lib: _Lib) -> Any:
        t = lib.leaf()
        if method:
            t.requires_grad_(value)
        else:
            t.requires_grad = value

    return run


def _retain_grad_on(kind: str) -> Callable[[_Lib], Any]:
    def run(lib: _Lib) -> Any:
        x = lib.leaf(True)
        t = {"leaf": x, "computed": x * 3, "no_grad_leaf": lib.leaf(), "no_grad_computed": lib.leaf() * 3}[kind]
        t.retain_grad()
        (t * t).sum().backward()
        return t.grad.tolist(), x.grad.tolist() if x.grad is not None else None

    return run


def _retained_then_setter(lib: _Lib) -> Any:
    y = lib.leaf(True) * 3
    y.retain_grad()
    y.requires_grad = False


def _detach_in_place(kind: str) -> Callable[[_Lib], Any]:
    def run(lib: _Lib) -> Any:
        x = lib.leaf(True)
        t = {
            "leaf": x,
            "computed": x * 2,
            "view_of_leaf": x[0:1],
            "view_of_computed": (x * 2).reshape(2, 1),
            "detached": x.detach(),
        }[kind]
        t.detach_()
        return _flags(t)

    return run


@pytest.mark.parametrize(
    "case",
    [
        _frozen_then_computed,
        _frozen_then_backward,
        _frozen_one_of_two,
        _frozen_then_thawed,
        _frozen_and_dropped,
    ],
)
def test_a_frozen_leaf_counts_for_nothing_computed_from_it(case: Callable[[_Lib], Any]) -> None:
    # a value computed from a leaf frozen with requires_grad_(False) required grad (and backward() through it ran
    # silently): torch's is a leaf that doesn't, and backward() raises
    ours, theirs = _both(case)
    if isinstance(theirs, tuple) and theirs and theirs[0] == "RuntimeError":
        assert isinstance(ours, tuple) and ours[0] == "RuntimeError", ours
    else:
        assert ours == theirs


@pytest.mark.parametrize("value", [True, False])
def test_the_setter_on_a_computed_value_raises_as_torchs(value: bool) -> None:
    # y.requires_grad = True was accepted (made y a target of its own)
    ours, theirs = _both(_setter_on_computed(value))
    assert ours == theirs == ("RuntimeError",)
    with pytest.raises(RuntimeError, match="not a leaf"):
        _setter_on_computed(value)(_Lib(False))


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("value", [True, False])
def test_requires_grad_method_on_a_computed_value_is_torchs(value: bool) -> None:
    # True leaves it as it is (no .grad of its own), False raises
    ours, theirs = _both(_method_on_computed(value))
    assert ours == theirs


def test_a_value_computed_without_grad_is_a_leaf_that_can_be_given_it() -> None:
    ours, theirs = _both(_computed_without_grad_given_it)
    assert ours == theirs


@pytest.mark.parametrize("value", [None, 1, 0])
@pytest.mark.parametrize("method", [False, True], ids=["setter", "method"])
def test_requires_grad_must_be_a_bool(value: Any, method: bool) -> None:
    ours, theirs = _both(_not_a_bool(value, method))
    assert isinstance(ours, tuple) and isinstance(theirs, tuple) and ours[0] == theirs[0]


@pytest.mark.parametrize("kind", ["leaf", "computed", "no_grad_leaf", "no_grad_computed"])
def test_retain_grad_is_torchs(kind: str) -> None:
    # on a tensor that doesn't require grad it was accepted
    ours, theirs = _both(_retain_grad_on(kind))
    assert ours == theirs
    if theirs == ("RuntimeError",):
        with pytest.raises(RuntimeError, match="retain_grad: .* does not require grad"):
            _retain_grad_on(kind)(_Lib(False))


def test_a_retained_value_is_still_no_leaf() -> None:
    ours, theirs = _both(_retained_then_setter)
    assert ours == theirs == ("RuntimeError",)
    with pytest.raises(RuntimeError, match="not a leaf"):
        _retained_then_setter(_Lib(False))


@pytest.mark.parametrize("kind", ["leaf", "computed", "view_of_leaf", "view_of_computed", "detached"])
def test_detach_in_place_is_torchs(kind: str) -> None:
    # a view was detached in place, where torch raises
    ours, theirs = _both(_detach_in_place(kind))
    assert ours == theirs
    if theirs == ("RuntimeError",):
        with pytest.raises(RuntimeError, match=r"detach_: .* view"):
            _detach_in_place(kind)(_Lib(False))


def _same_view_twice_given_grad(lib: _Lib) -> Any:
    # `w[3]` of storage built twice is one node here: each leaf made of it must still get a gradient of its own
    # (they shared one, the sum of both; then the second was taken for a value computed from the first)
    w_np = np.arange(40, dtype=np.float32).reshape(10, 4)
    w = torch.tensor(w_np) if lib.torch else Tensor(w_np).realize()
    parts = [w[i].requires_grad_() for i in (1, 3, 3, 5)]
    weights = np.arange(16, dtype=np.float32).reshape(4, 4)
    stack = torch.stack if lib.torch else Tensor.stack
    (stack(parts) * (torch.tensor(weights) if lib.torch else Tensor(weights))).sum().backward()
    return [[p.is_leaf, p.grad.tolist()] for p in parts]


def test_leaves_made_of_the_same_view_get_gradients_of_their_own() -> None:
    ours, theirs = _both(_same_view_twice_given_grad)
    assert ours == theirs


def test_backward_of_a_realized_value_whose_leaves_are_gone_runs_as_torchs() -> None:
    # `x = Tensor.ones(2, requires_grad=True).softmax(0); x.realize()`: the leaf is a temporary nobody holds; torch's
    # backward computes gradients no one can read, ours raised "no tensor with requires_grad=True was used" (seen in
    # OneHotCategoricalStraightThrough(logits=<a temporary>).rsample().sum().backward()), and a retained grad is set
    x = (Tensor.ones(2, requires_grad=True) * 3).softmax(0)
    x.retain_grad()
    x.realize()
    assert x.requires_grad and not x.is_leaf
    (x * x).sum().backward()
    tx = (torch.ones(2, requires_grad=True) * 3).softmax(0)
    tx.retain_grad()
    (tx * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    y = Tensor.ones(3, requires_grad=True).exp()
    y.realize()
    y.sum().backward()
    with pytest.raises(RuntimeError, match="no tensor with requires_grad=True"):
        Tensor([1.0, 2.0]).sum().realize().backward()


def test_hooks_run_on_a_value_whose_leaves_are_gone_as_torchs() -> None:
    # torch runs the whole graph behind the loss, so a hook on a value computed from a temporary leaf nobody holds is
    # called with its gradient; ours returned before walking the graph when no live leaf wanted a gradient
    def run(lib: Any) -> list[Any]:
        calls: list[Any] = []
        x = (lib.ones(2, requires_grad=True) * 3).softmax(0)
        x.register_hook(lambda g: calls.append(("x", g.tolist())))
        y = x * 2
        y.register_hook(lambda g: calls.append(("y", g.tolist())))
        (y * y).sum().backward()
        return calls

    assert run(Tensor) == run(torch) == [("y", [2.0, 2.0]), ("x", [4.0, 4.0])]

"""Hooks and retain_grad() on tensors that are one graph node (nodes are hash-consed: `a = x * 2; b = x * 2`, a
sub-module called twice on one input), alive or gone by backward(), against torch: each tensor's hooks run on the
gradient through that tensor only, a returned gradient replaces it for that tensor only, and `.grad` of each retained
one is its own (tensor/tensor_hooks.py's own nodes, gradient.py's `OwnNode`)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, nn

torch = pytest.importorskip("torch")


def _values(t: Any) -> list | None:
    if t is None:
        return None
    return np.round(np.asarray(t.detach().float().numpy(), dtype=np.float64), 4).tolist()


def _leaf(lib: str, values: list) -> Any:
    return Tensor(values, requires_grad=True) if lib == "uopkit" else torch.tensor(values, requires_grad=True)


def _both(run: Callable[[str], Any]) -> None:
    ours, theirs = run("uopkit"), run("torch")
    assert ours == theirs, f"\nuopkit {ours}\ntorch  {theirs}"


@pytest.mark.parametrize("alive", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("returns", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.usefixtures("gc_of_this_test")
def test_hooks_on_one_value_run_per_tensor_as_torchs(alive: tuple[bool, bool], returns: tuple[bool, bool]) -> None:
    # a and b are one node here; the loss reads both, only a, or only b; the tensors are kept or dropped before
    # backward (a hook on a dropped one still runs, as torch's); retain_grad() on both gives each its own .grad
    for uses in ("both", "a", "b"):
        for retain in (False, True):

            def run(lib: str, uses: str = uses, retain: bool = retain) -> Any:
                x = _leaf(lib, [1.0, 2.0])
                calls: list = []
                kept: dict = {}

                def forward() -> Any:
                    a, b = x * 2, x * 2
                    a.register_hook(lambda g: (calls.append(("a", _values(g))), g * 3 if returns[0] else None)[1])
                    b.register_hook(lambda g: (calls.append(("b", _values(g))), g * 5 if returns[1] else None)[1])
                    if retain:
                        a.retain_grad()
                        b.retain_grad()
                    loss = {"both": (a * 7).sum() + (b * 11).sum(), "a": (a * 7).sum(), "b": (b * 11).sum()}[uses]
                    kept.update({k: t for k, t, keep in (("a", a, alive[0]), ("b", b, alive[1])) if keep})
                    return loss

                loss = forward()
                gc.collect()
                loss.backward()
                grads = [_values(kept[k].grad) if k in kept else None for k in "ab"] if retain else None
                return calls, _values(x.grad), grads

            _both(run)


@pytest.mark.parametrize("read", ["a", "b", "loss", "all"])
def test_hooks_on_one_value_read_before_backward_as_torchs(read: str) -> None:
    # reading a value (or the loss) realizes it; backward follows it back, and each tensor still gets its own share
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, -2.0])
        calls: list = []
        a, b = x.exp(), x.exp()
        a.register_hook(lambda g: (calls.append(("a", _values(g))), g * 3)[1])
        b.retain_grad()
        b.register_hook(lambda g: (calls.append(("b", _values(g))), g * 5)[1])
        a.retain_grad()
        if read in ("a", "all"):
            _values(a)
        loss = (a * 7).sum() + (b * b).sum()
        if read in ("b", "all"):
            _values(b)
        if read in ("loss", "all"):
            _values(loss)
        loss.backward()
        return calls, _values(x.grad), _values(a.grad), _values(b.grad)

    _both(run)


@pytest.mark.usefixtures("gc_of_this_test")
def test_a_sub_module_called_twice_runs_each_calls_hook_as_torchs() -> None:
    # a hook registered on an intermediate inside forward(); the module is called twice on one input, so both calls'
    # intermediates are one node here; each call's hook sees its own call's gradient, and its result flows on
    def run(lib: str) -> Any:
        torch.manual_seed(0)
        ref = torch.nn.Linear(3, 3)
        calls: list = []

        class Block((nn if lib == "uopkit" else torch.nn).Module):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.lin = (nn if lib == "uopkit" else torch.nn).Linear(3, 3)

            def forward(self, x: Any) -> Any:
                h = self.lin(x).tanh()
                h.register_hook(lambda g: (calls.append(_values(g)), g * 2)[1])
                return h

        block = Block()
        if lib == "uopkit":
            block.lin.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
        else:
            block.lin.load_state_dict(ref.state_dict())
        xv = [[0.1, 0.2, -0.3], [0.5, -0.1, 0.2]]
        x = Tensor(xv) if lib == "uopkit" else torch.tensor(xv)
        loss = (block(x) * 3).sum() + (block(x) ** 2).sum()
        gc.collect()
        loss.backward()
        return sorted(calls), _values(block.lin.weight.grad), _values(block.lin.bias.grad)

    _both(run)


def test_a_forward_run_again_with_two_hooked_copies_as_torchs() -> None:
    # the same forward on the same input, the weights updated in place, with earlier losses kept: every step builds
    # the same nodes again; each backward runs only its own step's two hooks, each with its own share
    def run(lib: str) -> Any:
        w = _leaf(lib, [[0.5, -1.0], [2.0, 0.25]])
        x = Tensor([[1.0, 1.0]] * 3) if lib == "uopkit" else torch.tensor([[1.0, 1.0]] * 3)
        calls, kept, grads = [], [], []
        for i in range(3):
            w.grad = None
            h = (x @ w).tanh()
            h.register_hook(lambda g, i=i: (calls.append((i, "h", _values(g.sum()))), g * 3)[1])
            h2 = (x @ w).tanh()
            h2.register_hook(lambda g, i=i: (calls.append((i, "h2", _values(g.sum()))), g * 2)[1])
            loss = (h * h).sum() + h2.sum()
            del h, h2
            loss.backward()
            kept.append(loss)
            grads.append(_values(w.grad))
            with uopkit.no_grad() if lib == "uopkit" else torch.no_grad():
                w -= 0.1 * w.grad
        return calls, grads

    _both(run)


def test_autograd_grad_and_double_backward_through_hooked_copies_as_torchs() -> None:
    def run(lib: str) -> Any:
        autograd = uopkit.autograd if lib == "uopkit" else torch.autograd
        x = _leaf(lib, [1.0, 2.0])
        calls: list = []
        a, b = x * x, x * x
        a.register_hook(lambda g: (calls.append("a"), g * 3)[1])
        b.register_hook(lambda g: (calls.append("b"), g * 5)[1])
        b.retain_grad()
        loss = (a * x).sum() + (b * b).sum()
        (gb,) = autograd.grad(loss, b, retain_graph=True)
        # (a grad() for b alone runs b's hooks only: a's node is not on the way to b)
        first = sorted(calls)
        calls.clear()
        (gx,) = autograd.grad(loss, x, create_graph=True)
        gx.sum().backward()
        return first, sorted(calls), _values(gb), _values(gx), _values(x.grad)

    _both(run)


def test_post_accumulate_grad_hook_sees_the_gradient_through_hooked_copies_as_torchs() -> None:
    def run(lib: str) -> Any:
        x = _leaf(lib, [1.0, 2.0])
        seen: list = []
        x.register_post_accumulate_grad_hook(lambda p: seen.append(_values(p.grad)))
        a, b = x * 2, x * 2
        a.register_hook(lambda g: g * 3)
        b.register_hook(lambda g: g * 5)
        ((a * 7).sum() + (b * 11).sum()).backward()
        return seen

    _both(run)


def test_hooked_copy_keeps_its_values_and_grad_fn() -> None:
    # the own node changes no value: b reads as a does, and its grad_fn names the op that computed it
    x = Tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2, x * 2
    a.register_hook(lambda g: g)
    b.register_hook(lambda g: g)
    assert b.grad_fn.name() == a.grad_fn.name() == "MULBackward"
    assert not b.is_leaf and b.requires_grad
    assert b.tolist() == a.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("use", ["backward", "grad"])
@pytest.mark.parametrize("what", ["hooks", "retain", "both"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_hooks_on_one_half_float_value_run_per_tensor_as_torchs(dtype: str, what: str, use: str) -> None:
    # a and b are one value, bfloat16 (read as its bits) or float16; each tensor's hooks and `.grad` see only the
    # gradient through it

    def run(lib: str) -> Any:
        if lib == "uopkit":
            x = Tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtype).requires_grad_()
            w1, w2 = Tensor([[1.0, 2.0], [3.0, 5.0]], dtype=dtype), Tensor([[7.0, 11.0], [13.0, 17.0]], dtype=dtype)
        else:
            tdt = getattr(torch, dtype) if dtype else None
            x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=tdt, requires_grad=True)
            w1, w2 = (
                torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=tdt),
                torch.tensor([[7.0, 11.0], [13.0, 17.0]], dtype=tdt),
            )
        a, b = x * 2, x * 2
        calls: list = []
        if what in ("hooks", "both"):
            a.register_hook(lambda g: (calls.append(("a", _values(g))), g * 3)[1])
            b.register_hook(lambda g: (calls.append(("b", _values(g))), g * 5)[1])
        if what in ("retain", "both"):
            a.retain_grad()
            b.retain_grad()
        loss = (a * w1).sum() + (b * w2).sum()
        if use == "backward":
            loss.backward()
            got = _values(x.grad)
        else:
            (g,) = (uopkit.autograd if lib == "uopkit" else torch.autograd).grad(loss, x)
            got = _values(g)
        retained = [_values(a.grad), _values(b.grad)] if what != "hooks" else None
        return sorted(calls), got, retained

    _both(run)


def test_a_view_of_one_of_two_stored_hooked_values_still_sees_its_writes():
    # `a = x * 2; b = x * 2; a.realize()` puts both on one buffer; hooks on both must not move b off it (a node of its
    # own over the storage would hide a later write into b from the view taken before: [2, 4] where torch's is [3, 5]).
    # Their hooks still share the gradient there (a known difference, tensor_hooks.own_node)
    x = Tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2, x * 2
    a.realize()
    v = b[0:2]
    a.register_hook(lambda g: g * 3)
    b.register_hook(lambda g: g * 5)
    ((a * a).sum() + (b * 7).sum()).backward()
    with Tensor.no_grad():
        b.add_(1)
    assert v.tolist() == [3.0, 5.0]
    assert a.tolist() == [2.0, 4.0]

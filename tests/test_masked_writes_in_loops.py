"""A time loop that updates its state in place through masks and index lists every step (a physics step: move, add
to the position, bounce where it crossed a wall), then one backward() through every step, compared with PyTorch.
torch raises only where a value its backward saved was overwritten since (a product of two tensors saves both);
here the gradient reads what the forward pass read, so every other case must give torch's gradient, not raise and not
read the contents a later write left."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")

V0 = np.array([[1.0, 2.0], [3.0, -4.0], [-0.5, 0.7]], np.float32)


def _new(lib: Any, values: Any, **kw: Any) -> Any:
    a = np.asarray(values)
    return torch.tensor(a, **kw) if lib is torch else Tensor(a, **kw)


def _write(lib: Any, v: Any, p: Any, how: str) -> None:
    # the step's in-place write into v, through a mask found from p (realized to index with, where it is a bool index)
    below = p[..., 1] < 0
    if how == "mask_col_mul":
        v[below, 1] *= -0.7
    elif how == "mask_col_add":
        v[below, 1] += 0.3
    elif how == "mask_col_div":
        v[below, 1] /= 2.0
    elif how == "mask_col_set":
        v[below, 1] = 0.25
    elif how == "mask_rows_mul":
        v[below] *= -0.5
    elif how == "mask_2d_mul":
        v[p < 0.05] *= -0.5
    elif how == "mask_other_axis":
        v[0, p[0] < 0.5] *= 2.0
    elif how == "col_mul":
        v[:, 1] *= -0.7
    elif how == "col_set_from_itself":
        v[:, 1] = v[:, 1] * -0.7
    elif how == "col_clamp_":
        v[:, 1].clamp_(-0.3, 0.3)
    elif how == "masked_fill_":
        v.masked_fill_(p < 0, 0.0)
    elif how == "index_put_":
        v.index_put_((_new(lib, [0, 2]),), _new(lib, np.array([[0.5, -0.5], [1.0, 1.0]], np.float32)), accumulate=True)
    else:
        raise AssertionError(how)


def _loop(lib: Any, how: str, use: str, steps: int, clone: bool = False) -> list:
    v0 = _new(lib, V0, requires_grad=True)
    v = v0.clone()
    p = v0 * 0
    for _ in range(steps):
        v = v * 0.9
        v[..., 1] -= 0.5
        if use == "scaled":
            # (a product with a constant saves nothing of v)
            p = p + 0.1 * v
        elif use == "exp":
            # (exp saves its output, not v)
            p = p + v.exp()
        elif use == "reciprocal":
            p = p + 1.0 / (v + 10)
        else:
            # a product of two tensors: torch saves v, and raises when v is written after
            p = p + v * v0
        if clone:
            v = v.clone()
        _write(lib, v, p, how)
    (p.sum() + v.sum()).backward()
    return v0.grad.detach().numpy().tolist() if lib is torch else v0.grad.numpy().tolist()


_HOW = [
    "mask_col_mul",
    "mask_col_add",
    "mask_col_div",
    "mask_col_set",
    "mask_rows_mul",
    "mask_2d_mul",
    "mask_other_axis",
    "col_mul",
    "col_set_from_itself",
    "col_clamp_",
    "masked_fill_",
    "index_put_",
]


@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("use", ["scaled", "exp", "reciprocal"])
@pytest.mark.parametrize("how", _HOW)
def test_a_loop_of_masked_in_place_writes_gives_torchs_gradient(how: str, use: str, steps: int) -> None:
    np.testing.assert_allclose(_loop(Tensor, how, use, steps), _loop(torch, how, use, steps), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["mask_col_mul", "mask_rows_mul", "col_mul", "index_put_"])
def test_a_product_of_the_state_written_after_it_is_taken_at_the_values_it_read(how: str) -> None:
    # torch saved v for the product and raises; here the gradient is the product's at the values it read (as
    # docs/semantics.md says), torch's where the write goes into a copy of v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _loop(torch, how, "product", 2)
    expected = _loop(torch, how, "product", 2, clone=True)
    np.testing.assert_allclose(_loop(Tensor, how, "product", 2), expected, rtol=1e-5, atol=1e-5)


def _read_then_rewritten(lib: Any, write: Callable[[Any], None]) -> list:
    # a (2, 2) value, realized by an in-place write, read by exp, then written again
    v0 = _new(lib, V0[:2], requires_grad=True)
    v = v0 * 0.9
    v[..., 1] -= 0.5
    p = v.exp()
    write(v)
    (p.sum() + v.sum()).backward()
    return v0.grad.detach().numpy().tolist() if lib is torch else v0.grad.numpy().tolist()


def _set_from_itself(v: Any) -> None:
    # p is moved onto a copy of v's buffer before the write: the copy is read through v's (2, 2) view of it
    v[:, 1] = v[:, 1] + 0


def _empty_mask(v: Any) -> None:
    # a write through a mask that selects nothing leaves the graph as it was
    v[v[:, 1] > 100, 1] *= -0.7


@pytest.mark.parametrize("write", [_set_from_itself, _empty_mask], ids=["set_from_itself", "empty_mask"])
def test_a_value_read_before_a_second_write_keeps_the_first_write(write: Callable[[Any], None]) -> None:
    # both gave the gradient of exp at v before the first write (or none through p at all)
    np.testing.assert_allclose(_read_then_rewritten(Tensor, write), _read_then_rewritten(torch, write), rtol=1e-6)


@pytest.mark.parametrize("lost", [np.float32(40.0), np.float32(np.inf)], ids=["finite", "inf"])
def test_a_write_lost_to_a_later_one_at_its_position_gets_the_gradient_there(lost: np.float32) -> None:
    # torch's index_put backward gives each value written the gradient at its target, the overwritten ones too (an
    # infinite one included)
    def run(lib: Any) -> list:
        x = _new(lib, np.array([1.0, 2.0, 3.0, 4.0], np.float32), requires_grad=True)
        w = _new(lib, np.array([lost, 20.0, 30.0], np.float32), requires_grad=True)
        y = x * 1
        y[_new(lib, [1, 1, 3])] = w * 2
        (y * _new(lib, np.array([1.0, 2.0, 3.0, 4.0], np.float32))).sum().backward()
        grads = [x.grad, w.grad]
        return [g.detach().numpy().tolist() if lib is torch else g.numpy().tolist() for g in grads]

    assert run(Tensor) == run(torch)


def test_a_lost_write_of_a_value_read_from_the_tensor_written_gets_the_gradient_there() -> None:
    # the values written read the tensor itself, so the write's graph is rebuilt over the graph that computed it: the
    # lost value's gradient is kept there too
    def run(lib: Any) -> list:
        x = _new(lib, np.array([1.0, 2.0, 3.0, 4.0], np.float32), requires_grad=True)
        y = x * 1
        if lib is Tensor:
            y.realize()
        y.put_(_new(lib, [1, 1, 3]), y[0:3] * 2)
        (y * _new(lib, np.array([1.0, 2.0, 3.0, 4.0], np.float32))).sum().backward()
        return x.grad.detach().numpy().tolist() if lib is torch else x.grad.numpy().tolist()

    assert run(Tensor) == run(torch)


def _bounced_then_clamped(lib: Any) -> list:
    # each step's readers of v (p, read back by `.item()`, and a mask of it left unused) are realized by the write into
    # v; the last step's clamp_ reads v as the write before it left it, which a value stored before that write read as
    # it was
    v0 = _new(lib, np.random.RandomState(8).randn(5).astype(np.float32), requires_grad=True)
    v = v0 * 0.95 + 0.01
    p = (v * v0.detach()).abs().add(1).log()
    float(p.sum().item())
    mask = p < 0.5
    v[0] = v[0] * 2
    v = v * 0.95 + 0.01
    p = p + 0.1 * v
    mask = p < 0.5
    v[..., 0] /= 2.0
    v = v * 0.95 + 0.01
    p = p + 0.1 * v
    mask = p < 0.5
    v.clamp_(-1.0, 1.0)
    del mask
    (p.sum() + (v * v).sum()).backward()
    return v0.grad.detach().numpy().tolist() if lib is torch else v0.grad.numpy().tolist()


def test_a_state_written_after_a_stored_value_read_it_is_read_as_it_is_by_later_steps() -> None:
    np.testing.assert_allclose(_bounced_then_clamped(Tensor), _bounced_then_clamped(torch), rtol=1e-6)

"""Inputs an op doesn't read that torch still gives a zeros gradient (uopkit.tensor.unread): `.grad` is zeros, not
None, and the forward doesn't read them (a NaN there doesn't show)."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)


def _grads(lib: object, fn, arrays: list[np.ndarray]) -> tuple[list[object], np.ndarray]:
    made = [(torch.tensor(a) if lib is torch else Tensor(a)).requires_grad_() for a in arrays]
    out = fn(*made)
    out.sum().backward()
    value = out.detach().numpy()
    return [None if t.grad is None else t.grad.numpy() for t in made], value


_SCALED = [
    ("addmm", [(2, 2), (2, 3), (3, 2)]),
    ("addmm", [(2,), (2, 3), (3, 2)]),
    ("addmv", [(2,), (2, 3), (3,)]),
    ("addr", [(2, 3), (2,), (3,)]),
    ("baddbmm", [(2, 2, 2), (2, 2, 3), (2, 3, 2)]),
    ("addbmm", [(1, 2), (2, 2, 3), (2, 3, 2)]),
]


@pytest.mark.parametrize("op, shapes", _SCALED)
@pytest.mark.parametrize("beta, alpha", [(0, 1), (0, 2.5), (1, 0), (0.5, 1)])
def test_the_add_product_family_gives_a_base_scaled_by_zero_a_zeros_gradient(op, shapes, beta, alpha) -> None:
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    # (with beta 0 the base is not read: its NaN don't show, in torch's nor ours)
    arrays[0][...] = np.nan if beta == 0 else arrays[0]
    got, got_value = _grads(Tensor, lambda i, a, b: getattr(Tensor, op)(i, a, b, beta=beta, alpha=alpha), arrays)
    want, want_value = _grads(torch, lambda i, a, b: getattr(torch, op)(i, a, b, beta=beta, alpha=alpha), arrays)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-5, atol=1e-6)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_masked_scatter_with_no_true_position_gives_source_a_zeros_gradient() -> None:
    x, source = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    for lib in (torch, Tensor):
        xt, st = (torch.tensor if lib is torch else Tensor)(x), (torch.tensor if lib is torch else Tensor)(source)
        xt.requires_grad_(), st.requires_grad_()
        (xt.masked_scatter(xt > 100, st) * 2).sum().backward()
        assert xt.grad.tolist() == [2.0, 2.0, 2.0]
        assert st.grad is not None and st.grad.tolist() == [0.0] * 4


def test_an_input_that_wants_no_gradient_leaves_the_graph_as_it_was() -> None:
    i, a, b = Tensor.ones(2, 2), Tensor.ones(2, 3, requires_grad=True), Tensor.ones(3, 2)
    assert Tensor.addmm(i, a, b, beta=0).uop is (a @ b).uop

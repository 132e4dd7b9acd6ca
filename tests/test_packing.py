"""Repacking a matmul's row-major right operand into column panels (schedule/packing.py)."""

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.schedule import create_schedule, kernelize_tensors, packing
from uopkit.uop.ops import Ops

PANEL = getattr(Device["CPU"].renderer, "pack_panel", 0)
pytestmark = pytest.mark.skipif(not PANEL, reason="the CPU renderer packs no matmul operands")


@pytest.fixture(autouse=True)
def _pack_small_operands(monkeypatch):
    # these tests pack a 256x256 operand, below the default size (see test_default_size_leaves_small_operands_alone)
    monkeypatch.setattr(packing, "MIN_ELEMENTS", 32 * 1024)


def test_default_size_leaves_small_operands_alone(monkeypatch):
    monkeypatch.undo()
    assert len(_kernels(Tensor.empty(256, 256) @ Tensor.empty(256, 256))) == 1
    assert len(_kernels(Tensor.empty(256, 512) @ Tensor.empty(512, 512))) == 2


def _kernels(t: Tensor) -> list:
    return create_schedule(kernelize_tensors([t]))


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_large_matmul_reads_b_in_panels():
    a, b = _rand(128, 256), _rand(256, 256, seed=1)
    items = _kernels(Tensor(a) @ Tensor(b))
    # the panel copy, then the matmul reading it
    assert len(items) == 2
    out = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_panel_index_is_contiguous_per_k():
    # the matmul kernel reads the panel buffer at (n // P) * K * P + k * P + n % P: one stream per panel
    from uopkit.codegen.opt.heuristic import load_axes

    a, b = Tensor(_rand(128, 256)), Tensor(_rand(256, 256, seed=1))
    matmul = _kernels(a @ b)[-1].ast
    # A moves along i (0) and k (3); the panels along j (1, by 1) and k (by P)
    assert {1: 1, 3: PANEL}.items() <= next(la for la in load_axes(matmul) if 1 in la).items()


def test_batched_and_transposed_operands():
    a, b = _rand(2, 96, 128), _rand(2, 128, 512, seed=2)
    out = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert len(_kernels(Tensor(a) @ Tensor(b))) == 2
    # b.T (contiguous along k) is gathered into panels too: the matmul then runs the same register tile as a @ b
    bt = _rand(512, 128, seed=3)
    kernels = _kernels(Tensor(a[0]) @ Tensor(bt).T)
    assert len(kernels) == 2 and kernels[0].ast.src[0].src[1].shape[-1] == PANEL
    np.testing.assert_allclose(
        (Tensor(a[0]) @ Tensor(bt).T).numpy(), a[0].astype(np.float64) @ bt.T, rtol=1e-4, atol=1e-4
    )


def test_small_or_ragged_matmuls_are_left_alone():
    # too little reuse, too small, or columns that don't split into whole panels
    for sa, sb in [((8, 256), (256, 256)), ((64, 32), (32, 64)), ((128, 256), (256, 250))]:
        assert len(_kernels(Tensor(_rand(*sa)) @ Tensor(_rand(*sb)))) == 1, (sa, sb)


def test_other_tensors_sharing_the_matmul_reuse_it():
    a, b = Tensor(_rand(128, 256)), Tensor(_rand(256, 256, seed=1))
    c = a @ b
    d = c + 1
    c.realize()
    # d reads c's stored result: one kernel (the add), not the matmul again
    assert len(_kernels(d)) == 1
    assert not any(u.op is Ops.REDUCE_AXIS for u in d.uop.toposort())
    np.testing.assert_allclose(d.numpy(), c.numpy() + 1)


def test_the_front_end_builds_no_panels():
    # packing is the scheduler's decision: the graph Tensor.dot builds is the plain product
    c = Tensor(_rand(128, 256)) @ Tensor(_rand(256, 256, seed=1))
    assert not any(u.op is Ops.CONTIGUOUS for u in c.uop.toposort())
    assert len(_kernels(c)) == 2


def test_packing_is_decided_after_autograd():
    # a gradient flowing into a (grad @ b.T) reads b along k: that product is left alone, the forward one packs
    a = Tensor(_rand(128, 256), requires_grad=True)
    b = Tensor(_rand(256, 256, seed=1))
    out = a @ b
    out.sum().backward()
    assert len(_kernels(out)) == 2
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(b.numpy().sum(1), (128, 256)), rtol=1e-4)
    np.testing.assert_allclose(out.numpy(), a.numpy().astype(np.float64) @ b.numpy(), rtol=1e-4, atol=1e-4)
    # x @ W with data x: dW = x.T @ grad doesn't read W, and the product packs W
    x, w = Tensor(_rand(128, 256)), Tensor(_rand(256, 256, seed=1), requires_grad=True)
    assert len(_kernels(x @ w)) == 2
    (x @ w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(x.numpy().sum(0)[:, None], (256, 256)), rtol=1e-4)


def test_backward_after_the_packed_forward_ran():
    # the forward realized (with panels) first; backward then follows the graph it was computed from
    a = Tensor(_rand(128, 256), requires_grad=True)
    b = Tensor(_rand(256, 256, seed=1), requires_grad=True)
    loss = (a @ b).sum()
    expected = (a.numpy().astype(np.float64) @ b.numpy()).sum()
    assert abs(loss.item() - expected) <= 1e-3 * abs(expected)
    loss.backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(b.numpy().sum(1), (128, 256)), rtol=1e-4)
    np.testing.assert_allclose(b.grad.numpy(), np.broadcast_to(a.numpy().sum(0)[:, None], (256, 256)), rtol=1e-4)


def test_every_live_tensor_sees_the_packed_matmul():
    # d and e read the matmul c without being realized with it: once c ran (through panels) they read its result
    # instead of computing the product again, unpacked
    a, b = Tensor(_rand(128, 256)), Tensor(_rand(256, 256, seed=1))
    c = a @ b
    d, e = c + 1, (c * 2).sum()
    c.realize()
    for t in (d, e):
        assert not any(u.op is Ops.REDUCE_AXIS and u.src[0].shape == (128, 256, 256) for u in t.uop.toposort())
    ref = a.numpy().astype(np.float64) @ b.numpy()
    np.testing.assert_allclose(d.numpy(), ref + 1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(e.item(), (ref * 2).sum(), rtol=1e-4)


def test_packed_schedule_replays_from_the_cache():
    from uopkit.engine.realize import stats

    b = Tensor(_rand(256, 256, seed=1))
    hits = stats["schedule_hits"]
    for seed in range(3):
        a = _rand(128, 256, seed=10 + seed)
        out = (Tensor(a) @ b).numpy()
        np.testing.assert_allclose(out, a.astype(np.float64) @ b.numpy(), rtol=1e-4, atol=1e-4)
    # the second and third products replay the first one's kernels (panel copy included)
    assert stats["schedule_hits"] >= hits + 2


def test_matmul_gradients_through_the_panel_copy():
    a = Tensor(_rand(128, 256), requires_grad=True)
    b = Tensor(_rand(256, 256, seed=1), requires_grad=True)
    (a @ b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(b.numpy().sum(1), (128, 256)), rtol=1e-4)
    np.testing.assert_allclose(b.grad.numpy(), np.broadcast_to(a.numpy().sum(0)[:, None], (256, 256)), rtol=1e-4)


def test_transposed_right_operand_is_packed_left_operand_is_not():
    # x @ W.T and attention's q @ k.T: the right operand (contiguous along k) is gathered into panels; the left one,
    # contiguous along k too, is read as it is
    x, w = _rand(128, 96), _rand(256, 96, seed=4)
    items = _kernels(Tensor(x) @ Tensor(w).T)
    assert len(items) == 2 and items[0].ast.src[0].src[1].shape[-1] == PANEL
    np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
    q, k = _rand(4, 128, 64, seed=5), _rand(4, 64, 64, seed=6)
    batched = Tensor(q) @ Tensor(k).transpose(-1, -2)
    assert len(_kernels(batched)) == 2
    np.testing.assert_allclose(batched.numpy(), q @ k.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)


def test_computed_operands_are_packed_too():
    # a training step's matmuls read values computed in the same step (activations, gradients): their kernels write
    # the panels (the weight gradient h.T @ g of a layer read both operands across their rows before)
    h, g = _rand(512, 256), _rand(512, 256, seed=2)
    th, tg = Tensor(h), Tensor(g)
    t = (th * 2).relu().T @ (tg + 1)
    items = _kernels(t)
    panels = [it for it in items if it.ast.src[0].src[1].shape is not None and it.ast.src[0].src[1].shape[-1] == PANEL]
    assert len(panels) == 2, [it.ast.src[0].src[1].shape for it in items]
    ref = np.maximum(h * 2, 0).T.astype(np.float64) @ (g + 1)
    np.testing.assert_allclose(((th * 2).relu().T @ (tg + 1)).numpy(), ref, rtol=1e-4, atol=1e-3)
    # a constant operand (a sum's gradient, ones) is not stored
    assert len(_kernels(th.T @ Tensor.ones(512, 256))) <= 2


def test_heads_put_side_by_side_are_stored_row_major_before_the_product():
    # (b, h, t, d) -> (b, t, h * d) @ w: the merged view's address divides by d at every step of the reduce; stored
    # row-major first (by the kernel that computes it, here the copy), the product reads plain rows
    o, w = _rand(4, 4, 64, 32), _rand(128, 128, seed=3)
    t = Tensor(o).transpose(1, 2).reshape(4, 64, 128) @ Tensor(w)
    from uopkit.codegen import get_program

    matmul = get_program(_kernels(t)[-1].ast, Device["CPU"].renderer)
    assert not [u for u in matmul.uops if u.op in (Ops.IDIV, Ops.MOD)]
    ref = o.transpose(0, 2, 1, 3).reshape(4, 64, 128).astype(np.float64) @ w
    np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-3)


def _vector_loads(t: Tensor) -> list:
    from uopkit.codegen import get_program

    matmul = get_program(_kernels(t)[-1].ast, Device["CPU"].renderer)
    return [u for u in matmul.uops if u.op is Ops.LOAD and u.dtype.count > 1]


def test_a_classifiers_ten_columns_are_read_in_vectors(monkeypatch):
    # an MLP's last layer and its gradients: 10 columns split into pairs only, and the register tile was scalar
    monkeypatch.undo()
    h, w, g = _rand(256, 512), _rand(512, 10, seed=1), _rand(256, 10, seed=2)
    # h @ W: W stored transposed (a copy of 5K floats), both operands then read in vectors along k
    forward = Tensor(h) @ Tensor(w)
    items = _kernels(forward)
    assert len(items) == 2 and items[0].ast.src[0].src[1].shape == (1, 10, 512)
    assert len(_vector_loads(forward)) >= 2
    np.testing.assert_allclose(forward.numpy(), h.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    # g @ W.T: rows of 10 along k, gathered into panels all the same; vectors along the 512 columns
    back = Tensor(g) @ Tensor(w).T
    assert len(_kernels(back)) == 2 and _vector_loads(back)
    np.testing.assert_allclose(back.numpy(), g.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
    # h.T @ g: no copy; the vectors go along h's 512 columns, not g's 10
    grad = Tensor(h).T @ Tensor(g)
    assert len(_kernels(grad)) == 1 and _vector_loads(grad)
    np.testing.assert_allclose(grad.numpy(), h.T.astype(np.float64) @ g, rtol=1e-4, atol=1e-4)
    # too few rows to reuse the copy: left as it is
    assert len(_kernels(Tensor(h[:8]) @ Tensor(w))) == 1

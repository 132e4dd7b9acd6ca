"""uopkit.nn.optim.SparseAdam (nn/optim_more.py) against torch.optim.SparseAdam: ports of Embedding(sparse=True) and
EmbeddingBag(sparse=True) programs step to torch's parameter values (uopkit's dense gradients read with their all-zero
rows absent), torch's argument checks and messages, maximize, parameter groups, state dicts and the documented
departure (a looked-up row whose summed gradient is exactly zero)."""

import numpy as np
import pytest
import torch

from uopkit import Tensor, nn
from uopkit.nn.optim import SparseAdam

RNG = np.random.default_rng(5)
BATCHES = [[1, 2, 3, 3], [4, 5, 1, 2], [7, 7, 7, 0], [1, 9, 2, 2], [3, 4, 5, 6], [2, 2, 2, 2]]


def _pair(padding_idx=None):
    weight, head = RNG.standard_normal((10, 4)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    te = torch.nn.Embedding(10, 4, sparse=True, padding_idx=padding_idx)
    ue = nn.Embedding(10, 4, sparse=True, padding_idx=padding_idx)
    with torch.no_grad():
        te.weight.copy_(torch.tensor(weight))
    ue.weight.assign(Tensor(weight)).realize()
    return te, ue, torch.tensor(head), Tensor(head)


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("options", [{}, {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-6}, {"maximize": True}])
def test_embedding_sparse_steps_match_torch(padding_idx, options):
    te, ue, th, uh = _pair(padding_idx)
    to, uo = torch.optim.SparseAdam(list(te.parameters()), **options), SparseAdam(list(ue.parameters()), **options)
    for batch in BATCHES:
        loss_t = torch.tanh(te(torch.tensor(batch)) @ th.T).square().sum()
        to.zero_grad()
        loss_t.backward()
        to.step()
        loss_u = (ue(Tensor(np.array(batch, dtype=np.int32))) @ uh.T).tanh().square().sum()
        uo.zero_grad()
        loss_u.backward()
        uo.step()
        np.testing.assert_allclose(loss_u.item(), loss_t.item(), rtol=1e-5)
        np.testing.assert_allclose(ue.weight.numpy(), te.weight.detach().numpy(), rtol=1e-5, atol=1e-5)
    # rows never looked up (8) are unchanged, as torch's
    np.testing.assert_array_equal(ue.weight.numpy()[8], te.weight.detach().numpy()[8])
    state = uo.state_dict()["state"][0]
    np.testing.assert_allclose(state["exp_avg"].numpy(), to.state[te.weight]["exp_avg"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        state["exp_avg_sq"].numpy(), to.state[te.weight]["exp_avg_sq"].numpy(), rtol=1e-4, atol=1e-8
    )
    assert int(state["step"].item()) == to.state[te.weight]["step"] == len(BATCHES)


def test_embedding_bag_and_dense_layer_groups_match_torch():
    # a torch program's usual split: SparseAdam for the sparse embedding, Adam for the rest
    weight = RNG.standard_normal((12, 5)).astype(np.float32)
    linear_w, linear_b = RNG.standard_normal((2, 5)).astype(np.float32), np.zeros(2, dtype=np.float32)
    tb = torch.nn.EmbeddingBag(12, 5, mode="mean", sparse=True)
    ub = nn.EmbeddingBag(12, 5, mode="mean", sparse=True)
    tl, ul = torch.nn.Linear(5, 2), nn.Linear(5, 2)
    with torch.no_grad():
        tb.weight.copy_(torch.tensor(weight))
        tl.weight.copy_(torch.tensor(linear_w))
        tl.bias.copy_(torch.tensor(linear_b))
    ub.weight.assign(Tensor(weight)).realize()
    ul.weight.assign(Tensor(linear_w)).realize()
    ul.bias.assign(Tensor(linear_b)).realize()
    opts_t = [torch.optim.SparseAdam([tb.weight], lr=0.02), torch.optim.Adam(tl.parameters(), lr=0.02)]
    opts_u = [SparseAdam([ub.weight], lr=0.02), nn.optim.Adam(ul.parameters(), lr=0.02)]
    inputs, offsets = [1, 4, 4, 7, 0, 11, 3], [0, 3, 5]
    for step in range(4):
        shifted = [(i + step) % 12 for i in inputs]
        loss_t = tl(tb(torch.tensor(shifted), torch.tensor(offsets))).square().mean()
        loss_u = ul(ub(Tensor(np.array(shifted, dtype=np.int32)), Tensor(np.array(offsets, dtype=np.int32))))
        loss_u = loss_u.square().mean()
        for o in opts_t:
            o.zero_grad()
        for o in opts_u:
            o.zero_grad()
        loss_t.backward()
        loss_u.backward()
        for o in opts_t + opts_u:
            o.step()
    np.testing.assert_allclose(ub.weight.numpy(), tb.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ul.weight.numpy(), tl.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_rows_of_a_dense_gradient_and_one_dimensional_parameters():
    # a hand-made gradient: row 1 all zero (absent), row 0 with one zero entry (present: the whole row moves)
    grads = [np.array([[0.5, 0.0], [0.0, 0.0], [-1.0, 2.0]], dtype=np.float32), np.array([0.0, 3.0], dtype=np.float32)]
    init = [np.ones((3, 2), dtype=np.float32), np.array([1.0, -1.0], dtype=np.float32)]
    tp = [torch.tensor(v, requires_grad=True) for v in init]
    up = [Tensor(v, requires_grad=True) for v in init]
    to, uo = torch.optim.SparseAdam(tp, lr=0.1), SparseAdam(up, lr=0.1)
    for scale in (1.0, -2.0, 0.5):
        for p, g in zip(tp, grads, strict=True):
            p.grad = (torch.tensor(g) * scale).to_sparse(1)
        for p, g in zip(up, grads, strict=True):
            p.grad = Tensor(g * scale)
        to.step()
        uo.step()
    for ours, theirs in zip(up, tp, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert up[0].numpy()[1].tolist() == [1.0, 1.0] and up[1].numpy()[0] == 1.0


def test_a_looked_up_row_with_a_zero_gradient_is_left_alone():
    # the documented departure: torch's sparse gradient holds every looked-up row, so a row whose gradient sums to
    # exactly zero still has its moments decayed and moves on its old momentum; here it is absent and stays
    w = Tensor([[1.0], [2.0]], requires_grad=True)
    opt = SparseAdam([w], lr=0.1)
    for sign in (1.0, 0.0):
        w.grad = Tensor([[sign], [1.0]])
        opt.step()
    assert w.numpy()[0, 0] == pytest.approx(0.9, abs=1e-6)
    assert opt.state_dict()["state"][0]["exp_avg"].numpy()[0, 0] == pytest.approx(0.1, abs=1e-7)


def test_argument_errors_match_torch():
    w = Tensor.ones(3, requires_grad=True)
    # (torch's exception type; the messages are ours: the argument and the value given)
    cases = [
        ({"lr": 0.0}, "lr must be > 0, got 0.0"),
        ({"lr": -1e-3}, "lr must be > 0, got -0.001"),
        ({"eps": 0.0}, "eps must be > 0, got 0.0"),
        ({"betas": (1.0, 0.9)}, r"betas\[0\] must lie in \[0, 1\), got 1.0"),
        ({"betas": (0.9, -0.1)}, r"betas\[1\] must lie in \[0, 1\), got -0.1"),
        ({"lr": Tensor([0.1, 0.2])}, r"a tensor lr must hold one value, got shape \(2,\)"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError):
            torch.optim.SparseAdam([torch.ones(3, requires_grad=True)], **{
                k: torch.tensor(v.numpy()) if isinstance(v, Tensor) else v for k, v in kwargs.items()
            })  # fmt: skip
        with pytest.raises(ValueError, match=message):
            SparseAdam([w], **kwargs)
    opt = SparseAdam([w], lr=Tensor(0.01))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    with pytest.raises(ValueError, match="eps must be > 0, got -1.0"):
        opt.add_param_group({"params": [Tensor.ones(2, requires_grad=True)], "eps": -1.0})


def test_one_cycle_schedule_with_cycled_betas_matches_torch():
    # OneCycleLR changes lr and betas[0] every step: the bias corrections use each step's beta, as torch's
    from uopkit.nn.optim import lr_scheduler

    w0 = RNG.standard_normal((5, 3)).astype(np.float32)
    tw, uw = torch.tensor(w0, requires_grad=True), Tensor(w0, requires_grad=True)
    to, uo = torch.optim.SparseAdam([tw], lr=0.1), SparseAdam([uw], lr=0.1)
    ts = torch.optim.lr_scheduler.OneCycleLR(to, max_lr=0.1, total_steps=6)
    us = lr_scheduler.OneCycleLR(uo, max_lr=0.1, total_steps=6)
    for k in range(6):
        g = np.zeros((5, 3), np.float32)
        g[k % 5], g[(k + 2) % 5] = k + 1, -1
        tw.grad, uw.grad = torch.tensor(g).to_sparse(1), Tensor(g)
        to.step()
        uo.step()
        ts.step()
        us.step()
        np.testing.assert_allclose(uw.numpy(), tw.detach().numpy(), rtol=1e-6, atol=1e-7)
        assert uo.param_groups[0]["betas"] == pytest.approx(to.param_groups[0]["betas"])

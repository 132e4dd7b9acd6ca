"""uopkit.nn.utils.prune against torch.nn.utils.prune: the masks of chained, structured and global pruning (exactly
torch's, on the same weights), the state dict's keys, a pruned layer's training step and `remove`, a user's own
pruning method, the random methods' counts, and torch's exception types."""

import doctest

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn.utils import prune

torch = pytest.importorskip("torch")
tprune = pytest.importorskip("torch.nn.utils.prune")


def _pair(seed=0):
    # a conv and two linear layers in torch and uopkit, with torch's weights
    torch.manual_seed(seed)
    theirs = torch.nn.ModuleList([torch.nn.Conv2d(2, 4, 3), torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)])
    ours = nn.ModuleList([nn.Conv2d(2, 4, 3), nn.Linear(6, 5), nn.Linear(5, 3)])
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _prune_all(P, m, arange):
    P.l1_unstructured(m[0], "weight", amount=0.3)
    # again: a count among the entries still kept
    P.l1_unstructured(m[0], "weight", amount=5)
    P.ln_structured(m[0], "weight", amount=0.25, n=2, dim=0)
    P.ln_structured(m[0], "weight", amount=1, n=1, dim=1)
    P.ln_structured(m[1], "weight", amount=0.5, n=float("inf"), dim=1)
    P.l1_unstructured(m[1], "bias", amount=2, importance_scores=arange(5.0).flip(0))
    P.global_unstructured([(m[0], "weight"), (m[1], "weight"), (m[2], "weight")], P.L1Unstructured, amount=0.4)


def _assert_same_state(ours, theirs, atol=0.0):
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=atol, rtol=0, err_msg=name)


def test_docstring_examples():
    assert doctest.testmod(prune, extraglobs={"Tensor": Tensor}).failed == 0


def test_chained_structured_and_global_masks_match_torch():
    ours, theirs = _pair()
    _prune_all(prune, ours, Tensor.arange)
    _prune_all(tprune, theirs, torch.arange)
    assert list(ours.state_dict())[:3] == ["0.bias", "0.weight_orig", "0.weight_mask"]
    _assert_same_state(ours, theirs)
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert isinstance(ours[0]._state().pre_hooks[next(iter(ours[0]._state().pre_hooks))], prune.PruningContainer)
    assert prune.is_pruned(ours) and not prune.is_pruned(nn.Linear(2, 2))


def test_training_a_pruned_layer_and_remove_match_torch():
    ours, theirs = _pair(1)
    _prune_all(prune, ours, Tensor.arange)
    _prune_all(tprune, theirs, torch.arange)
    x = np.random.default_rng(0).standard_normal((3, 2, 4, 4)).astype(np.float32)
    opt_ours = nn.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        for m, opt, inp in ((ours, opt_ours, Tensor(x)), (theirs, opt_theirs, torch.tensor(x))):
            opt.zero_grad()
            m[2](m[1](m[0](inp).flatten(1)[:, :6]).tanh()).square().mean().backward()
            opt.step()
    np.testing.assert_allclose(ours[0].weight_orig.grad.numpy(), theirs[0].weight_orig.grad.numpy(), atol=1e-6)
    _assert_same_state(ours, theirs, atol=1e-6)
    orig = ours[1].weight_orig
    for P, m in ((prune, ours), (tprune, theirs)):
        for i, name in ((0, "weight"), (1, "weight"), (1, "bias"), (2, "weight")):
            P.remove(m[i], name)
    # the parameter is the _orig object again (the optimizer's), holding the pruned values
    assert ours[1].weight is orig and isinstance(orig, nn.Parameter)
    _assert_same_state(ours, theirs, atol=1e-6)
    assert not prune.is_pruned(ours)


def test_own_pruning_method_chained_after_l1():
    class EveryOther(prune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask

    class TEveryOther(tprune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask

    ours, theirs = _pair(2)
    prune.l1_unstructured(ours[1], "weight", 0.4)
    tprune.l1_unstructured(theirs[1], "weight", 0.4)
    EveryOther.apply(ours[1], "weight")
    TEveryOther.apply(theirs[1], "weight")
    np.testing.assert_array_equal(ours[1].weight_mask.numpy(), theirs[1].weight_mask.numpy())
    w = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        prune.LnStructured(2, "fro", dim=-1).prune(Tensor(w)).numpy(),
        tprune.LnStructured(2, "fro", dim=-1).prune(torch.tensor(w)).numpy(),
    )


def test_random_methods_prune_torch_counts():
    layer = nn.Conv2d(3, 8, 3)
    prune.random_unstructured(layer, "weight", amount=0.3)
    prune.random_structured(layer, "weight", amount=0.5, dim=0)
    prune.identity(layer, "bias")
    mask = layer.weight_mask.numpy()
    assert (mask.reshape(8, -1).sum(1) == 0).sum() >= 4
    assert int((mask == 0).sum()) >= round(0.3 * mask.size)
    assert layer.bias_mask.numpy().tolist() == [1.0] * 8


@pytest.mark.parametrize(
    "call",
    [
        lambda P, m: P.l1_unstructured(m, "weight", amount=1.5),
        lambda P, m: P.l1_unstructured(m, "weight", amount="a"),
        lambda P, m: P.l1_unstructured(m, "weight", amount=100),
        lambda P, m: P.ln_structured(m, "bias", amount=1, n=2, dim=0),
        lambda P, m: P.ln_structured(m, "weight", amount=1, n=2, dim=3),
        lambda P, m: P.remove(m, "weight"),
        lambda P, m: P.global_unstructured([(m, "weight")], P.LnStructured, amount=1, n=2, dim=0),
    ],
)
def test_errors_are_torchs(call):
    with pytest.raises(Exception) as theirs:
        call(tprune, torch.nn.Linear(6, 5))
    ours = nn.Linear(6, 5)
    with pytest.raises(type(theirs.value)):
        call(prune, ours)
    # a failed pruning leaves the layer as it was
    assert list(ours.state_dict()) == ["weight", "bias"]

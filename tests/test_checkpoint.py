"""uopkit.checkpoint against torch.utils.checkpoint: the same values and gradients as calling the function (uopkit's
lazy graphs keep no activations to drop), torch's signatures and keyword rules."""

import doctest

import numpy as np
import pytest

from uopkit import Tensor, checkpoint, nn

torch = pytest.importorskip("torch")
tcheckpoint = pytest.importorskip("torch.utils.checkpoint")


def test_docstring_examples():
    assert doctest.testmod(checkpoint).failed == 0


def _pair():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 5), torch.nn.GELU())
    ours = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 5), nn.GELU())
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_blocks_give_torchs_values_and_gradients(use_reentrant):
    ours, theirs = _pair()
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    xs, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)

    def block(model, t, scale):
        return model(t) * scale

    # the first layer as a checkpointed function, the others as a checkpointed Sequential
    out = checkpoint.checkpoint(block, ours[0], xs, 2.0, use_reentrant=use_reentrant)
    tout = tcheckpoint.checkpoint(block, theirs[0], tx, 2.0, use_reentrant=use_reentrant)
    rest, trest = nn.Sequential(ours[1], ours[2], ours[3]), torch.nn.Sequential(theirs[1], theirs[2], theirs[3])
    seq = checkpoint.checkpoint_sequential(rest, 2, out, use_reentrant=use_reentrant)
    tseq = tcheckpoint.checkpoint_sequential(trest, 2, tout, use_reentrant=use_reentrant)
    np.testing.assert_allclose(seq.numpy(), tseq.detach().numpy(), rtol=1e-5, atol=1e-6)
    seq.sum().backward()
    tseq.sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_keyword_arguments_follow_torch():
    def f(t, scale=1.0):
        return t * scale

    x = Tensor([1.0, 2.0])
    assert checkpoint.checkpoint(f, x, use_reentrant=False, scale=3.0, preserve_rng_state=False).tolist() == [3.0, 6.0]
    assert checkpoint.checkpoint(f, x, use_reentrant=True, preserve_rng_state=True).tolist() == [1.0, 2.0]
    # function keywords only without use_reentrant (torch's reentrant variant refuses them)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint.checkpoint(f, x, use_reentrant=True, scale=3.0)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint.checkpoint_sequential([f], 1, x, use_reentrant=False, scale=3.0)

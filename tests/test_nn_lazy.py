"""torch.nn's lazy layers (uopkit/nn/lazy.py) against torch's: the input size read at the first call, the tensors
made then (uninitialized before: their shape can't be read), the layer becoming the one it stands for, a state dict
loaded into a lazy layer, and the same weights as the layer built with the same seed."""

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes, nn

torch = pytest.importorskip("torch")

# (lazy layer maker, input shape) for both frameworks: `make(nn_namespace)`
CASES: list[tuple[str, Callable, tuple[int, ...]]] = [
    ("LazyLinear", lambda n: n.LazyLinear(4), (2, 3)),
    ("LazyLinear no bias", lambda n: n.LazyLinear(4, bias=False), (2, 5, 3)),
    ("LazyConv1d", lambda n: n.LazyConv1d(8, 3), (2, 4, 7)),
    ("LazyConv1d unbatched", lambda n: n.LazyConv1d(8, 3, padding=1), (4, 7)),
    ("LazyConv2d groups", lambda n: n.LazyConv2d(8, 3, 1, 1, 1, 2), (1, 4, 5, 5)),
    ("LazyConv3d", lambda n: n.LazyConv3d(2, 2, stride=2, bias=False), (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", lambda n: n.LazyConvTranspose1d(6, 3, groups=2), (1, 4, 5)),
    ("LazyConvTranspose2d", lambda n: n.LazyConvTranspose2d(3, 3, 2, 1, 1), (2, 2, 4, 4)),
    ("LazyConvTranspose3d", lambda n: n.LazyConvTranspose3d(2, 2), (1, 3, 2, 2, 2)),
    ("LazyBatchNorm1d", lambda n: n.LazyBatchNorm1d(), (4, 3)),
    ("LazyBatchNorm2d", lambda n: n.LazyBatchNorm2d(momentum=0.2), (2, 3, 4, 4)),
    ("LazyBatchNorm3d", lambda n: n.LazyBatchNorm3d(affine=False), (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", lambda n: n.LazyInstanceNorm1d(), (2, 3, 5)),
    ("LazyInstanceNorm2d", lambda n: n.LazyInstanceNorm2d(affine=False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", lambda n: n.LazyInstanceNorm3d(track_running_stats=False), (2, 3, 2, 2, 2)),
]


def _state(module, names: list[str]) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items() if k in names}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_lazy_layer_as_torch(case) -> None:
    _, make, shape = case
    ours, theirs = make(nn), make(torch.nn)
    assert ours.has_uninitialized_params() == theirs.has_uninitialized_params()
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (_, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert type(p).__name__ == type(q).__name__ == "UninitializedParameter"
        with pytest.raises(RuntimeError, match="lazy parameter/buffer has no shape yet"):
            _ = p.shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with Tensor.train():
        out = ours(Tensor(x))
    ref = theirs.train()(torch.tensor(x))
    assert out.shape == tuple(ref.shape)
    assert type(ours).__name__ == type(theirs).__name__
    for name in ("in_features", "in_channels", "num_features"):
        assert getattr(ours, name, None) == getattr(theirs, name, None), name
    got = {k: (tuple(v.shape), v.dtype.name) for k, v in ours.state_dict().items()}
    want = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in theirs.state_dict().items()}
    assert got == {k: (s, {"float32": "float", "int64": "long"}.get(d, d)) for k, (s, d) in want.items()}
    # (the layer it became has no has_uninitialized_params, as torch's)
    assert not hasattr(ours, "has_uninitialized_params") and not hasattr(theirs, "has_uninitialized_params")
    assert {type(t).__name__ for t in ours.state_dict(keep_vars=True).values()} <= {"Parameter", "Tensor"}
    # the same program with torch's weights loaded (a normal layer now) gives torch's output
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    with Tensor.train():
        again = ours(Tensor(x))
    np.testing.assert_allclose(again.numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_lazy_layers_draw_the_layers_weights() -> None:
    # built lazily, then called: the weights the layer built with the same seed at that time draws (torch's lazy layer
    # draws nothing before its first input)
    Tensor.manual_seed(3)
    lazy = nn.LazyConv2d(4, 3)
    lazy(Tensor.ones(1, 2, 5, 5))
    Tensor.manual_seed(3)
    plain = nn.Conv2d(2, 4, 3)
    assert lazy.weight.tolist() == plain.weight.tolist() and lazy.bias.tolist() == plain.bias.tolist()
    Tensor.manual_seed(5)
    lazy, plain_after = nn.LazyLinear(3), nn.Linear(2, 3)
    Tensor.manual_seed(5)
    assert plain_after.weight.tolist() == nn.Linear(2, 3).weight.tolist()


def test_a_state_dict_makes_a_lazy_layers_tensors() -> None:
    # torch's lazy load hook: the uninitialized tensors take the state dict's shapes, the layer stays lazy until called
    source = nn.Linear(3, 4)
    ours, theirs = nn.LazyLinear(4), torch.nn.LazyLinear(4)
    ours.load_state_dict(source.state_dict())
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in source.state_dict().items()})
    assert ours.has_uninitialized_params() == theirs.has_uninitialized_params() is False
    assert ours.weight.shape == tuple(theirs.weight.shape) == (4, 3)
    assert ours.weight.tolist() == source.weight.tolist()
    assert type(ours).__name__ == "LazyLinear"
    out = ours(Tensor.ones(2, 3))
    assert type(ours).__name__ == "Linear" and ours.in_features == 3
    np.testing.assert_allclose(out.numpy(), source(Tensor.ones(2, 3)).numpy())
    bn = nn.LazyBatchNorm2d()
    bn.load_state_dict(nn.BatchNorm2d(5).state_dict())
    assert bn.running_mean.shape == (5,) and bn.num_features == 5 and not bn.has_uninitialized_params()


def test_a_lazy_layer_follows_to_and_an_optimizer_sees_its_made_parameters() -> None:
    layer = nn.LazyLinear(2).double()
    weight = layer.weight
    layer(Tensor.ones(1, 3, dtype=dtypes.float64))
    assert layer.weight is weight and weight.dtype == dtypes.float64 and weight.shape == (2, 3)
    assert weight.requires_grad and isinstance(weight, nn.Parameter)
    opt = nn.optim.SGD(layer.parameters(), lr=0.1)
    before = weight.numpy().copy()
    layer(Tensor.ones(1, 3, dtype=dtypes.float64)).sum().backward()
    opt.step()
    np.testing.assert_allclose(weight.numpy(), before - 0.1)


def test_lazy_norm_without_a_bias_is_refused() -> None:
    # (torch's bias=False keeps a weight alone; uopkit's norms scale and shift together: refused, not ignored)
    with pytest.raises(ValueError, match="bias=False"):
        nn.LazyBatchNorm2d(bias=False)

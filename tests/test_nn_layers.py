"""uopkit.nn.pooling, .activations and .layers against torch.nn: pooling, padding, activations, reshaping and
upsampling, normalizations, distances, losses and channel dropouts with torch's constructor arguments (values, some
gradients, state dicts, errors). Many layers per test on small tensors: every new kernel is a compile."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import activations, layers, pooling
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.tensor import ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _close(ours: Tensor, ref: Any, atol: float = 1e-5, what: str = "") -> None:
    assert ours.shape == tuple(ref.shape), what
    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4, err_msg=what)


def _forward_and_grad(ours: Any, theirs: Any, x: np.ndarray, atol: float = 1e-5, what: str = "") -> None:
    """The output and the input's gradient (of a random weighting of the output) of both layers."""
    xo, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xo), theirs(xt)
    upstream = _randn(*ref.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    _close(out, ref, atol, what)
    assert xo.grad is not None, what
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient: {what}")


def _both(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)


def test_every_layer_is_exported_and_documented() -> None:
    for module in (pooling, activations, layers):
        public = {n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__}
        public = {n for n in public if not n.startswith("_")}
        assert public == set(module.__all__)
        for name in module.__all__:
            assert getattr(nn, name) is getattr(module, name)
            assert name in nn.__all__
            assert hasattr(torch.nn, name) or name == "LayerNorm2d", name
            assert ">>>" in (getattr(module, name).__doc__ or ""), f"{name} has no example"


# ---------------------------------------------------------------------------------------------------------------------
# pooling


POOLS: list[tuple[str, tuple, dict[str, Any], tuple[int, ...]]] = [
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1}, (2, 3, 9)),
    ("MaxPool1d", (2,), {"dilation": 2, "ceil_mode": True}, (3, 8)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, (1, 2, 6, 7)),
    ("MaxPool2d", ((2, 3),), {"dilation": (2, 1)}, (2, 6, 6)),
    ("MaxPool3d", (2,), {"stride": 1, "padding": 1}, (1, 2, 3, 3, 3)),
    ("AvgPool1d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, (2, 3, 8)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, (1, 2, 6, 7)),
    ("AvgPool2d", (2,), {"divisor_override": 3}, (2, 4, 4)),
    ("AvgPool3d", (2,), {"padding": 1, "count_include_pad": False}, (1, 1, 3, 4, 3)),
    ("AdaptiveAvgPool1d", (3,), {}, (2, 3, 7)),
    ("AdaptiveAvgPool2d", ((3, None),), {}, (1, 2, 5, 4)),
    ("AdaptiveAvgPool3d", (2,), {}, (1, 1, 3, 4, 5)),
    ("AdaptiveMaxPool1d", (3,), {}, (2, 7)),
    ("AdaptiveMaxPool2d", ((2, 3),), {}, (1, 2, 5, 7)),
    ("AdaptiveMaxPool3d", (2,), {}, (1, 1, 3, 4, 5)),
]


def test_pooling_matches_torch() -> None:
    for name, args, kwargs, shape in POOLS:
        ours, theirs = _both(name, *args, **kwargs)
        x = _randn(*shape)
        if name in ("MaxPool2d", "AvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"):
            _forward_and_grad(ours, theirs, x, what=name)
        else:
            _close(ours(Tensor(x)), theirs(torch.tensor(x)), what=f"{name}{args}{kwargs}")
        assert get_state_dict(ours) == {}


def test_pooling_indices_and_unpooling_match_torch() -> None:
    for name, args, kwargs, shape in [
        ("MaxPool1d", (3,), {"stride": 2, "padding": 1}, (2, 3, 9)),
        ("MaxPool2d", (2,), {}, (1, 2, 4, 6)),
        ("MaxPool3d", (2,), {}, (1, 2, 2, 4, 4)),
        ("AdaptiveMaxPool1d", (3,), {}, (2, 7)),
        ("AdaptiveMaxPool2d", ((2, 3),), {}, (1, 2, 5, 7)),
        ("AdaptiveMaxPool3d", (2,), {}, (1, 1, 3, 4, 5)),
    ]:
        ours, theirs = _both(name, *args, return_indices=True, **kwargs)
        x = _randn(*shape)
        (values, indices), (ref, ref_indices) = ours(Tensor(x)), theirs(torch.tensor(x))
        _close(values, ref, what=name)
        np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy(), err_msg=name)
        if name.startswith("MaxPool"):
            dims = name[-2]
            unpool, torch_unpool = _both(f"MaxUnpool{dims}d", *args, **kwargs)
            _close(unpool(values, indices), torch_unpool(ref, ref_indices), what=f"MaxUnpool{dims}d")
    # an output_size that pools back to the same size, with or without the leading axes
    values, indices = nn.MaxPool2d(2, return_indices=True)(Tensor(_randn(1, 1, 5, 5)))
    assert nn.MaxUnpool2d(2)(values, indices, output_size=(5, 5)).shape == (1, 1, 5, 5)
    assert nn.MaxUnpool2d(2)(values, indices, output_size=(1, 1, 5, 5)).shape == (1, 1, 5, 5)


@pytest.mark.parametrize("dims, shape", [(1, (2, 3, 8)), (2, (1, 2, 5, 7)), (3, (1, 1, 3, 4, 5))])
def test_adaptive_max_pool_indices_with_a_gradient_match_torch(dims: int, shape: tuple[int, ...]) -> None:
    # uneven windows on an input that takes a gradient: the values and the indices, and the gradient, as torch's
    # (the gradient's path gave the values alone)
    ours, theirs = _both(f"AdaptiveMaxPool{dims}d", 3, return_indices=True)
    x = _randn(*shape)
    xo, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (values, indices), (ref, ref_indices) = ours(xo), theirs(xt)
    _close(values, ref, what=f"AdaptiveMaxPool{dims}d")
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
    upstream = _randn(*ref.shape)
    (values * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=1e-6)


def test_max_unpool_output_size_and_indices_checked_as_torch() -> None:
    values, indices = nn.MaxPool2d(2, return_indices=True)(Tensor(_randn(1, 1, 5, 5)))
    ref, ref_indices = torch.tensor(values.numpy()), torch.tensor(indices.numpy()).long()
    # torch takes the sizes strictly within a stride of the default (4 here): 3, 4 and 5
    for size in (3, 4, 5):
        if int(indices.numpy().max()) < size * size:
            got = nn.MaxUnpool2d(2)(values, indices, output_size=(size, size))
            _close(got, torch.nn.MaxUnpool2d(2)(ref, ref_indices, output_size=(size, size)), what=f"{size}")
    for size in (2, 6, 7):
        with pytest.raises(ValueError, match="invalid output_size"):
            torch.nn.MaxUnpool2d(2)(ref, ref_indices, output_size=(size, size))
        message = rf"max_unpool2d: invalid output_size \({size}, {size}\) \(dim 0 must be between 2 and 6"
        with pytest.raises(ValueError, match=message):
            nn.MaxUnpool2d(2)(values, indices, output_size=(size, size))
    # an index past the output (the default size 4 x 4 of a pool of 5 x 5): torch's RuntimeError, naming the op
    far = Tensor(np.full((1, 1, 2, 2), 24, dtype=np.int32))
    with pytest.raises(RuntimeError, match="Found an invalid max index"):
        torch.nn.MaxUnpool2d(2)(ref, torch.full((1, 1, 2, 2), 24))
    with pytest.raises(RuntimeError, match=r"max_unpool2d: an index lies outside the output plane \(4, 4\)"):
        nn.MaxUnpool2d(2)(values, far)


# ---------------------------------------------------------------------------------------------------------------------
# padding


def test_padding_matches_torch() -> None:
    x1, x2, x3 = _randn(2, 3, 5), _randn(1, 2, 4, 5), _randn(1, 2, 3, 4, 3)
    cases = [
        ("ZeroPad1d", ((1, 2),), x1),
        ("ZeroPad2d", ((1, 0, 2, -1),), x2),
        ("ZeroPad3d", (1,), x3),
        ("ConstantPad1d", (2, 3.5), x1[0]),
        ("ConstantPad2d", ((0, 1, 2, 3), -1.0), x2[0, 0]),
        ("ConstantPad3d", ((1, 0, 0, 1, 1, 0), 2.0), x3),
        ("ReflectionPad1d", ((2, 3),), x1),
        ("ReflectionPad2d", ((1, 2, 3, 0),), x2[0]),
        ("ReflectionPad3d", (1,), x3),
        ("ReplicationPad1d", (3,), x1[0]),
        ("ReplicationPad2d", ((1, 2, 3, 0),), x2),
        ("ReplicationPad3d", ((2, 0, 1, 0, 0, 1),), x3[0]),
        ("CircularPad1d", ((2, 1),), x1),
        ("CircularPad2d", ((1, 2, 0, 3),), x2),
        ("CircularPad3d", (1,), x3),
    ]
    for name, args, x in cases:
        ours, theirs = _both(name, *args)
        assert ours.padding == tuple(theirs.padding), name
        if name in ("ReflectionPad2d", "CircularPad2d"):
            _forward_and_grad(ours, theirs, x, what=name)
        else:
            _close(ours(Tensor(x)), theirs(torch.tensor(x)), what=name)


# ---------------------------------------------------------------------------------------------------------------------
# activations


ACTIVATIONS = [
    ("LeakyReLU", (0.2,)),
    ("ELU", (0.7,)),
    ("SELU", ()),
    ("CELU", (1.5,)),
    ("Hardtanh", (-0.5, 1.5)),
    ("ReLU6", ()),
    ("Hardswish", ()),
    ("Hardsigmoid", ()),
    ("Hardshrink", (0.3,)),
    ("Softshrink", (0.4,)),
    ("Tanhshrink", ()),
    ("Threshold", (0.1, -2.0)),
    ("Mish", ()),
    ("Softplus", (2.0, 3.0)),
    ("Softsign", ()),
    ("LogSigmoid", ()),
    ("Softmax", (1,)),
    ("LogSoftmax", (-1,)),
    ("Softmin", (0,)),
    ("Softmax2d", ()),
    ("GLU", (1,)),
]


def test_activations_match_torch() -> None:
    # (values away from the kinks, where the one-sided gradients differ by convention)
    x = _randn(2, 4, 3, 3) * 3
    for name, args in ACTIVATIONS:
        ours, theirs = _both(name, *args)
        assert get_state_dict(ours) == {}
        _forward_and_grad(ours, theirs, x, atol=2e-5, what=name)


def test_inplace_activations_write_into_their_input() -> None:
    x = _randn(3, 4)
    for name, args in [("LeakyReLU", (0.1,)), ("Hardtanh", (-0.5, 0.5)), ("Threshold", (0.2, 5.0)), ("ELU", ())]:
        ours, theirs = _both(name, *args, inplace=True)
        xo, xt = Tensor(x), torch.tensor(x)
        out, ref = ours(xo), theirs(xt)
        _close(xo, xt, what=name)
        _close(out, ref, what=name)


def test_softmax_without_dim_warns_and_picks_torchs_axis() -> None:
    x = _randn(2, 3, 4)
    with pytest.warns(UserWarning, match="implicit dim"):
        out = nn.Softmax()(Tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.nn.Softmax()(torch.tensor(x))
    _close(out, ref)


def test_prelu_loads_a_torch_state_dict_and_matches_its_gradients() -> None:
    for num, shape in ((1, (2, 3, 4)), (3, (2, 3, 4)), (1, (5,))):
        ours, theirs = nn.PReLU(num), torch.nn.PReLU(num)
        assert ours.weight.shape == (num,) and ours.weight.numpy().tolist() == [0.25] * num
        with torch.no_grad():
            theirs.weight.copy_(torch.linspace(-0.5, 0.5, num) if num > 1 else torch.tensor([0.1]))
        load_state_dict(ours, {k: v.numpy() for k, v in theirs.state_dict().items()})
        _forward_and_grad(ours, theirs, _randn(*shape), what=f"PReLU({num})")
        assert ours.weight.grad is not None
        np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ShapeError, match=r"PReLU\(3\): 3 slopes for an input with 2 channels"):
        nn.PReLU(3)(Tensor.ones(4, 2))


def test_rrelu_is_random_in_training_and_the_mean_slope_otherwise() -> None:
    x = -np.ones(4000, np.float32)
    ours, theirs = nn.RReLU(0.1, 0.3).eval(), torch.nn.RReLU(0.1, 0.3).eval()
    _close(ours(Tensor(x)), theirs(torch.tensor(x)))
    ours.train()
    slopes = -ours(Tensor(x)).numpy()
    assert ours(Tensor([2.0])).tolist() == [2.0]
    assert 0.1 <= slopes.min() and slopes.max() <= 0.3 and abs(slopes.mean() - 0.2) < 0.01 and slopes.std() > 0.05


# ---------------------------------------------------------------------------------------------------------------------
# reshaping and upsampling


def test_reshaping_and_upsampling_match_torch() -> None:
    x4 = _randn(2, 8, 3, 4)
    cases = [
        (_both("Unflatten", 1, (2, -1)), x4),
        (_both("PixelShuffle", 2), x4),
        (_both("PixelUnshuffle", 2), _randn(1, 2, 4, 6)),
        (_both("ChannelShuffle", 4), x4),
        (_both("Upsample", scale_factor=2), _randn(1, 2, 3)),
        (_both("Upsample", size=(5, 7), mode="bilinear"), x4),
        (_both("Upsample", scale_factor=(1.5, 2), mode="bilinear", align_corners=True), x4),
        (_both("Upsample", size=(2, 3, 4), mode="trilinear"), _randn(1, 1, 3, 2, 3)),
        (_both("Upsample", scale_factor=2, mode="bicubic"), x4[:1, :2]),
        (_both("UpsamplingNearest2d", size=(5, 6)), x4),
        (_both("UpsamplingBilinear2d", scale_factor=2), x4),
    ]
    for (ours, theirs), x in cases:
        _close(ours(Tensor(x)), theirs(torch.tensor(x)), what=type(ours).__name__)
    _forward_and_grad(*_both("Upsample", scale_factor=2, mode="linear"), _randn(1, 2, 5), what="Upsample linear")


# ---------------------------------------------------------------------------------------------------------------------
# normalizations and distances


def test_batchnorm1d_and_3d_load_torch_state_and_match_in_training_and_eval() -> None:
    for name, shape in (("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)), ("BatchNorm3d", (2, 3, 2, 2, 3))):
        ours, theirs = _both(name, 3, momentum=0.2)
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
            theirs.running_mean.uniform_(-1, 1)
            theirs.running_var.uniform_(0.5, 2)
        load_state_dict(ours, {k: v.numpy() for k, v in theirs.state_dict().items()})
        assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
        x = _randn(*shape)
        _forward_and_grad(ours, theirs.train(), x, atol=1e-4, what=f"{name} training")
        for key in ("running_mean", "running_var", "num_batches_tracked"):
            _close(getattr(ours, key), getattr(theirs, key), what=key)
        _close(ours.eval()(Tensor(x)), theirs.eval()(torch.tensor(x)), atol=1e-4, what=f"{name} eval")
    assert nn.BatchNorm1d(4, affine=False, track_running_stats=False).weight is None
    with pytest.raises(ShapeError, match=r"BatchNorm1d\(3\): expected a 2-d or 3-d input"):
        nn.BatchNorm1d(3)(Tensor.ones(2, 3, 1, 1))
    with pytest.raises(ShapeError, match=r"BatchNorm3d\(3\): expected a 5-d input"):
        nn.BatchNorm3d(3)(Tensor.ones(2, 3, 1, 1))


def test_convert_sync_batchnorm_keeps_the_tensors_and_trains_as_torch() -> None:
    # SSL scripts (DINO, BYOL, SwAV) call nn.SyncBatchNorm.convert_sync_batchnorm(model) before training (it was
    # missing): every BatchNorm becomes a SyncBatchNorm holding the same tensor objects and mode, and in one process it
    # normalizes by the batch's statistics, as torch's without a process group
    def net(lib):
        return lib.Sequential(
            lib.Conv2d(2, 3, 1),
            lib.BatchNorm2d(3),
            lib.ReLU(),
            lib.Flatten(),
            lib.Linear(12, 4),
            lib.BatchNorm1d(4, affine=False),
        )

    ours, theirs = net(nn), net(torch.nn)
    load_state_dict(ours, {k: v.numpy() for k, v in theirs.state_dict().items()})
    w = ours[1].weight
    ours[5].eval()
    theirs[5].eval()
    ours, theirs = nn.SyncBatchNorm.convert_sync_batchnorm(ours), torch.nn.SyncBatchNorm.convert_sync_batchnorm(theirs)
    assert repr(ours) == repr(theirs)
    assert ours[1].weight is w and ours[5].training is False and ours[1].training is True
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours[5].train()
    theirs[5].train()
    _forward_and_grad(ours, theirs, _randn(5, 2, 2, 2), atol=1e-4, what="SyncBatchNorm training")
    for key in ("running_mean", "running_var", "num_batches_tracked"):
        _close(getattr(ours[1], key), getattr(theirs[1], key), what=key)
        _close(getattr(ours[5], key), getattr(theirs[5], key), what=key)
    x = _randn(3, 4, 2, 2, 2)
    _close(nn.SyncBatchNorm(4).train()(Tensor(x)), torch.nn.SyncBatchNorm(4)(torch.tensor(x)), atol=1e-5, what="5-d")
    with pytest.raises(ShapeError, match=r"SyncBatchNorm\(4\): expected an input of 2 or more dims"):
        nn.SyncBatchNorm(4)(Tensor.ones(4))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_batch_count_is_stored_with_the_training_step(momentum: float | None) -> None:
    # a conv + BatchNorm2d net trained by SGD over `parameters()` (torch's way: the running statistics aren't the
    # optimizer's): the step's realize stores the batch count with the running statistics it takes along, so the next
    # forward pass launches nothing (the pending count took a realize and a kernel of its own there); the weights,
    # statistics and count are torch's after every step
    from uopkit.helpers import GlobalCounters
    from uopkit.nn.optim import SGD

    torch.manual_seed(0)
    t_conv, t_bn, t_fc = torch.nn.Conv2d(1, 3, 3), torch.nn.BatchNorm2d(3, momentum=momentum), torch.nn.Linear(48, 2)
    conv, bn, fc = nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3, momentum=momentum), nn.Linear(48, 2)
    for ours, theirs in ((conv, t_conv), (bn, t_bn), (fc, t_fc)):
        load_state_dict(ours, {k: v.numpy() for k, v in theirs.state_dict().items()})
    params = [p for m in (conv, bn, fc) for p in m.parameters()]
    opt = SGD(params, lr=0.1, momentum=0.9)
    t_opt = torch.optim.SGD([p for m in (t_conv, t_bn, t_fc) for p in m.parameters()], lr=0.1, momentum=0.9)
    x, target = _randn(4, 1, 6, 6), _randn(4, 2)
    with Tensor.train():
        for step in range(4):
            GlobalCounters.reset()
            out = fc(bn(conv(Tensor(x))).relu().flatten(1))
            if step:
                assert GlobalCounters.kernel_count == 0, "the last step left the batch count to the forward pass"
            opt.zero_grad()
            ((out - Tensor(target)) ** 2).mean().backward()
            opt.step()
            t_opt.zero_grad()
            ((t_fc(t_bn(t_conv(torch.tensor(x))).relu().flatten(1)) - torch.tensor(target)) ** 2).mean().backward()
            t_opt.step()
            assert bn.num_batches_tracked.uop.base.op.name == "BUFFER"
            for key in ("running_mean", "running_var", "num_batches_tracked", "weight"):
                _close(getattr(bn, key), getattr(t_bn, key), atol=1e-5, what=f"step {step} {key}")
            _close(conv.weight, t_conv.weight, atol=1e-5, what=f"step {step} conv weight")


def test_layernorm2d_localresponsenorm_and_distances_match_torch() -> None:
    x = _randn(2, 5, 3, 4)
    ln2d = nn.LayerNorm2d(5)
    ln = torch.nn.LayerNorm(5)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    load_state_dict(ln2d, {k: v.numpy() for k, v in ln.state_dict().items()})
    _forward_and_grad(ln2d, lambda t: ln(t.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), x, atol=1e-5, what="LayerNorm2d")
    for size, shape in ((3, (2, 5, 3, 4)), (2, (2, 4, 6)), (5, (1, 3, 2, 2, 2))):
        ours, theirs = _both("LocalResponseNorm", size, alpha=0.5, beta=0.6, k=1.5)
        what = f"LocalResponseNorm({size})"
        if size == 3:
            _forward_and_grad(ours, theirs, _randn(*shape), what=what)
        else:
            xs = _randn(*shape)
            _close(ours(Tensor(xs)), theirs(torch.tensor(xs)), what=what)
    a, b = _randn(4, 6), _randn(4, 6)
    for (ours, theirs), args in [
        (_both("CosineSimilarity"), (a, b)),
        (_both("CosineSimilarity", dim=0, eps=0.5), (a, b[:1])),
        (_both("PairwiseDistance"), (a, b)),
        (_both("PairwiseDistance", p=1.0, keepdim=True), (a, b)),
        (_both("PairwiseDistance", p=3.0, eps=0.0), (a[0], b[0])),
    ]:
        out = ours(*(Tensor(v) for v in args))
        _close(out, theirs(*(torch.tensor(v) for v in args)), what=type(ours).__name__)


# ---------------------------------------------------------------------------------------------------------------------
# losses


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")  # (torch's, about KLDivLoss's mean)
def test_losses_match_torch() -> None:
    x, y = _randn(4, 3), _randn(4, 3)
    probs, labels = 1 / (1 + np.exp(-x)), (y > 0).astype(np.float32)
    logits, classes = _randn(5, 4), np.array([0, 3, 1, 1, 2])
    logits_2d, classes_2d = _randn(2, 4, 3), np.array([[0, 3, -100], [1, 1, 2]])
    w, pos = np.array([0.5, 1.0, 2.0, 1.5], np.float32), np.array([2.0, 0.5, 1.0], np.float32)
    soft = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    log_p, q = np.log(np.full((4, 3), 1 / 3, np.float32)), np.abs(y) / np.abs(y).sum(1, keepdims=True)
    cases: list[tuple[str, tuple, dict, tuple]] = []
    # every loss with its default mean (and its gradient) and with "none"; "sum" is a sum of the latter
    for red in ("mean", "none"):
        cases += [
            ("L1Loss", (), {"reduction": red}, (x, y)),
            ("MSELoss", (), {"reduction": red}, (x, y)),
            ("SmoothL1Loss", (), {"reduction": red, "beta": 0.5}, (x, y)),
            ("HuberLoss", (), {"reduction": red, "delta": 0.7}, (x, y)),
            ("BCELoss", (), {"reduction": red}, (probs, labels)),
            ("BCEWithLogitsLoss", (), {"reduction": red, "pos_weight": pos}, (x, labels)),
            ("CrossEntropyLoss", (), {"reduction": red}, (logits, classes)),
            ("NLLLoss", (), {"reduction": red, "weight": w}, (logits, classes)),
            ("KLDivLoss", (), {"reduction": red}, (log_p, q)),
        ]
    cases += [
        ("BCELoss", (), {"weight": pos}, (probs, labels)),
        ("BCEWithLogitsLoss", (), {"weight": pos, "reduction": "sum"}, (x, labels)),
        ("SmoothL1Loss", (), {"reduction": "sum"}, (x, y)),
        ("CrossEntropyLoss", (), {"reduction": "sum", "weight": w}, (logits, classes)),
        ("CrossEntropyLoss", (), {"weight": w, "label_smoothing": 0.1}, (logits, classes)),
        ("CrossEntropyLoss", (), {"ignore_index": 1}, (logits, classes)),
        ("CrossEntropyLoss", (), {}, (logits_2d, classes_2d)),
        ("CrossEntropyLoss", (), {"label_smoothing": 0.2}, (logits, soft)),
        ("NLLLoss", (), {"ignore_index": 3}, (logits, classes)),
        ("KLDivLoss", (), {"reduction": "batchmean", "log_target": True}, (log_p, np.log(q))),
    ]
    for name, args, kwargs, (inp, target) in cases:
        theirs_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        ours_kwargs = {k: Tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        ours, theirs = getattr(nn, name)(*args, **ours_kwargs), getattr(torch.nn, name)(*args, **theirs_kwargs)
        # torch's buffers are our tensors of the same names
        assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict()), name
        target_o, target_t = Tensor(target), torch.tensor(target)
        what = f"{name}({kwargs})"
        if kwargs.get("reduction", "mean") == "mean":
            xo, xt = Tensor(inp, requires_grad=True), torch.tensor(inp, requires_grad=True)
            out, ref = ours(xo, target_o), theirs(xt, target_t)
            out.backward()
            ref.backward()
            _close(out, ref, what=what)
            assert xo.grad is not None, what
            _close(xo.grad, xt.grad, what=f"gradient: {what}")
        else:
            _close(ours(Tensor(inp), target_o), theirs(torch.tensor(inp), target_t), what=what)


def test_loss_weights_load_from_a_torch_state_dict_and_legacy_reduction_arguments() -> None:
    theirs = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 3.0]))
    ours = nn.CrossEntropyLoss(weight=[0.0, 0.0, 0.0])
    load_state_dict(ours, {k: v.numpy() for k, v in theirs.state_dict().items()})
    logits, classes = _randn(4, 3), np.array([0, 2, 1, 2])
    _close(ours(Tensor(logits), Tensor(classes)), theirs(torch.tensor(logits), torch.tensor(classes)))
    for size_average, reduce, reduction in ((False, None, "sum"), (None, False, "none"), (True, True, "mean")):
        with pytest.warns(UserWarning, match=f"reduction={reduction!r}"):
            assert nn.MSELoss(size_average, reduce).reduction == reduction
    with pytest.warns(UserWarning):
        assert nn.KLDivLoss(reduce=False).reduction == "none"


# ---------------------------------------------------------------------------------------------------------------------
# dropouts


def test_channel_dropouts_zero_whole_channels_only_in_training() -> None:
    for layer, shape in (
        (nn.Dropout1d(0.5), (20, 30, 4)),
        (nn.Dropout1d(0.5), (600, 4)),
        (nn.Dropout2d(0.5), (20, 30, 2, 2)),
        (nn.Dropout3d(0.5), (600, 2, 1, 2)),
    ):
        x = Tensor.ones(*shape)
        assert layer.eval()(x) is x
        out = layer.train()(x).numpy()
        lead = 1 if len(shape) == layer.spatial_dims + 1 else 2
        per_channel = out.reshape(*shape[:lead], -1)
        # every channel all zeros or all 1 / (1 - p), about half of them dropped
        assert np.all((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1)), type(layer).__name__
        assert 0.4 < (per_channel[..., 0] == 0).mean() < 0.6
    with Tensor.train():
        assert nn.Dropout2d(1.0)(Tensor.ones(1, 2, 2, 2)).numpy().sum() == 0
        with pytest.warns(UserWarning, match=r"taken as \(N, C, L\)"):
            assert nn.Dropout2d(0.0)(Tensor.ones(2, 3, 4)).shape == (2, 3, 4)
        # (torch's Dropout3d takes any other rank as unbatched: one mask per slice of axis 0)
        with pytest.warns(UserWarning, match="Dropout3d: a 3-d input is deprecated"):
            out = nn.Dropout3d(0.5)(Tensor.ones(400, 2, 2)).numpy().reshape(400, -1)
        assert np.all((out == 0).all(-1) | (out == 2.0).all(-1)) and 0.4 < (out[:, 0] == 0).mean() < 0.6


def test_alpha_dropout_keeps_the_mean_and_variance() -> None:
    x = RNG.standard_normal(20000).astype(np.float32)
    layer = nn.AlphaDropout(0.3)
    assert layer.eval()(Tensor(x)).numpy().tolist() == x.tolist()
    out = layer.train()(Tensor(x)).numpy()
    assert abs(out.mean()) < 0.05 and abs(out.std() - 1) < 0.05
    # the dropped elements all take one value, about 30% of them
    low, counts = np.unique(out, return_counts=True)
    assert 0.27 < counts.max() / len(x) < 0.33
    a = 1 / np.sqrt(0.7 * (1 + 0.3 * 1.7580993408473766**2))
    np.testing.assert_allclose(low[counts.argmax()], a * -1.7580993408473766 * 0.7, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# errors


def test_bad_arguments_are_clear_errors() -> None:
    constructor_errors = [
        (lambda: nn.MaxPool2d(0), r"MaxPool2d: every kernel_size must be > 0, got \(0, 0\)"),
        (lambda: nn.MaxPool1d(2, stride=0), r"MaxPool1d: every stride must be > 0"),
        (lambda: nn.MaxPool2d(2, padding=2), r"MaxPool2d: padding \(2, 2\) must be at most half the kernel_size"),
        (lambda: nn.MaxPool3d((2, 2)), r"MaxPool3d: kernel_size must be an int or a sequence of 3"),
        (lambda: nn.AvgPool2d(2, divisor_override=0), "AvgPool2d: divisor_override must be a positive int"),
        (lambda: nn.AdaptiveAvgPool1d(-1), r"AdaptiveAvgPool1d: output_size must be 1 sizes >= 0"),
        (lambda: nn.AdaptiveMaxPool2d((1, 2, 3)), r"AdaptiveMaxPool2d: output_size must be 2 sizes"),
        (lambda: nn.ZeroPad2d((1, 2, 3)), r"ZeroPad2d: padding must be an int or 4 ints, got \(1, 2, 3\)"),
        (lambda: nn.Hardtanh(1.0, 0.0), r"Hardtanh: max_val \(0.0\) must be greater than min_val \(1.0\)"),
        (lambda: nn.Softshrink(-1.0), "Softshrink: lambd must be >= 0"),
        (lambda: nn.CELU(0.0), "CELU: alpha can't be 0"),
        (lambda: nn.RReLU(0.5, 0.1), r"RReLU: lower \(0.5\) must be <= upper \(0.1\)"),
        (lambda: nn.PReLU(0), "PReLU: num_parameters must be >= 1"),
        (lambda: nn.Upsample(), "Upsample: give exactly one of size and scale_factor"),
        (lambda: nn.Upsample(2, 2.0), "Upsample: give exactly one of size and scale_factor"),
        (lambda: nn.Upsample(2, mode="cubic"), "Upsample: mode must be one of"),
        (lambda: nn.Upsample(2, align_corners=True), "align_corners can only be set with the linear and bicubic"),
        (lambda: nn.ChannelShuffle(0), "ChannelShuffle: groups must be a positive int"),
        (lambda: nn.LocalResponseNorm(0), "LocalResponseNorm: size must be a positive int"),
        (lambda: nn.MSELoss(reduction="avg"), "MSELoss: reduction must be one of 'none', 'mean', 'sum', got 'avg'"),
        (lambda: nn.KLDivLoss(reduction="avg"), "KLDivLoss: reduction must be one of .*'batchmean'"),
        (lambda: nn.SmoothL1Loss(beta=-1.0), "SmoothL1Loss: beta must be >= 0"),
        (lambda: nn.HuberLoss(delta=0.0), "HuberLoss: delta must be > 0"),
        (lambda: nn.CrossEntropyLoss(label_smoothing=2.0), r"CrossEntropyLoss: label_smoothing must be in \[0, 1\]"),
        (lambda: nn.Dropout2d(1.5), r"Dropout2d: p must be a probability in \[0, 1\], got 1.5"),
        (lambda: nn.AlphaDropout(-0.1), r"AlphaDropout: p must be a probability"),
    ]
    for build, message in constructor_errors:
        with pytest.raises(ValueError, match=message):
            build()
    # where torch raises RuntimeError (at the call), a RuntimeError too
    x = torch.ones(1, 1, 4, 4)
    for build, torch_call in [
        (lambda: nn.MaxPool2d(2, padding=2), lambda: torch.nn.MaxPool2d(2, padding=2)(x)),
        (lambda: nn.AvgPool2d(3, padding=2), lambda: torch.nn.AvgPool2d(3, padding=2)(x)),
        (lambda: nn.AvgPool2d(2, divisor_override=0), lambda: torch.nn.AvgPool2d(2, divisor_override=0)(x)),
        (lambda: nn.LocalResponseNorm(0), lambda: torch.nn.LocalResponseNorm(0)(x)),
    ]:
        with pytest.raises(RuntimeError):
            torch_call()
        with pytest.raises(RuntimeError):
            build()
    call_errors: list[tuple[Any, tuple[int, ...], str]] = [
        (nn.MaxPool2d(2), (2, 2), r"MaxPool2d: expected input \(N, C, H, W\) or \(C, H, W\), got shape \(2, 2\)"),
        (nn.AvgPool1d(2), (1, 1, 1, 4), r"AvgPool1d: expected input \(N, C, L\) or \(C, L\)"),
        (nn.AdaptiveAvgPool3d(1), (2, 2), r"AdaptiveAvgPool3d: expected input \(N, C, D, H, W\)"),
        (nn.ReflectionPad2d(1), (3, 3), r"ReflectionPad2d: expected input \(N, C, H, W\) or \(C, H, W\)"),
        (nn.ConstantPad3d(1, 0.0), (3, 3), r"ConstantPad3d: padding .* needs an input of 3 or more dims"),
        (nn.Softmax2d(), (3, 3), r"Softmax2d: expected input \(N, C, H, W\) or \(C, H, W\)"),
        (nn.Upsample(4, mode="bilinear"), (1, 1, 3), r"Upsample: mode 'bilinear' needs a 4-d input"),
        (nn.ChannelShuffle(3), (1, 4, 2), r"ChannelShuffle\(3\): expected input \(N, C, ...\) with C divisible by 3"),
        (nn.LocalResponseNorm(2), (4, 2), r"LocalResponseNorm: expected input \(N, C, ...\) of 3 or more dims"),
        (nn.Dropout1d(), (1, 2, 3, 4), r"Dropout1d: expected input \(N, C, L\) or \(C, L\)"),
        (nn.LayerNorm2d(3), (3,), r"LayerNorm2d\(\(3,\)\): expected input \(N, C, ...\)"),
    ]
    for layer, shape, message in call_errors:
        with pytest.raises(ShapeError, match=message):
            layer(Tensor.ones(*shape))
    with pytest.raises(ValueError, match="MaxUnpool2d: output_size must have 2 or 4 sizes"):
        nn.MaxUnpool2d(2)(Tensor.ones(1, 1, 2, 2), Tensor.zeros(1, 1, 2, 2).int(), output_size=(4,))
    with pytest.raises(TypeError, match="Unflatten: dim must be an int and unflattened_size a sequence of ints"):
        nn.Unflatten(1, 4)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="PairwiseDistance: inputs need an axis"):
        nn.PairwiseDistance()(Tensor(1.0), Tensor(2.0))


def test_negative_layer_sizes_name_the_layer_and_argument() -> None:
    # they raised "math domain error" (Linear) or numpy's "negative dimensions are not allowed"; torch raises a
    # RuntimeError ("Trying to create tensor with negative dimension"): ours is both a ValueError and a RuntimeError
    cases = [
        (lambda: nn.Linear(-1, 3), r"Linear\(-1, 3\): in_features must be >= 0, got -1"),
        (lambda: nn.Linear(3, -2), r"Linear\(3, -2\): out_features must be >= 0, got -2"),
        (lambda: nn.Conv2d(3, -4, 3), "Conv2d: out_channels must be >= 0, got -4"),
        (lambda: nn.Conv1d(-3, 3, 3), "Conv1d: in_channels must be >= 0, got -3"),
        (lambda: nn.Conv2d(3, 4, (3, -1)), "Conv2d: kernel_size must be >= 0, got -1"),
        (lambda: nn.ConvTranspose2d(3, -4, 3), "ConvTranspose2d: out_channels must be >= 0"),
        (lambda: nn.Embedding(-2, 4), r"Embedding\(-2, 4\): num_embeddings must be >= 0, got -2"),
        (lambda: nn.Embedding(2, -4), r"Embedding\(2, -4\): embedding_dim must be >= 0, got -4"),
    ]
    for build, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            build()
        assert isinstance(info.value, RuntimeError)
    assert nn.Linear(0, 3).weight.shape == (3, 0) and nn.Embedding(0, 4).weight.shape == (0, 4)

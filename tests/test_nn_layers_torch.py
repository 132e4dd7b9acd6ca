"""uopkit.nn's torch-style layers against torch.nn: conv padding modes, LayerNorm without bias, RMSNorm over several
axes, unbatched InstanceNorm, Sequential and the small activation layers (values, gradients, state dicts, errors)."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, dtypes, nn
from uopkit.nn.state import get_parameters, get_state_dict, load_state_dict
from uopkit.tensor import ArgumentError, ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _load_torch(ours: Any, theirs: Any) -> None:
    # strict: the keys must be torch's, every one of them
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def compare(ours: Any, theirs: Any, x: np.ndarray, atol: float = 1e-5) -> None:
    """torch's weights loaded into ours; the outputs, the input's gradient and every weight's gradient compared."""
    _load_torch(ours, theirs)
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
    xt, xo = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    out, ref = ours(xo), theirs(xt)
    assert out.shape == tuple(ref.shape)
    upstream = _randn(*ref.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=atol, rtol=1e-4)  # type: ignore[union-attr]
    params = get_state_dict(ours)
    for name, tp in theirs.named_parameters():
        assert params[name].grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(
            params[name].grad.numpy(), tp.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient of {name}"
        )


# ---------------------------------------------------------------------------------------------------------------------
# convolution padding modes


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # (torch's, about its own speed)
@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    "dims, kwargs",
    [
        (1, {"kernel_size": 3, "padding": 2}),
        (1, {"kernel_size": 4, "padding": "same", "dilation": 2}),
        (2, {"kernel_size": 3, "padding": 1}),
        (2, {"kernel_size": (2, 3), "padding": (1, 2), "stride": 2, "groups": 2}),
        (2, {"kernel_size": 4, "padding": "same"}),
        (2, {"kernel_size": 3, "padding": "valid", "bias": False}),
        (3, {"kernel_size": 3, "padding": 1}),
    ],
)
def test_conv_padding_modes_match_torch(mode: str, dims: int, kwargs: dict[str, Any]) -> None:
    name = f"Conv{dims}d"
    theirs = getattr(torch.nn, name)(4, 6, padding_mode=mode, **kwargs)
    ours = getattr(nn, name)(4, 6, padding_mode=mode, **kwargs)
    assert ours.padding_mode == mode
    compare(ours, theirs, _randn(2, 4, *(5,) * dims), atol=1e-4)


@pytest.mark.parametrize("mode", ["reflect", "circular"])
def test_conv_padding_mode_on_an_unbatched_input(mode: str) -> None:
    theirs = torch.nn.Conv2d(3, 2, 3, padding=1, padding_mode=mode)
    ours = nn.Conv2d(3, 2, 3, padding=1, padding_mode=mode)
    compare(ours, theirs, _randn(3, 6, 5), atol=1e-4)


def test_conv_padding_mode_errors() -> None:
    with pytest.raises(ValueError, match=r"Conv2d: padding_mode must be one of 'zeros', .*got 'mirror'"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")
    with pytest.raises(ValueError):
        torch.nn.Conv2d(1, 1, 3, padding_mode="mirror")
    # reflect needs padding < size (torch: a RuntimeError; ShapeError is one), circular padding <= size
    for mode, pad in (("reflect", 4), ("circular", 5)):
        x = _randn(1, 2, 4)
        with pytest.raises(RuntimeError):
            torch.nn.Conv1d(2, 1, 3, padding=pad, padding_mode=mode)(torch.tensor(x))
        with pytest.raises(ShapeError, match=rf"Conv1d\(2, 1\): padding_mode='{mode}' can't pad input \(1, 2, 4\)"):
            nn.Conv1d(2, 1, 3, padding=pad, padding_mode=mode)(Tensor(x))
    # transposed convolutions have zeros only, as torch's
    with pytest.raises(ValueError, match="ConvTranspose2d: only padding_mode='zeros'"):
        nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
    with pytest.raises(ValueError):
        torch.nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
    assert nn.ConvTranspose2d(1, 1, 3, padding_mode="zeros")(Tensor.ones(1, 1, 2, 2)).shape == (1, 1, 4, 4)


# ---------------------------------------------------------------------------------------------------------------------
# LayerNorm(bias=False), RMSNorm over several axes


@pytest.mark.parametrize("shape", [4, (3, 4)])
def test_layernorm_without_bias_matches_torch(shape: Any) -> None:
    theirs = torch.nn.LayerNorm(shape, bias=False)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours = nn.LayerNorm(shape, bias=False)
    assert ours.bias is None and list(get_state_dict(ours)) == ["weight"] == list(theirs.state_dict())
    compare(ours, theirs, _randn(2, 3, 4) * 3 + 1, atol=1e-4)


def test_layernorm_bias_false_without_affine_has_no_state() -> None:
    ours = nn.LayerNorm(4, elementwise_affine=False, bias=False)
    assert get_state_dict(ours) == {}
    assert list(torch.nn.LayerNorm(4, elementwise_affine=False, bias=False).state_dict()) == []
    x = _randn(2, 4)
    want = torch.nn.functional.layer_norm(torch.tensor(x), (4,)).numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layernorm_without_bias_and_rmsnorm_over_two_axes_on_half_floats(dtype: str) -> None:
    # (computed in float32, rounded once, as torch's; 300 * 300 overflows float16)
    x = np.array([[300.0, -200.0, 100.0, 50.0], [1.0, 2.5, -3.0, 0.5]], np.float32)
    tdt = getattr(torch, dtype)
    for ours, theirs in ((nn.LayerNorm(4, bias=False), torch.nn.LayerNorm(4, bias=False)),
                         (nn.RMSNorm((2, 4)), torch.nn.RMSNorm((2, 4)))):  # fmt: skip
        ours.weight = ours.weight.cast(dtype)
        out = ours(Tensor(x).cast(dtype))
        assert out.dtype == getattr(dtypes, dtype)
        want = theirs.to(tdt)(torch.tensor(x, dtype=tdt)).detach().float().numpy()
        ulp = torch.finfo(tdt).eps
        np.testing.assert_allclose(out.float().numpy(), want, rtol=ulp, atol=ulp, err_msg=type(ours).__name__)


@pytest.mark.parametrize("shape", [5, (5,), (3, 5)])
@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_over_trailing_axes_matches_torch(shape: Any, affine: bool) -> None:
    theirs = torch.nn.RMSNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
    ours = nn.RMSNorm(shape, elementwise_affine=affine)
    if affine:
        assert ours.weight.shape == tuple(theirs.weight.shape)
    compare(ours, theirs, _randn(2, 3, 5) * 2, atol=1e-4)


def test_rmsnorm_shape_errors_name_the_shape() -> None:
    with pytest.raises(ShapeError, match=r"RMSNorm\(\(3, 4\)\): input of shape \(2, 4, 3\) doesn't end in \(3, 4\)"):
        nn.RMSNorm((3, 4))(Tensor.ones(2, 4, 3))
    with pytest.raises(ShapeError, match=r"RMSNorm\(\(3, 4\)\): input of shape \(4,\)"):
        nn.RMSNorm((3, 4))(Tensor.ones(4))
    with pytest.raises(RuntimeError):
        torch.nn.RMSNorm((3, 4))(torch.ones(2, 4, 3))
    assert nn.RMSNorm(6).dim == 6  # (tinygrad's attribute)


# ---------------------------------------------------------------------------------------------------------------------
# InstanceNorm on unbatched inputs


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
def test_instancenorm_nd_matches_torch_batched_and_unbatched(dims: int, batched: bool) -> None:
    theirs = getattr(torch.nn, f"InstanceNorm{dims}d")(3, affine=True)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-1, 1)
    ours = getattr(nn, f"InstanceNorm{dims}d")(3, affine=True)
    shape = (3,) + (4, 5, 2)[:dims]
    compare(ours, theirs, _randn(*(((2,) if batched else ()) + shape)) * 2 + 1, atol=1e-4)


def test_instancenorm_nd_defaults_as_torch() -> None:
    # torch's InstanceNorm*d: affine=False, no state
    ours, theirs = nn.InstanceNorm2d(3), torch.nn.InstanceNorm2d(3)
    assert get_state_dict(ours) == {} and list(theirs.state_dict()) == []
    x = _randn(3, 4, 5)
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), atol=1e-5)


def test_generic_instancenorm_takes_an_unbatched_c_l_input_as_instancenorm1d() -> None:
    theirs = torch.nn.InstanceNorm1d(3, affine=True)
    compare(nn.InstanceNorm(3), theirs, _randn(3, 7), atol=1e-4)


def test_instancenorm_errors_as_torch() -> None:
    # the wrong number of dims
    with pytest.raises(ShapeError, match=r"InstanceNorm2d\(3\): expected a 3-d or 4-d input, got \(5, 4\)"):
        nn.InstanceNorm2d(3)(Tensor.ones(5, 4))
    with pytest.raises(ValueError):
        torch.nn.InstanceNorm2d(3)(torch.ones(5, 4))
    # the wrong channels: an error with affine weights, a warning without (num_features unused there)
    with pytest.raises(ShapeError, match=r"InstanceNorm1d\(3\): expected input \(N, 3, ...\), got \(1, 4, 5\)"):
        nn.InstanceNorm1d(3, affine=True)(Tensor.ones(4, 5))
    with pytest.raises(ValueError):
        torch.nn.InstanceNorm1d(3, affine=True)(torch.ones(4, 5))
    x = _randn(4, 5)
    with pytest.warns(UserWarning, match="InstanceNorm1d"):
        out = nn.InstanceNorm1d(3)(Tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.InstanceNorm1d(3)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(out.numpy(), want, atol=1e-5)
    # one value per instance: torch refuses it in eval mode too
    with pytest.raises(ValueError, match=r"InstanceNorm1d\(3\): needs at least 2 spatial positions"):
        nn.InstanceNorm1d(3)(Tensor.ones(2, 3, 1))
    with pytest.raises(ValueError):
        torch.nn.InstanceNorm1d(3).eval()(torch.ones(2, 3, 1))
    # the wrong channels with running statistics: an error, as torch's
    with pytest.raises(ShapeError, match=r"InstanceNorm1d\(3\): expected input \(N, 3, ...\), got \(2, 4, 5\)"):
        nn.InstanceNorm1d(3, track_running_stats=True)(Tensor.ones(2, 4, 5))
    with pytest.raises(RuntimeError):
        torch.nn.InstanceNorm1d(3, track_running_stats=True)(torch.ones(2, 4, 5))


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("momentum", [0.3, None])
def test_instancenorm_tracks_running_stats_as_torch(dims: int, affine: bool, momentum: float | None) -> None:
    # training updates the running statistics (the batch's mean of each instance's mean and unbiased variance; momentum
    # None: torch passes 0.0, they stay); eval normalizes by them, a single position too
    theirs = getattr(torch.nn, f"InstanceNorm{dims}d")(3, affine=affine, track_running_stats=True, momentum=momentum)
    ours = getattr(nn, f"InstanceNorm{dims}d")(3, affine=affine, track_running_stats=True, momentum=momentum)
    with torch.no_grad():
        theirs.running_mean.uniform_(-1, 1)
        theirs.running_var.uniform_(0.5, 2)
        if affine:
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-1, 1)
    shape = (2, 3) + (4, 5, 2)[:dims]
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
    for training in (True, True, False):
        theirs.train(training)
        ours.train(training)
        compare(ours, theirs, _randn(*shape) * 2 + 1, atol=1e-4)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            np.testing.assert_allclose(getattr(ours, name).numpy(), getattr(theirs, name).numpy(), atol=1e-5)
    # eval, unbatched and with one position per instance: the running statistics alone
    for x in (_randn(*shape[1:]), _randn(2, 3, *(1,) * dims)):
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_groupnorm_takes_an_empty_batch_as_torch() -> None:
    # (reshape(N, G, -1) can't infer -1 for N = 0)
    theirs, ours = torch.nn.GroupNorm(2, 4), nn.GroupNorm(2, 4)
    compare(ours, theirs, _randn(0, 4, 3))


# ---------------------------------------------------------------------------------------------------------------------
# Sequential


def _torch_mlp() -> Any:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_sequential_loads_a_torch_state_dict_and_matches_it() -> None:
    theirs = _torch_mlp()
    ours = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    assert list(get_state_dict(ours)) == list(theirs.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(get_parameters(ours)) == 4
    compare(ours, theirs, _randn(5, 4))


def test_sequential_takes_plain_callables_and_named_layers() -> None:
    x = _randn(5, 4)
    theirs = torch.nn.Sequential(OrderedDict([("fc", torch.nn.Linear(4, 8)), ("act", torch.nn.Tanh()),
                                              ("out", torch.nn.Linear(8, 2))]))  # fmt: skip
    ours = nn.Sequential(OrderedDict([("fc", nn.Linear(4, 8)), ("act", Tensor.tanh), ("out", nn.Linear(8, 2))]))
    assert list(get_state_dict(ours)) == list(theirs.state_dict())
    compare(ours, theirs, x)
    assert ours[1] is Tensor.tanh and ours[-1] is ours.out
    # a lambda too, as tinygrad's x.sequential([...]); and a Sequential is a list of layers for x.sequential
    double = nn.Sequential(lambda t: t * 2, Tensor.relu)
    np.testing.assert_allclose(double(Tensor(x)).numpy(), np.maximum(x * 2, 0))
    np.testing.assert_allclose(Tensor(x).sequential(double).numpy(), np.maximum(x * 2, 0))


def test_sequential_indexing_len_iteration_and_nesting() -> None:
    layers = [nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 4), nn.Identity()]
    seq = nn.Sequential(*layers)
    assert len(seq) == 4 and list(seq) == layers and seq[0] is layers[0] and seq[-2] is layers[2]
    # a slice keeps the layers' names, as torch's ("2.weight" stays "2.weight")
    tail = seq[2:]
    assert isinstance(tail, nn.Sequential) and len(tail) == 2 and list(get_state_dict(tail)) == ["2.weight", "2.bias"]
    torch_tail = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.GELU(), torch.nn.Linear(3, 4))[2:]
    assert list(torch_tail.state_dict()) == ["2.weight", "2.bias"]
    with pytest.raises(IndexError, match="Sequential: index 4 is out of range for 4 layers"):
        seq[4]
    with pytest.raises(IndexError):
        torch.nn.Sequential(torch.nn.ReLU())[1]
    # nested, and appended, with torch's names
    theirs = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.SiLU()))
    theirs.append(torch.nn.Linear(3, 2))
    ours = nn.Sequential(nn.Sequential(nn.Linear(3, 3), nn.SiLU()))
    assert ours.append(nn.Linear(3, 2)) is ours
    assert list(get_state_dict(ours)) == list(theirs.state_dict()) == ["0.0.weight", "0.0.bias", "1.weight", "1.bias"]
    compare(ours, theirs, _randn(4, 3))
    assert len(nn.Sequential()) == 0 and nn.Sequential()(Tensor([1.0])).tolist() == [1.0]


def test_sequential_errors() -> None:
    with pytest.raises(TypeError, match="Sequential: layer 1 is a int, which can't be called"):
        nn.Sequential(nn.ReLU(), 3)
    with pytest.raises(ValueError, match="layer name 'a.b'"):
        nn.Sequential({"a.b": nn.ReLU()})
    with pytest.raises(KeyError):
        torch.nn.Sequential(OrderedDict([("a.b", torch.nn.ReLU())]))


def test_a_torch_style_model_ports_unchanged() -> None:
    def build(m: Any) -> Any:
        return m.Sequential(
            m.Conv2d(2, 4, 3, padding=1, padding_mode="reflect"),
            m.InstanceNorm2d(4, affine=True),
            m.GELU(approximate="tanh"),
            m.Conv2d(4, 4, 3, stride=2, padding="valid", bias=False),
            m.SiLU(),
            m.Flatten(),
            m.Dropout(0.3),
            m.Linear(4 * 2 * 2, 5),
            m.LayerNorm(5, bias=False),
            m.Sigmoid(),
            m.Identity(),
        )

    theirs = build(torch.nn).eval()
    compare(build(nn).eval(), theirs, _randn(3, 2, 6, 6), atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------------
# small layers


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.GELU(), torch.nn.GELU()),
        (nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
        (nn.SiLU(), torch.nn.SiLU()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Flatten(0, 1), torch.nn.Flatten(0, 1)),
        (nn.Flatten(-2), torch.nn.Flatten(-2)),
        (nn.Identity(3, x=1), torch.nn.Identity(3, x=1)),
        (nn.Dropout(0.4).eval(), torch.nn.Dropout(0.4).eval()),
    ],
    ids=lambda m: type(m).__name__,
)
def test_small_layers_match_torch(ours: Any, theirs: Any) -> None:
    assert get_state_dict(ours) == {}
    compare(ours, theirs, _randn(2, 3, 4) * 3)


def test_inplace_activations_write_into_their_input() -> None:
    x = _randn(2, 3)
    for ours, theirs in ((nn.ReLU(inplace=True), torch.nn.ReLU(inplace=True)),
                         (nn.SiLU(inplace=True), torch.nn.SiLU(inplace=True))):  # fmt: skip
        xo, xt = Tensor(x), torch.tensor(x)
        out, ref = ours(xo), theirs(xt)
        np.testing.assert_allclose(xo.numpy(), xt.numpy(), atol=1e-6)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-6)


def test_dropout_is_active_only_in_training() -> None:
    x = Tensor.ones(2000)
    drop = nn.Dropout(0.25)
    assert drop.eval()(x).tolist() == [1.0] * 2000
    with Tensor.train():
        # (the global flag doesn't reach the layer's own mode)
        assert drop(x).tolist() == [1.0] * 2000
    out = drop.train()(x).numpy()
    kept = out != 0
    # the kept ones scaled by 1 / (1 - p), about 3 in 4 kept
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert 0.7 < kept.mean() < 0.8
    with Tensor.train():
        y = Tensor.ones(8).contiguous().realize()
        out = nn.Dropout(0.5, inplace=True)(y)
        np.testing.assert_array_equal(y.numpy(), out.numpy())
        assert nn.Dropout(1.0)(Tensor.ones(4)).tolist() == [0.0] * 4
        assert nn.Dropout(0.0)(Tensor.ones(4)).tolist() == [1.0] * 4


def test_small_layer_errors_as_torch() -> None:
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"Dropout: p must be a probability in \[0, 1\], got {p}"):
            nn.Dropout(p)
        with pytest.raises(ValueError):
            torch.nn.Dropout(p)
    # (torch raises it at the first call, a RuntimeError; ArgumentError is a ValueError and a RuntimeError)
    with pytest.raises(ArgumentError, match="GELU: approximate must be 'none' or 'tanh', got 'fast'"):
        nn.GELU(approximate="fast")
    with pytest.raises(RuntimeError):
        torch.nn.GELU(approximate="fast")(torch.ones(2))


@pytest.mark.parametrize("half", ["half", "bfloat16"])
def test_batchnorm_of_a_half_model_trains_as_torchs(half):
    # a .half() model in training mode: the input normalizes in float32 and the half running statistics update
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 3 + 1
    theirs = getattr(torch.nn.BatchNorm2d(3), half)().train()
    ours = getattr(nn.BatchNorm2d(3), half)().train()
    got = ours(Tensor(x).cast(ours.running_mean.dtype))
    want = theirs(torch.tensor(x).to(theirs.running_mean.dtype))
    assert got.dtype == ours.running_mean.dtype
    # (torch's CPU kernel rounds its statistics to the half float first: an ulp apart at most)
    np.testing.assert_allclose(got.float().numpy(), want.float().detach().numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(ours.running_var.float().numpy(), theirs.running_var.float().numpy(), rtol=1e-2)


@pytest.mark.parametrize("half", ["half", "bfloat16"])
def test_batchnorm_of_a_half_model_in_eval_equals_torchs(half):
    # the half running variance's rsqrt was taken in the half float, an ulp off torch's in a quarter of the outputs
    rng = np.random.default_rng(6)
    stats = {
        "weight": rng.standard_normal(8),
        "bias": rng.standard_normal(8),
        "running_mean": rng.standard_normal(8),
        "running_var": rng.uniform(0.5, 2.0, 8),
    }
    stats = {k: v.astype(np.float32) for k, v in stats.items()}
    x = rng.standard_normal((2, 8, 4, 4)).astype(np.float32)
    theirs = torch.nn.BatchNorm2d(8)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in stats.items()}, strict=False)
    theirs = getattr(theirs, half)().eval()
    ours = nn.BatchNorm2d(8)
    ours.load_state_dict(stats, strict=False)
    ours = getattr(ours, half)().eval()
    tx = torch.tensor(x).to(theirs.running_var.dtype)
    want = theirs(tx).detach().float().numpy()
    np.testing.assert_array_equal(ours(Tensor(x).cast(ours.running_var.dtype)).float().numpy(), want)
    functional = nn.functional.batch_norm(
        Tensor(x).cast(ours.running_var.dtype), ours.running_mean, ours.running_var, ours.weight, ours.bias
    )
    np.testing.assert_array_equal(functional.float().numpy(), want)


def test_sequential_edits_as_torchs():
    built = []
    for lib in (nn, torch.nn):
        s = lib.Sequential(lib.Linear(2, 3), lib.ReLU(), lib.Linear(3, 1))
        s[2] = lib.Linear(3, 5)
        del s[1]
        s.insert(1, lib.Tanh())
        s.extend(lib.Sequential(lib.ReLU(), lib.Sigmoid()))
        popped = s.pop(-1)
        s += lib.Sequential(lib.Identity())
        doubled = lib.Sequential(lib.ReLU()) * 2
        built.append(
            (
                type(popped).__name__,
                [type(layer).__name__ for layer in s],
                sorted(s.state_dict()),
                len(doubled),
                s[2].out_features,
            )
        )
    assert built[0] == built[1]
    with pytest.raises(IndexError, match="out of range"):
        nn.Sequential(nn.ReLU())[3] = nn.ReLU()


def test_memory_formats_are_accepted_and_checked():
    import uopkit

    x = Tensor(np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    for fmt in (uopkit.channels_last, torch.channels_last, uopkit.contiguous_format, torch.preserve_format):
        assert x.contiguous(memory_format=fmt).tolist() == x.tolist()
        assert x.to(memory_format=fmt).tolist() == x.tolist()
    layer = nn.Conv2d(2, 2, 1).to(memory_format=torch.channels_last)
    assert layer(x).shape == (1, 2, 3, 4)
    # is_contiguous answers from torch's strides of the view, as torch's
    nhwc = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    t = torch.tensor(x.numpy()).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    for fmt, tfmt in ((uopkit.channels_last, torch.channels_last), (uopkit.contiguous_format, torch.contiguous_format)):
        assert nhwc.is_contiguous(memory_format=fmt) == t.is_contiguous(memory_format=tfmt)
        assert x.is_contiguous(memory_format=fmt) == torch.tensor(x.numpy()).is_contiguous(memory_format=tfmt)
    with pytest.raises(RuntimeError, match="4-d"):
        Tensor.ones(3).contiguous(memory_format=uopkit.channels_last)
    with pytest.raises(TypeError, match="memory_format"):
        x.contiguous(memory_format="nhwc")


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_takes_the_input_dtypes_torch_takes(train):
    # the layer's own dtype, or a half input into a float32 layer; every other pairing raises, in both modes
    names = ("float32", "float16", "bfloat16", "float64")
    for x_name in names:
        for layer_name in names:
            theirs = torch.nn.BatchNorm2d(3).to(getattr(torch, layer_name)).train(train)
            ours = nn.BatchNorm2d(3).to(layer_name).train(train)
            try:
                want = theirs(torch.ones(2, 3, 2, 2, dtype=getattr(torch, x_name))).dtype
            except RuntimeError:
                with pytest.raises(TypeError, match=r"BatchNorm\(3\): the input is dtypes\.\w+, the layer's"):
                    ours(Tensor.ones(2, 3, 2, 2, dtype=x_name))
                continue
            got = ours(Tensor.ones(2, 3, 2, 2, dtype=x_name))
            assert got.dtype == getattr(dtypes, str(want).removeprefix("torch.")), (x_name, layer_name)

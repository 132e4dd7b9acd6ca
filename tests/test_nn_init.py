"""uopkit.nn.init against torch.nn.init: the deterministic fills exactly, the random ones by shape, by the bound or
standard deviation torch's formula gives (checked on large tensors, and against the statistics of torch's own draws),
by identity (the tensor filled is the object given, a module's parameter stays itself) and by reproducibility under
Tensor.manual_seed; nothing is recorded by autograd."""

import doctest
import math
import warnings

import numpy as np
import pytest

from uopkit import Generator, Tensor, is_grad_enabled, nn, no_grad
from uopkit.nn import init

torch = pytest.importorskip("torch")

NONLINEARITIES = [
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "selu",
]
SHAPES = [(3, 4), (8, 3, 5), (8, 3, 3, 3), (2, 4, 2, 2, 2), (1, 7)]


def test_docstring_examples():
    globs = {"Tensor": Tensor, "np": np, "math": math}
    assert doctest.testmod(init, extraglobs=globs).failed == 0


@pytest.mark.parametrize("nonlinearity", NONLINEARITIES)
def test_calculate_gain_matches_torch(nonlinearity):
    assert init.calculate_gain(nonlinearity) == pytest.approx(torch.nn.init.calculate_gain(nonlinearity), rel=1e-12)


@pytest.mark.parametrize("param", [None, 0, 0.2, 1, -0.5, 3])
def test_calculate_gain_leaky_relu_slope(param):
    expected = torch.nn.init.calculate_gain("leaky_relu", param)
    assert init.calculate_gain("leaky_relu", param) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("param", [True, "0.1", [0.1]])
def test_calculate_gain_rejects_a_slope_that_is_not_a_number(param):
    with pytest.raises(ValueError, match="calculate_gain: negative_slope"):
        init.calculate_gain("leaky_relu", param)


def test_calculate_gain_rejects_an_unknown_nonlinearity():
    with pytest.raises(ValueError, match="calculate_gain: unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")


@pytest.mark.parametrize("shape", SHAPES)
def test_fans_match_torch(shape):
    ours, theirs = Tensor.empty(*shape), torch.empty(*shape)
    assert init._calculate_fan_in_and_fan_out(ours) == torch.nn.init._calculate_fan_in_and_fan_out(theirs)
    for mode in ("fan_in", "fan_out", "FAN_OUT"):
        assert init._calculate_correct_fan(ours, mode) == torch.nn.init._calculate_correct_fan(theirs, mode)


def test_fan_errors():
    with pytest.raises(ValueError, match=r"need a weight of at least 2 dims .* got shape \(5,\)"):
        init._calculate_fan_in_and_fan_out(Tensor.empty(5))
    with pytest.raises(ValueError, match="mode fan_avg not supported"):
        init._calculate_correct_fan(Tensor.empty(3, 4), "fan_avg")


# ---- deterministic fills: exactly torch's values


@pytest.mark.parametrize("fill", ["constant_", "ones_", "zeros_"])
def test_constant_fills_match_torch(fill):
    ours, theirs = Tensor.randn(3, 4), torch.randn(3, 4)
    args = (0.25,) if fill == "constant_" else ()
    assert getattr(init, fill)(ours, *args) is ours
    getattr(torch.nn.init, fill)(theirs, *args)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2)])
def test_eye_matches_torch(shape):
    ours = Tensor.randn(*shape)
    assert init.eye_(ours) is ours
    np.testing.assert_array_equal(ours.numpy(), torch.nn.init.eye_(torch.empty(*shape)).numpy())


@pytest.mark.parametrize(
    "shape, groups",
    [((4, 4, 3), 1), ((6, 3, 3, 3), 1), ((3, 6, 5, 4), 1), ((6, 2, 3, 3), 2), ((4, 2, 2, 3, 3), 2), ((6, 1, 3), 3)],
)
def test_dirac_matches_torch(shape, groups):
    ours = Tensor.randn(*shape)
    assert init.dirac_(ours, groups) is ours
    expected = torch.nn.init.dirac_(torch.empty(*shape), groups)
    np.testing.assert_array_equal(ours.numpy(), expected.numpy())


def test_dirac_conv_passes_its_input_through():
    conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)
    init.dirac_(conv.weight)
    x = Tensor.randn(2, 3, 5, 5)
    np.testing.assert_allclose(conv(x).numpy(), x.numpy(), atol=1e-6)


# ---- random fills: formulas, statistics, identity, reproducibility


def _draw(name, shape, **kwargs):
    # (seeded: the statistical checks below have tight margins, and an unseeded draw failed them now and then)
    Tensor.manual_seed(0)
    torch.manual_seed(0)
    ours = Tensor.empty(*shape)
    out = getattr(init, name)(ours, **kwargs)
    assert out is ours and ours.shape == shape
    theirs = getattr(torch.nn.init, name)(torch.empty(*shape), **kwargs)
    return ours.numpy().astype(np.float64), theirs.numpy().astype(np.float64)


def _check_uniform(ours, theirs, bound):
    # a uniform on [-bound, bound]: every value inside, the extremes near it, std bound / sqrt(3), as torch's draws
    assert np.abs(ours).max() <= bound * (1 + 1e-6)
    assert np.abs(ours).max() > 0.99 * bound
    assert np.abs(theirs).max() <= bound * (1 + 1e-6)
    assert ours.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert ours.std() == pytest.approx(theirs.std(), rel=0.03)
    assert abs(ours.mean()) < 0.02 * bound


def _check_normal(ours, theirs, std):
    assert ours.std() == pytest.approx(std, rel=0.02)
    assert ours.std() == pytest.approx(theirs.std(), rel=0.03)
    assert abs(ours.mean()) < 0.02 * std


LARGE = [(256, 512), (128, 64, 3, 3), (64, 96, 5), (32, 16, 3, 3, 3)]


@pytest.mark.parametrize("shape", LARGE)
@pytest.mark.parametrize("gain", [1.0, 0.5, math.sqrt(2)])
def test_xavier(shape, gain):
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    _check_uniform(*_draw("xavier_uniform_", shape, gain=gain), math.sqrt(3) * std)
    _check_normal(*_draw("xavier_normal_", shape, gain=gain), std)


@pytest.mark.parametrize("shape", LARGE)
@pytest.mark.parametrize(
    "mode, nonlinearity, a",
    [
        ("fan_in", "leaky_relu", 0),
        ("fan_in", "leaky_relu", math.sqrt(5)),
        ("fan_out", "relu", 0),
        ("fan_in", "tanh", 0),
        ("fan_out", "linear", 0),
        ("fan_in", "selu", 0),
        ("fan_out", "leaky_relu", 0.2),
        ("fan_in", "conv2d", 0),
    ],
)
def test_kaiming(shape, mode, nonlinearity, a):
    fan = torch.nn.init._calculate_correct_fan(torch.empty(*shape), mode)
    std = torch.nn.init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    kwargs = {"a": a, "mode": mode, "nonlinearity": nonlinearity}
    _check_uniform(*_draw("kaiming_uniform_", shape, **kwargs), math.sqrt(3) * std)
    _check_normal(*_draw("kaiming_normal_", shape, **kwargs), std)


@pytest.mark.parametrize("a, b", [(-1.0, 1.0), (2.0, 5.0)])
def test_uniform_and_normal(a, b):
    ours, theirs = _draw("uniform_", (400, 500), a=a, b=b)
    assert ours.min() >= a and ours.max() < b
    assert ours.mean() == pytest.approx((a + b) / 2, abs=0.01 * (b - a))
    assert ours.std() == pytest.approx(theirs.std(), rel=0.02)
    ours, theirs = _draw("normal_", (400, 500), mean=a, std=b)
    assert ours.mean() == pytest.approx(a, abs=0.02 * b)
    assert ours.std() == pytest.approx(b, rel=0.01)


def _truncated_normal_moments(mean, std, a, b):
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    z = cdf(beta) - cdf(alpha)
    m = mean + std * (pdf(alpha) - pdf(beta)) / z
    var = std**2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
    return m, math.sqrt(var)


@pytest.mark.parametrize(
    "mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (0.5, 1.0, -1.0, 2.0), (0.0, 0.02, -0.04, 0.04), (0.0, 3.0, 0.0, 1.0)]
)
def test_trunc_normal(mean, std, a, b):
    ours, theirs = _draw("trunc_normal_", (500, 400), mean=mean, std=std, a=a, b=b)
    assert ours.min() >= a and ours.max() <= b
    assert not np.isnan(ours).any()
    expected_mean, expected_std = _truncated_normal_moments(mean, std, a, b)
    assert ours.mean() == pytest.approx(expected_mean, abs=0.01 * (b - a))
    assert ours.std() == pytest.approx(expected_std, rel=0.02)
    assert ours.std() == pytest.approx(theirs.std(), rel=0.03)


def test_trunc_normal_warns_when_the_mean_is_far_from_the_interval():
    with pytest.warns(UserWarning, match="trunc_normal_: mean=.* over 2 std outside"):
        init.trunc_normal_(Tensor.empty(10), mean=10.0, std=1.0, a=-1.0, b=1.0)


@pytest.mark.parametrize("shape", [(6, 6), (10, 4), (4, 10), (8, 3, 3, 3), (3, 4, 5)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_orthogonal(shape, gain):
    w = Tensor.empty(*shape)
    assert init.orthogonal_(w, gain) is w
    q = w.numpy().reshape(shape[0], -1).astype(np.float64) / gain
    rows, cols = q.shape
    if rows >= cols:
        np.testing.assert_allclose(q.T @ q, np.eye(cols), atol=1e-5)
    else:
        np.testing.assert_allclose(q @ q.T, np.eye(rows), atol=1e-5)


def test_orthogonal_is_not_always_the_same_matrix():
    a, b = init.orthogonal_(Tensor.empty(5, 5)).numpy(), init.orthogonal_(Tensor.empty(5, 5)).numpy()
    assert not np.allclose(a, b)


@pytest.mark.parametrize("rows, cols, sparsity", [(10, 6, 0.1), (50, 40, 0.5), (7, 3, 0.9)])
def test_sparse(rows, cols, sparsity):
    w = Tensor.empty(rows, cols)
    assert init.sparse_(w, sparsity, std=0.5) is w
    values = w.numpy()
    expected = torch.nn.init.sparse_(torch.empty(rows, cols), sparsity, std=0.5).numpy()
    np.testing.assert_array_equal((values == 0).sum(0), (expected == 0).sum(0))
    assert ((values == 0).sum(0) == math.ceil(sparsity * rows)).all()


def test_sparse_std():
    values = init.sparse_(Tensor.empty(400, 300), 0.25, std=0.3).numpy()
    assert values[values != 0].std() == pytest.approx(0.3, rel=0.02)


RANDOM_INITS = [
    ("uniform_", {"a": -1, "b": 2}),
    ("normal_", {"std": 0.5}),
    ("trunc_normal_", {"std": 0.5}),
    ("xavier_uniform_", {}),
    ("xavier_normal_", {}),
    ("kaiming_uniform_", {"a": math.sqrt(5)}),
    ("kaiming_normal_", {"mode": "fan_out", "nonlinearity": "relu"}),
    ("orthogonal_", {}),
    ("sparse_", {"sparsity": 0.3}),
]


@pytest.mark.parametrize("name, kwargs", RANDOM_INITS, ids=[n for n, _ in RANDOM_INITS])
def test_reproducible_under_manual_seed(name, kwargs):
    def draw():
        Tensor.manual_seed(1234)
        return getattr(init, name)(Tensor.empty(6, 5), **kwargs).numpy()

    first, second = draw(), draw()
    np.testing.assert_array_equal(first, second)
    Tensor.manual_seed(99)
    assert not np.array_equal(first, getattr(init, name)(Tensor.empty(6, 5), **kwargs).numpy())


@pytest.mark.parametrize("name, kwargs", RANDOM_INITS, ids=[n for n, _ in RANDOM_INITS])
def test_generator_argument_draws_from_a_uopkit_generator(name, kwargs):
    # reproducible from the generator's seed, and the global stream isn't moved; anything else is refused by name
    def draw(seed):
        return getattr(init, name)(Tensor.empty(6, 5), **kwargs, generator=Generator().manual_seed(seed)).numpy()

    Tensor.manual_seed(0)
    untouched = Tensor.rand(4).numpy()
    Tensor.manual_seed(0)
    first = draw(3)
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), untouched)
    np.testing.assert_array_equal(draw(3), first)
    assert not np.array_equal(draw(4), first)
    with pytest.raises(TypeError, match=f"{name}: generator must be a uopkit.Generator"):
        getattr(init, name)(Tensor.empty(6, 5), **kwargs, generator=object())


ALL_INITS = [
    *RANDOM_INITS,
    ("constant_", {"val": 0.3}),
    ("ones_", {}),
    ("zeros_", {}),
    ("eye_", {}),
]


@pytest.mark.parametrize("name, kwargs", ALL_INITS, ids=[n for n, _ in ALL_INITS])
def test_a_modules_parameter_stays_the_same_object(name, kwargs):
    layer = nn.Linear(5, 6)
    weight, params = layer.weight, list(layer.parameters())
    view = weight.reshape(-1)
    assert getattr(init, name)(layer.weight, **kwargs) is weight
    assert layer.weight is weight and list(layer.parameters())[0] is weight and params[0] is weight
    assert weight.requires_grad and weight.grad is None
    assert is_grad_enabled()
    values = weight.numpy()
    # every view of it, and the module's state dict, show the new values
    np.testing.assert_array_equal(view.numpy(), values.reshape(-1))
    np.testing.assert_array_equal(layer.state_dict()["weight"].numpy(), values)
    # the fill is not part of the graph: the gradient is the one of the forward pass alone
    x = Tensor.randn(3, 5)
    layer(x).sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), np.tile(x.numpy().sum(0), (6, 1)), rtol=1e-5, atol=1e-5)


def test_parameter_objects_and_conv_weights():
    conv = nn.Conv2d(4, 8, 3)
    weight = conv.weight
    init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    init.zeros_(conv.bias)
    assert conv.weight is weight
    np.testing.assert_array_equal(conv.bias.numpy(), np.zeros(8, np.float32))
    p = nn.Parameter(Tensor.zeros(3, 4))
    assert init.xavier_uniform_(p) is p and isinstance(p, nn.Parameter) and np.abs(p.numpy()).max() > 0


def test_filling_a_view_writes_into_its_base():
    w = Tensor.ones(3, 4).contiguous().realize()
    init.zeros_(w[1])
    init.constant_(w[:, 3], 7.0)
    expected = np.ones((3, 4), np.float32)
    expected[1] = 0
    expected[:, 3] = 7
    np.testing.assert_array_equal(w.numpy(), expected)


def test_half_tensor_keeps_its_dtype():
    w = Tensor.empty(16, 16, dtype="float16")
    assert init.xavier_uniform_(w).dtype == w.dtype
    assert np.abs(w.numpy().astype(np.float32)).max() <= math.sqrt(6 / 32) * 1.001


def test_kaiming_on_an_empty_tensor_warns_and_does_nothing():
    w = Tensor.empty(0, 3)
    with pytest.warns(UserWarning, match="has no elements, nothing to initialize"):
        assert init.kaiming_uniform_(w) is w
    with pytest.warns(UserWarning, match="has no elements, nothing to initialize"):
        assert init.kaiming_normal_(w) is w


def test_orthogonal_of_an_empty_tensor():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert init.orthogonal_(Tensor.empty(0, 3)).shape == (0, 3)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: init.xavier_uniform_(Tensor.empty(5)),
            "xavier_uniform_: fan_in/fan_out need a weight of at least 2 dims",
        ),
        (
            lambda: init.xavier_normal_(Tensor.empty(5)),
            "xavier_normal_: fan_in/fan_out need a weight of at least 2 dims",
        ),
        (
            lambda: init.kaiming_uniform_(Tensor.empty(5)),
            "kaiming_uniform_: fan_in/fan_out need a weight of at least 2 dims",
        ),
        (lambda: init.kaiming_normal_(Tensor.empty(3, 4), mode="fan"), "kaiming_normal_: mode fan not supported"),
        (lambda: init.kaiming_uniform_(Tensor.empty(3, 4), nonlinearity="gelu"), "kaiming_uniform_: unsupported"),
        (lambda: init.kaiming_normal_(Tensor.empty(3, 4), a="x"), "kaiming_normal_: negative_slope"),
        (lambda: init.orthogonal_(Tensor.empty(5)), "orthogonal_: takes a tensor of at least 2 dims, got shape"),
        (lambda: init.eye_(Tensor.empty(2, 2, 2)), "eye_: takes a 2-D tensor, got shape"),
        (lambda: init.sparse_(Tensor.empty(2, 2, 2), 0.5), "sparse_: takes a 2-D tensor, got shape"),
        (lambda: init.dirac_(Tensor.empty(3, 3)), "dirac_: takes a 3-D, 4-D or 5-D conv weight, got shape"),
        (lambda: init.dirac_(Tensor.empty(3, 3, 3), groups=2), "dirac_: dim 0 .* divisible by groups"),
    ],
)
def test_bad_input_raises_value_error_naming_the_function(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_torch_style_init_loop_then_a_training_step():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3)
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(self.conv(x).relu().mean((2, 3)))

    net = Net()
    # parameters collected before the init (as an optimizer made first holds them) are the objects initialized
    params = list(net.parameters())
    for m in net.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            init.constant_(m.bias, 0.5)
    before = net.fc.weight.numpy().copy()
    np.testing.assert_array_equal(net.fc.bias.numpy(), np.full(3, 0.5, np.float32))
    net(Tensor.randn(2, 2, 5, 5)).sum().backward()
    grad = net.fc.weight.grad.numpy()
    with no_grad():
        for p in params:
            p -= 0.1 * p.grad
    np.testing.assert_allclose(net.fc.weight.numpy(), before - 0.1 * grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_float_dtypes(dtype):
    for name, kwargs in RANDOM_INITS:
        w = Tensor.empty(6, 5, dtype=dtype)
        assert getattr(init, name)(w, **kwargs).dtype == w.dtype
        assert np.isfinite(w.numpy()).all()
    q = init.orthogonal_(Tensor.empty(5, 5, dtype="float64")).numpy()
    if dtype == "float64":
        np.testing.assert_allclose(q.T @ q, np.eye(5), atol=1e-12)


def test_a_lazy_tensor_that_requires_grad():
    w = Tensor.empty(4, 3, requires_grad=True)
    assert init.xavier_normal_(w) is w and w.requires_grad
    (w * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((4, 3), 2, np.float32))

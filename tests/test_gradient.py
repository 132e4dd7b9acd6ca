"""Autograd: every gradient rule checked against PyTorch (and finite differences), plus what must stop gradients."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import uopkit.autograd
from uopkit import Tensor, dtypes
from uopkit.gradient import GradientError, compute_gradient, pm_gradient
from uopkit.uop.ops import Ops, UOp

torch = pytest.importorskip("torch")

# reseeded before each test from the test's id (tests/conftest.py): a test's inputs depend on its name only
RNG = np.random.default_rng(0)


def _randn(*shape: int, low: float | None = None, high: float | None = None) -> np.ndarray:
    if low is not None:
        return RNG.uniform(low, high, shape).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def check_grad(
    fn: Callable,
    arrays: list[np.ndarray],
    torch_fn: Callable | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Run `fn` in uopkit and PyTorch; compare the values and the gradients of sum(out * random upstream)."""
    torch_fn = torch_fn or fn
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), torch_fn(*theirs)
    assert out.shape == tuple(ref.shape), f"shape {out.shape} vs torch {tuple(ref.shape)}"
    # a random upstream gradient checks the whole vector-Jacobian product, not just its sum
    upstream = RNG.standard_normal(out.shape).astype(np.float32)
    # backward before reading values: realizing a tensor replaces its graph by its buffer
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        assert t.grad is not None, f"input {i} got no gradient"
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=rtol, err_msg=f"gradient {i}")


# ---------------------------------------------------------------------------------------------------------------------
# unary math and activations (inputs kept away from kinks and poles)

UNARY = {
    "neg": (lambda x: -x, None),
    "exp": (lambda x: x.exp(), None),
    "exp2": (lambda x: x.exp2(), None),
    "log": (lambda x: x.log(), (0.1, 5.0)),
    "log2": (lambda x: x.log2(), (0.1, 5.0)),
    "sqrt": (lambda x: x.sqrt(), (0.1, 5.0)),
    "rsqrt": (lambda x: x.rsqrt(), (0.1, 5.0)),
    "reciprocal": (lambda x: x.reciprocal(), (0.5, 5.0)),
    "sin": (lambda x: x.sin(), (-6.0, 6.0)),
    "cos": (lambda x: x.cos(), (-6.0, 6.0)),
    "abs": (lambda x: x.abs(), None),
    "relu": (lambda x: x.relu(), None),
    "sigmoid": (lambda x: x.sigmoid(), None),
    "tanh": (lambda x: x.tanh(), None),
    "square": (lambda x: x.square(), None),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name: str) -> None:
    fn, domain = UNARY[name]
    x = _randn(3, 4) if domain is None else _randn(3, 4, low=domain[0], high=domain[1])
    # keep clear of the kinks of abs/relu
    x = np.where(np.abs(x) < 0.05, 0.3, x).astype(np.float32)
    check_grad(fn, [x])


# large arguments, where pi/2 - x rounds in x's dtype: the derivative must be cos(x) (sin's) as torch's, not sin of the
# rounded shift (float32 12345678 gave -0.766 for -0.429, +-1e30 gave sin(x), float16 300 the wrong sign)
LARGE_TRIG_ARGS = {
    "float32": [-1e30, 1e30, 1e10, 12345678.0, 1e6, 3.0, 1.5707964],
    "float64": [-1e300, 1e30, 1e16, 12345678.9, 1e6, 3.0, 1.5707963267948966],
    "float16": [3.0, 10.3, 50.1, 100.0, 300.0, 1000.0, 60000.0],
    "bfloat16": [3.0, 300.0, 1e4, 1e10, 3e38, -3e38, 1.5703125],
}


@pytest.mark.parametrize("dtype", list(LARGE_TRIG_ARGS))
@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trig_gradients_at_large_arguments_match_torch(op: str, dtype: str) -> None:
    values = LARGE_TRIG_ARGS[dtype]
    ours = Tensor(values, dtype=dtype, requires_grad=True)
    theirs = torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=True)
    getattr(ours, op)().sum().backward()
    getattr(theirs, op)().sum().backward()
    assert ours.grad is not None and ours.grad.dtype == ours.dtype
    want = theirs.grad.double().numpy()
    # (an ulp or so of the derivative's dtype: float32's reduction of x is exact, float16/bfloat16 round the float32)
    atol = {"float32": 1e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    np.testing.assert_allclose(ours.grad.cast(dtypes.float64).numpy(), want, rtol=1e-5, atol=atol)


def test_sin_second_derivative_at_large_arguments_matches_torch() -> None:
    values = [-1e30, 12345678.0, 1e6, 3.0]
    ours, theirs = Tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    (first,) = ours.sin().sum().gradient(ours)
    (second,) = first.sum().gradient(ours)
    (tfirst,) = torch.autograd.grad(theirs.sin().sum(), theirs, create_graph=True)
    (tsecond,) = torch.autograd.grad(tfirst.sum(), theirs)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), rtol=1e-5, atol=1e-6)


def test_sin_node_rule_at_large_arguments() -> None:
    # a SIN node built directly (not by Tensor.sin, which gives its derivative through Tensor.cos) gets the rule of
    # pm_gradient: cos(x) = 1 - 2 sin(x/2)^2, whose halving is exact, within about an ulp of 1.0
    values = np.array([-1e30, 1e30, 1e10, 12345678.0, 1e6, 3.0], dtype=np.float32)
    x = Tensor(values, requires_grad=True)
    x._alu(Ops.SIN).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), np.cos(values.astype(np.float64)), atol=1e-6)


# tensor methods another part of issue 3 adds; checked as soon as they exist
OPTIONAL_UNARY = [
    "gelu", "quick_gelu", "silu", "swish", "softplus", "mish", "elu", "celu", "selu", "leaky_relu", "hardsigmoid",
    "hardswish", "hardtanh", "relu6", "softsign", "tan", "log_softmax", "softmax", "logsumexp", "std", "var",
    "cumsum", "cumprod",
]  # fmt: skip
TORCH_NAMES = {
    "gelu": torch.nn.functional.gelu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "silu": torch.nn.functional.silu,
    "swish": torch.nn.functional.silu,
    "softplus": torch.nn.functional.softplus,
    "mish": torch.nn.functional.mish,
    "elu": torch.nn.functional.elu,
    "celu": torch.nn.functional.celu,
    "selu": torch.nn.functional.selu,
    "leaky_relu": torch.nn.functional.leaky_relu,
    "hardsigmoid": torch.nn.functional.hardsigmoid,
    "hardswish": torch.nn.functional.hardswish,
    "hardtanh": torch.nn.functional.hardtanh,
    "relu6": torch.nn.functional.relu6,
    "softsign": torch.nn.functional.softsign,
    "tan": torch.tan,
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "softmax": lambda x: torch.softmax(x, -1),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "std": lambda x: x.std(-1),
    "var": lambda x: x.var(-1),
    "cumsum": lambda x: x.cumsum(-1),
    "cumprod": lambda x: x.cumprod(-1),
}
OURS_ARGS = {"log_softmax": (-1,), "softmax": (-1,), "logsumexp": (-1,), "std": (-1,), "var": (-1,), "cumsum": (-1,)}


@pytest.mark.parametrize("name", OPTIONAL_UNARY)
def test_activation_and_functional(name: str) -> None:
    if not hasattr(Tensor, name):
        pytest.skip(f"Tensor.{name} doesn't exist yet")
    args = OURS_ARGS.get(name, (-1,) if name == "cumprod" else ())
    x = _randn(3, 5, low=-1.2, high=1.2) if name != "tan" else _randn(3, 5, low=-1.0, high=1.0)
    # keep clear of the kinks of the piecewise activations (0, +-1, +-3, 6)
    for kink in (0.0, 1.0, -1.0):
        x = np.where(np.abs(x - kink) < 0.05, kink + 0.2, x).astype(np.float32)
    check_grad(lambda t: getattr(t, name)(*args), [x], TORCH_NAMES[name], atol=1e-4, rtol=1e-3)


# ---------------------------------------------------------------------------------------------------------------------
# binary ops with broadcasting


BINARY = {
    "add": (lambda a, b: a + b, None),
    "sub": (lambda a, b: a - b, None),
    "mul": (lambda a, b: a * b, None),
    "div": (lambda a, b: a / b, (0.5, 3.0)),
    "maximum": (lambda a, b: a.maximum(b), None),
    "minimum": (lambda a, b: a.minimum(b), None),
    "pow": (lambda a, b: a**b, (0.5, 3.0)),
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (3,))])
def test_binary_broadcast(name: str, shapes: tuple) -> None:
    fn, domain = BINARY[name]
    lo, hi = domain if domain is not None else (-2.0, 2.0)
    a, b = _randn(*shapes[0], low=lo, high=hi), _randn(*shapes[1], low=lo, high=hi)
    check_grad(fn, [a, b], atol=1e-4, rtol=1e-4)


def test_maximum_tie_splits_the_gradient_like_torch() -> None:
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([1.0, 0.0, 5.0], dtype=np.float32)
    check_grad(lambda x, y: x.maximum(y), [a, b])


def test_binary_with_python_scalars() -> None:
    x = _randn(2, 3)
    check_grad(lambda t: 3.0 * t - 1.5 + t / 2.0, [x])
    check_grad(lambda t: 2.0 / (t.abs() + 1.0), [x])


def test_where_gradient_flows_to_chosen_side() -> None:
    c = RNG.random((3, 4)) > 0.5
    a, b = _randn(3, 4), _randn(1, 4)
    check_grad(lambda x, y: Tensor(c).where(x, y), [a, b], lambda x, y: torch.where(torch.tensor(c), x, y))


def test_clip_gradient() -> None:
    x = np.array([-2.0, -0.5, 0.5, 2.0], dtype=np.float32)
    check_grad(lambda t: t.clip(-1.0, 1.0), [x], lambda t: t.clamp(-1.0, 1.0))


# ---------------------------------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (-1, -3)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean(axis: int | tuple | None, keepdim: bool) -> None:
    x = _randn(2, 3, 4)
    tax = tuple(range(3)) if axis is None else axis
    check_grad(lambda t: t.sum(axis, keepdim=keepdim), [x], lambda t: t.sum(tax, keepdim=keepdim))
    check_grad(lambda t: t.mean(axis, keepdim=keepdim), [x], lambda t: t.mean(tax, keepdim=keepdim))


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_max_min(axis: int | None) -> None:
    x = _randn(3, 5)
    if axis is None:
        check_grad(lambda t: t.max(), [x], lambda t: t.amax())
        check_grad(lambda t: t.min(), [x], lambda t: t.amin())
    else:
        check_grad(lambda t: t.max(axis=axis), [x], lambda t: t.amax(axis))
        check_grad(lambda t: t.min(axis=axis, keepdim=True), [x], lambda t: t.amin(axis, keepdim=True))


def test_max_with_ties_splits_evenly_like_amax() -> None:
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    check_grad(lambda t: t.max(axis=1), [x], lambda t: t.amax(1))


def test_prod_gradient() -> None:
    x = _randn(3, 4, low=0.5, high=1.5)
    check_grad(lambda t: t.prod(axis=1), [x], lambda t: t.prod(1))


@pytest.mark.parametrize("axis", [1, 0, None])
def test_prod_gradient_with_zeros(axis) -> None:
    # rows with no zero, one zero, two zeros and a -0.0: the product of the others, never 0 / 0
    x = np.array([[0.0, 2, 3, 4], [0, 0, 2, 1], [1, 2, 3, 4], [-0.0, 5, 7, 1]], np.float32)
    t, r = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (t.prod(axis) if axis is not None else t.prod()).sum().backward()
    (r.prod(axis) if axis is not None else r.prod()).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), r.grad.numpy())


# ---------------------------------------------------------------------------------------------------------------------
# movement and indexing


MOVEMENT = {
    "reshape": (lambda t: t.reshape(4, 6), None),
    "reshape_-1": (lambda t: t.reshape(-1, 3), None),
    "permute": (lambda t: t.permute(2, 0, 1), None),
    "permute_negative": (lambda t: t.permute(-1, -3, -2), lambda t: t.permute(2, 0, 1)),
    "transpose": (lambda t: t.transpose(0, 2), None),
    "expand": (lambda t: t.reshape(2, 1, 3, 4).expand(2, 5, 3, 4), None),
    "pad": (lambda t: t.pad(((1, 0), (0, 2), (3, 1))), lambda t: torch.nn.functional.pad(t, (3, 1, 0, 2, 1, 0))),
    "shrink": (lambda t: t.shrink(((0, 1), (1, 3), (1, 4))), lambda t: t[0:1, 1:3, 1:4]),
    "flip": (lambda t: t.flip((0, 2)), lambda t: t.flip((0, 2))),
    "getitem_int": (lambda t: t[1], None),
    "getitem_slices": (lambda t: t[:, 1:, ::2], None),
    "getitem_negative_step": (lambda t: t[::-1, :, 1::-1], lambda t: t.flip(0)[:, :, :2].flip(2)),
    "getitem_none_ellipsis": (lambda t: t[None, ..., 2], None),
    "unsqueeze": (lambda t: t.unsqueeze(-1), None),
    "flatten": (lambda t: t.flatten(1), None),
    "T": (lambda t: t.T, lambda t: t.permute(2, 1, 0)),
    "contiguous": (lambda t: t.permute(1, 0, 2).contiguous(), None),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement(name: str) -> None:
    fn, tfn = MOVEMENT[name]
    check_grad(fn, [_randn(2, 3, 4)], tfn)


def test_squeeze() -> None:
    check_grad(lambda t: t.squeeze(1) * 2, [_randn(3, 1, 2)])


def test_non_contiguous_input_through_elementwise_and_reduce() -> None:
    check_grad(lambda t: (t.permute(1, 0).exp() * t.T).sum(axis=0), [_randn(4, 3)])


# ---------------------------------------------------------------------------------------------------------------------
# linear algebra


@pytest.mark.parametrize(
    "shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2))]
)
def test_matmul(shapes: tuple) -> None:
    a, b = _randn(*shapes[0]), _randn(*shapes[1])
    check_grad(lambda x, y: x @ y, [a, b], atol=1e-4)


def test_matmul_weight_gradient_is_stored_in_the_weights_layout() -> None:
    # x.T @ g, as PyTorch computes it: w.grad is a plain buffer shaped like w, and the optimizer's update reads it
    # along w's rows (the chain of rules gave a sum in w.T's layout read back through a transpose)
    x, w = Tensor(_randn(16, 24)), Tensor(_randn(24, 32), requires_grad=True)
    ((x @ w).relu() * Tensor(_randn(16, 32))).sum().backward()
    assert w.grad is not None
    from uopkit.schedule import create_schedule, kernelize_tensors

    ast = create_schedule(kernelize_tensors([w.grad]))[-1].ast
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
    assert len(reduces) == 1 and reduces[0].src[0].shape == (24, 32, 16)
    w.grad.realize()
    assert w.grad._is_plain_buffer()


def test_matmul_second_derivative_matches_torch() -> None:
    # the given gradient is itself a matmul with a given gradient: a Hessian-vector product through two layers
    x, w1, w2, v = _randn(6, 5), _randn(5, 4), _randn(4, 3), _randn(5, 4)
    ox, ow1 = Tensor(x, requires_grad=True), Tensor(w1, requires_grad=True)
    (g1,) = ((ox @ ow1).tanh() @ Tensor(w2)).square().sum().gradient(ow1)
    gx, gw = (g1 * Tensor(v)).sum().gradient(ox, ow1)
    tx, tw1 = torch.tensor(x, requires_grad=True), torch.tensor(w1, requires_grad=True)
    (tg1,) = torch.autograd.grad(((tx @ tw1).tanh() @ torch.tensor(w2)).square().sum(), tw1, create_graph=True)
    tgx, tgw = torch.autograd.grad((tg1 * torch.tensor(v)).sum(), (tx, tw1))
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw.numpy(), tgw.numpy(), rtol=1e-4, atol=1e-5)


def test_mlp_chain_rule() -> None:
    x, w1, w2 = _randn(8, 5), _randn(5, 7), _randn(7, 3)

    def f(x, w1, w2):
        return ((x @ w1).relu() @ w2).sigmoid().mean()

    check_grad(f, [x, w1, w2], atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# nn functional ops another part of issue 3 adds: checked as soon as they exist


def _needs(*names: str) -> None:
    for n in names:
        if not hasattr(Tensor, n):
            pytest.skip(f"Tensor.{n} doesn't exist yet")


def test_conv2d_gradient() -> None:
    _needs("conv2d")
    x, w, b = _randn(2, 4, 7, 6), _randn(6, 2, 3, 3), _randn(6)
    check_grad(
        lambda x, w, b: x.conv2d(w, b, groups=2, stride=(2, 1), dilation=(1, 2), padding=1),
        [x, w, b],
        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, groups=2, stride=(2, 1), dilation=(1, 2), padding=1),
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "xs, ws, kwargs",
    [
        ((2, 4, 9, 8), (6, 4, 3, 3), dict(padding=1)),
        ((1, 3, 10, 11), (4, 3, 3, 3), dict(stride=(2, 3), padding=(0, 2), dilation=(2, 1))),
        ((2, 4, 7, 7), (4, 1, 3, 3), dict(padding="same", dilation=2, groups=4)),
        ((2, 3, 8, 8), (2, 3, 5, 5), dict(stride=2)),
        ((2, 3, 12), (5, 3, 4), dict(stride=3, padding=2)),
        ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=1)),
    ],
)
def test_conv_gradients_are_whole_convolutions(xs, ws, kwargs) -> None:
    # conv gives its input's gradient as a transposed convolution and its weight's as one reduce (set_gradient):
    # strides whose last window leaves a tail of the input unread, dilation, groups, 1-d and 3-d
    x, w = _randn(*xs), _randn(*ws)
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[len(xs) - 2]
    check_grad(lambda x, w: x.conv2d(w, **kwargs), [x, w], lambda x, w: conv(x, w, **kwargs), atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_input_gradient_is_one_convolution_kernel(stride: int) -> None:
    # not the gather of the windows' movement ops (a division and a modulo per element, per tap): the pad of the
    # output's gradient and one reduce, with no division or modulo anywhere in its kernel. A strided conv's gradient
    # is spread (zeros between neighbours) and padded in a kernel of its own: read through the spread's views, every
    # tap's address took divisions and modulos (a 4x64x56x56 stride-2 conv's input gradient: 0.7 s)
    from uopkit.codegen import get_program
    from uopkit.device import Device
    from uopkit.schedule import create_schedule, kernelize_tensors

    x = Tensor(_randn(2, 8, 12, 12), requires_grad=True)
    w = Tensor(_randn(8, 8, 3, 3))
    out = x.conv2d(w, padding=1, stride=stride)
    out.square().sum().backward()
    assert x.grad is not None
    tx, tw = torch.tensor(x.numpy(), requires_grad=True), torch.tensor(w.numpy())
    torch.nn.functional.conv2d(tx, tw, padding=1, stride=stride).square().sum().backward()
    schedule = create_schedule(kernelize_tensors([x.grad]))
    reduces = [it for it in schedule if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort())]
    src = get_program(schedule[-1].ast, Device["CPU"].renderer).src
    index_math = [line for line in src.splitlines() if line.strip().startswith(("int alu", "long long alu"))]
    assert index_math and not [line for line in index_math if "%" in line or "/" in line]
    # the forward conv (for square's gradient) and the input gradient's conv: with stride 2 its phases (taps 1x1, 1x2,
    # 2x1, 2x2) are joined by pads, and the 2x2 one, 4 times the work in the pad's kernel, is stored by a kernel of its
    # own (schedule/grouper.py, a reduce read through a pad)
    assert len(reduces) == (2 if stride == 1 else 3)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_given_gradient_yields_to_a_target_inside_its_subgraph() -> None:
    # the windows of x that conv2d builds (the same node, shared) as a target of their own: they need the gradient
    # flowing through them, so the chain of rules is taken; every gradient is still right
    x, w = _randn(1, 2, 6, 6), _randn(3, 2, 3, 3)
    ours_x, ours_w = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    windows = ours_x._windows(((0, 0), (0, 0), (1, 1), (1, 1)), (3, 3), (1, 1), (1, 1))
    windows.retain_grad()
    out = ours_x.conv2d(ours_w, padding=1)
    (out * out).sum().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tout = torch.nn.functional.conv2d(tx, tw, padding=1)
    (tout**2).sum().backward()
    assert windows.grad is not None and windows.grad.shape == (1, 2, 6, 6, 3, 3)
    # d/d windows[n, c, oh, ow, kh, kw] = sum over co of 2 * out[n, co, oh, ow] * w[co, c, kh, kw]
    want = np.einsum("nopq,ockl->ncpqkl", 2 * tout.detach().numpy(), w)
    np.testing.assert_allclose(windows.grad.numpy(), want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ours_x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ours_w.grad.numpy(), tw.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_conv_transpose2d_gradient() -> None:
    _needs("conv_transpose2d")
    x, w, b = _randn(2, 4, 5, 5), _randn(4, 3, 3, 3), _randn(3)
    check_grad(
        lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=1, output_padding=1),
        [x, w, b],
        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "nd, kwargs",
    [
        (1, dict(stride=3, padding=1, output_padding=2)),
        (2, dict(stride=2)),
        (2, dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=(2, 1), groups=2)),
        (3, dict(stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1))),
    ],
)
def test_strided_conv_transpose_second_derivatives_match_torch(nd: int, kwargs: dict) -> None:
    # a strided transposed convolution's given gradient: the weight's part is a gradient taken along the incoming
    # gradient, which depends on x and w itself (a Hessian-vector product w.r.t. the weight alone has only that path)
    _needs("conv_transpose2d")
    torch_fn = getattr(torch.nn.functional, f"conv_transpose{nd}d")
    groups = kwargs.get("groups", 1)
    arrays = [_randn(2, 4, *(4,) * nd), _randn(4, 3, *(3,) * nd), _randn(3 * groups)]
    vs = [_randn(*a.shape) for a in arrays]
    for wrt in ((1,), (0, 1, 2)):
        ours = [Tensor(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
        theirs = [torch.tensor(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
        y, ty = ours[0].conv_transpose2d(*ours[1:], **kwargs), torch_fn(*theirs, **kwargs)
        gs = (y.tanh() * y).sum().gradient(*[ours[i] for i in wrt])
        hv = sum((g * Tensor(vs[i])).sum() for g, i in zip(gs, wrt, strict=True)).gradient(*[ours[i] for i in wrt])
        tgs = torch.autograd.grad((ty.tanh() * ty).sum(), [theirs[i] for i in wrt], create_graph=True)
        thv = torch.autograd.grad(
            sum((g * torch.tensor(vs[i])).sum() for g, i in zip(tgs, wrt, strict=True)), [theirs[i] for i in wrt]
        )
        for i, a, b in zip(wrt, hv, thv, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"wrt {wrt}: input {i}")


# stride, padding, output_padding, dilation (per spatial axis) and groups: output_padding may reach up to the larger
# of stride and dilation, so a stride-1 axis can have one (its input gradient's convolution came out longer than x)
CONV_TRANSPOSE_GRID = [
    (1, dict(stride=1, padding=0, output_padding=1, dilation=2)),
    (1, dict(stride=3, padding=1, output_padding=2, dilation=1, groups=2)),
    (1, dict(stride=2, padding=2, output_padding=2, dilation=3)),
    (2, dict(stride=(2, 1), padding=(1, 0), output_padding=1, dilation=(1, 2))),
    (2, dict(stride=(1, 2), padding=0, output_padding=(1, 1), dilation=2)),
    (2, dict(stride=(1, 3), padding=(1, 1), output_padding=(2, 0), dilation=(3, 1), groups=2)),
    (2, dict(stride=(3, 1), padding=(0, 1), output_padding=(1, 1), dilation=(1, 2), groups=2)),
    (2, dict(stride=2, padding=1, output_padding=1, dilation=1)),
    (2, dict(stride=1, padding=1, output_padding=(0, 1), dilation=(1, 2))),
    (3, dict(stride=(1, 2, 1), padding=(0, 1, 0), output_padding=(1, 1, 0), dilation=(2, 1, 1))),
    (3, dict(stride=(2, 1, 2), padding=1, output_padding=(0, 1, 1), dilation=(1, 2, 1), groups=2)),
]


@pytest.mark.parametrize("nd, kwargs", CONV_TRANSPOSE_GRID)
def test_conv_transpose_gradients_over_a_grid_match_torch(nd: int, kwargs: dict) -> None:
    _needs("conv_transpose2d")
    groups = kwargs.get("groups", 1)
    torch_fn = getattr(torch.nn.functional, f"conv_transpose{nd}d")
    arrays = [_randn(2, 2 * groups, *(4, 5, 3)[:nd]), _randn(2 * groups, 3, *(2, 3, 2)[:nd]), _randn(3 * groups)]
    check_grad(
        lambda x, w, b: x.conv_transpose2d(w, b, **kwargs),
        arrays,
        lambda x, w, b: torch_fn(x, w, b, **kwargs),
        atol=1e-4,
    )


def test_strided_conv_transpose_passes_gradgradcheck() -> None:
    _needs("conv_transpose2d")
    from uopkit.tensor.gradcheck import gradgradcheck

    x, w, b = (
        Tensor(a.astype(np.float64), requires_grad=True) for a in (_randn(1, 2, 3, 3), _randn(2, 2, 2, 3), _randn(2))
    )
    assert gradgradcheck(
        lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=(0, 1), output_padding=1), (x, w, b)
    )


def test_strided_conv_transpose_applied_to_its_own_output_counts_the_weight_once() -> None:
    # a recurrent decoder: the same strided transposed conv applied again to (a function of) its last output; the
    # weight's gradient counted the path through that input twice
    _needs("conv_transpose2d")

    def fn(convt, x, w):
        o = convt(x, w, stride=2, padding=1)
        return convt(o[:, :, ::2, ::2] * 0.5, w, stride=2, padding=1)

    check_grad(
        lambda x, w: fn(Tensor.conv_transpose2d, x, w),
        [_randn(1, 2, 3, 3), _randn(2, 2, 3, 3)],
        lambda x, w: fn(torch.nn.functional.conv_transpose2d, x, w),
        atol=1e-4,
    )


def test_pool_gradients() -> None:
    _needs("max_pool2d", "avg_pool2d")
    x = _randn(2, 3, 6, 6)
    check_grad(lambda t: t.max_pool2d(2), [x], lambda t: torch.nn.functional.max_pool2d(t, 2))
    check_grad(lambda t: t.avg_pool2d(3, stride=2), [x], lambda t: torch.nn.functional.avg_pool2d(t, 3, stride=2))


@pytest.mark.parametrize(
    "op, kwargs, shape",
    [
        ("max", dict(kernel_size=3, stride=2, padding=1), (2, 3, 9, 8)),
        ("avg", dict(kernel_size=3, stride=1, padding=1), (2, 3, 7, 7)),
        ("max", dict(kernel_size=2, stride=1, dilation=2), (1, 2, 7, 6)),
        ("avg", dict(kernel_size=(3, 2), stride=(2, 1)), (2, 2, 9, 7)),
        ("max", dict(kernel_size=(3,), stride=2), (2, 3, 11)),
        ("avg", dict(kernel_size=(2, 2, 3), stride=1), (1, 2, 4, 5, 6)),
    ],
)
def test_overlapping_pool_gradients(op, kwargs, shape) -> None:
    # windows that overlap give their gradient as one sum of a placed slice per tap (set_gradient); every tap's
    # slice lands where PyTorch puts it, whatever the stride, dilation, padding and rank
    theirs = getattr(torch.nn.functional, f"{op}_pool{len(shape) - 2}d")
    check_grad(lambda t: getattr(t, f"{op}_pool2d")(**kwargs), [_randn(*shape)], lambda t: theirs(t, **kwargs))


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(kernel_size=2), (2, 2, 6, 6)),
        (dict(kernel_size=3, stride=2, padding=1), (2, 2, 9, 8)),
        (dict(kernel_size=(2, 3), stride=1, dilation=(1, 2), ceil_mode=True), (1, 2, 7, 9)),
        (dict(kernel_size=(3,), stride=2), (2, 3, 11)),
    ],
)
def test_max_pool_gradient_goes_to_the_first_max_of_a_tie(kwargs, shape) -> None:
    # ties (windows of zeros after a ReLU, repeated values, a NaN, windows of -inf): each window's gradient goes to
    # its first maximum in scan order, as PyTorch's; the max reduce's own rule would share it among the tied ones
    x = RNG.integers(-1, 2, shape).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -np.inf, -np.inf]
    theirs = getattr(torch.nn.functional, f"max_pool{len(shape) - 2}d")
    check_grad(lambda t: t.relu().max_pool2d(**kwargs), [x], lambda t: theirs(t.relu(), **kwargs))
    check_grad(lambda t: t.max_pool2d(**kwargs), [x], lambda t: theirs(t, **kwargs))
    ours = Tensor(x, requires_grad=True)
    values, _ = ours.max_pool2d(**kwargs, return_indices=True)
    values.sum().backward()
    ref = torch.tensor(x, requires_grad=True)
    theirs(ref, **kwargs).sum().backward()
    assert ours.grad is not None and ref.grad is not None
    np.testing.assert_array_equal(ours.grad.numpy(), ref.grad.numpy())
    # bfloat16 (a CNN under CPU autocast): a reader of its values reads their uint16 bits, and the given first-max
    # gradient was skipped for the max reduce's own rule, half of a tie's gradient to each
    g = RNG.standard_normal(theirs(torch.tensor(x), **kwargs).shape).astype(np.float32)
    ours = Tensor(x).cast(dtypes.bfloat16).relu().requires_grad_()
    (ours.max_pool2d(**kwargs).float() * Tensor(g)).sum().backward()
    ref = torch.tensor(x).bfloat16().relu().requires_grad_()
    (theirs(ref, **kwargs).float() * torch.tensor(g)).sum().backward()
    assert ours.grad is not None and ref.grad is not None and ours.grad.dtype == dtypes.bfloat16
    # (exact where windows don't overlap; where they do, a sum of windows' gradients may round an ulp of its terms
    # apart: torch's adds in bfloat16, ours in float32)
    np.testing.assert_allclose(ours.grad.float().numpy(), ref.grad.float().numpy(), rtol=1e-2, atol=2**-6)
    values, indices = Tensor(x).cast(dtypes.bfloat16).max_pool2d(**kwargs, return_indices=True)
    t_values, t_indices = theirs(torch.tensor(x).bfloat16(), **kwargs, return_indices=True)
    assert values.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(values.float().numpy(), t_values.float().numpy())
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())


@pytest.mark.parametrize(
    "pool, kwargs, shape",
    [
        ("max_pool", dict(kernel_size=2, stride=1), (1, 1, 2, 4)),
        ("max_pool", dict(kernel_size=3, stride=2, padding=1), (2, 2, 7, 8)),
        ("max_pool", dict(kernel_size=(3,), stride=2, padding=1), (2, 3, 17)),
        ("max_pool", dict(kernel_size=(2, 2, 2), stride=1, padding=1), (1, 2, 4, 5, 4)),
        ("adaptive_max_pool", dict(output_size=(3, 4)), (2, 2, 7, 9)),
        ("adaptive_max_pool", dict(output_size=(2, 3)), (2, 2, 6, 9)),
        ("adaptive_max_pool", dict(output_size=(2, 3, 2)), (1, 2, 5, 7, 3)),
    ],
)
def test_max_pool_picks_the_last_nan_of_a_window_as_torch(pool, kwargs, shape) -> None:
    # PyTorch's max pool kernels take each NaN they scan as the new maximum: a window holding several NaNs gives the
    # last one's index, and the gradient goes there (with return_indices or without, on the uneven adaptive
    # windows' gradient path too)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[RNG.random(shape) < 0.3] = np.nan
    x.reshape(-1)[:8] = [1.0, 3.0, np.nan, 0.5, np.nan, 2.0, 1.0, np.nan][: x.size]
    name = f"{pool}{len(shape) - 2}d"
    theirs = getattr(torch.nn.functional, name)
    ref = torch.tensor(x, requires_grad=True)
    t_values, t_indices = theirs(ref, **kwargs, return_indices=True)
    upstream = RNG.standard_normal(t_values.shape).astype(np.float32)
    (t_values * torch.tensor(upstream)).sum().backward()
    ours_fn = getattr(Tensor, f"{pool}2d")
    for with_indices in (True, False):
        ours = Tensor(x, requires_grad=True)
        out = ours_fn(ours, **kwargs, return_indices=with_indices)
        values = out[0] if with_indices else out
        (values * Tensor(upstream)).sum().backward()
        assert ours.grad is not None and ref.grad is not None
        # (overlapping windows sum their gradients in another order)
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(values.numpy(), t_values.detach().numpy())
    for requires_grad in (False, True):
        _, indices = ours_fn(Tensor(x, requires_grad=requires_grad), **kwargs, return_indices=True)
        np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())


def _bf16_gradients(fn, torch_fn, arrays, upstream, view=None):
    # (ours, torch's) bfloat16 values and gradients of sum(fn(*bf16 leaves).float() * upstream), read through `view`
    view = view or (lambda t: t)
    ours = [Tensor(a).cast(dtypes.bfloat16).requires_grad_() for a in arrays]
    theirs = [torch.tensor(a).bfloat16().requires_grad_() for a in arrays]
    out, ref = view(fn(*ours)), view(torch_fn(*theirs))
    (out.float() * Tensor(upstream)).sum().backward()
    (ref.float() * torch.tensor(upstream)).sum().backward()
    return [out.float().numpy()] + [t.grad.float().numpy() for t in ours], [ref.detach().float().numpy()] + [
        t.grad.float().numpy() for t in theirs
    ]


@pytest.mark.parametrize(
    "name",
    ["cummax", "cummin", "hardtanh", "relu6", "max_pool2d_transposed", "conv2d", "conv_transpose2d"],
)
def test_gradients_given_to_bfloat16_values_are_taken(name: str) -> None:
    # a bfloat16 value is read through the graph of its uint16 bits, past the node its gradient is given to: the
    # chain of the forward's own rules was taken instead (cummax's ties shared, hardtanh's bounds passing the
    # gradient, a max pool's ties shared, a convolution's gradients an ulp off in 40% of the elements)
    tF = torch.nn.functional
    # (inputs of this test's own: drawn from the module's generator they depended on the tests run before in the
    # process, and a float32 sum at a bfloat16 rounding midpoint, summed in another order than torch's, rounds the
    # other way: 1 in ~60 draws of the conv2d case)
    rng = np.random.default_rng(1)
    ties = rng.integers(-2, 3, (2, 3, 6, 6)).astype(np.float32)

    def _randn(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    cases = {
        "cummax": (lambda t: t.cummax(1).values, lambda t: t.cummax(1).values, [ties[0, 0]]),
        "cummin": (lambda t: t.cummin(1).values, lambda t: t.cummin(1).values, [ties[0, 0]]),
        "hardtanh": (lambda t: t.hardtanh(), tF.hardtanh, [ties]),
        "relu6": (lambda t: (t * 3).relu6(), lambda t: tF.relu6(t * 3), [ties]),
        "max_pool2d_transposed": (lambda t: t.max_pool2d(2), lambda t: tF.max_pool2d(t, 2), [ties]),
        "conv2d": (
            lambda x, w, b: x.conv2d(w, b, padding=1),
            lambda x, w, b: tF.conv2d(x, w, b, padding=1),
            [_randn(2, 3, 8, 8), _randn(4, 3, 3, 3), _randn(4)],
        ),
        "conv_transpose2d": (
            lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=1),
            lambda x, w, b: tF.conv_transpose2d(x, w, b, stride=2, padding=1),
            [_randn(2, 3, 6, 6), _randn(3, 4, 3, 3), _randn(4)],
        ),
    }
    fn, torch_fn, arrays = cases[name]
    # (the pooled values read through a transpose: the bits of a view of the value the gradient is given to)
    view = (lambda t: t.transpose(-1, -2)) if name == "max_pool2d_transposed" else None
    shape = tuple(view(torch_fn(*[torch.tensor(a) for a in arrays])).shape) if view else None
    shape = shape or tuple(torch_fn(*[torch.tensor(a) for a in arrays]).shape)
    ours, theirs = _bf16_gradients(fn, torch_fn, arrays, _randn(*shape), view)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}: {'value' if i == 0 else f'gradient {i - 1}'}")


def test_gradient_given_to_a_bfloat16_root_reaches_its_inputs() -> None:
    # backward() from a bfloat16 value with a gradient given to it: the rule's inputs are read through their bits
    x = np.array([[1.0, 2.0, 2.0, -1.0, 3.0, 3.0]], np.float32)
    g = np.arange(1.0, 7.0, dtype=np.float32).reshape(1, 6)
    ours = Tensor(x).cast(dtypes.bfloat16).requires_grad_()
    ours.cummax(1).values.backward(Tensor(g).cast(dtypes.bfloat16))
    theirs = torch.tensor(x).bfloat16().requires_grad_()
    theirs.cummax(1).values.backward(torch.tensor(g).bfloat16())
    assert ours.grad is not None and ours.grad.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(ours.grad.float().numpy(), theirs.grad.float().numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_half_softmax_gradient_is_computed_from_the_rounded_output(dtype: str, name: str) -> None:
    # torch's CPU backward of a half (log_)softmax takes the rounded output y, computes in float32 and rounds once:
    # y * (g - sum(g * y)), g - exp(y) * sum(g). The chain through the float32 forward used the unrounded values:
    # a third of a bfloat16 attention's score gradients (the query and key projections') were an ulp off
    tdt = getattr(torch, dtype)
    for shape, axis in (((8, 33), -1), ((4, 7, 5), 1)):
        x, g = 3 * _randn(*shape), _randn(*shape)
        ours = Tensor(x).cast(dtype).requires_grad_()
        y = getattr(ours, name)(axis)
        (y.float() * Tensor(g)).sum().backward()
        assert ours.grad is not None and ours.grad.dtype == ours.dtype
        y32, g32 = torch.tensor(y.float().numpy()), torch.tensor(g).to(tdt).float()
        if name == "softmax":
            want = y32 * (g32 - (g32 * y32).sum(axis, keepdim=True))
        else:
            want = g32 - y32.exp() * g32.sum(axis, keepdim=True)
        got, want = ours.grad.float().numpy(), want.to(tdt).float().numpy()
        # (the float32 sums in another order: a rare near-tie rounds the other way, by one unit)
        assert (got != want).sum() <= got.size // 100
        np.testing.assert_allclose(got, want, rtol=torch.finfo(tdt).eps, atol=0)
    # and torch's own, where the forward values agree
    x, g = 3 * _randn(256, 6), _randn(256, 6)
    theirs = torch.tensor(x).to(tdt).requires_grad_()
    t_y = getattr(theirs, name)(-1)
    (t_y.float() * torch.tensor(g)).sum().backward()
    ours = Tensor(x).cast(dtype).requires_grad_()
    y = getattr(ours, name)(-1)
    (y.float() * Tensor(g)).sum().backward()
    agree = (y.float().numpy() == t_y.detach().float().numpy()).all(-1)
    assert agree.sum() >= 16
    got, want = ours.grad.float().numpy()[agree], theirs.grad.float().numpy()[agree]
    # (the same near-ties as above: rare, by one unit)
    assert (got != want).sum() <= max(1, got.size // 100)
    # (one unit: eps relative, or the subnormals' spacing)
    info = torch.finfo(tdt)
    np.testing.assert_allclose(got, want, rtol=info.eps, atol=info.smallest_normal * info.eps)


def test_overlapping_pool_gradient_is_one_elementwise_kernel() -> None:
    # the sum of the taps' slices: no reduce (the chain of rules through the windows' movement ops gave two)
    from uopkit.schedule import create_schedule, kernelize_tensors

    x = Tensor(_randn(2, 3, 10, 10), requires_grad=True)
    out = x.avg_pool2d(3, stride=1, padding=1)
    (out * Tensor(_randn(*out.shape))).sum().backward()
    assert x.grad is not None
    last = create_schedule(kernelize_tensors([x.grad]))[-1]
    assert not any(u.op is Ops.REDUCE_AXIS for u in last.ast.toposort())


def test_strided_pool_gradient_indexes_without_division() -> None:
    # a stride-2 pool's taps land on x's positions taken as (q, r) = divmod(p, 2): summed in that layout (stored, then
    # merged back by a reshape), no kernel divides an index (spread slices cost a division and a modulo per tap:
    # 10-14 ms of a 3x3 stride-2 max pool's 16 ms backward over 4x64x56x56)
    from uopkit.codegen import get_program
    from uopkit.device import Device
    from uopkit.schedule import create_schedule, kernelize_tensors

    x = Tensor(_randn(2, 3, 11, 10), requires_grad=True)
    out = x.max_pool2d(3, stride=2, padding=1)
    (out * Tensor(_randn(*out.shape))).sum().backward()
    assert x.grad is not None
    renderer = Device["CPU"].renderer
    for item in create_schedule(kernelize_tensors([x.grad])):
        uops = get_program(item.ast, renderer).uops
        assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in uops), item.ast


def test_cumsum_gradient_is_a_reversed_cumsum() -> None:
    # a cumulative sum's gradient is given whole (a running sum of g from the far end) on its output node: the chain
    # through its windows' movement ops was a gather 3-4x slower; its windows get no per-tap rule of a pool
    from uopkit.gradient import _gradient_rules

    for n in (40, 800):
        out = Tensor(_randn(3, n)).cumsum(1)
        assert [u for u in out.uop.toposort() if _gradient_rules.get(u) is not None] == [out.uop]
    # while a pool's overlapping windows have one
    graph = Tensor(_randn(1, 1, 6, 6)).avg_pool2d(3, stride=1).uop.toposort()
    assert [u for u in graph if _gradient_rules.get(u) is not None]
    # (few shapes: on OpenCL each is several kernels to compile) a row in one level, a column by a negative axis, a
    # row past _CUM_BLOCK in blocks
    for shape, axis in (((3, 80), 1), ((37, 3), -2), ((2, 700, 2), 1)):
        check_grad(lambda t, a=axis: t.cumsum(a), [_randn(*shape)], lambda t, a=axis: torch.cumsum(t, a), atol=1e-4)
    # float16: the sum runs in float32 and is cast back; its gradient comes back through the casts
    x = Tensor(_randn(4, 9).astype(np.float16), requires_grad=True)
    (x.cumsum(1) * Tensor(np.arange(36, dtype=np.float16).reshape(4, 9))).sum().backward()
    t = torch.tensor(x.numpy(), requires_grad=True)
    (t.cumsum(1) * torch.arange(36, dtype=torch.float16).reshape(4, 9)).sum().backward()
    assert x.grad is not None and t.grad is not None
    np.testing.assert_allclose(x.grad.numpy().astype(np.float32), t.grad.numpy().astype(np.float32), rtol=1e-2)


def test_cross_entropy_gradient() -> None:
    _needs("cross_entropy")
    logits, y = _randn(6, 5), RNG.integers(0, 5, 6)
    check_grad(
        lambda t: t.cross_entropy(Tensor(y), label_smoothing=0.1),
        [logits],
        lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(y), label_smoothing=0.1),
    )


def test_layernorm_gradient() -> None:
    _needs("layernorm")
    check_grad(lambda t: t.layernorm(), [_randn(4, 6)], lambda t: torch.nn.functional.layer_norm(t, (6,)), atol=1e-4)


def test_binary_cross_entropy_with_logits_gradient() -> None:
    _needs("binary_cross_entropy_with_logits")
    y = (RNG.random((4, 3)) > 0.5).astype(np.float32)
    check_grad(
        lambda t: t.binary_cross_entropy_with_logits(Tensor(y)),
        [_randn(4, 3)],
        lambda t: torch.nn.functional.binary_cross_entropy_with_logits(t, torch.tensor(y)),
    )


def test_scaled_dot_product_attention_gradient() -> None:
    _needs("scaled_dot_product_attention")
    q, k, v = _randn(2, 3, 4), _randn(2, 3, 4), _randn(2, 3, 4)
    check_grad(
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        [q, k, v],
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        atol=1e-4,
    )


# ---------------------------------------------------------------------------------------------------------------------
# finite differences in float64 (independent of PyTorch)


def test_finite_differences_float64() -> None:
    x0 = RNG.uniform(0.5, 1.5, (3, 4))
    w0 = RNG.uniform(-1, 1, (4, 2))

    def f(x: Tensor, w: Tensor) -> Tensor:
        return ((x.log() @ w).sin() * x[:, :2].sqrt()).max(axis=1).sum()

    x, w = Tensor(x0, requires_grad=True), Tensor(w0, requires_grad=True)
    assert x.dtype == dtypes.float64
    f(x, w).backward()
    assert x.grad is not None and w.grad is not None
    eps = 1e-6
    for arr, grad, which in ((x0, x.grad.numpy(), 0), (w0, w.grad.numpy(), 1)):
        numeric = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = (plus, w0) if which == 0 else (x0, plus)
            args_m = (minus, w0) if which == 0 else (x0, minus)
            fp = f(*(Tensor(a) for a in args_p)).item()
            fm = f(*(Tensor(a) for a in args_m)).item()
            numeric[idx] = (fp - fm) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# semantics: accumulation, leaves, what stops gradients, dtypes, shapes


def test_reused_input_accumulates() -> None:
    check_grad(lambda t: t * t + t.exp() * t, [_randn(5)])


def test_backward_twice_accumulates_into_grad() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_intermediate_tensors_get_no_grad() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (y * y).sum().backward()
    assert y.grad is None
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 16.0])  # type: ignore[union-attr]


def test_requires_grad_false_and_unset_get_no_grad() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = Tensor([3.0, 4.0], requires_grad=False)
    z = Tensor([5.0, 6.0])
    (x * y * z).sum().backward()
    assert y.grad is None and z.grad is None
    np.testing.assert_allclose(x.grad.numpy(), [15.0, 24.0])  # type: ignore[union-attr]


def test_requires_grad_() -> None:
    x = Tensor([2.0]).requires_grad_()
    assert x.requires_grad is True
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [4.0]


def test_detach_stops_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x.detach()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])  # type: ignore[union-attr]


def test_store_stops_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    buf = Tensor.zeros(3).contiguous().realize()
    stored = buf.assign(x * 2)
    assert stored.uop.op is Ops.STORE
    (stored * x).sum().backward()
    # only the direct use of x carries a gradient: d(stored * x)/dx = stored, nothing flows through the STORE
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])  # type: ignore[union-attr]


def test_backward_of_a_realized_loss_follows_the_graph_that_computed_it() -> None:
    # realizing replaces a tensor's graph by its buffer; backward() follows it back to the computation
    x = Tensor([0.5, 1.5], requires_grad=True)
    loss = (x * 2).exp().sum()
    loss.realize()
    assert loss.uop.base.op is Ops.BUFFER
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * np.array([0.5, 1.5])), rtol=1e-6)  # type: ignore[union-attr]


# the ways of making a leaf: a detached one (`x.detach().requires_grad_()`, how PGD inputs, WGAN-GP interpolates and
# autograd.functional's inputs are made) is a DETACH node, which every other detach of the same value also is
_LEAVES = {
    "Tensor(requires_grad)": lambda a: Tensor(a, requires_grad=True),
    "detach": lambda a: Tensor(a).detach().requires_grad_(True),
    "lazy detach": lambda a: (Tensor(a) * 1.0).detach().requires_grad_(True),
    "detached view": lambda a: Tensor(np.concatenate([a, a])).detach()[: len(a)].requires_grad_(True),
    "clone": lambda a: Tensor(a).clone().requires_grad_(True),
}
_LEAF_VALUES = np.array([0.5, -1.0, 2.0], np.float32)
_FUSED_LOSSES = {
    "x*x": lambda x: (x * x).sum(),
    "exp*sin": lambda x: (x.exp() * x.sin()).sum(),
    "x*sum(x)": lambda x: (x * x.sum()).sum(),
}


def _torch_leaf_grad(loss: Callable) -> np.ndarray:
    x = torch.tensor(_LEAF_VALUES, requires_grad=True)
    return torch.autograd.grad(loss(x), x)[0].numpy()


@pytest.mark.parametrize("leaf", _LEAVES)
@pytest.mark.parametrize("loss", _FUSED_LOSSES)
def test_backward_and_grad_after_the_loss_was_realized(leaf: str, loss: str) -> None:
    # loss.item() realizes the loss in one kernel that reads the leaf: backward() and autograd.grad follow the
    # realized loss back to that graph, whatever kind of leaf it reads (a detached leaf raised "already realized")
    from uopkit.autograd import grad

    want = _torch_leaf_grad(_FUSED_LOSSES[loss])
    x = _LEAVES[leaf](_LEAF_VALUES)
    out = _FUSED_LOSSES[loss](x)
    out.item()
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)  # type: ignore[union-attr]
    x = _LEAVES[leaf](_LEAF_VALUES)
    out = _FUSED_LOSSES[loss](x)
    out.item()
    np.testing.assert_allclose(grad(out, x)[0].numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("leaf", _LEAVES)
def test_two_gradients_through_one_graph(leaf: str) -> None:
    # the first gradient's realize stores x.sum(), which the loss shares: the second gradient still flows through it
    # (a detached leaf's second gradient lost that path: -0.5 for torch's -1)
    from uopkit.autograd import grad

    fn = _FUSED_LOSSES["x*sum(x)"]
    want = _torch_leaf_grad(fn)
    x = _LEAVES[leaf](_LEAF_VALUES)
    y = fn(x)
    np.testing.assert_allclose(grad(y, x, retain_graph=True)[0].numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(grad(y, x)[0].numpy(), want, rtol=1e-5)
    y.backward()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-5)  # type: ignore[union-attr]


def test_detached_leaves_of_one_value_are_leaves_of_their_own() -> None:
    # every `base.detach()` is the same node until one is given requires_grad: then it is a leaf of its own, as
    # torch's, sharing base's storage but not a gradient with the others
    a, scale = _LEAF_VALUES, np.array([1.0, 3.0, -2.0], np.float32)
    ours, theirs = [], []
    for lib, T in (("uopkit", Tensor), ("torch", torch.tensor)):
        base = T(a)
        x, x2, plain = base.detach().requires_grad_(True), base.detach().requires_grad_(True), base.detach()
        (x * x2 * plain * T(scale)).sum().backward()
        (ours if lib == "uopkit" else theirs).extend([x.grad.numpy(), x2.grad.numpy()])  # type: ignore[union-attr]
        assert not (x * 2).is_leaf and (x * 2).requires_grad and x.is_leaf
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(o, t, rtol=1e-6)
    # a detach of the same value that wasn't given requires_grad carries no gradient to the leaf
    base = Tensor(a)
    x = base.detach().requires_grad_(True)
    with pytest.raises(RuntimeError, match="requires_grad"):
        (base.detach() * 2).sum().backward()
    assert x.grad is None


def test_a_detached_leaf_shares_its_storage_and_steps() -> None:
    # still a view of what it was detached from (torch's detach): an optimizer step on it shows there, and the next
    # step's gradient after a realize is the new values'
    from uopkit.nn.optim import SGD

    base = Tensor(_LEAF_VALUES.copy())
    x = base.detach().requires_grad_(True)
    opt = SGD([x], lr=0.25)
    for _ in range(2):
        opt.zero_grad()
        loss = (x * x).sum()
        loss.item()
        loss.backward()
        opt.step()
    np.testing.assert_allclose(x.numpy(), _LEAF_VALUES * 0.25, rtol=1e-6)
    np.testing.assert_allclose(base.numpy(), _LEAF_VALUES * 0.25, rtol=1e-6)


def test_gradient_of_scalar_tensor() -> None:
    check_grad(lambda a, b: (a * b).exp(), [np.float32(0.5) * np.ones((), np.float32), _randn(3)])


def test_zero_size_tensor_gradient() -> None:
    x = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    w = Tensor(np.ones((3,), np.float32), requires_grad=True)
    (x * w).backward(Tensor.ones(0, 3))
    assert x.grad is not None and x.grad.shape == (0, 3)
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0, 0.0]


def test_cast_gradient_keeps_dtypes() -> None:
    x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    (x.cast(dtypes.float64) ** 2).sum().backward()
    assert x.grad is not None and x.grad.dtype == dtypes.float32
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_no_gradient_through_integer_cast() -> None:
    x = Tensor([1.5, 2.5], requires_grad=True)
    (x.cast(dtypes.int32).cast(dtypes.float32) * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])  # type: ignore[union-attr]


def test_explicit_upstream_gradient() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(Tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 30.0])  # type: ignore[union-attr]


def test_tensor_gradient_method() -> None:
    x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    gx, gy = (x * y).sum().gradient(x, y)
    assert gx.tolist() == [3.0, 4.0] and gy.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------------------------------------------------
# errors


def test_backward_of_non_scalar_needs_gradient() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"backward: needs one value \(a loss\) or gradient=, .* shape \(2,\)"):
        (x * 2).backward()
    # any one-element tensor is a loss, as torch's (a mean over (N, 1) outputs has shape (1,))
    u = Tensor([2.0], requires_grad=True)
    (u * 3).backward()
    assert u.grad.tolist() == [3.0]
    v = Tensor([[2.0]], requires_grad=True)
    (v * v).mean(0).backward()
    assert v.grad.tolist() == [[4.0]]


def test_backward_upstream_shape_mismatch() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"gradient shape \(3,\) doesn't match .* \(2,\)"):
        (x * 2).backward(Tensor([1.0, 2.0, 3.0]))


def test_backward_of_integer_tensor() -> None:
    with pytest.raises(TypeError, match="only floating-point"):
        Tensor([1, 2]).sum().backward()


def test_backward_without_requires_grad() -> None:
    with pytest.raises(RuntimeError, match="no tensor with requires_grad"):
        (Tensor([1.0, 2.0]) * 2).sum().backward()


def test_backward_into_leaves_nobody_holds_any_more() -> None:
    # as PyTorch: the leaf is a temporary, so the gradient lands where no one reads it, and that is not an error; the
    # leaf that is still held gets its gradient
    a = Tensor([1.0, 2.0, 3.0])
    w = Tensor([1.0, 1.0, 1.0], requires_grad=True)
    for _ in range(2):
        assert (Tensor([1.0, 1.0, 1.0], requires_grad=True) * a).sum().backward() is None  # (as torch)
    (Tensor([2.0, 2.0, 2.0], requires_grad=True) * w * a).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(RuntimeError, match="no tensor with requires_grad"):
        (Tensor([1.0, 1.0, 1.0]) * a).sum().backward()


def test_gradient_of_unused_target() -> None:
    with pytest.raises(RuntimeError, match=r"not used"):
        Tensor([1.0]).sum().gradient(Tensor([2.0, 3.0]))


def test_missing_rule_is_a_clear_error() -> None:
    x = Tensor([1.0, 2.0])
    y = Tensor(UOp(Ops.LOAD, x.dtype, (x.uop,)))
    with pytest.raises(GradientError, match="no gradient rule for LOAD"):
        compute_gradient(y.sum().uop, Tensor(1.0).uop, {x.uop})


def test_every_rule_is_keyed_on_a_forward_op() -> None:
    # the rules read like a table: one per forward op, nothing for the ops gradients never see
    keyed = {op for op in pm_gradient.pdict}
    for op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.WHERE, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG,
               Ops.CAST, Ops.REDUCE_AXIS, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP,
               Ops.CONTIGUOUS, Ops.STORE, Ops.DETACH):  # fmt: skip
        assert op in keyed, op


@pytest.mark.parametrize(
    "name, x",
    [
        ("asin", [-1.0, -0.5, 0.0, 1.0, 1.5]),
        ("acos", [-1.0, 0.25, 1.0, -2.0]),
        ("atanh", [-1.0, 0.5, 1.0, 3.0]),
        ("acosh", [1.0, 2.0, 0.5]),
        ("atan", [0.0, 1e30, -math.inf]),
        ("erf", [0.0, 10.0, -math.inf]),
    ],
)
def test_gradients_at_the_ends_of_a_domain_match_pytorch(name: str, x: list[float]) -> None:
    # the derivative's own value where it is infinite or undefined (asin' at 1 is inf, beyond 1 nan), as PyTorch
    xs = np.array(x, np.float32)
    ours = Tensor(xs, requires_grad=True)
    getattr(ours, name)().sum().backward()
    theirs = torch.tensor(xs, requires_grad=True)
    getattr(theirs, name)().sum().backward()
    assert ours.grad is not None
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_atan2_gradient_at_the_origin_matches_pytorch() -> None:
    y, x = np.array([0.0, 1.0, -2.0], np.float32), np.array([0.0, -1.0, 0.0], np.float32)
    ours_y, ours_x = Tensor(y, requires_grad=True), Tensor(x, requires_grad=True)
    ours_y.atan2(ours_x).sum().backward()
    ty, tx = torch.tensor(y, requires_grad=True), torch.tensor(x, requires_grad=True)
    torch.atan2(ty, tx).sum().backward()
    np.testing.assert_allclose(ours_y.grad.numpy(), ty.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours_x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_second_derivative_of_a_given_derivative() -> None:
    # asin'' = x / (1 - x^2)^1.5: the derivative's own gradient
    xs = np.array([-0.5, 0.0, 0.3], np.float32)
    x = Tensor(xs, requires_grad=True)
    (first,) = x.asin().sum().gradient(x)
    (second,) = first.sum().gradient(x)
    np.testing.assert_allclose(second.numpy(), xs / (1 - xs * xs) ** 1.5, rtol=1e-5, atol=1e-7)


def test_devices_are_looked_up_as_the_rules_ask() -> None:
    from uopkit.gradient import _Devices

    buf = UOp.new_buffer("CPU:1", 4, dtypes.float32)
    var = UOp.variable("n", 1, 4)
    const = UOp(Ops.CONST, dtypes.float32, (UOp(Ops.DEVICE, arg="CPU"),), 2.0)
    # the first source that has a device gives it (a variable has none); a COPY lives where it copies to
    mixed = UOp(Ops.ADD, dtypes.float32, (var, buf))
    moved = UOp(Ops.COPY, dtypes.float32, (mixed, UOp(Ops.DEVICE, arg="CPU")))
    devices = _Devices()
    assert devices[const] == "CPU" and devices[mixed] == "CPU:1" and devices[moved] == "CPU"
    with pytest.raises(KeyError):
        devices[var]
    # nodes inside a kernel are not looked at
    kernel = UOp(Ops.KERNEL, dtypes.void, (buf,), None)
    with pytest.raises(KeyError):
        devices[UOp(Ops.NEG, dtypes.float32, (kernel,))]


def test_gradient_through_a_copy_between_devices() -> None:
    x = Tensor(np.arange(4, dtype=np.float32), device="CPU:1", requires_grad=True)
    # maximum's rule builds constants where the copy's value lives; the gradient goes back to CPU:1
    y = x.to("CPU").maximum(1.0) * 3
    y.sum().backward()
    assert x.grad is not None and x.grad.device == "CPU:1"
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.5, 3.0, 3.0])


def test_a_float16_broadcast_gets_its_gradient_summed_in_float32():
    # a bias's gradient: the sum over the broadcast rows in float32, rounded once (a float16 running sum stalled at
    # 256 for 4096 rows of 0.1: each 0.1 is under half an ulp of 256)
    g = np.full((4096, 4), 0.1, np.float16)
    b = Tensor.zeros(4, dtype=dtypes.float16, requires_grad=True)
    (b.expand(4096, 4) * 1).backward(Tensor(g))
    tb = torch.zeros(4, dtype=torch.float16, requires_grad=True)
    (tb.expand(4096, 4) * 1).backward(torch.tensor(g))
    assert b.grad.dtype == dtypes.float16
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())
    # a float32 master weight cast to half (mixed precision)
    w = Tensor.zeros(4, requires_grad=True)
    (Tensor.zeros(4096, 4, dtype=dtypes.float16) + w.cast(dtypes.float16)).backward(Tensor(g))
    np.testing.assert_array_equal(w.grad.numpy(), np.full(4, 409.5, np.float32))


@pytest.mark.parametrize("pool", ["max_pool2d", "adaptive_max_pool2d", "matmul_pool1d"])
def test_a_max_pools_gradient_ignores_a_realize_of_its_output_in_between(pool):
    # loss.backward(); loss.item(); opt.step(): the realize in between stored the pool's output, computed in a kernel
    # that fused the convolution before it (another summation order); the first-max rule compared that with the
    # convolution computed again by the gradient's kernels, no tap equalled it, and the gradient was lost
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((2, 1, 8, 8)).astype(np.float32), rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    x, w = Tensor(xs, requires_grad=True), Tensor(ws, requires_grad=True)
    tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
    if pool == "matmul_pool1d":
        ws = rng.standard_normal((8, 6)).astype(np.float32)
        w, tw = Tensor(ws, requires_grad=True), torch.tensor(ws, requires_grad=True)
        out = (x.reshape(16, 8) @ w).relu().reshape(2, 8, 6).max_pool2d((3,))
        want = torch.nn.functional.max_pool1d((tx.reshape(16, 8) @ tw).relu().reshape(2, 8, 6), 3)
    else:
        out = getattr(x.conv2d(w).relu(), pool)(2 if pool == "max_pool2d" else (3, 3))
        c = torch.nn.functional.conv2d(tx, tw).relu()
        want = getattr(torch.nn.functional, pool)(c, 2 if pool == "max_pool2d" else (3, 3))
    g = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    out.numpy()  # realized between backward() and reading the gradients
    (want * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("walk", ["backward", "gradient"])
def test_a_rule_given_to_a_view_is_kept_when_it_and_a_value_under_it_were_realized(walk):
    # a rule given to a reshape of the value's own (triangular solves, Cholesky, a cat's pieces): realized, the
    # tensor is that view of the new storage; rebuilt for the gradient over a graph where a value under it was
    # realized too, it has to be the view it was over the old graph, with its rule, not a new node without one. (The
    # rule here is made up, 5 g, so the test sees which way the gradient went: the chain would give 2 e^(2x))
    from uopkit.gradient import set_gradient

    x = Tensor([0.5, 1.0, 2.0], requires_grad=True)
    inner = (x * 2).realize()
    value = inner.exp()
    node = UOp(Ops.RESHAPE, value.dtype, (value.uop,), value.shape)
    set_gradient(node, (inner.uop,), lambda g, wanted: ((Tensor(g) * 5).uop,))
    out = Tensor(node)
    out.realize()
    grad = out.sum().gradient(x)[0] if walk == "gradient" else (out.sum().backward(), x.grad)[1]
    np.testing.assert_allclose(grad.numpy(), [10.0, 10.0, 10.0])


def test_piecewise_gradients_select_the_incoming_one_as_torch():
    # an inf coming back (sqrt at 0) where a piece is flat gives 0, as torch's: a 0/1 mask times inf would give NaN
    F = torch.nn.functional
    values = np.array([0.0, 1.0, -1.0, 3.0, -3.0, 7.0, -7.0, 0.5, -0.5, np.nan], np.float32)
    cases = {
        "clamp": (lambda t: t.clamp(0, 1), lambda t: t.clamp(0, 1)),
        "clamp_min": (lambda t: t.clamp_min(0.5), lambda t: t.clamp_min(0.5)),
        "hardtanh": (lambda t: t.hardtanh(), F.hardtanh),
        "hardsigmoid": (lambda t: t.hardsigmoid(), F.hardsigmoid),
        "hardswish": (lambda t: t.hardswish(), F.hardswish),
        "sign": (lambda t: t.sign(), torch.sign),
        "softshrink": (lambda t: t.softshrink(), F.softshrink),
        "threshold": (lambda t: t.threshold(0.5, 0.0), lambda t: F.threshold(t, 0.5, 0.0)),
        "max": (lambda t: t.max(), lambda t: t.max()),
        "max over dim": (lambda t: t.reshape(2, 5).max(dim=1)[0], lambda t: t.reshape(2, 5).max(dim=1)[0]),
    }
    for name, (mine, theirs) in cases.items():
        x = Tensor(values, requires_grad=True)
        mine(x).abs().sqrt().sum().backward()
        t = torch.from_numpy(values).requires_grad_()
        theirs(t).abs().sqrt().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, err_msg=name)


def test_register_hook_matches_torch():
    torch = pytest.importorskip("torch")
    # a leaf's hook changes what `.grad` gets; a non-leaf's what flows on; hooks chain in order; remove() ends one
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    tx = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y, ty = x * x, tx * tx
    seen = []
    handles = [
        y.register_hook(lambda g: seen.append(g.tolist())),
        y.register_hook(lambda g: g.clamp(max=3.0)),
        x.register_hook(lambda g: g * 10),
    ]
    ty.register_hook(lambda g: g.clamp(max=3.0))
    tx.register_hook(lambda g: g * 10)
    (y * 2).sum().backward()
    (ty * 2).sum().backward()
    assert seen == [[2.0, 2.0, 2.0]]
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    for h in handles:
        h.remove()
    x.grad = None
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, -4.0, 6.0]
    with pytest.raises(RuntimeError, match="doesn't require a gradient"):
        Tensor([1.0]).register_hook(lambda g: g)
    bad = Tensor([1.0, 2.0], requires_grad=True)
    bad.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="shape"):
        (bad * 2).sum().backward()


def test_hook_inside_a_subgraph_with_a_given_gradient():
    torch = pytest.importorskip("torch")
    # a convolution's input gradient is given as one rule: a hook on a node inside it still runs
    x = Tensor.ones(1, 1, 4, 4, requires_grad=True)
    w = Tensor.ones(1, 1, 3, 3, requires_grad=True)
    tx, tw = torch.ones(1, 1, 4, 4, requires_grad=True), torch.ones(1, 1, 3, 3, requires_grad=True)
    y, ty = x.conv2d(w), torch.nn.functional.conv2d(tx, tw)
    y.register_hook(lambda g: g * 2)
    ty.register_hook(lambda g: g * 2)
    y.relu().sum().backward()
    ty.relu().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


def test_retained_non_leaf_realized_before_backward():
    # realizing y between the forward pass and backward() must not cut the gradient to x behind it
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    calls = []
    y.register_hook(lambda g: calls.append(1))
    y.numpy()
    (y * y).sum().backward()
    assert y.grad.tolist() == [6.0, 12.0] and x.grad.tolist() == [18.0, 36.0] and calls == [1]


# non-leaf values a hook or retain_grad() is put on: read before backward(), a view of storage (a reshape, a transpose,
# a slice, a matmul's output) was where only the storage remembers what computed it, and a value made from one read
# before was rebuilt over that graph: the hook was skipped (a gradient-zeroing hook left the leaf's gradient whole)
_HOOKED = {
    "a*2": lambda a: a * 2,
    "reshape": lambda a: (a * 2).reshape(3, 2),
    "T": lambda a: (a * 2).T,
    "slice of a reshape": lambda a: (a * 2).reshape(3, 2)[1:].T,
    "expand": lambda a: (a * 2)[None].expand(2, 2, 3),
    "matmul": lambda a: a @ a.T,
}
_HOOK_VALUES = np.arange(6, dtype=np.float32).reshape(2, 3) / 5 - 0.3


def _read(t: Tensor | torch.Tensor) -> np.ndarray:
    # (a copy of torch's: its `.grad` is accumulated in place)
    return t.detach().numpy().copy() if isinstance(t, torch.Tensor) else t.numpy()


def _hooked_leaf(lib: str) -> Tensor | torch.Tensor:
    make = torch.tensor if lib == "torch" else Tensor
    return make(_HOOK_VALUES, requires_grad=True)


def _hooked_step(lib: str, value: Callable, read: str, hook: Callable) -> list:
    a = _hooked_leaf(lib)
    if read == "what it is made from":
        made = a * 2 + 0
        _read(made)
        h = value(made)
    else:
        h = value(a)
    h.retain_grad()
    calls = []
    h.register_hook(lambda g: (calls.append(1), hook(g))[1])
    if read in ("it", "it twice"):
        _read(h)
    if read == "it twice":
        _read(h)
    k = (h * h).exp()
    if read == "a value made from it":
        _read(k)
    loss = k.sum()
    if read == "the loss":
        loss.item()
    loss.backward()
    return [_read(a.grad), _read(h.grad), calls]


_READS = ["nothing", "it", "it twice", "what it is made from", "a value made from it", "the loss"]


@pytest.mark.parametrize("read", _READS)
@pytest.mark.parametrize("value", _HOOKED)
def test_hook_and_retain_grad_on_a_value_read_before_backward(value: str, read: str) -> None:
    # a hook that replaces the gradient (what flows on to the leaf, and what `.grad` of the value gets), as torch's
    for hook in (lambda g: g * 0, lambda g: g * 3 + 1, lambda g: None):
        ours = _hooked_step("uopkit", _HOOKED[value], read, hook)
        theirs = _hooked_step("torch", _HOOKED[value], read, hook)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
        assert ours[2] == theirs[2] == [1]


def _backward(loss: Tensor | torch.Tensor, a: Tensor | torch.Tensor) -> np.ndarray:
    loss.backward()
    return _read(a.grad)


def _uopkit_grad(loss: Tensor, a: Tensor) -> np.ndarray:
    from uopkit.autograd import grad

    return _read(grad(loss, a)[0])


def _torch_grad(loss: torch.Tensor, a: torch.Tensor) -> np.ndarray:
    return _read(torch.autograd.grad(loss, a)[0])


def test_hooks_on_views_of_views_read_before_backward() -> None:
    # each view's hook sees the gradient its consumers' hooks changed; retain_grad on each gets it after its hooks
    def run(lib: str, grad_of: Callable) -> list:
        a = _hooked_leaf(lib)
        h = a * 2
        v = h.reshape(3, 2)
        w = v[1:].T
        seen = []
        for t, hook in ((h, lambda g: g + 1), (v, lambda g: g * 3), (w, lambda g: g * -2)):
            t.retain_grad()
            t.register_hook(lambda g, hook=hook: (seen.append(_read(g)), hook(g))[1])
        _read(w)
        _read(h)
        loss = (w * w).sum() + v.sin().sum()
        got = grad_of(loss, a)
        return [got, *seen] + ([_read(h.grad), _read(v.grad), _read(w.grad)] if grad_of is _backward else [])

    for ours_of, theirs_of in ((_backward, _backward), (_uopkit_grad, _torch_grad)):
        ours, theirs = run("uopkit", ours_of), run("torch", theirs_of)
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-6)


def test_hooked_view_read_in_a_loop() -> None:
    # a new hooked reshape each step, printed (read) before backward(): each step's hook runs on its gradient
    results = []
    for lib in ("uopkit", "torch"):
        a, got = _hooked_leaf(lib), []
        for i in range(3):
            h = (a * (i + 1)).reshape(3, 2).T
            h.register_hook(lambda g, i=i: g * i)
            h.retain_grad()
            _read(h)
            (h * h).sum().backward()
            got += [_read(a.grad), _read(h.grad)]
        results.append(got)
    for o, t in zip(*results, strict=True):
        np.testing.assert_allclose(o, t, rtol=1e-5)


def test_hook_on_affine_grid_read_before_backward() -> None:
    import torch.nn.functional as TF

    import uopkit.nn.functional as UF

    theta0 = np.array([[[1.0, 0.2, 0.1], [-0.3, 0.9, 0.05]]], np.float32)
    results = []
    for F, make in ((UF, Tensor), (TF, torch.tensor)):
        theta = make(theta0, requires_grad=True)
        grid = F.affine_grid(theta, [1, 1, 3, 4], align_corners=False)
        grid.register_hook(lambda g: g * 0.5)
        _read(grid)
        (grid * grid).sum().backward()
        results.append(_read(theta.grad))
    np.testing.assert_allclose(*results, rtol=1e-5)


def test_hooks_of_tensors_that_are_one_value_run_as_torchs() -> None:
    # two live tensors built by the same ops are one node here; a backward through the second alone runs its hooks
    # only, as torch's (the first tensor's hooks got none of its gradient), read before or not
    for read in (False, True):
        results = []
        for make in (Tensor, torch.tensor):
            x = make([1.0, 2.0], requires_grad=True)
            h, h2 = x * 3, x * 3
            calls: list[str] = []
            h.register_hook(lambda g, calls=calls: (calls.append("h"), g * 2)[1])
            h2.register_hook(lambda g, calls=calls: (calls.append("h2"), g * 5)[1])
            if read:
                h.detach().numpy()
            (h2 * h2).sum().backward()
            results.append((calls, x.grad.tolist()))
        assert results[0] == results[1]


def test_a_hook_on_a_dropped_intermediate_runs_as_torchs() -> None:
    # torch keeps a hook with its graph node, so a hook on a value inside a forward runs although the tensor object is
    # gone (a DEQ's implicit backward, Grad-CAM); ours went with the tensor. The same forward run again on the same
    # input with the weights updated in place builds the same node while the earlier graphs live (losses kept in a
    # list): each backward still runs only its own forward's hook, once
    def run(tensor: Callable, no_grad: Callable) -> tuple[list[float], list[list[float]]]:
        w = tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
        x = tensor([[1.0, 1.0]] * 3)
        calls: list[float] = []

        def forward() -> Any:
            h = (x @ w).tanh()
            h.register_hook(lambda g: (calls.append(g.sum().item()), g * 3)[1])
            return (h * h).sum()

        kept, grads = [], []
        for _ in range(3):
            w.grad = None
            loss = forward()
            loss.backward()
            kept.append(loss)
            grads.append(w.grad.flatten().tolist())
            with no_grad():
                w -= 0.1 * w.grad
        return calls, grads

    ours, theirs = run(Tensor, uopkit.autograd.no_grad), run(torch.tensor, torch.no_grad)
    assert len(ours[0]) == len(theirs[0]) == 3
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5)


def test_backward_arguments_match_torch():
    torch = pytest.importorskip("torch")
    # a later backward() takes .grad as a constant unless create_graph; inputs= fills only those; retain_graph is
    # accepted (graphs are kept anyway)
    w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward(retain_graph=True)
    (tw * tw).sum().backward(retain_graph=True)
    (w.grad * w).sum().backward()
    (tw.grad * tw).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
    w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (w**3).sum().backward(create_graph=True)
    (tw**3).sum().backward(create_graph=True)
    g, tg = w.grad, tw.grad
    w.grad, tw.grad = None, None
    g.sum().backward()
    tg.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    (a * b).sum().backward(inputs=[a])
    assert a.grad.tolist() == [2.0] and b.grad is None
    with pytest.raises(RuntimeError, match="doesn't require a gradient"):
        (a * b).sum().backward(inputs=[Tensor([1.0])])


def test_a_realized_int_batch_is_read_stored_by_the_gradient() -> None:
    # token ids padded and stacked from sequences of new lengths each step, realized: the embedding's gradient reads
    # the stored ids (read back from the graph that built them, its kernels held that graph's lengths and compiled
    # again every step)
    from uopkit import nn
    from uopkit.engine.realize import stats

    rng = np.random.default_rng(0)
    emb = nn.Embedding(50, 8)
    for step in range(4):
        lens = rng.integers(3, 20, 8)
        lens[0] = 19
        rows = [rng.integers(1, 50, n) for n in lens]
        x = Tensor.stack(*[Tensor(r).pad((0, 19 - len(r))) for r in rows]).realize()
        emb.weight.grad = None
        before = stats["kernels_compiled"]
        (emb(x) ** 2).sum().backward()
        emb.weight.grad.realize()
        if step > 0:
            assert stats["kernels_compiled"] == before, step
        ids = np.stack([np.pad(r, (0, 19 - len(r))) for r in rows])
        want = np.zeros((50, 8), np.float32)
        np.add.at(want, ids.ravel(), 2 * emb.weight.numpy()[ids.ravel()])
        np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("shape", [(1,), (0,), (0, 0), (2, 1)])
def test_backward_of_a_view_of_a_constant_leaf(shape) -> None:
    # `Tensor.zeros(1).requires_grad_().sum()` is a reshape of the leaf (one element): backward() walked down to the
    # constant's DETACH under the leaf and raised "doesn't require a gradient", as it did for an empty leaf's sum
    got = Tensor.zeros(*shape).requires_grad_()
    want = torch.zeros(shape, requires_grad=True)
    got.sum().backward()
    want.sum().backward()
    assert (got.grad.shape, got.grad.tolist()) == (tuple(want.grad.shape), want.grad.tolist())

"""Tensor semantics compared with PyTorch: value semantics of assign (STORE), autograd on constructed tensors,
zero-size shapes, errors, numerics and the ops PyTorch users reach for."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.dtype import dtypes, to_dtype
from uopkit.engine.realize import copy_on_write_buffers
from uopkit.helpers import Context
from uopkit.jit import TinyJit
from uopkit.nn import BatchNorm2d
from uopkit.nn.optim import SGD, Adam
from uopkit.tensor import ArgumentError, EmptyReduceError, ShapeError
from uopkit.uop.ops import Ops

# ---------------------------------------------------------------------------------------------------------------------
# 1. a lazy value never sees a later assign


def test_lazy_value_keeps_value_after_assign():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    x = Tensor([3.0, 4.0])
    loss = (w * x).sum()
    w.assign(w * 10).realize()
    assert loss.item() == 11.0
    assert w.tolist() == [10.0, 20.0]


def test_large_reader_gets_copy_on_write():
    # a reader bigger than the buffer keeps the old contents through a copy instead of being computed now
    w = Tensor(np.arange(4, dtype=np.float32)).contiguous().realize()
    big = w.reshape(1, 4).expand(64, 4) + Tensor(np.ones((64, 4), np.float32))
    before = set(map(id, copy_on_write_buffers))
    w.assign(w * 0).realize()
    assert [b.size for b in copy_on_write_buffers if id(b) not in before] == [4]
    np.testing.assert_array_equal(big.numpy(), np.arange(4, dtype=np.float32)[None] + 1 + np.zeros((64, 1)))


def test_reader_of_old_and_new_contents():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    old = w * 1
    w.assign(Tensor([5.0, 6.0]))
    both = old + w
    both.realize()
    assert both.tolist() == [6.0, 8.0]
    assert old.tolist() == [1.0, 2.0]


def test_views_see_the_assign():
    # a reshape or slice is a view (as in PyTorch): it shows the new contents
    a = Tensor([1, 2, 3]).contiguous().realize()
    v, s = a.reshape(3, 1), a[1:]
    a.assign(Tensor([7, 8, 9])).realize()
    assert v.tolist() == [[7], [8], [9]]
    assert s.tolist() == [8, 9]


def test_setitem_keeps_lazy_values():
    a = Tensor([1, 2, 3]).contiguous().realize()
    b = a + 1
    a[0] = 5
    ta = torch.tensor([1, 2, 3])
    tb = ta + 1
    ta[0] = 5
    assert b.tolist() == tb.tolist()
    assert a.tolist() == ta.tolist()


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_loss_after_optimizer_step(opt_cls):
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0])
    opt = opt_cls([w], lr=0.5)
    loss = (w * x).sum()
    loss.backward()
    grad = w.grad
    opt.step()
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    topt = {SGD: torch.optim.SGD, Adam: torch.optim.Adam}[opt_cls]([tw], lr=0.5)
    tloss = (tw * torch.tensor([3.0, 4.0])).sum()
    tloss.backward()
    topt.step()
    assert loss.item() == tloss.item() == 11.0
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    # the gradient is the one of the step's loss, not recomputed from the updated weights
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy())


def test_gradient_reading_updated_weights():
    # dL/dw1 reads w2: after the step it still holds the gradient at the old w2
    w1 = Tensor([[1.0, 2.0]], requires_grad=True)
    w2 = Tensor([[3.0], [4.0]], requires_grad=True)
    opt = SGD([w1, w2], lr=1.0)
    x = Tensor([[1.0], [2.0]])
    (x @ w1 @ w2).sum().backward()
    g1 = w1.grad
    opt.step()
    tw1 = torch.tensor([[1.0, 2.0]], requires_grad=True)
    tw2 = torch.tensor([[3.0], [4.0]], requires_grad=True)
    (torch.tensor([[1.0], [2.0]]) @ tw1 @ tw2).sum().backward()
    np.testing.assert_allclose(g1.numpy(), tw1.grad.numpy())
    np.testing.assert_allclose(w2.numpy(), (tw2 - tw2.grad).detach().numpy())


def test_batchnorm_running_stats_keep_lazy_reads():
    bn = BatchNorm2d(2)
    before = bn.running_mean * 1
    x = Tensor(np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
    with Tensor.train():
        bn(x).realize()
    tbn = torch.nn.BatchNorm2d(2)
    tbn(torch.arange(16, dtype=torch.float32).reshape(2, 2, 2, 2))
    assert before.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-6)


def test_jit_step_with_value_semantics():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(5)]
    w = Tensor(w0, requires_grad=True)
    opt = SGD([w], lr=0.1)

    @TinyJit
    def step(x):
        opt.zero_grad()
        loss = (x @ w).square().sum()
        loss.backward()
        opt.step()
        return loss

    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    for xn in xs:
        loss = step(Tensor(xn)).item()
        topt.zero_grad()
        tloss = (torch.tensor(xn) @ tw).square().sum()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss, tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# 2. every tensor that asks for a gradient gets its own

CONSTRUCTORS = {
    "ones": (lambda: Tensor.ones(3, requires_grad=True), lambda: torch.ones(3, requires_grad=True)),
    "zeros": (lambda: Tensor.zeros(3, requires_grad=True), lambda: torch.zeros(3, requires_grad=True)),
    "full": (lambda: Tensor.full((3,), 2.0, requires_grad=True), lambda: torch.full((3,), 2.0, requires_grad=True)),
    "arange": (
        lambda: Tensor.arange(3, dtype="float32", requires_grad=True),
        lambda: torch.arange(3, dtype=torch.float32, requires_grad=True),
    ),
    "eye": (lambda: Tensor.eye(3, requires_grad=True), lambda: torch.eye(3, requires_grad=True)),
    "rand": (lambda: Tensor.rand(3, requires_grad=True), lambda: torch.rand(3, requires_grad=True)),
    "randn": (lambda: Tensor.randn(3, requires_grad=True), lambda: torch.randn(3, requires_grad=True)),
    "list": (lambda: Tensor([1.0, 1.0, 1.0], requires_grad=True), lambda: torch.tensor([1.0] * 3, requires_grad=True)),
    "numpy": (
        lambda: Tensor(np.ones(3, np.float32), requires_grad=True),
        lambda: torch.tensor(np.ones(3, np.float32), requires_grad=True),
    ),
    "scalar": (lambda: Tensor(2.0, requires_grad=True), lambda: torch.tensor(2.0, requires_grad=True)),
    "zeros_like": (
        lambda: Tensor.ones(2, 3).zeros_like(requires_grad=True),
        lambda: torch.zeros_like(torch.ones(2, 3), requires_grad=True),
    ),
    "empty": (lambda: Tensor.empty(3, requires_grad=True), lambda: torch.empty(3, requires_grad=True)),
}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_constructor_leaves_get_their_own_gradient(name):
    ours, theirs = CONSTRUCTORS[name]
    a, b = ours(), ours()
    ta, tb = theirs(), theirs()
    assert a.requires_grad and b.requires_grad
    (a * 2 + b * 3).sum().backward()
    (ta * 2 + tb * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())


def test_backward_after_realize_on_a_schedule_cache_hit():
    # the second realize of the same graph structure replays the cached schedule: it must still remember the graph
    for _ in range(3):
        x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        y = (x * 2).exp()
        y.numpy()
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * np.array([1.0, 2.0])), rtol=1e-6)


def test_constructor_leaf_values_unchanged():
    assert Tensor.ones(2, requires_grad=True).tolist() == [1.0, 1.0]
    assert Tensor.full((2,), 3.5, requires_grad=True).tolist() == [3.5, 3.5]
    assert Tensor(2.0, requires_grad=True).item() == 2.0
    assert Tensor.eye(2, requires_grad=True).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert Tensor.ones(2, requires_grad=False).requires_grad is False


# ---------------------------------------------------------------------------------------------------------------------
# 3. zero-size shapes


def _compare(fn, *arrays, grad=True, atol=1e-6, rtol=1e-5):
    """Run fn on uopkit tensors and torch tensors; compare value, dtype, shape and (float inputs) gradients."""
    ours = [Tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    theirs = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    out, tout = fn(*ours), fn(*theirs)
    assert out.shape == tuple(tout.shape)
    got, want = out.numpy(), tout.detach().numpy()
    assert got.dtype == want.dtype, (out.dtype, tout.dtype)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    if grad and tout.dtype.is_floating_point and any(t.requires_grad for t in theirs):
        (out * Tensor(np.arange(1, out.numel() + 1, dtype=np.float32).reshape(out.shape))).sum().backward()
        (tout * torch.arange(1, tout.numel() + 1, dtype=torch.float32).reshape(tout.shape)).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            if t.requires_grad:
                tg = t.grad if t.grad is not None else torch.zeros_like(t)
                assert o.grad is not None and o.grad.shape == tuple(tg.shape)
                np.testing.assert_allclose(o.grad.numpy(), tg.numpy(), atol=atol, rtol=rtol, equal_nan=True)
    return out


EMPTY_CASES = {
    "sum0": lambda t: t.sum(0),
    "sum1": lambda t: t.sum(1),
    "sum": lambda t: t.sum(),
    "sum_keepdim": lambda t: t.sum(0, keepdim=True),
    "mean0": lambda t: t.mean(0),
    "mean": lambda t: t.mean(),
    "var0": lambda t: t.var(0),
    "std0": lambda t: t.std(0),
    "prod0": lambda t: t.prod(0),
    "cumsum0": lambda t: t.cumsum(0),
    "cumsum1": lambda t: t.cumsum(1),
    "cumprod0": lambda t: t.cumprod(0),
    "cumprod1": lambda t: t.cumprod(1),
    "mul": lambda t: t * 2,
    "exp": lambda t: t.exp(),
    "reshape": lambda t: t.reshape(3, 0),
    "transpose_matmul": lambda t: t.T @ t,
    "matmul_empty_out": lambda t: t @ t.T,
    "softmax1": lambda t: t.softmax(1),
    "logsumexp1": lambda t: t.logsumexp(1),
    "softmax0": lambda t: t.softmax(0),
    "log_softmax0": lambda t: t.log_softmax(0),
    "stack": lambda t: t.stack(t) if isinstance(t, Tensor) else torch.stack([t, t]),
}


@pytest.mark.parametrize("name", list(EMPTY_CASES))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_zero_size_values_and_gradients(name):
    _compare(EMPTY_CASES[name], np.ones((0, 3), np.float32))


SLICES = {
    "start_after_end": lambda t: t[2:1],
    "both_out_of_range": lambda t: t[5:9],
    "both_negative_out_of_range": lambda t: t[-10:-8],
    "reversed_negative": lambda t: t[-1:-3],
    "second_axis": lambda t: t[:, 3:1],
    "empty_then_sum": lambda t: t[2:1].sum(0),
    "empty_then_mean_all": lambda t: t[:, 5:].sum() + t.sum(),
}


@pytest.mark.parametrize("name", list(SLICES))
def test_empty_slices_and_gradients_through_them(name):
    _compare(SLICES[name], np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_any_all_over_empty_axes(op, axis):
    a = np.zeros((0, 3), bool)
    ours = getattr(Tensor(a), op)(axis) if axis is not None else getattr(Tensor(a), op)()
    theirs = getattr(torch.tensor(a), op)(axis) if axis is not None else getattr(torch.tensor(a), op)()
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_logsumexp_over_empty_axis_is_minus_inf():
    np.testing.assert_array_equal(Tensor.ones(0, 3).logsumexp(0).numpy(), torch.ones(0, 3).logsumexp(0).numpy())


def test_cummax_over_zero_size():
    a = np.ones((0, 3), np.float32)
    for axis in (0, 1):
        values, indices = Tensor(a).cummax(axis)
        assert values.shape == indices.shape == (0, 3)


def test_zero_size_leaf_gets_zero_size_gradient():
    a = Tensor.ones(0, 4, requires_grad=True)
    b = Tensor.ones(4, requires_grad=True)
    (a.sum(0) * b).sum().backward()
    assert a.grad is not None and a.grad.shape == (0, 4)
    assert b.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_zero_size_assign_and_setitem():
    a = Tensor.ones(2, 3).contiguous().realize()
    a[1:1] = 5
    assert a.tolist() == [[1.0] * 3] * 2
    e = Tensor(np.ones((0, 3), np.float32))
    e.assign(e + 1).realize()
    assert e.shape == (0, 3)


# ---------------------------------------------------------------------------------------------------------------------
# 4. errors where PyTorch users catch them

_A, _B = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)

SHAPE_ERRORS = {
    "matmul": lambda m, mk: mk(_A) @ mk(_B),
    "dot": lambda m, mk: mk(np.ones(3, np.float32)).dot(mk(np.ones(4, np.float32))),
    "cat": lambda m, mk: m.cat([mk(_A), mk(_B)]) if m is torch else mk(_A).cat(mk(_B)),
    "einsum_sizes": lambda m, mk: m.einsum("ij,jk->ik", mk(_A), mk(_B)),
    "einsum_arity": lambda m, mk: m.einsum("ij,jk->ik", mk(_A)),
    "einsum_output": lambda m, mk: m.einsum("ij->k", mk(_A)),
    "permute_duplicate": lambda m, mk: mk(_A).permute(0, 0),
    "permute_length": lambda m, mk: mk(_A).permute(0),
    "pad_odd": lambda m, mk: torch.nn.functional.pad(mk(_A), (1, 2, 3)) if m is torch else mk(_A).pad((1, 2, 3)),
    "gather": lambda m, mk: mk(_A).gather(1, mk(np.zeros((3, 3), np.int64))),
    "reshape": lambda m, mk: mk(_A).reshape(4, 4),
    "broadcast": lambda m, mk: mk(_A) + mk(_B),
    "clip_no_bounds": lambda m, mk: mk(_A).clip(),
    "roll": lambda m, mk: mk(_A).roll((1, 2), (0,)),
    "max_no_axis_empty": lambda m, mk: mk(np.ones((0, 3), np.float32)).max(),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_errors_catchable_as_runtime_error_and_value_error(name):
    with pytest.raises(RuntimeError):
        SHAPE_ERRORS[name](torch, torch.tensor)
    with pytest.raises(RuntimeError) as info:
        SHAPE_ERRORS[name](Tensor, Tensor)
    assert isinstance(info.value, ValueError)


INDEX_ERRORS = {
    "sum_axis": lambda mk: mk(_A).sum(5),
    "index": lambda mk: mk(_A)[5],
    "index_second": lambda mk: mk(_A)[0, 7],
    "squeeze": lambda mk: mk(_A).squeeze(4),
    "transpose": lambda mk: mk(_A).transpose(0, 3),
    "unsqueeze": lambda mk: mk(_A).unsqueeze(5),
    "flip": lambda mk: mk(_A).flip(3),
    "amax_empty": lambda mk: mk(np.ones((0, 3), np.float32)).max(0),
    "argmax_empty": lambda mk: mk(np.ones((0, 3), np.float32)).argmax(0),
    "amin_empty": lambda mk: mk(np.ones((0, 3), np.float32)).min(0),
}


@pytest.mark.parametrize("name", list(INDEX_ERRORS))
def test_bad_axes_and_indices_are_index_errors(name):
    fn = INDEX_ERRORS[name]
    with pytest.raises(IndexError):
        fn(torch.tensor)
    with pytest.raises(IndexError):
        fn(Tensor)


def test_unknown_modes_are_value_errors():
    t = Tensor(np.ones((1, 1, 2, 2), np.float32))
    with pytest.raises(ValueError, match="pad: unknown mode"):
        t.pad((1, 1), mode="foo")
    with pytest.raises(ValueError, match="interpolate: unknown mode"):
        t.interpolate((4, 4), mode="foo")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [(-1, 2), (2, -1), (-2, -1), (1, -3), (-1, 1, 0, -1)])
def test_negative_padding_crops_in_every_mode(mode, pads):
    x = np.arange(20, dtype=np.float32).reshape(1, 4, 5)
    _compare(
        lambda t: (
            torch.nn.functional.pad(t, pads, mode=mode) if isinstance(t, torch.Tensor) else t.pad(pads, mode=mode)
        ),
        x,
    )


def test_clip_with_one_bound():
    _compare(lambda t: t.clip(None, 0.5), np.linspace(0, 1, 6, dtype=np.float32))
    _compare(lambda t: t.clip(0.5), np.linspace(0, 1, 6, dtype=np.float32))


def test_clamp_takes_torch_keywords():
    x = np.array([-2.0, -0.5, 0.5, 2.0, np.nan], np.float32)
    _compare(lambda t: t.clamp(min=-1), x)
    _compare(lambda t: t.clamp(max=1), x)
    _compare(lambda t: t.clamp(min=-1, max=1), x)


def test_clip_bound_given_twice_is_an_error():
    with pytest.raises(Exception, match="a bound is given twice"):
        Tensor([1.0]).clamp(0.0, min=0.5)


def test_one_element_tensors_convert_to_python_scalars():
    assert float(Tensor([[2.5]])) == 2.5 and int(Tensor(7.9)) == 7 and bool(Tensor([0.0])) is False
    assert [10, 20, 30][Tensor(1)] == 20 and list(range(Tensor(3))) == [0, 1, 2]
    for convert in (bool, float, int):
        with pytest.raises(TypeError, match=r"of a Tensor of shape \(2,\) \(2 elements\) is ambiguous"):
            convert(Tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="only integer tensors can be used as an index"):
        [1, 2][Tensor(1.0)]


def test_atan2_quadrants_zeros_infinities_and_gradient():
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -3e-30, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)
    y, x = np.meshgrid(vals, vals)
    got = Tensor(y).atan2(Tensor(x)).numpy()
    want = torch.atan2(torch.tensor(y), torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
    a, b = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    ty, tx = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ry, rx = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty.atan2(tx).sum().backward()
    torch.atan2(ry, rx).sum().backward()
    np.testing.assert_allclose(ty.grad.numpy(), ry.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# 5. numerics

_EXTREME = np.array([-1000.0, -100.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 100.0, 1000.0], np.float32)
F = torch.nn.functional

ACTIVATIONS = {
    "sigmoid": (lambda t: t.sigmoid(), lambda t: t.sigmoid()),
    "tanh": (lambda t: t.tanh(), lambda t: t.tanh()),
    "softplus": (lambda t: t.softplus(), F.softplus),
    "logsigmoid": (lambda t: t.logsigmoid(), F.logsigmoid),
    "silu": (lambda t: t.silu(), F.silu),
    "mish": (lambda t: t.mish(), F.mish),
    "gelu_tanh": (lambda t: t.gelu(approximate="tanh"), lambda t: F.gelu(t, approximate="tanh")),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_at_extreme_inputs(name):
    ours, theirs = ACTIVATIONS[name]
    _compare(lambda t: ours(t) if isinstance(t, Tensor) else theirs(t), _EXTREME)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, 1.5, -0.5, -1, -2, -3])
def test_pow_constant_exponents_values_and_gradients(exponent):
    x = np.array([0.0, 0.5, 1.0, 2.0, 3.0], np.float32)
    _compare(lambda t: t**exponent, x, atol=1e-5)


def test_pow_gradients_at_zero_base_and_exponent():
    a = np.array([0.0, 0.0, 2.0, 1.0, 0.0], np.float32)
    b = np.array([0.0, 2.0, 0.0, 3.0, 0.5], np.float32)
    _compare(lambda x, y: x**y, a, b)


def test_pow_zero_exponent_of_inf_and_nan_is_one():
    assert (Tensor([math.inf, math.nan, 0.0]) ** 0).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, m: t.sum(dtype=m.float32),
        lambda t, m: t.sum(0, dtype=m.float64),
        lambda t, m: t.prod(1, dtype=m.float64),
        lambda t, m: t.sum(dtype=m.int8),
    ],
)
def test_sum_prod_compute_in_the_given_dtype(fn):
    x = np.arange(1, 101, dtype=np.int32).reshape(10, 10)
    ours, theirs = fn(Tensor(x), _DT), fn(torch.tensor(x), torch)
    got, want = ours.numpy(), theirs.numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-3)


class _DT:
    from uopkit.dtype import dtypes as _d

    float32, float64, int8 = _d.float32, _d.float64, _d.int8


def test_interpolate_keeps_integer_dtype():
    x = np.array([[[[0, 3], [5, 7]]]], np.uint8)
    for align in (True, False):
        ours = Tensor(x).interpolate((3, 5), mode="linear", align_corners=align)
        theirs = F.interpolate(torch.tensor(x), size=(3, 5), mode="bilinear", align_corners=align)
        assert ours.numpy().dtype == np.uint8
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("op", ["and", "or", "xor", "invert"])
def test_bitwise_ops_on_bool(op):
    a, b = np.array([True, False, True, False]), np.array([True, True, False, False])
    fns = {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y, "invert": lambda x, y: ~x}
    ours, theirs = fns[op](Tensor(a), Tensor(b)), fns[op](torch.tensor(a), torch.tensor(b))
    assert ours.numpy().dtype == np.bool_
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


# ---------------------------------------------------------------------------------------------------------------------
# 6. the ops PyTorch users reach for

_R = np.random.default_rng(0)
_X = _R.standard_normal((3, 5)).astype(np.float32)
_UNIT = np.array([-0.99, -0.5, -1e-4, 0.0, 1e-4, 0.3, 0.99], np.float32)
_WIDE = np.array([-50.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0, 50.0], np.float32)


@pytest.mark.parametrize(
    "name,x",
    [
        ("sinh", _WIDE),
        ("cosh", _WIDE),
        ("asinh", np.append(_WIDE, 1e12).astype(np.float32)),
        ("acosh", np.array([1.0001, 1.5, 3.0, 1e5, 1e12], np.float32)),
        ("atanh", _UNIT),
        ("atan", np.append(_WIDE, [1e30, -1e30]).astype(np.float32)),
        ("asin", _UNIT),
        ("acos", _UNIT),
        ("erf", _WIDE),
    ],
)
def test_inverse_and_hyperbolic_functions(name, x):
    # acosh' = 1 / sqrt(x^2 - 1) is ill-conditioned next to 1 (PyTorch's float32 x*x - 1 loses digits there)
    _compare(lambda t: getattr(t, name)(), x, atol=1e-6, rtol=1e-4 if name == "acosh" else 1e-5)


def test_special_values_of_new_functions():
    inf, nan = math.inf, math.nan
    x = np.array([inf, -inf, nan, -0.0], np.float32)
    for name in ("sinh", "cosh", "asinh", "atan", "erf"):
        np.testing.assert_array_equal(getattr(Tensor(x), name)().numpy(), getattr(torch.tensor(x), name)().numpy())
    # acosh is nan below 1 however far (x * x - 1 overflowing to inf must not make it inf)
    far = np.array([-1e30, -1e20, -3.0, 0.5, 1e30], np.float32)
    np.testing.assert_array_equal(Tensor(far).acosh().numpy(), torch.tensor(far).acosh().numpy())
    edge = np.array([1.0, -1.0, 2.0], np.float32)
    for name in ("atanh", "asin", "acos", "acosh"):
        np.testing.assert_allclose(
            getattr(Tensor(edge), name)().numpy(), getattr(torch.tensor(edge), name)().numpy(), rtol=1e-6, atol=1e-7
        )


def test_gelu_exact():
    _compare(lambda t: t.gelu(approximate="none") if isinstance(t, Tensor) else F.gelu(t), _WIDE)


def test_copysign():
    a = np.array([1.0, -2.0, 3.0, 0.0, -0.0, 4.0], np.float32)
    b = np.array([-0.0, 3.0, -1.0, -2.0, 5.0, math.nan], np.float32)
    _compare(lambda x, y: x.copysign(y), a, b)
    ours = Tensor(np.array([1, 2], np.int32)).copysign(Tensor(np.array([-1, 1], np.int32)))
    assert ours.numpy().dtype == np.float32 and ours.tolist() == [-1.0, 2.0]


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose(equal_nan):
    inf, nan = math.inf, math.nan
    a = np.array([1.0, 1.0, inf, inf, 5.0, nan, 1e-9, 0.0], np.float32)
    b = np.array([1.0 + 1e-6, 1.1, inf, -inf, inf, nan, 0.0, 1e-9], np.float32)
    ours = Tensor(a).isclose(Tensor(b), equal_nan=equal_nan)
    np.testing.assert_array_equal(ours.numpy(), torch.tensor(a).isclose(torch.tensor(b), equal_nan=equal_nan).numpy())


@pytest.mark.parametrize("n", [1, 6, 600])
def test_logcumsumexp(n):
    x = (_R.standard_normal((2, n)) * 30).astype(np.float32)
    _compare(lambda t: t.logcumsumexp(1), x, atol=1e-4)
    big = np.array([-1000.0, 0.0, -math.inf, 5.0], np.float32)
    np.testing.assert_allclose(Tensor(big).logcumsumexp(0).numpy(), torch.tensor(big).logcumsumexp(0).numpy())
    odd = np.array([[-math.inf, 1.0, math.inf, 2.0], [0.0, math.nan, 3.0, -math.inf]], np.float32)
    np.testing.assert_allclose(Tensor(odd).logcumsumexp(1).numpy(), torch.tensor(odd).logcumsumexp(1).numpy())
    # a long row: its prefixes far below the row's max came out -inf under one max shift for the whole row
    long = np.concatenate([[-1000.0], np.linspace(0, 5, 599)]).astype(np.float32)
    np.testing.assert_allclose(
        Tensor(long).logcumsumexp(0).numpy(), torch.tensor(long).logcumsumexp(0).numpy(), rtol=1e-6
    )
    if 1 < n <= 64:
        # prefixes masked over the input, not windows of a padded copy (5x slower)
        from uopkit.uop.ops import Ops

        assert not [u for u in Tensor(x).logcumsumexp(1).uop.toposort() if u.op is Ops.PAD]


def test_masked_select():
    mask = _X > 0
    _compare(lambda t: t.masked_select(Tensor(mask) if isinstance(t, Tensor) else torch.tensor(mask)), _X)
    row = np.array([True, False, True, True, False])
    _compare(lambda t: t.masked_select(Tensor(row) if isinstance(t, Tensor) else torch.tensor(row)), _X)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    a, b, c = np.arange(2, dtype=np.float32), np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32)
    ours = Tensor.meshgrid(Tensor(a), Tensor(b), Tensor(c), indexing=indexing)
    theirs = torch.meshgrid(torch.tensor(a), torch.tensor(b), torch.tensor(c), indexing=indexing)
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(o.numpy(), t.numpy())
    assert [t.shape for t in Tensor(a).meshgrid(Tensor(b))] == [(2, 3), (2, 3)]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_values_indices_and_gradient(descending, dim):
    x = np.array([[3.0, 1.0, 3.0, 2.0, math.nan], [0.5, -1.0, 7.0, 0.5, 2.0]], np.float32)
    ours = Tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    v, i = ours.sort(dim, descending=descending)
    tv, ti = theirs.sort(dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    weights = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    (v * Tensor(weights)).sum().backward()
    (tv * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    np.testing.assert_array_equal(ours.argsort(dim, descending).numpy(), ti.numpy())


def _long_rows(dtype: str, shape: tuple[int, int]) -> np.ndarray:
    # each dtype's extremes, ties, signed zeros and NaNs
    if dtype == "bool":
        return _R.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        x = _R.integers(-4, 5, shape).astype(dtype)
        x[0, :6] = [-0.0, 0.0, -0.0, math.nan, math.inf, -math.inf]
        x[1, ::7] = math.nan
        x[2, :] = -0.0
        x[2, 40] = 0.0
        return x
    info = np.iinfo(np.dtype(dtype))
    x = _R.integers(max(info.min, -4), min(info.max, 4) + 1, shape).astype(dtype)
    x[0, :4] = [info.min, info.max, info.min, info.max]
    x[1, :] = info.max
    x[2, 7::50] = info.min
    if dtype == "uint64":
        x[3, :3] = [2**63, 2**63 - 1, 2**63 + 1]
    return x


@pytest.mark.parametrize("path", ["blocks", "network"])
@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "float64", "bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64"]
)
def test_long_sort_matches_torch_for_every_dtype(monkeypatch, dtype, path):
    # rows past SORT_BY_RANK are ranked per block up to SORT_BY_BLOCKS (padded from 300 to 384), longer ones go
    # through the bitonic network (padded to 512; the bound lowered here), each over a unique order key per element
    # (64-bit dtypes: a pair of value order and position): values (with their sign bits) and stable indices as
    # torch.sort(stable=True); uint64 as numpy's stable argsort (torch has no uint64 sort on CPU)
    from uopkit.tensor import reduce

    n = 300
    assert reduce.SORT_BY_RANK < n <= reduce.SORT_BY_BLOCKS
    if path == "network":
        monkeypatch.setattr(reduce, "SORT_BY_BLOCKS", reduce.SORT_BY_RANK)
    x = _long_rows(dtype, (4, n))
    ours = Tensor(x)
    for descending in (False, True):
        v, i = ours.sort(-1, descending=descending)
        if dtype == "uint64":
            want_i = np.array(
                [sorted(range(n), key=lambda j, r=r: (-int(r[j]) if descending else int(r[j]), j)) for r in x]
            )
            want_v = np.take_along_axis(x, want_i, -1)
        else:
            tv, ti = torch.tensor(x).sort(dim=-1, descending=descending, stable=True)
            want_v, want_i = tv.numpy(), ti.numpy()
        np.testing.assert_array_equal(i.numpy(), want_i)
        np.testing.assert_array_equal(v.numpy(), want_v)
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(want_v))


def test_long_sort_along_inner_dims_keeps_the_shape():
    # sort, argsort and topk along a dim that isn't last put it back in place (a 3-D sort along dim 0 came back with
    # its last two axes swapped); a 1-D row of 5000 sorts without n^2 work, its gradient goes to the sorted positions
    x = _R.standard_normal((260, 3, 5)).astype(np.float32)
    for dim in (0, 1, 2):
        v, i = Tensor(x).sort(dim)
        tv, ti = torch.tensor(x).sort(dim=dim, stable=True)
        assert v.shape == x.shape and Tensor(x).argsort(dim).shape == x.shape
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        k = 2
        tk = torch.tensor(x).topk(k, dim)
        np.testing.assert_array_equal(Tensor(x).topk(k, dim)[0].numpy(), tk[0].numpy())
    y = _R.standard_normal(5000).astype(np.float32)
    ours = Tensor(y, requires_grad=True)
    v, i = ours.sort(descending=True)
    np.testing.assert_array_equal(i.numpy(), np.argsort(-y, kind="stable"))
    weights = _R.standard_normal(5000).astype(np.float32)
    (v * Tensor(weights)).sum().backward()
    want = np.zeros_like(y)
    want[i.numpy()] = weights
    np.testing.assert_array_equal(ours.grad.numpy(), want)


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    x = _R.permutation(20).astype(np.float32).reshape(4, 5)
    ours = Tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    v, i = ours.topk(3, dim=1, largest=largest)
    tv, ti = theirs.topk(3, dim=1, largest=largest)
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    v.sum().backward()
    tv.sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 5, 12, 24])
def test_topk_by_selection_matches_sort(largest, k):
    # rows long enough for topk's rounds of picks (k <= 16, or a quarter of a sort's stages: 27 for 600; n >= 16k):
    # ties, infinities, NaNs (the largest, as in sort) and a row of nothing but NaNs and one -inf; the values are
    # PyTorch's, the indices sort's (equals by position), the gradient goes to the picked positions
    x = _R.integers(-3, 4, (6, 600)).astype(np.float32)
    x[1, 3] = x[4, 50] = x[4, 60] = math.nan
    x[2, :] = 1.0
    x[3, 10:20] = math.inf
    x[5, :] = math.nan
    x[5, 7] = -math.inf
    x[0, 5:9] = -math.inf
    ours = Tensor(x, requires_grad=True)
    v, i = ours.topk(k, largest=largest)
    _, si = Tensor(x).sort(-1, descending=largest)
    tv, _ = torch.tensor(x).topk(k, largest=largest)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), si.numpy()[:, :k])
    weights = _R.standard_normal(v.shape).astype(np.float32)
    (v * Tensor(weights)).sum().backward()
    want = np.zeros_like(x)
    np.put_along_axis(want, i.numpy().astype(np.int64), weights, axis=1)
    np.testing.assert_array_equal(ours.grad.numpy(), want)


def test_topk_by_selection_on_ints_and_inner_dims():
    xi = _R.integers(-5, 5, (3, 100)).astype(np.int32)
    for largest in (True, False):
        v, i = Tensor(xi).topk(4, dim=1, largest=largest)
        sv, si = Tensor(xi).sort(1, descending=largest)
        np.testing.assert_array_equal(v.numpy(), sv.numpy()[:, :4])
        np.testing.assert_array_equal(i.numpy(), si.numpy()[:, :4])
    x3 = _R.standard_normal((4, 100, 3)).astype(np.float32)
    v, i = Tensor(x3).topk(3, dim=1)
    tv, ti = torch.tensor(x3).topk(3, dim=1)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int8", "int16"])
def test_gather_with_narrow_and_unsigned_indices(dtype):
    # the one-hot pick folds into a load at the index, checked to be in [0, n): an unsigned index's -1 bound is its
    # largest value (every pick was 0) and n past a narrow dtype's largest wrapped
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 300)).astype(np.float32)
    top = min(299, np.iinfo(np.dtype(dtype)).max)
    idx = rng.integers(0, top + 1, (3, 7)).astype(dtype)
    idx[0, :2] = [0, top]
    want = np.take_along_axis(x, idx.astype(np.int64), 1)
    np.testing.assert_array_equal(Tensor(x).gather(1, Tensor(idx)).numpy(), want)
    np.testing.assert_array_equal(
        Tensor(x[:1, :5]).gather(1, Tensor(idx[:1, :1] % 5)).numpy(),
        np.take_along_axis(x[:1, :5], idx[:1, :1].astype(np.int64) % 5, 1),
    )
    logits = Tensor([[0.1, 0.5, -0.3]])
    assert abs(logits.cross_entropy(Tensor(np.array([2], dtype))).item() - 1.5512505) < 1e-5


def test_python_ints_beyond_int32_are_int64_not_wrapped():
    # as numpy (and torch, whose default int is int64): 2**40 as a scalar or in where() is int64; an int no dtype
    # asked for can hold is an error, never another number
    assert Tensor(2**40).dtype == dtypes.int64 and Tensor(2**40).item() == 2**40
    assert Tensor([1, 2**40]).dtype == dtypes.int64
    assert Tensor([True, False]).where(-(2**63), 0).tolist() == [-(2**63), 0]
    assert Tensor(7).dtype == dtypes.int32
    with pytest.raises(OverflowError, match="300 is out of range for"):
        Tensor(300, dtype="uint8")
    with pytest.raises(OverflowError, match="out of range"):
        Tensor(2**64)


@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "uint32", "int64"]
)
def test_topk_by_selection_dtypes_and_extremes(dtype):
    # each dtype's extremes, ties, signed zeros (equal: by position) and NaNs: values and indices as sort gives them
    # (a 32-bit order key per element; 64-bit dtypes take the rounds of compares)
    dt = to_dtype(dtype)
    if dtypes.is_float(dt):
        x = _R.integers(-4, 5, (5, 96)).astype(np.float64)
        x[0, :6] = [-0.0, 0.0, -0.0, math.nan, math.inf, -math.inf]
        x[1, 10:14] = [65504.0, -65504.0, math.nan, -0.0]
        x[2, :] = -0.0
        x[2, 40] = 0.0
    else:
        info = np.iinfo(np.dtype(dtype))
        x = _R.integers(max(info.min, -4), min(info.max, 4) + 1, (5, 96))
        x[0, :4] = [info.min, info.max, info.min, info.max]
        x[1, :] = info.max
        x[2, 7] = info.min
    ours = Tensor(x.tolist(), dtype=dt)
    for largest in (True, False):
        v, i = ours.topk(5, largest=largest)
        sv, si = ours.sort(-1, descending=largest)
        np.testing.assert_array_equal(i.numpy(), si.numpy()[:, :5])
        np.testing.assert_array_equal(
            v.float().numpy() if dt == dtypes.bfloat16 else v.numpy(),
            (sv.float() if dt == dtypes.bfloat16 else sv).numpy()[:, :5],
        )
        if dtypes.is_float(dt):
            # the picked values keep their sign bits (a -0.0 picked is -0.0)
            np.testing.assert_array_equal(np.signbit(v.float().numpy()), np.signbit(sv.float().numpy()[:, :5]))


@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 2, 2), (1, 5, 1), (-1, 1, 3)])
def test_unfold(dim, size, step):
    _compare(lambda t: t.unfold(dim, size, step), _X)


@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 0))])
def test_max_pool2d_indices_and_unpool(kernel, stride, padding):
    img = _R.standard_normal((2, 3, 7, 6)).astype(np.float32)
    img[0, 0, 0, :2] = 5.0  # a tie: the first one is picked
    ours = Tensor(img, requires_grad=True)
    theirs = torch.tensor(img, requires_grad=True)
    v, i = ours.max_pool2d(kernel, stride=stride, padding=padding, return_indices=True)
    tv, ti = F.max_pool2d(theirs, kernel, stride=stride, padding=padding, return_indices=True)
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    u = v.max_unpool2d(i, kernel, stride=stride, padding=padding, output_size=(7, 6))
    tu = F.max_unpool2d(tv, ti, kernel, stride=stride, padding=padding, output_size=(7, 6))
    np.testing.assert_array_equal(u.numpy(), tu.detach().numpy())
    (u * Tensor(img)).sum().backward()
    (tu * torch.tensor(img)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (2, 3, 0), (3, 4, 1), (1, 2, 0), ((2, 1), (3, 2), 0)])
def test_pools_with_windows_that_dont_overlap(kernel, stride, padding):
    # kernel <= stride takes the reshape path (no division or modulo in the kernels); 7x10 leaves a ragged end
    img = _R.standard_normal((2, 3, 7, 10)).astype(np.float32)
    for ours_fn, theirs_fn in ((Tensor.max_pool2d, F.max_pool2d), (Tensor.avg_pool2d, F.avg_pool2d)):
        ours, theirs = Tensor(img, requires_grad=True), torch.tensor(img, requires_grad=True)
        v = ours_fn(ours, kernel, stride=stride, padding=padding)
        tv = theirs_fn(theirs, kernel, stride=stride, padding=padding)
        np.testing.assert_allclose(v.numpy(), tv.detach().numpy(), rtol=1e-5, atol=1e-6)
        g = _R.standard_normal(tv.shape).astype(np.float32)
        (v * Tensor(g)).sum().backward()
        (tv * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
    from uopkit.codegen import get_program
    from uopkit.device import Device
    from uopkit.schedule import create_schedule, kernelize_tensors

    if padding == 0 and kernel != 1:
        # the max's gradient (where the max came from, scattered back) indexes with plain strides too
        x = Tensor.empty(2, 3, 8, 12, requires_grad=True)
        pooled = x.max_pool2d(kernel, stride=stride)
        (pooled * Tensor.empty(*pooled.shape)).sum().backward()
        for item in create_schedule(kernelize_tensors([x.grad])):
            src = get_program(item.ast, Device["CPU"].renderer).src
            assert "%" not in src, src


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy_names_weights_and_pos_weight(reduction):
    p = _R.uniform(0.05, 0.95, (4, 3)).astype(np.float32)
    y = (_R.random((4, 3)) > 0.5).astype(np.float32)
    w = _R.uniform(0.5, 2, (3,)).astype(np.float32)
    _compare(
        lambda t: (
            t.binary_crossentropy(Tensor(y), reduction)
            if isinstance(t, Tensor)
            else F.binary_cross_entropy(t, torch.tensor(y), reduction=reduction)
        ),
        p,
    )
    _compare(
        lambda t: (
            t.binary_crossentropy_logits(Tensor(y), reduction, pos_weight=Tensor(w))
            if isinstance(t, Tensor)
            else F.binary_cross_entropy_with_logits(t, torch.tensor(y), reduction=reduction, pos_weight=torch.tensor(w))
        ),
        _R.standard_normal((4, 3)).astype(np.float32) * 3,
    )
    _compare(
        lambda t: (
            t.binary_cross_entropy(Tensor(y), reduction, weight=Tensor(w))
            if isinstance(t, Tensor)
            else F.binary_cross_entropy(t, torch.tensor(y), reduction=reduction, weight=torch.tensor(w))
        ),
        p,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("targets", ["indices", "probabilities"])
def test_cross_entropy_class_weights(reduction, label_smoothing, targets):
    logits = _R.standard_normal((4, 5, 2)).astype(np.float32)
    w = _R.uniform(0.2, 2, 5).astype(np.float32)
    if targets == "indices":
        y = np.array([[0, 2], [4, -100], [1, 1], [3, 0]])
    else:
        y = _R.random((4, 5, 2)).astype(np.float32)
        y /= y.sum(1, keepdims=True)

    def fn(t):
        if isinstance(t, Tensor):
            return t.cross_entropy(Tensor(y), reduction, label_smoothing, weight=Tensor(w))
        return F.cross_entropy(
            t, torch.tensor(y), weight=torch.tensor(w), reduction=reduction, label_smoothing=label_smoothing
        )

    _compare(fn, logits, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_class_weights(reduction):
    logp = np.log(_R.dirichlet(np.ones(5), 6)).astype(np.float32)
    y = np.array([0, 4, 2, 2, -100, 1])
    w = _R.uniform(0.2, 2, 5).astype(np.float32)

    def fn(t):
        if isinstance(t, Tensor):
            return t.nll_loss(Tensor(y), weight=Tensor(w), reduction=reduction)
        return F.nll_loss(t, torch.tensor(y), weight=torch.tensor(w), reduction=reduction)

    _compare(fn, logp)


def test_scatter_last_write_wins():
    index = np.array([[2, 0, 2, 2], [1, 1, 0, 1]])
    src = np.arange(8, dtype=np.float32).reshape(2, 4)
    ours = Tensor.zeros(2, 3).scatter(1, Tensor(index), Tensor(src))
    theirs = torch.zeros(2, 3).scatter(1, torch.tensor(index), torch.tensor(src))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours0 = Tensor.zeros(3, 4).scatter(0, Tensor(index), Tensor(src))
    theirs0 = torch.zeros(3, 4).scatter(0, torch.tensor(index), torch.tensor(src))
    np.testing.assert_array_equal(ours0.numpy(), theirs0.numpy())


@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin_with_indices(op):
    x = np.array([[1.0, 3.0, 3.0, 2.0, math.nan, 5.0, math.nan], [4.0, 4.0, -1.0, 6.0, 6.0, 0.0, 7.0]], np.float32)
    ours = Tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    (v, i), (tv, ti) = getattr(ours, op)(1), getattr(theirs, op)(1)
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    # the gradient goes to the returned index alone, as PyTorch's: a tie (or a run of one value, all-zero rows) isn't
    # shared, and a NaN that carries forward takes every later position's gradient
    upstream = np.arange(1, x.size + 1, dtype=np.float32).reshape(x.shape)
    (v * Tensor(upstream)).sum().backward()
    (tv * torch.tensor(upstream)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    flat = np.zeros((3, 4, 2), np.float32)
    for dim in (0, 1, -1):
        ours, theirs = Tensor(flat, requires_grad=True), torch.tensor(flat, requires_grad=True)
        weights = np.linspace(-1, 2, flat.size, dtype=np.float32).reshape(flat.shape)
        (getattr(ours, op)(dim=dim).values * Tensor(weights)).sum().backward()
        (getattr(theirs, op)(dim).values * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


def test_signed_zero_constants_stay_apart():
    # 0.0 == -0.0 in Python: neither the node table nor the schedule cache may take one for the other
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        a, b = Tensor.full((3,), first).numpy(), Tensor.full((3,), second).numpy()
        assert list(np.signbit(a)) == [np.signbit(first)] * 3 and list(np.signbit(b)) == [np.signbit(second)] * 3
    x = Tensor([1.0, -2.0])
    for z in (0.0, -0.0, 0.0):
        np.testing.assert_array_equal(np.signbit((x * z).numpy()), np.signbit(np.array([1.0, -2.0]) * z))
    assert np.signbit(Tensor([-1.0]).clip(-0.0, 1.0).numpy()[0]) and not np.signbit(
        Tensor([-1.0]).clip(0.0, 1.0).numpy()[0]
    )


def test_adding_zero_to_negative_zero_gives_positive_zero():
    # IEEE (and PyTorch): -0.0 + 0.0 is +0.0, so x + 0 is not x for floats; x - 0 and x + -0.0 are
    x = Tensor([-0.0, 0.0, 1.5])
    assert list(np.signbit((x + 0).numpy())) == [False, False, False]
    assert list(np.signbit((0 + x).numpy())) == [False, False, False]
    assert list(np.signbit((x - 0).numpy())) == [True, False, False]
    assert list(np.signbit((x + -0.0).numpy())) == [True, False, False]
    # integers still fold
    assert (Tensor([3, -4]) + 0).tolist() == [3, -4]


def test_tanh_float32_within_two_ulp_keeps_negative_zero_and_finite_gradients():
    x = np.concatenate([np.linspace(-20, 20, 20001), np.linspace(-0.7, 0.7, 20001)]).astype(np.float32)
    got = Tensor(x).tanh().numpy().astype(np.float64)
    want = np.tanh(x.astype(np.float64))
    assert (np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))).max() <= 2
    special = Tensor(np.array([-0.0, 0.0, np.inf, -np.inf, np.nan], np.float32), requires_grad=True)
    out = special.tanh()
    np.testing.assert_array_equal(np.signbit(out.numpy()[:2]), [True, False])
    np.testing.assert_array_equal(out.numpy()[2:4], [1.0, -1.0])
    assert np.isnan(out.numpy()[4])
    out.sum().backward()
    np.testing.assert_array_equal(special.grad.numpy()[:4], [1.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("n", [1, 2, 13, 100, 513, 4099])
def test_cumprod_cummax_cummin_as_masked_prefixes(n):
    # products and extremes reduce a mask over the input's expand (no padded copy whose windows are checked loads);
    # values as PyTorch's with NaN and inf in them, on both axes, for ints and half floats too
    from uopkit import dtypes
    from uopkit.uop.ops import Ops

    if 1 < n <= 64:  # (longer axes go in blocks, padded to a whole number of them)
        assert not [u for u in Tensor.ones(3, n).cumprod(1).uop.toposort() if u.op is Ops.PAD]
        assert not [u for u in Tensor.ones(3, n).cummax(1)[0].uop.toposort() if u.op is Ops.PAD]
    if n > 64:
        # long axes go in blocks: no reduce over more than a block's taps (16, or the 64 of a masked prefix of the
        # blocks' totals), not n
        graph = Tensor.ones(3, n).cumprod(1).uop.toposort()
        reduces = [u for u in graph if u.op is Ops.REDUCE_AXIS]
        assert reduces and all(u.src[0].shape[a] <= 64 for u in reduces for a in u.arg[1])
    rng = np.random.default_rng(n)
    x = rng.uniform(0.9, 1.1, (3, n)).astype(np.float32)
    x[0, n // 2] = math.nan
    x[1, n // 3] = math.inf
    x[2, (2 * n) // 3] = -math.inf
    for axis in (0, 1, -1):
        np.testing.assert_allclose(
            Tensor(x).cumprod(axis).numpy(), torch.tensor(x).cumprod(axis).numpy(), rtol=1e-4, equal_nan=True
        )
        for op in ("cummax", "cummin"):
            (v, i), (tv, ti) = getattr(Tensor(x), op)(axis), getattr(torch.tensor(x), op)(axis)
            np.testing.assert_array_equal(v.numpy(), tv.numpy())
            np.testing.assert_array_equal(i.numpy(), ti.numpy())
    xi = rng.integers(-1, 2, (2, n)).astype(np.int32)  # (no overflow: PyTorch's int product is int64)
    np.testing.assert_array_equal(Tensor(xi).cumprod(1).numpy(), torch.tensor(xi).cumprod(1).numpy())
    np.testing.assert_array_equal(Tensor(xi).cummin(1)[0].numpy(), torch.tensor(xi).cummin(1).values.numpy())
    for dt, tdt in ((dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)):
        h = torch.tensor(x[:, : min(n, 40)]).to(tdt)
        ours = Tensor(h.float().numpy()).cast(dt)
        np.testing.assert_array_equal(
            ours.cummax(1)[0].cast(dtypes.float32).numpy(), h.cummax(1).values.float().numpy()
        )
        np.testing.assert_allclose(
            ours.cumprod(1).cast(dtypes.float32).numpy(), h.cumprod(1).float().numpy(), rtol=2e-2, equal_nan=True
        )


# ---------------------------------------------------------------------------------------------------------------------
# gradients at special values and adaptive pools, as PyTorch's (on the CPU: the graphs are the backends' common part)

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, 30.0, -30.0, 100.0, -100.0], np.float32)
AT_SPECIAL_VALUES = {
    "relu": (lambda t: t.relu(), torch.relu),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda t: torch.nn.functional.leaky_relu(t, 0.1)),
    "elu": (lambda t: t.elu(), torch.nn.functional.elu),
    "celu": (lambda t: t.celu(0.5), lambda t: torch.nn.functional.celu(t, 0.5)),
    "selu": (lambda t: t.selu(), torch.nn.functional.selu),
    "expm1": (lambda t: t.expm1(), torch.expm1),
    "log1p": (lambda t: t.log1p(), torch.log1p),
    "tan": (lambda t: t.tan(), torch.tan),
    "max": (lambda t: t.max(), torch.max),
    "min axis": (lambda t: t.reshape(1, -1).min(axis=1), lambda t: t.reshape(1, -1).min(1).values),
    "cummax": (lambda t: t.cummax(0)[0], lambda t: t.cummax(0)[0]),
}


@pytest.mark.parametrize("name", list(AT_SPECIAL_VALUES))
def test_gradients_at_zero_infinities_and_nan(name: str) -> None:
    # each element's gradient as PyTorch's at 0, +-inf, NaN and large |x|: an unused branch's 0 * inf (elu's exp at
    # 100), a correction term's 0/0 (expm1 and log1p at 0) and a NaN max (which equals nothing) made the whole
    # gradient NaN, or a tie at 0 took the wrong slope (leaky_relu)
    ours_fn, theirs_fn = AT_SPECIAL_VALUES[name]
    ours, theirs = Tensor(SPECIAL, requires_grad=True), torch.tensor(SPECIAL, requires_grad=True)
    out, ref = ours_fn(ours), theirs_fn(theirs)
    upstream = np.linspace(0.5, 1.5, out.numel(), dtype=np.float32).reshape(out.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    assert ours.grad is not None and theirs.grad is not None
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("spatial", "out"),
    [((9,), (4,)), ((5,), (8,)), ((13,), (1,)), ((7, 9), (3, 4)), ((3, 3), (7, 2)), ((113, 8), (5, 3))]
    + [((5, 6, 7), (2, 4, 3)), ((3, 4, 5), (5, 1, 7))],
)
def test_uneven_adaptive_pools_are_one_windowed_kernel(spatial: tuple[int, ...], out: tuple[int, ...]) -> None:
    from uopkit.schedule import create_schedule, kernelize_tensors

    # uneven windows as a pool over the axis repeated O times (window i: taps i*L + j*O), not a one-hot gather per
    # tap (60x slower than torch): values, indices (-inf and a NaN among them) and one kernel without a gather
    n = len(spatial)
    x = np.random.default_rng(1).standard_normal((2, 3, *spatial)).astype(np.float32)
    x.flat[[3, x.size - 2]] = -np.inf
    x.flat[17] = np.nan
    for kind in ["max", "avg"]:
        ours = getattr(Tensor(x), f"adaptive_{kind}_pool2d")(out)
        ref = getattr(torch.nn.functional, f"adaptive_{kind}_pool{n}d")(torch.tensor(x), out)
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    uneven = any(L % O for L, O in zip(spatial, out, strict=True))
    assert not uneven or len(create_schedule(kernelize_tensors([Tensor(x).adaptive_max_pool2d(out)]))) == 1
    values, indices = Tensor(x).adaptive_max_pool2d(out, return_indices=True)
    ref_values, ref_indices = getattr(torch.nn.functional, f"adaptive_max_pool{n}d")(torch.tensor(x), out, True)
    np.testing.assert_array_equal(values.numpy(), ref_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
def test_adaptive_pools_match_torch(op: str) -> None:
    # windows [floor(i L / O), ceil((i + 1) L / O)): uneven (overlapping), growing, None (an even split is a plain
    # pool); ties (the max's gradient to each window's first maximum) and a NaN (which a zero weight must not spread)
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (1, 2, 7, 9)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    theirs_fn = getattr(torch.nn.functional, op)
    for size in [(3, 4), (9, 11), (None, 2)]:
        ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, ref = getattr(ours, op)(size), theirs_fn(theirs, size)
        g = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
        (out * Tensor(g)).sum().backward()
        (ref * torch.tensor(g)).sum().backward()
        assert out.shape == tuple(ref.shape)
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert ours.grad is not None and theirs.grad is not None
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
    # an output size of 0 is an empty result, as torch's; a negative one is refused
    assert getattr(Tensor(x), op)((0, 2)).shape == tuple(theirs_fn(torch.tensor(x), (0, 2)).shape) == (1, 2, 0, 2)
    with pytest.raises(ShapeError, match="must not be negative"):
        getattr(Tensor(x), op)((-1, 2))


# ---------------------------------------------------------------------------------------------------------------------
# strided transposed convolutions (and a strided convolution's input gradient) computed by phases


def _conv_transpose_cases() -> list[tuple]:
    cases = []
    for nd, s, k, d, p, op, g in (
        (2, 2, 3, 1, 1, 1, 1),
        (2, 2, 4, 1, 1, 0, 2),
        (2, 3, 5, 2, 2, 1, 1),  # dilation coprime with the stride
        (2, 2, 3, 2, 1, 1, 2),  # not coprime: the spread input
        (2, 3, 2, 1, 0, 2, 1),  # a kernel shorter than the stride: phases without taps
        (2, 2, 1, 1, 0, 1, 2),  # a 1x1 kernel, and an output_padding row no tap reaches
        (1, 2, 3, 1, 2, 1, 1),  # padding larger than the taps before: cropped phases
        (1, 3, 4, 1, 0, 0, 1),
        (3, 2, 3, 1, 1, 1, 1),
    ):
        cases.append((nd, s, k, d, p, op, g))
    return cases


@pytest.mark.parametrize("nd, s, k, d, p, op, g", _conv_transpose_cases())
def test_strided_conv_transpose_values_and_gradients(nd, s, k, d, p, op, g):
    rng = np.random.default_rng(nd * 100 + s * 10 + k)
    cin, cout = 2 * g, 3 * g
    spatial = {1: (7,), 2: (5, 4), 3: (3, 4, 3)}[nd]
    x = rng.standard_normal((2, cin, *spatial)).astype(np.float32)
    w = rng.standard_normal((cin, cout // g) + (k,) * nd).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    fn = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d}.get(
        nd, torch.nn.functional.conv_transpose3d
    )
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ref = fn(tx, tw, tb, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    ux, uw, ub = (Tensor(v, requires_grad=True) for v in (x, w, b))
    out = ux.conv_transpose2d(uw, ub, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
    upstream = rng.standard_normal(ref.shape).astype(np.float32)
    ref.backward(torch.tensor(upstream))
    (out * Tensor(upstream)).sum().backward()
    for mine, theirs in ((ux, tx), (uw, tw), (ub, tb)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), atol=1e-3, rtol=1e-4)


def test_strided_conv_transpose_input_gradient_is_one_convolution():
    # the adjoint: x's gradient is the strided convolution of the incoming gradient with the same weight, as torch's
    # (through the phases' chain it was a convolution per phase over an odd-sized padded view: 4x the time)
    from uopkit import autograd
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 4, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 4, 4)).astype(np.float32)
    up = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    ux = Tensor(x, requires_grad=True)
    (gx,) = autograd.grad((ux.conv_transpose2d(Tensor(w), stride=2, padding=1) * Tensor(up)).sum(), [ux])
    items = create_schedule(kernelize_tensors([gx]))
    assert sum(u.op is Ops.REDUCE_AXIS for it in items for u in it.ast.toposort()) == 1
    want = torch.nn.functional.conv2d(torch.tensor(up), torch.tensor(w), stride=2, padding=1)
    np.testing.assert_allclose(gx.numpy(), want.numpy(), atol=1e-4, rtol=1e-4)


def test_strided_convolution_input_gradient_skips_the_spread_zeros():
    # the input gradient of a stride-2 convolution: one convolution per output phase over the gradient itself, each
    # with its slice of the kernel (9 taps over the 4 phases), not all 9 taps over a gradient 3/4 zeros
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    ux, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ux.conv2d(Tensor(w), stride=2, padding=1).square().sum().backward()
    torch.nn.functional.conv2d(tx, torch.tensor(w), stride=2, padding=1).square().sum().backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), atol=1e-3, rtol=1e-4)
    gy = Tensor.empty(2, 6, 5, 4)
    gx = gy._transposed_conv(Tensor.empty(6, 4, 3, 3), 1, (2, 2), (1, 1), ((1, 2), (1, 1)))
    taps = sorted(
        tuple(u.src[0].shape[-2:])
        for u in gx.uop.toposort()
        if u.op.name == "REDUCE_AXIS" and u.src[0].shape is not None and len(u.src[0].shape) > 4
    )
    assert taps == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_each_phase_of_a_strided_transposed_convolution_is_a_kernel_of_its_own():
    # fused into the interleaving, every output computed every phase's convolution under a mask (16x the work for a
    # stride of 4: 70x torch's time); stored first, the interleaving kernel only picks loads
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 3, 5, 5)).astype(np.float32), rng.standard_normal((3, 2, 8, 8)).astype(np.float32)
    out = Tensor(x).conv_transpose2d(Tensor(w), stride=4, padding=2)
    reduces = [
        sum(u.op is Ops.REDUCE_AXIS for u in item.ast.toposort())
        for item in create_schedule(kernelize_tensors([out]))
        if item.ast.op is not Ops.COPY
    ]
    assert len(reduces) >= 16 and max(reduces) == 1
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=4, padding=2)
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=1e-4, rtol=1e-5)


def test_a_sum_stacked_with_itself_compiles_and_is_right():
    # lanes over both output axes around a reduce read in two padded regions: simplifying a gated load's address
    # rebuilt the reduce's loop (its RANGE is ordered after the accumulator's reset, indexed by the gated lane), and
    # the two copies of the loop couldn't be ordered
    from uopkit import Device
    from uopkit.codegen import full_rewrite, prepare_ast
    from uopkit.codegen.opt import Opt, OptOps, apply_opts
    from uopkit.schedule import create_schedule, kernelize_tensors

    h = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    t = Tensor(h)
    out = Tensor.stack(t.sum(1).flatten(), t.sum(1).flatten(), dim=-1)
    ast = prepare_ast(create_schedule(kernelize_tensors([out]))[-1].ast)
    renderer = Device["CPU"].renderer
    lanes = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 2)]
    uops, _ = full_rewrite(ast, renderer, apply_opts(ast, lanes, renderer))
    assert len({u.arg for u in uops if u.op.name == "RANGE"}) == len([u for u in uops if u.op.name == "RANGE"])
    np.testing.assert_allclose(out.numpy(), np.stack([h.sum(1).ravel()] * 2, -1), rtol=1e-6)
    c = Tensor(h.reshape(1, 2, 3, 4)).conv2d(Tensor.ones(4, 1, 1, 1), groups=2)
    ref = torch.nn.functional.conv2d(torch.tensor(h.reshape(1, 2, 3, 4)), torch.ones(4, 1, 1, 1), groups=2)
    np.testing.assert_allclose((c.unsqueeze(-1).pad(((0, 0),) * 4 + ((0, 1),)) + 1).numpy()[..., 0], ref + 1, rtol=1e-6)


def test_a_layer_over_a_batch_of_sequences_is_one_matrix_product():
    # (b, t, k) @ (k, m): one product over the b*t rows, so w's gradient x.T @ g is one reduce stored in w's layout
    # (as a batched product it was a sum over two axes stored transposed: 3-5x slower in a transformer's step)
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(3)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5, 8), (8, 6), (3, 5, 6)))
    ux, uw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = ux @ uw
    ref = tx @ tw
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out * Tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(uw.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    uw.grad = None
    ((ux @ uw) * Tensor(g)).sum().backward()
    item = create_schedule(kernelize_tensors([uw.grad]))[-1]
    reduces = [u for u in item.ast.toposort() if u.op.name == "REDUCE_AXIS"]
    assert len(reduces) == 1 and len(reduces[0].arg[1]) == 1
    # stored in w's layout, (8, 6), not (6, 8) read through a transpose
    assert item.ast.src[0].src[1].shape[:2] == (8, 6)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_products_are_exact_as_pytorchs(dt):
    # PyTorch's matmul, conv and einsum of half floats multiply exactly (in float32) and round once at the end: a
    # product rounded to half first loses (1 + e)^2's e^2, which a cancelling sum then shows (gradients alike)
    e = 2.0**-10 if dt == "float16" else 2.0**-7
    xs, ws = [[1 + e, 1.0]], [[1 + e], [-(1 + 2 * e)]]
    tdt = getattr(torch, dt)
    x, w = Tensor(xs).cast(to_dtype(dt)), Tensor(ws).cast(to_dtype(dt))
    tx, tw = torch.tensor(xs, dtype=tdt), torch.tensor(ws, dtype=tdt)
    assert (tx.float() @ tw.float()).item() == e * e  # the exact answer, which PyTorch gives
    got = {
        "matmul": (x @ w, tx @ tw),
        "conv2d": (
            x.reshape(1, 1, 1, 2).conv2d(w.reshape(1, 1, 1, 2)),
            torch.nn.functional.conv2d(tx.reshape(1, 1, 1, 2), tw.reshape(1, 1, 1, 2)),
        ),
        "einsum": (Tensor.einsum("ij,jk->ik", x, w), torch.einsum("ij,jk->ik", tx, tw)),
    }
    for name, (ours, theirs) in got.items():
        assert ours.dtype == to_dtype(dt), name
        assert ours.float().numpy().ravel().tolist() == theirs.float().numpy().ravel().tolist() == [e * e], name
    # x's gradient g @ w.T: with g = [[1 + e]] and w = [[1 + e], [-(1 + 2e)]], its first entry is (1 + e)^2
    xg, txg = Tensor(xs, requires_grad=True), torch.tensor(xs, dtype=tdt, requires_grad=True)
    (xg.cast(to_dtype(dt)) @ w).backward(Tensor([[1 + e]]).cast(to_dtype(dt)))
    (txg @ tw).backward(torch.tensor([[1 + e]], dtype=tdt))
    assert xg.grad.float().numpy().tolist() == txg.grad.float().numpy().tolist()


def test_gradients_flow_through_bfloat16_as_pytorchs():
    # a bfloat16 value is a graph of integer bits inside uopkit; gradients still reach float32 master weights cast to
    # bfloat16 and realized bfloat16 parameters, with PyTorch's values and dtypes (rounded to bfloat16 at each read)
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 3)))
    master = Tensor(w1, requires_grad=True)
    param = Tensor(w2).cast(dtypes.bfloat16).realize().requires_grad_()
    tmaster = torch.tensor(w1, requires_grad=True)
    tparam = torch.tensor(w2).bfloat16().requires_grad_()
    h = (Tensor(x).cast(dtypes.bfloat16) @ master.cast(dtypes.bfloat16)).relu()
    loss = ((h @ param).float() * 1.7).sum()
    th = (torch.tensor(x).bfloat16() @ tmaster.bfloat16()).relu()
    tloss = ((th @ tparam).float() * 1.7).sum()
    loss.backward()
    tloss.backward()
    assert master.grad.dtype == dtypes.float32 and param.grad.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(param.grad.float().numpy(), tparam.grad.float().numpy())
    np.testing.assert_allclose(master.grad.numpy(), tmaster.grad.numpy(), rtol=2**-7)
    (got,) = (Tensor.ones(4, 16, dtype=dtypes.bfloat16) @ param).float().sum().gradient(param)
    assert got.dtype == dtypes.bfloat16 and got.shape == param.shape
    np.testing.assert_array_equal(got.float().numpy(), np.full((16, 3), 4.0, np.float32))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_float_functions_round_once_as_pytorchs(dt):
    # a formula of several ops on half floats is computed in float32 and rounded once (support.in_float32), as
    # PyTorch's: rounded op by op, a third or more of the results were an ulp or a few off (bfloat16 exp: 70%)
    x = np.linspace(-10, 10, 2000, dtype=np.float32)
    u, t = Tensor(x).cast(to_dtype(dt)), torch.tensor(x).to(getattr(torch, dt))
    cases = {
        "exp": (u.exp(), t.exp()),
        "log": (u.abs().log(), t.abs().log()),
        "sigmoid": (u.sigmoid(), t.sigmoid()),
        "tanh": (u.tanh(), t.tanh()),
        "softplus": (u.softplus(), F.softplus(t)),
        "softmax": (u.reshape(20, 100).softmax(-1), t.reshape(20, 100).softmax(-1)),
    }
    for name, (ours, theirs) in cases.items():
        assert ours.dtype == to_dtype(dt), name
        np.testing.assert_array_equal(ours.float().numpy().ravel(), theirs.float().numpy().ravel(), err_msg=name)
    # the gradient goes through float32 too
    xs = Tensor(x[::50], requires_grad=True)
    ts = torch.tensor(x[::50], requires_grad=True)
    xs.cast(to_dtype(dt)).sigmoid().float().sum().backward()
    ts.to(getattr(torch, dt)).sigmoid().float().sum().backward()
    # (PyTorch's is taken at the rounded output, ours at float32's: they differ by about an ulp of the output)
    eps = 2.0**-10 if dt == "float16" else 2.0**-7
    np.testing.assert_allclose(xs.grad.numpy(), ts.grad.numpy(), rtol=eps, atol=2 * eps)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_floats_with_python_numbers_and_products_as_pytorchs(dt):
    # PyTorch's CPU multiplies and divides a half float by a Python number in float32 (x * 0.1 isn't
    # x * float16(0.1)), but adds, subtracts and compares the number rounded to the half float; running products and
    # std are computed in float32 and rounded once (a product over an axis is not: PyTorch's overflows as ours)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 50)).astype(np.float32) * 10
    u, t = Tensor(x).cast(to_dtype(dt)), torch.tensor(x).to(getattr(torch, dt))
    cases = {
        "mul": (u * 0.1, t * 0.1),
        "rmul": (5001 * u, 5001 * t),
        "div": (u / 0.3, t / 0.3),
        "floor": (u.div(0.3, rounding_mode="floor"), t.div(0.3, rounding_mode="floor")),
        "add": (u + 0.1, t + 0.1),
        "sub": (0.1 - u, 0.1 - t),
        "eq": ((u * 0 + 0.1) == 0.1, (t * 0 + 0.1) == 0.1),
        "cumprod": ((u * 0.01 + 1).cumprod(-1), (t * 0.01 + 1).cumprod(-1)),
        "std": (u.std(-1), t.std(-1)),
    }
    for name, (ours, theirs) in cases.items():
        np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy(), err_msg=name)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("scalar", [np.float64(0.1), np.float32(0.1), np.sqrt(768), np.int64(5001)])
def test_half_floats_take_numpy_scalars_as_the_python_numbers(dt, scalar):
    # a numpy scalar is the Python number (torch takes it so): `x * np.sqrt(768)` in float32 and rounded once, not
    # by the scalar rounded to the half float first
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096).astype(np.float32) * 4
    u, t = Tensor(x).cast(to_dtype(dt)), torch.tensor(x).to(getattr(torch, dt))
    cases = {
        "mul": (u * scalar, t * scalar),
        "rmul": (scalar * u, scalar * t),
        "div": (u / scalar, t / scalar),
        "floordiv": (u // scalar, t // scalar),
        "rfloordiv": (scalar // (u.abs() + 1), scalar // (t.abs() + 1)),
        "mul method": (u.mul(scalar), t.mul(scalar)),
        "div method": (u.div(scalar), t.div(scalar)),
        "add": (u + scalar, t + scalar),
    }
    ui, ti = u.clone(), t.clone()
    ui *= scalar
    ti *= scalar
    cases["*="] = (ui, ti)
    ud, td = u.clone(), t.clone()
    ud /= scalar
    td /= scalar
    cases["/="] = (ud, td)
    for name, (ours, theirs) in cases.items():
        assert ours.dtype == to_dtype(dt), name
        np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy(), err_msg=name)


def test_cumsum_of_a_long_row_goes_in_short_blocks():
    # a long axis is summed in blocks of at most 64 per level (n * sqrt(n) taps for a 50257-long row otherwise)
    x = _R.standard_normal((2, 5000)).astype(np.float32)
    np.testing.assert_allclose(Tensor(x).cumsum(-1).numpy(), np.cumsum(x.astype(np.float64), -1), rtol=1e-5, atol=2e-4)
    i = _R.integers(-9, 10, (1, 70000)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(i).cumsum(-1).numpy(), np.cumsum(i, -1))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_arange_with_float_arguments_and_an_int_dtype(dtype: str) -> None:
    # PyTorch: a 64-bit arange truncates its arguments first; the others take their length from the floats and their
    # values from start and step truncated
    for args in [(0, 5, 1.5), (0.5, 5, 1.5), (-0.5, 3, 1.5), (5, 0, -1.5), (0.7, 5, 1)]:
        if dtype == "uint8" and args[0] < 0:
            continue
        want = torch.arange(*args, dtype=getattr(torch, dtype)).tolist()
        assert Tensor.arange(*args, dtype=to_dtype(dtype)).tolist() == want, args


def test_randint_and_integer_uniform() -> None:
    with pytest.raises(TypeError, match="randint"):
        Tensor.randint(3, low=0.1, high=3)
    Tensor.manual_seed(1)
    draws = Tensor.uniform(60000, low=-3, high=3, dtype=dtypes.int32).numpy()
    counts = np.bincount(draws + 3, minlength=6)
    # each of [-3, 3) about equally often (truncating toward zero would give 0 twice the share and never -3)
    assert draws.min() == -3 and draws.max() == 2 and counts.min() > 0.9 * counts.max()


def test_successive_random_draws_are_independent() -> None:
    # each draw has a stream of its own: no draw repeats (a shifted copy of) the one before it, as PyTorch's don't
    import uopkit.nn.functional as F

    Tensor.manual_seed(0)
    a, b = Tensor.rand(4096).numpy(), Tensor.rand(4096).numpy()
    assert np.intersect1d(a, b).size == 0
    i, j = Tensor.randint(2**30, (512,)).numpy(), Tensor.randint(2**30, (512,)).numpy()
    assert np.intersect1d(i, j).size == 0
    m1, m2 = (F.dropout(Tensor.ones(4096), 0.5).numpy() > 0 for _ in range(2))
    assert max(np.mean(m1[k:] == m2[: len(m2) - k]) for k in range(0, 64)) < 0.6
    # one sample at a time from a uniform distribution: every category about equally often, no pattern between draws
    p = Tensor.ones(1, 10) / 10
    draws = np.array([int(p.multinomial(1).item()) for _ in range(400)])
    counts = np.bincount(draws, minlength=10)
    assert counts.min() > 15 and counts.max() < 65
    assert np.mean(np.diff(draws) % 10 == (draws[1] - draws[0]) % 10) < 0.3


def test_lists_of_numpy_values_keep_their_dtypes() -> None:
    # as torch.tensor: a list's numpy scalars and arrays count with their own dtypes (Python numbers with ours)
    cases = [
        [np.float64(0.1)],
        [1.0, np.float64(2)],
        [np.int64(3), np.int64(-4)],
        [np.uint8(3)],
        [np.ones(2, np.uint8)],
        [np.arange(3), np.arange(3)],
        [np.ones((2, 3)), np.zeros((2, 3))],
        [1.5, np.int64(2)],
        [True, np.bool_(False)],
        [np.int32(1), np.float16(2)],
        [np.float32(1.0), 2.0],
    ]
    for values in cases:
        want = torch.tensor(np.array(values) if isinstance(values[0], np.ndarray) else values)
        got = Tensor(values)
        assert got.dtype == to_dtype(str(want.dtype).removeprefix("torch.")), values
        assert got.shape == tuple(want.shape) and got.tolist() == want.tolist(), values
    assert Tensor([np.float64(0.1)]).item() == 0.1
    # Python numbers alone keep uopkit's defaults (an int is int32)
    assert Tensor([1, 2]).dtype == dtypes.int32 and Tensor([1, np.uint8(3)]).dtype == dtypes.int32


def test_lists_of_one_element_tensors_keep_their_dtypes() -> None:
    # as torch.tensor: a 0-d tensor in a list counts with its dtype, promoted with the others and the Python numbers
    cases = [
        lambda T, d: [T(0.1, dtype=d("float64"))],
        lambda T, d: [T(0.1, dtype=d("float16"))] * 2,
        lambda T, d: [T(0.1, dtype=d("bfloat16"))],
        lambda T, d: [T(0.1, dtype=d("float16")), 1.0],
        lambda T, d: [[T(1.0, dtype=d("float16"))], [T(1.0, dtype=d("bfloat16"))]],
        lambda T, d: [T(3, dtype=d("int32")), T(1.0, dtype=d("float16"))],
        lambda T, d: [T(1, dtype=d("int8")), 2.5],
        lambda T, d: [T(True), True],
        lambda T, d: [T([0.1], dtype=d("float64"))],
        lambda T, d: [T(1.0), np.float64(2)],
    ]
    for i, build in enumerate(cases):
        want = torch.tensor(build(torch.tensor, lambda name: getattr(torch, name)))
        got = Tensor(build(Tensor, to_dtype))
        assert got.dtype == to_dtype(str(want.dtype).removeprefix("torch.")), i
        assert got.shape == tuple(want.shape) and got.tolist() == want.tolist(), i


def test_sum_to_a_half_dtype_accumulates_wider() -> None:
    # torch's sum(dtype=float16): the values cast, summed wider, rounded once
    for x in (np.ones(3000, np.float32), np.full(5000, 0.1, np.float32), np.ones((300, 40), np.float64)):
        for dt, tdt in ((dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)):
            got = Tensor(x).sum(dtype=dt)
            assert got.dtype == dt
            assert got.float().item() == torch.tensor(x).sum(dtype=tdt).float().item()
    got = Tensor(np.ones((300, 4), np.float32)).sum(0, dtype=dtypes.float16, keepdim=True)
    assert got.shape == (1, 4) and got.numpy().tolist() == [[300.0] * 4]


def test_half_max_gradient_shared_among_many_ties() -> None:
    # the tie count is kept in float32: a float16 count stops at 2048
    for n in (3000, 70000):
        x, tx = (
            Tensor.ones(n, dtype=dtypes.float16, requires_grad=True),
            torch.ones(n, dtype=torch.half, requires_grad=True),
        )
        x.max().backward()
        tx.max().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gradient_through_a_reshaped_value_read_before_the_loss(dtype: str) -> None:
    # reading a value realizes it; backward() still follows it to its graph (for bfloat16: through the views over its
    # uint16 bits)
    w0 = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    w = Tensor(w0, dtype=to_dtype(dtype), requires_grad=True)
    tw = torch.tensor(w0, dtype=getattr(torch, dtype), requires_grad=True)
    y, ty = (w.sum(-1, keepdim=True) * w).reshape(2, 8), (tw.sum(-1, keepdim=True) * tw).reshape(2, 8)
    y.numpy()
    (y.float() * Tensor.arange(16.0).reshape(2, 8)).sum().backward()
    (ty.float() * torch.arange(16.0).reshape(2, 8)).sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.float().numpy(), tw.grad.float().numpy(), rtol=2e-2)


@pytest.mark.parametrize(
    "value,dtype",
    [([-1], "uint8"), (-1, "uint8"), ([-255, 3], "uint8"), ([-256], "uint8"), ([300], "uint8"), ([-1], "uint16"),
     ([-1], "uint32"), ([-1], "uint64"), ([-129], "int8")],
)  # fmt: skip
def test_negative_ints_into_unsigned_dtypes_as_torch(value: object, dtype: str) -> None:
    try:
        want = torch.tensor(value, dtype=getattr(torch, dtype)).tolist()
    except (RuntimeError, OverflowError):
        with pytest.raises(OverflowError):
            Tensor(value, dtype=to_dtype(dtype))
        return
    assert Tensor(value, dtype=to_dtype(dtype)).tolist() == want


_STORED_SCALAR_OPS = {
    "full": (lambda t, v: Tensor.full((3,), v, dtype=t.dtype), lambda t, v: torch.full((3,), v, dtype=t.dtype)),
    "fill_": (lambda t, v: t.fill_(v), lambda t, v: t.fill_(v)),
    "masked_fill": (
        lambda t, v: t.masked_fill(Tensor([True, False, True]), v),
        lambda t, v: t.masked_fill(torch.tensor([True, False, True]), v),
    ),
    "setitem": (lambda t, v: t.__setitem__(1, v) or t, lambda t, v: t.__setitem__(1, v) or t),
    "index_fill": (
        lambda t, v: t.index_fill(0, Tensor([0, 2]), v),
        lambda t, v: t.index_fill(0, torch.tensor([0, 2]), v),
    ),
    "pad": (lambda t, v: t.pad((1, 1), value=v), lambda t, v: torch.nn.functional.pad(t, (1, 1), value=v)),
    # (an int where() value or clamp() bound beside an int tensor is checked too, as torch's)
    "where": (
        lambda t, v: Tensor([True, False, True]).where(t, v),
        lambda t, v: torch.where(torch.tensor([True, False, True]), t, v),
    ),
    "clamp": (lambda t, v: t.clamp(max=v), lambda t, v: t.clamp(max=v)),
}


@pytest.mark.parametrize("op", list(_STORED_SCALAR_OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "bool"])
def test_stored_numbers_the_dtype_cannot_hold_raise_as_torch(op: str, dtype: str) -> None:
    # a Python number stored into a tensor (not arithmetic, where it rounds to inf or wraps) is checked as torch's:
    # beyond the dtype's largest finite value it raises instead of becoming inf; NaN, inf and fractions beyond the
    # range raise for ints; inf and NaN go into floats, negative ints above -2**bits wrap into unsigned ones (not in
    # pad);
    # where and setitem round into float16 and bfloat16, as torch's
    ours, theirs = _STORED_SCALAR_OPS[op]
    values = [1e40, -1e40, 65504.0, 65519.0, 3.39e38, math.inf, -math.inf, math.nan, 300, -200, 255.5, -1.5, 2.7]
    for v in [*values, 2**31, -129]:
        try:
            want = theirs(torch.zeros(3, dtype=getattr(torch, dtype)), v)
        except RuntimeError:
            with pytest.raises(OverflowError, match="without overflow"):
                ours(Tensor.zeros(3, dtype=dtype), v).realize()
            continue
        got = ours(Tensor.zeros(3, dtype=dtype), v)
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy(), err_msg=f"{op} {dtype} {v!r}")
        assert got.dtype == to_dtype(dtype) or op in ("where", "clamp"), (op, dtype, v)


def test_prod_gradient_beside_a_zero_and_an_infinity_as_torch() -> None:
    # the product of the others, not prod / x: an inf beside the zero gives 0 (not inf / inf = NaN), and where the
    # non-zero product overflows, too; a -0.0 signs the zeros
    inf = math.inf
    rows = [[inf, 2.0], [inf, 0.0, 2.0], [inf, 0.0, inf], [inf, -0.0, -2.0], [3.0, 0.0, -2.0], [inf, inf, 0.0],
            [0.0, 0.0, inf], [-inf, 2.0, 0.0], [1e30, 1e30, 0.0, 2.0]]  # fmt: skip
    for row in rows:
        t, r = Tensor(row, requires_grad=True), torch.tensor(row, requires_grad=True)
        t.prod().backward()
        r.prod().backward()
        np.testing.assert_array_equal(t.grad.numpy(), r.grad.numpy(), err_msg=str(row))
        signs, theirs = np.signbit(t.grad.numpy()), np.signbit(r.grad.numpy())
        assert np.array_equal(signs[~np.isnan(r.grad.numpy())], theirs[~np.isnan(r.grad.numpy())]), row


@pytest.mark.parametrize(
    "name", ["acosh", "logit", "asin", "acos", "elu", "celu", "selu"]
)  # fmt: skip
def test_first_and_second_derivatives_at_domain_edges_as_torch(name: str) -> None:
    # at the ends of the domains (+-1, 0, -0.0) and at elu's kink, both orders as torch's: signs of infinities, inf
    # rather than NaN, 0 for elu's second derivative at 0
    funcs = {"elu": (lambda t: t.elu(2.0), lambda t: torch.nn.functional.elu(t, 2.0)),
             "celu": (lambda t: t.celu(2.0), lambda t: torch.nn.functional.celu(t, 2.0)),
             "selu": (lambda t: t.selu(), torch.nn.functional.selu)}  # fmt: skip
    ours, theirs = funcs.get(name, (lambda t: getattr(t, name)(), lambda t: getattr(t, name)()))
    x = np.array([-1.0, -0.0, 0.0, 1.0, 0.5, -0.5, 2.0], np.float32)
    t, r = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (g,) = ours(t).sum().gradient(t)
    # (torch's first derivative from a plain backward: with create_graph its logit'(-0.0) is -inf, not inf)
    np.testing.assert_allclose(g.numpy(), torch.autograd.grad(theirs(r).sum(), r)[0], rtol=1e-5, equal_nan=True)
    (tg,) = torch.autograd.grad(theirs(r).sum(), r, create_graph=True)
    g.sum().backward()
    tg.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("cached", [True, False])
def test_writing_a_tensor_into_a_slice_keeps_its_gradient_and_its_storage(cached: bool) -> None:
    # the value written is read where it is, not copied first (a copy moved the value's tensor to it, and its
    # gradient, found through the value's old node, was lost: `v.grad` None on a process's first such write)
    a0, v0 = np.ones((3, 4), np.float32), np.arange(8, dtype=np.float32).reshape(2, 4)
    with Context(SCHEDULE_CACHE=int(cached)):
        a, v = Tensor(a0, requires_grad=True), Tensor(v0, requires_grad=True)
        before = v.uop
        z = a * 1
        z[1:3] = v
        assert v.uop is before
        (z * z).sum().backward()
    ta, tv = torch.tensor(a0, requires_grad=True), torch.tensor(v0, requires_grad=True)
    tz = ta * 1
    tz[1:3] = tv
    (tz * tz).sum().backward()
    assert v.grad is not None and a.grad is not None
    np.testing.assert_array_equal(v.grad.numpy(), tv.grad.numpy())
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())


def test_writing_a_tensor_into_another_view_of_itself_reads_it_first() -> None:
    # every element is read before any is written, as if the value were a copy (PyTorch refuses most of these: the
    # views overlap); a view of the written storage that is part of the target's own chain used to be written in place
    a = Tensor.arange(6).contiguous().realize()
    a[::-1] = a
    assert a.tolist() == [5, 4, 3, 2, 1, 0]
    m0 = np.arange(9, dtype=np.int32).reshape(3, 3)
    b = Tensor(m0).contiguous().realize()
    b.T.copy_(b)
    assert b.tolist() == m0.T.tolist()
    c = Tensor(m0).contiguous().realize()
    c.T[...] = c
    assert c.tolist() == m0.T.tolist()
    d = Tensor(m0[:2, :2].copy()).contiguous().realize()
    x = d.T
    x[:] = d
    assert d.tolist() == [[0, 3], [1, 4]] and x.tolist() == [[0, 1], [3, 4]]
    d[0, 1] = 100
    assert x.tolist() == [[0, 1], [100, 4]]
    e = Tensor.arange(8).reshape(2, 4).contiguous().realize()
    e[:, ::-1] = e
    assert e.tolist() == [[3, 2, 1, 0], [7, 6, 5, 4]]
    f = Tensor.arange(6).float().contiguous().realize()
    f[1:] = f[:-1]
    assert f.tolist() == [0, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("op", ["max_pool2d", "max_pool2d_padded", "adaptive_max_pool2d", "max_pool1d"])
def test_max_pool_gradient_goes_to_the_first_maximum_after_the_output_is_read(op: str) -> None:
    # reading the pooled values realizes them; backward() rebuilds their graph from the very nodes the first-maximum
    # rule was given to (the rule was lost with the realized view, and ties shared the gradient)
    x0 = np.zeros((1, 1, 4, 4), np.float32)
    x0[0, 0, 2:, 2:] = np.float32([[1, 1], [1, 0]])
    calls = {
        "max_pool2d": (lambda t: t.max_pool2d(2), lambda t: torch.nn.functional.max_pool2d(t, 2)),
        "max_pool2d_padded": (
            lambda t: t.max_pool2d(2, stride=1, padding=1),
            lambda t: torch.nn.functional.max_pool2d(t, 2, stride=1, padding=1),
        ),
        "adaptive_max_pool2d": (
            lambda t: t.adaptive_max_pool2d((3, 3)),
            lambda t: torch.nn.functional.adaptive_max_pool2d(t, (3, 3)),
        ),
        "max_pool1d": (
            lambda t: t.reshape(1, 4, 4).max_pool2d((3,), 1),
            lambda t: torch.nn.functional.max_pool1d(t.reshape(1, 4, 4), 3, 1),
        ),
    }
    ours, theirs = calls[op]
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out = ours(x)
    out.numpy()
    (out * Tensor.arange(out.numel()).reshape(out.shape).float()).sum().backward()
    tout = theirs(tx)
    (tout * torch.arange(tout.numel()).reshape(tout.shape).float()).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_bfloat16_picks_keep_the_sign_of_zero_as_torch() -> None:
    # a pick is a one-hot sum, exact in float32 (bfloat16's own sum added 0.0 to a picked -0.0)
    x0 = [-0.0, 1.0, -3.0]
    x, tx = Tensor(x0, dtype=dtypes.bfloat16), torch.tensor(x0, dtype=torch.bfloat16)
    idx, tidx = Tensor([0, 2, 0]), torch.tensor([0, 2, 0])
    pairs = [
        (x.gather(0, idx), tx.gather(0, tidx)),
        (x[idx], tx[tidx]),
        (x.index_select(0, idx), tx.index_select(0, tidx)),
        (x.sort()[0], tx.sort()[0]),
        (x.topk(2)[0], tx.topk(2)[0]),
        (x.reshape(1, 3).max(dim=1)[0], tx.reshape(1, 3).max(dim=1)[0]),
        (
            Tensor([[-0.0, 1.0]], dtype=dtypes.bfloat16).min(dim=1)[0],
            torch.tensor([[-0.0, 1.0]]).bfloat16().min(dim=1)[0],
        ),
    ]
    for ours, theirs in pairs:
        got, want = ours.float().numpy(), theirs.float().numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_promotion_before_float_in_atan2_and_copysign_as_torch() -> None:
    for a, b in [
        (torch.tensor([1, -2], dtype=torch.int32), torch.tensor([1.0, 1.0], dtype=torch.float16)),
        (torch.tensor([1, -2], dtype=torch.int8), torch.tensor([1.0, -1.0], dtype=torch.bfloat16)),
        (torch.tensor([True, False]), torch.tensor([1.0, -1.0], dtype=torch.float16)),
        (torch.tensor([1, -2]), torch.tensor(-1.0, dtype=torch.float64)),
        (torch.tensor([1, -2]), torch.tensor([3, -1])),
    ]:
        x, y = (
            Tensor(a.numpy(), dtype=to_dtype(str(a.dtype)[6:])),
            Tensor(b.numpy() if b.dtype != torch.bfloat16 else b.float().numpy(), dtype=to_dtype(str(b.dtype)[6:])),
        )
        for ours, theirs in ((x.atan2(y), torch.atan2(a, b)), (x.copysign(y), torch.copysign(a, b))):
            assert ours.dtype == to_dtype(str(theirs.dtype)[6:]), (a.dtype, b.dtype, ours.dtype, theirs.dtype)
            np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=1e-2)


def test_int_hardtanh_keeps_its_dtype_and_zeros_keep_their_sign() -> None:
    for dt in ("int8", "int32", "int64"):
        t = Tensor([-5, 0, 5], dtype=dt).hardtanh()
        want = torch.nn.functional.hardtanh(torch.tensor([-5, 0, 5], dtype=getattr(torch, dt)))
        assert t.dtype == to_dtype(dt) and t.tolist() == want.tolist()
    for dt in ("float16", "float32", "float64"):
        for fn in ("tan", "tanh", "sinh", "sin", "atan", "asinh", "expm1"):
            got = getattr(Tensor([-0.0, 0.0], dtype=dt), fn)().float().numpy()
            want = getattr(torch.tensor([-0.0, 0.0], dtype=getattr(torch, dt)), fn)().float().numpy()
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{fn} {dt}")


def test_float64_sinh_to_the_last_digits() -> None:
    # the series near 0 goes to x^19 in float64 (x^11 left 1.4e-10 relative error just below 1)
    x = np.array([1e-3, 0.1, 0.5, 0.9, 0.99, 0.9999, -0.95, 1.0, 1.5, 20.0])
    np.testing.assert_allclose(Tensor(x).sinh().numpy(), np.sinh(x), rtol=4e-16)
    t = Tensor(x, requires_grad=True)
    t.cosh().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.sinh(x), rtol=4e-16)


def test_isclose_of_bools_and_unsigned_ints_as_torch() -> None:
    a, b = [True, False, True], [True, True, False]
    assert Tensor(a).isclose(Tensor(b)).tolist() == torch.tensor(a).isclose(torch.tensor(b)).tolist()
    u, v = [1, 3, 200], [3, 1, 0]
    got = Tensor(u, dtype="uint8").isclose(Tensor(v, dtype="uint8"), atol=5).tolist()
    assert got == torch.tensor(u, dtype=torch.uint8).isclose(torch.tensor(v, dtype=torch.uint8), atol=5).tolist()


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 2)])
def test_nonzero_as_tuple_as_torch(shape: tuple[int, ...]) -> None:
    x0 = (np.arange(int(np.prod(shape))) % 3 == 1).reshape(shape).astype(np.float32)
    ours, theirs = Tensor(x0).nonzero(as_tuple=True), torch.tensor(x0).nonzero(as_tuple=True)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs, strict=True):
        assert o.tolist() == t.tolist()
    assert Tensor(x0).nonzero().tolist() == torch.tensor(x0).nonzero().tolist()


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_as_torch(dim: int, keepdim: bool) -> None:
    x0 = np.random.default_rng(3).integers(-3, 4, (5, 6)).astype(np.float32)
    x0[1, 2] = np.nan
    for k in range(1, x0.shape[dim] + 1):
        ours, theirs = Tensor(x0).kthvalue(k, dim, keepdim), torch.tensor(x0).kthvalue(k, dim, keepdim)
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
        # (torch picks one of equal values unspecified: the index must point at the value)
        idx = ours.indices.numpy() if keepdim else np.expand_dims(ours.indices.numpy(), dim)
        picked = np.take_along_axis(x0, idx.astype(np.int64), dim)
        np.testing.assert_array_equal(picked if keepdim else picked.squeeze(dim), theirs.values.numpy())
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    x.kthvalue(2, dim, keepdim).values.sum().backward()
    tx.kthvalue(2, dim, keepdim).values.sum().backward()
    assert x.grad.numpy().sum() == tx.grad.numpy().sum()
    with pytest.raises(ArgumentError, match="kthvalue: k must be"):
        Tensor(x0).kthvalue(0)


@pytest.mark.parametrize("name", ["norm", "norm_dim", "norm_p3", "normalize", "cosine_similarity"])
def test_second_derivatives_through_norms_as_torch(name: str) -> None:
    ours_of = {
        "norm": lambda t: t.norm(),
        "norm_dim": lambda t: t.norm(dim=1).sum(),
        "norm_p3": lambda t: t.norm(p=3),
        "normalize": lambda t: t.normalize(dim=1).square().sum(),
        "cosine_similarity": lambda t: t.cosine_similarity(t * t + 1, dim=1).sum(),
    }
    theirs_of = {
        "norm": lambda t: t.norm(),
        "norm_dim": lambda t: t.norm(dim=1).sum(),
        "norm_p3": lambda t: t.norm(p=3),
        "normalize": lambda t: torch.nn.functional.normalize(t, dim=1).square().sum(),
        "cosine_similarity": lambda t: torch.nn.functional.cosine_similarity(t, t * t + 1, dim=1).sum(),
    }
    x0 = np.array([[1.0, 2.0, 2.0], [0.5, -1.0, 3.0]], np.float32)
    pick = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (g,) = ours_of[name](x).gradient(x)
    (g * Tensor(pick)).sum().backward()
    (tg,) = torch.autograd.grad(theirs_of[name](tx), tx, create_graph=True)
    (tg * torch.tensor(pick)).sum().backward()
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), atol=1e-6)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-6)


@pytest.mark.parametrize("opt", ["SGD", "SGD_momentum", "Adam", "AdamW"])
def test_float64_parameters_take_float64_hyperparameters_as_torch(opt: str) -> None:
    from uopkit.nn import optim

    ours_of = {"SGD": (optim.SGD, {}), "SGD_momentum": (optim.SGD, {"momentum": 0.9}), "Adam": (optim.Adam, {}),
               "AdamW": (optim.AdamW, {"weight_decay": 0.1})}  # fmt: skip
    theirs = {
        "SGD": torch.optim.SGD,
        "SGD_momentum": torch.optim.SGD,
        "Adam": torch.optim.Adam,
        "AdamW": torch.optim.AdamW,
    }
    cls, kw = ours_of[opt]
    x0 = np.array([1.0, -2.0, 3.0])
    p, tp = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    o, to = cls([p], lr=0.1, **kw), theirs[opt]([tp], lr=0.1, **kw)
    assert o.lr.dtype == dtypes.float64
    for _ in range(3):
        o.zero_grad()
        (p * p * p).sum().backward()
        o.step()
        to.zero_grad()
        (tp * tp * tp).sum().backward()
        to.step()
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_float_resampling_and_lerp_round_once_as_pytorchs(dt: str) -> None:
    # computed in float32 and rounded once, as PyTorch's (each pass rounded to the half float left values off by up
    # to 5 ulp)
    x = np.random.default_rng(5).standard_normal((1, 3, 12, 10)).astype(np.float32)
    u, t = Tensor(x, dtype=dt), torch.tensor(x).to(getattr(torch, dt))
    fn = torch.nn.functional
    cases = [
        (u.interpolate(size=(7, 13), mode="bilinear"), fn.interpolate(t, size=(7, 13), mode="bilinear")),
        (u.interpolate(scale_factor=1.5, mode="bilinear"), fn.interpolate(t, scale_factor=1.5, mode="bilinear")),
        (u.interpolate(size=(5, 4), mode="area"), fn.interpolate(t, size=(5, 4), mode="area")),
        (u.avg_pool2d(3, 2, 1), fn.avg_pool2d(t, 3, 2, 1)),
        (u.adaptive_avg_pool2d((5, 3)), fn.adaptive_avg_pool2d(t, (5, 3))),
        (u.lerp(u * 2 + 1, 0.3), torch.lerp(t, t * 2 + 1, 0.3)),
        (
            u.lerp(u * 2 + 1, Tensor.full(x.shape, 0.7, dtype=dt)),
            torch.lerp(t, t * 2 + 1, torch.full(x.shape, 0.7).to(t.dtype)),
        ),
    ]
    for i, (ours, theirs) in enumerate(cases):
        assert ours.dtype == to_dtype(dt)
        got, want = ours.float().numpy(), theirs.float().numpy()
        # (an ulp where float32's own rounding of a sum lands a value on the other side of a half-float midpoint)
        assert np.mean(got != want) < 0.02, i
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2, err_msg=str(i))


def test_reshape_copies_where_pytorchs_does() -> None:
    # a reshape no strides can show (`x.T.reshape(-1)`) is a copy in PyTorch: a write into it stays in it; one that
    # strides can show stays a view, written through
    cases = [
        (lambda t: t.T.reshape(-1), (0,), False),
        (lambda t: t[:, :2].reshape(-1), (1,), False),
        (lambda t: t.T.flatten(), (2,), False),
        (lambda t: t[1:].reshape(-1), (1,), True),
        (lambda t: t.T.reshape(4, 3, 1), (0, 0, 0), True),
        (lambda t: t.reshape(2, 6), (1, 1), True),
        (lambda t: t[:, 1:2].reshape(3), (2,), True),
    ]
    for i, (make, at, is_view) in enumerate(cases):
        x, tx = Tensor.arange(12).reshape(3, 4).contiguous().realize(), torch.arange(12).reshape(3, 4)
        y, ty = make(x), make(tx)
        y[at] = -7
        ty[at] = -7
        assert (ty._base is not None) == is_view, i
        assert x.tolist() == tx.tolist(), i
        assert y.tolist() == ty.tolist(), i


def test_which_reshapes_are_views_matches_pytorch_on_random_view_chains() -> None:
    from uopkit.tensor.support import _reshape_is_view

    rng = np.random.default_rng(11)

    def shape_of(n: int, k: int) -> tuple[int, ...]:
        dims = []
        for _ in range(k - 1):
            d = int(rng.choice([d for d in range(1, n + 1) if n % d == 0]))
            dims.append(d)
            n //= d
        return tuple(int(d) for d in rng.permutation([*dims, n]))

    for _ in range(400):
        shape = shape_of(24, int(rng.integers(1, 5)))
        t, u = torch.arange(24).reshape(shape), Tensor.arange(24).reshape(shape)
        for op in rng.choice(["permute", "slice", "expand", "reshape", "unsqueeze"], int(rng.integers(1, 4))):
            if op == "permute":
                p = [int(i) for i in rng.permutation(t.ndim)]
                t, u = t.permute(p), u.permute(p)
            elif op == "slice" and t.ndim and t.shape[d := int(rng.integers(t.ndim))] > 1:
                a = int(rng.integers(t.shape[d]))
                idx = (slice(None),) * d + (slice(a, int(rng.integers(a + 1, t.shape[d] + 1))),)
                t, u = t[idx], u[idx]
            elif op == "expand" and 1 in t.shape:
                size = list(t.shape)
                size[size.index(1)] = 3
                t, u = t.expand(size), u.expand(*size)
            elif op == "unsqueeze":
                d = int(rng.integers(t.ndim + 1))
                t, u = t.unsqueeze(d), u.unsqueeze(d)
            elif op == "reshape":
                new = shape_of(t.numel(), int(rng.integers(1, 5)))
                t, u = t.reshape(new), u.reshape(new)
        new = shape_of(t.numel(), int(rng.integers(1, 5)))
        try:
            t.view(new)
            viewable = True
        except RuntimeError:
            viewable = False
        assert _reshape_is_view(u.uop, new) == viewable, (t.shape, t.stride(), new)


def test_gradients_accumulate_into_the_same_grad_tensor_as_torch() -> None:
    x, tx = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    g, tg = x.grad, tx.grad
    assert g.tolist() == tg.tolist()
    (x * 3).sum().backward()
    (tx * 3).sum().backward()
    assert x.grad is g and g.tolist() == tg.tolist() == [5.0, 7.0]


@pytest.mark.parametrize("how", ["setitem", "add_"])
def test_what_pytorch_copies_keeps_its_values_after_a_write_into_the_source(how: str) -> None:
    # a flip, a pad, a repeat or a reshape no strides show is a copy in PyTorch (and a view of one is a view of the
    # copy): a later write into the source doesn't show in it; the views do show it
    makers = {
        "flip": lambda x: x.flip(0),
        "flip.T": lambda x: x.flip(1).T,
        "T.flip": lambda x: x.T.flip(0),
        "repeat": lambda x: x.repeat(2, 1),
        "T.reshape": lambda x: x.T.reshape(-1),
        "T": lambda x: x.T,
        "reshape": lambda x: x.reshape(-1),
        "slice.T": lambda x: x[1:].T,
        "diagonal": lambda x: x.diagonal(),
        "expand": lambda x: x[:1].expand(3, 2),
    }
    for name, make in makers.items():
        x, tx = Tensor.arange(4).reshape(2, 2).contiguous().realize(), torch.arange(4).reshape(2, 2)
        y, ty = make(x), make(tx)
        if how == "setitem":
            x[0, 0], tx[0, 0] = 100, 100
        else:
            x.add_(10)
            tx.add_(10)
        assert y.tolist() == ty.tolist(), name
    x = Tensor.arange(4).reshape(2, 2).contiguous().realize()
    padded = x.pad(((1, 0), (0, 0)))
    x[0, 0] = 100
    assert padded.tolist() == [[0, 0], [0, 1], [2, 3]]


@pytest.mark.parametrize("how", ["add_", "iadd", "setitem", "zero_", "row"])
def test_a_write_through_detach_is_unseen_by_autograd_as_torch(how: str) -> None:
    # PyTorch's autograd doesn't record a write through `.detach()`: the values change, the gradient is the one of the
    # graph that computed them (it was lost: `x.grad` None, or the written positions' gradient dropped)
    writes = {
        "add_": lambda y: y.detach().add_(1),
        "iadd": lambda y: y.detach().__iadd__(1),
        "setitem": lambda y: y.detach().__setitem__(0, 7.0),
        "zero_": lambda y: y.detach().zero_(),
        "row": lambda y: y[0].detach().add_(1),
    }
    x, tx = Tensor([3.0, 4.0], requires_grad=True), torch.tensor([3.0, 4.0], requires_grad=True)
    y, ty = x * 2, tx * 2
    writes[how](y)
    writes[how](ty)
    (y * 5).sum().backward()
    (ty * 5).sum().backward()
    assert y.tolist() == ty.tolist()
    assert x.grad is not None and x.grad.tolist() == tx.grad.tolist()


def test_a_0d_index_tensor_is_an_int_as_torch() -> None:
    # numpy's rule counted it as an advanced index, parting the others: (2, 3) where torch gives (3, 2), and the
    # same index in a setitem refused a value of torch's shape
    x, tx = Tensor.arange(24).reshape(2, 3, 4), torch.arange(24).reshape(2, 3, 4)
    i, ti = Tensor(1), torch.tensor(1)
    cases = [
        ((i, slice(None), Tensor([0, 1])), (ti, slice(None), torch.tensor([0, 1]))),
        ((i, None, Tensor([0, 2])), (ti, None, torch.tensor([0, 2]))),
        ((Tensor([0, 1]), i, Tensor([0, 2])), (torch.tensor([0, 1]), ti, torch.tensor([0, 2]))),
        ((slice(None), Tensor([[1], [0]]), i), (slice(None), torch.tensor([[1], [0]]), ti)),
    ]
    for index, tindex in cases:
        want = tx[tindex]
        np.testing.assert_array_equal(x[index].numpy(), want.numpy())
        y, ty = Tensor.zeros(2, 3, 4).contiguous(), torch.zeros(2, 3, 4)
        value = np.arange(want.numel(), dtype=np.float32).reshape(want.shape) + 1
        y[index] = Tensor(value)
        ty[tindex] = torch.from_numpy(value)
        np.testing.assert_array_equal(y.numpy(), ty.numpy())


def test_integer_power_wraps_as_torch() -> None:
    # computed in float64 it was exact only to 2**53: 3 ** 100 in int32 gave 0 (torch: -818408495)
    for dt, tdt in ((dtypes.int32, torch.int32), (dtypes.int64, torch.int64), (dtypes.int8, torch.int8)):
        a = [-3, -2, -1, 0, 1, 2, 3, 7, 100]
        e = [0, 1, 2, 5, 9, 31, 40, 63, 100, -1, -2]
        grid_a = [x for x in a for _ in e]
        grid_e = e * len(a)
        got = Tensor(grid_a, dtype=dt) ** Tensor(grid_e, dtype=dt)
        want = torch.tensor(grid_a, dtype=tdt) ** torch.tensor(grid_e, dtype=tdt)
        assert got.tolist() == want.tolist(), dt
        assert (Tensor(a, dtype=dt) ** 40).tolist() == (torch.tensor(a, dtype=tdt) ** 40).tolist()
    assert (2 ** Tensor([100, 62, 63], dtype=dtypes.int64)).tolist() == [0, 2**62, -(2**63)]


def test_empty_scatter_reduce_extremes_and_bool_max() -> None:
    none = Tensor.zeros(0, dtype=dtypes.int64)
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            out = Tensor([1.0, 2.0, 3.0]).scatter_reduce(0, none, Tensor([5.0]), reduce, include_self=include_self)
            assert out.tolist() == [1.0, 2.0, 3.0]
    # a bool max over nothing raises as the other dtypes' (it was any(): False)
    with pytest.raises(EmptyReduceError):
        Tensor.zeros(0, dtype=dtypes.bool).max()
    with pytest.raises(EmptyReduceError):
        Tensor.zeros(3, 0, dtype=dtypes.bool).max(1)
    assert Tensor.zeros(3, 0, dtype=dtypes.bool).max(axis=0).shape == (0,)
    assert Tensor.zeros(3, 0, dtype=dtypes.bool).max(0).indices.shape == (0,)
    assert Tensor.zeros(0, dtype=dtypes.bool).any().item() is False


def test_third_sweep_fixes_match_torch() -> None:
    # logaddexp2 at a tie gives each side half the gradient (the tie branch gave all of it to self)
    a, b = Tensor([2.0, -1.0], requires_grad=True), Tensor([2.0, 3.0], requires_grad=True)
    ta, tb = torch.tensor([2.0, -1.0], requires_grad=True), torch.tensor([2.0, 3.0], requires_grad=True)
    a.logaddexp2(b).sum().backward()
    ta.logaddexp2(tb).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-6)
    # diff with n=0 leaves prepend and append out, as torch's
    assert Tensor([1.0, 2.0, 4.0]).diff(0, prepend=Tensor([0.0])).tolist() == [1.0, 2.0, 4.0]
    with pytest.raises(ArgumentError, match="one_hot: can't infer the number of classes of an empty tensor"):
        Tensor.zeros(0, dtype=dtypes.int32).one_hot()
    assert Tensor([0.0, 1.0]).bernoulli().tolist() == [0.0, 1.0]


def test_optimizers_match_torch_in_float64_and_per_parameter_dampening() -> None:
    from uopkit.nn.optim import AdamW, clip_grad_norm_

    # Adam's bias corrections from float64 powers of the betas (float32(0.999)**t put every step off by ~6e-6)
    for cls, tcls in ((Adam, torch.optim.Adam), (AdamW, torch.optim.AdamW)):
        w, tw = Tensor([1.0, 1.0], requires_grad=True), torch.tensor([1.0, 1.0], requires_grad=True)
        opt, topt = cls([w], lr=0.5), tcls([tw], lr=0.5)
        for step in range(4):
            w.grad, tw.grad = Tensor([1.0, -2.0]) * (step + 1), torch.tensor([1.0, -2.0]) * (step + 1)
            opt.step()
            topt.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)
    # float64 stays float64 in nesterov's sum and clip_grad_norm_'s norm
    w = Tensor([1.0], dtype=dtypes.float64, requires_grad=True)
    tw = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt, topt = SGD([w], lr=1, momentum=0.9, nesterov=True), torch.optim.SGD([tw], lr=1, momentum=0.9, nesterov=True)
    w.grad, tw.grad = Tensor([0.1], dtype=dtypes.float64), torch.tensor([0.1], dtype=torch.float64)
    opt.step()
    topt.step()
    assert w.tolist() == tw.tolist()
    w.grad, tw.grad = Tensor([0.1], dtype=dtypes.float64), torch.tensor([0.1], dtype=torch.float64)
    v, tv = Tensor([0.2], dtype=dtypes.float64), torch.tensor([0.2], dtype=torch.float64, requires_grad=True)
    v.grad, tv.grad = Tensor([0.2], dtype=dtypes.float64), torch.tensor([0.2], dtype=torch.float64)
    assert clip_grad_norm_([w, v], 0.1).item() == torch.nn.utils.clip_grad_norm_([tw, tv], 0.1).item()
    # a parameter whose first gradient comes at a later step starts its momentum undampened, as torch's
    a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    ta, tb = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    opt, topt = (
        SGD([a, b], lr=1, momentum=0.9, dampening=0.5),
        torch.optim.SGD([ta, tb], lr=1, momentum=0.9, dampening=0.5),
    )
    a.grad, ta.grad = Tensor([1.0]), torch.ones(1)
    opt.step()
    topt.step()
    a.grad, ta.grad, b.grad, tb.grad = None, None, Tensor([1.0]), torch.ones(1)
    opt.step()
    topt.step()
    assert a.tolist() == ta.tolist() and b.tolist() == tb.tolist()


def test_unfold_of_a_0d_tensor_and_cdist_inf_of_no_coordinates() -> None:
    assert Tensor(3.0).unfold(0, 1, 1).tolist() == torch.tensor(3.0).unfold(0, 1, 1).tolist()
    got = Tensor.zeros(2, 0).cdist(Tensor.zeros(3, 0), p=math.inf)
    assert got.tolist() == torch.cdist(torch.zeros(2, 0), torch.zeros(3, 0), p=math.inf).tolist()


@pytest.mark.parametrize("other_requires_grad", [False, True])
def test_copysign_gradient_at_special_values_is_torch_s(other_requires_grad: bool) -> None:
    # result / x, as torch: NaN at +-inf and NaN, 0 at +-0 (it was -1 or 1); with `other` requiring a gradient the
    # given derivative was passed over for the chain of rules (a target behind the DETACH counted as inside)
    xs, ys = [math.inf, -math.inf, math.nan, 0.0, -0.0, 2.0, -3.0], [-1.0, 1.0, -0.0, 0.0, -2.0, 5.0, -1.0]
    x, y = Tensor(xs, requires_grad=True), Tensor(ys, requires_grad=other_requires_grad)
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=other_requires_grad)
    x.copysign(y).sum().backward()
    tx.copysign(ty).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(x.copysign(y).numpy(), tx.copysign(ty).detach().numpy())
    if other_requires_grad:
        assert y.grad.tolist() == ty.grad.tolist()


def test_norm_layers_keep_a_half_input_s_dtype_as_torch() -> None:
    # float32 weights with a float16/bfloat16 input (mixed precision): torch's norm layers return the input's dtype
    from uopkit import nn

    x = np.random.default_rng(4).standard_normal((2, 4, 3, 3)).astype(np.float32)
    for dt, tdt in ((dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)):
        layers = [
            (nn.LayerNorm(3), torch.nn.LayerNorm(3)),
            (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
            (nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)),
        ]
        for layer, tlayer in layers:
            # (eval mode in both)
            got, want = layer.eval()(Tensor(x).cast(dt)), tlayer.eval()(torch.from_numpy(x).to(tdt))
            assert got.dtype == dt
            np.testing.assert_allclose(got.float().numpy(), want.float().detach().numpy(), atol=1e-2)


def test_norm_of_a_negative_p_as_torch() -> None:
    a = np.random.default_rng(6).standard_normal((3, 5))
    a[0, 1] = 0.0  # (a zero element makes the norm 0)
    for p in (-1, -2, -0.5):
        x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        x.norm(p, dim=1).sum().backward()
        torch.linalg.vector_norm(t, p, dim=1).sum().backward()
        np.testing.assert_allclose(x.norm(p, dim=1).numpy(), torch.linalg.vector_norm(t, p, dim=1).detach().numpy())
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("p", [1, 2, 3, 1.5, 0.5, -1])
def test_norm_gradients_at_infinities_nans_and_tiny_values_as_torch(p: float) -> None:
    # the derivative was set to 0 wherever x or it wasn't finite (the 1-norm's sign(x) at +-inf: torch 1 and -1), and
    # below p = 2 it was x |x|^(p-2), which overflows at |x| ~ 1e-30 for p = 0.5 (inf, then 0; torch's finite)
    rows = np.array(
        [
            [math.inf, -math.inf, 0.0, 2.0],
            [math.inf, 1.0, 0.5, 0.0],
            [-math.inf, -math.inf, 1.0, 1.0],
            [math.nan, 1.0, 2.0, 0.0],
            [1e30, 1e30, 1.0, 0.0],
            [1e-30, 0.0, 0.0, 0.0],
            [3.0, -4.0, 0.0, 0.0],
        ],
        np.float32,
    )
    w = np.random.default_rng(7).standard_normal(len(rows)).astype(np.float32)
    x, t = Tensor(rows, requires_grad=True), torch.tensor(rows, requires_grad=True)
    (x.norm(p, dim=1) * Tensor(w)).sum().backward()
    (torch.linalg.vector_norm(t, p, dim=1) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5)
    x, t = Tensor(rows, requires_grad=True), torch.tensor(rows, requires_grad=True)
    (x.normalize(p, dim=1) * Tensor(rows[::-1].copy())).nan_to_num().sum().backward()
    (torch.nn.functional.normalize(t, p, dim=1) * torch.tensor(rows[::-1].copy())).nan_to_num().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5)


def test_nuclear_norm_and_a_0d_norm_s_dim_as_torch() -> None:
    a = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    for kwargs in ({"dim": (0, 1)}, {"dim": (0, 2), "keepdim": True}, {"dim": [-1, 0]}):
        x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        ours, theirs = x.norm("nuc", **kwargs), t.norm("nuc", **kwargs)
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5)
        ours.sum().backward()
        theirs.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert Tensor(a[0]).norm("nuc").item() == pytest.approx(torch.tensor(a[0]).norm("nuc").item(), rel=1e-6)
    for kwargs in ({}, {"dim": 1}, {"dim": (1, 1)}):
        with pytest.raises(RuntimeError):
            torch.tensor(a).norm("nuc", **kwargs)
        with pytest.raises(RuntimeError, match="norm"):
            Tensor(a).norm("nuc", **kwargs)
    # a 0-d tensor takes dim 0 and -1 only, as the other reductions (dim=5 was ignored)
    assert Tensor(1.5).norm(dim=-1).item() == torch.tensor(1.5).norm(dim=-1).item()
    with pytest.raises(IndexError):
        torch.tensor(1.5).norm(dim=5)
    with pytest.raises(IndexError, match="norm: axis 5"):
        Tensor(1.5).norm(dim=5)


def test_searchsorted_with_a_sorter_as_torch() -> None:
    seq = np.array([[5.0, 1.0, 3.0, 9.0, 7.0], [2.0, 8.0, 4.0, 6.0, 0.0]], np.float32)
    values = np.array([[0.0, 3.0, 6.0, 10.0], [1.0, 4.0, 4.5, 9.0]], np.float32)
    order = np.argsort(seq, axis=1)
    for side in ("left", "right"):
        got = Tensor(seq).searchsorted(Tensor(values), side=side, sorter=Tensor(order.astype(np.int32)))
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(values), side=side, sorter=torch.tensor(order))
        assert got.tolist() == want.tolist()
    with pytest.raises(ShapeError, match="searchsorted: sorter"):
        Tensor(seq).searchsorted(Tensor(values), sorter=Tensor([0, 1]))


def test_pow_gradients_at_special_values_are_torch_s() -> None:
    # the exponent's gradient was 0 wherever a ** b is 0 (inf ** -inf: torch NaN) and at 0 ** NaN (torch NaN)
    vals = [math.inf, -math.inf, math.nan, 0.0, -0.0, 2.0, -2.0, 0.5, -1.0, 1000.0, -1000.0]
    a, b = zip(*[(x, y) for x in vals for y in vals], strict=True)
    x, y = Tensor(list(a), requires_grad=True), Tensor(list(b), requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (x**y).sum().backward()
    (tx**ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# index results along an axis of 2**31 elements or more: int64, not int32 wrapped negative. Checked on lazy graphs over
# a stride-0 view (nothing is allocated or computed), the values on small axes.

_HUGE = 2**31 + 8


def _index_results(x: Tensor, sorts: bool = True) -> dict[str, Tensor]:
    found = {
        "argmax": x.argmax(),
        "argmin": x.argmin(0),
        "max(dim=)": x.max(dim=0).indices,
        "min(dim=)": x.min(dim=0).indices,
        "topk": x.topk(1)[1],
    }
    if sorts:
        found |= {"kthvalue": x.kthvalue(1)[1], "median(dim)": x.median(0)[1]}
    return found


def test_index_results_past_int32_are_int64() -> None:
    # they were int32: torch's 2147483655 came back as -2147483641 (and x[x.argmax()] read the wrong element)
    assert dtypes.positions(2**31 - 1) == dtypes.int32 and dtypes.positions(2**31) == dtypes.int64
    huge = Tensor([7], dtype=dtypes.uint8).expand(_HUGE)
    for name, got in _index_results(huge, sorts=False).items():
        assert got.dtype == dtypes.int64, name
    # (a row past 2**31 elements has no sort: its positions don't fit the sort's one-word keys, tensor/wordsort.py)
    with pytest.raises(ArgumentError, match="sort: rows of more than 2\\*\\*31 elements are not supported"):
        huge.kthvalue(1)
    for name, got in _index_results(Tensor([3, 1, 3], dtype=dtypes.uint8)).items():
        assert got.dtype == dtypes.int32, name
    # a 2-D tensor whose flattened length passes 2**31: argmax() counts positions in the flattened tensor
    assert Tensor([1.0]).reshape(1, 1).expand(2**16, 2**15 + 1).argmax().dtype == dtypes.int64
    assert Tensor([1.0]).reshape(1, 1).expand(2**16, 2**15 + 1).argmax(1).dtype == dtypes.int32


def test_index_results_past_int32_read_the_right_element() -> None:
    # one 1 three from the end of 2**31 + 8 lazy elements (compared with an arange: nothing allocated, ~1 s a pass)
    n = _HUGE
    x = (Tensor.arange(n) == n - 3).cast(dtypes.uint8)
    at = x.argmax()
    assert at.item() == x.max(dim=0).indices.item() == x.topk(1)[1].item() == n - 3
    assert x[at].item() == 1


def test_index_results_keep_their_values_with_positions_dtype() -> None:
    x = np.array([[3, 9, 9, 1], [5, 0, 5, 0]], np.float32)
    t, tt = Tensor(x), torch.tensor(x)
    assert t.argmax(1).tolist() == tt.argmax(1).tolist() and t.argmin().item() == tt.argmin().item()
    assert t.max(dim=1).indices.tolist() == tt.max(dim=1).indices.tolist()
    assert t.cummax(1)[1].tolist() == tt.cummax(1)[1].tolist()
    assert t.sort(1)[1].tolist() == tt.sort(dim=1, stable=True)[1].tolist()
    distinct = np.array([[3, 9, 7, 1], [5, 0, 6, 2]], np.float32)
    assert Tensor(distinct).topk(2, dim=1)[1].tolist() == torch.tensor(distinct).topk(2, dim=1)[1].tolist()


def test_an_int_arange_is_lazy_at_any_length() -> None:
    # one of more than 2**31 int32 values was built on the host as a 16 GiB int64 numpy array (topk over such an axis
    # was OOM-killed); it wraps past int32 as torch's
    a = Tensor.arange(2**31 + 5, dtype=dtypes.int32)
    assert a.dtype == dtypes.int32 and a.shape == (2**31 + 5,)
    assert not any(u.op is Ops.BUFFER for u in a.uop.toposort())
    # (read through an index tensor, which loads just those: a slice or an int index computes it whole first)
    want = torch.tensor([2**31 - 1, 2**31 + 2, 2**31 + 4]).int().tolist()
    assert a[Tensor([2**31 - 1, -3, -1])].tolist() == want
    small = [((-100, 100), "int8"), ((0, 300), "uint8"), ((10, 0, -3), "uint64"), ((2**31 - 3, 2**31 + 2), "int32")]
    for args, dt in small:
        b = Tensor.arange(*args, dtype=to_dtype(dt))
        assert not any(u.op is Ops.BUFFER for u in b.uop.toposort()), (args, dt)
        assert b.tolist() == torch.arange(*args).to(getattr(torch, dt)).tolist(), (args, dt)


def test_a_float_arange_of_integers_is_lazy_and_exact() -> None:
    # (it was a float64 numpy array built on the host and copied over) values on an integer grid the dtype holds
    # exactly are an integer arange cast on the device: numpy's and torch's values
    cases = [((5,), "float32"), ((10, 0, -3), "float16"), ((2**24 - 8, 2**24), "float32"), ((-4.0, 4.0), "float64")]
    for args, dt in cases + [((2, 9, 2.0), "bfloat16")]:
        got = Tensor.arange(*args, dtype=to_dtype(dt))
        assert not any(u.op is Ops.BUFFER for u in got.uop.toposort()), (args, dt)
        assert got.tolist() == torch.arange(*args, dtype=torch.float64).to(getattr(torch, dt)).tolist(), (args, dt)
    # a fractional step stays numpy's start + i * step, rounded once
    assert Tensor.arange(0, 1, 0.1).tolist() == np.arange(0, 1, 0.1).astype(np.float32).tolist()


def _half(x: np.ndarray, dt: str) -> tuple[Tensor, torch.Tensor]:
    # one array as a half-float tensor of both libraries (rounded by torch, the same bits in ours)
    t = torch.tensor(x).to(getattr(torch, dt))
    return Tensor(t.float().numpy()).cast(to_dtype(dt)), t


def _bits_equal(ours: Tensor, theirs: torch.Tensor) -> int:
    # how many elements differ, bit for bit (as float32: both half floats widen exactly)
    assert ours.shape == tuple(theirs.shape)
    return int((ours.float().numpy() != theirs.float().numpy()).sum())


def test_bfloat16_linear_and_addmm_add_the_bias_before_the_one_rounding_as_pytorchs() -> None:
    # torch's CPU sums in float32, adds the bias (scaled by beta, the product by alpha) there and rounds once; the
    # product rounded to bfloat16 first, then the sum, differed in ~1/4 of the elements
    import uopkit.nn.functional as F

    rng = np.random.default_rng(0)
    (x, tx), (w, tw), (b, tb) = (
        _half(a, "bfloat16")
        for a in (3 * rng.standard_normal((32, 64)), rng.standard_normal((128, 64)) / 8, rng.standard_normal(128))
    )
    assert _bits_equal(F.linear(x, w, b), torch.nn.functional.linear(tx, tw, tb)) == 0
    assert _bits_equal(x.linear(w.T, b), torch.nn.functional.linear(tx, tw, tb)) == 0
    x3, tx3 = _half(3 * rng.standard_normal((2, 5, 64)), "bfloat16")
    assert _bits_equal(F.linear(x3, w, b), torch.nn.functional.linear(tx3, tw, tb)) == 0
    assert _bits_equal(F.linear(x[0], w, b), torch.nn.functional.linear(tx[0], tw, tb)) == 0
    for beta, alpha in [(1, 1), (0.5, 1), (1, 0.3), (0.7, 2.5), (0, 1.5)]:
        ours = b.addmm(x, w.T, beta=beta, alpha=alpha)
        assert _bits_equal(ours, torch.addmm(tb, tx, tw.T, beta=beta, alpha=alpha)) == 0, (beta, alpha)
    assert _bits_equal(b.addmv(w, x[0], beta=0.7, alpha=1.3), torch.addmv(tb, tw, tx[0], beta=0.7, alpha=1.3)) == 0
    shapes = ((4, 32, 64), (4, 64, 16), (4, 32, 16))
    (b1, tb1), (b2, tb2), (c, tc) = (_half(3 * rng.standard_normal(s), "bfloat16") for s in shapes)
    assert _bits_equal(c.baddbmm(b1, b2, beta=0.7, alpha=1.3), torch.baddbmm(tc, tb1, tb2, beta=0.7, alpha=1.3)) == 0


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_half_convolution_adds_the_bias_before_the_one_rounding_as_pytorchs(dt: str) -> None:
    # a U-Net's convolutions under CPU autocast: torch's CPU convolution sums in float32, adds the bias there and
    # rounds once; the sums rounded to the half dtype first, then the bias added, differed in ~1/3 of the outputs
    import uopkit.nn.functional as F

    rng = np.random.default_rng(0)
    tF = torch.nn.functional
    (x, tx), (w, tw), (b, tb) = (
        _half(a, dt)
        for a in (rng.standard_normal((8, 4, 9, 9)), rng.standard_normal((8, 4, 3, 3)) / 3, rng.standard_normal(8))
    )
    # (torch's own sums are not always the exactly rounded ones: allow a handful of its 5184 outputs)
    assert _bits_equal(F.conv2d(x, w, b, padding=1), tF.conv2d(tx, tw, tb, padding=1)) <= 4
    assert _bits_equal(F.conv2d(x, w, b, stride=2), tF.conv2d(tx, tw, tb, stride=2)) <= 4
    (w2, tw2), (b2, tb2) = _half(rng.standard_normal((8, 2, 3, 3)) / 3, dt), _half(rng.standard_normal(8), dt)
    assert _bits_equal(F.conv2d(x, w2, b2, groups=2), tF.conv2d(tx, tw2, tb2, groups=2)) <= 4
    (x1, tx1), (w1, tw1) = _half(rng.standard_normal((8, 4, 30)), dt), _half(rng.standard_normal((8, 4, 3)) / 3, dt)
    assert _bits_equal(F.conv1d(x1, w1, b, padding=1), tF.conv1d(tx1, tw1, tb, padding=1)) <= 4
    if dt == "bfloat16":
        # a stride-1 transposed convolution is a convolution with the flipped kernel, the bias inside it (torch's
        # float16 one on the CPU rounds twice)
        (wt, twt), (bt, tbt) = _half(rng.standard_normal((4, 6, 3, 3)) / 3, dt), _half(rng.standard_normal(6), dt)
        assert _bits_equal(F.conv_transpose2d(x, wt, bt), tF.conv_transpose2d(tx, twt, tbt)) <= 4
    # a strided transposed convolution too (its phases summed in float32, the bias added there): rounded to the half
    # dtype first, then the bias added, 25-30% of the bfloat16 outputs were a unit in the last place off. (torch's
    # float16 one on the CPU rounds more than once: compared with its float32 sums and bias, rounded once)
    (wt, twt), (bt, tbt) = _half(rng.standard_normal((4, 6, 3, 3)) / 3, dt), _half(rng.standard_normal(6), dt)
    for kw in (dict(stride=2, padding=1, output_padding=1), dict(stride=3, dilation=3), dict(stride=2, groups=2)):
        w_, tw_, b_, tb_ = (wt[:, :3], twt[:, :3], bt, tbt) if "groups" in kw else (wt, twt, bt, tbt)
        want = tF.conv_transpose2d(tx, tw_, tb_, **kw)
        if dt == "float16":
            want = tF.conv_transpose2d(tx.float(), tw_.float(), tb_.float(), **kw).half()
        # (sums in another order: a few near-ties round the other way, out of 8664-46128 outputs)
        assert _bits_equal(F.conv_transpose2d(x, w_, b_, **kw), want) <= want.numel() // 2000, kw
    # the gradients, the bias's a sum of the output's, as torch's
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    t_leaves = [t.detach().requires_grad_() for t in (tx, tw, tb)]
    g, tg = _half(rng.standard_normal((8, 8, 9, 9)), dt)
    (F.conv2d(*leaves, padding=1).float() * g.float()).sum().backward()
    (tF.conv2d(*t_leaves, padding=1).float() * tg.float()).sum().backward()
    for ours, theirs in zip(leaves, t_leaves, strict=True):
        assert ours.grad.dtype == ours.dtype
        np.testing.assert_allclose(ours.grad.float().numpy(), theirs.grad.float().numpy(), rtol=2e-2, atol=2e-2)


def test_half_linear_with_a_bias_is_one_kernel_summing_in_float32() -> None:
    # the bias joins the float32 sum inside the matrix product's kernel: one kernel, rounded once at its end
    from uopkit.engine.realize import stats

    rng = np.random.default_rng(1)
    shapes = ((8, 16), (16, 4), (4,))
    x, w, b = (Tensor(rng.standard_normal(s).astype(np.float32)).cast(dtypes.bfloat16).realize() for s in shapes)
    before = stats["kernels_run"]
    out = x.linear(w, b).realize()
    assert stats["kernels_run"] - before == 1
    want = (x.float().numpy() @ w.float().numpy() + b.float().numpy()).astype(np.float32)
    np.testing.assert_array_equal(out.float().numpy(), torch.tensor(want).bfloat16().float().numpy())


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("scale_dt", ["float32", "float64", "int64", "other half"])
def test_half_times_or_over_a_0d_tensor_takes_it_unrounded_as_pytorchs_cpu(dt: str, scale_dt: str) -> None:
    # torch's mul and div kernels take a 0-d right operand as a number: x_bf16 * scale_f32 in float32, rounded once
    # (rounded to bfloat16 first, 45% of the products differed); on the left, and in other ops, it is rounded first
    rng = np.random.default_rng(2)
    x, tx = _half(rng.random(1000) * 4 + 0.1, dt)
    if scale_dt == "other half":
        ts = torch.tensor(1.37).to(torch.float16 if dt == "bfloat16" else torch.bfloat16)
        s = Tensor(ts.float().numpy()).cast(to_dtype(str(ts.dtype).split(".")[1]))
    else:
        ts = torch.tensor(257 if scale_dt == "int64" else 0.3, dtype=getattr(torch, scale_dt))
        s = Tensor(ts.numpy())
    cases = [
        (x * s, tx * ts), (x / s, tx / ts), (x // s, tx // ts), (s * x, ts * tx), (s / x, ts / tx),
        (x + s, tx + ts), (x - s, tx - ts), (x ** s, tx ** ts), (x < s, tx < ts), (x == s, tx == ts),
        (x.maximum(s), torch.maximum(tx, ts)), (x.div(s, rounding_mode="trunc"), tx.div(ts, rounding_mode="trunc")),
    ]  # fmt: skip
    for i, (ours, theirs) in enumerate(cases):
        assert ours.dtype == (dtypes.bool if theirs.dtype == torch.bool else to_dtype(dt)), i
        assert _bits_equal(ours, theirs) == 0, i
    ours, theirs = x.contiguous().realize(), tx.clone()
    ours *= s
    theirs *= ts
    ours.div_(s)
    theirs.div_(ts)
    assert _bits_equal(ours, theirs) == 0


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_lerp_is_pytorchs_fused_multiply_add(dt: str) -> None:
    # torch's CPU lerp is one fma from the nearer end; two roundings put ~1/4 of float32 results an ulp off, and a
    # bfloat16 Adam's moments (lerp_ with weight 1 - beta1) apart
    rng = np.random.default_rng(3)
    (a, ta), (b, tb) = _half(rng.standard_normal(4096) * 0.02, dt), _half(rng.standard_normal(4096) * 0.1, dt)
    for w in (0.15000000000000002, 0.1, 0.7, -0.3, 1.0):
        assert _bits_equal(a.lerp(b, w), torch.lerp(ta, tb, w)) == 0, w
    tw = torch.tensor(rng.random(4096) * 1.4 - 0.2).to(ta.dtype)
    w = Tensor(tw.float().numpy()).cast(to_dtype(dt))
    assert _bits_equal(a.lerp(b, w), torch.lerp(ta, tb, tw)) == 0


def test_float_arange_past_float32s_integers_is_computed_on_the_device_with_torchs_values() -> None:
    # integers past 2**24 round to float32 once, as torch's (its values are computed in float64, then rounded)
    t = Tensor.arange(2**24 - 8, 2**24 + 40, 3, dtype="float32")
    assert t.uop.base.op is not Ops.BUFFER, "an integer grid is an arange on the device, not a host array"
    ref = torch.arange(2**24 - 8, 2**24 + 40, 3, dtype=torch.float32)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_linspace_and_fractional_arange_are_built_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from uopkit.tensor import creation

    monkeypatch.setattr(creation, "_HOST_CHUNK", 1000)
    for start, stop, steps in [(0.0, 1.0, 3001), (-2.5, 7.25, 2501), (3.0, -1.0, 2999)]:
        # (torch's values bit for bit, across chunks and the halfway point)
        expected = torch.linspace(start, stop, steps).numpy()

        def whole(*args: object, **kwargs: object) -> None:
            raise AssertionError("no float64 array of every value")

        with monkeypatch.context() as m:
            m.setattr(np, "linspace", whole)
            got = Tensor.linspace(start, stop, steps).numpy()
        np.testing.assert_array_equal(got, expected)
    got = Tensor.arange(0.5, 3000.3, 0.7).numpy()
    np.testing.assert_array_equal(got, (0.5 + np.arange(len(got)) * 0.7).astype(np.float32))
    assert len(got) == len(torch.arange(0.5, 3000.3, 0.7))


@pytest.mark.parametrize(
    "call",
    [
        lambda t, lo, hi: t.clamp(min=lo, max=1.0),
        lambda t, lo, hi: t.clamp(min=-1.0, max=hi),
        lambda t, lo, hi: t.clamp(lo, 1.0),
        lambda t, lo, hi: t.clip(-1.0, hi),
        lambda t, lo, hi: t.clamp_(min=lo, max=1.0),
        lambda t, lo, hi: type(t).clamp(t, lo, 1.0),
    ],
)
def test_clamp_bounds_are_both_numbers_or_both_tensors_as_torch(call):
    # torch has clamp(Number min, Number max) and clamp(Tensor min, Tensor max), no mix of the two: a TypeError
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    lo, hi = np.full(3, -1.0, np.float32), np.full(3, 1.0, np.float32)
    with pytest.raises(TypeError):
        call(torch.tensor(x), torch.tensor(lo), torch.tensor(hi))
    with pytest.raises(TypeError, match="the bounds must be both numbers or both tensors"):
        call(Tensor(x), Tensor(lo), Tensor(hi))
    # one kind, or one bound alone, as torch's
    _compare(lambda t: t.clamp(-1.0, 1.0), x)
    got = Tensor(x).clamp(Tensor(lo), Tensor(hi)).numpy()
    np.testing.assert_array_equal(got, torch.tensor(x).clamp(torch.tensor(lo), torch.tensor(hi)).numpy())
    got = Tensor(x).clamp(min=Tensor(lo)).numpy()
    np.testing.assert_array_equal(got, torch.tensor(x).clamp(min=torch.tensor(lo)).numpy())


def test_a_bool_is_no_reduction_dim_as_torch():
    # `x.sum(True)` (keepdim meant) summed axis 1 here; torch refuses a bool dim (TypeError)
    x = np.ones((2, 3), np.float32)
    for name in ("sum", "mean", "amax", "prod", "any"):
        with pytest.raises(TypeError):
            getattr(torch.tensor(x), name)(True)
        with pytest.raises(TypeError, match=rf"{name}: dim must be an int or a sequence of ints, got a bool"):
            getattr(Tensor(x), name)(True)

"""In-place operators (`t += x`, `add_`, ...), 0-d tensors in type promotion and a few PyTorch rules checked against
PyTorch itself: int ** float, std's gradient at zero variance, float % past 2**24, 0-d tensors along axis 0, embedding's
negative indices, pooling padding, RMSNorm's default eps, cat's legacy empty tensors (docs/semantics.md)."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.engine.realize import stats
from uopkit.nn import RMSNorm
from uopkit.tensor.support import ShapeError

torch = pytest.importorskip("torch")


_TORCH_DTYPES = {
    getattr(dtypes, name): getattr(torch, name)
    for name in ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


# ---------------------------------------------------------------------------------------------------------------------
# in-place operators


def test_inplace_on_a_view_changes_the_base():
    x = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
    v = x[1:]
    v += 1
    assert x.tolist() == [1.0, 3.0, 4.0] and v.tolist() == [3.0, 4.0]
    r = x.reshape(3, 1)
    r *= 2
    assert x.tolist() == [2.0, 6.0, 8.0]


def test_inplace_keeps_the_object_so_aliases_see_it():
    x = Tensor([1.0, 2.0])
    y = x
    y += 1
    assert y is x and x.tolist() == [2.0, 3.0]
    lazy = Tensor([1.0, 2.0]) * 3
    alias = lazy
    lazy -= 1
    assert alias is lazy and alias.tolist() == [2.0, 5.0]


def test_inplace_on_an_index_writes_once():
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    before = stats["kernels_run"]
    x[1:3] += 10
    # one kernel: Python's set-back of the view the in-place op already wrote is skipped
    assert stats["kernels_run"] - before == 1
    assert x.tolist() == [1.0, 12.0, 13.0, 4.0]
    x[Tensor([0, 3])] *= 2
    x[:, None][2] -= 1
    assert x.tolist() == [2.0, 12.0, 12.0, 8.0]


_STRIDED_VIEWS = {
    "step slice": lambda b: b[::2, 1::2],
    "column step": lambda b: b[:, 1::2],
    "row step": lambda b: b[::2],
    "diagonal": lambda b: b.diagonal(),
    "transposed diagonal": lambda b: b.T.diagonal(-1),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "float32"])
@pytest.mark.parametrize("view", list(_STRIDED_VIEWS))
@pytest.mark.parametrize("op", ["add_", "fill_", "copy_", "masked_fill_"])
def test_inplace_on_a_strided_view_writes_the_base_in_every_dtype(dtype, view, op):
    # a write through a view no slice of the flat storage shows is placed by a view of an arange of positions: that
    # arange was given the tensor's dtype, so float16's positions were int bits read as halves (no write landed)
    a = (np.arange(20 * 20) % 7).reshape(20, 20).astype(np.float32)
    ours = Tensor(a).cast(getattr(dtypes, dtype)).contiguous().realize()
    theirs = torch.tensor(a).to(_TORCH_DTYPES[getattr(dtypes, dtype)])
    for base in (ours, theirs):
        v = _STRIDED_VIEWS[view](base)
        if op == "add_":
            v.add_(1)
        elif op == "fill_":
            v.fill_(-3)
        elif op == "copy_":
            v.copy_(v * 2 + 1)
        else:
            v.masked_fill_(v > 3, -1)
    np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy())
    np.testing.assert_array_equal(
        _STRIDED_VIEWS[view](ours).float().numpy(), _STRIDED_VIEWS[view](theirs).float().numpy()
    )


@pytest.mark.parametrize(("size", "step"), [(3, 1), (3, 2), (2, 3), (1, 3), (4, 2)])
def test_unfold_with_overlapping_or_gapped_windows_is_a_view(size, step):
    # unfold with step != size was a gather (a copy): writes into the windows never reached the source, and writes into
    # the source didn't show in the windows; torch's unfold is a view
    a = np.arange(2 * 9, dtype=np.float32).reshape(2, 9)
    ours, theirs = Tensor(a).contiguous().realize(), torch.tensor(a)
    ours_w, theirs_w = ours.unfold(1, size, step), theirs.unfold(1, size, step)
    for base in (ours, theirs):
        base.mul_(2)
    np.testing.assert_array_equal(ours_w.numpy(), _np(theirs_w))
    for w in (ours_w, theirs_w):
        w[:, -1] = -1.0
        w[0, 0].add_(100)
    np.testing.assert_array_equal(ours.numpy(), _np(theirs))
    np.testing.assert_array_equal(ours_w.numpy(), _np(theirs_w))
    # values and the gradient, through a transposed input too
    xt = torch.tensor(np.random.default_rng(0).standard_normal((9, 3)).astype(np.float32), requires_grad=True)
    x = Tensor(xt.detach().numpy(), requires_grad=True)
    w = np.random.default_rng(1).standard_normal(xt.T.unfold(1, size, step).shape).astype(np.float32)
    (xt.T.unfold(1, size, step) * torch.tensor(w)).sum().backward()
    out = x.T.unfold(1, size, step)
    (out * Tensor(w)).sum().backward()
    np.testing.assert_allclose(out.numpy(), _np(xt.T.unfold(1, size, step)))
    np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad), rtol=1e-6)


def test_lazy_readers_keep_the_old_value():
    x = Tensor([1.0, 2.0]).realize()
    doubled = x * 2
    x += 1
    assert doubled.tolist() == [2.0, 4.0] and x.tolist() == [2.0, 3.0]


def test_inplace_on_a_lazy_value_keeps_gradients():
    xt = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    out_t = xt * 2
    out_t += xt.relu()
    out_t *= xt
    out_t.sum().backward()
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    out = x * 2
    out += x.relu()
    out *= x
    out.sum().backward()
    np.testing.assert_allclose(out.numpy(), _np(out_t))
    np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad))


def test_manual_sgd_step_updates_the_weight():
    w = Tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w -= 0.1 * w.grad
    assert w.requires_grad and np.allclose(w.numpy(), [0.8, 1.6])
    w.grad = None
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [1.6, 3.2], rtol=1e-6)


@pytest.mark.parametrize(
    "op",
    ["iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor", "ilshift", "irshift"],
)
def test_inplace_operators_match_torch(op):
    ints = op in ("iand", "ior", "ixor", "ilshift", "irshift")
    a = np.array([5, -3, 7, 2], np.int32) if ints else np.array([1.5, -2.0, 3.25, 0.5], np.float32)
    b = np.array([3, 1, 2, 1], np.int32) if ints else np.array([0.5, 3.0, -1.5, 2.0], np.float32)
    if op == "ipow":
        a = np.abs(a)
    ours, theirs = Tensor(a), torch.tensor(a)
    getattr(ours, f"__{op}__")(Tensor(b))
    getattr(theirs, f"__{op}__")(torch.tensor(b))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert ours.numpy().dtype == theirs.numpy().dtype


def test_inplace_matmul_and_methods():
    m = np.arange(4, dtype=np.float32).reshape(2, 2)
    ours, theirs = Tensor(m), torch.tensor(m)
    ours_before, theirs_before = ours, theirs
    ours @= Tensor(m)
    theirs @= torch.tensor(m)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy())
    # (a new tensor, as torch's: the old one keeps its values, and the product may have another shape)
    assert ours is not ours_before and theirs is not theirs_before
    np.testing.assert_array_equal(ours_before.numpy(), theirs_before.numpy())
    ours @= Tensor(np.ones((2, 3), np.float32))
    assert ours.shape == (2, 3)
    t, tt = Tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    for name, args in [("add_", (Tensor([1.0, 1.0, 1.0]),)), ("mul_", (2,)), ("sub_", (1,)), ("div_", (4,))]:
        getattr(t, name)(*args)
        getattr(tt, name)(*(torch.tensor(a.numpy()) if isinstance(a, Tensor) else a for a in args))
    t.add_(Tensor([1.0, 2.0, 3.0]), alpha=2)
    tt.add_(torch.tensor([1.0, 2.0, 3.0]), alpha=2)
    t.clamp_(1.0, 2.5)
    tt.clamp_(1.0, 2.5)
    np.testing.assert_allclose(t.numpy(), tt.numpy())
    i = Tensor([1, 2, 3])
    assert i.fill_(2.7).tolist() == torch.tensor([1, 2, 3]).fill_(2.7).tolist()
    assert i.zero_().tolist() == [0, 0, 0]
    f = Tensor([0.0, 0.0])
    assert f.copy_(Tensor([1, 2])).tolist() == [1.0, 2.0] and f.dtype == dtypes.float32
    assert f.copy_(Tensor(5.0)).tolist() == [5.0, 5.0]


@pytest.mark.parametrize(
    "op",
    [
        lambda t, lib: t.add_(1.5),
        lambda t, lib: t.div_(2),
        lambda t, lib: t.mul_(lib.tensor(0.5) if lib is torch else Tensor(0.5)),
        lambda t, lib: t.clamp_(0.5, 2.5),
        lambda t, lib: t.sqrt_(),
        lambda t, lib: t.float_power_(2),
    ],
)
@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
def test_inplace_cast_refusal_is_torchs_runtime_error(op, dtype):
    # torch raises RuntimeError ("result type Float can't be cast to the desired output type Long"); ours was only a
    # TypeError, so `except RuntimeError` written for torch let it through
    with pytest.raises(RuntimeError) as theirs:
        op(torch.tensor([1, 2, 3]).to(getattr(torch, dtype)), torch)
    with pytest.raises(type(theirs.value)):
        op(Tensor([1, 2, 3]).cast(getattr(dtypes, dtype)), None)
    with pytest.raises(TypeError):
        op(Tensor([1, 2, 3]).cast(getattr(dtypes, dtype)), None)


def test_inplace_refuses_what_torch_refuses():
    with pytest.raises(TypeError, match=r"\+=.*float.*int"):
        x = Tensor([1, 2, 3])
        x += 1.5
    with pytest.raises(TypeError, match="bool"):
        m = Tensor([True, False])
        m += 1
    with pytest.raises(ShapeError, match=r"\(2, 2\).*\(2,\)"):
        x = Tensor([1.0, 2.0])
        x += Tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="expanded"):
        e = Tensor([1.0]).realize().expand(3)
        e += 1
    # an int result into a wider or narrower int dtype is cast, as torch (wraps)
    small = Tensor([100], dtype=dtypes.int8)
    small += Tensor([100], dtype=dtypes.int16)
    assert small.dtype == dtypes.int8 and small.tolist() == torch.tensor([100], dtype=torch.int8).add_(100).tolist()


# ---------------------------------------------------------------------------------------------------------------------
# 0-d tensors in promotion


@pytest.mark.parametrize(
    "dim_dtype, zero_dtype, zero_value",
    [
        ("float16", "float32", 0.5),
        ("bfloat16", "float32", 0.5),
        ("float16", "float64", 1 / 3),
        ("int8", "int32", 3),
        ("int8", "int64", 3),
        ("uint8", "int8", -1),
        ("int32", "float32", 1.5),
        ("int8", "float64", 1.5),
        ("bool", "int32", 3),
        ("bool", "float16", 0.5),
        ("int16", "float16", 1.5),
        ("float32", "int64", 2),
        ("int8", "bool", True),
    ],
)
def test_a_zero_dim_tensor_promotes_by_kind_as_torch(dim_dtype, zero_dtype, zero_value):
    td = {"bfloat16": torch.bfloat16}.get(dim_dtype) or getattr(torch, dim_dtype)
    tz = getattr(torch, zero_dtype)
    dim_t = torch.tensor([1, 2], dtype=td) if dim_dtype != "bool" else torch.tensor([True, False])
    zero_t = torch.tensor(zero_value, dtype=tz)
    dim_u = Tensor(dim_t.float().numpy(), dtype=dim_dtype) if dim_dtype != "bool" else Tensor([True, False])
    zero_u = Tensor(zero_value, dtype=zero_dtype)
    for ours, theirs in [(dim_u + zero_u, dim_t + zero_t), (zero_u * dim_u, zero_t * dim_t)]:
        assert _TORCH_DTYPES[ours.dtype] == theirs.dtype, (ours.dtype, theirs.dtype)
        np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=1e-3)
    where_u = Tensor([True, False]).where(dim_u, zero_u)
    assert where_u.dtype == (dim_u + zero_u).dtype


def test_python_numbers_still_promote_as_before():
    small = Tensor(np.array([1, 2], np.int8))
    assert (small + 1).dtype == dtypes.int8 and (small + 1000).dtype == dtypes.int64
    assert (Tensor([1, 2]) + 1.5).dtype == dtypes.float32
    # two 0-d tensors, or two with dimensions, promote by dtype
    assert (Tensor(1, dtype=dtypes.int8) + Tensor(1, dtype=dtypes.int32)).dtype == dtypes.int32
    assert (Tensor([1.0], dtype=dtypes.float16) + Tensor([1.0])).dtype == dtypes.float32


# ---------------------------------------------------------------------------------------------------------------------
# PyTorch's rules


def test_int_to_a_float_power_is_a_float():
    for exponent in (0.0, 1.0, 2.0, 3.0, -2.0, 10.0, 2.5):
        ours = Tensor([3, 1, 2]) ** exponent
        theirs = torch.tensor([3, 1, 2], dtype=torch.int32) ** exponent
        assert ours.dtype == dtypes.float32, exponent
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert (Tensor([100], dtype=dtypes.int8) ** 2.0).tolist() == [10000.0]


def test_int_power_wraps_into_the_dtype_as_torch():
    for base, exponent, dt in [(16, 15, "int32"), (3, 25, "int32"), (7, 5, "int8"), (-3, 21, "int32")]:
        ours = Tensor([base], dtype=dt) ** exponent
        theirs = torch.tensor([base], dtype=getattr(torch, dt)) ** exponent
        assert ours.tolist() == theirs.tolist(), (base, exponent, dt)


def test_std_of_a_constant_row_has_a_zero_gradient():
    rows = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]], np.float32)
    for kwargs in ({}, {"correction": 0}):
        x, xt = Tensor(rows, requires_grad=True), torch.tensor(rows, requires_grad=True)
        x.std(1, **kwargs).sum().backward()
        xt.std(1, **kwargs).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(x.std(1, **kwargs).numpy(), _np(xt.std(1, **kwargs)), rtol=1e-6)
    y = Tensor([2.0, 2.0, 2.0], requires_grad=True)
    y.std().backward()
    assert y.grad.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_remainder_past_2_to_the_24(dtype):
    a = np.array([2.0**40, -(2.0**40), 2.0**40, 3e9, 123456789.0, 2.0**30 + 5, 7.5, -0.0], dtype)
    b = np.array([3.0, 3.0, -3.0, 7.0, 0.1, 3.5, 2.0, 2.0], dtype)
    for ours, theirs in [
        (Tensor(a) % Tensor(b), torch.tensor(a) % torch.tensor(b)),
        (Tensor(a).fmod(Tensor(b)), torch.tensor(a).fmod(torch.tensor(b))),
        (Tensor(a) // Tensor(b), torch.tensor(a) // torch.tensor(b)),
    ]:
        got, want = ours.numpy(), theirs.numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # x // 0 and x // inf keep their quotients
    assert (Tensor([3.0, 5.0]) // Tensor([0.0, float("inf")])).tolist() == [float("inf"), 0.0]


def test_zero_dim_tensors_along_axis_zero():
    x, xt = Tensor(3.5), torch.tensor(3.5)
    assert x.transpose(0, -1).item() == 3.5
    assert x.gather(0, Tensor(0)).item() == xt.gather(0, torch.tensor(0)).item()
    assert x.logsumexp(0).item() == pytest.approx(xt.logsumexp(0).item())
    for name, args in [("split", (1,)), ("chunk", (1,)), ("narrow", (0, 0, 1)), ("unbind", (0,)), ("roll", (1, 0))]:
        with pytest.raises(ShapeError, match=f"{name}: needs a tensor with at least one dimension"):
            getattr(x, name)(*args)
    row = Tensor([1.0, 2.0])
    assert row[Tensor(True)].shape == tuple(torch.tensor([1.0, 2.0])[torch.tensor(True)].shape) == (1, 2)
    assert row[Tensor(False)].shape == (0, 2)


def test_embedding_refuses_negative_indices():
    weight = Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert Tensor([[1, 0]]).embedding(weight).tolist() == [[[3.0, 4.0], [1.0, 2.0]]]
    with pytest.raises(IndexError, match="embedding: index -1"):
        Tensor([0, -1]).embedding(weight)
    with pytest.raises(IndexError, match="embedding: index 2"):
        Tensor([2]).embedding(weight)


@pytest.mark.parametrize("fn", ["max_pool2d", "avg_pool2d"])
def test_pooling_padding_past_half_the_kernel_raises(fn):
    x = Tensor.ones(1, 1, 4, 4)
    assert getattr(x, fn)(2, 1, 1).shape == tuple(
        getattr(torch.nn.functional, fn)(torch.ones(1, 1, 4, 4), 2, 1, 1).shape
    )
    with pytest.raises(ValueError, match="more than half the kernel"):
        getattr(x, fn)(2, 2, 2)
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, fn)(torch.ones(1, 1, 4, 4), 2, 2, 2)
    if fn == "max_pool2d":
        # the rule is on the kernel size, not the dilated one (padding 2 of a 3-tap kernel with dilation 2 raises)
        x1 = Tensor.ones(1, 1, 8)
        with pytest.raises(ValueError, match="more than half the kernel"):
            x1.max_pool2d((3,), 1, 2, 2)
        with pytest.raises(RuntimeError):
            torch.nn.functional.max_pool1d(torch.ones(1, 1, 8), 3, 1, 2, 2)
        # with ceil_mode a window may start inside the input and reach past it, as torch's
        xs = np.random.default_rng(0).standard_normal((1, 1, 6)).astype(np.float32)
        for length, k, s, d in ((6, 4, 2, 2), (5, 4, 3, 2)):
            want = torch.nn.functional.max_pool1d(torch.tensor(xs[..., :length]), k, s, 0, d, ceil_mode=True)
            got = Tensor(xs[..., :length]).max_pool2d((k,), s, 0, d, ceil_mode=True)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        with pytest.raises(ValueError, match="larger than the padded input"):
            Tensor(xs).max_pool2d((4,), 2, 0, 2)


def test_rmsnorm_default_eps_is_the_dtypes_epsilon():
    x = (np.random.default_rng(0).standard_normal((3, 8)) * 1e-3).astype(np.float32)
    ours = RMSNorm(8)(Tensor(x)).numpy()
    theirs = _np(torch.nn.RMSNorm(8)(torch.tensor(x)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_cat_leaves_out_legacy_empty_tensors():
    out = Tensor([])
    for i in range(3):
        out = Tensor.cat([out, Tensor.full((1, 2), i, dtype=dtypes.int32)])
    expect = torch.tensor([])
    for i in range(3):
        expect = torch.cat([expect, torch.full((1, 2), i, dtype=torch.int32)])
    assert out.tolist() == expect.tolist() and out.dtype == dtypes.float32 and expect.dtype == torch.float32
    assert Tensor.cat(Tensor([]), Tensor([])).shape == (0,)
    with pytest.raises(ShapeError):
        Tensor.cat(Tensor.zeros(0, 1), Tensor.ones(2, 3))


@pytest.mark.parametrize("empty_shape, dim", [((0, 3), 0), ((2, 0), 1), ((0,), 0)])
def test_empty_inputs_of_cat_get_their_empty_gradient(empty_shape, dim):
    # as PyTorch: an empty tensor that wants a gradient and goes into a cat gets one (of its own, empty, shape)
    got = []
    for T in (torch, Tensor):
        empty, full = T.zeros(*empty_shape, requires_grad=True), T.ones(2, 3, requires_grad=True)
        out = T.cat([empty, full], dim) if T is torch else Tensor.cat([empty, full], dim)
        (out * T.arange(6.0).reshape(2, 3)).sum().backward()
        assert empty.grad is not None
        got.append((tuple(empty.grad.shape), full.grad.tolist(), out.tolist()))
    assert got[1] == got[0]
    # the value is the other tensors' exactly (-0.0 stays)
    x = Tensor([[-0.0, 1.0]])
    assert np.signbit(Tensor.cat([Tensor.zeros(0, 2, requires_grad=True), x]).numpy()[0, 0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_float_integer_powers_round_once_as_torch(dtype):
    # torch's pow of a half float is float32's rounded once (its bfloat16 kernel multiplies x * x * x and 1 / (x * x)
    # in bfloat16); repeated float16 multiplies left a fifth of x ** 3 an ulp off
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(4000) * np.exp(rng.uniform(-4, 4, 4000))).astype(np.float32)
    ours, ref = Tensor(x).cast(dtype), torch.from_numpy(x).to(getattr(torch, dtype))
    for n in (3, 4, 5, 8, 9, -2, -3, -6, 3.0):
        got, want = (ours**n).float().numpy(), (ref**n).float().numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{dtype} x ** {n}")
        assert (ours**n).dtype == getattr(dtypes, dtype)
    # the gradients stay torch's n x ** (n - 1), inf at 0 for a negative n
    values = np.array([0.0, -1.5, 2.0, 3.0, -0.25], np.float32)
    for n in (3, -2, -3):
        t = Tensor(values).cast(dtype).detach().requires_grad_()
        tt = torch.from_numpy(values).to(getattr(torch, dtype)).requires_grad_()
        (t**n).sum().backward()
        (tt**n).sum().backward()
        np.testing.assert_allclose(t.grad.float().numpy(), tt.grad.float().numpy(), rtol=2**-7)


def test_integer_powers_of_ints_stay_exact():
    x = np.array([3, -7, 11, 0, 1, -2], np.int32)
    for n in (3, 5, 8, 9, np.int64(3)):
        assert (Tensor(x) ** n).tolist() == (torch.from_numpy(x) ** int(n)).tolist()
    assert (Tensor(x) ** np.int64(3)).dtype == dtypes.int32


@pytest.mark.parametrize(
    "number", [np.float64(0.6931), np.float32(0.5), np.float16(0.5), np.int64(3), np.int8(3), np.uint8(3)]
)
def test_numpy_scalars_are_python_numbers_of_their_kind_as_torch(number):
    # torch takes a numpy scalar as the Python number of its kind: `torch.full((2,), np.log(2.0))` is float32
    kind = float if isinstance(number, np.floating) else int
    want = dtypes.default_float if kind is float else dtypes.default_int
    cond = Tensor([True, False])
    assert Tensor.full((2,), number).dtype == want
    assert Tensor([1, 2]).new_full((2,), number).dtype == dtypes.int32
    assert cond.where(number, 0.0).dtype == dtypes.default_float
    assert cond.where(number, number).dtype == want
    assert Tensor.arange(number).dtype == want
    assert Tensor([1.0, 2.0], dtype="half").lerp(Tensor([3.0, 4.0], dtype="half"), number).dtype == dtypes.half
    assert (Tensor([1, 2]) ** number).dtype == (dtypes.default_float if kind is float else dtypes.int32)
    assert Tensor.full((2,), number).tolist() == torch.full((2,), number).tolist()


@pytest.mark.parametrize("exponent", [0.5, -0.5])
def test_half_powers_are_square_roots_as_torch(exponent):
    values = [0.0, -0.0, 4.0, -4.0, float("inf"), float("-inf"), float("nan"), 2.0]
    got, want = (Tensor(values) ** exponent).numpy(), (torch.tensor(values) ** exponent).numpy()
    np.testing.assert_array_equal(got, want)
    # (a NaN's sign means nothing)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    x, xt = Tensor([0.0, 4.0, 2.0], requires_grad=True), torch.tensor([0.0, 4.0, 2.0], requires_grad=True)
    (x**exponent).sum().backward()
    (xt**exponent).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad), rtol=1e-6)
    assert (Tensor([4]) ** exponent).dtype == dtypes.float32


def test_abs_gradient_is_sign_times_the_incoming_one():
    values = [0.0, float("nan"), -2.0, 3.0, float("inf")]
    for fn in (lambda t: t.abs(), lambda t: t.abs().sqrt(), lambda t: t.abs().log()):
        x, xt = Tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
        fn(x).sum().backward()
        fn(xt).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad), rtol=1e-6)


def test_an_axis_or_output_letter_given_twice_raises():
    from uopkit.tensor.support import ArgumentError

    with pytest.raises(ArgumentError, match="flip: an axis appears more than once"):
        Tensor.ones(2, 3).flip(1, -1)
    with pytest.raises(ArgumentError, match="einsum: an output letter appears more than once"):
        Tensor.einsum("ij->jj", Tensor.ones(2, 2))


def test_only_float_tensors_can_require_gradients():
    for make in (
        lambda: Tensor([1, 2], requires_grad=True),
        lambda: Tensor([1, 2]).requires_grad_(),
        lambda: Tensor.ones(2, dtype=dtypes.int32, requires_grad=True),
        lambda: Tensor([True], requires_grad=True),
    ):
        with pytest.raises(RuntimeError, match="only float tensors can require gradients"):
            make()
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2], requires_grad=True)
    assert Tensor([1.0], requires_grad=True).requires_grad and Tensor([1], dtype=dtypes.float16).requires_grad_()


@pytest.mark.parametrize("case", ["whole_mul", "whole_add_const", "view_mul_weight", "transposed_view"])
def test_inplace_on_a_realized_value_keeps_its_gradient_history(case):
    # a realized intermediate is followed back to its graph by backward(); an in-place op into it (or through a view
    # of it) must be part of that graph, as PyTorch's autograd records it
    def run(lib, make):
        x = make([[1.0, 2.0], [3.0, 4.0]])
        w = make([[3.0, 4.0], [5.0, 6.0]], requires_grad=True)
        h = x * w
        if lib == "ours":
            h.realize()
        if case == "whole_mul":
            h *= 2
        elif case == "whole_add_const":
            h += 1
        elif case == "view_mul_weight":
            v = h[1:]
            v *= w[1:]
        else:
            v = h.T
            v -= w
        (h * h).sum().backward()
        return np.asarray(h.detach().numpy() if lib == "torch" else h.numpy()), w.grad.numpy()

    ours = run("ours", Tensor)
    theirs = run("torch", torch.tensor)
    np.testing.assert_allclose(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1])


@pytest.mark.parametrize("layer", ["product_of_sum", "layernorm", "conv2d", "rmsnorm"])
def test_bfloat16_gradients_survive_reading_the_output_first(layer):
    # reading a bfloat16 output through a new tensor (`y.float().numpy()`, as logging does) realized part of its
    # graph; backward() then lost every gradient through it (a bfloat16 value is read as its uint16 bits, and those
    # weren't followed back to the graph that computed them)
    from uopkit.nn import Conv2d, LayerNorm

    rng = np.random.default_rng(4)

    def grads(read_first: bool) -> list[np.ndarray]:
        x = Tensor(rng.standard_normal((2, 3, 4, 4)).astype(np.float32)).cast(dtypes.bfloat16).contiguous().realize()
        x.requires_grad = True
        params = [x]
        if layer == "product_of_sum":
            y = x * x.sum(1, keepdim=True)
        elif layer == "layernorm":
            ln = LayerNorm(4)
            # (detached: a value computed from a weight that requires grad is no leaf, as torch's)
            ln.weight = ln.weight.detach().cast(dtypes.bfloat16).contiguous().realize().requires_grad_()
            params.append(ln.weight)
            y = ln(x)
        elif layer == "conv2d":
            conv = Conv2d(3, 2, 3, padding=1)
            weight, bias = rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(2)
            # (a parameter is replaced by a tensor that requires grad, as torch's nn.Module asks)
            conv.weight = (
                Tensor(weight.astype(np.float32)).cast(dtypes.bfloat16).contiguous().realize().requires_grad_()
            )
            conv.bias = Tensor(bias.astype(np.float32)).cast(dtypes.bfloat16).contiguous().realize().requires_grad_()
            params += [conv.weight, conv.bias]
            y = conv(x)
        else:
            y = RMSNorm(4)(x)
        if read_first:
            y.float().numpy()
        (y.float() * Tensor.arange(y.numel()).reshape(y.shape).float()).sum().backward()
        return [p.grad.float().numpy() for p in params]

    rng = np.random.default_rng(4)
    plain = grads(False)
    rng = np.random.default_rng(4)
    read = grads(True)
    for a, b in zip(plain, read, strict=True):
        np.testing.assert_array_equal(a, b)


def test_optimizers_take_iterables_and_a_number_for_lr():
    from uopkit.nn.optim import SGD, clip_grad_norm_

    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = SGD((p for p in [w]), lr=0.1)
    assert opt.params == [w]
    opt.lr = 0.5
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == [0.0, 0.0] and opt.lr.item() == 0.5
    with pytest.raises(ValueError, match="learning rate"):
        opt.lr = -1.0
    # clip_grad_norm_ of a generator or of one tensor clips (it read the generator twice, and a tensor as a list)
    a, b = Tensor([3.0, 4.0], requires_grad=True), Tensor([1.0, 0.0], requires_grad=True)
    at, bt = torch.tensor([3.0, 4.0], requires_grad=True), torch.tensor([1.0, 0.0], requires_grad=True)
    ((a * a).sum() + (b * b).sum()).backward()
    ((at * at).sum() + (bt * bt).sum()).backward()
    ours = clip_grad_norm_((p for p in [a, b]), 1.0)
    theirs = torch.nn.utils.clip_grad_norm_((p for p in [at, bt]), 1.0)
    assert ours.item() == pytest.approx(theirs.item())
    np.testing.assert_allclose(a.grad.numpy(), _np(at.grad), rtol=1e-6)
    c = Tensor([3.0, 4.0], requires_grad=True)
    (c * c).sum().backward()
    assert clip_grad_norm_(c, 1.0).item() == pytest.approx(10.0)
    np.testing.assert_allclose(c.grad.numpy(), [0.6, 0.8], rtol=1e-5)


@pytest.mark.parametrize("dtype", ["bool", "float32", "float16", "bfloat16", "float64"])
def test_randint_draws_bools_and_floats_as_torch(dtype):
    # torch.randint(0, 2, size, dtype=torch.bool) is a random mask: it raised a TypeError here
    torch = pytest.importorskip("torch")
    high = 2 if dtype == "bool" else 7
    want = torch.randint(0, high, (4,), dtype=getattr(torch, dtype))
    got = Tensor.randint(0, high, (4000,), dtype=getattr(dtypes, dtype))
    assert got.dtype == getattr(dtypes, dtype) and got.shape == (4000,)
    assert sorted(set(got.float().tolist())) == sorted(set(range(high))) and want.dtype == getattr(torch, dtype)
    # bounds the dtype can't hold are refused, as torch's
    for low, high in ((0, 3), (-1, 2)) if dtype == "bool" else ((0, 2**20),) if dtype == "float16" else ():
        with pytest.raises(RuntimeError):
            torch.randint(low, high, (4,), dtype=getattr(torch, dtype))
        with pytest.raises(RuntimeError, match="doesn't fit"):
            Tensor.randint(low, high, (4,), dtype=getattr(dtypes, dtype))


def test_random_and_range_constructors_refuse_what_torch_refuses():
    for dtype in (dtypes.float16, dtypes.bfloat16):
        draws = Tensor.rand(100_000, dtype=dtype).float().numpy()
        assert draws.max() < 1.0 and draws.min() >= 0.0 and abs(draws.mean() - 0.5) < 0.01
    with pytest.raises(TypeError, match="rand: dtype must be a float dtype"):
        Tensor.rand(4, dtype=dtypes.int32)
    with pytest.raises(ValueError, match="doesn't fit"):
        Tensor.randint(0, 300, (4,), dtype=dtypes.uint8)
    assert Tensor.randint(0, 2**40, (3,), dtype=dtypes.int64).numpy().max() < 2**40
    with pytest.raises(ShapeError, match="new leading dimension"):
        Tensor.ones(2, 3).expand(-1, 2, 3)
    assert Tensor.ones(2, 3).expand(4, -1, -1).shape == (4, 2, 3)


def test_load_state_dict_key_errors_are_runtime_errors_as_torch():
    from uopkit.nn import Linear
    from uopkit.nn.state import load_state_dict

    with pytest.raises(RuntimeError, match="missing keys"):
        load_state_dict(Linear(2, 2), {"weight": Tensor.ones(2, 2)})
    with pytest.raises(KeyError):
        load_state_dict(Linear(2, 2), {"weight": Tensor.ones(2, 2)})


def test_loss_and_layer_arguments_torch_refuses():
    p, y = Tensor([0.2, 0.7, 0.9]), Tensor([[0.0], [1.0], [1.0]])
    with pytest.raises(ValueError, match="target's shape"):
        p.binary_cross_entropy(y)
    with pytest.raises(ValueError, match="target's shape"):
        p.binary_cross_entropy_with_logits(y)
    with pytest.raises(ValueError):
        torch.nn.functional.binary_cross_entropy(torch.tensor([0.2, 0.7, 0.9]), torch.tensor([[0.0], [1.0], [1.0]]))
    logits, probs = Tensor([[1.0, 2.0], [0.5, 0.1]]), Tensor([[0.3, 0.7], [1.0, 0.0]])
    with pytest.raises(ValueError, match="ignore_index"):
        logits.cross_entropy(probs, ignore_index=0)
    x, w = Tensor.ones(1, 2, 3, 3), Tensor.ones(2, 2, 3, 3)
    assert x.conv_transpose2d(w, None, 2, 0, 1).shape == (1, 2, 8, 8)
    with pytest.raises(ValueError, match="output_padding 2 must be smaller"):
        x.conv_transpose2d(w, None, 2, 0, 2)


def test_conv_layers_take_unbatched_input_as_torch():
    from uopkit.nn import Conv1d, Conv2d, ConvTranspose2d

    rng = np.random.default_rng(9)
    for ours, theirs, shape in [
        (Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 4, 3, padding=1), (3, 5, 5)),
        (Conv1d(3, 4, 3), torch.nn.Conv1d(3, 4, 3), (3, 7)),
        (ConvTranspose2d(3, 4, 3, stride=2), torch.nn.ConvTranspose2d(3, 4, 3, stride=2), (3, 5, 5)),
    ]:
        theirs.weight.data, theirs.bias.data = torch.tensor(ours.weight.numpy()), torch.tensor(ours.bias.numpy())
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), _np(theirs(torch.tensor(x))), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="expected input"):
        Conv2d(3, 4, 3)(Tensor.ones(2, 5, 5))


def test_integer_avg_pool_truncates_as_torch_int64():
    F = torch.nn.functional
    x = np.random.default_rng(0).integers(-50, 50, (2, 2, 7, 6))
    for kw in (
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=2, divisor_override=3),
        dict(kernel_size=3, stride=2, ceil_mode=True),
    ):
        ours, theirs = Tensor(x).avg_pool2d(**kw), F.avg_pool2d(torch.tensor(x), **kw)
        assert ours.dtype == dtypes.int64 and ours.tolist() == theirs.tolist(), kw
    # other integers keep their dtype (PyTorch refuses them); adaptive pooling of integers still averages to floats
    assert Tensor(x.astype(np.int8)).avg_pool2d(2).dtype == dtypes.int8
    assert Tensor(x).adaptive_avg_pool2d((1, 3)).dtype == dtypes.float32


def test_bool_square_is_a_number_and_lists_hold_one_element_tensors():
    assert Tensor([True, False]).square().tolist() == [1, 0]
    assert dtypes.is_int(Tensor([True, False]).square().dtype)
    # torch.tensor([t, 2.0]): a one-element tensor (or numpy scalar, or array) in a list is its number(s)
    assert Tensor([Tensor(1.5), 2.0]).tolist() == torch.tensor([torch.tensor(1.5), 2.0]).tolist()
    assert Tensor([[Tensor([3])], [4]]).tolist() == [[3], [4]]
    assert Tensor([np.float32(1.5), np.array([2, 3])[0]]).tolist() == [1.5, 2.0]
    assert Tensor([np.array([1, 2]), np.array([3, 4])]).shape == (2, 2)
    with pytest.raises(ValueError, match="only one-element tensors can be numbers in a list"):
        Tensor([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])])


def test_torch_forms_found_by_tinygrads_op_tests():
    F = torch.nn.functional
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    # negative padding: reflect and replicate pad the whole axis, then crop; circular crops first (as torch)
    for mode, pads in (
        ("reflect", (-1, 2, 2, -1)),
        ("reflect", (3, -3, 0, -3)),
        ("replicate", (3, -5, 1, -4)),
        ("circular", (-2, 3, -1, 1)),
        ("constant", (3, -5, 1, -4)),
    ):
        np.testing.assert_array_equal(
            Tensor(x).pad(pads, mode=mode).numpy(), F.pad(torch.tensor(x), pads, mode=mode).numpy()
        )
    # a tuple inside an index is a sequence of indices, as a list
    y = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)
    for index in (((1, 0, -1),), (((0,),),), (slice(None), (1, 1))):
        np.testing.assert_array_equal(Tensor(y)[index].numpy(), torch.tensor(y)[index].numpy())
    # an empty target's gradient is empty zeros, though cat drops it
    a, b = Tensor.zeros(4, 0, 3, requires_grad=True), Tensor.ones(4, 1, 3, requires_grad=True)
    ga, gb = a.cat(b, dim=1).sum().gradient(a, b)
    assert ga.shape == (4, 0, 3) and gb.tolist() == np.ones((4, 1, 3)).tolist()
    # a 0-d tensor's running ops take axis 0 and -1 only
    for name in ("cumsum", "cumprod", "cummax", "logcumsumexp"):
        with pytest.raises(IndexError):
            getattr(Tensor(1.0), name)(1)
    # constructors' shapes: ints or one sequence of them, none negative
    with pytest.raises(TypeError, match="a shape is ints or one sequence of ints"):
        Tensor.kaiming_uniform((-3, 3), 3)
    with pytest.raises(RuntimeError, match="negative dimension in shape"):
        Tensor.rand(-1, 2)
    # torch.stack's form: after the sequence, only the dim
    with pytest.raises(TypeError, match="after a sequence of tensors comes the dim"):
        Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
    # bad argument values are RuntimeErrors too, as torch's; bitwise ops of floats as well
    for bad in (
        lambda: Tensor([1.0]).div(Tensor([2.0]), rounding_mode="typo"),
        lambda: Tensor([1.0]).pad((1, 1), mode="typo"),
        lambda: Tensor.meshgrid(Tensor([1]), Tensor([2]), indexing="bad"),
        lambda: Tensor.ones(4).bitwise_and(Tensor.ones(4)),
        lambda: Tensor.ones(4).bitwise_not(),
        lambda: Tensor.linspace(5, 10, 3, dtype="bool"),
    ):
        with pytest.raises(RuntimeError):
            bad()


def test_repeat_interleave_takes_a_tensor_of_repeats_as_torch():
    x = np.arange(6).reshape(2, 3)
    for repeats, dim in (([1, 0, 2], 1), ([2, 1], 0), ([2], None), ([0, 0, 0, 1, 2, 0], None)):
        ours = Tensor(x).repeat_interleave(Tensor(repeats), dim)
        assert ours.tolist() == torch.tensor(x).repeat_interleave(torch.tensor(repeats), dim).tolist()
    w = Tensor(np.ones((4, 3), np.float32), requires_grad=True)
    w.repeat_interleave(Tensor([1, 0, 2, 3]), 0).sum().backward()
    assert w.grad.numpy()[:, 0].tolist() == [1.0, 0.0, 2.0, 3.0]
    with pytest.raises(ShapeError, match="3 repeats for axis 0 of size 2"):
        Tensor(x).repeat_interleave(Tensor([1, 2, 3]), 0)
    with pytest.raises(ValueError, match="must be non-negative"):
        Tensor(x).repeat_interleave(Tensor([1, -1]), 0)
    # torch's output_size=: the length the repeats give, checked
    for repeats, dim, size in ((Tensor([1, 0, 2]), 1, 3), (2, 0, 4), (3, None, 18), (Tensor([2]), None, 12)):
        trepeats = torch.tensor(repeats.tolist()) if isinstance(repeats, Tensor) else repeats
        want = torch.tensor(x).repeat_interleave(trepeats, dim, output_size=size)
        assert Tensor(x).repeat_interleave(repeats, dim, output_size=size).tolist() == want.tolist()
        with pytest.raises(RuntimeError):
            torch.tensor(x).repeat_interleave(trepeats, dim, output_size=size + 1)
        with pytest.raises(
            ValueError, match=f"repeat_interleave: output_size is {size + 1}, but the repeats give {size}"
        ):
            Tensor(x).repeat_interleave(repeats, dim, output_size=size + 1)


def test_reductions_and_shapes_found_by_the_second_sweep():
    # half-float norms in float32, as torch (the squares of 300 and 400 overflow float16)
    for dt, tdt in ((dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)):
        ours, theirs = Tensor([300.0, 400.0]).cast(dt), torch.tensor([300.0, 400.0]).to(tdt)
        assert ours.norm().float().item() == theirs.norm().float().item() == 500.0
        assert ours.norm(3).float().item() == theirs.norm(3).float().item()
    # var(False): torch's unbiased; cumsum/cumprod's dtype=
    x, t = Tensor([[1.0, 2.0, 4.0], [0.0, 3.0, 9.0]]), torch.tensor([[1.0, 2.0, 4.0], [0.0, 3.0, 9.0]])
    assert x.var(False).item() == pytest.approx(t.var(False).item())
    assert x.std_mean(True)[0].item() == pytest.approx(t.std(True).item())
    assert Tensor([1, 2, 3]).cumsum(0, dtype=dtypes.float32).tolist() == [1.0, 3.0, 6.0]
    assert Tensor([1, 2, 3]).cumprod(dim=0, dtype="float64").dtype == dtypes.float64
    # ... of a small int dtype: results of that dtype, wrapped around as torch's
    small = np.array([[200, 100, 3, 120], [-7, 90, -128, 5]], np.int16)
    for dt, tdt in ((dtypes.uint8, torch.uint8), (dtypes.int8, torch.int8), (dtypes.int16, torch.int16)):
        for op in ("cumsum", "cumprod"):
            ours, theirs = getattr(Tensor(small), op)(1, dtype=dt), getattr(torch.tensor(small), op)(1, dtype=tdt)
            assert ours.dtype == dt and ours.tolist() == theirs.tolist(), (op, dt)
    # chunks of an empty axis: `chunks` empty pieces
    assert [c.shape for c in Tensor.zeros(2, 0).chunk(2, 1)] == [tuple(c.shape) for c in torch.zeros(2, 0).chunk(2, 1)]
    # einsum of one operand summed is a sum (small ints and bools counted in int32, not wrapped)
    assert Tensor.einsum("ij->", Tensor(np.full((2, 3), 200, np.uint8))).item() == 1200
    assert Tensor.einsum("ii", Tensor.eye(3, dtype=dtypes.bool)).item() == 3
    # reshape's None keeps a dimension (tinygrad's); clear errors for bad sizes
    assert Tensor.ones(4, 3, 6).reshape((None, -1)).shape == (4, 18)
    with pytest.raises(TypeError, match="a shape is ints"):
        Tensor.ones(4, 3).reshape(4.0, 3)
    with pytest.raises(ShapeError, match="sizes must be >= 0"):
        Tensor.ones(2, 1).expand(2, -2)
    with pytest.raises(ShapeError, match="-1 is ambiguous"):
        Tensor.zeros(2, 0).unflatten(1, (0, -1))
    with pytest.raises(NotImplementedError, match="unknown mode 'typo'"):
        Tensor.ones(3).pad((1, 1), mode="typo")
    with pytest.raises(RuntimeError, match="names an axis twice"):
        Tensor.zeros(1, 3).squeeze((0, -2))


def test_in_place_on_a_deep_copy_after_its_source_was_read_and_written() -> None:
    # an EMA copy (copy.deepcopy of a model) updated in place after the model's weight was read by a forward pass and
    # stepped in place: the copy's write raised IndexError (it followed a history of storage it no longer views)
    import copy

    w = Tensor([1.0, 2.0], requires_grad=True)
    e = copy.deepcopy(w)
    y = w * 2
    w.sub_(0.1)
    e.mul_(0.9)
    np.testing.assert_allclose(e.numpy(), [0.9, 1.8], rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), [0.9, 1.9], rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0], rtol=1e-6)


@pytest.mark.parametrize("op", ["div", "atan2", "copysign", "xlogy"])
def test_ints_of_other_signedness_become_floats_each_from_its_own_dtype(op: str) -> None:
    # a 0-d int tensor of the other signedness was wrapped into the n-d tensor's dtype before the op made them floats
    # (uint8 [1, 2, 200] / int8 -3 gave [0.004, 0.008, 0.79]); torch converts each operand from its own dtype
    u8, i8 = np.array([1, 2, 200], dtype=np.uint8), np.array([1, 2, -5], dtype=np.int8)
    for a, b in ((u8, np.array(-3, dtype=np.int8)), (i8, np.array(200, dtype=np.uint8)), (i8, u8)):
        for x, y in ((a, b), (b, a)):
            got = getattr(Tensor(x), op)(Tensor(y))
            want = getattr(torch.from_numpy(x), op)(torch.from_numpy(y))
            assert got.dtype == dtypes.float32
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["logaddexp", "logaddexp2"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_logaddexp_is_rounded_once(op: str, dt: str) -> None:
    # computed op by op in the half type it was up to 6 ulp off in float16 and 12 in bfloat16; torch computes in
    # float32 and rounds once
    a = np.array([-2.5, -1.0, 0.0010004043579101562, 3.0, -7.25], np.float32)
    b = np.array([-0.0999755859375, -0.5, -2.5, 3.0, 1.5], np.float32)
    ours = getattr(Tensor(a).cast(getattr(dtypes, dt)), op)(Tensor(b).cast(getattr(dtypes, dt)))
    theirs = getattr(torch.tensor(a).to(getattr(torch, dt)), op)(torch.tensor(b).to(getattr(torch, dt)))
    np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy())


def test_cat_stack_and_padding_modes_keep_negative_zeros_as_torch():
    # each piece of a cat is padded to the whole and the pieces added: padded with +0.0, a -0.0 became +0.0
    # (atan2(pad(-0.0), -1) was pi, torch's -pi)
    x = np.array([[[-0.0, -0.0, 1.0, -0.0]]], np.float32)
    for mode in ("reflect", "replicate", "circular"):
        got = Tensor(x).pad((2, 2), mode=mode).numpy()
        want = torch.nn.functional.pad(torch.from_numpy(x), (2, 2), mode=mode).numpy()
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=mode)
    a, b = np.array([-0.0, 2.0], np.float32), np.array([-0.0], np.float32)
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        cat = Tensor.cat(Tensor(a).cast(dtype), Tensor(b).cast(dtype)).float().numpy()
        assert np.signbit(cat).tolist() == [True, False, True], dtype
        stacked = Tensor.stack(Tensor(a).cast(dtype), Tensor(a).cast(dtype), dim=1)
        assert (1 / stacked).float().tolist() == [[-np.inf, -np.inf], [0.5, 0.5]], dtype
    # a float cat promoting an int piece, and int and bool cats, are unchanged
    assert Tensor.cat(Tensor([1, 2]), Tensor([-0.0])).numpy().tolist() == [1.0, 2.0, -0.0]
    assert np.signbit(Tensor.cat(Tensor([1, 2]), Tensor([-0.0])).numpy()).tolist() == [False, False, True]
    assert Tensor.cat(Tensor([1, 2]), Tensor([3])).tolist() == [1, 2, 3]
    assert Tensor.cat(Tensor([True]), Tensor([False, True])).tolist() == [True, False, True]
    # gradients still reach every piece
    p, q = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    (Tensor.cat(p, q) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    assert p.grad.tolist() == [1.0, 2.0] and q.grad.tolist() == [3.0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_float_scaled_adds_round_once_as_torch(dtype):
    # torch takes alpha (and a Python number operand) in the half dtype and computes a + alpha * b, addcmul's
    # a + value * b * c (an fma) and addcdiv's a + value * b / c in float32, rounded once; the product rounded to half
    # first left a fifth of the sums an ulp off. (Sizes a multiple of 64: torch's scalar tail loop rounds twice)
    rng = np.random.default_rng(5)
    a, b, c = (rng.uniform(-2, 2, (4, 256)).astype(np.float32) for _ in range(3))
    c = np.abs(c) + 0.25
    tdt = getattr(torch, dtype)
    ta, tb, tc = (torch.from_numpy(v).to(tdt) for v in (a, b, c))
    ua, ub, uc = (Tensor(v).cast(dtype) for v in (a, b, c))
    pairs = [
        (ta.add(tb, alpha=0.587), ua.add(ub, alpha=0.587)),
        (ta.sub(tb, alpha=0.3), ua.sub(ub, alpha=0.3)),
        (ta.add(2.3, alpha=0.3), ua.add(2.3, alpha=0.3)),
        (torch.addcmul(ta, tb, tc, value=0.3), ua.addcmul(ub, uc, value=0.3)),
        (torch.addcdiv(ta, tb, tc, value=0.3), ua.addcdiv(ub, uc, value=0.3)),
        (torch.addcmul(ta, tb[:1], tc, value=-1.7), ua.addcmul(ub[:1], uc, value=-1.7)),
    ]
    for i, (want, got) in enumerate(pairs):
        assert got.dtype == getattr(dtypes, dtype)
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy(), err_msg=f"case {i}")
    # gradients flow to every operand
    x, y, z = (Tensor(v[:1, :64]).cast(dtype).detach().requires_grad_() for v in (a, b, c))
    (x.add(y, alpha=0.5) + x.addcmul(y, z, value=0.25)).float().sum().backward()
    tx, ty, tz = (torch.from_numpy(v[:1, :64]).to(tdt).requires_grad_() for v in (a, b, c))
    (tx.add(ty, alpha=0.5) + tx.addcmul(ty, tz, value=0.25)).float().sum().backward()
    for ours, theirs in ((x, tx), (y, ty), (z, tz)):
        np.testing.assert_allclose(ours.grad.float().numpy(), theirs.grad.float().numpy(), rtol=2**-7)


def test_float32_power_takes_a_python_exponent_as_float32_as_torch():
    # torch's float32 pow kernel rounds a Python float exponent to float32 (its vector loop, every tensor past a few
    # dozen elements; CUDA's likewise): x ** (1 / 2.4) is powf(x, 0.41666666f), up to ~15 ulp from the exact power
    # for x far from 1, as torch's
    rng = np.random.default_rng(3)
    x = np.exp(rng.uniform(-80, 80, 4096)).astype(np.float32)
    for e in (1 / 2.4, 1 / 3, 0.7):
        got = (Tensor(x) ** e).numpy().astype(np.float64)
        want = (x.astype(np.float64) ** float(np.float32(e))).astype(np.float32).astype(np.float64)
        ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
        assert np.max(np.abs(got - want) / ulp) <= 1, e
        ref = (torch.from_numpy(x) ** e).numpy().astype(np.float64)
        assert np.max(np.abs(got - ref) / ulp) <= 2, e


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("tau", [0.005, 0.5, 1, -0.25, 0.9])
def test_soft_update_matches_torch_bitwise(dtype: str, tau: float) -> None:
    # a target network's soft update, `p.lerp_(q, tau)` (the same bits as torch's) and `p.mul_(1 - tau).add_(q,
    # alpha=tau)`: their weight and alpha nodes are built apart from the generic binary op path; gradients too
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 5, 3)).astype(dtype)
    t, tt = Tensor(a).realize(), torch.tensor(a)
    t.lerp_(Tensor(b), tau)
    tt.lerp_(torch.tensor(b), tau)
    np.testing.assert_array_equal(t.numpy(), _np(tt))
    t.mul_(1 - tau).add_(Tensor(b), alpha=tau)
    tt.mul_(1 - tau).add_(torch.tensor(b), alpha=tau)
    # (torch's add with alpha may be one fma: an ulp apart)
    np.testing.assert_allclose(t.numpy(), _np(tt), rtol=1e-6, atol=1e-7)
    x, xt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = Tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
    x.lerp(y, tau).sub(y, alpha=tau).sum().backward()
    xt.lerp(yt, tau).sub(yt, alpha=tau).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), _np(xt.grad), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), _np(yt.grad), rtol=1e-6)


@pytest.mark.parametrize("lib", ["torch", "ours"])
def test_a_computed_empty_input_of_cat_and_block_diag_gets_its_empty_gradient(lib):
    # as torch: an empty tensor computed from one that wants a gradient (not only a leaf) stays in the graph; a
    # block_diag pads each block (an empty one too) before its cat, so its empty blocks lost their gradient
    T = torch if lib == "torch" else Tensor
    empty, full = T.zeros(0, 3, requires_grad=True), T.ones(2, 2, requires_grad=True)
    (T.block_diag(empty, full) * 2).sum().backward()
    assert empty.grad is not None and tuple(empty.grad.shape) == (0, 3) and full.grad.tolist() == [[2.0] * 2] * 2
    empty, full = T.zeros(0, 2, requires_grad=True), T.ones(2, 2, requires_grad=True)
    T.cat([empty * 3, full]).sum().backward()
    assert empty.grad is not None and tuple(empty.grad.shape) == (0, 2)


@pytest.mark.parametrize("how", ["copy_", "copy_ of .data", "fill_", "setitem", "copy_ into lazy"])
def test_a_lazy_tensor_written_from_storage_keeps_a_copy(how: str) -> None:
    # Lookahead's slow weights: `slow = zeros_like(p.data); slow.copy_(p.data)`, then the optimizer writes p. PyTorch's
    # copy_ copies, so slow keeps the old values; the write must not turn slow into a view of p's storage
    results = []
    for lib in ("uopkit", "torch"):
        make = Tensor if lib == "uopkit" else torch.tensor
        zeros = Tensor.zeros if lib == "uopkit" else torch.zeros
        p = make([1.0, 2.0, 3.0])
        if lib == "uopkit":
            p = p.contiguous().realize()
        slow = zeros(3)
        if how == "copy_":
            slow.copy_(p)
        elif how == "copy_ of .data":
            slow.copy_(p.data)
        elif how == "fill_":
            slow.fill_(p[1])
        elif how == "setitem":
            slow[:] = p
        else:
            slow = slow + 1
            slow.copy_(p)
        p.mul_(10)
        p.add_(1)
        results.append((slow.tolist(), p.tolist()))
    assert results[0] == results[1]

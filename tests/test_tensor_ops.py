"""Tensor forward values and dtypes compared with PyTorch (CPU) and numpy: elementwise, reductions, nn functional."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit.dtype import dtypes
from uopkit.tensor import ShapeError, Tensor
from uopkit.uop.ops import GroupOp

torch = pytest.importorskip("torch")
F = torch.nn.functional

rng = np.random.default_rng(0)


def data(*shape: int, low: float = -3.0, high: float = 3.0, dtype: type = np.float32) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(dtype)


def close(ours: Tensor, ref: object, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    got = ours.numpy()
    want = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)


def both(x: np.ndarray) -> tuple[Tensor, object]:
    return Tensor(x), torch.tensor(x)


# ---------------------------------------------------------------------------------------------------------------------
# unary math over wide ranges


UNARY = [
    ("exp", lambda t: t.exp(), torch.exp, (-87.0, 88.0)),
    ("exp2", lambda t: t.exp2(), torch.exp2, (-120.0, 120.0)),
    ("log", lambda t: t.log(), torch.log, (1e-30, 1e30)),
    ("log2", lambda t: t.log2(), torch.log2, (1e-30, 1e30)),
    ("sqrt", lambda t: t.sqrt(), torch.sqrt, (0.0, 1e6)),
    ("rsqrt", lambda t: t.rsqrt(), torch.rsqrt, (1e-3, 1e6)),
    ("reciprocal", lambda t: t.reciprocal(), torch.reciprocal, (0.1, 100.0)),
    ("sin", lambda t: t.sin(), torch.sin, (-1e4, 1e4)),
    ("cos", lambda t: t.cos(), torch.cos, (-1e4, 1e4)),
    ("tan", lambda t: t.tan(), torch.tan, (-1.4, 1.4)),
    ("abs", lambda t: t.abs(), torch.abs, (-5.0, 5.0)),
    ("sign", lambda t: t.sign(), torch.sign, (-5.0, 5.0)),
    ("floor", lambda t: t.floor(), torch.floor, (-50.0, 50.0)),
    ("ceil", lambda t: t.ceil(), torch.ceil, (-50.0, 50.0)),
    ("trunc", lambda t: t.trunc(), torch.trunc, (-50.0, 50.0)),
    ("round", lambda t: t.round(), torch.round, (-50.0, 50.0)),
    ("log1p", lambda t: t.log1p(), torch.log1p, (-0.99, 100.0)),
    ("expm1", lambda t: t.expm1(), torch.expm1, (-20.0, 20.0)),
]


@pytest.mark.parametrize("name,ours,ref,rng_", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float32(name, ours, ref, rng_):
    lo, hi = rng_
    if lo > 0 and hi / lo > 1e3:
        x = np.exp(rng.uniform(math.log(lo), math.log(hi), 300)).astype(np.float32)
    else:
        x = data(300, low=lo, high=hi)
    t, r = both(x)
    out = ours(t)
    assert out.dtype == dtypes.float32
    atol = 1e-6 if name not in ("sin", "cos") else 2e-6
    close(out, ref(r), atol=atol, rtol=2e-6 if name not in ("tan",) else 2e-5)


def test_unary_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45], dtype=np.float32)
    t, r = both(x)
    for ours, ref in [
        (t.exp(), torch.exp(r)),
        (t.log(), torch.log(r)),
        (t.sqrt(), torch.sqrt(r)),
        (t.abs(), torch.abs(r)),
        (t.sign(), torch.sign(r)),  # NaN gives 0, as torch (tinygrad and numpy keep NaN)
        (t.sigmoid(), torch.sigmoid(r)),
        (t.tanh(), torch.tanh(r)),
        (t.floor(), torch.floor(r)),
        (t.round(), torch.round(r)),
        (t.isnan(), torch.isnan(r)),
        (t.isinf(), torch.isinf(r)),
        (t.isfinite(), torch.isfinite(r)),
        (t.isinf(detect_negative=False), torch.isposinf(r)),
        (t.relu(), torch.relu(r)),  # NaN stays NaN, as PyTorch (tinygrad gives 0)
    ]:
        close(ours, ref, atol=1e-30)


def test_round_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, 1e7 + 0.5, 8388609.0], dtype=np.float32)
    close(Tensor(x).round(), torch.round(torch.tensor(x)), atol=0)


def test_unary_on_ints_promote_to_float():
    x = np.arange(1, 10, dtype=np.int32)
    t, r = both(x)
    assert t.exp().dtype == dtypes.float32 and t.sqrt().dtype == dtypes.float32
    close(t.sqrt(), torch.sqrt(r.float()))
    close(t.log(), torch.log(r.float()))
    assert t.abs().dtype == dtypes.int32 and t.floor().dtype == dtypes.int32


def test_unary_float16_and_float64():
    x = data(50, low=-4, high=4)
    for dt, tdt, atol in [(dtypes.float16, torch.float16, 2e-3), (dtypes.float64, torch.float64, 1e-12)]:
        t = Tensor(x).cast(dt)
        r = torch.tensor(x).to(tdt)
        for ours, ref in [(t.exp(), r.exp()), (t.sin(), r.sin()), (t.tanh(), r.tanh()), (t.sigmoid(), r.sigmoid())]:
            assert ours.dtype == dt
            close(ours, ref.double(), atol=atol, rtol=atol)


# ---------------------------------------------------------------------------------------------------------------------
# activations


ACTIVATIONS = [
    ("relu", lambda t: t.relu(), F.relu),
    ("sigmoid", lambda t: t.sigmoid(), torch.sigmoid),
    ("tanh", lambda t: t.tanh(), torch.tanh),
    ("gelu", lambda t: t.gelu(approximate="tanh"), lambda r: F.gelu(r, approximate="tanh")),
    ("quick_gelu", lambda t: t.quick_gelu(), lambda r: r * torch.sigmoid(1.702 * r)),
    ("silu", lambda t: t.silu(), F.silu),
    ("swish", lambda t: t.swish(), F.silu),
    ("softplus", lambda t: t.softplus(), F.softplus),
    ("softplus_beta", lambda t: t.softplus(beta=2.0), lambda r: F.softplus(r, beta=2.0)),
    ("mish", lambda t: t.mish(), F.mish),
    ("elu", lambda t: t.elu(), F.elu),
    ("elu_alpha", lambda t: t.elu(0.5), lambda r: F.elu(r, 0.5)),
    ("celu", lambda t: t.celu(2.0), lambda r: F.celu(r, 2.0)),
    ("selu", lambda t: t.selu(), F.selu),
    ("leaky_relu", lambda t: t.leaky_relu(0.2), lambda r: F.leaky_relu(r, 0.2)),
    ("hardsigmoid", lambda t: t.hardsigmoid(), F.hardsigmoid),
    ("hardswish", lambda t: t.hardswish(), F.hardswish),
    ("hardtanh", lambda t: t.hardtanh(-0.5, 2.0), lambda r: F.hardtanh(r, -0.5, 2.0)),
    ("relu6", lambda t: t.relu6(), F.relu6),
    ("softsign", lambda t: t.softsign(), F.softsign),
    ("logsigmoid", lambda t: t.logsigmoid(), F.logsigmoid),
]


@pytest.mark.parametrize("name,ours,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation(name, ours, ref):
    # a wide range, including values where exp overflows, plus tiny ones
    x = np.concatenate([data(200, low=-10, high=10), [-100.0, -30.0, 30.0, 100.0, 1e-4, -1e-4, 0.0]]).astype(np.float32)
    t, r = both(x)
    out = ours(t)
    assert out.dtype == dtypes.float32
    close(out, ref(r), atol=2e-6, rtol=2e-5)


# ---------------------------------------------------------------------------------------------------------------------
# binary ops, broadcasting, promotion


def test_binary_broadcast_and_negative_axes():
    a, b = data(3, 1, 5), data(4, 1)
    ta, tb = Tensor(a), Tensor(b)
    ra, rb = torch.tensor(a), torch.tensor(b)
    close(ta + tb, ra + rb)
    close(ta - tb, ra - rb)
    close(ta * tb, ra * rb)
    close(ta / tb, ra / rb, rtol=1e-5)
    close(ta.maximum(tb), torch.maximum(ra, rb))
    close(ta.minimum(tb), torch.minimum(ra, rb))
    close(ta.pow(tb.abs()), ra.pow(rb.abs()), rtol=1e-5)
    close(ta < tb, ra < rb)
    close(ta <= tb, ra <= rb)
    close(ta == ta, ra == ra)
    close(ta != tb, ra != rb)
    close(ta >= tb, ra >= rb)
    close(ta > tb, ra > rb)
    close(ta.lerp(tb, 0.25), torch.lerp(ra, rb.expand(4, 5).reshape(1, 4, 5).expand(3, 4, 5), 0.25))
    close(ta.clip(-1, 1), ra.clamp(-1, 1))
    close(ta.clamp(min_=0.5), ra.clamp(min=0.5))


def test_scalar_and_reverse_ops():
    x = data(6, low=0.5, high=3)
    t, r = both(x)
    close(2 - t, 2 - r)
    close(2 / t, 2 / r)
    close(2**t, 2**r, rtol=1e-5)
    close(t**-2, r**-2, rtol=1e-5)
    close(t**0.5, r**0.5)
    close(t**2.5, r**2.5, rtol=1e-5)
    close(t % 0.7, r % 0.7, atol=1e-5)
    close(-t, -r)
    close(t // 0.7, r // 0.7)
    close(abs(Tensor(-x)), torch.tensor(x))


def test_pow_negative_base_and_zero():
    x = np.array([-2.0, -0.5, 0.0, 0.0, 2.0, -3.0], dtype=np.float32)
    e = np.array([3.0, 2.0, 0.0, 2.0, -1.0, 0.5], dtype=np.float32)
    close(Tensor(x).pow(Tensor(e)), torch.tensor(x).pow(torch.tensor(e)))
    close(Tensor(x).pow(3), torch.tensor(x).pow(3))
    assert Tensor([2, 3]).pow(3).dtype == dtypes.int32
    close(Tensor([2, -3]).pow(Tensor([10, 3])), torch.tensor([2, -3]).pow(torch.tensor([10, 3])))


def test_int_division_and_mod_follow_torch():
    a = np.array([7, -7, 7, -7, 0, 5], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], dtype=np.int32)
    ta, tb, ra, rb = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
    close(ta % tb, ra % rb, atol=0)
    close(ta // tb, ra // rb, atol=0)
    close(ta.div(tb, rounding_mode="trunc"), torch.div(ra, rb, rounding_mode="trunc"), atol=0)
    close(ta / tb, ra / rb)
    assert (ta / tb).dtype == dtypes.float32
    assert (ta // tb).dtype == dtypes.int32


def test_type_promotion():
    i8, u8 = Tensor([1], dtype=dtypes.int8), Tensor([1], dtype=dtypes.uint8)
    assert (i8 + u8).dtype == dtypes.int16
    assert (Tensor([1]) + 1.5).dtype == dtypes.float32
    assert (Tensor([1.0], dtype=dtypes.float16) + 1).dtype == dtypes.float16
    assert (Tensor([1.0], dtype=dtypes.float16) + Tensor([1.0])).dtype == dtypes.float32
    assert (Tensor([True]) + 1).dtype == dtypes.int32
    assert (Tensor([1], dtype=dtypes.int64) * Tensor([1.0], dtype=dtypes.float16)).dtype == dtypes.float16
    assert (Tensor([1]) < 2).dtype == dtypes.bool


def test_logical_and_bitwise():
    a = np.array([0, 1, 6, -3, 255], dtype=np.int32)
    b = np.array([3, 1, 3, 5, 15], dtype=np.int32)
    ta, tb, ra, rb = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
    close(ta & tb, ra & rb, atol=0)
    close(ta | tb, ra | rb, atol=0)
    close(ta ^ tb, ra ^ rb, atol=0)
    close(~ta, ~ra, atol=0)
    close(ta << 2, ra << 2, atol=0)
    close(ta >> 1, ra >> 1, atol=0)
    close(ta.logical_and(tb), torch.logical_and(ra, rb))
    close(ta.logical_or(tb), torch.logical_or(ra, rb))
    close(ta.logical_xor(tb), torch.logical_xor(ra, rb))
    close(ta.logical_not(), torch.logical_not(ra))
    m = Tensor([True, False, True])
    assert (~m).tolist() == [False, True, False]
    assert (m & Tensor([True, True, False])).tolist() == [True, False, False]
    with pytest.raises(TypeError, match="bitwise"):
        Tensor([1.0]) & Tensor([2.0])


def test_where_and_masked_fill():
    c = rng.uniform(size=(3, 4)) > 0.5
    x, y = data(3, 4), data(4)
    close(Tensor(c).where(Tensor(x), Tensor(y)), torch.where(torch.tensor(c), torch.tensor(x), torch.tensor(y)))
    close(Tensor(c).where(Tensor(x), 0.5), torch.where(torch.tensor(c), torch.tensor(x), 0.5))
    close(Tensor(c).where(1.0, Tensor(y)), torch.where(torch.tensor(c), 1.0, torch.tensor(y)))
    close(Tensor(x).masked_fill(Tensor(c), -1.0), torch.tensor(x).masked_fill(torch.tensor(c), -1.0))


def test_casts_and_bitcasts():
    x = np.array([-2.7, -0.5, 0.0, 1.5, 100.9], dtype=np.float32)
    t, r = both(x)
    for dt, tdt in [(dtypes.int32, torch.int32), (dtypes.int8, torch.int8), (dtypes.float16, torch.float16)]:
        out = t.cast(dt)
        assert out.dtype == dt
        close(out, r.to(tdt).double(), atol=0)
    close(t.cast(dtypes.bool), r.bool())
    close(t.bitcast(dtypes.uint32).cast(dtypes.int64), torch.tensor(x.view(np.uint32).astype(np.int64)), atol=0)
    close(t.bitcast(dtypes.int32).bitcast(dtypes.float32), r, atol=0)
    # to another item size the last dim scales, as torch's view(dtype) (tinygrad's bitcast)
    close(t.bitcast(dtypes.int16).cast(dtypes.int64), r.view(torch.int16).long(), atol=0)
    with pytest.raises(ShapeError, match="bitcast: the last dim's size"):
        t.bitcast(dtypes.int64)


# ---------------------------------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (1, -1), (0, 1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(axis, keepdim):
    x = data(3, 4, 5)
    t, r = both(x)
    dim = tuple(range(3)) if axis is None else axis
    close(t.sum(axis, keepdim), r.sum(dim, keepdim=keepdim), atol=1e-5)
    close(t.mean(axis, keepdim), r.mean(dim, keepdim=keepdim), atol=1e-6)
    close(t.max(axis=axis, keepdim=keepdim), r.amax(dim, keepdim=keepdim))
    close(t.min(axis=axis, keepdim=keepdim), r.amin(dim, keepdim=keepdim))
    close(t.var(axis, keepdim=keepdim), r.var(dim, keepdim=keepdim), atol=1e-5)
    close(t.std(axis, keepdim=keepdim, correction=0), r.std(dim, keepdim=keepdim, correction=0), atol=1e-5)
    close(t.logsumexp(axis, keepdim), torch.logsumexp(r, dim, keepdim=keepdim), atol=1e-5)
    dims = dim if isinstance(dim, tuple) else (dim,)
    close((t * 0.5).prod(axis, keepdim), _torch_reduce(r * 0.5, dims, keepdim, "prod"), rtol=1e-4, atol=1e-7)
    close(Tensor(x > 0).any(axis, keepdim), _torch_reduce(torch.tensor(x > 0), dims, keepdim, "any"))
    close(Tensor(x > -2.5).all(axis, keepdim), _torch_reduce(torch.tensor(x > -2.5), dims, keepdim, "all"))


def _torch_reduce(r, dims, keepdim, op):
    for d in sorted((d % r.ndim for d in dims), reverse=True):
        r = getattr(r, op)(d, keepdim=keepdim)
    return r


def test_reduction_dtypes():
    assert Tensor([1, 2], dtype=dtypes.int8).sum().dtype == dtypes.int32
    assert Tensor([1, 2], dtype=dtypes.uint8).sum().dtype == dtypes.uint32
    assert Tensor([True, True]).sum().dtype == dtypes.int32
    assert Tensor([True, True]).sum().item() == 2
    # an int mean needs a float dtype, as torch's (it raises without one)
    assert Tensor([1, 2]).mean(dtype=dtypes.float32).dtype == dtypes.float32
    h = Tensor(np.full(4096, 0.1, dtype=np.float16))
    # float16 accumulates in float32 and returns float16
    assert h.sum().dtype == dtypes.float16
    assert abs(h.sum().item() - 409.6) < 0.5
    assert Tensor([1, 2, 3]).sum(dtype=dtypes.float64).dtype == dtypes.float64
    big = Tensor(np.full(300, 100, dtype=np.int8))
    assert big.sum().item() == 30000
    assert Tensor([100, 100], dtype=dtypes.int8).sum(dtype=dtypes.int8).item() == -56


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.bool_])
def test_max_min_along_a_dim_by_position_are_torchs_values_and_indices(op, dt):
    x = data(3, 4, 5)
    x = x > 0 if dt is np.bool_ else x.astype(dt) if dt is np.float32 else (x * 10).astype(dt)
    t, r = both(x)
    for args, kw in [((1,), {}), ((-1, True), {}), ((0,), {"keepdim": True}), ((), {"dim": 2})]:
        ours, theirs = getattr(t, op)(*args, **kw), getattr(r, op)(*args, **kw)
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
    # torch's idioms: a two-row batch unpacks into (values, indices), not into the two rows' maxima
    _, pred = getattr(Tensor, op)(Tensor(x[:2]), 1)
    assert pred.tolist() == getattr(torch, op)(r[:2], 1)[1].tolist()
    assert getattr(t, op)(1)[0].tolist() == getattr(r, op)(1)[0].tolist()
    # tinygrad's keyword axis= (one or several) keeps the values only, as amax
    close(getattr(t, op)(axis=1), getattr(r, "a" + op)(1))
    close(getattr(t, op)((0, 2)), getattr(r, "a" + op)((0, 2)))
    with pytest.raises(TypeError, match="both"):
        getattr(t, op)(1, axis=1)


def test_max_along_a_dim_by_position_sends_the_gradient_to_the_index():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], np.float32)
    t, r = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (t.max(1)[0] * Tensor([1.0, 2.0])).sum().backward()
    (r.max(1)[0] * torch.tensor([1.0, 2.0])).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), r.grad.numpy())


def test_argmax_argmin():
    x = rng.integers(0, 4, (4, 5, 6)).astype(np.float32)
    t, r = both(x)
    for axis in (0, 1, -1):
        close(t.argmax(axis), r.argmax(axis), atol=0)
        close(t.argmin(axis), r.argmin(axis), atol=0)
        close(t.argmax(axis, keepdim=True), r.argmax(axis, keepdim=True), atol=0)
    close(t.argmax(), r.argmax(), atol=0)
    assert t.argmax(0).dtype == dtypes.int32
    xi = np.array([3, 9, 9, 1], dtype=np.int32)
    assert Tensor(xi).argmax().item() == 1 and Tensor(xi).argmin().item() == 3
    assert Tensor([1.0, float("nan"), 3.0]).argmax().item() == 1


@pytest.mark.parametrize("blocks_up_to", [8192, 8])
def test_long_sort(monkeypatch, blocks_up_to):
    # rows past a sort by rank's length are ranked per block (up to SORT_BY_BLOCKS) or go through a bitonic network
    # padded to a power of two (here 20 -> 32, the rank's length lowered to keep the kernels few): stable indices and
    # values as torch's, NaN the largest (each dtype and the 64-bit dtypes' pairs of value and position:
    # tests/test_semantics.py)
    from uopkit.tensor import reduce

    monkeypatch.setattr(reduce, "SORT_BY_RANK", 8)
    monkeypatch.setattr(reduce, "SORT_BY_BLOCKS", blocks_up_to)
    x = rng.integers(-5, 5, (3, 20)).astype(np.float32)
    x[0, ::3] = math.nan
    x[1, ::4] = -0.0
    for descending in (False, True):
        v, i = Tensor(x).sort(-1, descending=descending)
        tv, ti = torch.tensor(x).sort(dim=-1, descending=descending, stable=True)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        np.testing.assert_array_equal(v.numpy(), tv.numpy())


@pytest.mark.parametrize("n", [1, 7, 600])
def test_cumulative(n):
    x = data(3, n, low=-1, high=1)
    t, r = both(x)
    close(t.cumsum(1), r.cumsum(1), atol=1e-4)
    close(t.cumsum(-1), r.cumsum(-1), atol=1e-4)
    close(t.cummax(1)[0], r.cummax(1).values)
    close(t.cummin(1)[0], r.cummin(1).values)
    np.testing.assert_array_equal(t.cummax(1)[1].numpy(), r.cummax(1).indices.numpy())
    np.testing.assert_array_equal(t.cummin(1)[1].numpy(), r.cummin(1).indices.numpy())
    p = data(3, n, low=0.9, high=1.1)
    close(Tensor(p).cumprod(1), torch.tensor(p).cumprod(1), rtol=1e-4)
    close(t.cumsum(0), r.cumsum(0), atol=1e-5)
    xi = rng.integers(-5, 5, (n,)).astype(np.int32)
    close(Tensor(xi).cumsum(), torch.tensor(xi).cumsum(0), atol=0)


def test_reductions_zero_size_and_scalar():
    z = Tensor.zeros(0, 3)
    assert z.sum(0).tolist() == [0.0, 0.0, 0.0]
    assert z.sum(1).shape == (0,)
    assert z.prod(0).tolist() == [1.0, 1.0, 1.0]
    assert math.isnan(z.mean().item())
    with pytest.raises(ValueError, match="empty"):
        z.max(axis=0)
    s = Tensor(3.0)
    assert s.sum().item() == 3.0 and s.max().item() == 3.0 and s.mean().item() == 3.0
    assert s.sum(0).item() == 3.0
    assert Tensor([]).sum().item() == 0.0


def test_reductions_on_non_contiguous():
    x = data(6, 8)
    t, r = both(x)
    close(t.T.sum(0), r.T.sum(0))
    close(t[::2, 1::3].max(axis=1), r[::2, 1::3].amax(1))
    close(t.flip(0)[1:4].cumsum(0), r.flip(0)[1:4].cumsum(0))


# ---------------------------------------------------------------------------------------------------------------------
# linear algebra and convolutions


def test_matmul_linear_einsum():
    a, b, c = data(2, 3, 4), data(4, 5), data(5)
    ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
    ra, rb, rc = torch.tensor(a), torch.tensor(b), torch.tensor(c)
    close(ta @ tb, ra @ rb)
    close(tb @ tc, rb @ rc)
    close(tc @ tb.T, rc @ rb.T)
    v = data(4)
    close(Tensor(v) @ Tensor(v), np.dot(v, v), rtol=1e-5)
    close(ta.linear(tb, tc), F.linear(ra, rb.T, rc))
    close(Tensor.einsum("bij,jk->bik", ta, tb), torch.einsum("bij,jk->bik", ra, rb))
    close(Tensor.einsum("bij->j", ta), torch.einsum("bij->j", ra))
    close(Tensor.einsum("ii->i", Tensor(b[:4, :4])), torch.einsum("ii->i", rb[:4, :4]))
    close(Tensor.einsum("ii", Tensor(b[:4, :4])), torch.einsum("ii", rb[:4, :4]))
    close(Tensor.einsum("...j,jk", ta, tb), torch.einsum("...j,jk", ra, rb))
    close(Tensor.einsum("i,j->ij", tc, tc), torch.einsum("i,j->ij", rc, rc))
    with pytest.raises(ShapeError, match="matmul"):
        ta @ Tensor(data(5, 5))


def test_einsum_sublist_form_as_torch():
    # torch's einsum(a, [0, 1], b, [1, 2], [0, 2]): ints 0-51 stand for A-Z, a-z; the output list is optional
    a, b, c = data(2, 3), data(3, 4), data(5, 2, 3)
    ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
    ra, rb, rc = torch.tensor(a), torch.tensor(b), torch.tensor(c)
    close(Tensor.einsum(ta, [0, 1], tb, [1, 2], [0, 2]), torch.einsum(ra, [0, 1], rb, [1, 2], [0, 2]))
    close(Tensor.einsum(ta, [0, 1], tb, [1, 2]), torch.einsum(ra, [0, 1], rb, [1, 2]))
    # (30 is "e": the implicit output's sorted letters put 2 ("C") first, as torch's)
    close(Tensor.einsum(ta, [30, 1], tb, [1, 2]), torch.einsum(ra, [30, 1], rb, [1, 2]))
    close(Tensor.einsum(tc, [..., 0, 1], tb, [1, 2], [..., 2]), torch.einsum(rc, [..., 0, 1], rb, [1, 2], [..., 2]))
    close(Tensor.einsum(Tensor(b[:, :3]), [7, 7]), torch.einsum(rb[:, :3], [7, 7]))
    # upper-case letters beside "...", whose dims once took the letters A, B, ...
    close(Tensor.einsum("...A,AB->...B", tc, tb), torch.einsum("...A,AB->...B", rc, rb))
    close(Tensor.einsum("...A,AB", tc, tb), torch.einsum("...A,AB", rc, rb))
    with pytest.raises(ValueError, match=r"holds 52; subscripts are ints in \[0, 52\)"):
        Tensor.einsum(ta, [0, 52])
    with pytest.raises(TypeError, match="holds 1.0"):
        Tensor.einsum(ta, [0, 1.0])
    with pytest.raises(TypeError, match="must be a list"):
        Tensor.einsum(ta, 5)
    with pytest.raises(TypeError, match="operands must be Tensors"):
        Tensor.einsum(ta, [0, 1], [0], [0])
    with pytest.raises(ValueError, match="only the letters"):
        Tensor.einsum("i1,1j", ta, tb)


def test_repeat_interleave_of_counts_alone_as_torch():
    # torch.repeat_interleave(counts): index i repeated counts[i] times, in the counts' dtype
    for counts, dt in (([2, 0, 3], "int64"), ([1, 1], "int32"), ([], "int64"), ([4], "int32")):
        ours = Tensor.repeat_interleave(Tensor(counts, dtype=dt))
        want = torch.repeat_interleave(torch.tensor(counts, dtype=getattr(torch, dt)))
        assert ours.dtype == getattr(dtypes, dt) and ours.tolist() == want.tolist()
    assert Tensor([2, 1]).repeat_interleave(output_size=3).tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="output_size is 4"):
        Tensor.repeat_interleave(Tensor([2, 1]), output_size=4)
    with pytest.raises(ValueError, match="non-negative"):
        Tensor.repeat_interleave(Tensor([1, -2]))
    for bad in (Tensor(3), Tensor([[1, 2]]), Tensor([1.0, 2.0]), Tensor([True, False])):
        with pytest.raises(TypeError, match="self holds the counts: a 1-D integer tensor"):
            Tensor.repeat_interleave(bad)
    with pytest.raises(TypeError, match="dim needs repeats"):
        Tensor([2, 1]).repeat_interleave(dim=0)


@pytest.mark.parametrize(
    "op, call",
    [
        ("mean", lambda t, d: t.mean(dim=d)),
        ("mean", lambda t, d: t.mean(d)),
        ("var", lambda t, d: t.var(dim=d)),
        ("std", lambda t, d: t.std(dim=d)),
        ("std", lambda t, d: t.std(d, correction=0)),
        ("var_mean", lambda t, d: t.var_mean(dim=d)),
        ("std_mean", lambda t, d: t.std_mean(dim=d)),
        ("nansum", lambda t, d: t.nansum(dim=d)),
        ("nanmean", lambda t, d: t.nanmean(dim=d)),
        ("amax", lambda t, d: t.amax(d)),
        ("amin", lambda t, d: t.amin(d)),
        ("aminmax", lambda t, d: t.aminmax(dim=d)),
        ("any", lambda t, d: t.any(dim=d)),
        ("all", lambda t, d: t.all(dim=d)),
        ("softmin", lambda t, d: t.softmin(dim=d)),
        ("mean", lambda t, d: t.cast(dtypes.bfloat16).mean((0, d))),
    ],
)
@pytest.mark.parametrize("dim", [3, -4])
def test_axis_out_of_range_names_the_method_called(op, call, dim):
    # a composite once named the reduction it calls (mean(dim=3): "sum: axis 3 is out of range")
    x = Tensor(data(2, 3))
    with pytest.raises(IndexError, match=f"^{op}: axis {dim} is out of range for a tensor of shape \\(2, 3\\)"):
        call(x, dim)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(stride=1, padding=0, dilation=1, groups=1),
        dict(stride=2, padding=1, dilation=1, groups=1),
        dict(stride=1, padding=2, dilation=2, groups=1),
        dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
        dict(stride=1, padding="same", dilation=1, groups=4),
    ],
)
def test_conv2d(cfg):
    x, w, b = data(2, 4, 9, 8), data(6 if cfg["groups"] != 4 else 8, 4 // cfg["groups"], 3, 3), None
    b = data(w.shape[0])
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), **cfg)
    ref = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **cfg)
    close(out, ref, atol=1e-4)


def test_conv1d_conv3d():
    x, w = data(2, 3, 10), data(4, 3, 3)
    close(
        Tensor(x).conv1d(Tensor(w), stride=2, padding=1),
        F.conv1d(torch.tensor(x), torch.tensor(w), stride=2, padding=1),
        atol=1e-4,
    )
    x3, w3 = data(1, 2, 4, 5, 4), data(3, 2, 2, 3, 2)
    close(Tensor(x3).conv3d(Tensor(w3), padding=1), F.conv3d(torch.tensor(x3), torch.tensor(w3), padding=1), atol=1e-4)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(stride=1, padding=0, output_padding=0, groups=1, dilation=1),
        dict(stride=2, padding=1, output_padding=1, groups=1, dilation=1),
        dict(stride=2, padding=0, output_padding=0, groups=2, dilation=2),
    ],
)
def test_conv_transpose2d(cfg):
    x, w, b = data(2, 4, 5, 4), data(4, 3, 3, 3), data(3 * cfg["groups"])
    out = Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **cfg)
    ref = F.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **cfg)
    close(out, ref, atol=1e-4)


def test_conv_errors_name_shapes():
    with pytest.raises(ShapeError, match=r"conv.*\(2, 3, 5, 5\).*channels"):
        Tensor.zeros(2, 3, 5, 5).conv2d(Tensor.zeros(4, 2, 3, 3))
    with pytest.raises(ShapeError, match="conv"):
        Tensor.zeros(2, 3, 5).conv2d(Tensor.zeros(4, 3, 3, 3))


@pytest.mark.parametrize(
    "cfg",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(3, 2), stride=(2, 1), ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
        dict(kernel_size=2, stride=3, ceil_mode=True),
    ],
)
def test_pools(cfg):
    x = data(2, 3, 7, 8)
    t, r = both(x)
    close(t.max_pool2d(**cfg), F.max_pool2d(r, **cfg))
    close(t.avg_pool2d(**cfg), F.avg_pool2d(r, **cfg), atol=1e-6)
    close(t.avg_pool2d(**cfg, count_include_pad=False), F.avg_pool2d(r, **cfg, count_include_pad=False), atol=1e-6)


def test_max_pool_dilation():
    x = data(1, 2, 9, 9)
    close(Tensor(x).max_pool2d(3, stride=1, dilation=2), F.max_pool2d(torch.tensor(x), 3, stride=1, dilation=2))


@pytest.mark.parametrize(
    "mode,align", [("nearest", False), ("nearest-exact", False), ("linear", False), ("linear", True)]
)
def test_interpolate(mode, align):
    x = data(2, 3, 5, 4)
    tmode = "bilinear" if mode == "linear" else mode
    kw = dict(align_corners=align) if mode == "linear" else {}
    for size in [(10, 7), (3, 2), (5, 9), (10, 8), (15, 2), (1, 4)]:
        out = Tensor(x).interpolate(size, mode=mode, **kw)
        close(out, F.interpolate(torch.tensor(x), size=size, mode=tmode, **kw), atol=1e-5)
    # by a scale factor: the output is floor(L * scale) and positions map back by 1 / scale (not L / out)
    for scale in [(0.7, 2)]:
        out = Tensor(x).interpolate(mode=mode, scale_factor=scale, **kw)
        close(out, F.interpolate(torch.tensor(x), scale_factor=scale, mode=tmode, **kw), atol=1e-5)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        Tensor(x).interpolate((3, 3), scale_factor=2)


def test_nearest_upsampling_by_an_integer_factor_is_movement_ops():
    # each source row and column repeated: an expand and a reshape per axis, a view of the input (no index tensor
    # uploaded and compared per element); its gradient sums the repeats, as PyTorch's
    x = data(2, 3, 5, 4)
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = ours.interpolate((10, 12), mode="nearest")
    assert all(u.op in GroupOp.Movement or u is ours.uop for u in out.uop.toposort(lambda u: u is not ours.uop))
    want = F.interpolate(theirs, size=(10, 12), mode="nearest")
    close(out, want)
    w = data(2, 3, 10, 12)
    (out * Tensor(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    close(ours.grad, theirs.grad, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# nn functional


def test_softmax_log_softmax():
    x = data(3, 5, low=-50, high=50)
    t, r = both(x)
    for axis in (0, 1, -1):
        close(t.softmax(axis), r.softmax(axis), atol=1e-6)
        close(t.log_softmax(axis), r.log_softmax(axis), atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(smoothing, reduction):
    x, y = data(6, 5), rng.integers(0, 5, 6)
    y[2] = -100
    out = Tensor(x).cross_entropy(Tensor(y.astype(np.int32)), reduction=reduction, label_smoothing=smoothing)
    ref = F.cross_entropy(torch.tensor(x), torch.tensor(y), reduction=reduction, label_smoothing=smoothing)
    close(out, ref, atol=1e-5)
    # (N, C, d) logits and probability targets
    x3, y3 = data(2, 4, 3), rng.integers(0, 4, (2, 3))
    close(
        Tensor(x3).cross_entropy(Tensor(y3.astype(np.int32)), reduction=reduction, label_smoothing=smoothing),
        F.cross_entropy(torch.tensor(x3), torch.tensor(y3), reduction=reduction, label_smoothing=smoothing),
        atol=1e-5,
    )
    p = torch.tensor(data(6, 5)).softmax(1)
    close(
        Tensor(x).cross_entropy(Tensor(p.numpy()), reduction=reduction, label_smoothing=smoothing),
        F.cross_entropy(torch.tensor(x), p, reduction=reduction, label_smoothing=smoothing),
        atol=1e-5,
    )


def test_nll_and_binary_losses():
    lp = torch.tensor(data(5, 4)).log_softmax(1)
    y = rng.integers(0, 4, 5)
    y[0] = 1
    w = data(4, low=0.5, high=2)
    close(Tensor(lp.numpy()).nll_loss(Tensor(y.astype(np.int32))), F.nll_loss(lp, torch.tensor(y)))
    close(
        Tensor(lp.numpy()).nll_loss(Tensor(y.astype(np.int32)), weight=Tensor(w), reduction="sum"),
        F.nll_loss(lp, torch.tensor(y), weight=torch.tensor(w), reduction="sum"),
        atol=1e-5,
    )
    close(
        Tensor(lp.numpy()).nll_loss(Tensor(y.astype(np.int32)), weight=Tensor(w)),
        F.nll_loss(lp, torch.tensor(y), weight=torch.tensor(w)),
        atol=1e-5,
    )
    logits, tgt = data(10, low=-30, high=30), (rng.uniform(size=10) > 0.5).astype(np.float32)
    p = torch.sigmoid(torch.tensor(logits))
    close(Tensor(p.numpy()).binary_cross_entropy(Tensor(tgt)), F.binary_cross_entropy(p, torch.tensor(tgt)), atol=1e-4)
    close(
        Tensor(logits).binary_cross_entropy_with_logits(Tensor(tgt)),
        F.binary_cross_entropy_with_logits(torch.tensor(logits), torch.tensor(tgt)),
        atol=1e-5,
    )
    pw = data(10, low=0.5, high=2)
    close(
        Tensor(logits).binary_cross_entropy_with_logits(Tensor(tgt), reduction="none", pos_weight=Tensor(pw)),
        F.binary_cross_entropy_with_logits(
            torch.tensor(logits), torch.tensor(tgt), reduction="none", pos_weight=torch.tensor(pw)
        ),
        atol=1e-5,
    )


def test_layernorm_batchnorm():
    x = data(4, 3, 5)
    t, r = both(x)
    close(t.layernorm(), F.layer_norm(r, (5,)), atol=1e-5)
    close(t.layernorm(axis=(1, 2)), F.layer_norm(r, (3, 5)), atol=1e-5)
    mean, var, w, b = data(3), data(3, low=0.5, high=2), data(3), data(3)
    out = t.batchnorm(Tensor(w), Tensor(b), Tensor(mean), (Tensor(var) + 1e-5).rsqrt())
    ref = F.batch_norm(r, torch.tensor(mean), torch.tensor(var), torch.tensor(w), torch.tensor(b), eps=1e-5)
    close(out, ref, atol=1e-5)


def test_dropout():
    x = Tensor.ones(1000)
    assert x.dropout(0.5) is x
    Tensor.training = True
    try:
        Tensor.manual_seed(3)
        y = x.dropout(0.25).numpy()
        assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
        assert 0.15 < (y == 0).mean() < 0.35
        Tensor.manual_seed(3)
        assert np.array_equal(x.dropout(0.25).numpy(), y)
    finally:
        Tensor.training = False


def test_embedding():
    w, idx = data(10, 4), rng.integers(0, 10, (3, 5))
    close(Tensor(idx.astype(np.int32)).embedding(Tensor(w)), F.embedding(torch.tensor(idx), torch.tensor(w)))


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    q, k, v = data(2, 3, 4, 8), data(2, 3, 6, 8), data(2, 3, 6, 5)
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=causal)
    ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=causal)
    close(out, ref, atol=1e-5)
    mask = rng.uniform(size=(4, 6)) > 0.3
    mask[:, 0] = True
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(mask))
    ref = F.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(v), attn_mask=torch.tensor(mask)
    )
    close(out, ref, atol=1e-5)


def test_glu():
    x = data(3, 4, 6)
    for dim in (-1, 1):
        close(Tensor(x).glu(dim), F.glu(torch.tensor(x), dim))
    with pytest.raises(ShapeError, match=r"glu: axis 0 of shape \(3, 4, 6\) must have an even length"):
        Tensor(x).glu(0)


def test_scaled_dot_product_attention_scale_and_grouped_query_heads():
    q, k, v = data(2, 6, 4, 8), data(2, 2, 5, 8), data(2, 2, 5, 3)
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), scale=0.3, enable_gqa=True)
    ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), scale=0.3, enable_gqa=True)
    close(out, ref, atol=1e-5)
    with pytest.raises(ShapeError, match="with enable_gqa the query's 6 heads must be a multiple"):
        Tensor(q).scaled_dot_product_attention(Tensor(data(2, 4, 5, 8)), Tensor(data(2, 4, 5, 3)), enable_gqa=True)


# ---------------------------------------------------------------------------------------------------------------------
# wrong input


def test_errors_name_op_and_shapes():
    a, b = Tensor.zeros(2, 3), Tensor.zeros(4, 5)
    with pytest.raises(ShapeError, match=r"add: shapes \(2, 3\) and \(4, 5\)"):
        a + b
    with pytest.raises(ShapeError, match=r"where"):
        Tensor.zeros(2, 3).bool().where(Tensor.zeros(3, 3), 0)
    with pytest.raises(IndexError, match=r"sum: axis 2 .*\(2, 3\)"):
        a.sum(2)
    with pytest.raises(IndexError, match=r"permute"):
        a.permute(0, 5)
    with pytest.raises(ShapeError, match=r"reshape.*\(2, 3\).*\(4,\)"):
        a.reshape(4)
    with pytest.raises(ShapeError, match="expand"):
        a.expand(3, 3)
    with pytest.raises(ShapeError, match="cat"):
        Tensor.cat(a, b)
    with pytest.raises(ShapeError, match="stack"):
        Tensor.stack(a, b)
    with pytest.raises(ShapeError, match="split"):
        a.split([1, 2], 0)
    with pytest.raises(TypeError, match="idiv"):
        a.idiv(2)
    with pytest.raises(ValueError, match="reduction"):
        a.cross_entropy(Tensor([0, 1]), reduction="avg")
    with pytest.raises(ShapeError, match="cross_entropy"):
        a.cross_entropy(Tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="one_hot"):
        a.one_hot(3)
    with pytest.raises(ShapeError, match="pad"):
        a.pad(((1, 1),))
    with pytest.raises(ShapeError, match="reflect"):
        a.pad(((0, 0), (3, 0)), mode="reflect")
    with pytest.raises(ValueError, match="mode"):
        a.pad(((0, 0), (1, 0)), mode="wrap")
    with pytest.raises(ShapeError, match="pool"):
        Tensor.zeros(1, 1, 2, 2).max_pool2d(3)


def test_where_takes_torch_form_when_the_condition_is_second():
    torch = pytest.importorskip("torch")
    x, cond, other = np.array([1.0, 2.0, 3.0], np.float32), np.array([True, False, True]), np.float32(9.0)
    ours = Tensor(x).where(Tensor(cond), other).numpy()
    np.testing.assert_array_equal(ours, torch.tensor(x).where(torch.tensor(cond), torch.tensor(other)).numpy())
    # tinygrad's form: a bool self is the condition
    assert Tensor([True, False]).where(Tensor([1, 2]), 0).tolist() == [1, 0]


def test_nan_bits_of_extremes_are_torchs():
    # torch's amax/amin give a NaN of their own (positive), its whole-tensor max()/min()/aminmax() the all-ones NaN of
    # its vector lanes (negative), and of one element that element; min was a max of negated values, negated back
    # (a negative NaN), and each loop's NaN was the backend's or the input's
    for dt, tdt, it, tit, nans in (
        (dtypes.float32, torch.float32, dtypes.int32, torch.int32, (-0x400000, 0x7FC00001)),
        (dtypes.float64, torch.float64, dtypes.int64, torch.int64, (-(1 << 51), 0x7FF8000000000001)),
        (dtypes.float16, torch.float16, dtypes.int16, torch.int16, (-0x200, 0x7E01)),
        (dtypes.bfloat16, torch.bfloat16, dtypes.int16, torch.int16, (-0x40, 0x7FC1)),
    ):
        for shape in ((1,), (3,), (5, 40)):
            x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape).to(tdt)
            bits = x.view(tit).clone()
            bits.view(-1)[1::3] = nans[0]
            bits.view(-1)[::7] = nans[1]
            # (on the CPU backend, whose bits are torch's CPU's: another backend's compiler may write a NaN constant
            # with a payload of its own, PoCL's float16 0x7FFF, so the OpenCL lane checks the CPU here too)
            ours, theirs = Tensor(bits.numpy(), device="CPU").bitcast(dt), bits.view(tdt)
            for f in (
                lambda t: t.max(),
                lambda t: t.min(),
                lambda t: t.amax(),
                lambda t: t.amin(),
                lambda t: t.amax(-1),
                lambda t: t.amin(-1, keepdim=True),
                lambda t: t.amax(tuple(range(t.ndim))),
                lambda t: t.aminmax().min,
                lambda t: t.aminmax(keepdim=True).max,
            ):
                got, want = f(ours).bitcast(it).numpy(), f(theirs).contiguous().view(tit).numpy()
                assert got.shape == want.shape and (got == want).all(), (dt, shape, got, want)


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_var_and_std_take_torchs_positions(op):
    # torch's Tensor.var(dim, unbiased, keepdim): `x.std(1, False)` is the biased std, not keepdim=False
    x = data(3, 4)
    t, r = both(x)
    for args in [(1, False), (0, True, True), (False,), (1,)]:
        ours, theirs = getattr(t, op)(*args), getattr(torch, op)(r, *args)
        pairs = zip(ours, theirs, strict=True) if isinstance(ours, tuple) else [(ours, theirs)]
        for o, w in pairs:
            close(o, w, atol=1e-6)
    ours, theirs = getattr(t, op)(1, correction=0), getattr(torch, op)(r, 1, correction=0)
    close(ours[0] if isinstance(ours, tuple) else ours, theirs[0] if isinstance(theirs, tuple) else theirs, atol=1e-6)
    with pytest.raises(TypeError, match="unbiased"):
        getattr(t, op)(1, 0)
    with pytest.raises(TypeError, match="unbiased"):
        getattr(t, op)(1, True, correction=0)

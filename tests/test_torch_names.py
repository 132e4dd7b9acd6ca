"""PyTorch's other names and short compositions (tensor/torch_names.py) against torch itself."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
import torch

import uopkit
from uopkit import Tensor, dtypes
from uopkit.dtype import to_dtype, to_numpy_dtype
from uopkit.tensor import ArgumentError, DTypeError, ShapeError

RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
V = (RNG.random(4) * 1.8 - 0.9).astype(np.float32)


def _same(got, want, atol=1e-5):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, atol)
        return
    if isinstance(want, torch.Tensor):
        assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
        mine, theirs = np.dtype(to_numpy_dtype(got.dtype)), want.numpy().dtype
        # (index results are int32 here, int64 in torch: docs/semantics.md)
        assert mine == theirs or (mine == np.int32 and theirs == np.int64), (got.dtype, want.dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.double().numpy(), atol=atol, rtol=1e-5)
    else:
        assert got == want


UNARY = ["absolute", "arcsin", "arctan", "arcsinh", "negative", "positive", "fix", "sgn", "deg2rad", "rad2deg",
         "sinc", "fliplr", "flipud", "msort", "rot90", "hardshrink", "byte", "char", "argwhere", "ndimension",
         "nelement", "is_signed", "is_complex"]  # fmt: skip


@pytest.mark.parametrize("name", UNARY)
def test_unary_names(name):
    x = V if name in ("arcsin", "arctanh") else A
    if name == "hardshrink":
        _same(Tensor(x).hardshrink(0.3), torch.nn.functional.hardshrink(torch.from_numpy(x), 0.3))
        return
    _same(getattr(Tensor(x), name)(), getattr(torch.from_numpy(x), name)())


BINARY = ["arctan2", "divide", "true_divide", "multiply", "subtract", "greater", "greater_equal", "less",
          "less_equal", "not_equal", "logaddexp2", "dist", "inner", "is_same_size"]  # fmt: skip


@pytest.mark.parametrize("name", BINARY)
def test_binary_names(name):
    got = getattr(Tensor(A), name)(Tensor(B))
    _same(got, getattr(torch.from_numpy(A), name)(torch.from_numpy(B)))


@pytest.mark.parametrize(
    "name, number, values, dtype",
    [
        ("remainder", -7, [-3, 2, 5], "int8"),
        ("remainder", 7.5, [-3.0, 2.0, 5.0], "float32"),
        ("bitwise_and", 6, [1, 2, 7], "int16"),
        ("bitwise_or", 6, [1, 2, 9], "uint8"),
        ("bitwise_xor", -6, [1, 2, 9], "int64"),
        ("bitwise_left_shift", 1, [0, 3, 7], "int8"),
        ("bitwise_right_shift", 100, [0, 3, 7], "uint8"),
        ("xlogy", 2.0, [0.5, 2.0, 0.0], "float32"),
        ("float_power", 2, [0.5, -1.0, 3.0], "float32"),
    ],
)
def test_a_number_as_the_first_operand_as_torch(name, number, values, dtype):
    # torch's overloads with a Scalar self (torch.remainder(7, t), torch.bitwise_left_shift(1, t)): the number is the
    # left operand, the result has the tensor's dtype (the shifts gave NotImplemented, the others an AttributeError)
    got = getattr(Tensor, name)(number, Tensor(values, dtype=dtype))
    _same(got, getattr(torch, name)(number, torch.tensor(values, dtype=getattr(torch, dtype))))


@pytest.mark.parametrize(
    "name, number, values, dtype, kwargs",
    [
        ("add", 2.5, [1, 2, 3], "int32", {}),
        ("add", 2.0, [1.0, -2.0, 3.0], "float32", {"alpha": 3}),
        ("sub", 2, [1, 2, 3], "uint8", {}),
        ("subtract", 1.0, [0.25, -2.0, 3.0], "float64", {"alpha": 2}),
        # the number goes into the half float first (0.1 * 3 is 0.2998, where t * 0.1 gives 0.3)
        ("mul", 0.1, [1.0, 2.0, 3.0], "float16", {}),
        ("multiply", 3, [1, -2, 5], "int8", {}),
        ("div", 1.0, [4.0, -2.0, 0.5], "float32", {}),
        ("div", 7, [-2, 3, 4], "int16", {"rounding_mode": "floor"}),
        ("true_divide", 7, [-2, 3, 4], "int32", {}),
        ("divide", -7.5, [-2.0, 3.0, 4.0], "float32", {"rounding_mode": "trunc"}),
        ("floor_divide", -7, [-2, 3, 4], "int64", {}),
    ],
)
def test_a_number_first_in_arithmetic_as_torch(name, number, values, dtype, kwargs):
    # torch.sub(1.0, t), torch.div(1.0, t), ...: the number is the left operand (an AttributeError before)
    got = getattr(Tensor, name)(number, Tensor(values, dtype=dtype), **kwargs)
    _same(got, getattr(torch, name)(number, torch.tensor(values, dtype=getattr(torch, dtype)), **kwargs), atol=0)
    # two numbers: a 0-d tensor, as torch's (HF Longformer's torch.div(seq_len, w, rounding_mode="trunc") as a size);
    # a TypeError before. (A Python int is int32 here: docs/semantics.md)
    got, want = getattr(Tensor, name)(number, 3, **kwargs), getattr(torch, name)(number, 3, **kwargs)
    assert got.shape == () and got.item() == pytest.approx(want.item(), rel=1e-6)
    assert dtypes.is_float(got.dtype) == want.is_floating_point()


def test_a_0d_int_tensor_as_a_size_as_torch():
    # HF Longformer's `_chunk`: a chunk count computed by torch.div of two ints is a 0-d int64 tensor, passed to
    # view(), as_strided() and new_zeros() as a size (a TypeError before, in view and as_strided)
    x = np.arange(2 * 8 * 3, dtype=np.float32).reshape(2, 8, 3)
    got = []
    for T, t in ((Tensor, Tensor(x)), (torch, torch.tensor(x))):
        n = T.div(t.size(1), 4, rounding_mode="trunc")
        chunks = t.view(t.size(0), n, 4, t.size(2))
        size, stride = list(chunks.size()), list(chunks.stride())
        size[1], stride[1] = n * 2 - 1, stride[1] // 2
        out = chunks.as_strided(size=size, stride=stride)
        zeros = t.new_zeros((t.size(0), n + 1, 2))
        got.append([out.numpy(), zeros.numpy(), t.reshape(n, -1).numpy()])
    for ours, ref in zip(got[0], got[1], strict=True):
        np.testing.assert_array_equal(ours, ref)
    with pytest.raises(TypeError):
        Tensor(x).view(2, Tensor(8.0), 3)


def test_result_type_promote_types_and_can_cast_as_torch():
    import uopkit
    from uopkit.dtype import to_dtype

    names = ["bool", "uint8", "int8", "int16", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            ta, tb = getattr(torch, a), getattr(torch, b)
            assert uopkit.can_cast(a, b) == torch.can_cast(ta, tb), (a, b)
            assert uopkit.promote_types(a, b) == to_dtype(str(torch.promote_types(ta, tb))[6:]), (a, b)
            # a 0-d tensor beside one with dimensions promotes by kind only; shapes needn't broadcast
            for sa, sb in [((2,), (3,)), ((), (3,)), ((2,), ())]:
                want = torch.result_type(torch.ones(sa, dtype=ta), torch.ones(sb, dtype=tb))
                got = Tensor.result_type(Tensor.ones(*sa, dtype=a), Tensor.ones(*sb, dtype=b))
                assert got == to_dtype(str(want)[6:]), (a, b, sa, sb)
        for number in (True, 2.5):
            want = to_dtype(str(torch.result_type(torch.ones(2, dtype=getattr(torch, a)), number))[6:])
            assert uopkit.result_type(Tensor.ones(2, dtype=a), number) == want
            assert uopkit.result_type(number, Tensor.ones(2, dtype=a)) == want
    # (a Python int beside a tensor too small for it computes in int64 here: docs/semantics.md)
    assert Tensor.result_type(Tensor([1], dtype="int8"), 3) == dtypes.int8
    assert Tensor.result_type(2, 2.5) == dtypes.float32


def test_compositions_match_torch():
    ta, tb, tv = torch.from_numpy(A), torch.from_numpy(B), torch.from_numpy(V)
    a, b, v = Tensor(A), Tensor(B), Tensor(V)
    m = RNG.standard_normal((4, 4)).astype(np.float32)
    tm, um = torch.from_numpy(m), Tensor(m)
    _same(a.addmm(a, um, beta=0.5, alpha=2), ta.addmm(ta, tm, beta=0.5, alpha=2))
    # beta 0: self isn't read, so its NaN don't show
    nan = np.full((3, 4), np.nan, np.float32)
    _same(Tensor(nan).addmm(a, um, beta=0), torch.from_numpy(nan).addmm(ta, tm, beta=0))
    _same(v.addmv(um, v, alpha=3), tv.addmv(tm, tv, alpha=3))
    _same(a.addr(Tensor(A[:, 0]), v), ta.addr(ta[:, 0], tv))
    batch = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    tbatch = torch.from_numpy(batch)
    _same(a.addbmm(Tensor(batch), um.expand(2, 4, 4)), ta.addbmm(tbatch, tm.expand(2, 4, 4)))
    _same(
        a.unsqueeze(0).baddbmm(Tensor(batch), um.expand(2, 4, 4), beta=2),
        ta.unsqueeze(0).baddbmm(tbatch, tm.expand(2, 4, 4), beta=2),
    )
    for n in (0, 1, 2, 5, -1, -2):
        _same(um.matrix_power(n), tm.matrix_power(n), atol=1e-3)
    _same(v.vdot(v), tv.vdot(tv))
    for p in (0, 1, 2, 3, math.inf, -math.inf):
        _same(a.dist(b, p), ta.dist(tb, p))
    _same(a.inner(Tensor(2.0)), ta.inner(torch.tensor(2.0)))
    _same(a.inner(v), ta.inner(tv))
    _same(a.aminmax(), ta.aminmax())
    _same(a.aminmax(dim=1, keepdim=True), ta.aminmax(dim=1, keepdim=True))
    _same(Tensor([0.0, 1.0, 0.5]).float_power(2), torch.tensor([0.0, 1.0, 0.5]).float_power(2))
    x = Tensor([-1.0, 0.0, 2.0, float("nan")])
    _same(x.heaviside(Tensor([0.5])), torch.tensor([-1.0, 0.0, 2.0, float("nan")]).heaviside(torch.tensor([0.5])))
    _same(
        Tensor([-math.inf, 3.0, math.inf]).logaddexp2(Tensor([-math.inf, 3.0, 1.0])),
        torch.tensor([-math.inf, 3.0, math.inf]).logaddexp2(torch.tensor([-math.inf, 3.0, 1.0])),
    )


def test_shape_compositions_match_torch():
    x = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)
    t, tt = Tensor(x), torch.from_numpy(x)
    for k in (-3, -1, 0, 1, 2, 5):
        _same(t.rot90(k, (1, 2)), tt.rot90(k, (1, 2)))
    _same(t.broadcast_to((3, 2, 4, 6)), tt.broadcast_to((3, 2, 4, 6)))
    _same(t.broadcast_to((-1, 4, 6)), tt.broadcast_to((-1, 4, 6)))
    _same(t.broadcast_to(3, 2, 4, 6), tt.broadcast_to(3, 2, 4, 6))
    _same(t.broadcast_to(2, -1, 6), tt.broadcast_to(2, -1, 6))
    _same(Tensor(5.0).broadcast_to(2, 3), torch.tensor(5.0).broadcast_to(2, 3))
    with pytest.raises(ShapeError, match=r"broadcast_to: expand: can't expand \(2, 4, 6\) to \(3, 4, 6\)"):
        t.broadcast_to(3, 4, 6)
    _same(t.hsplit(2), tt.hsplit(2))
    _same(t.hsplit([1, 3]), tt.hsplit([1, 3]))
    _same(t.vsplit(2), tt.vsplit(2))
    _same(t.dsplit([2]), tt.dsplit([2]))
    _same(Tensor(x[0, 0]).hsplit(3), tt[0, 0].hsplit(3))
    _same(t.split_with_sizes([1, 3], 1), tt.split_with_sizes([1, 3], 1))
    _same(t.select(1, -1), tt.select(1, -1))
    _same(t.moveaxis(0, -1), tt.moveaxis(0, -1))
    _same(t.swapdims(0, 2), tt.swapdims(0, 2))
    for offset in (0, 1, -2):
        _same(Tensor(A).diag_embed(offset), torch.from_numpy(A).diag_embed(offset))
        _same(Tensor(A).diag_embed(offset, 0, 2), torch.from_numpy(A).diag_embed(offset, 0, 2))
        _same(Tensor(A).diagflat(offset), torch.from_numpy(A).diagflat(offset))
    assert Tensor([-0.0, math.nan]).diag_embed().numpy()[0, 0] == 0 and np.signbit(
        Tensor([-0.0]).diag_embed().numpy()[0, 0]
    )
    assert Tensor(A).equal(Tensor(A)) and not Tensor(A).equal(Tensor(B)) and not Tensor(A).equal(Tensor(A[:2]))
    assert Tensor([2]).is_nonzero() and not Tensor([0.0]).is_nonzero()
    assert Tensor(A).cpu().device == "CPU"


def test_add_and_sub_take_alpha():
    ta, tb = torch.from_numpy(A), torch.from_numpy(B)
    _same(Tensor(A).add(Tensor(B), alpha=2.5), ta.add(tb, alpha=2.5))
    _same(Tensor(A).sub(Tensor(B), alpha=-2), ta.sub(tb, alpha=-2))
    _same(
        Tensor([1, 2]).add(Tensor([3, 4]), alpha=3),
        torch.tensor([1, 2], dtype=torch.int32).add(torch.tensor([3, 4], dtype=torch.int32), alpha=3),
    )
    _same(Tensor(A).subtract(1.5, alpha=2), ta.subtract(1.5, alpha=2))
    with pytest.raises(ArgumentError, match="float alpha"):
        Tensor([1, 2]).add(Tensor([3, 4]), alpha=0.5)


def test_deprecated_number_first_overloads_as_torch():
    # older SGLD/Adam code writes torch's deprecated forms: p.data.add_(-lr, d_p), v.addcmul_(1 - b2, g, g),
    # p.data.addcdiv_(-step, m, denom), torch.add(x, alpha, other); torch still runs them (with a warning)
    import warnings

    ta, tb, tv = torch.from_numpy(A), torch.from_numpy(B), torch.from_numpy(V)
    a, b, v = Tensor(A), Tensor(B), Tensor(V)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _same(a.add(-0.5, b), ta.add(-0.5, tb))
        _same(a.sub(0.25, b), ta.sub(0.25, tb))
        _same(a.add(3, 2), ta.add(3, 2))
        _same(Tensor.add(a, 2.0, b), torch.add(ta, 2.0, tb))
        _same(a.addcmul(0.1, b, v), ta.addcmul(0.1, tb, tv))
        _same(a.addcdiv(-0.3, b, v + 2), ta.addcdiv(-0.3, tb, tv + 2))
        _same(Tensor.addcmul(a, 0.1, b, b), torch.addcmul(ta, 0.1, tb, tb))
        for name, args in (("add_", (-0.5,)), ("sub_", (0.5,)), ("addcmul_", (0.1, B)), ("addcdiv_", (-0.2, B + 3))):
            got, want = Tensor(A), torch.from_numpy(A.copy())
            getattr(got, name)(*args[:1], *(Tensor(x) for x in args[1:]), Tensor(V))
            getattr(want, name)(*args[:1], *(torch.from_numpy(x) for x in args[1:]), tv)
            _same(got, want)
    # p.add_(d_p, alpha=-lr) style stays as it was; a tensor first with a tensor second is no deprecated form
    with pytest.raises(TypeError, match="add: the second positional argument"):
        a.add(b, b)
    with pytest.raises(TypeError, match="alpha is given twice"):
        a.add(0.5, b, alpha=2)


_ALPHA_OPERANDS = {
    "bool": [True, False, True, False],
    "uint8": [3, 2, 0, 7],
    "int8": [3, -2, 0, 7],
    "int32": [3, -2, 0, 7],
    "float16": [1.5, -2.0, 0.0, 7.0],
    "bfloat16": [1.5, -2.0, 0.0, 7.0],
}


@pytest.mark.parametrize("first", list(_ALPHA_OPERANDS))
@pytest.mark.parametrize("second", ["bool", "uint8", "float16"])
@pytest.mark.parametrize("alpha", [2, -1, 0, 1000, -200, 2.5, 1e5, True])
def test_add_alpha_is_a_number_of_the_operands_dtype_as_torch(first, second, alpha):
    # alpha never changes the result's dtype: a bool sum stays bool (alpha as its truth value), an int one wraps alpha
    # into its dtype (uint8's -1 is 255) or refuses one out of range, as torch's
    def both(dt):
        values = _ALPHA_OPERANDS[first] if dt is first else [True, True, False, False]
        want = torch.tensor(values, dtype=getattr(torch, dt))
        got = Tensor(np.array(values, np.float32)).cast(getattr(dtypes, dt))
        return got, want

    (a, ta), (b, tb) = both(first), both(second)
    try:
        want = ta.add(tb, alpha=alpha)
    except RuntimeError:
        with pytest.raises((ArgumentError, OverflowError)):
            a.add(b, alpha=alpha)
        return
    got = a.add(b, alpha=alpha)
    assert got.dtype == getattr(dtypes, str(want.dtype).removeprefix("torch."))
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def test_sub_of_bools_with_alpha_raises_as_torch():
    a, b = [True, False, True, False], [True, True, False, False]
    with pytest.raises(RuntimeError, match="two bool tensors"):
        torch.tensor(a).sub(torch.tensor(b), alpha=2)
    for alpha in (2, True):
        with pytest.raises(RuntimeError, match="bool"):
            Tensor(a).sub(Tensor(b), alpha=alpha)


def test_bad_arguments_raise_clearly():
    with pytest.raises(ShapeError, match="fliplr: needs a tensor of 2 or more dims"):
        Tensor([1.0]).fliplr()
    with pytest.raises(ArgumentError, match="rot90: the two dims must differ"):
        Tensor(A).rot90(1, (1, 1))
    with pytest.raises(ArgumentError, match="hsplit: dim 1 of size 4 doesn't split into 3 equal parts"):
        Tensor(A).hsplit(3)
    with pytest.raises(ShapeError, match=r"addmm: needs operands of 2 and 2 dims, got shapes \(4,\) and \(3, 4\)"):
        Tensor(A).addmm(Tensor(V), Tensor(A))
    with pytest.raises(ShapeError, match="is_nonzero: needs a tensor of one element"):
        Tensor(A).is_nonzero()
    with pytest.raises(ArgumentError, match="heaviside: values must have the input's dtype"):
        Tensor(A).heaviside(Tensor([1]))


IN_PLACE = [
    # (name, positional args as (uopkit, torch) builders, input kind)
    ("acosh_", (), "above1"),
    ("log10_", (), "positive"),
    ("erfinv_", (), "unit"),
    ("frac_", (), "float"),
    ("hypot_", ("B",), "float"),
    ("xlogy_", ("B",), "positive"),
    ("ge_", ("B",), "float"),
    ("logical_xor_", ("B",), "float"),
    ("cumsum_", (-1,), "float"),
    ("addmm_", ("A34", "A44"), "float"),
    ("bitwise_xor_", ("I",), "int"),
    ("floor_divide_", (3,), "int"),
]


def _in_place_input(kind):
    if kind == "int":
        return (A * 10).astype(np.int32)
    return {"above1": np.abs(A) + 1, "positive": np.abs(A) + 0.1, "unit": V.reshape(1, 4).repeat(3, 0)}.get(kind, A)


@pytest.mark.parametrize("name, args, kind", IN_PLACE, ids=[c[0] for c in IN_PLACE])
def test_in_place_variants_match_torch(name, args, kind):
    extra = {"B": B, "A34": A, "A44": RNG.standard_normal((4, 4)).astype(np.float32), "I": (B * 10).astype(np.int32)}
    mine_args = [Tensor(extra[a]) if isinstance(a, str) else a for a in args]
    theirs_args = [torch.from_numpy(extra[a]) if isinstance(a, str) else a for a in args]
    x = _in_place_input(kind)
    # written into a realized tensor, and through a view into its base, as torch's in-place ops
    mine, theirs = Tensor(x.copy()).realize(), torch.from_numpy(x.copy())
    out = getattr(mine, name)(*mine_args)
    assert out is mine
    getattr(theirs, name)(*theirs_args)
    _same(mine, theirs, atol=1e-4)
    base, tbase = Tensor(x.copy()).realize(), torch.from_numpy(x.copy())
    row, trow = base[1], tbase[1]
    if name != "addmm_":
        getattr(row, name)(*[a[1] if isinstance(a, Tensor) else a for a in mine_args])
        getattr(trow, name)(*[a[1] if isinstance(a, torch.Tensor) else a for a in theirs_args])
        _same(base, tbase, atol=1e-4)


def test_every_in_place_name_torch_has_for_an_existing_method():
    # each out-of-place method torch also has as `name_` has it here too
    missing = [
        name
        for name in dir(torch.Tensor)
        if not name.startswith("_")
        and hasattr(torch.Tensor, name + "_")
        and hasattr(Tensor, name)
        and not hasattr(Tensor, name + "_")
    ]
    # (no strided storage to resize or stride by hand)
    assert set(missing) <= {"resize", "as_strided"}
    with pytest.raises(
        TypeError, match="sqrt_: the result is dtypes.float, which can.t be stored in place into this dtypes.int"
    ):
        Tensor([1, 2]).sqrt_()
    with pytest.raises(TypeError, match="float_power_: the result is float64"):
        Tensor([1.0, 2.0]).float_power_(2)
    x, tx = Tensor([1.0, 2.0], dtype="float64"), torch.tensor([1.0, 2.0], dtype=torch.float64)
    _same(x.float_power_(3), tx.float_power_(3))


def test_real_valued_complex_methods():
    ta = torch.from_numpy(A)
    t = Tensor(A)
    assert t.conj() is t and t.resolve_conj() is t and t.resolve_neg() is t and t.real is t
    assert not t.is_conj() and not t.is_neg()
    _same(t.conj_physical(), ta.conj_physical())
    _same(t.isreal(), ta.isreal())
    with pytest.raises(RuntimeError, match="imag: the tensor is dtypes.float, not complex"):
        _ = t.imag
    values = np.array([2.0, -1.0, 0.0, -0.0, np.nan, -np.inf], np.float32)
    _same(Tensor(values).angle(), torch.from_numpy(values).angle())
    _same(Tensor([3, -2]).angle(), torch.tensor([3, -2]).angle())
    # (its gradient: zeros, NaN included, from a result that requires grad, as torch's)
    x, tx = Tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    out, ref = x.angle(), tx.angle()
    assert out.requires_grad and ref.requires_grad
    (out * 2).sum().backward()
    (ref * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    batch = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _same(Tensor(batch).mH, torch.from_numpy(batch).mH)
    _same(Tensor(batch).adjoint(), torch.from_numpy(batch).adjoint())
    _same(t.H, ta.H)
    with pytest.raises(ShapeError, match="H: needs a matrix or a 0-d tensor"):
        _ = Tensor(batch).H


def test_strides_and_contiguity_as_torch_lays_them_out():
    def build(T, mk):
        held = mk([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        return [
            T.ones(2, 3), T.ones(2, 3).T, T.ones(2, 3)[:, 1:], T.ones(2, 3)[1:], mk([[1.0], [2.0]]).expand(2, 3),
            T.ones(2, 3, 4).permute(2, 0, 1), T.arange(10)[::2], (T.ones(2, 3) + 1).T, T.ones(2, 3).unsqueeze(1),
            T.ones(2, 3).flip(0), T.ones(2, 3).T.reshape(6), T.ones(4, 4).narrow(1, 1, 2), T.ones(3, 3).diagonal(),
            held.T[1:], held[:, ::2], T.ones(0, 3).T, held,
        ]  # fmt: skip

    # (`held` stays alive: a view's base is held weakly here, and a step slice's layout is known from a live base)
    mine = build(Tensor, Tensor)
    theirs = build(torch, torch.tensor)
    for i, (m, t) in enumerate(zip(mine, theirs, strict=True)):
        assert (m.stride(), m.is_contiguous()) == (t.stride(), t.is_contiguous()), i
    assert mine[1].stride(0) == 1 and mine[1].stride(-1) == 3 and Tensor(1.0).stride() == ()


def test_a_value_computed_from_a_leaf_gone_since_is_no_leaf():
    # torch's graph keeps the leaf; ours remembers the graphs tensors had when given requires_grad
    builds = [
        lambda T: T.ones(2, requires_grad=True) * 2,
        lambda T: T.randn(3, requires_grad=True).double(),
        lambda T: (T.ones(2, requires_grad=True) + 1).exp(),
    ]
    for i, build in enumerate(builds):
        ours, theirs = build(Tensor), build(torch)
        assert (ours.is_leaf, ours.requires_grad) == (theirs.is_leaf, theirs.requires_grad) == (False, True), i
        assert ours.grad_fn is not None and theirs.grad_fn is not None, i
    realized = (Tensor.ones(2, requires_grad=True) * 2).realize()
    assert not realized.is_leaf and realized.grad_fn is not None
    x = Tensor([1.0], requires_grad=True)
    assert x.is_leaf and x.grad_fn is None and (x * 2).detach().grad_fn is None and Tensor([1.0]).grad_fn is None
    assert (x * 2).grad_fn.name() == "MULBackward" and (Tensor([1.0]) * 2).grad_fn is None


# leaves made without requires_grad and given it after: graph nodes are hash-consed, so each of these is the very
# node built again by the same call
_LEAVES_GIVEN_REQUIRES_GRAD_AFTER = [
    lambda T: T.ones(2),
    lambda T: T.zeros(2),
    lambda T: T.full((2,), 3.5),
    lambda T: T.arange(2.0),
    lambda T: T.ones(2) * 3,
]


def _leaf_state(t):
    return t.is_leaf, t.requires_grad, t.grad_fn is None


@pytest.mark.parametrize("build", _LEAVES_GIVEN_REQUIRES_GRAD_AFTER)
@pytest.mark.usefixtures("gc_of_this_test")
def test_a_new_value_is_not_a_leaf_gone_since_that_was_built_the_same(build):
    # a leaf given requires_grad and dropped, a value computed from it held: the same call again is a new leaf
    # (it was taken for the dropped one: is_leaf False, requires_grad True, a grad_fn, for it and values of it)
    results = {}
    for T in (Tensor, torch):
        leaf = build(T).requires_grad_()
        held = leaf * 2
        del leaf
        gc.collect()
        fresh = build(T)
        state = [_leaf_state(fresh), _leaf_state(fresh + 1), _leaf_state(T.ones(2, requires_grad=False))]
        fresh.requires_grad_()
        (held + fresh * 5).sum().backward()
        results[T] = state, fresh.grad, _leaf_state(fresh)
    (ours, ours_grad, ours_after), (theirs, theirs_grad, theirs_after) = results.values()
    assert ours == theirs == [(True, False, True)] * 3
    assert ours_after == theirs_after == (True, True, True)
    _same(ours_grad, theirs_grad)


@pytest.mark.parametrize("build", _LEAVES_GIVEN_REQUIRES_GRAD_AFTER)
def test_two_leaves_built_the_same_have_gradients_of_their_own(build):
    grads = {}
    for T in (Tensor, torch):
        a, b = build(T).requires_grad_(), build(T).requires_grad_()
        (a * 2 + b).sum().backward()
        grads[T] = (a.grad, b.grad)
    _same(grads[Tensor], grads[torch])


@pytest.mark.usefixtures("gc_of_this_test")
def test_requires_grad_of_a_value_of_a_leaf_gone_since_cant_be_set_false():
    for T in (Tensor, torch):
        x = T.ones(2, requires_grad=True)
        y = x * 2
        del x
        gc.collect()
        assert (y.is_leaf, y.requires_grad) == (False, True)
        with pytest.raises(RuntimeError, match="leaf"):
            y.requires_grad = False
        with pytest.raises(RuntimeError, match="leaf"):
            y.requires_grad_(False)
        assert y.requires_grad and y.grad_fn is not None


def test_requires_grad_on_a_value_computed_from_a_leaf_keeps_it_in_the_graph():
    # (a leaf given requires_grad gets a node of its own; a value that is no leaf must not be cut from its inputs)
    found = {}
    for T in (Tensor, torch):
        x = T.ones(2, requires_grad=True)
        y = (x * 2).requires_grad_()
        (y * 3).sum().backward()
        found[T] = (y.is_leaf, y.grad_fn is None), x.grad
    assert found[Tensor][0] == found[torch][0] == (False, False)
    _same(found[Tensor][1], found[torch][1])


def test_autograd_leaves_and_retained_gradients():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    assert x.is_leaf and not y.is_leaf and y.detach().is_leaf and Tensor([1.0]).is_leaf
    computed = x * 2
    computed.realize()
    # (followed back to what computed it, as backward() does)
    assert not computed.is_leaf
    y.retain_grad()
    (y * y).sum().backward()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = tx * 3
    ty.retain_grad()
    (ty * ty).sum().backward()
    _same(y.grad, ty.grad)
    _same(x.grad, tx.grad)
    with pytest.raises(RuntimeError, match="retain_grad: .* does not require grad"):
        Tensor([1]).retain_grad()


@pytest.mark.parametrize("p", [2, 1, 3])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_renorm_of_half_floats_takes_the_norm_in_float32_as_torch(p, dtype):
    # rows of norm 800 (p = 2): |x|^p summed in float16 overflowed, and the rows came out zeros
    x = np.full((4, 100), 40.0, np.float32) * np.array([[1.0], [0.5], [0.01], [2.0]], np.float32)
    ours = Tensor(x).cast(dtype).renorm(p, 0, 10.0)
    ref = torch.from_numpy(x).to(getattr(torch, dtype)).renorm(p, 0, 10.0)
    assert ours.dtype == getattr(dtypes, dtype)
    np.testing.assert_array_equal(ours.float().numpy(), ref.float().numpy())


def _fake_quantize_cases():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(60).astype(np.float32) * 4
    # ties (0.025 / 0.05 is 0.5, rounded to even), beyond the range, and inf / NaN (NaN goes to quant_min)
    return np.concatenate([x, np.float32([0.075, 0.025, -0.025, 0.125, -0.0, 1e10, -1e10, np.inf, -np.inf, np.nan])])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize(("scale", "zero_point", "quant_min", "quant_max"), [(0.05, 3, -128, 127), (1 / 3, 0, 0, 15)])
def test_fake_quantize_per_tensor_affine_as_torch(dtype, scale, zero_point, quant_min, quant_max):
    x = _fake_quantize_cases()
    ours = Tensor(x).cast(dtype).detach().requires_grad_()
    ref = torch.from_numpy(x).to(getattr(torch, dtype)).requires_grad_()
    out = ours.fake_quantize_per_tensor_affine(scale, zero_point, quant_min, quant_max)
    want = torch.fake_quantize_per_tensor_affine(ref, scale, zero_point, quant_min, quant_max)
    (out * Tensor.arange(x.size)).sum().backward()
    (want * torch.arange(x.size)).sum().backward()
    assert out.dtype == getattr(dtypes, dtype)
    np.testing.assert_array_equal(out.cast(dtypes.float64).numpy(), want.detach().double().numpy())
    # the straight-through gradient: passed where the rounded value is in range, 0 elsewhere
    np.testing.assert_array_equal(ours.grad.cast(dtypes.float64).numpy(), ref.grad.double().numpy())
    # torch's overload with one-element tensors (the zero point truncated)
    out = Tensor(x).fake_quantize_per_tensor_affine(Tensor(scale), Tensor(zero_point + 0.7), quant_min, quant_max)
    want = torch.fake_quantize_per_tensor_affine(
        torch.from_numpy(x), torch.tensor(scale), torch.tensor(zero_point + 0.7), quant_min, quant_max
    )
    np.testing.assert_array_equal(out.numpy(), want.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("float_zero_point", [False, True])
def test_fake_quantize_per_channel_affine_as_torch(dtype, axis, float_zero_point):
    x = _fake_quantize_cases()[:60].reshape(4, 15)
    x = x if axis == 0 else x.T.copy()
    scale = np.array([0.1, 0.5, 0.25, 1.0], np.float32)
    zero = np.array([0.0, 1.5, -1.25, 3.0], np.float32) if float_zero_point else np.array([0, 1, -1, 3], np.int32)
    ours = Tensor(x).cast(dtype).detach().requires_grad_()
    ref = torch.from_numpy(x).to(getattr(torch, dtype)).requires_grad_()
    out = ours.fake_quantize_per_channel_affine(Tensor(scale), Tensor(zero), axis, -8, 7)
    want = torch.fake_quantize_per_channel_affine(ref, torch.from_numpy(scale), torch.from_numpy(zero), axis, -8, 7)
    out.sum().backward()
    want.sum().backward()
    assert out.dtype == getattr(dtypes, dtype)
    np.testing.assert_array_equal(out.cast(dtypes.float64).numpy(), want.detach().double().numpy())
    np.testing.assert_array_equal(ours.grad.cast(dtypes.float64).numpy(), ref.grad.double().numpy())


def test_fake_quantize_errors_say_what_to_do():
    x = Tensor([0.5, 1.5])
    with pytest.raises(ArgumentError, match=r"fake_quantize_per_tensor_affine: zero_point 300 must be within"):
        x.fake_quantize_per_tensor_affine(0.1, 300, -128, 127)
    with pytest.raises(ArgumentError, match=r"quant_min \(5\) must be <= quant_max \(1\)"):
        x.fake_quantize_per_tensor_affine(0.1, 0, 5, 1)
    with pytest.raises(TypeError, match="needs a floating-point tensor, got dtypes.int"):
        Tensor([1, 2]).fake_quantize_per_tensor_affine(0.1, 0, -128, 127)
    w = Tensor.ones(2, 3)
    with pytest.raises(ShapeError, match=r"must have shape \(2,\)"):
        w.fake_quantize_per_channel_affine(Tensor([0.1, 0.2, 0.3]), Tensor([0, 0, 0]), 0, -128, 127)
    with pytest.raises(ArgumentError, match="zero_point must be within"):
        w.fake_quantize_per_channel_affine(Tensor([0.1, 0.2]), Tensor([0, 500]), 0, -128, 127)
    with pytest.raises(ArgumentError, match=r"axis -1 must be within \[0, 2\)"):
        w.fake_quantize_per_channel_affine(Tensor([0.1, 0.2, 0.3]), Tensor([0, 0, 0]), -1, -128, 127)


def test_sum_to_size_narrow_copy_renorm_cholesky_solve():
    ta = torch.from_numpy(A)
    _same(Tensor(A).sum_to_size(1, 4), ta.sum_to_size(1, 4))
    _same(Tensor(A).sum_to_size((4,)), ta.sum_to_size((4,)))
    _same(Tensor(A).sum_to_size(3, 4), ta.sum_to_size(3, 4))
    with pytest.raises(ShapeError, match=r"sum_to_size: size \(2, 4\) is not expandable"):
        Tensor(A).sum_to_size(2, 4)
    base = Tensor(A).realize()
    copy = base.narrow_copy(1, 1, 2)
    copy += 1
    _same(base, ta)
    _same(copy, ta.narrow_copy(1, 1, 2) + 1)
    batch = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for p, dim, maxnorm in ((2, 1, 1.5), (1, 0, 3.0), (math.inf, 2, 1.0), (2, -1, 0.0)):
        _same(Tensor(batch).renorm(p, dim, maxnorm), torch.from_numpy(batch).renorm(p, dim, maxnorm))
    w, tw = Tensor(batch, requires_grad=True), torch.from_numpy(batch).requires_grad_()
    g = RNG.standard_normal(batch.shape).astype(np.float32)
    (w.renorm(2, 0, 2.0) * Tensor(g)).sum().backward()
    (tw.renorm(2, 0, 2.0) * torch.from_numpy(g)).sum().backward()
    _same(w.grad, tw.grad)
    with pytest.raises(ArgumentError, match="renorm: p must be positive"):
        Tensor(batch).renorm(0, 1, 1.0)
    m = RNG.standard_normal((2, 3, 3)).astype(np.float64)
    spd = m @ m.transpose(0, 2, 1) + 3 * np.eye(3)
    rhs = RNG.standard_normal((2, 3, 2))
    factor = np.linalg.cholesky(spd)
    for upper in (False, True):
        f = factor.transpose(0, 2, 1) if upper else factor
        got = Tensor(rhs).cholesky_solve(Tensor(f), upper=upper)
        want = torch.from_numpy(rhs).cholesky_solve(torch.from_numpy(f), upper=upper)
        _same(got, want, atol=1e-9)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_gradients_match_torch_on_the_whole_factor(upper):
    # torch's gradient for the factor is -(g_b x^T + x g_b^T) L on the whole matrix, not cut to the triangle its
    # forward reads (two masked triangular solves gave zeros on the other triangle); batch axes broadcast
    m = RNG.standard_normal((4, 4))
    low = np.linalg.cholesky(m @ m.T + 4 * np.eye(4))
    factor = (low.T if upper else low) + 0.1 * RNG.standard_normal((4, 4))
    rhs, weights = RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 4, 2))
    f, b = Tensor(factor, requires_grad=True), Tensor(rhs, requires_grad=True)
    (b.cholesky_solve(f, upper=upper) * Tensor(weights)).sum().backward()
    tf, tb = torch.from_numpy(factor).requires_grad_(), torch.from_numpy(rhs).requires_grad_()
    (tb.cholesky_solve(tf, upper=upper) * torch.from_numpy(weights)).sum().backward()
    _same(f.grad, tf.grad, atol=1e-9)
    _same(b.grad, tb.grad, atol=1e-9)
    with pytest.raises(ShapeError, match=r"cholesky_solve: B must be matrices \(\.\.\., 4, k\)"):
        Tensor.ones(4).cholesky_solve(f)


def test_unique_consecutive_matches_torch():
    values = np.array([[1, 1, 2], [2, 2, 2], [1, 1, 2], [3, 3, 3]], np.int32)
    for dim in (None, 0, 1):
        for inverse in (False, True):
            for counts in (False, True):
                got = Tensor(values).unique_consecutive(return_inverse=inverse, return_counts=counts, dim=dim)
                want = torch.from_numpy(values).unique_consecutive(
                    return_inverse=inverse, return_counts=counts, dim=dim
                )
                _same(got, want)
    floats = np.array([1.0, np.nan, np.nan, 2.0, 2.0], np.float32)
    _same(
        Tensor(floats).unique_consecutive(return_counts=True),
        torch.from_numpy(floats).unique_consecutive(return_counts=True),
    )
    _same(Tensor(np.zeros(0, np.float32)).unique_consecutive(), torch.zeros(0).unique_consecutive())


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_float_sinc_is_computed_in_float32_as_torch(dt):
    # (pi x and its sine rounded to the half float gave ~3e-4 at the integers, where torch's is 0)
    x = np.array([0.75, 1.0, 2.0, 3.0, -7.0, 20.0, 100.0, 0.5, 2.5, 0.0, np.inf], np.float32)
    want = torch.from_numpy(x).to(getattr(torch, dt)).sinc()
    got = Tensor(x).cast(getattr(dtypes, dt)).sinc()
    assert got.dtype == getattr(dtypes, dt)
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


@pytest.mark.parametrize("shape,dim", [((2, 0, 3), 1), ((0, 3), 0), ((0,), 0), ((2, 0, 3), None)])
def test_unique_consecutive_of_no_slices_as_torch(shape, dim):
    x = np.zeros(shape, np.float32)
    got = Tensor(x).unique_consecutive(return_inverse=True, return_counts=True, dim=dim)
    _same(got, torch.from_numpy(x).unique_consecutive(return_inverse=True, return_counts=True, dim=dim))


@pytest.mark.parametrize("shape,dim", [((2, 0, 3), 0), ((2, 0, 3), 2), ((3, 0), 0)])
def test_unique_consecutive_of_empty_slices_raises_as_torch(shape, dim):
    with pytest.raises(RuntimeError):
        torch.zeros(shape).unique_consecutive(dim=dim)
    with pytest.raises(ShapeError, match="empty"):
        Tensor(np.zeros(shape, np.float32)).unique_consecutive(dim=dim)


@pytest.mark.parametrize("realized", [True, False], ids=["realized", "lazy"])
def test_shape_changes_in_place_keep_views_sharing_storage(realized):
    y, ty = Tensor.ones(2, 3).contiguous(), torch.ones(2, 3)
    if realized:
        y.realize()
    v, tv = y[0], ty[0]
    assert y.t_() is y
    ty.t_()
    v.add_(1)
    tv.add_(1)
    y.add_(1)
    ty.add_(1)
    _same(y, ty)
    _same(v, tv)
    w, tw = y[1], ty[1]
    w.unsqueeze_(0).add_(5)
    tw.unsqueeze_(0).add_(5)
    _same(y, ty)
    _same(w, tw)
    for name, args in (("transpose_", (0, 1)), ("swapaxes_", (1, 0)), ("swapdims_", (0, 1)), ("squeeze_", (1,))):
        getattr(w, name)(*args)
        getattr(tw, name)(*args)
        assert w.shape == tuple(tw.shape), name
    w.mul_(2)
    tw.mul_(2)
    _same(y, ty)
    x = Tensor([[1.0, 2.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="squeeze_: a leaf tensor that requires grad can't change in place"):
        x.squeeze_(0)
    z = x * 2
    z.squeeze_(0)
    (z * Tensor([1.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [[2.0, 6.0]]


def test_in_place_draws_follow_their_distributions():
    Tensor.manual_seed(3)
    n = 20000
    draws = Tensor.zeros(n).exponential_(2.0).numpy()
    assert draws.min() >= 0 and abs(draws.mean() - 0.5) < 0.02
    trials = Tensor.zeros(n, dtype="int32").geometric_(0.25)
    assert trials.dtype == Tensor([1]).dtype
    counts = trials.numpy()
    assert counts.min() >= 1 and abs(counts.mean() - 4.0) < 0.15
    # (the Cauchy distribution has no mean: its median and quartiles)
    spread = Tensor.zeros(n).cauchy_(3.0, 2.0).numpy()
    assert abs(np.median(spread) - 3.0) < 0.1 and abs(np.percentile(spread, 75) - 5.0) < 0.15
    grown = Tensor.zeros(n, dtype="float64").log_normal_(1.0, 0.5).numpy()
    assert (
        grown.dtype == np.float64 and abs(np.log(grown).mean() - 1.0) < 0.02 and abs(np.log(grown).std() - 0.5) < 0.02
    )
    assert sorted(set(Tensor.zeros(2000).random_(-3, 4).tolist())) == list(range(-3, 4))
    assert sorted(set(Tensor.zeros(2000).random_(3).tolist())) == [0, 1, 2]
    small = Tensor.zeros(4000, dtype="int8").random_().numpy()
    assert small.min() >= 0 and small.max() == 127
    wide = Tensor.zeros(4000).random_().numpy()
    assert wide.min() >= 0 and wide.max() <= 2**24 and wide.max() > 2**23
    assert set(Tensor.zeros(100, dtype="bool").random_().tolist()) == {False, True}
    with pytest.raises(ArgumentError, match="exponential_: lambd must be positive"):
        Tensor.zeros(2).exponential_(0.0)
    with pytest.raises(ArgumentError, match=r"geometric_: p must be in \(0, 1\)"):
        Tensor.zeros(2).geometric_(1.0)
    with pytest.raises(TypeError, match="cauchy_: needs a floating-point tensor"):
        Tensor.zeros(2, dtype="int32").cauchy_()
    with pytest.raises(ArgumentError, match=r"random_: \[0, 300\) doesn't fit"):
        Tensor.zeros(2, dtype="int8").random_(300)
    on_cpu = Tensor.zeros(2, device="CPU")
    assert on_cpu.itemsize == 4 and on_cpu.is_cpu and not on_cpu.is_cuda and on_cpu.get_device() == -1


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "int64", "bool", "bfloat16"])
def test_nbytes_is_torchs_property_and_tinygrads_method(dtype):
    # torch's `t.nbytes` is an int: it was a bound method here (tinygrad's), so `t.nbytes / 1e6` raised
    ours, theirs = Tensor.zeros(3, 5, dtype=dtype), torch.zeros(3, 5, dtype=getattr(torch, dtype))
    assert ours.nbytes == theirs.nbytes and isinstance(ours.nbytes, int)
    assert ours.nbytes / 2 == theirs.nbytes / 2 and f"{ours.nbytes}" == f"{theirs.nbytes}"
    assert ours.nbytes() == theirs.nbytes and ours[1:].nbytes == theirs[1:].nbytes


def test_shrinks_threshold_prelu_rrelu_match_torch():
    import torch.nn.functional as F

    values = np.array([np.nan, 0.5, -0.5, 0.6, -0.7, 0.0, -0.0, np.inf, -np.inf, 3.0], np.float32)
    x, tx = Tensor(values), torch.from_numpy(values)
    for name, args in (("softshrink", (0.5,)), ("tanhshrink", ()), ("threshold", (0.5, -9.0)), ("hardshrink", (0.5,))):
        got, want = getattr(x, name)(*args).numpy(), getattr(F, name)(tx, *args).numpy()
        assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want)), name
    _same(x.prelu(Tensor([0.25])), F.prelu(tx, torch.tensor([0.25])))
    _same(x.rrelu(), F.rrelu(tx))
    batch, slopes = RNG.standard_normal((2, 3, 4)).astype(np.float32), np.array([0.1, 0.2, 0.3], np.float32)
    g = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    mine, w = Tensor(batch, requires_grad=True), Tensor(slopes, requires_grad=True)
    theirs, tw = torch.from_numpy(batch).requires_grad_(), torch.from_numpy(slopes).requires_grad_()
    (mine.prelu(w) * Tensor(g)).sum().backward()
    (F.prelu(theirs, tw) * torch.from_numpy(g)).sum().backward()
    _same(mine.grad, theirs.grad)
    _same(w.grad, tw.grad)
    with pytest.raises(ShapeError, match="prelu: weight of shape"):
        Tensor(batch).prelu(Tensor([0.1, 0.2]))
    drawn = Tensor(-np.ones(4000, np.float32)).rrelu(0.1, 0.3, training=True).numpy()
    assert -0.3 <= drawn.min() and drawn.max() <= -0.1 and abs(drawn.mean() + 0.2) < 0.01
    with pytest.raises(ArgumentError, match="rrelu: needs 0 <= lower <= upper"):
        x.rrelu(0.5, 0.1)


# ---------------------------------------------------------------------------------------------------------------------
# torch's functions without a Tensor method (torch.tril_indices, torch.cartesian_prod, ...): static methods, or methods
# called on the class with the first tensor (`Tensor.cartesian_prod(a, b)`, as `Tensor.cat`)


def test_triangle_indices_as_torch():
    for row, col, offset in [(3, 3, 0), (3, 4, 1), (4, 3, -1), (3, 2, -5), (2, 3, 7), (0, 0, 0), (0, 3, 0), (1, 1, 0)]:
        _same(Tensor.tril_indices(row, col, offset), torch.tril_indices(row, col, offset))
        _same(Tensor.triu_indices(row, col, offset), torch.triu_indices(row, col, offset))
    t = Tensor.triu_indices(3, 3, 1, dtype=dtypes.int64, device=Tensor([1]).device)
    assert t.dtype == dtypes.int64 and t.tolist() == torch.triu_indices(3, 3, 1).tolist()
    # the pairwise-distance idiom: the upper triangle of a distance matrix, flattened
    d = Tensor(A) @ Tensor(A).T
    i, j = Tensor.triu_indices(3, 3, 1)
    _same(d[i, j], (torch.from_numpy(A) @ torch.from_numpy(A).T)[tuple(torch.triu_indices(3, 3, 1))])
    with pytest.raises(RuntimeError):
        torch.tril_indices(-1, 3)
    with pytest.raises(ArgumentError, match="tril_indices: row and col must be non-negative, got -1 and 3"):
        Tensor.tril_indices(-1, 3)
    with pytest.raises(DTypeError, match="triu_indices: dtype must be an integer dtype"):
        Tensor.triu_indices(3, 3, dtype=dtypes.float32)


def test_cartesian_prod_combinations_and_broadcasting_as_torch():
    a, b, c = np.array([1, 2, 3]), np.array([4, 5]), np.array([-1.5, 0.5])
    for arrays in ([a, b], [a, b, np.array([7, 8])], [a], [a, np.zeros(0, np.int64)]):
        ours, theirs = [Tensor(x) for x in arrays], [torch.from_numpy(x) for x in arrays]
        _same(Tensor.cartesian_prod(*ours), torch.cartesian_prod(*theirs))
        _same(ours[0].cartesian_prod(*ours[1:]), torch.cartesian_prod(*theirs))
    # two dtypes promote (torch refuses them)
    _same(
        Tensor.cartesian_prod(Tensor(a), Tensor(c)), torch.cartesian_prod(torch.from_numpy(a).double(), torch.tensor(c))
    )
    with pytest.raises(ShapeError, match=r"cartesian_prod: needs one or more 1-D tensors, got \[\(\), \(3,\)\]"):
        Tensor.cartesian_prod(Tensor(1), Tensor(a))
    for n in (0, 1, 4):
        for r in (0, 1, 2, 3, 5):
            for replace in (False, True):
                x = np.arange(10, 10 + n, dtype=np.float32)
                _same(Tensor(x).combinations(r, replace), torch.combinations(torch.from_numpy(x), r, replace))
    with pytest.raises(ShapeError, match=r"combinations: needs a 1-D tensor, got shape \(\)"):
        Tensor(1).combinations()
    with pytest.raises(ArgumentError, match="combinations: r must be a non-negative int, got -1"):
        Tensor(a).combinations(-1)
    # broadcast_shapes (an int is a 1-D shape) and broadcast_tensors (views of each, promoted nothing)
    for shapes in ([(2, 1), (3,)], [(2, 1), (3,), 1], [], [(4, 0), (1,)], [5], [(1, 3, 1), (2, 1, 1), (4,)]):
        assert Tensor.broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))
    with pytest.raises(ShapeError, match=r"broadcast_shapes: shapes \[\(2,\), \(3,\)\] can't be broadcast together"):
        Tensor.broadcast_shapes((2,), (3,))
    arrays = [np.ones((2, 1), np.float32), np.arange(3, dtype=np.int32), np.array(7.0, np.float32)]
    _same(Tensor.broadcast_tensors(*[Tensor(x) for x in arrays]), torch.broadcast_tensors(*map(torch.tensor, arrays)))
    _same(
        Tensor(arrays[0]).broadcast_tensors(Tensor(arrays[1])), torch.broadcast_tensors(*map(torch.tensor, arrays[:2]))
    )
    with pytest.raises(ShapeError, match=r"broadcast_tensors: shapes \[\(2,\), \(3,\)\] can't be broadcast"):
        Tensor.broadcast_tensors(Tensor([1, 2]), Tensor([1, 2, 3]))


def test_unravel_index_as_torch():
    for indices, shape in [
        ([5, 0, 3], (2, 3)),
        ([[7, 23], [0, 11]], (2, 3, 4)),
        ([-1, -7, 6, 13], (2, 3)),
        (4, (2, 3)),
        (4, 5),
        ([], (2, 3)),
        ([2**33 + 5], (2**20, 2**20)),
    ]:
        index = np.array(indices, np.int64)
        _same(Tensor(index).unravel_index(shape), torch.unravel_index(torch.from_numpy(index), shape))
        _same(Tensor.unravel_index(Tensor(index), shape), torch.unravel_index(torch.from_numpy(index), shape))
    # the argmax idiom: the coordinates of the maximum; the index's dtype (torch: int64)
    rows, cols = Tensor(A).argmax().unravel_index(A.shape)
    assert (rows.item(), cols.item()) == np.unravel_index(A.argmax(), A.shape)
    assert rows.dtype == dtypes.int32 and Tensor([1], dtype=dtypes.int16).unravel_index((2, 3))[0].dtype == dtypes.int16
    with pytest.raises(TypeError, match="unravel_index: the indices must be an integer tensor, got dtypes.float"):
        Tensor([1.0]).unravel_index((2, 3))
    with pytest.raises(ArgumentError, match=r"unravel_index: shape must hold positive ints, got \(2, -1\)"):
        Tensor([1]).unravel_index((2, -1))


def test_trapezoid_trapz_and_cumulative_trapezoid_as_torch():
    y = RNG.standard_normal((3, 5)).astype(np.float32)
    x1 = np.cumsum(RNG.random(5)).astype(np.float32)
    x2 = np.cumsum(RNG.random((3, 5)), axis=1).astype(np.float32)
    cases = [
        (y, (), {}),
        (y, (), {"dx": 0.25}),
        (y, (), {"dx": 2}),
        (y, (x1,), {}),
        (y, (x2,), {}),
        (y, (x2[0],), {"dim": 1}),
        (y, (np.cumsum(RNG.random(3)).astype(np.float32),), {"dim": 0}),
        (y, (), {"dim": -2, "dx": 3.0}),
        (np.array([1, 2, 3]), (), {}),
        (np.array([1, 2, 3]), (np.array([0, 1, 3]),), {}),
        (np.array([1, 2, 3]), (), {"dx": 2}),
        (y.astype(np.float16), (), {"dx": 2.0}),
        (y.astype(np.float64), (x1,), {}),
        (np.array([4.0], np.float32), (), {}),
        (np.zeros((2, 0), np.float32), (), {}),
        (np.zeros((2, 0), np.float32), (), {"dim": 0}),
    ]
    for data, x, kwargs in cases:
        for name in ("trapezoid", "cumulative_trapezoid", "trapz"):
            if name == "trapz" and "dx" in kwargs and x:
                continue
            ours = getattr(Tensor(data), name)(*map(Tensor, x), **kwargs)
            theirs = getattr(torch, name)(torch.from_numpy(data), *map(torch.from_numpy, x), **kwargs)
            _same(ours, theirs, atol=1e-3 if data.dtype == np.float16 else 1e-5)
    # the gradient flows to the samples and the points
    ys, xs = Tensor(y, requires_grad=True), Tensor(x2, requires_grad=True)
    tys, txs = torch.tensor(y, requires_grad=True), torch.tensor(x2, requires_grad=True)
    ys.trapezoid(xs).sum().backward()
    torch.trapezoid(tys, txs).sum().backward()
    _same(ys.grad, tys.grad)
    _same(xs.grad, txs.grad)
    for bad, error, message in [
        (
            lambda: Tensor(y).trapezoid(Tensor(x1), dx=1.0),
            ArgumentError,
            "trapezoid: give the points x or their spacing",
        ),
        (lambda: Tensor(y).trapezoid(Tensor(x1[:4])), ShapeError, "trapezoid: x needs one coordinate per sample of y"),
        (lambda: Tensor([True, False]).trapezoid(), DTypeError, "trapezoid: bool samples"),
        (lambda: Tensor(1.0).cumulative_trapezoid(), ShapeError, "cumulative_trapezoid: needs a tensor with at least"),
    ]:
        with pytest.raises(error, match=message):
            bad()


def test_where_of_a_condition_alone_is_nonzero_as_tuple_as_torch():
    for cond in (A > 0, np.array([0, 3, 0, -1]), np.array(True), np.array(0.0), np.zeros((2, 0), bool)):
        _same(Tensor.where(Tensor(cond)), torch.where(torch.from_numpy(np.asarray(cond))))
        _same(Tensor(cond).where(), torch.where(torch.from_numpy(np.asarray(cond))))
    # tinygrad's three-argument form is unchanged
    _same(Tensor(A > 0).where(Tensor(A), 0.0), torch.where(torch.from_numpy(A > 0), torch.from_numpy(A), 0.0))
    with pytest.raises(TypeError, match=r"where: give both values \(cond.where\(x, y\)\), or neither"):
        Tensor(A > 0).where(1.0)


def test_torch_keywords_of_ported_training_programs():
    # a DDPM's `torch.linspace(start=, end=, steps=)`, a SimCLR view's `torch.flip(x, dims=[-1])`, `permute(dims=)`
    # and torch.concat / torch.concatenate, as torch spells them
    x, tx = Tensor(A), torch.tensor(A)
    _same(x.flip(dims=[-1]), tx.flip(dims=[-1]))
    _same(Tensor.flip(x, dims=(0, 1)), torch.flip(tx, dims=(0, 1)))
    _same(x.permute(dims=(1, 0)), tx.permute(dims=(1, 0)))
    _same(Tensor.permute(x[None], dims=[2, 0, 1]), torch.permute(tx[None], dims=[2, 0, 1]))
    _same(Tensor.linspace(start=1e-4, end=0.02, steps=50), torch.linspace(start=1e-4, end=0.02, steps=50), atol=1e-9)
    _same(Tensor.linspace(0, end=2, steps=3, dtype=dtypes.float64), torch.linspace(0, end=2, steps=3).double())
    _same(Tensor.concat([x, Tensor(B)], dim=1), torch.concat([tx, torch.tensor(B)], dim=1))
    _same(Tensor.concatenate((x, Tensor(B))), torch.concatenate((tx, torch.tensor(B))))
    for bad in (
        lambda: x.flip(0, dims=[1]),
        lambda: x.permute((1, 0), dims=(1, 0)),
        lambda: Tensor.linspace(0, 1, 3, end=2),
    ):
        with pytest.raises(TypeError):
            bad()


I = np.array([[0, 1, 2, 0], [1, 0, 2, 1], [2, 2, 0, 0]])
P = np.abs(A) + 0.5
# (name, a call given uopkit's Tensor as `T` and a maker of tensors `t`, or torch and torch.from_numpy)
TORCH_KEYWORD_CALLS = [
    ("split", lambda T, t: t(A).split(split_size=2, dim=1)),
    ("split", lambda T, t: T.split(tensor=t(A), split_size_or_sections=[1, 3], dim=1)),
    ("expand", lambda T, t: t(A[:1]).expand(size=(3, 4))),
    ("broadcast_to", lambda T, t: T.broadcast_to(input=t(A[:1]), size=(3, 4))),
    ("tensor_split", lambda T, t: t(A).tensor_split(sections=2, dim=1)),
    ("tensor_split", lambda T, t: T.tensor_split(input=t(A), indices=[1, 3], dim=1)),
    ("pow", lambda T, t: t(P).pow(exponent=t(B))),
    ("pow", lambda T, t: T.pow(input=t(P), exponent=2.0)),
    ("pow", lambda T, t: T.pow(10000.0, t(B))),
    ("pow", lambda T, t: T.pow(self=2.0, exponent=t(B))),
    ("add", lambda T, t: t(A).add(other=t(B), alpha=2.0)),
    ("add", lambda T, t: T.add(input=t(A), other=t(B), alpha=0.5)),
    ("sub", lambda T, t: t(A).sub(other=t(B), alpha=2.0)),
    ("lt", lambda T, t: t(A).lt(other=t(B))),
    ("unfold", lambda T, t: t(A).unfold(dimension=1, size=2, step=1)),
    ("cat", lambda T, t: T.cat(tensors=[t(A), t(B)], dim=1)),
    ("stack", lambda T, t: T.stack(tensors=[t(A), t(B)], dim=1)),
    ("hstack", lambda T, t: T.hstack(tensors=[t(A), t(B)])),
    ("cumprod", lambda T, t: T.cumprod(input=t(A), dim=0)),
    ("gather", lambda T, t: T.gather(input=t(A), dim=1, index=t(I))),
    ("sum", lambda T, t: T.sum(input=t(A), dim=1, keepdim=True)),
    ("topk", lambda T, t: T.topk(input=t(A), k=2, dim=1)[0]),
    ("transpose", lambda T, t: T.transpose(input=t(A), dim0=0, dim1=1)),
    ("swapdims", lambda T, t: t(A).swapdims(dim0=0, dim1=1)),
    ("moveaxis", lambda T, t: T.moveaxis(input=t(A), source=0, destination=1)),
    ("scatter", lambda T, t: T.scatter(input=t(A), dim=1, index=t(I), src=t(B))),
    ("tril", lambda T, t: T.tril(input=t(A), diagonal=1)),
    ("outer", lambda T, t: t(A[0]).outer(vec2=t(B[0]))),
    ("dot", lambda T, t: T.dot(input=t(A[0]), tensor=t(B[0]))),
    ("tensordot", lambda T, t: T.tensordot(a=t(A), b=t(B.T), dims=1)),
    ("cdist", lambda T, t: T.cdist(x1=t(A), x2=t(B))),
    ("new_zeros", lambda T, t: t(A).new_zeros(size=(2, 2))),
    ("clone", lambda T, t: T.clone(input=t(A))),
    # torch.where's keywords, by its function and its method forms
    ("where", lambda T, t: T.where(condition=t(A) > 0, input=t(A), other=t(B))),
    ("where", lambda T, t: T.where(t(A) > 0, input=t(A), other=t(B))),
    ("where", lambda T, t: t(A).where(condition=t(A) > 0, other=t(B))),
    ("where", lambda T, t: t(A).where(t(A) > 0, other=t(B))),
    # numpy's axis= and keepdims=, which torch takes for dim= and keepdim=
    ("cat", lambda T, t: T.cat([t(A), t(B)], axis=1)),
    ("concatenate", lambda T, t: T.concatenate([t(A), t(B)], axis=1)),
    ("concat", lambda T, t: T.concat(tensors=[t(A), t(B)], axis=0)),
    ("stack", lambda T, t: T.stack([t(A), t(B)], axis=1)),
    ("squeeze", lambda T, t: t(A[:1]).squeeze(axis=0)),
    ("unsqueeze", lambda T, t: t(A).unsqueeze(axis=1)),
    ("gather", lambda T, t: t(A).gather(axis=1, index=t(I))),
    ("sort", lambda T, t: t(A).sort(axis=0)[0]),
    ("sum", lambda T, t: t(A).sum(1, keepdims=True)),
    ("amax", lambda T, t: t(A).amax(axis=0, keepdims=True)),
]


@pytest.mark.parametrize(
    "name,call", TORCH_KEYWORD_CALLS, ids=[f"{n}{i}" for i, (n, _) in enumerate(TORCH_KEYWORD_CALLS)]
)
def test_torch_keyword_names(name, call):
    mine = call(Tensor, lambda a: Tensor(a.astype(np.int32) if a.dtype == np.int64 else a))
    _same(mine, call(torch, torch.from_numpy))


def test_torch_keyword_names_with_our_own_name_too_raise():
    x = Tensor(A)
    for bad in (
        lambda: x.add(x, other=x),
        lambda: x.pow(2, exponent=3),
        lambda: Tensor.cumprod(x, input=x, dim=0),
        lambda: x.split(2, split_size=1),
        lambda: x.unfold(0, 2, 1, dimension=0),
        lambda: Tensor.cat([x, x], dim=0, axis=1),
        lambda: x.sum(0, keepdim=True, keepdims=True),
        lambda: x.where(x > 0, 1.0, other=x),
        lambda: Tensor.where(x > 0, input=x, other=x, condition=x > 0),
    ):
        with pytest.raises(TypeError, match="give one"):
            bad()
    # tinygrad's names keep working
    _same(x.split(sizes=2, dim=1), torch.from_numpy(A).split(2, dim=1))
    _same(x.unfold(dim=1, size=2, step=2), torch.from_numpy(A).unfold(1, 2, 2))


@pytest.mark.parametrize("name", ["hann", "hamming", "blackman", "bartlett", "kaiser"])
@pytest.mark.parametrize("periodic", [True, False])
def test_window_functions_as_torch(name: str, periodic: bool) -> None:
    # torch.hann_window & co (the frames of a signal before an FFT, torch.stft's window=) were missing
    for n in (0, 1, 2, 7, 16):
        _same(getattr(Tensor, f"{name}_window")(n, periodic), getattr(torch, f"{name}_window")(n, periodic), 1e-6)
    float64 = getattr(Tensor, f"{name}_window")(9, periodic, dtype="float64")
    _same(float64, getattr(torch, f"{name}_window")(9, periodic, dtype=torch.float64), 1e-12)
    assert getattr(Tensor, f"{name}_window")(4, requires_grad=True).is_leaf


def test_window_function_parameters_and_errors_as_torch() -> None:
    _same(Tensor.hamming_window(6, True, 0.6, 0.3), torch.hamming_window(6, True, 0.6, 0.3), 1e-6)
    _same(Tensor.hamming_window(6, alpha=0.5, beta=0.5), torch.hann_window(6), 1e-6)
    _same(Tensor.kaiser_window(6, False, 5.0), torch.kaiser_window(6, False, 5.0), 1e-6)
    with pytest.raises(RuntimeError, match="window_length"):
        Tensor.hann_window(-1)
    with pytest.raises(RuntimeError, match="float"):
        Tensor.hann_window(4, dtype=dtypes.int64)
    with pytest.raises(TypeError, match="window_length"):
        Tensor.bartlett_window(4.0)


def test_out_argument_writes_torchs_result_into_the_given_tensor():
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    for dtype, tdtype in [(dtypes.float32, torch.float32), (dtypes.float64, torch.float64)]:
        ours, theirs = Tensor.empty(2, dtype=dtype), torch.empty(2, dtype=tdtype)
        assert Tensor.add(Tensor(a), Tensor(b), alpha=2, out=ours) is ours
        torch.add(torch.tensor(a), torch.tensor(b), alpha=2, out=theirs)
        assert ours.dtype == dtype and ours.tolist() == theirs.tolist()
    # through a view into its base, and an out aliasing an input
    base = Tensor.zeros(3, 2).contiguous()
    Tensor.mul(Tensor(a), Tensor(b), out=base[1])
    assert base.tolist() == [[0.0, 0.0], [3.0, 8.0], [0.0, 0.0]]
    x = Tensor([-1.0, 0.5, 2.0])
    Tensor.clamp(x, 0, 1, out=x)
    assert x.tolist() == [0.0, 0.5, 1.0]
    # several results: a tuple of as many, returned as the op's own kind
    m = np.array([[1.0, 5.0], [3.0, 2.0]], np.float32)
    values, indices = Tensor.empty(2), Tensor.empty(2, dtype=dtypes.int64)
    got = Tensor.max(Tensor(m), 1, out=(values, indices))
    want = torch.max(torch.tensor(m), 1)
    assert got.values is values and got.indices is indices
    assert values.tolist() == want.values.tolist() and indices.tolist() == want.indices.tolist()
    out = Tensor.empty(4)
    Tensor.cat([Tensor(a), Tensor(b)], out=out)
    assert out.tolist() == torch.cat([torch.tensor(a), torch.tensor(b)]).tolist()
    # resized as torch's: silently from empty, with a warning when it held elements
    empty, full = Tensor.empty(0), Tensor.empty(5)
    Tensor.sub(Tensor(a), Tensor(b), out=empty)
    with pytest.warns(UserWarning, match="resized"):
        Tensor.sub(Tensor(a), Tensor(b), out=full)
    assert empty.tolist() == full.tolist() == [-2.0, -2.0]
    assert Tensor.add(Tensor(a), 1, out=None).tolist() == [2.0, 3.0]


def test_out_argument_errors_are_torchs():
    a = Tensor([1.0, 2.0])
    # torch: "result type Float can't be cast to the desired output type Long"
    with pytest.raises(RuntimeError, match="can't be cast"):
        Tensor.add(a, a, out=Tensor.empty(2, dtype=dtypes.int64))
    with pytest.raises(RuntimeError, match="autograd"):
        Tensor.mul(Tensor([1.0, 2.0], requires_grad=True), 2, out=Tensor.empty(2))
    with pytest.raises(TypeError, match="must be a Tensor"):
        Tensor.add(a, a, out=[Tensor.empty(2)])
    with pytest.raises(TypeError, match="tuple of 2"):
        Tensor.max(Tensor([[1.0]]), 1, out=Tensor.empty(1))
    with pytest.raises(TypeError, match="out"):
        Tensor.reshape(a, 2, out=Tensor.empty(2))
    base = Tensor.zeros(3, 2).contiguous()
    with pytest.raises(ShapeError, match="view"):
        Tensor.add(a, a, out=base[:, 0])
    # under no_grad a result of inputs that require grad is written
    from uopkit import no_grad

    with no_grad():
        out = Tensor.empty(2)
        Tensor.mul(Tensor([1.0, 2.0], requires_grad=True), 2, out=out)
    assert out.tolist() == [2.0, 4.0]


def test_torch_dtype_and_namespace_names_spelled_on_tensor():
    # a port renames `torch.` to `Tensor.`: `dtype=torch.long` -> `dtype=Tensor.long` (the cast method stands for
    # torch's dtype of that name), `torch.float32` -> `Tensor.float32`, `torch.linalg.qr` -> `Tensor.linalg.qr`
    for ours, theirs in [
        (Tensor.long, torch.long),
        (Tensor.int, torch.int),
        (Tensor.short, torch.short),
        (Tensor.char, torch.int8),
        (Tensor.byte, torch.uint8),
        (Tensor.bool, torch.bool),
        (Tensor.half, torch.half),
        (Tensor.bfloat16, torch.bfloat16),
        (Tensor.float, torch.float),
        (Tensor.double, torch.double),
        (Tensor.float32, torch.float32),
        (Tensor.int64, torch.int64),
        (Tensor.uint8, torch.uint8),
    ]:
        assert Tensor.zeros(2, dtype=ours).dtype == to_dtype(theirs)
        assert Tensor([1.5]).to(ours).tolist() == torch.tensor([1.5]).to(theirs).tolist()
    a = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    np.testing.assert_allclose(Tensor.linalg.det(Tensor(a)).numpy(), torch.linalg.det(torch.tensor(a)).numpy(), 1e-6)
    assert Tensor.nn.functional.relu(Tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
    # torch's memory formats: `torch.channels_last_3d` -> `Tensor.channels_last_3d` (a 3-D net's port)
    x = Tensor.ones(1, 2, 2, 2, 2)
    for name in ("channels_last", "channels_last_3d", "contiguous_format", "preserve_format"):
        assert getattr(Tensor, name) is getattr(uopkit, name)
    assert isinstance(Tensor.channels_last_3d, Tensor.memory_format)
    assert x.contiguous(memory_format=Tensor.channels_last_3d).tolist() == x.tolist()
    # and the gradient switches: `with torch.inference_mode():` -> `with Tensor.inference_mode():`
    w = Tensor([1.0, 2.0], requires_grad=True)
    for switch in (Tensor.inference_mode(), Tensor.set_grad_enabled(False)):
        with switch:
            assert not (w * 2).requires_grad and not Tensor.is_grad_enabled()
    with Tensor.no_grad(), Tensor.enable_grad():
        assert (w * 2).requires_grad and Tensor.is_grad_enabled()
    assert Tensor.is_inference_mode_enabled() is torch.is_inference_mode_enabled()
    with pytest.raises(AttributeError, match="nope"):
        _ = Tensor.nope
    with pytest.raises(AttributeError):
        _ = Tensor([1.0]).float32  # (the class's names only: an instance has no dtype attributes)


def test_alpha_and_value_are_keyword_only_as_torch():
    # torch's add_/sub_/rsub take alpha, addcmul/addcdiv value, by keyword only: `t.add_(g, 2.0)` is a TypeError
    # (it used to add 2 * g here), while the deprecated number-first forms still run
    a, b, v = Tensor(A), Tensor(B), Tensor(V)
    ta, tb, tv = torch.from_numpy(A.copy()), torch.from_numpy(B), torch.from_numpy(V)
    calls = [
        lambda m, x, y, z: x.add_(y, 2.0),
        lambda m, x, y, z: x.sub_(y, 2.0),
        lambda m, x, y, z: m.rsub(x, y, 2.0),
        lambda m, x, y, z: x.addcmul(y, z, 0.5),
        lambda m, x, y, z: x.addcdiv(y, z, 0.5),
        lambda m, x, y, z: x.addcmul_(y, z, 0.5),
        lambda m, x, y, z: m.addcmul(x, y, z, 0.5),
        lambda m, x, y, z: m.addcdiv(x, y, z, 0.5),
    ]
    for call in calls:
        with pytest.raises(TypeError):
            call(torch, ta, tb, tv)
        with pytest.raises(TypeError, match=r"(alpha|value)= as a keyword|positional argument"):
            call(Tensor, a, b, v)
    # the keyword forms, `other=` too, as torch's
    _same(Tensor(A).add_(other=b, alpha=2), torch.from_numpy(A.copy()).add_(other=tb, alpha=2))
    _same(Tensor.rsub(a, b, alpha=2), torch.rsub(ta, tb, alpha=2))
    _same(a.addcmul(b, v, value=0.5), ta.addcmul(tb, tv, value=0.5))


def test_deprecated_number_first_overloads_warn_once(monkeypatch):
    # torch warns (UserWarning) about its deprecated number-first overloads, once; each of ours warns once too
    from uopkit.tensor import elementwise

    monkeypatch.setattr(elementwise, "_WARNED_NUMBER_FIRST", set())
    a, b = Tensor(A), Tensor(B)
    with pytest.warns(UserWarning, match=r"add_: the number-first form add_\(alpha, other\) is deprecated"):
        a.add_(-0.5, b)
    with pytest.warns(UserWarning, match=r"addcmul: the number-first form addcmul\(value, tensor1, tensor2\)"):
        a.addcmul(0.5, b, b)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.add_(-0.5, b)  # (no second warning)
        a.add_(b, alpha=-0.5)
        a.addcmul(b, b, value=0.5)

"""Complex tensors, what FFT programs do next (against torch: values and gradients): creation with a complex dtype,
writes (setitem, in-place ops) with autograd through them, a real tensor on the left of a complex one, cat/stack and
einsum of complex operands."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes, fft
from uopkit.dtype import DTypeError
from uopkit.tensor.complex_tensor import ComplexTensor

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _c(shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _r(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _close(ours, theirs, rtol=2e-5, atol=2e-5):
    if isinstance(theirs, torch.Tensor):
        theirs = theirs.detach().resolve_conj().numpy()
    got = np.asarray(ours.numpy() if hasattr(ours, "numpy") else ours)
    assert got.shape == np.shape(theirs), (got.shape, np.shape(theirs))
    assert got.dtype == np.asarray(theirs).dtype, (got.dtype, np.asarray(theirs).dtype)
    scale = max(1.0, float(np.abs(theirs).max())) if np.size(theirs) else 1.0
    np.testing.assert_allclose(got, theirs, rtol=rtol, atol=atol * scale)


# ---- creation with a complex dtype ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "cfloat", "torch"])
def test_constructors_take_a_complex_dtype(dtype):
    ours = {"torch": torch.complex64, "complex128": "complex128"}.get(dtype) or getattr(dtypes, dtype)
    theirs = {"complex64": torch.complex64, "complex128": torch.complex128, "cfloat": torch.cfloat}.get(
        dtype, torch.complex64
    )
    _close(Tensor.zeros(2, 3, dtype=ours), torch.zeros(2, 3, dtype=theirs))
    _close(Tensor.ones((2,), dtype=ours), torch.ones((2,), dtype=theirs))
    _close(Tensor.full((2, 2), 1.5 - 2j, dtype=ours), torch.full((2, 2), 1.5 - 2j, dtype=theirs))
    _close(Tensor.full((3,), 4, dtype=ours), torch.full((3,), 4, dtype=theirs))
    _close(Tensor.eye(2, 3, dtype=ours), torch.eye(2, 3, dtype=theirs))
    x = Tensor([1.0, 2.0])
    _close(x.zeros_like(dtype=ours), torch.zeros_like(torch.tensor([1.0, 2.0]), dtype=theirs))
    _close(x.ones_like(dtype=ours), torch.ones_like(torch.tensor([1.0, 2.0]), dtype=theirs))
    _close(x.full_like(3j, dtype=ours), torch.full_like(torch.tensor([1.0, 2.0]), 3j, dtype=theirs))
    for t in (Tensor.empty(2, 2, dtype=ours), Tensor.rand(2, 2, dtype=ours), Tensor.randn(2, 2, dtype=ours)):
        assert isinstance(t, ComplexTensor) and t.shape == (2, 2)
        assert str(t.dtype).removeprefix("dtypes.") == str(theirs).removeprefix("torch.")


def test_full_of_a_complex_number_and_the_like_forms_of_a_complex_tensor():
    _close(Tensor.full((2,), 1 + 2j), torch.full((2,), 1 + 2j))
    z = Tensor.full((2, 2), 1 + 2j)
    tz = torch.full((2, 2), 1 + 2j)
    _close(z.zeros_like(), torch.zeros_like(tz))
    _close(z.ones_like(), torch.ones_like(tz))
    _close(z.full_like(-1j), torch.full_like(tz, -1j))
    _close(Tensor.zeros_like(z), torch.zeros_like(tz))
    assert z.randn_like().dtype == z.rand_like().dtype == dtypes.complex64


def test_complex_random_parts_follow_torch():
    # randn: each part N(0, 1/2), so E|z|^2 = 1 (torch's complex randn); rand: each part U[0, 1)
    n = 200_000
    z = Tensor.randn(n, dtype=dtypes.complex64).numpy()
    tz = torch.randn(n, dtype=torch.complex64).numpy()
    for ours, theirs in ((z.real, tz.real), (z.imag, tz.imag)):
        assert abs(ours.std() - theirs.std()) < 0.01 and abs(ours.mean()) < 0.01
    u = Tensor.rand(n, dtype=dtypes.complex128).numpy()
    assert u.dtype == np.complex128
    for part in (u.real, u.imag):
        assert part.min() >= 0 and part.max() < 1 and abs(part.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(z.real, z.imag)[0, 1]) < 0.01


def test_complex_constructors_make_leaves_with_requires_grad():
    z = Tensor.zeros(3, dtype=dtypes.complex64, requires_grad=True)
    tz = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    w = _c((3,))
    assert z.requires_grad and z.is_leaf
    ((z + Tensor.tensor(w)) * 2).abs().sum().backward()
    ((tz + torch.tensor(w)) * 2).abs().sum().backward()
    _close(z.grad, tz.grad)
    r = Tensor.randn(2, dtype=dtypes.complex64, requires_grad=True)
    assert r.requires_grad and r.is_leaf


def test_real_dtypes_and_errors_unchanged():
    assert Tensor.zeros(2).dtype == dtypes.float32 and Tensor.full((2,), 3).dtype == dtypes.int32
    with pytest.raises(ValueError, match="complex dtype"):
        Tensor.arange(3, dtype=dtypes.complex64)
    with pytest.raises(TypeError, match="Tensor.tensor"):
        Tensor([1 + 2j])
    with pytest.raises(ValueError, match="unknown dtype"):
        Tensor.zeros(2, dtype="complex32")


# ---- writes ---------------------------------------------------------------------------------------------------------


def test_setitem_basic_and_advanced_indexing():
    v, w = _c((3, 4)), _c((4,))
    z, tz = Tensor.tensor(v), torch.tensor(v)
    z[0] = 5j
    tz[0] = 5j
    z[1, :2] = Tensor.tensor(w[:2])
    tz[1, :2] = torch.tensor(w[:2])
    z[Tensor([2, 0]), Tensor([3, 1])] = 7.0
    tz[torch.tensor([2, 0]), torch.tensor([3, 1])] = 7.0
    z[:, 2] = Tensor([1.0, 2.0, 3.0])
    tz[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    z[z.abs() > 2] = 0
    tz[tz.abs() > 2] = 0
    _close(z, tz)


def test_in_place_ops_match_torch():
    v, w, x = _c((3, 4)), _c((4,)), _r((4,))
    ops = [
        lambda a, b, r: a.__iadd__(b),
        lambda a, b, r: a.__isub__(r),
        lambda a, b, r: a.__imul__(b),
        lambda a, b, r: a.__itruediv__(b),
        lambda a, b, r: a.__imul__(2 - 1j),
        lambda a, b, r: a.mul_(r),
        lambda a, b, r: a.add_(b, alpha=2),
        lambda a, b, r: a.zero_(),
        lambda a, b, r: a.copy_(b),
        lambda a, b, r: a.fill_(1 + 1j),
    ]
    for op in ops:
        z, tz = Tensor.tensor(v).realize(), torch.tensor(v)
        view, tview = z[1], tz[1]
        out = op(z, Tensor.tensor(w), Tensor(x))
        op(tz, torch.tensor(w), torch.tensor(x))
        assert out is z
        _close(z, tz, rtol=1e-5, atol=1e-5)
        _close(view, tview, rtol=1e-5, atol=1e-5)  # a view sees the write, as torch's


def test_write_into_a_real_tensor_refuses_a_complex_result():
    t = Tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match="complex64"):
        t += Tensor.tensor([1j, 2j])
    with pytest.raises(RuntimeError):
        torch.tensor([1.0, 2.0]).add_(torch.tensor([1j, 2j]))


def test_view_as_complex_writes_through_to_the_real_tensor():
    x = _r((3, 2))
    xs, tx = Tensor(x).realize(), torch.tensor(x)
    z, tz = Tensor.view_as_complex(xs), torch.view_as_complex(tx)
    z[0] = 1 + 1j
    tz[0] = 1 + 1j
    z *= 2
    tz *= 2
    _close(xs, tx)
    _close(z, tz)


def test_gradient_through_writes_fno_spectral_conv():
    # FNO's SpectralConv2d: out_ft = zeros(complex); out_ft[:, :, :m1, :m2] = einsum(x_ft[...], w); irfft2(out_ft)
    b, c, h, w, m = 2, 3, 8, 8, 3
    x, wr, wi = _r((b, c, h, w)), _r((c, c, m, m)), _r((c, c, m, m))
    X, WR, WI = (Tensor(a, requires_grad=True) for a in (x, wr, wi))
    TX, TWR, TWI = (torch.tensor(a, requires_grad=True) for a in (x, wr, wi))

    xf = fft.rfft2(X)
    out = Tensor.zeros(b, c, h, w // 2 + 1, dtype=dtypes.complex64)
    out[:, :, :m, :m] = Tensor.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], Tensor.complex(WR, WI))
    y = fft.irfft2(out, s=(h, w))
    txf = torch.fft.rfft2(TX)
    tout = torch.zeros(b, c, h, w // 2 + 1, dtype=torch.cfloat)
    tout[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", txf[:, :, :m, :m], torch.complex(TWR, TWI))
    ty = torch.fft.irfft2(tout, s=(h, w))
    _close(y, ty, rtol=1e-4, atol=1e-4)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for ours, theirs in ((X, TX), (WR, TWR), (WI, TWI)):
        _close(ours.grad, theirs.grad, rtol=1e-3, atol=1e-3)


def test_gradient_through_in_place_ops_on_a_complex_leaf_copy():
    v, w = _c((4,)), _c((4,))
    z = Tensor.tensor(v).requires_grad_()
    tz = torch.tensor(v, requires_grad=True)
    y, ty = z.clone(), tz.clone()
    y *= Tensor.tensor(w)
    ty *= torch.tensor(w)
    y[1] = 3j
    ty[1] = 3j
    y += 1
    ty += 1
    y.abs().pow(2).sum().backward()
    ty.abs().pow(2).sum().backward()
    _close(y, ty)
    _close(z.grad, tz.grad, rtol=1e-4, atol=1e-4)


# ---- a real tensor on the left --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "matmul"])
@pytest.mark.parametrize("real", ["float32", "float64", "int32", "float16"])
def test_real_tensor_left_of_a_complex_one(op, real):
    v = _c((3, 3))
    x = (RNG.integers(1, 5, (3, 3)) if real == "int32" else _r((3, 3))).astype(real)
    if op == "matmul" and real in ("int32", "float16"):
        x = x.astype(np.float32)
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@"}[op]
    zr, zt = Tensor.tensor(v).requires_grad_(), torch.tensor(v, requires_grad=True)
    xr, xt = Tensor(x), torch.tensor(x)
    if op == "matmul":
        # (torch's matmul refuses a real operand with a complex one; here it is the product with the real one as
        # complex, as `z @ t` is)
        xt = xt.to(torch.complex128 if real == "float64" else torch.complex64)
    ours = eval(f"xr {sym} zr")
    theirs = eval(f"xt {sym} (zt.to(torch.complex128) if op == 'matmul' and real == 'float64' else zt)")
    _close(ours, theirs, rtol=2e-3 if real == "float16" else 2e-5, atol=2e-3 if real == "float16" else 2e-5)
    _close(getattr(xr, op)(zr), theirs, rtol=2e-3, atol=2e-3)
    ours.abs().sum().backward()
    theirs.abs().sum().backward()
    _close(zr.grad, zt.grad, rtol=2e-3, atol=2e-3)


def test_real_left_with_alpha_and_a_window():
    v, x = _c((2, 8)), _r((2, 8))
    _close(Tensor(x).add(Tensor.tensor(v), alpha=2), torch.tensor(x).add(torch.tensor(v), alpha=2))
    _close(Tensor(x).sub(Tensor.tensor(v), alpha=3), torch.tensor(x).sub(torch.tensor(v), alpha=3))
    win = Tensor.hann_window(5)
    _close(win * fft.rfft(Tensor(x)), torch.hann_window(5) * torch.fft.rfft(torch.tensor(x)))


def test_real_left_ops_without_complex_support_say_so():
    z, t = Tensor.tensor([1j, 2.0]), Tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="maximum"):
        t.maximum(z)
    with pytest.raises(RuntimeError, match="div"):
        t.div(z, rounding_mode="floor")


# ---- cat, stack, einsum ---------------------------------------------------------------------------------------------


def test_cat_and_stack_of_complex_and_real_tensors():
    a, b, x = _c((2, 3)), _c((2, 3), np.complex128), _r((2, 3))
    A, B, X = Tensor.tensor(a), Tensor.tensor(b), Tensor(x)
    ta, tb, tx = torch.tensor(a), torch.tensor(b), torch.tensor(x)
    _close(Tensor.cat([A, X]), torch.cat([ta, tx]))
    _close(Tensor.cat([X, A], 1), torch.cat([tx, ta], 1))
    _close(Tensor.cat([A, B], dim=-1), torch.cat([ta, tb], dim=-1))
    _close(Tensor.cat(A, A), torch.cat([ta, ta]))
    _close(X.cat(A), torch.cat([tx, ta]))
    _close(Tensor.stack([A, X, A], dim=1), torch.stack([ta, tx, ta], dim=1))
    _close(Tensor.stack((X, A)), torch.stack((tx, ta)))


def test_cat_and_stack_gradients():
    a, x = _c((2, 3)), _r((2, 3))
    A, X = Tensor.tensor(a).requires_grad_(), Tensor(x, requires_grad=True)
    ta, tx = torch.tensor(a, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = Tensor.stack([Tensor.cat([A, X], 1), Tensor.cat([X, A], 1)])
    ty = torch.stack([torch.cat([ta, tx], 1), torch.cat([tx, ta], 1)])
    (y * Tensor(np.arange(12, dtype=np.float32).reshape(1, 1, 12)[..., :6])).abs().sum().backward()
    (ty * torch.arange(6, dtype=torch.float32)).abs().sum().backward()
    _close(A.grad, ta.grad, rtol=1e-4, atol=1e-4)
    _close(X.grad, tx.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "formula,shapes,kinds",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)], "cc"),
        ("ij,jk->ik", [(2, 3), (3, 4)], "rc"),
        ("ij,kj,kl->il", [(2, 3), (4, 3), (4, 5)], "rcc"),
        ("ij,kj,kl->il", [(2, 3), (4, 3), (4, 5)], "ccc"),
        ("bi,bi->b", [(3, 4), (3, 4)], "cr"),
        ("ii->i", [(3, 3)], "c"),
        ("...i,i", [(2, 3, 4), (4,)], "cc"),
    ],
)
def test_einsum_of_complex_operands(formula, shapes, kinds):
    arrays = [_c(s) if k == "c" else _r(s) for s, k in zip(shapes, kinds, strict=True)]
    ours = [Tensor.tensor(a).requires_grad_() if k == "c" else Tensor(a, requires_grad=True) for a, k in
            zip(arrays, kinds, strict=True)]  # fmt: skip
    # (torch's einsum refuses real operands with complex ones: here they count as complex ones with no imaginary
    # part, as in `z @ t`)
    theirs = [torch.tensor(a.astype(np.complex64), requires_grad=True) for a in arrays]
    y, ty = Tensor.einsum(formula, *ours), torch.einsum(formula, *theirs)
    y.abs().sum().backward()
    ty.abs().sum().backward()
    _close(y, ty, rtol=1e-4, atol=1e-4)
    _close(Tensor.einsum(formula, ours), ty, rtol=1e-4, atol=1e-4)  # (the operands as one list)
    for o, t, k in zip(ours, theirs, kinds, strict=True):
        _close(o.grad, t.grad if k == "c" else t.grad.real, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "form",
    ["1j * t", "t * 1j", "t + (1 + 2j)", "2j - t", "t - 2j", "t / (1 + 1j)", "(3 - 1j) / t", "t.double() * 1j",
     "t.int() * 1j"],
)  # fmt: skip
def test_a_python_complex_number_with_a_real_tensor(form):
    # S4D's `-exp(a) + 1j * b`, Hyena's `exp(-1j * f * w)`: a complex number makes the real tensor complex, as torch's
    a = _r((3, 4)) + 2.0
    t, tt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    ours, theirs = eval(form, {"t": t, "np": np}), eval(form, {"t": tt, "np": np})
    _close(ours, theirs)
    if "int" not in form:
        (ours.abs() + ours.real * 2).sum().backward()
        (theirs.abs() + theirs.real * 2).sum().backward()
        _close(t.grad, tt.grad)


def test_a_complex_number_in_other_real_ops_is_refused_by_name():
    with pytest.raises(TypeError, match="maximum: a real Tensor .* complex number"):
        Tensor([1.0]).maximum(1j)

"""Complex tensors (tensor/complex_tensor.py) and uopkit.fft against torch: values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes, fft, linalg
from uopkit.dtype import DTYPES_BY_NAME, least_upper_dtype
from uopkit.tensor.complex_tensor import ComplexOpError, ComplexTensor

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


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


# ---- dtypes ---------------------------------------------------------------------------------------------------------


def test_complex_dtypes_and_real_tables_unchanged():
    c64, c128 = dtypes.complex64, dtypes.complex128
    assert dtypes.cfloat is c64 and dtypes.cdouble is c128
    assert (c64.is_complex, c64.itemsize, c128.itemsize, c64.to_real(), c128.to_real()) == (
        True, 8, 16, dtypes.float32, dtypes.float64,
    )  # fmt: skip
    assert not c64.is_floating_point and c64.is_signed
    assert not dtypes.float32.is_complex
    assert c64 not in dtypes.all and "complex64" not in DTYPES_BY_NAME
    assert least_upper_dtype(dtypes.int32, dtypes.float16) == dtypes.float16
    assert repr(c64) == "dtypes.complex64"


# ---- creation and conversion ----------------------------------------------------------------------------------------


def test_creation_matches_torch():
    re, im = _r((2, 3)), _r((2, 3))
    z = Tensor.complex(Tensor(re), Tensor(im))
    assert isinstance(z, ComplexTensor) and z.is_complex() and z.dtype == dtypes.complex64 and z.shape == (2, 3)
    _close(z, torch.complex(torch.tensor(re), torch.tensor(im)))
    _close(Tensor.polar(Tensor(np.abs(re)), Tensor(im)), torch.polar(torch.tensor(np.abs(re)), torch.tensor(im)))
    x = _r((4, 2))
    _close(Tensor.view_as_complex(Tensor(x)), torch.view_as_complex(torch.tensor(x)))
    zc = _c((3,))
    _close(Tensor.view_as_real(Tensor.tensor(zc)), torch.view_as_real(torch.tensor(zc)))
    assert Tensor.tensor([1 + 2j, 3]).tolist() == torch.tensor([1 + 2j, 3]).tolist()
    assert Tensor.tensor([1 + 2j, 3]).dtype == dtypes.complex64
    z128 = Tensor.from_numpy(_c((2,), np.complex128))
    assert z128.dtype == dtypes.complex128 and z128.numpy().dtype == np.complex128
    assert Tensor.as_tensor(np.array([1j], np.complex64)).item() == 1j
    assert Tensor([1.0, 2.0]).cfloat().tolist() == [1 + 0j, 2 + 0j]
    assert Tensor([1.0]).cdouble().dtype == dtypes.complex128
    assert Tensor([1.0]).to(dtypes.complex64).dtype == dtypes.complex64
    assert Tensor([1.0]).to("complex128").dtype == dtypes.complex128
    assert Tensor([1.0]).to(torch.complex64).dtype == dtypes.complex64
    assert Tensor([1.0]).to(dtype=torch.complex128).dtype == dtypes.complex128
    assert repr(Tensor.tensor([1 + 2j, 2 - 3j])) == "Tensor([1.+2.j, 2.-3.j])"
    assert Tensor.tensor([[1 + 2j]]).item() == 1 + 2j


def test_tensor_constructor_points_to_complex_constructors():
    for data in ([1 + 2j], np.array([1j])):
        with pytest.raises(TypeError, match="Tensor.tensor"):
            Tensor(data)


# ---- arithmetic -----------------------------------------------------------------------------------------------------


def _operand(kind):
    # (uopkit operand, torch operand)
    if kind == "complex":
        v = _c((3, 1))
        return Tensor.tensor(v), torch.tensor(v)
    if kind == "real":
        v = _r((4,))
        return Tensor(v), torch.tensor(v)
    if kind == "real64":
        v = _r((4,), np.float64)
        return Tensor(v), torch.tensor(v)
    if kind == "int":
        v = np.arange(1, 5, dtype=np.int32)
        return Tensor(v), torch.tensor(v)
    number = {"pycomplex": 2 - 1.5j, "float": 0.75, "intscalar": 3}[kind]
    return number, number


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv"])
@pytest.mark.parametrize("kind", ["complex", "real", "real64", "int", "pycomplex", "float", "intscalar"])
def test_binary_ops_with_broadcasting_and_scalars(op, kind):
    v = _c((4,))
    z, tz = Tensor.tensor(v), torch.tensor(v)
    o, to = _operand(kind)
    fwd, rev = f"__{op}__", f"__r{op}__"
    _close(getattr(z, fwd)(o), getattr(tz, fwd)(to))
    if isinstance(o, Tensor):
        # the real (or complex) tensor on the left: its own operator (the real one answers with the complex op)
        _close(getattr(o, fwd)(z), getattr(tz, rev)(to))
        if not isinstance(o, ComplexTensor):
            _close(getattr(z, rev)(o), getattr(tz, rev)(to))
    else:
        _close(getattr(z, rev)(o), getattr(tz, rev)(to))


def test_real_tensor_on_the_left():
    # a real Tensor's operator runs first: it answers with the complex one's (window * Z)
    v, x = _c((2, 3)), _r((3,))
    z, tz = Tensor.tensor(v), torch.tensor(v)
    _close(Tensor(x) * z, torch.tensor(x) * tz)
    _close(Tensor(x).cfloat() - z, torch.tensor(x) - tz)
    _close(Tensor(x).to(z.dtype) / z, torch.tensor(x) / tz)
    _close(z * Tensor(x), tz * torch.tensor(x))


@pytest.mark.parametrize(
    "name",
    ["neg", "conj", "conj_physical", "abs", "angle", "exp", "log", "sqrt", "reciprocal", "sgn", "square", "pow2",
     "pow3", "pow_half", "pow_real", "pow0"],
)  # fmt: skip
def test_unary_ops(name):
    v = _c((5,))
    v[0] = -2.0 + 0.0j  # the branch cut of log and sqrt, from above
    fns = {"pow2": lambda t: t.pow(2), "pow3": lambda t: t**3, "pow_half": lambda t: t.pow(0.5),
           "pow_real": lambda t: t.pow(1.7), "pow0": lambda t: t.pow(0)}  # fmt: skip
    fn = fns.get(name, lambda t: getattr(t, name)())
    _close(fn(Tensor.tensor(v)), fn(torch.tensor(v)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "call",
    ["angle(z)", "conj(z)", "conj_physical(z)", "resolve_conj(z)", "abs(z)", "exp(z)", "sgn(z)", "sum(z, 1)",
     "mean(z)", "real(z)", "imag(z)", "isnan(z)", "mul(x, z)", "div(x, z)", "add(z, x, alpha=2)", "sub(x, z)",
     "matmul(z, z.T)", "cat([x, z], 1)", "cat([z, z])", "stack((z, x), -1)", "flip(z, (0, 1))", "roll(z, 1, 0)",
     "reshape(z, (6, 2))", "permute(z, (1, 0))", "transpose(z, 0, 1)", "clone(z)", "conj(x)", "real(x)", "abs(x)",
     "cat([x, x])"],
)  # fmt: skip
def test_torch_function_forms_take_complex_tensors(call):
    # a port spells torch.X(z) as Tensor.X(z): the real method of the name must not run on a complex tensor (it
    # raised, or, for conj, returned z itself, unconjugated)
    zv, xv = _c((3, 4)), _r((3, 4))
    theirs = eval("torch." + call, {"torch": torch, "z": torch.tensor(zv), "x": torch.tensor(xv)})
    ours = eval("Tensor." + call, {"Tensor": Tensor, "z": Tensor.tensor(zv), "x": Tensor(xv)})
    _close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_torch_function_forms_keep_the_real_forms():
    assert Tensor.is_complex(Tensor.tensor(_c((2,)))) and not Tensor.is_complex(Tensor(_r((2,))))
    assert Tensor.numel(Tensor.tensor(_c((2, 3)))) == 6
    with pytest.raises(RuntimeError):
        Tensor.imag(Tensor(_r((2,))))
    assert "|x|" in Tensor.abs.__doc__ and "real part" in Tensor.real.__doc__
    with pytest.raises(ComplexOpError):
        Tensor.sin(Tensor.tensor(_c((2,))))


def test_reductions_views_and_movement():
    v = _c((2, 3, 4))
    z, tz = Tensor.tensor(v), torch.tensor(v)
    for fn in (
        lambda t: t.sum(), lambda t: t.sum(1), lambda t: t.sum((0, 2), keepdim=True), lambda t: t.mean(-1),
        lambda t: t.reshape(6, 4), lambda t: t.view(-1), lambda t: t.permute(2, 0, 1), lambda t: t.transpose(0, 2),
        lambda t: t.unsqueeze(1), lambda t: t[:1].squeeze(0), lambda t: t.flatten(1), lambda t: t[1, ::2, 1:3],
        lambda t: t[..., None, 0], lambda t: t.roll(1, 2), lambda t: t.flip(1), lambda t: t.mT, lambda t: t.mH,
        lambda t: t.real, lambda t: t.imag, lambda t: t.expand(3, 2, 3, 4), lambda t: t.isclose(t),
    ):  # fmt: skip
        _close(fn(z), fn(tz))
    _close(z.pad((1, 2)), torch.nn.functional.pad(tz, (1, 2)))
    w = _c((2, 1, 4))
    _close(ComplexTensor.concat([z, Tensor.tensor(w)], 1), torch.cat([tz, torch.tensor(w)], 1))
    _close(z.cat(Tensor.tensor(w), dim=1), torch.cat([tz, torch.tensor(w)], 1))
    _close(ComplexTensor.stacked([z, z], 0), torch.stack([tz, tz], 0))
    assert z.allclose(z + 1e-9) and not z.allclose(z + 1j)
    assert (z == z).all().item() and not (z != z).any().item()


def test_matmul_and_einsum():
    a, b, x = _c((3, 4)), _c((4, 2)), _r((4, 2))
    ta, tb, tx = torch.tensor(a), torch.tensor(b), torch.tensor(x)
    _close(Tensor.tensor(a) @ Tensor.tensor(b), ta @ tb)
    _close(Tensor.tensor(a) @ Tensor(x), ta @ tx.to(torch.complex64))
    _close(Tensor(x.T) @ Tensor.tensor(b), tx.T.to(torch.complex64) @ tb)
    _close(Tensor.tensor(a).einsum_with("ij,jk->ik", Tensor.tensor(b)), torch.einsum("ij,jk->ik", ta, tb))
    u, w = _c((5,)), _c((5,))
    _close(Tensor.tensor(u).dot(Tensor.tensor(w)), torch.dot(torch.tensor(u), torch.tensor(w)))
    _close(Tensor.tensor(u).vdot(Tensor.tensor(w)), torch.vdot(torch.tensor(u), torch.tensor(w)))


# ---- gradients ------------------------------------------------------------------------------------------------------


def _leaf(v):
    return Tensor.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)


def test_complex_leaf_gradient_follows_torch_convention():
    v, w, x = _c((3, 4)), _c((4,)), _r((3, 4))
    z, tz = _leaf(v)
    y, ty = _leaf(w)

    def loss(z, y, x, lib):
        out = (z * y + x) / (y + 2.0) - z.conj() * 0.5j
        out = out.exp() * z.sqrt() + (z @ y.reshape(4, 1)).pow(2)
        return out.abs().sum() + out.angle().sum() + (out.real * x).sum() - out.imag.mean() + z.log().abs().sum()

    loss(z, y, Tensor(x), None).backward()
    loss(tz, ty, torch.tensor(x), torch).backward()
    _close(z.grad, tz.grad, rtol=1e-4, atol=1e-4)
    _close(y.grad, ty.grad, rtol=1e-4, atol=1e-4)
    assert z.requires_grad and z.is_leaf


def test_complex_from_real_leaves_and_backward_with_gradient():
    re, im, g = _r((3,)), _r((3,)), _c((3,))
    a, b = Tensor(re, requires_grad=True), Tensor(im, requires_grad=True)
    ta, tb = torch.tensor(re, requires_grad=True), torch.tensor(im, requires_grad=True)
    out = Tensor.complex(a, b) * (1 + 2j)
    tout = torch.complex(ta, tb) * (1 + 2j)
    out.backward(Tensor.tensor(g))
    tout.backward(torch.tensor(g))
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)
    with pytest.raises(RuntimeError, match="gradient="):
        Tensor.complex(a, b).backward()


def test_abs_of_large_and_tiny_values_neither_overflows_nor_underflows():
    v = np.array([1e30 + 1e30j, 3e-30 - 4e-30j, np.inf + 1j, 0j], dtype=np.complex64)
    _close(Tensor.tensor(v).abs(), torch.tensor(v).abs(), rtol=1e-6, atol=0)


def test_abs_gradient_at_zero_is_zero():
    z, tz = _leaf(np.array([0j, 3 + 4j], np.complex64))
    z.abs().sum().backward()
    tz.abs().sum().backward()
    _close(z.grad, tz.grad)


# ---- fft ------------------------------------------------------------------------------------------------------------

NORMS = [None, "backward", "ortho", "forward"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [1, 2, 5, 8, 17])
def test_1d_transforms_match_torch(n, norm):
    v, x = _c((3, n)), _r((3, n))
    for name, arg, targ, kw in [
        ("fft", Tensor.tensor(v), torch.tensor(v), {}),
        ("fft", Tensor(x), torch.tensor(x), {}),
        ("ifft", Tensor.tensor(v), torch.tensor(v), {}),
        ("rfft", Tensor(x), torch.tensor(x), {}),
        ("ihfft", Tensor(x), torch.tensor(x), {}),
        ("fft", Tensor.tensor(v), torch.tensor(v), {"n": n + 3}),
        ("ifft", Tensor.tensor(v), torch.tensor(v), {"n": max(1, n - 1)}),
        ("rfft", Tensor(x), torch.tensor(x), {"n": 2 * n + 1}),
        ("irfft", Tensor.tensor(v), torch.tensor(v), {"n": 2 * n}),
        ("irfft", Tensor.tensor(v), torch.tensor(v), {"n": n + 1}),
        ("hfft", Tensor.tensor(v), torch.tensor(v), {"n": 2 * n - 1 if n > 1 else 3}),
        ("fft", Tensor.tensor(v).T, torch.tensor(v).T, {"dim": 0}),
    ]:
        _close(getattr(fft, name)(arg, norm=norm, **kw), getattr(torch.fft, name)(targ, norm=norm, **kw))
    if n > 1:
        _close(fft.irfft(Tensor.tensor(v), norm=norm), torch.fft.irfft(torch.tensor(v), norm=norm))
        _close(fft.hfft(Tensor.tensor(v), norm=norm), torch.fft.hfft(torch.tensor(v), norm=norm))


@pytest.mark.parametrize("norm", NORMS)
def test_nd_transforms_match_torch(norm):
    x, v = _r((2, 5, 6, 4)), _c((3, 4, 5))
    tx, tv = torch.tensor(x), torch.tensor(v)
    X, V = Tensor(x), Tensor.tensor(v)
    cases = [
        ("fft2", X, tx, {}), ("ifft2", V, tv, {}), ("fftn", V, tv, {}), ("ifftn", V, tv, {"s": (3, 6)}),
        ("fftn", X, tx, {"dim": (0, 2)}), ("rfft2", X, tx, {}), ("rfftn", X, tx, {"s": (4, 7)}),
        ("rfftn", X, tx, {"dim": (1, 3), "s": (3, 3)}), ("irfft2", V, tv, {}), ("irfftn", V, tv, {"s": (5, 7)}),
        ("irfftn", V, tv, {"dim": (0, 2)}), ("fft2", V, tv, {"s": (2, 8)}),
    ]  # fmt: skip
    for name, arg, targ, kw in cases:
        _close(getattr(fft, name)(arg, norm=norm, **kw), getattr(torch.fft, name)(targ, norm=norm, **kw))


@pytest.mark.parametrize("n", [4, 8, 12, 6])
def test_zero_and_nyquist_bins_of_real_signals_are_real(n):
    # sin(pi) is 1.2e-16 in float64 and a forward transform negated its +0.0 sines: these bins' imaginary parts were
    # tiny or -0.0, so isreal was False and the angle of a negative bin -pi where torch's are True and pi
    x = -np.abs(_r((3, n))) - 1.0
    for fn in ("rfft", "fft", "fft2", "rfftn"):
        ours, theirs = getattr(fft, fn)(Tensor(x)), getattr(torch.fft, fn)(torch.tensor(x))
        np.testing.assert_array_equal(ours.isreal().numpy(), torch.isreal(theirs).numpy())
        np.testing.assert_allclose(ours.angle().numpy(), torch.angle(theirs).numpy(), atol=1e-5)


def test_long_axes_stay_accurate():
    for n in (1000, 2187):
        x = _r((n,))
        _close(fft.rfft(Tensor(x)), torch.fft.rfft(torch.tensor(x)), rtol=1e-4, atol=1e-5)
        v = _c((n,))
        _close(fft.ifft(Tensor.tensor(v)), torch.fft.ifft(torch.tensor(v)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [2048, 6000])
def test_long_composite_axes_are_split_into_short_transforms(n):
    # an axis this long is the four-step split of shorter transforms: the same values (closer to float64 than the one
    # O(n^2) product), every kept matrix far smaller than an (n, n) one, gradients as torch's
    x, v = _r((2, n)), _c((2, n))
    for name, arg in (("fft", Tensor.tensor(v)), ("ifft", Tensor.tensor(v)), ("rfft", Tensor(x)), ("ihfft", Tensor(x))):
        _close(getattr(fft, name)(arg, norm="ortho"), getattr(torch.fft, name)(torch.tensor(arg.numpy()), norm="ortho"))
    spec = fft.rfft(Tensor(x))
    _close(fft.irfft(spec, n=n), x, rtol=1e-4, atol=1e-5)
    _close(fft.hfft(spec, n=n), torch.fft.hfft(torch.fft.rfft(torch.tensor(x)), n=n), rtol=1e-4, atol=1e-3)
    assert max(c.numel() for c, _ in fft._MATRICES.values()) < n * n // 4
    a, ta = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    w = _r((2, n // 2 + 1))
    (fft.irfft(fft.rfft(a) * Tensor(w), n=n).pow(2).sum() + fft.fft(a).abs().sum()).backward()
    (torch.fft.irfft(torch.fft.rfft(ta) * torch.tensor(w), n=n).pow(2).sum() + torch.fft.fft(ta).abs().sum()).backward()
    _close(a.grad, ta.grad, rtol=1e-4, atol=1e-3)


def test_kept_matrices_stay_within_their_byte_budget(monkeypatch):
    monkeypatch.setattr(fft, "_MATRICES_KEPT_BYTES", 200_000)
    monkeypatch.setattr(fft, "_MATRICES", type(fft._MATRICES)())
    for n in (100, 101, 102, 103):  # 80 KB a pair: two fit
        fft.fft(Tensor(_r((n,))))
    assert [k[1] for k in fft._MATRICES] == [102, 103]


def test_float64_inputs_give_complex128():
    x = _r((6,), np.float64)
    out = fft.rfft(Tensor(x))
    assert out.dtype == dtypes.complex128
    _close(out, torch.fft.rfft(torch.tensor(x)), rtol=1e-10, atol=1e-12)


def test_frequencies_and_shifts():
    for n, d in ((7, 0.1), (8, 1.0), (1, 2.0)):
        _close(fft.fftfreq(n, d), torch.fft.fftfreq(n, d))
        _close(fft.rfftfreq(n, d), torch.fft.rfftfreq(n, d))
    x, v = _r((4, 5)), _c((3, 6))
    for fn in ("fftshift", "ifftshift"):
        _close(getattr(fft, fn)(Tensor(x)), getattr(torch.fft, fn)(torch.tensor(x)))
        _close(getattr(fft, fn)(Tensor.tensor(v), dim=1), getattr(torch.fft, fn)(torch.tensor(v), dim=1))


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", ["fft", "ifft", "fft2", "ifftn", "hfft", "irfft", "irfftn"])
def test_fft_gradients_of_complex_leaves(name, norm):
    v = _c((4, 6))
    z, tz = _leaf(v)
    w = _r((4, 6))
    kw = {"n": 7} if name in ("fft", "hfft") else {}
    ours = getattr(fft, name)(z, norm=norm, **kw)
    theirs = getattr(torch.fft, name)(tz, norm=norm, **kw)
    if isinstance(theirs, torch.Tensor) and theirs.is_complex():
        k = min(6, theirs.shape[-1])
        loss_t = (theirs.real[..., :k] * torch.tensor(w[..., :k])).sum() + theirs.imag.pow(2).sum() + theirs.abs().sum()
        loss_o = (ours.real[..., :k] * Tensor(w[..., :k])).sum() + ours.imag.pow(2).sum() + ours.abs().sum()
    else:
        loss_t = (theirs * torch.tensor(w[:, :1])).pow(2).sum()
        loss_o = (ours * Tensor(w[:, :1])).pow(2).sum()
    loss_o.backward()
    loss_t.backward()
    _close(z.grad, tz.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_rfft_irfft_gradients_of_real_leaves(norm):
    x = _r((3, 10))
    a, ta = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    w = _r((3, 4))
    ours = fft.irfft(fft.rfft(a, norm=norm)[..., :4] * Tensor(w), n=10, norm=norm)
    theirs = torch.fft.irfft(torch.fft.rfft(ta, norm=norm)[..., :4] * torch.tensor(w), n=10, norm=norm)
    (ours.pow(2).sum() + fft.rfft2(a, norm=norm).abs().sum() + fft.ihfft(a, n=9, norm=norm).imag.sum()).backward()
    tf = torch.fft
    (theirs.pow(2).sum() + tf.rfft2(ta, norm=norm).abs().sum() + tf.ihfft(ta, n=9, norm=norm).imag.sum()).backward()
    _close(a.grad, ta.grad, rtol=1e-4, atol=1e-4)


# ---- errors ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["relu", "max", "softmax", "log_softmax", "sort", "clamp", "floor", "sigmoid"])
def test_unsupported_ops_name_themselves(name):
    z = Tensor.tensor([1 + 1j])
    with pytest.raises(ComplexOpError, match=f"{name}: complex tensors don't support it"):
        getattr(z, name)()
    with pytest.raises(TypeError):
        getattr(z, name)()
    with pytest.raises(RuntimeError):
        getattr(z, name)()


def test_other_errors():
    z = Tensor.tensor([1 + 1j, 2j])
    with pytest.raises(ComplexOpError, match="no order"):
        z < z  # noqa: B015
    with pytest.raises(ComplexOpError, match="rfft: expects a real input"):
        fft.rfft(z)
    with pytest.raises(ValueError, match="norm must be one of"):
        fft.fft(z, norm="bogus")
    with pytest.raises(TypeError, match="float32 or both float64"):
        Tensor.complex(Tensor([1]), Tensor([2]))
    with pytest.raises(ValueError, match="last dim must have size 2"):
        Tensor.view_as_complex(Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(NotImplementedError, match="not supported") as e:
        linalg.eig(Tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert "no complex dtype" not in str(e.value)
    with pytest.raises(NotImplementedError, match="stft"):
        Tensor([1.0]).stft()
    assert not Tensor([1.0]).is_complex()

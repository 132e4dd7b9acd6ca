"""Complex tensors (tensor/complex_tensor.py, tensor/complex_math.py) and uopkit.fft against torch: values and
gradients. Also what FFT programs do next: creation with a complex dtype, writes (setitem, in-place ops) with autograd
through them, a real tensor on the left of a complex one, cat/stack and einsum of complex operands, the elementwise
functions, scans and selections of complex tensors, stft/istft and linalg.eig."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, dtypes, fft, linalg
from uopkit.dtype import DTYPES_BY_NAME, DTypeError, least_upper_dtype
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


def test_tensor_tensor_of_complex_data_as_torch_tensor():
    # Tensor.tensor of complex data is torch.tensor's complex tensor (a complex number gives shape (), as torch's);
    # Tensor(data) builds real tensors only and says to use Tensor.tensor
    for data in ([1 + 2j, 3], [[1.0], [2j]], np.array([1j, 2]), np.array([1j], np.complex64), 1 - 2j):
        ours, theirs = Tensor.tensor(data), torch.tensor(data)
        assert isinstance(ours, ComplexTensor)
        _close(ours, theirs, rtol=0, atol=0)
    with pytest.raises(TypeError, match="Tensor.tensor"):
        Tensor(np.array([1j]))


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
    with pytest.raises(ComplexOpError, match="^floor: "):
        Tensor.floor(Tensor.tensor(_c((2,))))


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


@pytest.mark.parametrize("name", ["relu", "max", "softmax", "log_softmax", "sort", "clamp", "floor", "sign"])
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
    with pytest.raises(NotImplementedError, match="linalg.eig: no gradient"):
        linalg.eig(Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True))
    with pytest.raises(ComplexOpError, match="istft: expects a complex spectrum"):
        Tensor([1.0]).istft(4)
    assert not Tensor([1.0]).is_complex()


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


# ---- elementwise functions, scans, selections -----------------------------------------------------------------------

_FUNCTIONS = (
    "sin cos tan sinh cosh tanh sigmoid asin acos atan asinh acosh atanh rsqrt log10 log2 exp2 expm1 log1p".split()
)


def test_complex_functions_values_and_gradients():
    # each raised (by an internal name, `_float`, for Tensor.sin(z)); off the branch cuts, small and large parts; all
    # in one stack and one backward (one realize each)
    x = np.array([0.3 + 0.2j, -1.2 + 0.7j, 2.5 - 1.5j, -0.4 - 2.0j, 1e-4 + 3e-4j, 25.0 - 0.5j], np.complex64)
    z, t = Tensor.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours = Tensor.stack([getattr(Tensor, name)(z) for name in _FUNCTIONS])
    theirs = torch.stack([getattr(torch, name)(t) for name in _FUNCTIONS])
    keep = np.isfinite(theirs.detach().numpy())
    _close(ours.numpy()[keep], theirs.detach().numpy()[keep], rtol=2e-5, atol=2e-6)
    ok = np.abs(x.real) < 20  # (cosh 25 and its gradients are large: compared above through the values)
    (ours.real * Tensor(ok.astype(np.float32))).sum().backward()
    (theirs.real * torch.tensor(ok)).sum().backward()
    _close(z.grad, t.grad, rtol=1e-4, atol=1e-5)
    w = Tensor.tensor(x[:3].astype(np.complex128))
    assert w.tanh().dtype == dtypes.complex128
    _close(w.tanh(), torch.tensor(x[:3].astype(np.complex128)).tanh(), rtol=1e-12, atol=1e-12)


def test_complex_scans_products_selections():
    # (each raised; the results of one shape stacked: one realize for the values, one backward)
    x = _c((2, 3))
    z, t = Tensor.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours = Tensor.stack([z.cumsum(1), Tensor.cumprod(z, 0), z.cumprod(dim=1), z.prod(1, keepdim=True).expand(2, 3)])
    theirs = torch.stack([t.cumsum(1), torch.cumprod(t, 0), t.cumprod(dim=1), t.prod(1, keepdim=True).expand(2, 3)])
    _close(ours, theirs)
    _close(z.prod(), t.prod())
    (ours * ours.conj()).real.sum().backward()
    theirs.abs().square().sum().backward()
    _close(z.grad, t.grad, rtol=1e-4, atol=1e-5)
    mask, y, r = np.array([True, False, True]), _c((3,)), _r((3,))
    cond, w, tw, tmask = Tensor(mask), Tensor.tensor(y), torch.tensor(y), torch.tensor(mask)
    ours = Tensor.stack(
        [Tensor.where(cond, z, w), cond.where(Tensor(r), w).expand(2, 3), z.where(cond, 2.0), z.masked_fill(cond, 1j)]
    )
    theirs = torch.stack(
        [torch.where(tmask, t, tw), torch.where(tmask, torch.tensor(r).cfloat(), tw).expand(2, 3), t.where(tmask, 2.0),
         t.masked_fill(tmask, 1j)]
    )  # fmt: skip
    _close(ours, theirs)
    idx = np.array([[1, 0, 1]])
    _close(z.gather(0, Tensor(idx)), t.gather(0, torch.tensor(idx)))
    _close(Tensor.index_select(z, 1, Tensor([2, 0])), torch.index_select(t, 1, torch.tensor([2, 0])))
    v = np.array([1 + 1j, np.inf + 0j, 1 + np.nan * 1j], np.complex64)
    for name in ("isinf", "isfinite", "isnan"):
        assert getattr(Tensor, name)(Tensor.tensor(v)).tolist() == getattr(torch, name)(torch.tensor(v)).tolist()
    assert Tensor.isclose(w, w + 1e-7).tolist() == torch.isclose(tw, tw + 1e-7).tolist()


def test_complex_refusals_name_the_op():
    # torch refuses these for complex: ours raise naming the op (Tensor.maximum(z, w) named `_broadcasted`)
    z = Tensor.tensor([1 + 1j, 2j])
    for call, name in (
        (lambda: Tensor.maximum(z, z), "maximum"),
        (lambda: Tensor.relu(z), "relu"),
        (lambda: Tensor.clamp(z, 0, 1), "clamp"),
        (lambda: z.max(), "max"),
        (lambda: z.sign(), "sign"),
    ):
        with pytest.raises(ComplexOpError, match=f"^{name}: "):
            call()


# ---- stft / istft, linalg.eig ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(n_fft=16, hop_length=4, win_length=12, window="hann"),
        dict(n_fft=15, hop_length=5, center=False, normalized=True, onesided=False),
        dict(n_fft=8, hop_length=3, pad_mode="constant"),
    ],
)
def test_stft_istft_against_torch(kw):
    x = _r((2, 40))
    kw = dict(kw)
    window = kw.pop("window", None)
    win = np.hanning(kw["win_length"]).astype(np.float32) if window else None
    xt, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    w_ours, w_torch = (Tensor(win), torch.tensor(win)) if win is not None else (None, None)
    ours = xt.stft(window=w_ours, return_complex=True, **kw)
    theirs = torch.stft(tt, window=w_torch, return_complex=True, **kw)
    _close(ours, theirs, rtol=1e-4, atol=1e-5)
    ours.abs().sum().backward()
    theirs.abs().sum().backward()
    _close(xt.grad, tt.grad, rtol=1e-4, atol=1e-5)
    kw.pop("pad_mode", None)
    back = fft.istft(ours.detach(), window=w_ours, length=40, **kw)
    _close(back, torch.istft(theirs.detach(), window=w_torch, length=40, **kw), rtol=1e-4, atol=1e-5)
    c = _c((30,))
    _close(Tensor.tensor(c).stft(8, hop_length=2), torch.tensor(c).stft(8, hop_length=2, return_complex=True))


def test_stft_istft_take_torch_keyword_names():
    # a port of `torch.stft(input=x, n_fft=...)` / `torch.istft(input=spec, ...)` calls the Tensor methods by keyword
    x = _r((2, 40))
    w = np.hanning(16).astype(np.float32)
    kw = dict(n_fft=16, hop_length=4)
    ours = Tensor.stft(input=Tensor(x), window=Tensor(w), return_complex=True, **kw)
    theirs = torch.stft(input=torch.tensor(x), window=torch.tensor(w), return_complex=True, **kw)
    _close(ours, theirs, rtol=1e-4, atol=1e-5)
    back = Tensor.istft(input=ours, window=Tensor(w), length=40, **kw)
    _close(back, torch.istft(input=theirs, window=torch.tensor(w), length=40, **kw), rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError):
        Tensor.stft(Tensor(x), 16, out=Tensor(x))  # torch.stft has no out=


def test_linalg_eig_of_real_matrices():
    a = _r((2, 4, 4), np.float64)
    w, v = linalg.eig(Tensor(a))
    tw, tv = torch.linalg.eig(torch.tensor(a))
    _close(w, tw, rtol=1e-10, atol=1e-10)  # (LAPACK's geev order, as torch's)
    assert v.dtype == dtypes.complex128 and linalg.eigvals(Tensor(a.astype(np.float32))).dtype == dtypes.complex64
    _close(linalg.eigvals(Tensor(a)), torch.linalg.eigvals(torch.tensor(a)), rtol=1e-10, atol=1e-10)
    # eigenvectors: unit columns, equal to torch's up to a phase each
    overlap = np.abs(np.einsum("bij,bij->bj", tv.numpy().conj(), v.numpy()))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-10)

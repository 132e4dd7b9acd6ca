"""torch's top-level names of tensor/torch_copies_settings.py (the views' `_copy` variants, empty_strided, fill,
rms_norm, constant_pad_nd, typename, the process settings, the legacy typed constructors and Size)
against torch itself."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import uopkit
from uopkit import Device, Tensor, dtypes, helpers
from uopkit.dtype import to_dtype
from uopkit.tensor.torch_copies_settings import _Settings

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _dtype_of(t: torch.Tensor):
    return to_dtype(str(t.dtype).removeprefix("torch."))


def _same(got, want, atol: float = 1e-6) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, atol)
        return
    assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
    assert got.dtype == _dtype_of(want), (got.dtype, want.dtype)
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.detach().double().numpy(), atol=atol)


# (name, input shape, arguments after the input) for each view's `_copy` variant
COPIES = [
    ("view_copy", (2, 6), ((3, 4),)),
    ("view_copy", (2, 6), ([-1],)),
    ("permute_copy", (2, 3, 4), ((2, 0, 1),)),
    ("expand_copy", (3, 1), ((2, 3, 4),)),
    ("expand_copy", (3, 1), ((-1, 5),)),
    ("transpose_copy", (2, 3, 4), (0, 2)),
    ("t_copy", (3, 4), ()),
    ("t_copy", (4,), ()),
    ("unsqueeze_copy", (3, 4), (-1,)),
    ("squeeze_copy", (1, 3, 1), ()),
    ("squeeze_copy", (1, 3, 1), (2,)),
    ("squeeze_copy", (1, 3, 1), ((0, 2),)),
    ("select_copy", (3, 4), (1, -2)),
    ("slice_copy", (5, 6), ()),
    ("slice_copy", (5, 6), (1, 1, 5, 2)),
    ("slice_copy", (5, 6), (-1, -10, 10)),
    ("slice_copy", (5, 6), (0, 4, 2)),
    ("slice_copy", (5, 6), (0, -3, None, 2)),
    ("diagonal_copy", (3, 4), ()),
    ("diagonal_copy", (2, 3, 4), (1, 2, 0)),
    ("alias_copy", (2, 3), ()),
    ("unbind_copy", (3, 4), (1,)),
    ("split_copy", (5, 2), (2,)),
    ("split_copy", (2, 5), (3, -1)),
    ("split_with_sizes_copy", (6, 2), ([1, 2, 3],)),
    ("split_with_sizes_copy", (2, 6), ([4, 2], 1)),
    ("unfold_copy", (7, 2), (0, 3, 2)),
    ("as_strided_copy", (3, 4), ((2, 3), (1, 2))),
    ("as_strided_copy", (3, 4), ((2, 2), (4, 1), 3)),
]


@pytest.mark.parametrize("name, shape, args", COPIES, ids=[f"{c[0]}-{i}" for i, c in enumerate(COPIES)])
def test_copy_variants_match_torch_values_and_gradients(name, shape, args):
    x = RNG.standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    want = getattr(torch, name)(tx, *args)
    ux = Tensor(x, requires_grad=True)
    got = getattr(Tensor, name)(ux, *args)
    _same(got, want)
    # the same gradient, weighted so each output place counts differently
    outs_t = want if isinstance(want, (tuple, list)) else (want,)
    outs_u = got if isinstance(got, tuple) else (got,)
    weights = [RNG.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs_t]
    sum(((o * torch.tensor(w)).sum() for o, w in zip(outs_t, weights, strict=True)), torch.zeros(())).backward()
    sum(((o * Tensor(w)).sum() for o, w in zip(outs_u, weights, strict=True)), Tensor(0.0)).backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), atol=1e-6)


@pytest.mark.parametrize("name, shape, args", COPIES, ids=[f"{c[0]}-{i}" for i, c in enumerate(COPIES)])
def test_copy_variants_share_no_storage(name, shape, args):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ux = Tensor(x)
    got = getattr(Tensor, name)(ux, *args)
    want = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
    # a write into the input doesn't show in the copy (torch's view would see it) ...
    ux.add_(100)
    for t, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
        np.testing.assert_array_equal(t.numpy(), w)
        # ... nor a write into the copy in the input
        t.mul_(-1)
    np.testing.assert_array_equal(ux.numpy(), x + 100)


def test_view_copy_takes_a_dtype_and_torch_keywords():
    x = np.arange(4, dtype=np.float32)
    _same(Tensor.view_copy(Tensor(x), dtype=dtypes.int32), torch.view_copy(torch.tensor(x), torch.int32))
    _same(Tensor.view_copy(Tensor(x), dtypes.int32), torch.view_copy(torch.tensor(x), torch.int32))
    _same(Tensor.permute_copy(input=Tensor(x).reshape(2, 2), dims=[1, 0]), torch.tensor(x).reshape(2, 2).T)
    with pytest.raises(TypeError, match="view_copy"):
        Tensor.view_copy(Tensor(x))


def test_copy_variants_write_out_as_torch():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out, tout = Tensor.zeros(3, 2), torch.zeros(3, 2)
    assert Tensor.t_copy(Tensor(x), out=out) is out
    torch.t_copy(torch.tensor(x), out=tout)
    _same(out, tout)
    outs, touts = [Tensor.zeros(2), Tensor.zeros(2), Tensor.zeros(2)], [torch.zeros(2) for _ in range(3)]
    assert Tensor.unbind_copy(Tensor(x), 1, out=outs) is None
    assert torch.unbind_copy(torch.tensor(x), 1, out=touts) is None
    _same(tuple(outs), touts)


def test_detach_copy_cuts_the_gradient():
    # torch's result says it requires grad and its backward raises ("not implemented"); here it is detached
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = Tensor.detach_copy(x)
    assert not y.requires_grad and y.tolist() == [1.0, 2.0]
    _same(Tensor.detach_copy(Tensor([[1, 2]])), torch.detach_copy(torch.tensor([[1, 2]], dtype=torch.int32)))


@pytest.mark.parametrize("step", [0, -1])
def test_slice_copy_refuses_a_step_torch_refuses(step):
    with pytest.raises(RuntimeError, match="step"):
        torch.slice_copy(torch.zeros(4), 0, None, None, step)
    with pytest.raises(RuntimeError, match="step"):
        Tensor.slice_copy(Tensor.zeros(4), 0, None, None, step)


@pytest.mark.parametrize(
    "size, stride",
    [
        ((2, 3), (3, 1)),
        ((2, 3), (1, 2)),
        ((2, 3, 4, 5), (60, 1, 15, 3)),
        ((4, 1, 3), (3, 3, 1)),
        ((), ()),
        ((0, 3), (3, 1)),
    ],
)
def test_empty_strided_reports_torch_strides(size, stride):
    want = torch.empty_strided(size, stride, dtype=torch.float64, requires_grad=True)
    got = Tensor.empty_strided(size, stride, dtype=dtypes.float64, requires_grad=True)
    assert got.shape == tuple(want.shape) and got.dtype == dtypes.float64 and got.requires_grad
    assert got.stride() == want.stride()


def test_empty_strided_with_gaps_and_bad_arguments():
    assert Tensor.empty_strided((2, 2), (4, 1)).shape == tuple(torch.empty_strided((2, 2), (4, 1)).shape)
    with pytest.raises(RuntimeError):
        torch.empty_strided((2, 3), (1,))
    with pytest.raises(RuntimeError, match="empty_strided"):
        Tensor.empty_strided((2, 3), (1,))


def test_fill_is_torch_out_of_place_fill():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    w = RNG.standard_normal((2, 3)).astype(np.float32)
    tx, tv = torch.tensor(x, requires_grad=True), torch.tensor(2.5, requires_grad=True)
    ux, uv = Tensor(x, requires_grad=True), Tensor(2.5, requires_grad=True)
    want, got = torch.fill(tx, tv), Tensor.fill(ux, uv)
    _same(got, want)
    (want * torch.tensor(w)).sum().backward()
    (got * Tensor(w)).sum().backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(uv.grad.numpy(), tv.grad.numpy(), rtol=1e-6)
    # the input is left as it was; the value takes the input's dtype
    np.testing.assert_array_equal(ux.numpy(), x)
    _same(
        Tensor.fill(Tensor([1, 2], dtype=dtypes.int32), 2.7), torch.fill(torch.tensor([1, 2], dtype=torch.int32), 2.7)
    )
    with pytest.raises(RuntimeError):
        torch.fill(torch.zeros(2), torch.ones(2))
    with pytest.raises(RuntimeError, match="fill"):
        Tensor.fill(Tensor.zeros(2), Tensor.ones(2))


@pytest.mark.parametrize(
    "pad, value", [([1, 1], 0.0), ([1, 2, 0, 1], 7.5), ([-1, 1, 1, 0], 2.0), ([0, 0, 0, 0, 1, 1], 1.0)]
)
def test_constant_pad_nd_matches_torch(pad, value):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    tx, ux = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    want, got = torch.constant_pad_nd(tx, pad, value), Tensor.constant_pad_nd(ux, pad, value)
    _same(got, want)
    want.square().sum().backward()
    got.square().sum().backward()
    np.testing.assert_allclose(ux.grad.numpy(), tx.grad.numpy(), atol=1e-6)
    with pytest.raises(RuntimeError):
        torch.constant_pad_nd(tx, [1, 1, 1])
    with pytest.raises(RuntimeError, match="constant_pad_nd"):
        Tensor.constant_pad_nd(ux, [1, 1, 1])


@pytest.mark.parametrize(
    "weighted, eps, dtype", [(False, None, "float32"), (True, 1e-3, "float32"), (True, None, "float16")]
)
def test_rms_norm_matches_torch(weighted, eps, dtype):
    x = RNG.standard_normal((3, 4, 5)).astype(dtype)
    w = RNG.standard_normal((4, 5)).astype(dtype) if weighted else None
    want = torch.rms_norm(torch.tensor(x), [4, 5], None if w is None else torch.tensor(w), eps)
    got = Tensor.rms_norm(Tensor(x), [4, 5], None if w is None else Tensor(w), eps)
    _same(got, want, atol=1e-5 if dtype == "float32" else 4e-3)


def test_typename_and_is_storage_as_torch():
    import torch.nn as tnn

    class Local:
        pass

    for obj in (1, "s", [], None, int, np.zeros(2), Local(), Local, tnn.Linear(1, 1), np.mean):
        assert Tensor.typename(obj) == torch.typename(obj), obj
    for dt in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        assert Tensor.typename(Tensor.zeros(2, dtype=dt)) == torch.typename(torch.zeros(2, dtype=getattr(torch, dt)))
    assert Tensor.is_storage(Tensor([1.0])) is torch.is_storage(torch.tensor([1.0])) is False


@pytest.fixture
def torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_set_num_threads_sets_the_cpu_kernels_threads(torch_threads, monkeypatch):
    monkeypatch.setattr(helpers, "threads_chosen", helpers.threads_chosen)
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    before = Tensor.get_num_threads()
    try:
        for n in (3, 1):
            Tensor.set_num_threads(n)
            torch.set_num_threads(n)
            assert Tensor.get_num_threads() == torch.get_num_threads() == n
            if n > 1:
                t = Tensor.empty(512, 256) @ Tensor.empty(256, 512)
                item = create_schedule(kernelize_tensors([t]))[-1]
                src = get_program(item.ast, Device["CPU"].renderer).src
                assert f"_chunks = {n};" in src
        a = RNG.standard_normal((64, 48)).astype(np.float32)
        np.testing.assert_allclose((Tensor(a) @ Tensor(a.T)).numpy(), a @ a.T, rtol=1e-4, atol=1e-4)
    finally:
        Tensor.set_num_threads(before)
    for bad, error in ((0, RuntimeError), (-2, RuntimeError)):
        with pytest.raises(error):
            torch.set_num_threads(bad)
        with pytest.raises(error, match="set_num_threads"):
            Tensor.set_num_threads(bad)
    with pytest.raises(TypeError, match="set_num_threads"):
        Tensor.set_num_threads(2.0)


def test_interop_threads_are_kept(monkeypatch):
    monkeypatch.setattr(_Settings, "interop_threads", _Settings.interop_threads)
    before = Tensor.get_num_interop_threads()
    Tensor.set_num_interop_threads(3)
    try:
        assert Tensor.get_num_interop_threads() == 3
    finally:
        Tensor.set_num_interop_threads(before)
    with pytest.raises(RuntimeError, match="set_num_interop_threads"):
        Tensor.set_num_interop_threads(0)


def _flags(T) -> tuple[bool, bool]:
    return T.are_deterministic_algorithms_enabled(), T.is_deterministic_algorithms_warn_only_enabled()


@pytest.mark.parametrize("calls", [[(True, False)], [(True, True)], [(True, True), (False, True)], [(False, False)]])
def test_deterministic_flags_read_back_as_torch(calls):
    try:
        for mode, warn_only in calls:
            torch.use_deterministic_algorithms(mode, warn_only=warn_only)
            Tensor.use_deterministic_algorithms(mode, warn_only=warn_only)
            assert _flags(Tensor) == _flags(torch)
    finally:
        torch.use_deterministic_algorithms(False)
        Tensor.use_deterministic_algorithms(False)
    with pytest.raises(TypeError):
        torch.use_deterministic_algorithms(1)
    with pytest.raises(TypeError, match="use_deterministic_algorithms"):
        Tensor.use_deterministic_algorithms(1)


def test_float32_matmul_precision_as_torch(monkeypatch):
    monkeypatch.delenv("TF32", raising=False)
    monkeypatch.setattr(_Settings, "matmul_precision", _Settings.matmul_precision)
    before = torch.get_float32_matmul_precision()
    assert Tensor.get_float32_matmul_precision() == before == "highest"
    try:
        for p in ("high", "medium", "bogus", "highest"):
            with warnings.catch_warnings(record=True) as torch_warned:
                warnings.simplefilter("always")
                torch.set_float32_matmul_precision(p)
            with warnings.catch_warnings(record=True) as ours_warned:
                warnings.simplefilter("always")
                Tensor.set_float32_matmul_precision(p)
            assert bool(torch_warned) == bool(ours_warned)
            assert Tensor.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    finally:
        torch.set_float32_matmul_precision(before)
        Tensor.set_float32_matmul_precision(before)


def test_set_default_device_cpu():
    before = Device._default
    try:
        Tensor.set_default_device("cpu")
        assert Tensor.get_default_device() == "CPU" and Tensor.get_default_device().type == "cpu"
        assert Tensor.zeros(2).device == "CPU" and Device.DEFAULT == "CPU"
        Tensor.set_default_device(torch.device("cpu"))
        assert Tensor.get_default_device() == "CPU"
        with pytest.raises(RuntimeError):
            torch.set_default_device("nosuchdevice")
        with pytest.raises(RuntimeError, match="NOSUCHDEVICE"):
            Tensor.set_default_device("nosuchdevice")
        assert Device._default == "CPU"
        Tensor.set_default_device(None)
        assert Device._default is None
    finally:
        Device.DEFAULT = before
        torch.set_default_device(None)


def test_anomaly_warn_always_and_flush_denormal_read_back_as_torch():
    try:
        for enabled, check_nan in ((True, False), (False, True), (True, True)):
            torch.set_anomaly_enabled(enabled, check_nan)
            Tensor.set_anomaly_enabled(enabled, check_nan)
            assert Tensor.is_anomaly_enabled() == torch.is_anomaly_enabled()
            assert Tensor.is_anomaly_check_nan_enabled() == torch.is_anomaly_check_nan_enabled()
        for b in (True, False):
            torch.set_warn_always(b)
            Tensor.set_warn_always(b)
            assert Tensor.is_warn_always_enabled() == torch.is_warn_always_enabled() == b
    finally:
        torch.set_anomaly_enabled(False)
        Tensor.set_anomaly_enabled(False)
        torch.set_warn_always(False)
        Tensor.set_warn_always(False)
    with pytest.raises(RuntimeError):
        torch.set_warn_always(1)
    with pytest.raises(RuntimeError, match="set_warn_always"):
        Tensor.set_warn_always(1)
    # torch's answer where the CPU can't flush (see the docstring: uopkit's kernel threads are out of its reach)
    assert Tensor.set_flush_denormal(True) is False and Tensor.set_flush_denormal(False) is False


def test_autograd_anomaly_switches_match_torch():
    # torch.autograd.detect_anomaly / set_detect_anomaly: what each sets, when, and what it puts back
    def run(L, T):
        seen = []
        with pytest.warns(UserWarning):
            switch = L.autograd.detect_anomaly(check_nan=False)
        seen.append(T.is_anomaly_enabled())
        with switch:
            seen.append((T.is_anomaly_enabled(), T.is_anomaly_check_nan_enabled()))
        seen.append((T.is_anomaly_enabled(), T.is_anomaly_check_nan_enabled()))
        L.autograd.set_detect_anomaly(True)
        seen.append(T.is_anomaly_enabled())
        with L.autograd.set_detect_anomaly(False, check_nan=False):
            seen.append((T.is_anomaly_enabled(), T.is_anomaly_check_nan_enabled()))
        seen.append((T.is_anomaly_enabled(), T.is_anomaly_check_nan_enabled()))
        L.autograd.set_detect_anomaly(False)
        seen.append((T.is_anomaly_enabled(), T.is_anomaly_check_nan_enabled()))
        return seen

    try:
        assert run(uopkit, Tensor) == run(torch, torch)
    finally:
        torch.set_anomaly_enabled(False)
        Tensor.set_anomaly_enabled(False)


def test_settings_are_uopkit_top_level_names():
    for name in ("set_num_threads", "get_default_device", "use_deterministic_algorithms", "FloatTensor", "Size"):
        assert getattr(uopkit, name) is getattr(Tensor, name)
        assert name in uopkit.__all__


LEGACY = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
          "CharTensor", "ByteTensor", "BoolTensor"]  # fmt: skip


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_constructors_as_torch(name):
    T, U = getattr(torch, name), getattr(Tensor, name)
    for args in [(2, 3), (3,), (), (2, 0), (torch.Size([2, 3]),)]:
        want = T(*args)
        got = U(*(Tensor.Size(a) if isinstance(a, torch.Size) else a for a in args))
        assert got.shape == tuple(want.shape) and got.dtype == _dtype_of(want), args
    signed = name not in ("ByteTensor", "BoolTensor")
    for data in ([[1, 0], [3, 4]], (2, 3), [1.7, -1.7 if signed else 2.2, 0.0], np.array([1.5, 2.0]), [True, False]):
        want = T(data)
        if name == "BFloat16Tensor":
            want = want.float()
        got = U(data)
        assert got.dtype == U.dtype
        _same(got.float() if name == "BFloat16Tensor" else got, want)
    # a tensor of the type is returned as a view of itself; another dtype raises, as torch's
    same = U(Tensor.zeros(2, dtype=U.dtype))
    assert same.dtype == U.dtype and same.shape == (2,)
    other = "int64" if name != "LongTensor" else "float32"
    with pytest.raises(TypeError):
        T(torch.zeros(2, dtype=getattr(torch, other)))
    with pytest.raises(TypeError, match=name):
        U(Tensor.zeros(2, dtype=other))
    with pytest.raises(TypeError):
        T(2.5)
    with pytest.raises(TypeError, match=name):
        U(2.5)
    assert U(2, device="cpu").device == "CPU"


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_types_in_isinstance_and_type(name):
    U, T = getattr(Tensor, name), getattr(torch, name)
    for dt in ("float32", "float64", "int64", "int32", "uint8", "bool"):
        assert isinstance(Tensor.zeros(2, dtype=dt), U) == isinstance(torch.zeros(2, dtype=getattr(torch, dt)), T)
    assert not isinstance(np.zeros(2), U) and isinstance(U(2), Tensor) and not issubclass(U, Tensor)
    x = Tensor([1.5, -2.0])
    assert x.type(U).dtype == U.dtype and x.type(f"torch.{name}").dtype == U.dtype
    assert x.type(U).type() == torch.tensor([1.5, -2.0]).type(T).type() == f"torch.{name}"
    assert U.dtype == _dtype_of(T(1)) and U.is_cuda is T.is_cuda is False


def test_size_as_torch():
    for sizes in ([2, 3], [], [4], (1, 2, 3)):
        want, got = torch.Size(sizes), Tensor.Size(sizes)
        assert got == want and got == tuple(sizes) and hash(got) == hash(want)
        assert got.numel() == want.numel()
        assert repr(got) == repr(want).removeprefix("torch.") == str(got)
        assert isinstance(got, tuple) and isinstance(got, Tensor.Size)
    s = Tensor.Size([2, 3, 4])
    assert type(s[1:]) is Tensor.Size and s[1:] == torch.Size([2, 3, 4])[1:] and s[-1] == 4
    assert type(s + (5,)) is Tensor.Size and type((5,) + s) is Tensor.Size and (5,) + s == (5,) + torch.Size([2, 3, 4])
    assert type(s * 2) is Tensor.Size and s * 2 == torch.Size([2, 3, 4]) * 2
    assert pickle.loads(pickle.dumps(s)) == s and type(pickle.loads(pickle.dumps(s))) is Tensor.Size
    assert Tensor.Size([Tensor(2), np.int64(3)]) == torch.Size([torch.tensor(2), np.int64(3)])
    with pytest.raises(TypeError):
        torch.Size([2.0])
    with pytest.raises(TypeError, match="Size"):
        Tensor.Size([2.0])
    # a shape a Tensor takes as it takes a tuple
    assert Tensor.zeros(s).shape == (2, 3, 4) and Tensor.ones(3).reshape(Tensor.Size([3, 1])).shape == (3, 1)

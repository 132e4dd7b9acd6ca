"""Every dtype of `dtypes` through the Tensor: creation, arithmetic, casts (incl. bfloat16 via bit ops), promotion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit.dtype import dtypes, least_upper_dtype
from uopkit.tensor import Tensor

torch = pytest.importorskip("torch")

NUMPY_DTYPES = [
    (dtypes.bool, np.bool_),
    (dtypes.int8, np.int8),
    (dtypes.uint8, np.uint8),
    (dtypes.int16, np.int16),
    (dtypes.uint16, np.uint16),
    (dtypes.int32, np.int32),
    (dtypes.uint32, np.uint32),
    (dtypes.int64, np.int64),
    (dtypes.uint64, np.uint64),
    (dtypes.float16, np.float16),
    (dtypes.float32, np.float32),
    (dtypes.float64, np.float64),
]


@pytest.mark.parametrize("dt,npdt", NUMPY_DTYPES, ids=[d.name for d, _ in NUMPY_DTYPES])
def test_roundtrip_and_arithmetic(dt, npdt):
    x = np.array([0, 1, 2, 3, 5, 7], dtype=npdt)
    t = Tensor(x)
    assert t.dtype == dt
    np.testing.assert_array_equal(t.numpy(), x)
    assert Tensor(x.tolist(), dtype=dt).numpy().dtype == np.dtype(npdt)
    if dt != dtypes.bool:
        np.testing.assert_array_equal((t + t).numpy(), x + x)
        np.testing.assert_array_equal((t * 2).numpy(), x * npdt(2))
        np.testing.assert_array_equal(t.max().numpy(), x.max())
        np.testing.assert_array_equal(t.min().numpy(), x.min())
        np.testing.assert_array_equal(t.flip(0).numpy(), x[::-1])
    np.testing.assert_array_equal((t == t).numpy(), np.ones(6, bool))
    np.testing.assert_array_equal(t.cast(dtypes.float64).numpy(), x.astype(np.float64))


@pytest.mark.parametrize("src", [d for d, _ in NUMPY_DTYPES], ids=[d.name for d, _ in NUMPY_DTYPES])
def test_casts_match_numpy(src):
    values = np.array([0, 1, 3, 100, 120], dtype=np.float64)
    x = values.astype(src.fmt)
    for dst, npdt in NUMPY_DTYPES:
        got = Tensor(x).cast(dst)
        assert got.dtype == dst
        np.testing.assert_array_equal(got.numpy(), x.astype(npdt))


def test_wrapping_and_extremes():
    assert Tensor([127], dtype=dtypes.int8).add(1).tolist() == [-128]
    assert Tensor([0], dtype=dtypes.uint8).sub(1).tolist() == [255]
    assert Tensor([2**63 - 1], dtype=dtypes.int64).tolist() == [2**63 - 1]
    assert Tensor([2**64 - 1], dtype=dtypes.uint64).tolist() == [2**64 - 1]
    assert Tensor([-(2**31)], dtype=dtypes.int32).abs().dtype == dtypes.int32
    assert Tensor([65504.0], dtype=dtypes.float16).tolist() == [65504.0]


def test_promotion_lattice_matches_tinygrad():
    assert least_upper_dtype(dtypes.int8, dtypes.uint8) == dtypes.int16
    assert least_upper_dtype(dtypes.uint32, dtypes.int32) == dtypes.int64
    # (the lattice's float16 would lose a uint64's or an int64's value: an error, as PyTorch doesn't promote them)
    for other in (dtypes.int8, dtypes.int32, dtypes.int64):
        with pytest.raises(TypeError, match="no integer dtype holds the values of both"):
            least_upper_dtype(dtypes.uint64, other)
    with pytest.raises(TypeError, match="no integer dtype holds"):
        Tensor([2049], dtype=dtypes.uint64) - Tensor([0], dtype=dtypes.int32)
    with pytest.raises(TypeError, match="no integer dtype holds"):
        Tensor([5], dtype=dtypes.uint64) + -1
    assert least_upper_dtype(dtypes.uint64, dtypes.uint8) == dtypes.uint64
    assert least_upper_dtype(dtypes.uint64, dtypes.float32) == dtypes.float32
    assert least_upper_dtype(dtypes.uint64, dtypes.bool) == dtypes.uint64
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert least_upper_dtype(dtypes.bool, dtypes.float16) == dtypes.float16
    assert (Tensor([1], dtype=dtypes.uint8) + Tensor([1], dtype=dtypes.int8)).dtype == dtypes.int16
    assert (Tensor([1], dtype=dtypes.uint16) * 3).dtype == dtypes.uint16
    assert (Tensor([1], dtype=dtypes.int16) * 3.0).dtype == dtypes.float32


def test_bfloat16_via_bits():
    values = np.array([1.0, 2.5, -3.14159, 1e30, 1.00390625, 1.01171875, np.inf, -0.0], dtype=np.float32)
    t = Tensor(values).cast(dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16
    want = torch.tensor(values).to(torch.bfloat16)
    np.testing.assert_array_equal(t.numpy(), want.float().numpy())
    # the stored bits equal PyTorch's bfloat16 bits (round to nearest even)
    np.testing.assert_array_equal(t.bitcast(dtypes.int16).numpy(), want.view(torch.int16).numpy())
    # from a list, arithmetic (computed in float32, rounded back), reductions, movement, compare
    b = Tensor(values.tolist(), dtype=dtypes.bfloat16)
    np.testing.assert_array_equal(b.numpy(), want.float().numpy())
    np.testing.assert_array_equal((b * 3).numpy(), (want * 3).float().numpy())
    np.testing.assert_array_equal((b + b).dtype == dtypes.bfloat16, True)
    np.testing.assert_array_equal(b[:3].sum().numpy(), want[:3].float().sum().to(torch.bfloat16).float().numpy())
    np.testing.assert_array_equal(b.max().numpy(), want.max().float().numpy())
    np.testing.assert_array_equal(b.flip(0)[::2].numpy(), want.float().flip(0)[::2].numpy())
    np.testing.assert_array_equal((b > 1).numpy(), (want > 1).numpy())
    assert (b + Tensor([1.0] * 8)).dtype == dtypes.float32
    assert Tensor([float("nan")], dtype=dtypes.bfloat16).isnan().tolist() == [True]
    # stored in a buffer and written through a view
    z = Tensor.zeros(4, dtype=dtypes.bfloat16).contiguous().realize()
    z[1:3] = 7.0
    assert z.tolist() == [0.0, 7.0, 7.0, 0.0] and z.dtype == dtypes.bfloat16
    e = Tensor.empty(2, dtype=dtypes.bfloat16)
    e.assign(Tensor([1.5, -2.0]).cast(dtypes.bfloat16)).realize()
    assert e.tolist() == [1.5, -2.0]


def test_each_dtype_is_one_object():
    import copy
    import pickle
    import threading

    from uopkit.dtype import PtrDType, VecDType, dtype_from_fields

    # derived dtypes are made once: equal means identical, and hashing (by identity) agrees with equality
    assert dtypes.float32.vec(4) is dtypes.float32.vec(4) and dtypes.int32.ptr(16) is dtypes.int32.ptr(16)
    assert dtypes.float32.vec(4) != dtypes.float32.vec(8) and dtypes.int32.ptr(16) != dtypes.int32.ptr(16, local=True)
    assert len({dtypes.half.vec(2), dtypes.half.vec(2), dtypes.half}) == 2
    # copies and pickles come back as the same object, also of vector and pointer types
    for dt in (dtypes.bfloat16, dtypes.float32.vec(8), dtypes.float32.vec(4).ptr(64), dtypes.uint8.ptr(-1, True)):
        assert copy.deepcopy(dt) is dt and pickle.loads(pickle.dumps(dt)) is dt
    # a deserialized one (the emulator's program format) is the one already made; an unknown one is an error
    vec = dtypes.float32.vec(4)
    vec_fields = {k: getattr(vec, k) for k in ("priority", "itemsize", "name", "fmt", "count", "_scalar")}
    assert dtype_from_fields(VecDType, **vec_fields) is vec
    ptr = dtypes.int32.ptr(7)
    fields = {k: getattr(ptr, k) for k in ("priority", "itemsize", "name", "fmt", "count", "_base", "size", "local")}
    assert dtype_from_fields(PtrDType, **fields) is ptr
    with pytest.raises(ValueError, match="no dtype"):
        dtype_from_fields(PtrDType, **{**fields, "itemsize": 3})
    # threads making the same new dtype at once all get one object
    made: list = []
    threads = [threading.Thread(target=lambda: made.append(dtypes.int16.vec(13))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(m is made[0] for m in made)


@pytest.mark.parametrize("loss_dtype", ["float32", "bfloat16"])
def test_bfloat16_compute_gives_float32_master_weights_their_gradient(loss_dtype):
    # mixed precision: float32 weights cast to bfloat16 for the math; the casts are bit operations, which carried no
    # gradient, so backward found no path to the weights (nor from a bfloat16 loss, read through its bits)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    ours = Tensor(w, requires_grad=True)
    out = (Tensor(x).cast(dtypes.bfloat16) @ ours.cast(dtypes.bfloat16)).relu()
    (out.sum() if loss_dtype == "bfloat16" else out.float().square().mean()).backward()
    theirs = torch.tensor(w, requires_grad=True)
    tout = (torch.tensor(x).bfloat16() @ theirs.bfloat16()).relu()
    (tout.sum() if loss_dtype == "bfloat16" else tout.float().square().mean()).backward()
    assert ours.grad is not None and ours.grad.dtype == dtypes.float32
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=2e-2, atol=2e-2)


def test_a_bfloat16_parameter_gets_a_bfloat16_gradient():
    # graphs that read a bfloat16 tensor hold its uint16 bits: backward looks for those, then casts the gradient back
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32)
    w = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2), dtype=dtypes.bfloat16, requires_grad=True)
    (Tensor(x).cast(dtypes.bfloat16) @ w).relu().sum().backward()
    tw = torch.arange(4, dtype=torch.float32).reshape(2, 2).bfloat16().requires_grad_()
    (torch.tensor(x).bfloat16() @ tw).relu().sum().backward()
    assert w.grad is not None and w.grad.dtype == dtypes.bfloat16
    np.testing.assert_allclose(w.grad.float().numpy(), tw.grad.float().numpy(), rtol=1e-2, atol=1e-2)


def test_float64_to_float16_rounds_through_float32_as_torch():
    # torch converts double to half through float: 65519.99999 overflows to inf, 1 + 2**-11 + 2**-40 ties to 1.0
    x = [65519.99999, 1 + 2**-11 + 2**-40, -65520.0, 1e-8, 6.1e-5, 0.1]
    want = torch.tensor(x, dtype=torch.float64).half().tolist()
    assert Tensor(x, dtype=dtypes.float64).half().tolist() == want
    assert Tensor(x, dtype=dtypes.float64).cast(dtypes.float16).float().tolist() == want


def test_python_floats_and_float64_arrays_become_float16_through_float32_as_torch():
    # torch's C++ converts a double to Half through float; the constructor, numpy arrays, constants in ops and
    # fills rounded the double directly (65504 and 1.0009766 where torch has inf and 1.0)
    x = [65519.99999, 1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1e-8, 2.0**-25 + 2.0**-50, 0.1]
    want = torch.tensor(x, dtype=torch.float16).tolist()
    assert want[:3] == [math.inf, 1.0, -1.0]
    assert Tensor(x, dtype=dtypes.float16).tolist() == want
    assert Tensor(np.array(x), dtype=dtypes.float16).tolist() == want
    assert [Tensor(v, dtype=dtypes.float16).item() for v in x] == want
    assert Tensor(x[1], dtype=dtypes.float16, requires_grad=True).item() == 1.0
    tie = x[1]
    assert (Tensor.zeros(2, dtype=dtypes.float16) + tie).tolist() == (
        torch.zeros(2, dtype=torch.float16) + tie
    ).tolist()
    assert Tensor.full((2,), tie, dtype=dtypes.float16).tolist() == [1.0, 1.0]
    assert Tensor.zeros(2, dtype=dtypes.float16).contiguous().realize().fill_(tie).tolist() == [1.0, 1.0]


def test_finfo_and_iinfo_are_torchs() -> None:
    # torch.finfo / torch.iinfo for every float and integer dtype, field by field (float16's max is 65504, not
    # dtypes.max's inf)
    import uopkit

    torch = pytest.importorskip("torch")
    floats = [(dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16), (dtypes.float32, torch.float32)]
    for dt, tdt in [*floats, (dtypes.float64, torch.float64)]:
        ours, theirs = uopkit.finfo(dt), torch.finfo(tdt)
        for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            assert getattr(ours, field) == getattr(theirs, field), (dt, field)
        assert repr(ours) == repr(theirs)
    assert uopkit.finfo().dtype == "float32" and uopkit.finfo("half").max == 65504.0
    ints = [(dtypes.int8, torch.int8), (dtypes.int16, torch.int16), (dtypes.int32, torch.int32)]
    ints += [(dtypes.int64, torch.int64), (dtypes.uint8, torch.uint8), (dtypes.uint16, torch.uint16)]
    for dt, tdt in [*ints, (dtypes.uint32, torch.uint32), (dtypes.uint64, torch.uint64)]:
        ours, theirs = uopkit.iinfo(dt), torch.iinfo(tdt)
        assert (ours.bits, ours.min, ours.max, ours.dtype) == (theirs.bits, theirs.min, theirs.max, theirs.dtype), dt
        assert repr(ours) == f"iinfo(min={theirs.min}, max={theirs.max}, dtype={theirs.dtype})"
    with pytest.raises(TypeError, match="iinfo"):
        uopkit.finfo(dtypes.int32)
    with pytest.raises(TypeError, match="finfo"):
        uopkit.iinfo(dtypes.float16)
    with pytest.raises(TypeError, match="bool"):
        uopkit.iinfo(dtypes.bool)


def test_tensor_finfo_and_iinfo_port_torchs_names() -> None:
    # `torch.finfo(x.dtype).min` (BERT's additive attention mask) renamed as `Tensor.finfo(x.dtype).min`
    torch = pytest.importorskip("torch")
    x = Tensor.zeros(2, 3, dtype=dtypes.float16)
    assert Tensor.finfo(x.dtype).min == torch.finfo(torch.float16).min
    assert Tensor.finfo().eps == torch.finfo().eps and Tensor.finfo("bfloat16").tiny == torch.finfo(torch.bfloat16).tiny
    assert (Tensor.iinfo(dtypes.int64).min, Tensor.iinfo("uint8").max) == (torch.iinfo(torch.int64).min, 255)
    mask = Tensor([[1, 1, 0]])
    ext = (1.0 - mask[:, None, None, :].float()) * Tensor.finfo(dtypes.float32).min
    want = (1.0 - torch.tensor([[1, 1, 0]])[:, None, None, :].float()) * torch.finfo(torch.float32).min
    np.testing.assert_array_equal(ext.numpy(), want.numpy())
    with pytest.raises(TypeError, match="iinfo"):
        Tensor.finfo(dtypes.int32)


def test_dtype_questions_are_torchs() -> None:
    # torch.dtype's is_floating_point, is_signed and is_complex, for every dtype both have
    # (`if x.dtype.is_floating_point:` in a PyTorch program)
    from uopkit.dtype import DTYPES_BY_NAME

    torch = pytest.importorskip("torch")
    compared = 0
    for name, dt in DTYPES_BY_NAME.items():
        theirs = getattr(torch, name, None)
        if not isinstance(theirs, torch.dtype):
            continue
        compared += 1
        for question in ("is_floating_point", "is_signed", "is_complex"):
            assert getattr(dt, question) == getattr(theirs, question), (name, question)
    assert compared >= 12

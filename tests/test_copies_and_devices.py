"""Python's copy protocols and pickle, iteration and `in`, ops over tensors on different devices, and unsigned
integer division on every C-like backend: PyTorch's behaviour, checked."""

import copy
import pickle

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes
from uopkit.nn import Linear
from uopkit.tensor import ArgumentError


def test_deepcopy_copies_the_values_into_storage_of_its_own():
    # it shared the original's node and live-tensor reference: `b += 1` changed both, `d *= 2` ran twice
    a = Tensor([1.0, 2.0]).realize()
    b = copy.deepcopy(a)
    b += 1
    assert a.tolist() == [1.0, 2.0] and b.tolist() == [2.0, 3.0]
    c = Tensor([5.0])
    d = copy.deepcopy(c)
    d *= 2
    assert c.tolist() == [5.0] and d.tolist() == [10.0]
    e = Tensor([1.0, 2.0]).realize()
    f = copy.deepcopy(e)
    f.assign(f * 10).realize()
    assert e.tolist() == [1.0, 2.0] and f.tolist() == [10.0, 20.0]
    # a model: an EMA or target network
    layer = Linear(2, 2)
    before = layer.weight.numpy().copy()
    twin = copy.deepcopy(layer)
    twin.weight += 1
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    np.testing.assert_array_equal(twin.weight.numpy(), before + 1)
    assert twin.weight.requires_grad
    # .grad is copied too, and a write into the original afterwards doesn't reach the copy
    w = Tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w2 = copy.deepcopy(w)
    assert w2.grad is not w.grad and w2.grad.tolist() == [2.0, 4.0]
    w.assign(Tensor([7.0, 7.0])).realize()
    assert w2.tolist() == [1.0, 2.0]


def test_copy_shares_storage_as_torch():
    x, tx = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    y, ty = copy.copy(x), copy.copy(tx)
    y += 1
    ty += 1
    assert x.tolist() == tx.tolist() and y.tolist() == ty.tolist()


@pytest.mark.parametrize("dtype", ["float32", "int8", "bfloat16", "float16", "bool", "uint64"])
def test_pickle_round_trips_values_dtype_and_requires_grad(dtype):
    values = np.arange(6).reshape(2, 3) % 3
    t = Tensor(values.astype(np.float32), dtype=dtype).T
    back = pickle.loads(pickle.dumps(t))
    assert back.dtype == t.dtype and back.shape == t.shape and back.tolist() == t.tolist()
    g = Tensor([1.5, -2.0], requires_grad=True)
    assert pickle.loads(pickle.dumps(g)).requires_grad


def test_pickle_of_a_value_computed_with_grad_requires_grad_as_torch():
    # it came back with requires_grad=False
    g, tg = Tensor([1.5, -2.0], requires_grad=True), torch.tensor([1.5, -2.0], requires_grad=True)
    back, tback = pickle.loads(pickle.dumps(g * 2)), pickle.loads(pickle.dumps(tg * 2))
    assert (back.requires_grad, back.is_leaf) == (tback.requires_grad, tback.is_leaf) == (True, True)
    assert back.tolist() == tback.tolist()
    with torch.no_grad():
        tplain = tg * 2
    assert pickle.loads(pickle.dumps(g.detach() * 2)).requires_grad is tplain.requires_grad is False


def test_iteration_and_in_as_torch():
    m, tm = Tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert [r.tolist() for r in m] == [r.tolist() for r in tm]
    assert (2.0 in m) == (2.0 in tm) and (5.0 in m) == (5.0 in tm)
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(Tensor(3))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor([1.0, 2.0]).cat(Tensor([3.0], device="EMULATOR")),
        lambda: Tensor.stack(Tensor([1.0, 2.0]), Tensor([3.0, 4.0], device="EMULATOR")),
        lambda: Tensor([1.0, 2.0]).gather(0, Tensor([1], device="EMULATOR")),
        lambda: (Tensor([1.0, 2.0], device="EMULATOR") > 1).where(Tensor([5.0, 6.0]), 0),
        lambda: Tensor([1.0, 2.0])[Tensor([0], device="EMULATOR")],
        lambda: Tensor([1.0, 2.0]).scatter(0, Tensor([0], device="EMULATOR"), 5.0),
    ],
)
def test_ops_over_two_devices_fail_by_name(make):
    # they failed inside a backend's program ("CPU programs take CPUMemory buffers, got ndarray")
    with pytest.raises(ArgumentError, match="operands are on different devices .*CPU.*EMULATOR|EMULATOR.*CPU"):
        make().realize()


@pytest.mark.parametrize("device", ["CPU", "EMULATOR"])
@pytest.mark.parametrize("dt", [np.uint8, np.uint32, np.uint64, np.int32, np.int64])
def test_integer_division_by_the_all_ones_divisor(device, dt):
    # C's `b == -1` is true for an unsigned all-ones divisor: the x / -1 = -x guard gave 2**32 - 1 for 1 // (2**32 - 1)
    top = np.iinfo(dt).max
    a, b = np.array([1, top - 1, 0, 7], dt), np.array([top, top, top, 2], dt)
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    assert (x // y).tolist() == (a // b).tolist()
    assert (x % y).tolist() == (a % b).tolist()


def test_float_to_uint64_past_two_to_the_63_on_the_emulator():
    # the emulator's cast went through int64 and saturated near 2**63
    values = [1e19, 1.8e19, 5.0, 2.0**63]
    for device in ("CPU", "EMULATOR"):
        got = Tensor(values, dtype=dtypes.float64, device=device).cast(dtypes.uint64).tolist()
        assert got == [int(v) for v in values], device


def test_format_comparison_with_none_and_to_with_a_foreign_dtype():
    assert f"{Tensor(3.14159):.2f}" == f"{torch.tensor(3.14159):.2f}" == "3.14"
    assert f"{Tensor(7):4d}" == "   7"
    with pytest.raises(TypeError, match="only a 0-d tensor formats as a number"):
        f"{Tensor([1.0, 2.0]):.2f}"
    t = Tensor([1.0])
    assert (t == None) is False and (t != None) is True  # noqa: E711 - what is tested
    for foreign in (torch.float16, np.float16, 5):
        with pytest.raises(TypeError, match="to: expected a device name, a uopkit dtype"):
            t.to(foreign)
    assert t.to("float16").dtype == dtypes.float16 and t.to("CPU").device == "CPU"


def test_numpy_reads_a_tensor_through_the_array_protocol():
    t = Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(np.asarray(t), np.ndarray) and np.asarray(t).dtype == np.float32
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    np.testing.assert_allclose(t, [[1, 2], [3, 4]])
    assert np.asarray(Tensor([1.5], dtype=dtypes.bfloat16)).tolist() == [1.5]
    assert np.array([Tensor(1.0), Tensor(2.0)]).tolist() == [1.0, 2.0]
    # numpy's operators defer to the tensor's: the result is a Tensor
    out = np.ones(2, np.float32) + Tensor([1.0, 2.0])
    assert isinstance(out, Tensor) and out.tolist() == [2.0, 3.0]


def test_products_over_two_devices_name_the_op_called():
    # they named "mul", the elementwise product inside
    import uopkit.nn.functional as F

    a, b = Tensor([[1.0, 2.0]]), Tensor([[1.0], [2.0]], device="EMULATOR")
    for op, make in [
        ("matmul", lambda: a @ b),
        ("matmul", lambda: a.matmul(b)),
        ("matmul", lambda: a.dot(b)),
        ("linear", lambda: a.linear(b)),
        ("linear", lambda: F.linear(a, b.T)),
        ("linear", lambda: F.linear(a, Tensor([1.0, 2.0], device="EMULATOR"))),
        ("linear", lambda: F.linear(a, Tensor([[1.0, 2.0]]), Tensor([0.0], device="EMULATOR"))),
    ]:
        with pytest.raises(ArgumentError, match=f"^{op}: operands are on different devices"):
            make().realize()

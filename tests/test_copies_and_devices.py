"""Python's copy protocols and pickle, iteration and `in`, ops over tensors on different devices, and unsigned
integer division on every C-like backend: PyTorch's behaviour, checked."""

import copy
import gc
import pickle
import weakref

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes
from uopkit.nn import Linear, Parameter
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


@pytest.mark.usefixtures("gc_of_this_test")
def test_deepcopy_keeps_nothing_of_the_original():
    # the copy was a lazy graph over the original's buffers (and, realized, remembered it as its source): deleting the
    # original model freed none of its buffers while the copy lived
    layer = Linear(4, 3)
    layer(Tensor.ones(2, 4)).sum().backward()
    twin = copy.deepcopy(layer)
    gone = [weakref.ref(t.uop.base) for t in (layer.weight, layer.bias)]
    weight = layer.weight.numpy()
    del layer
    gc.collect()
    assert all(r() is None for r in gone)
    np.testing.assert_array_equal(twin.weight.numpy(), weight)


def _views(lib, values):
    # [base, two overlapping slices of it, its transpose]: the structures whose views deepcopy keeps
    base = lib.tensor(values) if lib is torch else Tensor(values)
    square = base.reshape(2, 3)
    return [base, base[1:3], base[2:5], square.T, square]


def _write(copied, lib):
    copied[1][1] = 100.0
    copied[3][2, 1] = -7.0
    return [t.tolist() for t in copied]


@pytest.mark.parametrize("make", ["list", "dict", "module"])
def test_deepcopy_keeps_views_of_one_storage_as_torch(make):
    # each copy had storage of its own: a write into the copied slice left the copied base unchanged
    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ours, theirs = _views(None, values), _views(torch, values)
    if make == "dict":
        ours, theirs = ({"a": t[0], "b": t[3]} for t in (ours, theirs))
    if make == "module":
        # weight tying through a view: two attributes of one module
        tied, ttied = Linear(2, 3, bias=False), torch.nn.Module()
        tied.w, tied.wt = ours[4], ours[3]
        ttied.w, ttied.wt = theirs[4], theirs[3]
        ours, theirs = tied, ttied
    copied, tcopied = copy.deepcopy(ours), copy.deepcopy(theirs)
    if make == "list":
        assert _write(copied, None) == _write(tcopied, torch)
        assert copied[2].tolist() == tcopied[2].tolist() == [100.0, 3.0, 4.0]
        assert ours[0].tolist() == values
        return
    if make == "dict":
        copied["b"][0, 1] = 9.0
        tcopied["b"][0, 1] = 9.0
        assert copied["a"].tolist() == tcopied["a"].tolist() and ours["a"].tolist() == values
        return
    copied.wt[2, 0] = 50.0
    tcopied.wt[2, 0] = 50.0
    assert copied.w.tolist() == tcopied.w.tolist() == [[0.0, 1.0, 50.0], [3.0, 4.0, 5.0]]
    assert tied.w.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_deepcopy_of_a_view_of_a_weight_stays_its_view():
    # (torch refuses to deepcopy a view of a tensor that requires grad; here the copy ties it to the copied weight,
    # as in the original: the gradient through the view reaches the copied weight, as torch's through the original)
    w = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    tw = torch.tensor(w.tolist(), requires_grad=True)
    copied = copy.deepcopy({"w": w, "wt": w.T})
    assert copied["w"].is_leaf and not copied["wt"].is_leaf and copied["wt"].requires_grad
    x = [[1.0, -1.0], [2.0, 0.5], [0.0, 3.0]]
    (copied["wt"] * Tensor(x)).sum().backward()
    (tw.T * torch.tensor(x)).sum().backward()
    assert copied["w"].grad.tolist() == tw.grad.tolist() and w.grad is None


def test_pickle_gives_each_tensor_storage_of_its_own_as_torch():
    # torch's pickle (not torch.save) keeps no storage shared between the tensors of one pickle
    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    back = pickle.loads(pickle.dumps(_views(None, values)))
    tback = pickle.loads(pickle.dumps(_views(torch, values)))
    assert _write(back, None) == _write(tback, torch)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_a_frozen_layer_keep_its_parameters_as_torch(how):
    # the frozen weight came back a plain tensor: the copy had one parameter, torch's two
    layer, tlayer = Linear(2, 2), torch.nn.Linear(2, 2)
    layer.weight.requires_grad_(False)
    tlayer.weight.requires_grad_(False)
    again = copy.deepcopy if how == "deepcopy" else (lambda m: pickle.loads(pickle.dumps(m)))
    flags = [p.requires_grad for p in again(layer).parameters()]
    assert flags == [p.requires_grad for p in again(tlayer).parameters()] == [False, True]


def test_deepcopy_of_a_parameter_leaves_its_grad_behind_as_torch():
    # a model copied after backward() kept its parameters' .grad: the copy's first backward() added to the original's
    # gradient ([[4, 4]], torch [[3, 3]]); torch's Parameter copies values and requires_grad only (a tensor keeps .grad)
    w = np.array([[1.0, 2.0]], np.float32)
    layer, tlayer = Linear(2, 1), torch.nn.Linear(2, 1)
    tlayer.weight = torch.nn.Parameter(torch.tensor(w))
    layer.weight = Parameter(Tensor(w))
    layer(Tensor([[1.0, 1.0]])).sum().backward()
    tlayer(torch.tensor([[1.0, 1.0]])).sum().backward()
    twin, ttwin = copy.deepcopy(layer), copy.deepcopy(tlayer)
    assert (twin.weight.grad, twin.bias.grad) == (ttwin.weight.grad, ttwin.bias.grad) == (None, None)
    twin(Tensor([[3.0, 3.0]])).sum().backward()
    ttwin(torch.tensor([[3.0, 3.0]])).sum().backward()
    assert twin.weight.grad.tolist() == ttwin.weight.grad.tolist() == [[3.0, 3.0]]
    assert layer.weight.grad.tolist() == tlayer.weight.grad.tolist() == [[1.0, 1.0]]
    # a plain tensor that requires grad keeps it, as torch's
    g, tg = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    assert copy.deepcopy(g).grad.tolist() == copy.deepcopy(tg).grad.tolist() == [2.0, 4.0]


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
    # (a torch dtype is taken by its name: tests/test_interop.py)
    assert t.to(torch.float16).dtype == dtypes.float16
    for foreign in (np.float16, 5):
        with pytest.raises(TypeError, match="to: expected a device name, a dtype"):
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

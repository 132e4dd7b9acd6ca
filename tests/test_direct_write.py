"""`x[i] = number` into one element of a realized, contiguous tensor on a host-memory device is stored straight into
the buffer, without a kernel (`tensor/direct_write.py`); every case outside its conditions takes the general path and
keeps its semantics: lazy readers keep the old contents, views show the new ones, gradients follow what was computed,
a TinyJit capture records the write."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Device, GlobalCounters, Tensor, TinyJit
from uopkit.dtype import ValueOverflowError

torch = pytest.importorskip("torch")


def _kernels(write) -> int:
    before = GlobalCounters.kernel_count
    write()
    return GlobalCounters.kernel_count - before


@pytest.mark.parametrize(
    "dtype, index, value",
    [
        ("float32", 3, 2.5),
        ("float32", -1, 7),
        ("float64", (1, 2), -0.1),
        ("int32", (0, -1), 3.7),
        ("int64", 2, -5),
        ("uint8", 1, -1),
        ("bool", (1, 0), 2),
        ("float32", (2, 1), True),
    ],
)
def test_one_element_is_stored_without_a_kernel(dtype, index, value):
    shape = (5,) if type(index) is int else (3, 4)
    start = np.arange(int(np.prod(shape))).reshape(shape) % 3
    x = Tensor(start.astype(dtype)).realize()
    tx = torch.tensor(start.astype(dtype))
    # (a device whose buffers the host can't write a part of, OpenCL's, runs the kernel)
    direct = Device[x.device].allocator.writes_at_offset
    assert (_kernels(lambda: x.__setitem__(index, value)) == 0) == direct
    tx[index] = value
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_the_general_path_where_the_conditions_fail():
    # (each write falls back: compared against torch, and a kernel ran for those a kernel must run for)
    x, tx = Tensor([1.0, 2.0, 3.0]).realize(), torch.tensor([1.0, 2.0, 3.0])
    r, v, tr, tv = x * 2, x[1:], tx * 2, tx[1:]
    assert _kernels(lambda: x.__setitem__(1, 9.0)) > 0  # a lazy value reads x: it keeps the old contents
    tx[1] = 9.0
    x[2] = 4.0  # v, a view, shows both writes
    tx[2] = 4.0
    assert r.tolist() == tr.tolist() and v.tolist() == tv.tolist() and x.tolist() == tx.tolist()
    # an assign still to run into the buffer runs first
    z = Tensor.zeros(3).contiguous().realize()
    z.assign(Tensor.ones(3))
    z[0] = 5.0
    assert z.tolist() == [5.0, 1.0, 1.0]
    # two tensors that one realize stored in one buffer (hash-consed graphs) are separate tensors
    p, q = Tensor.ones(3) + 1, Tensor.ones(3) + 1
    Tensor.realize(p, q)
    p[0] = 0.0
    assert (p.tolist(), q.tolist()) == ([0.0, 2.0, 2.0], [2.0, 2.0, 2.0])
    # a row, a view, a half float and a number out of range or beyond the dtype
    h = Tensor.zeros(2, 2, dtype="float16").contiguous().realize()
    h[0, 1] = 1e6
    h[1] = 3.0
    assert h.tolist() == torch.tensor([[0.0, 1e6], [3.0, 3.0]], dtype=torch.float16).tolist()
    w = h[1]
    w[0] = 2.0
    assert h.tolist()[1] == [2.0, 3.0]
    with pytest.raises(IndexError):
        x[3] = 1.0
    with pytest.raises(ValueOverflowError):
        x[0] = 1e40


def test_writes_that_autograd_or_a_capture_must_see():
    # a value a backward() follows to what computed it: the written element's gradient is cut, as torch's
    a, ta = Tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b, tb = (a * 2).realize(), ta * 2
    b[0] = 5.0
    tb[0] = 5.0
    (b * b).sum().backward()
    (tb * tb).sum().backward()
    assert a.grad.tolist() == ta.grad.tolist()
    # a leaf that requires grad takes the write as an update unseen by autograd (docs/semantics.md)
    leaf = Tensor([0.0, 0.0], requires_grad=True).realize()
    leaf[1] = 2.0
    (leaf * 3).sum().backward()
    assert leaf.tolist() == [0.0, 2.0] and leaf.grad.tolist() == [3.0, 3.0]
    # inside a TinyJit capture the write is a kernel the replays run again
    buf = Tensor.zeros(3).contiguous().realize()

    @TinyJit
    def step(k: Tensor) -> Tensor:
        buf[1] = 9.0
        return (buf + k).realize()

    for j in range(4):
        buf[1] = 0.0
        assert step(Tensor([float(j)] * 3).realize()).tolist() == [j, 9.0 + j, j]
        assert buf.tolist() == [0.0, 9.0, 0.0]

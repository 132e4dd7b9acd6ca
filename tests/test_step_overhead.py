"""What keeps the Python cost of building and realizing a graph low: nodes without a __dict__ for their shape and
device, a live-tensor set that adds and drops in C, broadcasting that builds the same nodes as reshape + expand."""

import gc

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.schedule import LiveTensors, live_tensors
from uopkit.uop.ops import Ops, UOp


def test_shape_and_device_are_slots_not_dict_entries():
    t = (Tensor([[1.0, 2.0]]) + 1).sum(1) * Tensor([3.0])
    u = t.uop
    assert u.shape == (1,) and u.device == "CPU"
    # a tensor graph's nodes keep both without a __dict__ (one object less per node for the garbage collector)
    assert all(not n.__dict__ for n in u.toposort())
    assert t.tolist() == [15.0]


def test_shape_of_a_deep_unshaped_graph_has_no_recursion():
    u = UOp(Ops.BUFFER, dtypes.float32, (), (-1, "CPU", 4))
    for _ in range(5000):
        u = UOp(Ops.NEG, dtypes.float32, (u,))
    assert u.shape == (4,) and u.device == "CPU"


def test_missing_uop_attribute_is_an_attribute_error():
    u = UOp.const(dtypes.int32, 1)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        u.nonexistent  # noqa: B018
    assert not hasattr(u, "nonexistent")


def test_live_tensors_hold_weakly_in_creation_order():
    live = LiveTensors()
    ts = [Tensor([float(i)]) for i in range(4)]
    for t in ts:
        live.add(t)
    live.add(ts[0])
    assert list(live) == ts and len(live) == 4
    del ts[1]
    gc.collect()
    assert len(live) == 3 and [t.tolist() for t in live] == [[0.0], [2.0], [3.0]]


def test_every_tensor_is_live_until_dropped():
    before = len(live_tensors)
    t = Tensor([1.0]) + 1
    assert any(x is t for x in live_tensors)
    del t
    gc.collect()
    assert len(live_tensors) <= before + 1


@pytest.mark.parametrize(
    "a_shape, b_shape", [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), ()), ((4,), (3, 4)), ((3, 4), (3, 4))]
)
def test_broadcasting_builds_the_nodes_of_reshape_and_expand(a_shape, b_shape):
    a, b = Tensor(np.ones(a_shape, np.float32)), Tensor(np.full(b_shape, 2.0, np.float32))
    out = np.broadcast_shapes(a_shape, b_shape)
    x, y = a._broadcasted(b)
    for t, src in ((x, a), (y, b)):
        padded = (1,) * (len(out) - src.ndim) + src.shape
        assert t.uop is src.reshape(padded).expand(out).uop
    np.testing.assert_array_equal((a * b).numpy(), np.ones(a_shape) * np.full(b_shape, 2.0))


def test_broadcast_to_an_incompatible_shape_raises():
    from uopkit.tensor import ShapeError

    with pytest.raises(ShapeError):
        Tensor(np.ones((3, 4), np.float32))._broadcast_to((3, 5))
    with pytest.raises(ShapeError):
        Tensor(np.ones((3, 4), np.float32)) + Tensor(np.ones((2, 4), np.float32))

"""What keeps the Python cost of building and realizing a graph low: nodes without a __dict__ for their shape and
device, a live-tensor set that adds and drops in C, broadcasting that builds the same nodes as reshape + expand."""

import gc
import threading
import weakref

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


def test_uop_attribute_reads_take_cpythons_fast_path():
    # in a class with __getattr__ every attribute read, `u.op` included, goes through
    # CPython's slow hook: shape and device are properties over slots instead
    assert not any("__getattr__" in vars(c) for c in UOp.__mro__)
    u = UOp(Ops.NEG, dtypes.float32, (UOp.new_buffer("CPU", 4, dtypes.float32),))
    assert u.shape == (4,) and u.device == "CPU"


def test_missing_uop_attribute_is_an_attribute_error():
    u = UOp.const(dtypes.int32, 1)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        u.nonexistent  # noqa: B018
    assert not hasattr(u, "nonexistent")


@pytest.mark.usefixtures("gc_of_this_test")
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


def _visits(monkeypatch):
    # how many live tensors each realize's walks look at: update_tensors' (changed_since), and the computed ones an
    # assign or a realize is given from the index (`readers_of`, `holding`, `pending_assigns`) or walks (`computed`)
    seen = {"changed": [], "computed": [0]}
    changed = LiveTensors.changed_since
    monkeypatch.setattr(LiveTensors, "changed_since", lambda s, q: seen["changed"].append(len(r := changed(s, q))) or r)
    for name in ("computed", "readers_of", "holding", "pending_assigns"):
        method = getattr(LiveTensors, name)

        def counted(s, *a, method=method):
            seen["computed"].append(len(r := method(s, *a)))
            return r

        monkeypatch.setattr(LiveTensors, name, counted)
    return seen


def test_a_realize_looks_at_the_tensors_that_changed_not_every_live_one(monkeypatch):
    # a model's weights and state (or results a program keeps) are live tensors no realize changes: they are not
    # walked, so a realize costs the same with 2000 of them. (Lazy tensors earlier tests of the process still hold are
    # counted apart: how many there are depends on which tests ran before)
    before = len(live_tensors.computed())
    kept = [Tensor(np.full(3, float(i), np.float32)).realize() for i in range(2000)]
    lazy_early = Tensor(np.ones(3, np.float32)) * 3
    w = Tensor(np.zeros(3, np.float32)).realize()
    w.assign(w + 1).realize()  # (one walk of the computed list drops the realized tensors from it)
    seen = _visits(monkeypatch)
    b = Tensor(np.arange(3, dtype=np.float32)).realize()
    out = (b + 1).realize()
    w.assign(w + b).realize()
    assert max(seen["changed"]) < 10 and max(seen["computed"]) < before + 10, (seen, before)
    assert out.tolist() == [1.0, 2.0, 3.0] and w.tolist() == [1.0, 2.0, 3.0]
    # a lazy tensor from before still reads the old contents of what an assign overwrites (value semantics)
    old = w * 10
    for _ in range(3):
        kept.append(Tensor(np.ones(3, np.float32)).realize())
    w.assign(w * 0).realize()
    assert old.tolist() == [10.0, 20.0, 30.0] and w.tolist() == [0.0, 0.0, 0.0]
    assert lazy_early.tolist() == [3.0, 3.0, 3.0] and kept[1999].tolist() == [1999.0] * 3


def test_assigns_walk_a_lazy_value_that_reads_none_of_their_buffers_once(monkeypatch):
    # prepared batches kept lazy through a training loop: each step's assign must not walk all their graphs again.
    # A value that reads the buffer, made later, is still found and keeps the old contents
    import uopkit.schedule as schedule

    a = Tensor(np.arange(3, dtype=np.float32)).realize()
    w = Tensor(np.zeros(3, np.float32)).realize()
    batches = [a * float(i) + 2 for i in range(200)]
    w.assign(w + 1).realize()
    walked = [0]
    index_reads = schedule.LiveTensors._index_reads
    monkeypatch.setattr(schedule.LiveTensors, "_index_reads", lambda s: walked.append(len(s._unread)) or index_reads(s))
    for _ in range(3):
        w.assign(w + 1).realize()
    reader = w * 10
    w.assign(w + 1).realize()
    assert max(walked) < 5, walked
    assert reader.tolist() == [40.0, 40.0, 40.0] and w.tolist() == [5.0, 5.0, 5.0]
    assert batches[199].tolist() == [2.0, 201.0, 400.0]


def test_an_old_tensor_whose_node_a_realize_computes_reads_the_result():
    # realizing a graph points the other live tensors holding its nodes at the stored value, however old the tensor:
    # its stamp is when its graph last changed
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    c = a * 2 + 1
    others = [Tensor(np.ones(2, np.float32)) + i for i in range(50)]
    d = (a * 2 + 1).realize()
    assert c.uop.base.op is Ops.BUFFER and c.uop is d.uop
    a.assign(Tensor(np.zeros(4, np.float32))).realize()
    assert c.tolist() == [1.0, 3.0, 5.0, 7.0] and others[49].tolist() == [50.0, 50.0]


def test_realizing_one_expression_again_looks_only_at_the_tensors_made_since(monkeypatch):
    # `(a + 1)` is one hash-consed node, kept alive by what the first realize remembers for backward(): its number is
    # old, yet every tensor that held it was moved off it then. Keeping each result must not make the next realize
    # walk all the earlier ones; a tensor built on the node after that is still found and computed
    a = Tensor(np.arange(3, dtype=np.float32)).realize()
    kept = [(a + 1).realize() for _ in range(300)]
    seen = _visits(monkeypatch)
    kept += [(a + 1).realize() for _ in range(5)]
    assert max(seen["changed"]) < 10, seen
    lazy = a + 1
    on_top = lazy * 2
    again = (a + 1).realize()
    assert lazy.uop.base.op is Ops.BUFFER and lazy.uop is again.uop and on_top.uop.src[0] is again.uop
    a.assign(Tensor(np.zeros(3, np.float32))).realize()
    assert lazy.tolist() == [1.0, 2.0, 3.0] and on_top.tolist() == [2.0, 4.0, 6.0]
    assert kept[0].tolist() == [1.0, 2.0, 3.0] and (a + 1).tolist() == [1.0, 1.0, 1.0]


def test_realizing_one_of_many_pending_values_walks_no_other_graph(monkeypatch):
    # a value no other node was built on is in no other tensor's graph: realizing them one by one (`[o.item() for o in
    # outs]`, a schedule-cache hit each) costs the same with 5 or 500 pending, not a walk of each pending graph per
    # realize; a value that another lazy tensor is built on is still found in that tensor's graph
    import uopkit.schedule as schedule

    xs = [Tensor(np.full(3, i, np.float32)).realize() for i in range(40)]
    # (the graphs' schedule cached first: the scheduler's own nodes over a value make it used)
    (Tensor(np.zeros(3, np.float32)).realize() + 1).tanh().realize()
    outs = [(x + 1).tanh() for x in xs]
    on_top = outs[3] * 2
    walks = []
    reaches = schedule._reaches
    monkeypatch.setattr(schedule, "_reaches", lambda *a: walks.append(a[0]) or reaches(*a))
    outs[0].realize()
    assert walks == [] and outs[0].uop.base.op is Ops.BUFFER
    outs[3].realize()
    assert walks and on_top.uop.src[0] is outs[3].uop
    np.testing.assert_allclose(on_top.numpy(), 2 * np.tanh(np.full(3, 4.0, np.float32)), rtol=1e-6)
    np.testing.assert_allclose([o.numpy()[0] for o in outs], np.tanh(np.arange(1, 41, dtype=np.float32)), rtol=1e-6)


@pytest.mark.parametrize("other_thread", [False, True], ids=["alone", "beside_an_idle_thread"])
def test_live_tensors_stamp_each_graph_change_and_keep_computed_ones_apart(other_thread):
    # (a breach is told from another thread's set_uop in progress by outlasting pauses: one idle thread alive, as a
    # leftover worker of an earlier test may be, still lets a real breach through)
    stop = threading.Event()
    idle = threading.Thread(target=stop.wait, daemon=True)
    if other_thread:
        idle.start()
    try:
        _stamps_and_computed_ones()
    finally:
        stop.set()


def _stamps_and_computed_ones():
    live = LiveTensors()
    a, b = Tensor(np.ones(2, np.float32)).realize(), Tensor(np.ones(2, np.float32)) + 1
    ra, rb = live.add(a), live.add(b)
    mark = UOp(Ops.CONST, dtypes.int32, (), 12345).seq
    assert live.changed_since(mark) == [] and live.changed_since(-1) == [a, b]
    # the computed list holds what may not be a view of storage: the realized `a` leaves it
    assert live.computed() == [b] and live.computed() == [b]
    a._live_ref, b._live_ref = ra, rb
    live.set_uop(a, (a + 2).uop)
    assert live.changed_since(mark) == [a] and live.computed() == [b, a]
    live.check()
    # a graph changed behind its back is caught under SPEC
    b.uop = (b * 5).uop
    with pytest.raises(AssertionError, match="without LiveTensors.set_uop"):
        live.check()


def test_backward_looks_at_the_tensors_given_requires_grad_not_every_live_one(monkeypatch):
    kept = [Tensor(np.ones(3, np.float32)).realize() for _ in range(500)]
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    v = Tensor(np.ones(3, np.float32))
    v.requires_grad = True
    v.requires_grad_(True)  # (given twice: still one gradient)
    u = Tensor(np.ones(3, np.float32), requires_grad=True)
    u.requires_grad = False

    def no_walk(self):
        raise AssertionError("backward() walked every live tensor")

    monkeypatch.setattr(LiveTensors, "snapshot", no_walk)
    (w * 2 + v * 3 + u).sum().backward()
    monkeypatch.undo()
    assert w.grad.tolist() == [2.0] * 3 and v.grad.tolist() == [3.0] * 3 and u.grad is None
    assert len(kept) == 500


@pytest.mark.usefixtures("gc_of_this_test")
def test_tensors_with_grad_drop_the_dead_and_the_unmarked():
    from uopkit.tensor.support import TensorsWithGrad

    reg = TensorsWithGrad()
    ts = [Tensor([float(i)], requires_grad=True) for i in range(3)]
    for t in ts:
        reg.add(t)
    del t
    reg.add(ts[0])
    assert reg.live() == ts
    ts[1].requires_grad = False
    del ts[2]
    gc.collect()
    assert reg.live() == [ts[0]] and len(reg._refs) == 2


def test_a_walk_of_live_tensors_survives_the_dict_changing_under_it():
    # another thread may make a tensor (or a garbage collection drop one) while a realize walks the live tensors: the
    # walk then goes over a copy instead of failing
    class Changing(dict):
        def __reversed__(self):
            keys = iter(dict.__reversed__(self))
            yield next(keys)
            self[weakref.ref(late)] = 10**12  # (a tensor made meanwhile)
            yield from keys

    live = LiveTensors()
    ts = [Tensor([float(i)]) + 1 for i in range(4)]
    late = Tensor([9.0])
    for t in ts:
        live.add(t)
    live._refs = Changing(live._refs)
    walked = live.changed_since(-1)
    assert len(walked) == 5 and all(a is b for a, b in zip(walked, [*ts, late], strict=True))
    # (the made tensor is a view of storage: not computed)
    assert [t.tolist() for t in live.computed()] == [[1.0], [2.0], [3.0], [4.0]]


def test_library_code_changes_graphs_only_through_set_uop():
    # (a tensor's graph assigned elsewhere would keep an old stamp, and a realize could skip it)
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    offenders = []
    for path in [*root.glob("core/uopkit/**/*.py"), *root.glob("plugins/*/uopkit_*/**/*.py")]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.uop\s*=[^=]", line) and "self.uop = " not in line and "t.uop = uop" not in line:
                offenders.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not offenders, offenders


@pytest.mark.usefixtures("gc_of_this_test")
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


# ---------------------------------------------------------------------------------------------------------------------
# copy on write: a large reader that holds no STORE is pointed at the computed copy after the realize (one rebuild of
# its graph), one that reads the STORE too is rewired before it


@pytest.mark.parametrize("cached", [False, True])
def test_reader_is_rewired_to_the_computed_copy(cached):
    results = []
    for _ in range(2 if cached else 1):
        # the second round takes the schedule cache's path (same structure, other buffers)
        w = Tensor(np.arange(4, dtype=np.float32)).contiguous().realize()
        big = (w.reshape(1, 4).expand(64, 4) + Tensor(np.ones((64, 4), np.float32))).exp()
        w.assign(w * 0).realize()
        # the reader reads the copy's buffer, not the overwritten one (nor a lazy copy of it)
        nodes = big.uop.toposort()
        assert w.uop.base not in nodes and not any(n.op is Ops.CONTIGUOUS for n in nodes)
        results.append(big.numpy())
    expected = np.exp(np.arange(4, dtype=np.float32)[None] + 1 + np.zeros((64, 1), np.float32))
    for r in results:
        np.testing.assert_allclose(r, expected, rtol=1e-6)


def test_which_readers_are_rewired_before_and_after():
    from uopkit.schedule import protect_pending_reads

    w = Tensor(np.arange(4, dtype=np.float32)).contiguous().realize()
    big = w.reshape(1, 4).expand(64, 4) + Tensor(np.ones((64, 4), np.float32))
    w.assign(w + 1)
    # reads the new contents (the STORE) and the old (through `big`)
    mixed = big + w.reshape(1, 4).expand(64, 4)
    big_graph, mixed_graph = big.uop, mixed.uop
    pending = protect_pending_reads([w], UOp(Ops.SINK, src=(w.uop,)))
    assert [t is big for t in pending.rewire_after] == [True] and len(pending.copies) == 1
    # the reader of the STORE is rewired now; the other after the realize
    assert mixed.uop is not mixed_graph and big.uop is big_graph
    Tensor.realize(w, *pending.copies)
    pending.rewire_to_copies()
    assert big.uop is not big_graph and w.uop.base not in big.uop.toposort()
    old = np.arange(4, dtype=np.float32)[None] + np.zeros((64, 1), np.float32)
    np.testing.assert_array_equal(big.numpy(), old + 1)
    np.testing.assert_array_equal(mixed.numpy(), old + 1 + old + 1)


@pytest.mark.usefixtures("gc_of_this_test")
def test_upload_and_read_back_leave_no_reference_cycles():
    # a training step uploads its batch and reads its loss back: that must not leave garbage for the cyclic collector
    # (the CPU runtime once made a ctypes array type per size, each a cycle)
    Tensor(np.ones(3, np.float32)).numpy()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for n in (1237, 2311, 977):
            assert Tensor(np.arange(n, dtype=np.float32)).numpy()[-1] == n - 1
        gc.collect()
        # (other tests' leftovers may be collected too: only ctypes types count)
        assert not [o for o in gc.garbage if isinstance(o, type) and "Array" in o.__name__]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.usefixtures("gc_of_this_test")
def test_weak_key_map_drops_entries_with_their_nodes():
    from uopkit.uop.weak_map import WeakKeyMap

    m = WeakKeyMap()
    a, b = UOp.new_buffer("CPU", 3, dtypes.float32), UOp.new_buffer("CPU", 5, dtypes.float32)
    m[a], m[b] = "a", "b"
    m[a] = "a2"
    assert m[a] == "a2" and m.get(b) == "b" and a in m and len(m) == 2
    assert None not in m and m.get(UOp.new_buffer("CPU", 3, dtypes.float32), "none") == "none"
    del a
    gc.collect()
    assert len(m) == 1 and m[b] == "b"
    assert m.pop(b) == "b" and m.pop(b, "gone") == "gone" and len(m) == 0


@pytest.mark.parametrize("cached", [False, True])
def test_reader_holding_a_realized_value_keeps_the_old_contents(cached):
    # the reader holds the loss (realized in the same step, before the write) and reads the weight raw: both parts
    # must keep the values from before the assign, on the replay path as on the first
    for _ in range(2 if cached else 1):
        w = Tensor(np.arange(1, 5, dtype=np.float32)).contiguous().realize()
        loss = (w * Tensor(np.full(4, 2.0, np.float32))).sum()
        reader = w.reshape(1, 4).expand(64, 4) * loss
        Tensor.realize(loss, w.assign(w * 0))
        assert loss.item() == 20.0 and w.tolist() == [0.0] * 4
        np.testing.assert_array_equal(reader.numpy(), np.tile(np.arange(1, 5, dtype=np.float32) * 20.0, (64, 1)))


def test_recent_python_numbers_keep_their_broadcast_nodes():
    from uopkit.tensor import elementwise

    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    first = (a + 1.5).uop.src[1]
    assert (a + 1.5).uop.src[1] is first and (1.5 + a).uop.src[0] is first
    # kept by type, dtype and shape: an int and a float of one value, and other shapes, are other nodes
    b = Tensor([1, 2])
    assert (b + 2).tolist() == [3, 4] and (b + 2.0).tolist() == [3.0, 4.0] and (b + 2.0).dtype == dtypes.float32
    assert (a.reshape(3, 2) * 1.5).uop.src[1].shape == (3, 2)
    np.testing.assert_array_equal((a + 1.5).numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) + 1.5)
    # NaN never equals its key and zeros carry a sign: neither is kept, both still compute
    assert np.isnan((a + float("nan")).numpy()).all()
    assert np.signbit((Tensor([-0.0]) + -0.0).numpy()).all() == np.signbit(np.float32(-0.0) + np.float32(-0.0))
    for i in range(elementwise._RECENT_SCALARS_SIZE + 10):
        a + float(i + 0.25)
    assert len(elementwise._recent_scalars) <= elementwise._RECENT_SCALARS_SIZE


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("n, k, m", [(1, 3, 4), (5, 3, 1), (5, 1, 4), (2, 3, 4), (1, 1, 1), (3, 0, 2)])
def test_matrix_product_builds_the_nodes_of_the_general_path(n, k, m, dtype, monkeypatch):
    # two matrices of one dtype have their product's nodes built directly: the same nodes as reshape, transpose,
    # broadcast, multiply and sum build
    from uopkit.tensor import linalg

    x, w = Tensor(np.ones((n, k)), dtype=dtype), Tensor(np.ones((k, m)), dtype=dtype)
    direct = (x @ w).uop
    monkeypatch.setattr(linalg, "_matrix_product_uop", lambda x, w: None)
    assert direct is (x @ w).uop
    monkeypatch.undo()
    if dtype in ("float32", "float64") and k > 1:
        assert linalg._matrix_product_uop(x.uop, w.uop) is direct
    np.testing.assert_array_equal((x @ w).numpy(), np.ones((n, k), dtype) @ np.ones((k, m), dtype))


def test_matrix_product_of_mismatched_operands_raises_as_before():
    from uopkit.tensor import ShapeError

    with pytest.raises(ShapeError, match="inner dimensions"):
        Tensor(np.ones((2, 3), np.float32)) @ Tensor(np.ones((4, 2), np.float32))
    # mixed dtypes promote (the general path)
    out = Tensor(np.ones((2, 3), np.float32)) @ Tensor(np.ones((3, 2), np.float64))
    assert out.dtype == dtypes.float64 and out.tolist() == [[3.0, 3.0], [3.0, 3.0]]


@pytest.mark.usefixtures("gc_of_this_test")
def test_live_tensor_snapshot_is_the_live_tensors_in_order():
    live = LiveTensors()
    ts = [Tensor([float(i)]) for i in range(3)]
    for t in ts:
        live.add(t)
    assert live.snapshot() == list(live) == ts
    del ts[0]
    gc.collect()
    assert [t.tolist() for t in live.snapshot()] == [[1.0], [2.0]]


def test_recent_numbers_answer_only_what_takes_the_tensors_dtype():
    # the recent-numbers lookup comes before the dtype rules: only numbers that took the tensor's dtype are kept, so
    # promotion and overflow still go by the rules
    small = Tensor(np.array([1, 2], np.int8))
    assert (small + 1).dtype == dtypes.int8 and (small + 1).dtype == dtypes.int8
    assert (small + 1000).dtype == dtypes.int64 and (small + 1000).tolist() == [1001, 1002]
    assert (small + 1.5).dtype == dtypes.float32 and (small + 1.5).tolist() == [2.5, 3.5]
    flags = Tensor([True, False])
    assert (flags + 1).dtype == dtypes.int32 and (flags + 1).tolist() == [2, 1]
    with pytest.raises(OverflowError):
        small + 2**70


@pytest.mark.usefixtures("gc_of_this_test")
def test_dropped_nodes_leave_the_hash_consing_table():
    from uopkit.uop import ops

    nodes = [UOp(Ops.NEG, dtypes.float32, (UOp.new_buffer("CPU", 4, dtypes.float32),)) for _ in range(50)]
    # (a key holds its sources: the NEGs' keys keep their BUFFERs alive, the BUFFERs' keys hold no node)
    neg_keys = [(n.op, n.dtype, n.src, n.arg) for n in nodes]
    buffer_keys = [(b.op, b.dtype, b.src, b.arg) for n in nodes for b in n.src]
    assert all(ops._uop_table[k]() is not None for k in neg_keys + buffer_keys)
    assert UOp(Ops.NEG, dtypes.float32, (nodes[0].src[0],)) is nodes[0]
    del nodes
    gc.collect()
    assert not any(k in ops._uop_table for k in neg_keys)
    del neg_keys
    gc.collect()
    assert not any(k in ops._uop_table for k in buffer_keys)


def test_backward_after_realizing_part_of_the_graph_follows_it_back():
    # backward() skips the walk that puts back realized values when no node of the graph was realized; when one was
    # (the loss's inner sum here), the gradient still flows through the graph that computed it
    from uopkit.gradient import graph_of
    from uopkit.schedule import unrealized_graph

    w = Tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    inner = (w * w).sum()
    inner.realize()
    loss = inner * 2
    nodes = graph_of(loss.uop)
    assert unrealized_graph(loss.uop, {w.uop}, nodes) is unrealized_graph(loss.uop, {w.uop}) is not loss.uop
    loss.backward()
    assert w.grad.tolist() == [4.0, 8.0, 12.0]
    fresh = (w * 3).sum()
    assert unrealized_graph(fresh.uop, {w.uop}, graph_of(fresh.uop)) is fresh.uop


@pytest.mark.parametrize("logits_dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("targets_dtype", ["int32", "int64", "int8", "uint8"])
@pytest.mark.parametrize("n, c", [(6, 4), (1, 3), (4, 1), (2, 2)])
@pytest.mark.parametrize("ignore_index", [-100, 1, 300])
def test_cross_entropy_builds_the_nodes_of_the_general_path(
    n, c, logits_dtype, targets_dtype, ignore_index, monkeypatch
):
    # the mean loss at class targets has its nodes built directly: the same nodes (so the same kernels and gradients)
    # as log_softmax, the one-hot compare, the wheres and the sums build; other dtypes and shapes take that path
    from uopkit.tensor import functional

    rng = np.random.default_rng(n * c)
    x = Tensor(rng.standard_normal((n, c)).astype(logits_dtype), requires_grad=True)
    y = Tensor(rng.integers(0, c, n).astype(targets_dtype))
    direct = x.cross_entropy(y, ignore_index=ignore_index)
    monkeypatch.setattr(functional, "_mean_class_nll_uop", lambda logits, targets, ignore_index: None)
    general = x.cross_entropy(y, ignore_index=ignore_index)
    assert direct.uop is general.uop
    monkeypatch.undo()
    taken = functional._mean_class_nll_uop(x.uop, y.uop, ignore_index) is not None
    assert taken == (logits_dtype != "float16" and targets_dtype in ("int32", "int64") and c > 1)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
    ref = torch.nn.functional.cross_entropy(xt, torch.tensor(y.numpy().astype(np.int64)), ignore_index=ignore_index)
    ref.backward()
    direct.backward()
    tol = 1e-2 if logits_dtype == "float16" else 1e-5
    if (y.numpy() != ignore_index).any():
        np.testing.assert_allclose(direct.item(), ref.item(), rtol=tol, atol=tol)
        np.testing.assert_allclose(x.grad.numpy().astype(np.float64), xt.grad.numpy(), rtol=tol, atol=tol)


def test_cross_entropy_direct_path_checks_its_targets_first():
    # out-of-range targets, a wrong shape or wrong class weights raise before any node is built, as on the general path
    from uopkit.tensor import ShapeError

    x = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(IndexError, match="target 4 is out of bounds for 4 classes"):
        x.cross_entropy(Tensor(np.array([0, 4, 1], np.int32)))
    with pytest.raises(IndexError, match="target -1 is out of bounds"):
        x.cross_entropy(Tensor(np.array([0, -1, 1], np.int64)))
    with pytest.raises(ShapeError, match="class targets"):
        x.cross_entropy(Tensor(np.array([0, 1], np.int32)))
    with pytest.raises(ShapeError, match="weight shape"):
        x.cross_entropy(Tensor(np.array([0, 4, 1], np.int32)), weight=Tensor(np.ones(3, np.float32)))
    # the ignored index may lie outside the classes
    assert x.cross_entropy(Tensor(np.array([0, -100, 1], np.int32))).item() == pytest.approx(np.log(4))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int8"])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (5,)])
def test_relu_builds_the_nodes_of_the_general_path(dtype, shape, monkeypatch):
    # a float relu's nodes are built directly: the same nodes as (x <= 0).where(0, x) (NaN stays NaN)
    values = np.linspace(-2, 2, int(np.prod(shape))).reshape(shape)
    x = Tensor(values.astype(np.float32)).cast(dtype)
    direct = x.relu()
    general = (x <= 0).where(0, x) if dtypes.is_float(x.dtype) else (x > 0).where(x, 0)
    assert direct.uop is general.uop
    ref = np.where(values.astype(np.float32) > 0, values.astype(np.float32), 0).astype(np.float32)
    if dtype not in ("int32", "int8"):
        np.testing.assert_allclose(direct.cast("float32").numpy(), ref, rtol=1e-2)


def test_pattern_rules_get_their_capture_by_position_or_by_name():
    # a rule of one named node is called with it positionally when its function takes it next (after ctx): the same
    # arguments as by name
    from uopkit.uop.ops import PatternMatcher, UPat

    seen: list[tuple] = []

    def ctx_then_node(ctx, x):
        seen.append(("ctx_then_node", ctx, x))

    def node_only(x):
        seen.append(("node_only", None, x))

    def by_keyword(ctx, *, x):
        seen.append(("by_keyword", ctx, x))

    def last(ctx, x):
        return UOp.const(dtypes.float32, 2.0)

    pm = PatternMatcher([(UPat(Ops.NEG, name="x"), f) for f in (ctx_then_node, node_only, by_keyword, last)])
    u = UOp(Ops.NEG, dtypes.float32, (UOp.const(dtypes.float32, 1.0),))
    assert pm.rewrite(u, "c") is UOp.const(dtypes.float32, 2.0)
    assert seen == [(name, "c" if name != "node_only" else None, u) for name, *_ in seen]
    assert [name for name, *_ in seen] == ["ctx_then_node", "node_only", "by_keyword"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (1,), ()])
@pytest.mark.parametrize("kind", ["adam", "adam_wd", "adamw"])
def test_adam_update_builds_the_nodes_of_the_tensor_methods(kind, dtype, shape, monkeypatch):
    # Adam's step of a float32 parameter is built as nodes directly: the parameter's and both moments' STOREs are
    # the ones the Tensor methods give (with L2 weight decay, and AdamW's decoupled decay)
    from uopkit.nn import optim

    # (no zero weight: its gradient is 0, and float16's eps rounds to 0, so 0 / 0, as torch's float16 Adam gives)
    start = (np.linspace(-1, 1, int(np.prod(shape))) + 0.125).reshape(shape).astype(dtype)
    w = Tensor(start, requires_grad=True)
    make = {"adam": lambda: optim.Adam([w], lr=0.1), "adam_wd": lambda: optim.Adam([w], lr=0.1, weight_decay=0.1)}
    opt = make.get(kind, lambda: optim.AdamW([w], lr=0.1, weight_decay=0.1))()
    (w * w).sum().backward()
    state = [w, opt.b1_t, opt.b2_t, *opt.m, *opt.v]
    before = [t.uop for t in state]
    opt.schedule_step()
    direct = [t.uop for t in state]
    for t, u in zip(state, before, strict=True):
        t.uop = u
    taken = []
    monkeypatch.setattr(optim, "_adam_update", lambda *a: taken.append(a) and False)
    opt.schedule_step()
    assert all(t.uop is u for t, u in zip(state, direct, strict=True))
    monkeypatch.undo()
    # the direct path is the float32 one (a float16 parameter's step is the half floats' own, op by op as torch's)
    for t, u in zip(state, before, strict=True):
        t.uop = u
    called = []
    real = optim._adam_update
    monkeypatch.setattr(optim, "_adam_update", lambda *a: called.append(real(*a)) or called[-1])
    opt.schedule_step()
    assert called == ([True] if dtype == "float32" else [])
    monkeypatch.undo()
    w.realize()
    # one Adam step moves each weight by lr (times sign of the gradient, with bias correction), less decay
    grad = 2 * start.astype(np.float64)
    if kind == "adam_wd":
        grad = grad + 0.1 * start
    decayed = start * (1 - 0.1 * 0.1) if kind == "adamw" else start
    want = decayed - 0.1 * grad / (np.abs(grad) + 1e-8)
    np.testing.assert_allclose(w.numpy(), want, atol=2e-3 if dtype == "float16" else 1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (1,), ()])
def test_plain_sgd_update_builds_the_nodes_of_the_tensor_methods(dtype, shape, monkeypatch):
    # plain SGD builds p - lr * grad as nodes directly: the STORE is the one the Tensor methods' update gives
    from uopkit.nn import optim

    w = Tensor(np.linspace(-1, 1, int(np.prod(shape))).reshape(shape).astype(dtype), requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    before = w.uop
    opt.schedule_step()
    direct = w.uop
    w.uop = before
    monkeypatch.setattr(optim, "_sgd_update", lambda p, grad, lr: None)
    opt.schedule_step()
    assert w.uop is direct
    monkeypatch.undo()
    taken = optim._sgd_update(w, w.grad, opt.lr) is not None
    # (a float64 parameter has a float64 learning rate: its dtypes match too)
    assert taken == (dtype in ("float32", "float64"))
    w.realize()
    expected = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape).astype(dtype)
    np.testing.assert_allclose(w.numpy(), expected - 0.5 * 2 * expected, atol=1e-3)


def test_scheduling_and_code_generation_run_with_the_cyclic_collector_paused(monkeypatch):
    import uopkit.engine.realize as realize_module

    seen = []
    real = realize_module._realize_uncached

    def spy(tensors, *args):
        seen.append(gc.isenabled())
        return real(tensors, *args)

    monkeypatch.setattr(realize_module, "_realize_uncached", spy)
    # (no schedule cache: a graph another test realized would be replayed, not scheduled)
    monkeypatch.setattr(realize_module.SCHEDULE_CACHE, "value", 0)
    assert gc.isenabled()
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert ((x * 3.5).exp2().sum(1) - 1).numpy().shape == (2,)
    # paused inside, back on after (and after a realize that raises too)
    assert seen and not any(seen) and gc.isenabled()

    def failing(tensors, *args):
        raise RuntimeError("a kernel failed to compile")

    monkeypatch.setattr(realize_module, "_realize_uncached", failing)
    with pytest.raises(RuntimeError, match="failed to compile"):
        (x + 0.25).realize()
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off():
    from uopkit.helpers import gc_paused

    gc.disable()
    try:
        with gc_paused():
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert not gc.isenabled()
        (Tensor([1.0, 2.0]) * 7.25).realize()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with gc_paused():
        with gc_paused():
            pass
        # the outer pause still holds after the inner one ends
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.parametrize("cached", [False, True])
def test_moving_tensors_onto_a_realized_value_stops_at_older_nodes(cached, monkeypatch):
    # a live value that reads a realized node through a newer one is moved onto its buffer; the walk that finds it
    # stops at nodes built before the realized one (they can't hold it), not at the buffers under them
    import uopkit.schedule as schedule

    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    b = Tensor(np.ones(4, dtype=np.float32)).realize()
    if cached:
        for _ in range(2):
            (b + 1).realize()
    older = (a.exp() * 2).sqrt()
    walked = []
    real_reaches = schedule._reaches

    def spy(root, mapping, memo, oldest=-1):
        out = real_reaches(root, mapping, memo, oldest)
        walked.append(set(memo))
        return out

    monkeypatch.setattr(schedule, "_reaches", spy)
    k = b + 1
    y = older * k
    k.realize()
    assert k.uop.base.op is Ops.BUFFER
    # y reads k's buffer now, and its older part was not walked into
    assert any(n is k.uop.base for n in y.uop.toposort())
    assert walked and not any(older.uop.src[0] in memo or a.uop in memo for memo in walked)
    np.testing.assert_allclose(y.numpy(), np.sqrt(np.exp(np.arange(4)) * 2) * 2, rtol=1e-6)
    np.testing.assert_allclose(k.numpy(), np.full(4, 2.0), rtol=1e-6)


def test_a_stamp_stored_late_by_a_switched_out_thread_does_not_hide_newer_ones():
    # a thread switched out between taking a stamp and storing it stores an older stamp after newer ones: the walk
    # back to a stamp goes on past as many old ones as there are other threads (a realize in one thread missed a
    # tensor another thread made meanwhile: its result stayed unstored and the reader's .numpy() raised a KeyError)
    import threading

    from uopkit.schedule import _walk_back

    stamps = {"old": 3, "new": 9, "late": 6}
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _walk_back(stamps, 8) == ["new"]
        assert _walk_back({"a": 1, "b": 2}, 8) == []
    finally:
        release.set()
        other.join()


_PADS = [((2, 3), ((1, 2), (0, 1))), ((1,), ((3, 5),)), ((1, 1), ((0, 1), (2, 0))), ((0, 3), ((1, 1), (0, 0)))]


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "bool"])
@pytest.mark.parametrize("shape, pads", _PADS)
def test_pad_with_a_value_builds_the_nodes_of_the_general_path(shape, pads, dtype, grad, monkeypatch):
    # a float tensor padded with a number (every float piece of a cat, with -0.0) has its nodes built directly: the
    # same nodes as where(ones padded, x padded, value); other dtypes take that path itself
    import uopkit
    from uopkit.tensor import movement

    values = {"bool": [True], "int32": [-3, 7]}.get(dtype, [-0.0, 7.5, -3, float("nan")])
    x = Tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape), requires_grad=grad).cast(dtype)
    for value in values:
        with uopkit.enable_grad() if grad else uopkit.no_grad():
            direct = x.pad(pads, value=value)
            monkeypatch.setattr(movement, "_DIRECT_FILL_DTYPES", frozenset())
            general = x.pad(pads, value=value)
            monkeypatch.undo()
        assert direct.uop is general.uop
        ref = np.pad(x.numpy(), pads, constant_values=value)
        np.testing.assert_array_equal(direct.numpy(), ref)


def test_cat_of_float_pieces_makes_no_filled_tensors(monkeypatch):
    # stacking the gradient norms of a model (clip_grad_norm_) pads each with -0.0: no Tensor.full per piece (the
    # public calls cost ten times the nodes); the gradient of each piece is its part of the incoming one
    import torch

    monkeypatch.setattr(Tensor, "full", lambda *a, **k: pytest.fail("Tensor.full called"))
    values = np.array([1.5, -0.0, 2.0, 0.0], np.float32)
    pieces = [Tensor(np.array(v), requires_grad=True) for v in values]
    stacked = Tensor.stack(*pieces)
    monkeypatch.undo()
    tp = [torch.tensor(v, requires_grad=True) for v in values]
    ts = torch.stack(tp)
    np.testing.assert_array_equal(np.signbit(stacked.numpy()), np.signbit(ts.detach().numpy()))
    (stacked * Tensor(np.arange(4, dtype=np.float32))).sum().backward()
    (ts * torch.arange(4, dtype=torch.float32)).sum().backward()
    assert [p.grad.item() for p in pieces] == [p.grad.item() for p in tp]


def test_a_step_realized_again_does_not_walk_its_own_graph_for_reads(monkeypatch):
    # what the values of a training step's graph read of the buffers its assigns write is a function of the graph's
    # structure: walked at the first step, looked up at the next ones. The answers stay those of a walk: a value that
    # reads a weight as it was and its new contents gets a copy of the old ones, every step
    import uopkit.schedule as schedule

    w0 = np.arange(4, dtype=np.float32)
    w = Tensor(w0).contiguous().realize()
    walked = []
    stored_reads = schedule.stored_reads
    monkeypatch.setattr(schedule, "stored_reads", lambda roots, t: walked.append(len(roots)) or stored_reads(roots, t))
    expected = w0.copy()
    for step in range(4):
        grad = (w * 2 + (step + 0.5)).exp().log()
        w.assign(w - grad * 0.25)
        Tensor.realize(w, grad)
        g = expected * 2 + (step + 0.5)
        expected = expected - g * 0.25
        np.testing.assert_allclose(grad.numpy(), g, rtol=1e-5)
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5)
    # the first step walked the graph of `grad`; the others walked nothing of it
    assert walked[0] >= 1 and not any(walked[1:]), walked


def test_reads_of_a_step_looked_up_keep_the_copy_for_a_value_reading_old_and_new():
    # `s + a` after `s = a * 3; a.assign(a + 10)`: it can run neither before the write nor after it, and reads a copy
    # of the old contents, at the first realize of that structure and at every one after it
    for i in range(3):
        a = Tensor(np.full(3, float(i), np.float32)).contiguous().realize()
        s = a * 3
        a.assign(a + 10)
        both = s + a
        Tensor.realize(a, both)
        np.testing.assert_array_equal(both.numpy(), np.full(3, 3.0 * i + i + 10, np.float32))
        np.testing.assert_array_equal(a.numpy(), np.full(3, i + 10.0, np.float32))


class _CountedKey(tuple):
    # a schedule cache key that counts how often it is hashed (a tuple doesn't keep its hash: every dict lookup of a
    # training step's key hashes its ~5,000 entries again)
    hashes = 0

    def __hash__(self) -> int:
        _CountedKey.hashes += 1
        return super().__hash__()


def test_a_step_with_a_lazy_reader_builds_and_hashes_its_key_once(monkeypatch):
    # a step whose loss is still lazy when its assign runs: what the step's graph reads of the weights is kept with
    # its schedule cache entry, and the reader the realize adds extends the entry's key, so the graph's key is built
    # and hashed once per realize, not once for the reads and once for the schedule
    from uopkit.engine import realize

    key = realize._Param.key
    built = []
    monkeypatch.setattr(realize._Param, "key", property(lambda p: built.append(1) or _CountedKey(key.fget(p))))
    monkeypatch.setattr(realize, "schedule_cache", {})
    w0 = np.arange(1, 5, dtype=np.float32)
    w = Tensor(w0).contiguous().realize()
    expected = w0.copy()
    for step in range(4):
        loss = (w * w).sum()
        w.assign(w - (w * 2 + 1) * 0.125)
        built.clear()
        _CountedKey.hashes = 0
        hits = realize.stats["schedule_hits"]
        w.realize()
        if step:
            assert realize.stats["schedule_hits"] == hits + 1
            assert len(built) == 1 and _CountedKey.hashes == 1, (len(built), _CountedKey.hashes)
        np.testing.assert_allclose(loss.numpy(), (expected * expected).sum(), rtol=1e-6)
        expected = expected - (expected * 2 + 1) * np.float32(0.125)
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)


def test_a_graph_keeps_a_schedule_for_each_set_of_readers(monkeypatch):
    # steps with and without a lazy value reading the weight, in turn: each kind replays its own schedule
    from uopkit.engine import realize

    monkeypatch.setattr(realize, "schedule_cache", {})
    w0 = np.arange(1, 5, dtype=np.float32)
    w = Tensor(w0).contiguous().realize()
    expected = w0.copy()
    for step in range(6):
        if step >= 2:
            hits = realize.stats["schedule_hits"]
        reader = (w + 1).sum() if step % 2 else None
        w.assign(w * 0.5 + 1)
        w.realize()
        if step >= 2:
            assert realize.stats["schedule_hits"] == hits + 1
        if reader is not None:
            np.testing.assert_allclose(reader.numpy(), (expected + 1).sum(), rtol=1e-6)
        expected = expected * np.float32(0.5) + 1
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
    (graph,) = [g for g in realize.schedule_cache.values() if g.reads is not None]
    assert len(graph.schedules) == 2


def test_a_step_over_parameters_made_from_stored_tensors_is_one_realize(monkeypatch):
    # `nn.Parameter(Tensor.randn(...))` (StyleGAN's and ViT's way to make a weight) is a detached view of randn's
    # storage; with randn dropped at once, the optimizer's write into it is staged as any other's: a step is one
    # realize, not one more per such parameter (each was written at once, and each cost a schedule of its own)
    import uopkit.tensor.tensor as tensor_module
    from uopkit import nn

    Tensor.manual_seed(0)
    ws = [nn.Parameter(Tensor.randn(4, 4)) for _ in range(3)]
    ref = [w.numpy().copy() for w in ws]
    opt = nn.optim.SGD(ws, lr=0.5)
    calls = []
    real = tensor_module.realize_tensors
    monkeypatch.setattr(tensor_module, "realize_tensors", lambda ts: (calls.append(len(ts)), real(ts))[1])
    for step in range(2):
        x = Tensor.ones(2, 4)
        for w in ws:
            x = x @ w
        x.sum().backward()
        grads = [w.grad.numpy() for w in ws]
        calls.clear()
        opt.step()
        assert len(calls) == 1, (step, calls)
        for w, r, g in zip(ws, ref, grads, strict=True):
            r -= 0.5 * g
            np.testing.assert_allclose(w.numpy(), r, rtol=1e-6)
        opt.zero_grad()
    # a detached alias whose base is gone but has other live views still writes through at once: they show it
    a = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    b, c = a.detach(), a[1:]
    del a
    b.assign(Tensor([7.0, 7.0, 7.0, 7.0]))
    assert c.tolist() == [7.0, 7.0, 7.0]

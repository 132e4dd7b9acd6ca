"""The grouper's DETACH-free view of a graph (uopkit.schedule.without_detach)."""

import numpy as np

import uopkit
from uopkit import Tensor
from uopkit.schedule.without_detach import stored_originals, without_detaches
from uopkit.uop.ops import Ops, UOp


def _topo(*outs: Tensor) -> tuple[UOp, list[UOp]]:
    sink = UOp(Ops.SINK, src=tuple(t.uop for t in outs))
    return sink, list(sink.toposort())


def test_a_graph_without_detaches_is_left_alone():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    assert without_detaches(_topo(a * 2 + 1)[1]) is None


def test_a_no_grad_graph_seen_without_detaches_is_the_graph_built_with_gradients():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    with uopkit.no_grad():
        y = a * 2 + 1
    assert y.uop.op is Ops.DETACH
    sink, topo = _topo(y)
    plain = without_detaches(topo)
    assert plain is not None
    # (hash-consed: the same node)
    assert plain[y.uop] is (a * 2 + 1).uop
    assert not any(n.op is Ops.DETACH for n in plain[sink].toposort())


def test_a_value_is_stored_below_its_detaches_unless_only_a_stored_detach_reads_it():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    with uopkit.no_grad():
        x = a * 2
        y = x + 1
    sink, topo = _topo(y)
    plain = without_detaches(topo)
    assert plain is not None
    realize = {plain[x.uop]: None, plain[y.uop]: None}
    stored = stored_originals(realize, topo, plain, {y.uop: None})
    # x is read through its DETACH by the add: x itself is stored, the DETACH reads its buffer; y is asked for as
    # DETACH(add), which alone reads the add: the DETACH is stored, its kernel computes the add
    assert set(stored) == {x.uop.src[0], y.uop}

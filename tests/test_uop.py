"""The UOp core: hash-consing, pattern matching, rewriting to a fixpoint, range analysis."""

import pytest

from uopkit import dtypes
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, RewriteError, UOp, UPat, graph_rewrite


def rng(n, i=0):
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (i, "loop"))


def test_hash_consing_gives_same_object():
    a = UOp.const(dtypes.float32, 1.5)
    assert UOp.const(dtypes.float32, 1.5) is a
    assert (a + 2.0) is (a + 2.0)
    assert UOp.const(dtypes.float32, 1.5) is not UOp.const(dtypes.float64, 1.5)


def test_there_is_no_assign_op():
    assert "ASSIGN" not in Ops.__members__
    assert Ops.STORE in Ops


def test_groups_are_disjoint_where_they_should_be():
    assert not (GroupOp.Unary & GroupOp.Binary)
    assert not (GroupOp.ALU & GroupOp.Movement)


def test_upat_named_captures_and_constraints():
    x = UOp.variable("x", 0, 10)
    expr = x + 3
    pat = UPat(Ops.ADD, dtype=dtypes.int32, src=(UPat.var("a"), UPat.cvar("c")))
    (m,) = pat.match(expr, {})
    assert m["a"] is x and m["c"].arg == 3
    assert not UPat(Ops.MUL).match(expr, {})
    assert not UPat(Ops.ADD, dtype=dtypes.float32).match(expr, {})


def test_upat_commutative_list_matches_either_order():
    x = UOp.variable("x", 0, 10)
    expr = UOp(Ops.ADD, dtypes.int32, (UOp.const(dtypes.int32, 3), x))
    assert UPat(Ops.ADD, src=[UPat.var("v", dtypes.int32), UPat.cvar("c")]).match(expr, {})
    assert not UPat(Ops.ADD, src=(UPat.var("v"), UPat.cvar("c"))).match(expr, {})


def test_upat_source_ops_checked_before_matching_agree_with_matching():
    # `match` rejects early on its source patterns' ops (in order for a tuple, anywhere for a list): a source
    # pattern's op in the wrong place, or missing, rejects; allow_any_len keeps the extra sources out of the check
    x = UOp.variable("x", 0, 10)
    three = UOp.const(dtypes.int32, 3)
    plus = UOp(Ops.ADD, dtypes.int32, (x, three))
    assert UPat(Ops.ADD, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST))).match(plus, {})
    assert not UPat(Ops.ADD, src=(UPat(Ops.CONST), UPat(Ops.DEFINE_VAR))).match(plus, {})
    assert UPat(Ops.ADD, src=[UPat(Ops.CONST, name="c"), UPat(Ops.DEFINE_VAR, name="v")]).match(plus, {})
    assert not UPat(Ops.ADD, src=[UPat(Ops.CONST), UPat(Ops.MUL)]).match(plus, {})
    sink = UOp(Ops.SINK, dtypes.void, (x, three, x))
    assert UPat(Ops.SINK, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), allow_any_len=True).match(sink, {})
    assert not UPat(Ops.SINK, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST))).match(sink, {})
    assert not UPat(Ops.SINK, src=(UPat(), UPat(), UPat(), UPat()), allow_any_len=True).match(sink, {})


def test_same_name_must_bind_same_node():
    x = UOp.variable("x", 0, 10)
    y = UOp.variable("y", 0, 10)
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    assert pat.match(x + x, {})
    assert not pat.match(x + y, {})


def test_graph_rewrite_reaches_fixpoint():
    # x*2 -> x+x, then x+x -> x (a toy chain of rules) applied until nothing fires
    x = UOp.variable("x", 0, 10)
    pm = PatternMatcher(
        [
            (UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a + a if c.arg == 2 else None),
            (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))), lambda a: a),
        ]
    )
    assert graph_rewrite((x * 2) * 2, pm, name="test") is x


def test_graph_rewrite_with_ctx():
    x = UOp.variable("x", 0, 10)
    seen = []

    def do_record(ctx, v):
        ctx.append(v.arg[0])
        return None

    graph_rewrite(x + 1, PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), do_record)]), ctx=seen, name="ctx")
    assert seen == ["x"]


def test_rewrite_that_never_settles_raises():
    x = UOp.variable("x", 0, 10)
    pm = PatternMatcher([(UPat(Ops.ADD, name="e"), lambda e: e.src[0] + (e.src[1].arg + 1))])
    with pytest.raises(RewriteError):
        graph_rewrite(x + 1, pm, name="runaway", max_steps=1000)


def test_vmin_vmax():
    r = rng(10)
    assert (r.vmin, r.vmax) == (0, 9)
    assert ((r * 3 + 2).vmin, (r * 3 + 2).vmax) == (2, 29)
    assert ((r // 4).vmin, (r // 4).vmax) == (0, 2)
    assert ((r % 4).vmin, (r % 4).vmax) == (0, 3)
    assert r.lt(10).vmin is True
    v = UOp.variable("n", 1, 5)
    assert ((v * -2).vmin, (v * -2).vmax) == (-10, -2)


def test_vmin_vmax_skips_values_whose_range_is_their_dtypes():
    # an index selected by a float comparison: its range needs the comparison's, which needs only its operands' own
    # (a float's range is its dtype's), not the ranges of the float ops below them
    r = rng(10)
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(10), (), 0)
    x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32.ptr(10), (buf, r)),))
    floats = [x]
    for i in range(50):
        floats.append(floats[-1] * 2.0 + float(i))
    index = floats[-1].lt(x.const_like(0.5)).where(r * 3 + 1, r.const_like(40))
    assert (index.vmin, index.vmax) == (1, 40)
    # the deep chain is deep-safe too, and its values' ranges are computed only where asked
    assert "_range" not in floats[25].__dict__ and "_range" not in x.__dict__
    assert (floats[25].vmin, floats[25].vmax) == (dtypes.min(dtypes.float32), dtypes.max(dtypes.float32))


def test_toposort_is_deep_safe():
    x = UOp.variable("x", 0, 10)
    for i in range(5000):
        x = x + i
    assert len(x.toposort()) > 5000


def test_buf_uop_and_size_through_views():
    buf = UOp.new_buffer("CPU", 12, dtypes.float32)
    view = UOp(Ops.SHRINK, dtypes.float32, (UOp(Ops.RESHAPE, dtypes.float32, (buf,), (3, 4)),), ((0, 2), (1, 3)))
    assert view.shape == (2, 2) and view.size == 4
    assert view.buf_uop is buf and view.buf_uop.size == 12
    assert view.base is buf


def test_exec_alu_trunc_is_c_trunc():
    """TRUNC on floats is C's trunc: inf and NaN stay, and a zero result keeps the sign (the conformance suite's
    reference: it checks TRUNC(-0.5) is -0.0 on every backend)."""
    import math

    from uopkit.uop.ops import exec_alu

    got = [exec_alu(Ops.TRUNC, dtypes.float32, [x]) for x in (-0.5, 0.5, -2.5, math.inf, -math.inf)]
    assert got == [0.0, 0.0, -2.0, math.inf, -math.inf] and [math.copysign(1, g) for g in got[:2]] == [-1, 1]
    assert math.isnan(exec_alu(Ops.TRUNC, dtypes.float64, [math.nan]))
    assert exec_alu(Ops.TRUNC, dtypes.int32, [-7]) == -7


def test_one_hot_reduce_check_walks_a_long_graph_once(monkeypatch):
    """Whether a reduce's condition reads an IOTA is remembered per node: the scheduler asks it of every reduce, and a
    walk of the whole graph below each made a 400-column LU's first call take 28 s to schedule."""
    from uopkit import Tensor
    from uopkit.uop.ops import is_one_hot_reduce

    x = UOp.variable("x", 0, 10)
    conds, visited = [], [0]
    for i in range(400):
        x = x + i
        conds.append(x.lt(3))
    real = UOp.toposort

    def counting(self, gate=None):
        out = real(self, gate)
        visited[0] += len(out)
        return out

    monkeypatch.setattr(UOp, "toposort", counting)
    assert not any(c.reads_iota for c in conds)
    # about one visit per node, not one per node per condition (400 * 400 / 2)
    assert visited[0] < 10 * 800
    picked = (Tensor.arange(8) == 3).where(Tensor.ones(8), 0).sum().uop
    reduce = next(u for u in picked.toposort() if u.op is Ops.REDUCE_AXIS)
    assert is_one_hot_reduce(reduce) and reduce.src[0].src[0].reads_iota


def test_hash_consing_holds_while_threads_build_and_drop_the_same_nodes():
    # a node's weakref callback and another thread's build of the same key used to race: the callback's check-then-
    # delete dropped the entry of the node just built (the same build twice in a row gave two objects) or raised
    # KeyError into the unraisable hook
    import sys
    import threading

    unraisable: list[str] = []
    two_objects = [0]

    def build_and_drop() -> None:
        for i in range(20000):
            a = UOp(Ops.CONST, dtypes.int32, (), 7000 + i % 5)
            b = UOp(Ops.CONST, dtypes.int32, (), 7000 + i % 5)
            two_objects[0] += a is not b
            del a, b

    old_hook, old_interval = sys.unraisablehook, sys.getswitchinterval()
    sys.unraisablehook = lambda u: unraisable.append(repr(u.exc_value))
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows, inside the callbacks too
    try:
        threads = [threading.Thread(target=build_and_drop) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.unraisablehook = old_hook
        sys.setswitchinterval(old_interval)
    assert unraisable == [] and two_objects[0] == 0, (unraisable[:3], two_objects[0])

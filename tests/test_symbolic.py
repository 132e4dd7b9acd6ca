"""Symbolic simplification of index arithmetic, checked by evaluating before and after."""

import itertools

import pytest

from uopkit import dtypes
from uopkit.uop.ops import Ops, UOp, exec_alu
from uopkit.uop.symbolic import simplify


def rng(n, i):
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (i, "loop"))


def evaluate(u, env):
    if u.op is Ops.CONST:
        return u.arg
    if u.op is Ops.RANGE:
        return env[u.arg[0]]
    return exec_alu(u.op, u.dtype, [evaluate(s, env) for s in u.src])


def count_nodes(u):
    return len(u.toposort())


R0, R1, R2 = rng(3, 0), rng(4, 1), rng(5, 2)
CASES = {
    "reshape_div": (R0 * 4 + R1) // 4,
    "reshape_mod": (R0 * 4 + R1) % 4,
    "const_fold_in_div": (R0 * 4 + R1 + 8) // 4,
    "gcd": (R1 * 2 + 2) // 2,
    "like_terms": (R0 * 4 + R1) * 2 + (R0 * 4 + R1),
    "mod_of_multiple": (R0 * 12 + R1 * 3) % 6,
    "nested_div": ((R0 * 4 + R1) // 2) // 2,
    "nested_mod": ((R0 * 20 + R1 * 5 + R2) % 10) % 5,
    "mod_then_div": ((R0 * 20 + R1 * 5 + R2) % 20) // 5,
    "cmp_shift": (R0 * 4 + R1 + 1).lt(5),
    "always_true": R1.lt(10),
    "identities": (R0 + 0) * 1 + R1 * 0,
}


@pytest.mark.parametrize("name", list(CASES))
def test_simplify_preserves_values(name):
    expr = CASES[name]
    simple = simplify(expr)
    for env in itertools.product(range(3), range(4), range(5)):
        assert evaluate(simple, dict(enumerate(env))) == evaluate(expr, dict(enumerate(env))), name


def test_simplify_shrinks():
    assert simplify((R0 * 4 + R1) // 4) is R0
    assert simplify((R0 * 4 + R1) % 4) is R1
    assert simplify(R1.lt(10)).arg is True
    assert simplify((R0 + 0) * 1 + R1 * 0) is R0
    assert count_nodes(simplify(CASES["like_terms"])) < count_nodes(CASES["like_terms"])
    assert simplify(((R0 * 4 + R1) // 2) // 2) is R0


def test_constant_folding_respects_dtype():
    big = UOp.const(dtypes.int8, 100) + UOp.const(dtypes.int8, 100)
    assert simplify(big).arg == -56
    f = UOp.const(dtypes.float32, 0.1) * 3.0
    assert simplify(f).op is Ops.CONST


def test_c_division_semantics():
    x = UOp.const(dtypes.int32, -7)
    assert simplify(x // 2).arg == -3
    assert simplify(x % 2).arg == -1


def test_div_mod_with_a_remainder_below_a_common_factor():
    # (n*2048 + r) // 65536 == n // 32 when 0 <= r < 2048: the panel layout's index (schedule/packing.py)
    from uopkit.uop.symbolic import simplify

    n, r = UOp.variable("n", 0, 2047), UOp.variable("r", 0, 2047)
    assert simplify((n * 2048 + r) // 65536) is simplify(n // 32)
    assert simplify((n * 2048 + r) % 65536) is simplify((n % 32) * 2048 + r)
    # checked against Python's arithmetic on the corners and a few values in between
    for nv in (0, 1, 31, 32, 33, 1000, 2047):
        for rv in (0, 1, 2047):
            for expr, want in (
                ((n * 2048 + r) // 65536, (nv * 2048 + rv) // 65536),
                ((n * 2048 + r) % 65536, (nv * 2048 + rv) % 65536),
            ):
                got = simplify(expr.substitute({n: n.const_like(nv), r: r.const_like(rv)}))
                assert got.arg == want
    # a remainder that can reach the factor is left alone: (n*2048 + r) // 65536 with r up to 2048 is not n // 32
    r2 = UOp.variable("r2", 0, 2048)
    assert simplify((n * 2048 + r2) // 65536) is not simplify(n // 32)


def test_div_mod_with_a_remainder_that_subtracts():
    # a flipped 3x3 kernel reads tap 8 - 3*kh - kw of channel c: (9*c + 8 - 3*kh - kw) % 9 is the tap and // 9 the
    # channel, though the remainder's terms have negative coefficients (it was a modulo per FMA in the transposed
    # convolution of a conv's input gradient)
    c, kh, kw = UOp.variable("c", 0, 31), UOp.variable("kh", 0, 2), UOp.variable("kw", 0, 2)
    x = c * 9 + (kh * -3) + (kw * -1) + 8
    assert not {u.op for u in simplify(x % 9).toposort()} & {Ops.MOD, Ops.IDIV}
    assert simplify(x // 9) is c
    for cv, khv, kwv in itertools.product((0, 1, 31), (0, 1, 2), (0, 1, 2)):
        env = {c: c.const_like(cv), kh: kh.const_like(khv), kw: kw.const_like(kwv)}
        value = cv * 9 + 8 - 3 * khv - kwv
        assert simplify((x % 9).substitute(env)).arg == value % 9
        assert simplify((x // 9).substitute(env)).arg == value // 9
    # a remainder that can go below 0 is left alone
    kw3 = UOp.variable("kw3", 0, 9)
    assert simplify((c * 9 + 8 - kw3) % 9).op is Ops.MOD


# ---------------------------------------------------------------------------------------------------------------------
# selects around gated loads: a padded view's read is a load gated by every padding condition, inside a where(c, ., 0)
# per padding level


def gated_load(gate, dtype=dtypes.float32):
    buf = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(100), (), 0)
    return UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, buf.dtype, (buf, R0 * 4 + R1, gate)),))


A, B, C = R0.lt(2), R1.lt(3), R2.lt(4)


def test_where_with_a_constant_condition_is_the_chosen_side():
    x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
    assert simplify(UOp.const(dtypes.bool, True).where(x, y)) is x
    assert simplify(UOp.const(dtypes.bool, False).where(x, y)) is y


def test_where_around_a_load_gated_by_its_condition_goes():
    load = gated_load(A.alu(Ops.AND, B))
    zero = load.const_like(0.0)
    assert simplify(B.where(load, zero)) is load
    assert simplify(A.where(B.where(load, zero), zero)) is load
    assert simplify(A.alu(Ops.AND, B).where(load, zero)) is load
    # with constant-true levels on top, as lanes expand to constants
    assert simplify(UOp.const(dtypes.bool, True).where(A.where(load, zero), zero)) is load


def test_where_around_a_gated_load_stays_when_it_changes_the_value():
    load = gated_load(A)
    zero = load.const_like(0.0)
    # the condition is not part of the gate
    assert simplify(B.where(load, zero)).op is Ops.WHERE
    # the other side is not the load's 0
    assert simplify(A.where(load, load.const_like(1.0))).op is Ops.WHERE
    # an ungated load
    plain = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, load.src[0].src[0].dtype, load.src[0].src[:2]),))
    assert simplify(A.where(plain, zero)).op is Ops.WHERE
    # a value computed from the load is not 0 where the gate is false (exp(0) == 1)
    assert simplify(A.where(load.alu(Ops.EXP2), zero)).op is Ops.WHERE


def test_nested_wheres_merge_into_the_gate():
    load = gated_load(A.alu(Ops.AND, B))
    zero = load.const_like(0.0)
    value = load.alu(Ops.EXP2)
    merged = simplify(A.where(B.where(value, zero), zero))
    assert merged.op is Ops.WHERE and merged.src[0] is load.src[0].src[2] and merged.src[1] is value
    # a condition the inner where already requires is dropped
    assert simplify(A.where(A.alu(Ops.AND, B).where(value, zero), zero)) is simplify(
        A.alu(Ops.AND, B).where(value, zero)
    )
    # the outer where's other side is not 0: both stay
    kept = simplify(A.where(B.where(value, zero), load.const_like(2.0)))
    assert kept.op is Ops.WHERE and kept.src[1].op is Ops.WHERE


def test_a_where_inside_one_on_a_stronger_condition_goes():
    # a cat's float piece: where(mask, where(in range, load, 0), -0.0), its mask where(c, True, False)
    load = gated_load(A.alu(Ops.AND, B))
    value = load.alu(Ops.EXP2)
    minus_zero = load.const_like(-0.0)
    assert simplify(A.where(UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False))) is A
    assert simplify(A.alu(Ops.AND, B).where(A.where(value, load.const_like(0.0)), minus_zero)) is simplify(
        A.alu(Ops.AND, B).where(value, minus_zero)
    )
    # the inner condition is not implied: both stay
    kept = simplify(A.where(B.where(value, load.const_like(0.0)), minus_zero))
    assert kept.op is Ops.WHERE and kept.src[1].op is Ops.WHERE


def test_and_chains_have_one_shape():
    assert simplify(A.alu(Ops.AND, B.alu(Ops.AND, C))) is A.alu(Ops.AND, B).alu(Ops.AND, C)
    assert simplify(A.alu(Ops.AND, UOp.const(dtypes.bool, False))).arg is False


def test_select_rules_preserve_values():
    # every rule above, evaluated over every value of the ranges with a stand-in load (0 where its gate is false)
    def run(u, env):
        if u.op is Ops.LOAD:
            gate = u.src[0].src[2] if len(u.src[0].src) > 2 else UOp.const(dtypes.bool, True)
            return 1.5 + run(u.src[0].src[1], env) if run(gate, env) else 0.0
        if u.op is Ops.CONST:
            return u.arg
        if u.op is Ops.RANGE:
            return env[u.arg[0]]
        return exec_alu(u.op, u.dtype, [run(s, env) for s in u.src])

    load = gated_load(A.alu(Ops.AND, B.alu(Ops.AND, C)))
    zero = load.const_like(0.0)
    exprs = [
        C.where(B.where(A.where(load, zero), zero), zero),
        A.where(B.where(load * 2.0, zero), zero),
        UOp.const(dtypes.bool, True).where(A.where(load, zero), load.const_like(3.0)),
        B.where(gated_load(A), zero),
        A.alu(Ops.AND, B).where(A.where(load * 2.0, zero), load.const_like(-1.0)),
    ]
    for expr in exprs:
        simple = simplify(expr)
        for env in itertools.product(range(3), range(4), range(5)):
            assert run(simple, dict(enumerate(env))) == run(expr, dict(enumerate(env)))


def test_a_load_never_read_is_zero_and_a_gate_always_true_goes():
    load = gated_load(UOp.const(dtypes.bool, False))
    assert simplify(load) is load.const_like(0.0)
    # (and the address math it needed is gone with it)
    assert not any(u.op is Ops.RANGE for u in simplify(load * 2.0).toposort())
    kept = gated_load(UOp.const(dtypes.bool, True))
    assert len(simplify(kept).src[0].src) == 2
    # a gate that is sometimes true stays
    assert simplify(gated_load(A)).src[0].src[2] is A


def test_an_address_is_simplified_where_its_gate_holds():
    # where the gate is false the address is never used: x < 12 makes x % 12 + (x // 12) * 7 just x
    x = R0 * 4 + R1 + R2 * 3
    address = x % 12 + (x // 12) * 7
    gate = x.lt(12).alu(Ops.AND, R1.lt(3))
    load = gated_load(gate)
    load = load.replace(src=(load.src[0].replace(src=(load.src[0].src[0], address, gate)),))
    index = simplify(load).src[0]
    assert index.src[2] is simplify(gate) and index.src[1] is simplify(x)
    # an ungated index is left as it was
    plain = UOp(Ops.INDEX, load.src[0].dtype, (load.src[0].src[0], address))
    assert simplify(plain).src[1] is simplify(address) and simplify(address) is not simplify(x)


def test_an_address_given_its_gate_keeps_its_value_where_the_gate_holds():
    # a padded view's offset x - 5 goes negative only in the padding, which the gate leaves out
    x = R0 * 4 + R1 + R2 * 12
    shifted = x + (-5)
    for address, gate in (
        ((shifted // 12) * 12 + ((shifted // 4) % 3) * 4 + shifted % 4, x.lt(5).alu(Ops.CMPNE, True)),
        ((shifted // 4) % 3 + shifted % 4 * 7, x.lt(5).alu(Ops.CMPNE, True).alu(Ops.AND, x.lt(40))),
        (shifted // 12 + R1 % 2, x.lt(17).alu(Ops.AND, R2.lt(3))),
    ):
        load = gated_load(gate)
        load = load.replace(src=(load.src[0].replace(src=(load.src[0].src[0], address, gate)),))
        index = simplify(load).src[0]
        assert count_nodes(index.src[1]) <= count_nodes(simplify(address))
        for env in itertools.product(range(3), range(4), range(5)):
            env = dict(enumerate(env))
            if evaluate(gate, env):
                assert evaluate(index.src[1], env) == evaluate(address, env)


def test_gate_bounds():
    from uopkit.uop.symbolic import gate_bounds

    x = R0 * 4 + R1
    assert gate_bounds(x.lt(5).alu(Ops.CMPNE, True)) == {x: (5, 11)}
    assert gate_bounds(x.lt(5).alu(Ops.AND, R2.lt(3))) == {x: (0, 4), R2: (0, 2)}
    # a condition that doesn't narrow the range tells nothing
    assert gate_bounds(R2.lt(7)) == {}


def same_sum(a, b):
    from uopkit.uop.symbolic import decompose

    (ta, ca), (tb, cb) = decompose(simplify(a)), decompose(simplify(b))
    return sorted(ta, key=lambda t: t[1].tuplize) == sorted(tb, key=lambda t: t[1].tuplize) and ca == cb


def test_a_division_and_its_remainder_join_again():
    x = R0 * 4 + R1 + R2 * 12
    # (x // c) * c + x % c == x for any sign of x (C truncates both toward 0)
    assert same_sum((x // 4) * 4 + x % 4, x)
    assert same_sum(((x + (-7)) // 4) * 8 + ((x + (-7)) % 4) * 2, (x + (-7)) * 2)
    # and a reshape's split index flattened again: ((x // 4) % 3) * 4 + x % 4 == x % 12, negative x too
    assert same_sum(((x // 4) % 3) * 4 + x % 4 + R0, x % 12 + R0)
    neg = x + (-17)
    assert same_sum(((neg // 4) % 3) * 8 + (neg % 4) * 2, (neg % 12) * 2)
    # coefficients that don't match are left alone
    assert not same_sum((x // 4) * 3 + x % 4, x)
    assert not same_sum(((x // 4) % 3) * 4 + (x % 4) * 2, (x % 12) * 2)
    for expr in (
        ((x + (-7)) // 4) * 8 + ((x + (-7)) % 4) * 2,
        ((x // 4) % 3) * 4 + x % 4 + R0,
        ((neg // 4) % 3) * 8 + (neg % 4) * 2,
    ):
        for env in itertools.product(range(3), range(4), range(5)):
            assert evaluate(simplify(expr), dict(enumerate(env))) == evaluate(expr, dict(enumerate(env)))


def test_range_of_a_value_selected_under_its_own_bounds_check():
    from uopkit.dtype import dtypes
    from uopkit.uop.ops import Ops, UOp

    i = UOp.variable("i", -(2**31), 2**31 - 1, dtypes.int32)
    ok = i.alu(Ops.CMPLT, UOp.const(dtypes.int32, 1000)).alu(Ops.AND, UOp.const(dtypes.int32, -1).alu(Ops.CMPLT, i))
    picked = ok.where(i, UOp.const(dtypes.int32, 0))
    assert (picked.vmin, picked.vmax) == (0, 999)
    # a condition on something else leaves the value's own range
    other = UOp.variable("j", 0, 5, dtypes.int32).alu(Ops.CMPLT, UOp.const(dtypes.int32, 3))
    assert (other.where(i, UOp.const(dtypes.int32, 0)).vmax) == 2**31 - 1

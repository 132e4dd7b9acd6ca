"""Reverse-mode gradients on the tensor graph: one derivative rule per forward op, as (UPat, fn) rules.

A rule receives `ctx` (a GradientContext holding the gradient `ctx.grad` flowing into the node) and the forward
node `ret`; it returns one gradient per source of `ret` (None where no gradient flows). Gradients are ordinary
tensor-graph UOps, so they fuse, schedule and compile like any other value.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uopkit.dtype import dtypes
from uopkit.helpers import argsort
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, cast_scalar, const_identity
from uopkit.uop.weak_map import WeakKeyMap


class GradientError(RuntimeError):
    pass


# module constants for the builders and the walks over the whole graph below: on Python 3.11 every `Ops.X` is a
# lookup through EnumType's slow __getattr__ hook (~0.1 us)
_DEVICE, _BUFFER, _COPY, _KERNEL, _CONST = Ops.DEVICE, Ops.BUFFER, Ops.COPY, Ops.KERNEL, Ops.CONST
_RESHAPE, _EXPAND, _REDUCE_AXIS = Ops.RESHAPE, Ops.EXPAND, Ops.REDUCE_AXIS
_ADD, _NEG, _FDIV, _DETACH, _CONTIGUOUS = Ops.ADD, Ops.NEG, Ops.FDIV, Ops.DETACH, Ops.CONTIGUOUS
_BF16 = dtypes.bfloat16


@dataclass(frozen=True)
class OwnNode:
    """The arg of the CONTIGUOUS that gives a tensor a node of its own over a value another tensor has too (nodes are
    hash-consed: `a = x * 2; b = x * 2` are one node), made when hooks or `retain_grad()` are on both
    (`uopkit.tensor.tensor_hooks.own_node`). `compute_gradient` keeps the gradient through such a node apart from
    the value's own until the value's hooks have run: each tensor's hooks and `.grad` see only the gradient that
    flows through that tensor, as torch's."""

    number: int


@dataclass
class GradientContext:
    """The gradient flowing into one node, and where every node of the graph lives (to build constants there)."""

    grad: UOp
    devices: _Devices
    # the constants built so far, by (device, dtype, shape, value): the rules of one graph ask for the same few
    consts: dict[tuple, UOp] = field(default_factory=dict)

    def const(self, like: UOp, value: Any) -> UOp:
        """`value` with the dtype and shape of `like`, on its device (the tensor-graph form of a constant)."""
        device, shape = self.devices[like], like.shape or ()
        key = (device, like.dtype, shape, type(value), const_identity(value))
        ret = self.consts.get(key)
        if ret is None:
            c = UOp(_CONST, like.dtype, (UOp(_DEVICE, arg=device),), cast_scalar(value, like.dtype))
            ret = self.consts[key] = _expand(_reshape(c, (1,) * len(shape)), shape)
        return ret


# ---------------------------------------------------------------------------------------------------------------------
# small builders for tensor-graph UOps (no identity movement ops)


def _reshape(x: UOp, shape: tuple[int, ...]) -> UOp:
    return x if x.shape == shape else UOp(_RESHAPE, x.dtype, (x,), tuple(shape))


def _expand(x: UOp, shape: tuple[int, ...]) -> UOp:
    return x if x.shape == shape else UOp(_EXPAND, x.dtype, (x,), tuple(shape))


def _sum_to(x: UOp, shape: tuple[int, ...]) -> UOp:
    # sum the axes that an EXPAND broadcast (same rank, size 1 in `shape`)
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape or (), shape, strict=True)) if a != b)
    if not axes:
        return x
    if x.dtype == dtypes.float16:
        # summed in float32 and rounded once, as torch's (and Tensor.sum): a float16 running sum loses small terms
        # (4096 rows of 0.1 gave a bias gradient of 256, not 409.5)
        total = UOp(_REDUCE_AXIS, dtypes.float32, (UOp(Ops.CAST, dtypes.float32, (x,)),), (_ADD, axes))
        return UOp(Ops.CAST, x.dtype, (total,))
    return UOp(_REDUCE_AXIS, x.dtype, (x,), (_ADD, axes))


def _neg(x: UOp) -> UOp:
    return UOp(_NEG, x.dtype, (x,))


def _div(a: UOp, b: UOp) -> UOp:
    return UOp(_FDIV, a.dtype, (a, b))


def _pad(x: UOp, pads: tuple[tuple[int, int], ...]) -> UOp:
    return x if all(b == 0 and a == 0 for b, a in pads) else UOp(Ops.PAD, x.dtype, (x,), pads)


def _shrink(x: UOp, bounds: tuple[tuple[int, int], ...]) -> UOp:
    return (
        x
        if all(b == 0 and e == s for (b, e), s in zip(bounds, x.shape or (), strict=True))
        else (UOp(Ops.SHRINK, x.dtype, (x,), bounds))
    )


def _permute(x: UOp, order: tuple[int, ...]) -> UOp:
    return UOp(Ops.PERMUTE, x.dtype, (x,), order)


def _flip(x: UOp, axes: tuple[bool, ...]) -> UOp:
    return UOp(Ops.FLIP, x.dtype, (x,), axes)


def _cos(ctx: GradientContext, x: UOp) -> UOp:
    # cos(x) = 1 - 2 sin(x/2)**2, whose halving is exact: sin(pi/2 - x) rounded the shift in x's dtype (float32
    # 12345678 gave -0.766 for -0.429, +-1e30 gave sin(x)). Tensor.sin gives its derivative through Tensor.cos, which
    # also keeps the relative accuracy next to cos's zeros; this rule serves SIN nodes built directly
    s = (x * ctx.const(x, 0.5)).alu(Ops.SIN)
    return ctx.const(x, 1) + _neg(ctx.const(x, 2) * s * s)


def _float_or_none(x: UOp, g: UOp) -> UOp | None:
    # only floating-point values carry a gradient
    return g.cast(x.dtype) if dtypes.is_float(x.dtype) else None


LN2 = math.log(2)


# ---------------------------------------------------------------------------------------------------------------------
# the rules that need more than one line


def do_fdiv_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp, UOp]:
    # d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2 = -(a/b)/b
    b = ret.src[1]
    return _div(ctx.grad, b), _neg(_div(ctx.grad * ret, b))


def do_where_grad(ctx: GradientContext, ret: UOp) -> tuple[None, UOp, UOp]:
    # a select: the chosen side takes the gradient, the other zero, the condition none (zero in the gradient's dtype:
    # a select of a bfloat16 value's bits passes on a float32 gradient)
    cond, zero = ret.src[0], ctx.const(ctx.grad, 0)
    return None, cond.where(ctx.grad, zero), cond.where(zero, ctx.grad)


def do_max_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp, UOp]:
    # d max(a, b): the larger input takes the gradient; on a tie each takes half
    a, b = ret.src
    g, zero, half = ctx.grad, ctx.const(ret, 0), ctx.grad * ctx.const(ret, 0.5)
    tie = a.alu(Ops.CMPEQ, b)
    return tie.where(half, b.lt(a).where(g, zero)), tie.where(half, a.lt(b).where(g, zero))


def do_reduce_max_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp]:
    # d max over axes: the gradient goes to the elements equal to the max, split evenly between ties
    x = ret.src[0]
    shape, axes = x.shape or (), ret.arg[1]
    # equality must be exact: compare stored values with a max taken over them, never with a recomputation
    # (a recomputed value can differ in its last bit, e.g. where the C compiler contracted a*b+c into an FMA)
    if x.base.op is not Ops.BUFFER:
        x = UOp(Ops.CONTIGUOUS, x.dtype, (x,))
    mx = UOp(Ops.REDUCE_AXIS, x.dtype, (x,), ret.arg)
    hit = x.alu(Ops.CMPEQ, _expand(mx, shape))
    if dtypes.is_float(x.dtype):
        # a NaN max came from the NaNs (which equal nothing): they take the gradient, not the whole row as NaN
        nan_max = _expand(mx.alu(Ops.CMPNE, mx), shape)
        hit = hit.alu(Ops.OR, x.alu(Ops.CMPNE, x).alu(Ops.AND, nan_max))
    # the ties are counted in float32 at least: a float16 count stops at 2048
    wide = x.dtype if x.dtype.itemsize >= 4 else dtypes.float32
    is_max = hit.cast(wide)
    count = UOp(Ops.REDUCE_AXIS, wide, (is_max,), (Ops.ADD, axes))
    share = _div(is_max, _expand(count, shape)).cast(x.dtype) * _expand(ctx.grad, shape)
    # the others get exactly 0, as torch's, also when the incoming gradient is inf or nan
    return (hit.where(share, ctx.const(ret.src[0], 0)),)


def do_reduce_mul_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp]:
    # d prod(x) / dx_i is the product of the others, as PyTorch's: prod / x_i when no x is 0. With exactly one zero:
    # at the zero, the product of the others; elsewhere the others' product holds that zero, so it is a zero signed
    # by the others' sign bits, or NaN (0 * inf) where one of the others is infinite; not a quotient, which is NaN at
    # an inf x_i (inf / inf) and where the non-zero product overflows. With more zeros, 0.
    x = ret.src[0]
    shape, axes = x.shape or (), ret.arg[1]
    zero, one = ctx.const(x, 0), ctx.const(x, 1)
    is_zero = x.alu(Ops.CMPEQ, zero)
    safe_x = is_zero.where(one, x)

    def others(mask: UOp) -> UOp:
        # how many of the other elements along the reduced axes have `mask` (int32: exact in any float dtype)
        flag = mask.cast(dtypes.int32)
        total = _expand(UOp(_REDUCE_AXIS, dtypes.int32, (flag,), (_ADD, axes)), shape)
        return total + flag * ctx.const(flag, -1)

    def none(count: UOp) -> UOp:
        return count.alu(Ops.CMPEQ, ctx.const(count, 0))

    prod_nonzero = _expand(UOp(Ops.REDUCE_AXIS, x.dtype, (safe_x,), (Ops.MUL, axes)), shape)
    other_zeros = others(is_zero)
    at_zero = none(other_zeros).where(prod_nonzero, zero)
    # (beside the zero) the sign bit, -0.0's included (1 / -0.0 is -inf), and the infinities
    negative = x.lt(zero).alu(Ops.OR, is_zero.alu(Ops.AND, _div(one, x).lt(zero)))
    infinite = x.alu(Ops.CMPEQ, ctx.const(x, math.inf)).alu(Ops.OR, x.alu(Ops.CMPEQ, ctx.const(x, -math.inf)))
    odd = others(negative).alu(Ops.AND, ctx.const(other_zeros, 1))
    signed_zero = none(odd).where(zero, ctx.const(x, -0.0))
    beside_zero = none(others(infinite)).where(signed_zero, ctx.const(x, math.nan))
    with_zero = other_zeros.alu(Ops.CMPEQ, ctx.const(other_zeros, 1)).where(beside_zero, zero)
    at_nonzero = none(other_zeros).where(_div(_expand(ret, shape), safe_x), with_zero)
    return (is_zero.where(at_zero, at_nonzero) * _expand(ctx.grad, shape),)


def do_pow_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp, UOp]:
    # d a**b / da = b * a**(b-1), 0 where b is 0 (not 0 * inf at a = 0);  d a**b / db = a**b * ln(a), 0 where a is 0
    # and b >= 0, as PyTorch's (which keeps 0 * inf = NaN where a**b is 0 and ln(a) infinite: inf ** -inf)
    a, b = ret.src
    zero = ctx.const(ret, 0)
    d_a = b.alu(Ops.CMPEQ, zero).where(zero, ctx.grad * b * a.alu(Ops.POW, b + _neg(ctx.const(b, 1))))
    full = ctx.grad * ret * (a.alu(Ops.LOG2) * ctx.const(a, LN2))
    # (b >= 0 as 0 < b or b == 0: false for a NaN b, as PyTorch's mask)
    b_at_least_zero = zero.lt(b).alu(Ops.OR, b.alu(Ops.CMPEQ, zero))
    d_b = a.alu(Ops.CMPEQ, zero).where(b_at_least_zero.where(zero, full), full)
    return d_a, d_b


def do_reduce_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp | None]:
    op = ret.arg[0]
    if op is _ADD:
        return (_expand(ctx.grad, ret.src[0].shape or ()),)
    if op is Ops.MAX:
        return do_reduce_max_grad(ctx, ret)
    if op is Ops.MUL:
        return do_reduce_mul_grad(ctx, ret)
    raise GradientError(f"no gradient rule for REDUCE_AXIS with {op}")


def do_pad_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp]:
    # the gradient of a pad is the gradient with the padding cut off
    shape = ret.src[0].shape or ()
    return (_shrink(ctx.grad, tuple((b, b + s) for (b, _), s in zip(ret.arg, shape, strict=True))),)


def do_shrink_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp]:
    # the gradient of a shrink is the gradient padded back with zeros where the cut elements were
    shape = ret.src[0].shape or ()
    return (_pad(ctx.grad, tuple((b, s - e) for (b, e), s in zip(ret.arg, shape, strict=True))),)


def do_copy_grad(ctx: GradientContext, ret: UOp) -> tuple[UOp, None]:
    # the gradient goes back to the device the value came from
    src_device = ctx.devices[ret.src[0]]
    return UOp(Ops.COPY, ctx.grad.dtype, (ctx.grad, UOp(Ops.DEVICE, arg=src_device))), None


# comparisons, integer and bit ops: piecewise constant or not real-valued, no gradient
NO_GRADIENT_OPS = GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}

# one rule per forward op: `ctx.grad` is dL/dret, each entry of the tuple is dL/dsrc
pm_gradient = PatternMatcher(
    [
        # unary math
        (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (_neg(ctx.grad),)),
        (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (_neg(ctx.grad) * ret * ret,)),
        (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_div(ctx.grad, ret * ctx.const(ret, 2)),)),
        (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx.grad * ret * ctx.const(ret, LN2),)),
        (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_div(ctx.grad, ret.src[0] * ctx.const(ret, LN2)),)),
        (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (ctx.grad * _cos(ctx, ret.src[0]),)),
        # piecewise constant: zero gradient almost everywhere
        (UPat(Ops.TRUNC, name="ret"), lambda ctx, ret: (ctx.const(ret, 0),)),
        # arithmetic
        (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx.grad, ctx.grad)),
        (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx.grad, _neg(ctx.grad))),
        (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx.grad, ret.src[0] * ctx.grad)),
        (UPat(Ops.FDIV, name="ret"), do_fdiv_grad),
        (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (ret.src[1] * ctx.grad, ret.src[0] * ctx.grad, ctx.grad)),
        (UPat(Ops.MAX, name="ret"), do_max_grad),
        (UPat(Ops.POW, name="ret"), do_pow_grad),
        # a select
        (UPat(Ops.WHERE, name="ret"), do_where_grad),
        # no gradient; a cast passes it on between float types only
        (UPat(NO_GRADIENT_OPS, name="ret"), lambda ret: (None,) * len(ret.src)),
        (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (_float_or_none(ret.src[0], ctx.grad),)),
        (UPat(Ops.BITCAST), lambda: (None,)),
        # reductions
        (UPat(Ops.REDUCE_AXIS, name="ret"), do_reduce_grad),
        # movement: the inverse movement of the gradient
        (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (_reshape(ctx.grad, ret.src[0].shape),)),
        (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (_permute(ctx.grad, tuple(argsort(ret.arg))),)),
        (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (_sum_to(ctx.grad, ret.src[0].shape),)),
        (UPat(Ops.PAD, name="ret"), do_pad_grad),
        (UPat(Ops.SHRINK, name="ret"), do_shrink_grad),
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (_flip(ctx.grad, ret.arg),)),
        # storage: a copy moves the gradient back; CONTIGUOUS passes it; DETACH and STORE stop it
        (UPat(Ops.COPY, name="ret"), do_copy_grad),
        (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx.grad,)),
        (UPat(Ops.DETACH), lambda: (None,)),
        (UPat(Ops.STORE), lambda: (None, None)),
    ]
)


# ---------------------------------------------------------------------------------------------------------------------
# gradients given for a whole subgraph

# rule(grad, wanted) -> one gradient (or None) per input; `wanted[i]` says whether input i needs one
GradientRule = Callable[[UOp, tuple[bool, ...]], tuple[UOp | None, ...]]

# node -> (inputs, rule), held weakly: an entry lives as long as its node
_gradient_rules = WeakKeyMap()


def set_gradient(node: UOp, inputs: tuple[UOp, ...], rule: GradientRule) -> None:
    """Give `node`'s gradient with respect to its ancestors `inputs` directly, for a subgraph whose derivative has a
    better form than the chain of its nodes' own rules (a convolution's input gradient is a transposed convolution;
    the chain through its windows' movement ops is a slow gather). The walk then skips the subgraph between them.

    `rule` must be the exact gradient of `node` (nodes are shared: anyone who builds the same node gets it) and must
    not hold `node` itself (that would keep the entry alive for good).

    A bfloat16 value is read through the graph of its uint16 bits, which is where a walk meets it: a rule given to one,
    or taking bfloat16 inputs, is restated over those bits (`uopkit.tensor.bits_gradients`)."""
    inputs = tuple(inputs)
    if _restatement is not None and (node.dtype is _BF16 or any(u.dtype is _BF16 for u in inputs)):
        nodes, inputs, rule = _restatement(node, inputs, rule)
        for n in nodes:
            _gradient_rules[n] = (inputs, rule)
        return
    _gradient_rules[node] = (inputs, rule)


# (node, inputs, rule) -> (nodes, inputs, rule): a rule given to a bfloat16 value, or taking bfloat16 inputs, restated
# over the graphs of their bits (`uopkit.tensor.bits_gradients`, which registers it: the tensor layer builds those)
Restatement = Callable[[UOp, tuple[UOp, ...], GradientRule], tuple[tuple[UOp, ...], tuple[UOp, ...], GradientRule]]
_restatement: Restatement | None = None


def restate_bfloat16_rules(restatement: Restatement) -> None:
    """Have `set_gradient` restate the rules given to bfloat16 values (or taking bfloat16 inputs) with `restatement`."""
    global _restatement
    _restatement = restatement


def given_gradient(node: UOp) -> tuple[tuple[UOp, ...], GradientRule] | None:
    """The inputs and rule `set_gradient` gave `node`, if any."""
    return _gradient_rules.get(node)


def carry_gradient_rule(old: UOp, new: UOp, replaced: dict[UOp, UOp]) -> None:
    """`new` is `old` rebuilt over other forms of its sources (`replaced`: node -> its new form), as a realized value
    put back as the graph that computed it: `new` gets `old`'s given gradient, for its inputs' new forms. (Without it
    the walk takes the chain of rules, which a given subgraph may lack: a bfloat16 value's integer bits.)"""
    given = _gradient_rules.get(old)
    if given is not None:
        inputs, rule = given
        _gradient_rules[new] = (tuple([replaced.get(i, i) for i in inputs]), rule)


# ---------------------------------------------------------------------------------------------------------------------
# the reverse sweep


def _not_kernel(u: UOp) -> bool:
    return u.op is not _KERNEL


class _Devices:
    """Where nodes live, looked up as the rules ask (only rules that build a constant or move a gradient across
    devices do, for a few nodes): a BUFFER's or DEVICE's device, a COPY's destination, else the first source's that has
    one; nodes inside a KERNEL are not looked at. `devices[u]` raises KeyError for a node without one."""

    def __init__(self) -> None:
        self.known: dict[UOp, str | None] = {}

    def __getitem__(self, u: UOp) -> str:
        device = self.known.get(u) if u in self.known else self._find(u)
        if device is None:
            raise KeyError(u)
        return device

    def _find(self, root: UOp) -> str | None:
        # sources before users, without recursion (graphs can be deep); a source is looked at only when every one
        # before it has no device
        known = self.known
        stack = [root]
        while stack:
            u = stack[-1]
            if u in known:
                stack.pop()
                continue
            op = u.op
            if op is _DEVICE:
                known[u] = u.arg
            elif op is _BUFFER:
                known[u] = u.arg[1]
            elif op is _COPY:
                known[u] = u.src[1].arg
            elif op is _KERNEL:
                known[u] = None
            else:
                for s in u.src:
                    if s not in known:
                        stack.append(s)
                        break
                    if known[s] is not None:
                        known[u] = known[s]
                        break
                else:
                    known[u] = None
                if u not in known:
                    continue
            stack.pop()
        return known[root]


def graph_of(root: UOp) -> dict[UOp, None]:
    """The nodes a gradient of `root` walks, sources first: never into a kernel (what a KERNEL computes is already
    storage)."""
    return root.toposort(gate=_not_kernel)


def _reaches_target_inside(node: UOp, inputs: tuple[UOp, ...], targets: set[UOp]) -> bool:
    """Whether a target lies between `node` and its given-gradient `inputs` (not counting the inputs, nor what is only
    behind a DETACH: no gradient goes there)."""
    seen, stack = set(inputs), list(node.src)
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        if u in targets:
            return True
        seen.add(u)
        if u.op is not _DETACH:
            stack.extend(u.src)
    return False


def compute_gradient(
    root: UOp,
    root_grad: UOp,
    targets: set[UOp],
    graph: dict[UOp, None] | None = None,
    hooks: dict[UOp, Callable[[UOp], UOp]] | None = None,
    before_hooks: dict[UOp, UOp] | None = None,
) -> dict[UOp, UOp]:
    """dL/dt for every `t` in `targets` that `root` depends on, where dL/droot = `root_grad`.

    Walks the graph from `root` back to the targets in reverse topological order, applying `pm_gradient` to
    each node on a path to a target and summing the gradients of nodes used more than once. `graph`: `graph_of(root)`
    when the caller has it already. `hooks`: node -> a function that replaces the node's whole gradient once it is
    summed, before it flows on to the node's sources (Tensor.register_hook). What reaches a node through a node of
    another tensor's own over it (`OwnNode`) is added after its hooks ran, and is not part of its result.
    `before_hooks`: filled with the gradient each node on the way had before its hooks ran (autograd.grad's result for
    an input its gradient flows on from, as torch's).
    """
    topo = list(graph if graph is not None else graph_of(root))
    # the nodes on a path to a target (sets: membership is all the walk asks)
    on_path: set[UOp] = set()
    # the nodes with a source on a path to a target: only these (when they receive a gradient) need their rule
    leads_on: set[UOp] = set()
    for u in topo:
        for s in u.src:
            if s in on_path:
                leads_on.add(u)
                on_path.add(u)
                break
        else:
            if u in targets:
                on_path.add(u)
    # one context for every rule, its `grad` set per node (a rule uses it only while it runs)
    ctx = GradientContext(root_grad, _Devices())
    grads: dict[UOp, UOp] = {root: root_grad}
    # the gradients that reached a value through nodes of its own (`OwnNode`), kept out of its hooks and `.grad`
    apart: dict[UOp, UOp] = {}
    walk = Walk(grads, topo[::-1])
    walks = _running.__dict__.setdefault("walks", [])
    walks.append(walk)
    try:
        _sweep(walk, targets, apart, leads_on, on_path, ctx, hooks, before_hooks)
    finally:
        walks.pop()
    if hooks:
        # (a target no rule was applied at, a leaf: its hooks run on its summed gradient here)
        for t in targets:
            if t in hooks and t in grads and t not in leads_on:
                grads[t] = hooks[t](grads[t])
    return {t: grads[t] for t in targets if t in grads}


class Walk:
    """A running `compute_gradient`: `grads` (node -> its gradient so far), `order` (the nodes in the order the rules
    are applied) and `at` (the position in it of the node whose given rule runs now). A rule that reads a gradient's
    values (one computed on the host, `uopkit.tensor.lapack`) stores what it computes of the others on the way and
    has the gradients still to pass on read it there (`replace_pending`): the rules after it then don't compute it
    again from the root."""

    __slots__ = ("grads", "order", "at")

    def __init__(self, grads: dict[UOp, UOp], order: list[UOp]) -> None:
        self.grads, self.order, self.at = grads, order, 0

    def pending(self) -> list[UOp]:
        """The nodes after the one whose rule runs now that have a gradient so far (it has yet to flow on)."""
        grads = self.grads
        return [u for u in self.order[self.at + 1 :] if u in grads]

    def replace_pending(self, mapping: dict[UOp, UOp]) -> None:
        """The gradients still to pass on with `mapping`'s nodes replaced (by the same values, stored)."""
        pending = self.pending()
        sums = UOp(Ops.SINK, src=tuple([self.grads[u] for u in pending])).substitute(mapping)
        for u, g in zip(pending, sums.src, strict=True):
            self.grads[u] = g


# per thread, the running walks, innermost last
_running = threading.local()


def running_walk() -> Walk | None:
    """The innermost `compute_gradient` running on this thread (None outside one)."""
    walks = getattr(_running, "walks", None)
    return walks[-1] if walks else None


def _sweep(
    walk: Walk,
    targets: set[UOp],
    apart: dict[UOp, UOp],
    leads_on: set[UOp],
    on_path: set[UOp],
    ctx: GradientContext,
    hooks: dict[UOp, Callable[[UOp], UOp]] | None,
    before_hooks: dict[UOp, UOp] | None,
) -> None:
    # `compute_gradient`'s reverse sweep: the rules applied from the root back, `grads` filled
    # (most graphs have no subgraph with a given gradient: no lookup per node then)
    any_given = len(_gradient_rules) > 0
    grads = walk.grads
    for at, u in enumerate(walk.order):
        if u not in leads_on:
            continue
        g = grads.get(u)
        if g is not None and hooks and u in hooks:
            if before_hooks is not None:
                before_hooks[u] = g
            g = grads[u] = hooks[u](g)
        if apart:
            kept = apart.pop(u, None)
            if kept is not None:
                g = kept if g is None else g + kept
        if g is None:
            continue
        given = _gradient_rules.get(u) if any_given else None
        if given is not None and _reaches_target_inside(u, given[0], targets):
            # a target inside the subgraph needs the gradients of the nodes in it: take the chain of rules
            given = None
        if given is not None:
            sources = given[0]
            wanted = tuple([s in on_path for s in sources])
            if not any(wanted):
                continue
            walk.at = at
            src_grads = given[1](g, wanted)
        else:
            # (a node in `leads_on` has a source on a path to a target)
            sources = u.src
            ctx.grad = g
            src_grads = pm_gradient.rewrite(u, ctx)
        if src_grads is None:
            raise GradientError(f"no gradient rule for {u.op.name} (dtype {u.dtype}, shape {u.shape})")
        if len(src_grads) != len(sources):
            raise GradientError(
                f"gradient rule for {u.op.name} gave {len(src_grads)} gradients for {len(sources)} inputs"
            )
        into = apart if u.op is _CONTIGUOUS and u.arg.__class__ is OwnNode else grads
        for s, sg in zip(sources, src_grads, strict=True):
            if sg is None or s not in on_path:
                continue
            if sg.shape != s.shape:
                raise GradientError(
                    f"gradient rule for {u.op.name} gave shape {sg.shape} for an input of shape {s.shape}"
                )
            into[s] = into[s] + sg if s in into else sg


__all__ = [
    "pm_gradient",
    "compute_gradient",
    "graph_of",
    "set_gradient",
    "GradientContext",
    "GradientError",
    "GradientRule",
    "OwnNode",
    "given_gradient",
    "Walk",
    "running_walk",
]

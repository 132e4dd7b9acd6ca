"""What the opt heuristics read off a kernel (the axes its loads and stores move along, with their strides), and
the way they try an opt (shared by the CPU heuristic, `heuristic`, and the GPU one, `heuristic_gpu`)."""

from __future__ import annotations

import functools
from typing import Any

from uopkit.codegen.opt import KernelPlan, Opt, OptError, apply_opt
from uopkit.renderer import Renderer
from uopkit.uop.ops import GroupOp, Ops, UOp, cast_scalar, exec_alu


def try_opt(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    """`plan` with `opt` applied, or `plan` itself when the kernel or the renderer refuses the opt."""
    try:
        return apply_opt(plan, opt, renderer)
    except OptError:
        return plan


def divisor(size: int, candidates: tuple[int, ...]) -> int | None:
    """The first of `candidates` that divides `size` (and is no larger)."""
    return next((c for c in candidates if size % c == 0 and size >= c), None)


def load_axes(ast: UOp, loads: bool = True) -> list[dict[int, int]]:
    """For each load (or store) of the kernel: the kernel axes its address moves along, with their strides."""
    return [dict(axes) for axes in _address_axes(ast)[0 if loads else 1]]


def picked_axes(ast: UOp) -> list[set[int]]:
    """For each load of the kernel (in `load_axes` order): the kernel axes its address moves along through a value
    loaded first, an index it picks at (a gather's rows by the index's axis): no stride to tell."""
    return [set(axes) for axes in _address_axes(ast)[2]]


# the heuristic asks for a kernel's loads and its stores, some twice: one lowering answers all (a kernel's code is
# generated once per process, so a small cache holds the kernels being generated)
@functools.lru_cache(maxsize=64)
def _lowered(ast: UOp) -> tuple[UOp, Any]:
    from uopkit.codegen.lowerer import lower_kernel

    return lower_kernel(ast)


def reduce_folds_away(ast: UOp) -> bool:
    """Whether the kernel's lowering (no opts) keeps no reduce loop: indexing's one-hot sum became a load at the
    index. (A one-hot select over an output axis instead, an embedding's gradient, stays a reduce.)"""
    return not any(u.op is Ops.DEFINE_REG for u in _lowered(ast)[0].toposort())


@functools.lru_cache(maxsize=64)
def _address_axes(ast: UOp) -> tuple[list[dict[int, int]], list[dict[int, int]], list[set[int]]]:
    from uopkit.uop.ops import graph_rewrite
    from uopkit.uop.symbolic import decompose, pm_symbolic

    lowered, ctx = _lowered(ast)
    # only the addresses matter: simplify them, not the whole kernel (its values can be a long chain of ops)
    indexes = [u for u in lowered.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL]
    addresses = [u.replace(src=u.src[:2]) for u in indexes]
    simplified = graph_rewrite(UOp(Ops.SINK, src=tuple(addresses)), pm_symbolic, name="symbolic (strides)")
    found: tuple[dict[UOp, dict[int, int]], dict[UOp, dict[int, int]]] = ({}, {})
    picked: dict[UOp, set[int]] = {}
    for u in simplified.src:
        if u.op is Ops.INDEX:
            axes: dict[int, int] = {}
            nonlinear: dict[int, UOp] = {}
            for coef, term in decompose(u.src[1])[0]:
                if term.op is Ops.RANGE and term.arg[0] in ctx.axis_of:
                    axes[ctx.axis_of[term.arg[0]]] = coef
                elif term.op is not Ops.CONST:
                    # an axis inside a non-linear term (div/mod): it moves the address, with no simple stride
                    for r in _ranges_in(term):
                        if r.arg[0] in ctx.axis_of:
                            axes.setdefault(ctx.axis_of[r.arg[0]], 0)
                            nonlinear[ctx.axis_of[r.arg[0]]] = r
            for axis, r in nonlinear.items():
                # its first step from 0 (a panel layout, (n // p) * big + n % p, steps by 1)
                axes[axis] = _first_step(u.src[1], r)
            # buffer 0 is the output: its INDEXes are the stores
            found[0 if u.src[0].arg != 0 else 1][u] = axes
            loaded = [n for n in u.src[1].toposort(gate=_not_range) if n.op is Ops.LOAD]
            ranges = {r for n in loaded for r in _ranges_in(n) if r.arg[0] in ctx.axis_of}
            picked[u] = {ctx.axis_of[r.arg[0]] for r in ranges}
    return list(found[0].values()), list(found[1].values()), [picked[u] for u in found[0]]


def _not_range(u: UOp) -> bool:
    return u.op is not Ops.RANGE


def _ranges_in(u: UOp) -> set[UOp]:
    """The ranges `u` is computed from. A range's own sources are not walked: a reduce's range lists the store that
    sets its accumulator first, indexed by the output's ranges, which don't move an address inside the reduce (a
    matmul's left operand seemed to move along the output's columns, and the heuristic found no register tile: 256
    lanes stored one by one and 2048 gathered loads, 377 KB of C, 15-25 s of gcc and a kernel ~15x slower)."""
    if u.op is Ops.RANGE:
        return {u}
    return {s for n in u.toposort(gate=_not_range) for s in n.src if s.op is Ops.RANGE}


def _first_step(index: UOp, r: UOp) -> int:
    """How far `index` moves when range `r` goes from 0 to 1, every other range at 0 (0 if that isn't a constant)."""
    from uopkit.uop.symbolic import simplify

    at0, at1 = _evaluate(index, r, 0), _evaluate(index, r, 1)
    if at0 is not None and at1 is not None:
        return int(at1 - at0)
    if any(x.op is Ops.LOAD for x in index.toposort()):
        # an address computed from loaded values (a gather's, a binary search's chain of them) isn't a constant: not
        # simplified whole for each of its loads
        return 0
    # something besides ranges and constants (a variable, a load): the simplifier may still find a constant
    others = {x: x.const_like(0) for x in index.toposort() if x.op is Ops.RANGE and x is not r}
    at = [simplify(index.substitute({**others, r: r.const_like(v)})) for v in (0, 1)]
    return at[1].arg - at[0].arg if all(a.op is Ops.CONST for a in at) else 0


def _evaluate(index: UOp, r: UOp, v: int) -> int | None:
    """`index` at `r` = v and every other range at 0, computed as constant folding would (None: it holds something
    else than ranges, constants and scalar ALU ops). Folding the substituted graph gives the same constant, for a
    fraction of the cost."""
    if index.op is Ops.RANGE:
        return v if index is r else 0
    vals: dict[UOp, Any] = {}
    # a range is a value here: its sources (its end, what runs before it) are not walked
    for u in index.toposort(gate=lambda u: u.op is not Ops.RANGE):
        for s in u.src:
            if s.op is Ops.RANGE:
                vals[s] = cast_scalar(v if s is r else 0, s.dtype)
        if u.dtype.count != 1:
            return None
        if u.op is Ops.CONST and not isinstance(u.arg, tuple):
            vals[u] = u.arg
        elif u.op is Ops.CAST:
            vals[u] = cast_scalar(vals[u.src[0]], u.dtype)
        elif u.op in GroupOp.ALU:
            vals[u] = exec_alu(u.op, u.dtype, [vals[s] for s in u.src])
        else:
            return None
    ret = vals[index]
    return ret if isinstance(ret, int) and not isinstance(ret, bool) else None


def memory_strides(ast: UOp, loads: bool = True) -> dict[int, set[int]]:
    """For each kernel axis, the strides with which the kernel's loads (or its stores) walk memory along it."""
    strides: dict[int, set[int]] = {}
    for axes in load_axes(ast, loads):
        for axis, stride in axes.items():
            strides.setdefault(axis, set()).add(stride)
    return strides

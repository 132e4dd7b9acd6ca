"""Merging a kernel's adjacent axes where every view walks them as one: fewer, longer loops.

A (32, 16, 4, 4) ReLU over contiguous data with a per-channel bias is the same kernel as a (32, 16, 16) one: the last
two axes are one run of 16 elements in each buffer it reads and writes. As four nested loops its innermost loop is 4
long, shorter than a vector of 8 or 16 floats; merged, it is one loop of 16. (gcc's compile time for that kernel is
about the same either way: ~0.1 s at -O3.)

Axes i and i+1 merge when, for every view the kernel reads or writes through, one step along i is as far as the
whole of i+1, and both are reduce axes or neither is. The views are movement-op chains over each load (and over the
stored buffer); merging is pushed down each chain, op by op, to where it can end:

- RESHAPE: over data the kernel reads (reshapes all the way down) the chain ends with the merged shape, as reshapes
  compose; over other views, a merged run must start and end where some axis of the reshape's source does (else
  each element would need a division and a modulo), and those source axes merge
- EXPAND, FLIP: the merged axes are expanded (flipped) all or none
- PERMUTE: the merged axes come from consecutive axes of the source, in order
- SHRINK, PAD: only the outermost of the merged axes is shrunk (padded); its bounds scale by the inner sizes

A chain that ends elsewhere (on a computed value) or a kernel whose values have other shapes than the full one and
the reduced one (several reduce levels) keeps its axes: merging is an optimization, never required.
"""

from __future__ import annotations

import math

from uopkit.uop.ops import GroupOp, Ops, UOp

# a partition of a shape's axes into runs of consecutive axes: the start of each run
Runs = tuple[int, ...]


def _groups(runs: Runs, rank: int) -> list[range]:
    ends = (*runs[1:], rank)
    return [range(a, b) for a, b in zip(runs, ends, strict=True)]


def _merged(shape: tuple[int, ...], runs: Runs) -> tuple[int, ...]:
    return tuple(math.prod(shape[a] for a in g) for g in _groups(runs, len(shape)))


def _runs_merging(rank: int, pairs: set[int]) -> Runs:
    """The runs of `rank` axes in which each axis in `pairs` is merged with the next one."""
    return tuple(a for a in range(rank) if a == 0 or a - 1 not in pairs)


def _source_runs(u: UOp, runs: Runs) -> Runs | None:
    """The runs of a movement op's source that merging `runs` of its result needs (None: it doesn't allow them)."""
    shape, in_shape = u.shape, u.src[0].shape
    assert shape is not None and in_shape is not None
    groups = _groups(runs, len(shape))
    if u.op is Ops.RESHAPE:
        return _reshape_source_runs(in_shape, shape, groups)
    if u.op is Ops.EXPAND:
        # every axis of a merged run expanded, or none (a size-1 axis is either)
        ok = all(len({in_shape[a] == shape[a] for a in g if shape[a] != 1}) <= 1 for g in groups)
    elif u.op is Ops.FLIP:
        ok = all(len({u.arg[a] for a in g if shape[a] != 1}) <= 1 for g in groups)
    elif u.op is Ops.PERMUTE:
        # a merged run comes from consecutive source axes, in order; the source's runs start where those do
        if any(u.arg[a + 1] != u.arg[a] + 1 for g in groups for a in g[:-1]):
            return None
        return tuple(sorted(u.arg[g[0]] for g in groups))
    elif u.op in (Ops.SHRINK, Ops.PAD):
        # only the outermost axis of a merged run is shrunk (padded)
        ok = all(u.arg[a] == ((0, in_shape[a]) if u.op is Ops.SHRINK else (0, 0)) for g in groups for a in g[1:])
    else:
        return None
    return runs if ok else None


def _reshape_source_runs(in_shape: tuple[int, ...], shape: tuple[int, ...], groups: list[range]) -> Runs | None:
    # a merged run of the result is a run of the source's axes too when it starts and ends where some source axis
    # does (in elements): the source's axes inside it merge, the others stay (elsewhere the reshape of the merged axes
    # would need a division and a modulo per element)
    if sum(n > 1 for n in in_shape) <= 1:
        # a flat source (a window of a buffer): any run of the result is a run of its elements
        return (0,)
    starts = {}
    for j in range(len(in_shape), -1, -1):
        starts[math.prod(in_shape[:j])] = j
    inside: set[int] = set()
    for g in groups:
        if len(g) == 1:
            continue
        a, b = starts.get(math.prod(shape[: g[0]])), starts.get(math.prod(shape[: g[-1] + 1]))
        if a is None or b is None:
            return None
        inside.update(range(a + 1, b))
    return tuple(j for j in range(len(in_shape)) if j not in inside)


def _rebuilt_movement(u: UOp, runs: Runs, src: UOp) -> UOp:
    """Movement op `u` over its source rebuilt as `src`, with `runs` of its result merged."""
    shape, in_shape = u.shape, u.src[0].shape
    assert shape is not None and in_shape is not None
    groups = _groups(runs, len(shape))
    if u.op in (Ops.RESHAPE, Ops.EXPAND):
        arg: tuple = _merged(shape, runs)
    elif u.op is Ops.FLIP:
        # (a flip of a size-1 axis does nothing: it must not flip the run it merges into)
        arg = tuple(any(u.arg[a] for a in g if shape[a] != 1) for g in groups)
    elif u.op is Ops.PERMUTE:
        starts = sorted(u.arg[g[0]] for g in groups)
        arg = tuple(starts.index(u.arg[g[0]]) for g in groups)
    else:
        # SHRINK, PAD: the outer axis's bounds in elements of the merged run
        inner = [math.prod(in_shape[a] for a in g[1:]) for g in groups]
        arg = tuple((u.arg[g[0]][0] * n, u.arg[g[0]][1] * n) for g, n in zip(groups, inner, strict=True))
    return UOp(u.op, u.dtype, (src,), arg)


# what a view's chain can end on below a RESHAPE: data the kernel reads, not a value it computes
_LEAVES = frozenset({Ops.LOAD, Ops.CONST, Ops.IOTA, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR})


def _transform(ast: UOp, runs: Runs, shapes: set[tuple[int, ...]], red_axes: set[int], build: bool) -> UOp | None:
    """`ast` with `runs` merged in every value and view (`build=False`: only whether it can be, `ast` or None).

    Walks (node, runs of its result) pairs from the stores down: values keep the kernel's runs, a view derives its
    source's runs (`_source_runs`), a RESHAPE of data ends its chain."""
    done: dict[tuple[UOp, Runs], UOp] = {}
    stack: list[tuple[UOp, Runs, bool]] = [(ast, runs, False)]
    while stack:
        u, r, ready = stack.pop()
        if (u, r) in done:
            continue
        if u.op in GroupOp.Movement:
            if u.op is Ops.RESHAPE and all(v.op is Ops.RESHAPE for v in u.movement_chain()) and u.base.op in _LEAVES:
                # reshapes of data the kernel reads compose: the chain ends with the merged shape
                done[(u, r)] = _rebuilt_movement(u, r, u.src[0]) if build else u
                continue
            src_runs = _source_runs(u, r)
            if src_runs is None:
                return None
            if not ready:
                stack += [(u, r, True), (u.src[0], src_runs, False)]
                continue
            new_src = done[(u.src[0], src_runs)]
            done[(u, r)] = _rebuilt_movement(u, r, new_src) if build else u
            continue
        if u.op in _LEAVES and u.shape is not None and r == tuple(range(len(u.shape))):
            # data under a view that merges nothing in it (a window of a buffer, flat)
            done[(u, r)] = u
            continue
        if u.shape is None and u.op not in (Ops.SINK, Ops.STORE):
            # (no shape: a device, a buffer's definition; nothing to merge in it)
            if any(s.shape is not None for s in u.toposort()):
                return None
            done[(u, r)] = u
            continue
        if u.op not in (Ops.SINK, Ops.STORE) and (u.shape not in shapes or r != runs):
            # a value of another shape, or a view that moves the kernel's axes around before a computed value
            return None
        if not ready:
            stack.append((u, r, True))
            stack += [(s, runs, False) for s in u.src]
            continue
        new_src = tuple(done[(s, runs)] for s in u.src)
        arg = u.arg
        if u.op is Ops.REDUCE_AXIS:
            arg = (u.arg[0], tuple(i for i, g in enumerate(_groups(runs, len(u.shape))) if g[0] in red_axes))
        done[(u, r)] = u if not build or (new_src == u.src and arg == u.arg) else UOp(u.op, u.dtype, new_src, arg)
    return done[(ast, runs)]


def merge_axes(ast: UOp) -> UOp:
    """`ast` with its mergeable adjacent axes merged (see the module docstring); `ast` itself when none are."""
    if ast.op is not Ops.SINK or not ast.src or any(s.op is not Ops.STORE for s in ast.src):
        return ast
    out = ast.src[0].src[0].shape
    if out is None or len(out) < 2:
        return ast
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
    if len({r.arg[1] for r in reduces}) > 1 or len({r.src[0].shape for r in reduces}) > 1:
        return ast
    full = reduces[0].src[0].shape if reduces else out
    if full is None or len(full) != len(out):
        return ast
    red_axes = set(reduces[0].arg[1]) if reduces else set()
    shapes = {full, out}
    rank = len(full)
    # pairs of axes that merge alone, then all of them together (the conditions are pairwise: a run of axes merges
    # when each of its pairs does)
    candidates = [a for a in range(rank - 1) if (a in red_axes) == (a + 1 in red_axes)]
    pairs = {a for a in candidates if _transform(ast, _runs_merging(rank, {a}), shapes, red_axes, False) is not None}
    if not pairs:
        return ast
    merged = _transform(ast, _runs_merging(rank, pairs), shapes, red_axes, True)
    return ast if merged is None else merged

"""Scatters as sorted segments: the writes sorted by target, a halving search for where each target's writes end
(the previous target's end is where they start), and a scan within each run of equal targets. Every step is a sort,
a gather (one load at an index) or an elementwise pass, so a scatter of m writes into n targets costs about
m log^2 m + n log m instead of the n * m compares of a one-hot mask (1e5 writes into 1e6 targets: seconds). The
one-hot form stays for small scatters: one fused kernel, where this is a few dozen. Also here: PyTorch's binary
search (searchsorted), a sorted membership test (isin), the gradient of a large gather or pick, a scatter-add of
the incoming gradient by sorting, and scatter_reduce's amax/amin with its gradient."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.gradient import set_gradient
from uopkit.schedule.grouper import runs_scatters_in_order
from uopkit.tensor.support import _sum_op
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# rows x targets x writes (the one-hot mask's compares) from which a scatter sorts its writes instead (~0.3 s of
# compares on two cores; the sorted form compiles some 50 small kernels the first time); isin and bincount likewise
SCATTER_BY_SORTING = 1 << 33


def binary_search(sorted_rows: Tensor, values: Tensor, right: bool) -> Tensor:
    """For each of `values` (..., k), where it would be inserted into its row of `sorted_rows` (..., m): the first
    position whose entry is >= the value (> with `right`), found step by step as PyTorch's search does (so a NaN
    value, or a NaN in a row, lands where PyTorch puts it). int32."""
    m = sorted_rows.shape[-1]
    lo = Tensor.full(values.shape, 0, dtype=dtypes.int32, device=values.device)
    hi = Tensor.full(values.shape, m, dtype=dtypes.int32, device=values.device)
    for _ in range(m.bit_length()):
        active = lo < hi
        mid = lo + ((hi - lo) >> 1)
        # (mid < m while the search is active; a finished one reads any entry and keeps its bounds)
        entry = sorted_rows._gather_checked(sorted_rows.ndim - 1, mid.minimum(m - 1))
        after = (entry > values) if right else (entry >= values)
        lo = (active & after.logical_not()).where(mid + 1, lo)
        hi = (active & after).where(mid, hi)
    return lo


def contains(tests: Tensor, values: Tensor) -> Tensor:
    """Where each of `values` equals one of `tests` (any shapes, one dtype; NaN equals nothing): the tests sorted, the
    last one <= each value found by a halving search and compared, (n + m) log m instead of n * m compares."""
    ordered = tests.reshape(1, -1).sort(-1)[0]
    flat = values.reshape(1, -1)
    count = _count_up_to(ordered, flat)
    nearest = ordered._gather_checked(1, (count - 1).maximum(0))
    return ((count > 0) & (nearest == flat)).reshape(values.shape)


def _count_up_to(sorted_rows: Tensor, values: Tensor) -> Tensor:
    """How many entries of each row of `sorted_rows` (..., m; sorted, NaNs last) are <= each of `values` (..., k): a
    search by halving strides that keeps one position (one kernel a step, where the two bounds of `binary_search`
    take three). int32."""
    m = sorted_rows.shape[-1]
    pos = Tensor.full(values.shape, 0, dtype=dtypes.int32, device=values.device)
    stride = 1 << (m.bit_length() - 1) if m else 0
    while stride:
        # the entry `stride` past the count so far: still <= the value, the count moves past it
        probe = pos + stride
        entry = sorted_rows._gather_checked(sorted_rows.ndim - 1, (probe - 1).minimum(m - 1))
        pos = ((probe <= m) & (entry <= values)).where(probe, pos)
        stride >>= 1
    return pos


def _scan_runs(keys: Tensor, vals: Tensor, combine: str = "sum") -> Tensor:
    """The running `combine` ("sum", "amax" or "amin") of `vals` along axis 1, restarting where `keys` (of vals'
    shape) changes (keys sorted): log2(m) doubling steps, each combining the value 2^k back when it belongs to the
    same run (a tree within each run, as accurate as a pairwise sum)."""
    m = vals.shape[1]
    rest = ((0, 0),) * (vals.ndim - 2)
    step = 1
    while step < m:
        back_keys = keys.pad(((0, 0), (step, 0)) + rest, value=-1).shrink_to(*keys.shape)
        back_vals = vals.pad(((0, 0), (step, 0)) + rest).shrink_to(*vals.shape)
        both = back_vals + vals if combine == "sum" else COMBINE[combine](back_vals, vals)
        vals = (back_keys == keys).where(both, vals).contiguous()
        step *= 2
    return vals


# (NaN wins, as in PyTorch's scatter_reduce)
COMBINE = {"amax": lambda a, b: a.maximum(b), "amin": lambda a, b: a.minimum(b)}


def _spread(rows: Tensor, like: Tensor) -> Tensor:
    # a (R, k) tensor over the feature axes of `like` (R, k, *F)
    return rows.reshape(rows.shape + (1,) * (like.ndim - 2))._broadcast_to(rows.shape + like.shape[2:])


def scatter_rows(base: Tensor, keys: Tensor, vals: Tensor, reduce: str, include_self: bool) -> Tensor:
    """`base` (R, n, *F) with the writes `vals` (R, m, *F) at the targets `keys` (R, m, each in [0, n)) combined
    in, row by row (F: feature axes written whole, as an embedding's rows): reduce "replace" (the last write to a
    target in key order wins), "sum", "mean" (with or without base's own value, `include_self`; an integer mean
    rounds down, as PyTorch's), "amax" or "amin". Returns the result.
    Gradients: the result's is given directly (each write gets the gradient at its target; a base value replaced gets
    none; amax's and amin's from scatter_reduce), not through the sort."""
    n = base.shape[1]
    keys = keys.cast(dtypes.positions(n)) if keys.dtype != dtypes.positions(n) else keys
    if reduce == "sum" and include_self and writes_one_by_one(base.device):
        out = _summed_in_place(base.detach(), keys.detach(), vals.detach())
        _give_gradient(out, base, vals, keys, None, None, reduce, True)
        return out
    if reduce == "replace" and writes_one_by_one(base.device):
        out, written = _replaced_in_place(base.detach(), keys.detach(), vals.detach())
        _give_gradient(out, base, vals, keys, written, None, reduce, False)
        return out
    sorted_keys, order = keys.detach().sort(-1)
    sorted_vals = vals.detach()._gather_checked(1, _spread(order, vals))
    targets = Tensor.arange(n, device=base.device, dtype=keys.dtype).reshape(1, n)._broadcast_to(base.shape[:2])
    # target p's writes are sorted_keys[first:end]: first is how many keys are below p, the count up to p - 1
    end = _count_up_to(sorted_keys, targets)
    first = end.pad(((0, 0), (1, 0))).shrink_to(end.shape[0], n)
    count = end - first
    hit = count > 0
    hit_f, last = _spread(hit, base), _spread((end - 1).maximum(0), base)
    old = base.detach()
    if reduce == "replace":
        out = hit_f.where(sorted_vals._gather_checked(1, last), old)
    else:
        combine = reduce if reduce in COMBINE else "sum"
        total = _scan_runs(_spread(sorted_keys, vals), sorted_vals, combine)._gather_checked(1, last)
        if reduce in COMBINE:
            out = hit_f.where(COMBINE[reduce](total, old) if include_self else total, old)
        elif reduce == "sum":
            out = old + hit_f.where(total, 0) if include_self else hit_f.where(total, old)
        else:
            if include_self:
                total, count = hit_f.where(total, 0) + old, count + 1
            dt = base.dtype
            divisor = _spread(count.maximum(1), base).cast(dt)
            mean = total.div(divisor, rounding_mode=None if dtypes.is_float(dt) else "floor")
            out = hit_f.where(mean.cast(dt), old)
    # (stored: read lazily by a reduction (`.sum()` of the scatter, a gradient's norm) the gather at the searched
    # positions stayed a loop over every write per target, 100x slower than this one kernel more)
    out = out.contiguous()
    _give_gradient(out, base, vals, keys, hit_f, _spread(count, base) if reduce == "mean" else None,
                   reduce, include_self)  # fmt: skip
    return out


def added_at(keys: Tensor, vals: Tensor, size: int) -> Tensor:
    """(size, *F) zeros with each row of `vals` (n, *F) added at its key in `keys` (n,), every key known to be in
    [0, size): `added_along` (a bincount, a histogram, an embedding bag's sum)."""
    n = keys.shape[0]
    base = Tensor.zeros((size,) + vals.shape[1:], dtype=vals.dtype, device=vals.device)
    # (the keys stored: a scatter kernel's writes read them one per write, never through a broadcast view)
    spread = keys.contiguous().reshape((n,) + (1,) * (vals.ndim - 1))._broadcast_to(vals.shape)
    return added_along(base, 0, spread, vals)


def added_along(base: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """base.scatter_add(dim, index, src) for an index known to be in range (no read-back of its bounds, a sync each),
    half floats summed in float32 and rounded once: scatter_add's lowering (`combined_at`), stored (a cast of the
    sums fused into a scatter kernel, histc's counts as floats, would make it a one-hot reduce)."""
    if base.dtype in dtypes.halves:
        return added_along(base.float(), dim, index, src.float()).cast(base.dtype)
    return combined_at(base, dim, index, src, "sum", True).contiguous()


def writes_one_by_one(device: object) -> bool:
    """Whether `device` runs a one-hot sum over an output axis as its writes, one by one (`runs_scatters_in_order`),
    so a scatter-add costs writes + targets at any size and needs no sorting (a sharded device: no)."""
    return isinstance(device, str) and runs_scatters_in_order(device)


def _summed_in_place(base: Tensor, keys: Tensor, vals: Tensor) -> Tensor:
    # base + the one-hot sum of the writes, stored alone: a kernel of exactly that form lowers as the writes
    # (half floats summed in float32 and rounded once)
    if base.dtype in dtypes.halves:
        return _summed_in_place(base.float(), keys, vals.float()).cast(base.dtype)
    n = base.shape[1]
    # hit[r, p, *F, i]: write i of row r goes to target p
    hit = keys.reshape(keys.shape[0], 1, keys.shape[1])._one_hot_along(n).squeeze(1).transpose(1, 2)
    hit = hit.reshape(hit.shape[:2] + (1,) * (vals.ndim - 2) + hit.shape[2:])
    spread = vals._move_to_end(1).unsqueeze(1)
    full = base.shape + (keys.shape[1],)
    zero = Tensor(0, device=base.device, dtype=base.dtype)
    total = hit._broadcast_to(full).where(spread._broadcast_to(full), zero)._reduce(Ops.ADD, -1)
    return (base + total).contiguous()


def _replaced_in_place(base: Tensor, keys: Tensor, vals: Tensor) -> tuple[Tensor, Tensor]:
    # (the result, where a write hit, spread over the feature axes) the last write to each target wins: the largest
    # write position per target (the lowest int where none) is a one-hot max stored alone, which a device that runs
    # a scatter's writes one by one lowers as those writes, then each target loads the write it names. Two kernels of
    # writes + targets; sorting the writes was 140 kernels (16384 rows of 64 into 65536: 280 -> 45 ms of CPU)
    m, n = keys.shape[1], base.shape[1]
    dt = dtypes.positions(m)
    hit = keys.reshape(keys.shape[0], 1, m)._one_hot_along(n).squeeze(1).transpose(1, 2)
    order = Tensor.arange(m, device=base.device, dtype=dt).reshape(1, 1, m)._broadcast_to(hit.shape)
    last = hit.where(order, Tensor(dtypes.min(dt), device=base.device, dtype=dt))._reduce(Ops.MAX, -1).contiguous()
    written = _spread(last >= 0, base)
    picked = vals._gather_checked(1, _spread(last.maximum(0), vals))
    return written.where(picked, base).contiguous(), written


def _give_gradient(
    out: Tensor,
    base: Tensor,
    vals: Tensor,
    keys: Tensor,
    hit: Tensor | None,
    count: Tensor | None,
    reduce: str,
    include_self: bool,
) -> None:
    # (hit and count spread over the feature axes; an amax's or amin's gradient is given by scatter_reduce, whichever
    # form computed it)
    if not dtypes.is_float(out.dtype) or reduce in COMBINE:
        return
    # (hit: None where base keeps its gradient whole, a sum with include_self)
    keys_f, hit = _spread(keys.detach(), vals), hit.detach() if hit is not None else None
    count = count.detach() if count is not None else None

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        grad = Tensor(g)
        if count is not None:
            # a mean passes each of its terms 1 / count of the gradient
            grad = grad / count.maximum(1).cast(grad.dtype)
        keeps_own = include_self and reduce != "replace"
        if keeps_own:
            to_base = grad
        else:
            assert hit is not None
            to_base = hit.where(0, Tensor(g))
        to_vals = grad._gather_checked(1, keys_f)
        return (to_base.uop if wanted[0] else None, to_vals.uop if wanted[1] else None)

    set_gradient(out.uop, (base.uop, vals.uop), rule)


# ---------------------------------------------------------------------------------------------------------------------
# the gradient of a large pick: its one-hot form's own gradient would compare every target with every index (a 1e5
# pick of 1e6 values: seconds); given directly, it is a scatter-add by sorting (below)


def gather_gradient_by_sorting(out: Tensor, region: Tensor, dim: int, index: Tensor) -> None:
    # out = region.gather(dim, index) (region cut to index's extents off dim): each out element's gradient adds into
    # the region element it was taken from, a scatter-add of the gradient (by sorting: its mask is as large)
    at = index.detach()

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        zeros = Tensor.zeros(region.shape, device=region.device, dtype=g.dtype)
        total = scattered_by_sorting(zeros, dim, at, Tensor(g), "sum", True)
        assert total is not None
        return (total.uop,)

    set_gradient(out.uop, (region.uop,), rule)


def pick_gradient_by_sorting(
    out: Tensor, x: Tensor, picks: list[Tensor], bshape: tuple[int, ...], rest: tuple[int, ...], sizes: tuple[int, ...]
) -> None:
    # out (bshape + rest) = x (1.. + rest + sizes) at the picked positions of its last axes: each picked row (the
    # rest axes ride along as features) gets the gradient of every out row that took it
    b, r, total = math.prod(bshape), math.prod(rest), math.prod(sizes)
    flat = picks[0]
    for idx, size in zip(picks[1:], sizes[1:], strict=True):
        flat = flat * size + idx
    keys = flat.detach().reshape(1, b)

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        grad = Tensor(g).reshape(1, b, r)
        zeros = Tensor.zeros(1, total, r, device=grad.device, dtype=grad.dtype)
        rows = scatter_rows(zeros, keys, grad, "sum", True)
        m = len(sizes)
        placed = rows.reshape(sizes + rest).permute(tuple(range(m, m + len(rest))) + tuple(range(m)))
        return (placed.reshape(x.shape).uop,)

    set_gradient(out.uop, (x.uop,), rule)


def scattered_by_sorting(
    base: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool
) -> Tensor | None:
    """The scatter through sorted segments (`scatter_rows`) where its one-hot mask would be large, else None. Rows
    are index's positions off `dim`: base's region there is scattered, the rest kept."""
    n, m = base.shape[dim], index.shape[dim]
    rows = math.prod(index.shape) // m if m else 0
    if rows * n * m < SCATTER_BY_SORTING:
        return None
    region = base.shrink(tuple((0, n) if d == dim else (0, i) for d, i in enumerate(index.shape)))
    moved = region._move_to_end(dim)
    out = scatter_rows(
        moved.reshape(rows, n),
        index._move_to_end(dim).reshape(rows, m),
        src._move_to_end(dim).reshape(rows, m),
        reduce,
        include_self,
    )
    out = out.reshape(moved.shape)._move_from_end(dim)
    if region.shape == base.shape:
        return out
    pads = tuple((0, s - r) for s, r in zip(base.shape, region.shape, strict=True))
    inside = Tensor.full(region.shape, True, dtype=dtypes.bool, device=base.device).pad(pads)
    return inside.where(out.pad(pads), base)


def one_hot_writes(base: Tensor, dim: int, index: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """The writes of a scatter into `base` as a one-hot mask and their values, a last axis of writes added:
    hit[..., p, ..., i]: index position i (along dim) writes target position p (at dim)."""
    n = base.shape[dim]
    hit = index._one_hot_along(n).transpose(dim, -1)
    vals = src._move_to_end(dim).unsqueeze(dim)._broadcast_to(hit.shape)
    # pad the index's smaller extents up to base's shape (nothing is written there)
    pads = tuple(
        (0, 0) if d == dim else (0, s - i) for d, (i, s) in enumerate(zip(index.shape, base.shape, strict=True))
    )
    return hit.pad(pads + ((0, 0),)), vals.pad(pads + ((0, 0),))


def combined_at(base: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool) -> Tensor:
    """base.scatter_reduce(dim, index, src, "sum", "mean" or "prod") for a checked index and src of base's dtype.
    On a device that adds a scatter's writes one by one (`writes_one_by_one`) at any size: the count of writes per
    target a one-hot sum stored alone, and the result a kernel with one one-hot sum (a kernel of that form is the
    writes, `uopkit.codegen.scatter`, whatever it computes from the sum element by element). Elsewhere a sum or mean
    goes by sorting where the one-hot mask would be large, else (and a prod always) through that mask, one fused
    kernel that needs no atomics. Gradients flow through the one-hot sum (a gather at the index)."""
    one_by_one = writes_one_by_one(base.device)
    if not one_by_one and reduce != "prod":
        sorted_form = scattered_by_sorting(base, dim, index, src, reduce, include_self)
        if sorted_form is not None:
            return sorted_form
    hit, vals = one_hot_writes(base, dim, index, src)
    dt = base.dtype
    # how many writes each target gets (stored alone where a kernel may hold one one-hot reduce only)
    count = _writes_per_target(hit) if one_by_one else hit.cast(dtypes.int32)._reduce(Ops.ADD, -1)
    if reduce == "prod":
        total = hit.where(vals, Tensor(1, device=base.device, dtype=dt))._reduce(Ops.MUL, -1)
        return base * total if include_self else (count > 0).where(total, base)
    total = hit.where(vals, Tensor(0, device=base.device, dtype=dt))._reduce(_sum_op(dt), -1)
    if reduce == "sum":
        return base + total if include_self else (count > 0).where(total, base)
    if include_self:
        total, count = total + base, count + 1
    mean = total.div(count.cast(dt), rounding_mode="floor" if not dtypes.is_float(dt) else None)
    return (count > 0).where(mean.cast(dt), base)


def _writes_per_target(hit: Tensor) -> Tensor:
    # how many writes each target gets (hit's last axis: the writes), int32, a one-hot sum stored alone
    return hit.where(1, 0).cast(dtypes.int32)._reduce(Ops.ADD, -1).contiguous()


def scatter_extreme(base: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool) -> Tensor:
    """base.scatter_reduce(dim, index, src, "amax" or "amin"): on a device that runs a scatter's writes one by one,
    the largest write per target (a kernel with one one-hot max), else by sorting where large and one-hot where not; no
    index at all leaves base as it is (a copy), as torch's."""
    if index.numel() == 0:
        return base.clone()
    one_by_one = writes_one_by_one(base.device)
    if not one_by_one:
        sorted_form = scattered_by_sorting(base, dim, index, src, reduce, include_self)
        if sorted_form is not None:
            return sorted_form
    hit, vals = one_hot_writes(base, dim, index, src)
    dt, inv = base.dtype, reduce == "amin"
    low = Tensor(dtypes.min(dt), device=base.device, dtype=dt)
    best = hit.where(vals._inverse() if inv else vals, low)._reduce(Ops.MAX, -1)
    best = best._inverse() if inv else best
    if include_self:
        # (where nothing is written the max is the identity, and base's own value wins against it)
        return best.minimum(base) if inv else best.maximum(base)
    written = _writes_per_target(hit) > 0 if one_by_one else hit.any(-1)
    return written.where(best, base)


def with_extreme_gradient(
    result: Tensor, base: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool
) -> Tensor:
    """`result` (base.scatter_reduce(dim, index, src, "amax" or "amin")) with PyTorch's gradient: shared equally by
    every value equal to the result at its target, base's own value counted among them even without include_self
    (whose base gets none where written), as PyTorch's formula has it."""
    if not dtypes.is_float(result.dtype):
        return result
    # the graphs of the values as they are now, held as UOps: a Tensor (detach()'s view of base, or any live tensor
    # that a realize moves onto the storage it computes) would show the result once an in-place scatter_reduce_
    # writes it into base's storage, and every value of base would tie with the result
    inputs = tuple(UOp(Ops.DETACH, t.dtype, (t.uop,)) for t in (base, src, index))

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        old, writes, at = (Tensor(u) for u in inputs)
        # (the result computed again from the inputs: the rule must not hold the node it is the gradient of)
        out = scatter_extreme(old, dim, at, writes, reduce, include_self)
        grad = Tensor(g)
        own = (old == out).cast(grad.dtype)
        ties = (writes == out._gather_checked(dim, at)).cast(grad.dtype)
        # (the index was checked by the forward scatter: its bounds aren't read back again)
        share = grad / added_along(own, dim, at, ties)
        to_base = own * share
        if not include_self:
            ones = Tensor.ones(at.shape, device=old.device, dtype=dtypes.int32)
            written = added_along(Tensor.zeros(old.shape, device=old.device, dtype=dtypes.int32), dim, at, ones) > 0
            to_base = written.where(0, to_base)
        to_src = ties * share._gather_checked(dim, at)
        return (to_base.uop if wanted[0] else None, to_src.uop if wanted[1] else None)

    set_gradient(result.uop, (base.uop, src.uop), rule)
    return result

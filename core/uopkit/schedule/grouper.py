"""kernelize: decide which values realize, fuse the rest into their consumers, build STORE(BUFFER, KERNEL(...))."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from uopkit.codegen.lowerer import move_index, pad_index
from uopkit.dtype import dtypes, index_dtype
from uopkit.schedule.gather_index import indexes_gathers, indexes_gathers_in, reads_same_index
from uopkit.schedule.launch_consts import launch_const
from uopkit.schedule.read_masks import read_masks
from uopkit.schedule.shared_values import realize_deep_shared_values
from uopkit.schedule.windows import mirror_bounds
from uopkit.schedule.without_detach import stored_originals, without_detaches
from uopkit.uop.ops import GroupOp, Ops, UOp, cast_scalar, is_one_hot_reduce
from uopkit.uop.symbolic import simplify


class ScheduleError(RuntimeError):
    pass


def is_kernel_store(u: UOp) -> bool:
    """STORE(target, KERNEL): a value some kernel writes (kernelized, not yet run)."""
    return u.op is Ops.STORE and len(u.src) == 2 and u.src[1].op is Ops.KERNEL


def is_realized_view(u: UOp) -> bool:
    """A view of storage that already exists or is already scheduled: nothing to compute."""
    base = u.base
    return base.op is Ops.BUFFER or is_kernel_store(base)


def _detached_view(u: UOp) -> bool:
    # a view of storage through detaches (`x.detach()[1:]`, as PyTorch's detach a view of x): nothing to compute, and
    # a buffer of its own would stop showing x's writes
    node = u.base
    if node.op is not Ops.DETACH:
        return False
    while node.op is Ops.DETACH:
        node = node.src[0].base
    return is_realized_view(node)


# ---------------------------------------------------------------------------------------------------------------------
# which values realize


@dataclass
class GrouperContext:
    realize: dict[UOp, None] = field(default_factory=dict)
    children: dict[UOp, list[UOp]] = field(default_factory=dict)
    has_reduce: dict[UOp, bool] = field(default_factory=dict)
    # broadcasts of a row reduce left fused into their consumer (checked once the kernels are known)
    row_reduces: list[UOp] = field(default_factory=list)
    # each node's place in the graph, sources first
    order: dict[UOp, int] = field(default_factory=dict)
    # the most multiply-adds (source elements) of a reduce a node's region up to its reduces may still hold, for
    # `_padded_reduces`: from the graph alone at first, then what a walk found (realizing more only makes regions
    # smaller)
    padded_reduce_bound: dict[UOp, int] = field(default_factory=dict)
    # whether a node is storage, by `_stops_region` (fixed per node; asked about each node once per region it is in)
    storage: dict[UOp, bool] = field(default_factory=dict)
    # the graph's nodes up to stored kernels, sources first (`choose_realized`'s walk, `kernelize_graph` needs it too)
    topo: list[UOp] = field(default_factory=list)


# (a module constant: on Python 3.11 every `Ops.X` is a slow lookup, and `_region` tests every source it walks)
_BUFFER = Ops.BUFFER


def _stops_region(ctx: GrouperContext, u: UOp) -> bool:
    # the fused region of a kernel ends at realized values and at existing storage
    if u in ctx.realize:
        return True
    storage = ctx.storage.get(u)
    if storage is None:
        storage = ctx.storage[u] = is_realized_view(u) or u.op in (Ops.BUFFER, Ops.DEVICE)
    return storage


def _region(ctx: GrouperContext, root: UOp) -> list[UOp]:
    """Nodes computed inside the kernel of `root` (stopping at realized values)."""
    seen: dict[UOp, None] = {}
    stack = [root]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen[u] = None
        # (a source seen already is not looked at again: regions are walked many times per schedule, and most of
        # their nodes are reached from several users)
        for s in u.src:
            if s not in seen and (not _stops_region(ctx, s) or s.op is _BUFFER):
                stack.append(s)
    return list(seen)


def choose_realized(sink: UOp) -> GrouperContext:
    """Walk the tensor graph in order and mark what must be stored in a buffer of its own.

    The rules look at values, which a DETACH doesn't change (every result computed under no_grad is one): they run on
    the graph without them (`schedule/without_detach.py`), and `realize` then holds the graph's own nodes that carry
    their choices out, with every node the graph itself requires (`_required`); the other fields are the plain ones."""
    topo = list(sink.toposort(gate=lambda u: not is_kernel_store(u)))
    plain = without_detaches(topo)
    if plain is None:
        ctx = _choose_realized(sink, topo)
    else:
        ctx = _choose_realized(plain[sink], list(plain[sink].toposort(gate=lambda u: not is_kernel_store(u))))
        ctx.realize = stored_originals(ctx.realize, topo, plain, _required(sink, topo))
    ctx.topo = topo
    return ctx


def _required(sink: UOp, topo: list[UOp]) -> dict[UOp, None]:
    # what is stored whatever the other rules choose: the outputs, and the nodes that are stores by their op
    required = dict.fromkeys(_asked(sink))
    for u in topo:
        required.update(dict.fromkeys(_stored_by_op(u)))
    return required


def _asked(sink: UOp) -> list[UOp]:
    # what the user asked for (a view of storage is there already)
    asked: list[UOp] = []
    for out in sink.src:
        if is_realized_view(out) or _detached_view(out):
            continue
        chain_only_reshape = all(n.op is Ops.RESHAPE for n in out.movement_chain())
        if out.base.op is Ops.CONST or (not chain_only_reshape and out.base.op is Ops.DEVICE):
            asked.append(out)
        else:
            asked.append(out.base)
    return asked


def _stored_by_op(u: UOp) -> list[UOp]:
    # an assign, a contiguous and a copy are stores; a copy moves a whole buffer: its source must be one, in order
    if u.op not in (Ops.STORE, Ops.CONTIGUOUS, Ops.COPY) or is_kernel_store(u):
        return []
    if u.op is not Ops.COPY or _is_plain_buffer_view(u.src[0]):
        return [u]
    src = u.src[0]
    return [u, src if not all(n.op is Ops.RESHAPE for n in src.movement_chain()) else src.base]


def _choose_realized(sink: UOp, topo: list[UOp]) -> GrouperContext:
    ctx = GrouperContext()
    for i, u in enumerate(topo):
        ctx.order[u] = i
        for s in u.src:
            ctx.children.setdefault(s, []).append(u)
        ctx.padded_reduce_bound[u] = _padded_reduce_bound(ctx, u)
    ctx.realize.update(dict.fromkeys(_asked(sink)))
    for u in topo:
        ctx.realize.update(dict.fromkeys(_stored_by_op(u)))
        if u.op is Ops.EXPAND and (pads := [n for n in u.src[0].movement_chain() if n.op is Ops.PAD]):
            # windows over a padded value (a convolution's or a pool's input) would read it through a bounds check
            # per element and window tap, which keeps the C compiler's vectors off: store the padded value once
            ctx.realize[pads[-1]] = None
            # and a large reduce it is computed from (a convolution's output, in the transposed convolution of its
            # input's gradient): inside the pad's kernel it would run once per padded element under the bounds check,
            # out of any register tile (a 16x32x32x32 conv: 165 ms there, 3 ms stored)
            for n in _region(ctx, pads[-1].src[0]):
                if n.op is Ops.REDUCE_AXIS and not _stops_region(ctx, n) and n.src[0].size >= MIN_STORED_INNER_REDUCE:
                    ctx.realize[n] = None
        if u.op is Ops.EXPAND and _windows_over_padded_pieces(ctx, u):
            # windows over a value assembled from padded pieces (a reflect, replicate or circular pad is a cat of
            # slices; a pad with a nonzero value, a select) would compute every piece under its bounds check per
            # element and window tap (a depthwise 21-tap blur of a reflect-padded 2x3x512x512 image: one kernel that
            # took 5 s to compile and ran 3x slower than over a stored copy): stored once, as a zero-padded input is
            ctx.realize[u.src[0].base] = None
        if u.op is Ops.PAD and not _read_in_windows(ctx, u):
            # a reduce read through a pad (a cat of matmuls: the gradient of a q, k, v projection split in three) runs
            # in the pad's kernel for every padded element, its loop under the bounds check and out of any register
            # tile, and each piece of a cat is a pad over the whole: stored by a kernel of its own when it is large,
            # counted over the padded elements it would run for (a stack of 300 small forward passes, MC dropout's
            # samples, ran every pass's last matmul for each of the 300 rows: 2.2 s, 0.13 s stored).
            # (A pad read in windows, a convolution's input, is stored itself: see the EXPAND rule below)
            for n in _padded_reduces(ctx, u.src[0], -(-MIN_STORED_PADDED_REDUCE * u.src[0].size // max(u.size, 1))):
                if not _stops_region(ctx, n):
                    ctx.realize[_value_to_store(ctx, n)] = None
        if u.op is Ops.EXPAND and _large_expanded_value(ctx, u):
            # a value of many fused operations broadcast into another kernel's loops (an operand of a matmul: an
            # LSTM's gate gradients, read by its weight gradients and its input gradient) would be computed once per
            # broadcast element, each time from scratch: stored once. (A 2-layer LSTM's weight gradient recomputed
            # its 370-operation gate gradients 64 times per element: 80 ms a kernel, 7 MB of C, 11 s in gcc)
            ctx.realize[u.src[0].base] = None
        if u.op is Ops.EXPAND and _region_has_reduce(ctx, u.src[0]) and not indexes_gathers(ctx, u):
            if _row_reduces(ctx, u) and fuses_row_reduces(u.device):
                # a reduce over trailing axes broadcast back along them (softmax's max and sum, a norm's mean): the
                # consumer can compute it once per row in a loop of its own, while the row is in cache
                ctx.row_reduces.append(u)
            else:
                # recomputing a reduce for every expanded element would multiply its cost: store it once
                ctx.realize[u.src[0].base] = None
        if u.op is Ops.REDUCE_AXIS:
            # a reduce over values that are themselves reduces read more than once (softmax over a matmul,
            # attention's scores: its max, its sum and its output would each recompute every score; softmax's
            # backward: the sum of p * dp over a row and dp itself, dp a matmul; none of them in a register tile):
            # those are stored once. Other reduces of reduces (a max pool over a convolution) stay fused
            for inner in _reused_inner_reduces(ctx, u):
                # (a small one costs less computed again than stored by a kernel of its own)
                if inner.src[0].size >= MIN_STORED_INNER_REDUCE:
                    ctx.realize[_value_to_store(ctx, inner)] = None
            inner = u.src[0].base
            if inner.op is Ops.REDUCE_AXIS and inner not in ctx.realize:
                ctx.realize[inner] = None
            for inner in _folded_inner_reduces(ctx, u):
                ctx.realize[inner] = None
            if len(set(ctx.children.get(u, []))) > 1:
                # shared by several consumers: compute once
                ctx.realize[u] = None
        if u.op is Ops.STORE and not is_kernel_store(u):
            _check_store_hazard(ctx, u)
    realize_deep_shared_values(ctx, topo, _stops_region)
    _realize_values_of_crowded_kernels(ctx, topo)
    _realize_shared_reduces(ctx, topo)
    while _realize_misplaced_row_reduces(ctx):
        _realize_shared_reduces(ctx, topo)
    if _realize_combined_reduces(ctx):
        _realize_shared_reduces(ctx, topo)
    if _realize_lone_scatters(ctx, topo):
        _realize_shared_reduces(ctx, topo)
    if _realize_pieces_of_oversized_kernels(ctx):
        _realize_shared_reduces(ctx, topo)
    if _realize_values_read_in_many_views(ctx, topo):
        _realize_shared_reduces(ctx, topo)
    return ctx


_PASSTHROUGH = (Ops.DETACH, Ops.CAST)
# a reduce read by another reduce is stored from this many multiply-adds (elements of its source) up
MIN_STORED_INNER_REDUCE = 1 << 20
# a reduce read through a pad is stored from this many multiply-adds up, times the pad's growth (what it would run in
# the pad's kernel; smaller ones cost less than a launch)
MIN_STORED_PADDED_REDUCE = 1 << 15
# a value broadcast into another kernel's loops (`_large_expanded_value`) is stored past this many fused nodes
MAX_EXPANDED_REGION_NODES = 64
# (how far `_large_expanded_value` walks a region)
MAX_EXPANDED_WALK = 2048


def _large_expanded_value(ctx: GrouperContext, expand: UOp) -> bool:
    # whether `expand` broadcasts a computed value whose fused region holds more than MAX_EXPANDED_REGION_NODES nodes
    # and no reduce (a reduce broadcast back is the next rule's: stored, or fused once per row)
    base = expand.src[0].base
    if base.op not in GroupOp.Elementwise or _stops_region(ctx, base) or expand.size <= base.size:
        return False
    seen: set[UOp] = set()
    stack = [base]
    while stack:
        u = stack.pop()
        if u in seen or _stops_region(ctx, u):
            continue
        if u.op is Ops.REDUCE_AXIS or len(seen) >= MAX_EXPANDED_WALK:
            # (a region past MAX_EXPANDED_WALK nodes is left to `_realize_pieces_of_oversized_kernels`)
            return False
        seen.add(u)
        stack.extend(u.src)
    return len(seen) > MAX_EXPANDED_REGION_NODES


# a kernel computes at most this many reduces (each in loops of its own); past it, values are stored until it fits
MAX_KERNEL_REDUCES = 16
_NO_REDUCES: frozenset[UOp] = frozenset()


def _realize_values_of_crowded_kernels(ctx: GrouperContext, topo: list[UOp]) -> None:
    """Store values so that no kernel computes more than MAX_KERNEL_REDUCES reduces.

    An eval loop that sums a metric per batch into a tensor (`correct += (out.argmax(1) == y).sum()`, read once after
    the loop) is one value over every batch's reduces: one kernel of N reduce loops, and the checks of its fused row
    reduces and the linearizer's per-loop work each cost N**2 (200 batches: 62 s to the first result). Walked in
    order, each node gets the set of reduces its fused computation holds; where one would pass the bound, the sources
    holding the most are stored (the running sum: each kernel adds a few batches to the sum the last one stored), so
    kernels stay short, alike (compiled once) and the total linear. The bound only ever tightens: the rules after this
    one store more values, which leaves every kernel fewer reduces."""
    held: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
        if is_realized_view(u) or u.op in (Ops.BUFFER, Ops.DEVICE):
            held[u] = _NO_REDUCES
            continue
        srcs = [s for s in dict.fromkeys(u.src) if held.get(s)]
        own = frozenset((u,)) if u.op is Ops.REDUCE_AXIS else _NO_REDUCES
        reduces = _union_of([held[s] for s in srcs], own)
        while len(reduces) > MAX_KERNEL_REDUCES and srcs:
            largest = max(srcs, key=lambda s: len(held[s]))
            # (a view of a value stores the value: its buffer read through the view)
            ctx.realize[largest.base] = None
            held[largest] = held[largest.base] = _NO_REDUCES
            srcs.remove(largest)
            reduces = _union_of([held[s] for s in srcs], own)
        held[u] = _NO_REDUCES if u in ctx.realize else reduces


def _union_of(sets: list[frozenset[UOp]], start: frozenset[UOp]) -> frozenset[UOp]:
    # most nodes carry one source's set on unchanged: shared, not copied, so the walk stays linear in the graph
    out = start
    for s in sets:
        if s is out or s <= out:
            continue
        out = s if out <= s else out | s
    return out


# a kernel whose fused region holds more nodes than this stores the pieces it pads (a cat's) until it fits
MAX_KERNEL_NODES = 512
# (a piece smaller than this is left fused)
MIN_STORED_PIECE_NODES = 16


def _realize_pieces_of_oversized_kernels(ctx: GrouperContext) -> bool:
    """Store the padded pieces (a cat's, largest first) of a kernel whose region holds more than MAX_KERNEL_NODES
    nodes, until it fits. A recurrent layer's input gradient is a cat over the time steps of each step's gate
    gradients: fused, one kernel of 20 branches of a cell's backward formulas each (a 2-layer bidirectional LSTM over
    20 steps: 3,700 nodes, 235,000 lines of C that gcc didn't compile in 300 s). A kernel that reads more than
    MAX_KERNEL_BUFFERS buffers stores pieces too (`_store_pieces_reading_most`). The pieces stored are kernels of their
    own, checked in turn. Whether it stored any."""
    added = False
    checked: set[UOp] = set()
    while todo := [r for r in ctx.realize if r not in checked]:
        checked.update(todo)
        added |= _fit_kernels(ctx, todo)
    return added


def _fit_kernels(ctx: GrouperContext, roots: list[UOp]) -> bool:
    # `_realize_pieces_of_oversized_kernels` for these kernels
    added = False
    for root in roots:
        while len(region := _region(ctx, root)) > MAX_KERNEL_NODES:
            pads = (n.src[0].base for n in region if n.op is Ops.PAD)
            candidates = [p for p in pads if p.op is not Ops.CONST and not _stops_region(ctx, p)]
            # the largest piece that fits (a chain of 1000 pads: the largest overall peeled a few nodes a store, 591 s)
            bound = _tree_sizes(ctx, root)
            if fitting := [p for p in candidates if MIN_STORED_PIECE_NODES <= bound.get(p, 0) <= MAX_KERNEL_NODES]:
                largest = max(fitting, key=bound.__getitem__)
            else:
                pieces = {p: len(_region(ctx, p)) for p in dict.fromkeys(candidates)}
                largest = max(pieces, key=pieces.__getitem__, default=None)
                if largest is None or pieces[largest] < MIN_STORED_PIECE_NODES:
                    break
            ctx.realize[largest] = None
            added = True
        if sum(len(n.src) for n in region) > MAX_KERNEL_BUFFERS:
            added |= _store_pieces_reading_most(ctx, region)
    return added


def _tree_sizes(ctx: GrouperContext, root: UOp) -> dict[UOp, int]:
    """Each node of `root`'s region -> its region's nodes counted once per path (capped): at least the region's size."""
    size: dict[UOp, int] = {}
    stack = [(root, False)]
    while stack:
        u, sources_done = stack.pop()
        if u in size:
            continue
        inside = [s for s in u.src if not _stops_region(ctx, s) or s.op is _BUFFER]
        if sources_done or not inside:
            size[u] = min(1 + sum(size[s] for s in inside), 1 << 40)
        else:
            stack.extend([(u, True), *((s, False) for s in inside if s not in size)])
    return size


# a kernel reads at most this many buffers, each an argument of its launch, and launches take few: ctypes calls a C
# function with at most 1024 arguments, CUDA's fit in 4 KB, OpenCL guarantees 1 KB. Past it, pieces are stored first
MAX_KERNEL_BUFFERS = 128


def _store_pieces_reading_most(ctx: GrouperContext, region: list[UOp]) -> bool:
    """Store values of a kernel's `region` until no kernel reads more than MAX_KERNEL_BUFFERS buffers: walked in order,
    each node gets the set of buffers its fused computation reads; where one would pass the bound, the sources reading
    the most are stored. A sum of many stored values (a running sum over a loop's stored states; the gradients and
    Hessian of an SEIR model's rates fitted through 60 days of RK4 steps read up to 1,363 buffers in one kernel, past
    what the CPU backend's call takes) is then cut into kernels of a bounded number of arguments each, the running sum
    passed on. Whether it stored any."""
    held: dict[UOp, frozenset[UOp]] = {}

    def stored(s: UOp) -> bool:
        # (a view of a value stored here reads its buffer)
        return _stops_region(ctx, s) or s.base in ctx.realize

    def reads(s: UOp) -> frozenset[UOp]:
        if s.op is Ops.DEVICE:
            return _NO_REDUCES
        return frozenset((s.base,)) if stored(s) else held.get(s, _NO_REDUCES)

    added = False
    for u in sorted(region, key=ctx.order.__getitem__):
        if u.op is Ops.BUFFER:
            continue
        srcs = list(dict.fromkeys(u.src))
        read = _union_of([reads(s) for s in srcs], _NO_REDUCES)
        while len(read) > MAX_KERNEL_BUFFERS:
            computed = [s for s in srcs if not stored(s) and len(held.get(s, _NO_REDUCES)) > 1]
            if not computed:
                break
            largest = max(computed, key=lambda s: len(held[s]))
            ctx.realize[largest.base] = None
            added = True
            read = _union_of([reads(s) for s in srcs], _NO_REDUCES)
        held[u] = read
    return added


# a computed value a kernel reads through this many different views (shifted, sliced, padded) or more is stored
MAX_FUSED_VIEWS = 8
# (unless it is this few ops: computed again per view costs less than a kernel and a store)
MIN_STORED_VIEWED_NODES = 4


def _realize_values_read_in_many_views(ctx: GrouperContext, topo: list[UOp]) -> bool:
    """Store a computed value that its kernel reads through MAX_FUSED_VIEWS different views or more. A kernel computes
    a fused value once per view it is read through (the view changes its index), and a value computed from views of
    an earlier one multiplies them: a stencil loop `u = u + a * (u.roll(1, 0) + u.roll(-1, 0) + ... - 4 * u)` reads
    each step's u through 9 views (a roll is two), so N steps fused are 9**N copies of the first (5 steps: 42 s of
    code generation, 10: a rewrite that never ends); RK4 over a state read as x[0], x[1], x[2] likewise. Walked from
    each kernel's root to its sources, each node gets the set of views it is read through (a movement op makes a new
    one of each of its consumer's); a value reaching MAX_FUSED_VIEWS is stored and read as a buffer by them. Whether
    it stored any."""
    order = {u: i for i, u in enumerate(topo)}
    added = False
    work = list(ctx.realize)
    while work:
        root = work.pop()
        region = sorted(_region(ctx, root), key=lambda u: -order.get(u, -1))
        views: dict[UOp, set[int]] = {root: {0}}
        for n in region:
            seen = views.get(n)
            if seen is None:
                continue
            if n is not root and len(seen) >= MAX_FUSED_VIEWS and _worth_storing_per_view(ctx, n):
                ctx.realize[n] = None
                work.append(n)
                added = True
                continue
            for src in n.src:
                if _stops_region(ctx, src):
                    continue
                into = views.setdefault(src, set())
                if len(into) >= MAX_FUSED_VIEWS:
                    continue
                if n.op in GroupOp.Movement and not reads_same_index(ctx, n):
                    # (a movement op reads its source at another index: a view of its own per view it is read through)
                    into.update(hash((n, v)) for v in seen)
                else:
                    into.update(seen)
    return added


def _worth_storing_per_view(ctx: GrouperContext, u: UOp) -> bool:
    # a value computed by a few ops (a ReLU of a load) costs less computed per view than stored; a view's movement
    # ops are no computation, and the view's base is what would be stored
    if u.op in GroupOp.Movement or u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return False
    count = 0
    stack, seen = [u], set()
    while stack and count < MIN_STORED_VIEWED_NODES:
        n = stack.pop()
        if n in seen or _stops_region(ctx, n):
            continue
        seen.add(n)
        count += n.op not in GroupOp.Movement
        stack.extend(n.src)
    return count >= MIN_STORED_VIEWED_NODES


def _read_in_windows(ctx: GrouperContext, u: UOp) -> bool:
    # whether u is read through movement ops that expand it (a convolution's or a pool's windows)
    stack = list(ctx.children.get(u, []))
    while stack:
        n = stack.pop()
        if n.op is Ops.EXPAND:
            return True
        if n.op in GroupOp.Movement:
            stack.extend(ctx.children.get(n, []))
    return False


def _windows_over_padded_pieces(ctx: GrouperContext, expand: UOp) -> bool:
    # whether `expand` is a pool's windows (`_pool1d`: the value repeated along a new axis, read flat with the axis it
    # repeats, so each element is read once per tap) over a computed value built from padded views of a value
    base = expand.src[0].base
    if base.op not in GroupOp.Elementwise or _stops_region(ctx, base):
        return False
    if not any(c.op is Ops.RESHAPE and len(c.shape) < len(expand.shape) for c in ctx.children.get(expand, [])):
        return False
    # (a piece is a padded view, of a buffer or of a value computed in the region; a padded constant is a mask)
    reads = {s for n in _region_to_reduces(ctx, base) for s in n.src}
    return any(s.base.op is not Ops.CONST and any(m.op is Ops.PAD for m in s.movement_chain()) for s in reads)


def _padded_reduce_bound(ctx: GrouperContext, u: UOp) -> int:
    # (sources first: theirs are known)
    if u.op is Ops.EXPAND:
        return 0
    if u.op is Ops.REDUCE_AXIS:
        return u.src[0].size
    return max((ctx.padded_reduce_bound.get(s, sys.maxsize) for s in u.src), default=0)


def _padded_reduces(ctx: GrouperContext, root: UOp, least: int) -> list[UOp]:
    """The reduces of `_region_to_reduces(ctx, root)` of `least` multiply-adds (source elements) or more: those to
    store when read through a pad. Every piece of a cat is a pad over the whole value, and each piece's walk would cover
    the whole fused region: a loop of steps whose right-hand side is a cat (RK4 over a stacked state) walked it once per
    piece, quadratic in the steps (200 steps of a Lorenz system: 65 s to the first result, 3 s now). A node whose region
    holds none that large (`padded_reduce_bound`) is not walked, and a walk lowers the bound of each node it walks to
    the largest reduce it found under it: realized values only ever cut regions shorter."""
    found: dict[UOp, None] = {}
    largest: dict[UOp, int] = {}
    # (a node is pushed again, `done`, once its sources are walked: then the largest reduce any of them reached)
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        if done:
            largest[n] = ctx.padded_reduce_bound[n] = max((largest[s] for s in n.src), default=0)
            continue
        if n in largest:
            continue
        if n.op is Ops.EXPAND or _stops_region(ctx, n):
            largest[n] = 0
        elif (bound := ctx.padded_reduce_bound.get(n, sys.maxsize)) < least:
            largest[n] = bound
        elif n.op is Ops.REDUCE_AXIS:
            largest[n] = n.src[0].size
            found[n] = None
        else:
            stack.append((n, True))
            stack.extend((s, False) for s in n.src)
    return list(found)


def _region_to_reduces(ctx: GrouperContext, root: UOp, root_stops: bool = True) -> set[UOp]:
    """The nodes computed with `root` up to the reduces it reads (those included, not their sources), not through an
    EXPAND (a reduce broadcast back is fused once per row) nor past realized values (`root_stops`: `root` itself
    may be one: its own kernel's region)."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen or n.op is Ops.EXPAND or ((root_stops or n is not root) and _stops_region(ctx, n)):
            continue
        seen.add(n)
        if n.op is not Ops.REDUCE_AXIS:
            stack.extend(n.src)
    return seen


def _realize_combined_reduces(ctx: GrouperContext) -> bool:
    """A kernel whose value combines several large reduces elementwise (an input's gradient summed over the paths
    that read it: q, k and v projected from one x give dq @ Wq.T + dk @ Wk.T + dv @ Wv.T) computes each in loops of
    its own, one scalar accumulator each, and only the kernel's own reduce gets a register tile: the others are
    stored by kernels of their own. Reduces broadcast back into the kernel (softmax's, a norm's) are not counted:
    computed once per row, they are meant to be fused. (After the shared values are stored: one of them may be the
    second reduce.) Whether it stored any."""
    added = False
    for root in list(ctx.realize):
        region = _region_to_reduces(ctx, root, root_stops=False)
        # (a gather folds into a load: no loops of its own)
        large = [
            r
            for r in region
            if r.op is Ops.REDUCE_AXIS and r.src[0].size >= MIN_STORED_INNER_REDUCE and not is_one_hot_reduce(r)
        ]
        if len(large) >= 2:
            for r in large:
                if r is not root.base:
                    ctx.realize[r] = None
                    added = True
    return added


def _realize_lone_scatters(ctx: GrouperContext, topo: list[UOp]) -> bool:
    """On a device that runs a scatter as its writes (`runs_scatters_in_order`), a large scatter (a one-hot sum over
    an output axis) gets a kernel with no other reduce: only alone is it its writes, one by one
    (`uopkit.codegen.scatter`); with a reduce around it (index_add(...).sum(), a gradient's norm), beside it (a
    gather's gradient plus a matmul's, under a ReLU's mask) or inside it, it would be its compares, targets x
    writes. Whether it stored any."""
    added = False
    for u in topo:
        if u.op is not Ops.REDUCE_AXIS or not _is_large_scatter(u) or not runs_scatters_in_order(u.device):
            continue
        for n in _region_to_reduces(ctx, u.src[0]):
            if n.op is Ops.REDUCE_AXIS and n not in ctx.realize:
                ctx.realize[n] = None
                added = True
        if u in ctx.realize:
            continue
        for root in list(ctx.realize):
            region = _region_to_reduces(ctx, root, root_stops=False)
            others = [n for n in region if n.op is Ops.REDUCE_AXIS and n is not u]
            beside = u in region and others
            around = any(u in _region_to_reduces(ctx, r.src[0]) for r in others)
            if beside or around:
                ctx.realize[u] = None
                added = True
                break
    return added


def _is_large_scatter(red: UOp) -> bool:
    # a one-hot sum whose iota moves along an output axis, not along the reduced one (a gather's): a scatter over that
    # output axis. Small ones cost less than a kernel of their own
    if not is_one_hot_reduce(red) or red.src[0].size < MIN_STORED_INNER_REDUCE:
        return False
    # (under no_grad the select is in a DETACH, which keeps its shape)
    sel = red.src[0].src[0] if red.src[0].op is Ops.DETACH else red.src[0]
    axes = _iota_axes(sel)
    return bool(axes) and red.arg[1][0] not in axes


def _iota_axes(src: UOp) -> set[int]:
    """The axes of `src` (a one-hot reduce's source, where(cond, x, 0)) along which the iota its condition reads
    moves: its view followed down to the IOTA with a loop counter per axis (the lowerer's index arithmetic)."""
    shape = src.shape
    assert shape is not None
    with index_dtype(dtypes.int64):
        counters = tuple(
            UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, max(size, 1)),), (k, "loop"))
            for k, size in enumerate(shape)
        )
        # only down to the iota: the nodes it is read through (a sorted index's graph beside it is deep and wide)
        reaching: set[UOp] = set()
        for n in src.src[0].toposort():
            if n.op is Ops.IOTA or any(s in reaching for s in n.src):
                reaching.add(n)
        found: set[int] = set()
        seen: set[tuple[UOp, tuple[UOp, ...]]] = set()
        stack = [(src.src[0], counters)]
        while stack:
            node, idx = stack.pop()
            if node not in reaching or (node, idx) in seen:
                continue
            seen.add((node, idx))
            if node.op is Ops.IOTA:
                position = simplify(idx[0])
                found |= {counters.index(r) for r in position.toposort() if r.op is Ops.RANGE and r in counters}
            elif node.op is Ops.PAD:
                stack.append((node.src[0], pad_index(node, idx)[0]))
            elif node.op in GroupOp.Movement:
                stack.append((node.src[0], move_index(node, idx)))
            elif node.op in GroupOp.Elementwise or node.op is Ops.DETACH:
                stack.extend((s, idx) for s in node.src)
        return found


def fuses_row_reduces(device: str) -> bool:
    """Whether a row reduce broadcast back along its row (softmax, norms) is computed inside its consumer kernel.

    On a CPU-style renderer the consumer loops over a row after computing its reduce, once per row, while the row
    is in cache. On a GPU-style one (work-groups, ``caps.has_local``) every output element is a work-item of its
    own and would compute the whole row's reduce again: the reduce is stored by a kernel of its own instead, where
    the optimizer splits it across a work-group (OptOps.GROUP)."""
    return _cpu_style(device)


def runs_scatters_in_order(device: str) -> bool:
    """Whether `device` runs a kernel that is a one-hot sum over an output axis as its writes, one by one, in order
    (a CPU-style renderer: `uopkit.codegen.scatter`), so a scatter costs its writes plus its targets at any size."""
    return _cpu_style(device)


def _cpu_style(device: str) -> bool:
    # a renderer without work-groups: loops run in order, one element at a time
    from uopkit.device import Device

    try:
        return not Device[device].renderer.caps.has_local
    except Exception:  # noqa: BLE001 - a device that can't open here runs nothing: keep the CPU-style fusion
        return True


def _row_reduces(ctx: GrouperContext, expand: UOp) -> list[UOp]:
    """The reduces whose result (through elementwise ops) `expand` broadcasts back along exactly the trailing axes
    they reduced, if that is all it broadcasts (else [])."""
    shape, small = expand.shape, expand.src[0].shape
    assert shape is not None and small is not None
    broadcast = {i for i, (a, b) in enumerate(zip(small, shape, strict=True)) if a != b}
    found: list[UOp] = []
    seen: set[UOp] = set()
    stack = [expand.src[0]]
    while stack:
        n = stack.pop()
        if n in seen or n in ctx.realize or is_realized_view(n) or n.base.op is Ops.CONST:
            continue
        seen.add(n)
        if n.op is Ops.REDUCE_AXIS:
            axes = set(n.arg[1])
            if n.src[0].shape != shape or n.shape != small or not axes or not broadcast <= axes:
                return []
            if axes != set(range(min(axes), len(shape))):
                return []
            found.append(n)
        elif n.op in GroupOp.Elementwise or n.op in _PASSTHROUGH:
            stack.extend(n.src)
        else:
            return []
    return found


def _realize_misplaced_row_reduces(ctx: GrouperContext) -> bool:
    """A fused row reduce is computed once per row only if its kernel loops over its shape in order, with the row's
    axes innermost: every op between the broadcast and the kernel's output is elementwise on that shape, and the
    output is that shape or a reduce over (some of) the row's axes. Elsewhere it is stored in a buffer of its own.

    All of them in one pass, each checked against the kernels as the ones before it left them. Whether it stored any:
    the caller then stores the shared reduces those made and checks again (a new kernel may fuse a row reduce checked
    before it), a few passes whatever the number of norms, where one pass per stored norm, each walking every kernel,
    made a loop of N norm steps schedule in time N**2."""
    added = False
    for e in ctx.row_reduces:
        value = e.src[0].base
        if value in ctx.realize:
            continue
        reduces = _row_reduces(ctx, e)
        row_axes = set.intersection(*(set(r.arg[1]) for r in reduces)) if reduces else set()
        for root in _kernels_reading(ctx, e):
            if not _loops_in_row_order(ctx, _region(ctx, root), root, e, row_axes):
                ctx.realize[value] = None
                added = True
                break
    return added


def _kernels_reading(ctx: GrouperContext, u: UOp) -> list[UOp]:
    """The realized values whose kernels compute `u` (up through its users to the first realized ones)."""
    roots: list[UOp] = []
    seen: set[UOp] = set()
    stack = [u]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in ctx.realize:
            roots.append(n)
        else:
            stack.extend(ctx.children.get(n, []))
    return roots


def _loops_in_row_order(ctx: GrouperContext, region: list[UOp], root: UOp, e: UOp, row_axes: set[int]) -> bool:
    inside = set(region)
    above: set[UOp] = {e}
    for n in root.toposort(gate=lambda x: x in inside):
        if n is e or not any(s in above for s in n.src):
            continue
        above.add(n)
        if n.op is Ops.REDUCE_AXIS:
            # the root's reduce, or another fused row reduce: over the row, so its loop is inside the row's
            ok = set(n.arg[1]) <= row_axes and n.src[0].shape == e.shape
        elif n.op is Ops.EXPAND:
            ok = n in ctx.row_reduces and n.shape == e.shape
        else:
            ok = n.op in GroupOp.Elementwise or n.op in _PASSTHROUGH
        if not ok:
            return False
    return root in above


def _realize_shared_reduces(ctx: GrouperContext, topo: list[UOp]) -> None:
    # a value with a reduce in it that several kernels would each compute (a matmul's output read by the next layer
    # and by the backward pass, logits read by a max and a sum): compute it once, in a kernel of its own
    for _ in range(4):
        kernels_using: dict[UOp, set[UOp]] = {}
        for root in list(ctx.realize):
            for n in _region(ctx, root):
                kernels_using.setdefault(n, set()).add(root)
        inner_reduce: dict[UOp, bool] = {}
        # nodes now computed in the kernel of a value stored in this pass: the kernels that read them are no longer
        # those counted above (a tanh stored whole once, each node of its formula was stored too, its shared count
        # stale), so they wait for the next pass's count
        claimed: set[UOp] = set()
        added = False
        for u in topo:
            inner_reduce[u] = u.op is Ops.REDUCE_AXIS or any(
                inner_reduce.get(s, False) and s not in ctx.realize for s in u.src
            )
            if u in ctx.realize or not inner_reduce[u] or len(kernels_using.get(u, ())) < 2:
                continue
            if u.op in (Ops.STORE, Ops.SINK, Ops.BUFFER, Ops.DEVICE) or is_kernel_store(u):
                continue
            if u in claimed:
                added = True
                continue
            stored = _value_to_store(ctx, u.base if u.op in GroupOp.Movement else u)
            ctx.realize[stored] = None
            claimed.update(_region(ctx, stored))
            added = True
        if not added:
            return


def _value_to_store(ctx: GrouperContext, u: UOp) -> UOp:
    """What to store so that value `u` (a reduce several kernels would compute) is computed once: `u`, or the furthest
    value that every use of it goes through, elementwise (a convolution's output plus its bias, scaled and added to a
    residual, which a norm's reduces, its output and the next residual each read; a sampler's model output read twice
    by the step's update). Stored there, the kernels that share it read one buffer instead of each computing the rest
    again, and the kernel that stores it is the one a loop of such steps gets each step (`x = x + f(x)`: stored at the
    reduce, x_k would be recomputed from x_0 in every kernel of step k, one more add per step). Not through an op that
    brings in another reduce (that one is shared on its own: `_realize_combined_reduces`) nor one that changes the
    shape; at most MAX_STORE_WALK nodes up."""
    best = u
    # the readers the paths from `u` have reached and not passed yet (their places in the graph, `ctx.order`, tell
    # the next to pass: all its sources come before it); when one node is all that is left, every use goes through it
    pending: dict[UOp, None] = dict.fromkeys(ctx.children.get(u, []))
    passed: set[UOp] = {u}
    for _ in range(MAX_STORE_WALK):
        if not pending:
            break
        node = min(pending, key=ctx.order.__getitem__)
        if node in ctx.realize:
            return node if len(pending) == 1 else best.base
        if not _stores_with(ctx, node, passed):
            break
        if len(pending) == 1:
            best = node
        del pending[node]
        passed.add(node)
        pending.update(dict.fromkeys(ctx.children.get(node, [])))
    # (a reshape of a stored value is a view of its buffer)
    return best.base


# how many nodes `_value_to_store` looks at past a reduce
MAX_STORE_WALK = 64


def _stores_with(ctx: GrouperContext, node: UOp, passed: set[UOp]) -> bool:
    # whether `node` can be computed in the kernel of a stored value it reads (through the nodes `passed`): elementwise
    # on its shape, with no other reduce of its own
    if not (node.op in GroupOp.Elementwise or node.op in _PASSTHROUGH or node.op is Ops.RESHAPE):
        return False
    return not any(s not in passed and not _stops_region(ctx, s) and _region_has_reduce(ctx, s) for s in node.src)


def _is_plain_buffer_view(u: UOp) -> bool:
    return all(n.op is Ops.RESHAPE for n in u.movement_chain()) and is_realized_view(u)


def _broadcast_back(ctx: GrouperContext, u: UOp) -> bool:
    """Whether reduce `u` is broadcast back (an EXPAND of it, through reshapes and one-input ops), as a softmax's max
    and the reciprocal of its sum are."""
    reduced = set(u.arg[1])
    frontier = list(ctx.children.get(u, []))
    while frontier:
        n = frontier.pop()
        if n.op is Ops.EXPAND and n.src[0].shape == u.shape:
            # along the reduced axes only (a matmul's broadcast of its input over new axes is not one)
            if {a for a, (x, y) in enumerate(zip(u.shape, n.shape, strict=True)) if x != y} <= reduced:
                return True
        if n.op in (Ops.DETACH, Ops.CAST) or n.op in GroupOp.Unary:
            frontier.extend(ctx.children.get(n, []))
    return False


def _reused_inner_reduces(ctx: GrouperContext, red: UOp) -> list[UOp]:
    """The reduces in the fused region of reduce `red`'s source (not through an EXPAND: a row's own reduce broadcast
    back is fused once per row) that an op outside the region reads too, itself or through a node on its way to
    `red`: computed again there (softmax over attention's scores: its max, its sum and its output; softmax's backward:
    the sum of p * dp over a row, and dp again after it). Reads inside the region (relu of a conv under a max pool
    reads the conv twice) compute it once."""

    # (`red` itself reads its source: not an outside read)
    region = _region_to_reduces(ctx, red.src[0]) | {red}
    found: list[UOp] = []
    done: set[UOp] = set()
    stack = [(red.src[0], False)]
    if is_one_hot_reduce(red):
        # a gather folds into a load: its index is computed once per gathered element, as outside (only what it
        # picks from would be read again)
        sel = red.src[0].src[0] if red.src[0].op is Ops.DETACH else red.src[0]
        stack = [(s, False) for s in sel.src[1:]]
    while stack:
        n, shared = stack.pop()
        if n in done or n not in region:
            continue
        done.add(n)
        # (a read as the index of a gather in the region is computed with it: folded, the gather is a load there)
        outside = [c for c in ctx.children.get(n, []) if c not in region]
        shared = shared or any(not indexes_gathers_in(ctx, c, region) for c in outside)
        if n.op is Ops.REDUCE_AXIS:
            if shared:
                found.append(n)
            continue
        stack.extend((s, shared) for s in n.src)
    return found


# an inner reduce that an outer one folds this many of its outputs into each of its own is stored (from
# MIN_STORED_PADDED_REDUCE multiply-adds up)
MIN_FOLDED_OUTPUTS = 16


def _folded_inner_reduces(ctx: GrouperContext, red: UOp) -> list[UOp]:
    """The large reduces in the fused region of reduce `red` whose outputs it sums down by MIN_FOLDED_OUTPUTS or more
    (a BatchNorm's mean over a convolution's positions, a global average pool). Fused, the inner reduce runs inside
    the outer one's loop, per output of the few the outer has: one thread, out of any register tile (a 8x8x16x16
    convolution's mean over (0, 2, 3): 0.5 ms fused, 0.03 ms stored). A small window (a max pool over a convolution)
    stays fused: it saves writing the convolution out. One-hot reduces (gathers) fold into loads: not stored."""
    if red.size * MIN_FOLDED_OUTPUTS > red.src[0].size:
        return []
    return [
        n
        for n in _region_to_reduces(ctx, red.src[0])
        if n.op is Ops.REDUCE_AXIS
        and n is not red
        and not _stops_region(ctx, n)
        and n.src[0].size >= MIN_STORED_PADDED_REDUCE
        and n.size >= MIN_FOLDED_OUTPUTS * red.size
        and not is_one_hot_reduce(n)
    ]


def _region_has_reduce(ctx: GrouperContext, u: UOp) -> bool:
    return any(n.op is Ops.REDUCE_AXIS for n in _region(ctx, u) if not _stops_region(ctx, n) or n is u)


def _check_store_hazard(ctx: GrouperContext, store: UOp) -> None:
    # a kernel that writes a buffer while reading it through another view would read values it already wrote
    target, value = store.src
    buf = target.base if target.base.op is Ops.BUFFER else target.base.buf_uop
    # every view of the buffer the value reads: the top of each movement chain (or a bare read of it)
    reads = [s for n in _region(ctx, value) if n.op not in GroupOp.Movement for s in n.src if _safe_buf(s) is buf]
    if (value.op in GroupOp.Movement or value.op is Ops.BUFFER) and _safe_buf(value) is buf:
        reads.append(value)
    if any(r is not target for r in reads):
        ctx.realize[value] = None


def _safe_buf(u: UOp) -> UOp | None:
    try:
        return u.buf_uop
    except RuntimeError:
        return None


# ---------------------------------------------------------------------------------------------------------------------
# value semantics: what other lazy values read from storage a STORE is about to overwrite


def pending_writes(sink: UOp) -> list[UOp]:
    """The BUFFERs that the STOREs under `sink` (assigns or kernels that have not run yet) will overwrite."""
    out: dict[UOp, None] = {}
    for u in sink.toposort(gate=lambda x: x.op is not Ops.BUFFER):
        if u.op is Ops.STORE:
            buf = _store_buffer(u)
            if buf is not None:
                out[buf] = None
    return list(out)


def _store_buffer(store: UOp) -> UOp | None:
    tbase = store.src[0].base
    return tbase if tbase.op is Ops.BUFFER else _safe_buf(tbase)


# (a module constant: on Python 3.11 every `Ops.X` is a lookup through EnumType's slow __getattr__ hook, and the walks
# below look at every node of every live tensor's graph)
_STORE = Ops.STORE


def stored_reads(roots: Sequence[UOp], targets: Sequence[UOp]) -> list[tuple[int, bool]]:
    """For each root: a bit mask of the `targets` its value is computed from (reads of the storage as it is now, not
    through a STORE), and whether it also reads a STORE (then it must run after that STORE, not before)."""
    bit = {b: 1 << i for i, b in enumerate(targets)}
    mask, after_store = read_masks(roots, lambda u: bit.get(u, 0))
    # a root that is itself a STORE (an assign not being run now) is left alone
    return [(mask.get(r, 0), after_store.get(r, True)) for r in roots]


def replace_reads(roots: Sequence[UOp], mapping: dict[UOp, UOp]) -> list[UOp]:
    """`roots` with the BUFFERs in `mapping` replaced; STOREs (and what they write) are kept as they are."""
    memo: dict[UOp, UOp] = dict(mapping)
    get = memo.get
    sink = UOp(Ops.SINK, src=tuple(roots))
    for u in sink.toposort(gate=lambda x: x.op is not Ops.STORE and x not in mapping):
        if u in memo:
            continue
        src = u.src
        new_src = tuple([get(s, s) for s in src])
        # (built directly, not with u.replace: the gradients of a training step are rebuilt here every step)
        memo[u] = u if new_src == src else UOp(u.op, u.dtype, new_src, u.arg)
    return [memo[r] for r in roots]


# ---------------------------------------------------------------------------------------------------------------------
# building kernels


@dataclass
class KernelBuilder:
    """Translates one realized value's region into a kernel AST over DEFINE_GLOBALs."""

    ctx: GrouperContext
    results: dict[UOp, UOp]
    out_buf: UOp
    inputs: dict[UOp, tuple[int, UOp]] = field(default_factory=dict)
    memo: dict[UOp, UOp] = field(default_factory=dict)

    def global_for(self, buf: UOp, dep: UOp) -> UOp:
        if buf is self.out_buf:
            return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.arg[2]), (), 0)
        if buf not in self.inputs:
            self.inputs[buf] = (len(self.inputs) + 1, dep)
        elif dep.op is Ops.STORE:
            # a STORE carries the ordering: prefer it over the raw buffer
            self.inputs[buf] = (self.inputs[buf][0], dep)
        return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.arg[2]), (), self.inputs[buf][0])

    def load(self, buf: UOp, dep: UOp) -> UOp:
        if buf.size == 0:
            # nothing to read (every access is padded away): no argument for it, which a backend might reject
            zero = UOp(Ops.CONST, buf.dtype, (), cast_scalar(0, buf.dtype))
            return UOp(Ops.EXPAND, buf.dtype, (UOp(Ops.RESHAPE, buf.dtype, (zero,), (1,)),), (0,))
        return UOp(Ops.LOAD, buf.dtype, (self.global_for(buf, dep),))

    def translate(self, u: UOp, root: UOp) -> UOp:
        # iterative post-order (graphs can be deeper than Python's stack): a node is translated once the nodes it
        # reads are, left to right as a recursive walk would, so inputs are numbered in the same order
        stack: list[tuple[UOp, bool]] = [(u, False)]
        while stack:
            node, ready = stack.pop()
            if node in self.memo:
                continue
            pending = [d for d in self._reads(node, root) if d not in self.memo]
            if pending and not ready:
                stack.append((node, True))
                stack.extend((d, False) for d in reversed(pending))
                continue
            self.memo[node] = self._translate(node, root)
        return self.memo[u]

    def _reads(self, u: UOp, root: UOp) -> tuple[UOp, ...]:
        # the nodes _translate translates first
        if u is not root and u in self.results:
            return (self.results[u],)
        if u.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.STORE):
            return ()
        if u.op in (Ops.DETACH, Ops.CONTIGUOUS):
            return u.src[:1]
        return u.src

    def _translate(self, u: UOp, root: UOp) -> UOp:
        if u is not root and u in self.results:
            # a value another kernel writes: read its buffer through the same view
            return self.translate(self.results[u], root)
        if u.op is Ops.BUFFER:
            return self.load(u, u)
        if is_kernel_store(u):
            target = u.src[0]
            buf = target.base if target.base.op is Ops.BUFFER else target.buf_uop
            loaded = self.load(buf, u)
            return _replay_chain(target.movement_chain(), loaded)
        if u.op in (Ops.CONST, Ops.IOTA):
            return launch_const(u) or UOp(u.op, u.dtype, (), u.arg)
        if u.op in (Ops.DETACH, Ops.CONTIGUOUS):
            return self.translate(u.src[0], root)
        if u.op is Ops.STORE:
            raise ScheduleError("a STORE must be realized in its own kernel")
        new = u.replace(src=tuple(self.translate(s, root) for s in u.src))
        if u.op is Ops.RESHAPE and new.src[0].op is Ops.RESHAPE:
            # a reshape of a reshape is one reshape: a slice of a buffer under several is still a window of it
            # (`schedule/windows.py` looks through one)
            inner = new.src[0].src[0]
            return inner if inner.shape == u.arg else new.replace(src=(inner,))
        if u.op is Ops.SHRINK and new.src[0].op is Ops.FLIP and _over_load(new.src[0].src[0]):
            # a slice of a flipped buffer is the flip of a slice of it: a window of the buffer (`table.flip(0)[t]`
            # reads one kernel for every t, its start a launch value)
            flip = new.src[0]
            inner = flip.src[0]
            bounds = mirror_bounds(u.arg, flip.arg, inner.shape or ())
            return flip.replace(src=(UOp(Ops.SHRINK, inner.dtype, (inner,), bounds),))
        if u.op in GroupOp.Movement and u.op is not Ops.PAD and (const := _uniform_const(new.src[0])) is not None:
            # a view of a constant is the constant in the view's shape: where a slice of it starts (the ones a
            # sum's gradient spreads, cut per time step of an RNN) would make kernels that differ in nothing else
            shape = new.shape
            assert shape is not None
            ones = UOp(Ops.RESHAPE, const.dtype, (const,), (1,) * len(shape))
            return ones if all(d == 1 for d in shape) else UOp(Ops.EXPAND, const.dtype, (ones,), shape)
        return new


def _over_load(u: UOp) -> bool:
    # a whole input buffer as a kernel reads it, or a reshape of one
    if u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op is Ops.LOAD and len(u.src) == 1 and u.src[0].op is Ops.DEFINE_GLOBAL


def _uniform_const(u: UOp) -> UOp | None:
    """The CONST every element of kernel value `u` is (a constant under movement ops other than PAD), else None."""
    while u.op in GroupOp.Movement and u.op is not Ops.PAD:
        u = u.src[0]
    return u if u.op is Ops.CONST and not u.src else None


def _replay_chain(chain: list[UOp], base: UOp) -> UOp:
    for n in reversed(chain):
        base = n.replace(src=(base,))
    return base


def kernelize_graph(sink: UOp) -> dict[UOp, UOp]:
    """Map each node of the tensor graph under `sink` to its kernelized form."""
    ctx = choose_realized(sink)
    results: dict[UOp, UOp] = {}
    # (the walk `choose_realized` made of the same graph: a walk less per schedule)
    topo = ctx.topo
    for r in topo:
        # (a BUFFER is storage already: a kernel copying it into itself would map it to a graph that holds it)
        if r not in ctx.realize or r.op is Ops.BUFFER:
            continue
        results[r] = _build_kernel(ctx, results, r)
    # every other node: the same op over the kernelized sources
    mapping: dict[UOp, UOp] = {}
    for u in topo:
        if u in results:
            mapping[u] = results[u]
        elif u.src:
            new_src = tuple(mapping.get(s, s) for s in u.src)
            mapping[u] = u if new_src == u.src else u.replace(src=new_src)
    return mapping


def _build_kernel(ctx: GrouperContext, results: dict[UOp, UOp], r: UOp) -> UOp:
    if r.size == 0:
        # nothing to compute or write: an empty value is an empty buffer, an empty assign leaves its target as it is
        if r.op is Ops.STORE:
            target = r.src[0]
            return (
                target if target.base.op is Ops.BUFFER else _replay_chain(target.movement_chain(), target.base.src[0])
            )
        shape = r.shape
        assert shape is not None
        return _reshape(UOp.new_buffer(r.device, 0, r.dtype), shape)
    if r.op is Ops.COPY:
        src = results.get(r.src[0].base, r.src[0].base) if r.src[0] not in results else results[r.src[0]]
        src_store = src.base
        src_buf = src_store.buf_uop
        out_buf = UOp.new_buffer(r.src[1].arg, src_buf.arg[2], r.dtype)
        ast = UOp(Ops.COPY, r.dtype, (), (src_buf.arg[1], r.src[1].arg))
        kernel = UOp(Ops.KERNEL, dtypes.void, (src_store,), ast)
        return _reshape(UOp(Ops.STORE, r.dtype, (out_buf, kernel)), r.shape)
    if r.op is Ops.STORE:
        target, value = r.src
        tbase = target.base
        out_buf = tbase if tbase.op is Ops.BUFFER else tbase.buf_uop
        builder = KernelBuilder(ctx, results, out_buf)
        deps: list[UOp] = [tbase] if is_kernel_store(tbase) else []
        out_view = _replay_chain(target.movement_chain(), builder.global_for(out_buf, out_buf))
        if tbase.op is not Ops.BUFFER:
            # the target's storage is written by an earlier kernel: view the buffer itself
            out_view = _replay_chain(
                target.movement_chain() + tbase.src[0].movement_chain(), builder.global_for(out_buf, out_buf)
            )
        ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_view, builder.translate(value, r))),))
        kernel = _make_kernel(builder, ast, deps)
        plain_target = target if tbase.op is Ops.BUFFER else _replay_chain(target.movement_chain(), tbase.src[0])
        return UOp(Ops.STORE, r.dtype, (plain_target, kernel))
    shape = r.shape
    assert shape is not None
    out_buf = UOp.new_buffer(r.device, r.size, r.dtype)
    builder = KernelBuilder(ctx, results, out_buf)
    value = builder.translate(r, r)
    out_view = _reshape(builder.global_for(out_buf, out_buf), shape)
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_view, value)),))
    kernel = _make_kernel(builder, ast, [])
    return _reshape(UOp(Ops.STORE, r.dtype, (out_buf, kernel)), shape)


def _make_kernel(builder: KernelBuilder, ast: UOp, extra_deps: list[UOp]) -> UOp:
    ordered = sorted(builder.inputs.values(), key=lambda x: x[0])
    srcs = tuple(dep for _, dep in ordered)
    # a kernel also waits for the kernel that produced the storage it writes into
    return UOp(Ops.KERNEL, dtypes.void, srcs + tuple(d for d in extra_deps if d not in srcs), ast)


def _reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
    return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)

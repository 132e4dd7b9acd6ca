"""Realize tensors: kernelize, schedule, compile each kernel once per (AST, device), run.

Two caches keep the Python cost of a realize low:
- `method_cache`: compiled kernels by (AST, device), so building the same graph again skips codegen;
- `schedule_cache`: whole schedules by the *shape* of the graph being realized, with every BUFFER replaced by a
  numbered placeholder. Realizing a graph of the same structure over other buffers (the next training step, the next
  `(a + 1).realize()`) replays the recorded kernels on the new buffers without kernelizing or scheduling again.
  Graphs with assigns (an optimizer step) are cached too: the lazy readers and copies that value semantics adds
  (`protect_pending_reads`, which looks at the live tensors outside the graph) are added first, and the entry of a
  graph structure (`CachedGraph`) keeps a schedule for each set of them it met, so a hit runs exactly what the
  uncached path would. The entry also keeps what the graph reads of the buffers it overwrites: its key is built and
  looked up once per realize.

Every kernel and copy runs through `ExecItem.run`, which is also where `TinyJit` captures them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopkit.codegen import ProgramSpec
from uopkit.device import Buffer, Compiled, CompileError, Device
from uopkit.dtype import DType, dtypes
from uopkit.engine import gc_threshold  # noqa: F401 - paces Python's collector on import
from uopkit.engine.codegen_cache import cached_program
from uopkit.engine.compile_queue import CompileQueue
from uopkit.engine.placement import first_run_buffers, held_by, share_buffers, share_buffers_apart
from uopkit.engine.realize_lock import realize_lock
from uopkit.engine.replay_templates import Template, built_from, template_of
from uopkit.engine.replay_windows import Moved, record_windows, window_values
from uopkit.helpers import DEBUG, ContextVar, GlobalCounters, gc_paused, usable_cores
from uopkit.schedule import (
    PendingReads,
    ScheduleItem,
    create_schedule,
    drop_pending_writes,
    forget_overwritten,
    kernelize_tensors,
    live_tensors,
    protect_pending_reads,
    update_tensors,
)
from uopkit.schedule.grouper import is_kernel_store
from uopkit.schedule.launch_consts import LAUNCHABLE, consts_as_launch_values, launch_value, place_of
from uopkit.schedule.windows import buffer_window
from uopkit.uop.ops import GroupOp, Ops, UOp, const_identity, uop_seq
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    from uopkit.tensor import Tensor

# SCHEDULE_CACHE=0 turns the schedule cache off (every realize kernelizes and schedules from scratch)
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 1)
# how many distinct graph structures the schedule cache remembers, and how many kernel launches their schedules may
# hold in all: each holds its compiled program, and inputs of ever new shapes (a batch of each length) make ever new
# graphs; past either the least recently used graphs go
SCHEDULE_CACHE_SIZE = 4096
SCHEDULE_CACHE_KERNELS = ContextVar("SCHEDULE_CACHE_KERNELS", 8192)
# the Buffer behind each BUFFER node (the front end's tensors hold the nodes)
buffers = WeakKeyMap()


@dataclass
class CompiledRunner:
    """A compiled kernel ready to launch on one device."""

    spec: ProgramSpec
    device: Compiled
    program: Any
    compile_seconds: float

    def __call__(
        self, bufs: Sequence[Buffer], var_vals: dict[str, int] | None = None, wait: bool = False
    ) -> float | None:
        vals = self.spec.launch_values(var_vals or {})
        # (the program takes only the buffers its code uses, `ProgramSpec.params`)
        params = self.spec.params
        return self.program(
            *([b.opaque for b in bufs] if params is None else [bufs[i].opaque for i in params]),
            global_size=self.spec.global_size,
            local_size=self.spec.local_size,
            vals=vals,
            wait=wait,
        )


# kernels compiled in this process, by (AST, device), least recently used first: building the same graph again skips
# codegen. Past METHOD_CACHE the oldest are dropped (`trim_method_cache`: inputs of ever new shapes compile ever new
# programs); one a cached schedule or a TinyJit holds stays with them, one asked for again is generated again
method_cache: dict[tuple[UOp, str], CompiledRunner] = {}
METHOD_CACHE = ContextVar("METHOD_CACHE", 2048)
# compile_seconds: per kernel, its code generation plus its share of the compiler run it was in, summed (kernels
# compile on worker threads while the next are generated, so this is more than the time anyone waited);
# compile_wait_seconds: the wall time realize spent generating code and waiting on compiles, what the user waits
stats = {
    "kernels_compiled": 0,
    "compile_seconds": 0.0,
    "compile_wait_seconds": 0.0,
    "kernels_run": 0,
    "schedule_hits": 0,
    "schedule_misses": 0,
}


def get_runner(ast: UOp, device: str) -> CompiledRunner:
    key = (ast, device)
    found = method_cache.pop(key, None)
    if found is not None:
        # (put back last: the most recently used)
        method_cache[key] = found
        return found
    dev = Device[device]
    st = time.perf_counter()
    spec = _codegen(ast, dev)
    lib, _ = _compile(spec, dev, device)
    runner = _finish_runner(key, spec, dev, lib, time.perf_counter() - st)
    stats["compile_wait_seconds"] += time.perf_counter() - st
    return runner


def _codegen(ast: UOp, dev: Compiled) -> ProgramSpec:
    # (from the disk cache when an earlier run generated this kernel, `engine.codegen_cache`)
    spec = cached_program(ast, dev)
    if DEBUG >= 4:
        print(spec.src if isinstance(spec.src, str) else f"// {spec.name}: {len(spec.src)} bytes from the renderer")
    return spec


def _compile(spec: ProgramSpec, dev: Compiled, device: str) -> tuple[bytes, float]:
    st = time.perf_counter()
    try:
        lib = dev.compiler.compile_cached(spec.src)
    except CompileError as e:
        raise CompileError(
            f"kernel {spec.name} failed to compile on {device}: {e.message}", spec.src, compiler=e.compiler
        ) from None
    return lib, time.perf_counter() - st


def _finish_runner(
    key: tuple[UOp, str], spec: ProgramSpec, dev: Compiled, lib: bytes, elapsed: float
) -> CompiledRunner:
    # `elapsed`: this kernel's code generation plus compiler time (kernels compiled side by side overlap in wall time)
    program = dev.runtime(spec.name, lib)
    stats["kernels_compiled"] += 1
    stats["compile_seconds"] += elapsed
    # the linear program was only needed to render the source: a runner holds ~10x more UOps in it than in its AST,
    # and the caches hold thousands of runners (`get_program(ast, renderer, opts=spec.opts)` builds it again)
    spec = dataclasses.replace(spec, uops=())
    runner = method_cache[key] = CompiledRunner(spec, dev, program, elapsed)
    return runner


def trim_method_cache() -> None:
    """Drop the least recently used programs past METHOD_CACHE (called once a schedule holds its runners, so a
    schedule of more kernels than that doesn't drop its first ones before running them)."""
    limit = METHOD_CACHE.value
    while len(method_cache) > limit >= 0:
        method_cache.pop(next(iter(method_cache)), None)


def precompile(schedule: list[ScheduleItem]) -> None:
    """Compile every kernel of a schedule that isn't compiled yet, several at a time.

    Code generation runs here in turn (it is Python); the compiler runs in worker threads (`CompileQueue`), in
    batches, so one kernel's C compiles while the next ones' code is generated, and compiles use all the cores.
    Kernels with the same source (same code for different ASTs) are compiled once.
    """
    todo: dict[tuple[UOp, str], None] = {}
    for item in schedule:
        if item.ast.op is not Ops.COPY:
            key = (item.ast, item.bufs[0].arg[1])
            if key not in method_cache:
                todo[key] = None
    if len(todo) < 2:
        return
    waited = time.perf_counter()
    try:
        _precompile(todo)
    finally:
        stats["compile_wait_seconds"] += time.perf_counter() - waited


def _precompile(todo: dict[tuple[UOp, str], None]) -> None:
    specs: list[tuple[tuple[UOp, str], ProgramSpec, Compiled, float]] = []
    with CompileQueue(min(len(todo), usable_cores()), expected=len(todo)) as queue:
        queued: set[tuple[str, str | bytes]] = set()
        for key in todo:
            dev = Device[key[1]]
            st = time.perf_counter()
            spec = _codegen(key[0], dev)
            specs.append((key, spec, dev, time.perf_counter() - st))
            if (key[1], spec.src) not in queued:
                queued.add((key[1], spec.src))
                queue.add(spec.name, spec.src, dev, key[1])
        compiled = iter(queue.results())
        libs: dict[tuple[str, str | bytes], tuple[bytes, float]] = {}
        for key, spec, dev, codegen_seconds in specs:
            if (key[1], spec.src) not in libs:
                libs[(key[1], spec.src)] = next(compiled)
                lib, compile_seconds = libs[(key[1], spec.src)]
            else:
                lib, compile_seconds = libs[(key[1], spec.src)][0], 0.0
            _finish_runner(key, spec, dev, lib, codegen_seconds + compile_seconds)


# ---------------------------------------------------------------------------------------------------------------------
# running one kernel or copy (and capturing it for TinyJit)


@dataclass
class ExecItem:
    """One launch: a compiled kernel (or, with `runner=None`, a copy of bufs[1] into bufs[0]) on concrete buffers."""

    runner: CompiledRunner | None
    bufs: list[Buffer]
    # the launch values of the kernel's variables, by name (`ProgramSpec.vars`)
    var_vals: dict[str, int] = field(default_factory=dict)

    def run(self, wait: bool = False) -> float | None:
        if self.runner is None:
            st = time.perf_counter()
            self.bufs[0].copy_from(self.bufs[1])
            return time.perf_counter() - st
        return self.runner(self.bufs, self.var_vals, wait=wait)


class _PerThread(threading.local):
    """A stack of its own per thread (what a capture records is what its thread runs: a kernel another thread runs
    meanwhile, recorded too, would be launched again with every replay, into that thread's buffers)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def append(self, item: Any) -> None:
        self.items.append(item)

    def pop(self) -> Any:
        return self.items.pop()

    def __delitem__(self, index: int) -> None:
        del self.items[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


# TinyJit (and rounds' and relaunch's captures) push a list here while they capture; every ExecItem the same thread
# runs meanwhile is appended to each of them (a jitted function called inside another one's capture belongs to both)
capturing: _PerThread = _PerThread()
# buffers holding old contents that lazy tensors still read after an assign overwrote the original (copy on write)
copy_on_write_buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()

# the front end's pair (to_bits(tensor) -> the tensor of its stored bits, put_back(tensors, bits)) for a dtype no kernel
# computes (bfloat16: a uint16 graph, see uopkit.tensor.support): `Tensor.realize` converts what it is asked to realize,
# and the readers a realize adds (`protect_pending_reads`) are converted here with it
stored_bits: tuple[Callable[[Any], Any], Callable[[list, list], None]] | None = None
# likewise for the host-side checks that read back a value computed on the device (index range checks): a replay runs
# them again after its kernels, so a captured check still fires
capturing_checks: _PerThread = _PerThread()


def exec_item(ei: ExecItem, index: int = 0) -> None:
    for captured in capturing:
        captured.append(ei)
    elapsed = ei.run(wait=DEBUG >= 2)
    if DEBUG >= 2 and elapsed is not None:
        GlobalCounters.time_sum_s += elapsed
    if ei.runner is None:
        GlobalCounters.global_mem += ei.bufs[0].nbytes
        if DEBUG >= 2:
            b = ei.bufs
            print(f"*** {index:4d} copy {b[1].device} -> {b[0].device} {b[0].nbytes} bytes {elapsed * 1e3:.3f} ms")
        return
    stats["kernels_run"] += 1
    spec = ei.runner.spec
    GlobalCounters.count(1, spec.estimated_flops, spec.estimated_bytes)
    if DEBUG >= 2 and elapsed is not None:
        gflops = spec.estimated_flops / max(elapsed, 1e-9) / 1e9
        gbs = spec.estimated_bytes / max(elapsed, 1e-9) / 1e9
        print(f"*** {index:4d} {spec.name:30s} {elapsed * 1e6:9.2f} us {gflops:8.2f} GFLOP/s {gbs:8.2f} GB/s")


def _buffer_for(buf: UOp) -> Buffer:
    b = buffers.get(buf)
    if b is None:
        _, device, size = buf.arg
        b = buffers[buf] = Buffer(device, size, buf.dtype).allocate()
    return b


def _item_runner(item: ScheduleItem, device: str) -> CompiledRunner | None:
    return None if item.ast.op is Ops.COPY else get_runner(item.ast, device)


def run_schedule(schedule: list[ScheduleItem]) -> None:
    for i, item in enumerate(schedule):
        bufs = [_buffer_for(b) for b in item.bufs]
        exec_item(ExecItem(_item_runner(item, bufs[0].device), bufs, dict(item.var_vals)), i)
    trim_method_cache()


# ---------------------------------------------------------------------------------------------------------------------
# the schedule cache


@dataclass(frozen=True)
class CachedStep:
    """A kernel (runner None: a copy) over slots of the call's buffer table."""

    runner: CompiledRunner | None
    slots: tuple[int, ...]
    var_vals: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class CachedSchedule:
    """What realizing one graph structure does: the buffers it allocates, the kernels it runs, the results it leaves.

    Slots 0..n_leaves-1 are the graph's existing BUFFERs in toposort order; the rest are `new_buffers`.
    `results` are the tensors' final uops as templates over the slots; `assigned` are the assigns (STOREs) of the
    graph, as (position in the graph's toposort, template of the view of storage they wrote), so that other live
    tensors holding an assign that ran read its storage instead of running it again.
    """

    n_leaves: int
    new_buffers: tuple[tuple[str, int, DType], ...]
    steps: tuple[CachedStep, ...]
    results: tuple[Template, ...]
    assigned: tuple[tuple[int, Template], ...]
    # per result: whether its original node may be remembered as computed (not when it holds a STORE)
    remember: tuple[bool, ...]
    # every step is a kernel (no copy): launched straight from (program, slots, sizes, launch values)
    launches: tuple[tuple[Any, tuple[int, ...], Any, Any, tuple[int, ...]], ...] | None
    # the graph's windows of its BUFFERs as recorded (`_Param.windows`): each one's slot and start
    window_slots: tuple[int, ...] = ()
    window_starts: tuple[int, ...] = ()
    # slots whose windows must not move on a replay: some step reads or writes them at a constant offset
    fixed_slots: frozenset[int] = frozenset()
    # the steps' window starts over those slots: (step, variable, slot, start in elements, what it is a multiple of,
    # the graph's windows it moves with: `replay_windows._window_groups`)
    window_vars: tuple[tuple[int, str, int, int, int, tuple[int, ...]], ...] = ()
    # the windows of those slots in the results' and assigns' templates (numbered results first): (template,
    # instruction, slot, shape it shrinks, lengths, start, the graph's windows it moves with, the flips of a FLIP it
    # shrinks or None: its bounds are the window's mirrored)
    template_windows: tuple[
        tuple[int, int, int, tuple[int, ...], tuple[int, ...], int, tuple[int, ...], tuple[bool, ...] | None], ...
    ] = ()
    # the graph's float32 and float16 constants as recorded (`_Param.const_ids`), the places of those the steps take
    # as launch values (`schedule.launch_consts`), and the steps' variables for them: (step, variable, place)
    const_ids: list[Any] = field(default_factory=list)
    launch_consts: frozenset[int] = frozenset()
    const_vars: tuple[tuple[int, str, int], ...] = ()
    # the values the graph computes on the way that got a kernel of their own (not the results): (position in the
    # graph's toposort, template of the view of the new buffer holding it). Other live tensors holding them (the other
    # gradients of one backward, realized one at a time) are moved onto those buffers on a replay, as the uncached
    # path does (`kernelize_tensors` and `update_tensors`): left on the lazy nodes, each would compute the whole shared
    # graph again, and its graph, no longer the one recorded, would miss the cache
    inner: tuple[tuple[int, Template], ...] = ()
    # where the new buffers live on a replay through `launches` (`share_buffers`; empty where none shares): per new
    # buffer, its place among the buffers `placed_in` that the replay allocates (a value only the next steps read
    # shares its place with the values computed after them), and whether a template names it (a value left after the
    # call: a BUFFER of its own)
    placement: tuple[int, ...] = ()
    placed_in: tuple[tuple[str, int, DType], ...] = ()
    named: tuple[bool, ...] = ()
    # the kernels' estimated operations and bytes, summed, for GlobalCounters on a replay through `launches`
    cost: tuple[int, int] = (0, 0)
    # the fields `placement` to `named` where other tensors hold some of `inner` (by their positions in the graph's
    # toposort): those keep their buffers too (`_held_inner_places`)
    held_places: dict[tuple[int, ...], tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class CachedGraph:
    """What realizing one graph structure (the schedule cache's key, the graph as asked: its tensors and the values it
    stores along) does: what it reads of the buffers its assigns overwrite, and its schedules."""

    # `protect_pending_reads`' reads of the graph's tensors (a function of its structure: a training step's graph is
    # walked at its first step, not at every one); None: not known yet
    reads: list[tuple[int, bool]] | None = None
    # the schedule by what `protect_pending_reads` added to the graph (the readers and copies that other live tensors
    # need, which can change from one realize to the next): () for nothing, else the key entries they add
    schedules: dict[tuple, CachedSchedule] = field(default_factory=dict)
    # when it was last used (a number from `uop_seq`): the cache's trim drops the least recently used (stamped, not
    # moved to the dict's end: that would hash the long key again)
    used: int = 0


# how many schedules of one graph structure (with different readers and copies) its entry keeps
SCHEDULES_PER_GRAPH = 8
schedule_cache: dict[tuple, CachedGraph] = {}


def cached_schedules() -> list[CachedSchedule]:
    """Every schedule in the schedule cache, oldest graph structure first."""
    return [entry for graph in schedule_cache.values() for entry in graph.schedules.values()]


# the ops `_parameterize` keys otherwise than by (op, dtype, arg, sources); module constants because on Python 3.11
# every `Ops.X` is a lookup through EnumType.__getattr__'s slow hook (~0.2 us), and the walk looks at every node
_BUFFER, _KERNEL, _STORE, _CONST, _CONTIGUOUS = Ops.BUFFER, Ops.KERNEL, Ops.STORE, Ops.CONST, Ops.CONTIGUOUS
_SHRINK, _DETACH = Ops.SHRINK, Ops.DETACH
_MOVEMENT = GroupOp.Movement
_KEYED_APART = frozenset({_BUFFER, _KERNEL, _STORE, _CONST, _CONTIGUOUS, _SHRINK, _DETACH})


def _parameterize(roots: tuple[UOp, ...], prefix: _Param | None = None) -> _Param | None:
    """The graph of `roots` (the tensors being realized) with its BUFFERs numbered in toposort order (the cache key),
    those BUFFERs and the toposort.

    None: not cacheable. Graphs of the same key have the same toposort, node for node. `prefix`: the result for roots
    that `roots` begin with; only the nodes the other roots add are walked (the toposort is `prefix`'s, then theirs).

    One walk, sources before users (the order of `UOp.toposort` from a SINK of the roots, without the SINK), writes
    each node's key entry as it is placed: the key is computed on every realize, so this is the schedule cache's cost
    on a hit. The last entry says which nodes the roots are.
    """
    if prefix is None:
        p = _Param([], [], [], [], {}, {}, roots, [], [], [])
        new_roots = roots
    else:
        p = prefix
        p.nodes.pop()
        assert roots[: len(p.roots)] == p.roots, "the roots must extend the prefix's"
        new_roots = roots[len(p.roots) :]
        p.roots = roots
    position, key, leaves, fresh, topo = p.position, p.nodes, p.leaves, p.fresh, p.topo
    source_position = position.__getitem__
    for root in new_roots:
        if root in position:
            continue
        # depth first, sources in order, as `UOp.toposort`: each frame holds a node and the sources it has yet to look
        # at; a node is placed once all of them are
        stack: list[tuple[UOp, Iterator[UOp]]] = [(root, iter(root.src))]
        while stack:
            u, srcs = stack[-1]
            for s in srcs:
                if s not in position:
                    break
            else:
                s = None
            if s is not None:
                stack.append((s, iter(s.src)))
                continue
            stack.pop()
            # (placed only here, once: in a DAG no node is pushed again while it is on the stack)
            position[u] = len(topo)
            topo.append(u)
            op = u.op
            if op not in _KEYED_APART:
                key.append((op, u.dtype, u.arg, tuple(map(source_position, u.src))))
                continue
            arg = u.arg
            if op is _BUFFER:
                # a BUFFER is known by its place among the leaves, its device, size and dtype: not by its identity
                key.append((op, u.dtype, (-1 - len(leaves), arg[1], arg[2]), ()))
                leaves.append(u)
                continue
            if op is _KERNEL:
                # already kernelized: the slow path knows how to reuse those (kernel STOREs that ran are in becomes_map)
                return None
            if (op is _CONTIGUOUS or op is _DETACH) and arg is not None:
                # the arg is a fresh id that only keeps the node one of its own (a DETACH's: a leaf made as
                # `x.detach().requires_grad_()`, new every step of a PGD attack): numbered in order of appearance
                arg = ("fresh", type(arg).__name__, fresh.setdefault(arg, len(fresh)))
            elif op is _STORE:
                p.stores.append(u)
            elif op is _CONST:
                # -0.0 and 0.0 compare equal: keyed as the nodes are (see `const_identity`)
                arg = const_identity(arg)
                # (a CONST of a tensor graph has a DEVICE source)
                if u.dtype in LAUNCHABLE and u.src:
                    # keyed by its place alone, its number kept apart (`schedule.launch_consts`)
                    p.consts.append(u)
                    p.const_ids.append(arg)
                    arg = "launchable constant"
            elif op is _SHRINK and (window := buffer_window(u)) is not None:
                # a window of a BUFFER (the next batch of a dataset): keyed by its shape, its start kept apart
                # (`window_values` moves the kernels' windows on a replay)
                p.windows.append((u.src[0].base, *window))
                arg = ("window", u.shape)
            key.append((op, u.dtype, arg, tuple(map(source_position, u.src))))
    key.append(("roots", tuple(map(source_position, roots))))
    return p


@dataclass
class _Param:
    # the graph written out node by node, sources by position: equal keys are the same graph over other buffers
    nodes: list[tuple]
    leaves: list[UOp]
    topo: list[UOp]
    # the assigns in the graph (STOREs of values into existing storage)
    stores: list[UOp]
    position: dict[UOp, int]
    fresh: dict[object, int]
    # the tensors' nodes, in order
    roots: tuple[UOp, ...]
    # each window of a BUFFER keyed by its shape alone (`buffer_window`), in toposort order: (the BUFFER, its start,
    # its span)
    windows: list[tuple[UOp, int, int]]
    # the float32 and float16 constants in toposort order, and their numbers as keys
    consts: list[UOp]
    const_ids: list[Any]

    @property
    def key(self) -> tuple:
        return tuple(self.nodes)


def _stored_buffer(store: UOp) -> UOp:
    # the BUFFER an assign writes (its target is a view of it, or of an earlier assign to it)
    return _assigned_view(store).base


def _assigned_view(store: UOp) -> UOp:
    """What an assign's STORE stands for once it ran: its target, a view of the storage it wrote."""
    target = store.src[0]
    if target.base.op is not Ops.STORE:
        return target
    return _replay_view(target, _assigned_view(target.base))


def _record(
    schedule: list[ScheduleItem],
    param: _Param,
    results: Sequence[UOp],
    runners: list[CompiledRunner | None],
    kernelized: dict[UOp, UOp] | None = None,
) -> CachedSchedule | None:
    leaves, topo = param.leaves, param.topo
    slot = {b: i for i, b in enumerate(leaves)}
    new_buffers: list[tuple[str, int, DType]] = []
    steps = []
    for item, runner in zip(schedule, runners, strict=True):
        for b in item.bufs:
            if b not in slot:
                slot[b] = len(slot)
                new_buffers.append((b.arg[1], b.arg[2], b.dtype))
        steps.append(CachedStep(runner, tuple(slot[b] for b in item.bufs), item.var_vals))
    templates = []
    for r in results:
        t = template_of(r, slot, param.fresh)
        if t is None:
            return None
        templates.append(t)
    position = param.position
    assigned = []
    for store in param.stores:
        t = template_of(_assigned_view(store), slot, param.fresh)
        if t is None:
            return None
        assigned.append((position[store], t))
    # a result computed from an assign's value is not remembered as computed from its graph: rebuilt after the
    # buffer changed, the same (hash-consed) node has to run again
    has_store: dict[UOp, bool] = {}
    for u in topo:
        has_store[u] = u.op is Ops.STORE or any(has_store[x] for x in u.src)
    remember = tuple(not has_store[u] for u in param.roots)
    inner = _record_inner(param, kernelized or {}, slot, has_store)
    windows = record_windows(schedule, param, slot, steps, templates + [t for _, t in assigned])
    launches = None
    if all(r is not None for r in runners):
        # (a program takes the buffers its code uses, `ProgramSpec.params`)
        launches = tuple(
            (
                r.program,
                tuple(r.spec.take(s.slots)),
                r.spec.global_size,
                r.spec.local_size,
                r.spec.launch_values(dict(s.var_vals)),
            )
            for r, s in zip(runners, steps, strict=True)
            if r is not None
        )
    views = [*results, *(_assigned_view(store) for store in param.stores)]
    # (the buffers of `inner` are named only where a replay moves other tensors onto them: it then gives each its own)
    named = {ins[1] for t in (*templates, *(t for _, t in assigned)) for ins in t if ins[0] == "slot"}
    placement, placed_in = ((), [])
    if launches is not None:
        placement, placed_in = share_buffers(len(leaves), new_buffers, [s.slots for s in steps], named)
    return CachedSchedule(
        len(leaves),
        tuple(new_buffers),
        tuple(steps),
        tuple(templates),
        tuple(assigned),
        remember,
        launches,
        *windows,
        *_record_consts(param, steps, views),
        inner,
        placement,
        tuple(placed_in),
        tuple(len(leaves) + k in named for k in range(len(new_buffers))),
        launch_cost(runners),
    )


def launch_cost(runners: Sequence[CompiledRunner | None]) -> tuple[int, int]:
    """The estimated operations and bytes of the kernels among `runners` (None: a copy), summed."""
    specs = [r.spec for r in runners if r is not None]
    return sum(s.estimated_flops for s in specs), sum(s.estimated_bytes for s in specs)


def _record_inner(
    param: _Param, kernelized: dict[UOp, UOp], slot: dict[UOp, int], has_store: dict[UOp, bool]
) -> tuple[tuple[int, Template], ...]:
    """The field `inner`: the graph's nodes that got a kernel of their own, other than the results, with the views of
    the new buffers they are now (`kernelized`: node -> that view). Not a node that holds an assign (rebuilt after the
    write, the same node has to run again), nor one whose view reads a buffer the call gives (a window that moves)."""
    if not kernelized:
        return ()
    n_leaves = len(param.leaves)
    roots = set(param.roots)
    position = param.position
    inner = []
    for node, view in kernelized.items():
        i = position.get(node)
        if i is None or node in roots or has_store.get(node, True):
            continue
        t = template_of(view, slot, param.fresh)
        if t is None or any(ins[0] == "slot" and ins[1] < n_leaves for ins in t):
            continue
        inner.append((i, t))
    return tuple(inner)


def _record_consts(param: _Param, steps: list[CachedStep], views: list[UOp]) -> tuple[Any, ...]:
    """The fields `const_ids` to `const_vars`: the constants as recorded, the places the steps take as launch values
    (a constant that a result's or an assign's view holds is not one of them: the view is rebuilt with it), and the
    steps' variables for those."""
    if not param.consts:
        return [], frozenset(), ()
    const_vars = tuple(
        (i, name, k) for i, step in enumerate(steps) for name, _ in step.var_vals if (k := place_of(name)) is not None
    )
    held = {n for v in views for n in v.toposort() if n.op is Ops.CONST}
    launched = frozenset(k for _, _, k in const_vars if param.consts[k] not in held)
    return list(param.const_ids), launched, const_vars


def _const_values(entry: CachedSchedule, param: _Param, moved: Moved) -> Moved | None:
    """`moved` with the launch values of the constants that changed since `entry` was recorded, or None when one
    changed that its kernels hold as a literal."""
    values, bounds = moved
    # (one key, one graph structure: as many constants now as then)
    now, then = param.const_ids, entry.const_ids
    if any(a != b and k not in entry.launch_consts for k, (a, b) in enumerate(zip(now, then, strict=True))):
        return None
    for i, name, k in entry.const_vars:
        if now[k] != then[k]:
            values.setdefault(i, dict(entry.steps[i].var_vals))[name] = launch_value(name, param.consts[k])
    return values, bounds


def _launch_consts(entry: CachedSchedule | None, param: _Param | None) -> dict[UOp, int]:
    """The constants to schedule as launch values: those the cached entry for this graph took so, and those whose
    number changed since (a number seen once stays a literal)."""
    if entry is None or param is None:
        return {}
    changed = {k for k, (a, b) in enumerate(zip(param.const_ids, entry.const_ids, strict=True)) if a != b}
    return {param.consts[k]: k for k in changed | entry.launch_consts}


def _replay_view(view: UOp, base: UOp) -> UOp:
    """`view`'s chain of movement ops applied to `base` instead of `view.base`."""
    chain = []
    while view.op in GroupOp.Movement:
        chain.append(view)
        view = view.src[0]
    for n in reversed(chain):
        base = n.replace(src=(base,))
    return base


def _replay(
    entry: CachedSchedule,
    tensors: Sequence[Tensor],
    param: _Param,
    pending: PendingReads | None,
    moved: Moved,
) -> None:
    """Run `entry`'s steps for `tensors` (the graph `param`); `moved`: what its windows' moves change, the launch values
    of steps and the bounds of templates (`window_values`)."""
    leaves = param.leaves
    table: list[Buffer] = [_buffer_for(b) for b in leaves]
    # (None: a new buffer no template names, which needs no BUFFER node)
    uops: list[Any] = list(leaves)
    debug = DEBUG.value
    direct = entry.launches is not None and not capturing and debug < 2
    # (the values computed on the way that other live tensors hold: `inner`)
    others = _other_computed(tensors) if entry.inner else []
    inner = entry.inner if others else ()
    placement, placed_in, named_slots = entry.placement, entry.placed_in, entry.named
    if direct and placement and others:
        inner, placement, placed_in, named_slots = _held_inner_places(entry, param, others)
    if direct and placement:
        # the new buffers in their shared places (`share_buffers`)
        placed = [Buffer(device, size, dtype).allocate() for device, size, dtype in placed_in]
        for (device, size, dtype), place, named in zip(entry.new_buffers, placement, named_slots, strict=True):
            buf = placed[place]
            table.append(buf)
            if named:
                uop = UOp.new_buffer(device, size, dtype)
                buffers[uop] = buf
            uops.append(uop if named else None)
    else:
        for device, size, dtype in entry.new_buffers:
            uop = UOp.new_buffer(device, size, dtype)
            buf = buffers[uop] = Buffer(device, size, dtype).allocate()
            table.append(buf)
            uops.append(uop)
    if debug >= 1 and entry.steps:
        print(f"schedule: {len(entry.steps)} kernels (cached)")
    values, bounds = moved
    if direct:
        assert entry.launches is not None
        # the common case, with nothing to capture or time: straight to the programs (a step whose window or constant
        # moved takes its new launch values)
        for i, (program, slots, global_size, local_size, vals) in enumerate(entry.launches):
            if values and i in values:
                runner = entry.steps[i].runner
                assert runner is not None
                vals = runner.spec.launch_values(values[i])
            program(*[table[s].opaque for s in slots], global_size=global_size, local_size=local_size, vals=vals)
        stats["kernels_run"] += len(entry.launches)
        counters, (ops, mem) = GlobalCounters, entry.cost
        counters.kernel_count += len(entry.launches)
        counters.global_ops += ops
        counters.global_mem += mem
    else:
        for i, step in enumerate(entry.steps):
            var_vals = values[i] if i in values else dict(step.var_vals)
            exec_item(ExecItem(step.runner, [table[s] for s in step.slots], var_vals), i)
    mapping = {}
    topo, fresh = param.topo, list(param.fresh)
    n = len(entry.results)
    for k, (i, template) in enumerate(entry.assigned):
        mapping[topo[i]] = built_from(template, uops, fresh, bounds.get(n + k))
    if inner:
        for i, template in inner:
            mapping[topo[i]] = built_from(template, uops, fresh)
    overwritten = []
    for k, (t, template, remember) in enumerate(zip(tensors, entry.results, entry.remember, strict=True)):
        new = built_from(template, uops, fresh, bounds.get(k))
        if new is not t.uop:
            if remember:
                # update_tensors moves t too, and remembers what computed it (backward() after a realize needs that)
                mapping[t.uop] = new
            else:
                overwritten.append(new)
                live_tensors.set_uop(t, new)
    # other live tensors holding these nodes now read the stored values, as on the uncached path (a graph node must
    # never be remembered as "computed" for later graphs: its inputs can be overwritten by an assign)
    update_tensors(mapping, from_replay=True, pending=pending)
    # (forgotten after the values stored with them are remembered, as uncached: a reader computed before the write,
    # `d = c[1:] - c[:-1]` then `c[-1] += 1`, is followed back through what c held, or its gradient is lost)
    for new in overwritten:
        forget_overwritten(new)


# ---------------------------------------------------------------------------------------------------------------------
# realize


def _other_computed(tensors: Sequence[Tensor]) -> list[UOp]:
    # the graphs of the live tensors other than `tensors` that are computed values (which may hold what they compute)
    asked = {id(t) for t in tensors}
    return [t.uop for t in live_tensors.computed() if id(t) not in asked]


def _held_inner_places(entry: CachedSchedule, param: _Param, others: list[UOp]) -> tuple[Any, ...]:
    """Where other live tensors (`others`) hold values computed on the way: those values (of `entry.inner`), and the
    new buffers placed with theirs kept apart too (`share_buffers`): the rest still share (the positions a sort returns
    with its values hold its last exchange, not the 200 before it)."""
    nodes = {param.topo[i]: (i, template) for i, template in entry.inner}
    held = held_by(others, nodes.__contains__, min(n.seq for n in nodes))
    inner = tuple(sorted(nodes[n] for n in held))
    if not inner:
        return inner, entry.placement, entry.placed_in, entry.named
    key = tuple(i for i, _ in inner)
    if key not in entry.held_places:
        if len(entry.held_places) >= 16:
            entry.held_places.clear()
        apart = {ins[1] for _, template in inner for ins in template if ins[0] == "slot"}
        steps = [step.slots for step in entry.steps]
        entry.held_places[key] = share_buffers_apart(entry.n_leaves, entry.new_buffers, steps, entry.named, apart)
    return (inner, *entry.held_places[key])


def _is_stored(u: UOp) -> bool:
    # a view of an allocated buffer: realizing it does nothing (views stay views)
    while u.op in _MOVEMENT:
        u = u.src[0]
    return u.op is _BUFFER and u in buffers


def _held_values(roots: tuple[UOp, ...], param: _Param | None) -> list[Tensor]:
    """The live tensors whose values the graph of `roots` computes on the way, deep enough to be worth keeping (a
    variable the program still holds): stored with the roots, as PyTorch has them, so that what is computed from them
    next starts from storage instead of computing them again (`h = cell(h); out[t] = h` in a loop computed every
    earlier step again, each step longer than the last). A shallow value (`x.cast(int64)` of a `.sum()`, which pytest's
    asserts hold) stays fused: it costs little to compute again and could be large. Also the assigns still to run
    that read what the graph computes (`_assigns_from`)."""
    asked = set(roots)
    # (from the index of the live tensors: the assigns still to run, and the computed values that are nodes of the
    # graph, not every live tensor, most of which have nothing to do with this realize)
    assigns = [t for t in live_tensors.pending_assigns() if t.uop not in asked]
    inside = param.position if param is not None else dict.fromkeys(UOp(Ops.SINK, src=roots).toposort())
    held = [t for t in assigns if _assigns_from(t.uop, inside)]
    asked.update(t.uop for t in held)
    if len(_together):
        held += _staged_with(list(asked), asked)
    candidates = [t for t in live_tensors.holding(inside, len(inside)) if t.uop not in asked and not _is_stored(t.uop)]
    if not candidates:
        return held
    depth = _fused_depths([t.uop.base for t in candidates])
    for t in candidates:
        deep = depth.get(t.uop.base, 0)
        small = deep >= HELD_SMALL_DEPTH and t.uop.base.size <= HELD_SMALL_SIZE
        if t.uop not in asked and (deep >= HELD_STORED_DEPTH or small):
            asked.add(t.uop)
            held.append(t)
    return held


# pending assigns staged to run together (`run_together`): a STORE -> (the tensor, its STORE) of each of the others,
# all held weakly
_together = WeakKeyMap()


def run_together(tensors: Sequence[Tensor]) -> None:
    """The pending assigns of `tensors` run in one realize: whichever is realized (or taken along by `_assigns_from`)
    takes the others with it. A BatchNorm's batch count, whose new value reads nothing of the batch, goes with the
    running statistics a training step's realize takes along; alone, it ran in a realize of its own (one kernel) at
    the next forward pass, whose assign must first store the pending one."""
    pending = [(weakref.ref(t), weakref.ref(t.uop)) for t in tensors if t.uop.op is _STORE]
    for _, store in pending:
        _together[store()] = [p for p in pending if p[1] is not store]


def _staged_with(stores: list[UOp], asked: set[UOp]) -> list[Tensor]:
    # the tensors whose pending assigns were staged with one of `stores` (`run_together`) and aren't `asked` yet
    out = []
    for u in stores:
        for ref, store_ref in _together.get(u, ()):
            t, store = ref(), store_ref()
            if t is not None and store is not None and t.uop is store and store not in asked:
                asked.add(store)
                out.append(t)
    return out


# how far into a pending assign's value `_assigns_from` looks for a node of the graph being realized
ASSIGN_LOOKUP_NODES = 64


def _assigns_from(u: UOp, inside: Container[UOp]) -> bool:
    """Whether `u` is an assign still to run whose value reads something the graph being realized computes (a
    BatchNorm's running mean, assigned from the batch mean a training step's gradients compute too): it runs in the
    same schedule, from the same values, as PyTorch updated it in the forward pass. Left pending, it would compute
    them again later, from copies of the weights the step overwrote."""
    if u.op is not _STORE or is_kernel_store(u):
        return False
    stack, seen = [u.src[1]], 0
    while stack and seen < ASSIGN_LOOKUP_NODES:
        n = stack.pop()
        seen += 1
        if n.op is _BUFFER or n.op is _CONST or n.op is _STORE:
            continue
        if n in inside and n.op not in _MOVEMENT and n.op is not Ops.DETACH:
            return True
        stack.extend(n.src)
    return False


# a held value is stored once it is this many operations deep past storage (a reduce counts as this many), a small one
# (up to HELD_SMALL_SIZE elements: a recurrence's state, a score row read by `.item()` in a loop) from HELD_SMALL_DEPTH:
# stored at every step, each step's graph is the same (compiled once), not one a few operations longer each time. (A
# mask `arange(n) > pos`, 2 deep, stays fused: stored, a decode loop would run a kernel more per step)
HELD_STORED_DEPTH = 16
HELD_SMALL_SIZE = 1 << 16
HELD_SMALL_DEPTH = 4


def _fused_depths(tops: list[UOp]) -> dict[UOp, int]:
    """Operations on the longest path from storage or a number to each node under `tops` (movement ops are free),
    capped at the largest depth `_held_values` asks about: only their subgraphs, not the whole graph being realized (a
    training step's: its backward, ~1 us a node). The walk stops as soon as the path it is on makes its top that deep:
    a value at the end of a long chain of steps (an elimination's 100 steps, 9000 nodes in one graph) is known deep
    after a few dozen nodes down its first path, not after all of them. Only the nodes known exactly are in the map."""
    cap = max(HELD_STORED_DEPTH, HELD_SMALL_DEPTH)
    depth: dict[UOp, int] = {}
    for top in tops:
        if top in depth:
            continue
        if top.op in _DEPTH_LEAVES or is_kernel_store(top):
            depth[top] = 0
            continue
        # depth first, sources in order: each frame is [node, its sources yet to look at, its cost, its deepest source
        # so far]; `path` sums the costs of the frames' nodes, a path down from the top
        stack: list[list[Any]] = [[top, iter(top.src), _depth_cost(top), 0]]
        path = stack[0][2]
        while stack:
            frame = stack[-1]
            u, srcs, cost, deepest = frame
            below = None
            if path + deepest < cap:
                for s in srcs:
                    d = depth.get(s)
                    if d is None:
                        if s.op in _DEPTH_LEAVES or is_kernel_store(s):
                            depth[s] = 0
                            continue
                        below = s
                        break
                    if d > deepest:
                        deepest = d
                        if path + deepest >= cap:
                            break
            if path + deepest >= cap:
                # the top is at least that deep, and so is each node on the stack whose part of the path is
                for f in stack:
                    if path + deepest < cap:
                        break
                    depth[f[0]] = cap
                    path -= f[2]
                break
            if below is not None:
                frame[3] = deepest
                stack.append([below, iter(below.src), _depth_cost(below), 0])
                path += stack[-1][2]
                continue
            stack.pop()
            path -= cost
            # (every source seen, and below the cap)
            d = depth[u] = deepest + cost
            if stack and d > stack[-1][3]:
                stack[-1][3] = d
    return depth


def _depth_cost(u: UOp) -> int:
    # what one node adds to the depth of a held value (`_fused_depths`): a reduce counts as a stored value's depth
    return 0 if u.op in _MOVEMENT else HELD_STORED_DEPTH if u.op is Ops.REDUCE_AXIS else 1


_DEPTH_LEAVES = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEVICE})


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    for t in tensors:
        if not _is_stored(t.uop):
            break
    else:
        # (`.numpy()` and the like realize what often is realized already)
        return
    # all or nothing: a realize that raises (a kernel that fails to compile, memory, Ctrl-C) puts every tensor's graph
    # back as it found it, and drops the writes it was asked to make (an in-place op that raised wrote nothing, an
    # optimizer step retried steps once). Every kernel is compiled and every buffer allocated before the first kernel
    # runs (`_realize_uncached`), so only a failure while the kernels run can leave storage partly written
    with realize_lock:
        mark = live_tensors.begin()
        try:
            _realize(tensors)
        except BaseException:
            live_tensors.end(mark, undo=True)
            drop_pending_writes(tensors)
            raise
        live_tensors.end(mark)


def _realize(tensors: Sequence[Tensor]) -> None:
    roots = tuple([t.uop for t in tensors])
    param = _parameterize(roots) if SCHEDULE_CACHE else None
    held = _held_values(roots, param)
    if held:
        tensors = [*tensors, *held]
        roots = tuple([t.uop for t in tensors])
        if param is not None:
            param = _parameterize(roots, param)
    # (the key is built and hashed once: a training step's has an entry per node of its forward and backward passes)
    key = param.key if param is not None else None
    graph = schedule_cache.get(key) if key is not None else None
    if graph is not None:
        graph.used = next(uop_seq)
    # what `protect_pending_reads` added to the graph, as it extends the key (the schedule's key within `graph`)
    added: tuple = ()
    pending: PendingReads | None = None
    converted: tuple[list, list] | None = None
    if param is None or param.stores:
        # a graph with STOREs: other lazy values reading what they overwrite are computed first or get a copy
        targets = None if param is None else list(dict.fromkeys(_stored_buffer(u) for u in param.stores))
        if targets is not None and any(b.op is not Ops.BUFFER for b in targets):
            targets = None
        # (targets found from the graph's key: what the graph reads of them is known after its first realize)
        keyed = param is not None and targets is not None
        known = graph.reads if graph is not None and keyed else None
        stores = None if param is None else param.stores
        pending = protect_pending_reads(tensors, UOp(Ops.SINK, src=roots), targets, stores, known)
        if keyed and known is None and pending.graph_reads is not None:
            graph = _cached_graph(key, graph)
            graph.reads = pending.graph_reads
        readers, copies = pending.readers, pending.copies
        if readers and stored_bits is not None and any(t.uop.dtype is dtypes.bfloat16 for t in readers):
            bits_of_readers = [stored_bits[0](t) for t in readers]
            converted = (readers, bits_of_readers)
            readers = bits_of_readers
        if readers or copies:
            tensors = [*tensors, *readers, *copies]
            if param is not None:
                # the readers and copies are part of the graph (and of its key); a value that reads a copy now has a
                # new graph of its own
                rewired = any(t.uop is not r for t, r in zip(tensors, roots, strict=False))
                if rewired:
                    param = _parameterize(tuple([t.uop for t in tensors]))
                    added = ("rewired", param.key) if param is not None else ()
                else:
                    # (extended, the key is the graph's without its last entry, which names the roots, then this)
                    asked = len(param.nodes) - 1
                    param = _parameterize(tuple([t.uop for t in tensors]), param)
                    added = tuple(param.nodes[asked:]) if param is not None else ()
    entry = graph.schedules.get(added) if graph is not None and param is not None else None
    moved = None
    if entry is not None and param is not None:
        moved = window_values(entry, param)
        if moved is not None and param.const_ids != entry.const_ids:
            moved = _const_values(entry, param, moved)
    if entry is not None and moved is not None:
        stats["schedule_hits"] += 1
        assert param is not None
        _replay(entry, tensors, param, pending, moved)
    else:
        if param is not None:
            stats["schedule_misses"] += 1
        with gc_paused():
            kernelized: dict[UOp, UOp] | None = {} if param is not None else None
            with consts_as_launch_values(_launch_consts(entry, param)):
                schedule, runners = _realize_uncached(tensors, kernelized)
            recorded = (
                _record(schedule, param, [t.uop for t in tensors], runners, kernelized) if param is not None else None
            )
        if recorded is not None and key is not None:
            graph = _cached_graph(key, graph)
            if len(graph.schedules) >= SCHEDULES_PER_GRAPH and added not in graph.schedules:
                del graph.schedules[next(iter(graph.schedules))]
            graph.schedules[added] = recorded
            _count_cached_kernels(len(recorded.steps))
    if pending is not None:
        for c in pending.copies:
            copy_on_write_buffers.add(_buffer_for(c.uop.base))
        pending.rewire_to_copies()
        pending.keep_old_values()
    if converted is not None and stored_bits is not None:
        stored_bits[1](*converted)


# at least as many kernel launches as the schedule cache's schedules hold (exact after each trim)
_kernels_cached = 0


def _count_cached_kernels(n: int) -> None:
    global _kernels_cached
    _kernels_cached += n
    if _kernels_cached > SCHEDULE_CACHE_KERNELS.value:
        _trim_schedule_cache()


def _trim_schedule_cache() -> None:
    """Drop the least recently used graphs until the cache holds 3/4 of SCHEDULE_CACHE_SIZE graphs and of
    SCHEDULE_CACHE_KERNELS launches (the most recent one stays, however large): the sizes are summed only here, at
    most once per quarter of either limit added, not per realize."""
    global _kernels_cached
    sizes = {key: sum(len(s.steps) for s in graph.schedules.values()) for key, graph in schedule_cache.items()}
    total = sum(sizes.values())
    keep_graphs, keep_kernels = SCHEDULE_CACHE_SIZE * 3 // 4, SCHEDULE_CACHE_KERNELS.value * 3 // 4
    for key in sorted(schedule_cache, key=lambda k: schedule_cache[k].used):
        if (total <= keep_kernels and len(schedule_cache) <= keep_graphs) or len(schedule_cache) == 1:
            break
        del schedule_cache[key]
        total -= sizes[key]
    _kernels_cached = total


def _cached_graph(key: tuple, graph: CachedGraph | None) -> CachedGraph:
    # the schedule cache's entry for the graph structure `key` (`graph`, if the realize found one), made if new
    if graph is not None:
        return graph
    if len(schedule_cache) >= SCHEDULE_CACHE_SIZE:
        _trim_schedule_cache()
    graph = schedule_cache[key] = CachedGraph(used=next(uop_seq))
    return graph


def _realize_uncached(
    tensors: Sequence[Tensor], kernelized: dict[UOp, UOp] | None = None
) -> tuple[list[ScheduleItem], list[CompiledRunner | None]]:
    """Kernelize, schedule and run `tensors`. `kernelized`: filled with each node of the graph that got a kernel of its
    own and the view of the buffer it is stored in once run."""
    # (the BUFFERs built from here on are the ones kernelizing makes: `first_run_buffers` places them)
    made_since = next(uop_seq)
    sink = kernelize_tensors(tensors, kernelized)
    schedule = create_schedule(sink)
    # a kernel that writes no elements has nothing to do (and its code would be an empty loop): it is done as it is
    empty = [item for item in schedule if item.ast.op is not Ops.COPY and item.bufs[0].arg[2] == 0]
    schedule = [item for item in schedule if item not in empty]
    if DEBUG >= 1 and schedule:
        print(f"schedule: {len(schedule)} kernels")
    precompile(schedule)
    # every kernel compiled and every buffer allocated before any kernel runs: one that fails to compile (or memory
    # that runs out) must not leave the kernels before it written into existing storage. The values no tensor holds
    # afterwards share buffers as on a replay (not while a TinyJit captures: it keeps each launch's buffers)
    if not capturing:
        for b, buf in first_run_buffers(schedule, made_since, buffers).items():
            buffers[b] = buf
    items = []
    for item in schedule:
        bufs = [_buffer_for(b) for b in item.bufs]
        items.append(ExecItem(_item_runner(item, bufs[0].device), bufs, dict(item.var_vals)))
    trim_method_cache()
    for i, ei in enumerate(items):
        exec_item(ei, i)
    runners = [ei.runner for ei in items]
    # every STORE that ran is now just its storage
    done: dict[UOp, UOp] = {}
    for item in schedule + empty:
        store = item.store
        target = store.src[0]
        done[store] = target
    for u in sink.toposort():
        if is_kernel_store(u) and u not in done:
            raise RuntimeError("a kernel STORE was left unscheduled")
    update_tensors(done)
    if kernelized:
        for node, view in list(kernelized.items()):
            store = view.base
            if store in done:
                kernelized[node] = _replay_view(view, done[store])
            else:
                del kernelized[node]
    for t in tensors:
        if t.uop.base in done or any(n in done for n in t.uop.toposort()):
            live_tensors.set_uop(t, t.uop.substitute(done, name="realized"))
    return schedule, runners


__all__ = [
    "CompiledRunner",
    "ExecItem",
    "get_runner",
    "method_cache",
    "trim_method_cache",
    "realize_lock",
    "realize_tensors",
    "run_schedule",
    "schedule_cache",
    "cached_schedules",
    "stats",
]

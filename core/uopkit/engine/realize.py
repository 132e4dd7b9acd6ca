"""Realize tensors: kernelize, schedule, compile each kernel once per (AST, device), run.

Two caches keep the Python cost of a realize low:
- `method_cache`: compiled kernels by (AST, device), so building the same graph again skips codegen;
- `schedule_cache`: whole schedules by the *shape* of the graph being realized, with every BUFFER replaced by a
  numbered placeholder. Realizing a graph of the same structure over other buffers (the next training step, the next
  `(a + 1).realize()`) replays the recorded kernels on the new buffers without kernelizing or scheduling again.

Every kernel and copy runs through `ExecItem.run`, which is also where `TinyJit` captures them.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopkit.codegen import ProgramSpec, get_program
from uopkit.device import Buffer, Compiled, CompileError, Device
from uopkit.dtype import DType
from uopkit.engine.compile_queue import CompileQueue
from uopkit.helpers import DEBUG, ContextVar
from uopkit.schedule import (
    ScheduleItem,
    becomes_map,
    create_schedule,
    kernelize_tensors,
    protect_pending_reads,
    update_tensors,
)
from uopkit.schedule.grouper import is_kernel_store
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor import Tensor

# SCHEDULE_CACHE=0 turns the schedule cache off (every realize kernelizes and schedules from scratch)
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 1)
# how many distinct graph structures the schedule cache remembers
SCHEDULE_CACHE_SIZE = 4096
# the Buffer behind each BUFFER node (the front end's tensors hold the nodes)
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


@dataclass
class CompiledRunner:
    """A compiled kernel ready to launch on one device."""

    spec: ProgramSpec
    device: Compiled
    program: Any
    compile_seconds: float

    def __call__(
        self, bufs: Sequence[Buffer], var_vals: dict[UOp, int] | None = None, wait: bool = False
    ) -> float | None:
        vals = tuple((var_vals or {})[v] for v in self.spec.vars)
        return self.program(
            *[b.opaque for b in bufs],
            global_size=self.spec.global_size,
            local_size=self.spec.local_size,
            vals=vals,
            wait=wait,
        )


# kernels compiled in this process, by (AST, device): building the same graph again skips codegen
method_cache: dict[tuple[UOp, str], CompiledRunner] = {}
stats = {"kernels_compiled": 0, "compile_seconds": 0.0, "kernels_run": 0, "schedule_hits": 0, "schedule_misses": 0}


def get_runner(ast: UOp, device: str) -> CompiledRunner:
    key = (ast, device)
    if key in method_cache:
        return method_cache[key]
    dev = Device[device]
    st = time.perf_counter()
    spec = _codegen(ast, dev)
    lib, _ = _compile(spec, dev, device)
    return _finish_runner(key, spec, dev, lib, time.perf_counter() - st)


def _codegen(ast: UOp, dev: Compiled) -> ProgramSpec:
    spec = get_program(ast, dev.renderer)
    if DEBUG >= 4:
        print(spec.src if isinstance(spec.src, str) else f"// {spec.name}: {len(spec.src)} bytes from the renderer")
    return spec


def _compile(spec: ProgramSpec, dev: Compiled, device: str) -> tuple[bytes, float]:
    st = time.perf_counter()
    try:
        lib = dev.compiler.compile_cached(spec.src)
    except CompileError as e:
        raise CompileError(f"kernel {spec.name} failed to compile on {device}: {e.message}", spec.src) from None
    return lib, time.perf_counter() - st


def _finish_runner(
    key: tuple[UOp, str], spec: ProgramSpec, dev: Compiled, lib: bytes, elapsed: float
) -> CompiledRunner:
    # `elapsed`: this kernel's code generation plus compiler time (kernels compiled side by side overlap in wall time)
    program = dev.runtime(spec.name, lib)
    stats["kernels_compiled"] += 1
    stats["compile_seconds"] += elapsed
    runner = method_cache[key] = CompiledRunner(spec, dev, program, elapsed)
    return runner


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
    specs: list[tuple[tuple[UOp, str], ProgramSpec, Compiled, float]] = []
    with CompileQueue(min(len(todo), os.cpu_count() or 1)) as queue:
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
    var_vals: dict[UOp, int] = field(default_factory=dict)

    def run(self, wait: bool = False) -> float | None:
        if self.runner is None:
            st = time.perf_counter()
            self.bufs[0].copy_from(self.bufs[1])
            return time.perf_counter() - st
        return self.runner(self.bufs, self.var_vals, wait=wait)


# TinyJit pushes a list here while it captures; every ExecItem that runs meanwhile is appended to each of them
# (a jitted function called inside another one's capture belongs to both)
capturing: list[list[ExecItem]] = []
# buffers holding old contents that lazy tensors still read after an assign overwrote the original (copy on write)
copy_on_write_buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()
# likewise for the host-side checks that read back a value computed on the device (index range checks): a replay runs
# them again after its kernels, so a captured check still fires
capturing_checks: list[list[Callable[[], None]]] = []


def exec_item(ei: ExecItem, index: int = 0) -> None:
    for captured in capturing:
        captured.append(ei)
    elapsed = ei.run(wait=DEBUG >= 2)
    if ei.runner is None:
        if DEBUG >= 2:
            b = ei.bufs
            print(f"*** {index:4d} copy {b[1].device} -> {b[0].device} {b[0].nbytes} bytes {elapsed * 1e3:.3f} ms")
        return
    stats["kernels_run"] += 1
    if DEBUG >= 2 and elapsed is not None:
        spec = ei.runner.spec
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
        exec_item(ExecItem(_item_runner(item, bufs[0].device), bufs), i)


# ---------------------------------------------------------------------------------------------------------------------
# the schedule cache


@dataclass(frozen=True)
class CachedStep:
    """A kernel (runner None: a copy) over slots of the call's buffer table."""

    runner: CompiledRunner | None
    slots: tuple[int, ...]


@dataclass(frozen=True)
class CachedSchedule:
    """What realizing one graph structure does: the buffers it allocates, the kernels it runs, the results it leaves.

    Slots 0..n_leaves-1 are the graph's existing BUFFERs in toposort order; the rest are `new_buffers`.
    `results` are the tensors' final uops over placeholder BUFFERs (`_placeholder(slot, ...)`); `becomes` are the
    inner nodes that ended up stored, as (position in the graph's toposort, final uop over placeholders), so that
    other tensors sharing them reuse the stored values instead of recomputing them.
    """

    n_leaves: int
    new_buffers: tuple[tuple[str, int, DType], ...]
    steps: tuple[CachedStep, ...]
    results: tuple[UOp, ...]
    becomes: tuple[tuple[int, UOp], ...]
    # per result: whether its original node may be remembered in becomes_map (not when it holds a STORE)
    remember: tuple[bool, ...]


schedule_cache: dict[tuple, CachedSchedule] = {}


def _placeholder(slot: int, buf: UOp) -> UOp:
    # a BUFFER that never gets storage: negative ids can't collide with UOp.new_buffer's
    return UOp(Ops.BUFFER, buf.dtype, (), (-1 - slot, buf.arg[1], buf.arg[2]))


def _rebuild(topo: Sequence[UOp], mapping: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """Every node of `topo` (in toposort order) with the leaves in `mapping` replaced."""
    new = dict(mapping)
    for u in topo:
        if u in new:
            continue
        if not u.src:
            new[u] = u
            continue
        src = tuple([new[s] for s in u.src])
        new[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
    return new


def _parameterize(sink: UOp) -> tuple[tuple, list[UOp], list[UOp]] | None:
    """The graph with its BUFFERs numbered in toposort order (the cache key), those BUFFERs and the toposort.

    None: not cacheable. Graphs of the same key have the same toposort, node for node.
    """
    topo = list(sink.toposort())
    leaves: list[UOp] = []
    position: dict[UOp, int] = {}
    key = []
    for i, u in enumerate(topo):
        position[u] = i
        if u.op is Ops.BUFFER:
            # a BUFFER is known by its place among the leaves, its device, size and dtype: not by its identity
            key.append((Ops.BUFFER, u.dtype, (-1 - len(leaves), u.arg[1], u.arg[2]), ()))
            leaves.append(u)
            continue
        if u.op is Ops.KERNEL or u.op is Ops.STORE or u in becomes_map:
            # already kernelized, realized by an earlier call, or an assign: the slow path knows how to reuse those
            # (an assign's node must map to its buffer for lazy values built on it, yet run again when rebuilt)
            return None
        key.append((u.op, u.dtype, u.arg, tuple([position[s] for s in u.src])))
    # the graph written out node by node, sources by position: equal keys are the same graph over other buffers
    return tuple(key), leaves, topo


def _record(
    schedule: list[ScheduleItem],
    leaves: list[UOp],
    topo: list[UOp],
    results: Sequence[UOp],
    runners: list[CompiledRunner | None],
    done: dict[UOp, UOp],
) -> CachedSchedule | None:
    slot = {b: i for i, b in enumerate(leaves)}
    placeholders = {b: _placeholder(i, b) for i, b in enumerate(leaves)}
    new_buffers: list[tuple[str, int, DType]] = []
    steps = []
    for item, runner in zip(schedule, runners, strict=True):
        for b in item.bufs:
            if b not in slot:
                slot[b] = len(slot)
                placeholders[b] = _placeholder(slot[b], b)
                new_buffers.append((b.arg[1], b.arg[2], b.dtype))
        steps.append(CachedStep(runner, tuple(slot[b] for b in item.bufs)))
    templates = []
    for r in results:
        r_topo = list(r.toposort())
        if any(u.op is Ops.BUFFER and u not in placeholders for u in r_topo):
            # the result holds storage this schedule didn't make or read: don't guess
            return None
        templates.append(_rebuild(r_topo, placeholders)[r])
    # a node that writes storage must never stand for its result later: rebuilt after its buffer changed, the
    # same (hash-consed) node has to run again
    has_store: dict[UOp, bool] = {}
    for u in topo:
        has_store[u] = u.op is Ops.STORE or any(has_store[x] for x in u.src)
    becomes = []
    for i, u in enumerate(topo):
        if u.op is Ops.BUFFER or u.op is Ops.SINK or has_store[u]:
            continue
        got = becomes_map.get(u)
        if got is None:
            continue
        final = done.get(got.base)
        if final is None:
            continue
        # only values that ended up stored: a view of a buffer this schedule knows
        view = _replay_view(got, final)
        view_topo = list(view.toposort())
        if all(n.op in GroupOp.Movement or n in placeholders for n in view_topo):
            becomes.append((i, _rebuild(view_topo, placeholders)[view]))
    remember = tuple(not has_store[u] for u in topo[-1].src)
    return CachedSchedule(len(leaves), tuple(new_buffers), tuple(steps), tuple(templates), tuple(becomes), remember)


def _replay_view(view: UOp, base: UOp) -> UOp:
    """`view`'s chain of movement ops applied to `base` instead of `view.base`."""
    chain = []
    while view.op in GroupOp.Movement:
        chain.append(view)
        view = view.src[0]
    for n in reversed(chain):
        base = n.replace(src=(base,))
    return base


def _replay(entry: CachedSchedule, tensors: Sequence[Tensor], leaves: list[UOp], topo: list[UOp]) -> None:
    table: list[Buffer] = [_buffer_for(b) for b in leaves]
    new_uops = []
    for device, size, dtype in entry.new_buffers:
        uop = UOp.new_buffer(device, size, dtype)
        buf = buffers[uop] = Buffer(device, size, dtype).allocate()
        table.append(buf)
        new_uops.append(uop)
    if DEBUG >= 1 and entry.steps:
        print(f"schedule: {len(entry.steps)} kernels (cached)")
    for i, step in enumerate(entry.steps):
        exec_item(ExecItem(step.runner, [table[s] for s in step.slots]), i)
    # placeholders back to the real BUFFERs
    actual = {_placeholder(i, b): b for i, b in enumerate(leaves)}
    for j, uop in enumerate(new_uops):
        actual[_placeholder(entry.n_leaves + j, uop)] = uop
    mapping = {}
    for i, template in entry.becomes:
        mapping[topo[i]] = _rebuild(list(template.toposort()), actual)[template]
    for t, template, remember in zip(tensors, entry.results, entry.remember, strict=True):
        new = _rebuild(list(template.toposort()), actual)[template]
        if new is not t.uop:
            if remember:
                # update_tensors moves t too, and remembers what computed it (backward() after a realize needs that)
                mapping[t.uop] = new
            else:
                t.uop = new
    # other live tensors holding these nodes now read the stored values, exactly as on the uncached path (a graph
    # node must never be remembered as "computed" for later graphs: its inputs can be overwritten by an assign)
    update_tensors(mapping)


# ---------------------------------------------------------------------------------------------------------------------
# realize


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    if not tensors:
        return
    sink = UOp(Ops.SINK, src=tuple(t.uop for t in tensors))
    param = _parameterize(sink) if SCHEDULE_CACHE else None
    copies: list[Tensor] = []
    if param is None:
        # a graph with STOREs: other lazy values reading what they overwrite are computed first or get a copy
        readers, copies = protect_pending_reads(tensors, sink)
        tensors = [*tensors, *readers, *copies]
    if param is not None:
        key, leaves, topo = param
        entry = schedule_cache.get(key)
        if entry is not None:
            stats["schedule_hits"] += 1
            _replay(entry, tensors, leaves, topo)
            return
        stats["schedule_misses"] += 1
    schedule, runners, done = _realize_uncached(tensors)
    for c in copies:
        copy_on_write_buffers.add(_buffer_for(c.uop.base))
    if param is not None:
        recorded = _record(schedule, leaves, topo, [t.uop for t in tensors], runners, done)
        if recorded is not None:
            if len(schedule_cache) >= SCHEDULE_CACHE_SIZE:
                del schedule_cache[next(iter(schedule_cache))]
            schedule_cache[key] = recorded


def _realize_uncached(
    tensors: Sequence[Tensor],
) -> tuple[list[ScheduleItem], list[CompiledRunner | None], dict[UOp, UOp]]:
    sink = kernelize_tensors(tensors)
    schedule = create_schedule(sink)
    # a kernel that writes no elements has nothing to do (and its code would be an empty loop): it is done as it is
    empty = [item for item in schedule if item.ast.op is not Ops.COPY and item.bufs[0].arg[2] == 0]
    schedule = [item for item in schedule if item not in empty]
    if DEBUG >= 1 and schedule:
        print(f"schedule: {len(schedule)} kernels")
    precompile(schedule)
    runners = []
    for i, item in enumerate(schedule):
        bufs = [_buffer_for(b) for b in item.bufs]
        runner = _item_runner(item, bufs[0].device)
        runners.append(runner)
        exec_item(ExecItem(runner, bufs), i)
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
    for t in tensors:
        if t.uop.base in done or any(n in done for n in t.uop.toposort()):
            t.uop = t.uop.substitute(done, name="realized")
    return schedule, runners, done


__all__ = [
    "CompiledRunner",
    "ExecItem",
    "get_runner",
    "method_cache",
    "realize_tensors",
    "run_schedule",
    "schedule_cache",
    "stats",
]

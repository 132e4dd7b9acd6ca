"""Realize tensors: kernelize, schedule, compile each kernel once per (AST, device), run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uopkit.codegen import ProgramSpec, get_program
from uopkit.device import Buffer, Compiled, CompileError, Device
from uopkit.helpers import DEBUG
from uopkit.schedule import ScheduleItem, create_schedule, kernelize_tensors, update_tensors
from uopkit.schedule.grouper import is_kernel_store
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor import Tensor


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
stats = {"kernels_compiled": 0, "compile_seconds": 0.0, "kernels_run": 0}


def get_runner(ast: UOp, device: str) -> CompiledRunner:
    key = (ast, device)
    if key in method_cache:
        return method_cache[key]
    dev = Device[device]
    st = time.perf_counter()
    spec = get_program(ast, dev.renderer)
    if DEBUG >= 4:
        print(spec.src)
    try:
        lib = dev.compiler.compile_cached(spec.src)
    except CompileError as e:
        raise CompileError(f"kernel {spec.name} failed to compile on {device}: {e.message}", spec.src) from None
    program = dev.runtime(spec.name, lib)
    elapsed = time.perf_counter() - st
    stats["kernels_compiled"] += 1
    stats["compile_seconds"] += elapsed
    runner = method_cache[key] = CompiledRunner(spec, dev, program, elapsed)
    return runner


def _buffer_for(buf: UOp) -> Buffer:
    from uopkit.tensor import buffers

    if buf not in buffers:
        _, device, size = buf.arg
        buffers[buf] = Buffer(device, size, buf.dtype).allocate()
    return buffers[buf]


def run_schedule(schedule: list[ScheduleItem]) -> None:
    for i, item in enumerate(schedule):
        bufs = [_buffer_for(b) for b in item.bufs]
        if item.ast.op is Ops.COPY:
            st = time.perf_counter()
            bufs[0].copy_from(bufs[1])
            if DEBUG >= 2:
                print(
                    f"*** {i:4d} copy {bufs[1].device} -> {bufs[0].device} {bufs[0].nbytes} bytes "
                    f"{(time.perf_counter() - st) * 1e3:.3f} ms"
                )
            continue
        runner = get_runner(item.ast, bufs[0].device)
        elapsed = runner(bufs, wait=DEBUG >= 2)
        stats["kernels_run"] += 1
        if DEBUG >= 2 and elapsed is not None:
            gflops = runner.spec.estimated_flops / max(elapsed, 1e-9) / 1e9
            gbs = runner.spec.estimated_bytes / max(elapsed, 1e-9) / 1e9
            print(f"*** {i:4d} {runner.spec.name:30s} {elapsed * 1e6:9.2f} us {gflops:8.2f} GFLOP/s {gbs:8.2f} GB/s")


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    sink = kernelize_tensors(tensors)
    schedule = create_schedule(sink)
    if DEBUG >= 1 and schedule:
        print(f"schedule: {len(schedule)} kernels")
    run_schedule(schedule)
    # every STORE that ran is now just its storage
    done: dict[UOp, UOp] = {}
    for item in schedule:
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

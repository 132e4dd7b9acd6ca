"""The reference emulator: a backend built into the core that runs linear programs by interpreting their UOps.

It is the executable definition of the program spec (``uopkit.uop.spec.spec_program``) and a complete backend:

- `EmulatorRenderer` "renders" a program as a readable listing of its UOps plus the serialized UOps,
- `EmulatorCompiler` checks the program against the spec and returns the serialized UOps,
- `EmulatorProgram` interprets them with numpy on buffers from `EmulatorAllocator` (numpy byte arrays).

``EMULATE=NAME`` (any installed backend, e.g. ``EMULATE=CUDA``) makes the emulator take that backend's renderer
capabilities (locals, vector widths, tensor cores, extra rewrite rules), so the core produces the programs that
backend would get, and they run here, on a CPU.

How programs run. All threads of a launch run in lockstep, one UOp at a time, as the lanes of numpy arrays: a
value is an array with one entry per lane (or a single entry when it is the same for every lane). SPECIAL thread
and group ids therefore cost nothing extra, barriers are satisfied by construction, local memory is one row per
workgroup, and a WMMA gathers the fragments of its `threads` lanes. A loop whose iterations are independent (found
from its body: see `plan_loop`) runs as more lanes instead of a Python loop, and so does a reduction loop, whose
lanes are combined afterwards; every other loop is a Python loop. Loops with bounds that differ between lanes run
to the largest bound with the finished lanes masked off. Every memory access is bounds-checked, and a vector access
alignment-checked when the emulated backend's vectors need aligned addresses (``caps.vector_align``).

Semantics are those of the C renderer: integers wrap, IDIV and MOD truncate toward zero with x/0 = 0, x%0 = 0
and x/-1 = -x, MAX propagates NaN, a float cast to an integer maps NaN to 0, a gated LOAD gives 0.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import os
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from uopkit.device import Compiled, CompileError, Compiler, LRUAllocator
from uopkit.dtype import DType, PtrDType, VecDType, dtype_from_fields, dtypes, to_numpy_dtype
from uopkit.plugin.hookspecs import BackendInfo, hookimpl
from uopkit.renderer import Renderer, RendererCaps, TensorCore, TileLayout, vector_alignment
from uopkit.renderer.tensor_cores import ONE_THREAD_TENSOR_CORES, reference_wmma
from uopkit.uop.ops import GroupOp, Ops, UOp, exec_alu

__version__ = "0.1.0"
NAME = "EMULATOR"


class EmulatorError(RuntimeError):
    """A program did something the spec does not allow (out-of-bounds access, malformed op, ...)."""


# ------------------------------------------------------------------------------------------ serialization

PAYLOAD_MARK = "// payload: "
# the dataclasses a program may hold (dtypes, tensor core descriptions), rebuilt by name from this list only
_SERIALIZABLE: dict[str, type] = {c.__name__: c for c in (DType, VecDType, PtrDType, TensorCore, TileLayout)}


def _encode_value(x: Any) -> Any:
    """A UOp arg or dtype as JSON data: tagged lists for what JSON lacks (tuples, exact floats, dataclasses)."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        # hex keeps every bit (and nan, inf, -0.0), which JSON numbers don't
        return ["f", x.hex()]
    if isinstance(x, (tuple, list)):
        return ["t" if isinstance(x, tuple) else "l", [_encode_value(v) for v in x]]
    if isinstance(x, Ops):
        return ["op", x.name]
    cls = type(x)
    if _SERIALIZABLE.get(cls.__name__) is cls:
        return ["dc", cls.__name__, {f.name: _encode_value(getattr(x, f.name)) for f in dataclasses.fields(x)}]
    raise EmulatorError(f"can't serialize a UOp arg of type {cls.__name__}: {x!r}")


def _decode_value(x: Any) -> Any:
    if not isinstance(x, list):
        return x
    tag = x[0]
    if tag == "f":
        return float.fromhex(x[1])
    if tag in ("t", "l"):
        items = [_decode_value(v) for v in x[1]]
        return tuple(items) if tag == "t" else items
    if tag == "op":
        return Ops[x[1]]
    if tag == "dc" and x[1] in _SERIALIZABLE:
        cls, fields = _SERIALIZABLE[x[1]], {k: _decode_value(v) for k, v in x[2].items()}
        # a dtype is one object per type (compared by identity): the one already made
        return dtype_from_fields(cls, **fields) if issubclass(cls, DType) else cls(**fields)
    raise ValueError(f"unknown tagged value {x!r}")


def encode_program(name: str, uops: list[UOp]) -> bytes:
    """The program as bytes (zlib-compressed JSON, never pickle): a flat table of nodes (op, dtype, source indices,
    arg) and the linear order."""
    index: dict[UOp, int] = {}
    nodes: list[list[Any]] = []
    for root in uops:
        for u in root.toposort():
            if u not in index:
                index[u] = len(nodes)
                nodes.append([u.op.name, _encode_value(u.dtype), [index[s] for s in u.src], _encode_value(u.arg)])
    data = {"name": name, "nodes": nodes, "order": [index[u] for u in uops]}
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode())


def decode_program(lib: bytes) -> tuple[str, list[UOp]]:
    data = json.loads(zlib.decompress(lib))
    built: list[UOp] = []
    for op, dtype, src, arg in data["nodes"]:
        built.append(UOp(Ops[op], _decode_value(dtype), tuple(built[i] for i in src), _decode_value(arg)))
    return data["name"], [built[i] for i in data["order"]]


def listing(uops: list[UOp]) -> list[str]:
    """One line per UOp: position, op, dtype, sources (by position) and arg."""
    pos = {u: i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        srcs = ", ".join(str(pos[s]) if s in pos else s.op.name for s in u.src)
        arg = "" if u.arg is None else f" {u.arg}"
        lines.append(f"{i:4d} {u.op.name:<13s} {u.dtype!s:<22s} ({srcs}){arg}")
    return lines


# ------------------------------------------------------------------------------------------ the backend parts

EMULATOR_DTYPES: tuple[DType, ...] = (
    dtypes.bool,
    *dtypes.ints,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
)


# ------------------------------------------------------------------------------------------ bfloat16
# numpy has no bfloat16: a bfloat16 value is held as the float32 it equals (its bits are the float32's top half),
# and memory holds the 16-bit patterns


def bf16_to_float32(bits: Any) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> the float32 values they encode (exactly)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(x: Any) -> np.ndarray:
    """float values -> the nearest bfloat16 bit patterns (ties to even, overflow to inf, NaN stays NaN)."""
    f = np.asarray(x).astype(np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0) | ((b >> 16) & 0x8000).astype(np.uint16), rounded)


def round_bf16(x: Any) -> np.ndarray:
    """float values rounded to the nearest bfloat16, as float32."""
    return bf16_to_float32(float32_to_bf16_bits(x))


class EmulatorRenderer(Renderer):
    """Serializes the program; with `target` set, takes the target renderer's capabilities (its whole `caps`) and
    its `extra_matcher`, so the core builds exactly the programs the target would get."""

    device: ClassVar[str] = NAME
    caps = RendererCaps(
        max_vector_width=8, tensor_cores=tuple(ONE_THREAD_TENSOR_CORES), supported_dtypes=EMULATOR_DTYPES
    )

    def __init__(self, target: Renderer | None = None) -> None:
        self.target = target
        if target is not None:
            # the dtypes the emulator can't hold are left out: those kernels can't run here
            dts = tuple(d for d in target.caps.supported_dtypes if d in EMULATOR_DTYPES)
            self.caps = replace(target.caps, supported_dtypes=dts)
            self.extra_matcher = target.extra_matcher  # type: ignore[misc]

    @property
    def emulating(self) -> str | None:
        return None if self.target is None else (self.target.device or type(self.target).__name__)

    def render(self, name: str, uops: list[UOp]) -> str:
        title = f"// uopkit emulator program {name}" + (f" (emulating {self.emulating})" if self.target else "")
        payload = base64.b64encode(encode_program(name, uops)).decode()
        return "\n".join([title, *("// " + line for line in listing(uops)), PAYLOAD_MARK + payload])


class EmulatorCompiler(Compiler):
    """ "Compiling" checks the program against the spec and keeps its serialized UOps."""

    def __init__(self) -> None:
        super().__init__(cache_key=f"emulator {__version__}")

    def compile(self, src: str) -> bytes:
        from uopkit.uop.spec import SpecError, verify_program

        payload = next((line[len(PAYLOAD_MARK) :] for line in src.splitlines() if line.startswith(PAYLOAD_MARK)), None)
        if payload is None:
            raise CompileError("no payload line: this is not an emulator program", src, compiler="uopkit emulator")
        try:
            lib = base64.b64decode(payload)
            _, uops = decode_program(lib)
        except Exception as e:
            raise CompileError(f"corrupt payload: {type(e).__name__}: {e}", src, compiler="uopkit emulator") from None
        try:
            verify_program(uops)
            check_supported(uops)
        except (SpecError, EmulatorError) as e:
            raise CompileError(str(e), src, compiler="uopkit emulator") from None
        return lib


class EmulatorAllocator(LRUAllocator):
    """Device memory is numpy byte arrays (zeroed)."""

    def _alloc(self, size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.uint8)

    def copyin(self, dest: np.ndarray, src: memoryview) -> None:
        dest[: src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, src: np.ndarray) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src[: dest.nbytes]

    reads_at_offset = True

    def copyout_at(self, dest: memoryview, src: np.ndarray, offset: int) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src[offset : offset + dest.nbytes]

    writes_at_offset = True

    def copyin_at(self, dest: np.ndarray, src: memoryview, offset: int) -> None:
        dest[offset : offset + src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    # EMULATOR and EMULATOR:1 share the host's memory
    supports_transfer = True

    def transfer(
        self, dest: np.ndarray, src: np.ndarray, size: int, src_device: Compiled, dest_device: Compiled
    ) -> None:
        dest[:size] = src[:size]


class EmulatorProgram:
    """A program the emulator runs: ``prg(*bufs, global_size=..., local_size=..., vals=..., wait=...)``.

    Buffers are `EmulatorAllocator` handles (numpy uint8 arrays), in DEFINE_GLOBAL order; `vals` are the values
    of the program's DEFINE_VARs sorted by name (``ProgramSpec.vars``). The launch sizes come from the program's
    SPECIAL ops, so `global_size` and `local_size` are accepted and ignored.
    """

    def __init__(self, name: str, lib: bytes, vector_align: int = 0) -> None:
        self.name = name
        _, self.uops = decode_program(lib)
        self.structure = Structure.of(self.uops)
        # the emulated backend's `caps.vector_align`: a misaligned vector access is an error, as it faults on a GPU
        self.vector_align = vector_align

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        start = time.perf_counter()
        Interpreter(self.uops, self.structure, vector_align=self.vector_align).run(list(bufs), tuple(vals))
        return time.perf_counter() - start if wait else None


def run_uops(
    uops: list[UOp], bufs: list[np.ndarray], vals: tuple[int, ...] = (), vectorize: bool = True, vector_align: int = 0
) -> None:
    """Interpret a linear program on numpy arrays (one per DEFINE_GLOBAL, any dtype, modified in place).

    With ``vectorize=False`` every loop runs as a Python loop (slow; the definition the fast path is tested against).
    With `vector_align` (a backend's `RendererCaps.vector_align`) a misaligned vector access is an error.
    """
    raw = [np.ascontiguousarray(b).reshape(-1).view(np.uint8) for b in bufs]
    Interpreter(uops, Structure.of(uops), vectorize=vectorize, vector_align=vector_align).run(raw, vals)


def _target_renderer(name: str) -> Renderer:
    """The renderer of installed backend `name`, for EMULATE=NAME: from ``BackendInfo.renderer`` when the backend
    provides it (no device needed), else from the opened device."""
    from uopkit.device import Device, DeviceError

    canonical = Device.canonicalize(name).partition(":")[0]
    statuses = Device.backends()
    status = statuses.get(canonical)
    if status is None:
        known = ", ".join(sorted(statuses))
        raise DeviceError(f"EMULATE={name}: no installed backend is called {canonical}; installed: {known}")
    hint = "give its BackendInfo a renderer= (a function that builds the renderer without opening a device)"
    if status.info is not None and status.info.renderer is not None:
        renderer = status.info.renderer()
        if not isinstance(getattr(renderer, "caps", None), RendererCaps):
            raise DeviceError(
                f"EMULATE={name}: BackendInfo.renderer of {canonical} ({status.plugin}) returned "
                f"{type(renderer).__name__}, not a renderer with caps (a uopkit.renderer.Renderer): it must build "
                "and return the backend's renderer"
            )
        return renderer
    if not status.usable:
        raise DeviceError(
            f"EMULATE={name}: backend {canonical} cannot be opened here ({status.reason}) and does not provide "
            f"BackendInfo.renderer, so its renderer settings are unknown; {hint}"
        )
    try:
        return Device[canonical].renderer
    except DeviceError as e:
        raise DeviceError(f"EMULATE={name}: {e}\n(EMULATE takes the renderer of the opened device; {hint})") from e


def open_emulator(device: str, emulate: str | None = None) -> Compiled:
    """Build an emulator device (what the EMULATOR BackendInfo.open returns); `emulate` defaults to $EMULATE."""
    emulate = os.environ.get("EMULATE") if emulate is None else emulate
    target = _target_renderer(emulate) if emulate and emulate.upper() != NAME else None
    return emulator_device(device, target)


def emulator_device(device: str, target: Renderer | None = None) -> Compiled:
    """An emulator device named `device` that builds the programs `target` would get (its caps) and runs them,
    with `target`'s alignment rule for vector accesses checked."""
    renderer = EmulatorRenderer(target)
    program = functools.partial(EmulatorProgram, vector_align=renderer.caps.vector_align)
    return Compiled(device, EmulatorAllocator(), renderer, EmulatorCompiler(), program)


def _open(device: str) -> Compiled:
    return open_emulator(device)


@hookimpl
def uopkit_backends() -> list[BackendInfo]:
    from uopkit.uop.spec import SPEC_VERSION

    return [
        BackendInfo(
            name=NAME,
            version=__version__,
            spec_version=SPEC_VERSION,
            # the slowest device: the default only when nothing else is installed
            priority=-1000,
            open=_open,
            availability=lambda: None,
            description="reference emulator: interprets linear UOps with numpy (EMULATE=NAME takes NAME's settings)",
            renderer=EmulatorRenderer,
        )
    ]


# ------------------------------------------------------------------------------------------ program structure

SUPPORTED_OPS = (
    GroupOp.ALU
    | {Ops.CAST, Ops.BITCAST, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.DEFINE_VAR}
    | {Ops.SPECIAL, Ops.RANGE, Ops.END, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.IF, Ops.ENDIF, Ops.BARRIER}
    | {Ops.VECTORIZE, Ops.GEP, Ops.WMMA, Ops.NOOP, Ops.SINK}
)


def check_supported(uops: list[UOp]) -> None:
    for u in uops:
        if u.op not in SUPPORTED_OPS:
            raise EmulatorError(f"the emulator does not run {u.op.name}")


@dataclass(frozen=True)
class Reduction:
    """Register slots a loop only updates as ``slot = slot OP value`` (so its iterations may run as lanes): `count`
    consecutive scalar columns from `column` (a vector update covers several)."""

    register: UOp
    column: int
    op: Ops
    count: int = 1

    @property
    def columns(self) -> slice:
        return slice(self.column, self.column + self.count)


@dataclass
class LoopPlan:
    """How a RANGE runs: "lanes" (iterations are independent), "reduce" (independent but for `reductions`, which
    are combined after the loop) or "sequential"."""

    mode: str
    reductions: tuple[Reduction, ...] = ()


@dataclass
class Structure:
    """Where each RANGE and IF of a linear program closes, how each loop may run, and the SPECIALs."""

    closes: dict[int, int]
    specials: list[UOp]
    loops: dict[int, LoopPlan]

    @staticmethod
    def of(uops: list[UOp]) -> Structure:
        pos = {u: i for i, u in enumerate(uops)}
        closes: dict[int, int] = {}
        for i, u in enumerate(uops):
            if u.op is Ops.END:
                opener = u.src[1]
            elif u.op is Ops.ENDIF:
                opener = u.src[0]
            else:
                continue
            if opener not in pos or pos[opener] > i:
                raise EmulatorError(f"{u.op.name} at {i} closes a {opener.op.name} that does not come before it")
            closes[pos[opener]] = i
        for i, u in enumerate(uops):
            if u.op in (Ops.RANGE, Ops.IF) and i not in closes:
                raise EmulatorError(f"{u.op.name} at {i} is never closed")
        users: dict[UOp, list[UOp]] = {}
        for u in uops:
            for s in u.src:
                users.setdefault(s, []).append(u)
        loops = {i: plan_loop(uops, i, closes, users) for i, u in enumerate(uops) if u.op is Ops.RANGE}
        return Structure(closes, [u for u in uops if u.op is Ops.SPECIAL], loops)


SEQUENTIAL = LoopPlan("sequential")
REDUCE_OPS = (Ops.ADD, Ops.MUL, Ops.MAX)


def plan_loop(uops: list[UOp], start: int, closes: dict[int, int], users: dict[UOp, list[UOp]]) -> LoopPlan:
    """Decide from the loop body alone whether running its iterations at once gives the sequential result.

    Iterations are independent when every register the body touches is first written directly in the body (a
    fresh accumulator per iteration), the body writes no local memory, and a global buffer it both reads and writes
    is read only where the same iteration writes, at an address computed from the loop counters alone. Registers
    that the body only updates with one ADD/MUL/MAX of their own value are reductions: each lane starts from the
    identity and the lanes are combined afterwards.
    """
    body = uops[start + 1 : closes[start]]
    depth = 0
    first_access: dict[UOp, tuple[str, int]] = {}
    reg_loads: dict[UOp, list[UOp]] = {}
    reg_stores: dict[UOp, list[UOp]] = {}
    global_loads: dict[UOp, set[UOp]] = {}
    global_stores: dict[UOp, set[UOp]] = {}
    for u in body:
        if u.op in (Ops.RANGE, Ops.IF):
            depth += 1
        elif u.op in (Ops.END, Ops.ENDIF):
            depth -= 1
        if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
            continue
        index = u.src[0]
        mem = index.src[0]
        if mem.op is Ops.DEFINE_LOCAL and u.op is Ops.STORE:
            return SEQUENTIAL
        if mem.op is Ops.DEFINE_REG:
            first_access.setdefault(mem, (u.op.name, depth if len(index.src) == 2 else -1))
            (reg_loads if u.op is Ops.LOAD else reg_stores).setdefault(index, []).append(u)
        elif mem.op is Ops.DEFINE_GLOBAL:
            (global_loads if u.op is Ops.LOAD else global_stores).setdefault(mem, set()).add(index.src[1])
    for mem, offsets in global_stores.items():
        if not global_loads.get(mem, set()) <= offsets or len(offsets) > 1 and mem in global_loads:
            return SEQUENTIAL
        # an address read from memory (a scatter's target) can be the same in two iterations: they run in order
        if mem in global_loads and any(u.op is Ops.LOAD for o in offsets for u in o.toposort()):
            return SEQUENTIAL
    carried = {mem for mem, access in first_access.items() if access != ("STORE", 0)}
    if not carried:
        return LoopPlan("lanes")
    if global_stores:
        return SEQUENTIAL
    reductions = []
    for index in {i for i in (*reg_loads, *reg_stores) if i.src[0] in carried}:
        loads, stores = reg_loads.get(index, []), reg_stores.get(index, [])
        if len(loads) != 1 or len(stores) != 1 or len(index.src) != 2 or index.src[1].op is not Ops.CONST:
            return SEQUENTIAL
        load, update = loads[0], stores[0].src[1]
        if update.op not in REDUCE_OPS or load not in update.src or users.get(load, []) != [update]:
            return SEQUENTIAL
        if update.src[0] is update.src[1]:
            return SEQUENTIAL
        width = index.src[0].dtype.base.count
        reductions.append(Reduction(index.src[0], int(index.src[1].arg) * width, update.op, update.dtype.count))
    # every access to a carried register must belong to a reduction
    reduced = {r.register for r in reductions}
    if reduced != carried:
        return SEQUENTIAL
    return LoopPlan("reduce", tuple(reductions))


# ------------------------------------------------------------------------------------------ the interpreter


@dataclass(eq=False)
class Frame:
    """The lanes running at one point: `lanes` of them, `per_thread` per original thread (lifted loops)."""

    lanes: int
    per_thread: int
    mask: np.ndarray | None
    group: np.ndarray
    parent: Frame | None = None


@dataclass(eq=False)
class Memory:
    """A buffer: globals are 1-D, locals one row per workgroup, registers one row per lane."""

    kind: str
    data: np.ndarray
    name: str
    width: int = 1
    # global bfloat16 memory holds bit patterns (uint16): loads and stores convert
    bf16_bits: bool = False
    # local memory: per element, the work-item (root lane) that wrote it last and the barrier epoch it did so in, and
    # the one that read it (-2: several) in epoch `read_in`
    writer: np.ndarray | None = None
    written_in: np.ndarray | None = None
    reader: np.ndarray | None = None
    read_in: np.ndarray | None = None


@dataclass(eq=False)
class Pointer:
    """An INDEX: memory, element offset, optional gate (values with their frames)."""

    memory: Memory
    offset: tuple[Any, Frame | None]
    gate: tuple[Any, Frame | None] | None
    uop: UOp = field(repr=False, default=None)  # type: ignore[assignment]


def _np(dt: DType) -> np.dtype:
    # bfloat16 values are held as float32 (rounded to bfloat16 after every op)
    return np.dtype(np.float32) if dt.scalar == dtypes.bfloat16 else to_numpy_dtype(dt.scalar)


def _scalar_value(u: UOp, vals: dict[UOp, int]) -> int:
    # launch sizes are consts or arithmetic on variables
    if u.op is Ops.CONST:
        return int(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return vals[u]
    if u.op in GroupOp.ALU:
        return int(exec_alu(u.op, u.dtype, [_scalar_value(s, vals) for s in u.src]))
    raise EmulatorError(f"a SPECIAL's size must be computable before launch, but it uses {u.op.name}")


class Interpreter:
    def __init__(self, uops: list[UOp], structure: Structure, vectorize: bool = True, vector_align: int = 0) -> None:
        self.uops = uops
        self.structure = structure
        self.vectorize = vectorize
        self.vector_align = vector_align
        self.env: dict[UOp, Any] = {}
        self.registers: list[Memory] = []
        # BARRIERs passed so far: local memory written in an earlier epoch is visible to every work-item of the group
        self.epoch = 0

    # ---- values

    def value(self, u: UOp) -> Any:
        """The value of `u` in the current frame (expanded to its lanes when it was computed in an outer frame)."""
        arr, frame = self.env[u]
        if frame is None or frame is self.frame:
            return arr
        return np.repeat(arr, self.frame.lanes // frame.lanes, axis=0)

    def laned(self, arr: Any, dtype: DType) -> np.ndarray:
        """`arr` broadcast to one entry per lane of the current frame."""
        arr = np.asarray(arr)
        shape = (self.frame.lanes,) + ((dtype.count,) if dtype.count > 1 else ())
        return np.broadcast_to(arr, shape)

    def bind(self, u: UOp, arr: Any) -> None:
        arr = np.asarray(arr)
        has_lanes = arr.ndim > (1 if u.dtype.count > 1 else 0)
        self.env[u] = (arr, self.frame if has_lanes else None)

    # ---- running

    def run(self, bufs: list[np.ndarray], vals: tuple[int, ...]) -> None:
        variables = sorted({u for u in self.uops if u.op is Ops.DEFINE_VAR}, key=lambda u: u.arg[0])
        if len(vals) != len(variables):
            names = [v.arg[0] for v in variables]
            raise EmulatorError(f"the program has variables {names} but got {len(vals)} values")
        var_vals = dict(zip(variables, vals, strict=True))
        n_globals = 1 + max((u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL), default=-1)
        if len(bufs) != n_globals:
            raise EmulatorError(f"the program takes {n_globals} buffers but got {len(bufs)}")
        # launch: lanes are (group, local thread), group-major, x fastest
        groups, locals_ = [1, 1, 1], [1, 1, 1]
        global_ids = [1, 1, 1]
        for s in self.structure.specials:
            name = s.arg[0] if isinstance(s.arg, tuple) else s.arg
            dim = int(name[-1]) if name[-1].isdigit() else 0
            size = _scalar_value(s.src[0], var_vals)
            table = {"g": groups, "l": locals_, "i": global_ids}.get(name[0])
            if table is None:
                raise EmulatorError(f"SPECIAL {name!r}: names start with g (group), l (local) or i (global id)")
            table[dim] = size
        n_groups, n_local = math.prod(groups) * math.prod(global_ids), math.prod(locals_)
        self.n_local = n_local
        self.launch = (groups, global_ids, locals_)
        lanes = n_groups * n_local
        lane = np.arange(lanes)
        self.frame = Frame(lanes, 1, None, lane // max(n_local, 1))
        self.root = self.frame
        group_lin, local_lin = lane // max(n_local, 1), lane % max(n_local, 1)
        special_values: dict[str, np.ndarray] = {}
        g_rest, i_rest, l_rest = group_lin // math.prod(global_ids), group_lin % math.prod(global_ids), local_lin
        for d in range(3):
            special_values[f"g{d}"], g_rest = g_rest % groups[d], g_rest // groups[d]
            special_values[f"i{d}"], i_rest = i_rest % global_ids[d], i_rest // global_ids[d]
            special_values[f"l{d}"], l_rest = l_rest % locals_[d], l_rest // locals_[d]
        if lanes == 0:
            return
        self.special_values = special_values
        self.var_vals = var_vals
        self.bufs = bufs
        with np.errstate(all="ignore"):
            self.run_block(0, len(self.uops))

    def run_block(self, lo: int, hi: int) -> None:
        i = lo
        uops = self.uops
        while i < hi:
            u = uops[i]
            op = u.op
            if op is Ops.RANGE:
                self.run_range(i)
                i = self.structure.closes[i] + 1
                continue
            if op is Ops.IF:
                self.run_if(i)
                i = self.structure.closes[i] + 1
                continue
            if op is Ops.STORE:
                self.store(u)
            elif op is Ops.BARRIER:
                # lockstep execution: every lane reaches a barrier together; what was written before is now visible
                self.check_barrier(u)
                self.epoch += 1
            elif op in (Ops.END, Ops.ENDIF, Ops.NOOP, Ops.SINK):
                pass
            else:
                self.compute(u)
            i += 1

    def run_if(self, i: int) -> None:
        u = self.uops[i]
        cond = self.laned(self.value(u.src[0]), dtypes.bool)
        old = self.frame.mask
        self.frame.mask = cond if old is None else (old & cond)
        try:
            self.run_block(i + 1, self.structure.closes[i])
        finally:
            self.frame.mask = old

    def run_range(self, i: int) -> None:
        u = self.uops[i]
        end_pos = self.structure.closes[i]
        end = np.asarray(self.value(u.src[0]))
        if end.size == 0:
            return
        uniform = end.ndim == 0 or bool(np.all(end == end.reshape(-1)[0]))
        plan = self.structure.loops[i] if self.vectorize else SEQUENTIAL
        if plan.mode != "sequential" and uniform:
            n = int(end.reshape(-1)[0])
            if n > 0:
                self.run_lifted(u, i + 1, end_pos, n, plan.reductions)
            return
        # a sequential loop; lanes whose bound is lower sit out the last iterations
        top = int(end.max()) if end.ndim else int(end)
        old_mask = self.frame.mask
        try:
            for it in range(top):
                if not uniform:
                    running = self.laned(end, dtypes.index) > it
                    self.frame.mask = running if old_mask is None else (old_mask & running)
                    if not self.frame.mask.any():
                        continue
                self.env[u] = (np.asarray(it, dtype=_np(u.dtype)), None)
                self.run_block(i + 1, end_pos)
        finally:
            self.frame.mask = old_mask

    def run_lifted(self, u: UOp, lo: int, hi: int, n: int, reductions: tuple[Reduction, ...] = ()) -> None:
        """Run the loop body once with `n` lanes per current lane, one per iteration."""
        outer = self.frame
        mask = None if outer.mask is None else np.repeat(outer.mask, n)
        self.frame = Frame(outer.lanes * n, outer.per_thread * n, mask, np.repeat(outer.group, n), outer)
        before = {r: self.env[r.register].data[:, r.columns].copy() for r in reductions}
        for reg in self.registers:
            reg.data = np.repeat(reg.data, n, axis=0)
        for r in reductions:
            data = self.env[r.register].data
            data[:, r.columns] = _identity(r.op, data.dtype)
        self.env[u] = (np.tile(np.arange(n, dtype=_np(u.dtype)), outer.lanes), self.frame)
        try:
            self.run_block(lo, hi)
        finally:
            per_iteration = {
                r: self.env[r.register].data[:, r.columns].reshape(outer.lanes, n, r.count) for r in reductions
            }
            # a register keeps what the last iteration left in it, a reduction combines every iteration
            for reg in self.registers:
                reg.data = reg.data.reshape(outer.lanes, n, *reg.data.shape[1:])[:, -1].copy()
            for r, values in per_iteration.items():
                data = self.env[r.register].data
                data[:, r.columns] = _combine(r.op, before[r], _reduce(r.op, values))
            self.frame = outer

    # ---- pure ops

    def compute(self, u: UOp) -> None:
        op = u.op
        if op is Ops.CONST:
            value = np.asarray(u.arg, dtype=_np(u.dtype))
            self.bind(u, round_bf16(value) if u.dtype.scalar == dtypes.bfloat16 else value)
        elif op is Ops.DEFINE_GLOBAL:
            self.define_global(u)
        elif op is Ops.DEFINE_LOCAL:
            size = max(u.dtype.size, 0)
            data = np.zeros((int(self.root.group.max()) + 1, size * u.dtype.base.count), _np(u.dtype.base))
            name = u.arg if isinstance(u.arg, str) else f"local{u.arg}"
            never = np.full(data.shape, -1, np.int64)
            track = {k: never.copy() for k in ("writer", "written_in", "reader", "read_in")}
            self.env[u] = Memory("local", data, name, u.dtype.base.count, **track)
        elif op is Ops.DEFINE_REG:
            size = max(u.dtype.size, 1)
            data = np.zeros((self.frame.lanes, size * u.dtype.base.count), _np(u.dtype.base))
            mem = Memory("register", data, f"acc{u.arg}", u.dtype.base.count)
            self.registers.append(mem)
            self.env[u] = mem
        elif op is Ops.DEFINE_VAR:
            self.bind(u, np.asarray(self.var_vals[u], dtype=_np(u.dtype)))
        elif op is Ops.SPECIAL:
            name = u.arg[0] if isinstance(u.arg, tuple) else u.arg
            dim = int(name[-1]) if name[-1].isdigit() else 0
            values = self.special_values[f"{name[0]}{dim}"].astype(np.int32)
            self.env[u] = (values, self.root)
        elif op is Ops.INDEX:
            mem = self.env[u.src[0]]
            if not isinstance(mem, Memory):
                raise EmulatorError(f"INDEX into {u.src[0].op.name}, which is not memory")
            gate = self.env[u.src[2]] if len(u.src) > 2 else None
            self.env[u] = Pointer(mem, self.env[u.src[1]], gate, u)
        elif op is Ops.LOAD:
            self.bind(u, self.load(u))
        elif op in GroupOp.ALU:
            args = [self.value(s) for s in u.src]
            if op is Ops.WHERE and u.dtype.count > 1 and u.src[0].dtype.count == 1 and np.ndim(args[0]) == 1:
                # one condition per lane for a vector per lane: it picks whole vectors (lanes first, then the
                # vector's elements; broadcast as it is it would line up with the elements)
                args[0] = np.asarray(args[0])[:, None]
            self.bind(u, alu(op, u.dtype, args))
        elif op is Ops.CAST:
            self.bind(u, cast(self.value(u.src[0]), u.src[0].dtype, u.dtype))
        elif op is Ops.BITCAST:
            self.bind(u, self.bitcast(u))
        elif op is Ops.VECTORIZE:
            parts = [self.value(s) for s in u.src]
            if any(np.ndim(p) > 0 for p in parts):
                parts = [self.laned(p, u.dtype.scalar) for p in parts]
            self.bind(u, np.stack(parts, axis=-1).astype(_np(u.dtype)))
        elif op is Ops.GEP:
            idx = u.arg if isinstance(u.arg, tuple) else (u.arg,)
            vec = self.value(u.src[0])
            self.bind(u, vec[..., idx[0]] if len(idx) == 1 else vec[..., list(idx)])
        elif op is Ops.WMMA:
            self.bind(u, self.wmma(u))
        else:
            raise EmulatorError(f"the emulator does not run {op.name}")

    def define_global(self, u: UOp) -> None:
        if not isinstance(u.dtype, PtrDType):
            raise EmulatorError(f"DEFINE_GLOBAL {u.arg} has dtype {u.dtype}, expected a pointer")
        raw = self.bufs[u.arg]
        bf16 = u.dtype.base.scalar == dtypes.bfloat16
        np_dt = np.dtype(np.uint16) if bf16 else _np(u.dtype.base)
        usable = raw.nbytes - raw.nbytes % np_dt.itemsize
        data = raw[:usable].view(np_dt)
        declared = u.dtype.size * u.dtype.base.count
        if 0 <= declared < len(data):
            data = data[:declared]
        self.env[u] = Memory("global", data, f"data{u.arg}", u.dtype.base.count, bf16)

    def bitcast(self, u: UOp) -> np.ndarray:
        src = self.value(u.src[0])
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if src_dt.itemsize != dst_dt.itemsize:
            raise EmulatorError(f"BITCAST from {src_dt} to {dst_dt} changes the size")
        if src_dt.scalar == dtypes.bfloat16:
            src = float32_to_bf16_bits(src)
        # (a copy, not np.ascontiguousarray, which makes a 0-d value, one every lane shares, 1-d)
        arr = np.array(src, dtype=np.uint16 if src_dt.scalar == dtypes.bfloat16 else _np(src_dt), order="C")
        lead = arr.shape[: arr.ndim - (1 if src_dt.count > 1 else 0)]
        bf16_dst = dst_dt.scalar == dtypes.bfloat16
        out = arr.reshape(*lead, -1).view(np.uint8).reshape(*lead, -1).view(np.uint16 if bf16_dst else _np(dst_dt))
        out = bf16_to_float32(out) if bf16_dst else out
        return out.reshape(*lead, dst_dt.count) if dst_dt.count > 1 else out.reshape(lead)

    # ---- memory

    def _access(self, ptr: Pointer, count: int, what: UOp) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(rows, flat element indices, active lanes) for `count` consecutive elements at a pointer."""
        mem = ptr.memory
        offset = self.laned(self._val(ptr.offset), dtypes.index).astype(np.int64)
        active = self.frame.mask
        if ptr.gate is not None:
            gate = self.laned(self._val(ptr.gate), dtypes.bool)
            active = gate if active is None else (active & gate)
        idx = offset[:, None] * mem.width + np.arange(count)[None, :]
        limit = mem.data.shape[-1]
        bad = (idx < 0) | (idx >= limit)
        if active is not None:
            bad &= active[:, None]
        if bad.any():
            lane = int(np.argwhere(bad)[0][0])
            raise EmulatorError(
                f"{what.op.name} out of bounds: element {int(idx[lane].min())}..{int(idx[lane].max())} of "
                f"{mem.kind} {mem.name} which holds {limit} elements ({self.where(what, lane)})"
            )
        if count > 1 and self.vector_align > 0:
            self.check_alignment(what, ptr, idx, active)
        if active is not None:
            idx = np.where(active[:, None], idx, 0)
        if mem.kind == "global":
            rows = np.zeros(0, dtype=np.int64)
        elif mem.kind == "local":
            rows = self.frame.group
        else:
            rows = np.arange(self.frame.lanes)
        return rows, idx, active

    def check_alignment(self, u: UOp, ptr: Pointer, idx: np.ndarray, active: np.ndarray | None) -> None:
        """A vector access must start at an address aligned as the emulated backend needs (buffers' bases are
        taken as aligned to `vector_align`: an allocator and the renderer's declarations guarantee that)."""
        mem = ptr.memory
        # the element's size in the backend's memory (bfloat16 registers are held here as float32)
        itemsize = ptr.uop.src[0].dtype.base.scalar.itemsize
        need = vector_alignment(self.vector_align, idx.shape[1] * itemsize)
        if need <= 1:
            return
        bad = (idx[:, 0] * itemsize) % need != 0
        if active is not None:
            bad &= active
        if bad.any():
            lane = int(np.argmax(bad))
            raise EmulatorError(
                f"{u.op.name} of {idx.shape[1]} elements misaligned: element {int(idx[lane, 0])} of {mem.kind} "
                f"{mem.name} is at byte offset {int(idx[lane, 0]) * itemsize}, not a multiple of {need} "
                f"({self.where(u, lane)})"
            )

    def where(self, u: UOp, lane: int) -> str:
        """Which op (its position in the program) and which work-item a lane of the current frame is."""
        pos = next((i for i, x in enumerate(self.uops) if x is u), -1)
        return f"op {pos}, {self.work_item(lane // self.frame.per_thread)}"

    def work_item(self, root_lane: int) -> str:
        """A lane of the launch as its ids: group (gidx), global id (idx, for kernels that use them), local (lidx)."""
        groups, global_ids, locals_ = self.launch
        group_lin, local = divmod(root_lane, max(self.n_local, 1))
        group, global_id = divmod(group_lin, math.prod(global_ids))

        def ids(name: str, dims: list[int], lin: int) -> str:
            return f"{name}=({', '.join(str(lin // math.prod(dims[:d]) % dims[d]) for d in range(3))})"

        parts = [ids("gidx", groups, group), ids("lidx", locals_, local)]
        if math.prod(global_ids) > 1:
            parts.insert(1, ids("idx", global_ids, global_id))
        return "work-item " + " ".join(parts)

    def check_barrier(self, u: UOp) -> None:
        """A BARRIER must be reached by all work-items of a group or none (on a GPU the others never arrive)."""
        mask = self.frame.mask
        if mask is None:
            return
        groups = self.frame.group
        arrived = np.bincount(groups, weights=mask, minlength=int(groups.max()) + 1)
        total = np.bincount(groups, minlength=int(groups.max()) + 1)
        split = np.flatnonzero((arrived > 0) & (arrived < total))
        if len(split):
            lanes = np.flatnonzero(groups == split[0])
            waiting, missing = lanes[mask[lanes]][0], lanes[~mask[lanes]][0]
            raise EmulatorError(
                f"BARRIER reached by only some work-items of a group ({self.where(u, int(waiting))} waits; "
                f"{self.work_item(int(missing) // self.frame.per_thread)} never arrives)"
            )

    def check_local_race(self, u: UOp, ptr: Pointer, rows: np.ndarray, idx: np.ndarray, active: Any) -> None:
        """Between two BARRIERs a work-item may not read a local element another one wrote, nor write one another one
        read or wrote (on a GPU the work-items don't run in lockstep: the value would depend on timing). Records
        who read or wrote each element, and when."""
        mem = ptr.memory
        assert mem.writer is not None and mem.written_in is not None
        assert mem.reader is not None and mem.read_in is not None
        me = np.arange(self.frame.lanes) // self.frame.per_thread
        lanes = np.arange(self.frame.lanes) if active is None else np.flatnonzero(active)
        if not len(lanes):
            return
        width = idx.shape[1]
        r, i, who = np.repeat(rows[lanes], width), idx[lanes].reshape(-1), np.repeat(me[lanes], width)

        def race(k: int, done: str, other: int) -> EmulatorError:
            by = "several work-items" if other < 0 else self.work_item(other)
            verb = "reads" if u.op is Ops.LOAD else "overwrites"
            return EmulatorError(
                f"{u.op.name} {verb} local {mem.name}[{int(i[k])}], {done} by {by} with no BARRIER since "
                f"({self.where(u, int(lanes[k // width]))})"
            )

        prev, when = mem.writer[r, i], mem.written_in[r, i]
        clash = np.flatnonzero((when == self.epoch) & (prev >= 0) & (prev != who))
        if len(clash):
            k = int(clash[0])
            raise race(k, "written", int(prev[k]))
        # the elements this op touches, each with the lowest and highest work-item touching it
        flat = r * mem.data.shape[-1] + i
        keys, inverse = np.unique(flat, return_inverse=True)
        lo, hi = np.full(len(keys), np.iinfo(np.int64).max), np.full(len(keys), -1)
        np.minimum.at(lo, inverse, who)
        np.maximum.at(hi, inverse, who)
        kr, ki = np.divmod(keys, mem.data.shape[-1])
        if u.op is Ops.STORE:
            several = np.flatnonzero(lo != hi)
            if len(several):
                k = int(np.flatnonzero(inverse == several[0])[0])
                raise EmulatorError(
                    f"STORE to local {mem.name}[{int(i[k])}] by two work-items with no BARRIER between them "
                    f"({self.where(u, int(lanes[k // width]))}; also {self.work_item(int(lo[several[0]]))})"
                )
            reader, read_when = mem.reader[r, i], mem.read_in[r, i]
            clash = np.flatnonzero((read_when == self.epoch) & (reader != who))
            if len(clash):
                k = int(clash[0])
                raise race(k, "read", int(reader[k]))
            mem.writer[kr, ki], mem.written_in[kr, ki] = lo, self.epoch
            return
        # a LOAD: the element's reader this epoch, -2 once a second work-item reads it
        single = np.where(lo == hi, lo, -2)
        before = mem.reader[kr, ki]
        same = (mem.read_in[kr, ki] != self.epoch) | (before == single)
        mem.reader[kr, ki] = np.where(same, single, -2)
        mem.read_in[kr, ki] = self.epoch

    def _val(self, v: tuple[Any, Frame | None]) -> Any:
        arr, frame = v
        if frame is None or frame is self.frame:
            return arr
        return np.repeat(arr, self.frame.lanes // frame.lanes, axis=0)

    def load(self, u: UOp) -> np.ndarray:
        ptr = self.env[u.src[0]]
        if not isinstance(ptr, Pointer):
            raise EmulatorError(f"LOAD from {u.src[0].op.name}, expected an INDEX")
        count = u.dtype.count
        mem = ptr.memory
        if mem.data.shape[-1] == 0:
            # nothing can be read from an empty buffer; every lane must be gated off
            rows, idx, active = self._access(ptr, count, u)
            out = np.zeros(idx.shape, _np(u.dtype))
        else:
            rows, idx, active = self._access(ptr, count, u)
            if mem.kind == "local":
                self.check_local_race(u, ptr, rows, idx, active)
            out = mem.data[idx] if mem.kind == "global" else mem.data[rows[:, None], idx]
            if mem.bf16_bits:
                out = bf16_to_float32(out)
            if active is not None:
                out = np.where(active[:, None], out, np.zeros((), out.dtype))
        out = out.astype(_np(u.dtype), copy=False)
        return out if count > 1 else out[:, 0]

    def store(self, u: UOp) -> None:
        ptr = self.env[u.src[0]]
        if not isinstance(ptr, Pointer):
            raise EmulatorError(f"STORE to {u.src[0].op.name}, expected an INDEX")
        value_dt = u.src[1].dtype
        count = value_dt.count
        rows, idx, active = self._access(ptr, count, u)
        values = self.laned(self.value(u.src[1]), value_dt).reshape(self.frame.lanes, count)
        mem = ptr.memory
        if mem.kind == "local":
            self.check_local_race(u, ptr, rows, idx, active)
        values = float32_to_bf16_bits(values) if mem.bf16_bits else values.astype(mem.data.dtype, copy=False)
        if active is not None:
            idx, values = idx[active], values[active]
            if mem.kind != "global":
                rows = rows[active]
        if mem.kind == "global":
            mem.data[idx.reshape(-1)] = values.reshape(-1)
        else:
            mem.data[np.repeat(rows, count), idx.reshape(-1)] = values.reshape(-1)

    # ---- tensor cores

    def wmma(self, u: UOp) -> np.ndarray:
        tc = u.arg if isinstance(u.arg, TensorCore) else next((a for a in u.arg if isinstance(a, TensorCore)), None)
        if tc is None:
            raise EmulatorError(f"WMMA arg must be (or hold) a TensorCore, got {u.arg!r}")
        ea, eb, ec = tc.elements_per_thread
        expected = (tc.dtype_in.vec(ea), tc.dtype_in.vec(eb), tc.dtype_out.vec(ec))
        got = tuple(s.dtype for s in u.src)
        if got != expected or u.dtype != expected[2]:
            raise EmulatorError(f"WMMA {tc.name} takes {expected} and returns {expected[2]}, got {got} -> {u.dtype}")
        if self.n_local % tc.threads:
            raise EmulatorError(
                f"WMMA {tc.name} needs its {tc.threads} threads in one workgroup, but workgroups have {self.n_local}"
            )
        groups = self.root.lanes // self.n_local
        per = self.frame.per_thread
        warps, threads = self.n_local // tc.threads, tc.threads

        def gather(v: Any, dt: DType) -> np.ndarray:
            lanes = self.laned(v, dt)
            shaped = lanes.reshape(groups, warps, threads, per, dt.count)
            return shaped.transpose(0, 1, 3, 2, 4).reshape(-1, threads, dt.count)

        a, b, c = (gather(self.value(s), dt) for s, dt in zip(u.src, expected, strict=True))
        d = reference_wmma(tc, a, b, c)
        d = d.reshape(groups, warps, per, threads, ec).transpose(0, 1, 3, 2, 4)
        return d.reshape(self.frame.lanes, ec)


# ------------------------------------------------------------------------------------------ ALU semantics


def _identity(op: Ops, np_dt: np.dtype) -> Any:
    if op is Ops.ADD:
        return np.zeros((), np_dt)
    if op is Ops.MUL:
        return np.ones((), np_dt)
    if np_dt == np.bool_:
        return np.zeros((), np_dt)
    return np.array(-np.inf if np_dt.kind == "f" else np.iinfo(np_dt).min, np_dt)


def _reduce(op: Ops, values: np.ndarray) -> np.ndarray:
    """Combine the iterations (axis 1) of a reduction, wrapping like the sequential loop would."""
    if values.dtype == np.bool_:
        return np.logical_and.reduce(values, axis=1) if op is Ops.MUL else np.logical_or.reduce(values, axis=1)
    ufunc = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}[op]
    return ufunc.reduce(values, axis=1, dtype=values.dtype)


def _combine(op: Ops, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.bool_:
        return np.logical_and(a, b) if op is Ops.MUL else np.logical_or(a, b)
    ufunc = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}[op]
    return ufunc(a, b).astype(a.dtype, copy=False)


def _c_idiv(a: np.ndarray, b: np.ndarray, dt: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(quotient truncated toward zero, divisor-is-zero, divisor-is-minus-one) with a safe divisor."""
    zero = b == 0
    minus_one = (b == -1) if not dtypes.is_unsigned(dt) else np.zeros(np.shape(b), dtype=bool)
    safe = np.where(zero | minus_one, np.ones((), _np(dt)), b)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(_np(dt))
    return q, zero, minus_one


def alu(op: Ops, dt: DType, args: list[Any]) -> np.ndarray:
    """One ALU op on numpy values, with the result rounded or wrapped to `dt` (the C renderer's semantics)."""
    np_dt = _np(dt)
    is_bool = dt.scalar == dtypes.bool
    if op is Ops.ADD:
        out = np.logical_or(*args) if is_bool else np.add(*args)
    elif op is Ops.SUB:
        out = np.subtract(*args)
    elif op is Ops.MUL:
        out = np.logical_and(*args) if is_bool else np.multiply(*args)
    elif op is Ops.FDIV:
        out = np.divide(*args)
    elif op in (Ops.IDIV, Ops.MOD):
        if not dtypes.is_int(dt):
            raise EmulatorError(f"{op.name} is defined on integers, got {dt}")
        a, b = args
        q, zero, minus_one = _c_idiv(a, b, dt)
        if op is Ops.IDIV:
            out = np.where(zero, np.zeros((), np_dt), np.where(minus_one, np.negative(a), q))
        else:
            out = np.where(zero | minus_one, np.zeros((), np_dt), a - q * b)
    elif op is Ops.MAX:
        out = np.logical_or(*args) if is_bool else np.maximum(*args)
    elif op is Ops.CMPLT:
        out = np.less(*args)
    elif op is Ops.CMPNE:
        out = np.not_equal(*args)
    elif op is Ops.CMPEQ:
        out = np.equal(*args)
    elif op is Ops.XOR:
        out = np.bitwise_xor(*args)
    elif op is Ops.OR:
        out = np.bitwise_or(*args)
    elif op is Ops.AND:
        out = np.bitwise_and(*args)
    elif op is Ops.SHL:
        out = np.left_shift(args[0], np.asarray(args[1]).astype(np_dt))
    elif op is Ops.SHR:
        out = np.right_shift(args[0], np.asarray(args[1]).astype(np_dt))
    elif op is Ops.POW:
        out = np.power(*args)
    elif op is Ops.WHERE:
        out = np.where(*args)
    elif op is Ops.MULACC:
        out = np.add(np.multiply(args[0], args[1]), args[2])
    elif op is Ops.EXP2:
        out = np.exp2(args[0])
    elif op is Ops.LOG2:
        out = np.log2(args[0])
    elif op is Ops.SIN:
        out = np.sin(args[0])
    elif op is Ops.SQRT:
        out = np.sqrt(args[0])
    elif op is Ops.RECIP:
        out = np.divide(np.ones((), np_dt), args[0])
    elif op is Ops.NEG:
        # C: -b of a _Bool stored back into a _Bool is b
        out = args[0] if is_bool else np.negative(args[0])
    elif op is Ops.TRUNC:
        out = np.trunc(args[0])
    else:
        raise EmulatorError(f"the emulator has no ALU op {op.name}")
    out = np.asarray(out).astype(np_dt, copy=False)
    # bfloat16 ops compute in float32 and round once, as a bfloat16 unit does
    return round_bf16(out) if dt.scalar == dtypes.bfloat16 else out


def cast(x: Any, src: DType, dst: DType) -> np.ndarray:
    """CAST with the C renderer's semantics (to bool is != 0; float to int truncates, NaN becomes 0, and a value
    out of the target's range wraps like a cast through int64)."""
    arr = np.asarray(x)
    if dst.scalar == dtypes.bool:
        return arr != 0
    if dtypes.is_int(dst) and dtypes.is_float(src):
        clean = np.trunc(np.where(np.isfinite(arr), arr, 0))
        wrapped = np.clip(clean, -(2.0**63), 2.0**63 - 1024).astype(np.int64).astype(_np(dst))
        if dst.scalar == dtypes.uint64:
            # a uint64 holds values from 2**63 up, which int64 doesn't: those convert directly, as C's cast does
            return np.where(clean >= 2.0**63, np.clip(clean, 0, 2.0**64 - 2048).astype(np.uint64), wrapped)
        return wrapped
    return round_bf16(arr.astype(np.float32)) if dst.scalar == dtypes.bfloat16 else arr.astype(_np(dst))

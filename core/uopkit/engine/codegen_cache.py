"""Generated programs on disk: a kernel seen by an earlier run skips code generation.

A compiled kernel is already cached on disk by its source (`Compiler.compile_cached`), but the source itself came
from `get_program`: lowering, the rewrite passes, linearizing and rendering, ~10-40 ms of Python per kernel, every
run. A program that meets new shapes (text generation feeding back a longer sequence each step, the last smaller
batch of an epoch) generates ~20 kernels per new shape, and that was all of a step's time with the compiled kernels
on disk. This table (`diskcache` table "codegen") keeps what `get_program` returned for a kernel AST, keyed by
everything the result depends on:

- the AST, written out node by node (op, dtype, sources, arg; a kernel AST holds no buffers, only DEFINE_GLOBALs);
  one whose args include a type this file can't write exactly is not cached;
- the code that generates it: a digest of every module of uopkit and of the renderer's package (any edit is a new
  key, so an entry is never older than the code that would make it);
- the renderer (class, and its public fields: `caps`, a backend's device description), the compiler's `cache_key`
  (backend version, compiler, flags, host CPU model), the machine and C library (the CPU renderer declares libm's
  vector functions by it);
- the flags (NOOPT and any other but DEBUG) and the CPU threads a kernel may use.

It is not used with CACHELEVEL=0, nor where code generation must really run: SPEC (the passes' checks), BEAM (a
search times kernels), DEBUG>=3 (prints from inside the passes), or a backend whose compiler opts out of the disk
cache.

A kernel renamed to keep names distinct (`engine.kernel_names`: E_8 -> E_8n1) is a second entry of its renamed
source under the same key and the new name, since renaming needs the linear program, which an entry doesn't hold.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import pathlib
import platform
import sys

from uopkit import diskcache
from uopkit.codegen import ProgramSpec, get_program
from uopkit.codegen.plan import Opt, OptOps
from uopkit.device import Compiled
from uopkit.diskcache import Unkeyable, key_text
from uopkit.dtype import DType, dtypes
from uopkit.engine.kernel_names import distinct_name, unique_name
from uopkit.helpers import BEAM, CACHELEVEL, DEBUG, SPEC, ContextVar, cpu_threads
from uopkit.uop.ops import Ops, UOp

TABLE = "codegen"
# the entries' layout (a change of it is a new key, as a change of the code is)
FORMAT = "uopkit codegen 2"
# counters for tests and tools: kernels whose program came from the table, and those generated and stored
stats = {"hits": 0, "misses": 0}


def encode_ast(ast: UOp) -> str:
    """The kernel AST node by node, sources before users, each source by its place in that order."""
    place: dict[UOp, int] = {}
    lines = []
    for u in ast.toposort():
        place[u] = len(place)
        srcs = " ".join(str(place[s]) for s in u.src)
        lines.append(f"{u.op.name} {key_text(u.dtype)} [{srcs}] {key_text(u.arg)}")
    return "\n".join(lines)


_code_digests: dict[str, str | None] = {}


def code_digest(package_dir: pathlib.Path) -> str | None:
    """A digest of every Python module under `package_dir` (read once per process), None when one can't be read."""
    key = str(package_dir)
    if key not in _code_digests:
        h = hashlib.sha256()
        try:
            for path in sorted(package_dir.rglob("*.py")):
                text = path.read_bytes()
                h.update(f"{path.relative_to(package_dir)}\0{len(text)}\0".encode())
                h.update(text)
            _code_digests[key] = h.hexdigest()
        except (OSError, ValueError):
            _code_digests[key] = None
    return _code_digests[key]


def _package_dir(module_name: str) -> pathlib.Path | None:
    module = sys.modules.get(module_name.split(".")[0])
    file = getattr(module, "__file__", None)
    return None if file is None else pathlib.Path(file).parent


def _renderer_fields(renderer: object) -> list[tuple[str, object]]:
    # its `caps` (a class's or its own) and its own other public fields; private ones are its memos
    fields = {k: v for k, v in vars(renderer).items() if not k.startswith("_")}
    fields["caps"] = getattr(renderer, "caps", None)
    return sorted(fields.items())


def program_key(ast: UOp, dev: Compiled) -> str | None:
    """The table's key for `ast` generated for `dev` (a digest of what the module's docstring lists), None when it
    isn't cached."""
    if CACHELEVEL.value == 0 or SPEC.value or BEAM.value >= 1 or DEBUG.value >= 3 or dev.compiler.cache_key is None:
        return None
    renderer = dev.renderer
    digests = []
    for module_name in ("uopkit", type(renderer).__module__):
        folder = _package_dir(module_name)
        digest = None if folder is None else code_digest(folder)
        if digest is None:
            return None
        digests.append(digest)
    try:
        parts = [
            FORMAT,
            *digests,
            f"{type(renderer).__module__}.{type(renderer).__qualname__}",
            # (the renderer's own public fields: `caps`, with the tensor cores, and a backend's device description
            # beside it, OpenCL's `cl_caps`, CUDA's `cuda_caps`; private ones are its memos)
            key_text(_renderer_fields(renderer)),
            dev.compiler.cache_key,
            f"{platform.machine()} {' '.join(platform.libc_ver())}",
            f"threads={cpu_threads()}",
            # every flag but DEBUG (below 3, it only prints): NOOPT and whatever a pass or renderer reads
            key_text(sorted((k, v.value) for k, v in ContextVar._registry.items() if k != "DEBUG")),
            encode_ast(ast),
        ]
    except Unkeyable:
        return None
    # (the digest of the whole text: an AST's text is tens of kilobytes, and the table hashes its key on each look-up)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _to_payload(spec: ProgramSpec) -> bytes:
    src = spec.src if isinstance(spec.src, str) else {"bytes": base64.b64encode(spec.src).decode()}
    fields = {
        "name": spec.name,
        "src": src,
        "global_size": list(spec.global_size),
        "local_size": None if spec.local_size is None else list(spec.local_size),
        "vars": [[v.dtype.name, *v.arg] for v in spec.vars],
        "estimated_flops": spec.estimated_flops,
        "estimated_bytes": spec.estimated_bytes,
        "opts": [[o.op.name, o.axis, o.amount] for o in spec.opts],
        "params": None if spec.params is None else list(spec.params),
    }
    return json.dumps(fields).encode()


def _from_payload(payload: bytes) -> ProgramSpec:
    # (raises KeyError, TypeError, ValueError on an entry of another layout: the caller counts it a miss)
    fields = json.loads(payload)
    src = fields["src"]
    if not isinstance(src, str):
        src = base64.b64decode(src["bytes"], validate=True)
    variables = []
    for dtype_name, name, vmin, vmax in fields["vars"]:
        dtype = getattr(dtypes, dtype_name)
        if type(dtype) is not DType or not all(isinstance(v, int) for v in (vmin, vmax)) or type(name) is not str:
            raise ValueError(f"a variable {name!r} of {dtype_name} {vmin}..{vmax}")
        variables.append(UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax)))
    local = fields["local_size"]
    params = fields["params"]
    return ProgramSpec(
        fields["name"],
        src,
        (),
        global_size=tuple(int(n) for n in fields["global_size"]),  # type: ignore[arg-type]
        local_size=None if local is None else tuple(int(n) for n in local),  # type: ignore[arg-type]
        vars=tuple(variables),
        estimated_flops=int(fields["estimated_flops"]),
        estimated_bytes=int(fields["estimated_bytes"]),
        opts=tuple(Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in fields["opts"]),
        params=None if params is None else tuple(int(i) for i in params),
    )


def _lookup(key: str) -> ProgramSpec | None:
    payload = diskcache.get(TABLE, key)
    if payload is None:
        return None
    try:
        return _from_payload(payload)
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as e:
        diskcache.reject(TABLE, key, f"unreadable program: {type(e).__name__}: {e}")
        return None


def _renamed_key(key: str, name: str) -> str:
    return f"{key}\nrenamed {name}"


def cached_program(ast: UOp, dev: Compiled) -> ProgramSpec:
    """`get_program(ast, dev.renderer)` with its kernel named apart from others of the same name
    (`kernel_names.unique_name`), from the table when an earlier run generated it."""
    key = program_key(ast, dev)
    spec = None if key is None else _lookup(key)
    if spec is not None:
        name = distinct_name(spec, dev)
        if name == spec.name:
            stats["hits"] += 1
            return spec
        renamed = _lookup(_renamed_key(key, name))  # type: ignore[arg-type]
        if renamed is not None and renamed.name == name:
            stats["hits"] += 1
            return renamed
    stats["misses"] += key is not None
    spec = get_program(ast, dev.renderer)
    named = unique_name(spec, dev)
    if key is not None:
        diskcache.put(TABLE, key, _to_payload(spec))
        if named.name != spec.name:
            diskcache.put(TABLE, _renamed_key(key, named.name), _to_payload(named))
    return named

"""Differential fuzzer: random small tensor programs run on a uopkit device and on PyTorch (CPU), compared.

A program is a list of steps; each step is one line of Python that makes a new value from earlier ones, written twice
from the same parameters: once for uopkit, once for torch. The generator picks each step from the shapes and dtypes
torch actually produced so far (a step torch refuses is dropped), so every program is valid PyTorch; uopkit must give
the same shape and values (within a dtype's tolerance) or, where torch raises, raise too. Covered: elementwise unary
and binary ops with broadcasting and Python scalars, where, casts, reductions, movement (permute, reshape, expand,
flip, strided slices, pad, transpose), tensor indexing, gather and assignment into a slice; shapes with 0 and 1 sized
axes; float32, float16, int32 and bool.

A failure is shrunk (shorter programs, fewer steps, smaller inputs), checked again in a fresh process, and printed as
a runnable repro. Needs PyTorch (the `test` extra). Exit status 1 when anything failed.

    python -m uopkit.testing.fuzz --minutes 10 --device OPENCL --seed 1
    python -m uopkit.testing.fuzz --count 200 --seed 0            # every usable device
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

DTYPES = ("float32", "float16", "int32", "bool")
SIZES = (0, 1, 1, 2, 3, 4, 5, 7)
# (rtol, atol) per dtype of the result; float16 carries its own rounding through every step
TOLERANCE = {"float32": (2e-4, 1e-5), "float16": (2e-2, 2e-3), "float64": (1e-6, 1e-8)}


@dataclass
class Input:
    data: np.ndarray

    def code(self, lib: str, device: str) -> str:
        arr = f"np.array({self.data.reshape(-1).tolist()!r}, dtype=np.{self.data.dtype}).reshape({self.data.shape})"
        if lib == "uopkit":
            return f"Tensor({arr}, device=DEVICE)"
        return f"torch.from_numpy({arr})"


@dataclass
class Step:
    """One new value: `ours` and `theirs` are format strings over earlier values {0}, {1}, ... (by position)."""

    ours: str
    theirs: str
    args: tuple[int, ...]
    # a statement rather than an expression: the code assigns `{out}` itself (assignment into a slice)
    statement: bool = False

    def line(self, lib: str, out: str) -> str:
        refs = [f"v{a}" for a in self.args]
        code = (self.ours if lib == "uopkit" else self.theirs).format(*refs, out=out)
        return code if self.statement else f"{out} = {code}"


@dataclass
class Program:
    inputs: list[Input]
    steps: list[Step] = field(default_factory=list)
    output: int = -1

    def lines(self, lib: str, device: str) -> list[str]:
        out = [f"v{i} = {inp.code(lib, device)}" for i, inp in enumerate(self.inputs)]
        n = len(self.inputs)
        out += [s.line(lib, f"v{n + i}") for i, s in enumerate(self.steps)]
        return out

    @property
    def result(self) -> str:
        return f"v{self.output % (len(self.inputs) + len(self.steps))}"

    def repro(self, device: str) -> str:
        # inputs print nan and inf bare (list repr): the names must exist in the repro
        head = [
            "from math import inf, nan",
            "import numpy as np",
            "import torch",
            "from uopkit import Tensor, dtypes",
            "",
            f"DEVICE = {device!r}",
        ]
        body = self.lines("uopkit", device)
        ref = [f"    {line}" for line in self.lines("torch", device)]
        return "\n".join(
            head
            + body
            + [f"print({self.result}.numpy())", "", "# PyTorch (CPU) says:", "def reference():"]
            + ref
            + [f"    return {self.result}.numpy()", "print(reference())"]
        )


# ---------------------------------------------------------------------------------------------------------------------
# running a program


def _run(prog: Program, lib: str, device: str) -> Any:
    import torch

    from uopkit import Tensor, dtypes

    env: dict[str, Any] = {"np": np, "torch": torch, "Tensor": Tensor, "dtypes": dtypes, "DEVICE": device}
    for line in prog.lines(lib, device):
        exec(line, env)
    return env[prog.result].numpy()


@dataclass
class Mismatch:
    what: str

    def __str__(self) -> str:
        return self.what


def compare(prog: Program, device: str) -> Mismatch | None:
    """None when uopkit on `device` agrees with torch on the program's result, else what differs."""
    try:
        ref: np.ndarray | None = _run(prog, "torch", device)
        ref_error = None
    except Exception as e:
        ref, ref_error = None, e
    try:
        ours = _run(prog, "uopkit", device)
    except Exception as e:
        if ref_error is not None:
            return None
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return Mismatch(f"uopkit raised where torch did not: {tb}")
    if ref is None:
        return Mismatch(f"torch raised {type(ref_error).__name__}: {ref_error}; uopkit returned {ours!r}")
    if ours.shape != ref.shape:
        return Mismatch(f"shape {ours.shape} != torch's {ref.shape}")
    if ref.dtype == np.bool_ or ours.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        if ours.dtype.kind == "f" and ref.dtype.kind != "f":
            return Mismatch(f"dtype {ours.dtype} where torch gives {ref.dtype}")
        equal = np.array_equal(ours.astype(np.float64), ref.astype(np.float64), equal_nan=True)
        return None if equal else Mismatch(f"values differ:\n ours  {ours.tolist()}\n torch {ref.tolist()}")
    rtol, atol = TOLERANCE.get(str(ref.dtype), TOLERANCE["float32"])
    if any(inp.data.dtype == np.float16 for inp in prog.inputs) or any("float16" in s.ours for s in prog.steps):
        # half precision anywhere upstream (a result cast to float32 keeps its rounding)
        rtol, atol = TOLERANCE["float16"]
    if not np.allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
        return Mismatch(f"values differ:\n ours  {ours.tolist()}\n torch {ref.tolist()}")
    return None


# ---------------------------------------------------------------------------------------------------------------------
# generating a program


@dataclass
class _Val:
    shape: tuple[int, ...]
    dtype: str


def _torch_dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _random_data(rng: random.Random, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        vals: list[Any] = [rng.random() < 0.5 for _ in range(n)]
    elif dtype == "int32":
        vals = [rng.randint(-9, 9) for _ in range(n)]
    else:
        # small values with a few exact ones (0, 1, -1, 0.5) where rounding and signs matter
        vals = [rng.choice((0.0, 1.0, -1.0, 0.5, round(rng.gauss(0, 2), 3))) for _ in range(n)]
    return np.array(vals, dtype=dtype).reshape(shape)


def _random_shape(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.choice(SIZES) for _ in range(rng.randint(0, 3)))


def _broadcastable(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    # a shape that broadcasts with `shape`: a suffix of it with some axes set to 1
    tail = shape[rng.randint(0, len(shape)) :] if shape else ()
    return tuple(1 if rng.random() < 0.3 else s for s in tail)


UNARY_FLOAT = (
    "neg", "abs", "relu", "exp", "sqrt", "sin", "cos", "log", "sigmoid", "tanh", "floor", "ceil", "trunc",
    "reciprocal", "square", "sign", "exp2", "log2", "round", "expm1", "log1p", "tan", "erf",
)  # fmt: skip
UNARY_INT = ("neg", "abs", "square", "sign")
BINARY = (("+", "+"), ("-", "-"), ("*", "*"), ("<", "<"), ("==", "=="), ("!=", "!="), (">=", ">="))
TORCH_DTYPE = {"float32": "torch.float32", "float16": "torch.float16", "int32": "torch.int32", "bool": "torch.bool"}


def _gen_step(rng: random.Random, vals: list[_Val]) -> tuple[Step, list[Input]]:
    """A random step over the existing values (and possibly a new input it needs)."""
    i = rng.randrange(len(vals))
    v = vals[i]
    new: list[Input] = []
    kind = rng.choice(("unary", "binary", "binary", "scalar", "where", "cast", "reduce", "reduce", "movement",
                       "movement", "movement", "index", "gather", "assign"))  # fmt: skip
    is_float = v.dtype.startswith("float")
    if kind == "unary":
        if v.dtype == "bool":
            return Step("{0}.logical_not()", "{0}.logical_not()", (i,)), new
        from uopkit import Tensor

        # ops still missing from Tensor are left out (they join once they exist)
        op = rng.choice([op for op in (UNARY_FLOAT if is_float else UNARY_INT) if hasattr(Tensor, op)])
        return Step(f"{{0}}.{op}()", f"{{0}}.{op}()", (i,)), new
    if kind in ("binary", "where"):
        # the second operand: an existing value of a broadcastable shape, or a fresh input
        others = [j for j, w in enumerate(vals) if _broadcasts(w.shape, v.shape)]
        if others and rng.random() < 0.5:
            j = rng.choice(others)
        else:
            dt = v.dtype if rng.random() < 0.7 else rng.choice(DTYPES)
            new.append(Input(_random_data(rng, _broadcastable(rng, v.shape), dt)))
            j = len(vals)
        if kind == "where":
            cond = Input(_random_data(rng, _broadcastable(rng, v.shape), "bool"))
            new.append(cond)
            c = len(vals) + len(new) - 1
            return Step("{2}.where({0}, {1})", "torch.where({2}, {0}, {1})", (i, j, c)), new
        op = rng.choice(BINARY + (("maximum", "maximum"), ("/", "/"), ("%", "%"), ("&", "&")))
        if op[0] in ("maximum",):
            return Step("{0}.maximum({1})", "torch.maximum({0}, {1})", (i, j)), new
        return Step(f"{{0}} {op[0]} {{1}}", f"{{0}} {op[1]} {{1}}", (i, j)), new
    if kind == "scalar":
        s = rng.choice((0, 1, -1, 2, 3, 0.5, -1.5, 2.0, True))
        op = rng.choice(BINARY + (("/", "/"), ("**", "**")))
        if op[0] == "**" and not (isinstance(s, int) and s >= 0):
            s = 2
        if rng.random() < 0.3 and op[0] not in ("**",):
            return Step(f"{s!r} {op[0]} {{0}}", f"{s!r} {op[1]} {{0}}", (i,)), new
        return Step(f"{{0}} {op[0]} {s!r}", f"{{0}} {op[1]} {s!r}", (i,)), new
    if kind == "cast":
        targets = [d for d in DTYPES if d != v.dtype and not (is_float and d == "int32")]
        d = rng.choice(targets)
        return Step(f"{{0}}.cast(dtypes.{d})", f"{{0}}.to({TORCH_DTYPE[d]})", (i,)), new
    if kind == "reduce":
        op = rng.choice(("sum", "max", "min", "mean", "prod") if is_float else ("sum", "max", "min"))
        top = {"max": "amax", "min": "amin"}.get(op, op)
        if not v.shape or rng.random() < 0.2:
            return Step(f"{{0}}.{op}()", f"{{0}}.{top}()", (i,)), new
        ax = rng.randrange(-len(v.shape), len(v.shape))
        kd = rng.random() < 0.3
        suffix = ", keepdim=True" if kd else ""
        theirs = f"{{0}}.{top}({ax}{suffix})" if op not in ("prod",) else f"{{0}}.prod({ax}{suffix})"
        # (tinygrad's keyword `axis=`: the values, as amax; a positional dim is torch's (values, indices))
        ours = f"{{0}}.{op}(axis={ax}{suffix})" if op in ("max", "min") else f"{{0}}.{op}({ax}{suffix})"
        return Step(ours, theirs, (i,)), new
    if kind == "movement":
        return _movement(rng, i, v), new
    if kind == "index" and v.shape:
        ax = rng.randrange(len(v.shape))
        n = v.shape[ax]
        idx = [rng.randrange(-n, n) for _ in range(rng.choice((0, 1, 2, 3)))] if n else []
        pre = ":, " * ax
        return Step(
            f"{{0}}[{pre}Tensor({idx!r}, dtype=dtypes.int32, device=DEVICE)]",
            f"{{0}}[{pre}torch.tensor({idx!r}, dtype=torch.int64)]",
            (i,),
        ), new
    if kind == "gather" and v.shape and all(v.shape):
        d = rng.randrange(len(v.shape))
        ishape = tuple(rng.randint(1, s) if k != d else rng.randint(1, 4) for k, s in enumerate(v.shape))
        idx = np.array([rng.randrange(v.shape[d]) for _ in range(int(np.prod(ishape)))]).reshape(ishape).tolist()
        return Step(
            f"{{0}}.gather({d}, Tensor({idx!r}, dtype=dtypes.int32, device=DEVICE))",
            f"{{0}}.gather({d}, torch.tensor({idx!r}, dtype=torch.int64))",
            (i,),
        ), new
    if kind == "assign" and rng.random() < 0.4:
        # a whole-tensor assign of a value computed from the target itself (value semantics: it reads the old one)
        # (torch's copy_ casts; uopkit's assign wants the target's dtype, and shrinking may change the operand's dtype)
        return Step(
            "{out} = {0}.contiguous(); {out}.assign(({out} * 2).cast({out}.dtype))",
            "{out} = {0}.clone(); {out}.copy_({out} * 2)",
            (i,),
            statement=True,
        ), new
    if kind == "assign" and v.shape:
        sl = _slices(rng, v.shape)
        s = rng.choice((0, 1, 2)) if not is_float else rng.choice((0.0, 1.5, -2.0))
        s = bool(s) if v.dtype == "bool" else s
        return Step(
            f"{{out}} = {{0}}.contiguous(); {{out}}[{sl}] = {s!r}",
            f"{{out}} = {{0}}.clone(); {{out}}[{sl}] = {s!r}",
            (i,),
            statement=True,
        ), new
    return _movement(rng, i, v), new


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(a[::-1], b[::-1], strict=False))


def _slices(rng: random.Random, shape: tuple[int, ...]) -> str:
    parts = []
    for s in shape:
        start = rng.randint(0, s)
        stop = rng.randint(start, s)
        step = rng.choice((1, 1, 2, 3))
        parts.append(f"{start}:{stop}:{step}" if rng.random() < 0.7 else ":")
    return ", ".join(parts)


def _movement(rng: random.Random, i: int, v: _Val) -> Step:
    nd = len(v.shape)
    op = rng.choice(("permute", "reshape", "expand", "flip", "slice", "pad", "transpose", "unsqueeze", "contiguous"))
    if op == "permute" and nd:
        p = list(range(nd))
        rng.shuffle(p)
        return Step(f"{{0}}.permute({p})", f"{{0}}.permute({p})", (i,))
    if op == "reshape":
        n = int(np.prod(v.shape)) if v.shape else 1
        shape = _factor(rng, n)
        return Step(f"{{0}}.reshape({shape})", f"{{0}}.reshape({shape})", (i,))
    if op == "expand" and 1 in v.shape:
        shape = tuple(rng.choice((1, 2, 3)) if s == 1 else s for s in v.shape)
        return Step(f"{{0}}.expand({shape})", f"{{0}}.expand({shape})", (i,))
    if op == "flip" and nd:
        ax = rng.randrange(nd)
        return Step(f"{{0}}.flip({ax})", f"{{0}}.flip({ax})", (i,))
    if op == "slice" and nd:
        sl = _slices(rng, v.shape)
        return Step(f"{{0}}[{sl}]", f"{{0}}[{sl}]", (i,))
    if op == "pad" and nd:
        pads = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in range(nd))
        flat = [x for p in pads[::-1] for x in p]
        return Step(f"{{0}}.pad({pads})", f"torch.nn.functional.pad({{0}}, {flat})", (i,))
    if op == "transpose" and nd >= 2:
        a, b = rng.sample(range(nd), 2)
        return Step(f"{{0}}.transpose({a}, {b})", f"{{0}}.transpose({a}, {b})", (i,))
    if op == "unsqueeze":
        ax = rng.randint(0, nd)
        return Step(f"{{0}}.unsqueeze({ax})", f"{{0}}.unsqueeze({ax})", (i,))
    return Step("{0}.contiguous()", "{0}.contiguous()", (i,))


def _factor(rng: random.Random, n: int) -> tuple[int, ...]:
    if n == 0:
        return rng.choice(((0,), (0, 3), (2, 0), (1, 0, 1)))
    dims = []
    while n > 1 and len(dims) < 3:
        d = rng.choice([k for k in range(1, n + 1) if n % k == 0])
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    if rng.random() < 0.3:
        dims.insert(rng.randint(0, len(dims)), 1)
    return tuple(dims)


def generate(rng: random.Random, max_steps: int = 6) -> Program:
    """A random program torch runs without error (each step checked on torch as it is chosen)."""

    while True:
        n_in = rng.randint(1, 2)
        inputs = [Input(_random_data(rng, _random_shape(rng), rng.choice(DTYPES))) for _ in range(n_in)]
        prog = Program(inputs)
        vals = [_Val(inp.data.shape, str(inp.data.dtype)) for inp in inputs]
        for _ in range(rng.randint(1, max_steps)):
            for _attempt in range(10):
                step, new = _gen_step(rng, vals)
                trial = _renumber_new_inputs(
                    Program(prog.inputs + new, prog.steps + [step]), len(prog.inputs), len(new)
                )
                try:
                    env = _run_env(trial)
                except Exception:
                    continue
                prog, vals = trial, _vals_of(trial, env)
                break
        if prog.steps:
            return prog


def _renumber_new_inputs(prog: Program, n_old: int, n_new: int) -> Program:
    """Inputs appended after steps were written: shift every reference to a step value past the new inputs."""
    if not n_new:
        return prog

    def fix(a: int) -> int:
        return a + n_new if a >= n_old else a

    n_old_steps = len(prog.steps) - 1
    steps = [replace(s, args=tuple(fix(a) for a in s.args)) for s in prog.steps[:n_old_steps]]
    # the last step was built against the value list [old inputs, old steps, new inputs...]: remap to the new layout
    last = prog.steps[n_old_steps]
    n_vals = n_old + n_old_steps

    def fix_last(a: int) -> int:
        if a < n_old:
            return a
        if a < n_vals:
            return a + n_new
        return n_old + (a - n_vals)

    steps.append(replace(last, args=tuple(fix_last(a) for a in last.args)))
    return Program(prog.inputs, steps, prog.output)


def _run_env(prog: Program) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"np": np, "torch": torch, "DEVICE": "CPU"}
    for line in prog.lines("torch", "CPU"):
        exec(line, env)
    return env


def _vals_of(prog: Program, env: dict[str, Any]) -> list[_Val]:
    n = len(prog.inputs) + len(prog.steps)
    return [_Val(tuple(env[f"v{k}"].shape), _torch_dtype_name(env[f"v{k}"])) for k in range(n)]


# ---------------------------------------------------------------------------------------------------------------------
# shrinking a failing program


def _fails(prog: Program, device: str) -> Mismatch | None:
    try:
        _run_env(prog)
    except Exception:
        # shrinking keeps to programs torch accepts
        return None
    return compare(prog, device)


def _live(prog: Program) -> Program:
    """Drop the steps and inputs the output doesn't depend on, renumbering the rest."""
    n_in = len(prog.inputs)
    out = prog.output % (n_in + len(prog.steps))
    need = {out}
    for k in range(n_in + len(prog.steps) - 1, n_in - 1, -1):
        if k in need:
            need.update(prog.steps[k - n_in].args)
    keep = sorted(need)
    new_id = {old: new for new, old in enumerate(keep)}
    inputs = [prog.inputs[k] for k in keep if k < n_in]
    steps = [
        replace(prog.steps[k - n_in], args=tuple(new_id[a] for a in prog.steps[k - n_in].args))
        for k in keep
        if k >= n_in
    ]
    return Program(inputs, steps, new_id[out])


def shrink(prog: Program, device: str, budget_s: float = 60.0) -> Program:
    """A smaller program that still fails: earlier outputs, bypassed steps, then smaller, simpler inputs."""
    deadline = time.monotonic() + budget_s
    best = _live(replace(prog, output=len(prog.inputs) + len(prog.steps) - 1))
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for cand in _candidates(best):
            if time.monotonic() > deadline:
                break
            cand = _live(cand)
            if _size(cand) < _size(best) and _fails(cand, device):
                best, changed = cand, True
                break
    return best


def _size(prog: Program) -> tuple[int, int, float]:
    elems = sum(inp.data.size for inp in prog.inputs)
    fancy = sum(float(np.abs(inp.data.astype(np.float64)).sum()) for inp in prog.inputs if inp.data.size)
    return (len(prog.steps), elems, fancy)


def _candidates(prog: Program) -> Any:
    n_in = len(prog.inputs)
    n = n_in + len(prog.steps)
    # an earlier value as the output
    for k in range(n_in, n - 1):
        yield replace(prog, output=k)
    # a step bypassed: its users read its first operand instead
    for k in range(n_in, n):
        step = prog.steps[k - n_in]
        if not step.args:
            continue
        src = step.args[0]
        steps = [replace(s, args=tuple(src if a == k else a for a in s.args)) for s in prog.steps]
        out = src if prog.output % n == k else prog.output
        yield Program(prog.inputs, steps, out)
    # inputs: fewer elements along an axis, then simpler values
    for j, inp in enumerate(prog.inputs):
        for ax, s in enumerate(inp.data.shape):
            for smaller in sorted({0, 1, s // 2, s - 1}):
                if smaller < s:
                    data = np.take(inp.data, range(smaller), axis=ax)
                    yield _with_input(prog, j, data)
        for simple in (np.zeros_like(inp.data), np.ones_like(inp.data)):
            if not np.array_equal(simple, inp.data):
                yield _with_input(prog, j, simple)
        flat = inp.data.reshape(-1)
        for e in range(flat.size):
            if flat[e] != 0:
                d = flat.copy()
                d[e] = 0
                yield _with_input(prog, j, d.reshape(inp.data.shape))


def _with_input(prog: Program, j: int, data: np.ndarray) -> Program:
    inputs = list(prog.inputs)
    inputs[j] = Input(np.ascontiguousarray(data))
    return Program(inputs, prog.steps, prog.output)


# ---------------------------------------------------------------------------------------------------------------------
# driver


@dataclass
class Failure:
    seed: int
    device: str
    mismatch: Mismatch
    program: Program
    # False: the program agrees with torch in a fresh process; it failed only after the programs run before it
    alone: bool = True

    def report(self) -> str:
        code = self.program.repro(self.device)
        note = "" if self.alone else " [fails only after earlier programs in the same process: state carried over]"
        return f"--- fuzz failure on {self.device} (program seed {self.seed}){note}: {self.mismatch}\n{code}\n"


def _program_to_json(prog: Program, device: str) -> dict[str, Any]:
    # plain data (no pickle: nothing is executed to read it back but the program's own lines, as in any run)
    inputs = [
        {"data": i.data.reshape(-1).tolist(), "dtype": str(i.data.dtype), "shape": i.data.shape} for i in prog.inputs
    ]
    steps = [{"ours": s.ours, "theirs": s.theirs, "args": s.args, "statement": s.statement} for s in prog.steps]
    return {"device": device, "inputs": inputs, "steps": steps, "output": prog.output}


def _program_from_json(d: dict[str, Any]) -> tuple[Program, str]:
    inputs = [Input(np.array(i["data"], dtype=i["dtype"]).reshape(i["shape"])) for i in d["inputs"]]
    steps = [Step(s["ours"], s["theirs"], tuple(s["args"]), s["statement"]) for s in d["steps"]]
    return Program(inputs, steps, d["output"]), d["device"]


def fails_alone(prog: Program, device: str, timeout_s: float = 300.0) -> bool:
    """Whether the program also fails in a fresh Python process (shrinking runs in this one, whose caches and
    buffers earlier programs have touched)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(_program_to_json(prog, device), f)
    try:
        cmd = [sys.executable, "-m", "uopkit.testing.fuzz", "--check-file", f.name]
        done = subprocess.run(cmd, capture_output=True, timeout=timeout_s)
        return done.returncode == 1
    except subprocess.TimeoutExpired:
        return True
    finally:
        os.unlink(f.name)


def usable_devices() -> list[str]:
    from uopkit.device import Device

    return sorted(s.name for s in Device.backends().values() if s.usable)


def fuzz(
    device: str,
    seed: int = 0,
    count: int | None = None,
    seconds: float | None = None,
    shrink_s: float = 60.0,
    max_failures: int = 5,
    log: Callable[[str], None] | None = None,
) -> tuple[int, list[Failure]]:
    """Run programs seed, seed+1, ... on `device` until `count` programs or `seconds` pass; (programs run, failures).

    Each program is generated from its own seed, so a failure reruns with `--seed S --count 1`."""
    from uopkit.helpers import Context

    failures: list[Failure] = []
    start = time.monotonic()
    ran = 0
    with Context(CHECK_INDEX=1):
        for s in itertools.count(seed):
            if count is not None and ran >= count:
                break
            if seconds is not None and time.monotonic() - start > seconds:
                break
            prog = generate(random.Random(s))
            ran += 1
            bad = compare(prog, device)
            if bad is None:
                continue
            small = shrink(prog, device, shrink_s)
            failure = Failure(s, device, _fails(small, device) or bad, small)
            if not fails_alone(small, device):
                failure = Failure(s, device, bad, prog, alone=fails_alone(prog, device))
            failures.append(failure)
            if log:
                log(failure.report())
            if len(failures) >= max_failures:
                break
    return ran, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m uopkit.testing.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", help="a device to test (repeatable); default: every usable one")
    parser.add_argument("--minutes", type=float, help="run this long per device")
    parser.add_argument("--count", type=int, help="run this many programs per device")
    parser.add_argument("--seed", type=int, default=0, help="the first program's seed (default 0)")
    parser.add_argument("--max-failures", type=int, default=5, help="stop a device after this many failures")
    parser.add_argument("--shrink-seconds", type=float, default=60.0, help="time to shrink each failure")
    parser.add_argument("--check-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("the fuzzer compares with PyTorch: pip install torch (or uopkit[test])", file=sys.stderr)
        return 2
    if args.check_file:
        # one (program, device) as JSON: exit 1 when it fails (used to check a repro in a fresh process)
        with open(args.check_file) as f:
            prog, dev = _program_from_json(json.load(f))
        return 1 if compare(prog, dev) is not None else 0
    if args.minutes is None and args.count is None:
        args.count = 100
    devices = args.device or usable_devices()
    total = 0
    for dev in devices:
        start = time.monotonic()
        seconds = None if args.minutes is None else args.minutes * 60
        ran, failures = fuzz(
            dev, args.seed, args.count, seconds, args.shrink_seconds, args.max_failures, lambda r: print(r, flush=True)
        )
        total += len(failures)
        took = time.monotonic() - start
        print(f"{dev}: {ran} programs from seed {args.seed}, {len(failures)} failures, {took:.1f} s", flush=True)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())

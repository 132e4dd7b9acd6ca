"""Random kernel opts on a device: every opt list `apply_opt` accepts must compute what the unoptimized kernel does.

The kernels: matmul, row and column reduces (float, int, bool, half, over two axes, a max with NaNs), whole-tensor
sum and max, softmax, elementwise (aligned and at odd offsets), conv2d and a half matmul (for tensor cores).
For each kernel of a kernel's schedule, random opt lists are drawn from what the device's renderer accepts (the
BEAM actions: UPCAST, UNROLL, LOCAL, GROUP, GROUPTOP, STAGE, THREAD and TC for each tensor core it declares, plus
PADTO),
the kernel is compiled and run with them on the device and its output compared with the unoptimized kernel's
(`uopkit.codegen.opt.verify`: exact for integers, a rounding tolerance for floats), and the last kernel's with numpy.
The work-group the program launches must be the one `apply_opt` checked against the renderer's limits. On the
emulator a local-memory race or an access out of bounds is an error too. Seeded: a failure prints the seed, the
kernel and the opts, and ``--seed S --count 1 --kernel NAME`` runs just that case again.

    python -m uopkit.testing.optfuzz --count 200 --seed 0 --device OPENCL
    EMULATE=OPENCL python -m uopkit.testing.optfuzz --count 200 --seed 0 --device EMULATOR
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from uopkit.codegen import get_program, prepare_ast
from uopkit.codegen.merge import merge_axes
from uopkit.codegen.opt import Opt, OptError, OptOps, apply_opt, apply_opts, initial_plan
from uopkit.codegen.opt.search import candidate_actions
from uopkit.codegen.opt.verify import output_error, tolerance
from uopkit.codegen.plan import grid_dims, work_group_dims
from uopkit.device import Device
from uopkit.dtype import from_numpy_dtype
from uopkit.renderer import Renderer

# PADTO is not among the BEAM actions; small splits (BEAM's GROUP starts at 16) reach the axes of odd sizes
PADTO_AMOUNTS = (3, 4, 8, 16)
SMALL_AMOUNTS = (2, 3, 4, 5, 6)
SPLITS = (OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.STAGE)
MAX_OPTS = 5


@dataclass
class Case:
    """A kernel to fuzz: its inputs (numpy), how to build it from them as Tensors, and numpy's answer."""

    inputs: list[np.ndarray]
    build: Callable[..., object]
    expected: Callable[..., np.ndarray]
    # tolerance against numpy (the opts are held to the unoptimized kernel's output, much tighter)
    rtol: float = 1e-4


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, o, h, wd), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return out


def _with_nans(x: np.ndarray) -> np.ndarray:
    x[3, 5] = x[11, -1] = np.nan
    return x


def cases() -> dict[str, Case]:
    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "matmul": Case([f32(32, 48), f32(48, 40)], lambda a, b: a @ b, lambda a, b: a @ b),
        "row_sum": Case([f32(24, 130)], lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)),
        "col_sum": Case([f32(256, 48)], lambda x: x.sum(axis=0), lambda x: x.sum(axis=0)),
        "row_max": Case([f32(20, 96)], lambda x: x.max(axis=1), lambda x: x.max(axis=1)),
        "int_col_sum": Case(
            [rng.integers(-50, 50, (64, 24)).astype(np.int32)], lambda x: x.sum(axis=0), lambda x: x.sum(axis=0)
        ),
        # two reduce axes around an output axis
        "sum_outer_axes": Case([f32(6, 12, 20)], lambda x: x.sum(axis=(0, 2)), lambda x: x.sum(axis=(0, 2))),
        "half_row_sum": Case(
            [f32(16, 72).astype(np.float16)],
            lambda x: x.sum(axis=1),
            lambda x: x.astype(np.float32).sum(axis=1).astype(np.float16),
            rtol=2e-2,
        ),
        # a row reduce fused into its elementwise consumer: the reduce doesn't depend on the output's column axis
        "minus_row_max": Case(
            [f32(12, 40)], lambda x: x - x.max(axis=1, keepdim=True), lambda x: x - x.max(axis=1, keepdims=True)
        ),
        "softmax": Case([f32(8, 96)], lambda x: x.softmax(-1), _softmax),
        # one reduce read through two padded regions of the output (lanes across both give gated loads whose address
        # simplification must leave the reduce's loop alone)
        "stacked_sums": Case(
            [f32(4, 6, 8)],
            lambda x: x.sum(1).flatten().stack(x.sum(1).flatten(), dim=-1),
            lambda x: np.stack([x.sum(1).ravel()] * 2, -1),
        ),
        # the work-group combines (GROUP over an odd or prime row: a tree padded to a power of two) on ints, bools
        # and a max that must keep its NaN (rows 3 and 11 hold one; a whole-tensor max sees both)
        "int_row_sum": Case(
            [rng.integers(-1000, 1000, (6, 107)).astype(np.int32)], lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)
        ),
        "bool_row_any": Case([f32(10, 90) > 1.5], lambda x: x.any(axis=1), lambda x: x.any(axis=1)),
        "nan_row_max": Case([_with_nans(f32(16, 75))], lambda x: x.max(axis=1), lambda x: x.max(axis=1)),
        "nan_max": Case([_with_nans(f32(16, 75))], lambda x: x.max(), lambda x: x.max()),
        "full_sum": Case([f32(48, 96)], lambda x: x.sum(), lambda x: x.sum()),
        # elementwise: vector loads and stores, aligned ones (rows of 64) and ones at odd offsets (views starting at
        # columns 1 and 2 of rows of 66): where a backend's vectors need aligned addresses, only the first may be
        "elementwise": Case(
            [f32(16, 64), f32(16, 64), f32(16, 64)],
            lambda a, b, c: (a * b + c).relu() * 2,
            lambda a, b, c: np.maximum(a * b + c, 0) * 2,
        ),
        "shifted": Case(
            [f32(9, 66), f32(9, 66)],
            lambda x, y: x[:, 1:65] * y[:, :64] + x[:, 2:],
            lambda x, y: x[:, 1:65] * y[:, :64] + x[:, 2:],
        ),
        "conv": Case([f32(2, 3, 10, 10), f32(4, 3, 3, 3)], lambda x, w: x.conv2d(w, padding=1), _conv, rtol=2e-4),
        # float16 operands, float32 accumulation: what tensor cores take
        "matmul_half": Case(
            [f32(32, 32).astype(np.float16), f32(32, 32).astype(np.float16)],
            lambda a, b: a @ b,
            lambda a, b: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16),
            rtol=2e-2,
        ),
    }


def kernel_form(ast):  # noqa: ANN001, ANN201
    """The AST that `get_program` chooses opts for (its adjacent axes merged where the views allow): the fuzzer's opts
    are drawn and applied on it, as the heuristic's and BEAM's are."""
    return merge_axes(prepare_ast(ast))


def random_opts(ast, renderer: Renderer, rng: random.Random, n: int) -> list[Opt]:  # noqa: ANN001
    """Up to `n` opts, each drawn from those `apply_opt` accepts after the previous ones."""
    plan = initial_plan(kernel_form(ast))
    opts: list[Opt] = []
    for _ in range(n):
        actions = candidate_actions(plan, renderer)
        n_axes = plan.n_out + len(plan.red)
        actions += [Opt(OptOps.PADTO, ax, amt) for ax in range(n_axes) for amt in PADTO_AMOUNTS]
        actions += [Opt(op, ax, amt) for op in SPLITS for ax in range(n_axes) for amt in SMALL_AMOUNTS]
        # each kind of opt equally likely (there are many more UPCAST and PADTO actions than LOCAL or TC ones); a
        # tensor core, which must come first, half the time it fits
        by_op: dict[OptOps, list[Opt]] = {}
        for a in actions:
            by_op.setdefault(a.op, []).append(a)
        ops = list(by_op)
        rng.shuffle(ops)
        if OptOps.TC in by_op and not opts and rng.random() < 0.5:
            ops.remove(OptOps.TC)
            ops.insert(0, OptOps.TC)
        # STAGE, which needs a LOCAL first (so few lists could reach it), half the time it applies
        elif OptOps.STAGE in by_op and rng.random() < 0.5:
            ops.remove(OptOps.STAGE)
            ops.insert(0, OptOps.STAGE)
        ordered = []
        for op in ops:
            rng.shuffle(by_op[op])
            ordered += by_op[op]
        for act in ordered:
            try:
                plan = apply_opt(plan, act, renderer)
            except OptError:
                continue
            opts.append(act)
            break
    return opts


def _run(item, device: str, renderer: Renderer, opts: list[Opt]) -> list[np.ndarray]:  # noqa: ANN001
    """Run one schedule item with `opts`; returns its buffers' contents (output first)."""
    from uopkit.engine.realize import _buffer_for

    dev = Device[device]
    ast = kernel_form(item.ast)
    spec = get_program(ast, renderer, opts)
    plan = apply_opts(ast, opts, renderer)
    dims = work_group_dims(plan)
    launched = [d for d in (spec.local_size or ()) if d > 1]
    if renderer.caps.has_local and [d for d in dims if d > 1] != launched:
        raise AssertionError(f"the program launches work-groups {spec.local_size}, apply_opt checked {dims}")
    grid = grid_dims(plan)
    if renderer.caps.has_local and (grid + [1, 1, 1])[:3] != list(spec.global_size):
        raise AssertionError(f"the program launches a grid {spec.global_size}, apply_opt checked {grid}")
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    vals = spec.launch_values(dict(item.var_vals))
    args = [b.opaque for b in spec.take(bufs)]
    prg(*args, global_size=spec.global_size, local_size=spec.local_size, vals=vals, wait=True)
    return [b.numpy().copy() for b in bufs]


def check_case(name: str, case: Case, device: str, renderer: Renderer, seed: int, report: Report) -> str | None:
    """One seeded trial: random opts for every kernel of the case's schedule; None when all is well, else why."""
    from uopkit import Tensor
    from uopkit.schedule import create_schedule, kernelize_tensors

    if any(from_numpy_dtype(x.dtype) not in renderer.caps.supported_dtypes for x in case.inputs):
        return None
    rng = random.Random(seed)
    tensors = [Tensor(x, device=device).realize() for x in case.inputs]
    out = case.build(*tensors)
    schedule = create_schedule(kernelize_tensors([out]))  # type: ignore[list-item]
    for i, item in enumerate(schedule):
        expected = _run(item, device, renderer, [])
        opts = random_opts(item.ast, renderer, rng, rng.randint(1, MAX_OPTS))
        report.trials += 1
        report.drawn.update(o.op.name for o in opts)
        where = f"{name} kernel {i} ({len(schedule)}) on {device} with {opts} (seed {seed})"
        try:
            got = _run(item, device, renderer, opts)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its opts
            return f"{where}: {type(e).__name__}: {e}"
        dtype = item.bufs[0].dtype
        err = output_error(got[0], expected[0])
        if err > tolerance(dtype, opts, renderer):
            return f"{where}: output differs from the unoptimized kernel's by {err:.3g}"
    # the last kernel's output, computed by every kernel with its random opts
    want = case.expected(*case.inputs).reshape(-1)
    if not np.allclose(got[0].astype(np.float64), want, rtol=case.rtol, atol=case.rtol, equal_nan=True):
        return f"{name} on {device} (seed {seed}): differs from numpy by {np.abs(got[0] - want).max():.3g}"
    return None


@dataclass
class Report:
    """What a fuzz run found: the failures, how many trials ran, and how often each kind of opt was drawn."""

    failures: list[str] = field(default_factory=list)
    trials: int = 0
    drawn: Counter[str] = field(default_factory=Counter)


def fuzz(
    device: str,
    seed: int,
    count: int,
    names: list[str] | None = None,
    renderer: Renderer | None = None,
    log: Callable[[str], None] | None = None,
) -> Report:
    """`count` trials from `seed`, each on every kernel (or the `names` ones), with `renderer` (default: the
    device's) building the programs the device runs."""
    renderer = renderer if renderer is not None else Device[device].renderer
    all_cases = cases()
    report = Report()
    for s in range(seed, seed + count):
        for name in names or list(all_cases):
            failure = check_case(name, all_cases[name], device, renderer, s, report)
            if failure is not None:
                report.failures.append(failure)
                if log:
                    log(failure)
    return report


def _renderer_name(renderer: Renderer) -> str:
    # the emulator says which backend's settings it took (EMULATE=NAME)
    return getattr(renderer, "emulating", None) or renderer.device or type(renderer).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m uopkit.testing.optfuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", required=True, help="a device to test (repeatable)")
    parser.add_argument("--count", type=int, default=20, help="trials per kernel and device (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="the first trial's seed (default 0)")
    parser.add_argument("--kernel", action="append", choices=sorted(cases()), help="only these kernels")
    args = parser.parse_args(argv)
    total = 0
    for dev in args.device:
        start = time.monotonic()
        report = fuzz(dev, args.seed, args.count, args.kernel, log=lambda r: print(r, flush=True))
        total += len(report.failures)
        took = time.monotonic() - start
        what = f"{report.trials} kernels with random opts (seeds {args.seed}..{args.seed + args.count - 1})"
        drawn = ", ".join(f"{op} {n}" for op, n in sorted(report.drawn.items()))
        print(f"{dev} ({_renderer_name(Device[dev].renderer)}): {what}, {len(report.failures)} failures, {took:.1f} s")
        print(f"  opts drawn: {drawn}", flush=True)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())

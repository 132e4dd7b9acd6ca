"""`python -m bench`: run every benchmark on every framework, print a table of times and ratios, save JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import cases
from bench.frameworks import FRAMEWORKS, Framework, Skip, load

# a result differing from the float64 numpy reference by more than this (relative to its largest value) is flagged
TOLERANCE = 1e-3


@dataclass
class Bench:
    name: str
    make: Callable[[Framework], tuple[Callable[[], Any], Callable[[Any], float | None]]]
    # work per call for a rate column: (amount, unit) e.g. (2*n**3, "GFLOP/s"), (bytes, "GB/s")
    work: tuple[float, str] | None = None
    warmup: int = 2


@dataclass
class Result:
    name: str
    unit: str | None
    times: dict[str, float | None] = field(default_factory=dict)
    rates: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, float | None] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def benchmarks(sizes: cases.Sizes) -> list[Bench]:
    out = []
    for n in sizes.matmul:
        out.append(Bench(f"matmul {n} fp32", lambda fw, n=n: cases.matmul(fw, n), (2 * n**3 / 1e9, "GFLOP/s")))
    n = sizes.elementwise
    label = f"relu(a*b+c)*2 {n / 2**20:g}M"
    out.append(Bench(label, lambda fw, n=n: cases.elementwise(fw, n), (4 * 4 * n / 1e9, "GB/s")))
    r = sizes.reduce
    for axis in (0, 1):
        out.append(
            Bench(
                f"sum axis {axis} {r[0]}x{r[1]}",
                lambda fw, axis=axis: cases.reduce_sum(fw, r, axis),
                (4 * r[0] * r[1] / 1e9, "GB/s"),
            )
        )
    s = sizes.softmax
    out.append(Bench(f"softmax {s[0]}x{s[1]}", lambda fw: cases.softmax(fw, s), (2 * 4 * s[0] * s[1] / 1e9, "GB/s")))
    xs, ws = sizes.conv_x, sizes.conv_w
    flops = 2 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3]
    out.append(
        Bench(
            f"conv2d {'x'.join(map(str, xs))} {ws[0]}x{ws[2]}x{ws[3]} pad1",
            lambda fw: cases.conv2d(fw, xs, ws),
            (flops / 1e9, "GFLOP/s"),
        )
    )
    # (names of their own: the lambdas above read `n` when they run)
    heads, seq, dim = sizes.attention
    out.append(
        Bench(
            f"attention {heads}x{seq}x{dim}",
            lambda fw: cases.attention(fw, sizes.attention),
            (2 * 2 * heads * seq * seq * dim / 1e9, "GFLOP/s"),
        )
    )
    rows, width, lookups = sizes.embedding
    out.append(
        Bench(
            f"embedding {lookups} of {rows}x{width}",
            lambda fw: cases.embedding(fw, sizes.embedding),
            (2 * 4 * lookups * width / 1e9, "GB/s"),
        )
    )
    nodes, edges, width = sizes.scatter
    out.append(
        Bench(
            f"scatter-add {edges} edges into {nodes}x{width}",
            lambda fw: cases.scatter_add(fw, sizes.scatter),
            (3 * 4 * edges * width / 1e9, "GB/s"),
        )
    )
    rows, vocab, k = sizes.topk
    out.append(
        Bench(f"topk {k} of {rows}x{vocab}", lambda fw: cases.topk(fw, sizes.topk), (4 * rows * vocab / 1e9, "GB/s"))
    )
    n = sizes.argsort
    out.append(Bench(f"argsort {n}", lambda fw: cases.argsort(fw, sizes.argsort), (n / 1e6, "Melem/s")))
    n = sizes.argsort_long
    out.append(Bench(f"argsort {n}", lambda fw: cases.argsort(fw, sizes.argsort_long), (n / 1e6, "Melem/s")))
    dims, b = sizes.mlp, sizes.batch
    label = f"mlp step {'-'.join(map(str, dims))} b{b}"
    out.append(Bench(label, lambda fw: cases.mlp_step(fw, dims, b, jit=False), (1, "steps/s")))
    out.append(Bench(label + " jit", lambda fw: cases.mlp_step(fw, dims, b, jit=True), (1, "steps/s"), warmup=3))
    t = sizes.tiny
    out.append(Bench(f"tiny op a+1 ({t} floats)", lambda fw: cases.tiny(fw, t, jit=False)))
    out.append(Bench(f"tiny op a+1 ({t} floats) jit", lambda fw: cases.tiny(fw, t, jit=True), warmup=3))
    out.append(Bench(f"tiny op a*s, a new s each call ({t} floats)", lambda fw: cases.tiny_new_number(fw, t), warmup=3))
    return out


def measure(run: Callable[[], Any], warmup: int, budget: float, max_reps: int = 1000) -> tuple[float, Any]:
    """Median seconds per call: `warmup` untimed calls, then calls until `budget` seconds (at least 3)."""
    out = None
    for _ in range(warmup):
        out = run()
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget and len(times) < max_reps):
        st = time.perf_counter()
        out = run()
        dt = time.perf_counter() - st
        times.append(dt)
        spent += dt
    return statistics.median(times), out


def run_bench(b: Bench, fws: list[Framework], budget: float, verbose: bool, rounds: int = 1) -> Result:
    """Each framework's median seconds per call. With `rounds` > 1 the frameworks take turns, `budget` seconds each
    per round, and each gets the median of its rounds: on a shared machine a slow second or two then lands in one
    round of every framework instead of all of one framework's calls."""
    res = Result(b.name, b.work[1] if b.work else None)
    cells: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {}
    for fw in fws:
        if fw.problem is not None:
            res.skipped[fw.name] = fw.problem
            continue
        try:
            cells[fw.name] = b.make(fw)
        except Skip as e:
            res.skipped[fw.name] = str(e)
        except Exception as e:  # one framework failing a case is a table entry, not the end of the run
            res.skipped[fw.name] = _error_entry(e)
    per_round: dict[str, list[float]] = {name: [] for name in cells}
    for r in range(rounds):
        for name, (run, check) in list(cells.items()):
            try:
                t, out = measure(run, b.warmup if r == 0 else 0, budget)
                if r == rounds - 1:
                    res.errors[name] = check(out)
            except Skip as e:
                res.skipped[name] = str(e)
                del cells[name]
                continue
            except Exception as e:  # noqa: BLE001 - as above
                res.skipped[name] = _error_entry(e)
                del cells[name]
                continue
            per_round[name].append(t)
    for name in cells:
        t = statistics.median(per_round[name])
        res.times[name] = t
        res.rates[name] = b.work[0] / t if b.work else None
        if verbose:
            rounds_text = " ".join(_fmt_time(x) for x in per_round[name]) if rounds > 1 else ""
            print(f"  {b.name:40s} {name:9s} {_fmt_time(t):>10s} {rounds_text}", file=sys.stderr)
    return res


def _error_entry(e: Exception) -> str:
    return f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]


def cold_first_step(
    fw_name: str, sizes: cases.Sizes, quick: bool, epoch: bool = False
) -> tuple[float | None, str | None]:
    """Seconds of the first MLP step (`epoch`: the first epoch over batches sliced from a dataset) in a fresh process
    with an empty compile cache (schedule + codegen + compile)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="uopkit_bench_cold_") as tmp:
        from bench.frameworks import ORIGINAL_ENV

        env = dict(os.environ, UOPKIT_CACHE_DIR=tmp, CACHELEVEL="0")
        for key, value in ORIGINAL_ENV.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        cmd = (
            [sys.executable, "-m", "bench.cold", fw_name]
            + (["--quick"] if quick else [])
            + (["--epoch"] if epoch else [])
        )
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=600, check=False)
        except subprocess.TimeoutExpired:
            return None, "timed out"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"error: {tail[-1] if tail else 'exit ' + str(proc.returncode)}"[:200]
    data = json.loads(lines[-1])
    return data.get("seconds"), data.get("skip")


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def _fmt_ratio(ours: float | None, theirs: float | None) -> str:
    # how many times faster uopkit is (above 1: uopkit wins)
    if ours is None or theirs is None:
        return "-"
    return f"{theirs / ours:.2f}x"


def print_table(results: list[Result], fws: list[str]) -> None:
    others = [f for f in fws if f != "uopkit"]
    head = ["benchmark", *fws, "uopkit rate", *(f"vs {f}" for f in others)]
    rows = []
    for r in results:
        cells = [r.name]
        for f in fws:
            t = r.times.get(f)
            mark = ""
            err = r.errors.get(f)
            if err is not None and err > TOLERANCE:
                mark = " !"
            cells.append(_fmt_time(t) + mark if t is not None else "skip")
        rate = r.rates.get("uopkit")
        cells.append(f"{rate:.1f} {r.unit}" if rate is not None and r.unit else "-")
        cells += [_fmt_ratio(r.times.get("uopkit"), r.times.get(f)) for f in others]
        rows.append(cells)
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    print("\nvs X: X's time / uopkit's time (above 1: uopkit is faster). '!': result differs from numpy float64.")
    notes = sorted({f"{f}: {why}" for r in results for f, why in r.skipped.items()})
    if notes:
        print("skipped:")
        for n in notes:
            print(f"  {n}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes, short timings (a smoke run)")
    p.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="comma-separated subset of " + ",".join(FRAMEWORKS)
    )
    p.add_argument("--only", default="", help="run only benchmarks whose name contains this text")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed calls per cell (default 1, quick 0.05)")
    p.add_argument("--json", default=None, help="where to save results (default bench/results.json)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold first-step measurement (subprocesses)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="frameworks take turns this many times per benchmark, each timed for the budget per turn; the table "
        "shows the median of the turns (default 1)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print each timing as it is measured")
    args = p.parse_args(argv)

    names = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if bad := [n for n in names if n not in FRAMEWORKS]:
        p.error(f"unknown framework(s) {', '.join(bad)}; choose from {', '.join(FRAMEWORKS)}")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    # uopkit opens its device before tinygrad sets CC for its own clang (see frameworks.load)
    order = [n for n in ("numpy", "torch", "uopkit", "tinygrad") if n in names]
    loaded = {n: load(n) for n in order}
    fws = [loaded[n] for n in FRAMEWORKS if n in loaded]
    sizes = cases.QUICK if args.quick else cases.Sizes()
    budget = args.budget if args.budget is not None else (0.05 if args.quick else 1.0)

    print(f"uopkit bench ({'quick' if args.quick else 'full'}) on {platform.processor() or platform.machine()}")
    for fw in fws:
        print(f"  {fw.name:9s} {fw.version or '-':16s} {fw.problem or ''}")
        if "blas" in fw.extra:
            print(f"  {'':9s} BLAS: {fw.extra['blas']}")
    dims = "-".join(map(str, sizes.mlp))
    colds = {
        f"first mlp step, cold cache {dims} b{sizes.batch}": False,
        f"first epoch, cold cache {dims}, {sizes.epoch[0]} batches of {sizes.epoch[1]} sliced": True,
    }
    names = [b.name for b in benchmarks(sizes)] + ([] if args.no_cold else list(colds))
    if args.only and not any(args.only in n for n in names):
        p.error(f"--only {args.only!r} matches no benchmark; the names are: " + "; ".join(names))
    results = []
    for b in benchmarks(sizes):
        if args.only and args.only not in b.name:
            continue
        results.append(run_bench(b, fws, budget, args.verbose, args.rounds))
    for cold_name, epoch in colds.items():
        if args.no_cold or (args.only and args.only not in cold_name):
            continue
        cold = Result(cold_name, None)
        for fw in fws:
            if fw.problem is not None or (fw.name == "numpy" and not epoch):
                cold.skipped[fw.name] = fw.problem or "nothing to compile"
                continue
            t, why = cold_first_step(fw.name, sizes, args.quick, epoch)
            if t is None:
                cold.skipped[fw.name] = why or "no result"
            else:
                cold.times[fw.name] = t
        results.append(cold)
    print()
    print_table(results, [fw.name for fw in fws])
    path = args.json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json")
    payload = {
        "quick": args.quick,
        "rounds": args.rounds,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "frameworks": {
            fw.name: {
                "version": fw.version,
                "problem": fw.problem,
                **({"blas": fw.extra["blas"]} if "blas" in fw.extra else {}),
            }
            for fw in fws
        },
        "results": [r.__dict__ for r in results],
    }
    partial = bool(args.only) or len(fws) < len(FRAMEWORKS)
    # a partial run updates its cells of the saved results instead of dropping every other row; results it can't
    # merge with (another machine, --quick or not) are kept, and the partial run goes to a file of its own
    merged = _merge_into(path, payload) if partial else None
    if partial and merged is None and os.path.exists(path):
        print(f"\n{path} holds results of another machine or size: left as it is")
        path = os.path.splitext(path)[0] + ".partial.json"
    with open(path, "w") as f:
        json.dump(merged or payload, f, indent=1)
    print(f"{'updated' if merged else 'saved'} {path}")
    return 0


def _merge_into(path: str, payload: dict) -> dict | None:
    """The results saved at `path` with `payload`'s cells (row by row, framework by framework) put in; None when
    there is nothing to merge with: no file, unreadable, or results of another size (--quick) or machine."""
    try:
        with open(path) as f:
            old = json.load(f)
        rows = {r["name"]: r for r in old["results"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if old.get("quick") != payload["quick"] or old.get("machine") != payload["machine"]:
        return None
    for new in payload["results"]:
        row = rows.setdefault(new["name"], {**new, "times": {}, "rates": {}, "errors": {}, "skipped": {}})
        if not isinstance(row, dict):
            return None
        for part in ("times", "rates", "errors", "skipped"):
            for fw in new["times"].keys() | new["skipped"].keys():
                row.setdefault(part, {}).pop(fw, None)
            row.setdefault(part, {}).update(new[part])
    return {**old, "frameworks": {**old.get("frameworks", {}), **payload["frameworks"]}, "results": list(rows.values())}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()

"""`python -m bench.beam`: BEAM search against the heuristic, kernel by kernel, on every uopkit benchmark.

For each benchmark it records the kernels one call runs, searches each with BEAM (width `--width`, cached on disk
like BEAM=n), then times the heuristic's opts and BEAM's opts on the same scratch buffers in turns, `--rounds`
rounds each, and reports the fastest time of each. Timing the two in turns, in one process, keeps the machine's
drift out of the ratio (two separate bench runs differ by more than the effect being measured).

    python -m bench.beam [--quick] [--width 2] [--only NAME] [--json bench/beam.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from bench import cases
from bench.frameworks import load
from bench.main import benchmarks


def kernels_of(run: Any) -> list[tuple[Any, str]]:
    """The (AST, device) of every kernel one call of `run` compiles or runs, in order."""
    import uopkit.engine.realize as realize

    seen: dict[tuple[Any, str], None] = {}
    original = realize.get_runner

    def recording(ast: Any, device: str) -> Any:
        seen[(ast, device)] = None
        return original(ast, device)

    # empty caches make every kernel of the call go through get_runner
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    realize.get_runner = recording
    try:
        run()
    finally:
        realize.get_runner = original
    return list(seen)


def compare_kernel(ast: Any, device: str, width: int, rounds: int) -> dict[str, Any]:
    from uopkit import Device
    from uopkit.codegen import get_program, kernel_name
    from uopkit.codegen.opt.heuristic import hand_coded_opts
    from uopkit.codegen.opt.search import Timer, beam_search

    renderer = Device[device].renderer
    heuristic = hand_coded_opts(ast, renderer)
    st = time.perf_counter()
    beam = beam_search(ast, renderer, width, device, build=get_program)
    search_s = time.perf_counter() - st
    timer = Timer(ast, device, get_program)
    best = {"heuristic": math.inf, "beam": math.inf}
    for _ in range(rounds):
        best["heuristic"] = min(best["heuristic"], timer(heuristic))
        # BEAM keeping the heuristic's opts is the same program: nothing to time twice
        best["beam"] = best["heuristic"] if beam == heuristic else min(best["beam"], timer(beam))
    return {
        "kernel": kernel_name(ast),
        "heuristic_opts": [str(o) for o in heuristic],
        "beam_opts": [str(o) for o in beam],
        "heuristic_s": best["heuristic"],
        "beam_s": best["beam"],
        "search_s": search_s,
        "same": beam == heuristic,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.beam", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--width", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="timing runs of each, in turns")
    p.add_argument("--only", default="", help="only benchmarks whose name contains this text")
    p.add_argument("--json", default="bench/beam.json")
    args = p.parse_args(argv)
    fw = load("uopkit")
    if fw.problem is not None:
        print(f"uopkit can't run: {fw.problem}", file=sys.stderr)
        return 1
    sizes = cases.QUICK if args.quick else cases.Sizes()
    rows: list[dict[str, Any]] = []
    width = 34
    print(f"{'benchmark':32s} {'kernel':{width}s} {'heuristic':>10s} {'BEAM':>10s}  heur/BEAM  search")
    for b in benchmarks(sizes):
        # the JIT replays the same kernels as the plain step; the tiny op has nothing to search
        if args.only not in b.name or b.name.endswith("jit") or b.name.startswith("tiny"):
            continue
        run, _ = b.make(fw)
        for ast, device in kernels_of(run):
            row = {"benchmark": b.name, **compare_kernel(ast, device, args.width, args.rounds)}
            rows.append(row)
            ratio = row["heuristic_s"] / row["beam_s"]
            print(
                f"{b.name[:32]:32s} {row['kernel'][:width]:{width}s} {row['heuristic_s'] * 1e6:8.1f}us "
                f"{row['beam_s'] * 1e6:8.1f}us  {'same' if row['same'] else f'{ratio:.2f}x':>8s}  "
                f"{row['search_s']:5.1f}s",
                flush=True,
            )
    changed = [r for r in rows if not r["same"]]
    worst = min((r["heuristic_s"] / r["beam_s"] for r in changed), default=math.nan)
    print(
        f"\n{len(rows)} kernels, {len(rows) - len(changed)} where BEAM kept the heuristic's opts; among the others the "
        f"worst heuristic/BEAM ratio is {worst:.2f}x (below 1: BEAM's pick timed slower)"
    )
    with open(args.json, "w") as f:
        json.dump({"width": args.width, "rounds": args.rounds, "quick": args.quick, "kernels": rows}, f, indent=1)
    print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

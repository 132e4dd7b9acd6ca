"""`python -m bench.compare BASE.json NEW.json [--framework uopkit]`: one framework's times in two bench runs.

The way to check BEAM against the heuristic, measured on the same machine:

    python -m bench --frameworks uopkit --no-cold --json /tmp/heuristic.json
    BEAM=2 python -m bench --frameworks uopkit --no-cold --json /tmp/beam.json
    python -m bench.compare /tmp/heuristic.json /tmp/beam.json
"""

from __future__ import annotations

import argparse
import json
import sys


def load_times(path: str, framework: str) -> dict[str, float]:
    with open(path) as f:
        data = json.load(f)
    times = {}
    for r in data.get("results", []):
        t = r.get("times", {}).get(framework)
        if t is not None:
            times[r["name"]] = float(t)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--framework", default="uopkit")
    args = p.parse_args(argv)
    base, new = load_times(args.base, args.framework), load_times(args.new, args.framework)
    common = [name for name in base if name in new]
    if not common:
        print(f"no benchmark has a {args.framework} time in both files", file=sys.stderr)
        return 1
    width = max(len(n) for n in common)
    print(f"{'benchmark':{width}s}  {'base':>10s}  {'new':>10s}  base/new")
    for name in common:
        b, n = base[name], new[name]
        print(f"{name:{width}s}  {b * 1e3:8.3f}ms  {n * 1e3:8.3f}ms  {b / n:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

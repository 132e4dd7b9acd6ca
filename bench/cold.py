"""Cold-start figures.

`python -m bench.cold FRAMEWORK [--quick] [--epoch]`: time the first MLP training step in this fresh process, or with
`--epoch` a first epoch over batches sliced from a dataset (`Sizes.epoch`). Run by `python -m bench` with an empty
compile cache; prints one JSON line {"seconds": ...} or {"skip": reason}. The time covers building the graph,
scheduling, code generation and compiling (uploading the weights and the dataset is excluded).

`python -m bench.cold --main-job [--repeat N] [--steps S]`: the README's main job (examples/train_digits.py), N times,
each in a fresh process with a fresh, empty cache folder: per run the wall time, the CPU time of the process and its
children (the C compiler), the kernels compiled, their compile time (code generation plus compiler per kernel,
summed, as the example prints it), the wall time the job waited on compiling (less: compiles overlap code generation
on worker threads) and the accuracy, then the min and median of each. The machine may be shared: compare medians of
several runs, and the CPU times, which other load disturbs less than the wall.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from bench import cases
from bench.frameworks import Skip, load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN_JOB = os.path.join(ROOT, "examples", "train_digits.py")
_COMPILED = re.compile(r"kernels compiled: (\d+), compile time: ([0-9.]+) s")
_WAITED = re.compile(r"waited on compiling: ([0-9.]+) s")
_ACCURACY = re.compile(r"held-out accuracy: ([0-9.]+)%")


def parse_main_job(output: str) -> dict[str, float]:
    """The figures train_digits.py prints: kernels compiled, their compile time (s), the accuracy (%)."""
    compiled, accuracy = _COMPILED.search(output), _ACCURACY.search(output)
    if compiled is None or accuracy is None:
        raise ValueError(f"the main job's output has no compile or accuracy line:\n{output[-2000:]}")
    kernels, seconds = int(compiled.group(1)), float(compiled.group(2))
    out = {"kernels": kernels, "compile_s": seconds, "accuracy": float(accuracy.group(1))}
    # (the wall time spent on compiles, printed since the compile time above became a sum over overlapping work)
    if (waited := _WAITED.search(output)) is not None:
        out["compile_wait_s"] = float(waited.group(1))
    return out


def run_main_job(args: list[str]) -> dict[str, float]:
    """One run of the main job in a fresh process with a fresh cache folder."""
    with tempfile.TemporaryDirectory(prefix="uopkit_bench_cold_") as tmp:
        env = dict(os.environ, UOPKIT_CACHE_DIR=tmp)
        env.pop("CACHELEVEL", None)
        before = os.times()
        st = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, MAIN_JOB, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
        )
        wall = time.perf_counter() - st
        after = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"the main job failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return {**parse_main_job(proc.stdout), "wall_s": wall, "cpu_s": cpu}


def main_job(argv: list[str]) -> int:
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    job_args = ["--steps", argv[argv.index("--steps") + 1]] if "--steps" in argv else []
    runs = []
    for i in range(repeat):
        runs.append(run_main_job(job_args))
        print(json.dumps({"run": i + 1, **{k: round(v, 3) for k, v in runs[-1].items()}}), flush=True)
    summary = {
        key: {"min": round(min(r[key] for r in runs), 3), "median": round(statistics.median(r[key] for r in runs), 3)}
        for key in ("wall_s", "cpu_s", "compile_s", "compile_wait_s", "kernels", "accuracy")
        if all(key in r for r in runs)
    }
    print(json.dumps({"runs": repeat, "cores": os.cpu_count(), **summary}))
    return 0


def main(argv: list[str]) -> int:
    if "--main-job" in argv:
        return main_job(argv)
    name = argv[0] if argv else "uopkit"
    sizes = cases.QUICK if "--quick" in argv else cases.Sizes()
    fw = load(name)
    if fw.problem is not None:
        print(json.dumps({"skip": fw.problem}))
        return 0
    epoch = "--epoch" in argv
    batches, rows = sizes.epoch
    params, x, y = cases.mlp_weights(sizes.mlp, batches * rows if epoch else sizes.batch)
    try:
        step = cases.make_epoch(fw, params, x, y, rows) if epoch else cases.make_mlp_step(fw, params, x, y, jit=False)
    except Skip as e:
        print(json.dumps({"skip": str(e)}))
        return 0
    st = time.perf_counter()
    try:
        loss = step()
        float(fw.numpy(loss))
    except Skip as e:
        print(json.dumps({"skip": str(e)}))
        return 0
    except Exception as e:  # reported in the table as this framework's result
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(json.dumps({"skip": f"error: {type(e).__name__}: {first}"[:200]}))
        return 0
    print(json.dumps({"seconds": time.perf_counter() - st}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

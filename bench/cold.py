"""`python -m bench.cold FRAMEWORK [--quick]`: time the first MLP training step in this fresh process.

Run by `python -m bench` with an empty compile cache; prints one JSON line {"seconds": ...} or {"skip": reason}.
The time covers building the graph, scheduling, code generation and compiling (uploading the weights is excluded).
"""

from __future__ import annotations

import json
import sys
import time

from bench import cases
from bench.frameworks import Skip, load


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "uopkit"
    sizes = cases.QUICK if "--quick" in argv else cases.Sizes()
    fw = load(name)
    if fw.problem is not None:
        print(json.dumps({"skip": fw.problem}))
        return 0
    params, x, y = cases.mlp_weights(sizes.mlp, sizes.batch)
    try:
        step = cases.make_mlp_step(fw, params, x, y, jit=False)
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

"""`python -m bench.gpu`: uopkit on a GPU device against PyTorch on the same GPU, in one process.

Cases: matmul 4096 in fp16 and bf16 (tensor cores) and fp32 (TF32 off on both sides), an elementwise op, softmax,
row sums, and one training step of a small MLP. Each case is timed on both sides with the device synchronized
around the timed calls; the fastest of `--rounds` rounds is kept, and uopkit's speed is printed as a ratio to
PyTorch's (>1: uopkit is faster). Nothing here is asserted anywhere.

    python -m bench.gpu [--device CUDA] [--quick] [--only matmul_fp16] [--json out.json]

Skips (exit code 0, the reason printed) when PyTorch has no CUDA or the uopkit device can't be opened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _timeit(run: Callable[[], Any], sync: Callable[[], None], rounds: int, inner: int) -> float:
    """The fastest of `rounds` rounds of `inner` calls, per call, in seconds (after two warm-up calls)."""
    for _ in range(2):
        run()
    sync()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            run()
        sync()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def cases(n: int) -> dict[str, dict[str, Any]]:
    """name -> shapes, dtype and the flops/bytes one call does (for the throughput columns)."""
    return {
        "matmul_fp16": {"kind": "matmul", "dtype": "float16", "n": n, "flops": 2 * n**3},
        "matmul_bf16": {"kind": "matmul", "dtype": "bfloat16", "n": n, "flops": 2 * n**3},
        "matmul_fp32": {"kind": "matmul", "dtype": "float32", "n": n, "flops": 2 * n**3},
        "elementwise": {"kind": "elementwise", "n": n * n, "bytes": 3 * 4 * n * n},
        "softmax": {"kind": "softmax", "n": n, "bytes": 2 * 4 * n * n},
        "sum_rows": {"kind": "sum", "n": n, "bytes": 4 * n * n},
        "mlp_step": {"kind": "mlp", "n": n},
    }


def build(case: dict[str, Any], device: str, torch: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(uopkit call, torch call) for one case, on inputs equal on both sides."""
    import numpy as np

    from uopkit import Tensor, dtypes

    rng = np.random.default_rng(0)
    n = case["n"]
    tdev = "cuda"
    if case["kind"] == "matmul":
        a_np = rng.standard_normal((n, n)).astype(np.float32)
        b_np = rng.standard_normal((n, n)).astype(np.float32)
        dt = getattr(dtypes, case["dtype"])
        a, b = Tensor(a_np, device=device).cast(dt).realize(), Tensor(b_np, device=device).cast(dt).realize()
        ta = torch.from_numpy(a_np).to(tdev).to(getattr(torch, case["dtype"]))
        tb = torch.from_numpy(b_np).to(tdev).to(getattr(torch, case["dtype"]))
        return (lambda: (a @ b).realize()), (lambda: ta @ tb)
    if case["kind"] == "elementwise":
        x_np, y_np = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        x, y = Tensor(x_np, device=device).realize(), Tensor(y_np, device=device).realize()
        tx, ty = torch.from_numpy(x_np).to(tdev), torch.from_numpy(y_np).to(tdev)
        return (lambda: (x * y + x).realize()), (lambda: tx * ty + tx)
    x_np = rng.standard_normal((n, n)).astype(np.float32)
    x, tx = Tensor(x_np, device=device).realize(), torch.from_numpy(x_np).to(tdev)
    if case["kind"] == "softmax":
        return (lambda: x.softmax(-1).realize()), (lambda: tx.softmax(-1))
    if case["kind"] == "sum":
        return (lambda: x.sum(1).realize()), (lambda: tx.sum(1))
    return _mlp(device, torch, min(n, 1024))


def _mlp(device: str, torch: Any, width: int, tdev: str = "cuda") -> tuple[Callable[[], Any], Callable[[], Any]]:
    """One SGD step of Linear(width, width) -> relu -> Linear(width, 10) with cross entropy, batch `width`."""
    import numpy as np

    from uopkit import Tensor
    from uopkit.nn import Linear
    from uopkit.nn.optim import SGD

    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((width, width)).astype(np.float32)
    y_np = rng.integers(0, 10, width)
    l1, l2 = Linear(width, width), Linear(width, 10)
    # the layers' parameters are made on the default device: move them to the one benchmarked
    for layer in (l1, l2):
        layer.weight = layer.weight.to(device).realize()
        layer.bias = layer.bias.to(device).realize()
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    for p in params:
        p.requires_grad = True
    opt = SGD(params, lr=0.01)
    x, y = Tensor(x_np, device=device), Tensor(y_np, device=device)

    def uopkit_step() -> None:
        opt.zero_grad()
        loss = l2(l1(x).relu()).cross_entropy(y)
        loss.backward()
        opt.step()

    tl = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)).to(tdev)
    topt = torch.optim.SGD(tl.parameters(), lr=0.01)
    tx, ty = torch.from_numpy(x_np).to(tdev), torch.from_numpy(y_np).to(tdev)

    def torch_step() -> None:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tl(tx), ty).backward()
        topt.step()

    return uopkit_step, torch_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=os.environ.get("DEVICE", "CUDA"))
    parser.add_argument("--quick", action="store_true", help="1024 instead of 4096, fewer rounds")
    parser.add_argument("--only", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"skipped: PyTorch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print("skipped: this PyTorch has no CUDA (torch.cuda.is_available() is False)")
        return 0
    from uopkit import Device

    try:
        dev = Device[args.device]
    except Exception as e:
        print(f"skipped: {args.device} can't be opened: {e}")
        return 0
    # fp32 matmuls are compared without TF32 on both sides
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = 1024 if args.quick else 4096
    rounds = 2 if args.quick else args.rounds
    results = []
    print(f"{'case':<14}{'uopkit ms':>12}{'torch ms':>12}{'ratio':>8}  throughput (uopkit / torch)")
    for name, case in cases(n).items():
        if args.only and name not in args.only:
            continue
        try:
            ours, theirs = build(case, args.device, torch)
            inner = 3 if case["kind"] in ("matmul", "mlp") else 10
            t_ours = _timeit(ours, dev.synchronize, rounds, inner)
            t_theirs = _timeit(theirs, torch.cuda.synchronize, rounds, inner)
        except Exception as e:
            print(f"{name:<14} failed: {type(e).__name__}: {str(e)[:300]}")
            results.append({"case": name, "error": f"{type(e).__name__}: {e}"})
            continue
        if "flops" in case:
            extra = f"{case['flops'] / t_ours / 1e12:.1f} / {case['flops'] / t_theirs / 1e12:.1f} TFLOP/s"
        elif "bytes" in case:
            extra = f"{case['bytes'] / t_ours / 1e9:.0f} / {case['bytes'] / t_theirs / 1e9:.0f} GB/s"
        else:
            extra = ""
        ratio = t_theirs / t_ours
        print(f"{name:<14}{t_ours * 1e3:>12.3f}{t_theirs * 1e3:>12.3f}{ratio:>8.2f}  {extra}")
        results.append({"case": name, "uopkit_s": t_ours, "torch_s": t_theirs, "ratio": ratio, "n": n})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": repr(dev), "torch": torch.__version__, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

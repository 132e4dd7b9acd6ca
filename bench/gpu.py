"""`python -m bench.gpu`: uopkit on a GPU device next to PyTorch on CUDA, same shapes, in one process.

    DEVICE=OPENCL python -m bench.gpu          # or --device CUDA / TRITON / OPENCL:1
    python -m bench.gpu --quick --device OPENCL   # small shapes: a smoke run that PoCL finishes in seconds
    python -m bench.gpu --only softmax --only sum_axis0 --json out.json

Cases (full size): matmul 4096 in fp32 (TF32 off on both sides), fp16 and bf16; relu(a*b+c)*2 over 64M floats;
softmax of 8192x4096; the sums over each axis of 8192x4096; a 3x3 conv2d (32x64x56x56, 64 filters); one SGD step
of a 2-layer MLP (batch and width 1024). Each case is timed on both sides with its device synchronized around the
timed calls; the fastest of `--rounds` rounds is kept and uopkit's speed is printed as a ratio to PyTorch's (>1:
uopkit is faster). Before timing, uopkit's output is compared with PyTorch's on the same inputs; a wrong one is
marked WRONG. Nothing here is asserted by a test except that it runs and prints.

When this PyTorch has no CUDA, it says so and skips the PyTorch timings (no ratios); uopkit is still timed and
checked against PyTorch on the CPU. A case the device can't run (fp16 where the renderer doesn't claim float16) is
skipped with the reason; bf16 runs on every device (the core stores it as bits and computes in float32). Exit
code: 0, or 1 when a case failed or computed a wrong value.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # matmul, elementwise, softmax, sum, conv2d, mlp
    shape: tuple[int, ...]
    dtype: str = "float32"
    axis: int = 0
    flops: float = 0.0
    nbytes: float = 0.0

    @property
    def label(self) -> str:
        return "x".join(map(str, self.shape))


def cases(quick: bool) -> list[Case]:
    """The cases at full size, or small enough for a CPU OpenCL (PoCL) to run them all in seconds."""
    n = 64 if quick else 4096
    elems = 1 << (16 if quick else 26)
    rows, cols = (128, 64) if quick else (8192, 4096)
    # conv2d: batch, channels in = out, height = width, 3x3 filters, padding 1
    cb, cc, cs = (2, 8, 16) if quick else (32, 64, 56)
    width = 32 if quick else 1024
    matmuls = [Case(f"matmul_{short}", "matmul", (n, n), dt, flops=2 * n**3) for short, dt in
               (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))]  # fmt: skip
    return [
        *matmuls,
        # three inputs read, one output written
        Case("elementwise", "elementwise", (elems,), nbytes=4 * 4 * elems),
        Case("softmax", "softmax", (rows, cols), nbytes=2 * 4 * rows * cols),
        Case("sum_axis0", "sum", (rows, cols), axis=0, nbytes=4 * rows * cols),
        Case("sum_axis1", "sum", (rows, cols), axis=1, nbytes=4 * rows * cols),
        Case("conv2d", "conv2d", (cb, cc, cs, cs), flops=2 * cb * cc * cs * cs * cc * 9),
        Case("mlp_step", "mlp", (width, width)),
    ]


# how far uopkit's output may be from PyTorch's: max |difference| over max |reference|
TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}


def _timeit(run: Callable[[], Any], sync: Callable[[], None], rounds: int, inner: int, warmup: int) -> float:
    """The fastest of `rounds` rounds of `inner` calls, per call, in seconds (after `warmup` calls)."""
    for _ in range(warmup):
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


def build(case: Case, device: str, torch: Any, tdev: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(uopkit call, torch call) for one case on equal inputs; each returns its output (the MLP step: its loss)."""
    import numpy as np

    from uopkit import Tensor, dtypes

    rng = np.random.default_rng(0)

    def pair(*shape: int) -> tuple[Tensor, Any]:
        x = rng.standard_normal(shape, dtype=np.float32)
        return Tensor(x, device=device).realize(), torch.from_numpy(x).to(tdev)

    if case.kind == "matmul":
        (a, ta), (b, tb) = pair(*case.shape), pair(*case.shape)
        dt, tdt = getattr(dtypes, case.dtype), getattr(torch, case.dtype)
        a, b, ta, tb = a.cast(dt).realize(), b.cast(dt).realize(), ta.to(tdt), tb.to(tdt)
        return (lambda: (a @ b).realize()), (lambda: ta @ tb)
    if case.kind == "elementwise":
        (a, ta), (b, tb), (c, tc) = pair(*case.shape), pair(*case.shape), pair(*case.shape)
        return (lambda: ((a * b + c).relu() * 2).realize()), (lambda: torch.relu(ta * tb + tc) * 2)
    if case.kind == "softmax":
        x, tx = pair(*case.shape)
        return (lambda: x.softmax(-1).realize()), (lambda: tx.softmax(-1))
    if case.kind == "sum":
        x, tx = pair(*case.shape)
        return (lambda: x.sum(case.axis).realize()), (lambda: tx.sum(case.axis))
    if case.kind == "conv2d":
        batch, chans = case.shape[:2]
        (x, tx), (w, tw) = pair(*case.shape), pair(chans, chans, 3, 3)
        conv = torch.nn.functional.conv2d
        return (lambda: x.conv2d(w, padding=1).realize()), (lambda: conv(tx, tw, padding=1))
    return _mlp(device, torch, tdev, case.shape[0])


def _mlp(device: str, torch: Any, tdev: str, width: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """One SGD step of Linear(width, width) -> relu -> Linear(width, 10) with cross entropy, batch `width`; both
    sides start from the same weights."""
    import numpy as np

    from uopkit import Tensor
    from uopkit.nn import Linear
    from uopkit.nn.optim import SGD

    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((width, width), dtype=np.float32)
    y_np = rng.integers(0, 10, width)
    layers = [Linear(width, width), Linear(width, 10)]
    tl = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
    for layer, tlayer in zip(layers, (tl[0], tl[2]), strict=True):
        # the same starting weights on both sides, made on the default device: move them to the one benchmarked
        with torch.no_grad():
            tlayer.weight.copy_(torch.from_numpy(layer.weight.numpy()))
            tlayer.bias.copy_(torch.from_numpy(layer.bias.numpy()))
        layer.weight = layer.weight.to(device).realize()
        layer.bias = layer.bias.to(device).realize()
    params = [p for layer in layers for p in (layer.weight, layer.bias)]
    for p in params:
        p.requires_grad = True
    opt = SGD(params, lr=0.01)
    x, y = Tensor(x_np, device=device), Tensor(y_np, device=device)

    def uopkit_step() -> Tensor:
        opt.zero_grad()
        loss = layers[1](layers[0](x).relu()).cross_entropy(y)
        loss.backward()
        opt.step()
        return loss

    tl = tl.to(tdev)
    topt = torch.optim.SGD(tl.parameters(), lr=0.01)
    tx, ty = torch.from_numpy(x_np).to(tdev), torch.from_numpy(y_np).to(tdev)

    def torch_step() -> Any:
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tl(tx), ty)
        loss.backward()
        topt.step()
        return loss

    return uopkit_step, torch_step


def relative_error(ours: Any, theirs: Any) -> float:
    """max |ours - theirs| / max |theirs|, in float64 (both outputs as arrays of the same shape)."""
    import numpy as np

    got, want = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want), initial=0.0) / max(float(np.max(np.abs(want), initial=0.0)), 1e-30))


def run_case(case: Case, device: str, dev: Any, torch: Any, tdev: str, timed_torch: bool, args: Any) -> dict[str, Any]:
    """Check one case against PyTorch, then time it (PyTorch too when `timed_torch`); the row of results."""
    ours, theirs = build(case, device, torch, tdev)
    row: dict[str, Any] = {"case": case.name, "shape": case.label, "dtype": case.dtype}
    # the MLP's outputs depend on every step before: compare its first step's loss, before any timed call
    row["rel_error"] = relative_error(ours().float().numpy(), theirs().float().detach().cpu().numpy())
    row["tolerance"] = TOLERANCE[case.dtype]
    heavy = case.kind in ("matmul", "conv2d", "mlp")
    rounds, inner, warmup = (1, 1, 1) if args.quick else (args.rounds, 3 if heavy else 10, 2)
    row["uopkit_s"] = _timeit(ours, dev.synchronize, rounds, inner, warmup)
    if timed_torch:
        row["torch_s"] = _timeit(theirs, torch.cuda.synchronize, rounds, inner, warmup)
    return row


def _format(case: Case, row: dict[str, Any]) -> str:
    ours, theirs = row["uopkit_s"], row.get("torch_s")
    check = "ok" if row["rel_error"] <= row["tolerance"] else f"WRONG (rel. error {row['rel_error']:.2g})"
    cells = [f"{case.name:<12}", f"{case.label:>14}", f"{ours * 1e3:>11.3f}"]
    cells += [f"{theirs * 1e3:>11.3f}", f"{theirs / ours:>7.2f}x"] if theirs else [f"{'-':>11}", f"{'-':>8}"]
    if case.flops:
        unit, scale, work = "TFLOP/s", 1e12, case.flops
    elif case.nbytes:
        unit, scale, work = "GB/s", 1e9, case.nbytes
    else:
        unit = ""
    if unit:
        speed = f"{work / ours / scale:.3g}" + (f" / {work / theirs / scale:.3g}" if theirs else "") + f" {unit}"
    else:
        speed = ""
    return "".join(cells) + f"  {check:<10} {speed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=os.environ.get("DEVICE", "CUDA"), help="the uopkit device (DEVICE)")
    parser.add_argument("--quick", action="store_true", help="small shapes, one timed call each (a smoke run)")
    parser.add_argument("--only", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"skipped: PyTorch is not importable ({e})")
        return 0
    from uopkit import Device, dtypes

    try:
        device = Device.canonicalize(args.device)
        dev = Device[device]
    except Exception as e:
        print(f"skipped: {args.device} can't be opened: {e}")
        return 0
    has_cuda = torch.cuda.is_available()
    tdev = "cuda" if has_cuda else "cpu"
    if has_cuda:
        # fp32 matmuls are compared without TF32 on both sides
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"uopkit {device} ({dev!r}) against PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    else:
        print(
            f"PyTorch {torch.__version__} has no CUDA (torch.cuda.is_available() is False): PyTorch's timings and the "
            f"ratios are skipped; uopkit {device} is timed and checked against PyTorch on the CPU"
        )
    selected = [c for c in cases(args.quick) if not args.only or c.name in args.only]
    unknown = set(args.only or ()) - {c.name for c in cases(args.quick)}
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}; the cases: {[c.name for c in cases(True)]}")
    print(f"{'case':<12}{'shape':>14}{'uopkit ms':>11}{'torch ms':>11}{'ratio':>8}  {'check':<10} uopkit / torch")
    results, bad = [], 0
    for case in selected:
        # bfloat16 runs everywhere: the core keeps it as its bits and computes in float32 (no renderer claims it)
        dt = getattr(dtypes, case.dtype)
        if dt != dtypes.bfloat16 and dt not in dev.renderer.caps.supported_dtypes:
            print(f"{case.name:<12}{case.label:>14}  skipped: {device}'s renderer doesn't claim {case.dtype}")
            results.append({"case": case.name, "skipped": f"no {case.dtype} on {device}"})
            continue
        try:
            row = run_case(case, device, dev, torch, tdev, has_cuda, args)
        except Exception as e:
            print(f"{case.name:<12}{case.label:>14}  failed: {type(e).__name__}: {str(e)[:300]}")
            results.append({"case": case.name, "error": f"{type(e).__name__}: {e}"})
            bad += 1
            continue
        print(_format(case, row), flush=True)
        results.append(row)
        bad += row["rel_error"] > row["tolerance"]
    if args.json:
        with open(args.json, "w") as f:
            meta = {"device": device, "describe": repr(dev), "torch": torch.__version__, "torch_device": tdev}
            json.dump({**meta, "quick": args.quick, "results": results}, f, indent=1)
    if bad:
        print(f"{bad} case(s) failed or computed wrong values")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m bench.jacobians [--repeat N]`: whole Jacobians and Hessians, uopkit beside torch in one process.

Three cases: the Hessian of a small MLP's loss with respect to its flattened parameters (a closure over a flat vector),
the Jacobian of a 64->64 tanh MLP's output with respect to its input (batch 1), and torch.func.jacrev of an
elementwise function of a 256-vector; torch's autograd.functional runs with vectorize=True (its batched rows, as
uopkit's default). uopkit is timed twice: its batched backward (the default) and one backward pass per row (the
fallback, forced here), each cold (its first call in this process, the batched one first: the kernel cache on disk
may be warm, and the per-row pass reuses the forward's kernels) and warm (the best of the repeats). "batch/torch" is
uopkit's batched warm time over torch's warm time. Values are checked against torch.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import uopkit.func
import uopkit.tensor.autograd_functional as uaf
import uopkit.tensor.batched_backward as ubb
from uopkit import Tensor

IN, HID, OUT, ROWS = 16, 32, 10, 8


def _mlp_params(rng: np.random.Generator) -> np.ndarray:
    # w1 (HID, IN), b1, w2 (OUT, HID), b2, flattened: 16*32+32+32*10+10 = 874 parameters
    n = HID * IN + HID + OUT * HID + OUT
    return (rng.standard_normal(n) * 0.3).astype(np.float32)


def _mlp_loss(data: Any, target: Any) -> Callable[[Any], Any]:
    def loss(flat: Any) -> Any:
        i = 0
        w1 = flat[i : i + HID * IN].reshape(HID, IN)
        i += HID * IN
        b1 = flat[i : i + HID]
        i += HID
        w2 = flat[i : i + OUT * HID].reshape(OUT, HID)
        i += OUT * HID
        b2 = flat[i : i + OUT]
        h = (data @ w1.T + b1).tanh()
        return ((h @ w2.T + b2 - target) ** 2).mean()

    return loss


def _tanh_mlp(w1: Any, w2: Any) -> Callable[[Any], Any]:
    return lambda x: ((x @ w1).tanh() @ w2).tanh()


def _elementwise(x: Any) -> Any:
    return (x.sin() * x + x.exp() * 0.5).tanh()


def cases(rng: np.random.Generator) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    flat = _mlp_params(rng)
    data = rng.standard_normal((ROWS, IN)).astype(np.float32)
    target = rng.standard_normal((ROWS, OUT)).astype(np.float32)
    w1 = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    x64 = rng.standard_normal((1, 64)).astype(np.float32)
    v256 = rng.standard_normal(256).astype(np.float32)
    u_loss = _mlp_loss(Tensor(data), Tensor(target))
    t_loss = _mlp_loss(torch.tensor(data), torch.tensor(target))
    u_mlp, t_mlp = _tanh_mlp(Tensor(w1), Tensor(w2)), _tanh_mlp(torch.tensor(w1), torch.tensor(w2))
    return [
        (
            f"hessian, MLP loss, {flat.size} params",
            lambda: uaf.hessian(u_loss, Tensor(flat)).numpy(),
            lambda: torch.autograd.functional.hessian(t_loss, torch.tensor(flat), vectorize=True).numpy(),
        ),
        (
            "jacobian, 64->64 tanh MLP, batch 1",
            lambda: uaf.jacobian(u_mlp, Tensor(x64)).numpy(),
            lambda: torch.autograd.functional.jacobian(t_mlp, torch.tensor(x64), vectorize=True).numpy(),
        ),
        (
            "func.jacrev, elementwise, 256",
            lambda: uopkit.func.jacrev(_elementwise)(Tensor(v256)).numpy(),
            lambda: torch.func.jacrev(_elementwise)(torch.tensor(v256)).numpy(),
        ),
    ]


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    t0 = time.perf_counter()
    out = fn()
    cold = time.perf_counter() - t0
    warm = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        warm = min(warm, time.perf_counter() - t0)
    return cold, warm, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jacobians", description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(
        f"{'case':38s} {'torch':>8s} {'rows cold':>10s} {'rows warm':>10s} {'batch cold':>10s} {'batch warm':>10s}"
        f" {'rows/batch':>10s} {'batch/torch':>11s} {'max err':>8s}"
    )
    for name, u_fn, t_fn in cases(rng):
        _, t_warm, ref = _timed(t_fn, args.repeat)
        b_cold, b_warm, out = _timed(u_fn, args.repeat)
        real = ubb.vjp_rows
        ubb_off = lambda *a, **k: None  # noqa: E731 (one backward pass per row: the fallback)
        uaf.vjp_rows = ubb_off
        uopkit.func.transforms.vjp_rows = ubb_off
        try:
            r_cold, r_warm, _ = _timed(u_fn, args.repeat)
        finally:
            uaf.vjp_rows = uopkit.func.transforms.vjp_rows = real
        err = float(np.abs(out - ref).max())
        print(
            f"{name:38s} {t_warm:8.4f} {r_cold:10.4f} {r_warm:10.4f} {b_cold:10.4f} {b_warm:10.4f}"
            f" {r_warm / b_warm:10.1f} {b_warm / t_warm:11.1f} {err:8.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

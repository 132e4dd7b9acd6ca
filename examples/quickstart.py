"""Fit a linear model by gradient descent with hand-written gradients: matmuls, reductions and in-place
updates (assign -> STORE) compiled to C kernels on the default device."""

import time

import numpy as np

from uopkit import Device, Tensor
from uopkit.engine.realize import stats


def main() -> None:
    rng = np.random.default_rng(0)
    n, d = 4096, 64
    x_np = rng.standard_normal((n, d)).astype(np.float32)
    true_w = rng.standard_normal((d, 1)).astype(np.float32)
    y_np = x_np @ true_w + 0.01 * rng.standard_normal((n, 1)).astype(np.float32)

    x, y = Tensor(x_np), Tensor(y_np)
    w = Tensor.zeros(d, 1).contiguous().realize()
    lr = 0.1
    start = time.perf_counter()
    for step in range(100):
        err = x @ w - y
        grad = x.T @ err * (2.0 / n)
        w.assign(w - grad * lr).realize()
        if step % 20 == 0:
            print(f"step {step:3d}  mse {float((err * err).mean().item()):.6f}")
    elapsed = time.perf_counter() - start
    max_err = float(np.abs(w.numpy() - true_w).max())
    print(f"device {Device.DEFAULT}: 100 steps in {elapsed:.2f} s, max |w - w_true| = {max_err:.4f}")
    print(f"kernels compiled: {stats['kernels_compiled']}, compile time {stats['compile_seconds']:.2f} s")
    assert max_err < 0.01, "gradient descent did not converge"


if __name__ == "__main__":
    main()

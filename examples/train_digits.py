"""Train a small CNN on the 8x8 handwritten digits that ship with scikit-learn (1797 images), with uopkit.

    python examples/train_digits.py            # DEVICE=CPU by default; e.g. DEVICE=OPENCL to pick another backend

Shows a progress bar with the loss and throughput, then prints the held-out accuracy, how many kernels were compiled
and how long compiling took. Needs numpy and scikit-learn (`pip install scikit-learn`).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from uopkit import Tensor
from uopkit.engine.realize import stats
from uopkit.nn import Conv2d, Linear
from uopkit.nn.optim import Adam
from uopkit.nn.state import get_parameters


class DigitsCNN:
    """conv(1->8) -> relu -> maxpool -> conv(8->16) -> relu -> maxpool -> linear(64->10)."""

    def __init__(self) -> None:
        self.conv1 = Conv2d(1, 8, 3, padding=1)
        self.conv2 = Conv2d(8, 16, 3, padding=1)
        self.fc = Linear(16 * 2 * 2, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.conv1(x).relu().max_pool2d(2)  # (N, 8, 4, 4)
        x = self.conv2(x).relu().max_pool2d(2)  # (N, 16, 2, 2)
        return self.fc(x.flatten(1))


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels
    )
    return x_train, x_test, y_train, y_test


def progress(step: int, total: int, loss: float, rate: float, width: int = 30) -> None:
    done = int(width * step / total)
    bar = "#" * done + "-" * (width - done)
    end = "\n" if step == total else ""
    print(f"\r[{bar}] {step:4d}/{total} loss {loss:.4f} {rate:7.0f} img/s", end=end, file=sys.stderr, flush=True)


def evaluate(model: DigitsCNN, x: np.ndarray, y: np.ndarray) -> float:
    with Tensor.test():
        predictions = model(Tensor(x)).argmax(axis=1).numpy()
    return float((predictions == y).mean())


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps (batches)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    Tensor.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_train, x_test, y_train, y_test = load_data(args.seed)
    print(f"digits: {len(x_train)} training images, {len(x_test)} held out")

    model = DigitsCNN()
    opt = Adam(get_parameters(model), lr=args.lr)
    start = time.perf_counter()
    with Tensor.train():
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            idx = rng.integers(0, len(x_train), args.batch_size)
            # the learning rate decays linearly to a tenth; it is data in a buffer, so no kernel is recompiled
            opt.lr.assign(Tensor(np.array([args.lr * (1 - 0.9 * (step - 1) / args.steps)], np.float32)).reshape(()))
            opt.zero_grad()
            loss = model(Tensor(x_train[idx])).cross_entropy(Tensor(y_train[idx]))
            loss.backward()
            # one realize: the loss of this step and the in-place update of every parameter and Adam's state
            Tensor.realize(loss, *opt.schedule_step())
            progress(step, args.steps, loss.item(), args.batch_size / (time.perf_counter() - t0))
    train_seconds = time.perf_counter() - start

    accuracy = evaluate(model, x_test, y_test)
    print(f"held-out accuracy: {accuracy * 100:.2f}% ({round(accuracy * len(y_test))}/{len(y_test)})")
    print(f"training: {args.steps} steps in {train_seconds:.1f} s")
    # compile time: code generation plus compiler per kernel, summed (compiles overlap on worker threads);
    # waited: the wall time spent generating code and waiting on compiles
    print(
        f"kernels compiled: {stats['kernels_compiled']}, compile time: {stats['compile_seconds']:.2f} s "
        f"(summed per kernel), waited on compiling: {stats['compile_wait_seconds']:.2f} s"
    )
    return accuracy


if __name__ == "__main__":
    main()

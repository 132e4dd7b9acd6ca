"""The benchmarks: for each, per framework, a setup that returns the callable to time (and its result to check).

A case function takes (framework, sizes) and returns `(run, check)`: `run()` computes the result once, synchronized;
`check(result)` returns the largest error against the numpy reference (None where there is nothing to compare).
An op a framework lacks raises `Skip` with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.frameworks import Framework, Skip

Run = Callable[[], Any]


@dataclass
class Sizes:
    matmul: tuple[int, ...] = (256, 1024, 2048)
    elementwise: int = 16 * 1024 * 1024
    reduce: tuple[int, int] = (4096, 4096)
    softmax: tuple[int, int] = (4096, 1024)
    conv_x: tuple[int, int, int, int] = (32, 3, 32, 32)
    conv_w: tuple[int, int, int, int] = (64, 3, 3, 3)
    mlp: tuple[int, ...] = (784, 512, 512, 10)
    batch: int = 256
    tiny: int = 16
    # heads, sequence, head size
    attention: tuple[int, int, int] = (8, 256, 64)
    # table rows, row size, lookups
    embedding: tuple[int, int, int] = (1000, 256, 4096)
    # a graph's nodes, edges and features (Cora's sizes): a GNN layer's aggregation
    scatter: tuple[int, int, int] = (2708, 10556, 16)
    # a cold first epoch of the MLP: batches, rows per batch
    epoch: tuple[int, int] = (100, 64)
    # top-k sampling over a vocabulary: rows, vocabulary, k
    topk: tuple[int, int, int] = (8, 50257, 50)
    # a row's stable argsort (ranked per block, `uopkit.tensor.blocksort`): its length
    argsort: int = 3000
    # a long 1-D argsort (a bitonic network, relaunched from its capture): its length
    argsort_long: int = 100_000


QUICK = Sizes(
    matmul=(64, 128),
    elementwise=64 * 1024,
    reduce=(256, 256),
    softmax=(256, 128),
    conv_x=(4, 3, 16, 16),
    conv_w=(8, 3, 3, 3),
    mlp=(784, 64, 64, 10),
    batch=32,
    attention=(2, 32, 16),
    embedding=(100, 32, 64),
    scatter=(50, 200, 4),
    epoch=(4, 8),
    topk=(2, 1000, 5),
    argsort=1000,
    argsort_long=20_000,
)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _need(obj: Any, attr: str, fw: Framework) -> Any:
    fn = getattr(obj, attr, None)
    if fn is None:
        raise Skip(f"{fw.name} has no {attr}")
    return fn


def _max_err(ref: np.ndarray, fw: Framework) -> Callable[[Any], float]:
    scale = max(float(np.abs(ref).max()), 1e-6)

    def check(out: Any) -> float:
        got = fw.numpy(out).astype(np.float64)
        if got.shape != ref.shape:
            return float("inf")
        return float(np.abs(got - ref).max()) / scale

    return check


# ---------------------------------------------------------------------------------------------------------------------
# kernels


def matmul(fw: Framework, n: int) -> tuple[Run, Callable]:
    a, b = _rng(1).standard_normal((n, n), dtype=np.float32), _rng(2).standard_normal((n, n), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ta, tb = fw.tensor(a), fw.tensor(b)
    return (lambda: fw.sync(ta @ tb)), _max_err(ref, fw)


def elementwise(fw: Framework, n: int) -> tuple[Run, Callable]:
    a, b, c = (_rng(i).standard_normal(n, dtype=np.float32) for i in (3, 4, 5))
    ref = np.maximum(a * b + c, 0) * 2
    ta, tb, tc = fw.tensor(a), fw.tensor(b), fw.tensor(c)
    if fw.name == "numpy":
        return (lambda: np.maximum(a * b + c, 0) * 2), _max_err(ref, fw)
    if fw.name == "torch":
        torch = fw.module
        return (lambda: torch.relu(ta * tb + tc) * 2), _max_err(ref, fw)
    return (lambda: fw.sync((ta * tb + tc).relu() * 2)), _max_err(ref, fw)


def reduce_sum(fw: Framework, shape: tuple[int, int], axis: int) -> tuple[Run, Callable]:
    x = _rng(6).standard_normal(shape, dtype=np.float32)
    ref = x.astype(np.float64).sum(axis=axis)
    tx = fw.tensor(x)
    if fw.name == "torch":
        return (lambda: tx.sum(dim=axis)), _max_err(ref, fw)
    return (lambda: fw.sync(tx.sum(axis=axis))), _max_err(ref, fw)


def softmax(fw: Framework, shape: tuple[int, int]) -> tuple[Run, Callable]:
    x = _rng(7).standard_normal(shape, dtype=np.float32)
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    tx = fw.tensor(x)
    if fw.name == "numpy":

        def run() -> np.ndarray:
            ex = np.exp(x - x.max(axis=-1, keepdims=True))
            return ex / ex.sum(axis=-1, keepdims=True)

        return run, _max_err(ref, fw)
    if fw.name == "torch":
        torch = fw.module
        return (lambda: torch.softmax(tx, dim=-1)), _max_err(ref, fw)
    fn = _need(tx, "softmax", fw)
    del fn
    return (lambda: fw.sync(tx.softmax(-1))), _max_err(ref, fw)


def topk(fw: Framework, shape: tuple[int, int, int]) -> tuple[Run, Callable]:
    """The k largest logits of each row and where they are (top-k sampling); checked by the values."""
    rows, n, k = shape
    x = _rng(17).standard_normal((rows, n), dtype=np.float32)
    ref = -np.sort(-x.astype(np.float64), axis=-1)[:, :k]
    tx = fw.tensor(x)
    if fw.name == "numpy":

        def run() -> np.ndarray:
            part = np.argpartition(-x, k - 1, axis=-1)[:, :k]
            vals = np.take_along_axis(x, part, -1)
            return -np.sort(-vals, axis=-1)

        return run, _max_err(ref, fw)
    fn = _need(tx, "topk", fw)
    check = _max_err(ref, fw)
    if fw.name == "torch":
        return (lambda: fn(k, dim=-1)), lambda out: check(out[0])
    return (lambda: fw.sync(fn(k, -1))), lambda out: check(out[0])


def argsort(fw: Framework, n: int) -> tuple[Run, Callable]:
    """The positions that sort a row of n floats, equal values in order (a stable sort); checked as numpy's."""
    x = _rng(18).standard_normal(n).astype(np.float32)
    ref = np.argsort(x, kind="stable")
    tx = fw.tensor(x)

    def check(out: Any) -> float:
        # (the share of positions that differ)
        got = fw.numpy(out)
        return float("inf") if got.shape != ref.shape else float(np.mean(got != ref))

    if fw.name == "numpy":
        return (lambda: np.argsort(x, kind="stable")), check
    if fw.name == "torch":
        torch = fw.module
        return (lambda: torch.argsort(tx, stable=True)), check
    fn = _need(tx, "argsort", fw)
    return (lambda: fw.sync(fn())), check


def conv2d(fw: Framework, xs: tuple[int, ...], ws: tuple[int, ...]) -> tuple[Run, Callable]:
    x, w = _rng(8).standard_normal(xs, dtype=np.float32), _rng(9).standard_normal(ws, dtype=np.float32)
    ref = _conv2d_numpy(x.astype(np.float64), w.astype(np.float64))
    tx, tw = fw.tensor(x), fw.tensor(w)
    if fw.name == "numpy":
        return (lambda: _conv2d_numpy(x, w)), _max_err(ref, fw)
    if fw.name == "torch":
        F = fw.module.nn.functional
        return (lambda: F.conv2d(tx, tw, padding=1)), _max_err(ref, fw)
    _need(tx, "conv2d", fw)
    return (lambda: fw.sync(tx.conv2d(tw, padding=1))), _max_err(ref, fw)


def _conv2d_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # im2col with a strided view, then one matmul (numpy's fastest route to a 3x3 pad-1 convolution)
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # N C H W kh kw
    out = np.tensordot(cols, w, axes=((1, 4, 5), (1, 2, 3)))  # N H W O
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def attention(fw: Framework, shape: tuple[int, int, int]) -> tuple[Run, Callable]:
    """softmax(q k^T / sqrt(d)) v per head: two batched matmuls (one with a transposed operand) around a softmax."""
    q, k, v = (_rng(20 + i).standard_normal(shape, dtype=np.float32) for i in range(3))
    scale = 1 / np.sqrt(shape[-1])

    def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        s = q @ k.transpose(0, 2, 1) * scale
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    ref = numpy_attention(*(a.astype(np.float64) for a in (q, k, v)))
    if fw.name == "numpy":
        return (lambda: numpy_attention(q, k, v)), _max_err(ref, fw)
    tq, tk, tv = fw.tensor(q), fw.tensor(k), fw.tensor(v)
    if fw.name == "torch":
        torch = fw.module
        return (lambda: torch.softmax(tq @ tk.transpose(-1, -2) * scale, -1) @ tv), _max_err(ref, fw)
    return (lambda: fw.sync((tq @ tk.transpose(-1, -2) * scale).softmax(-1) @ tv)), _max_err(ref, fw)


def embedding(fw: Framework, shape: tuple[int, int, int]) -> tuple[Run, Callable]:
    """table[idx]: rows of a table picked by an integer tensor (a language model's token embedding)."""
    rows, width, n = shape
    table = _rng(23).standard_normal((rows, width), dtype=np.float32)
    idx = _rng(24).integers(0, rows, n).astype(np.int32)
    ref = table[idx].astype(np.float64)
    if fw.name == "numpy":
        return (lambda: table[idx]), _max_err(ref, fw)
    tt = fw.tensor(table)
    if fw.name == "torch":
        ti = fw.module.from_numpy(idx.astype(np.int64))
        return (lambda: tt[ti]), _max_err(ref, fw)
    ti = fw.module.Tensor(idx).realize()
    return (lambda: fw.sync(tt[ti])), _max_err(ref, fw)


def scatter_add(fw: Framework, shape: tuple[int, int, int]) -> tuple[Run, Callable]:
    """out.index_add(0, dst, x[src]): each edge adds its source node's features into its destination (a GNN layer's
    sum aggregation; destinations repeat)."""
    nodes, edges, width = shape
    x = _rng(25).standard_normal((nodes, width), dtype=np.float32)
    src, dst = (_rng(s).integers(0, nodes, edges) for s in (26, 27))
    ref = np.zeros((nodes, width))
    np.add.at(ref, dst, x[src].astype(np.float64))
    if fw.name == "numpy":

        def run() -> np.ndarray:
            out = np.zeros((nodes, width), np.float32)
            np.add.at(out, dst, x[src])
            return out

        return run, _max_err(ref, fw)
    tx = fw.tensor(x)
    if fw.name == "torch":
        torch = fw.module
        ts, td = torch.from_numpy(src), torch.from_numpy(dst)
        return (lambda: torch.zeros(nodes, width).index_add(0, td, tx[ts])), _max_err(ref, fw)
    Tensor = fw.module.Tensor
    ts, td = Tensor(src).realize(), Tensor(dst).realize()
    return (lambda: fw.sync(Tensor.zeros(nodes, width).index_add(0, td, tx[ts]))), _max_err(ref, fw)


# ---------------------------------------------------------------------------------------------------------------------
# tiny op: Python overhead per realized op


def tiny(fw: Framework, n: int, jit: bool) -> tuple[Run, Callable]:
    a = _rng(10).standard_normal(n, dtype=np.float32)
    ta = fw.tensor(a)
    check = _max_err(a + 1, fw)
    if fw.name in ("numpy", "torch"):
        if jit:
            raise Skip(f"{fw.name} has no JIT (its eager call is in the row above)")
        return (lambda: ta + 1), check
    if not jit:
        return (lambda: (ta + 1).realize()), check
    jit_cls = _tinyjit(fw)
    f = jit_cls(lambda x: (x + 1).realize())
    return (lambda: f(ta)), check


def tiny_new_number(fw: Framework, n: int) -> tuple[Run, Callable]:
    """a * s with another s each call (a sampler's coefficient of the step): an op whose number keeps changing (uopkit
    takes the number as a launch value from the second one on, `schedule/launch_consts.py`, instead of compiling)."""
    a = _rng(12).standard_normal(n, dtype=np.float32)
    ta = fw.tensor(a)
    last = [1.0]

    def run() -> Any:
        last[0] += 2.0**-12
        out = ta * last[0]
        return out if fw.name in ("numpy", "torch") else out.realize()

    def check(out: Any) -> float:
        ref = a.astype(np.float64) * np.float32(last[0])
        return float(np.abs(fw.numpy(out).astype(np.float64) - ref).max()) / float(np.abs(ref).max())

    return run, check


def _tinyjit(fw: Framework) -> Any:
    if fw.name == "tinygrad":
        return fw.module.TinyJit
    try:
        from uopkit.jit import TinyJit
    except ImportError as e:
        raise Skip(f"uopkit has no TinyJit ({e})") from None
    return TinyJit


# ---------------------------------------------------------------------------------------------------------------------
# MLP training step


def mlp_weights(dims: tuple[int, ...], batch: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = _rng(11)
    params: list[np.ndarray] = []
    for i, o in zip(dims[:-1], dims[1:], strict=True):
        bound = 1 / np.sqrt(i)
        params += [rng.uniform(-bound, bound, (i, o)).astype(np.float32), np.zeros(o, np.float32)]
    x = rng.standard_normal((batch, dims[0]), dtype=np.float32)
    y = rng.integers(0, dims[-1], batch).astype(np.int32)
    return params, x, y


LR = 0.01


def mlp_step(fw: Framework, dims: tuple[int, ...], batch: int, jit: bool) -> tuple[Run, Callable]:
    """One SGD step of a ReLU MLP with cross-entropy loss; the result checked is the first step's loss."""
    params, x, y = mlp_weights(dims, batch)
    ref_loss = _numpy_mlp_step([p.astype(np.float64) for p in params], x.astype(np.float64), y)
    step = make_mlp_step(fw, params, x, y, jit)
    first = {"loss": None}

    def run() -> Any:
        loss = step()
        if first["loss"] is None:
            first["loss"] = float(fw.numpy(loss))
        return loss

    def check(_: Any) -> float:
        return abs(first["loss"] - ref_loss) / max(abs(ref_loss), 1e-6)

    return run, check


def make_mlp_step(fw: Framework, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, jit: bool) -> Run:
    if fw.name == "numpy":
        if jit:
            raise Skip("numpy has no JIT")
        ps = [p.copy() for p in params]
        return lambda: _numpy_mlp_step(ps, x, y)
    step = _torch_step(fw, params) if fw.name == "torch" else _tiny_style_step(fw, params, jit)
    tx, ty = fw.tensor(x), _targets(fw, y)
    return lambda: step(tx, ty)


def make_epoch(fw: Framework, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, batch: int) -> Run:
    """One pass over a dataset stored on the device, batch after batch of `batch` rows sliced from it (x[i:i+batch]),
    an MLP step each, as a training loop does; returns the last loss."""
    starts = range(0, len(x) - batch + 1, batch)
    if fw.name == "numpy":
        ps = [p.copy() for p in params]
        return lambda: [_numpy_mlp_step(ps, x[i : i + batch], y[i : i + batch]) for i in starts][-1]
    step = _torch_step(fw, params) if fw.name == "torch" else _tiny_style_step(fw, params, False)
    tx, ty = fw.tensor(x), _targets(fw, y)
    return lambda: [step(tx[i : i + batch], ty[i : i + batch]) for i in starts][-1]


def _targets(fw: Framework, y: np.ndarray) -> Any:
    # class indices: torch's cross_entropy takes int64
    return fw.module.from_numpy(y.astype(np.int64)) if fw.name == "torch" else fw.tensor(y)


def _numpy_mlp_step(ps: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    # forward, manual backward of softmax cross-entropy, and SGD, in place
    acts, h = [x], x
    n_layers = len(ps) // 2
    for i in range(n_layers):
        h = h @ ps[2 * i] + ps[2 * i + 1]
        if i < n_layers - 1:
            h = np.maximum(h, 0)
        acts.append(h)
    logits = acts[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(len(y)), y].mean()
    g = np.exp(logp)
    g[np.arange(len(y)), y] -= 1
    g /= len(y)
    for i in reversed(range(n_layers)):
        gw, gb = acts[i].T @ g, g.sum(axis=0)
        if i > 0:
            g = (g @ ps[2 * i].T) * (acts[i] > 0)
        ps[2 * i] -= LR * gw
        ps[2 * i + 1] -= LR * gb
    return float(loss)


def _torch_step(fw: Framework, params: list[np.ndarray]) -> Callable[[Any, Any], Any]:
    torch = fw.module
    ps = [fw.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.SGD(ps, lr=LR)
    n_layers = len(ps) // 2

    def step(tx: Any, ty: Any) -> Any:
        opt.zero_grad()
        h = tx
        for i in range(n_layers):
            h = h @ ps[2 * i] + ps[2 * i + 1]
            if i < n_layers - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, ty)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _cross_entropy(logits: Any, y: Any, fw: Framework) -> Any:
    # cross_entropy first: uopkit has both, and its sparse_categorical_crossentropy (tinygrad's ignore_index of -1)
    # is a different node graph from the one the bench has always timed; tinygrad's is the same loss either way
    for name in ("cross_entropy", "sparse_categorical_crossentropy"):
        fn = getattr(logits, name, None)
        if fn is not None:
            return fn(y)
    raise Skip(f"{fw.name} has no sparse_categorical_crossentropy or cross_entropy")


def _sgd(fw: Framework, ps: list[Any]) -> Any:
    if fw.name == "tinygrad":
        return fw.module.nn.optim.SGD(ps, lr=LR)
    try:
        from uopkit.nn.optim import SGD  # type: ignore[import-not-found]
    except ImportError:
        raise Skip("uopkit has no nn.optim.SGD") from None
    return SGD(ps, lr=LR)


def _tiny_style_step(fw: Framework, params: list[np.ndarray], jit: bool) -> Callable[[Any, Any], Any]:
    # tinygrad and uopkit share the API: Tensor, backward, nn.optim.SGD, TinyJit
    Tensor = fw.module.Tensor
    ps = [fw.tensor(p, requires_grad=True) for p in params]
    _need(Tensor, "backward", fw)
    opt = _sgd(fw, ps)
    n_layers = len(ps) // 2

    # tinygrad 0.14 has no Tensor.train: its optimizer wants the TRAINING flag
    if fw.name == "tinygrad":
        from tinygrad.helpers import Context

        train: Callable[[], Any] = lambda: Context(TRAINING=1)
    else:
        train = getattr(Tensor, "train", contextlib.nullcontext)

    def step(xb: Any, yb: Any) -> Any:
        with train():
            opt.zero_grad()
            h = xb
            for i in range(n_layers):
                h = h @ ps[2 * i] + ps[2 * i + 1]
                if i < n_layers - 1:
                    h = h.relu()
            loss = _cross_entropy(h, yb, fw)
            loss.backward()
            # the loss must be computed before the update overwrites the weights it reads
            schedule_step = getattr(opt, "schedule_step", None)
            if schedule_step is not None:
                return loss.realize(*schedule_step())
            loss.realize()
            opt.step()
            return loss

    return _tinyjit(fw)(step) if jit else step

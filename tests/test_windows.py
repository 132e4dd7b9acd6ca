"""schedule/windows.py: a kernel reading a contiguous window of a buffer takes the window's start at launch, so the
same work at another offset (the next batch, the next time step) runs the same compiled kernel."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.engine.realize import stats
from uopkit.helpers import Context
from uopkit.nn.optim import SGD
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.windows import window_inputs
from uopkit.uop.ops import Ops


def _items(t: Tensor):  # noqa: ANN202
    return create_schedule(kernelize_tensors([t]))


def _compiled() -> int:
    return stats["kernels_compiled"]


def test_batches_of_a_dataset_compile_their_kernels_once() -> None:
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((640, 12)).astype(np.float32)
    y_np = rng.integers(0, 5, 640).astype(np.int32)
    X, Y = Tensor(x_np).realize(), Tensor(y_np).realize()
    Tensor.manual_seed(0)
    l1, l2 = nn.Linear(12, 16), nn.Linear(16, 5)
    opt = SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.1)
    w1, b1, w2, b2 = (p.numpy().astype(np.float64) for p in (l1.weight, l1.bias, l2.weight, l2.bias))
    compiled = []
    with Tensor.train():
        for i in range(0, 640, 64):
            opt.zero_grad()
            loss = l2(l1(X[i : i + 64]).relu()).cross_entropy(Y[i : i + 64])
            loss.backward()
            opt.step()
            got = loss.item()
            # the same step in numpy (nn.Linear: x @ W.T + b), from the same weights
            x, y = x_np[i : i + 64].astype(np.float64), y_np[i : i + 64]
            h = x @ w1.T + b1
            a = np.maximum(h, 0)
            z = a @ w2.T + b2
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            want = -np.log(p[np.arange(64), y]).mean()
            np.testing.assert_allclose(got, want, rtol=1e-4)
            g = p.copy()
            g[np.arange(64), y] -= 1
            g /= 64
            gw2, gb2 = g.T @ a, g.sum(0)
            ga = (g @ w2) * (h > 0)
            gw1, gb1 = ga.T @ x, ga.sum(0)
            w1, b1, w2, b2 = w1 - 0.1 * gw1, b1 - 0.1 * gb1, w2 - 0.1 * gw2, b2 - 0.1 * gb2
            compiled.append(_compiled())
    # the first two batches compile the step (the first batch starts at 0, like any other window); none after them
    assert compiled[1] == compiled[-1], compiled
    np.testing.assert_allclose(l1.weight.numpy(), w1, rtol=1e-4, atol=1e-5)


def test_a_recurrence_over_time_steps_runs_one_kernel_per_step_shape() -> None:
    rng = np.random.default_rng(1)
    xs_np = rng.standard_normal((24, 4, 8)).astype(np.float32)
    w_np, u_np = (rng.standard_normal((8, 8)).astype(np.float32) * 0.3 for _ in range(2))
    xs, W, U = Tensor(xs_np).realize(), Tensor(w_np).realize(), Tensor(u_np).realize()
    h = Tensor.zeros(4, 8)
    h_np = np.zeros((4, 8), np.float32)
    for t in range(24):
        h = (xs[t] @ W + h @ U).tanh()
        h_np = np.tanh(xs_np[t] @ w_np + h_np @ u_np)
    before = _compiled()
    np.testing.assert_allclose(h.numpy(), h_np, rtol=1e-4, atol=1e-5)
    # 24 steps, one kernel each: the first (h = 0) and the rest (the same kernel at another start of xs)
    assert _compiled() - before <= 2


def test_windows_of_one_input_each_take_a_start() -> None:
    x_np = np.arange(100, dtype=np.float32)
    x = Tensor(x_np).realize()
    asts = set()
    for i, j in ((0, 1), (7, 8), (50, 3), (90, 20)):
        out = x[i : i + 9] * 2 + x[j : j + 9]
        (item,) = _items(out)
        asts.add(item.ast)
        assert dict(item.var_vals) == {"window1": i, "window1_1": j}
        np.testing.assert_array_equal(out.numpy(), x_np[i : i + 9] * 2 + x_np[j : j + 9])
    assert len(asts) == 1


def test_stacked_rows_at_new_offsets_compile_once() -> None:
    # a collate of dataset rows, and nanoGPT's get_batch: crops at random offsets (overlapping ones too)
    rng = np.random.default_rng(7)
    x_np = rng.standard_normal((300, 5)).astype(np.float32)
    data_np = rng.integers(0, 65, 2000).astype(np.int32)
    x, data = Tensor(x_np).realize(), Tensor(data_np).realize()
    before = None
    for step in range(6):
        idx = rng.permutation(300)[:8]
        rows = Tensor.stack(*[x[int(i)] for i in idx])
        ix = rng.integers(0, 2000 - 17, 4)
        ix[1] = ix[0] + 3
        xb = Tensor.stack(*[data[int(i) : int(i) + 16] for i in ix])
        yb = Tensor.stack(*[data[int(i) + 1 : int(i) + 17] for i in ix])
        Tensor.realize(rows, xb, yb)
        np.testing.assert_array_equal(rows.numpy(), x_np[idx])
        np.testing.assert_array_equal(xb.numpy(), np.stack([data_np[i : i + 16] for i in ix]))
        np.testing.assert_array_equal(yb.numpy(), np.stack([data_np[i + 1 : i + 17] for i in ix]))
        if step == 0:
            before, (hits, misses) = _compiled(), _counts()
    assert _compiled() == before
    assert _counts()[1] == misses and _counts()[0] >= hits + 5


def test_windows_inside_windows_move_together_or_schedule_again() -> None:
    # a kernel reading a window of a window (`a[2:6]`) reads the same elements as the graph's `x[j:j+4]` when j = i + 2:
    # it must move with `a`, not with that other window
    x_np = np.arange(64, dtype=np.float32)
    x = Tensor(x_np).realize()
    for i, j in ((0, 2), (10, 2), (4, 40), (20, 22), (3, 3)):
        a = x[i : i + 6]
        out = a[2:6] * 100 + x[j : j + 4]
        misses = _counts()[1]
        np.testing.assert_array_equal(out.numpy(), x_np[i + 2 : i + 6] * 100 + x_np[j : j + 4])
        if (i, j) == (10, 2):
            # (the graph's windows lay one inside the other and moved apart: not replayed)
            assert _counts()[1] == misses + 1
        both = Tensor.stack(a[1:3], x[j : j + 2])
        np.testing.assert_array_equal(both.numpy(), np.stack([x_np[i + 1 : i + 3], x_np[j : j + 2]]))


def test_more_windows_than_starts_share_one() -> None:
    from uopkit.schedule.windows import MAX_WINDOW_STARTS

    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((500, 3)).astype(np.float32)
    x = Tensor(x_np).realize()
    for _ in range(3):
        idx = rng.permutation(500)[: MAX_WINDOW_STARTS + 4]
        # (rows computed on: not gathered, each row a window of the kernel)
        out = Tensor.stack(*[x[int(i)] * 2 for i in idx])
        np.testing.assert_array_equal(out.numpy(), x_np[idx] * 2)


def test_slices_are_windows_other_views_are_not() -> None:
    x = Tensor(np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)).realize()
    x_np = x.numpy()
    # rows (one run of memory), and columns and crops (a strided run): any slice of the buffer
    views = [(x[2, 1:4], x_np[2, 1:4]), (x[1:3], x_np[1:3]), (x[3], x_np[3]), (x[2, 4], x_np[2, 4])]
    views += [(x[:, 1:3], x_np[:, 1:3]), (x[:, 2], x_np[:, 2]), (x[1:3, 2:5, 1:4], x_np[1:3, 2:5, 1:4])]
    views += [(x[:, :, 4], x_np[:, :, 4]), (x[3, :, 0], x_np[3, :, 0])]
    # and strided slices (a slice of the buffer in a shape that splits the step out)
    views += [(x[::2], x_np[::2]), (x[1::2], x_np[1::2]), (x[1:, 1::2, ::2], x_np[1:, 1::2, ::2])]
    for view, ref in views:
        (item,) = _items(view + 1)
        assert [name for name, _ in item.var_vals] == ["window1"]
        np.testing.assert_array_equal((view + 1).numpy(), ref + 1)
    # a permuted view, or all of the buffer: the offsets stay constants
    for view, ref in ((x.permute(2, 0, 1)[1:], x_np.transpose(2, 0, 1)[1:]),):
        (item,) = _items(view + 1)
        assert item.var_vals == ()
        np.testing.assert_array_equal((view + 1).numpy(), ref + 1)
    (item,) = _items(x + 1)
    assert item.var_vals == ()


def test_a_batch_first_recurrence_over_columns_runs_one_kernel_per_step_shape() -> None:
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal((3, 20, 6)).astype(np.float32)
    w_np = rng.standard_normal((6, 6)).astype(np.float32) * 0.3
    x, W = Tensor(x_np).realize(), Tensor(w_np).realize()
    h, h_np = Tensor.zeros(3, 6), np.zeros((3, 6), np.float32)
    before = _compiled()
    for t in range(20):
        h = (x[:, t] + h @ W).tanh().realize()
        h_np = np.tanh(x_np[:, t] + h_np @ w_np)
        np.testing.assert_allclose(h.numpy(), h_np, rtol=1e-4, atol=1e-5)
    assert _compiled() - before <= 2


def test_a_buffer_also_read_otherwise_keeps_constants() -> None:
    x_np = np.arange(32, dtype=np.float32)
    x = Tensor(x_np).realize()
    # (a transpose read flat is no run of the buffer's memory)
    out = x[4:20] + x.reshape(4, 8).permute(1, 0).reshape(32)[:16]
    (item,) = _items(out)
    assert item.var_vals == ()
    np.testing.assert_array_equal(out.numpy(), x_np[4:20] + x_np.reshape(4, 8).T.reshape(32)[:16])


def test_aligned_renderers_keep_the_start_alignment() -> None:
    x = Tensor.empty(4096)
    (kernel,) = [u for u in kernelize_tensors([x[128:256] + 1]).toposort() if u.op is Ops.KERNEL]
    # the CPU's vectors need no alignment: the start is the variable itself
    ast, starts = window_inputs(kernel.arg, vector_align=0)
    (start,) = [u.src[1] for u in ast.toposort() if u.op is Ops.LOAD]
    assert start.op is Ops.DEFINE_VAR and list(starts.values()) == [128]
    # a renderer with aligned vectors (CUDA's 16 bytes) learns that the start is a multiple of 64 elements
    ast, starts = window_inputs(kernel.arg, vector_align=16)
    (start,) = [u.src[1] for u in ast.toposort() if u.op is Ops.LOAD]
    assert start.op is Ops.MUL and start.src[1].arg == 64 and list(starts.values()) == [2]
    # rows stacked from a (., 24) buffer: each start a multiple of 8 elements, whatever row (one kernel for all batches)
    rows = Tensor.empty(100, 24)
    asts = set()
    for i, j in ((64, 3), (1, 2), (8, 90)):
        (kernel,) = [u for u in kernelize_tensors([rows[i] + rows[j]]).toposort() if u.op is Ops.KERNEL]
        ast, starts = window_inputs(kernel.arg, vector_align=16, existing=frozenset({1}))
        assert {u.src[1].src[1].arg for u in ast.toposort() if u.op is Ops.LOAD} == {8}
        assert list(starts.values()) == [i * 3, j * 3]
        asts.add(ast)
    assert len(asts) == 1


def test_windowed_kernels_replay_in_a_jit_and_under_beam() -> None:
    from uopkit.jit import TinyJit

    x_np = np.arange(64, dtype=np.float32)
    x = Tensor(x_np).realize()

    @TinyJit
    def f(y: Tensor) -> Tensor:
        return (x[8:24] * y).realize()

    y_np = np.ones(16, np.float32)
    for k in range(4):
        np.testing.assert_array_equal(f(Tensor(y_np * k)).numpy(), x_np[8:24] * k)
    with Context(BEAM=1):
        out = (x[40:56] * 3).numpy()
    np.testing.assert_array_equal(out, x_np[40:56] * 3)


@pytest.mark.parametrize("start", [0, 1, 63, 64, 200])
def test_window_values_on_every_start(start: int) -> None:
    x_np = np.random.default_rng(start).standard_normal(300).astype(np.float32)
    x = Tensor(x_np).realize()
    out = (x[start : start + 37].reshape(37, 1) * x[start : start + 37].reshape(1, 37)).sum(1)
    np.testing.assert_allclose(
        out.numpy(), (x_np[start : start + 37, None] * x_np[None, start : start + 37]).sum(1), rtol=1e-5
    )


# the schedule cache: a graph whose windows moved replays the same schedule with the windows' new starts


def _counts() -> tuple[int, int]:
    return stats["schedule_hits"], stats["schedule_misses"]


def test_the_next_batch_replays_the_schedule_with_moved_windows() -> None:
    x_np = np.random.default_rng(2).standard_normal((50, 6)).astype(np.float32)
    w_np = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    (x[0:5] @ w).relu().sum(0).realize()
    hits, misses = _counts()
    for i in range(5, 45, 5):
        out = (x[i : i + 5] @ w).relu().sum(0)
        np.testing.assert_allclose(out.numpy(), np.maximum(x_np[i : i + 5] @ w_np, 0).sum(0), rtol=1e-5, atol=1e-6)
    assert _counts() == (hits + 8, misses)


def test_windows_of_one_buffer_moved_apart_schedule_again() -> None:
    x_np = np.arange(40, dtype=np.float32)
    x = Tensor(x_np).realize()
    for i, j in ((0, 8), (2, 10), (8, 0), (3, 3), (30, 1)):
        out = x[i : i + 4] * 10 + x[j : j + 4]
        np.testing.assert_array_equal(out.numpy(), x_np[i : i + 4] * 10 + x_np[j : j + 4])


def test_a_window_read_at_a_constant_offset_elsewhere_is_not_moved() -> None:
    x_np = np.arange(16, dtype=np.float32)
    x = Tensor(x_np).realize()
    for i in range(6):
        # the transpose read flat is no run of x, so x's kernel has no window: its offset i stays in the code
        out = x[i : i + 4] + x.reshape(4, 4).permute(1, 0).reshape(16)[:4]
        np.testing.assert_array_equal(out.numpy(), x_np[i : i + 4] + x_np.reshape(4, 4).T.reshape(16)[:4])
    for i in range(6):
        # a window written by an assign
        buf = Tensor(np.zeros(16, np.float32)).realize()
        buf[i : i + 4].assign(x[i + 2 : i + 6] * 2).realize()
        want = np.zeros(16, np.float32)
        want[i : i + 4] = x_np[i + 2 : i + 6] * 2
        np.testing.assert_array_equal(buf.numpy(), want)


def test_a_window_realized_with_a_result_keeps_its_own_start() -> None:
    x_np = np.arange(30, dtype=np.float32)
    x = Tensor(x_np).realize()
    for i in range(0, 20, 4):
        view, out = x[i : i + 3], x[i : i + 3] * 2
        Tensor.realize(view, out)
        np.testing.assert_array_equal(view.numpy(), x_np[i : i + 3])
        np.testing.assert_array_equal(out.numpy(), x_np[i : i + 3] * 2)


def test_moved_windows_replay_inside_a_capturing_jit() -> None:
    from uopkit.jit import TinyJit

    x_np = np.arange(64, dtype=np.float32)
    x = Tensor(x_np).realize()
    (x[0:8] + 1).realize()

    @TinyJit
    def f(y: Tensor) -> Tensor:
        return (x[16:24] + y).realize()

    for k in range(4):
        np.testing.assert_array_equal(f(Tensor(np.full(8, k, np.float32))).numpy(), x_np[16:24] + k)


# stores into a window of the output buffer


def test_filling_a_buffer_row_by_row_compiles_one_kernel() -> None:
    x_np = np.random.default_rng(5).standard_normal((30, 7)).astype(np.float32)
    x = Tensor(x_np).realize()
    out = Tensor.zeros(30, 7).contiguous().realize()
    before, (hits, misses) = _compiled(), _counts()
    for i in range(30):
        out[i] = x[i] * 2 + 1
    np.testing.assert_allclose(out.numpy(), x_np * 2 + 1, rtol=1e-6)
    assert _compiled() - before <= 2
    # and the next row replays the first one's schedule: the assign's view moves with it
    assert _counts()[1] - misses <= 2 and _counts()[0] - hits >= 28


def test_a_cache_written_one_position_at_a_time() -> None:
    # a fixed-size key cache (batch 1): each step writes its position
    cache = Tensor.zeros(1, 16, 8).contiguous().realize()
    want = np.zeros((1, 16, 8), np.float32)
    before = _compiled()
    for pos in range(12):
        k = np.full((1, 1, 8), pos + 0.5, np.float32)
        cache[:, pos : pos + 1] = Tensor(k)
        want[:, pos : pos + 1] = k
        np.testing.assert_array_equal(cache.numpy(), want)
    assert _compiled() - before <= 2


@pytest.mark.parametrize("device", ["CPU", "EMULATOR"])
def test_a_heads_first_cache_written_one_position_at_a_time(device: str) -> None:
    # a (B, H, L, D) key cache written at `cache[:, :, pos]`: a strided run of the buffer, which compiled a kernel per
    # position (the store views whole rows from the window's start now, never past the buffer's end: pos = L - 1)
    b, h, length, d = 2, 3, 10, 4
    cache = Tensor.zeros(b, h, length, d, device=device).contiguous().realize()
    want = np.zeros((b, h, length, d), np.float32)
    w = Tensor(np.linspace(-1, 1, 5 * h * d, dtype=np.float32).reshape(5, h * d), device=device).realize()
    before = _compiled()
    for pos in range(length):
        x = np.full((b, 5), pos + 0.5, np.float32)
        k = (Tensor(x, device=device) @ w).reshape(b, h, 1, d)
        cache[:, :, pos : pos + 1] = k
        want[:, :, pos : pos + 1] = (x @ w.numpy()).reshape(b, h, 1, d)
        np.testing.assert_allclose(cache.numpy(), want, rtol=1e-5, atol=1e-6)
    assert _compiled() - before <= 4


def test_in_place_updates_of_overlapping_windows() -> None:
    y_np = np.arange(40, dtype=np.float32)
    y = Tensor(y_np.copy()).realize()
    for i in range(0, 30, 3):
        # reads the window one element ahead of the one it writes (the old values, as numpy's copy)
        y[i : i + 5] += y[i + 1 : i + 6]
        y_np[i : i + 5] += y_np[i + 1 : i + 6].copy()
        np.testing.assert_array_equal(y.numpy(), y_np)
    z_np = np.arange(60, dtype=np.float32).reshape(6, 10)
    z = Tensor(z_np.copy()).realize()
    for i in range(5):
        # a column written from its neighbour: a strided window is written at constant offsets, as before
        z[:, i] = z[:, i + 1] * 2
        z_np[:, i] = z_np[:, i + 1] * 2
    np.testing.assert_array_equal(z.numpy(), z_np)


# stacking many slices of one stored tensor (a collate, a get_batch) is one gather


def test_stacking_slices_of_one_tensor_gathers_them() -> None:
    rng = np.random.default_rng(11)
    x_np = rng.standard_normal((50, 4, 3)).astype(np.float32)
    x = Tensor(x_np).realize()
    idx = [int(i) for i in rng.integers(-50, 50, 12)]
    rows = Tensor.stack(*[x[i] for i in idx])
    # (no kernel reads a window per row)
    assert not any(u.op is Ops.SHRINK for u in rows.uop.toposort())
    np.testing.assert_array_equal(rows.numpy(), x_np[idx])
    for dim in (1, -1, 2):
        np.testing.assert_array_equal(Tensor.stack([x[i] for i in idx], dim=dim).numpy(), np.stack(x_np[idx], axis=dim))
    # runs of rows, from a reshaped buffer too
    flat_np = x_np.reshape(-1)
    flat = Tensor(flat_np).realize()
    crops = Tensor.stack(*[flat[i : i + 7] for i in range(0, 90, 9)])
    np.testing.assert_array_equal(crops.numpy(), np.stack([flat_np[i : i + 7] for i in range(0, 90, 9)]))
    blocks = Tensor.stack(*[x[i : i + 2] for i in range(0, 40, 4)])
    np.testing.assert_array_equal(blocks.numpy(), np.stack([x_np[i : i + 2] for i in range(0, 40, 4)]))
    # anything else stacks as before: a column, mixed sources, rows of different lengths
    for parts, want in (
        ([x[:, i] for i in range(3)] * 3, [x_np[:, i] for i in range(3)] * 3),
        ([x[i] for i in range(8)] + [x[0] * 2], [x_np[i] for i in range(8)] + [x_np[0] * 2]),
        ([flat[i : i + 3] for i in range(8)] + [flat[0:6:2]], [flat_np[i : i + 3] for i in range(8)] + [flat_np[:6:2]]),
    ):
        np.testing.assert_array_equal(Tensor.stack(*parts).numpy(), np.stack(want))


def test_gathered_slices_keep_their_gradients() -> None:
    w_np = np.arange(40, dtype=np.float32).reshape(10, 4)
    g_np = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    idx = [1, 3, 3, 5, 0, 9, 2, 2, 7, 1]
    want = np.zeros_like(w_np)
    np.add.at(want, idx, g_np)
    w = Tensor(w_np, requires_grad=True)
    (Tensor.stack(*[w[i] for i in idx]) * Tensor(g_np)).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), want)
    # a slice that wants a gradient of its own gets it
    w = Tensor(w_np).realize()
    parts = [w[i].requires_grad_() for i in idx]
    (Tensor.stack(*parts) * Tensor(g_np)).sum().backward()
    assert all(p.grad is not None for p in parts)
    np.testing.assert_array_equal(parts[4].grad.numpy(), g_np[4])


def test_rows_and_runs_are_the_general_paths_views() -> None:
    x = Tensor(np.random.default_rng(4).standard_normal((7, 3, 2)).astype(np.float32)).realize()
    for t in (x, x * 2, x.permute(1, 0, 2), Tensor(np.arange(5)).realize()):
        n = t.shape[0]
        cases = [*range(-n, n), slice(None), slice(1, 3), slice(-2, None), slice(None, -1), slice(2, 2), slice(5, 1)]
        for index in [*cases, slice(-100, 100), slice(0, 1, 1)]:
            # the fast path builds the same (hash-consed) nodes as the general one
            assert t[index].uop is t._indexed(index, "getitem").uop
    with pytest.raises(IndexError, match="out of bounds"):
        x[7]
    with pytest.raises(IndexError, match="out of bounds"):
        x[-8]


_TABLES = {
    # realized values that are views of their buffer other than one RESHAPE: a cumprod's, cumsum's or matmul's result
    # (a reshape of a reshape of it), a flip (a view, nothing computed), a reshape of a reshape written out
    "cumprod": (lambda t: (1 - t).cumprod(0), lambda a: np.cumprod(1 - a)),
    "cumsum": (lambda t: t.cumsum(0), np.cumsum),
    "flip": (lambda t: t.flip(0), lambda a: a[::-1]),
    "matvec": (lambda t: (t.reshape(1, 64).expand(8, 64) + 0).T @ Tensor.full((8,), 0.125), lambda a: a),
    "reshapes": (lambda t: t.reshape(4, 16).reshape(2, 32).reshape(64), lambda a: a),
}


@pytest.mark.parametrize("name", list(_TABLES))
def test_a_table_realized_as_a_view_of_its_buffer_is_read_in_windows(name: str) -> None:
    # `alphas_cumprod[t]` for a new t each step of a sampler: the same schedule with the window moved, as for a plain
    # buffer (it missed the cache, compiling a kernel, at every t)
    make, ref = _TABLES[name]
    a = np.random.default_rng(5).random(64).astype(np.float32)
    table, want = make(Tensor(a)).realize(), ref(a.astype(np.float64))
    # (a shape of its own per table: no schedule another table's test left in the cache)
    x_np = np.random.default_rng(6).standard_normal((3, 2 + list(_TABLES).index(name))).astype(np.float32)
    x = Tensor(x_np).realize()
    hits, misses = _counts()
    for k, t in enumerate(range(40, 9, -3)):
        if k == 2:
            hits, misses = _counts()
        out = (x * table[t]).sum()
        np.testing.assert_allclose(out.item(), (x_np * want[t]).sum(), rtol=1e-4, atol=1e-5)
    assert _counts() == (hits + 9, misses)


@pytest.mark.parametrize("name", ["flip", "cumsum"])
def test_a_window_of_a_table_view_realized_as_a_result_moves_with_it(name: str) -> None:
    # the result itself a view of the table (no kernel): a replay builds it at the moved window, mirrored for a flip
    make, ref = _TABLES[name]
    a = np.arange(64, dtype=np.float32)
    table, want = make(Tensor(a)).realize(), ref(a.astype(np.float64))
    plain = Tensor(a.copy()).realize()
    hits = _counts()[0]
    for t in range(2, 40, 5):
        view, out, other = table[t : t + 3], table[t : t + 3] * 2 + plain[t], plain[t : t + 3]
        Tensor.realize(view, out, other)
        np.testing.assert_allclose(view.numpy(), want[t : t + 3], rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), want[t : t + 3] * 2 + a[t], rtol=1e-6)
        np.testing.assert_array_equal(other.numpy(), a[t : t + 3])
    assert _counts()[0] - hits >= 6


def test_a_slice_of_an_elementwise_value_of_a_buffer_reads_a_window() -> None:
    # the backward of `stack` of per-step values times a computed vector (REINFORCE's `-(stack(log_probs) *
    # returns).sum()`): step t reads element t of `-returns`, fused as SHRINK(MUL(LOAD, -1)); each step's kernel took
    # its offset as a constant, one compiled kernel per step of every new episode length
    x_np = np.arange(1, 21, dtype=np.float32)
    x = Tensor(x_np).realize()
    asts = set()
    for i in (0, 3, 7, 13):
        scaled = x * -1.5 + 2
        out = scaled[i : i + 5].exp2().sum() + scaled[i + 1] * x[0]
        (item,) = _items(out)
        asts.add(item.ast)
        assert item.var_vals, "the slices should be windows of x"
        ref = np.exp2(x_np * -1.5 + 2)[i : i + 5].sum() + (x_np[i + 1] * -1.5 + 2) * x_np[0]
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    assert len(asts) == 1
    # a value that depends on the position (not a broadcast) keeps its constants
    (item,) = _items((x + Tensor.arange(20).float())[4:9] + 1)
    assert item.var_vals == ()
    np.testing.assert_array_equal(((x + Tensor.arange(20).float())[4:9] + 1).numpy(), x_np[4:9] + np.arange(4, 9) + 1)


def test_stacked_per_step_values_backward_compiles_no_kernel_per_step() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    w_np = rng.standard_normal((4, 3)).astype(np.float32)
    w = Tensor(w_np, requires_grad=True)

    def episode(n: int) -> tuple[np.ndarray, np.ndarray, int]:
        obs = rng.standard_normal((n, 4)).astype(np.float32)
        acts = rng.integers(0, 3, n)
        ret_np = rng.standard_normal(n).astype(np.float32)
        w.grad = None
        before = _compiled()
        logps = [(Tensor(obs[t]) @ w).log_softmax(-1)[int(acts[t])] for t in range(n)]
        ret = Tensor(ret_np)
        loss = -(Tensor.stack(logps) * ((ret - ret.mean()) / (ret.std() + 1e-9))).sum()
        loss.backward()
        got = w.grad.numpy()
        compiled = _compiled() - before
        tw = torch.tensor(w_np, requires_grad=True)
        tl = [torch.log_softmax(torch.tensor(obs[t]) @ tw, -1)[int(acts[t])] for t in range(n)]
        tr = torch.tensor(ret_np)
        (-(torch.stack(tl) * ((tr - tr.mean()) / (tr.std() + 1e-9))).sum()).backward()
        np.testing.assert_allclose(got, tw.grad.numpy(), rtol=1e-4, atol=1e-5)
        return got, tw.grad.numpy(), compiled

    episode(6)
    episode(7)
    # a new length compiles what depends on the length (the returns' statistics, the sum over steps), not a
    # kernel for each step's slice of the returns: the same count for 9 and for 17 steps
    assert episode(9)[2] == episode(17)[2]


def test_a_row_against_all_of_its_buffer_replays_with_the_row_moved() -> None:
    # t-SNE's per-point gradient (`dY[i] = sum(w[:, i] * (Y[i] - Y))`): row i of a buffer read as a window beside a
    # read of the whole buffer; the whole read keeps its constant offsets, the row's start moves on a replay
    rng = np.random.default_rng(7)
    y_np = rng.standard_normal((40, 3)).astype(np.float32)
    y = Tensor(y_np).realize()
    (item,) = _items((y[2] - y).sum(0))
    assert [name for name, _ in item.var_vals] == ["window1"]
    (y[0] - y).sum(0).realize()
    hits, misses = _counts()
    rows = range(1, 40, 3)
    for i in rows:
        out = (y[i] - y).sum(0)
        np.testing.assert_allclose(out.numpy(), (y_np[i] - y_np).sum(0), rtol=1e-5, atol=1e-5)
    assert _counts() == (hits + len(rows), misses)
    # a mirror or a slice of the whole read is no read of all of it at fixed offsets: those stay constants
    for i in (0, 5, 11):
        out = y[i] * y.flip(0) + y[:4].sum(0)
        np.testing.assert_allclose(out.numpy(), y_np[i] * y_np[::-1] + y_np[:4].sum(0), rtol=1e-5, atol=1e-5)


def test_a_slice_of_a_value_of_a_buffer_stays_put_when_a_window_beside_it_moves() -> None:
    # `(y * 2)[1:3]` is read as a window of y (the slice moves onto the load) at a start the graph's key holds; a
    # replay for the next row `y[i]` moved it along with the row (wrong values from the second row on)
    rng = np.random.default_rng(8)
    y_np = rng.standard_normal((40, 3)).astype(np.float32)
    y = Tensor(y_np).realize()
    for i in (0, 5, 11, 1):
        out = y[i] + (y * 2)[1:3].sum(0)
        np.testing.assert_allclose(out.numpy(), y_np[i] + (y_np * 2)[1:3].sum(0), rtol=1e-5, atol=1e-5)

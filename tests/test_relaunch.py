"""Order statistics of an input signature seen before, launched from their captured kernels
(`uopkit.tensor.relaunch`): the same values and indices as torch on every call (new data each time, new buffers for
the results), no graph built after the second call, and the graph where a gradient needs it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import GlobalCounters, Tensor, dtypes
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import reduce, relaunch, rounds
from uopkit.uop.ops import Ops

_R = np.random.default_rng(0)


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    # repeated values (ties by position), signed zeros and NaNs for floats
    if dtype.startswith("int"):
        return _R.integers(-20, 20, shape).astype(dtype)
    x = _R.standard_normal(shape).astype(dtype)
    x[..., ::7] = x[..., 1:2]
    x[..., 3::11] = 0.0
    x[..., 4::11] = -0.0
    x[..., 5::13] = np.nan
    return x


def _same(got: Tensor, want: torch.Tensor) -> None:
    g, w = got.numpy(), want.numpy()
    np.testing.assert_array_equal(g, w)
    if g.dtype.kind == "f":
        # (-0.0 kept; a NaN's sign is not compared: median() of a row holding one gives -NaN, torch +NaN)
        np.testing.assert_array_equal(np.signbit(g) & ~np.isnan(g), np.signbit(w) & ~np.isnan(w))


def _sorted_stable(x: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sort(x, dim=dim, descending=descending, stable=True)


# each op as (uopkit, torch): indices compared where torch's are defined (a stable sort's; topk's as the stable sort's
# first k; kthvalue's and median's the first position holding the value, as tests/test_tensor_ops.py has them)
_OPS = {
    "sort": (lambda t: t.sort(), lambda t: _sorted_stable(t, -1, False)),
    "sort dim 0 descending": (lambda t: t.sort(0, descending=True), lambda t: _sorted_stable(t, 0, True)),
    "argsort": (lambda t: (t.argsort(),), lambda t: (_sorted_stable(t, -1, False)[1],)),
    "topk 5": (lambda t: t.topk(5), lambda t: tuple(a[..., :5] for a in _sorted_stable(t, -1, True))),
    "topk 20 smallest": (
        lambda t: t.topk(20, largest=False),
        lambda t: tuple(a[..., :20] for a in _sorted_stable(t, -1, False)),
    ),
    "kthvalue": (lambda t: (t.kthvalue(7)[0],), lambda t: (t.kthvalue(7)[0],)),
    "median dim": (lambda t: (t.median(-1)[0],), lambda t: (t.median(-1)[0],)),
    "median": (lambda t: (t.median(),), lambda t: (t.median(),)),
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(3, 300), (1, 1500)])
@pytest.mark.parametrize("op", list(_OPS))
def test_every_call_as_torch(op: str, shape: tuple[int, ...], dtype: str):
    ours, theirs = _OPS[op]
    firsts = None
    for call in range(4):
        x = _data(shape, dtype)
        # (the last call's input lazy: stored first, then the captured kernels)
        t = Tensor(x) if call < 3 else Tensor(x) * 1
        got = ours(t)
        for g, w in zip(got, theirs(torch.tensor(x)), strict=True):
            _same(g, w)
        if firsts is None:
            firsts = [(g, g.numpy()) for g in got]
    # (each call's results in buffers of their own: the first call's are as they were)
    for g, values in firsts:
        np.testing.assert_array_equal(g.numpy(), values)


def test_after_the_second_call_no_graph_is_built(monkeypatch):
    x = [Tensor(_data((2, 1000), "float32")) for _ in range(3)]
    x[0].topk(50)[0].realize()
    x[1].topk(50)[0].realize()
    GlobalCounters.reset()
    want = x[1].topk(50)
    kernels = GlobalCounters.kernel_count

    def refused(*args, **kwargs):
        raise AssertionError("the graph was built again")

    monkeypatch.setattr(reduce, "top_keys", refused)
    GlobalCounters.reset()
    # (launched: the kernels the graph ran, none other)
    got = x[1].topk(50)
    assert GlobalCounters.kernel_count == kernels
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert got[1].dtype == want[1].dtype == dtypes.int32


def test_a_gradient_still_flows_through_the_graph():
    x_np = _data((2, 600), "float32")
    x_np[np.isnan(x_np)] = 1.5
    for _ in range(3):
        x = Tensor(x_np, requires_grad=True)
        tx = torch.tensor(x_np, requires_grad=True)
        (x.sort(descending=True)[0][:, :10] * 3).sum().backward()
        (torch.sort(tx, descending=True, stable=True)[0][:, :10] * 3).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def _nested_reduce_kernels(*ts: Tensor) -> int:
    # the kernels with a reduce inside another one's sources (a gather at computed positions, a search's steps)
    count = 0
    for item in create_schedule(kernelize_tensors(list(ts))):
        reduces = [u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS]
        count += any(any(s.op is Ops.REDUCE_AXIS for s in u.toposort() if s is not u) for u in reduces)
    return count


def test_kthvalue_and_median_gather_one_stored_position(monkeypatch):
    # the value of one rank: its position stored, then gathered. The sort's one-hot gather of the values, fused below
    # the slice, was a sum over the row for each element (64x1024: one kernel ~6 ms of a ~10 ms kthvalue): a third
    # kernel with a reduce inside a reduce, one more than the sort's and the gather of the first position holding it
    monkeypatch.setattr(relaunch, "ENABLED", False)
    x = Tensor(_data((64, 1024), "float32"))
    sort = _nested_reduce_kernels(*x.sort())
    assert _nested_reduce_kernels(*x.kthvalue(100)) == sort + 1
    assert _nested_reduce_kernels(*x.median(-1)) == sort + 1
    tx = torch.tensor(x.numpy())
    _same(x.kthvalue(100)[0], tx.kthvalue(100)[0])
    _same(x.median(-1)[0], tx.median(-1)[0])


def test_threads_relaunching_one_capture_get_their_own_answers():
    # a capture's own buffers (its intermediate values) are shared by its launches: two threads launching it at once
    # overwrote each other's mid-run (37-76 of 160 argsorts wrong in a scratch run before the capture's lock)
    import threading

    rows = [_R.standard_normal(3000).astype(np.float32) for _ in range(8)]
    for a in rows[:2]:
        Tensor(a).argsort().numpy()  # (built, then captured: the threads relaunch)
    wrong: list[int] = []

    def work(i: int) -> None:
        for r in range(40):
            a = rows[(i + r) % 8]
            if not (Tensor(a).argsort().numpy() == np.argsort(a, kind="stable")).all():
                wrong.append(r)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


@pytest.mark.parametrize(
    "n, dtype, descending, limit",
    [(100_000, "float32", False, None), (40_000, "float64", True, 16 << 20), (50_000, "int32", True, 16 << 20)],
)
def test_a_long_sort_is_captured_in_a_few_buffers(monkeypatch, n: int, dtype: str, descending: bool, limit: int | None):
    # a bitonic network's kernels each wrote a buffer of their own, all held by the capture: argsort of 1e5 floats,
    # 83 kernels of 1 MB each, past rounds.MAX_CAPTURED_BYTES, so its graph was built on every call (~40 ms where the
    # launches take ~12). Values whose last reader has run share a buffer now: captured, relaunched, as torch each call
    if limit is not None:
        monkeypatch.setattr(rounds, "MAX_CAPTURED_BYTES", limit)
    calls = []
    for call in range(4):
        if call == 3:

            def refused(*args, **kwargs):
                raise AssertionError("the graph was built again")

            monkeypatch.setattr(reduce, "bitonic_descending", refused)
        x = _data((n,), dtype)
        got = Tensor(x).sort(descending=descending)
        for g, w in zip(got, _sorted_stable(torch.tensor(x), -1, descending), strict=True):
            _same(g, w)
        calls.append((got, x))
    # (each call's results in buffers of their own)
    for got, x in calls:
        _same(got[1], _sorted_stable(torch.tensor(x), -1, descending)[1])


def test_a_capture_records_only_its_own_threads_kernels():
    # another thread's kernels, run while a capture (TinyJit's, rounds', relaunch's) records, were recorded too: a
    # replay launched them again, into that thread's buffers
    import threading

    from uopkit.engine.realize import capturing

    mine: list = []
    capturing.append(mine)
    try:
        other = threading.Thread(target=lambda: (Tensor(np.arange(5, dtype=np.float32)) * 7).realize())
        other.start()
        other.join()
        assert mine == []
        (Tensor(np.arange(5, dtype=np.float32)) * 9).realize()
        assert len(mine) >= 1
    finally:
        del capturing[len(capturing) - 1]

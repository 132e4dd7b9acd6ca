"""A write into a buffer keeps the old contents for the live lazy values that read it (value semantics, as a clone in
PyTorch), found through the index of which live tensors read which buffer (`LiveTensors.readers_of`), not by looking
at every live tensor: the readers the index must get right, and what a write costs with many unrelated ones alive."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.schedule import LiveTensors

torch = pytest.importorskip("torch")


def _pair(values: list[float]) -> tuple[Tensor, torch.Tensor]:
    return Tensor(np.array(values, np.float32)).realize(), torch.tensor(values, dtype=torch.float32)


def test_a_lazy_reader_made_before_writes_keeps_the_old_contents():
    x, tx = _pair([1.0, 2.0, 3.0, 4.0])
    r, s, tr, ts = x * 2, x.sum(), tx * 2, tx.sum()
    x[1] = 5.0
    tx[1] = 5.0
    mid, tmid = x + 0, tx + 0
    x.add_(1)
    tx.add_(1)
    x[2:4] += Tensor([10.0, 20.0])
    tx[2:4] += torch.tensor([10.0, 20.0])
    for a, b in ((r, tr), (s, ts), (mid, tmid), (x, tx)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_reader_kept_only_through_a_view_keeps_the_old_contents():
    # (no live tensor holds the computed value the views are of)
    x, tx = _pair([1.0, 2.0, 3.0, 4.0])
    r, p = (x + 1)[1:3], (x * 3).reshape(2, 2).permute(1, 0)
    tr, tp = (tx + 1)[1:3], (tx * 3).reshape(2, 2).permute(1, 0)
    x.copy_(Tensor([0.0, 0.0, 0.0, 0.0]))
    tx.copy_(torch.zeros(4))
    np.testing.assert_array_equal(r.numpy(), tr.numpy())
    np.testing.assert_array_equal(p.numpy(), tp.numpy())


def test_a_reader_collected_before_the_write_is_no_reader():
    x, tx = _pair([1.0, 2.0, 3.0])
    r = x * 2
    x[0] = 7.0  # (indexes r as a reader of x's buffer)
    tx[0] = 7.0
    del r
    gc.collect()
    assert all(t is not x for t, _, _ in _readers([x]))
    later, tlater = x - 1, tx - 1
    assert [t for t, _, _ in _readers([x])] == [later]
    x.add_(1)
    tx.add_(1)
    np.testing.assert_array_equal(later.numpy(), tlater.numpy())
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_readers_across_two_buffers():
    a, ta = _pair([1.0, 2.0])
    b, tb = _pair([10.0, 20.0])
    both, only_b, tboth, tonly_b = a * b, b + 1, ta * tb, tb + 1
    found = {id(t): m for t, m, _ in _readers([a, b])}
    assert found == {id(both): 0b11, id(only_b): 0b10}
    a.add_(1)
    ta.add_(1)
    later, tlater = a + b, ta + tb
    b[0] = -1.0
    tb[0] = -1.0
    for u, t in ((both, tboth), (only_b, tonly_b), (later, tlater), (a, ta), (b, tb)):
        np.testing.assert_array_equal(u.numpy(), t.numpy())


def test_a_write_looks_at_its_readers_not_every_live_lazy_tensor(monkeypatch):
    x, tx = _pair([0.0] * 8)
    unrelated = [Tensor(np.full(2, float(i), np.float32)) * 2 for i in range(300)]
    reader, treader = x * 2, tx * 2
    x[0] = 1.0
    tx[0] = 1.0
    seen = []
    # (what the write is given of the live tensors: from the index, or from a walk of the computed ones)
    for name in ("readers_of", "holding", "pending_assigns", "computed"):
        method = getattr(LiveTensors, name, None)
        if method is None:
            continue
        monkeypatch.setattr(LiveTensors, name, lambda s, *a, m=method: seen.append(len(r := m(s, *a))) or r)
    for i in range(1, 4):
        x[i] = float(i)
        tx[i] = float(i)
        x.add_(1)
        tx.add_(1)
    assert seen and max(seen) < 5, seen
    np.testing.assert_array_equal(reader.numpy(), treader.numpy())
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    assert unrelated[299].tolist() == [598.0, 598.0]


def _readers(buffers: list[Tensor]) -> list:
    from uopkit.schedule import live_tensors

    return live_tensors.readers_of([t.uop.base for t in buffers])

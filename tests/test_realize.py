"""engine/realize.py: the method cache, the schedule cache (same graph shape over new buffers) and execution."""

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.engine import realize
from uopkit.helpers import Context


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _hits() -> int:
    return realize.stats["schedule_hits"]


def test_repeated_graph_hits_the_schedule_cache(rng):
    a_np = rng.random(16, dtype=np.float32)
    a = Tensor(a_np).realize()
    outs = [(a + 1).realize() for _ in range(3)]
    before = _hits()
    outs += [(a + 1).realize() for _ in range(3)]
    assert _hits() - before == 3
    # every call wrote a buffer of its own: earlier results keep their values
    assert len({o.uop.base for o in outs}) == len(outs)
    for o in outs:
        np.testing.assert_allclose(o.numpy(), a_np + 1)


def test_same_structure_new_buffers(rng):
    # the cache is keyed by the graph's shape: a new input buffer replays the same kernels on it
    for _ in range(4):
        x_np, y_np = rng.random((8, 5), dtype=np.float32), rng.random((5,), dtype=np.float32)
        out = ((Tensor(x_np) * Tensor(y_np)).relu() * 2).sum(axis=0)
        np.testing.assert_allclose(out.numpy(), ((x_np * y_np) * 2).sum(axis=0), rtol=1e-5)


def test_aliasing_is_part_of_the_key(rng):
    # a+a and a+b have different keys even though both are ADD of two buffers
    a_np, b_np = rng.random(7, dtype=np.float32), rng.random(7, dtype=np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    for _ in range(2):
        np.testing.assert_allclose((a + b).numpy(), a_np + b_np)
        np.testing.assert_allclose((a + a).numpy(), a_np + a_np)
        np.testing.assert_allclose((b + a).numpy(), b_np + a_np)


def test_constants_are_part_of_the_key():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    for _ in range(2):
        np.testing.assert_allclose((a + 1).numpy(), np.arange(4) + 1)
        np.testing.assert_allclose((a + 2).numpy(), np.arange(4) + 2)


def test_in_place_updates_repeated(rng):
    # an SGD-like loop: the same assign graph every step over new data, the weight updated in place
    w_np = rng.random((4, 3), dtype=np.float32)
    w = Tensor(w_np.copy()).realize()
    for _ in range(5):
        g_np = rng.random((4, 3), dtype=np.float32)
        w.assign(w - Tensor(g_np) * 0.5).realize()
        w_np = w_np - g_np * 0.5
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)


def test_multiple_outputs_and_reduce(rng):
    x_np = rng.random((6, 9), dtype=np.float32)
    for _ in range(3):
        x = Tensor(x_np)
        m, s = x.max(axis=1), (x * 3).sum(axis=0)
        m.realize(s)
        np.testing.assert_allclose(m.numpy(), x_np.max(axis=1))
        np.testing.assert_allclose(s.numpy(), (x_np * 3).sum(axis=0), rtol=1e-5)


def test_views_of_results(rng):
    x_np = rng.random((4, 6), dtype=np.float32)
    for _ in range(3):
        x = Tensor(x_np)
        out = (x + 1).T
        out.realize()
        np.testing.assert_allclose(out.numpy(), (x_np + 1).T)


def test_cache_off_matches_cache_on(rng):
    x_np = rng.random((5, 5), dtype=np.float32)
    with Context(SCHEDULE_CACHE=0):
        before = _hits()
        ref = [((Tensor(x_np) @ Tensor(x_np)) + 1).numpy() for _ in range(2)]
        assert _hits() == before
    got = [((Tensor(x_np) @ Tensor(x_np)) + 1).numpy() for _ in range(2)]
    for r, g in zip(ref, got, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    np.testing.assert_allclose(got[0], x_np @ x_np + 1, rtol=1e-5)


def test_method_cache_skips_codegen():
    a = Tensor(np.ones(5, np.float32)).realize()
    # (both without the schedule cache: with it, a graph of this structure that other tests ran with other numbers
    # takes them as launch values, another kernel than the literal one an uncached schedule builds)
    with Context(SCHEDULE_CACHE=0):
        (a * 3 + 2).realize()
    compiled = realize.stats["kernels_compiled"]
    with Context(SCHEDULE_CACHE=0):
        np.testing.assert_allclose((a * 3 + 2).numpy(), np.full(5, 5.0))
    assert realize.stats["kernels_compiled"] == compiled


def test_compile_wait_is_the_wall_time_realize_spent_compiling():
    import time

    # shapes no other test compiles: two new kernels in one schedule, compiled together
    a_np = np.arange(37 * 3, dtype=np.float32).reshape(37, 3)
    a = Tensor(a_np).realize()
    before = dict(realize.stats)
    st = time.perf_counter()
    rows, cols = a.max(axis=1), a.sum(axis=0)
    Tensor.realize(rows, cols)
    elapsed = time.perf_counter() - st
    np.testing.assert_allclose(rows.numpy(), a_np.max(axis=1))
    np.testing.assert_allclose(cols.numpy(), a_np.sum(axis=0))
    assert realize.stats["kernels_compiled"] - before["kernels_compiled"] >= 2
    waited = realize.stats["compile_wait_seconds"] - before["compile_wait_seconds"]
    assert 0 < waited <= elapsed
    assert realize.stats["compile_seconds"] > before["compile_seconds"]


def test_realize_nothing_and_realized():
    a = Tensor(np.ones(3, np.float32)).realize()
    realize.realize_tensors([])
    a.realize()
    a.realize()
    np.testing.assert_allclose(a.numpy(), np.ones(3))


def test_repeated_lazy_assign_runs_every_time():
    # `n + 1` is built on n's unrealized STORE; the hash-consed STORE node comes back every step and must run again
    n = Tensor(np.zeros((), np.int64)).realize()
    for _ in range(4):
        n.assign(n + 1)
    assert n.item() == 4


# ---- graphs with assigns (STOREs) replay from the schedule cache too


def test_assign_graph_hits_the_cache(rng):
    w_np = rng.random(6, dtype=np.float32)
    w = Tensor(w_np.copy()).realize()
    for i in range(4):
        before = _hits()
        w.assign(w * 2 + 1).realize()
        w_np = w_np * 2 + 1
        if i >= 1:
            assert _hits() == before + 1
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)


def test_assign_target_is_part_of_the_key(rng):
    # the same value graph stored into its own input, or into another buffer of the same shape
    a_np, b_np = rng.random(5, dtype=np.float32), rng.random(5, dtype=np.float32)
    a, b = Tensor(a_np.copy()).realize(), Tensor(b_np.copy()).realize()
    for _ in range(3):
        a.assign(a + 1).realize()
        a_np = a_np + 1
        b.assign(a + 1).realize()
        b_np = a_np + 1
        a.assign(b + 1).realize()
        a_np = b_np + 1
        np.testing.assert_allclose(a.numpy(), a_np, rtol=1e-6)
        np.testing.assert_allclose(b.numpy(), b_np, rtol=1e-6)


def test_lazy_readers_keep_old_values_on_cached_assigns(rng):
    # a small reader is computed before the store, a large one gets a copy on write: on every (cached) step
    w_np = rng.random((4, 4), dtype=np.float32)
    w = Tensor(w_np.copy()).realize()
    for _ in range(4):
        small = w.sum()
        large = (w * 3).reshape(16).pad(((0, 16),))
        w.assign(w - 1).realize()
        np.testing.assert_allclose(small.numpy(), w_np.sum(), rtol=1e-5)
        np.testing.assert_allclose(large.numpy()[:16], (w_np * 3).reshape(16), rtol=1e-6)
        w_np = w_np - 1
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)


def test_tensor_built_on_a_cached_assign_sees_it_once(rng):
    # y holds the assign's STORE: once the assign ran (on a cache hit too), y reads the storage and never runs it again
    w_np = rng.random(3, dtype=np.float32)
    w = Tensor(w_np.copy()).realize()
    for _ in range(4):
        x = w.assign(w + 1)
        y = x * 2
        x.realize()
        w_np = w_np + 1
        np.testing.assert_allclose(y.numpy(), w_np * 2, rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)


def test_contiguous_copies_are_numbered_in_the_key(rng):
    a_np = rng.random(4, dtype=np.float32)
    a = Tensor(a_np).realize()
    for _ in range(3):
        before = _hits()
        np.testing.assert_allclose((a.contiguous() * 2).numpy(), a_np * 2, rtol=1e-6)
        c = a.contiguous()
        np.testing.assert_allclose((c + a.contiguous() + c).numpy(), a_np * 3, rtol=1e-6)
    assert _hits() > before


def test_training_steps_match_with_and_without_the_cache(rng):
    from uopkit.nn.optim import SGD

    x_np, w_np = rng.random((8, 5), dtype=np.float32), rng.random((5, 3), dtype=np.float32)
    y_np = rng.integers(0, 3, 8).astype(np.int32)

    def train(cache: int) -> list[float]:
        with Context(SCHEDULE_CACHE=cache):
            w = Tensor(w_np.copy(), requires_grad=True)
            opt = SGD([w], lr=0.5, momentum=0.9)
            x, y = Tensor(x_np), Tensor(y_np)
            losses = []
            for _ in range(4):
                opt.zero_grad()
                loss = (x @ w).cross_entropy(y)
                loss.backward()
                loss.realize(*opt.schedule_step())
                losses.append(loss.item())
            return [*losses, *w.numpy().ravel().tolist()]

    before = _hits()
    cached = train(1)
    assert _hits() > before
    assert cached == train(0)


def test_cached_assign_with_and_without_lazy_readers(rng):
    # the same assign, with a live lazy reader on some steps only: the readers and copies are part of the key
    w_np = rng.random(8, dtype=np.float32)
    w = Tensor(w_np.copy()).realize()
    for i in range(6):
        reader = (w * 2).pad(((0, 8),)) if i % 2 else None
        w.assign(w + 3).realize()
        if reader is not None:
            np.testing.assert_allclose(reader.numpy()[:8], w_np * 2, rtol=1e-6)
        w_np = w_np + 3
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-6)


def test_extended_key_is_the_key_of_the_whole_graph(rng):
    # protect_pending_reads adds readers and copies to a realize: the key is extended with their nodes only, and must
    # be what walking the whole graph gives
    from uopkit.uop.ops import Ops, UOp

    a, b = Tensor(rng.random(6, dtype=np.float32)).realize(), Tensor(rng.random(6, dtype=np.float32)).realize()
    first = [(a + b).uop, (a * 2).contiguous().uop]
    more = [(a + b).exp().uop, b.contiguous().uop, (a * 2).uop]
    prefix = realize._parameterize(tuple(first))
    whole = tuple(first + more)
    extended = realize._parameterize(whole, prefix)
    direct = realize._parameterize(whole)
    assert extended is not None and direct is not None
    assert extended.key == direct.key
    assert extended.topo == direct.topo and extended.leaves == direct.leaves
    assert extended.topo == list(UOp(Ops.SINK, src=whole).toposort())[:-1]


def test_cached_assigns_into_views(rng):
    # setitem into a slice and an assign through a row view, with a lazy reader of the whole buffer, step after step
    t_np = rng.random((4, 5), dtype=np.float32)
    t = Tensor(t_np.copy()).realize()
    before = _hits()
    for i in range(4):
        reader = t.sum(axis=1)
        old = t_np.copy()
        t[1:3] = t[1:3] * 2 + i
        t_np[1:3] = t_np[1:3] * 2 + i
        np.testing.assert_allclose(t.numpy(), t_np, rtol=1e-6)
        np.testing.assert_allclose(reader.numpy(), old.sum(axis=1), rtol=1e-5)
        row = t[0]
        row.assign(row + 1).realize()
        t_np[0] += 1
        np.testing.assert_allclose(t.numpy(), t_np, rtol=1e-6)
    assert _hits() > before


def test_key_walk_places_nodes_in_toposort_order(rng):
    # the key's walk places each node as UOp.toposort does, the extended key (readers and copies added) included
    from uopkit.uop.ops import Ops, UOp

    a, b = Tensor(rng.random((3, 4), dtype=np.float32)).realize(), Tensor(rng.random(4, dtype=np.float32)).realize()
    graphs = [(a + 1).uop, ((a * b).sum(1) + (a - b).max(axis=1)).uop, (a @ b.reshape(4, 1)).exp().uop, a.uop]
    for i in range(1, len(graphs) + 1):
        sink = UOp(Ops.SINK, src=tuple(graphs[:i]))
        p = realize._parameterize(sink.src)
        assert p is not None and p.topo == list(sink.toposort())[:-1]
        assert p.leaves == [u for u in p.topo if u.op is Ops.BUFFER] and len(p.key) == len(p.topo) + 1
        assert all(p.position[u] == j for j, u in enumerate(p.topo))


def test_realizing_what_is_stored_runs_nothing(rng):
    a_np = rng.random((4, 6), dtype=np.float32)
    a = Tensor(a_np).realize()
    views = [a, a.reshape(6, 4), a.permute(1, 0), a[1:3], a.pad(((1, 0), (0, 0)))]
    counts = dict(realize.stats)
    for v in views:
        assert v.realize() is v
    Tensor.realize(*views)
    # no key computed, nothing looked up in the schedule cache, nothing run: views stay views of the buffer
    assert realize.stats == counts
    assert all(v.uop.base is a.uop.base for v in views)
    # and still show what the buffer holds after an in-place update, but for the pad, a copy in PyTorch: it keeps the
    # values it was made of
    a.assign(a * 2).realize()
    np.testing.assert_allclose(views[2].numpy(), (a_np * 2).T)
    np.testing.assert_allclose(views[4].numpy()[1:], a_np)


def _kernels_run() -> int:
    return realize.stats["kernels_run"]


def test_a_value_a_variable_holds_is_not_computed_again_at_every_step():
    # `h = cell(h); out[t] = h`: each write realizes; h, held by the loop, is stored with it (as torch has it), so a
    # step runs the same few kernels however long the loop has run (it computed every earlier step again)
    steps = 48
    out = Tensor.zeros(steps, 4, 8).contiguous().realize()
    h, want, per_step = Tensor.ones(4, 8), np.ones((4, 8), np.float32), []
    for t in range(steps):
        before = _kernels_run()
        h = (h * 0.5 + 1).tanh()
        want = np.tanh(want * 0.5 + 1)
        out[t] = h
        per_step.append(_kernels_run() - before)
    np.testing.assert_allclose(out.numpy()[-1], want, rtol=1e-6)
    assert max(per_step[8:]) <= 3, per_step
    # and reading h now computes nothing
    before = _kernels_run()
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-6)
    assert _kernels_run() == before


def test_a_shallow_value_a_variable_holds_stays_fused():
    # x.cast(...) of a sum (what pytest's assert holds while it runs) costs less computed again than stored
    x = Tensor.arange(12).reshape(3, 4).contiguous().realize()
    y = x.cast("int64")
    before = _kernels_run()
    assert y.sum().item() == 66
    assert _kernels_run() - before == 1
    before = _kernels_run()
    y.numpy()
    assert _kernels_run() - before == 1


def test_a_small_recurrence_read_by_item_each_step_reuses_its_kernels():
    # Viterbi's forward variable (the BiLSTM-CRF tutorial's): each step picks entries by `.item()`s of argmaxes over
    # it; stored at each step (it is small), every step's graphs are the same and run compiled kernels (a new one only
    # for the cat of a new combination of picks), where a chain of the steps' picks compiled 8 a step (and grew)
    rng = np.random.default_rng(0)
    k = 4
    trans_np, feats = rng.standard_normal((k, k), dtype=np.float32), rng.standard_normal((14, k), dtype=np.float32)
    trans = Tensor(trans_np)
    fv, want, compiled = Tensor.zeros(1, k), np.zeros((1, k), np.float32), []
    for t in range(14):
        before = realize.stats["kernels_compiled"]
        picks, wanted = [], []
        for nt in range(k):
            ntv = fv + trans[nt]
            best = ntv.argmax(1).item()
            picks.append(ntv[0][best].reshape(1))
            wanted.append((want + trans_np[nt])[0][int(np.argmax(want + trans_np[nt]))])
        fv = (Tensor.cat(*picks) + Tensor(feats[t])).reshape(1, -1)
        want = (np.array(wanted, np.float32) + feats[t]).reshape(1, -1)
        compiled.append(realize.stats["kernels_compiled"] - before)
    np.testing.assert_allclose(fv.numpy(), want, rtol=1e-5)
    assert max(compiled[6:]) <= 1, compiled


def test_a_write_run_at_once_leaves_pending_assigns_reading_another_assign_the_old_contents():
    # `m` is assigned from `a` and `p` (and the value `y`) read m's assign, all still pending, when a write into `a`
    # runs at once: m's assign is rewired to a copy of a's old contents, and what reads it must follow it onto the
    # rewired STORE (left on the old one, `p` ran m's assign again, from the new `a`, into m's buffer: Adam's update
    # of a weight read its moment's STORE while a parameter in its gradient's graph was written at once)
    a = Tensor([1.0, 2.0, 3.0]).realize()
    m = Tensor([0.0, 0.0, 0.0]).realize()
    p = Tensor([100.0, 200.0, 300.0]).realize()
    m.assign(a * 2)
    p.assign(p + m)
    y = m + 1
    a.assign(Tensor([10.0, 20.0, 30.0])).realize()
    # torch: m = 2 * old a; p += m; y = m + 1
    assert m.tolist() == [2.0, 4.0, 6.0]
    assert p.tolist() == [102.0, 204.0, 306.0]
    assert y.tolist() == [3.0, 5.0, 7.0]
    assert m.tolist() == [2.0, 4.0, 6.0] and a.tolist() == [10.0, 20.0, 30.0]


def test_replay_stores_shared_values_for_the_other_live_tensors(rng):
    # gradients read one at a time (`[p.grad.sum().item() for p in params]`): the first realize computes the backward
    # pass they share, and the others must start from its stored values on a replay as they do on the uncached path.
    # Left on the lazy graph, each computed the shared part again and, its graph not the one recorded, missed the cache
    # and compiled new kernels: an LSTM's second step ran twice the kernels of its first, growing every step
    x_np = rng.random((8, 6), dtype=np.float32)
    w1 = Tensor(rng.random((6, 16), dtype=np.float32) - 0.5, requires_grad=True)
    w2 = Tensor(rng.random((16, 16), dtype=np.float32) - 0.5, requires_grad=True)
    w3 = Tensor(rng.random((16, 4), dtype=np.float32) - 0.5, requires_grad=True)

    def step() -> tuple[dict[str, int], list[float]]:
        before = dict(realize.stats)
        for w in (w1, w2, w3):
            w.grad = None
        h = (Tensor(x_np) @ w1).tanh().contiguous()
        h = (h @ w2).sigmoid().contiguous()
        ((h @ w3).tanh() * 2).sum().backward()
        sums = [w.grad.sum().item() for w in (w1, w2, w3)]
        return {k: realize.stats[k] - before[k] for k in ("kernels_run", "schedule_misses", "kernels_compiled")}, sums

    first, ref = step()
    for _ in range(3):
        counts, sums = step()
        np.testing.assert_allclose(sums, ref, rtol=1e-5)
        assert counts["kernels_run"] == first["kernels_run"]
        assert counts["schedule_misses"] == 0
        assert counts["kernels_compiled"] == 0


def test_reading_a_view_of_a_small_stored_tensor_runs_no_kernel():
    # `iou[i, j].item()` in a Python loop (NMS): the view is taken from a host copy of the buffer, not by a kernel
    from uopkit.engine.realize import stats

    data = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = (Tensor(data) * 2).realize()
    want = data * 2
    views = [
        (lambda x: x[1, 2, 3], lambda a: a[1, 2, 3]),
        (lambda x: x.permute(2, 0, 1)[::2], lambda a: a.transpose(2, 0, 1)[::2]),
        (lambda x: x.flip(1)[:, 1:3], lambda a: a[:, ::-1][:, 1:3]),
        (lambda x: x[0].pad(((1, 0), (0, 2))), lambda a: np.pad(a[0], ((1, 0), (0, 2)))),
        (lambda x: x[:, :1].expand(3, 2, 5), lambda a: np.broadcast_to(a[:, :1], (3, 2, 5))),
    ]
    before = stats["kernels_run"]
    for ours, theirs in views:
        got = ours(t).numpy()
        np.testing.assert_array_equal(got, theirs(want))
        assert got.flags.writeable
    assert t[2, 3, 4].item() == want[2, 3, 4]
    assert stats["kernels_run"] == before


def test_reading_a_view_of_a_large_stored_tensor_copies_only_what_it_covers(monkeypatch):
    # `x[i, 0].item()` over a 100000-row buffer: the bytes from the view's first element to its last are copied
    # (all of the buffer once per read before: 6.4 MB), and no kernel runs
    from uopkit.device import Device
    from uopkit.engine.realize import stats

    data = np.arange(100000 * 16, dtype=np.float32).reshape(100000, 16)
    t = (Tensor(data) + 1).realize()
    want = data + 1
    allocator = Device[t.device].allocator
    if not allocator.reads_at_offset:
        pytest.skip("the device copies a buffer's start out for a part of it")
    copied = []
    monkeypatch.setattr(allocator, "copyout", lambda dest, src: pytest.fail("the whole buffer was copied out"))
    read_at = allocator.copyout_at
    monkeypatch.setattr(
        allocator, "copyout_at", lambda dest, src, off: copied.append(dest.nbytes) or read_at(dest, src, off)
    )
    views = [
        (lambda x: x[99999, 0], lambda a: a[99999, 0], 4),
        (lambda x: x[70000], lambda a: a[70000], 64),
        (lambda x: x[5:9, 2:4], lambda a: a[5:9, 2:4], (3 * 16 + 2) * 4),
        (lambda x: x.T[3, 10:20], lambda a: a.T[3, 10:20], (9 * 16 + 1) * 4),
        (lambda x: x[40:43].flip(1), lambda a: a[40:43, ::-1], 48 * 4),
        (lambda x: x[7, :2].reshape(2, 1).expand(2, 3), lambda a: np.broadcast_to(a[7, :2, None], (2, 3)), 8),
        (lambda x: x[50:52].reshape(4, 8).permute(1, 0), lambda a: a[50:52].reshape(4, 8).T, 32 * 4),
    ]
    before = stats["kernels_run"]
    for i, (ours, theirs, nbytes) in enumerate(views):
        got = ours(t).numpy()
        np.testing.assert_array_equal(got, theirs(want), err_msg=str(i))
        assert got.flags.writeable and copied[-1] == nbytes, (i, copied)
    assert [t[i, 3].item() for i in (0, 12345, 99999)] == [want[i, 3] for i in (0, 12345, 99999)]
    assert stats["kernels_run"] == before


def test_a_detached_leaf_made_each_step_hits_the_schedule_cache(rng):
    # a PGD attack makes its input a leaf of its own every step (`x.detach().requires_grad_()`, a DETACH with a fresh
    # arg): the arg is keyed by its order of appearance, as a fresh CONTIGUOUS's, so the steps replay one schedule
    from uopkit.autograd import grad

    w_np = rng.standard_normal((6, 3)).astype(np.float32)
    w, x = Tensor(w_np), Tensor(rng.standard_normal((4, 6)).astype(np.float32))
    hits = []
    for _ in range(4):
        before = _hits()
        leaf = x.detach().requires_grad_(True)
        g = grad((leaf @ w).relu().sum(), leaf)[0]
        x = (leaf + 0.1 * g.sign()).detach().realize()
        hits.append(_hits() - before)
        want = ((leaf.numpy() @ w_np) > 0).astype(np.float32) @ w_np.T
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)
    assert hits[-1] >= 1 and hits[-1] == hits[-2], hits


# ---- a realize that raises changes nothing (no compiler needed to fail: the device's compiler is replaced)


@pytest.fixture
def failing_compiles(monkeypatch):
    """Every compile raises CompileError until `failing_compiles.undo()`; the kernel and schedule caches start empty
    (a cached kernel would not compile), and the ones from before come back after the test."""
    from uopkit.device import CompileError, Device

    compiler = Device[Tensor([0.0]).device].compiler
    monkeypatch.setattr(realize, "method_cache", {})
    monkeypatch.setattr(realize, "schedule_cache", {})

    def fail(*args, **kwargs):
        raise CompileError("simulated compiler failure", "", compiler="test")

    class Failing:
        def on(self) -> None:
            monkeypatch.setattr(compiler, "compile_cached", fail)
            monkeypatch.setattr(compiler, "compile_cached_batch", fail)

        def undo(self) -> None:
            monkeypatch.delattr(compiler, "compile_cached")
            monkeypatch.delattr(compiler, "compile_cached_batch")

    return Failing()


@pytest.mark.parametrize("op", ["add_", "mul_", "assign"])
def test_a_failed_in_place_write_writes_nothing_now_or_later(failing_compiles, op):
    from uopkit.device import CompileError

    torch = pytest.importorskip("torch")
    z = Tensor(np.arange(5, dtype=np.float32)).realize()
    old_reader = z * 1 + 0
    failing_compiles.on()
    with pytest.raises(CompileError, match="simulated compiler failure"):
        if op == "add_":
            z.add_(Tensor.full((5,), 10.0) * 3)
        elif op == "mul_":
            z.mul_(Tensor.full((5,), 2.0) + 1)
        else:
            z.assign(z * 5 + 1).realize()
    failing_compiles.undo()
    # nothing was written, and the write doesn't land at the next realize either
    np.testing.assert_array_equal(z.numpy(), np.arange(5))
    np.testing.assert_array_equal(old_reader.numpy(), np.arange(5))
    # the retry writes once, as torch's one op
    t = torch.arange(5.0)
    t_reader = t * 1 + 0
    if op == "add_":
        z.add_(Tensor.full((5,), 10.0) * 3)
        t.add_(torch.full((5,), 10.0) * 3)
    elif op == "mul_":
        z.mul_(Tensor.full((5,), 2.0) + 1)
        t.mul_(torch.full((5,), 2.0) + 1)
    else:
        z.assign(z * 5 + 1).realize()
        t.copy_(t * 5 + 1)
    np.testing.assert_array_equal(z.numpy(), t.numpy())
    np.testing.assert_array_equal(old_reader.numpy(), t_reader.numpy())


def test_a_dropped_assign_is_dropped_from_its_readers_too(failing_compiles):
    from uopkit.device import CompileError

    z = Tensor(np.arange(4, dtype=np.float32)).realize()
    z.assign(z * 5 + 1)
    # built after the assign: reads the value it writes, while it is pending
    later = z + 100
    failing_compiles.on()
    with pytest.raises(CompileError):
        z.realize()
    failing_compiles.undo()
    # the failed realize dropped the write: what read it reads the storage as it is, and realizing it writes nothing
    np.testing.assert_array_equal(later.numpy(), np.arange(4) + 100)
    np.testing.assert_array_equal(z.numpy(), np.arange(4))


def test_kernels_compiled_earlier_dont_run_before_a_kernel_that_fails_to_compile(failing_compiles):
    from uopkit.device import CompileError

    a = Tensor(np.arange(6, dtype=np.float32)).realize()
    b = Tensor(np.ones(6, dtype=np.float32)).realize()
    # a's update is compiled (and its schedule cached) by a realize of its own
    a.assign(a + 1).realize()
    failing_compiles.on()
    a.assign(a + 1)
    b.assign(b * 7 - 2)
    with pytest.raises(CompileError):
        Tensor.realize(a, b)
    failing_compiles.undo()
    # a's kernel would have run (into a's buffer) before b's failed to compile
    np.testing.assert_array_equal(a.numpy(), np.arange(6) + 1)
    np.testing.assert_array_equal(b.numpy(), np.ones(6))


def test_an_interrupted_realize_leaves_the_graphs_as_they_were(monkeypatch):
    # an interrupt (Ctrl-C) while the kernels compile: the same rollback as a compile error
    from uopkit.device import Device

    compiler = Device[Tensor([0.0]).device].compiler
    monkeypatch.setattr(realize, "method_cache", {})
    monkeypatch.setattr(realize, "schedule_cache", {})

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    x = Tensor(np.arange(3, dtype=np.float32)).realize()
    y = x * 2 + 1
    before = (x.uop, y.uop)
    monkeypatch.setattr(compiler, "compile_cached", interrupt)
    monkeypatch.setattr(compiler, "compile_cached_batch", interrupt)
    with pytest.raises(KeyboardInterrupt):
        Tensor.realize(y, (y * 3).sum())
    assert (x.uop, y.uop) == before
    monkeypatch.undo()
    np.testing.assert_array_equal(y.numpy(), np.arange(3) * 2 + 1)


def test_fused_depth_of_a_long_chain_stops_at_the_cap():
    # only whether a held value is HELD_STORED_DEPTH deep matters: the end of a long chain (an elimination's 100 steps
    # in one graph) is known that deep after a few nodes, where walking all of it cost ~30 ms a realize
    x = Tensor(np.ones(4, np.float32))
    y = x
    for _ in range(300):
        y = y * 1.01 + 1
    top = y.uop.base
    depth = realize._fused_depths([top])
    assert depth[top] == realize.HELD_STORED_DEPTH
    assert len(depth) < 4 * realize.HELD_STORED_DEPTH
    # below the cap the depths are exact: a multiply-add is two operations a step, movement ops are free
    short = (x * 2 + 1).reshape(2, 2).permute(1, 0) + 3
    depth = realize._fused_depths([short.uop])
    assert depth[short.uop] == 3
    assert realize._fused_depths([(x.sum() + 1).uop])[(x.sum() + 1).uop] == realize.HELD_STORED_DEPTH


def _chain(x: Tensor, steps: int) -> Tensor:
    # a value stored at each step, each step reading the last one and the first
    first = (x * 2).contiguous()
    y = first
    for i in range(steps):
        y = (y * 0.5 + first + i).contiguous()
    return y


def test_a_replay_runs_a_chain_of_stored_values_over_a_few_buffers(rng):
    # a replay places each stored value that only the next steps read in a buffer a value before it no longer needs:
    # a sort's 300 exchanges run over a handful of buffers that stay in the caches, not 300 fresh ones. The first
    # step's value is read to the end: it keeps its own
    before = {id(e): e for e in realize.cached_schedules()}
    for _ in range(3):
        x_np = rng.random(64, dtype=np.float32)
        hits = _hits()
        got = _chain(Tensor(x_np), 40).numpy()
        y = 2 * x_np
        for i in range(40):
            y = y * 0.5 + 2 * x_np + i
        np.testing.assert_allclose(got, y, rtol=1e-5)
    assert _hits() > hits
    entry = next(e for e in realize.cached_schedules() if id(e) not in before and len(e.steps) == 41)
    assert len(entry.new_buffers) == 41 and 0 < len(entry.placed_in) <= 4


def _peak_bytes(fn) -> tuple[object, int]:
    # what `fn` returns, and the most bytes the CPU allocator had handed out at once while it ran, over what it had
    # handed out before (the allocator's own accounting: a buffer it keeps cached after a free is not in use)
    from uopkit.device import Device

    alloc = Device["CPU"].allocator
    alloc.peak_in_use = before = alloc.in_use
    out = fn()
    return out, alloc.peak_in_use - before


@pytest.mark.parametrize("cache", [0, 1])
def test_a_first_run_places_a_chain_of_stored_values_over_a_few_buffers(rng, cache):
    # a schedule's first run (no cached one to replay) places its values as a replay does: a chain of 30 stored values
    # of 1 MB peaks at a few of them, not at all 30 (a sort of 1M float32 held 1.7 GB on its first call)
    n = 1 << 18
    x_np = rng.random(n, dtype=np.float32)
    x = Tensor(x_np).realize()

    def run() -> np.ndarray:
        y = x
        for _ in range(30):
            y = (y * 0.5 + 1).contiguous()
        return y.numpy()

    for _ in range(2 if cache else 1):
        with Context(SCHEDULE_CACHE=cache):
            got, peak = _peak_bytes(run)
        want = x_np
        for _ in range(30):
            want = want * 0.5 + 1
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert peak <= 6 * 4 * n


@pytest.mark.parametrize("cache", [0, 1])
def test_values_tensors_hold_keep_their_buffers_when_the_rest_share(rng, cache):
    # a value computed on the way that a live tensor holds (`mid`, and the lazy `later` reading it), the first value
    # (read to the end) and the result keep buffers of their own, on the first run and on replays; the other values of
    # the chain still share a few (a sort's positions hold its last exchange, not the 200 before it)
    n = 1 << 18
    hits = _hits()
    for _ in range(3 if cache else 1):
        x_np = rng.random(n, dtype=np.float32)

        def run(x_np: np.ndarray = x_np) -> tuple[Tensor, ...]:
            first = (Tensor(x_np) * 2).contiguous()
            y, mid = first, None
            for i in range(30):
                y = (y * 0.5 + first).contiguous()
                if i == 10:
                    mid = y
            later = mid + 1
            y.realize()
            return first, mid, later, y

        with Context(SCHEDULE_CACHE=cache):
            (first, mid, later, y), peak = _peak_bytes(run)
        assert peak <= 10 * 4 * n
        want = [2 * x_np]
        for _ in range(30):
            want.append(want[-1] * 0.5 + 2 * x_np)
        np.testing.assert_allclose(y.numpy(), want[30], rtol=1e-5)
        np.testing.assert_allclose(mid.numpy(), want[11], rtol=1e-5)
        np.testing.assert_allclose(later.numpy(), want[11] + 1, rtol=1e-5)
        np.testing.assert_allclose(first.numpy(), want[0], rtol=1e-5)
        # and what is computed from them next reads their values
        np.testing.assert_allclose((mid * y).numpy(), want[11] * want[30], rtol=1e-5)
    assert (_hits() > hits) == bool(cache)


def test_a_replay_gives_held_values_on_the_way_buffers_of_their_own(rng):
    # a live tensor holding a value computed on the way (`first`, read by the next step only) is moved onto its buffer
    # on a replay: that buffer can't be shared with the values computed after it
    for _ in range(3):
        x_np = rng.random(16, dtype=np.float32)
        first = (Tensor(x_np) * 2).contiguous()
        y = first
        for _ in range(20):
            y = (y * 0.5).contiguous()
        np.testing.assert_allclose(y.numpy(), 2 * x_np * 0.5**20, rtol=1e-6)
        np.testing.assert_allclose(first.numpy(), 2 * x_np, rtol=1e-6)


def test_reading_parameters_while_another_thread_runs_optimizer_steps():
    # a monitoring or checkpointing thread reads the weights (state_dict -> numpy) while training steps run. Two
    # threads' realizes must not interleave (the reader's rewired the step's copies on write: the training thread
    # raised inside its realize at a random step), and a read must not run a step half built (the writes staged so far
    # overwrote weights the rest of the step still read: wrong weights, no error). Training gives what it gives with
    # no reader, which is torch's, and the reader gets its snapshots.
    import sys
    import threading

    import uopkit.nn as nn
    import uopkit.nn.functional as F
    import uopkit.nn.optim as optim
    from uopkit.nn.state import load_state_dict

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    initial = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 8), dtype=np.float32), rng.integers(0, 4, 8)) for _ in range(40)]

    def train(read: bool) -> tuple[dict[str, np.ndarray], list[str], int]:
        ours = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        load_state_dict(ours, initial)
        opt = optim.Adam(ours.parameters(), 1e-2)
        stop, snapshots, errors = threading.Event(), [], []

        def reader():
            while not stop.is_set():
                try:
                    snapshots.append({k: v.numpy() for k, v in ours.state_dict().items()})
                except Exception as e:
                    errors.append(f"reader: {type(e).__name__}: {e}")

        def trainer():
            try:
                for x, y in batches:
                    opt.zero_grad()
                    F.cross_entropy(ours(Tensor(x)), Tensor(y)).backward()
                    opt.step()
            except Exception as e:
                errors.append(f"training: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=f, daemon=True) for f in ([trainer, reader] if read else [trainer])]
        for t in threads:
            t.start()
        threads[0].join(120)
        stop.set()
        for t in threads:
            t.join(120)
            assert not t.is_alive(), "a thread hung"
        return {k: v.numpy() for k, v in ours.state_dict().items()}, errors, len(snapshots)

    before = sys.getswitchinterval()
    # (threads switch every few bytecodes instead of every 5 ms: a read lands at many more places of a step; the run
    # without a reader first compiles the step's kernels)
    sys.setswitchinterval(1e-6)
    try:
        alone, _, _ = train(read=False)
        # (a few times: the first run with a reader compiles the kernels of its reads, in steps left half built)
        runs = [train(read=True) for _ in range(3)]
    finally:
        sys.setswitchinterval(before)
    for read, errors, snapshots in runs:
        assert errors == [] and snapshots > 0
        for k in alone:
            np.testing.assert_array_equal(read[k], alone[k], err_msg=k)
    topt = torch.optim.Adam(theirs.parameters(), 1e-2)
    for x, y in batches:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y)).backward()
        topt.step()
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(alone[k], v.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_method_cache_is_bounded_and_a_cached_schedule_keeps_its_programs(rng):
    x = Tensor(rng.standard_normal(7).astype(np.float32)).realize()
    with Context(METHOD_CACHE=2):
        # a graph of each structure: its own kernel (a cached schedule keeps the runners it recorded)
        outs = [(x * 2 + 1).exp(), (x - 3).abs().sqrt(), x.sin() * x.cos(), (x * x).sum()]
        for o in outs:
            o.realize()
            assert len(realize.method_cache) <= 2
        # replays of the first structures run the programs their schedules hold (dropped from the method cache)
        compiled = realize.stats["kernels_compiled"]
        np.testing.assert_allclose(((x * 2 + 1).exp()).numpy(), np.exp(x.numpy() * 2 + 1), rtol=1e-6)
        np.testing.assert_allclose(((x - 3).abs().sqrt()).numpy(), np.sqrt(np.abs(x.numpy() - 3)), rtol=1e-6)
        assert realize.stats["kernels_compiled"] == compiled
    # a hit moves a program to the end: the least recently used goes first
    key = next(iter(realize.method_cache))
    realize.get_runner(*key)
    assert list(realize.method_cache)[-1] == key


def _cached_launches() -> int:
    return sum(len(s.steps) for s in realize.cached_schedules())


def test_schedule_cache_is_bounded_by_its_launches_and_keeps_the_graphs_in_use(rng, monkeypatch):
    # inputs of ever new shapes make ever new graphs, each holding its compiled programs: past SCHEDULE_CACHE_KERNELS
    # launches the least recently used graphs go (it grew by a training step's kernels per new batch size)
    monkeypatch.setattr(realize, "schedule_cache", {})
    w = Tensor(rng.standard_normal((4, 3)).astype(np.float32)).realize()

    def step(rows: int) -> np.ndarray:
        x = Tensor(np.arange(rows * 4, dtype=np.float32).reshape(rows, 4))
        return ((x @ w).relu().sum(0) + (x * 2).exp().sum()).numpy()

    with Context(SCHEDULE_CACHE_KERNELS=12):
        step(1)
        per_graph = _cached_launches()
        assert per_graph >= 2
        for rows in range(2, 14):
            step(rows)
            # the graph of one row, used at every step, stays; a hit keeps hitting
            hits = _hits()
            np.testing.assert_allclose(
                step(1),
                ((np.arange(4.0)[None] @ w.numpy()).clip(0).sum(0) + np.exp(np.arange(4.0) * 2).sum()),
                rtol=1e-5,
            )
            assert _hits() == hits + 1
            assert _cached_launches() <= 12 + per_graph
        assert len(realize.schedule_cache) < 12


def test_a_compiled_runner_keeps_no_linear_program(rng):
    # its program's UOps are ~10x its AST's and thousands of runners are cached: it keeps the source and launch data
    (Tensor(rng.standard_normal(5).astype(np.float32)).realize() * 3 + 1).realize()
    assert realize.method_cache and all(r.spec.uops == () for r in realize.method_cache.values())
    assert all(r.spec.src and r.spec.global_size for r in realize.method_cache.values())

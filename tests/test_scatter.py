"""Scatter kernels (uopkit.codegen.scatter): a one-hot sum over an output axis lowered, on CPU-style renderers, as
its writes added one by one instead of a compare per output element and write. Checked against PyTorch and
np.add.at: repeated, negative and out-of-order indices, NaN and inf, in-place writes into a realized tensor, a
scatter whose output is computed on in the same kernel, the emulator running the writes in order, and GPU-style
renderers keeping the one-hot reduce."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import uopkit.nn.functional as UF
import uopkit.tensor.segments as segments
from uopkit import Device, Tensor, dtypes
from uopkit.codegen import get_program
from uopkit.codegen.opt.heuristic import hand_coded_opts
from uopkit.codegen.scatter import lower_scatter_kernel, lowers_as_scatter
from uopkit.engine.realize import create_schedule, kernelize_tensors
from uopkit.schedule.grouper import _is_large_scatter
from uopkit.uop.ops import Ops

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _on_the_cpu():
    # the scatter lowering is the CPU's (work-group renderers keep the one-hot reduce or sort, minutes on PoCL): under
    # DEVICE=OPENCL this file still tests the CPU's kernels, the GPU-style case has a test of its own below
    # what was set is put back (None: nothing, the DEVICE variable or the best backend decide), not the device it
    # resolved to: that pinned every later test of the process to the CPU (a monkeypatched DEVICE was ignored)
    before = Device._default
    Device.DEFAULT = "CPU"
    yield
    Device.DEFAULT = before


def _kernels(t: Tensor) -> list:
    return [item.ast for item in create_schedule(kernelize_tensors([t])) if item.ast.op is Ops.SINK]


def _scatter_kernels(t: Tensor) -> int:
    return sum(lowers_as_scatter(ast) for ast in _kernels(t))


def test_a_graph_aggregation_and_its_gradient_are_scatter_kernels_and_agree_with_torch():
    # a GCN-style aggregation: each edge adds its source's features into its destination (repeated destinations
    # sum); the gradient of the gather x[src] adds back into x the same way
    rng = np.random.default_rng(0)
    n, e, f = 300, 1200, 8
    x = rng.standard_normal((n, f)).astype(np.float32)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    xt = Tensor(x, requires_grad=True)
    out = Tensor.ones(n, f).index_add(0, Tensor(dst), xt[Tensor(src)] * 2)
    loss = (out * out).sum()
    loss.backward()
    assert xt.grad is not None
    assert _scatter_kernels(out) == 1 and _scatter_kernels(xt.grad) >= 1
    tx = torch.tensor(x, requires_grad=True)
    tout = torch.ones(n, f).index_add(0, torch.tensor(dst), tx[torch.tensor(src)] * 2)
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_scatter_kernel_has_no_opts_and_one_loop_over_its_writes():
    # its writes must run one by one, in order: no lanes or threads split them (two may hit one target)
    idx = Tensor(np.array([3, 1, 3, 3, 0], np.int32))
    out = Tensor.zeros(4, 16).index_add(0, idx, Tensor.ones(5, 16))
    (ast,) = _kernels(out)
    renderer = Device["CPU"].renderer
    assert lowers_as_scatter(ast) and hand_coded_opts(ast, renderer) == []
    program = get_program(ast, renderer)
    ranges = [u for u in program.uops if u.op is Ops.RANGE]
    assert {u.arg[1] for u in ranges} == {"loop"} and 5 in [u.src[0].arg for u in ranges]
    assert out.numpy()[:, 0].tolist() == [1.0, 1.0, 0.0, 3.0]


@pytest.mark.parametrize("device", ["CPU", "EMULATOR:13"])
def test_repeated_negative_and_special_values_sum_as_np_add_at(device, monkeypatch):
    # the emulator runs a loop whose store address is read from memory in order, not as lanes at once
    monkeypatch.setenv("EMULATE", "CPU")
    rng = np.random.default_rng(1)
    table = Tensor(rng.standard_normal((40, 24)).astype(np.float32), device=device, requires_grad=True)
    idx = rng.integers(-40, 40, (96,)).astype(np.int32)
    idx[:4] = [5, 5, -35, 5]
    g = rng.standard_normal((96, 24)).astype(np.float32)
    g[0, 3], g[7, 9], g[8, 1] = math.nan, math.inf, -math.inf
    (table[Tensor(idx, device=device)] * Tensor(g, device=device)).sum().backward()
    assert table.grad is not None
    want = np.zeros((40, 24), np.float32)
    np.add.at(want, idx % 40, g)
    np.testing.assert_allclose(table.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def test_in_place_adds_into_a_realized_tensor_keep_its_values():
    # the kernel reads the output's own elements (x + the writes): x is stored first and the writes added into it
    b = Tensor(np.ones((5, 2), np.float32)).realize()
    b.index_add_(0, Tensor([1, 1, 4]), Tensor(np.ones((3, 2), np.float32)))
    assert b.numpy().tolist() == [[1, 1], [3, 3], [1, 1], [1, 1], [2, 2]]
    base = np.arange(9, dtype=np.float32)
    t = Tensor(base).realize()
    t.index_put_((Tensor([-1, 2, 2, 8]),), Tensor([1.0, 2.0, 3.0, 4.0]), accumulate=True)
    tt = torch.tensor(base)
    tt.index_put_((torch.tensor([-1, 2, 2, 8]),), torch.tensor([1.0, 2.0, 3.0, 4.0]), accumulate=True)
    assert t.numpy().tolist() == tt.numpy().tolist()
    # the written values read the buffer written into: read before any write, as PyTorch's
    c = Tensor(np.arange(6, dtype=np.float32)).realize()
    c.index_add_(0, Tensor([0, 0, 5]), c[Tensor([5, 4, 0])])
    ct = torch.arange(6, dtype=torch.float32)
    ct.index_add_(0, torch.tensor([0, 0, 5]), ct[torch.tensor([5, 4, 0])])
    assert c.numpy().tolist() == ct.numpy().tolist()


def test_a_scatter_computed_on_in_its_kernel_is_summed_first():
    # out = exp(2 * scatter) in one kernel: the writes are summed into the output, then each element is computed
    idx = np.array([2, 0, 2, 1, 2])
    vals = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    out = (Tensor.zeros(3, 3).index_add(0, Tensor(idx), Tensor(vals)) * 2).exp()
    (ast,) = _kernels(out)
    assert lowers_as_scatter(ast)
    want = np.zeros((3, 3), np.float32)
    np.add.at(want, idx, vals)
    np.testing.assert_allclose(out.numpy(), np.exp(2 * want), rtol=1e-6)


@pytest.mark.parametrize("np_dtype", [np.int32, np.int64, np.float64, np.float16, np.uint8])
def test_scatter_add_in_each_dtype_agrees_with_torch(np_dtype):
    rng = np.random.default_rng(2)
    base = rng.integers(0, 9, (4, 6)).astype(np_dtype)
    index = rng.integers(0, 4, (7, 6))
    src = rng.integers(0, 9, (7, 6)).astype(np_dtype)
    ours = Tensor(base).scatter_add(0, Tensor(index), Tensor(src))
    theirs = torch.tensor(base).scatter_add(0, torch.tensor(index), torch.tensor(src))
    assert ours.numpy().dtype == theirs.numpy().dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_scatter_along_an_inner_axis_agrees_with_torch():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 9)).astype(np.float32)
    idx = rng.integers(0, 9, (5, 12))
    s = rng.standard_normal((5, 12)).astype(np.float32)
    ours = Tensor(a).scatter_add(1, Tensor(idx), Tensor(s))
    np.testing.assert_allclose(ours.numpy(), torch.tensor(a).scatter_add(1, torch.tensor(idx), torch.tensor(s)), 1e-6)


def test_a_large_scatter_sum_on_the_cpu_is_added_in_place_not_sorted():
    # an embedding gradient of 50000 rows x 64 from 4096 lookups: 1.3e10 compares as a one-hot mask, so other
    # devices sort the lookups (some 50 kernels); the CPU adds them in one scatter kernel
    rng = np.random.default_rng(4)
    rows, width, lookups = 50000, 64, 4096
    idx = rng.integers(0, rows, lookups)
    g = rng.standard_normal((lookups, width)).astype(np.float32)
    table = Tensor.zeros(rows, width, requires_grad=True)
    (table[Tensor(idx)] * Tensor(g)).sum().backward()
    assert table.grad is not None and segments.writes_one_by_one("CPU")
    kernels = _kernels(table.grad)
    assert len(kernels) <= 3 and sum(lowers_as_scatter(ast) for ast in kernels) == 1
    want = np.zeros((rows, width), np.float32)
    np.add.at(want, idx, g)
    np.testing.assert_allclose(table.grad.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_is_a_scatter_kernel_with_torchs_values_and_gradients(reduce, include_self):
    # each reduce's result is computed in a kernel with one one-hot reduce (the count of writes per target, where
    # needed, in one more): every such kernel is its writes; ties, a zero in a product and unwritten targets included
    rng = np.random.default_rng(6)
    base = rng.standard_normal((6, 3)).astype(np.float32)
    index = rng.integers(0, 5, (9, 3))
    src = rng.standard_normal((9, 3)).astype(np.float32)
    src[1] = src[0]
    index[1] = index[0]
    src[4, 2] = 0.0
    b, s = Tensor(base, requires_grad=True), Tensor(src, requires_grad=True)
    out = b.scatter_reduce(0, Tensor(index), s, reduce, include_self=include_self)
    kernels = _kernels(out)
    assert any(lowers_as_scatter(ast) for ast in kernels)
    assert all(lowers_as_scatter(ast) for ast in kernels if any(u.op is Ops.REDUCE_AXIS for u in ast.toposort()))
    (out * out).sum().backward()
    tb, ts = torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)
    tout = tb.scatter_reduce(0, torch.tensor(index), ts, reduce, include_self=include_self)
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert b.grad is not None and s.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-5, atol=1e-5)


# an index broadcast from one element (or an empty one): every write's target, and maybe its value, is the same for
# all writes, yet the target's load and store still run once per write
_ONE_TARGET = {
    # (dim, the output's shape, the index, its expanded shape, whether the values vary over the writes)
    "1-d": (0, (4,), [1], (6,), True),
    "rows": (0, (4, 3), [[1, 3, 0]], (5, 3), True),
    "columns": (1, (5, 4), [[2]], (5, 3), True),
    "value too": (0, (4,), [2], (6,), False),
}


@pytest.mark.parametrize("device", ["CPU", "EMULATOR:13"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("case", list(_ONE_TARGET))
def test_a_broadcast_index_reduces_every_write_into_its_target(device, reduce, case, monkeypatch):
    monkeypatch.setenv("EMULATE", "CPU")
    dim, shape, index, expanded, values_vary = _ONE_TARGET[case]
    base = np.linspace(0.5, 2, math.prod(shape), dtype=np.float32).reshape(shape)
    src = np.arange(1, math.prod(expanded) + 1, dtype=np.float32).reshape(expanded) if values_vary else np.float32([3])
    for include_self in (True, False):
        ours = Tensor(base, device=device).scatter_reduce(
            dim,
            Tensor(index, device=device).expand(*expanded),
            Tensor(src, device=device).expand(*expanded),
            reduce,
            include_self=include_self,
        )
        theirs = torch.tensor(base).scatter_reduce(
            dim,
            torch.tensor(index).expand(*expanded),
            torch.tensor(src).expand(*expanded),
            reduce,
            include_self=include_self,
        )
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, err_msg=f"include_self={include_self}")


def test_the_scatters_of_a_broadcast_index_agree_with_torch():
    vals = np.arange(1, 16, dtype=np.float32).reshape(5, 3)
    cases = {
        "scatter_add": lambda T, t: t.zeros(4).scatter_add(0, T([1]).expand(6), T(vals.ravel()[:6])),
        "index_add": lambda T, t: t.ones(4, 3).index_add(0, T([3]).expand(5), T(vals), alpha=2),
        "index_reduce": lambda T, t: t.ones(4, 3).index_reduce(
            0, T([1]).expand(5), T(vals), "amax", include_self=False
        ),
        "index_put": lambda T, t: t.zeros(4, 3).index_put((T([2]).expand(5),), T(vals), accumulate=True),
        "bincount": lambda T, t: T([2]).expand(7).bincount(weights=T(vals.ravel()[:7])),
        "histc": lambda T, t: T([0.5]).expand(7).histc(4, 0, 1),
    }
    for name, f in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's index_reduce is in beta)
            want = f(torch.tensor, torch).numpy()
        np.testing.assert_allclose(f(Tensor, Tensor).numpy(), want, rtol=1e-6, err_msg=name)
    # written in place into a realized tensor, the index and the values both broadcast
    b = Tensor(np.ones((4, 3), np.float32)).realize()
    b.index_add_(0, Tensor([3]).expand(5), Tensor([[1.0, 2.0, 3.0]]).expand(5, 3))
    assert b.numpy().tolist() == [[1, 1, 1], [1, 1, 1], [1, 1, 1], [6, 11, 16]]


@pytest.mark.parametrize(
    "lookup",
    [
        lambda T, w: w[T([2]).expand(5)],
        lambda T, w: w.index_select(0, T([2]).expand(5)),
        lambda T, w: w.gather(1, T([[1], [3], [0]]).expand(3, 6)),
        lambda T, w: w[T(np.zeros(0, np.int64))],
        lambda T, w: w.index_select(0, T(np.zeros(0, np.int64))),
        lambda T, w: w.gather(0, T(np.zeros((0, 4), np.int64))),
        lambda T, w: w.gather(1, T(np.zeros((3, 0), np.int64))),
    ],
    ids=["getitem", "index_select", "gather", "empty getitem", "empty index_select", "empty gather", "empty columns"],
)
def test_the_gradient_of_a_lookup_by_a_broadcast_or_empty_index_agrees_with_torch(lookup):
    # its scatter's writes all hit one row (their gradient the same one too), or there are none: the sum's gradient
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    w = Tensor(table, requires_grad=True)
    lookup(Tensor, w).sum().backward()
    tw = torch.tensor(table, requires_grad=True)
    lookup(torch.tensor, tw).sum().backward()
    assert w.grad is not None and tw.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())


def test_the_gradient_of_an_embedding_of_an_empty_batch_is_zero():
    table = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    UF.embedding(Tensor.zeros(0, dtype=dtypes.int64), table).sum().backward()
    assert table.grad is not None and table.grad.numpy().tolist() == np.zeros((3, 4)).tolist()


def test_a_large_scatter_read_by_a_reduce_is_stored_alone():
    # index_add(...).sum(): fused into the sum's kernel the scatter would be 20000 x 16 x 100000 compares (minutes);
    # stored by a kernel of its own it is its writes
    rng = np.random.default_rng(7)
    n, e, f = 20000, 100000, 16
    idx, vals = rng.integers(0, n, e), rng.standard_normal((e, f)).astype(np.float32)
    total = Tensor.zeros(n, f).index_add(0, Tensor(idx), Tensor(vals)).sum()
    assert _scatter_kernels(total) == 1
    np.testing.assert_allclose(total.item(), vals.astype(np.float64).sum(), rtol=1e-4)


def test_a_large_scatter_under_no_grad_is_still_its_writes():
    # under no_grad the scatter's one-hot select is in a DETACH (cut from the gradient): the scheduler took it for an
    # ordinary long sum, cut it into 100 partial sums of compares (20000 x 16 x 100000: minutes) and stored none alone
    import uopkit

    rng = np.random.default_rng(7)
    n, e, f = 20000, 100000, 16
    idx, vals = rng.integers(0, n, e), rng.standard_normal((e, f)).astype(np.float32)
    with uopkit.no_grad():
        total = Tensor.zeros(n, f).index_add(0, Tensor(idx), Tensor(vals, requires_grad=True)).sum()
    reduce = next(u for u in total.uop.toposort() if u.op is Ops.REDUCE_AXIS and u.src[0].op is Ops.DETACH)
    assert _is_large_scatter(reduce) and _scatter_kernels(total) == 1
    np.testing.assert_allclose(total.item(), vals.astype(np.float64).sum(), rtol=1e-4)


def test_a_square_scatter_read_by_a_reduce_is_stored_alone_too():
    # as many writes as targets: told apart from a gather by where its iota moves (an output axis), not by its length
    rng = np.random.default_rng(9)
    n = 2000
    idx, vals = rng.integers(0, n, n), rng.standard_normal((n, 4)).astype(np.float32)
    total = Tensor.zeros(n, 4).index_add(0, Tensor(idx), Tensor(vals)).square().sum()
    assert _scatter_kernels(total) == 1
    want = np.zeros((n, 4))
    np.add.at(want, idx, vals.astype(np.float64))
    np.testing.assert_allclose(total.item(), (want**2).sum(), rtol=1e-4)


def test_a_scatter_beside_another_reduce_gets_a_kernel_of_its_own():
    # GraphSAGE: o = aggregate(h) @ Wl + h @ Wr, h = relu(x @ W1). h's gradient adds the gather's gradient (a scatter)
    # to a matmul's under the ReLU's mask: in one kernel the scatter was its compares, 2708 x 10556 x 16 (0.5 s)
    rng = np.random.default_rng(8)
    n, e, d, c = 500, 2100, 16, 7
    s_np, t_np = rng.integers(0, n, e), rng.integers(0, n, e)
    x_np = rng.standard_normal((n, 24)).astype(np.float32)
    w_np = [rng.standard_normal(shape).astype(np.float32) for shape in ((24, d), (d, c), (d, c))]
    w1, wl, wr = (Tensor(w, requires_grad=True) for w in w_np)
    h = (Tensor(x_np) @ w1).relu()
    o = Tensor.zeros(n, d).index_add(0, Tensor(t_np), h.index_select(0, Tensor(s_np))) @ wl + h @ wr
    o.square().sum().backward()
    assert w1.grad is not None
    scatters = 0
    for ast in _kernels(w1.grad):
        if any(u.op is Ops.REDUCE_AXIS and _is_large_scatter(u) for u in ast.toposort()):
            assert lowers_as_scatter(ast)
            scatters += 1
    assert scatters
    tw1, twl, twr = (torch.tensor(w, requires_grad=True) for w in w_np)
    th = (torch.tensor(x_np) @ tw1).relu()
    to = torch.zeros(n, d).index_add(0, torch.tensor(t_np), th.index_select(0, torch.tensor(s_np))) @ twl + th @ twr
    to.square().sum().backward()
    np.testing.assert_allclose(w1.grad.numpy(), tw1.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_gpu_style_renderers_keep_the_one_hot_reduce():
    # (their writes would need atomics: a kernel of one thread per output column would be slower than the mask)
    pytest.importorskip("uopkit_cuda")
    from uopkit.emulator import open_emulator

    name = "EMULATOR:61"
    Device._opened[name] = open_emulator(name, emulate="CUDA")
    try:
        out = Tensor.zeros(4, 8, device=name).index_add(
            0, Tensor([1, 1, 3], device=name), Tensor.ones(3, 8, device=name)
        )
        (ast,) = _kernels(out)
        assert lower_scatter_kernel(ast, None, gpu=True) is None and lower_scatter_kernel(ast, None, gpu=False)
        assert not segments.writes_one_by_one(name)
        assert out.numpy()[:, 0].tolist() == [0.0, 2.0, 0.0, 1.0]
    finally:
        Device._opened.pop(name, None)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_a_large_scatter_without_reduce_is_its_writes_and_the_last_wins(dtype):
    # past SCATTER_BY_SORTING a plain scatter sorted its writes (~140 kernels for 16384 rows of 64 into 65536, 25x
    # torch's time); on the CPU the last write per target is a one-hot max of the writes' positions, run as the
    # writes in order, and each target loads the write it names: two kernels, repeated targets as PyTorch's CPU
    rng = np.random.default_rng(11)
    n, m, f = 40000, 30000, 8
    assert f * n * m >= segments.SCATTER_BY_SORTING
    base = (rng.standard_normal((n, f)) * 4).astype(dtype)
    index = rng.integers(0, n, (m, f))
    src = (rng.standard_normal((m, f)) * 4).astype(dtype)
    out = Tensor(base).scatter(0, Tensor(index), Tensor(src))
    assert len(_kernels(out)) == 2 and _scatter_kernels(out) == 1
    want = torch.tensor(base).scatter(0, torch.tensor(index), torch.tensor(src))
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_a_large_scatter_without_reduce_passes_the_gradient_as_torch():
    # every written value gets the gradient at its target, overwritten or not; a base element written over gets none
    rng = np.random.default_rng(12)
    n, m, f = 30000, 40000, 8
    assert f * n * m >= segments.SCATTER_BY_SORTING
    base, src = rng.standard_normal((n, f)).astype(np.float32), rng.standard_normal((m, f)).astype(np.float32)
    index, weight = rng.integers(0, n, (m, f)), rng.standard_normal((n, f)).astype(np.float32)
    ours = [Tensor(base, requires_grad=True), Tensor(src, requires_grad=True)]
    theirs = [torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)]
    (ours[0].scatter(0, Tensor(index), ours[1]) * Tensor(weight)).sum().backward()
    (theirs[0].scatter(0, torch.tensor(index), theirs[1]) * torch.tensor(weight)).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("op", ["scatter_reduce_", "index_reduce_"])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("where", ["lazy", "lazy view", "realized view"])
def test_an_in_place_amax_or_amin_gives_torchs_gradient(op, reduce, include_self, where):
    # the gradient compares the values before the write with the result: after `y.scatter_reduce_(...)` y holds the
    # result (into a lazy view, the storage y is computed into before the write does), and comparing it (every value
    # a tie) halved the gradient where a value was written and gave y's own value one where torch gives none
    base = np.array([[1.0, 5.0], [2.0, 0.0], [3.0, 3.0], [-1.0, 4.0]], np.float32)
    src = np.array([[4.0, 1.0], [0.5, 7.0], [2.5, -2.0]], np.float32)
    index = [[0, 2], [2, 2], [0, 1]] if op == "scatter_reduce_" else [0, 2, 0]
    weights = np.arange(8, dtype=np.float32).reshape(4, 2)

    def run(lib: str) -> tuple[np.ndarray, ...]:
        make = torch.tensor if lib == "torch" else Tensor
        b, s = make(base, requires_grad=True), make(src, requires_grad=True)
        y = b * 1
        if lib == "ours" and where == "realized view":
            y.realize()
        target = y if where == "lazy" else y[1:]
        # (index 2 at most: the view's last row)
        getattr(target, op)(0, make(index), s * 1, reduce, include_self=include_self)
        (y * make(weights)).sum().backward()
        values = y.detach().numpy() if lib == "torch" else y.numpy()
        return values, b.grad.numpy(), s.grad.numpy()

    for got, want in zip(run("ours"), run("torch"), strict=True):
        np.testing.assert_array_equal(got, want)

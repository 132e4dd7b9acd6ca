"""The spine's STORE and kernelize semantics (issue 2), checked on the graph and on the numbers."""

import gc
import weakref

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.codegen import kernel_name
from uopkit.engine.realize import buffers
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.grouper import fuses_row_reduces
from uopkit.uop.ops import Ops, UOp, UPat


def test_arange_reshape_sum_runs_compiled_kernels():
    from uopkit.engine.realize import stats

    before = stats["kernels_run"]
    assert (Tensor.arange(12).reshape(3, 4) * 2 + 1).sum(axis=1).tolist() == [16, 48, 80]
    assert stats["kernels_run"] > before


def test_assign_builds_store_of_buffer():
    buf = Tensor.arange(4).realize()
    a = buf.assign(Tensor.zeros((4,), dtype=dtypes.int32))
    assert UPat(Ops.STORE, src=(UPat(Ops.BUFFER), UPat())).match(a.uop, {})
    a.realize()
    assert buf.tolist() == [0, 0, 0, 0]


def test_assign_through_reshape_is_store_of_reshape():
    buf = Tensor.arange(4).realize()
    # (the STORE assign builds; assign itself runs a write through a view of a live tensor at once)
    a = buf.reshape((2, 2))
    a._store(Tensor.full((2, 2), 7, dtype=dtypes.int32))
    assert UPat(Ops.STORE, src=(UPat(Ops.RESHAPE, src=(UPat(Ops.BUFFER),)), UPat())).match(a.uop, {})
    a.realize()
    assert buf.tolist() == [7, 7, 7, 7]


def test_assign_into_shrink_changes_one_element():
    a = Tensor.ones((4,)).contiguous().realize()
    s = a.shrink(((1, 2),)).assign(Tensor.zeros((1,)))
    assert s.uop.size == 1
    assert s.uop.buf_uop.size == 4
    s.realize()
    assert a.tolist() == [1.0, 0.0, 1.0, 1.0]


def test_reduce_feeding_reduce_realizes():
    a = Tensor.ones(16, 16).contiguous()
    a1 = a.sum(axis=1)
    a0 = a1.sum(axis=0)
    a0.kernelize()
    assert a1.uop.base.op is Ops.STORE
    assert a0.item() == 256.0


def test_elementwise_between_reduces_fuses():
    a = Tensor.ones(16, 16).contiguous()
    a1 = a.sum(axis=1)
    a0 = (a1 + 1).sum(axis=0)
    a0.kernelize()
    assert a1.uop.base.op is Ops.REDUCE_AXIS
    assert a1.uop.base.src[0].base.op is Ops.STORE
    assert a0.item() == 16 * 17.0


def test_expand_of_reduce_realizes_the_reduce():
    # the max over axis 0 is needed along the inner loop of the consumer: stored once, not recomputed per element
    x = Tensor([[1.0, 2.0], [3.0, 5.0]])
    m = x.max(axis=0, keepdim=True)
    y = x - m
    y.kernelize()
    assert m.uop.base.op is Ops.STORE
    assert y.tolist() == [[-2.0, -3.0], [0.0, 0.0]]


def _n_kernels(t: Tensor) -> int:
    return len(create_schedule(kernelize_tensors([t])))


def test_row_reduce_fuses_into_its_consumer():
    # softmax over the last axis: max, sum and the division run in one kernel, a row at a time (on a GPU-style
    # device, whose work-items would each compute the whole row again, the max and the sum are kernels of their own)
    x = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    fused = fuses_row_reduces(Tensor(x).device)
    assert _n_kernels(Tensor(x).softmax(-1)) == (1 if fused else 3)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-6)
    # layernorm-style: mean, then the mean of squares of the centered value, then the normalized output
    t = Tensor(x)
    c = t - t.mean(-1, keepdim=True)
    out = c / (c * c).mean(-1, keepdim=True).add(1e-5).sqrt()
    assert _n_kernels(out) == (1 if fused else 3)
    xc = x - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(
        out.numpy(), xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5), rtol=1e-5, atol=1e-6
    )


def test_row_reduce_is_stored_when_the_consumer_walks_it_out_of_order():
    # transposed, the row's axis would be the outer loop: the reduce would run once per element, so it is stored
    x = np.random.default_rng(1).standard_normal((6, 7)).astype(np.float32)
    t = Tensor(x)
    y = (t - t.max(axis=-1, keepdim=True)).T.contiguous()
    assert _n_kernels(y) == 2
    np.testing.assert_allclose(y.numpy(), (x - x.max(-1, keepdims=True)).T)
    # a sum over the other axis of the same value: also stored
    z = (t - t.max(axis=-1, keepdim=True)).sum(0)
    assert _n_kernels(z) == 2
    np.testing.assert_allclose(z.numpy(), (x - x.max(-1, keepdims=True)).sum(0), rtol=1e-5)


def test_fused_row_max_keeps_nan():
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    x[1, 40] = np.nan
    x[3, 0] = np.nan
    got = Tensor(x).max(axis=-1).numpy()
    np.testing.assert_array_equal(np.isnan(got), [False, True, False, True])
    np.testing.assert_array_equal(got[[0, 2]], x[[0, 2]].max(-1))
    s = Tensor(x).softmax(-1).numpy()
    assert np.isnan(s[1]).all() and np.isnan(s[3]).all() and np.isfinite(s[[0, 2]]).all()


def test_elementwise_chain_is_one_kernel_and_shared_subexpression_once():
    x = Tensor([1.0, 2.0, 3.0]).realize()
    shared = (x * 2).exp2()
    y = shared + shared * 3
    sink = kernelize_tensors([y])
    schedule = create_schedule(sink)
    assert len(schedule) == 1
    exp2s = [u for u in schedule[0].ast.toposort() if u.op is Ops.EXP2]
    assert len(exp2s) == 1
    assert y.tolist() == [16.0, 64.0, 256.0]


def test_assign_reading_own_buffer_through_other_view_is_not_fused():
    x = Tensor([1, 2, 3, 4]).realize()
    x.assign(x.flip(0)).realize()
    assert x.tolist() == [4, 3, 2, 1]


def test_schedule_orders_reads_before_overwrite():
    x = Tensor([1.0, 2.0, 3.0]).realize()
    y = x * 10
    x.assign(Tensor([0.0, 0.0, 0.0]))
    Tensor.realize(y, x)
    assert y.tolist() == [10.0, 20.0, 30.0]
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_increment_assign_twice():
    x = Tensor([1, 2, 3]).realize()
    x.assign(x + 1).realize()
    x.assign(x + 1).realize()
    assert x.tolist() == [3, 4, 5]


def test_recomputing_after_assign_never_reuses_stale_results():
    # three rounds: the second and third take the schedule cache's path
    for _ in range(3):
        a = Tensor([1.0, 2.0, 3.0]).realize()
        kept = (a + 1) * 2
        first = (a + 1).realize()
        a.assign(Tensor([5.0, 5.0, 5.0])).realize()
        again = (a + 1).realize()
        assert again.tolist() == [6.0, 6.0, 6.0]
        assert first.tolist() == [2.0, 3.0, 4.0]
        assert kept.tolist() == [4.0, 6.0, 8.0]


def test_backward_after_realizing_intermediate_and_loss():
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = (w * w).realize()
    loss = (h * 3).sum()
    assert loss.item() == 42.0
    loss.backward()
    assert w.grad.tolist() == [6.0, 12.0, 18.0]


def test_assign_transpose_of_itself_reads_old_values():
    m = Tensor([[1, 2], [3, 4]]).realize()
    m.assign(m.T).realize()
    assert m.tolist() == [[1, 3], [2, 4]]


def test_assign_through_the_same_view_is_one_kernel():
    x = Tensor([1, 2, 3, 4]).realize()
    t = x.reshape((2, 2))
    t._store(t + 1)
    assert len(create_schedule(kernelize_tensors([t]))) == 1
    t.realize()
    assert x.tolist() == [2, 3, 4, 5]


def test_nested_reduce_chain_kernels_stay_short(monkeypatch):
    """`x = x + x.sum() * 0` repeated: each reduce's kernel would recompute the whole chain before it (code growing
    with the square of the chain); the chain is stored every so often, so kernels stay short and the total linear."""
    from uopkit.schedule import shared_values

    def ast_sizes(n: int) -> list[int]:
        x = Tensor.ones(4, 4).contiguous().realize()
        for _ in range(n):
            x = x + x.sum() * 0
        return [len(item.ast.toposort()) for item in create_schedule(kernelize_tensors([x]))]

    short, long = ast_sizes(60), ast_sizes(120)
    assert max(long) == max(short) and sum(long) < 2.2 * sum(short), (max(short), max(long), sum(short), sum(long))
    # the values through the stores (a shorter depth between them: on OpenCL each kernel is a compile of its own)
    monkeypatch.setattr(shared_values, "MAX_FUSED_DEPTH", 6)
    x = Tensor.ones(4, 4).contiguous().realize()
    for _ in range(15):
        x = x + x.sum() * 0
    sizes = [len(item.ast.toposort()) for item in create_schedule(kernelize_tensors([x]))]
    assert len(sizes) > 16 and max(sizes) < 40, sizes
    assert (x.numpy() == 1).all()


def test_wide_shared_chain_is_stored_before_it_is_deep():
    """A loop of log-domain Sinkhorn normalizations (`la = la - la.logsumexp(-1, keepdim=True)`, then along -2):
    each step adds one op of depth to the chain but a logsumexp's finish (log, the guard of infinite maxima) beside
    it, so the depth rule alone let each reduce's kernel recompute some 20 steps; in the backward the gradient's
    chain read every recomputed step again: kernels of 550 nodes, the schedule's code growing with the square of the
    steps (15 steps' gradient: 210 s of codegen and compile). Stored once the fused region is wide, the kernels stay
    short and the total linear."""
    torch = __import__("pytest").importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 10, 10)).astype(np.float32)
    w = rng.normal(size=(4, 10, 10)).astype(np.float32)

    def sinkhorn(la, lib, n):
        for _ in range(n):
            la = la - lib.logsumexp(la, dim=-1, keepdim=True)
            la = la - lib.logsumexp(la, dim=-2, keepdim=True)
        return la.exp()

    def ast_sizes(n: int) -> tuple[list[int], Tensor]:
        la = Tensor(a, requires_grad=True)
        (sinkhorn(la, Tensor, n) * Tensor(w)).sum().backward()
        return [len(item.ast.toposort()) for item in create_schedule(kernelize_tensors([la.grad]))], la.grad

    (short, _), (long, grad) = ast_sizes(8), ast_sizes(16)
    assert max(long) < 300 and sum(long) < 2.2 * sum(short), (max(short), max(long), sum(short), sum(long))
    ref = torch.tensor(a, requires_grad=True)
    (sinkhorn(ref, torch, 16) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_softmax_over_a_large_matmul_stores_the_scores_once():
    # attention: softmax's max, sum and output passes would each recompute every score (a 64-long dot product)
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 128, 64)).astype(np.float32) for _ in range(3))
    out = (Tensor(q) @ Tensor(k).transpose(-1, -2) / 8).softmax(-1) @ Tensor(v)
    items = create_schedule(kernelize_tensors([out]))
    # k.T packed, the scores, the softmax, the product with v
    assert len(items) == 4
    s = q @ k.transpose(0, 2, 1) / 8
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    got = ((Tensor(q) @ Tensor(k).transpose(-1, -2) / 8).softmax(-1) @ Tensor(v)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_backward_stores_the_matmul_it_sums_and_reads():
    # softmax's backward sums p * dp over each row (p's gradient through the reciprocal of its sum) and reads dp again,
    # dp = g @ v.T a matmul: computed inside the row's sum, every dp was a scalar 64-long dot product with strided reads
    # (attention's backward over 4x8x256x64: 0.3 s). No kernel computes a large reduce inside another reduce
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit.schedule.grouper import MIN_STORED_INNER_REDUCE

    torch = __import__("pytest").importorskip("torch")
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((2, 4, 128, 64)).astype(np.float32) for _ in range(4))
    tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
    (tq.scaled_dot_product_attention(tk, tv) * Tensor(g)).sum().backward()
    grads = [tq.grad, tk.grad, tv.grad]
    for item in create_schedule(kernelize_tensors(grads)):
        for red in (u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS):
            inner = [u for u in red.src[0].toposort() if u.op is Ops.REDUCE_AXIS]
            assert all(u.src[0].size < MIN_STORED_INNER_REDUCE for u in inner)
    ref = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    (torch.nn.functional.scaled_dot_product_attention(*ref) * torch.tensor(g)).sum().backward()
    for ours, theirs in zip(grads, ref, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("fn", ["tanh", "erf", "sigmoid"])
def test_a_shared_function_of_a_matmul_is_stored_once_not_node_by_node(fn: str):
    # tanh(a @ w) read by two kernels (a recurrent state's copy and its derivative 1 - tanh^2): the value is stored
    # whole; each node of its formula counted, with the stale count of kernels reading it, as shared too and stored by
    # a kernel of its own (19 kernels for tanh, an RNN's backward 4x as many kernels as steps)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a0, w0 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    y = getattr(Tensor(a0) @ Tensor(w0) + 1, fn)()
    outs = [y.contiguous() * 2, 1 - y * y]
    # the matmul and the function, the copy, and each output
    assert len(create_schedule(kernelize_tensors(outs))) == 4
    want = getattr(torch, fn)(torch.tensor(a0) @ torch.tensor(w0) + 1).numpy()
    np.testing.assert_allclose(outs[1].numpy(), 1 - want * want, rtol=1e-5, atol=1e-6)


def test_a_sum_of_several_large_products_stores_each_product():
    # x's gradient through three projections (attention's q, k, v from one x): dq @ Wq.T + dk @ Wk.T + dv @ Wv.T. In
    # one kernel each product was a loop of its own with a scalar accumulator (attention's backward with q = k = v:
    # 0.49 s); each is now stored by a kernel of its own, the sum reads them
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit.schedule.grouper import MIN_STORED_INNER_REDUCE

    torch = __import__("pytest").importorskip("torch")
    rng = np.random.default_rng(0)
    # (weights scaled so that q * k stays O(1): tanh's gradient near saturation would magnify rounding differences)
    xs = rng.standard_normal((256, 128)).astype(np.float32)
    ws = [(rng.standard_normal((128, 128)) / np.sqrt(128)).astype(np.float32) for _ in range(3)]
    x = Tensor(xs, requires_grad=True)
    q, k, v = (x @ Tensor(w) for w in ws)
    ((q * k).tanh() * v).sum().backward()
    for item in create_schedule(kernelize_tensors([x.grad])):
        large = [u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS and u.src[0].size >= MIN_STORED_INNER_REDUCE]
        assert len(large) <= 1
    tx = torch.tensor(xs, requires_grad=True)
    tq, tk, tv = (tx @ torch.tensor(w) for w in ws)
    ((tq * tk).tanh() * tv).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_a_cat_of_matmuls_stores_each_product():
    # the gradient of a q, k, v projection split in three is a cat (a sum of pads) of three matmuls: in one kernel
    # each product ran for every output under its pad's bounds check (three loops per element, two of them over
    # zeros, none in a register tile: 2.3 ms of a small GPT's 16 ms step); each is now stored, the cat reads them
    from uopkit.schedule.grouper import MIN_STORED_PADDED_REDUCE

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((128, 64)).astype(np.float32)
    ws = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3)]
    assert 128 * 64 * 64 >= MIN_STORED_PADDED_REDUCE
    out = Tensor.cat(*[Tensor(xs) @ Tensor(w) for w in ws], dim=1)
    items = create_schedule(kernelize_tensors([out]))
    reduces = [sum(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()) for it in items]
    assert sorted(reduces) == [0, 1, 1, 1]
    np.testing.assert_allclose(out.numpy(), np.concatenate([xs @ w for w in ws], 1), rtol=1e-4, atol=1e-4)
    # small products still fuse into the cat (a launch costs more than computing them under the bounds check)
    small = Tensor.cat(*[Tensor(xs[:4, :8]) @ Tensor(w[:8, :8]) for w in ws], dim=1)
    assert _n_kernels(small) == 1
    # and so does the split's gradient, through backward()
    x = Tensor(xs, requires_grad=True)
    q, k, v = (x @ Tensor(np.concatenate(ws, 1))).split(64, dim=1)
    (q * k + v).sum().backward()
    want = ((xs @ ws[1]) @ ws[0].T + (xs @ ws[0]) @ ws[1].T + np.ones((128, 64)) @ ws[2].T).astype(np.float32)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-3, atol=1e-3)


def test_a_stack_of_many_small_products_stores_each_one():
    # each piece of a stack is a pad over all of them: a small product fused into the stack's kernel ran its loop for
    # every row of the stack, under the bounds check (MC dropout's 300 forward passes of a 41-point grid stacked: each
    # pass's last matmul ran 300 times, 2.4 s where torch takes 0.1 s). Counted over the rows it would run for, each
    # product is stored by a kernel of its own, and the stack reads them
    from uopkit.schedule.grouper import MIN_STORED_PADDED_REDUCE

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((41, 64)).astype(np.float32)
    ws = rng.standard_normal((64, 64, 1)).astype(np.float32)
    assert 41 * 64 < MIN_STORED_PADDED_REDUCE <= 41 * 64 * len(ws)
    out = Tensor.stack(*[(Tensor(xs) @ Tensor(w)).tanh() for w in ws])
    items = create_schedule(kernelize_tensors([out]))
    assert max(sum(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()) for it in items) == 1
    np.testing.assert_allclose(out.numpy(), np.tanh(np.stack([xs @ w for w in ws])), rtol=1e-5, atol=1e-5)
    # a stack of a few still computes them in its own kernel
    few = Tensor.stack(*[(Tensor(xs) @ Tensor(w)).tanh() for w in ws[:3]])
    assert _n_kernels(few) == 1
    np.testing.assert_allclose(few.numpy(), np.tanh(np.stack([xs @ w for w in ws[:3]])), rtol=1e-5, atol=1e-5)


def test_a_large_reduce_under_a_stored_pad_is_stored_first():
    # a conv input's gradient (a transposed convolution) over relu's mask of the forward conv: the padded gradient is
    # stored for the windows, and the forward conv it reads is stored before it, not computed once per padded element
    # under the pad's bounds check (out of any register tile)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((4, 16, 24, 24)).astype(np.float32), rng.standard_normal((16, 16, 3, 3))
    x, w = Tensor(xs, requires_grad=True), Tensor(ws.astype(np.float32))
    x.conv2d(w, padding=1).relu().sum().backward()
    items = create_schedule(kernelize_tensors([x.grad]))

    def has(item, op):
        return any(u.op is op for u in item.ast.toposort())

    # x padded, the forward conv, relu's mask padded (no reduce in it), the transposed conv
    assert [has(it, Ops.REDUCE_AXIS) for it in items] == [False, True, False, True]
    torch = __import__("pytest").importorskip("torch")
    tx = torch.tensor(xs, requires_grad=True)
    torch.nn.functional.conv2d(tx, torch.tensor(ws, dtype=torch.float32), padding=1).relu().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_convolution_weight_gradient_reads_the_output_gradient_stored():
    # the weight's gradient reads each output gradient once per input channel and tap: an output gradient computed from
    # several buffers (BatchNorm's and ReLU's backward) was computed inside it that many times, out of its register
    # tiles (a ResNet step 1.2 s, 0.22 s stored): it is stored first, and the weight's gradient reads two buffers
    rng = np.random.default_rng(0)
    xs, ws, a, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 6, 6), (4, 4, 3, 3), (2, 4, 6, 6), (4,)))
    x, w = Tensor(xs), Tensor(ws, requires_grad=True)
    (x.conv2d(w, padding=1) * (Tensor(a) * Tensor(b).reshape(1, 4, 1, 1)).relu()).sum().backward()
    items = create_schedule(kernelize_tensors([w.grad]))
    assert [len(it.bufs) for it in items if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort())] == [1 + 2]
    torch = __import__("pytest").importorskip("torch")
    tw = torch.tensor(ws, requires_grad=True)
    out = torch.nn.functional.conv2d(torch.tensor(xs), tw, padding=1)
    (out * (torch.tensor(a) * torch.tensor(b).reshape(1, 4, 1, 1)).relu()).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_an_unpadded_convolution_of_a_computed_input_reads_it_stored():
    # a residual block's 1x1 shortcut conv reads the previous block's output, (a * s + b).relu() here: every output
    # channel reads each input element, in the forward kernel and in the weight's gradient, so it is stored first
    # instead of computed inside both per output channel (a ResNet's two shortcut weight gradients: 36 and 26 ms)
    rng = np.random.default_rng(0)
    xs, s, b, ws = (rng.standard_normal(sh).astype(np.float32) for sh in ((2, 4, 6, 6), (4,), (4,), (8, 4, 1, 1)))
    x, w = Tensor(xs, requires_grad=True), Tensor(ws, requires_grad=True)
    inp = (x * Tensor(s).reshape(1, 4, 1, 1) + Tensor(b).reshape(1, 4, 1, 1)).relu()
    out = inp.conv2d(w, stride=2)
    (out * out).sum().backward()
    for t in (out, w.grad):
        reduces = [it for it in create_schedule(kernelize_tensors([t])) if it.ast.op is not Ops.COPY]
        assert len(reduces[-1].bufs) == 3, [len(it.bufs) for it in reduces]
    torch = __import__("pytest").importorskip("torch")
    tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
    ti = (tx * torch.tensor(s).reshape(1, 4, 1, 1) + torch.tensor(b).reshape(1, 4, 1, 1)).relu()
    tout = torch.nn.functional.conv2d(ti, tw, stride=2)
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("order", ["sap", "spa", "asp", "aps", "psa", "pas"])
def test_assigns_reading_what_each_other_overwrite_keep_value_semantics(order):
    # `a` and `p` each read the other's old value and both read `s`'s new one: no order of the three kernels is right,
    # so one reads a copy taken before the write (found by Adadelta with weight decay); replays keep it
    def made(v: float) -> Tensor:
        return Tensor(np.array([v], np.float32)).realize()

    p, a, s = made(1.0), made(0.0), made(0.0)
    want_p, want_a, want_s = 1.0, 0.0, 0.0
    for _ in range(3):
        g = 0.5 + p.detach()
        s.assign(s + g)
        d = (a + 1.0) / s * g
        a.assign(a + d)
        p.assign(p.detach() - d)
        Tensor.realize(*[{"s": s, "a": a, "p": p}[k] for k in order])
        g_ = 0.5 + want_p
        want_s += g_
        d_ = (want_a + 1.0) / want_s * g_
        want_a, want_p = want_a + d_, want_p - d_
        np.testing.assert_allclose([s.item(), a.item(), p.item()], [want_s, want_a, want_p], rtol=1e-6)


def test_an_assign_read_by_a_realize_runs_once() -> None:
    # a BatchNorm's running mean updated in training, then read by an eval pass under no_grad: the eval's realize runs
    # the update; the running mean's tensor must then hold the stored value (rewired as a reader of its own buffer,
    # its update ran again when read: from the third repetition, a replay, 0.9 * m + m instead of m)
    import uopkit
    from uopkit import nn

    rng = np.random.default_rng(0)
    for _ in range(4):
        bn = nn.BatchNorm1d(2)
        xb = rng.standard_normal((4, 2)).astype(np.float32) + 3
        xe = rng.standard_normal((4, 2)).astype(np.float32) * 10
        bn(Tensor(xb)).realize()
        bn.eval()
        with uopkit.no_grad():
            out = bn(Tensor(xe)).numpy()
        mean, var = 0.1 * xb.mean(0), 0.9 + 0.1 * xb.var(0, ddof=1)
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-6)
        np.testing.assert_allclose(out, (xe - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)
    # the same with a plain assign
    for _ in range(4):
        a = Tensor(np.full(3, 2.0, np.float32)).realize()
        a.assign(a * 0.5 + 1)
        with uopkit.no_grad():
            got = (Tensor(np.ones(3, np.float32)) + a).numpy()
        np.testing.assert_array_equal(got, np.full(3, 3.0, np.float32))
        np.testing.assert_array_equal(a.numpy(), np.full(3, 2.0, np.float32))


def _reduces_per_kernel(t: Tensor) -> list[int]:
    return [sum(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()) for it in create_schedule(kernelize_tensors([t]))]


def test_a_large_reduce_summed_down_by_another_is_stored():
    # a global average pool (or a BatchNorm's mean) over a convolution: fused, the convolution ran inside the pool's
    # loop, one thread per (sample, channel) and out of any register tile (57 ms against 0.8 ms stored, 16x64x8x8)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 16, 8, 8), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    conv = Tensor(x).conv2d(Tensor(w), padding=1)
    pooled = (conv + 1).relu().mean((2, 3))
    assert max(_reduces_per_kernel(pooled)) == 1
    torch = pytest.importorskip("torch")
    want = (torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1) + 1).relu().mean((2, 3))
    np.testing.assert_allclose(pooled.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_cat_of_many_computed_pieces_is_split_into_kernels_of_bounded_size():
    # a recurrent layer's input gradient: a cat over the time steps of each step's gate formulas, read by a matmul.
    # Fused, one kernel held every step's formulas (a 2-layer bidirectional LSTM over 20 steps: 235,000 lines of C
    # that gcc didn't compile in 300 s); the largest pieces are stored until the kernel fits
    from uopkit.schedule.grouper import MAX_KERNEL_NODES

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 8), dtype=np.float32) for _ in range(24)]
    w = rng.standard_normal((8, 8), dtype=np.float32)

    def cell(a):
        return (a.sigmoid() * a.tanh() + (a * 0.5).exp() / (1 + a.abs())).sigmoid() * (a - a.square() * 0.1)

    out = Tensor.cat(*[cell(Tensor(x)) for x in xs]) @ Tensor(w)
    items = create_schedule(kernelize_tensors([out]))
    assert max(len(it.ast.toposort()) for it in items) < 2 * MAX_KERNEL_NODES

    def ref(a):
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        return sig(sig(a) * np.tanh(a) + np.exp(a * 0.5) / (1 + np.abs(a))) * (a - a * a * 0.1)

    np.testing.assert_allclose(out.numpy(), np.concatenate([ref(x) for x in xs]) @ w, rtol=1e-4, atol=1e-4)


def test_a_chain_of_pads_is_stored_in_kernels_near_the_bound():
    # each link's pad nests the ones before: storing the largest piece peeled a few nodes off per store (a 600-link
    # chain became hundreds of tiny kernels, and picking them walked every piece's region each time: 591 s for 1000
    # links); the largest piece that fits is stored instead
    from uopkit.schedule.grouper import MAX_KERNEL_NODES

    x = Tensor.arange(6).float()
    for _ in range(600):
        x = x.pad(((1, 0),))[1:] * 1.0
    items = create_schedule(kernelize_tensors([x]))
    nodes = [len(it.ast.toposort()) for it in items]
    assert max(nodes) < 2 * MAX_KERNEL_NODES and len(items) <= 3 * sum(nodes) // MAX_KERNEL_NODES + 2, nodes
    np.testing.assert_allclose(x.numpy(), np.arange(6))


def test_a_stencil_loop_stores_each_few_steps():
    # u = u + a * (rolls of u - 4u), the state rebound each step and nothing realized (a heat equation as written in
    # PyTorch): each step reads the last one through 9 views, so N steps fused were 9**N copies of the first (5 steps:
    # 42 s of code generation; 10: a rewrite that never ended). A value read through many views is stored
    u0 = np.zeros((12, 12), np.float32)
    u0[4:8, 4:8] = 1.0

    def step(v):
        return v + 0.2 * (v.roll(1, 0) + v.roll(-1, 0) + v.roll(1, 1) + v.roll(-1, 1) - 4 * v)

    u = Tensor(u0)
    for _ in range(12):
        u = step(u)
    items = create_schedule(kernelize_tensors([u]))
    assert len(items) >= 12 // 3, len(items)
    want = u0
    for _ in range(12):
        want = want + 0.2 * (sum(np.roll(want, s, a) for s in (1, -1) for a in (0, 1)) - 4 * want)
    np.testing.assert_allclose(u.numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_value_read_through_few_views_stays_fused():
    # a 3-tap filter of a computed value (three views) computes it per tap inside one kernel: no store
    x = Tensor(np.arange(16, dtype=np.float32))
    y = (x * 2 + 1).exp().sqrt()
    out = y[:-2] + y[1:-1] + y[2:]
    assert len(create_schedule(kernelize_tensors([out]))) == 1
    v = np.sqrt(np.exp(np.arange(16, dtype=np.float32) * 2 + 1))
    np.testing.assert_allclose(out.numpy(), v[:-2] + v[1:-1] + v[2:], rtol=1e-5)


def test_a_long_formula_read_by_a_matmul_is_stored_once():
    # a value of many fused operations that a matmul broadcasts along its other operand's columns (an LSTM's gate
    # gradients, read by its weight gradients): fused, every output computed the whole formula again for each element
    # it reduces (64 times for a 2-layer bidirectional LSTM's weight_ih_l1: 80 ms a kernel, 7 MB of C, 11 s in gcc).
    # It is stored by a kernel of its own; the matmul reads it
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((16, 32), dtype=np.float32)
    w_np = rng.standard_normal((32, 24), dtype=np.float32)

    def cell(a):
        return (a.sigmoid() * a.tanh() + (a * 0.5).exp() / (1 + a.abs())).sigmoid() * (a - a.square() * 0.1)

    out = cell(Tensor(a_np)) @ Tensor(w_np)
    items = create_schedule(kernelize_tensors([out]))
    assert len(items) == 2
    matmul = next(it for it in items if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()))
    assert not any(u.op is Ops.EXP2 for u in matmul.ast.toposort())

    def ref(a):
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        return sig(sig(a) * np.tanh(a) + np.exp(a * 0.5) / (1 + np.abs(a))) * (a - a * a * 0.1)

    np.testing.assert_allclose(out.numpy(), ref(a_np) @ w_np, rtol=1e-4, atol=1e-4)
    # a short one (an activation) stays fused into the matmul
    assert _n_kernels(Tensor(a_np).relu() @ Tensor(w_np)) == 1
    assert _n_kernels((Tensor(a_np) * 2 + 1).sigmoid() @ Tensor(w_np)) == 1


def _norm_conv_steps(n: int, channels: int = 16, size: int = 16):  # noqa: ANN202
    """`x = x + 0.1 * f(x)` n times, unrealized (a sampling loop written as in PyTorch), f three GroupNorm -> SiLU ->
    conv blocks; uopkit's graph and torch's result."""
    torch = pytest.importorskip("torch")
    from uopkit import nn

    def blocks(lib):  # noqa: ANN001, ANN202
        layers = (lib.GroupNorm, lib.SiLU, lib.Conv2d)
        return [
            m for _ in range(3) for m in (layers[0](4, channels), layers[1](), layers[2](channels, channels, 3, 1, 1))
        ]

    torch.manual_seed(0)
    tnet, unet = torch.nn.Sequential(*blocks(torch.nn)), nn.Sequential(*blocks(nn))
    unet.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    x0 = torch.randn(2, channels, size, size)
    with torch.no_grad():
        want = x0
        for _ in range(n):
            want = want + 0.1 * tnet(want)
    x = Tensor(x0.numpy()).realize()
    for _ in range(n):
        x = x + 0.1 * unet(x)
    return x, want.numpy()


def test_a_lazy_loop_of_norm_steps_runs_the_same_kernels_every_step():
    # each step's residual is stored with the last convolution of the step (not the convolution alone, which left
    # x_k = x_0 + 0.1 * c_1 + ... + 0.1 * c_k to be recomputed in every kernel of step k+1: kernels that differ from
    # step to step, compiled again each step, and a graph whose scheduling grew with the square of the steps)
    one, _ = _norm_conv_steps(1)
    four, want = _norm_conv_steps(4)
    items_one = create_schedule(kernelize_tensors([one]))
    items_four = create_schedule(kernelize_tensors([four]))
    assert len(items_four) == 4 * len(items_one)
    assert {it.ast for it in items_four} == {it.ast for it in items_one}
    np.testing.assert_allclose(four.numpy(), want, rtol=1e-4, atol=1e-4)


def test_misplaced_row_reduces_are_found_in_a_few_passes(monkeypatch):
    # every GroupNorm's statistics are stored (the norm's output is reshaped back: its rows are no loop of their own);
    # one pass finds them all, where one pass per norm walked every kernel again (N steps: N**2 time)
    import uopkit.schedule.grouper as grouper

    passes = []
    find = grouper._realize_misplaced_row_reduces

    def counted(ctx):  # noqa: ANN001, ANN202
        passes.append(None)
        return find(ctx)

    monkeypatch.setattr(grouper, "_realize_misplaced_row_reduces", counted)
    counts = []
    for n in (1, 4):
        x, _ = _norm_conv_steps(n, channels=8, size=8)
        passes.clear()
        create_schedule(kernelize_tensors([x]))
        counts.append(len(passes))
    assert counts[0] == counts[1] <= 3


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_windows_over_a_mode_padded_input_read_it_stored(mode):
    """A reflect/replicate/circular pad is a cat of slices: a depthwise blur or a 1-d filter (one output channel per
    group, so conv2d doesn't store its input) over it would compute the cat's masked pieces per window tap in the
    conv's kernel. The padded value is stored by a kernel of its own and the conv reads it plainly."""
    torch = pytest.importorskip("torch")
    import uopkit.nn.functional as UF

    x = np.random.default_rng(0).random((2, 3, 12, 16), dtype=np.float32)
    w = np.random.default_rng(1).random((3, 1, 1, 7), dtype=np.float32)
    x1, w1 = x.reshape(6, 1, 192), np.random.default_rng(2).random((1, 1, 9), dtype=np.float32)
    cases = [
        (UF.conv2d(UF.pad(Tensor(x), (3, 3, 3, 3), mode=mode), Tensor(w), groups=3), (x, w, (3, 3, 3, 3), 3)),
        (UF.conv1d(UF.pad(Tensor(x1), (4, 4), mode=mode), Tensor(w1)), (x1, w1, (4, 4), 1)),
    ]
    for out, (xv, wv, pads, groups) in cases:
        schedule = create_schedule(kernelize_tensors([out]))
        conv = [item.ast for item in schedule if any(u.op is Ops.REDUCE_AXIS for u in item.ast.toposort())]
        assert len(schedule) == 2 and len(conv) == 1, [len(item.ast.toposort()) for item in schedule]
        assert not any(u.op is Ops.WHERE for u in conv[0].toposort())
        TF = torch.nn.functional
        conv_fn = TF.conv2d if xv.ndim == 4 else TF.conv1d
        ref = conv_fn(TF.pad(torch.from_numpy(xv), pads, mode=mode), torch.from_numpy(wv), groups=groups)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def _buffers_per_kernel(items) -> list[int]:
    return [sum(u.op is Ops.DEFINE_GLOBAL for u in it.ast.toposort()) for it in items if it.ast.op is not Ops.COPY]


def test_a_sum_of_many_stored_values_is_split_into_kernels_of_bounded_arguments():
    # the gradient of a scalar parameter used at every step of a time loop whose states were stored (an SEIR model's
    # rates over 60 days of RK4): one sum of a term per step, each reading buffers of its own. Fused, one kernel took
    # every buffer as an argument (1,064 of them: the CPU backend's ctypes call refused more than 1024, and other
    # devices limit a launch's arguments too); the running sum is stored every MAX_KERNEL_BUFFERS buffers
    from uopkit.schedule.grouper import MAX_KERNEL_BUFFERS

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(10).astype(np.float32) for _ in range(1100)]
    total = Tensor(arrays[0]).realize()
    for a in arrays[1:]:
        total = total + Tensor(a).realize() * 0.5
    assert max(_buffers_per_kernel(create_schedule(kernelize_tensors([total])))) <= MAX_KERNEL_BUFFERS + 1
    np.testing.assert_allclose(total.numpy(), arrays[0] + 0.5 * np.sum(arrays[1:], 0), rtol=1e-4, atol=1e-4)


def test_a_stored_piece_of_an_oversized_kernel_is_itself_bounded():
    # pieces that `_realize_pieces_of_oversized_kernels` stores are kernels of their own, checked in turn: a cat of
    # a few pieces, each a sum over many stored values, kept every buffer in the piece's kernel
    from uopkit.schedule.grouper import MAX_KERNEL_BUFFERS

    rng = np.random.default_rng(1)
    arrays = [[rng.standard_normal(4).astype(np.float32) for _ in range(300)] for _ in range(3)]
    pieces = []
    for group in arrays:
        piece = Tensor(group[0]).realize()
        for a in group[1:]:
            piece = piece + Tensor(a).realize()
        pieces.append(piece)
    out = Tensor.cat(*pieces)
    assert max(_buffers_per_kernel(create_schedule(kernelize_tensors([out])))) <= MAX_KERNEL_BUFFERS + 1
    np.testing.assert_allclose(out.numpy(), np.concatenate([np.sum(g, 0) for g in arrays]), rtol=1e-4, atol=1e-4)


def test_a_metric_summed_over_many_batches_is_split_into_kernels_of_bounded_size():
    # an eval loop that sums its metrics per batch into tensors and reads them once after the loop: one value over
    # every batch's reduces. Fused, one kernel held them all (200 batches: hundreds of reduce loops, 62 s to the
    # first result); stored every MAX_KERNEL_REDUCES reduces, kernels stay alike and short and the total linear
    torch = pytest.importorskip("torch")
    from uopkit.nn import functional as F
    from uopkit.schedule.grouper import MAX_KERNEL_REDUCES

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((64, 8, 5), dtype=np.float32)
    ys = rng.integers(0, 5, (64, 8))

    def metrics(n: int) -> tuple[Tensor, Tensor]:
        correct, loss = 0, 0
        for x, y in zip(xs[:n], ys[:n], strict=True):
            out, label = Tensor(x) * 1.5, Tensor(y)
            correct = correct + (out.argmax(1) == label).sum()
            loss = loss + F.cross_entropy(out, label, reduction="sum")
        return correct, loss

    def kernels(n: int) -> list[UOp]:
        return [item.ast for item in create_schedule(kernelize_tensors(list(metrics(n))))]

    short, long = kernels(16), kernels(64)
    reduces = [sum(u.op is Ops.REDUCE_AXIS for u in ast.toposort()) for ast in long]
    assert max(reduces) <= MAX_KERNEL_REDUCES, reduces
    sizes = lambda asts: [len(ast.toposort()) for ast in asts]  # noqa: E731
    assert max(sizes(long)) == max(sizes(short)) and len(long) < 4.5 * len(short), (sizes(short), sizes(long))
    # (a few kinds of kernel, each compiled once)
    assert len(set(long)) <= 8, len(set(long))
    correct, loss = metrics(64)
    out = torch.from_numpy(xs) * 1.5
    label = torch.from_numpy(ys)
    assert correct.item() == int((out.argmax(2) == label).sum())
    want = torch.nn.functional.cross_entropy(out.reshape(-1, 5), label.reshape(-1), reduction="sum")
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)


def _heat_steps(n: int, size: int = 64) -> tuple[Tensor, np.ndarray]:
    # a heat equation as a no_grad loop writes it: replicate pad, 3x3 Laplacian, the state rebound, nothing realized
    import uopkit.nn.functional as UF

    u0 = np.random.default_rng(0).uniform(0, 1, (1, 1, size, size)).astype(np.float32)
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32).reshape(1, 1, 3, 3)
    v = Tensor(u0).realize()
    for _ in range(n):
        v = v + 0.2 * UF.conv2d(UF.pad(v, (1, 1, 1, 1), mode="replicate"), Tensor(lap))
    want = u0[0, 0]
    for _ in range(n):
        p = np.pad(want, 1, mode="edge")
        want = want + 0.2 * (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * want)
    return v, want.reshape(u0.shape)


@pytest.mark.parametrize("no_grad", [False, True])
def test_a_long_lazy_stencil_loop_runs_the_same_kernels_every_step(no_grad):
    # each step's padded state and each step's new state are stored: every step the same two kernels, however long the
    # loop (the rule for a reduce read through a pad stored the bare conv reduce, not the step's value: three kernels
    # a step and a depth cut every 45 steps)
    import contextlib

    import uopkit

    with uopkit.no_grad() if no_grad else contextlib.nullcontext():
        items_few = create_schedule(kernelize_tensors([_heat_steps(3)[0]]))
        many, want = _heat_steps(120)
        items_many = create_schedule(kernelize_tensors([many]))
    assert len(items_many) == 40 * len(items_few) == 240
    assert {it.ast for it in items_many} == {it.ast for it in items_few}
    np.testing.assert_allclose(many.numpy(), want, rtol=1e-4, atol=1e-5)


def _lorenz_rk4(y, n: int, cat):
    # RK4 over the Lorenz system, the right-hand side a cat of its three components, nothing realized per step
    def f(y):
        x, yy, z = y[..., 0:1], y[..., 1:2], y[..., 2:3]
        return cat([10 * (yy - x), x * (28 - z) - yy, x * yy - 8 / 3 * z], -1)

    for _ in range(n):
        k1 = f(y)
        k2 = f(y + 0.005 * k1)
        k3 = f(y + 0.005 * k2)
        k4 = f(y + 0.01 * k3)
        y = y + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def _lorenz_start(start: str) -> Tensor:
    # the state as given, or computed by a matmul large enough that a pad reading it stores it (every step's pieces
    # reach it: the walk for reduces under each pad goes down to it)
    rng = np.random.default_rng(0)
    if start == "given":
        return Tensor(np.array([[1.0, 1.0, 1.0], [1.0001, 1.0, 1.0]], np.float32))
    a, b = rng.standard_normal((2, 16384), np.float32), rng.standard_normal((16384, 3), np.float32)
    return Tensor(a * 0.01) @ Tensor(b * 0.01)


@pytest.mark.parametrize("start", ["given", "matmul"])
def test_a_lazy_loop_of_cats_is_grouped_in_time_linear_in_its_steps(monkeypatch, start):
    # each piece of a cat is a pad of the whole, and the rule for a reduce read through a pad walked the whole fused
    # region once per pad: quadratic in the steps of a loop whose right-hand side is a cat (RK4 over a Lorenz system,
    # 200 steps: 65 s to the first result, 3 s now). The grouper's work (the nodes it asks whether a region stops
    # there) now grows with the steps as the graph does
    torch = pytest.importorskip("torch")
    from uopkit.schedule import grouper

    calls = [0]
    stops = grouper._stops_region

    def counted(ctx, u):
        calls[0] += 1
        return stops(ctx, u)

    monkeypatch.setattr(grouper, "_stops_region", counted)
    cat = lambda xs, dim: Tensor.cat(*xs, dim=dim)
    work = []
    for n in (8, 32):
        y = _lorenz_rk4(_lorenz_start(start), n, cat)
        calls[0] = 0
        kernelize_tensors([y])
        work.append(calls[0])
    # (the graph is 4x larger; the walks under each pad made it 11x more work)
    assert work[1] < 5 * work[0], work
    y0 = _lorenz_start(start).numpy()
    want = _lorenz_rk4(torch.from_numpy(y0), 8, torch.cat)
    np.testing.assert_allclose(_lorenz_rk4(_lorenz_start(start), 8, cat).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_the_walk_for_reduces_under_a_pad_finds_what_the_whole_region_holds(monkeypatch):
    # the walk skips what holds no large reduce, and marks what it found none under: it finds the reduces a walk of
    # the whole region to its reduces finds
    from uopkit.schedule import grouper
    from uopkit.schedule.grouper import MIN_STORED_PADDED_REDUCE

    walk = grouper._padded_reduces
    found = []

    def checked(ctx, root, least):
        assert least <= MIN_STORED_PADDED_REDUCE
        region = grouper._region_to_reduces(ctx, root)
        want = {n for n in region if n.op is Ops.REDUCE_AXIS and n.src[0].size >= least}
        got = walk(ctx, root, least)
        assert len(got) == len(set(got)) and set(got) == want
        found.extend(got)
        return got

    monkeypatch.setattr(grouper, "_padded_reduces", checked)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((128, 64)).astype(np.float32)
    ws = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3)]
    x = Tensor(xs, requires_grad=True)
    q, k, v = (x @ Tensor(np.concatenate(ws, 1))).split(64, dim=1)
    (q * k + v).sum().backward()
    outs = [
        Tensor.cat(*[(Tensor(xs) @ Tensor(w)).relu() + 1 for w in ws], dim=1),
        x.grad,
        _lorenz_rk4(_lorenz_start("matmul"), 6, lambda xs, dim: Tensor.cat(*xs, dim=dim)),
    ]
    for out in outs:
        found.clear()
        kernelize_tensors([out])
        assert found


def test_a_no_grad_stencil_loop_gets_the_kernels_of_the_loop_with_gradients():
    # no_grad wraps every result in a DETACH, which changes no value, and the realize rules now see through it: the
    # replicate-padded state is stored by a kernel of its own as with gradients on, two kernels a step (behind the
    # DETACHes the pad went unseen: one kernel a step, computing the pad's selects per element and window tap)
    import uopkit

    with uopkit.no_grad():
        detached, want = _heat_steps(4)
        asts_detached = [it.ast for it in create_schedule(kernelize_tensors([detached]))]
    plain, _ = _heat_steps(4)
    asts_plain = [it.ast for it in create_schedule(kernelize_tensors([plain]))]
    assert len(asts_detached) == len(asts_plain) == 8
    assert asts_detached == asts_plain
    np.testing.assert_allclose(detached.numpy(), want, rtol=1e-5, atol=1e-6)


def test_copies_of_one_value_with_and_without_a_detach_are_each_stored():
    # v and DETACH(v) are one value to the realize rules, so COPY(v) and COPY(DETACH(v)) are one copy there: each is
    # still stored (a copy can't be computed inside another kernel), as is a DETACH over a copy asked for
    x = Tensor(np.arange(6, dtype=np.float32))
    v = x * 2 + 1
    outs = [v.to("CPU:1"), v.detach().to("CPU:1"), (v + 2).to("CPU:1").detach(), (v * 4).detach().to("CPU:1")]
    items = create_schedule(kernelize_tensors(outs))
    assert not any(n.op is Ops.COPY for it in items if it.ast.op is Ops.SINK for n in it.ast.toposort())
    want = np.arange(6, dtype=np.float32) * 2 + 1
    for out, value in zip(outs, [want, want, want + 2, want * 4], strict=True):
        assert out.device == "CPU:1"
        np.testing.assert_array_equal(out.numpy(), value)


def test_a_value_asked_for_detached_and_read_by_others_is_computed_once():
    # a matmul asked for as m.detach() and read by a sum beside it: the DETACH's kernel would compute the matmul, so
    # the matmul is stored itself and both read it
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((8, 16)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal((16, 4)).astype(np.float32))
    m = a @ b
    detached, total = m.detach(), (m * 2).sum()
    items = create_schedule(kernelize_tensors([detached, total]))
    reduces = [sum(n.op is Ops.REDUCE_AXIS for n in it.ast.toposort()) for it in items]
    assert sum(reduces) == 2
    want = a.numpy() @ b.numpy()
    np.testing.assert_allclose(detached.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total.item(), 2 * want.sum(), rtol=1e-4)


# ---- what a realize remembers of the graph that computed a value (uopkit.schedule.computed_from)


def _storage_ref(t: Tensor):
    return weakref.ref(buffers[t.uop.base])


@pytest.mark.usefixtures("gc_of_this_test")
def test_recomputing_a_value_in_a_loop_frees_the_earlier_values():
    torch = pytest.importorskip("torch")
    # nothing wants a gradient: a realized value's graph is not kept, so it doesn't hold the value before it (each
    # step's result held every earlier one through a chain of graphs)
    a = Tensor(np.ones(64, np.float32)).realize()
    first = _storage_ref(a)
    refs = []
    for _ in range(6):
        a = (a * 1.01).realize()
        refs.append(_storage_ref(a))
    gc.collect()
    assert first() is None and all(r() is None for r in refs[:-1]) and refs[-1]() is not None
    expected = torch.ones(64)
    for _ in range(6):
        expected = expected * 1.01
    np.testing.assert_allclose(a.numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.usefixtures("gc_of_this_test")
def test_a_value_realized_from_a_temporary_does_not_hold_it():
    x = Tensor(np.arange(8, dtype=np.float32))
    y = (x * 2).realize()
    held = _storage_ref(x)
    del x
    gc.collect()
    assert held() is None and y.tolist() == [2.0 * i for i in range(8)]


def test_a_value_realized_before_requires_grad_is_a_constant_as_in_torch():
    torch = pytest.importorskip("torch")
    tx = torch.tensor([1.0, 2.0])
    ty = tx * 3
    tx.requires_grad_()
    with pytest.raises(RuntimeError):
        ty.sum().backward()
    x = Tensor([1.0, 2.0])
    y = (x * 3).realize()
    x.requires_grad_()
    with pytest.raises(RuntimeError, match="no tensor with requires_grad"):
        y.sum().backward()
    # realized after requires_grad was set, the value still leads back to x
    z = (x * 3).realize()
    z.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.usefixtures("gc_of_this_test")
def test_a_state_updated_between_optimizer_steps_keeps_no_chain_of_values():
    from uopkit import nn

    # `ema = ema * 0.99 + w * 0.01` reads w, which wants a gradient: its graph is kept, and it reads the ema before.
    # That one's own graph read w before the optimizer overwrote it, so a backward() through it raises anyway: it is
    # dropped, and the ema of two steps ago is freed
    w = Tensor(np.ones(16, np.float32), requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.1)
    ema = Tensor(np.zeros(16, np.float32)).realize()
    refs = []
    for _ in range(6):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        ema = (ema * 0.99 + w * 0.01).realize()
        refs.append(_storage_ref(ema))
    gc.collect()
    assert all(r() is None for r in refs[:-2])
    # a gradient through the ema still needs its history: it raises as it did with the history kept
    with pytest.raises(RuntimeError, match="overwritten in place"):
        (ema * w).sum().backward()
    # a value realized from w alone since the last step is still followed back to it
    fresh = (w * 2).realize()
    assert fresh.sum().gradient(w)[0].tolist() == [2.0] * 16


# lookups of rows of a (table, index) pair, in uopkit and in torch (the same names)
_LOOKUPS = {
    "embedding": lambda F, w, i: F.embedding(i, w),
    "index_select": lambda F, w, i: w.index_select(0, i),
    "getitem": lambda F, w, i: w[i],
    "getitem_column": lambda F, w, i: w[i, 3],
    "gather": lambda F, w, i: w.gather(0, i.reshape(-1, 1).expand(-1, w.shape[1])),
}


def _loops_over_outputs_only(t: Tensor) -> bool:
    # the kernels of t, lowered: each loop nest runs over (at most) t's elements, none over the table's rows
    from uopkit import Device
    from uopkit.codegen import get_program

    renderer = Device[t.device].renderer
    programs = [get_program(item.ast, renderer) for item in create_schedule(kernelize_tensors([t]))]
    bounds = [[u.src[0].arg for u in p.uops if u.op is Ops.RANGE] for p in programs]
    return all(all(isinstance(b, int) for b in nest) and np.prod(nest) <= t.numel() for nest in bounds)


@pytest.mark.parametrize("wants_grad", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("lookup", sorted(_LOOKUPS))
def test_a_lookup_under_no_grad_is_one_load_per_element_as_with_gradients(lookup, index_dtype, wants_grad):
    # under no_grad every value computed is in a DETACH (cut from the gradient), a lookup's one-hot select too: the
    # scheduler took the sum over the table for an ordinary long sum and cut it into partial sums, each comparing every
    # index with every row of its slice (10 s for a 32000-row embedding, 6 ms with gradients on)
    torch = pytest.importorskip("torch")
    import uopkit
    import uopkit.nn.functional as UF

    rng = np.random.default_rng(0)
    table, idx = rng.standard_normal((20000, 8), dtype=np.float32), rng.integers(0, 20000, 300).astype(index_dtype)
    w, i = Tensor(table, requires_grad=wants_grad), Tensor(idx)
    names = lambda t: [kernel_name(item.ast) for item in create_schedule(kernelize_tensors([t]))]  # noqa: E731
    with_grad = _LOOKUPS[lookup](UF, w, i)
    with uopkit.no_grad():
        without = _LOOKUPS[lookup](UF, w, i)
    assert len(names(without)) == 1 and names(without) == names(with_grad)
    assert _loops_over_outputs_only(without)
    want = _LOOKUPS[lookup](torch.nn.functional, torch.from_numpy(table), torch.from_numpy(idx).long())
    np.testing.assert_array_equal(without.numpy(), want.numpy())
    assert not without.requires_grad


def test_a_loss_and_a_bag_under_no_grad_get_the_kernels_they_get_with_gradients():
    # nll_loss's pick of the target's log-probability stayed fused into the mean only with gradients on (under no_grad
    # its select, in a DETACH, was no one-hot reduce: stored in a kernel of its own); an embedding bag's lookup was cut
    torch = pytest.importorskip("torch")
    import uopkit
    import uopkit.nn.functional as UF

    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4096, 256), dtype=np.float32), rng.integers(0, 256, 4096)
    table, bags = rng.standard_normal((32000, 16), dtype=np.float32), rng.integers(0, 32000, (64, 8))
    w = Tensor(table, requires_grad=True)
    cases = [
        (lambda F, m: F.nll_loss(m(x), m(y)), True),
        (lambda F, m: F.cross_entropy(m(x), m(y)), False),
        (lambda F, m: F.embedding_bag(m(bags), w if F is UF else torch.from_numpy(table)), False),
    ]
    for f, fused in cases:
        with_grad = f(UF, Tensor)
        with uopkit.no_grad():
            without = f(UF, Tensor)
        a, b = create_schedule(kernelize_tensors([without])), create_schedule(kernelize_tensors([with_grad]))
        assert [kernel_name(k.ast) for k in a] == [kernel_name(k.ast) for k in b]
        assert len(a) == 1 or not fused
        want = f(torch.nn.functional, torch.from_numpy)
        np.testing.assert_allclose(without.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)

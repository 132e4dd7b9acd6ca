"""tensor/spatial.py against torch.nn.functional: fold, lp pooling, local response norm, channel shuffle, affine_grid
and grid_sample, embedding bags, bilinear forms, distances and group norm (values, gradients, shapes, errors); the
random ones (channel dropouts, alpha dropouts, gumbel softmax) by their statistics and structure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.uop.ops import Ops

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(11)


def _randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def check(ours: Callable[..., Tensor], theirs: Callable[..., Any], *arrays: np.ndarray, atol: float = 1e-5) -> None:
    """ours(*Tensors) and theirs(*torch tensors) on the same arrays: the value, and the gradient of a random weighting
    of it to every floating-point array (integer arrays go in as plain indices)."""
    floats = [a.dtype.kind == "f" for a in arrays]
    xs = [Tensor(a, requires_grad=True) if f else Tensor(a) for a, f in zip(arrays, floats, strict=True)]
    ts = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, floats, strict=True)]
    out, ref = ours(*xs), theirs(*ts)
    assert out.shape == tuple(ref.shape)
    assert out.dtype == dtypes.float64 if ref.dtype == torch.float64 else out.dtype == dtypes.float32
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    if not ref.requires_grad or not ref.numel():
        return
    upstream = RNG.standard_normal(ref.shape).astype(arrays[0].dtype if floats[0] else np.float32)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        if t.requires_grad:
            expected = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
            got = x.grad.numpy() if x.grad is not None else np.zeros(t.shape)
            np.testing.assert_allclose(got, expected, atol=atol, rtol=1e-4, err_msg=f"gradient of operand {i}")


def test_fold():
    # (input shape, output_size, kernel, dilation, padding, stride)
    cases = [
        ((2, 2 * 2 * 3, 6), (5, 6), (2, 3), (1, 2), (1, 0), (2, 1)),
        ((4 * 4, 9), (4, 4), 2, 1, 0, 1),
        ((1, 3 * 9, 4), (5, 5), 3, 1, 1, 3),
    ]
    for shape, *args in cases:
        check(lambda x, a=args: x.fold(*a), lambda x, a=args: F.fold(x, *a), _randn(*shape))
    check(lambda x: x.fold((3, 3), 2), lambda x: F.fold(x, (3, 3), 2), _randn(1, 4, 4, dtype=np.float64))
    assert Tensor.zeros(0, 4, 4).fold((3, 3), 2).shape == (0, 1, 3, 3)


@pytest.mark.parametrize(
    "size, kernel, dilation, padding, stride",
    [((32, 30), 8, 1, 0, 4), ((17, 19), (5, 3), (1, 2), (2, 1), (3, 2)), ((12, 12), 3, 1, 1, 1), ((9, 9), 2, 3, 0, 5)],
)
def test_fold_gathers_a_few_taps_per_position(size, kernel, dilation, padding, stride):
    # strides, dilations and paddings as torch's; the output is built from about (k * d / s) ** 2 shifted views of
    # the blocks, not one padded view of the whole output per tap (k * k: 64 for an 8x8 kernel, 70x torch's time)
    k = (kernel, kernel) if isinstance(kernel, int) else kernel
    blocks = F.unfold(torch.zeros(1, 1, *size), kernel, dilation, padding, stride).shape[-1]
    x = _randn(2, 3 * k[0] * k[1], blocks)
    args = (size, kernel, dilation, padding, stride)
    check(lambda t: t.fold(*args), lambda t: F.fold(t, *args), x)
    if (kernel, stride) == (8, 4):
        out = Tensor(x).fold(*args)
        assert sum(u.op is Ops.PAD for u in out.uop.toposort()) <= 2 * 2 + 4


def test_lp_pool():
    x1, x2, x3 = _randn(2, 3, 9), np.abs(_randn(1, 2, 5, 6)) + 0.1, _randn(2, 4, 4, 5)
    check(lambda x: x.lp_pool1d(2, 3, 2, True), lambda x: F.lp_pool1d(x, 2, 3, 2, True), x1)
    check(lambda x: x.lp_pool1d(1, 2), lambda x: F.lp_pool1d(x, 1, 2), x1[0])
    # a fractional 1/p of a negative sum is NaN, in the value and in the gradient
    check(lambda x: x.lp_pool2d(3, (2, 3)), lambda x: F.lp_pool2d(x, 3, (2, 3)), x2 - 0.6)
    check(lambda x: x.lp_pool2d(1.5, 2, 1), lambda x: F.lp_pool2d(x, 1.5, 2, 1), x2)
    check(lambda x: x.lp_pool2d(float("inf"), 2), lambda x: F.lp_pool2d(x, float("inf"), 2), x2[0])
    check(lambda x: x.lp_pool3d(2, 2, (1, 2, 2)), lambda x: F.lp_pool3d(x, 2, 2, (1, 2, 2)), x3)
    # a window of zeros: value 0, gradient 0 (not NaN)
    zeros = np.zeros((1, 1, 4), np.float32)
    zeros[0, 0, 2:] = [1.0, 2.0]
    check(lambda x: x.lp_pool1d(2, 2), lambda x: F.lp_pool1d(x, 2, 2), zeros)


def test_local_response_norm_and_channel_shuffle():
    for shape, size in [((2, 5, 3), 3), ((1, 6, 2, 3), 4), ((2, 3, 2, 1, 2), 1)]:
        x = _randn(*shape)
        check(
            lambda t, size=size: t.local_response_norm(size, 1e-2, 0.6, 2.0),
            lambda t, size=size: F.local_response_norm(t, size, 1e-2, 0.6, 2.0),
            x,
        )
    check(lambda t: t.channel_shuffle(3), lambda t: F.channel_shuffle(t, 3), _randn(2, 6, 2, 2))
    x = Tensor.arange(8).reshape(1, 8, 1)
    assert x.channel_shuffle(4).tolist() == F.channel_shuffle(torch.arange(8).reshape(1, 8, 1), 4).tolist()
    check(lambda t: t.pixel_shuffle(2), lambda t: F.pixel_shuffle(t, 2), _randn(1, 8, 2, 3))
    check(lambda t: t.pixel_unshuffle(2), lambda t: F.pixel_unshuffle(t, 2), _randn(2, 4, 6))


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")  # (torch's, on unit-size grids)
def test_affine_grid():
    for size, theta, ac in [
        ((2, 3, 4, 5), _randn(2, 2, 3), False),
        ((1, 1, 3, 1), _randn(1, 2, 3), True),
        ((2, 1, 2, 3, 4), _randn(2, 3, 4), True),
        ((1, 1, 3, 2, 1), _randn(1, 3, 4, dtype=np.float64), False),
    ]:
        check(lambda t, s=size, a=ac: t.affine_grid(s, a), lambda t, s=size, a=ac: F.affine_grid(t, s, a), theta)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_affine_grid_identity_rounds_as_torch(dtype: Any) -> None:
    # an identity theta (a spatial transformer's usual start) puts each point on a pixel centre, where the gradient
    # of bilinear sampling to the grid is one-sided: torch's grid is its linspace, rounded in the dtype, and a grid
    # one ulp away from it took the other side (a 3-D STN's gradient to theta off by 40, not by rounding)
    for size, ac in [
        ((1, 2, 4, 5, 16), True),
        ((1, 2, 7, 16, 24), False),
        ((2, 1, 13, 33), True),
        ((2, 1, 12, 3), False),
    ]:
        nd = len(size) - 2
        theta = np.zeros((size[0], nd, nd + 1), dtype)
        theta[:, :, :nd] = np.eye(nd)
        ours = Tensor(theta).affine_grid(size, ac).numpy()
        np.testing.assert_array_equal(ours, F.affine_grid(torch.tensor(theta), size, align_corners=ac).numpy())
    x, theta = _randn(1, 2, 4, 5, 6), np.eye(3, 4, dtype=np.float32)[None]
    for padding, ac in [("zeros", True), ("border", True), ("reflection", True), ("border", False)]:
        check(
            lambda x, th, p=padding, a=ac: x.grid_sample(
                th.affine_grid((1, 2, 4, 5, 6), a), padding_mode=p, align_corners=a
            ),
            lambda x, th, p=padding, a=ac: F.grid_sample(
                x, F.affine_grid(th, (1, 2, 4, 5, 6), a), padding_mode=p, align_corners=a
            ),
            x,
            theta,
            atol=1e-4,
        )


def test_grid_sample():
    img, img5 = _randn(2, 3, 4, 5), _randn(1, 2, 3, 4, 3)
    # points inside, on the borders and well outside (reflections more than once)
    grid = (RNG.uniform(-2.6, 2.6, (2, 3, 4, 2))).astype(np.float32)
    grid[0, 0, :2] = [[-1.0, 1.0], [1.0, -1.0]]
    grid5 = RNG.uniform(-1.8, 1.8, (1, 2, 3, 2, 3)).astype(np.float32)
    for mode, padding, ac in [
        ("bilinear", "zeros", False),
        ("bilinear", "border", True),
        ("bilinear", "reflection", False),
        ("nearest", "zeros", True),
        ("bicubic", "zeros", False),
        ("bicubic", "reflection", True),
    ]:
        check(
            lambda x, g, m=mode, p=padding, a=ac: x.grid_sample(g, m, p, a),
            lambda x, g, m=mode, p=padding, a=ac: F.grid_sample(x, g, m, p, a),
            img,
            grid,
            atol=1e-4,
        )
    for mode, padding in [("bilinear", "reflection"), ("nearest", "border")]:
        check(
            lambda x, g, m=mode, p=padding: x.grid_sample(g, m, p, True),
            lambda x, g, m=mode, p=padding: F.grid_sample(x, g, m, p, True),
            img5,
            grid5,
            atol=1e-4,
        )
    # float64, and a grid from affine_grid (the gradient to theta through both)
    check(
        lambda x, g: x.grid_sample(g, padding_mode="border"),
        lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=False),
        img[:1].astype(np.float64),
        grid[:1].astype(np.float64),
    )
    check(
        lambda x, th: x.grid_sample(th.affine_grid((2, 3, 3, 2))),
        lambda x, th: F.grid_sample(x, F.affine_grid(th, (2, 3, 3, 2), False), align_corners=False),
        img,
        _randn(2, 2, 3),
        atol=1e-4,
    )


@pytest.mark.parametrize("dims", [2, 3])
def test_grid_sample_nearest_gives_the_grid_a_zero_gradient(dims: int) -> None:
    # torch's nearest mode gives the grid a gradient of zeros (not None: `grid.grad.norm()` after backward works)
    img = _randn(1, 2, *(3,) * dims)
    grid = RNG.uniform(-1.2, 1.2, (1, *(2,) * dims, dims)).astype(np.float32)
    g, tg = Tensor(grid, requires_grad=True), torch.tensor(grid, requires_grad=True)
    out = Tensor(img).grid_sample(g, "nearest")
    ref = F.grid_sample(torch.tensor(img), tg, "nearest", align_corners=False)
    assert out.requires_grad == ref.requires_grad
    out.sum().backward()
    ref.sum().backward()
    assert g.grad is not None
    np.testing.assert_array_equal(g.grad.numpy(), tg.grad.numpy())


def test_embedding_bag():
    weight = _randn(7, 3)
    flat = np.array([1, 4, 4, 0, 6, 2, 3], np.int64)
    offsets = np.array([0, 2, 2, 5], np.int64)
    for mode in ("sum", "mean", "max"):
        for padding_idx in (None, 4):
            # (torch's max gradient of an empty bag reads an unset index: no empty bags there)
            check(
                lambda w, i, o, m=mode, pi=padding_idx: i.embedding_bag(w, o, mode=m, padding_idx=pi),
                lambda w, i, o, m=mode, pi=padding_idx: F.embedding_bag(i, w, o, mode=m, padding_idx=pi),
                weight,
                flat,
                offsets if mode != "max" else np.array([0, 2, 3, 5], np.int64),
            )
    empty = Tensor(flat).embedding_bag(Tensor(weight), Tensor(offsets), mode="max")
    assert empty.numpy()[1].tolist() == [0.0, 0.0, 0.0]
    bags = np.array([[1, 2, 2], [5, 0, 6]], np.int32)
    check(lambda w, i: i.embedding_bag(w), lambda w, i: F.embedding_bag(i, w), weight, bags)
    check(
        lambda w, i: i.embedding_bag(w, mode="max", padding_idx=-5),
        lambda w, i: F.embedding_bag(i, w, mode="max", padding_idx=-5),
        weight,
        bags,
    )
    # per-sample weights (their gradient too), include_last_offset, a float64 weight (the last offset is the input's
    # length: where it is less, torch's float32 bags stop there, its float64 ones don't, and the gradient of a
    # per-sample weight left out is unset memory)
    psw = _randn(7)
    check(
        lambda p, w, i, o: i.embedding_bag(w, o, mode="sum", per_sample_weights=p, include_last_offset=True),
        lambda p, w, i, o: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, include_last_offset=True),
        psw,
        weight,
        flat,
        np.array([0, 2, 7], np.int64),
    )
    check(
        lambda w, i, o: i.embedding_bag(w, o, include_last_offset=True),
        lambda w, i, o: F.embedding_bag(i, w, o, include_last_offset=True),
        weight.astype(np.float64),
        flat,
        np.array([0, 1, 3, 7], np.int64),
    )


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_method_scales_the_gradient_by_frequency(mode):
    # the documented rule, which torch's embedding follows: each row's gradient divided by its index's count in the
    # input (torch 2.13's CPU embedding_bag divides some rows by another index's count), as F.embedding_bag's
    weight = _randn(7, 3).astype(np.float64)
    flat = np.array([1, 4, 4, 0, 6, 4, 1], np.int64)
    for bags, offsets in ((flat, np.array([0, 2, 2, 5])), (flat[:6].reshape(2, 3), None)):
        tw = torch.from_numpy(weight).requires_grad_()
        rows = torch.nn.functional.embedding(torch.from_numpy(bags), tw, scale_grad_by_freq=True)
        if offsets is None:
            want = rows.sum(1) if mode == "sum" else rows.mean(1)
        else:
            ends = [*offsets[1:], len(flat)]
            parts = [
                rows[a:b].sum(0) if mode == "sum" else rows[a:b].sum(0) / max(b - a, 1)
                for a, b in zip(offsets, ends, strict=True)
            ]
            want = torch.stack(parts)
        grad = _randn(*want.shape).astype(np.float64)
        (want * torch.from_numpy(grad)).sum().backward()
        w = Tensor(weight, requires_grad=True)
        got = Tensor(bags).embedding_bag(
            w, None if offsets is None else Tensor(offsets), mode=mode, scale_grad_by_freq=True
        )
        (got * Tensor(grad)).sum().backward()
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="embedding_bag: max mode does not support scaling the gradient"):
        Tensor(flat).embedding_bag(Tensor(weight), Tensor([0]), mode="max", scale_grad_by_freq=True)


def _fused_lookups(t: Tensor) -> int:
    # kernels in which a lookup's one-hot sum over the table sits inside another reduce (a bag's): compared, not loaded
    from uopkit.engine.realize import create_schedule, kernelize_tensors
    from uopkit.uop.ops import Ops, is_one_hot_reduce

    fused = 0
    for item in create_schedule(kernelize_tensors([t])):
        reduces = [u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS]
        outer = [r for r in reduces if any(is_one_hot_reduce(u) for u in r.src[0].toposort() if u in reduces)]
        fused += bool(outer)
    return fused


def _scatter_kernels(t: Tensor) -> int:
    from uopkit.codegen.scatter import lowers_as_scatter
    from uopkit.engine.realize import create_schedule, kernelize_tensors
    from uopkit.uop.ops import Ops

    return sum(lowers_as_scatter(i.ast) for i in create_schedule(kernelize_tensors([t])) if i.ast.op is Ops.SINK)


def test_embedding_bag_2d_looks_up_before_the_bag_reduce():
    # B bags of L rows of a large table: the lookup stored, then reduced per bag (fused into the bag's reduce it
    # compared every index with every table row, 512 x 8 bags of 10000 rows: 2.6 s); values and gradients as torch's
    weight = _randn(300, 5)
    bags = RNG.integers(0, 300, (6, 4))
    bags[1, 2] = bags[3, 0] = 7
    bags[5] = 7
    for mode in ("sum", "mean", "max"):
        assert _fused_lookups(Tensor(bags).embedding_bag(Tensor(weight), mode=mode)) == 0
        # the table's gradient: the rows' gradient added into it by a scatter (over (B, L) at once, or fused with a
        # max's, a one-hot mask of every lookup against every row: 0.2 s, 4.5 s at that size)
        table = Tensor(weight, requires_grad=True)
        Tensor(bags).embedding_bag(table, mode=mode).sum().backward()
        assert table.grad is not None and _scatter_kernels(table.grad) == 1
        for padding_idx in (None, 7):
            check(
                lambda w, i, m=mode, pi=padding_idx: i.embedding_bag(w, mode=m, padding_idx=pi),
                lambda w, i, m=mode, pi=padding_idx: F.embedding_bag(i, w, mode=m, padding_idx=pi),
                weight,
                bags,
            )
    psw = _randn(6, 4)
    check(
        lambda p, w, i: i.embedding_bag(w, mode="sum", per_sample_weights=p, padding_idx=7),
        lambda p, w, i: F.embedding_bag(i, w, mode="sum", per_sample_weights=p, padding_idx=7),
        psw,
        weight,
        bags,
    )


def test_embedding_bag_offsets_read_no_bounds_back(monkeypatch):
    # on the CPU each position's bag is computed in range and scattered into it: no index computed on the device has
    # its bounds read back (a sync each; the lookup's own indices, stored data, are checked on the host), in each mode
    import uopkit.tensor.indexing as indexing

    read_back: list[tuple[int, ...]] = []
    checked = indexing._check_values_in

    def recording(idx: Tensor, *args: Any, **kwargs: Any) -> None:
        if not idx._is_plain_buffer():
            read_back.append(idx.shape)
        checked(idx, *args, **kwargs)

    monkeypatch.setattr(indexing, "_check_values_in", recording)
    weight = _randn(50, 4)
    flat = RNG.integers(0, 50, 23)
    flat[[3, 9, 10]] = 5
    # (an include_last_offset end short of the input: torch's float32 mean divides by the count up to the input's end)
    offsets = np.array([0, 4, 4, 11, 23], np.int64)
    for mode in ("sum", "mean", "max"):
        for padding_idx, last in ((None, False), (5, False), (None, True)):
            check(
                lambda w, i, o, m=mode, pi=padding_idx, e=last: i.embedding_bag(
                    w, o, mode=m, padding_idx=pi, include_last_offset=e
                ),
                lambda w, i, o, m=mode, pi=padding_idx, e=last: F.embedding_bag(
                    i, w, o, mode=m, padding_idx=pi, include_last_offset=e
                ),
                weight,
                flat,
                # (torch's max gradient of an empty bag reads an unset index: none there)
                offsets if mode != "max" else np.array([0, 4, 5, 11, 23], np.int64),
            )
    assert read_back == []


def test_bilinear_and_distances():
    x1, x2, w, b = _randn(2, 3, 4), _randn(2, 3, 5), _randn(6, 4, 5), _randn(6)
    check(lambda a, c, d, e: a.bilinear(c, d, e), F.bilinear, x1, x2, w, b)
    f64 = [t.astype(np.float64) for t in (x1[0, 0], x2[0, 0], w)]
    check(lambda a, c, d: a.bilinear(c, d), F.bilinear, *f64)
    a, c = _randn(4, 5), _randn(5)
    for p, keepdim in [(2.0, False), (1.0, True), (3.0, False), (float("inf"), False)]:
        check(
            lambda u, v, p=p, k=keepdim: u.pairwise_distance(v, p, keepdim=k),
            lambda u, v, p=p, k=keepdim: F.pairwise_distance(u, v, p, keepdim=k),
            a,
            c,
        )
    check(lambda u, v: v.pairwise_distance(u, eps=0.1), lambda u, v: F.pairwise_distance(v, u, eps=0.1), a, c)
    rows = _randn(5, 3)
    rows[3] = rows[1]
    for p in (2.0, 1.0, 0.5):
        check(lambda u, p=p: u.pdist(p), lambda u, p=p: F.pdist(u, p), rows)
    check(lambda u: u.pdist(), F.pdist, rows.astype(np.float64))
    assert Tensor.ones(1, 3).pdist().shape == (0,)


def test_group_norm():
    x = _randn(2, 6, 3, 2)
    check(lambda t, w, b: t.group_norm(3, w, b), lambda t, w, b: F.group_norm(t, 3, w, b), x, _randn(6), _randn(6))
    check(lambda t: t.group_norm(2, eps=0.1), lambda t: F.group_norm(t, 2, eps=0.1), _randn(3, 4, dtype=np.float64))
    check(lambda t, w: t.group_norm(1, w), lambda t, w: F.group_norm(t, 1, w), x[:, :, 0], _randn(6))
    half = Tensor(x).half().group_norm(3)
    assert half.dtype == dtypes.float16
    np.testing.assert_allclose(half.float().numpy(), F.group_norm(torch.tensor(x), 3).numpy(), atol=2e-3)


def test_channel_dropouts():
    Tensor.manual_seed(3)
    x = Tensor.ones(40, 50, 2, 3)
    out = x.dropout2d(0.3).numpy()
    # whole channels: each (sample, channel) either all 0 or all 1 / (1 - p)
    per_channel = out.reshape(40, 50, -1)
    assert np.all(per_channel == per_channel[..., :1])
    assert set(np.unique(out).tolist()) <= {0.0, np.float32(1 / 0.7)}
    assert abs((per_channel[..., 0] == 0).mean() - 0.3) < 0.05
    one = Tensor.ones(30, 40, 5).dropout1d(0.5).numpy()
    assert np.all(one == one[..., :1]) and abs((one[..., 0] == 0).mean() - 0.5) < 0.05
    unbatched = Tensor.ones(200, 2, 2, 2).dropout3d(0.5).numpy().reshape(200, -1)
    assert np.all(unbatched == unbatched[:, :1]) and 40 < (unbatched[:, 0] == 0).sum() < 160
    assert Tensor.ones(3, 4).dropout1d(0.5).shape == (3, 4)
    t = Tensor([[1.0, 2.0]])
    assert t.dropout1d(0.5, training=False) is t and t.dropout1d(0.0) is t
    # p = 1: times zero, as torch (an inf gives NaN)
    assert np.isnan(Tensor([[[np.inf]]]).dropout1d(1.0).numpy()).all()
    # the gradient is the mask, scaled
    g = Tensor.ones(20, 30, 2, requires_grad=True)
    y = g.dropout1d(0.25)
    y.sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), y.numpy())
    # in place: the tensor itself changes
    w = Tensor.ones(10, 10, 2).contiguous().realize()
    assert w.dropout1d(0.5, inplace=True) is w and (w.numpy() == 0).any()
    with pytest.warns(UserWarning, match="3-D input"):
        Tensor.ones(2, 3, 4).dropout2d(0.5, training=False)


def test_alpha_dropouts():
    Tensor.manual_seed(5)
    x = Tensor.randn(200, 100)
    x_np = x.numpy()
    for p in (0.2, 0.5):
        y = x.alpha_dropout(p, training=True).numpy()
        # a zero-mean, unit-variance input keeps its mean and variance
        assert abs(y.mean()) < 0.05 and abs(y.std() - 1) < 0.05
        # dropped elements are one value; the kept ones an affine map of x
        a = 1 / np.sqrt((1.7580993408473766**2 * p + 1) * (1 - p))
        kept = np.isclose(y, a * x_np + 1.7580993408473766 * a * p, atol=1e-5)
        assert np.allclose(y[~kept], 1.7580993408473766 * a * (p - 1)) and abs((~kept).mean() - p) < 0.02
    assert x.alpha_dropout(0.5) is x
    assert Tensor([1.0]).alpha_dropout(1.0, True).tolist() == [0.0]
    f = Tensor.ones(100, 30, 4).feature_alpha_dropout(0.5, True).numpy()
    assert np.all(f == f[..., :1]) and len(np.unique(f)) == 2


def test_gumbel_softmax():
    Tensor.manual_seed(7)
    logits = Tensor(np.log(np.array([[0.1, 0.2, 0.7]] * 4000, np.float32)), requires_grad=True)
    soft = logits.gumbel_softmax(tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).numpy(), 1, rtol=1e-5)
    # the argmax of logits + gumbel noise is a draw from softmax(logits)
    hard = logits.gumbel_softmax(hard=True, dim=1)
    h = hard.numpy()
    assert set(np.unique(h).tolist()) == {0.0, 1.0} and np.all(h.sum(1) == 1)
    np.testing.assert_allclose(h.mean(0), [0.1, 0.2, 0.7], atol=0.03)
    # straight through: the gradient is the soft sample's (softmax's: rows of a one-hot upstream sum to zero)
    (hard * Tensor([[1.0, 0.0, 0.0]])).sum().backward()
    assert logits.grad is not None and np.allclose(logits.grad.numpy().sum(1), 0, atol=1e-5)
    assert np.abs(logits.grad.numpy()).sum() > 0
    assert Tensor.zeros(2, 3, 4).gumbel_softmax(dim=1).shape == (2, 3, 4)


def test_errors():
    x = Tensor.ones(2, 12, 9)
    with pytest.raises(RuntimeError, match="sliding blocks"):
        Tensor.ones(2, 12, 8).fold((4, 4), 2)
    with pytest.raises(RuntimeError, match="divisible"):
        Tensor.ones(2, 10, 9).fold((4, 4), 2)
    with pytest.raises(RuntimeError, match="2-D or 3-D"):
        Tensor.ones(1, 2, 12, 9).fold((4, 4), 2)
    with pytest.raises(RuntimeError, match="positive"):
        x.fold((4, 4), 2, stride=0)
    with pytest.raises(NotImplementedError):
        Tensor.ones(2, 12, 9, dtype=dtypes.int32).fold((4, 4), 2)
    with pytest.raises(RuntimeError, match="2-D or 3-D"):
        Tensor.ones(1, 3, 8, 8).lp_pool1d(2, 3)
    with pytest.raises(RuntimeError, match="3-D or 4-D"):
        Tensor.ones(1, 1, 3, 8, 8).lp_pool2d(2, 3)
    with pytest.raises(ValueError, match="3-D or higher"):
        Tensor.ones(2, 6).local_response_norm(3)
    with pytest.raises(RuntimeError, match="divisible"):
        Tensor.ones(2, 6, 3).channel_shuffle(4)
    with pytest.raises(RuntimeError, match="more than 2 dims"):
        Tensor.ones(2, 6).channel_shuffle(3)
    with pytest.raises(RuntimeError, match="positive"):
        Tensor.ones(2, 6, 1).channel_shuffle(0)
    theta = Tensor.ones(2, 2, 3)
    with pytest.raises(ValueError, match="floating point"):
        Tensor.ones(2, 2, 3, dtype=dtypes.int32).affine_grid((2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"\(N, 2, 3\)"):
        Tensor.ones(2, 3, 3).affine_grid((2, 3, 4, 5))
    with pytest.raises(NotImplementedError):
        theta.affine_grid((2, 3, 4))
    with pytest.raises(ValueError, match="positive"):
        theta.affine_grid((2, 3, 0, 5))
    with pytest.raises(RuntimeError, match="batch"):
        theta.affine_grid((3, 3, 4, 5))
    img, grid = Tensor.ones(2, 3, 4, 5), Tensor.zeros(2, 6, 7, 2)
    with pytest.raises(ValueError, match="mode"):
        img.grid_sample(grid, mode="area")
    with pytest.raises(ValueError, match="padding_mode"):
        img.grid_sample(grid, padding_mode="circular")
    with pytest.raises(RuntimeError, match="batch"):
        img.grid_sample(grid[:1])
    with pytest.raises(RuntimeError, match=r"\(N, \.\.\., 2\)"):
        img.grid_sample(grid[..., :1])
    with pytest.raises(RuntimeError, match="bicubic"):
        Tensor.ones(1, 1, 2, 2, 2).grid_sample(Tensor.zeros(1, 1, 1, 1, 3), mode="bicubic")
    with pytest.raises(RuntimeError, match="empty"):
        Tensor.ones(2, 3, 0, 5).grid_sample(grid)
    with pytest.raises(TypeError):
        img.grid_sample(grid.double())
    w, idx = Tensor.ones(10, 3), Tensor([1, 2, 3])
    with pytest.raises(ValueError, match="offsets"):
        Tensor([[1, 2]]).embedding_bag(w, Tensor([0]))
    with pytest.raises(ValueError, match="offsets"):
        idx.embedding_bag(w)
    with pytest.raises(ValueError, match="start at 0"):
        idx.embedding_bag(w, Tensor([1, 2]))
    with pytest.raises(ValueError, match="mode"):
        idx.embedding_bag(w, Tensor([0]), mode="min")
    with pytest.raises(NotImplementedError, match="sum"):
        idx.embedding_bag(w, Tensor([0]), per_sample_weights=Tensor.ones(3))
    with pytest.raises(ValueError, match="shape"):
        idx.embedding_bag(w, Tensor([0]), mode="sum", per_sample_weights=Tensor.ones(2))
    for unsupported in ({"max_norm": 1.0}, {"sparse": True}):
        with pytest.raises(NotImplementedError, match="aren't supported"):
            idx.embedding_bag(w, Tensor([0]), **unsupported)
    with pytest.raises(RuntimeError, match="padding_idx"):
        idx.embedding_bag(w, Tensor([0]), padding_idx=20)
    with pytest.raises(IndexError):
        Tensor([1, 30]).embedding_bag(w, Tensor([0]))
    with pytest.raises(TypeError):
        Tensor([1.0]).embedding_bag(w, Tensor([0]))
    with pytest.raises(RuntimeError, match="leading dims"):
        Tensor.ones(3, 4).bilinear(Tensor.ones(2, 5), Tensor.ones(6, 4, 5))
    with pytest.raises(RuntimeError, match="don't fit"):
        Tensor.ones(3, 4).bilinear(Tensor.ones(3, 5), Tensor.ones(6, 4, 4))
    with pytest.raises(RuntimeError, match="bias"):
        Tensor.ones(3, 4).bilinear(Tensor.ones(3, 5), Tensor.ones(6, 4, 5), Tensor.ones(5))
    with pytest.raises(RuntimeError, match="2-D"):
        Tensor.ones(4).pdist()
    with pytest.raises(RuntimeError, match="non-negative"):
        Tensor.ones(4, 3).pdist(-1)
    with pytest.raises(RuntimeError, match="divisible"):
        Tensor.ones(2, 6, 3).group_norm(4)
    with pytest.raises(RuntimeError, match="at least 2"):
        Tensor.ones(6).group_norm(3)
    with pytest.raises(RuntimeError, match="weight"):
        Tensor.ones(2, 6, 3).group_norm(3, Tensor.ones(5))
    with pytest.raises(ValueError, match=r"group_norm: each group needs at least 2 values .* \(1, 3\)"):
        Tensor.ones(1, 3).group_norm(3)
    for drop in (Tensor.dropout1d, Tensor.dropout2d, Tensor.alpha_dropout, Tensor.feature_alpha_dropout):
        with pytest.raises(ValueError, match=r"dropout: p is a probability, in \[0, 1\]"):
            drop(Tensor.ones(2, 3, 4), 1.5)
    with pytest.raises(RuntimeError, match="2-D or 3-D"):
        Tensor.ones(2, 3, 4, 5).dropout1d()
    with pytest.raises(RuntimeError):
        Tensor([1, 2]).gumbel_softmax()


@pytest.mark.parametrize("shape", [(6, 4), (2, 3, 4)])
def test_a_lookup_by_a_many_axis_index_scatters_its_gradient(shape):
    # a (B, T) embedding's or w[idx]'s backward: a sum over one flat axis, written by the scatter kernel (summed over
    # the index's axes it compared every index with every table row: 17 ms against 0.7 ms for a (512, 8) index)
    weight = _randn(300, 5)
    idx = RNG.integers(0, 300, shape)
    idx.reshape(-1)[:3] = 7
    for lookup in (lambda w, i: i.embedding(w), lambda w, i: w[i]):
        table = Tensor(weight, requires_grad=True)
        (lookup(table, Tensor(idx)) * 2).sum().backward()
        assert table.grad is not None and _scatter_kernels(table.grad) == 1
    check(lambda w, i: i.embedding(w) * 2, lambda w, i: F.embedding(i, w) * 2, weight, idx)
    check(lambda w, i: w[i].exp(), lambda w, i: w[i].exp(), weight, idx)

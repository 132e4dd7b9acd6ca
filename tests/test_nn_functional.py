"""uopkit.nn.functional against torch.nn.functional: each case is one call written once and run with both modules
(`F` is ours or torch's), so the names, positional order and keywords are torch's; values, and for most cases the
gradients of a random weighting of the result, compared on small random inputs. Then the in-place forms, the dropouts'
training flag, batch_norm's running statistics, the errors, and the coverage of torch's public functions."""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import uopkit.nn.functional as UF
from uopkit import Tensor, dtypes
from uopkit.tensor import ArgumentError, ShapeError

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(28)


def _randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _ints(high: int, *shape: int, low: int = 0) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(np.int64)


def _pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.1, 0.9, shape).astype(np.float32)


def _both(arrays: tuple[np.ndarray, ...], grad: bool | int) -> tuple[list[Tensor], list[Any]]:
    # float arrays require gradients (with `grad` True, or the first `grad` of them: torch refuses a gradient to some
    # arguments, a loss' class weights); integer ones go in as int32 here and int64 for torch
    ours, theirs = [], []
    for i, a in enumerate(arrays):
        wanted = a.dtype.kind == "f" and (grad is True or (grad is not False and i < grad))
        ours.append(Tensor(a, requires_grad=wanted) if a.dtype.kind == "f" else Tensor(a.astype(np.int32)))
        theirs.append(torch.tensor(a, requires_grad=wanted))
    return ours, theirs


def check(call: Callable[..., Any], *arrays: np.ndarray, grad: bool | int = True, atol: float = 1e-5) -> None:
    """call(F, *tensors) with our F and torch's on the same arrays: the value (each of a tuple's), and with `grad`
    the gradient of a random weighting of the (first) result to every float array (or the first `grad` arrays)."""
    ours, theirs = _both(arrays, grad)
    out, ref = call(UF, *ours), call(TF, *theirs)
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs, strict=True):
        assert isinstance(o, Tensor)
        assert o.shape == tuple(r.shape)
        np.testing.assert_allclose(o.numpy(), r.detach().numpy(), atol=atol, rtol=1e-4)
    if not grad or not refs[0].requires_grad or not refs[0].numel():
        return
    upstream = RNG.standard_normal(tuple(refs[0].shape)).astype(np.float32)
    (outs[0] * Tensor(upstream)).sum().backward()
    (refs[0] * torch.tensor(upstream)).sum().backward()
    for i, (x, t) in enumerate(zip(ours, theirs, strict=True)):
        if t.requires_grad:
            expected = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
            got = x.grad.numpy() if x.grad is not None else np.zeros(t.shape)
            np.testing.assert_allclose(got, expected, atol=atol, rtol=1e-4, err_msg=f"gradient of operand {i}")


def case(name: str, call: Callable[..., Any], *arrays: np.ndarray, grad: bool | int = True, atol: float = 1e-5) -> Any:
    return pytest.param(call, arrays, grad, atol, id=name)


# ---------------------------------------------------------------------------------------------------------------------
# values and gradients, one call for both modules

CONVOLUTIONS = [
    case("conv1d", lambda F, x, w, b: F.conv1d(x, w, b, 2, 1, 1, 2), _randn(2, 4, 9), _randn(6, 2, 3), _randn(6)),
    case(
        "conv1d_same",
        lambda F, x, w: F.conv1d(x, w, padding="same", dilation=2, groups=2),
        _randn(2, 4, 9),
        _randn(4, 2, 3),
    ),
    case(
        "conv2d",
        lambda F, x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
        _randn(2, 3, 7, 6),
        _randn(4, 3, 3, 2),
        _randn(4),
    ),
    case(
        "conv2d_unbatched_valid", lambda F, x, w: F.conv2d(x, w, padding="valid"), _randn(3, 5, 5), _randn(2, 3, 2, 2)
    ),
    case(
        "conv3d",
        lambda F, x, w, b: F.conv3d(x, w, bias=b, padding=1),
        _randn(1, 2, 4, 3, 3),
        _randn(3, 2, 2, 3, 2),
        _randn(3),
    ),
    case(
        "conv_transpose1d",
        lambda F, x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
        _randn(2, 4, 5),
        _randn(4, 3, 3),
        _randn(3),
    ),
    case(
        "conv_transpose2d",
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 0, 2, 2),
        _randn(1, 4, 3, 4),
        _randn(4, 2, 3, 3),
        _randn(4),
    ),
    case(
        "conv_transpose3d",
        lambda F, x, w: F.conv_transpose3d(x, w, stride=2),
        _randn(1, 2, 2, 3, 2),
        _randn(2, 3, 2, 2, 2),
    ),
    case("conv_tbc", lambda F, x, w, b: F.conv_tbc(x, w, b, 1), _randn(7, 2, 3), _randn(3, 3, 4), _randn(4)),
    case(
        "unfold",
        lambda F, x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
        _randn(2, 3, 6, 7),
    ),
    case("unfold_unbatched", lambda F, x: F.unfold(x, 2), _randn(2, 3, 4)),
    case("fold", lambda F, x: F.fold(x, (4, 5), kernel_size=2), _randn(2, 12, 12)),
]

POOLS = [
    case(
        "avg_pool1d",
        lambda F, x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        _randn(2, 3, 9),
    ),
    case(
        "avg_pool2d",
        lambda F, x: F.avg_pool2d(x, (3, 2), stride=2, padding=1, divisor_override=3),
        _randn(2, 3, 7, 8),
    ),
    case("avg_pool3d", lambda F, x: F.avg_pool3d(x, 2), _randn(1, 2, 4, 6, 4)),
    case("max_pool1d", lambda F, x: F.max_pool1d(x, 3, stride=2, padding=1, ceil_mode=True), _randn(2, 3, 10)),
    case("max_pool2d", lambda F, x: F.max_pool2d(x, 3, 2, 1, 2), _randn(2, 2, 9, 8)),
    case("max_pool2d_unbatched", lambda F, x: F.max_pool2d(x, kernel_size=(2, 3)), _randn(3, 6, 6)),
    case("max_pool3d", lambda F, x: F.max_pool3d(x, 2, stride=1), _randn(1, 2, 3, 4, 3)),
    case("lp_pool1d", lambda F, x: F.lp_pool1d(x, 2, 3, stride=2), _randn(2, 3, 9)),
    case("lp_pool2d", lambda F, x: F.lp_pool2d(x, norm_type=1.5, kernel_size=2), _pos(1, 2, 4, 6)),
    case("lp_pool3d", lambda F, x: F.lp_pool3d(x, 2, (1, 2, 2), ceil_mode=True), _randn(1, 2, 3, 5, 4)),
    case("adaptive_avg_pool1d", lambda F, x: F.adaptive_avg_pool1d(x, 4), _randn(2, 3, 9)),
    case("adaptive_avg_pool2d", lambda F, x: F.adaptive_avg_pool2d(x, (None, 3)), _randn(2, 3, 5, 7)),
    case("adaptive_avg_pool3d", lambda F, x: F.adaptive_avg_pool3d(x, output_size=2), _randn(1, 2, 3, 5, 4)),
    case("adaptive_max_pool1d", lambda F, x: F.adaptive_max_pool1d(x, 4), _randn(2, 3, 9)),
    case("adaptive_max_pool2d", lambda F, x: F.adaptive_max_pool2d(x, (2, 3)), _randn(2, 3, 5, 7)),
    case("adaptive_max_pool3d", lambda F, x: F.adaptive_max_pool3d(x, 2), _randn(1, 2, 3, 5, 4)),
]

ACTIVATIONS = [
    case("relu", lambda F, x: F.relu(x), _randn(3, 4)),
    case("relu6", lambda F, x: F.relu6(x * 4), _randn(3, 4)),
    case("elu", lambda F, x: F.elu(x, alpha=0.5), _randn(3, 4)),
    case("selu", lambda F, x: F.selu(x), _randn(3, 4)),
    case("celu", lambda F, x: F.celu(x, 0.7), _randn(3, 4)),
    case("leaky_relu", lambda F, x: F.leaky_relu(x, negative_slope=0.2), _randn(3, 4)),
    case("hardtanh", lambda F, x: F.hardtanh(x, min_val=-0.5, max_val=0.7), _randn(3, 4)),
    case("rrelu_eval", lambda F, x: F.rrelu(x, 0.1, 0.3), _randn(3, 4)),
    case("threshold", lambda F, x: F.threshold(x, 0.1, 2.0), _randn(3, 4)),
    case("prelu", lambda F, x, w: F.prelu(x, w), _randn(2, 3, 4), _randn(3)),
    case("glu", lambda F, x: F.glu(x, dim=1), _randn(3, 4)),
    case("gelu", lambda F, x: F.gelu(x), _randn(3, 4)),
    case("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh"), _randn(3, 4)),
    case("silu", lambda F, x: F.silu(x), _randn(3, 4)),
    case("mish", lambda F, x: F.mish(x), _randn(3, 4)),
    case("hardswish", lambda F, x: F.hardswish(x * 3), _randn(3, 4)),
    case("hardsigmoid", lambda F, x: F.hardsigmoid(x * 3), _randn(3, 4)),
    case("hardshrink", lambda F, x: F.hardshrink(x, lambd=0.3), _randn(3, 4)),
    case("softshrink", lambda F, x: F.softshrink(x, 0.3), _randn(3, 4)),
    case("tanhshrink", lambda F, x: F.tanhshrink(x), _randn(3, 4)),
    case("softsign", lambda F, x: F.softsign(x), _randn(3, 4)),
    case("softplus", lambda F, x: F.softplus(x, beta=2, threshold=1), _randn(3, 4)),
    case("logsigmoid", lambda F, x: F.logsigmoid(x), _randn(3, 4)),
    case("sigmoid", lambda F, x: F.sigmoid(x), _randn(3, 4)),
    case("tanh", lambda F, x: F.tanh(x), _randn(3, 4)),
    case("softmax", lambda F, x: F.softmax(x, dim=1), _randn(2, 3, 4)),
    case("softmin", lambda F, x: F.softmin(x, -1), _randn(2, 3, 4)),
    case("log_softmax", lambda F, x: F.log_softmax(x, dim=0), _randn(2, 3, 4)),
]

NORMALIZATIONS = [
    case(
        "batch_norm_eval",
        lambda F, x, w, b, m, v: F.batch_norm(x, m, v, w, b, eps=1e-3),
        _randn(4, 3, 5),
        _randn(3),
        _randn(3),
        _randn(3),
        _pos(3),
        grad=3,
    ),
    case(
        "batch_norm_batch_stats",
        lambda F, x, w, b: F.batch_norm(x, None, None, weight=w, bias=b, training=True),
        _randn(4, 3, 2, 2),
        _randn(3),
        _randn(3),
    ),
    case(
        "instance_norm", lambda F, x, w, b: F.instance_norm(x, weight=w, bias=b), _randn(2, 3, 5), _randn(3), _randn(3)
    ),
    case(
        "layer_norm",
        lambda F, x, w, b: F.layer_norm(x, (4, 5), w, b, eps=1e-3),
        _randn(2, 3, 4, 5),
        _randn(4, 5),
        _randn(4, 5),
    ),
    case("layer_norm_int_shape", lambda F, x: F.layer_norm(x, [5]), _randn(3, 5)),
    case("group_norm", lambda F, x, w, b: F.group_norm(x, 2, w, b), _randn(2, 4, 3, 2), _randn(4), _randn(4)),
    case("rms_norm", lambda F, x, w: F.rms_norm(x, [5], w, eps=1e-4), _randn(3, 5), _randn(5)),
    case("rms_norm_default_eps", lambda F, x: F.rms_norm(x, (2, 5)), _randn(3, 2, 5)),
    case("local_response_norm", lambda F, x: F.local_response_norm(x, 3, alpha=1e-2, k=2.0), _randn(2, 5, 3)),
    case("normalize", lambda F, x: F.normalize(x, p=1, dim=-1), _randn(3, 4)),
]

LINEAR_AND_SPARSE = [
    case("linear", lambda F, x, w, b: F.linear(x, w, b), _randn(2, 3, 4), _randn(5, 4), _randn(5)),
    case("linear_no_bias", lambda F, x, w: F.linear(x, weight=w), _randn(3, 4), _randn(5, 4)),
    case(
        "bilinear",
        lambda F, a, c, w, b: F.bilinear(a, c, w, b),
        _randn(3, 2),
        _randn(3, 4),
        _randn(5, 2, 4),
        _randn(5),
    ),
    case("embedding", lambda F, i, w: F.embedding(i, w), _ints(6, 2, 3), _randn(6, 4)),
    case("embedding_padding_idx", lambda F, i, w: F.embedding(i, w, padding_idx=2), _ints(4, 3, 4), _randn(4, 3)),
    case(
        "embedding_scale_grad_by_freq",
        lambda F, i, w: F.embedding(i, w, scale_grad_by_freq=True),
        np.array([[0, 1, 1], [3, 1, 0]]),
        _randn(5, 3),
    ),
    case(
        "embedding_bag",
        lambda F, i, w, o: F.embedding_bag(i, w, o, mode="sum"),
        _ints(6, 7),
        _randn(6, 3),
        np.array([0, 2, 5]),
    ),
    case("one_hot", lambda F, i: F.one_hot(i, num_classes=5), _ints(5, 2, 3), grad=False),
    case(
        "scaled_dot_product_attention",
        lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        _randn(2, 3, 4),
        _randn(2, 5, 4),
        _randn(2, 5, 6),
        _randn(3, 5),
    ),
    case(
        "scaled_dot_product_attention_causal",
        lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        _randn(1, 2, 4, 3),
        _randn(1, 2, 4, 3),
        _randn(1, 2, 4, 3),
    ),
    case("cosine_similarity", lambda F, a, b: F.cosine_similarity(a, b, dim=-1), _randn(3, 4), _randn(1, 4)),
    case(
        "pairwise_distance", lambda F, a, b: F.pairwise_distance(a, b, p=1.5, keepdim=True), _randn(3, 4), _randn(3, 4)
    ),
    case("pdist", lambda F, x: F.pdist(x, p=3), _randn(4, 3)),
]

LOSSES = [
    case(
        "cross_entropy",
        lambda F, x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=1, label_smoothing=0.1),
        _randn(6, 4),
        _ints(4, 6),
        _pos(4),
        grad=1,
    ),
    case(
        "cross_entropy_probabilities",
        lambda F, x, t: F.cross_entropy(x, t, reduction="sum"),
        _randn(3, 4, 2),
        _pos(3, 4, 2),
    ),
    case(
        "linear_cross_entropy",
        lambda F, x, w, t, b: F.linear_cross_entropy(x, w, t, linear_bias=b, label_smoothing=0.2),
        _randn(5, 3),
        _randn(4, 3),
        _ints(4, 5),
        _randn(4),
    ),
    case(
        "nll_loss",
        lambda F, x, t, w: F.nll_loss(x, t, w, reduction="mean"),
        _randn(5, 3, 2),
        _ints(3, 5, 2),
        _pos(3),
        grad=1,
    ),
    case(
        "binary_cross_entropy",
        lambda F, p, y, w: F.binary_cross_entropy(p, y, weight=w),
        _pos(3, 4),
        _pos(3, 4),
        _pos(4),
        grad=2,
    ),
    case(
        "binary_cross_entropy_with_logits",
        lambda F, x, y, pw: F.binary_cross_entropy_with_logits(x, y, reduction="none", pos_weight=pw),
        _randn(3, 4),
        _pos(3, 4),
        _pos(4),
        grad=2,
    ),
    case(
        "kl_div",
        lambda F, x, y: F.kl_div(x, y, reduction="batchmean", log_target=True),
        _randn(3, 4),
        _randn(3, 4),
    ),
    case("mse_loss", lambda F, x, y: F.mse_loss(x, y), _randn(3, 4), _randn(3, 4)),
    case("l1_loss", lambda F, x, y: F.l1_loss(x, y, reduction="sum"), _randn(3, 4), _randn(3, 4)),
    case("smooth_l1_loss", lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.5), _randn(3, 4), _randn(3, 4)),
    case("huber_loss", lambda F, x, y: F.huber_loss(x, y, delta=0.5), _randn(3, 4), _randn(3, 4)),
    case(
        "poisson_nll_loss",
        lambda F, x, y: F.poisson_nll_loss(x, y, log_input=False, full=True),
        _pos(3, 4),
        _pos(3, 4) * 3,
    ),
    case(
        "gaussian_nll_loss",
        lambda F, x, y, v: F.gaussian_nll_loss(x, y, v, full=True),
        _randn(3, 4),
        _randn(3, 4),
        _pos(3, 1),
    ),
    case(
        "margin_ranking_loss",
        lambda F, a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3),
        _randn(5),
        _randn(5),
        np.sign(_randn(5)),
    ),
    case(
        "hinge_embedding_loss",
        lambda F, x, y: F.hinge_embedding_loss(x, y, margin=0.5),
        _randn(3, 4),
        np.sign(_randn(3, 4)),
    ),
    case("soft_margin_loss", lambda F, x, y: F.soft_margin_loss(x, y), _randn(3, 4), np.sign(_randn(3, 4)), grad=1),
    case(
        "multilabel_soft_margin_loss",
        lambda F, x, y, w: F.multilabel_soft_margin_loss(x, y, weight=w),
        _randn(3, 4),
        (_randn(3, 4) > 0).astype(np.float32),
        _pos(4),
    ),
    case(
        "multilabel_margin_loss",
        lambda F, x, y: F.multilabel_margin_loss(x, y),
        _randn(2, 4),
        np.array([[3, 0, -1, 1], [1, 2, 3, -1]]),
    ),
    case(
        "multi_margin_loss",
        lambda F, x, y, w: F.multi_margin_loss(x, y, p=2, margin=0.5, weight=w),
        _randn(5, 4),
        _ints(4, 5),
        _pos(4),
        grad=1,
    ),
    case(
        "cosine_embedding_loss",
        lambda F, a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.2),
        _randn(4, 3),
        _randn(4, 3),
        np.sign(_randn(4)),
    ),
    case(
        "triplet_margin_loss",
        lambda F, a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True),
        _randn(4, 3),
        _randn(4, 3),
        _randn(4, 3),
    ),
    case(
        "triplet_margin_with_distance_loss",
        lambda F, a, p, n: F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda u, v: F.pairwise_distance(u, v, p=1), margin=0.5
        ),
        _randn(4, 3),
        _randn(4, 3),
        _randn(4, 3),
    ),
    case(
        "ctc_loss",
        lambda F, lp, t, il, tl: F.ctc_loss(lp.log_softmax(2), t, il, tl, blank=0, zero_infinity=True),
        _randn(6, 2, 4),
        np.array([[1, 2, 2], [3, 1, 0]]),
        np.array([6, 5]),
        np.array([3, 2]),
    ),
]

SHAPES = [
    case("pad_reflect", lambda F, x: F.pad(x, (1, 2, 0, 1), mode="reflect"), _randn(2, 3, 4, 5)),
    case("pad_constant", lambda F, x: F.pad(x, [1, 1, 2, 0], value=2.5), _randn(2, 3, 4)),
    case("pad_replicate", lambda F, x: F.pad(x, (2, 1), "replicate"), _randn(2, 3, 4)),
    case("pad_circular", lambda F, x: F.pad(x, (1, 1, 1, 1), mode="circular"), _randn(1, 2, 3, 4)),
    case("interpolate_nearest", lambda F, x: F.interpolate(x, size=(5, 7)), _randn(1, 2, 3, 4)),
    case(
        "interpolate_bilinear",
        lambda F, x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False),
        _randn(1, 2, 3, 4),
    ),
    case(
        "interpolate_bicubic",
        lambda F, x: F.interpolate(x, (5, 6), None, "bicubic", True),
        _randn(1, 2, 3, 4),
        atol=1e-4,
    ),
    case("interpolate_linear", lambda F, x: F.interpolate(x, 7, mode="linear"), _randn(2, 3, 4)),
    case(
        "interpolate_trilinear", lambda F, x: F.interpolate(x, scale_factor=2, mode="trilinear"), _randn(1, 1, 2, 3, 2)
    ),
    case("interpolate_area", lambda F, x: F.interpolate(x, size=(2, 3), mode="area"), _randn(1, 2, 5, 7)),
    case("upsample", lambda F, x: F.upsample(x, scale_factor=2, mode="nearest"), _randn(1, 2, 3)),
    case("upsample_nearest", lambda F, x: F.upsample_nearest(x, size=(4, 6)), _randn(1, 2, 2, 3)),
    case("upsample_bilinear", lambda F, x: F.upsample_bilinear(x, scale_factor=2), _randn(1, 2, 2, 3)),
    case("pixel_shuffle", lambda F, x: F.pixel_shuffle(x, 2), _randn(1, 8, 2, 3)),
    case("pixel_unshuffle", lambda F, x: F.pixel_unshuffle(x, downscale_factor=2), _randn(1, 2, 4, 6)),
    case("channel_shuffle", lambda F, x: F.channel_shuffle(x, 2), _randn(1, 6, 2, 2)),
    case("native_channel_shuffle", lambda F, x: F.native_channel_shuffle(x, 3), _randn(1, 6, 2), grad=False),
    case(
        "grid_sample",
        lambda F, x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
        _randn(1, 2, 4, 5),
        RNG.uniform(-1.2, 1.2, (1, 3, 2, 2)).astype(np.float32),
    ),
    case("affine_grid", lambda F, t: F.affine_grid(t, [2, 1, 3, 4], align_corners=False), _randn(2, 2, 3)),
]

ALL_CASES = CONVOLUTIONS + POOLS + ACTIVATIONS + NORMALIZATIONS + LINEAR_AND_SPARSE + LOSSES + SHAPES


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")
@pytest.mark.parametrize("call, arrays, grad, atol", ALL_CASES)
def test_matches_torch(call, arrays, grad, atol):
    check(call, *arrays, grad=grad, atol=atol)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_scaled_dot_product_attention_applies_a_mask_and_is_causal_both(kind):
    # torch (2.13, CPU) applies both: a query attends to keys the mask keeps and no later one; a query left with no
    # key (the padding mask drops key 0, the causal one every later key) gets zeros
    q, k, v = _randn(1, 2, 4, 3), _randn(1, 2, 6, 3), _randn(1, 2, 6, 3)
    mask = np.tile(np.arange(6) > 0, (4, 1)) if kind == "bool" else _randn(4, 6)
    ours, theirs = (
        [Tensor(a, requires_grad=True) for a in (q, k, v)],
        [torch.tensor(a, requires_grad=True) for a in (q, k, v)],
    )
    out = UF.scaled_dot_product_attention(*ours, attn_mask=Tensor(mask), is_causal=True)
    ref = TF.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask), is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-5, rtol=1e-4)
    if kind == "bool":
        assert not out.numpy()[..., 0, :].any()
    out.square().sum().backward()
    ref.square().sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", ["causal_lower_right", "causal_upper_left"])
@pytest.mark.parametrize("L, S", [(3, 5), (4, 4), (4, 2)])
@pytest.mark.filterwarnings("ignore:Lower right causal bias", "ignore:causal_lower_right")
def test_scaled_dot_product_attention_takes_torch_nn_attention_causal_biases(variant, L, S):
    # torch.nn.attention's names: a causal bias as attn_mask (lower right: the new queries against a KV cache), under
    # sdpa_kernel (one math attention here, so any backend list runs it)
    import torch.nn.attention.bias as torch_bias

    import uopkit.nn.attention as attention
    import uopkit.nn.attention.bias as bias

    q, k, v = _randn(2, 3, L, 4), _randn(2, 3, S, 4), _randn(2, 3, S, 4)
    ours, theirs = getattr(bias, variant)(L, S), getattr(torch_bias, variant)(L, S)
    np.testing.assert_array_equal(ours._materialize().numpy(), theirs._materialize().numpy())
    with attention.sdpa_kernel([attention.SDPBackend.FLASH_ATTENTION, attention.SDPBackend.MATH]):
        out = UF.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), attn_mask=ours)
    ref = TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), attn_mask=theirs)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="CausalBias attn_mask is already causal"):
        UF.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), attn_mask=ours, is_causal=True)
    with pytest.raises(AssertionError, match="sdpa_kernel: backends must be an SDPBackend"):
        with attention.sdpa_kernel("math"):
            pass
    with pytest.raises(AssertionError, match=f"{variant}: takes the two sizes"):
        getattr(bias, variant)(L)


@pytest.mark.parametrize(
    "batched, separate, static, extras",
    [(True, False, False, False), (True, True, False, True), (True, False, True, False), (False, True, True, False)],
)
def test_multi_head_attention_forward_matches_torch(batched, separate, static, extras):
    # torch's functional form of MultiheadAttention, weights passed in: a packed in_proj_weight or q/k/v weights of
    # other key/value widths, bias_k/bias_v with add_zero_attn, static keys/values, masks; dropout off (training=False)
    E, H, L, S, N = 4, 2, 3, 5, 2
    kdim, vdim = (3, 5) if separate else (E, E)
    shape = (lambda n, f: (n, N, f)) if batched else (lambda n, f: (n, f))
    static_shape = ((N if batched else 1) * H, S, E // H)
    arrays = {
        "q": _randn(*shape(L, E)), "k": _randn(*shape(S, kdim)), "v": _randn(*shape(S, vdim)),
        "in_w": _randn(3 * E, E), "in_b": _randn(3 * E), "q_w": _randn(E, E), "k_w": _randn(E, kdim),
        "v_w": _randn(E, vdim), "bias_k": _randn(1, 1, E), "bias_v": _randn(1, 1, E), "out_w": _randn(E, E),
        "out_b": _randn(E), "static_k": _randn(*static_shape), "static_v": _randn(*static_shape),
    }  # fmt: skip
    attn_mask = RNG.random((L, S)) < 0.3
    padding = RNG.random((N, S) if batched else (S,)) < 0.3

    def run(F, lib, tensor):
        t = {name: tensor(a) for name, a in arrays.items()}
        out, weights = F.multi_head_attention_forward(
            t["q"], t["k"], t["v"], E, H, None if separate else t["in_w"], t["in_b"],
            t["bias_k"] if extras else None, t["bias_v"] if extras else None, extras, 0.5, t["out_w"], t["out_b"],
            training=False, key_padding_mask=lib(padding), attn_mask=lib(attn_mask),
            use_separate_proj_weight=separate, q_proj_weight=t["q_w"] if separate else None,
            k_proj_weight=t["k_w"] if separate else None, v_proj_weight=t["v_w"] if separate else None,
            static_k=t["static_k"] if static else None, static_v=t["static_v"] if static else None,
            average_attn_weights=batched,
        )  # fmt: skip
        (out.square().sum() + (weights * weights).sum()).backward()
        return out, weights, t

    out, weights, ours = run(UF, Tensor, lambda a: Tensor(a, requires_grad=True))
    ref, ref_weights, theirs = run(TF, torch.tensor, lambda a: torch.tensor(a, requires_grad=True))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(weights.numpy(), ref_weights.detach().numpy(), atol=1e-5, rtol=1e-4)
    for name, t in theirs.items():
        if t.grad is None:
            assert ours[name].grad is None, name
        else:
            np.testing.assert_allclose(ours[name].grad.numpy(), t.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_pools_with_indices(n):
    x = _randn(2, 3, *(5, 6, 4)[:n])
    name = f"max_pool{n}d"
    # the indices are int32 here, int64 in torch: compared as values
    check(lambda F, t: getattr(F, name)(t, 2, stride=1, return_indices=True), x, grad=False)
    check(lambda F, t: getattr(F, f"{name}_with_indices")(t, 2, padding=1), x, grad=False)
    check(lambda F, t: getattr(F, f"adaptive_{name}")(t, 3, return_indices=True), x, grad=False)
    check(lambda F, t: getattr(F, f"adaptive_{name}_with_indices")(t, 2), x, grad=False)
    # max_unpool of each library's own pool
    check(lambda F, t: getattr(F, f"max_unpool{n}d")(*getattr(F, name)(t, 2, return_indices=True), 2), x)


def test_legacy_reduction_arguments():
    # size_average and reduce, deprecated in torch, still pick the reduction (with a warning in both)
    with pytest.warns(UserWarning):
        check(lambda F, x, y: F.mse_loss(x, y, size_average=False), _randn(3, 4), _randn(3, 4))
    with pytest.warns(UserWarning):
        check(lambda F, x, y: F.l1_loss(x, y, reduce=False), _randn(3, 4), _randn(3, 4))


def test_softmax_implicit_dim_and_dtype():
    x = _randn(2, 3, 4)
    with pytest.warns(UserWarning, match="called without dim"):
        out = UF.softmax(Tensor(x))
    with pytest.warns(UserWarning):
        ref = TF.softmax(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-6)
    out = UF.log_softmax(Tensor(x), dim=-1, dtype=dtypes.float64)
    ref = TF.log_softmax(torch.tensor(x), dim=-1, dtype=torch.float64)
    assert out.dtype == dtypes.float64
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# in place: the `_` forms and inplace=True write the result into the input tensor object itself

IN_PLACE = [
    ("relu_", lambda F, x: F.relu_(x)),
    ("relu", lambda F, x: F.relu(x, inplace=True)),
    ("elu_", lambda F, x: F.elu_(x, alpha=0.5)),
    ("selu_", lambda F, x: F.selu_(x)),
    ("celu_", lambda F, x: F.celu_(x, 0.7)),
    ("leaky_relu_", lambda F, x: F.leaky_relu_(x, 0.2)),
    ("hardtanh_", lambda F, x: F.hardtanh_(x, -0.5, 0.5)),
    ("rrelu_", lambda F, x: F.rrelu_(x, 0.2, 0.2)),
    ("threshold_", lambda F, x: F.threshold_(x, 0.1, -3.0)),
    ("relu6", lambda F, x: F.relu6(x * 1, inplace=True)),
    ("silu", lambda F, x: F.silu(x, inplace=True)),
    ("hardswish", lambda F, x: F.hardswish(x, inplace=True)),
    ("dropout_p0", lambda F, x: F.dropout(x, 0.0, inplace=True)),
]


@pytest.mark.parametrize("call", [c for _, c in IN_PLACE], ids=[n for n, _ in IN_PLACE])
def test_in_place(call):
    x = _randn(3, 4) * 3
    ours, theirs = Tensor(x).realize(), torch.tensor(x)
    ref = call(TF, theirs)
    out = call(UF, ours)
    if ref is theirs:
        assert out is ours
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-6)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# the random functions: their training flags and statistics


def test_dropouts_training_false_return_the_input():
    x = Tensor(_randn(2, 3, 4, 4))
    assert UF.dropout(x, 0.5, training=False) is x
    assert UF.dropout(x, p=0.3, training=False, inplace=True) is x
    # the channel dropouts take (N, C, L), (N, C, H, W) and (N, C, D, H, W) (or unbatched)
    for f, t in ((UF.dropout1d, x[0]), (UF.dropout2d, x), (UF.dropout3d, x)):
        np.testing.assert_array_equal(f(t, 0.5, training=False).numpy(), t.numpy())
    # alpha dropouts default to training=False, as torch's
    np.testing.assert_array_equal(UF.alpha_dropout(x, 0.5).numpy(), x.numpy())
    np.testing.assert_array_equal(UF.feature_alpha_dropout(x, 0.5).numpy(), x.numpy())


def test_dropout_trains_by_default():
    # training=True is the default (whatever Tensor.training says): about half dropped, the rest scaled by 2
    assert not Tensor.training
    out = UF.dropout(Tensor.ones(4000), 0.5).numpy()
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert 0.4 < (out == 0).mean() < 0.6
    x = Tensor.ones(8, 50, 3).contiguous().realize()
    assert UF.dropout(x, 0.5, inplace=True) is x
    assert set(np.unique(x.numpy())) <= {0.0, 2.0}
    channels = UF.dropout2d(Tensor.ones(8, 50, 3, 3), 0.5).numpy()
    # whole channels dropped together
    assert np.all(channels.min((2, 3)) == channels.max((2, 3)))
    with pytest.raises(ArgumentError, match="dropout: p"):
        UF.dropout(Tensor.ones(3), 1.5)


def test_gumbel_softmax_and_rrelu_training():
    logits = Tensor(_randn(5, 4))
    soft = UF.gumbel_softmax(logits, tau=0.5).numpy()
    np.testing.assert_allclose(soft.sum(-1), 1.0, atol=1e-5)
    hard = UF.gumbel_softmax(logits, hard=True, dim=-1).numpy()
    np.testing.assert_allclose(np.sort(hard, -1)[:, -1], 1.0, atol=1e-6)
    np.testing.assert_allclose(hard.sum(-1), 1.0, atol=1e-6)
    slopes = UF.rrelu(Tensor.full((200,), -1.0), 0.1, 0.3, training=True).numpy()
    assert np.all((slopes <= -0.1) & (slopes >= -0.3)) and slopes.std() > 0


# ---------------------------------------------------------------------------------------------------------------------
# normalizations with running statistics


# int and bool inputs of the float activations: torch computes some (in float32) and refuses the rest; ours compute
# every one in float32 from the integer's value, or keep the int dtype where the values are the input's. Never in the
# int dtype: logsigmoid negated first (uint8 1 gave -255), hardshrink took |int8 -128| = -128 as inside, logaddexp2
# wrapped a - b, rrelu's slopes and the channel dropouts' scale were truncated to ints
_INT_INPUTS = {
    "bool": [True, False, True],
    "uint8": [0, 1, 2, 5, 7, 200, 255],
    "int8": [-128, -5, -1, 0, 3, 127],
    "int16": [-32768, -300, -1, 0, 2, 32767],
    "int32": [-(2**31), -70000, -1, 0, 3, 2**31 - 1],
}
_INT_ACTIVATIONS = {
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "softplus": lambda F, x: F.softplus(x),
    "elu": lambda F, x: F.elu(x),
    "gelu": lambda F, x: F.gelu(x),
    "silu": lambda F, x: F.silu(x),
    "mish": lambda F, x: F.mish(x),
    "tanhshrink": lambda F, x: F.tanhshrink(x),
    "hardswish": lambda F, x: F.hardswish(x),
    "softshrink": lambda F, x: F.softshrink(x),
    "leaky_relu": lambda F, x: F.leaky_relu(x, 0.2),
    "hardshrink": lambda F, x: F.hardshrink(x),
    "rrelu": lambda F, x: F.rrelu(x, 0.25, 0.25, training=True),
    "logaddexp2": lambda F, x: x.logaddexp2(x),
    "sigmoid": lambda F, x: x.sigmoid(),
    "sin": lambda F, x: x.sin(),
}


@pytest.mark.parametrize("name", list(_INT_ACTIVATIONS))
@pytest.mark.parametrize("dtype", list(_INT_INPUTS))
def test_float_activations_of_ints_compute_in_float(name, dtype):
    call, values = _INT_ACTIVATIONS[name], _INT_INPUTS[dtype]
    out = call(UF, Tensor(values, dtype=dtype))
    try:
        ref = call(TF, torch.tensor(values, dtype=getattr(torch, dtype)))
    except (RuntimeError, NotImplementedError):
        # torch refuses the dtype: its float64 result of the same values, in float32 (or the int dtype kept)
        ref = call(TF, torch.tensor(values, dtype=torch.float64))
        ref = ref.to(getattr(torch, dtype)) if name == "hardshrink" else ref.float()
    assert out.dtype == getattr(dtypes, str(ref.dtype).removeprefix("torch."))
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref.double().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32"])
def test_dropouts_of_ints_scale_in_float(dtype):
    values = np.array(_INT_INPUTS[dtype])
    x = Tensor(values.reshape(1, -1, 1, 1, 1), dtype=dtype)
    exact = values.astype(np.float64).reshape(1, -1, 1, 1, 1)
    for out in (UF.dropout1d(x[:, :, 0, 0], 0.25), UF.dropout2d(x[:, :, :, 0], 0.25), UF.dropout3d(x, 0.25)):
        assert out.dtype == dtypes.float32
        got = out.numpy().reshape(-1).astype(np.float64)
        # each channel dropped (0) or scaled by 1 / (1 - p), not by its truncation 1 (nor wrapped in the int dtype)
        kept = np.isclose(got, exact.reshape(-1) / 0.75, rtol=1e-6)
        assert np.all(kept | (got == 0)), got
    a = 1.0 / math.sqrt((1.7580993408473766**2 * 0.25 + 1) * 0.75)
    for out in (UF.alpha_dropout(x.reshape(-1), 0.25, True), UF.feature_alpha_dropout(x, 0.25, True)):
        assert out.dtype == dtypes.float32
        got = out.numpy().reshape(-1).astype(np.float64)
        kept = np.isclose(got, a * exact.reshape(-1) + 1.7580993408473766 * a * 0.25, rtol=1e-5)
        dropped = np.isclose(got, 1.7580993408473766 * a * -0.75, rtol=1e-5)
        assert np.all(kept | dropped), got


def test_batch_norm_updates_running_stats():
    x = _randn(6, 3, 4) * 2 + 1
    mean, var = np.zeros(3, np.float32) + 0.5, np.ones(3, np.float32) * 2
    ours_m, ours_v = Tensor(mean).realize(), Tensor(var).realize()
    ref_m, ref_v = torch.tensor(mean), torch.tensor(var)
    out = UF.batch_norm(Tensor(x), ours_m, ours_v, training=True, momentum=0.3)
    ref = TF.batch_norm(torch.tensor(x), ref_m, ref_v, training=True, momentum=0.3)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_m.numpy(), ref_m.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_v.numpy(), ref_v.numpy(), atol=1e-5)
    # eval mode leaves them alone and normalizes with them
    out = UF.batch_norm(Tensor(x), ours_m, ours_v)
    ref = TF.batch_norm(torch.tensor(x), ref_m, ref_v)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_m.numpy(), ref_m.numpy(), atol=1e-5)


def test_instance_norm_running_stats():
    x = _randn(2, 3, 5)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    ours_m, ours_v = Tensor(mean).realize(), Tensor(var).realize()
    ref_m, ref_v = torch.tensor(mean), torch.tensor(var)
    out = UF.instance_norm(Tensor(x), ours_m, ours_v, momentum=0.2)
    ref = TF.instance_norm(torch.tensor(x), ref_m, ref_v, momentum=0.2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_m.numpy(), ref_m.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_v.numpy(), ref_v.numpy(), atol=1e-5)
    out = UF.instance_norm(Tensor(x), ours_m, ours_v, use_input_stats=False)
    ref = TF.instance_norm(torch.tensor(x), ref_m, ref_v, use_input_stats=False)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)


# activations past 256, whose squares and variance overflow float16 (torch computes the norms in float32)
_LARGE = np.array([[[147.0, 43.9, -655.0, -61.6, 85.44, 134.0, -359.0, -43.3]]], np.float32)
_HALF_NORMS = {
    "rms_norm": lambda F, x: F.rms_norm(x, (8,)),
    "rms_norm_float32_weight": lambda F, x, w: F.rms_norm(x, (8,), w),
    "instance_norm": lambda F, x: F.instance_norm(x),
    "batch_norm_training": lambda F, x: F.batch_norm(x.reshape(8, 1), None, None, training=True),
}


# (torch warns that a float32 weight beside a half-float input takes its unfused path)
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize("name", list(_HALF_NORMS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_norm_functions_compute_half_floats_in_float32_as_torch(name, dtype):
    fn, t_dtype, w = _HALF_NORMS[name], getattr(torch, dtype), np.linspace(0.5, 2.0, 8, dtype=np.float32)
    args = (w,) if name.endswith("weight") else ()
    ours = fn(UF, Tensor(_LARGE).cast(dtype), *(Tensor(a) for a in args))
    ref = fn(TF, torch.from_numpy(_LARGE).to(t_dtype), *(torch.from_numpy(a) for a in args))
    assert ours.dtype == getattr(dtypes, dtype)
    # (the layers' own float32 rounding, as nn.InstanceNorm1d's: within an ulp of the half float)
    np.testing.assert_allclose(ours.float().numpy(), ref.float().numpy(), rtol=2**-7 if dtype == "bfloat16" else 2**-10)


def test_rms_norm_default_eps_is_float32_s_for_half_floats_as_torch():
    # torch's kernel adds float32's machine epsilon for half floats (and float64's for float64), as nn.RMSNorm
    for dtype in ("float16", "bfloat16", "float64"):
        x = np.full(4, 1e-3, np.float32)
        ours = UF.rms_norm(Tensor(x).cast(dtype), (4,))
        ref = TF.rms_norm(torch.from_numpy(x).to(getattr(torch, dtype)), (4,))
        np.testing.assert_array_equal(ours.cast(dtypes.float64).numpy(), ref.double().numpy())
    assert UF.rms_norm(input=Tensor.ones(4, dtype="half"), normalized_shape=(4,)).tolist() == [1.0] * 4


def test_embedding_max_norm_renormalizes_weight():
    idx, table = np.array([[0, 2], [2, 3]]), _randn(5, 3) * 3
    ours_w, ref_w = Tensor(table).realize(), torch.tensor(table)
    out = UF.embedding(Tensor(idx.astype(np.int32)), ours_w, max_norm=1.5, norm_type=1.0)
    ref = TF.embedding(torch.tensor(idx), ref_w, max_norm=1.5, norm_type=1.0)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    # the rows looked up were scaled in the table itself, the others kept
    np.testing.assert_allclose(ours_w.numpy(), ref_w.numpy(), atol=1e-5)


def test_embedding_bag_max_norm_renormalizes_weight():
    idx, offsets, table = np.array([0, 2, 2, 3]), np.array([0, 1]), _randn(5, 3) * 3
    ours_w, ref_w = Tensor(table).realize(), torch.tensor(table)
    ours_i, ours_o = Tensor(idx.astype(np.int32)), Tensor(offsets.astype(np.int32))
    out = UF.embedding_bag(ours_i, ours_w, ours_o, max_norm=2.0, mode="sum", sparse=True)
    ref = TF.embedding_bag(torch.tensor(idx), ref_w, torch.tensor(offsets), max_norm=2.0, mode="sum", sparse=True)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours_w.numpy(), ref_w.numpy(), atol=1e-5)


def test_normalize_out():
    x = _randn(3, 4)
    out = Tensor.zeros(3, 4).contiguous().realize()
    assert UF.normalize(Tensor(x), out=out) is out
    np.testing.assert_allclose(out.numpy(), TF.normalize(torch.tensor(x)).numpy(), atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# errors: which function, which argument, what was expected


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: UF.relu(np.ones(3)), TypeError, "relu: input must be a uopkit Tensor"),
        (lambda: UF.cross_entropy(torch.ones(2, 3), Tensor([0, 1])), TypeError, "cross_entropy: input"),
        (lambda: UF.max_pool2d(Tensor.ones(4), 2), ShapeError, r"max_pool2d: expected input \(N, C, H, W\)"),
        (lambda: UF.max_pool1d(Tensor.ones(1, 1, 4), 2, padding=2), ArgumentError, "max_pool1d: padding"),
        (lambda: UF.avg_pool2d(Tensor.ones(1, 1, 4, 4), (2, 2, 2)), ArgumentError, "avg_pool2d: kernel_size"),
        (lambda: UF.conv2d(Tensor.ones(1, 1, 4, 4), Tensor.ones(1, 1, 2)), ShapeError, "conv2d: expected"),
        (lambda: UF.batch_norm(Tensor.ones(2, 3), None, None), ArgumentError, "batch_norm: running_mean"),
        (
            lambda: UF.batch_norm(Tensor.ones(1, 3), None, None, training=True),
            ValueError,
            "batch_norm: training needs at least 2 values per channel",
        ),
        (lambda: UF.layer_norm(Tensor.ones(2, 3), (4,)), ShapeError, "layer_norm: input of shape"),
        (lambda: UF.interpolate(Tensor.ones(1, 1, 2, 2), 4, antialias=True), ArgumentError, "antialias=True is"),
        (lambda: UF.interpolate(Tensor.ones(1, 1, 2), 4, mode="bilinear"), ShapeError, "needs a 4-d input"),
        # a rank the mode doesn't take is torch's NotImplementedError (still a ShapeError)
        (lambda: UF.interpolate(Tensor.ones(1, 1, 4, 4), 3, mode="linear"), NotImplementedError, "mode 'linear' needs"),
        (lambda: UF.interpolate(Tensor.ones(4, 4), 3), NotImplementedError, r"needs \(N, C, \*spatial\)"),
        (lambda: UF.pad(Tensor.ones(1, 2, 3), (1, 1), mode="reflect", value=1.0), ArgumentError, "pad: mode"),
        (lambda: UF.hardtanh(Tensor.ones(2), 1.0, -1.0), ArgumentError, "hardtanh: min_val"),
        (lambda: UF.embedding(Tensor([0]), Tensor.ones(3, 2), padding_idx=5), ArgumentError, "padding_idx"),
        (lambda: UF.adaptive_avg_pool2d(Tensor.ones(1, 2, 2), (1, 2, 3)), ArgumentError, "output_size"),
        (lambda: UF.unfold(Tensor.ones(1, 1, 2, 2), 3), ShapeError, "unfold: kernel"),
        # (as torch: a 0/1 int mask is neither a keep-mask nor a bias)
        (
            lambda: UF.scaled_dot_product_attention(
                *[Tensor.ones(1, 2, 3)] * 3, attn_mask=Tensor.ones(2, 3, dtype="int64")
            ),
            TypeError,
            r"scaled_dot_product_attention: attn_mask must be bool .* or a float bias, got .*long.*attn_mask.bool\(\)",
        ),
        (
            lambda: UF.scaled_dot_product_attention(
                Tensor.ones(2, 4, 5, 8), Tensor.ones(2, 2, 7, 8), Tensor.ones(2, 2, 7, 8)
            ),
            ShapeError,
            r"scaled_dot_product_attention: the query has 4 heads \(axis -3\) and the key 2; .* pass enable_gqa=True",
        ),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------------------------------------------------------------
# coverage: every public function of torch.nn.functional is here, or left out for a reason

LEFT_OUT = {
    "grouped_mm": "a CUDA grouped-GEMM kernel entry (jagged MoE batches, layout rules), not a dense-tensor function",
    "scaled_mm": "float8 scaled matmul with swizzled scales: a low-precision CUDA kernel entry",
    "scaled_grouped_mm": "float8 scaled grouped matmul: a low-precision CUDA kernel entry",
    "Optional": "typing.Optional, re-exported by torch's module, not a function",
    "assert_int_or_pair": "torch's internal argument check",
    "boolean_dispatch": "torch's internal helper that builds the return_indices variants",
    "handle_torch_function": "torch's __torch_function__ dispatch machinery",
    "has_torch_function": "torch's __torch_function__ dispatch machinery",
    "has_torch_function_unary": "torch's __torch_function__ dispatch machinery",
    "has_torch_function_variadic": "torch's __torch_function__ dispatch machinery",
}


def _torch_public_functions() -> set[str]:
    names = set()
    for name in dir(TF):
        obj = getattr(TF, name)
        if not name.startswith("_") and callable(obj) and not inspect.isclass(obj) and not inspect.ismodule(obj):
            names.add(name)
    return names


def test_every_name_is_callable_with_a_docstring():
    assert len(UF.__all__) == len(set(UF.__all__))
    for name in UF.__all__:
        fn = getattr(UF, name)
        assert callable(fn), name
        assert fn.__doc__ and fn.__doc__.startswith(f"torch.nn.functional.{name}"), name


def test_covers_torch_functional():
    torch_names = _torch_public_functions()
    missing = torch_names - set(UF.__all__) - set(LEFT_OUT)
    assert not missing, f"torch.nn.functional functions neither covered nor listed in LEFT_OUT: {sorted(missing)}"
    assert not set(LEFT_OUT) & set(UF.__all__)
    # nothing of ours that torch doesn't have (on this torch version)
    assert set(UF.__all__) <= torch_names


def _documented_parameters(name: str, fn: Any) -> list[tuple[str, Any]] | None:
    """(name, default) of a torch builtin's parameters, read from the signature its docstring opens with
    ("conv1d(input, weight, bias=None, stride=1, ...) -> Tensor"); None where it doesn't open with one."""
    doc = (fn.__doc__ or "").lstrip()
    if not doc.startswith(f"{name}("):
        return None
    depth = 0
    for i, ch in enumerate(doc):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ")" and depth == 0:
            parameters = doc[len(name) : i + 1]
            break
    else:
        return None
    tree = ast.parse(f"def f{parameters}: pass")
    args = tree.body[0].args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + args.defaults
    pairs = list(zip(positional, defaults, strict=True)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    # (defaults are literals or arithmetic on them: "lower=1./8")
    return [(a.arg, d if d is inspect.Parameter.empty or d is None else eval(ast.unparse(d), {})) for a, d in pairs]


@pytest.mark.parametrize("name", sorted(set(UF.__all__) & _torch_public_functions()))
def test_signature_is_torchs(name):
    # the parameter names, kinds and defaults are torch's: from its Python signature, or for a builtin from the
    # signature its docstring opens with (names and defaults)
    ours = inspect.signature(getattr(UF, name))
    theirs_fn = getattr(TF, name)
    try:
        theirs = inspect.signature(theirs_fn)
    except ValueError:
        documented = _documented_parameters(name, theirs_fn)
        if documented is None:
            pytest.skip("torch's builtin has neither a Python signature nor one in its docstring")
        assert [(p.name, p.default) for p in ours.parameters.values()] == documented
        return
    if any(p.kind is p.VAR_POSITIONAL for p in theirs.parameters.values()):
        # the return_indices variants are built by boolean_dispatch: their signature is the _with_indices one's
        theirs = inspect.signature(getattr(TF, f"{name}_with_indices"))

    def described(sig: inspect.Signature) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    assert described(ours) == described(theirs)


def test_module_is_reachable_as_torch_users_import_it():
    import uopkit.nn as nn

    assert nn.functional is UF
    assert math.isclose(UF.sigmoid(Tensor(0.0)).item(), 0.5)


# a gradient penalty (WGAN-GP) through an activation: the bias before it reaches the penalty only through the
# activation's derivative. torch computes that derivative with a backward kernel of its own that takes the input
# (threshold_backward, leaky_relu_backward, hardtanh_backward, the shrinks'), so the bias gets a zero gradient; where
# the derivative is a select on a mask (clamp, maximum), no gradient flows through the mask and it gets None
_PENALIZED = {
    "relu": lambda F, h: F.relu(h),
    "leaky_relu": lambda F, h: F.leaky_relu(h, 0.2),
    "rrelu": lambda F, h: F.rrelu(h, training=False),
    "hardtanh": lambda F, h: F.hardtanh(h, -0.5, 1.0),
    "relu6": lambda F, h: F.relu6(h * 4),
    "threshold": lambda F, h: F.threshold(h, 0.1, -1.0),
    "hardshrink": lambda F, h: F.hardshrink(h, 0.3),
    "softshrink": lambda F, h: F.softshrink(h, 0.3),
    "clamp": lambda F, h: h.clamp(-0.5, 0.5),
    "maximum": lambda F, h: h.maximum(h * 0.3),
    "hardswish": lambda F, h: F.hardswish(h),
    # (torch's prelu and max pool backward kernels take the input too)
    "prelu": lambda F, h: F.prelu(h, type(h)([0.25, -0.5, 0.1])),
    "max_pool1d": lambda F, h: F.max_pool1d(h.unsqueeze(0), 2),
    "max_pool2d": lambda F, h: F.max_pool2d(h.reshape(1, 1, 2, 3), 2, ceil_mode=True),
    "max_pool2d_indices": lambda F, h: F.max_pool2d(h.reshape(1, 1, 2, 3), (1, 2), return_indices=True)[0],
    "max_pool3d": lambda F, h: F.max_pool3d(h.reshape(1, 1, 1, 2, 3), (1, 2, 2), padding=(0, 1, 1)),
    "adaptive_max_pool2d": lambda F, h: F.adaptive_max_pool2d(h.reshape(1, 1, 2, 3), (1, 2)),
}


@pytest.mark.parametrize("name", _PENALIZED)
def test_gradient_penalty_reaches_what_torch_reaches(name: str) -> None:
    from uopkit.autograd import grad

    x0 = np.array([[0.5, -1.0, 2.0], [-0.2, 0.4, 0.9]], np.float32)
    w0, b0 = np.array([1.5, 0.3, -0.7], np.float32), np.array([0.1], np.float32)
    grads = []
    for F, T, G in ((UF, Tensor, grad), (TF, torch.tensor, torch.autograd.grad)):
        w, b, x = T(w0).requires_grad_(True), T(b0).requires_grad_(True), T(x0).requires_grad_(True)
        out = _PENALIZED[name](F, x * w + b).sum()
        g = G(out, x, create_graph=True)[0]
        ((g.square().sum(1).sqrt() - 1) ** 2).mean().backward()
        grads.append([None if t.grad is None else np.array(t.grad.tolist()) for t in (w, b)])
    for ours, theirs in zip(*grads, strict=True):
        assert (ours is None) == (theirs is None), (ours, theirs)
        if theirs is not None:
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)


def test_prelu_weight_gradient_penalty_as_torch() -> None:
    # the weight reaches the penalty through the input's gradient (weight * g where x <= 0) and its own
    from uopkit.autograd import grad

    rng = np.random.default_rng(3)
    x0, c0 = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)
    x0[0, 0, 0] = np.nan
    w0 = np.float32([0.25, -0.5, 0.1])
    results = []
    for F, T, G in ((UF, Tensor, grad), (TF, torch.tensor, torch.autograd.grad)):
        x, w = T(x0).requires_grad_(True), T(w0).requires_grad_(True)
        gx, gw = G((F.prelu(x, w) * T(c0)).sum(), (x, w), create_graph=True)
        (gx.square().sum() + gw.square().sum()).backward()
        results.append([np.array(t.tolist()) for t in (gx, gw, x.grad, w.grad)])
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def _raised(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> type[BaseException] | None:
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception's type is what is compared
        return type(e)
    return None


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_mode_pad_takes_the_ranks_torch_takes(mode: str) -> None:
    # torch pads 1, 2 or 3 trailing dims in these modes, of an (N, C, *spatial) or an unbatched (C, *spatial) input
    # only; any other rank is a NotImplementedError (uopkit's Tensor.pad takes any rank, F.pad is torch's)
    rng = np.random.default_rng(0)
    for shape in [(4,), (2, 4), (2, 3, 4), (1, 2, 3, 4), (1, 1, 2, 3, 4), (1, 1, 1, 2, 3, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for pad in [(1, 1), (1, 0, 0, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1, 1), (1, 1, 1)]:
            want = _raised(TF.pad, torch.tensor(x), pad, mode=mode)
            got = _raised(UF.pad, Tensor(x), pad, mode=mode)
            if want is None:
                assert got is None, (shape, pad)
                np.testing.assert_array_equal(
                    UF.pad(Tensor(x), pad, mode=mode).numpy(), TF.pad(torch.tensor(x), pad, mode=mode).numpy()
                )
            else:
                assert got is not None and issubclass(got, want), (shape, pad, got, want)
    with pytest.raises(NotImplementedError, match=rf"pad: mode '{mode}' .* 2 padding values need a 2-d or 3-d input"):
        UF.pad(Tensor.ones(1, 2, 3, 4), (1, 1), mode=mode)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
def test_softmax_family_refuses_ints_without_dtype_as_torch(dtype: str) -> None:
    # torch has no softmax kernel for ints and bools: they raise unless dtype= names a float (uopkit used to compute
    # them in float32); F.normalize of ints raises as its vector norm does
    x = np.arange(6).reshape(2, 3).astype(dtype) if dtype != "bool" else np.arange(6).reshape(2, 3) % 2 == 0
    calls = [
        lambda F, t: F.softmax(t, 1),
        lambda F, t: F.log_softmax(t, 1),
        lambda F, t: F.softmin(t, 1),
        lambda F, t: t.softmax(1),
        lambda F, t: t.log_softmax(-1),
        lambda F, t: t.logcumsumexp(1),
        lambda F, t: F.cross_entropy(t, (t[:, 0] * 0).long() if isinstance(t, torch.Tensor) else Tensor([0, 0])),
        lambda F, t: F.normalize(t),
    ]
    for call in calls:
        want = _raised(call, TF, torch.tensor(x))
        got = _raised(call, UF, Tensor(x))
        assert want is not None and got is not None and issubclass(got, want), (got, want)
    with pytest.raises(NotImplementedError, match=r"softmax: needs a floating-point input, got dtypes\.\w+ .*dtype="):
        Tensor(x).softmax(1)
    # with dtype= they compute, as torch's
    for name in ("softmax", "log_softmax"):
        np.testing.assert_allclose(
            getattr(UF, name)(Tensor(x), 1, dtype=dtypes.float32).numpy(),
            getattr(TF, name)(torch.tensor(x), 1, dtype=torch.float32).numpy(),
            rtol=1e-6,
            atol=1e-6,
        )

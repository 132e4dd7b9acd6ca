"""torch's top-level functional names (`torch.layer_norm`, `torch.dropout(input, p, train)`, `torch.kl_div(input,
target, reduction=1)`, ...) as a port spells them, `Tensor.X(...)`, with torch's own positional order: each against
torch's value (tensor/torch_functions.py's `TOP_LEVEL_FUNCTIONAL`, nn/torch_top_level.py, and the methods of those
names)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from uopkit import Tensor

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _f(*shape: int, positive: bool = False) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def _i(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _sign(*shape: int) -> np.ndarray:
    return np.where(RNG.standard_normal(shape) > 0, 1.0, -1.0).astype(np.float32)


def _log_probs(t: int, n: int, c: int) -> np.ndarray:
    x = _f(t, n, c)
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def _probs(*shape: int) -> np.ndarray:
    x = np.exp(_f(*shape))
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


X3, X4, X5 = _f(2, 4, 6), _f(2, 4, 6, 5), _f(2, 4, 4, 5, 3)
A, B = _f(3, 4), _f(3, 4)
# (name, positional args, keyword args): numpy arrays become tensors (float32, or int64 for indices)
CASES: list[tuple[str, tuple, dict]] = [
    ("layer_norm", (X3, [6], _f(6), _f(6), 1e-5, True), {}),
    ("layer_norm", (X3, (4, 6)), {}),
    ("layer_norm", (X3, [6], None, None, 1e-3, False), {}),
    ("group_norm", (X3, 2, _f(4), _f(4), 1e-5, True), {}),
    ("group_norm", (X4, 4), {}),
    ("batch_norm", (X3, _f(4), _f(4), _f(4), _f(4, positive=True), True, 0.1, 1e-5, True), {}),
    ("batch_norm", (X4, None, None, _f(4), _f(4, positive=True), False, 0.3, 1e-3, False), {}),
    ("batch_norm", (X3, None, _f(4), None, None, True, 0.1, 1e-5, False), {}),
    ("instance_norm", (X3, _f(4), _f(4), None, None, True, 0.1, 1e-5, False), {}),
    ("instance_norm", (X4, None, None, _f(4), _f(4, positive=True), True, 0.2, 1e-5, True), {}),
    ("instance_norm", (X3, _f(4), None, _f(4), _f(4, positive=True), False, 0.1, 1e-5, False), {}),
    ("conv1d", (X3, _f(3, 4, 3), _f(3), 1, 1, 1, 1), {}),
    ("conv1d", (X3, _f(4, 2, 3), None, 2, 0, 2, 2), {}),
    ("conv1d", (X3, _f(3, 4, 3), _f(3), 1, "same"), {}),
    ("conv2d", (X4, _f(3, 4, 3, 2), _f(3), (2, 1), (1, 0), 1, 1), {}),
    ("conv2d", (X4, _f(4, 2, 2, 2), None, 1, "valid", 1, 2), {}),
    ("conv3d", (X5, _f(2, 4, 2, 2, 2), _f(2), 1, 1), {}),
    ("conv_transpose1d", (X3, _f(4, 3, 3), _f(3), 2, 1, 1, 1, 1), {}),
    ("conv_transpose1d", (X3, _f(4, 2, 2), None, 1, 0, 0, 2, 2), {}),
    ("conv_transpose2d", (X4, _f(4, 3, 3, 2), _f(3), 2, 1, 1), {}),
    ("conv_transpose3d", (X5, _f(4, 2, 2, 2, 2), _f(2), 2, 0, 1), {}),
    ("conv_transpose3d", (X5, _f(4, 2, 3, 2, 2), None, 1, 1, 0, 1, 2), {}),
    ("max_pool1d", (X3, 2), {}),
    ("max_pool1d", (X3, 3, 2, 1, 1, True), {}),
    ("max_pool1d", (X3, [2], [], 0, 2), {}),
    ("max_pool2d", (X4, 2), {}),
    ("max_pool2d", (X4, (3, 2), (2, 1), 1, 1, True), {}),
    ("max_pool2d", (X4, 2, []), {}),
    ("max_pool3d", (X5, 2), {}),
    ("max_pool3d", (X5, 2, 1, 1, 1, True), {}),
    ("avg_pool1d", (X3, 2), {}),
    ("avg_pool1d", (X3, 3, 2, 1, True, False), {}),
    ("avg_pool1d", (X3, [3], [], 1), {}),
    ("adaptive_avg_pool1d", (X3, 4), {}),
    ("adaptive_avg_pool1d", (X3, [3]), {}),
    ("adaptive_max_pool1d", (X3, 4), {}),
    ("adaptive_max_pool1d", (X3, [3]), {}),
    ("dropout", (X3, 0.5, False), {}),
    ("dropout", (X3, 0.0, True), {}),
    ("dropout", (X3, 1.0, True), {}),
    ("alpha_dropout", (X3, 0.5, False), {}),
    ("alpha_dropout", (X3, 0.0, True), {}),
    ("feature_dropout", (X4, 0.5, False), {}),
    ("feature_dropout", (X4, 0.0, True), {}),
    ("feature_dropout", (X4, 1.0, True), {}),
    ("feature_alpha_dropout", (X4, 0.5, False), {}),
    ("feature_alpha_dropout", (X4, 0.0, True), {}),
    ("embedding", (_f(5, 3), _i([[0, 2], [4, 1]])), {}),
    ("embedding", (_f(5, 3), _i([1, 1, 3]), 1, False, False), {}),
    ("pixel_shuffle", (_f(1, 8, 2, 3), 2), {}),
    ("pixel_unshuffle", (_f(1, 2, 4, 6), 2), {}),
    ("channel_shuffle", (_f(1, 6, 2, 2), 3), {}),
    ("cosine_similarity", (A, B), {}),
    ("cosine_similarity", (A, B, 0, 1e-6), {}),
    ("pairwise_distance", (A, B), {}),
    ("pairwise_distance", (A, B, 1.0, 1e-6, True), {}),
    ("pdist", (A,), {}),
    ("pdist", (A, 1.0), {}),
    ("cdist", (_f(2, 4, 3), _f(2, 5, 3)), {}),
    ("cdist", (_f(2, 4, 3), _f(2, 5, 3), 1.0), {}),
    ("cdist", (_f(4, 3), _f(5, 3), 2.0, "donot_use_mm_for_euclid_dist"), {}),
    ("prelu", (X3, _f(4)), {}),
    ("prelu", (X3, _f(1)), {}),
    ("rrelu", (X3,), {}),
    ("rrelu", (X3, 0.1, 0.3, False), {}),
    ("selu", (X3,), {}),
    ("celu", (X3,), {}),
    ("celu", (X3, 0.5), {}),
    ("hardshrink", (X3,), {}),
    ("hardshrink", (X3, 0.3), {}),
    ("bilinear", (_f(3, 4), _f(3, 5), _f(2, 4, 5), _f(2)), {}),
    ("bilinear", (_f(3, 4), _f(3, 5), _f(2, 4, 5)), {}),
    ("ctc_loss", (_log_probs(6, 2, 4), _i([[1, 2, 3], [2, 2, 0]]), [6, 5], [3, 2]), {}),
    ("ctc_loss", (_log_probs(6, 2, 4), _i([[1, 2, 3], [2, 2, 0]]), _i([6, 5]), _i([3, 2]), 0, 0, False), {}),
    ("ctc_loss", (_log_probs(6, 2, 4), _i([[1, 2, 3], [3, 2, 0]]), [6, 6], [3, 2], 0, 2, True), {}),
    ("kl_div", (np.log(_probs(3, 4)), _probs(3, 4)), {}),
    ("kl_div", (np.log(_probs(3, 4)), _probs(3, 4), 0), {}),
    ("kl_div", (np.log(_probs(3, 4)), np.log(_probs(3, 4)), 2), {"log_target": True}),
    ("hinge_embedding_loss", (A, _sign(3, 4)), {}),
    ("hinge_embedding_loss", (A, _sign(3, 4), 0.5, 0), {}),
    ("hinge_embedding_loss", (A, _sign(3, 4), 1.0, 2), {}),
    ("margin_ranking_loss", (_f(5), _f(5), _sign(5)), {}),
    ("margin_ranking_loss", (_f(5), _f(5), _sign(5), 0.5, 2), {}),
    ("cosine_embedding_loss", (A, B, _sign(3)), {}),
    ("cosine_embedding_loss", (A, B, _sign(3), 0.2, 0), {}),
    ("triplet_margin_loss", (A, B, _f(3, 4)), {}),
    ("triplet_margin_loss", (A, B, _f(3, 4), 0.5, 1.0, 1e-6, True, 2), {}),
    ("poisson_nll_loss", (A, _f(3, 4, positive=True), True, False, 1e-8, 1), {}),
    ("poisson_nll_loss", (_f(3, 4, positive=True), _f(3, 4, positive=True), False, True, 1e-8, 0), {}),
    ("binary_cross_entropy_with_logits", (A, _probs(3, 4)), {}),
    ("binary_cross_entropy_with_logits", (A, _probs(3, 4), _f(3, 4, positive=True), _f(4, positive=True), 2), {}),
    ("binary_cross_entropy_with_logits", (A, _probs(3, 4), None, _f(4, positive=True)), {}),
    ("binary_cross_entropy_with_logits", (A, _probs(3, 4)), {"weight": _f(4, positive=True), "reduction": 0}),
]


def _as(lib: str, v: Any) -> Any:
    if not isinstance(v, np.ndarray):
        return v
    if lib == "torch":
        return torch.tensor(v)
    return Tensor(v, dtype="int64" if v.dtype == np.int64 else None)


def _numbers(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_numbers(v) for v in x)
    return x.detach().numpy().astype(np.float64) if isinstance(x, torch.Tensor) else x.numpy().astype(np.float64)


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_top_level_function_as_torchs(name: str, args: tuple, kwargs: dict) -> None:
    ours_args, theirs_args = [_as("uopkit", a) for a in args], [_as("torch", a) for a in args]
    ours_kwargs = {k: _as("uopkit", v) for k, v in kwargs.items()}
    theirs_kwargs = {k: _as("torch", v) for k, v in kwargs.items()}
    theirs = getattr(torch, name)(*theirs_args, **theirs_kwargs)
    ours = getattr(Tensor, name)(*ours_args, **ours_kwargs)
    got, want = _numbers(ours), _numbers(theirs)
    assert isinstance(got, tuple) == isinstance(want, tuple)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # (what the function changes in place, batch_norm's running statistics, changes as torch's)
    for o, t in zip(ours_args, theirs_args, strict=True):
        if isinstance(t, torch.Tensor):
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"])
def test_top_level_dropouts_in_training_as_torchs(name: str) -> None:
    # random masks: torch.dropout keeps each element, torch.feature_dropout each (sample, channel) whole, scaled by
    # 1/(1-p); the alpha forms keep the mean and variance of a standard normal input
    x = Tensor(np.ones((64, 32, 4), np.float32))
    out = getattr(Tensor, name)(x, 0.25, True).numpy().astype(np.float64).round(5)
    if name in ("dropout", "feature_dropout"):
        assert set(np.unique(out).round(5)) <= {0.0, round(1 / 0.75, 5)}
        assert 0.65 < (out != 0).mean() < 0.85
    if name.startswith("feature"):
        assert (out == out[:, :, :1]).all()
    assert getattr(Tensor, name)(x, 0.25, False) is x or (getattr(Tensor, name)(x, 0.25, False).numpy() == 1).all()


def test_top_level_embedding_padding_row_gets_no_gradient_as_torchs() -> None:
    w0, idx = _f(5, 3), _i([[1, 2], [1, 4]])
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    Tensor.embedding(w, Tensor(idx), 1).square().sum().backward()
    torch.embedding(tw, torch.tensor(idx), 1).square().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


def test_top_level_reduction_is_torchs_number() -> None:
    # torch's top-level losses take at::Reduction's numbers: 1 the mean, 2 the sum, any other no reduction; a name
    # (F's spelling) is a TypeError in both
    a, b = np.log(_probs(2, 3)), _probs(2, 3)
    for reduction in (3, -1):
        got = Tensor.kl_div(Tensor(a), Tensor(b), reduction).numpy()
        np.testing.assert_allclose(got, torch.kl_div(torch.tensor(a), torch.tensor(b), reduction).numpy(), rtol=1e-5)
    for reduction in ("mean", True):
        with pytest.raises(TypeError):
            torch.kl_div(torch.tensor(a), torch.tensor(b), reduction)
        with pytest.raises(TypeError, match="kl_div: reduction is torch's number"):
            Tensor.kl_div(Tensor(a), Tensor(b), reduction)


def test_methods_of_the_same_names_keep_their_arguments() -> None:
    # read from a tensor, the names are the methods (F's argument order and reduction names, F's "mean" default)
    x, y = Tensor(np.log(_probs(2, 3))), Tensor(_probs(2, 3))
    assert x.kl_div(y).shape == () and x.kl_div(y, "none").shape == (2, 3)
    assert Tensor([1, 0]).embedding(Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist() == [[3.0, 4.0], [1.0, 2.0]]
    assert x.binary_cross_entropy_with_logits(y, "sum").shape == ()


def test_the_examples_in_the_module_run() -> None:
    import doctest

    from uopkit.nn import torch_top_level

    results = doctest.testmod(torch_top_level, extraglobs={"Tensor": Tensor})
    assert results.failed == 0 and results.attempted > 15


def test_the_names_tensor_reaches_are_the_modules():
    # (tensor/ lists the names without importing nn, which is above it: the two lists must agree)
    from uopkit.nn import torch_top_level
    from uopkit.tensor.torch_functions import TOP_LEVEL_FUNCTIONAL

    assert set(torch_top_level.__all__) == TOP_LEVEL_FUNCTIONAL
    assert all(getattr(Tensor, name) is getattr(torch_top_level, name) for name in TOP_LEVEL_FUNCTIONAL)

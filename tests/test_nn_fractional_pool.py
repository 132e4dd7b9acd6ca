"""uopkit.nn.fractional_pool against torch: with the same `_random_samples`, the same windows, values, indices and
gradients (batched and unbatched, 2-d and 3-d, output_size and output_ratio), and clear errors for bad sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import uopkit.nn as unn
import uopkit.nn.functional as UF
from uopkit import Tensor, dtypes
from uopkit.dtype import DTypeError
from uopkit.tensor import ArgumentError, ShapeError

_DTYPES = {torch.float32: dtypes.float32, torch.float64: dtypes.float64, torch.float16: dtypes.float16}


def _both(n: int, shape: tuple[int, ...], kernel, dtype=torch.float32, seed: int = 0, **sizes):
    # torch's and uopkit's (values, indices, input gradient) for one input, samples and output gradient
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    batch = shape[0] if len(shape) == n + 2 else 1
    samples = torch.rand(batch, shape[-n - 1], n, generator=gen, dtype=dtype)
    xt = x.clone().requires_grad_()
    torch_fn = TF.fractional_max_pool2d if n == 2 else TF.fractional_max_pool3d
    values, indices = torch_fn(xt, kernel, return_indices=True, _random_samples=samples, **sizes)
    g = torch.randn(values.shape, generator=gen, dtype=dtype)
    values.backward(g)
    udt = _DTYPES[dtype]
    xu = Tensor(x.numpy(), dtype=udt, requires_grad=True)
    uopkit_fn = UF.fractional_max_pool2d if n == 2 else UF.fractional_max_pool3d
    uv, ui = uopkit_fn(xu, kernel, return_indices=True, _random_samples=Tensor(samples.numpy(), dtype=udt), **sizes)
    (uv * Tensor(g.numpy(), dtype=udt)).sum().backward()
    return (values.detach().numpy(), indices.numpy(), xt.grad.numpy()), (uv.numpy(), ui.numpy(), xu.grad.numpy())


@pytest.mark.parametrize(
    "n, shape, kernel, sizes",
    [
        (2, (2, 3, 10, 9), 3, {"output_size": (4, 5)}),
        (2, (2, 3, 10, 9), 2, {"output_ratio": (0.5, 0.7)}),
        (2, (2, 3, 10, 9), (2, 3), {"output_size": 5}),
        (2, (3, 10, 9), (2, 3), {"output_size": (5, 4)}),
        (2, (2, 3, 10, 9), 1, {"output_size": (10, 9)}),
        (2, (2, 3, 10, 9), 3, {"output_size": (1, 1)}),
        (2, (1, 2, 37, 41), 2, {"output_size": (20, 33)}),
        (3, (2, 3, 6, 7, 8), 2, {"output_size": (3, 4, 5)}),
        (3, (3, 6, 7, 8), (2, 1, 3), {"output_size": (4, 5, 3)}),
        (3, (2, 2, 9, 7, 8), 2, {"output_ratio": (0.5, 0.5, 0.5)}),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fractional_max_pool_is_torchs_bit_for_bit(n, shape, kernel, sizes, dtype):
    expected, got = _both(n, shape, kernel, dtype, **sizes)
    for name, e, g in zip(("values", "indices", "gradient"), expected, got, strict=True):
        assert g.shape == e.shape, name
        np.testing.assert_array_equal(g, e, err_msg=name)


def test_fractional_max_pool_half_windows_are_torchs():
    # the interval sequence in float16 arithmetic, as torch's half kernel; the gradient of an input that several
    # windows pick is summed once rounded (torch rounds after each addition in half): within a half rounding
    (ev, ei, eg), (gv, gi, gg) = _both(2, (2, 3, 31, 29), 2, torch.float16, output_size=(17, 20))
    np.testing.assert_array_equal(gv, ev)
    np.testing.assert_array_equal(gi, ei)
    np.testing.assert_allclose(gg.astype(np.float32), eg.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_fractional_max_pool_picks_torchs_tap_for_nan_ties_and_minus_inf():
    # torch's scan: the last NaN of a window, else its first maximum; a window all -inf gives its first position
    nan, inf = float("nan"), float("inf")
    rows = [[1.0, nan, 3.0, nan], [3.0, 0.0, 3.0, 1.0], [-inf] * 4, [-inf, 2.0, 2.0, -inf]]
    x = torch.tensor([[rows]])
    samples = torch.tensor([[[0.5, 0.5]]])
    ev, ei = TF.fractional_max_pool2d(x, 2, output_size=2, return_indices=True, _random_samples=samples)
    gv, gi = UF.fractional_max_pool2d(Tensor(x.numpy()), 2, output_size=2, return_indices=True,
                                      _random_samples=Tensor(samples.numpy()))  # fmt: skip
    np.testing.assert_array_equal(gi.numpy(), ei.numpy())
    np.testing.assert_array_equal(gv.numpy(), ev.numpy())


def test_fractional_max_pool_layers_and_with_indices():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 12, 11, generator=gen)
    samples = torch.rand(2, 3, 2, generator=gen)
    expected = torch.nn.FractionalMaxPool2d(3, output_size=(5, 4), return_indices=True, _random_samples=samples)(x)
    layer = unn.FractionalMaxPool2d(3, output_size=(5, 4), return_indices=True, _random_samples=Tensor(samples.numpy()))
    got = layer(Tensor(x.numpy()))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    assert "_random_samples" in layer.state_dict()
    pair = UF.fractional_max_pool2d_with_indices(Tensor(x.numpy()), 3, (5, 4), _random_samples=Tensor(samples.numpy()))
    np.testing.assert_array_equal(pair[1].numpy(), expected[1].numpy())
    x3 = torch.randn(1, 2, 8, 9, 10, generator=gen)
    samples3 = torch.rand(1, 2, 3, generator=gen)
    expected3 = torch.nn.FractionalMaxPool3d(2, output_ratio=0.5, _random_samples=samples3)(x3)
    got3 = unn.FractionalMaxPool3d(2, output_ratio=0.5, _random_samples=Tensor(samples3.numpy()))(Tensor(x3.numpy()))
    np.testing.assert_array_equal(got3.numpy(), expected3.numpy())


def test_fractional_max_pool_draws_its_own_samples():
    # without _random_samples each call draws from uopkit's generator: seeded, the same windows again
    x = Tensor.randn(2, 3, 20, 20)
    Tensor.manual_seed(5)
    first = UF.fractional_max_pool2d(x, 2, output_ratio=0.5, return_indices=True)[1].numpy()
    Tensor.manual_seed(5)
    again = unn.FractionalMaxPool2d(2, output_ratio=0.5, return_indices=True)(x)[1].numpy()
    np.testing.assert_array_equal(first, again)
    assert first.shape == (2, 3, 10, 10)
    # every index is inside its plane and its value is the max of a 2 x 2 window
    assert first.min() >= 0 and first.max() < 400


def test_fractional_max_pool_empty_batch_and_output():
    samples = Tensor.rand(0, 3, 2)
    assert UF.fractional_max_pool2d(Tensor.ones(0, 3, 5, 5), 2, output_size=3, _random_samples=samples).shape == (
        0, 3, 3, 3,
    )  # fmt: skip
    assert UF.fractional_max_pool2d(Tensor.ones(2, 3, 5, 5), 2, output_size=(0, 3)).shape == (2, 3, 0, 3)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 3, output_size=(9, 5)), ShapeError,
         r"output \+ kernel - 1 <= the input's \(10, 9\)"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2), ArgumentError, "give output_size or"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 0, output_size=3), ArgumentError,
         "kernel_size must be >= 1"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2, output_size=(3, 3, 3)), ArgumentError,
         "output_size must be an int or a sequence of 2 ints"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2, output_size=(-1, 3)), ArgumentError,
         "output size must be >= 0"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(10, 9), 2, output_size=3), ShapeError,
         r"expected input \(N, C, H, W\) or \(C, H, W\)"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2, output_size=3,
                                          _random_samples=Tensor.rand(2, 3, 3)), ShapeError, r"\(N, C, 2\)"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2, output_size=3,
                                          _random_samples=Tensor.rand(1, 3, 2)), ShapeError, r"\(>= 2, 3, 2\)"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9), 2, output_size=3,
                                          _random_samples=Tensor.rand(2, 3, 2, dtype=dtypes.float64)), DTypeError,
         "must have the input's dtype"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 3, 10, 9, dtype=dtypes.int32), 2, output_size=3),
         DTypeError, "must be a float tensor"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(2, 0, 10, 9), 2, output_size=3), ShapeError, "is empty"),
        (lambda: UF.fractional_max_pool2d(Tensor.ones(1, 1, 10, 9), 2, output_size=3,
                                          _random_samples=Tensor([[[float("nan"), 0.5]]])), ArgumentError,
         r"in \[0, 1\)"),
        (lambda: UF.fractional_max_pool3d(Tensor.ones(2, 3, 6, 7, 8), 2, output_size=(6, 4, 5)), ShapeError,
         "output size"),
        (lambda: unn.FractionalMaxPool2d(2, output_ratio=1.5), ValueError, "between 0 and 1"),
        (lambda: unn.FractionalMaxPool3d(2, output_ratio=(0.5, 1.0, 0.5)), ValueError, "between 0 and 1"),
        (lambda: unn.FractionalMaxPool2d(2), ValueError, "give output_size or output_ratio"),
        (lambda: unn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5), ValueError, "only one of"),
    ],
)  # fmt: skip
def test_fractional_max_pool_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()

"""Tensor.rearrange: einops patterns, checked against the reshapes and transposes they stand for."""

import re

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.tensor.support import ArgumentError

X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)


@pytest.mark.parametrize(
    "pattern, sizes, want",
    [
        ("b c h w -> b h w c", {}, X.transpose(0, 2, 3, 1)),
        ("b c h w -> b (c h w)", {}, X.reshape(2, 60)),
        ("b c h w -> (b h) w c", {}, X.transpose(0, 2, 3, 1).reshape(8, 5, 3)),
        ("b c (h1 h2) w -> b c h1 (h2 w)", {"h1": 2}, X.reshape(2, 3, 2, 10)),
        ("b c (h1 h2) w -> h2 b c h1 w", {"h2": 2}, X.reshape(2, 3, 2, 2, 5).transpose(3, 0, 1, 2, 4)),
        (
            "b c (h1 h2) w -> (w h2) b c h1",
            {"h1": 2, "h2": 2},
            X.reshape(2, 3, 2, 2, 5).transpose(4, 3, 0, 1, 2).reshape(10, 2, 3, 2),
        ),
        ("... h w -> ... (h w)", {}, X.reshape(2, 3, 20)),
        ("b ... w -> w ... b", {}, X.transpose(3, 1, 2, 0)),
        ("b ... -> b (...)", {}, X.reshape(2, 60)),
        ("b c h w -> b 1 c () h w", {}, X.reshape(2, 1, 3, 1, 4, 5)),
        ("b c … w -> … (w c) b", {}, X.transpose(2, 3, 1, 0).reshape(4, 15, 2)),
    ],
)
def test_patterns_match_their_reshapes(pattern, sizes, want):
    got = Tensor(X).rearrange(pattern, **sizes)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_unit_axes_empty_tensors_and_gradient():
    np.testing.assert_array_equal(Tensor(np.ones((2, 1, 3))).rearrange("a 1 c -> c a").numpy(), np.ones((3, 2)))
    assert Tensor.zeros(0, 4).rearrange("a b -> b a").shape == (4, 0)
    assert Tensor(7.0).rearrange("->").item() == 7.0
    x = Tensor(X, requires_grad=True)
    (x.rearrange("b c h w -> (w h) c b") * Tensor(np.arange(60, dtype=np.float32).reshape(20, 3, 1))).sum().backward()
    want = np.broadcast_to(np.arange(60, dtype=np.float32).reshape(5, 4, 3, 1).transpose(3, 2, 1, 0), X.shape)
    np.testing.assert_array_equal(x.grad.numpy(), want)


@pytest.mark.parametrize(
    "pattern, sizes, message",
    [
        ("b c h w", {}, "exactly one '->'"),
        ("b c h w -> b c h", {}, "w only on the left"),
        ("b c h w -> b c h w x", {}, "x only on the right"),
        ("b b h w -> b b h w", {}, "b given twice on the left"),
        ("b c h -> b c h", {}, "the left side names 3 axes, the tensor has 4"),
        ("b c (h1 h2) w -> b c h1 h2 w", {}, "h1, h2 unknown"),
        ("b c (h1 h2) w -> b c h1 h2 w", {"h1": 3}, "can't split into (h1 h2) with h1=3"),
        ("b c h w -> b c h w", {"b": 3}, "b=3, but axis 0 has size 2"),
        ("b c h w -> b c h w", {"k": 3}, "sizes given for k"),
        ("b 1 h w -> b h w", {}, "axis 1 has size 3, the pattern says 1"),
        ("b (c ...) -> b c ...", {}, "'...' can't be inside a group on the left"),
        ("b c h 2 -> b c h", {}, "'2' is not an axis name"),
        ("b (c (h w)) -> b c h w", {}, "can't nest"),
        ("b c (h w -> b c h w", {}, "'(' without ')'"),
        ("b ... -> b", {}, "'...' on one side only"),
    ],
)
def test_bad_patterns_say_what_is_wrong(pattern, sizes, message):
    with pytest.raises(ArgumentError, match=re.escape(message)):
        Tensor(X).rearrange(pattern, **sizes)

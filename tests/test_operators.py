"""Python's operators on a Tensor (tensor/operators.py) compared with PyTorch's: what Python falls back to for operands
no tensor op takes (sequence repetition, identity for ==), and numpy arrays on either side of @."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor


@pytest.mark.parametrize(
    "build",
    [
        lambda n: [1, 2] * n,
        lambda n: n * [0],
        lambda n: [None] * n,
        lambda n: "-" * n,
        lambda n: n * "ab",
        lambda n: (0,) * n,
        lambda n: b"x" * n,
    ],
)
def test_a_sequence_times_an_int_tensor_repeats_as_torchs(build):
    # Python repeats a sequence by the tensor's __index__, as for torch's tensors (not an elementwise product)
    for n in (2, 0, 3):
        assert build(Tensor(n)) == build(torch.tensor(n)) == build(n)
    assert build(Tensor([2])) == build(2)


def test_a_sequence_times_a_tensor_that_is_no_integer_says_why():
    for t in (Tensor([1.0, 2.0]), Tensor(2.0), Tensor([1, 2])):
        with pytest.raises(TypeError, match=r"can't multiply a list by .* Tensor of shape .* make the list a Tensor"):
            [1, 2] * t
        with pytest.raises(TypeError, match="can't multiply a tuple"):
            t * (1, 2)
    # an elementwise product with a list is a Tensor's: by the method, or with the list made a Tensor
    assert Tensor([1, 2]).mul([3, 4]).tolist() == [3, 8]
    assert (Tensor([3, 4]) * Tensor([1, 2])).tolist() == [3, 8]


def test_equality_with_what_is_no_number_is_pythons_identity_test():
    t, tt = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    for other in ("auto", object(), None, {"a": 1}):
        assert (t == other) is (tt == other) is False
        assert (t != other) is (tt != other) is True
    assert t in ("mean", t) and ["a", t].index(t) == 1 and ["a", t].count("a") == 1
    # numbers, lists and arrays compare elementwise as before
    assert (t == 2.0).tolist() == [False, True] and (t != np.float32(1.0)).tolist() == [False, True]
    assert (t == [1.0, 3.0]).tolist() == [True, False] and (t == np.array([1.0, 2.0])).tolist() == [True, True]
    with pytest.raises(TypeError, match="`in` looks for a number or a Tensor in a Tensor, got str"):
        _ = "a" in t


def test_an_ndarray_on_either_side_of_matmul_is_taken_as_by_mul():
    # `ndarray * t` is a Tensor (numpy defers to the tensor's operators); `ndarray @ t` is one too, in the graph
    w = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    x_np = np.array([[0.5, -1.0], [2.0, 1.5]], dtype=np.float32)
    for left in (True, False):
        x = Tensor(x_np, requires_grad=True)
        out = w @ x if left else x @ w
        assert isinstance(out, Tensor) and out.requires_grad
        np.testing.assert_allclose(out.numpy(), w @ x_np if left else x_np @ w)
        out.sum().backward()
        want = w.T @ np.ones((2, 2), np.float32) if left else np.ones((2, 2), np.float32) @ w.T
        np.testing.assert_allclose(x.grad.numpy(), want)
    assert isinstance(w * Tensor(x_np), Tensor)


def test_matmul_with_a_list_gets_pythons_type_error():
    # as torch's: Python's own message, not an AttributeError from inside
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for @: 'list' and 'Tensor'"):
        [[1.0, 0.0], [0.0, 1.0]] @ Tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for @: 'Tensor' and 'list'"):
        Tensor([[1.0, 2.0], [3.0, 4.0]]) @ [[1.0], [1.0]]
    with pytest.raises(TypeError, match="matmul: the other operand must be a Tensor, got ndarray"):
        Tensor([[1.0]]).matmul(np.ones((1, 1)), reverse=True)

"""Issue 15: bad sizes, wrapped operands, device-computed indices out of range, and numerics edge cases.

Each answer is compared with PyTorch (CPU) where PyTorch gives one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes

# ---- numerics (item 7)


def test_expm1_near_overflow():
    x = np.array([88.0, 88.7, 89.0, -100.0, 0.5, -0.5, 1e-7, -1e-10, 0.0, 20.0, 0.7, -0.7], np.float32)
    np.testing.assert_allclose(Tensor(x).expm1().numpy(), torch.from_numpy(x).expm1().numpy(), rtol=2e-6)


def test_mod_by_infinity():
    a = np.array([5.0, 5.0, -5.0, -5.0, 0.0, -0.0, 2.5, math.inf, math.nan], np.float32)
    b = np.array([math.inf, -math.inf, math.inf, -math.inf, math.inf, math.inf, 2.0, math.inf, math.inf], np.float32)
    ours, ref = (Tensor(a) % Tensor(b)).numpy(), (torch.from_numpy(a) % torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))
    assert (Tensor([5.0]) % math.inf).tolist() == [5.0]


def test_abs_of_zeros_is_positive_zero():
    out = Tensor([0.0, -0.0, -1.5, math.nan, -math.inf]).abs().numpy()
    assert not np.signbit(out[:2]).any()
    assert out[2] == 1.5 and math.isnan(out[3]) and out[4] == math.inf
    assert Tensor([-3, 0, 4]).abs().tolist() == [3, 0, 4]


def test_abs_gradient_at_zero_like_torch():
    x = Tensor([-2.0, 0.0, 3.0], requires_grad=True)
    x.abs().sum().backward()
    assert x.grad is not None and x.grad.tolist() == [-1.0, 0.0, 1.0]


def test_tan_next_to_the_poles():
    p = np.float32(math.pi / 2)
    x = np.array(
        [p, np.nextafter(p, np.float32(0)), -p, 3 * p, np.float32(4.712389), 1e-30, 0.0, 1.0, -2.5, 100.0, 9523.763],
        np.float32,
    )
    rng = np.random.default_rng(0)
    x = np.concatenate([x, rng.uniform(-50, 50, 500).astype(np.float32)])
    ours, ref = Tensor(x).tan().numpy(), torch.from_numpy(x).tan().numpy()
    np.testing.assert_allclose(ours, ref, rtol=3e-6, atol=1e-30)
    assert math.isnan(Tensor([math.inf]).tan().item())


def test_tan_half_precision():
    x = np.linspace(-20, 20, 101).astype(np.float16)
    np.testing.assert_allclose(
        Tensor(x).tan().numpy().astype(np.float32), torch.from_numpy(x).tan().numpy().astype(np.float32), rtol=1e-3
    )


def test_integer_tensor_to_negative_integer_power_raises():
    with pytest.raises(ValueError, match="a negative exponent of an integer tensor"):
        Tensor([1, 2]) ** -1
    with pytest.raises(ValueError, match="a negative exponent of an integer tensor"):
        Tensor([1, 2]).pow(-3)
    # floats, float exponents and tensors of exponents are fine (torch: the latter truncate)
    assert (Tensor([2.0]) ** -1).tolist() == [0.5]
    assert (Tensor([2]) ** -1.0).tolist() == [0.5]
    assert (Tensor([2, 1]) ** Tensor([-1, -1])).tolist() == (torch.tensor([2, 1]) ** torch.tensor([-1, -1])).tolist()


# ---- sizes that must be positive, padding that must not be negative (item 6)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda x: x.max_pool2d(0), "max_pool2d: kernel_size must be positive"),
        (lambda x: x.max_pool2d(2, stride=0), "max_pool2d: stride must be positive"),
        (lambda x: x.avg_pool2d(2, stride=(1, 0)), "avg_pool2d: stride must be positive"),
        (lambda x: x.avg_pool2d((2, 2), dilation=0), "avg_pool2d: dilation must be positive"),
        (lambda x: x.max_pool2d(-1), "max_pool2d: kernel_size must be positive"),
        (lambda x: x.interpolate(size=(0, 0)), "interpolate: size must be positive"),
        (lambda x: x.interpolate(size=(-1, 2), mode="nearest"), "interpolate: size must be positive"),
        (lambda x: x.conv2d(Tensor.ones(1, 1, 2, 2), padding=-1), "conv2d: padding must not be negative"),
        (lambda x: x.conv2d(Tensor.ones(1, 1, 2, 2), padding=(0, 1, -1, 0)), "conv2d: padding must not be negative"),
        (lambda x: x.conv2d(Tensor.ones(1, 1, 2, 2), stride=0), "conv2d: stride must be positive"),
        (lambda x: x.conv2d(Tensor.ones(1, 1, 2, 2), dilation=0), "conv2d: dilation must be positive"),
        (lambda x: x.conv_transpose2d(Tensor.ones(1, 1, 2, 2), stride=0), "conv_transpose2d: stride must be positive"),
        (lambda x: x.conv_transpose2d(Tensor.ones(1, 1, 2, 2), padding=-1), "conv_transpose2d: padding"),
    ],
)
def test_bad_window_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call(Tensor.ones(1, 1, 4, 4))


def test_good_window_parameters_still_work():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    tx = torch.from_numpy(x)
    ours = Tensor(x).max_pool2d(2, stride=1).numpy()
    np.testing.assert_array_equal(ours, torch.nn.functional.max_pool2d(tx, 2, stride=1).numpy())
    ours = Tensor(x).conv2d(Tensor.ones(1, 1, 2, 2), padding=1).numpy()
    np.testing.assert_array_equal(ours, torch.nn.functional.conv2d(tx, torch.ones(1, 1, 2, 2), padding=1).numpy())


# ---- Python int operands outside the tensor's dtype (item 4)


def test_int_operand_too_big_for_the_dtype_widens_instead_of_wrapping():
    out = Tensor([1, 2]) + 2**40
    assert out.tolist() == [2**40 + 1, 2**40 + 2] and out.dtype == dtypes.int64
    assert (Tensor([5, 6]) < 2**32).tolist() == [True, True]
    assert (Tensor([5, 6]) == 2**40).tolist() == [False, False]
    assert (2**40 - Tensor([5, 6])).tolist() == [2**40 - 5, 2**40 - 6]
    assert Tensor([1, 2]).maximum(2**40).tolist() == [2**40, 2**40]
    assert (Tensor([5, 6], dtype=dtypes.int8) + 300).tolist() == [305, 306]
    assert (Tensor([True]) + 2**40).tolist() == [2**40 + 1]
    # same answers as torch's int64 tensors
    ref = (torch.tensor([5, -6]) * 2**35).tolist()
    assert (Tensor([5, -6]) * 2**35).tolist() == ref


def test_int_operand_that_fits_keeps_the_dtype():
    assert (Tensor([5, 6], dtype=dtypes.int8) + 100).dtype == dtypes.int8
    assert (Tensor([5, 6], dtype=dtypes.uint8) - 1).tolist() == [4, 5]
    # negation of unsigned ints still wraps as in torch
    assert (-Tensor([5, 0], dtype=dtypes.uint8)).tolist() == (-torch.tensor([5, 0], dtype=torch.uint8)).tolist()
    assert (Tensor([1], dtype=dtypes.uint64) + 2**63).tolist() == [2**63 + 1]


def test_a_number_the_dtype_cant_hold_raises_torchs_error_type():
    # torch raises RuntimeError (ValueError for an int past int64) where a number is stored into a dtype that can't
    # hold it; ours was a bare OverflowError, which `except RuntimeError` written for torch didn't catch
    cases = [
        lambda m, dt: m.tensor(300, dtype=dt.uint8),
        lambda m, dt: m.tensor([1, 300], dtype=dt.uint8),
        lambda m, dt: m.tensor([[1, -200]], dtype=dt.int8),
        lambda m, dt: m.tensor([2**64]),
        lambda m, dt: m.full((2,), 300, dtype=dt.uint8),
        lambda m, dt: m.zeros(2, dtype=dt.uint8).fill_(256),
        lambda m, dt: m.zeros(2, dtype=dt.int8).clamp(max=1000),
        lambda m, dt: m.zeros(2, dtype=dt.float16).fill_(1e6),
        lambda m, dt: m.zeros(2, dtype=dt.uint8).masked_fill(m.zeros(2, dtype=dt.bool), 256),
    ]
    for make in cases:
        with pytest.raises((RuntimeError, ValueError)) as theirs:
            make(torch, torch)
        with pytest.raises(type(theirs.value)) as ours:
            make(Tensor, dtypes)
        assert isinstance(ours.value, OverflowError)


def test_int_operand_no_dtype_holds_raises():
    with pytest.raises(OverflowError, match="add: the Python int .* doesn't fit any integer dtype"):
        Tensor([1, 2]) + 2**70
    with pytest.raises(OverflowError, match="lt: .*doesn't fit"):
        _ = Tensor([1, 2]) < -(2**64)
    with pytest.raises(OverflowError, match="too large for any float dtype"):
        Tensor([1.0]) + 2**2000
    assert (Tensor([1.0]) + 2**70).tolist() == [float(2**70)]


# ---- indices computed on the device (item 2)


def _computed(values):
    # an int tensor whose values only exist on the device (a lazy kernel output, not a host buffer)
    return Tensor(values) * 1 + 0


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: Tensor([1.0, 2.0, 3.0])[_computed([0, 5])],
            r"getitem: index 5 is out of bounds for axis 0 with size 3",
        ),
        (lambda: Tensor([1.0, 2.0, 3.0])[_computed([-4])], r"getitem: index -4 is out of bounds"),
        (lambda: Tensor([[1, 2], [3, 4]]).gather(1, _computed([[0, 5], [1, 0]])), r"gather: index 5 .* size 2"),
        (lambda: Tensor([[1, 2], [3, 4]]).gather(1, _computed([[0, -1], [1, 0]])), r"gather: index -1 .* size 2"),
        (
            lambda: Tensor([[1.0, 2, 3]]).cross_entropy(_computed([5])),
            r"cross_entropy: target 5 is out of bounds for 3",
        ),
        (lambda: Tensor([[1.0, 2, 3]]).cross_entropy(Tensor([5])), r"cross_entropy: target 5 is out of bounds for 3"),
        (lambda: Tensor([[-1.0, -2.0]]).nll_loss(_computed([-1])), r"nll_loss: target -1 is out of bounds for 2"),
        (lambda: _computed([-1, 1]).one_hot(3), r"one_hot: class -1 is out of range \[0, 3\)"),
        (lambda: _computed([3]).one_hot(3), r"one_hot: class 3 is out of range"),
        (lambda: Tensor([-1, 1]).one_hot(3), r"one_hot: class -1 is out of range"),
    ],
)
def test_out_of_range_indices_raise(call, match):
    with pytest.raises(IndexError, match=match):
        call().realize()


def test_in_range_computed_indices_and_ignore_index():
    x = Tensor([1.0, 2.0, 3.0])
    assert x[_computed([0, -3, 2])].tolist() == [1.0, 1.0, 3.0]
    assert _computed([0, 2]).one_hot(3).tolist() == [[1, 0, 0], [0, 0, 1]]
    logits = np.array([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]], np.float32)
    ours = Tensor(logits).cross_entropy(_computed([2, -100])).item()
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.tensor([2, -100])).item()
    assert ours == pytest.approx(ref, rel=1e-6)


def test_check_index_opt_out():
    from uopkit.helpers import Context

    with Context(CHECK_INDEX=0):
        # no read back: an index out of range selects nothing (zeros), as documented
        assert Tensor([1.0, 2.0, 3.0])[_computed([0, 5])].tolist() == [1.0, 0.0]
    with pytest.raises(IndexError):
        Tensor([1.0, 2.0, 3.0])[_computed([0, 5])].realize()


def test_index_check_survives_jit_replay():
    from uopkit.jit import TinyJit

    @TinyJit
    def pick(x, i):
        return x[i * 1].realize()

    x = Tensor([1.0, 2.0, 3.0])
    for _ in range(3):
        assert pick(x, Tensor([0, 2])).tolist() == [1.0, 3.0]
    assert pick.captured is not None
    with pytest.raises(IndexError, match="getitem: index 7 is out of bounds"):
        pick(x, Tensor([0, 7]))
    assert pick(x, Tensor([1, 1])).tolist() == [2.0, 2.0]


def test_a_stored_index_given_to_a_jit_is_checked_on_every_replay():
    # the index is the JIT's input itself (a stored buffer): checked on the host while capturing, and by the captured
    # min/max read back on every replay (a replay out of range gave zeros), for getitem and nn.Embedding
    from uopkit.jit import TinyJit
    from uopkit.nn import Embedding

    x, emb = Tensor([1.0, 2.0, 3.0]), Embedding(3, 2)
    pick, look = TinyJit(lambda i: x[i].realize()), TinyJit(lambda i: emb(i).realize())
    for _ in range(3):
        assert pick(Tensor([0, 2]).realize()).tolist() == [1.0, 3.0]
        look(Tensor([0, 2]).realize())
    assert pick.captured is not None and look.captured is not None
    with pytest.raises(IndexError, match="getitem: index 7 is out of bounds"):
        pick(Tensor([0, 7]).realize())
    with pytest.raises(IndexError, match=r"Embedding\(3, 2\): index -1 is out of"):
        look(Tensor([-1, 0]).realize())
    assert pick(Tensor([1, 1]).realize()).tolist() == [2.0, 2.0]


def test_exp_near_the_top_of_the_float32_range():
    # 2**n alone overflows for x just under log(FLT_MAX) (n = 128) though e**x is finite: built in two halves
    x = np.array([88.0, 88.4, 88.7, 88.72, 88.73, 89.0, -87.4, -100.0, -103.0, math.inf, -math.inf], np.float32)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    np.testing.assert_allclose(Tensor(x).exp().numpy(), ref, rtol=3e-7, atol=0)

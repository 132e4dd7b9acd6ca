"""The element of one rank of a long row by a radix select (`uopkit.tensor.select`), not a sort: kthvalue, median and
median(dim) as torch's, the element exactly the one the stable sort puts there (a zero's sign), in a pass per digit
of the key rather than a bitonic network; and multinomial's draws without replacement taken without sorting whole
rows on the host, the same draws as that sort's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import relaunch, select
from uopkit.tensor.creation import _first_in_stable_order
from uopkit.uop.ops import Ops

from .test_bitonic import _with_ties_and_specials  # (repeated values, signed zeros, NaNs)

_R = np.random.default_rng(0)


def _kernels(*ts: Tensor) -> int:
    return sum(item.ast.op is not Ops.COPY for item in create_schedule(kernelize_tensors(list(ts))))


def _first_holding(x: np.ndarray, value: np.ndarray) -> np.ndarray:
    # the first position along the last axis holding `value` (a NaN holding a NaN): ours (torch's among ties is
    # unspecified)
    hit = (x == value[..., None]) | (np.isnan(x) & np.isnan(value)[..., None])
    return hit.argmax(-1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8"])
def test_every_rank_is_the_stable_sorts_element(monkeypatch, dtype):
    # short rows selected too: each rank's position is the one torch's stable sort puts there (ties by position, -0.0
    # and 0.0 as equals, NaNs last)
    monkeypatch.setattr(select, "SELECT_MIN", 0)
    monkeypatch.setattr(relaunch, "ENABLED", False)
    if dtype.startswith("float"):
        x = _with_ties_and_specials(_R.standard_normal((2, 150)).astype(dtype))
    else:
        x = _R.integers(0, 9, (2, 150)).astype(dtype)
    want = torch.tensor(x).sort(dim=-1, stable=True)[1].numpy()
    t = Tensor(x)
    got = np.concatenate([select.position_of_rank(t, r).numpy() for r in range(x.shape[-1])], -1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(20000,), (3, 9000)])
def test_long_rows_kthvalue_and_medians_as_torch(shape):
    assert shape[-1] > select.SELECT_MIN
    x = _with_ties_and_specials(_R.standard_normal(shape).astype(np.float32))
    # a row of zeros of both signs around the middle (median() is the sorted element, its sign too) and one of NaNs
    x[..., -1] = np.nan
    zeros = x.copy()
    zeros[..., : shape[-1] // 2 + 50] = np.where(_R.random(shape[-1] // 2 + 50) < 0.5, -0.0, 0.0)
    n = shape[-1]
    for data in (x, zeros, np.nan_to_num(x, nan=1.5)):
        t, tt = Tensor(data), torch.tensor(data)
        for k in (1, 2, n // 2, n - 1, n):
            v, i = t.kthvalue(k)
            tv = tt.kthvalue(k)[0].numpy()
            np.testing.assert_array_equal(v.numpy(), tv)
            np.testing.assert_array_equal(i.numpy(), _first_holding(data, tv))
        v, i = t.median(-1)
        tv = tt.median(-1)[0].numpy()
        np.testing.assert_array_equal(v.numpy(), tv)
        np.testing.assert_array_equal(i.numpy(), _first_holding(data, tv))
        # median() over all elements: the element the stable sort puts in the middle, sign of zero included
        flat = data.reshape(-1)
        middle = flat[np.argsort(flat, kind="stable")[(flat.size - 1) // 2]]
        got = t.median().numpy()
        if np.isnan(flat).any():
            assert np.isnan(got)
        else:
            np.testing.assert_array_equal(np.signbit(got), np.signbit(middle))
            np.testing.assert_array_equal(got, middle)


def test_a_gradient_goes_to_the_selected_element():
    x_np = _R.standard_normal(10000).astype(np.float32)
    x_np[::3] = x_np[1]
    x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    (x.kthvalue(4000)[0] * 3).backward()
    (tx.kthvalue(4000)[0] * 3).backward()
    # (the first position holding the value gets it; torch's own pick among ties is unspecified)
    want = np.zeros_like(x_np)
    want[_first_holding(x_np, np.array(tx.kthvalue(4000)[0].item(), np.float32))] = 3
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x.grad = None
    x.median().backward()
    tx.grad = None
    tx.median().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_a_long_rows_kthvalue_takes_a_pass_per_digit_not_a_sorting_network(monkeypatch):
    # 20000 floats: keys of 32 + 15 bits, 12 passes (17 kernels, the keys and gathers too); the bitonic network
    # over 2**15 took 68
    monkeypatch.setattr(relaunch, "ENABLED", False)
    x = Tensor(_R.standard_normal(20000).astype(np.float32)).realize()
    passes = -(-(32 + 15) // select.DIGIT_BITS)
    assert _kernels(*x.kthvalue(700)) <= passes + 6


@pytest.mark.parametrize("k", [1, 3, 40])
def test_first_draws_without_replacement_as_a_stable_argsort(k):
    # multinomial's exponential races: the k smallest keys of each row in a stable argsort's order, ties (zero
    # weights give inf, rounded keys repeat) by position
    for trial in range(40):
        n = int(_R.integers(2048, 5000))  # (shorter rows take the argsort itself)
        with np.errstate(divide="ignore"):
            keys = _R.exponential(size=(3, n)) / _R.choice([0.0, 0.5, 1.0, 2.0], size=(3, n))
        if trial % 2:
            keys = np.round(keys, 1)
        if trial == 5:
            keys[1, 2] = np.nan
        want = np.argsort(keys, -1, kind="stable")[:, :k]
        np.testing.assert_array_equal(_first_in_stable_order(keys, k), want)

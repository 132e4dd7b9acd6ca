"""topk of a few (TOURNAMENT_MIN_K <= k <= TOURNAMENT_MAX_K) along rows past SORT_BY_RANK, by a tournament of blocks
over the k chunks with the largest maxima (`uopkit.tensor.tournament`): values as torch's, indices as a stable sort's
(ties by position, NaN the largest), gradients to the picked positions, in a few kernels whatever k is."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import relaunch, tournament
from uopkit.uop.ops import Ops

from .test_bitonic import _with_ties_and_specials  # (repeated values, signed zeros, NaNs)

_R = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _graphs_built(monkeypatch):
    # each call builds its graph (whose kernels are counted here): kernels captured on an earlier call, perhaps of
    # another path, are not launched again (`uopkit.tensor.relaunch`)
    monkeypatch.setattr(relaunch, "ENABLED", False)


def _assert_topk_as_torch(x: np.ndarray, k: int, dim: int = -1) -> None:
    for largest in (True, False):
        v, i = Tensor(x).topk(k, dim, largest=largest)
        tv, _ = torch.tensor(x).topk(k, dim, largest=largest)
        _, si = torch.tensor(x).sort(dim=dim, descending=largest, stable=True)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), si.narrow(dim, 0, k).numpy())


@pytest.mark.parametrize("k", [5, 9, 50, 128])
@pytest.mark.parametrize("n", [300, 1000, 5003])
def test_floats_with_ties_nans_and_signed_zeros_as_torch(n, k):
    x = _with_ties_and_specials(_R.standard_normal((3, n)).astype(np.float32))
    # a row of few values (ties everywhere) with infinities across chunk borders, and a row of NaNs but one -inf
    x[1] = _R.integers(-3, 4, n)
    x[1, 30:70] = math.inf
    x[1, 95:101] = -math.inf
    x[2] = math.nan
    x[2, n // 2] = -math.inf
    _assert_topk_as_torch(x, k)


def test_rows_whose_largest_share_a_chunk():
    # the k largest all in one chunk or in the last (padded) one: ascending, descending and constant rows
    n = 4000
    x = np.stack([np.arange(n), -np.arange(n), np.zeros(n), np.arange(n) % 7]).astype(np.float32)
    assert tournament.chunk_size(n, 20) > 1
    for k in (9, 20, 64):
        _assert_topk_as_torch(x, k)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16, np.float16])
def test_other_dtypes_and_inner_dims(dtype):
    x = _R.integers(0, 100, (2, 700, 3)).astype(dtype)
    _assert_topk_as_torch(x, 9, dim=1)
    if dtype == np.int32:
        x = _R.integers(-(2**31), 2**31 - 1, (2, 900), dtype=np.int64).astype(np.int32)
        x[0, 7] = np.iinfo(np.int32).min
        x[1, 8] = np.iinfo(np.int32).max
        _assert_topk_as_torch(x, 40)


def test_gradient_goes_to_the_picked_positions():
    x = _R.integers(-4, 5, (4, 2000)).astype(np.float32)
    x[0, 11] = math.nan
    ours = Tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    v, i = ours.topk(30)
    weights = _R.standard_normal(v.shape).astype(np.float32)
    (v * Tensor(weights)).sum().backward()
    want = np.zeros_like(x)
    np.put_along_axis(want, i.numpy().astype(np.int64), weights, axis=1)
    np.testing.assert_array_equal(ours.grad.numpy(), want)
    _, si = theirs.detach().sort(dim=-1, descending=True, stable=True)
    tv = theirs.gather(1, si[:, :30])
    (tv * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def _kernels(*ts: Tensor) -> int:
    return sum(item.ast.op is not Ops.COPY for item in create_schedule(kernelize_tensors(list(ts))))


def test_a_few_kernels_whatever_k():
    # sampling's top-k of a vocabulary row: the k rounds of selection were a kernel each (51 for k = 50)
    x = Tensor(_R.standard_normal((1, 32000)).astype(np.float32)).realize()
    counts = [_kernels(*x.topk(k)) for k in (9, 50, 128)]
    assert max(counts) <= 20, counts

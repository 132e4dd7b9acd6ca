"""Sorts of rows past SORT_BY_RANK up to SORT_BY_BLOCKS, ranked per block and across the sorted blocks by binary
searches (`uopkit.tensor.blocksort`): values and stable indices as torch's, in a handful of kernels whatever the
length, and the searches' gathers at computed positions fused into one kernel each (`uopkit.schedule.grouper`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor, dtypes
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import blocksort, reduce, relaunch
from uopkit.uop.ops import Ops

from .test_bitonic import _with_ties_and_specials  # (repeated values, signed zeros, NaNs)

_R = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _graphs_built(monkeypatch):
    # each call builds its graph (whose kernels are counted here): kernels captured on an earlier call, perhaps of
    # another path, are not launched again (`uopkit.tensor.relaunch`)
    monkeypatch.setattr(relaunch, "ENABLED", False)


def _assert_sorts_as_torch(x: np.ndarray, dim: int = -1) -> None:
    for descending in (False, True):
        v, i = Tensor(x).sort(dim, descending=descending)
        tv, ti = torch.tensor(x).sort(dim=dim, descending=descending, stable=True)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(tv.numpy()))


def _kernels(*ts: Tensor) -> int:
    return sum(item.ast.op is not Ops.COPY for item in create_schedule(kernelize_tensors(list(ts))))


# lengths: one block padded (257 in 128s: 3 blocks), whole blocks (512 = 2 x 256), padded blocks of 512 and of 1024
@pytest.mark.parametrize("n", [257, 512, 3000, 6000])
def test_floats_with_ties_nans_and_signed_zeros_sort_as_torch(n):
    assert reduce.SORT_BY_RANK < n <= reduce.SORT_BY_BLOCKS
    _assert_sorts_as_torch(_with_ties_and_specials(_R.standard_normal((2, n)).astype(np.float32)))


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64", "bool", "float16"])
def test_other_dtypes_sort_as_torch(dtype):
    # one order key (32-bit and smaller dtypes) or a pair of value and position (64-bit ones) per element
    n = 700
    if dtype == "bool":
        x = _R.integers(0, 2, (3, n)).astype(bool)
    elif dtype.startswith("int"):
        x = (_R.integers(-(2**40), 2**40, (3, n)) // 2**35).astype(dtype)
        x[0, :4] = [np.iinfo(dtype).min, np.iinfo(dtype).max, np.iinfo(dtype).min, 0]
    else:
        x = _with_ties_and_specials(_R.standard_normal((3, n)).astype(dtype))
    _assert_sorts_as_torch(x)


def test_a_sort_along_another_dim_and_its_gradient():
    _assert_sorts_as_torch(_R.standard_normal((900, 2, 3)).astype(np.float32), dim=0)
    y = _with_ties_and_specials(_R.standard_normal(1000).astype(np.float32))
    ours, theirs = Tensor(y, requires_grad=True), torch.tensor(y, requires_grad=True)
    weights = _R.standard_normal(1000).astype(np.float32)
    (ours.sort(descending=True)[0] * Tensor(weights)).sum().backward()
    (theirs.sort(descending=True, stable=True)[0] * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def test_topk_and_quantiles_through_the_sort():
    # topk of more than its rounds of selection sorts the row
    x = _R.standard_normal((2, 1000)).astype(np.float32)
    for largest in (True, False):
        v, i = Tensor(x).topk(100, largest=largest)
        tv, ti = torch.tensor(x).topk(100, largest=largest)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    q = Tensor(x).quantile(Tensor([0.1, 0.5, 0.9]), dim=-1).numpy()
    np.testing.assert_allclose(q, torch.tensor(x).quantile(torch.tensor([0.1, 0.5, 0.9]), dim=-1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("n", [300, 1000, 5000])
def test_a_sort_takes_a_handful_of_kernels_whatever_its_length(n):
    # the padded keys, the ranks in blocks, the blocks in order, the counts before each element per block, their sum,
    # each element written at its rank (where the device runs a scatter's writes one by one, the CPU; elsewhere the
    # positions per block and their sum) and the values' gather: 7 kernels (8). The bitonic network took 32 for 300
    # (two exchanges a kernel), 56 for 5000; without the searches fused, a kernel per gather (40 and more)
    x = Tensor(_R.standard_normal(n).astype(np.float32)).realize()
    searches = 0 if blocksort.writes_one_by_one(x.device) else 1
    assert _kernels(*x.sort()) == 7 + searches
    assert _kernels(x.argsort(descending=True)) == 6 + searches


@pytest.mark.parametrize("n", [300, 3000])
def test_positions_found_by_searches_where_scatters_are_compares(monkeypatch, n):
    # (a GPU-style device's scatter is a compare per target and write: the positions by searches there)
    monkeypatch.setattr(blocksort, "writes_one_by_one", lambda device: False)
    x = _R.standard_normal(n).astype(np.float32)
    assert _kernels(Tensor(x).argsort(descending=True)) == 7
    _assert_sorts_as_torch(_with_ties_and_specials(_R.standard_normal((2, n)).astype(np.float32)))
    _assert_sorts_as_torch(_R.integers(-5, 5, (2, n)).astype(np.int64))


def test_the_searches_are_loads_not_loops():
    # each step of a binary search gathers at the position the last one found: the one-hot sums fold into loads, and
    # the steps stay in one kernel (a kernel per step, or a step run as a loop over the block, was what the scheduler
    # made of them)
    blocks = Tensor(np.sort(_R.integers(0, 1000, (4, 256)))[:, ::-1].copy().astype(np.int64)).realize()
    counts = blocksort._counts_before(blocks, order="keys descending")[0]
    assert _kernels(counts) == 1
    b = blocks.numpy()
    want = (b[None, None, :, :] > b[:, :, None, None]).sum(-1)
    np.testing.assert_array_equal(counts.numpy(), want)


def test_block_size_follows_the_length():
    assert [blocksort.block_size(n) for n in (257, 1000, 3000, 8192)] == [128, 256, 512, 1024]
    # the rows' positions fit the sort's index dtype
    assert Tensor(_R.standard_normal(300).astype(np.float32)).argsort().dtype == dtypes.int32

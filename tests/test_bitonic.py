"""The bitonic sorting network behind long sorts (`uopkit.tensor.bitonic`): values and stable indices as torch's, with
its exchanges run several to a kernel, and how many kernels a sort schedules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import bitonic, reduce, relaunch
from uopkit.tensor.reduce import SORT_BY_RANK
from uopkit.uop.ops import Ops

_R = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _through_the_network(monkeypatch):
    # rows up to SORT_BY_BLOCKS are ranked per block (tests/test_blocksort.py): every row past SORT_BY_RANK goes
    # through the network here
    monkeypatch.setattr(reduce, "SORT_BY_BLOCKS", SORT_BY_RANK)
    # (and each call builds its graph: kernels captured from another path are not launched again, `relaunch`)
    monkeypatch.setattr(relaunch, "ENABLED", False)


def _with_ties_and_specials(x: np.ndarray) -> np.ndarray:
    # repeated values (stability), signed zeros and NaNs (sorted last, first when descending)
    x = x.copy()
    x[..., ::5] = x[..., 1:2]
    x[..., 3::11] = 0.0
    x[..., 4::13] = -0.0
    x[..., 6::17] = np.nan
    return x


def _assert_sorts_as_torch(x: np.ndarray) -> None:
    for descending in (False, True):
        v, i = Tensor(x).sort(-1, descending=descending)
        tv, ti = torch.tensor(x).sort(dim=-1, descending=descending, stable=True)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(tv.numpy()))


@pytest.mark.parametrize("per_kernel", [1, 2, 3])
@pytest.mark.parametrize("n", [SORT_BY_RANK + 1, 1500])
def test_exchanges_run_together_sort_as_torch(monkeypatch, per_kernel, n):
    # runs of 1, 2 or 3 exchanges a kernel (a group of 2, 4 or 8 lanes; a merge's first run mirrored across all of
    # them), lengths padded to a power of two or not, several rows: the same values and stable indices as torch
    monkeypatch.setattr(bitonic, "EXCHANGES_PER_KERNEL", per_kernel)
    _assert_sorts_as_torch(_with_ties_and_specials(_R.standard_normal((3, n)).astype(np.float32)))
    # 32-bit ints (one order key) and int64 (the value and the position compared as a pair, two columns)
    _assert_sorts_as_torch(_R.integers(-20, 20, (2, n)).astype(np.int32))
    _assert_sorts_as_torch(_R.integers(-(2**40), 2**40, (2, n)).astype(np.int64) // 2**36)


def test_a_long_row_along_another_dim_sorts_as_torch():
    # a 1-D row of 5000 (padded to 8192: 13 merges, the last a run of one exchange) and a sort along dim 0
    _assert_sorts_as_torch(_with_ties_and_specials(_R.standard_normal(5000).astype(np.float32)))
    x = _R.standard_normal((700, 3)).astype(np.float64)
    v, i = Tensor(x).sort(0)
    tv, ti = torch.tensor(x).sort(dim=0, stable=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def _sort_kernels(t: Tensor) -> int:
    return sum(item.ast.op is not Ops.COPY for item in create_schedule(kernelize_tensors([t])))


@pytest.mark.parametrize("shape", [(4096,), (8, 2048)])
def test_a_sort_runs_two_exchanges_a_kernel(shape):
    # log2(n) merges of 1, 2, ... log2(n) exchanges: one kernel per exchange was 78 kernels for a row of 4096 (each
    # a buffer of the row's size, alive until the schedule ends); two a kernel, a merge of m exchanges is ceil(m / 2)
    # kernels, 42 for 4096, and the gather of the values one more
    assert bitonic.EXCHANGES_PER_KERNEL == 2
    x = Tensor(_R.standard_normal(shape).astype(np.float32)).realize()
    log_n = shape[-1].bit_length() - 1
    network = sum((m + 1) // 2 for m in range(1, log_n + 1))
    assert _sort_kernels(x.sort()[0]) == network + 1
    assert network + 1 < log_n * (log_n + 1) // 2

"""Sorts of 64-bit dtypes as two sorts of one key column, by the low then the high 32 bits of the value's order
(`uopkit.tensor.wordsort`): values and stable indices as torch's (numpy's for uint64), by blocks and by the network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopkit import Tensor
from uopkit.tensor import reduce, relaunch

_R = np.random.default_rng(0)

_FLOATS = np.array([np.nan, -0.0, 0.0, 1.5, -1.5, np.inf, -np.inf, 1e300, -1e-300, 2.0**40, 2.0**40 + 1])
_INTS = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0, 1, 2**32, 2**32 - 1, -(2**32), 5, 7 << 40])


def _rows(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    # few distinct values (stability), words that differ only in their high or only in their low half, extremes
    if dtype == "float64":
        return _R.choice(_FLOATS, size=shape)
    if dtype == "int64":
        return _R.choice(_INTS, size=shape)
    x = _R.integers(0, 2**64 - 1, size=shape, dtype=np.uint64)
    x[..., ::7], x[..., ::11], x[..., ::13] = 2**63, 0, 2**63 - 1
    return x


def _expected(x: np.ndarray, dim: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    if x.dtype == np.uint64:
        # (numpy's stable sort; descending: the stable ascending sort of the order reversed)
        order = np.argsort(~x if descending else x, axis=dim, kind="stable")
        return np.take_along_axis(x, order, axis=dim), order
    tv, ti = torch.from_numpy(x).sort(dim=dim, descending=descending, stable=True)
    return tv.numpy(), ti.numpy()


@pytest.mark.parametrize("network", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "int64", "uint64"])
def test_64_bit_sorts_as_torch(monkeypatch, dtype: str, network: bool):
    if network:
        # every row past SORT_BY_RANK through the bitonic network
        monkeypatch.setattr(reduce, "SORT_BY_BLOCKS", reduce.SORT_BY_RANK)
    for shape, dim in (((3, 700), -1), ((1500, 2), 0)):
        x = _rows(dtype, shape)
        for descending in (False, True):
            v, i = Tensor(x).sort(dim, descending=descending)
            want_v, want_i = _expected(x, dim, descending)
            np.testing.assert_array_equal(i.numpy(), want_i)
            np.testing.assert_array_equal(v.numpy(), want_v)
            if dtype == "float64":
                np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(want_v))


@pytest.mark.parametrize("n", [700, 3000])
def test_a_64_bit_sort_sorts_one_key_column(monkeypatch, n: int):
    # the value and the position compared as a pair, two columns: each exchange was two kernels comparing both (int64
    # sort of 10**5: ~500 ms, 2 busy cores); two single-column sorts are ~35 ms
    monkeypatch.setattr(reduce, "SORT_BY_BLOCKS", 1024)
    # (each call builds its graph: kernels captured before are not launched again, `relaunch`)
    monkeypatch.setattr(relaunch, "ENABLED", False)
    orders: list[str] = []
    for name in ("bitonic_descending", "sort_positions_by_blocks"):
        inner = getattr(reduce, name)

        def spy(columns, n, *rest, inner=inner):
            orders.append(rest[-1])
            return inner(columns, n, *rest)

        monkeypatch.setattr(reduce, name, spy)
    x = _R.integers(-(2**40), 2**40, (2, n)) // 2**30
    v, i = Tensor(x).sort(descending=True)
    tv, ti = torch.from_numpy(x).sort(descending=True, stable=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    assert orders == ["keys descending"] * 2


def test_a_64_bit_sort_gradient_goes_to_the_indices():
    x = _R.choice(np.array([1.0, -2.0, 3.0, 0.5]), size=(2, 600))
    w = _R.standard_normal((2, 600))
    t = Tensor(x, requires_grad=True)
    (t.sort(descending=True)[0] * Tensor(w)).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    (tt.sort(descending=True, stable=True)[0] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy())

"""schedule/written_views.py: a table written slice by slice (a dynamic-programming recurrence) gives torch's gradient,
and its first backward() compiles the same kernels however many rows were written (a slice of the table reads the
write that reached it, not a where per row written, and each written value and its gradient is stored as the forward
pass stored it)."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.engine.realize import stats

torch = pytest.importorskip("torch")

ROWS, COLS = 8, 4


def _rows_table(cost_np: np.ndarray, rows: int) -> tuple[float, np.ndarray]:
    # edit-distance style: D[i, 1:] = min(D[i - 1, 1:], D[i - 1, :-1]) + cost[i - 1], written in place into a table;
    # (D[rows].sum(), its gradient)
    cost = Tensor(cost_np, requires_grad=True)
    table = Tensor.zeros(ROWS + 1, COLS + 1).contiguous()
    for i in range(1, rows + 1):
        table[i, 1:] = Tensor.minimum(table[i - 1, 1:], table[i - 1, :-1]) + cost[i - 1]
    loss = table[rows].sum()
    loss.backward()
    return float(loss.item()), cost.grad.numpy()


def _rows_torch(cost_np: np.ndarray, rows: int) -> tuple[float, np.ndarray]:
    # the same in torch, a row built from the one before it (torch's in-place writes would overwrite what its
    # backward saved)
    cost = torch.tensor(cost_np, requires_grad=True)
    row = torch.zeros(COLS + 1)
    for i in range(1, rows + 1):
        row = torch.cat([torch.zeros(1), torch.minimum(row[1:], row[:-1]) + cost[i - 1]])
    loss = row.sum()
    loss.backward()
    return float(loss.item()), cost.grad.numpy()


def test_a_table_written_row_by_row_compiles_the_same_kernels_for_more_rows() -> None:
    cost_np = np.random.default_rng(0).random((ROWS, COLS)).astype(np.float32)
    counts = []
    for rows in (ROWS // 2, ROWS):
        before = stats["kernels_compiled"]
        got = _rows_table(cost_np, rows)
        counts.append(stats["kernels_compiled"] - before)
        want = _rows_torch(cost_np, rows)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
    # twice the rows: only the kernel that adds up the rows' gradients into cost's is new (it reads one per row);
    # each row's write, its value computed again and its gradient run the kernels of the first rows (a row a kernel
    # before: every row compiled its own)
    assert counts[1] <= 2, counts


def test_a_table_written_column_by_column_gives_torchs_gradient() -> None:
    # each column from the one before it: one slice of it lies inside the last write, the other straddles its edge
    cost_np = np.random.default_rng(1).random((3, 4)).astype(np.float32)
    cost = Tensor(cost_np, requires_grad=True)
    table = Tensor.ones(4, 5).contiguous()
    for j in range(1, 5):
        table[1:, j] = table[1:, j - 1] * table[:-1, j - 1] + cost[:, j - 1]
    (table * table).sum().backward()
    cost_t = torch.tensor(cost_np, requires_grad=True)
    cols = [torch.ones(4)]
    for j in range(1, 5):
        cols.append(torch.cat([torch.ones(1), cols[-1][1:] * cols[-1][:-1] + cost_t[:, j - 1]]))
    table_t = torch.stack(cols, 1)
    (table_t * table_t).sum().backward()
    np.testing.assert_allclose(table.numpy(), table_t.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(cost.grad.numpy(), cost_t.grad.numpy(), rtol=1e-6)

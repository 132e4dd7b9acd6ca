"""Long float sums added in blocks inside their kernel (codegen/cascade.py): where the cut goes, which reduces get one,
and the accuracy it buys, compared with PyTorch's cascade sums."""

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes, nn
from uopkit.codegen import get_program
from uopkit.codegen.cascade import SUM_CHAIN, Cascade, best_cut
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops

torch = pytest.importorskip("torch")


def _programs(t: Tensor) -> list:
    items = create_schedule(kernelize_tensors([t]))
    return [get_program(item.ast, Device["CPU"].renderer) for item in items]


def _registers(t: Tensor) -> list[int]:
    # the accumulators of each kernel of `t` (a blocked sum has two: the block's partial and the total)
    return [sum(u.op is Ops.DEFINE_REG for u in p.uops) for p in _programs(t)]


def test_cut_balances_the_blocks_and_the_total():
    # short enough in one pass
    assert best_cut([((0, 0), SUM_CHAIN)], cut_innermost=True) is None
    # one loop of 12800 (lanes: a column sum): blocks of a few hundred of its iterations that divide it
    cut = best_cut([((0, 0), 12800)], cut_innermost=True)
    assert cut is not None and cut.part == (0, 0) and 128 <= cut.block <= 1024 and cut.whole == 12800
    assert 12800 % cut.block == 0
    # a one-slot accumulator's innermost loop is left whole (the renderer adds it in SIMD lanes)
    assert best_cut([((0, 0), 12800)], cut_innermost=False) is None
    # a BatchNorm's mean over (32, 20, 20): each of the 32 images one block
    assert best_cut([((0, 0), 32), ((1, 0), 20), ((1, 1), 20)], cut_innermost=False) == Cascade((0, 0), 1, 32)
    # a prime count: the blocks cover what they divide, the tail adds after them
    cut = best_cut([((0, 0), 12799)], cut_innermost=True)
    assert cut is not None and cut.whole < 12799 and cut.whole % cut.block == 0 and 12799 - cut.whole < cut.block


def test_only_long_float_sums_get_blocks():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 64)).astype(np.float32)
    assert _registers(Tensor(x).sum(0)) == [2]
    # a short one, an int sum, a max and a row sum (SIMD lanes) keep one accumulator
    assert _registers(Tensor(x[:200]).sum(0)) == [1]
    assert _registers(Tensor((x * 100).astype(np.int32)).sum(0)) == [1]
    assert _registers(Tensor(x).max(axis=0)) == [1]
    # a float64 sum drifts far below a float32 result's rounding
    assert _registers(Tensor(x.astype(np.float64)).sum(0)) == [1]
    assert _registers(Tensor(np.ascontiguousarray(x.T)).sum(1)) == [1]
    # a matmul into many outputs too (its accumulator tile fills the registers)
    a, b = rng.standard_normal((64, 2048)).astype(np.float32), rng.standard_normal((2048, 64)).astype(np.float32)
    assert _registers(Tensor(a) @ Tensor(b))[-1] == 1


def test_blocked_sums_agree_exactly_where_exact():
    # ints are unaffected (exact), and so is the max; a float column sum of integers is exact in any order
    rng = np.random.default_rng(1)
    xi = rng.integers(-1000, 1000, (12800, 64)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(xi).sum(0).numpy(), xi.sum(0))
    x = rng.standard_normal((12799, 64)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(x).max(axis=0).numpy(), x.max(0))
    xf = xi.astype(np.float32)
    np.testing.assert_array_equal(Tensor(xf).sum(0).numpy(), xi.sum(0).astype(np.float32))
    # a prime row count (blocks and a tail) sums every row once
    np.testing.assert_allclose(Tensor(x).sum(0).numpy(), x.astype(np.float64).sum(0), rtol=0, atol=2e-4)


def _column_mean_errors(n: int, seed: int) -> tuple[float, float]:
    # values far from 0 with a small spread: the running total dwarfs each addend, as in a mean
    x = (np.abs(np.random.default_rng(seed).standard_normal((n, 64))) * 0.5 + 4.0).astype(np.float32)
    ref = x.astype(np.float64).mean(0)
    ours = Tensor(x).mean(0).numpy()
    theirs = torch.tensor(x).mean(0).numpy()
    return float(np.abs(ours - ref).max() / 4.4), float(np.abs(theirs - ref).max() / 4.4)


@pytest.mark.parametrize("n", [1024, 4096, 12800, 16384, 12799])
def test_column_mean_is_as_accurate_as_torch(n):
    ours, theirs = _column_mean_errors(n, seed=n)
    # (one running sum: 1.3e-6 at 1024 rows, 4.6e-6 at 16384, 10-25x torch's)
    assert ours < 3 * max(theirs, 1.5e-7), (ours, theirs)


@pytest.mark.parametrize("shape", [(32, 8, 20, 20), (16, 64, 16, 16), (8, 32, 28, 28)])
def test_batchnorm_forward_error_near_torch(shape):
    # a per-channel mean over (0, 2, 3): a mean large against the spread amplifies its error in the output
    x = (np.abs(np.random.default_rng(0).standard_normal(shape)) * 0.5 + 4.0).astype(np.float32)
    ref = torch.nn.functional.batch_norm(torch.tensor(x, dtype=torch.float64), None, None, training=True).numpy()
    theirs = torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True).numpy()
    with Tensor.train():
        ours = nn.BatchNorm(shape[1])(Tensor(x)).numpy()
    # (one running sum per channel: 3-5e-5, 20-40x torch's; in blocks 3-4x)
    assert np.abs(ours - ref).max() < 6 * np.abs(theirs - ref).max()


def test_blocked_sum_keeps_its_kernel_count():
    x = Tensor(np.ones((12800, 64), np.float32))
    assert len(create_schedule(kernelize_tensors([x.mean(0)]))) == 1
    assert x.mean(0).numpy().dtype == np.float32 and x.sum(0).dtype == dtypes.float32

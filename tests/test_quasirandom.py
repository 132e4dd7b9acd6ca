"""uopkit.quasirandom.SobolEngine against torch.quasirandom.SobolEngine: unscrambled points bit for bit (draw,
draw_base2, fast_forward, reset, dtypes, out=), the scrambled sequence's balance and reproducibility, and the errors."""

import doctest

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes, quasirandom
from uopkit.quasirandom import SobolEngine

torch = pytest.importorskip("torch")


def test_docstring_examples():
    assert doctest.testmod(quasirandom).failed == 0


@pytest.mark.parametrize("dim", [1, 2, 5, 64, 1111])
def test_unscrambled_points_equal_torch(dim):
    ours, theirs = SobolEngine(dim), torch.quasirandom.SobolEngine(dim)
    np.testing.assert_array_equal(ours.draw(37).numpy(), theirs.draw(37).numpy())
    ours.fast_forward(1000)
    theirs.fast_forward(1000)
    a = ours.draw(300, dtype=dtypes.float64)
    b = theirs.draw(300, dtype=torch.float64)
    assert a.dtype == dtypes.float64
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert ours.num_generated == theirs.num_generated == 1337
    np.testing.assert_array_equal(ours.quasi.numpy(), theirs.quasi.numpy())


def test_draw_base2_reset_and_out():
    ours, theirs = SobolEngine(3), torch.quasirandom.SobolEngine(3)
    np.testing.assert_array_equal(ours.draw_base2(4).numpy(), theirs.draw_base2(4).numpy())
    np.testing.assert_array_equal(ours.draw_base2(4).numpy(), theirs.draw_base2(4).numpy())
    ours.reset()
    theirs.reset()
    out = Tensor.zeros(1)
    assert ours.draw(5, out=out) is out
    np.testing.assert_array_equal(out.numpy(), theirs.draw(5).numpy())
    assert ours.draw().shape == (1, 3) and ours.draw(0).shape == (0, 3)
    assert uopkit.quasirandom.SobolEngine is SobolEngine  # reached from a bare `import uopkit`, as torch.quasirandom


def test_scrambled_is_balanced_and_seeded():
    pts = SobolEngine(4, scramble=True, seed=7).draw_base2(6).numpy()
    assert pts.dtype == np.float32 and ((pts >= 0) & (pts < 1)).all()
    for d in range(4):  # every 1/64 stratum of each coordinate holds one point
        assert len(np.unique(np.floor(pts[:, d] * 64))) == 64
    cells = set(zip(np.floor(pts[:, 0] * 8).astype(int), np.floor(pts[:, 1] * 8).astype(int), strict=True))
    assert len(cells) == 64  # a (0, 6, 2)-net: every 1/8 x 1/8 cell holds one point
    np.testing.assert_array_equal(SobolEngine(4, scramble=True, seed=7).draw(64).numpy(), pts)
    assert not np.array_equal(SobolEngine(4, scramble=True, seed=8).draw(64).numpy(), pts)
    assert not np.array_equal(SobolEngine(4).draw(64).numpy(), pts)


def test_errors_as_torch():
    for engine in (SobolEngine, torch.quasirandom.SobolEngine):
        for dim in (0, 30000):
            with pytest.raises(ValueError):
                engine(dim)
        e = engine(2)
        e.draw(3)
        with pytest.raises(ValueError):
            e.draw_base2(2)

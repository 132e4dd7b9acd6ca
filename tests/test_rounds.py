"""rounds.repeated: a step applied to its own result, run by launching the first step's kernels again."""

import numpy as np

from uopkit import Tensor
from uopkit.engine.realize import stats
from uopkit.tensor import rounds


def _step(z: Tensor) -> Tensor:
    # a rotation of the rows plus a mix of the columns: each step's value depends on the last one's
    return (z[1:].cat(z[:1]) * 0.5 + z.sum(-1, keepdim=True) * 0.25).sqrt() + 1


def _by_numpy(z: np.ndarray, count: int) -> np.ndarray:
    for _ in range(count):
        z = np.sqrt(np.concatenate([z[1:], z[:1]]) * 0.5 + z.sum(-1, keepdims=True) * 0.25) + 1
    return z


def test_repeated_matches_the_steps_and_leaves_its_input_alone():
    rng = np.random.default_rng(0)
    for count in (0, 1, 2, 5):
        x = rng.uniform(0, 2, (6, 4))
        t = Tensor(x).realize()
        got = rounds.repeated(_step, t, count).numpy()
        np.testing.assert_allclose(got, _by_numpy(x, count), rtol=1e-12)
        np.testing.assert_array_equal(t.numpy(), x)
        lazy = rounds.repeated(_step, Tensor(x), count, graph=True).numpy()
        np.testing.assert_allclose(lazy, got, rtol=1e-12)


def test_a_later_call_launches_the_captured_kernels_without_a_graph():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 2, (5, 3))
    rounds.repeated(_step, Tensor(x).realize(), 4).numpy()
    t = Tensor(x + 1).realize()
    scheduled = stats["schedule_hits"] + stats["schedule_misses"]
    out = rounds.repeated(_step, t, 7)
    # (no step's graph scheduled: the input was realized already)
    assert stats["schedule_hits"] + stats["schedule_misses"] == scheduled
    np.testing.assert_allclose(out.numpy(), _by_numpy(x + 1, 7), rtol=1e-12)


def test_gradients_flow_through_the_graph_of_the_steps():
    x = np.random.default_rng(2).uniform(0, 2, (4, 3))
    t = Tensor(x, requires_grad=True)
    rounds.repeated(_step, t, 3, graph=True).sum().backward()
    eps, base = 1e-6, _by_numpy(x, 3).sum()
    bumped = x.copy()
    bumped[1, 2] += eps
    np.testing.assert_allclose(t.grad.numpy()[1, 2], (_by_numpy(bumped, 3).sum() - base) / eps, rtol=1e-4)


def test_a_capture_past_the_byte_limit_is_not_kept(monkeypatch):
    # (a capture holds its round's values between calls: one past the limit is dropped, and the next call builds the
    # first round's graph again)
    monkeypatch.setattr(rounds, "MAX_CAPTURED_BYTES", 0)
    x = np.random.default_rng(3).uniform(0, 2, (7, 3))
    for _ in range(2):
        np.testing.assert_allclose(rounds.repeated(_step, Tensor(x), 3).numpy(), _by_numpy(x, 3), rtol=1e-12)
        assert not any(key[0] is _step for key in rounds._captured)

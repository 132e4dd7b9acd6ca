"""Tensor.share_memory_ and Module.share_memory (tensor/sharing.py, device.SharedSegment): Hogwild training as in
pytorch/examples' mnist_hogwild, with fork and spawn, compared with torch's; a Queue round trip; copies of tensors not
shared; no segment left behind. The worker functions are at module level (a spawned child imports this module), and
torch is imported only inside the tests that compare with it (a spawned child doesn't pay for it)."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

from uopkit import Tensor, dtypes, nn
from uopkit.nn import optim

STEPS, RATE, MOMENTUM = 2, 0.1, 0.5
# a child that hangs fails the test instead of the run
TIMEOUT = 120


def _model() -> nn.Module:
    return nn.Linear(4, 3)


def _batches(rank: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(rank)
    return [(rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(STEPS)]


def _train(rank: int, model: nn.Module, out: mp.Queue | None) -> None:
    # mnist_hogwild's `train`: an optimizer of this process's own over the shared parameters
    opt = optim.SGD(model.parameters(), lr=RATE, momentum=MOMENTUM)
    for x, y in _batches(rank):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(Tensor(x)), Tensor(y))
        loss.backward()
        opt.step()
    if out is not None:
        # what this process sees in the shared parameters when it is done
        out.put({k: v.numpy() for k, v in model.state_dict().items()})


def _values(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in model.state_dict().items()}


def _torch_hogwild_one_at_a_time(initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # torch's mnist_hogwild with its processes run one after the other: each trains the shared model with a fresh
    # optimizer (momentum of its own), so the result is the same as training in turn in one process
    torch = pytest.importorskip("torch")
    # one thread, as each of mnist_hogwild's processes; the process's own count put back for the tests after this one
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = torch.nn.Linear(4, 3)
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in initial.items()})
        for rank in range(2):
            opt = torch.optim.SGD(model.parameters(), lr=RATE, momentum=MOMENTUM)
            for x, y in _batches(rank):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _segment_fds() -> list[str]:
    # this process's descriptors of uopkit's shared memory (memfd) segments, and its mappings of them
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open("/proc/self/maps") as f:
        maps = f.readlines()
    return [x for x in fds + maps if "memfd:uopkit" in x]


@pytest.fixture
def no_segment_left(gc_of_this_test):
    """/dev/shm as before the test, and no descriptor or mapping of a segment left once the test's tensors are gone."""
    import gc

    shm_before = sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []
    before = _segment_fds() if os.path.isdir("/proc/self/fd") else []
    yield
    gc.collect()
    assert (sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []) == shm_before
    if os.path.isdir("/proc/self/fd"):
        assert _segment_fds() == before


@pytest.fixture(scope="module")
def compiled():
    """A training step run here first, on a copy not shared: forked children inherit its compiled kernels (each would
    otherwise build them all again)."""
    _train(9, _model(), None)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_hogwild_processes_one_at_a_time_match_torch(method, compiled, no_segment_left):
    # mnist_hogwild: model.share_memory(), then processes each training it; run one after the other, the parent's
    # weights are what the last one wrote, and torch's identical run
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = mp.get_context(method)
    model = _model()
    assert model.share_memory() is model
    assert all(p.is_shared() for p in model.parameters())
    initial = _values(model)
    out = ctx.Queue()
    for rank in range(2):
        p = ctx.Process(target=_train, args=(rank, model, out))
        p.start()
        written = out.get(timeout=TIMEOUT)
        p.join(TIMEOUT)
        assert p.exitcode == 0
    trained = _values(model)
    for k in initial:
        assert not np.array_equal(trained[k], initial[k]), k
        np.testing.assert_array_equal(trained[k], written[k])
    expected = _torch_hogwild_one_at_a_time(initial)
    for k in initial:
        np.testing.assert_allclose(trained[k], expected[k], rtol=1e-5, atol=1e-6)


def test_hogwild_processes_at_once(compiled):
    # two forked processes training the shared model at the same time: the parent's weights move, stay finite
    ctx = mp.get_context("fork")
    model = _model().share_memory()
    initial = _values(model)
    processes = [ctx.Process(target=_train, args=(rank, model, None)) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    for k, v in _values(model).items():
        assert np.isfinite(v).all() and not np.array_equal(v, initial[k]), k


def test_forked_child_trains_a_copy_without_share_memory(compiled):
    # torch's: a model not in shared memory is the child's own copy after fork; the parent's doesn't change
    ctx = mp.get_context("fork")
    model = _model()
    initial = _values(model)
    out = ctx.Queue()
    p = ctx.Process(target=_train, args=(0, model, out))
    p.start()
    written = out.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert p.exitcode == 0
    for k, v in _values(model).items():
        np.testing.assert_array_equal(v, initial[k])
        assert not np.array_equal(written[k], initial[k])


def _write_what_arrives(inbox: mp.Queue, outbox: mp.Queue, received: mp.Event) -> None:
    shared, view, private = inbox.get(timeout=TIMEOUT)
    flags = (shared.is_shared(), view.is_shared(), private.is_shared())
    shared[0] = 10.0
    view.add_(1)
    private.add_(100)
    outbox.put((shared, view, private, flags))
    # (a sender's descriptors are fetched from it by the receiver: it stays until they were)
    received.wait(TIMEOUT)


def test_queue_round_trip_shares_memory(no_segment_left):
    # through a Queue a shared tensor (and a view of it) arrives as the same memory: the child's in-place writes show in
    # the parent, and what comes back is a view of the parent's storage; a tensor not shared arrives as a copy
    ctx = mp.get_context("fork")
    shared = Tensor([1.0, 2.0, 3.0, 4.0]).share_memory_()
    private = Tensor([1.0, 2.0])
    inbox, outbox, received = ctx.Queue(), ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_write_what_arrives, args=(inbox, outbox, received))
    p.start()
    inbox.put((shared, shared[1:], private))
    back, back_view, back_private, flags = outbox.get(timeout=TIMEOUT)
    received.set()
    p.join(TIMEOUT)
    assert p.exitcode == 0
    assert flags == (True, True, False)
    assert shared.tolist() == [10.0, 3.0, 4.0, 5.0]
    assert private.tolist() == [1.0, 2.0] and back_private.tolist() == [101.0, 102.0]
    assert back.is_shared() and back_view.is_shared() and not back_private.is_shared()
    back.add_(1)
    back_view[0] = 0.0
    assert shared.tolist() == [11.0, 0.0, 5.0, 6.0]
    assert back.tolist() == shared.tolist() and back_view.tolist() == [0.0, 5.0, 6.0]


def test_share_memory_writes_stay_in_place(no_segment_left):
    from uopkit.tensor.sharing import shared_segment

    t = (Tensor([1.0, 2.0, 3.0]) * 2).share_memory_()
    segment = shared_segment(t)
    assert t.is_shared() and segment is not None and t.tolist() == [2.0, 4.0, 6.0]
    # sharing again leaves it; every in-place write lands in the same segment
    assert t.share_memory_() is t and shared_segment(t) is segment
    t.add_(1)
    t[1] = 0.0
    t.copy_(t * 2)
    assert t.tolist() == [6.0, 0.0, 14.0] and shared_segment(t) is segment
    w = Tensor([1.0, -1.0], requires_grad=True).share_memory_()
    segment = shared_segment(w)
    opt = optim.Adam([w], lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    assert shared_segment(w) is segment and w.tolist() != [1.0, -1.0]
    # a view's storage is its base's: sharing the view shares the base
    x = Tensor([1.0, 2.0, 3.0]).realize()
    assert x[1:].share_memory_().is_shared() and x.is_shared()
    assert not Tensor([1.0]).is_shared() and not (t + 1).is_shared()
    # plain pickle copies the values, shared or not, as torch's
    copied = pickle.loads(pickle.dumps(t))
    assert copied.tolist() == t.tolist() and not copied.is_shared()
    # bfloat16 (stored as its bits) and an empty tensor
    b = Tensor([1.5, 2.5], dtype=dtypes.bfloat16).share_memory_()
    b.add_(1)
    assert b.is_shared() and b.tolist() == [2.5, 3.5]
    assert Tensor([]).share_memory_().is_shared()


def test_share_memory_elsewhere_than_the_cpu_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"EMULATOR can't be shared.*t.to\('CPU'\).share_memory_\(\)"):
        Tensor([1.0], device="EMULATOR").share_memory_()
    with pytest.raises(RuntimeError, match="EMULATOR can't be shared"):
        nn.Linear(2, 1).to(device="EMULATOR").share_memory()

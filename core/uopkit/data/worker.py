"""DataLoader worker processes (torch.utils.data's `num_workers > 0`): each worker loads and collates whole batches
and sends them back through a queue; the parent hands out the batches' indices round-robin and yields the batches in
order.

Each worker has an index queue of its own; all share one result queue. A task is `(epoch, task number, indices)`, a
result `(epoch, task number, batch)`: the epoch tag lets persistent workers start a new epoch while results of an
abandoned one are still on their way (the parent drops them). A worker's batch goes back pickled, so its Tensors
arrive as copies of their values (shared ones as the same memory: see `Tensor.share_memory_`).
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from uopkit.data.dataset import IterableDataset, _batched
from uopkit.tensor import Tensor

# how often a waiting process checks on the other side (a worker: its parent; the parent: its workers), in seconds
_POLL_S = 0.2
# how long the parent waits for a worker to leave at shutdown before terminating it
_JOIN_S = 5.0


@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` gives inside a worker: its `id` (0 to num_workers-1), `num_workers`, the `seed` its
    random streams were started from (uopkit's, Python's `random` and numpy's global one) and its copy of `dataset`."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker process, its WorkerInfo (id, num_workers, seed, dataset); None in the main process,
    as torch's. An IterableDataset shards its stream by it (each worker holds a copy of the dataset and, unsharded,
    yields all of it)."""
    return _worker_info


def fetch(dataset: Any, index: Any, collate_fn: Callable[[Any], Any], auto_collation: bool) -> Any:
    """One batch of a map-style dataset (`index`: a list of indices) or one sample (`index` alone, batching off)."""
    if not auto_collation:
        return collate_fn(dataset[index])
    from uopkit.data.collate import default_collate

    if collate_fn is default_collate:
        # a TensorDataset (or a Subset of one): one gather per tensor, not a slice per row stacked
        batch = _batched(dataset, index)
        if batch is not None:
            return batch
    getitems = getattr(dataset, "__getitems__", None)
    samples = getitems(index) if callable(getitems) else [dataset[i] for i in index]
    return collate_fn(samples)


class _StreamEnd:
    """A worker's answer once its copy of an IterableDataset is exhausted (for this epoch)."""

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id


class _WorkerError:
    """An exception raised in a worker, sent back to be raised again in the parent with the worker's traceback."""

    def __init__(self, worker_id: int, where: str) -> None:
        self.exc_type: type[BaseException] = type(sys.exc_info()[1])
        self.message = (
            f"Caught {self.exc_type.__name__} in DataLoader worker process {worker_id} ({where}).\n"
            f"Original {traceback.format_exc()}"
        )

    def reraise(self) -> None:
        try:
            error = self.exc_type(self.message)
        except Exception:
            # an exception type that can't be built from one message
            raise RuntimeError(self.message) from None
        raise error


def _seed_worker(seed: int) -> None:
    # torch seeds each worker's streams from base_seed + id: its own, Python's `random` and numpy's global one
    random.seed(seed)
    Tensor.manual_seed(seed)
    np.random.seed([seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF])


def next_stream_batch(stream: Any, batch_size: int | None, drop_last: bool, collate_fn: Callable) -> Any:
    """An IterableDataset's next batch from its iterator `stream`: one sample (batch_size None) or up to batch_size
    collated (a short last one unless drop_last); StopIteration at the end."""
    if batch_size is None:
        return collate_fn(next(stream))
    batch = list(itertools.islice(stream, batch_size))
    if not batch or (drop_last and len(batch) < batch_size):
        raise StopIteration
    return collate_fn(batch)


def _worker_loop(
    worker_id: int,
    num_workers: int,
    base_seed: int,
    dataset: Any,
    plan: tuple[Callable, bool, int | None, bool],
    init_fn: Callable[[int], None] | None,
    index_queue: Any,
    result_queue: Any,
    done: Any,
) -> None:
    global _worker_info
    collate_fn, auto_collation, batch_size, drop_last = plan
    seed = base_seed + worker_id
    _seed_worker(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    init_error = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception:
        # (as torch: sent back as the answer to this worker's first task)
        init_error = _WorkerError(worker_id, "worker_init_fn")
    iterable = isinstance(dataset, IterableDataset)
    # (the process that started us: with forkserver our OS parent is the server, not the loader's process)
    parent = multiprocessing.parent_process()
    epoch, stream, exhausted = -1, None, False
    while True:
        try:
            task = index_queue.get(timeout=_POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                # the parent is gone: nobody reads what we'd load
                break
            continue
        if task is None:
            break
        if done.is_set():
            continue
        task_epoch, task_id, index = task
        result: Any
        if init_error is not None:
            result, init_error = init_error, None
        elif iterable:
            if task_epoch != epoch:
                epoch, stream, exhausted = task_epoch, iter(dataset), False
            try:
                result = (
                    _StreamEnd(worker_id) if exhausted else next_stream_batch(stream, batch_size, drop_last, collate_fn)
                )
            except StopIteration:
                result, exhausted = _StreamEnd(worker_id), True
            except Exception:
                result = _WorkerError(worker_id, "while loading a batch")
        else:
            try:
                result = fetch(dataset, index, collate_fn, auto_collation)
            except Exception:
                result = _WorkerError(worker_id, f"while loading index {index}")
        result_queue.put((task_epoch, task_id, result))
        del result
    if done.is_set() or (parent is not None and not parent.is_alive()):
        # nobody may read the rest: don't wait at exit for it to go through the pipe
        result_queue.cancel_join_thread()


class WorkerIterator:
    """One pass over a DataLoader loaded by worker processes (what `iter(loader)` returns with num_workers > 0).

    The workers start with the iterator; they stop when the pass ends, when the iterator is dropped (a loop left
    early), or, with `persistent_workers`, when the loader is dropped (`reset` starts the next epoch on them)."""

    def __init__(self, loader: Any) -> None:
        from uopkit.data.sampler import _generator_rng

        self._loader_len = loader.__len__
        self._index_sampler = loader.batch_sampler if loader._auto_collation else loader.sampler
        self._iterable = loader._iterable
        self._num_workers, self._timeout = loader.num_workers, loader.timeout
        self._persistent, self._in_order = loader.persistent_workers, loader.in_order
        self._prefetch = max(1, loader.prefetch_factor * loader.num_workers)
        self._shut = False
        context = loader.multiprocessing_context or multiprocessing.get_context()
        self._result_queue = context.Queue()
        self._done = context.Event()
        self._index_queues = [context.Queue() for _ in range(self._num_workers)]
        self._epoch = -1
        # the first tasks are queued before the workers start, so the shuffle draws its order first and the order
        # is the one num_workers=0 gives for the same seed; then the workers' base seed is drawn
        self.reset()
        base_seed = int(_generator_rng(loader.generator, "DataLoader").integers(0, 2**63))
        plan = (loader.collate_fn, loader._auto_collation, loader.batch_size, loader.drop_last)
        self._workers = []
        for worker_id in range(self._num_workers):
            args = (worker_id, self._num_workers, base_seed, loader.dataset, plan, loader.worker_init_fn)
            args += (self._index_queues[worker_id], self._result_queue, self._done)
            worker = context.Process(target=_worker_loop, args=args, daemon=True)
            worker.start()
            self._workers.append(worker)

    def reset(self) -> None:
        """Start a new epoch: a fresh pass of the sampler (or of each worker's stream)."""
        self._epoch += 1
        self._sampler_iter = itertools.repeat(None) if self._iterable else iter(self._index_sampler)
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        self._active = [True] * self._num_workers
        # task number -> (worker,) while it loads, (worker, batch) once it came back early
        self._tasks: dict[int, tuple[Any, ...]] = {}
        self._sent = self._received = self._outstanding = 0
        for _ in range(self._prefetch):
            self._put_task()

    def _put_task(self) -> None:
        if self._outstanding >= self._prefetch:
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker_id = next(self._worker_cycle)
            if self._active[worker_id]:
                break
        else:
            return
        self._index_queues[worker_id].put((self._epoch, self._sent, index))
        self._tasks[self._sent] = (worker_id,)
        self._outstanding += 1
        self._sent += 1

    def _get(self) -> tuple[int, int, Any]:
        start = time.monotonic()
        while True:
            try:
                return self._result_queue.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [w for w in self._workers if not w.is_alive()]
                if dead:
                    pids = ", ".join(str(w.pid) for w in dead)
                    self.shutdown()
                    raise RuntimeError(
                        f"DataLoader worker (pid(s) {pids}) exited unexpectedly (killed, or out of memory); the "
                        "workers are shut down"
                    ) from None
                if self._timeout > 0 and time.monotonic() - start >= self._timeout:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None

    def __iter__(self) -> WorkerIterator:
        return self

    def __len__(self) -> int:
        return self._loader_len()

    def __next__(self) -> Any:
        while True:
            # pass over the tasks that went to a stream already exhausted (they bring nothing)
            while self._received < self._sent:
                task = self._tasks.get(self._received)
                if task is not None and (len(task) == 2 or self._active[task[0]]):
                    break
                self._tasks.pop(self._received, None)
                self._received += 1
            else:
                if not self._persistent:
                    self.shutdown()
                raise StopIteration
            task = self._tasks[self._received]
            if len(task) == 2:
                del self._tasks[self._received]
                self._received += 1
                return self._deliver(task[1])
            if self._shut:
                raise StopIteration
            epoch, task_id, result = self._get()
            if epoch != self._epoch:
                # a result of an epoch left early
                continue
            self._outstanding -= 1
            if isinstance(result, _StreamEnd):
                self._active[result.worker_id] = False
                self._put_task()
                continue
            if task_id == self._received:
                del self._tasks[task_id]
                self._received += 1
                return self._deliver(result)
            if not self._in_order:
                del self._tasks[task_id]
                return self._deliver(result)
            self._tasks[task_id] += (result,)

    def _deliver(self, result: Any) -> Any:
        self._put_task()
        if isinstance(result, _WorkerError):
            result.reraise()
        return result

    def shutdown(self) -> None:
        """Stop the workers (waiting for each a little, then terminating it) and close the queues."""
        if self._shut or not hasattr(self, "_workers"):
            return
        self._shut = True
        self._done.set()
        for index_queue in self._index_queues:
            index_queue.put(None)
        for worker in self._workers:
            worker.join(timeout=_JOIN_S)
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=_JOIN_S)
        for q in (*self._index_queues, self._result_queue):
            q.cancel_join_thread()
            q.close()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            # (at interpreter exit the modules it needs may be gone; the workers are daemons and go with us)
            pass

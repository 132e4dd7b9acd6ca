"""DataLoader (torch.utils.data's): batches of a dataset, in the order of a sampler, collated into Tensors.

With `num_workers=0` it loads in the calling process; with `num_workers > 0`, worker processes load and collate the
batches and the loader yields them in the sampler's order (uopkit.data.worker). `pin_memory` has no effect (CPU memory
needs no pinning here).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from uopkit.data.collate import default_collate, default_convert
from uopkit.data.dataset import IterableDataset
from uopkit.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from uopkit.data.worker import WorkerIterator, fetch, get_worker_info, next_stream_batch

__all__ = ["DataLoader", "get_worker_info"]

T_co = TypeVar("T_co", covariant=True)


# what a DataLoader's batching is planned from (torch refuses to set them after __init__ too)
_FIXED_AFTER_INIT = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


def _check_context(context: Any, num_workers: int) -> Any:
    """`multiprocessing_context` checked as torch checks it: only with num_workers > 0, a start method's name (made
    into its context) or a context object."""
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(
            f"DataLoader: multiprocessing_context={context!r} applies to worker processes only; with num_workers=0 "
            "leave it None"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(
                f"DataLoader: multiprocessing_context must name a start method of {methods}, got {context!r}"
            )
        return multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(
            "DataLoader: multiprocessing_context takes a start method's name or a multiprocessing context, got "
            f"{type(context).__name__}"
        )
    return context


class _LoaderIterator:
    """One pass over a DataLoader (what `iter(loader)` returns): an iterator with the loader's `len`."""

    def __init__(self, batches: Iterator[Any], length: Callable[[], int]) -> None:
        self._batches, self._length = batches, length

    def __iter__(self) -> _LoaderIterator:
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def __len__(self) -> int:
        return self._length()


class DataLoader(Generic[T_co]):
    """Iterates over `dataset` in batches, as torch.utils.data.DataLoader.

    Map-style datasets are read in the order of `sampler` (`shuffle=True`: a RandomSampler, a new order each epoch;
    else in order), grouped by `batch_size` (`drop_last` drops a short last batch), or by `batch_sampler`;
    `batch_size=None` turns batching off. An IterableDataset is batched in the order it yields. Each batch goes through
    `collate_fn` (default_collate, or default_convert without batching). `generator` (a numpy Generator) drives the
    shuffling; without one it draws from uopkit's seeded stream, so `Tensor.manual_seed` makes the order reproducible.

    `num_workers > 0` loads in that many worker processes (started with `multiprocessing_context`, each first
    calling `worker_init_fn(id)`), `prefetch_factor` batches ahead per worker, in the sampler's order (`in_order=False`:
    as they come); `timeout` bounds the wait for one batch, `persistent_workers` keeps the workers for the next epoch.
    `pin_memory` and `pin_memory_device` are accepted and have no effect.

    >>> loader = DataLoader(TensorDataset(Tensor.arange(5), Tensor.arange(5) * 10), batch_size=2)
    >>> len(loader), [[t.tolist() for t in batch] for batch in loader]
    (3, [[[0, 1], [0, 10]], [[2, 3], [20, 30]], [[4], [40]]])
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be >= 0 (0 loads in this process), got {num_workers}")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                f"DataLoader: prefetch_factor={prefetch_factor} applies to worker processes only; with num_workers=0 "
                "leave it None"
            )
        if num_workers > 0 and prefetch_factor is None:
            # (torch's default for worker loading; kept for scripts that read it back)
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError(f"DataLoader: prefetch_factor must be >= 0, got {prefetch_factor}")
        multiprocessing_context = _check_context(multiprocessing_context, num_workers)
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            # an IterableDataset sets its own order
            given = {"shuffle": shuffle or None, "sampler": sampler, "batch_sampler": batch_sampler}
            for name, value in given.items():
                if value is not None:
                    raise ValueError(
                        f"DataLoader: an IterableDataset yields its own order, so {name} must be left out, got "
                        f"{name}={value!r}"
                    )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "DataLoader: a batch_sampler makes the batches itself; leave batch_size, shuffle, sampler and "
                    "drop_last at their "
                    "defaults"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "DataLoader: batch_size=None yields single samples, so there is no last batch to drop; leave "
                "drop_last=False"
            )
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            # (an IterableDataset's batch size is only checked here: its stream is cut into batches as it comes)
            checked = BatchSampler(sampler if sampler is not None else [], batch_size, drop_last)
            batch_sampler = None if iterable else checked
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor
        self.persistent_workers, self.multiprocessing_context = persistent_workers, multiprocessing_context
        self.pin_memory_device, self.in_order = pin_memory_device, in_order
        self._iterable = iterable
        # the persistent workers' iterator, kept from one epoch to the next
        self._workers: WorkerIterator | None = None
        self._auto_collation = batch_sampler is not None or (iterable and batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        # the batches are planned when the loader is built: a later change to these would be silently ignored
        if name in _FIXED_AFTER_INIT and getattr(self, "_initialized", False):
            raise ValueError(
                f"DataLoader: {name} can't be set after the DataLoader is built (its batching is fixed then); build "
                f"a new DataLoader with {name}={value!r}"
            )
        super().__setattr__(name, value)

    def __iter__(self) -> _LoaderIterator | WorkerIterator:
        if self.num_workers > 0:
            if not self.persistent_workers:
                return WorkerIterator(self)
            if self._workers is None or self._workers._shut:
                self._workers = WorkerIterator(self)
            else:
                self._workers.reset()
            return self._workers
        if self._iterable:
            batches = self._iterable_batches()
        elif not self._auto_collation:
            batches = (self.collate_fn(self.dataset[i]) for i in self.sampler)  # type: ignore[union-attr]
        else:
            batches = (
                fetch(self.dataset, indices, self.collate_fn, True)
                for indices in self.batch_sampler  # type: ignore[union-attr]
            )
        return _LoaderIterator(batches, self.__len__)

    def _iterable_batches(self) -> Iterator[Any]:
        # (the stream batched as a worker batches its copy: data/worker.py)
        stream = iter(self.dataset)
        while True:
            try:
                batch = next_stream_batch(stream, self.batch_size, self.drop_last, self.collate_fn)
            except StopIteration:
                return
            yield batch

    def __len__(self) -> int:
        if self._iterable:
            # the stream's length where it has one (a TypeError where it hasn't, as torch)
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self._auto_collation:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        return len(self.sampler)  # type: ignore[arg-type]

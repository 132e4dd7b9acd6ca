"""Samplers: the order in which a DataLoader reads a map-style dataset (torch.utils.data's samplers).

Random samplers draw from uopkit's seeded generator (`Tensor.manual_seed`) unless given a uopkit.Generator or a numpy
Generator: each `iter()` takes one fresh draw from the stream, so every epoch has its own order and a run is
reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, Generic, TypeVar

import numpy as np

from uopkit.tensor import Generator, Tensor

T_co = TypeVar("T_co", covariant=True)


def _generator_rng(generator: Any, where: str) -> np.random.Generator:
    """The numpy generator one epoch draws from: uopkit's seeded stream when `generator` is None, the next stretch of
    a uopkit.Generator's stream (as torch's samplers draw from a torch.Generator), else the user's numpy Generator."""
    if generator is None or isinstance(generator, Generator):
        # one draw from Tensor.manual_seed's stream (Philox keyed by the seed and a call counter), shared with
        # Tensor.rand and the others, or from the Generator's own: reproducible for a seed and an order of calls
        return Tensor._rng(generator)
    if isinstance(generator, np.random.Generator):
        return generator
    # (the module too: a torch.Generator's bare name is uopkit's)
    kind = f"{type(generator).__module__}.{type(generator).__qualname__}"
    raise TypeError(
        f"{where}: generator must be a uopkit.Generator, a numpy Generator (np.random.default_rng(seed)) or None "
        f"(Tensor.manual_seed's stream), got {kind}"
    )


def _check_bool(value: Any, name: str, exc: type[Exception] = ValueError) -> None:
    if not isinstance(value, bool):
        raise exc(f"{name} should be a boolean value, but got {name}={value!r}")


def _check_positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} takes an int >= 1, got {value!r}")


class Sampler(Generic[T_co]):
    """Base class of the samplers: an iterable of dataset indices (or of lists of them, for a batch sampler).

    A subclass defines `__iter__` and, where it knows it, `__len__` (the DataLoader's `len` needs it)."""

    def __init__(self, data_source: Sized | None = None) -> None:
        # (torch's signature; the argument is unused, as there)
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1, in order.

    >>> list(SequentialSampler(range(3)))
    [0, 1, 2]
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A fresh random permutation of the indices each epoch; with `replacement`, `num_samples` independent draws.

    Without replacement, `num_samples` beyond the dataset's length chains whole permutations (and a part of one), as
    torch's. `generator`: a uopkit.Generator, a numpy Generator, or None for uopkit's seeded stream
    (`Tensor.manual_seed`).

    >>> Tensor.manual_seed(0); sorted(RandomSampler(range(4)))
    [0, 1, 2, 3]
    """

    def __init__(
        self, data_source: Sized, replacement: bool = False, num_samples: int | None = None, generator: Any = None
    ) -> None:
        _check_bool(replacement, "replacement", TypeError)
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        _check_positive_int(self.num_samples, "num_samples")

    @property
    def num_samples(self) -> int:
        # the dataset's length is read when asked (it may change between epochs)
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, count = len(self.data_source), self.num_samples
        rng = _generator_rng(self.generator, "RandomSampler")
        if self.replacement:
            if n == 0:
                raise RuntimeError(
                    f"RandomSampler: can't draw {count} samples with replacement from an empty dataset; give the "
                    "dataset samples or leave num_samples out"
                )
            return iter(rng.integers(0, n, count).tolist())
        if n == 0:
            # (torch's error type: its count of whole permutations divides by the length)
            raise ZeroDivisionError(
                f"RandomSampler: can't draw {count} samples from an empty dataset; give the dataset samples or leave "
                "num_samples out"
            )
        # whole permutations while they fit, then the start of one more
        order = [rng.permutation(n) for _ in range(count // n)] + [rng.permutation(n)[: count % n]]
        return iter(np.concatenate(order).tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a fresh random order each epoch.

    >>> sorted(SubsetRandomSampler([5, 7, 9]))
    [5, 7, 9]
    """

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        order = _generator_rng(self.generator, "SubsetRandomSampler").permutation(len(self.indices))
        return (self.indices[i] for i in order.tolist())

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """`num_samples` indices into `weights` (not necessarily summing to one), index i drawn with probability
    weights[i] / sum(weights), with or without replacement, a new draw each epoch.

    >>> list(WeightedRandomSampler([0.0, 1.0, 0.0], 3))
    [1, 1, 1]
    """

    def __init__(self, weights: Any, num_samples: int, replacement: bool = True, generator: Any = None) -> None:
        _check_positive_int(num_samples, "num_samples")
        _check_bool(replacement, "replacement")
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(
                f"WeightedRandomSampler: weights takes one number per sample (1-D), got shape {tuple(w.shape)}"
            )
        # checked here, not when iterating (torch's multinomial raises RuntimeError on the first epoch)
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        if not replacement and num_samples > w.size:
            raise ValueError(
                f"WeightedRandomSampler: without replacement it can draw at most {w.size} samples (one per weight), "
                f"asked for {num_samples}"
            )
        self.weights, self.num_samples, self.replacement, self.generator = w, int(num_samples), replacement, generator

    def __iter__(self) -> Iterator[int]:
        rng = _generator_rng(self.generator, "WeightedRandomSampler")
        p = self.weights / self.weights.sum()
        nonzero = np.flatnonzero(p)
        if self.replacement or self.num_samples <= nonzero.size:
            return iter(rng.choice(len(p), self.num_samples, replace=self.replacement, p=p).tolist())
        # more samples than non-zero weights, without replacement: every index of a non-zero weight (drawn in turn,
        # by weight), then indices of zero weights, as torch's multinomial gives them (in an order of its kernel's;
        # here a random one)
        drawn = rng.choice(nonzero, nonzero.size, replace=False, p=p[nonzero])
        zeros = rng.permutation(np.flatnonzero(p == 0))[: self.num_samples - nonzero.size]
        return iter([*drawn.tolist(), *zeros.tolist()])

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Groups the indices of `sampler` (any iterable of them) into lists of `batch_size`; the last one is shorter
    unless `drop_last` drops it.

    >>> list(BatchSampler(range(5), 2, drop_last=False)), list(BatchSampler(range(5), 2, drop_last=True))
    ([[0, 1], [2, 3], [4]], [[0, 1], [2, 3]])
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        _check_positive_int(batch_size, "batch_size")
        _check_bool(drop_last, "drop_last")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler[int]):
    """The share of the dataset's indices that replica `rank` of `num_replicas` reads (torch's DistributedSampler):
    every replica gets `ceil(len / num_replicas)` indices, the order's start repeated to even them out, or, with
    `drop_last`, `floor(len / num_replicas)`, the order's tail dropped. Replica r takes positions r, r + num_replicas,
    ... of the order, so the shares are disjoint (but for the repeats).

    The order is a permutation drawn from `seed + epoch` (the same on every replica; call `set_epoch(epoch)` before
    each epoch for a new one), or 0, 1, 2, ... without `shuffle`. uopkit has no process group: pass `num_replicas`
    and `rank` (a launcher's WORLD_SIZE and RANK). The permutation is uopkit's draw, not torch's.

    >>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in range(2)]
    [[0, 2, 4], [1, 3, 0]]
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            raise ValueError(
                "DistributedSampler: uopkit has no distributed process group to read the world size and rank from; "
                "pass num_replicas and rank (e.g. from the launcher's WORLD_SIZE and RANK variables)"
            )
        _check_positive_int(num_replicas, "num_replicas")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        # whole rounds of num_replicas indices: the last part round is dropped, or filled from the order's start
        self.num_samples = n // self.num_replicas if drop_last else -(-n // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            # one stream per (seed, epoch), so every replica draws the same order
            stream = Generator().manual_seed(self.seed + self.epoch)
            order = _generator_rng(stream, "DistributedSampler").permutation(n).tolist()
        else:
            order = list(range(n))
        if self.total_size > n:
            # (a dataset shorter than the padding repeats whole)
            order = (order * -(-self.total_size // n))[: self.total_size]
        else:
            order = order[: self.total_size]
        return iter(order[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` from the next iteration on (the same epoch gives the same order)."""
        self.epoch = epoch

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
    raise TypeError(
        f"{where}: generator must be a uopkit.Generator, a numpy Generator (np.random.default_rng(seed)) or None "
        f"(Tensor.manual_seed's stream), got {type(generator).__name__}"
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
            return iter(rng.integers(0, n, count).tolist())
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

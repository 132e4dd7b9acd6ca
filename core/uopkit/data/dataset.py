"""Datasets (torch.utils.data's): map-style `Dataset` (indexed by 0..len-1) and `IterableDataset` (a stream), the
ready-made TensorDataset, ConcatDataset, ChainDataset and Subset, and random_split."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from uopkit.data.sampler import _generator_rng
from uopkit.tensor import Tensor

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: `__getitem__(index)` returns one sample; define `__len__` too for the default samplers.

    `a + b` concatenates two datasets (a ConcatDataset). A subclass may also define `__getitems__(indices)`, returning
    the list of samples of a batch at once, which a DataLoader calls instead of `__getitem__` per index."""

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset that is a stream of samples: define `__iter__`. A DataLoader batches it in the order it yields;
    `a + b` chains two (a ChainDataset)."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other: Dataset[T_co]) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


class TensorDataset(Dataset[tuple[Any, ...]]):
    """Rows of tensors of the same length: sample i is `(t[i] for each t)`. Each may be a uopkit Tensor or a numpy
    array (a numpy one gives numpy rows, which the default collate stacks into a Tensor).

    A DataLoader with the default collate takes a batch with one indexing op per tensor (`t[indices]`, a single
    gather), not one slice per row.

    >>> ds = TensorDataset(Tensor([[1, 2], [3, 4], [5, 6]]), np.array([0, 1, 0]))
    >>> len(ds), ds[1][0].tolist(), int(ds[1][1])
    (3, [3, 4], 1)
    """

    def __init__(self, *tensors: Tensor | np.ndarray) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for t in tensors:
            if not isinstance(t, Tensor | np.ndarray):
                raise TypeError(f"TensorDataset takes uopkit Tensors or numpy arrays, got {type(t).__name__}")
            if not t.shape:
                raise ValueError("TensorDataset: a 0-d tensor has no rows")
        lengths = [t.shape[0] for t in tensors]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"Size mismatch between tensors: first dimensions {lengths}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def _batch(self, indices: Sequence[int] | np.ndarray) -> list[Tensor] | None:
        # the default collate of these rows, with one gather per tensor; None where that collate would do something
        # else (a numpy array of strings or objects: it raises, with its message)
        if any(isinstance(t, np.ndarray) and t.dtype.kind in "SaUO" for t in self.tensors):
            return None
        idx = np.asarray(indices, dtype=np.int64)
        out = []
        for t in self.tensors:
            if isinstance(t, np.ndarray):
                out.append(Tensor(t[idx]))
            else:
                # int32 indices where they fit (a narrower compare in the gather)
                small = len(t) < 2**31
                out.append(t[Tensor(idx.astype(np.int32) if small else idx, device=t.device)])
        return out


def _batched(dataset: Dataset, indices: Sequence[int] | np.ndarray) -> list[Tensor] | None:
    """The default collate of `dataset[i] for i in indices`, taken in one indexing op per tensor where `dataset` is a
    TensorDataset (or a Subset of one, at any depth) whose item access isn't overridden; else None."""
    while isinstance(dataset, Subset) and type(dataset).__getitem__ is Subset.__getitem__:
        indices = np.asarray(dataset.indices, dtype=np.int64)[np.asarray(indices, dtype=np.int64)]
        dataset = dataset.dataset
    if isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__:
        return dataset._batch(indices)
    return None


class ConcatDataset(Dataset[T_co]):
    """Map-style datasets one after the other: index i reads the dataset it falls in. `cumulative_sizes` holds the
    running totals of their lengths.

    >>> ds = ConcatDataset([range(2), range(10, 13)])
    >>> len(ds), ds[3], ds.cumulative_sizes
    (5, 11, [2, 5])
    """

    def __init__(self, datasets: Iterable[Dataset[T_co]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (use ChainDataset)")
        self.cumulative_sizes = self.cumsum(self.datasets)

    @staticmethod
    def cumsum(sequence: Sequence[Any]) -> list[int]:
        """The running totals of the lengths of `sequence`'s datasets (what `cumulative_sizes` holds)."""
        return list(itertools.accumulate(len(d) for d in sequence))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> T_co:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index - n if index < 0 else index} is out of range for a dataset of {n}")
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other (the streams chained).

    >>> list(ChainDataset([range(2), range(5, 7)]))
    [0, 1, 5, 6]
    """

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = datasets

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)  # type: ignore[arg-type]


class StackDataset(Dataset[Any]):
    """Datasets of one length side by side: sample i is `(a[i], b[i], ...)` for `StackDataset(a, b, ...)`, or
    `{"x": a[i], ...}` for `StackDataset(x=a, ...)`.

    >>> StackDataset(range(3), "abc")[1], StackDataset(x=range(3), y="abc")[2]
    ((1, 'b'), {'x': 2, 'y': 'c'})
    """

    datasets: tuple[Any, ...] | dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError(
                "StackDataset: give the datasets either positionally (samples are tuples) or by name (samples are "
                "dicts), not both"
            )
        if not args and not kwargs:
            raise ValueError("StackDataset: at least one dataset should be passed")
        self.datasets = args or kwargs
        lengths = [len(d) for d in (args or kwargs.values())]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"StackDataset: size mismatch between datasets, lengths {lengths}")
        self._length = lengths[0]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(self.datasets, dict):
            return {key: d[index] for key, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        # each dataset's own batch access where it has one
        def column(d: Any) -> list[Any]:
            getitems = getattr(d, "__getitems__", None)
            items = getitems(indices) if callable(getitems) else [d[i] for i in indices]
            if len(items) != len(indices):
                raise ValueError(
                    f"StackDataset: a dataset's __getitems__ gave {len(items)} samples for {len(indices)} indices"
                )
            return items

        if isinstance(self.datasets, dict):
            columns = {key: column(d) for key, d in self.datasets.items()}
            return [{key: col[j] for key, col in columns.items()} for j in range(len(indices))]
        return list(zip(*(column(d) for d in self.datasets), strict=True))

    def __len__(self) -> int:
        return self._length


class Subset(Dataset[T_co]):
    """The samples of `dataset` at `indices`, in that order: `Subset(ds, idx)[i]` is `ds[idx[i]]`.

    >>> Subset(range(10, 20), [3, 1])[1]
    11
    """

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> T_co:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: list[int]) -> list[T_co]:
        # the wrapped dataset's own batch access where it has one
        mapped = [self.indices[i] for i in indices]
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__(mapped)
        return [self.dataset[i] for i in mapped]

    def __len__(self) -> int:
        return len(self.indices)


def _split_lengths(lengths: Sequence[int | float], n: int) -> list[int]:
    # fractions when they add up to one (as torch decides it): floor(n * f) each, the remainder handed out one by one
    # from the first
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(
                    f"random_split: the fractions give part {i} no samples (of {n}); it will be empty", stacklevel=3
                )
        return sizes
    if any(isinstance(size, float) and not float(size).is_integer() for size in lengths) or any(s < 0 for s in lengths):
        raise ValueError(f"lengths must be non-negative integers or fractions summing to 1, got {list(lengths)}")
    sizes = [int(size) for size in lengths]
    if sum(sizes) != n:
        raise ValueError(f"random_split: the lengths {sizes} add up to {sum(sizes)}, the dataset has {n} samples")
    return sizes


def random_split(dataset: Any, lengths: Sequence[int | float], generator: Any = None) -> list[Subset[Any]]:
    """Split `dataset` into non-overlapping random Subsets of the given `lengths` (that add up to its length), or of
    the given fractions (that add up to 1; what is left after flooring goes one by one to the first splits).

    The permutation comes from `generator` (a numpy Generator) or, when None, from uopkit's seeded stream: one draw,
    reproducible under `Tensor.manual_seed` (torch's default generator isn't there; the same seed in torch and uopkit
    gives different splits).

    >>> Tensor.manual_seed(0); [len(s) for s in random_split(range(10), [0.5, 0.3, 0.2])]
    [5, 3, 2]
    """
    n = len(dataset)
    sizes = _split_lengths(lengths, n)
    order = _generator_rng(generator, "random_split").permutation(n).tolist()
    bounds = np.cumsum([0, *sizes]).tolist()
    return [Subset(dataset, order[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]

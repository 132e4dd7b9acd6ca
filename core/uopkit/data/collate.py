"""default_collate and default_convert: how a DataLoader turns samples into batches (torch.utils.data's).

Collating stacks along a new first axis and follows the structure of the samples: uopkit Tensors are stacked, numpy
arrays and numpy scalars are stacked on the host into one Tensor of their dtype (mixed dtypes promote as torch's stack
promotes them), Python numbers become a Tensor of the dtype torch's collate gives them (bool -> bool, int -> int64,
float -> float64; uopkit's own `Tensor([1, 2])` is int32), strings and bytes stay a list, and dicts, namedtuples,
tuples and lists are collated field by field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from uopkit.dtype import dtypes, from_numpy_dtype, least_upper_dtype, to_numpy_dtype
from uopkit.tensor import Tensor

_UNSUPPORTED = (
    "default_collate: can't batch a sample of type {}; samples may hold tensors, numeric numpy arrays, numbers, "
    "strings, mappings and sequences"
)
# numpy's string, bytes and object arrays hold nothing a Tensor can
_NOT_NUMERIC_KINDS = "SaUO"


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _same_type(like: Any, items: Any) -> Any:
    # a container of the sample's own type where it can be built from the plain one (a dict, a list), else the plain
    # one (as torch)
    kind: Any = type(like)
    try:
        return kind(items)
    except TypeError:
        return items


def _collate_numbers(batch: Sequence[Any]) -> Tensor:
    # torch.tensor(batch)'s dtypes: all bools stay bool, ints are int64, a float among ints makes the batch float32
    if all(isinstance(b, bool) for b in batch):
        return Tensor(list(batch), dtype=dtypes.bool)
    if any(isinstance(b, float) for b in batch):
        return Tensor(list(batch), dtype=dtypes.default_float)
    return Tensor(list(batch), dtype=dtypes.int64)


def _collate_numpy(batch: Sequence[Any]) -> Tensor:
    # stacked on the host (one copy to the device for the batch), in the dtype torch's stack gives mixed dtypes
    # (float32 with int64 is float32, where numpy's own promotion makes float64), each cast once, directly
    # (a big-endian dtype counts as its native twin)
    shapes = [np.shape(b) for b in batch]
    for i, shape in enumerate(shapes):
        if shape != shapes[0]:
            # (numpy's own error names neither the op nor the shapes; torch's stack raises RuntimeError)
            raise RuntimeError(
                f"default_collate: can't stack samples of different shapes, {shapes[0]} at entry 0 and {shape} at "
                f"entry {i}; pad or resize them to one shape, or pass a collate_fn that batches them"
            )
    kinds = {b.dtype.newbyteorder("=") for b in batch}
    if len(kinds) > 1:
        target = to_numpy_dtype(least_upper_dtype(*(from_numpy_dtype(k) for k in kinds)))
        batch = [np.asarray(b).astype(target) for b in batch]
    return Tensor(np.stack(batch) if isinstance(batch[0], np.ndarray) else np.array(batch))


def default_collate(batch: Sequence[Any]) -> Any:
    """One batch from a list of samples, stacked along a new first axis and keeping the samples' structure.

    >>> default_collate([(1, 0.5), (2, 1.5)])
    [Tensor([1, 2], dtype=dtypes.long), Tensor([0.5000, 1.5000], dtype=dtypes.double)]
    >>> default_collate([{"x": np.zeros(3, np.float32), "name": "a"}, {"x": np.ones(3, np.float32), "name": "b"}])
    {'x': Tensor([[0., 0., 0.],
            [1., 1., 1.]]), 'name': ['a', 'b']}
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return Tensor.stack(list(batch), dim=0)
    if isinstance(elem, str | bytes):
        # (numpy's str_ and bytes_ scalars too: they are str and bytes)
        return batch
    if isinstance(elem, np.ndarray | np.generic):
        if elem.dtype.kind in _NOT_NUMERIC_KINDS:
            raise TypeError(_UNSUPPORTED.format(elem.dtype))
        return _collate_numpy(batch)
    if isinstance(elem, float):
        return Tensor(list(batch), dtype=dtypes.float64)
    if isinstance(elem, int):
        return _collate_numbers(batch)
    if isinstance(elem, Mapping):
        return _same_type(elem, {key: default_collate([sample[key] for sample in batch]) for key in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(field) for field in zip(*batch, strict=True)))
    if isinstance(elem, Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError(
                f"default_collate: the sequence samples differ in length ({sorted({len(s) for s in batch})}); give "
                "each the "
                "same number of fields"
            )
        fields = [default_collate(field) for field in zip(*batch, strict=True)]
        # a tuple sample gives a list of batches, as torch's
        return fields if isinstance(elem, tuple) else _same_type(elem, fields)
    raise TypeError(_UNSUPPORTED.format(type(elem)))


def default_convert(data: Any) -> Any:
    """Numpy arrays and numpy scalars (also inside dicts, namedtuples and sequences) become Tensors of their dtype;
    everything else is left as it is. What a DataLoader with `batch_size=None` applies to each sample.

    >>> default_convert({"x": np.arange(3), "label": 7})
    {'x': Tensor([0, 1, 2], dtype=dtypes.long), 'label': 7}
    """
    if isinstance(data, np.ndarray | np.generic):
        return data if data.dtype.kind in _NOT_NUMERIC_KINDS else Tensor(np.asarray(data))
    if isinstance(data, Mapping):
        return _same_type(data, {key: default_convert(value) for key, value in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return _same_type(data, [default_convert(d) for d in data])
    return data

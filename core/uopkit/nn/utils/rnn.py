"""Variable-length sequences (torch.nn.utils.rnn): pad_sequence and unpad_sequence, and the packed form
(PackedSequence, pack_padded_sequence, pad_packed_sequence, pack_sequence, unpack_sequence) with torch's layout.

uopkit's nn.RNN / nn.LSTM / nn.GRU take a PackedSequence as torch's do (each sequence run to its own last step, the
output packed the same way). Index tensors (batch_sizes, sorted_indices, unsorted_indices, lengths) are int64, as
torch's; the padding and packing are Tensor ops, so gradients flow through them to the sequences.

>>> from uopkit import Tensor
>>> pad_sequence([Tensor([1, 2, 3]), Tensor([4])], batch_first=True).tolist()
[[1, 2, 3], [4, 0, 0]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from uopkit.dtype import dtypes
from uopkit.tensor import ArgumentError, Tensor

__all__ = [
    "PackedSequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pack_sequence",
    "unpack_sequence",
]


class PackedSequence(NamedTuple):
    """A batch of sequences packed time step by time step (torch.nn.utils.rnn.PackedSequence): `data` holds step 0
    of every sequence, then step 1 of those still running, and so on (sequences ordered longest first);
    `batch_sizes[t]` is how many sequences run at step t; `sorted_indices` maps that order to the batch's (None when
    the batch was already sorted) and `unsorted_indices` back."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    @property
    def is_cuda(self) -> bool:
        return False

    def to(self, *args, **kwargs) -> PackedSequence:
        """The data moved or cast by `Tensor.to` (the index tensors stay where they are, as torch's batch_sizes)."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def is_pinned(self) -> bool:
        return self.data.is_pinned()


def _on_data(name: str) -> Any:
    # torch's PackedSequence shorthand `name`: the Tensor method of that name applied to `data`
    def method(self: PackedSequence, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._replace(data=getattr(self.data, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The data's `{name}()` (torch's PackedSequence.{name})."
    return method


for _name in ("cpu", "cuda", "pin_memory", "double", "float", "half", "long", "int", "short", "char", "byte"):
    setattr(PackedSequence, _name, _on_data(_name))


def _padded_to(sequence: Tensor, length: int, padding_value: float, left: bool) -> Tensor:
    # `sequence` (L, *) lengthened to `length` steps with padding_value, after it or (left) before it
    missing = length - sequence.shape[0]
    if missing == 0:
        return sequence
    fill = Tensor.full((missing, *sequence.shape[1:]), padding_value, device=sequence.device, dtype=sequence.dtype)
    return Tensor.cat(fill, sequence) if left else Tensor.cat(sequence, fill)


def pad_sequence(
    sequences: Tensor | Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Stack tensors of shapes (L_i, *) into one (max L, B, *) tensor, or (B, max L, *) with `batch_first`, filling
    the missing steps with `padding_value` after each sequence (`padding_side="right"`) or before it ("left")
    (torch.nn.utils.rnn.pad_sequence).

    >>> pad_sequence([Tensor([1.0]), Tensor([2.0, 3.0])], padding_value=-1, padding_side="left").tolist()
    [[-1.0, 2.0], [1.0, 3.0]]
    """
    if padding_side not in ("left", "right"):
        raise ArgumentError(f"pad_sequence: padding_side takes 'left' or 'right', got {padding_side!r}")
    sequences = list(sequences.unbind(0) if isinstance(sequences, Tensor) else sequences)
    if not sequences:
        raise ArgumentError("pad_sequence: received an empty list of sequences")
    trailing = sequences[0].shape[1:]
    for s in sequences:
        if s.ndim == 0 or s.shape[1:] != trailing:
            raise ArgumentError(
                f"pad_sequence: every sequence must have shape (L, {', '.join(map(str, trailing))}...), got {s.shape}"
            )
    length = max(s.shape[0] for s in sequences)
    padded = [_padded_to(s, length, padding_value, padding_side == "left") for s in sequences]
    return Tensor.stack(*padded, dim=0 if batch_first else 1)


def unpad_sequence(
    padded_sequences: Tensor, lengths: Tensor | Sequence[int], batch_first: bool = False
) -> list[Tensor]:
    """The sequences of a right-padded batch, each cut to its length (torch.nn.utils.rnn.unpad_sequence)."""
    batch = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [batch[i, :n] for i, n in enumerate(_lengths(lengths, "unpad_sequence"))]


def _lengths(lengths: Tensor | Iterable[int], name: str) -> list[int]:
    values = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    if isinstance(values, int | float) or any(isinstance(n, list) for n in values):
        raise ArgumentError(f"{name}: lengths must be a 1-D list or tensor of ints")
    return [int(n) for n in values]


def _index(values: list[int]) -> Tensor:
    return Tensor(values, dtype=dtypes.int64)


def pack_padded_sequence(
    input: Tensor,  # noqa: A002 - torch's name
    lengths: Tensor | Sequence[int],
    batch_first: bool = False,
    enforce_sorted: bool = True,
) -> PackedSequence:
    """Pack a padded batch (T, B, *) (or (B, T, *) with `batch_first`) whose sequence b has lengths[b] steps
    (torch.nn.utils.rnn.pack_padded_sequence). With `enforce_sorted` the lengths must be in decreasing order;
    otherwise the batch is sorted first and the order kept in `sorted_indices`.

    >>> x = Tensor([[1, 4], [2, 0], [3, 0]])
    >>> pack_padded_sequence(x, [3, 1]).data.tolist(), pack_padded_sequence(x, [3, 1]).batch_sizes.tolist()
    ([1, 4, 2, 3], [2, 1, 1])
    """
    sizes = _lengths(lengths, "pack_padded_sequence")
    batch_dim = 0 if batch_first else 1
    if input.ndim < 2 or len(sizes) != input.shape[batch_dim]:
        raise ArgumentError(
            f"pack_padded_sequence: expected {len(sizes)} sequences along dim {batch_dim} of the input, "
            f"got shape {input.shape}"
        )
    if any(n <= 0 for n in sizes):
        raise ArgumentError(f"pack_padded_sequence: every length must be at least 1, got lengths {sizes}")
    steps = input.shape[1 - batch_dim]
    if max(sizes) > steps:
        raise ArgumentError(f"pack_padded_sequence: a length ({max(sizes)}) is longer than the input's {steps} steps")
    if enforce_sorted:
        if any(a < b for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ArgumentError(
                f"pack_padded_sequence: with enforce_sorted=True the lengths must not increase, got {sizes}; pass "
                "enforce_sorted=False to have them sorted for you"
            )
        order = None
    else:
        # longest first; equal lengths keep their batch order (a stable sort)
        order = sorted(range(len(sizes)), key=lambda b: -sizes[b])
        input = input.index_select(batch_dim, _index(order).to(input.device))
        sizes = [sizes[b] for b in order]
    time_major = input.transpose(0, 1) if batch_first else input
    batch_sizes = [sum(n > t for n in sizes) for t in range(sizes[0])]
    # step t of the sequences still running: they are the first batch_sizes[t] of the sorted batch
    data = Tensor.cat(*[time_major[t, :count] for t, count in enumerate(batch_sizes)])
    if order is None:
        return PackedSequence(data, _index(batch_sizes))
    inverse = [0] * len(order)
    for position, b in enumerate(order):
        inverse[b] = position
    return PackedSequence(data, _index(batch_sizes), _index(order), _index(inverse))


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Undo pack_padded_sequence: the padded batch (T, B, *) (or (B, T, *)) in the original batch order, and each
    sequence's length (int64) (torch.nn.utils.rnn.pad_packed_sequence). `total_length` pads to that many steps.

    >>> x = Tensor([[1, 4], [2, 0], [3, 0]])
    >>> padded, lengths = pad_packed_sequence(pack_padded_sequence(x, [3, 1]))
    >>> padded.tolist(), lengths.tolist()
    ([[1, 4], [2, 0], [3, 0]], [3, 1])
    """
    data, batch_sizes = sequence.data, [int(n) for n in sequence.batch_sizes.tolist()]
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                f"pad_packed_sequence: total_length={total_length} is shorter than the longest sequence ({steps} steps)"
            )
        steps = total_length
    batch = batch_sizes[0] if batch_sizes else 0
    rows, offset = [], 0
    for count in batch_sizes:
        step = data[offset : offset + count]
        if count < batch:
            fill = Tensor.full((batch - count, *data.shape[1:]), padding_value, device=data.device, dtype=data.dtype)
            step = Tensor.cat(step, fill)
        rows.append(step)
        offset += count
    padded = Tensor.stack(*rows)
    padded = _padded_to(padded, steps, padding_value, left=False)
    # each sorted sequence's length: the number of steps whose batch still holds it
    sorted_lengths = [sum(count > b for count in batch_sizes) for b in range(batch)]
    lengths = sorted_lengths
    if sequence.unsorted_indices is not None:
        unsorted = [int(i) for i in sequence.unsorted_indices.tolist()]
        padded = padded.index_select(1, sequence.unsorted_indices.to(data.device))
        lengths = [sorted_lengths[i] for i in unsorted]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _index(lengths)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors (L_i, *) (torch.nn.utils.rnn.pack_sequence): pad_sequence, then pack_padded_sequence."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences a PackedSequence holds, in the original order (torch.nn.utils.rnn.unpack_sequence)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)

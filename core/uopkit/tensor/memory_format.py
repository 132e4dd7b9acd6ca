"""torch's memory formats (`contiguous_format`, `channels_last`, `channels_last_3d`, `preserve_format`) as arguments
that `contiguous`, `to`, `clone` and `Module.to` accept. uopkit has no strides of its own to choose: the backend and
the scheduler decide how a buffer is laid out, so a format changes no value and no layout (a channels-last port runs
as written); `is_contiguous(memory_format=...)` answers from the view's torch strides (`stride()`), as torch's."""

from __future__ import annotations

from typing import Any

__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]


class memory_format:
    """One of torch's memory formats, by name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"uopkit.{self.name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")
_BY_NAME = {f.name: f for f in (contiguous_format, channels_last, channels_last_3d, preserve_format)}


def as_memory_format(value: Any, op: str) -> memory_format:
    """`value` (ours, torch's torch.channels_last and the like, or None) as one of ours; a clear error otherwise."""
    if value is None:
        return preserve_format
    if isinstance(value, memory_format):
        return value
    # torch's objects print as "torch.channels_last"
    found = _BY_NAME.get(str(value).removeprefix("torch.")) if type(value).__name__ == "memory_format" else None
    if found is None:
        raise TypeError(
            f"{op}: memory_format must be uopkit.contiguous_format, channels_last, channels_last_3d or "
            f"preserve_format, got {value!r}"
        )
    return found


def dims_order(fmt: memory_format, ndim: int, op: str) -> tuple[int, ...] | None:
    """The axes from outermost to innermost that `fmt` lays a tensor of `ndim` dims out in (None: row-major)."""
    if fmt is channels_last:
        if ndim != 4:
            raise RuntimeError(f"{op}: channels_last is for 4-d tensors (N, C, H, W), got {ndim} dims (as torch)")
        return (0, 2, 3, 1)
    if fmt is channels_last_3d:
        if ndim != 5:
            raise RuntimeError(f"{op}: channels_last_3d is for 5-d tensors (N, C, D, H, W), got {ndim} dims (as torch)")
        return (0, 2, 3, 4, 1)
    return None

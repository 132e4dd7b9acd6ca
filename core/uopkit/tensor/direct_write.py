"""`x[i] = number` / `x[i, j] = number` stored straight into host memory: one element of a realized, contiguous tensor
that nothing reads lazily, no autograd graph follows and no TinyJit capture records is written through the
allocator (`Allocator.writes_at_offset`, the CPU backend's memmove) instead of a kernel. The result is the kernel's
exactly (the number rounded to the dtype as the kernel's constant is); every other write takes the general path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.device import Device
from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.engine.realize import buffers, capturing, realize_lock
from uopkit.schedule import computed_from, live_tensors, shared_storage
from uopkit.schedule.history import overwriting, recording_writes
from uopkit.schedule.live_index import _pending_store
from uopkit.tensor.support import _check_stored_scalar
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor import Tensor

_BUFFER, _RESHAPE = Ops.BUFFER, Ops.RESHAPE
# the dtypes stored this way: numpy rounds a Python number to each as the kernel's constant is (the half floats, the
# fp8s and uint64 take the general path: a number beyond a half float rounds to inf there, unchecked)
_STORED = {
    dt: np.dtype(to_numpy_dtype(dt))
    for dt in (dtypes.float32, dtypes.float64, dtypes.bool)
    + (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32)
}
# device -> whether its allocator writes at an offset into a buffer (`Allocator.writes_at_offset`)
_writes_at: dict[str, bool] = {}


def store_element(t: Tensor, index: Any, value: Any) -> bool:
    """`t[index] = value` done here when `index` names one element by ints (negative ones count from the end),
    `value` is a Python number and nothing but t sees the buffer's contents now: True when written, False (nothing
    done) where the general path must write it."""
    kind = type(value)
    if kind is not float and kind is not int and kind is not bool:
        return False
    u = t.uop
    base = u.src[0] if u.op is _RESHAPE else u
    if base.op is not _BUFFER or t._view_of is not None or t._requires_grad:
        return False
    np_dtype = _STORED.get(u.dtype)
    if np_dtype is None or capturing or recording_writes:
        return False
    shape = u.shape
    if type(index) is int:
        index = (index,)
    elif type(index) is not tuple:
        return False
    if len(index) != len(shape):
        return False
    flat = 0
    for i, n in zip(index, shape, strict=True):
        if type(i) is not int or not -n <= i < n:
            return False
        flat = flat * n + i % n
    buf = buffers.get(base)
    if buf is None or not buf.is_allocated():
        return False
    device = buf.device
    writes = _writes_at.get(device)
    if writes is None:
        writes = _writes_at[device] = bool(Device[device].allocator.writes_at_offset)
    if not writes or base in shared_storage or computed_from.get(base) is not None or computed_from.get(u) is not None:
        return False
    _check_stored_scalar(value, u.dtype, "setitem", half_floats=False)
    # (under the realizes' lock, as the index of the live tensors is only looked at there)
    with realize_lock:
        # no lazy value reads the contents as they are now, and no assign still to run writes them
        if live_tensors.readers_of([base]) or any(_writes_into(a.uop, base) for a in live_tensors.pending_assigns()):
            return False
        data = np.array(value).astype(np_dtype)
        Device[device].synchronize()
        overwriting([base])
        buf.allocator.copyin_at(buf.opaque, memoryview(data.reshape(1)).cast("B"), flat * np_dtype.itemsize)
    return True


def _writes_into(u: UOp, base: UOp) -> bool:
    # whether the assign still to run `u` stores into the BUFFER `base`
    store = _pending_store(u)
    if store is None:
        return True
    target = store.src[0]
    while target.op is not _BUFFER and target.src:
        target = target.src[0]
    return target is base

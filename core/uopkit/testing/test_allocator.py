"""Conformance, first of all: the allocator hands out at least the bytes asked for.

An `_alloc(size)` that returns less memory than `size` bytes is silent until something overruns it: a C backend's
`copyin` or kernel writes past the end into its neighbours, results may still look right, and a later test dies
with a segmentation fault that names nothing. This file runs before the others (pytest collects it first) and stops
the suite when the allocator is short, since every later test would overrun it too. A C allocator's overrun may
crash the interpreter right here instead: a segmentation fault whose trace names this test means the same thing.
"""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.device import Buffer
from uopkit.dtype import dtypes

# bytes: odd and even, around typical allocator size classes, small enough to stay in a heap (a too small buffer then
# overlaps its neighbour, which this test sees) rather than in a mapping of its own (overrun: a crash)
SIZES = [1, 2, 3, 7, 8, 15, 16, 17, 63, 64, 65, 255, 257, 1000, 4096, 4099, 16384 + 5]
# buffers of each size, allocated one after the other so that neighbours are likely adjacent
COPIES = 3

# buffers a failed check leaves alive: memory that was overrun may not survive being freed (a C heap's bookkeeping)
_kept: list[Buffer] = []


def test_allocator_hands_out_the_bytes_asked_for(uopkit_device: str) -> None:
    """All buffers are allocated first, then each is filled completely with bytes of its own, then all are read
    back: a buffer shorter than its size shows a neighbour's bytes in its tail (or fails to take its bytes)."""
    rng = np.random.default_rng(11)
    buffers = [Buffer(uopkit_device, size, dtypes.uint8).allocate() for size in SIZES for _ in range(COPIES)]
    contents = [rng.integers(0, 256, b.size, dtype=np.uint8) for b in buffers]
    problems = []
    for buf, data in zip(buffers, contents, strict=True):
        try:
            buf.copyin(memoryview(data))
        except Exception as e:
            problems.append(f"copyin of {buf.size} bytes raised {type(e).__name__}: {e}")
    for buf, data in zip(buffers, contents, strict=True):
        try:
            got = buf.numpy()
        except Exception as e:
            problems.append(f"copyout of {buf.size} bytes raised {type(e).__name__}: {e}")
            continue
        wrong = np.flatnonzero(got != data)
        if len(wrong):
            problems.append(f"a {buf.size}-byte buffer read back wrong from byte {wrong[0]} on ({len(wrong)} bytes)")
    if problems:
        _kept.extend(buffers)
        shown = "\n  ".join(problems[:8])
        pytest.exit(
            f"{uopkit_device}'s allocator hands out less memory than asked for: Allocator._alloc(size) must return at "
            f"least `size` bytes (size is in bytes, >= 1). Every later test would overrun it, so the conformance suite "
            f"stops here.\n  {shown}",
            returncode=pytest.ExitCode.TESTS_FAILED,
        )


def test_shared_memory_buffers_show_one_memory(uopkit_device: str) -> None:
    """A backend that says its buffers can lie in shared memory (`Allocator.supports_shared_memory`): two buffers
    adopted over one segment (as a process and another that received it) read what either writes."""
    from uopkit.device import Device, SharedSegment

    if not Device[uopkit_device].allocator.supports_shared_memory:
        pytest.skip(f"{uopkit_device} doesn't put buffers in shared memory")
    segment = SharedSegment.create(4099)
    one = Buffer.in_shared_memory(uopkit_device, 4099, dtypes.uint8, segment)
    other = Buffer.in_shared_memory(uopkit_device, 4099, dtypes.uint8, segment)
    data = np.random.default_rng(12).integers(0, 256, 4099, dtype=np.uint8)
    one.copyin(memoryview(data))
    seen = other.numpy()
    other.copyin(memoryview(data[::-1].copy()))
    assert np.array_equal(seen, data) and np.array_equal(one.numpy(), data[::-1]), (
        f"{uopkit_device}'s Allocator.adopt_shared(segment) must return a handle to the segment's own memory "
        "(segment.mapping), not a copy: two buffers over one segment don't show each other's writes"
    )


def test_reads_from_an_offset(uopkit_device: str) -> None:
    """A part of a buffer read back (`Buffer.as_numpy(start, stop)`: what `x[i, j].item()` of a stored tensor copies)
    through `Allocator.copyout_at`, the backend's or the default one (`copyout` of the start, its end kept): the
    elements asked for, from any offset, aligned or not."""
    data = np.arange(1001, dtype=np.int32) * 7 - 3000
    buf = Buffer(uopkit_device, data.size, dtypes.int32).allocate().copyin(memoryview(data))
    for start, stop in [(0, 1), (1000, 1001), (3, 17), (1, 2), (500, 1001), (0, 1001), (7, 7)]:
        got = buf.as_numpy(start, stop)
        np.testing.assert_array_equal(got, data[start:stop], err_msg=f"elements [{start}, {stop})")
    raw = Buffer(uopkit_device, 13, dtypes.uint8).allocate().copyin(memoryview(np.arange(13, dtype=np.uint8)))
    np.testing.assert_array_equal(raw.as_numpy(5, 12), np.arange(5, 12, dtype=np.uint8))


def test_writes_at_an_offset(uopkit_device: str) -> None:
    """A part of a buffer written from the host (`Allocator.copyin_at`, where the backend sets `writes_at_offset`:
    what `x[i] = number` stores without a kernel): the bytes asked for land at the offset, aligned or not, and the
    others keep theirs."""
    buf = Buffer(uopkit_device, 13, dtypes.uint8).allocate().copyin(memoryview(np.arange(13, dtype=np.uint8)))
    allocator = buf.allocator
    if not allocator.writes_at_offset:
        pytest.skip(f"{uopkit_device}'s allocator doesn't write at an offset")
    want = np.arange(13, dtype=np.uint8)
    for offset, data in [(0, b"\xff"), (12, b"\xfe"), (3, b"\x10\x11\x12"), (5, bytes(range(100, 108)))]:
        allocator.copyin_at(buf.opaque, memoryview(bytearray(data)), offset)
        want[offset : offset + len(data)] = np.frombuffer(data, np.uint8)
        np.testing.assert_array_equal(buf.as_numpy(), want, err_msg=f"{len(data)} bytes at {offset}")
    allocator.copyin_at(buf.opaque, memoryview(b"\x01\x02"), 7)
    want[7:9] = [1, 2]
    np.testing.assert_array_equal(buf.as_numpy(), want, err_msg="read-only bytes at 7")

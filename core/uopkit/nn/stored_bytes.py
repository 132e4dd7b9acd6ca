"""A tensor's stored bytes out and raw bytes into a new tensor, bit for bit (every dtype, bfloat16 too: no numpy round
trip), for the checkpoint formats (nn/state.py's safetensors, nn/torch_format.py's PyTorch files)."""

from __future__ import annotations

from uopkit.device import Buffer, Device
from uopkit.dtype import DType
from uopkit.tensor import Tensor, buffers
from uopkit.uop.ops import UOp


def stored_bytes(t: Tensor) -> bytes:
    """The tensor's elements in order, exactly as stored (NaN payloads and -0.0 survive)."""
    if t.numel() == 0:
        return b""
    buf = t._buffer()
    out = bytearray(buf.nbytes)
    buf.copyout(memoryview(out))
    return bytes(out)


def tensor_from_bytes(raw: bytes | memoryview, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
    """A tensor of `shape` on `device` (None: the default) whose buffer holds `raw`."""
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    size = len(raw) // dtype.itemsize
    buf = UOp.new_buffer(dev, size, dtype)
    b = Buffer(dev, size, dtype).allocate()
    if size:
        b.copyin(memoryview(raw))
    buffers[buf] = b
    t = Tensor(buf)
    return t.reshape(shape) if shape != (size,) else t

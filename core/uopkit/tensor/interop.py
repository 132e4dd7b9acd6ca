"""Handing values to and from other array libraries (a mixin of `Tensor`): DLPack, the protocol torch, numpy, JAX and
CuPy share (`__dlpack__`, `__dlpack_device__`, `from_dlpack`), numpy arrays (`from_numpy`) and Python buffers
(`frombuffer`).

Every crossing copies. A tensor's storage is its device's, written by kernels the scheduler orders, so another library
never gets a view of it: exporting reads the values back into a new host array that the DLPack capsule owns, and
importing copies the other library's values into a new buffer (torch's from_dlpack and from_numpy share memory
instead). Only host memory crosses: a tensor on another device, or another library's GPU array, raises."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import complex_dtype_of, dtypes, from_numpy_dtype, to_dtype
from uopkit.tensor.complex_creation import complex_from_data
from uopkit.tensor.complex_tensor import ComplexTensor, is_complex_data
from uopkit.tensor.support import _canonical_device, _from_numpy
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# devices whose buffers are host memory
HOST_DEVICES = ("CPU", "EMULATOR")
# DLPack's device types (DLDeviceType): kDLCPU is host memory, the others are named in errors
DL_CPU = 1
_DL_DEVICE_NAMES = {2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed"}


def _check_host(t: Tensor, what: str) -> None:
    if t.device.partition(":")[0] not in HOST_DEVICES:
        raise BufferError(
            f"{what}: only a tensor in host memory (CPU) is exported through DLPack; this one is on {t.device}: "
            "move it first (t.cpu()), or read it with t.numpy()"
        )


def _torch_bfloat16_bits(obj: Any) -> np.ndarray | None:
    # a torch bfloat16 tensor's bits as uint16 (numpy has no bfloat16, so it can't be read through np.from_dlpack)
    torch = sys.modules.get("torch")
    if torch is None or type(obj).__module__ != "torch" or str(getattr(obj, "dtype", "")) != "torch.bfloat16":
        return None
    return np.from_dlpack(obj.view(torch.int16)).view(np.uint16)


def dlpack_uop(obj: Any, device: Any = None) -> UOp:
    """A copy of the values of `obj`, any object with `__dlpack__` in host memory (a CPU torch tensor, a numpy array),
    as a new buffer on `device` (None: the default device), keeping its dtype."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: expected an object with __dlpack__ (a torch tensor, a numpy array), got {type(obj).__name__}"
        )
    if getattr(obj, "requires_grad", False) and callable(getattr(obj, "detach", None)):
        # (torch refuses to export a tensor that requires grad; its values are what is copied, never its graph)
        obj = obj.detach()
    if hasattr(obj, "__dlpack_device__"):
        kind = int(obj.__dlpack_device__()[0])
        if kind != DL_CPU:
            where = _DL_DEVICE_NAMES.get(kind, f"DLPack device type {kind}")
            raise BufferError(
                f"from_dlpack: the {type(obj).__name__}'s values are in {where} memory; only host memory is read "
                "here: move them to the CPU first (torch: .cpu())"
            )
    device = _canonical_device(device)
    bits = _torch_bfloat16_bits(obj)
    if bits is not None:
        return UOp(Ops.BITCAST, dtypes.bfloat16, (_from_numpy(bits, device, dtypes.uint16),))
    try:
        arr = np.from_dlpack(obj)
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        raise TypeError(f"from_dlpack: numpy can't read the {type(obj).__name__}'s values: {e}") from e
    return _from_numpy(arr, device, from_numpy_dtype(arr.dtype))


class InteropMixin:
    __slots__ = ()

    def __dlpack__(
        self: Tensor,  # type: ignore[misc]
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of a copy of the values (what `torch.from_dlpack(t)`, `torch.tensor(t)` and
        `np.from_dlpack(t)` call): the tensor is computed and read back into a new host array, which the capsule
        owns. Only for a tensor on the CPU; `copy=False` raises (a copy is always made), and so does bfloat16 (numpy,
        through which the values go, has none: export `t.float()`, or `t.view(dtypes.uint16)` and view those bits as
        bfloat16 on the other side).

        >>> np.from_dlpack(Tensor([1, 2], device="cpu")).tolist()
        [1, 2]
        """
        _check_host(self, "__dlpack__")
        if copy is False:
            raise BufferError("__dlpack__: uopkit exports a copy of the values; copy=False can't be met")
        if self.dtype == dtypes.bfloat16:
            raise BufferError(
                "__dlpack__: bfloat16 can't be exported (it goes through numpy, which has no bfloat16): export "
                "t.float(), or t.view(dtypes.uint16) and view the bits as bfloat16 there (torch: .view(torch.bfloat16))"
            )
        given = {"max_version": max_version, "dl_device": dl_device, "copy": copy}
        return self.numpy().__dlpack__(stream=stream, **{k: v for k, v in given.items() if v is not None})

    def __dlpack_device__(self: Tensor) -> tuple[int, int]:  # type: ignore[misc]
        """DLPack's (device type, index) of what `__dlpack__` exports: the host's, (1, 0), for a tensor on the CPU;
        other devices raise."""
        _check_host(self, "__dlpack_device__")
        return (DL_CPU, 0)

    @staticmethod
    def from_dlpack(obj: Any, device: Any = None) -> Tensor:
        """A tensor holding a copy of the values of `obj`, any object with `__dlpack__` in host memory (a CPU torch
        tensor, a numpy array), with its dtype, on `device` (None: the default device). torch.from_dlpack shares the
        memory instead: here a write into either doesn't show in the other. A torch tensor that requires grad gives
        its values (no gradient flows back to it); one on a GPU raises (`.cpu()` it first).

        >>> Tensor.from_dlpack(np.array([1.5, 2.5], dtype=np.float32)).tolist()
        [1.5, 2.5]
        """
        return Tensor(dlpack_uop(obj, device))

    @staticmethod
    def from_numpy(arr: np.ndarray, device: Any = None) -> Tensor:
        """A tensor holding a copy of a numpy array's values, with its dtype, on `device` (None: the default device).
        torch.from_numpy shares the array's memory instead: here writing into the array later doesn't change the
        tensor, nor the other way round.

        >>> a = np.array([1, 2], dtype=np.int64)
        >>> t = Tensor.from_numpy(a)
        >>> a[0] = 9
        >>> t.dtype, t.tolist()
        (dtypes.long, [1, 2])
        """
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(arr).__name__}")
        if arr.dtype.kind == "c":
            # a complex array: a ComplexTensor of its dtype (tensor/complex_tensor.py)
            return complex_from_data(arr, device=device)  # type: ignore[return-value]
        return Tensor(arr, device=device)

    @staticmethod
    def frombuffer(buffer: Any, *, dtype: Any, count: int = -1, offset: int = 0, requires_grad: bool = False) -> Tensor:
        """A 1-d tensor of `dtype` holding the bytes of `buffer` (anything with Python's buffer protocol: bytes,
        bytearray, array.array, memoryview, mmap), read from byte `offset`, `count` elements (all that follow when
        negative), in the host's byte order, as torch.frombuffer. torch's tensor shares the buffer's memory; this one
        holds a copy, so later writes into either don't show in the other.

        >>> Tensor.frombuffer(b"\\x01\\x00\\x02\\x00\\x03\\x00", dtype=dtypes.int16, offset=2).tolist()
        [2, 3]
        """
        try:
            raw = memoryview(buffer).cast("B")
        except TypeError:
            raise ValueError(
                f"frombuffer: a {type(buffer).__name__} doesn't expose Python's buffer protocol; pass bytes, a "
                "bytearray, an array.array or a memoryview (a list goes to Tensor(...))"
            ) from None
        dt, total = to_dtype(dtype), raw.nbytes
        if total == 0 or count == 0:
            raise ValueError(f"frombuffer: nothing to read (the buffer has {total} bytes, count is {count})")
        if not 0 <= offset < total:
            raise ValueError(f"frombuffer: offset {offset} must lie in the buffer's {total} bytes (0 to {total - 1})")
        if count < 0:
            if (total - offset) % dt.itemsize:
                raise ValueError(
                    f"frombuffer: the {total - offset} bytes after offset {offset} are not a whole number of {dt} "
                    f"elements ({dt.itemsize} bytes each); pass count= or another offset"
                )
            count = (total - offset) // dt.itemsize
        elif offset + count * dt.itemsize > total:
            raise ValueError(
                f"frombuffer: {count} {dt} elements ({count * dt.itemsize} bytes) from offset {offset} run past the "
                f"buffer's {total} bytes"
            )
        data = bytes(raw[offset : offset + count * dt.itemsize])
        return Tensor(data, dtype=dt, requires_grad=requires_grad or None)

    @staticmethod
    def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """torch.as_tensor: a tensor is returned as it is (the same object, its graph kept) when `dtype` and `device`
        are None or already its own, else converted with `.to(...)`; anything else is taken as `Tensor(data)` takes
        it (a numpy array keeps its dtype, a list gives the default float or int). torch shares a numpy array's
        memory; here the values are copied (see `from_numpy`).

        >>> t = Tensor([1.0, 2.0])
        >>> Tensor.as_tensor(t) is t, Tensor.as_tensor(np.array([1, 2], dtype=np.int64)).dtype
        (True, dtypes.long)
        """
        if isinstance(data, Tensor):
            return data.to(device=device, dtype=dtype)
        if is_complex_data(data) or isinstance(data, ComplexTensor) or complex_dtype_of(dtype) is not None:
            return complex_from_data(data, dtype, device)  # type: ignore[return-value]
        return Tensor(data, dtype=dtype, device=device)

    @staticmethod
    def tensor(
        data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False, pin_memory: bool = False
    ) -> Tensor:
        """torch.tensor: a new tensor holding a copy of `data` (a list, a number, a numpy array, a tensor), as
        `Tensor(data)` takes it, cast to `dtype` and put on `device` where given; a tensor is copied detached
        (`t.detach().clone()`), its graph not kept. `requires_grad=True` makes the result a leaf that requires grad.
        `pin_memory` changes nothing (host memory is what the CPU backend uses).

        >>> t = Tensor([1.0, 2.0], requires_grad=True)
        >>> c = Tensor.tensor(t, dtype="float64")
        >>> c.requires_grad, c.dtype, Tensor.tensor([[1, 2]], requires_grad=False).dtype
        (False, dtypes.double, dtypes.int)
        """
        if isinstance(data, Tensor):
            out = data.detach().clone().to(device=device, dtype=dtype)
        elif is_complex_data(data) or isinstance(data, ComplexTensor) or complex_dtype_of(dtype) is not None:
            # complex values (or a complex dtype): a ComplexTensor (tensor/complex_tensor.py)
            z = complex_from_data(data.detach().clone() if isinstance(data, ComplexTensor) else data, dtype, device)
            return z.requires_grad_(True) if requires_grad else z  # type: ignore[return-value]
        else:
            out = Tensor(data, dtype=dtype, device=device)
        return out.requires_grad_(True) if requires_grad else out

    @staticmethod
    def is_tensor(obj: Any) -> bool:
        """torch.is_tensor: whether `obj` is a Tensor (a subclass's, an `nn.Parameter`, included).

        >>> Tensor.is_tensor(Tensor([1])), Tensor.is_tensor([1])
        (True, False)
        """
        return isinstance(obj, Tensor)

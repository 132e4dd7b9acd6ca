"""PyTorch checkpoints without torch: `torch_load` reads what `torch.save` writes, `torch_save` writes what
`torch.load(weights_only=True)` reads.

The zip format (torch.save's default since torch 1.6) is a zip archive with one top folder (any name) holding
  data.pkl     a pickle (protocol 2) of the saved object; each tensor pickles as a call of
               torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks)
               (or _rebuild_tensor_v3, which adds the dtype), and each storage as a persistent id
               ('storage', storage_type, key, location, numel)
  data/<key>   the raw bytes of that storage (numel elements of a typed storage such as torch.FloatStorage, or
               numel bytes of a torch.storage.UntypedStorage)
  byteorder    "little" or "big" (absent in old files: little)
  version      the format version, "3"
The legacy format (`_use_new_zipfile_serialization=False`) is a sequence of pickles: a magic number, the protocol
version 1001, a dict of system information, the object, the list of storage keys, then for each key an 8-byte element
count and that storage's bytes.

The unpickler resolves only the globals a state dict needs (containers, tensor rebuilding, storage types, dtypes,
torch.Size, torch.device): anything else is refused by name before it is called, as torch's weights_only=True does.

>>> import io
>>> f = io.BytesIO()
>>> torch_save({"w": Tensor([1.0, 2.0]), "step": 3}, f)
>>> loaded = torch_load(io.BytesIO(f.getvalue()))
>>> loaded["w"].tolist(), loaded["step"]
([1.0, 2.0], 3)
"""

from __future__ import annotations

import codecs
import io
import os
import pickle
import pickletools
import struct
import zipfile
from collections import Counter, OrderedDict
from typing import IO, Any

import numpy as np

from uopkit.device import Device
from uopkit.dtype import DType, dtypes
from uopkit.nn.stored_bytes import stored_bytes, tensor_from_bytes
from uopkit.tensor import Tensor

__all__ = ["torch_load", "torch_save", "TorchFormatError", "UnsafePickleError"]


class TorchFormatError(ValueError):
    """The file is not a PyTorch checkpoint uopkit can read (corrupt, truncated, big-endian, unsupported dtype...)."""


class UnsafePickleError(TorchFormatError, pickle.UnpicklingError):
    """The checkpoint's pickle names a global outside the allowed set: it is refused, never imported or called."""


# ---------------------------------------------------------------------------------------------------------------------
# torch's dtypes and storage classes

# torch's name of each dtype uopkit has (aliases too: a pickled dtype is a global `torch <name>`)
_TORCH_DTYPES: dict[str, DType] = {
    "bool": dtypes.bool,
    "uint8": dtypes.uint8,
    "int8": dtypes.int8,
    "int16": dtypes.int16,
    "short": dtypes.int16,
    "int32": dtypes.int32,
    "int": dtypes.int32,
    "int64": dtypes.int64,
    "long": dtypes.int64,
    "uint16": dtypes.uint16,
    "uint32": dtypes.uint32,
    "uint64": dtypes.uint64,
    "float16": dtypes.float16,
    "half": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "float32": dtypes.float32,
    "float": dtypes.float32,
    "float64": dtypes.float64,
    "double": dtypes.float64,
}
# the canonical name of each (what torch_save writes)
_TORCH_DTYPE_NAMES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.uint8: "uint8",
    dtypes.int8: "int8",
    dtypes.int16: "int16",
    dtypes.int32: "int32",
    dtypes.int64: "int64",
    dtypes.uint16: "uint16",
    dtypes.uint32: "uint32",
    dtypes.uint64: "uint64",
    dtypes.float16: "float16",
    dtypes.bfloat16: "bfloat16",
    dtypes.float32: "float32",
    dtypes.float64: "float64",
}
# torch's legacy typed storage classes (the dtypes that have one; the others save as UntypedStorage + dtype)
_STORAGE_CLASSES: dict[str, DType] = {
    "BoolStorage": dtypes.bool,
    "ByteStorage": dtypes.uint8,
    "CharStorage": dtypes.int8,
    "ShortStorage": dtypes.int16,
    "IntStorage": dtypes.int32,
    "LongStorage": dtypes.int64,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "FloatStorage": dtypes.float32,
    "DoubleStorage": dtypes.float64,
}
_STORAGE_CLASS_OF = {dt: name for name, dt in _STORAGE_CLASSES.items()}
# torch dtypes and storages uopkit has no dtype for: refused with a message saying so
_UNSUPPORTED_TORCH_TYPES = {
    "complex32", "complex64", "complex128", "cfloat", "cdouble", "chalf", "quint8", "qint8", "qint32", "quint4x2",
    "quint2x4", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "bits8",
    "ComplexFloatStorage", "ComplexDoubleStorage", "QUInt8Storage", "QInt8Storage", "QInt32Storage",
    "QUInt4x2Storage", "QUInt2x4Storage",
}  # fmt: skip
# torch's rebuilders of tensor kinds uopkit has no counterpart for (torch's weights_only reads them): refused as
# unsupported, with what to save instead, not as unsafe
_UNSUPPORTED_TENSOR_KINDS = {
    "_rebuild_sparse_tensor": "a sparse tensor (save t.to_dense())",
    "_rebuild_qtensor": "a quantized tensor (save t.dequantize())",
    "_rebuild_nested_tensor": "a nested tensor (save its components)",
    "_rebuild_meta_tensor_no_storage": "a meta tensor, which has no values",
    "_rebuild_wrapper_subclass": "a tensor subclass (save a plain tensor)",
}


class _StorageType:
    """Stands for a pickled torch storage class: `dtype` is None for UntypedStorage (whose numel counts bytes)."""

    def __init__(self, name: str, dtype: DType | None) -> None:
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class _TensorType:
    """Stands for torch.Tensor or torch.nn.Parameter, as `_rebuild_from_type_v2` names them."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Storage:
    """A storage named by the pickle: its element dtype, the location torch recorded ("cpu", "cuda:0") and its raw
    bytes (in the legacy format, filled in after the pickle has been read)."""

    def __init__(self, dtype: DType, data: bytes, location: str, where: str) -> None:
        self.dtype, self.data, self.location, self.where = dtype, data, location, where


class _PendingTensor:
    """A tensor the pickle rebuilt: turned into a uopkit Tensor once the whole file has been read (so device errors
    are not mistaken for a corrupt file, and legacy storages have their bytes)."""

    def __init__(
        self, storage: _Storage, dtype: DType, offset: int, size: tuple[int, ...], stride: tuple[int, ...]
    ) -> None:
        self.storage, self.dtype, self.offset, self.size, self.stride = storage, dtype, offset, size, stride
        self.requires_grad = False


# ---------------------------------------------------------------------------------------------------------------------
# the allowed globals: each is our own function or marker, never torch's or anything importable


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TorchFormatError(f"torch_load: a tensor's {what} is {value!r}, not a tuple of ints")
    return tuple(value)


def _pending(
    storage: Any, dtype: DType | None, storage_offset: Any, size: Any, stride: Any, requires_grad: Any
) -> _PendingTensor:
    if not isinstance(storage, _Storage):
        raise TorchFormatError(f"torch_load: a tensor is rebuilt from {type(storage).__name__}, not a storage")
    if not isinstance(storage_offset, int) or storage_offset < 0:
        raise TorchFormatError(f"torch_load: a tensor has storage offset {storage_offset!r}")
    size, stride = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise TorchFormatError(f"torch_load: a tensor has size {size} and stride {stride}, which don't match")
    out = _PendingTensor(storage, dtype or storage.dtype, storage_offset, size, stride)
    out.requires_grad = bool(requires_grad)
    return out


def _rebuild_tensor_v2(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> _PendingTensor:
    return _pending(storage, None, storage_offset, size, stride, requires_grad)


def _rebuild_tensor_v3(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    backward_hooks: Any,
    dtype: Any,
    metadata: Any = None,
) -> _PendingTensor:
    # an UntypedStorage (bytes) read as `dtype`
    if not isinstance(dtype, DType):
        raise TorchFormatError(f"torch_load: _rebuild_tensor_v3 got dtype {dtype!r}")
    return _pending(storage, dtype, storage_offset, size, stride, requires_grad)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any, state: Any = None) -> _PendingTensor:
    if not isinstance(data, _PendingTensor):
        raise TorchFormatError(f"torch_load: a Parameter is rebuilt from {type(data).__name__}, not a tensor")
    data.requires_grad = bool(requires_grad)
    return data


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    # a Tensor or Parameter with Python attributes (`state`, dropped): `func` is one of the functions above
    if not isinstance(new_type, _TensorType) or func not in (_rebuild_tensor_v2, _rebuild_tensor_v3):
        raise TorchFormatError(f"torch_load: _rebuild_from_type_v2 of {new_type!r} is not supported")
    if not isinstance(args, tuple):
        raise TorchFormatError(f"torch_load: _rebuild_from_type_v2 got arguments {args!r}")
    return func(*args)


def _torch_size(dims: Any = ()) -> tuple[int, ...]:
    return _int_tuple(tuple(dims), "torch.Size")


def _torch_device(kind: Any, index: Any = None) -> str:
    # a torch.device value comes back as its string, "cpu" or "cuda:0"
    if not isinstance(kind, str) or not (index is None or isinstance(index, int)):
        raise TorchFormatError(f"torch_load: torch.device({kind!r}, {index!r}) is malformed")
    return kind if index is None else f"{kind}:{index}"


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # how protocol 2 pickles bytes: _codecs.encode(str, "latin1")
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"torch_load: the pickle calls _codecs.encode with {encoding!r}, not latin1")
    return codecs.encode(text, "latin1")


def _counter(counts: Any = None) -> Counter:
    # collections.Counter (MultiStepLR's milestones), which torch's weights_only reader allows: pickled as a call with
    # one dict of the counts
    if counts is None:
        return Counter()
    if type(counts) is not dict:
        raise UnsafePickleError(f"torch_load: the pickle calls collections.Counter with a {type(counts).__name__}")
    return Counter(counts)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): _counter,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("_codecs", "encode"): _codecs_encode,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TensorType("Tensor"),
    ("torch.nn.parameter", "Parameter"): _TensorType("Parameter"),
    ("torch", "Size"): _torch_size,
    ("torch", "device"): _torch_device,
    ("torch", "UntypedStorage"): _StorageType("UntypedStorage", None),
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", None),
    **{("torch", name): _StorageType(name, dt) for name, dt in _STORAGE_CLASSES.items()},
    **{("torch", name): dt for name, dt in _TORCH_DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Resolves globals only from `_ALLOWED` and storages (persistent ids) through `load_storage`."""

    def __init__(self, file: IO[bytes], load_storage: Any) -> None:
        super().__init__(file, encoding="utf-8")
        self._load_storage = load_storage

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module in ("torch", "torch.storage") and name in _UNSUPPORTED_TORCH_TYPES:
            raise TorchFormatError(f"torch_load: the checkpoint uses torch.{name}, which uopkit has no dtype for")
        if module == "torch._utils" and name in _UNSUPPORTED_TENSOR_KINDS:
            what = _UNSUPPORTED_TENSOR_KINDS[name]
            raise TorchFormatError(f"torch_load: the checkpoint holds {what}; uopkit reads only dense tensors")
        raise UnsafePickleError(
            f"torch_load: the checkpoint's pickle names the global {module}.{name}, which is not allowed (only "
            "containers, tensors, storages, dtypes, torch.Size and torch.device are; it was not imported or called)"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or len(pid) not in (5, 6) or pid[0] not in ("storage", b"storage"):
            raise TorchFormatError(f"torch_load: unknown persistent id {pid!r} (expected a 'storage' record)")
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, _StorageType) or not isinstance(numel, int) or numel < 0:
            raise TorchFormatError(f"torch_load: malformed storage record {pid!r}")
        view = pid[5] if len(pid) == 6 else None
        return self._load_storage(storage_type, str(key), str(location), numel, view)


# opcodes that reach objects without find_class (the copyreg extension cache): refused before anything is loaded
_REFUSED_OPCODES = {"EXT1", "EXT2", "EXT4"}


def _unpickle(data: IO[bytes], load_storage: Any, fn: Any) -> Any:
    try:
        start = data.tell()
        for op, _, _ in pickletools.genops(data):
            if op.name in _REFUSED_OPCODES:
                raise UnsafePickleError(f"torch_load: {fn} uses the pickle opcode {op.name}, which is not allowed")
        data.seek(start)
        return _Unpickler(data, load_storage).load()
    except TorchFormatError:
        raise
    except RecursionError:
        raise TorchFormatError(f"torch_load: {fn} nests too deeply to read") from None
    except Exception as e:
        # a corrupt pickle fails inside the unpickler in many ways (EOFError, UnpicklingError, TypeError...)
        raise TorchFormatError(f"torch_load: {fn} holds a corrupt pickle ({type(e).__name__}: {e})") from e


# ---------------------------------------------------------------------------------------------------------------------
# reading


def _storage_dtype(storage_type: _StorageType) -> DType:
    return storage_type.dtype if storage_type.dtype is not None else dtypes.uint8


def _check_size(data: bytes, storage_type: _StorageType, numel: int, where: str) -> bytes:
    dtype = _storage_dtype(storage_type)
    if len(data) != numel * dtype.itemsize:
        raise TorchFormatError(
            f"torch_load: {where} has {len(data)} bytes but its record says {numel} elements of {dtype} "
            f"({numel * dtype.itemsize} bytes); the file is truncated or corrupt"
        )
    return data


def _load_zip(f: IO[bytes], fn: Any) -> Any:
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise TorchFormatError(f"torch_load: {fn} is not a readable zip archive ({e}); truncated or corrupt?") from e
    with zf:
        names = zf.namelist()
        if not names or "/" not in names[0]:
            raise TorchFormatError(f"torch_load: {fn} is a zip archive but not a torch checkpoint (no top folder)")
        prefix = names[0].split("/", 1)[0] + "/"
        present = set(names)

        def read(record: str) -> bytes:
            try:
                return zf.read(prefix + record)
            except (zipfile.BadZipFile, OSError, EOFError, zipfile.LargeZipFile) as e:
                raise TorchFormatError(f"torch_load: record {prefix}{record} of {fn} is corrupt ({e})") from e

        if prefix + "data.pkl" not in present:
            raise TorchFormatError(f"torch_load: {fn} has no {prefix}data.pkl: not a torch checkpoint")
        if prefix + "byteorder" in present:
            order = read("byteorder").decode(errors="replace").strip()
            if order != "little":
                raise TorchFormatError(f"torch_load: {fn} was written {order!r}-endian; only little-endian is read")
        storages: dict[str, _Storage] = {}

        def load_storage(storage_type: _StorageType, key: str, location: str, numel: int, view: Any) -> _Storage:
            if key not in storages:
                if prefix + f"data/{key}" not in present:
                    raise TorchFormatError(f"torch_load: {fn} has no record data/{key} for a storage its pickle names")
                where = f"storage data/{key} of {fn}"
                data = _check_size(read(f"data/{key}"), storage_type, numel, where)
                storages[key] = _Storage(_storage_dtype(storage_type), data, location, where)
            return storages[key]

        return _unpickle(io.BytesIO(read("data.pkl")), load_storage, fn)


_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001


def _load_legacy(data: bytes, fn: Any) -> Any:
    f = io.BytesIO(data)
    # the object names storages by key; their bytes come after it, in the order of a key list, and fill these in
    roots: dict[str, tuple[_StorageType, int]] = {}
    views: list[tuple[str, int, int, _Storage]] = []

    def load_storage(storage_type: _StorageType, key: str, location: str, numel: int, view: Any) -> _Storage:
        roots.setdefault(key, (storage_type, numel))
        offset, size = 0, numel
        if view is not None:
            # (view_key, offset, size): a slice of the root storage (written by torch before 1.0)
            try:
                _, offset, size = (str(view[0]), int(view[1]), int(view[2]))
            except (TypeError, ValueError, IndexError):
                raise TorchFormatError(f"torch_load: malformed storage view {view!r} in {fn}") from None
        storage = _Storage(_storage_dtype(storage_type), b"", location, f"storage {key} of {fn}")
        views.append((key, offset, size, storage))
        return storage

    def no_storage(*args: Any) -> Any:
        raise TorchFormatError(f"torch_load: a storage in the header of legacy file {fn}")

    if _unpickle(f, no_storage, fn) != _LEGACY_MAGIC:
        raise TorchFormatError(f"torch_load: {fn} is neither a zip checkpoint nor a legacy torch.save file")
    protocol = _unpickle(f, no_storage, fn)
    if protocol != _LEGACY_PROTOCOL:
        raise TorchFormatError(f"torch_load: {fn} has legacy protocol version {protocol!r}, not {_LEGACY_PROTOCOL}")
    sys_info = _unpickle(f, no_storage, fn)
    if not isinstance(sys_info, dict) or not sys_info.get("little_endian", True):
        raise TorchFormatError(f"torch_load: {fn} was written big-endian; only little-endian is read")
    result = _unpickle(f, load_storage, fn)
    keys = _unpickle(f, no_storage, fn)
    if not isinstance(keys, list) or set(map(str, keys)) != set(roots):
        raise TorchFormatError(f"torch_load: {fn} lists storages {keys!r} but its object names {sorted(roots)}")
    raw: dict[str, bytes] = {}
    for key in map(str, keys):
        storage_type, numel = roots[key]
        head = f.read(8)
        if len(head) != 8 or struct.unpack("<q", head)[0] != numel:
            raise TorchFormatError(f"torch_load: {fn} is truncated or corrupt at the data of storage {key}")
        raw[key] = _check_size(f.read(numel * _storage_dtype(storage_type).itemsize), storage_type, numel, key)
    for key, offset, size, storage in views:
        itemsize = storage.dtype.itemsize
        if (offset + size) * itemsize > len(raw[key]):
            raise TorchFormatError(f"torch_load: a view of storage {key} in {fn} runs past its end")
        storage.data = raw[key][offset * itemsize : (offset + size) * itemsize]
    return result


def _to_tensor(p: _PendingTensor, device: str) -> Tensor:
    dtype, itemsize = p.dtype, p.dtype.itemsize
    if 0 in p.size:
        raw = b""
    else:
        numel = len(p.storage.data) // itemsize
        last = p.offset + sum((n - 1) * s for n, s in zip(p.size, p.stride, strict=True))
        if last >= numel or len(p.storage.data) % itemsize:
            raise TorchFormatError(
                f"torch_load: a {dtype} tensor (offset {p.offset}, size {p.size}, stride {p.stride}) reaches element "
                f"{last} of {p.storage.where}, which has {len(p.storage.data)} bytes"
            )
        # gather the elements as unsigned ints of the same width: any dtype (bfloat16 too) keeps its bits
        flat = np.frombuffer(p.storage.data, dtype=np.dtype(f"<u{itemsize}"))
        view = np.lib.stride_tricks.as_strided(
            flat[p.offset :], shape=p.size, strides=tuple(s * itemsize for s in p.stride), writeable=False
        )
        raw = np.ascontiguousarray(view).tobytes()
    t = tensor_from_bytes(raw, dtype, p.size, device)
    if p.requires_grad and dtypes.is_float(dtype):
        t.requires_grad = True
    return t


def _materialize(obj: Any, device_of: Any, done: dict[int, Any]) -> Any:
    # replace every rebuilt tensor (and bare storage) in the unpickled object; the same one twice gives one Tensor
    if id(obj) in done:
        return done[id(obj)]
    if isinstance(obj, _PendingTensor):
        out: Any = _to_tensor(obj, device_of(obj.storage))
    elif isinstance(obj, _Storage):
        numel = len(obj.data) // obj.dtype.itemsize
        out = _to_tensor(_PendingTensor(obj, obj.dtype, 0, (numel,), (1,)), device_of(obj))
    elif isinstance(obj, dict):
        out = type(obj)() if isinstance(obj, (OrderedDict, Counter)) else {}
        if isinstance(getattr(obj, "_metadata", None), dict):
            # (a torch state dict's layer versions: load_state_dict reads them, as torch's)
            out._metadata = obj._metadata
        done[id(obj)] = out
        for k, v in obj.items():
            out[k] = _materialize(v, device_of, done)
    elif isinstance(obj, list):
        out = []
        done[id(obj)] = out
        out.extend(_materialize(v, device_of, done) for v in obj)
    elif isinstance(obj, (tuple, set, frozenset)):
        out = type(obj)(_materialize(v, device_of, done) for v in obj)
    else:
        return obj
    done[id(obj)] = out
    return out


def _device_named(value: Any) -> str:
    # a device string, or torch.device (duck-typed: its str() is "cpu", "cuda:0")
    if isinstance(value, str) or (hasattr(value, "type") and hasattr(value, "index")):
        device = Device.canonicalize(str(value))
        # fail now, with the registry's hint, rather than at the first tensor
        Device[device]
        return device
    raise TypeError(
        f"torch_load: map_location must be None, a device string ('CPU', 'cuda:0', ...), a dict from saved locations "
        f"to devices or a function (storage, location) -> storage or device, not {type(value).__name__}"
    )


def _resolve_device(map_location: Any) -> Any:
    """A function from a storage to the uopkit device its tensors go to."""
    if map_location is None:
        default = Device.DEFAULT
        return lambda storage: default
    if isinstance(map_location, dict):
        mapping = {str(k): _device_named(v) for k, v in map_location.items()}
        default = Device.DEFAULT
        return lambda storage: mapping.get(storage.location, default)
    if callable(map_location):
        return lambda storage: _called_location(map_location, storage)
    device = _device_named(map_location)
    return lambda storage: device


def _called_location(fn: Any, storage: _Storage) -> str:
    # torch calls fn(storage, location) with the storage deserialized on the CPU: returning it unchanged (the common
    # `lambda storage, loc: storage`) keeps it there; a device string (or torch.device) names another device
    out = fn(storage, storage.location)
    return "CPU" if out is storage else _device_named(out)


def torch_load(
    path_or_file: str | os.PathLike | IO[bytes],
    map_location: Any = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
) -> Any:
    """Read a file written by `torch.save`: containers and numbers come back as Python objects, tensors (and
    Parameters) as uopkit Tensors on `map_location` (default `Device.DEFAULT`).

    `map_location` is a uopkit device string (torch's "cpu" and "cuda:0" name uopkit's CPU and CUDA), a dict from
    the locations the file records ("cpu", "cuda:0") to devices, the others going to the default device, or torch's
    function `(storage, location)`, which returns the storage itself (left on the CPU, as torch leaves it) or a device.
    Only the globals a state dict needs are resolved; any other raises UnsafePickleError without being imported.

    `weights_only` and `mmap` are torch's, accepted so that ported calls run: the file is always read as
    `weights_only=True` reads it (`False` unlocks nothing) and whole into memory.

    >>> import io
    >>> f = io.BytesIO()
    >>> torch_save({"layers": [Tensor([[1, 2], [3, 4]]).T]}, f)
    >>> torch_load(io.BytesIO(f.getvalue()))["layers"][0].tolist()
    [[1, 3], [2, 4]]
    """
    for name, flag in (("weights_only", weights_only), ("mmap", mmap)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"torch_load: {name} must be a bool or None, got {flag!r}")
    device_of = _resolve_device(map_location)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "rb") as fh:
            data = fh.read()
        fn: Any = os.fspath(path_or_file)
    else:
        data = path_or_file.read()
        fn = getattr(path_or_file, "name", "<file>")
    if data[:4] == b"PK\x03\x04" or (data[:4] == b"PK\x05\x06"):
        result = _load_zip(io.BytesIO(data), fn)
    elif len(data) > 262 and data[257:262] == b"ustar":
        raise TorchFormatError(f"torch_load: {fn} is a torch.save tar archive (torch < 0.4), which is not supported")
    elif data[:2] == b"\x80\x02":
        result = _load_legacy(data, fn)
    else:
        what = "empty" if not data else f"starts with {data[:8]!r}"
        raise TorchFormatError(f"torch_load: {fn} is not a torch checkpoint (it is {what})")
    return _materialize(result, device_of, {})


# ---------------------------------------------------------------------------------------------------------------------
# writing


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


_MARK, _TUPLE, _EMPTY_TUPLE, _REDUCE = b"(", b"t", b")", b"R"
_ORDERED_DICT = _global("collections", "OrderedDict") + _EMPTY_TUPLE + _REDUCE
_COUNTER, _TUPLE1 = _global("collections", "Counter"), b"\x85"


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    # as torch computes them: a dimension of size 0 counts as 1
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


class _PickleWriter:
    """Writes the pickle (protocol 2) of a state dict the way torch.save does: tensors as `_rebuild_tensor_v2` calls
    on persistent storages. Only the types torch's weights_only reader accepts are written; no memo is used."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.storages: list[bytes] = []
        self.keys: dict[int, str] = {}
        self.open: set[int] = set()

    def dump(self, obj: Any) -> bytes:
        self.save(obj, "obj")
        self.out += b"."
        return bytes(self.out)

    def save(self, obj: Any, path: str) -> None:
        if isinstance(obj, np.generic):
            obj = obj.item()
        if obj is None:
            self.out += b"N"
        elif obj is True or obj is False:
            self.out += b"\x88" if obj else b"\x89"
        elif isinstance(obj, int):
            # (an int pickles without memo ops: BININT1, BININT or LONG1)
            self.out += pickle.dumps(int(obj), protocol=2)[2:-1]
        elif isinstance(obj, float):
            self.out += b"G" + struct.pack(">d", obj)
        elif isinstance(obj, str):
            text = obj.encode("utf-8", "surrogatepass")
            self.out += b"X" + struct.pack("<I", len(text)) + text
        elif isinstance(obj, bytes):
            # as pickle's protocol 2 writes bytes: _codecs.encode of their latin1 text, which torch's reader allows
            self.out += _global("_codecs", "encode") + _MARK
            self.save(obj.decode("latin1"), path)
            self.save("latin1", path)
            self.out += _TUPLE + _REDUCE
        elif isinstance(obj, Tensor):
            self.save_tensor(obj, path)
        elif isinstance(obj, DType) and obj in _TORCH_DTYPE_NAMES:
            self.out += _global("torch", _TORCH_DTYPE_NAMES[obj])
        elif isinstance(obj, (dict, list, tuple)):
            if id(obj) in self.open:
                raise ValueError(f"torch_save: {path} contains itself")
            self.open.add(id(obj))
            self.save_container(obj, path)
            self.open.discard(id(obj))
        else:
            kind = type(obj)
            # qualified unless a builtin: a torch.Tensor must not read as "a Tensor"
            name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
            raise TypeError(
                f"torch_save: {path} is a {name}; only uopkit Tensors, dicts, lists, tuples, str, bytes, int, float, "
                "bool and None are written"
            )

    def save_container(self, obj: dict | list | tuple, path: str) -> None:
        if isinstance(obj, Counter):
            # as pickle writes a Counter: collections.Counter called with a dict of the counts
            self.out += _COUNTER
            self.save_container(dict(obj), path)
            self.out += _TUPLE1 + _REDUCE
        elif isinstance(obj, dict):
            self.out += _ORDERED_DICT if isinstance(obj, OrderedDict) else b"}"
            for i, (k, v) in enumerate(obj.items()):
                if not isinstance(k, (str, int, float, bool, type(None), tuple)):
                    raise TypeError(f"torch_save: {path} has a key of type {type(k).__name__}")
                if i % 1000 == 0:
                    self.out += b"u(" if i else b"("
                self.save(k, f"{path}[{k!r}]")
                self.save(v, f"{path}[{k!r}]")
            if obj:
                self.out += b"u"
            metadata = getattr(obj, "_metadata", None) if isinstance(obj, OrderedDict) else None
            if isinstance(metadata, dict):
                # a state dict's `_metadata` (its layers' versions) as pickle writes an OrderedDict's attributes: set
                # by BUILD after the items, so that torch.load gives it back
                self.save({"_metadata": metadata}, f"{path}._metadata")
                self.out += b"b"
        elif isinstance(obj, list):
            self.out += b"]"
            for i, v in enumerate(obj):
                if i % 1000 == 0:
                    self.out += b"e(" if i else b"("
                self.save(v, f"{path}[{i}]")
            if obj:
                self.out += b"e"
        else:
            self.out += _MARK
            for i, v in enumerate(obj):
                self.save(v, f"{path}[{i}]")
            self.out += _TUPLE

    def save_tensor(self, t: Tensor, path: str) -> None:
        if t.dtype not in _TORCH_DTYPE_NAMES:
            raise TypeError(f"torch_save: {path} has dtype {t.dtype}, which torch can't hold")
        key = self.keys.get(id(t))
        if key is None:
            key = self.keys[id(t)] = str(len(self.storages))
            self.storages.append(stored_bytes(t))
        shape = tuple(int(s) for s in t.shape)
        storage_class = _STORAGE_CLASS_OF.get(t.dtype)
        if storage_class is not None:
            numel = len(self.storages[int(key)]) // t.dtype.itemsize
            self.out += _global("torch._utils", "_rebuild_tensor_v2")
            storage_type = _global("torch", storage_class)
        else:
            # the dtypes without a typed storage class (uint16/32/64): bytes plus the dtype, as torch writes them
            numel = len(self.storages[int(key)])
            self.out += _global("torch._utils", "_rebuild_tensor_v3")
            storage_type = _global("torch.storage", "UntypedStorage")
        self.out += _MARK + _MARK + b"X\x07\x00\x00\x00storage" + storage_type
        self.save(key, path)
        self.out += b"X\x03\x00\x00\x00cpu"
        self.save(numel, path)
        # ('storage', type, key, 'cpu', numel) as a persistent id, then offset, size, stride, requires_grad, hooks
        self.out += _TUPLE + b"Q"
        self.save(0, path)
        self.save(shape, path)
        self.save(_contiguous_strides(shape), path)
        self.out += b"\x89" + _ORDERED_DICT
        if storage_class is None:
            self.out += _global("torch", _TORCH_DTYPE_NAMES[t.dtype])
        self.out += _TUPLE + _REDUCE


_ALIGNMENT = 64


def _write_record(zf: zipfile.ZipFile, name: str, data: bytes, align: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    if align and zf.fp is not None:
        # torch pads the local header's extra field (id "FB") so each storage starts 64-byte aligned (for mmap)
        header_end = zf.fp.tell() + 30 + len(name.encode())
        pad = -(header_end + 4) % _ALIGNMENT
        info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    zf.writestr(info, data)


def torch_save(obj: Any, path_or_file: str | os.PathLike | IO[bytes]) -> None:
    """Write `obj` (a state dict: nested dicts, lists and tuples of Tensors, numbers and strings) in torch.save's zip
    format, which `torch.load(..., weights_only=True)` reads. Each Tensor is written contiguous, as its own storage,
    on "cpu" and with requires_grad=False (as `model.state_dict()` holds them).

    >>> import io
    >>> f = io.BytesIO()
    >>> torch_save({"bias": Tensor([0.5], dtype="bfloat16")}, f)
    >>> torch_load(io.BytesIO(f.getvalue()))["bias"].dtype == dtypes.bfloat16
    True
    """
    writer = _PickleWriter()
    pickled = writer.dump(obj)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "wb") as fh:
            _write_archive(fh, pickled, writer.storages)
    else:
        _write_archive(path_or_file, pickled, writer.storages)


def _write_archive(fh: IO[bytes], pickled: bytes, storages: list[bytes]) -> None:
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
        _write_record(zf, "archive/data.pkl", pickled)
        _write_record(zf, "archive/.format_version", b"1")
        _write_record(zf, "archive/.storage_alignment", str(_ALIGNMENT).encode())
        _write_record(zf, "archive/byteorder", b"little")
        for key, raw in enumerate(storages):
            _write_record(zf, f"archive/data/{key}", raw, align=True)
        _write_record(zf, "archive/version", b"3\n")

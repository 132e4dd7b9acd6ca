"""Model state: find the Tensors of a model, load them in place, and save/load them as safetensors (and as PyTorch
checkpoints: `torch_load`/`torch_save`, from nn/torch_format.py).

The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
raw little-endian bytes of every tensor, offsets relative to the end of the header.

>>> from uopkit.nn import Linear
>>> sorted(get_state_dict(Linear(2, 3)))
['bias', 'weight']
"""

from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from typing import Any

import numpy as np

from uopkit.dtype import DType, dtypes
from uopkit.nn.stored_bytes import stored_bytes, tensor_from_bytes
from uopkit.nn.torch_format import TorchFormatError, UnsafePickleError, torch_load, torch_save
from uopkit.tensor import ShapeError, Tensor

__all__ = [
    "get_state_dict", "get_parameters", "load_state_dict", "safe_save", "safe_load", "safe_load_metadata",
    "SafetensorsError", "torch_load", "torch_save", "TorchFormatError", "UnsafePickleError",
]  # fmt: skip


class StateDictKeyError(KeyError, RuntimeError):
    """load_state_dict(strict=True) found missing or unexpected keys: a RuntimeError, as torch raises."""


class SafetensorsError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------------------------------
# finding tensors


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, keyed by dotted path (an object
    reached by several paths under each, as torch's state_dict and tinygrad's get_state_dict list it).

    >>> class Net:
    ...     def __init__(self): self.layers = [Tensor([1.0]), {"w": Tensor([2.0])}]
    >>> list(get_state_dict(Net()))
    ['layers.0', 'layers.1.w']
    """
    out: dict[str, Tensor] = {}
    _collect(obj, prefix, out, set())
    return out


def _collect(obj: Any, prefix: str, out: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, Tensor):
        out[prefix.rstrip(".")] = obj
        return
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return
    module_state = getattr(obj, "_state_tensors", None)
    if module_state is not None and not isinstance(obj, type):
        # an nn.Module: its parameters and buffers, by torch's rules (a plain tensor attribute is not state)
        for name, t in module_state().items():
            out[prefix + name] = t
        return
    # `seen` holds the objects being walked, so that a cycle ends while a shared object is listed under each path
    seen.add(id(obj))
    _collect_items(obj, prefix, out, seen)
    seen.discard(id(obj))


def _collect_items(obj: Any, prefix: str, out: dict[str, Tensor], seen: set[int]) -> None:
    if hasattr(obj, "_asdict"):
        items: Any = obj._asdict().items()
    elif isinstance(obj, (dict, OrderedDict)):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).items()
    else:
        return
    for k, v in items:
        _collect(v, f"{prefix}{k}.", out, seen)


def get_parameters(obj: Any) -> list[Tensor]:
    """Every distinct Tensor of `obj`: what an optimizer takes (requires_grad=False ones are state it realizes)."""
    seen: set[int] = set()
    params = []
    for t in get_state_dict(obj).values():
        if id(t) not in seen:
            seen.add(id(t))
            params.append(t)
    return params


def load_state_dict(model: Any, state_dict: dict[str, Any], strict: bool = True, verbose: bool = False) -> None:
    """Write each value of `state_dict` into the model's tensor of the same name, in place (assign -> STORE).

    The model keeps its Tensor objects (an optimizer built on them stays valid). With `strict`, missing and unexpected
    keys are errors; a shape mismatch always is.
    """
    load_tensors(get_state_dict(model), state_dict, strict, verbose)


def matched_tensors(
    targets: dict[str, Tensor], state_dict: dict[str, Any], strict: bool = True, verbose: bool = False
) -> tuple[list[str], list[str], dict[str, tuple[Tensor, Tensor]]]:
    """The missing and the unexpected keys of `state_dict` (with `strict`, raises on any), and (target, value) by the
    names both hold: each value a Tensor (a numpy array or a list made one), its shape checked against the target's."""
    missing = [k for k in targets if k not in state_dict]
    unexpected = [k for k in state_dict if k not in targets]
    if strict and (missing or unexpected):
        raise StateDictKeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    pairs: dict[str, tuple[Tensor, Tensor]] = {}
    for k, target in targets.items():
        if k not in state_dict:
            continue
        value = state_dict[k]
        if getattr(target, "uninitialized", False) or getattr(value, "uninitialized", False):
            # (a lazy layer's tensor not made yet, in the model or in the state dict: nothing to copy, as torch's)
            continue
        if not isinstance(value, Tensor):
            arr = np.asarray(value)
            value = Tensor(arr, device=target.device).reshape(arr.shape)
        if target.shape == () and value.shape == (1,):
            # a one-element 1-D value fills a 0-d tensor, as torch's loading of checkpoints from before 0-d tensors
            value = value.reshape(())
        if value.shape != target.shape:
            raise ShapeError(
                f"load_state_dict: {k!r} has shape {value.shape} in the state dict but {target.shape} in the model"
            )
        if verbose:
            print(f"load_state_dict: {k} {value.shape} {value.dtype} -> {target.dtype}")
        pairs[k] = (target, value)
    return missing, unexpected, pairs


def load_tensors(
    targets: dict[str, Tensor], state_dict: dict[str, Any], strict: bool = True, verbose: bool = False
) -> tuple[list[str], list[str]]:
    """Write each value of `state_dict` into the tensor of `targets` of the same name, in place; returns the missing
    and the unexpected keys (with `strict`, raises on any)."""
    missing, unexpected, pairs = matched_tensors(targets, state_dict, strict, verbose)
    write_tensors(pairs)
    return missing, unexpected


def write_tensors(pairs: dict[str, tuple[Tensor, Tensor]]) -> None:
    """Write each (target, value) of `pairs` (what `matched_tensors` gives) into its target, in place."""
    # one tensor under several names (a shared layer, a tied weight) takes the value of its last name, as torch's
    # copies in turn leave it; one assign per tensor, so the realize has no two writes to one buffer to order
    last = {id(target): (target, value) for target, value in pairs.values()}
    written = [target.assign(value.to(target.device).cast(target.dtype)) for target, value in last.values()]
    if written:
        Tensor.realize(*written)


# ---------------------------------------------------------------------------------------------------------------------
# safetensors

_ST_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "I8": dtypes.int8,
    "U8": dtypes.uint8,
    "I16": dtypes.int16,
    "U16": dtypes.uint16,
    "I32": dtypes.int32,
    "U32": dtypes.uint32,
    "I64": dtypes.int64,
    "U64": dtypes.uint64,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to the safetensors file `fn` (bit for bit; `metadata` goes in "__metadata__").

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> safe_save({"w": Tensor([1.0, 2.0])}, path)
    >>> safe_load(path)["w"].tolist()
    [1.0, 2.0]
    """
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("safe_save: metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
        if name == "__metadata__":
            raise SafetensorsError("safe_save: '__metadata__' is reserved and can't name a tensor")
        if t.dtype not in _ST_NAMES:
            raise SafetensorsError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors can't store")
        raw = stored_bytes(t)
        header[name] = {
            "dtype": _ST_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    # pad the header with spaces so the data starts 8-byte aligned, as the reference writer does
    text += b" " * (-len(text) % 8)
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def _read_header(data: bytes, fn: Any) -> tuple[dict[str, Any], int]:
    if len(data) < 8:
        raise SafetensorsError(f"safe_load: {fn} is too short to be a safetensors file ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise SafetensorsError(f"safe_load: {fn} says its header has {n} bytes but the file has {len(data)}")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"safe_load: {fn} has a header that isn't valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"safe_load: {fn} has a header that isn't a JSON object")
    return header, 8 + n


def safe_load_metadata(fn: str | os.PathLike) -> dict[str, str]:
    """The "__metadata__" of a safetensors file ({} when it has none)."""
    with open(fn, "rb") as f:
        head = f.read(8)
        (n,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
        header, _ = _read_header(head + f.read(n), fn)
    return dict(header.get("__metadata__", {}))


def safe_load(fn: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read every tensor of the safetensors file `fn` (in header order) onto `device`."""
    with open(fn, "rb") as f:
        data = f.read()
    header, start = _read_header(data, fn)
    body = memoryview(data)[start:]
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name, shape, (begin, end) = info["dtype"], tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"safe_load: entry {name!r} in {fn} is malformed: {info!r}") from None
        if dtype_name not in _ST_DTYPES:
            raise SafetensorsError(f"safe_load: {name!r} has dtype {dtype_name!r}, which uopkit doesn't support")
        dtype = _ST_DTYPES[dtype_name]
        size = 1
        for s in shape:
            if s < 0:
                raise SafetensorsError(f"safe_load: {name!r} has a negative dimension in shape {shape}")
            size *= s
        if not 0 <= begin <= end <= len(body) or end - begin != size * dtype.itemsize:
            raise SafetensorsError(
                f"safe_load: {name!r} ({dtype_name} {list(shape)}) has data_offsets [{begin}, {end}] "
                f"that don't fit its size or the file's {len(body)} data bytes"
            )
        out[name] = tensor_from_bytes(body[begin:end], dtype, shape, device)
    return out

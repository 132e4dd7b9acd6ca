"""torch's `out=`: `torch.add(a, b, out=c)` (ported as `Tensor.add(a, b, out=c)`) writes the result into `c` and
returns `c`. The result is computed as without `out=`, then written into `out` as `out.copy_(result)` would: in place,
through a view into its base, cast to out's dtype where torch's same-kind rule allows it (a float result into an int
`out` raises, an int one into a float `out` is cast). An `out` of another shape is resized to the result's, as torch's
(with its warning when it held elements); a view can't be resized here (torch writes such a view's storage from its
offset as if it were contiguous). An op returning several tensors (`max(dim)`, `sort`, `aminmax`) takes a tuple of as
many. As torch, `out=` refuses to be part of autograd: with grad enabled, a result that requires grad raises.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from uopkit.device import DeviceError
from uopkit.dtype import DTypeError
from uopkit.schedule import live_tensors
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.support import ShapeError, check_in_place_allowed

if TYPE_CHECKING:
    # (set at run time by tensor.py, which imports this module)
    from uopkit.tensor.tensor import Tensor

# the Tensor methods torch's functions of the same name take `out=` for (views, `*_like` constructors and the
# softmax family have none in torch)
_NO_OUT = """reshape permute transpose swapaxes swapdims movedim moveaxis squeeze unsqueeze flatten unflatten narrow
chunk
tensor_split split roll flip unbind t diagonal select ravel clone detach zeros_like ones_like full_like empty_like
rand_like randn_like masked_fill softmax log_softmax allclose equal isclose isnan isinf isfinite repeat_interleave tile
rot90 fliplr flipud relu expand broadcast_to diag_embed dist stft istft""".split()


def takes_out(name: str, torch_keywords: dict[str, dict[str, int]]) -> bool:
    """Whether the method `name` takes torch's `out=`: those torch.X(input, ...) / torch.X(tensors, ...) are."""
    return (
        name in torch_keywords
        and ("input" in torch_keywords[name] or "tensors" in torch_keywords[name])
        and (name not in _NO_OUT)
    )


def write_out(op: str, result: Any, out: Any) -> Any:
    """`result` of `op` written into `out` (a tensor, or a tuple of them for an op with several results); returns out
    (for several, the result's own kind of tuple holding the tensors of `out`)."""
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(
                f"{op}: out= takes a tuple of {len(result)} tensors here, one per result, got {type(out).__name__}"
            )
        written = [write_out(op, r, o) for r, o in zip(result, out, strict=True)]
        return type(result)(*written) if hasattr(result, "_fields") else tuple(written)
    if not isinstance(out, Tensor):
        raise TypeError(f"{op}: out= must be a Tensor, got {type(out).__name__}")
    if not isinstance(result, Tensor):
        raise TypeError(f"{op}: its result is a {type(result).__name__}, not a tensor to write into out=")
    if is_grad_enabled() and result.requires_grad:
        raise RuntimeError(
            f"{op}: out= doesn't take part in autograd, and an argument requires grad; drop out= (or compute under "
            "no_grad())"
        )
    if not Tensor.can_cast(result.dtype, out.dtype):
        raise DTypeError(
            f"{op}: the result ({result.dtype}) can't be cast to out's dtype {out.dtype} (torch's "
            "same-kind rule: no float into an int, no int into a bool); give an out of another dtype"
        )
    if result.device != out.device:
        raise DeviceError(
            f"{op}: out= is on {out.device}, the result on {result.device}; give an out on the same device"
        )
    if out.shape == result.shape:
        return out.copy_(result)
    if out._view_of is not None and out._view_of() is not None:
        raise ShapeError(
            f"{op}: out= has shape {out.shape} and is a view of another tensor, so it can't be resized to the result's "
            f"{result.shape}; give an out of shape {result.shape}"
        )
    if out.numel():
        warnings.warn(
            f"{op}: out= had shape {out.shape} and was resized to the result's {result.shape}, as torch's (which warns "
            "that it will stop resizing outputs holding elements)",
            UserWarning,
            stacklevel=3,
        )
    if out._requires_grad and out.is_leaf:
        raise RuntimeError(f"{op}: out= is a leaf tensor that requires grad, which can't be written in place")
    check_in_place_allowed(out, f"{op}(out=)")
    live_tensors.set_uop(out, result.cast(out.dtype).uop)
    return out

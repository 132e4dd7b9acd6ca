"""Autocast's state and the casts it makes (the public switch is `uopkit.amp.autocast`).

Inside an autocast block for a device type, the ops of that type's lists cast their float inputs first, as torch's
autocast: matrix products and convolutions (`LOWER`) to the block's lower-precision dtype (bfloat16 on "cpu",
float16 elsewhere by default), losses, factorizations and other ops that need float32's range or precision
(`FLOAT32`) to float32. float64 inputs, integer and bool inputs are left as they are. An op runs with autocast off
inside (a loss computed from a log_softmax, an inverse from matrix products, keep float32 throughout), and its
result keeps the dtype it computed in: a Linear's output in a "cpu" block is bfloat16.

The state is per thread (as torch's): device type -> dtype for the enabled types, a stack the blocks push and pop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from uopkit.dtype import DType, dtypes

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

F = TypeVar("F", bound=Callable[..., Any])

LOWER = "lower"
FLOAT32 = "float32"
# which device types an op's policy applies to: torch's CPU lists and its CUDA lists differ (on "cpu" softmax and
# layer norm stay in the input's dtype; on GPU devices they compute in float32)
CPU, GPU, ANY = frozenset({"cpu"}), frozenset({"gpu"}), frozenset({"cpu", "gpu"})
# the dtype an autocast block computes LOWER ops in unless it names one
DEFAULT_DTYPES = {"cpu": dtypes.bfloat16}
DEFAULT_GPU_DTYPE = dtypes.float16
# the float dtypes autocast casts (float64 is left alone, as torch's)
_CASTABLE = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32})


class _State(threading.local):
    def __init__(self) -> None:
        # device type ("cpu", "cuda", "opencl", ...) -> the dtype LOWER ops compute in; types turned off are absent
        self.enabled: dict[str, DType] = {}
        # set while an autocast op runs: what it calls inside is not cast again
        self.inside_op = False


_state = _State()
# blocks open in any thread: the ops' check costs one global read while autocast was never used
_open_blocks = [0]


def device_type(device: str) -> str:
    """A device's type as autocast names it: "cpu" for CPU (and CPU:1), the lowercase backend name otherwise."""
    return device.split(":", 1)[0].lower()


def policy_class(kind: str) -> str:
    # torch's two lists: its CPU one for "cpu", its CUDA one for every accelerator
    return "cpu" if kind == "cpu" else "gpu"


def default_dtype(kind: str) -> DType:
    return DEFAULT_DTYPES.get(kind, DEFAULT_GPU_DTYPE)


def enabled_dtype(kind: str) -> DType | None:
    """The dtype LOWER ops compute in for device type `kind` in this thread's innermost block, None when off."""
    return _state.enabled.get(kind)


def push(kind: str, dtype: DType | None) -> dict[str, DType]:
    """Enter a block: `kind` on with `dtype`, or off (dtype None). Returns what `pop` puts back."""
    before = dict(_state.enabled)
    if dtype is None:
        _state.enabled.pop(kind, None)
    else:
        _state.enabled[kind] = dtype
    _open_blocks[0] += 1
    return before


def pop(before: dict[str, DType]) -> None:
    _state.enabled = before
    _open_blocks[0] -= 1


class suspended:
    """Autocast off in this thread while the block runs (backward passes, the inside of an autocast op)."""

    def __enter__(self) -> None:
        self._before = _state.inside_op
        _state.inside_op = True

    def __exit__(self, *exc: object) -> None:
        _state.inside_op = self._before


def without_autocast(fn: F) -> F:
    """fn run with autocast off (a backward pass computes its gradients in the forward's dtypes, as torch's)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not _open_blocks[0]:
            return fn(*args, **kwargs)
        with suspended():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def replay_key() -> tuple | None:
    """What a recorded graph depends on of autocast (None while it casts nothing here)."""
    if not _open_blocks[0] or _state.inside_op or not _state.enabled:
        return None
    return tuple(sorted((k, v.name) for k, v in _state.enabled.items()))


def _target(policy: str, applies_to: frozenset[str], args: tuple, kwargs: dict[str, Any]) -> DType | None:
    # the dtype this call's float inputs become, None when autocast leaves it alone
    if not _state.enabled or _state.inside_op:
        return None
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
    if first is None:
        return None
    kind = device_type(first.device)
    low = _state.enabled.get(kind)
    if low is None or policy_class(kind) not in applies_to:
        return None
    return low if policy == LOWER else dtypes.float32


def _cast(value: Any, dtype: DType) -> Any:
    if isinstance(value, Tensor) and value.dtype in _CASTABLE:
        return value.cast(dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def autocast_op(policy: str, applies_to: frozenset[str] = ANY) -> Callable[[F], F]:
    """Make `fn` an op of autocast's `policy` list (LOWER or FLOAT32) on the device types in `applies_to` (CPU, GPU or
    ANY): in a block for its inputs' device type, float tensor arguments (and tensors in list arguments) are cast
    first, and fn runs with autocast off."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def op(*args: Any, **kwargs: Any) -> Any:
            if not _open_blocks[0]:
                return fn(*args, **kwargs)
            dtype = _target(policy, applies_to, args, kwargs)
            if dtype is None:
                return fn(*args, **kwargs)
            args = tuple(_cast(a, dtype) for a in args)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            with suspended():
                return fn(*args, **kwargs)

        return op  # type: ignore[return-value]

    return wrap


def cast_like_autocast(dtype: DType | None, *values: Tensor) -> tuple[Tensor, ...]:
    """`values` cast as autocast casts an op's inputs to `dtype` (None: unchanged), for custom_fwd."""
    return values if dtype is None else tuple(_cast(v, dtype) for v in values)

"""Mixed precision as torch.amp: `autocast` (ops in lower precision where it is safe, float32 where it is not) and
`GradScaler` (a loss scale that keeps float16 gradients from underflowing, steps skipped on inf/NaN gradients).

>>> import uopkit
>>> from uopkit import Tensor, nn
>>> layer = nn.Linear(4, 2)
>>> with autocast("cpu"):
...     y = layer(Tensor.ones(3, 4))
...     loss = nn.functional.mse_loss(y, Tensor.zeros(3, 2))
>>> y.dtype, loss.dtype, layer.weight.dtype
(dtypes.bfloat16, dtypes.float, dtypes.float)

Which ops autocast casts, per device type, is torch's lists as far as uopkit has the ops (docs/semantics.md, "Mixed
precision"); `uopkit.tensor.autocast` holds the state and the casts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

from uopkit.device import Device
from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.tensor import autocast as _state
from uopkit.tensor.tensor import Tensor

__all__ = [
    "autocast",
    "GradScaler",
    "custom_fwd",
    "custom_bwd",
    "is_autocast_available",
    "is_autocast_enabled",
    "get_autocast_dtype",
]

F = TypeVar("F", bound=Callable[..., Any])
# the dtypes an autocast block may compute its lower-precision ops in
_LOWER_DTYPES = (dtypes.float16, dtypes.bfloat16)


def _device_type(device_type: Any, what: str) -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"{what}: device_type must be a str such as 'cpu' or 'cuda', got {type(device_type).__name__}")
    kind = _state.device_type(device_type)
    if not is_autocast_available(kind):
        known = sorted({"cpu", "cuda"} | {name.lower() for name in Device.backends()})
        raise ValueError(f"{what}: unknown device_type {device_type!r}; known: {', '.join(known)}")
    return kind


def is_autocast_available(device_type: str) -> bool:
    """Whether `autocast` takes this device type: "cpu", "cuda" and every installed backend's name (lowercase)."""
    kind = _state.device_type(device_type)
    return kind in ("cpu", "cuda") or kind.upper() in Device.backends()


def get_autocast_dtype(device_type: str) -> DType:
    """The dtype lower-precision ops compute in for `device_type` in the current block, else its default
    (bfloat16 for "cpu", float16 otherwise)."""
    kind = _device_type(device_type, "get_autocast_dtype")
    return _state.enabled_dtype(kind) or _state.default_dtype(kind)


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether an autocast block for `device_type` is on in this thread (torch.is_autocast_enabled)."""
    return _state.enabled_dtype(_device_type(device_type, "is_autocast_enabled")) is not None


class autocast:
    """Ops on `device_type`'s tensors run in mixed precision inside the block (or each call of a decorated function),
    as torch.autocast: matrix products, linear layers and convolutions in `dtype` (default bfloat16 on "cpu", float16
    on other devices), losses and other ops that need the range in float32. `enabled=False` turns it off inside an
    enclosing block. Values computed before the block, and gradients, keep their dtypes; a float32 parameter's
    gradient is float32. `cache_enabled` is accepted for torch's sake (a cast is a node of the graph, made per use).
    """

    def __init__(
        self,
        device_type: str,
        dtype: DType | str | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        self.device_type = _device_type(device_type, "autocast")
        self.fast_dtype = _state.default_dtype(self.device_type) if dtype is None else to_dtype(dtype)
        if self.fast_dtype not in _LOWER_DTYPES:
            raise ValueError(
                f"autocast: dtype must be float16 or bfloat16, got {self.fast_dtype} (device_type {self.device_type!r})"
            )
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: enabled must be a bool, got {type(enabled).__name__}")
        self.enabled = enabled
        self._saved: list[dict[str, DType]] = []

    def __enter__(self) -> autocast:
        self._saved.append(_state.push(self.device_type, self.fast_dtype if self.enabled else None))
        return self

    def __exit__(self, *exc: object) -> None:
        _state.pop(self._saved.pop())

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device_type, self.fast_dtype, self.enabled):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]


def custom_fwd(
    fwd: Callable[..., Any] | None = None, *, device_type: str = "cuda", cast_inputs: DType | str | None = None
) -> Any:
    """For an `autograd.Function`'s forward, as torch.amp.custom_fwd: inside an autocast block for `device_type`,
    with `cast_inputs` the forward's float tensor arguments are cast to it and it runs with autocast off; without,
    it runs under the caller's autocast state, which `custom_bwd` gives the backward too."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    kind = _device_type(device_type, "custom_fwd")
    target = None if cast_inputs is None else to_dtype(cast_inputs)

    @functools.wraps(fwd)
    def forward(*args: Any, **kwargs: Any) -> Any:
        ctx, inputs = args[0], args[1:]
        on = _state.enabled_dtype(kind)
        ctx._autocast_dtype = on
        if target is None or on is None:
            return fwd(*args, **kwargs)
        inputs = _state.cast_like_autocast(target, *inputs)
        kwargs = dict(zip(kwargs, _state.cast_like_autocast(target, *kwargs.values()), strict=True))
        with autocast(kind, enabled=False):
            return fwd(ctx, *inputs, **kwargs)

    forward._autocast_device_type = kind  # type: ignore[attr-defined]
    return forward


def custom_bwd(bwd: Callable[..., Any] | None = None, *, device_type: str = "cuda") -> Any:
    """For an `autograd.Function`'s backward, as torch.amp.custom_bwd: it runs under the autocast state its forward
    (decorated with `custom_fwd`) saw."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    kind = _device_type(device_type, "custom_bwd")

    @functools.wraps(bwd)
    def backward(ctx: Any, *grads: Any) -> Any:
        dtype = getattr(ctx, "_autocast_dtype", None)
        with autocast(kind, dtype or _state.default_dtype(kind), enabled=dtype is not None):
            return bwd(ctx, *grads)

    return backward


# ---------------------------------------------------------------------------------------------------------------------
# loss scaling

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


def _optimizer_params(optimizer: Any) -> list[Tensor]:
    groups = getattr(optimizer, "param_groups", None)
    if groups is None:
        raise TypeError(f"GradScaler: expected an optimizer with param_groups, got {type(optimizer).__name__}")
    return [p for g in groups for p in g["params"]]


class GradScaler:
    """torch.amp.GradScaler: `scale(loss).backward()`, then `step(optimizer)` (which unscales the gradients and skips
    the step when any is inf or NaN) and `update()` (which halves the scale after such a step and doubles it after
    `growth_interval` clean ones). `unscale_(optimizer)` first to clip the true gradients. Disabled
    (`enabled=False`), every method passes through: `scale` returns the loss, `step` calls `optimizer.step()`.
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1.0, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if not isinstance(growth_interval, int) or growth_interval <= 0:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval!r}")
        if not init_scale > 0 or not math.isfinite(init_scale):
            raise ValueError(f"GradScaler: init_scale must be a positive finite number, got {init_scale}")
        self.device = device
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        # per optimizer (by id) this step: its stage and whether its gradients held an inf or NaN
        self._stages: dict[int, str] = {}
        self._found_inf: dict[int, bool] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs: Any) -> Any:
        """outputs (a tensor, or tensors in lists, tuples and dicts) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if not dtypes.is_float(outputs.dtype):
                raise TypeError(f"GradScaler.scale: expected a float tensor (a loss), got {outputs.dtype}")
            # float32 times the loss (a 0-d float32 factor: a float16 loss with dims stays float16, as torch's)
            return outputs * Tensor(self._scale, dtype=dtypes.float32, device=outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, dict):
            return {k: self.scale(v) for k, v in outputs.items()}
        raise TypeError(f"GradScaler.scale: outputs must be a Tensor or tensors in lists/tuples/dicts, got {outputs!r}")

    def unscale_(self, optimizer: Any) -> None:
        """Divide `optimizer`'s gradients by the scale in place and note whether any is inf or NaN; once per step."""
        if not self._enabled:
            return
        stage = self._stages.get(id(optimizer), _READY)
        if stage == _UNSCALED:
            raise RuntimeError(
                "GradScaler.unscale_: this optimizer's gradients are unscaled already in this step; unscale once "
                "between "
                "update() calls"
            )
        if stage == _STEPPED:
            raise RuntimeError("GradScaler.unscale_() is being called after step()")
        grads = [p.grad for p in _optimizer_params(optimizer) if p.grad is not None]
        for g in grads:
            if g.dtype == dtypes.float16:
                raise ValueError(
                    "GradScaler.unscale_: attempting to unscale float16 gradients; keep the parameters in float32 "
                    "(autocast computes in float16 from float32 master weights)"
                )
        found = False
        if grads:
            inv = 1.0 / self._scale
            for g in grads:
                g.mul_(inv)
            nonfinite = [(~g.isfinite()).any() for g in grads]
            found = bool(Tensor.stack(*nonfinite).any().item())
        self._found_inf[id(optimizer)] = found
        self._stages[id(optimizer)] = _UNSCALED

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless `unscale_` ran), then `optimizer.step(*args, **kwargs)` unless a gradient was inf or NaN.
        Returns what step returned, None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("GradScaler.step: a closure is not supported while the scaler is enabled")
        stage = self._stages.get(id(optimizer), _READY)
        if stage == _STEPPED:
            raise RuntimeError(
                "GradScaler.step: this optimizer stepped already in this iteration; call update() before the next step"
            )
        if stage == _READY:
            self.unscale_(optimizer)
        result = None if self._found_inf[id(optimizer)] else optimizer.step(*args, **kwargs)
        self._stages[id(optimizer)] = _STEPPED
        return result

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """The next step's scale: `new_scale` if given, else halved (backoff_factor) after a step with inf/NaN
        gradients and grown (growth_factor) after growth_interval steps without."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item()) if isinstance(new_scale, Tensor) else float(new_scale)
            if not value > 0 or not math.isfinite(value):
                raise ValueError(f"GradScaler.update: new_scale must be a positive finite number, got {value}")
            self._scale = value
        else:
            if not self._found_inf:
                raise RuntimeError(
                    "GradScaler.update: no optimizer went through step() since the last update, so there are no "
                    "inf/NaN results to "
                    "go by; call step(optimizer) first"
                )
            if any(self._found_inf.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
            # (the scale is a float32 value in torch: kept in float32's range)
            self._scale = float(Tensor(self._scale, dtype=dtypes.float32).item())
        self._stages.clear()
        self._found_inf.clear()

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict[str, Any]:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when disabled)."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "GradScaler.load_state_dict: got an empty state dict (a disabled scaler saves one); load it into a "
                "disabled "
                "scaler, or save from an enabled one"
            )
        self._scale = float(_number(state_dict["scale"]))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(_number(state_dict["_growth_tracker"]))


def _number(value: Any) -> float:
    # a state dict saved by torch holds Python numbers; one built by hand may hold a 0-d tensor
    return float(value.item()) if hasattr(value, "item") else float(value)

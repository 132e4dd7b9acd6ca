"""Optimizers whose step works on a parameter as a whole matrix or layer: torch's `Muon` (momentum orthogonalized by a
Newton-Schulz iteration), tinygrad's `LARS` (SGD scaled by a layer-wise trust ratio) and tinygrad's `OptimizerGroup`
(several optimizers stepped as one). The base class, parameter groups and state dicts: nn/optimizer.py; re-exported
by `uopkit.nn.optim`.

Muon's Newton-Schulz iteration is torch's: in bfloat16, each matrix product summed in float32 and rounded once (the
rounding of torch's CPU addmm), three matrix products per iteration.

>>> from uopkit import Tensor
>>> w = Tensor([[3.0, 0.0], [0.0, 1.0]], requires_grad=True)
>>> opt = Muon([w], lr=0.1, weight_decay=0.0, momentum=0.0, nesterov=False)
>>> (w * w).sum().backward()
>>> opt.step()
>>> [[round(x, 1) for x in row] for row in w.tolist()]
[[2.9, 0.0], [0.0, 0.9]]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from uopkit.dtype import DType, dtypes
from uopkit.engine.realize import realize_lock
from uopkit.nn.optimizer import Optimizer, ParamGroup, _dedup, _state_like
from uopkit.tensor import Tensor

__all__ = ["Muon", "LARS", "OptimizerGroup"]

# torch.optim.Muon's defaults (Keller Jordan's quintic Newton-Schulz coefficients, 5 iterations)
MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
MUON_EPS = 1e-7
MUON_NS_STEPS = 5
_ADJUST_LR_FNS = (None, "original", "match_rms_adamw")


def orthogonalized(x: Tensor, coefficients: Sequence[float], steps: int, eps: float) -> Tensor:
    """torch.optim.Muon's Newton-Schulz iteration on a matrix `x`: X = x / max(||x||_F, eps), then `steps` times
    A = X X^T, X = a X + (b A + c A^2) X, on the transpose of a tall matrix (so A is the smaller Gram matrix). In
    bfloat16 as torch's: every value rounded to bfloat16, every product and sum in float32 (bfloat16 products are
    exact there) and rounded once, as torch's CPU matmul and addmm round. Returns bfloat16."""
    a, b, c = coefficients
    tall = x.shape[0] > x.shape[1]
    x = x.cast(dtypes.bfloat16)
    if tall:
        x = x.T
    xf = x.float()
    # (torch's norm of a bfloat16 tensor: summed in float32, rounded; its clamp rounds eps to bfloat16 too)
    norm = xf.square().sum().sqrt().cast(dtypes.bfloat16).float()
    floor = Tensor(eps, dtype=dtypes.bfloat16, device=x.device).float()
    x = (xf / norm.maximum(floor)).cast(dtypes.bfloat16)
    for _ in range(steps):
        xf = x.float()
        gram = (xf @ xf.T).cast(dtypes.bfloat16).float()
        poly = (b * gram + c * (gram @ gram)).cast(dtypes.bfloat16).float()
        x = (a * xf + poly @ xf).cast(dtypes.bfloat16)
    return x.T if tall else x


def muon_lr_ratio(adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """The factor Muon scales the learning rate of a (rows, cols) parameter by: sqrt(max(1, rows / cols)) for "original"
    (Keller Jordan's, the default), 0.2 sqrt(max(rows, cols)) for "match_rms_adamw" (Moonshot's: an update of AdamW's
    RMS)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1.0, rows / cols))


def _hyper_in(x: float | Tensor, dt: DType) -> float | Tensor:
    # a hyperparameter (a number, or a dynamic one's 0-d tensor) in dtype `dt`
    return x.cast(dt) if isinstance(x, Tensor) else x


class Muon(Optimizer):
    """Muon (Keller Jordan), torch.optim.Muon's update, arguments and defaults, for 2-D parameters only (the hidden
    layers' weights; give biases, embeddings and the rest to AdamW):

        b = lerp(b, g, 1 - momentum);  u = lerp(g, b, momentum) if nesterov else b;  O = NS(u)
        p = p * (1 - lr * weight_decay) - lr * ratio * O

    NS is `orthogonalized` (in bfloat16, as torch's), `ratio` `muon_lr_ratio(adjust_lr_fn, p.shape)`. "momentum" is
    dynamic (OneCycleLR and CyclicLR cycle it; see nn/optimizer.py). tinygrad's `nn.optim.Muon` is another rule under
    the same name, see `LARS`.
    """

    dynamic = ("momentum",)
    state_names = ("momentum_buffer",)
    clock_state = ()

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = MUON_COEFFICIENTS,
        eps: float = MUON_EPS,
        ns_steps: int = MUON_NS_STEPS,
        adjust_lr_fn: str | None = None,
    ) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov)
        defaults |= dict(ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        # (torch's messages; torch checks the coefficients and ns_steps at the first step, here they are checked when
        # the group is added, and so is every group's parameters' rank, not only those given to the constructor)
        for key in ("momentum", "weight_decay"):
            if group[key] < 0:
                raise ValueError(f"Muon: {key} should be >= 0 but is: {group[key]}")
        if group["adjust_lr_fn"] not in _ADJUST_LR_FNS:
            raise ValueError(f"Muon: Adjust learning rate function {group['adjust_lr_fn']} is not supported")
        if len(group["ns_coefficients"]) != 3:
            raise ValueError(f"Muon: ns_coefficients takes 3 numbers (a, b, c), got {len(group['ns_coefficients'])}")
        steps = group["ns_steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"Muon: ns_steps must be an int >= 0, got {steps!r}")
        if steps >= 100:
            raise ValueError(f"Muon: ns_steps must be below 100, got {steps}")
        for p in group["params"]:
            if p.ndim != 2:
                raise ValueError(f"Muon: works on 2-D (matrix) parameters only, got one of shape {p.shape}")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": _state_like(p)}

    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        return {}

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        weight_decay, nesterov = group["weight_decay"], group["nesterov"]
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            g, w, dt = p.grad.detach(), p.detach(), p.dtype
            # (a lerp of half floats runs in float32, its weight a float32 as torch's Python number: not rounded to
            # the parameter's dtype)
            weight_dt = dtypes.float32 if dt in dtypes.halves else dt
            momentum = group.hyper("momentum", p.device)
            buf = self._slot(p, "momentum_buffer")
            buf.assign(buf.lerp(g, _hyper_in(1 - momentum, weight_dt)))
            written.append(buf)
            update = g.lerp(buf, _hyper_in(momentum, weight_dt)) if nesterov else buf
            ortho = orthogonalized(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
            # the numbers from the lr tensor in the clock's wide dtype (float64 where the device has it), as torch's
            # Python floats, each rounded once to the parameter's arithmetic
            wide = group.wide_dtype_on(p.device)
            lr = group.lr_on(p.device).cast(wide)
            math_dt = dtypes.float32 if dt in dtypes.halves else dt
            if weight_decay:
                # p.mul_(1 - lr * weight_decay): rounded to the parameter's dtype, as torch's in-place multiply
                w = (w.cast(math_dt) * (1 - lr * weight_decay).cast(math_dt)).cast(dt)
            # p.add_(O, alpha=-lr * ratio): O (bfloat16) promoted to the parameter's dtype, alpha rounded to it (as
            # torch's add_ takes its alpha; its mul_ keeps a float32 factor for half floats)
            step = (lr * -muon_lr_ratio(group["adjust_lr_fn"], p.shape)).cast(dt).cast(math_dt)
            change = step * ortho.cast(math_dt)
            if dt in dtypes.halves and p.shape[0] > p.shape[1]:
                # (a tall matrix's O is a transpose: torch's add_ takes its strided loop, which rounds the product to
                # the parameter's dtype before the sum; the contiguous vector loop rounds once)
                change = change.cast(dt).cast(math_dt)
            p.assign((w.cast(math_dt) + change).cast(dt))
        return written

    @property
    def b(self) -> list[Tensor]:
        """The momentum buffers, parameter by parameter."""
        return [s["momentum_buffer"] for s in self._slots.values()]


def tinygrad_newton_schulz(x: Tensor, steps: int, coefficients: Sequence[float], eps: float = 1e-7) -> Tensor:
    """tinygrad's `Tensor.newton_schulz(steps, params, eps)` on a matrix, in x's dtype: X = x / (||x||_F + eps), then
    `steps` times X = sum_i coefficients[i] (X X^T)^i X (any number of coefficients), on the transpose of a tall
    matrix. The sum is taken Horner's way, (c0 + A (c1 + A (c2 + ...))) X: one product with A per coefficient past the
    first, as tinygrad's."""
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.square().sum().sqrt() + eps)
    for _ in range(steps):
        gram = x @ x.T
        y = coefficients[-1] * x
        for coefficient in reversed(coefficients[:-1]):
            y = coefficient * x + gram @ y
        x = y
    return x.T if tall else x


class LARS(Optimizer):
    """LARS (You et al., "Large Batch Training of Convolutional Networks"), tinygrad's `nn.optim.LARS` with its
    arguments and defaults: each parameter's gradient is scaled by its trust ratio r = tcoef ||p|| / (||g|| +
    weight_decay ||p||) (1 where either norm is 0; tcoef=0: r = 1, which is tinygrad's SGD), then

        g += weight_decay p (pre_wd);  classic: g *= r lr;  b = momentum b + g;  g = g + momentum b if nesterov else b;
        ns_coefficients: g = NS(g.reshape(rows, -1));  not classic: g *= r lr;  not pre_wd: g += weight_decay lr p;
        p -= g

    NS is `tinygrad_newton_schulz` (ns_steps iterations, in the gradient's dtype, eps 1e-7). tinygrad's `nn.optim.Muon`
    is `LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False,
    tcoef=0.0)` (its arguments in this order; torch's Muon, under that name here, takes lr, weight_decay, momentum:
    see `Muon` for how the two rules differ). The momentum buffers of half float parameters are float32 (tinygrad's
    OPTIM_DTYPE) and their steps are computed in float32. "momentum" is dynamic, as SGD's.

    >>> w = Tensor([3.0, 4.0], requires_grad=True)
    >>> opt = LARS([w], lr=0.1, momentum=0.0, weight_decay=0.0, tcoef=0.01)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [2.997, 3.996]
    """

    dynamic = ("momentum",)
    state_names = ("momentum_buffer",)
    clock_state = ()

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        ns_steps: int = 0,
        ns_coefficients: Sequence[float] | None = None,
        nesterov: bool = False,
        classic: bool = True,
        pre_wd: bool = True,
        tcoef: float = 0.001,
    ) -> None:
        coefficients = None if ns_coefficients is None else tuple(ns_coefficients)
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps)
        defaults |= dict(ns_coefficients=coefficients, nesterov=nesterov, classic=classic, pre_wd=pre_wd, tcoef=tcoef)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("momentum", "weight_decay", "tcoef"):
            if group[key] < 0:
                raise ValueError(f"LARS: {key} must be >= 0, got {group[key]}")
        steps = group["ns_steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"LARS: ns_steps must be an int >= 0, got {steps!r}")
        if group["ns_coefficients"] is not None:
            if len(group["ns_coefficients"]) == 0:
                raise ValueError("LARS: ns_coefficients must hold at least one coefficient (or be None)")
            for p in group["params"]:
                if p.ndim == 0:
                    raise ValueError("LARS: the Newton-Schulz step (ns_coefficients) needs parameters of 1+ dims")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": self._buffer(p)} if group["momentum"] else {}

    @staticmethod
    def _buffer(p: Tensor) -> Tensor:
        # (float32 for half floats, tinygrad's OPTIM_DTYPE)
        return _state_like(p.float() if p.dtype in dtypes.halves else p)

    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        return {}

    @property
    def b(self) -> list[Tensor]:
        """The momentum buffers, parameter by parameter (tinygrad's attribute)."""
        return [s["momentum_buffer"] for s in self._slots.values() if "momentum_buffer" in s]

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        weight_decay, tcoef, classic, pre_wd = group["weight_decay"], group["tcoef"], group["classic"], group["pre_wd"]
        coefficients = group["ns_coefficients"]
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            dt = dtypes.float32 if p.dtype in dtypes.halves else p.dtype
            g, w = p.grad.detach().cast(dt), p.detach().cast(dt)
            lr = group.lr_on(p.device).cast(dt)
            momentum = group.hyper("momentum", p.device)
            scale: Tensor = lr
            if tcoef:
                w_norm, g_norm = w.square().sum().sqrt(), g.square().sum().sqrt()
                trust = tcoef * w_norm / (g_norm + weight_decay * w_norm)
                ratio = (w_norm > 0).where((g_norm > 0).where(trust, 1.0), 1.0)
                scale = ratio * lr
            if pre_wd and weight_decay:
                g = g + weight_decay * w
            if classic:
                g = g * scale
            if isinstance(momentum, Tensor) or momentum:
                mom = _hyper_in(momentum, dt)
                # (made at first use when the group's momentum was 0 when the parameter was added)
                slots = self._slots[id(p)]
                if (buf := slots.get("momentum_buffer")) is None:
                    buf = slots["momentum_buffer"] = self._buffer(p)
                buf.assign(mom * buf + g)
                written.append(buf)
                g = g + mom * buf if group["nesterov"] else buf
            if coefficients is not None:
                rows = g.shape[0]
                g = tinygrad_newton_schulz(g.reshape(rows, -1), group["ns_steps"], coefficients).reshape(g.shape)
            if not classic:
                g = g * scale
            if not pre_wd and weight_decay:
                g = g + weight_decay * lr * w
            p.assign(p.detach() - g.cast(p.dtype))
        return written


class OptimizerGroup(Optimizer):
    """tinygrad's `nn.optim.OptimizerGroup`: several optimizers (Muon for the matrices and AdamW for the rest, LARS
    with and without weight decay) used as one. `zero_grad()` and `step()` call each one's; a step is one realize of
    all their updates (one schedule, replayable under TinyJit as a whole). `opt[i]` is the i-th optimizer;
    `param_groups` lists every optimizer's groups (the same dicts: an LR scheduler on the group sets each one's);
    `state_dict()` is {"optimizers": [each one's state_dict()]}. A parameter in two of the optimizers raises."""

    def __init__(self, *optimizers: Optimizer) -> None:  # (the optimizers hold the groups and state)
        if not optimizers:
            raise ValueError("OptimizerGroup: needs at least one optimizer")
        for o in optimizers:
            if not isinstance(o, Optimizer):
                raise TypeError(f"OptimizerGroup: takes optimizers, got {type(o).__name__}")
        seen: set[int] = set()
        for o in optimizers:
            ids = {id(p) for g in o.param_groups for p in g["params"]}
            if ids & seen:
                raise ValueError("OptimizerGroup: a parameter is in two of the optimizers (each would step it)")
            seen |= ids
        self.optimizers = tuple(optimizers)
        self._step_hooks: tuple[dict[int, Any], dict[int, Any]] = ({}, {})
        self._state_dict_hooks: tuple[dict[int, Any], dict[int, Any]] = ({}, {})
        self._load_state_dict_hooks: tuple[dict[int, Any], dict[int, Any]] = ({}, {})

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def __len__(self) -> int:
        return len(self.optimizers)

    @property
    def param_groups(self) -> list[ParamGroup]:  # type: ignore[override]
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        # (each key as the first optimizer that has it gives it)
        out: dict[str, Any] = {}
        for o in reversed(self.optimizers):
            out |= o.defaults
        return out

    @property
    def params(self) -> list[Tensor]:
        return [p for o in self.optimizers for p in o.params]

    @property
    def buffers(self) -> list[Tensor]:
        return [p for o in self.optimizers for p in o.buffers]

    @property
    def state(self) -> defaultdict[Tensor, dict[str, Tensor]]:
        out: defaultdict[Tensor, dict[str, Tensor]] = defaultdict(dict)
        for o in self.optimizers:
            out.update(o.state)
        return out

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise TypeError("OptimizerGroup: add the group to one of its optimizers (opt[i].add_param_group(...))")

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none)

    def step(self, closure: Any = None) -> Any:
        """Every optimizer's step, in one realize (`closure`: called first, its loss returned)."""
        loss = closure() if closure is not None else None
        saved = [o._bookkeeping() for o in self.optimizers]
        try:
            with realize_lock:
                if pending := self.schedule_step():
                    Tensor.realize(*pending)
        except BaseException:
            for o, s in zip(self.optimizers, saved, strict=True):
                o._restore_bookkeeping(s)
            raise
        return loss

    def schedule_step(self) -> list[Tensor]:
        return _dedup([t for o in self.optimizers for t in o.schedule_step()])

    def _state_dict(self) -> dict[str, Any]:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def _load_state(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("optimizers")
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self.optimizers):
            count = len(saved) if isinstance(saved, (list, tuple)) else None
            raise ValueError(
                f"OptimizerGroup.load_state_dict: expected {{'optimizers': [...]}} with {len(self.optimizers)} state "
                f"dicts, got {count}"
            )
        for o, s in zip(self.optimizers, saved, strict=True):
            o.load_state_dict(s)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return "OptimizerGroup(\n" + "\n".join(repr(o) for o in self.optimizers) + "\n)"

"""Optimizers by torch.optim's names: each step writes the new parameters and optimizer state in place (assign ->
STORE), all realized at once. Parameter groups, `state_dict()` and the rest of torch's Optimizer API are in the base
class (nn/optimizer.py); RMSprop, Adagrad, Adadelta, Adamax, SparseAdam, NAdam, RAdam, Rprop, ASGD, Adafactor and
tinygrad's LAMB in nn/optim_more.py; torch's Muon (2-D parameters only), tinygrad's LARS and tinygrad's
OptimizerGroup (several optimizers stepped as one) in nn/optim_matrix.py; LBFGS in nn/lbfgs.py; LR schedulers in
`uopkit.nn.optim.lr_scheduler`, as torch.optim.lr_scheduler, and weight averaging (AveragedModel, SWALR, update_bn) in
`uopkit.nn.optim.swa_utils`, as torch.optim.swa_utils.

torch's `foreach`, `fused`, `capturable` and `differentiable` arguments are accepted and ignored: every step is already
one realize of fused kernels, replayable under TinyJit, and gradients never flow through a step.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.800000011920929, 1.600000023841858]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from uopkit.dtype import DType, dtypes
from uopkit.nn import lr_scheduler, optimizer, swa_utils
from uopkit.nn.lbfgs import LBFGS
from uopkit.nn.optim_matrix import LARS, Muon, OptimizerGroup
from uopkit.nn.optim_more import (
    ASGD,
    LAMB,
    Adadelta,
    Adafactor,
    Adagrad,
    Adamax,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
    SparseAdam,
    _as,
    _one_minus,
)
from uopkit.nn.optimizer import Optimizer, ParamGroup, _beta_powers, _betas, _check_fused, _powers, _state_like

# (torch.nn.utils' clip_grad_norm_, where tinygrad's optimizers module has it too)
from uopkit.nn.utils import clip_grad_norm_
from uopkit.tensor import Tensor
from uopkit.uop.ops import Ops, UOp

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "SparseAdam",
    "NAdam",
    "RAdam",
    "Rprop",
    "ASGD",
    "Adafactor",
    "LAMB",
    "Muon",
    "LARS",
    "OptimizerGroup",
    "LBFGS",
    "clip_grad_norm_",
    "lr_scheduler",
    "swa_utils",
]

# `from uopkit.nn.optim.lr_scheduler import StepLR`, `from uopkit.nn.optim.swa_utils import AveragedModel` and
# `from uopkit.nn.optim.optimizer import Optimizer, required`, as torch's `torch.optim.lr_scheduler`,
# `torch.optim.swa_utils` and `torch.optim.optimizer` (this module is no package)
sys.modules[f"{__name__}.lr_scheduler"] = lr_scheduler
sys.modules[f"{__name__}.swa_utils"] = swa_utils
sys.modules[f"{__name__}.optimizer"] = optimizer

# module constants: on Python 3.11 every `Ops.X` is a lookup through EnumType's slow __getattr__ hook
_RESHAPE, _EXPAND, _DETACH, _MUL, _NEG, _ADD = Ops.RESHAPE, Ops.EXPAND, Ops.DETACH, Ops.MUL, Ops.NEG, Ops.ADD
_FDIV, _SQRT = Ops.FDIV, Ops.SQRT


def _spread(u: UOp, shape: tuple[int, ...]) -> UOp:
    # a 0-d value (or a number's CONST) broadcast to `shape`: the nodes of Tensor(u).reshape(1, ...).expand(shape)
    if shape:
        u = UOp(_RESHAPE, u.dtype, (u,), (1,) * len(shape))
        if u.arg != shape:
            u = UOp(_EXPAND, u.dtype, (u,), tuple(shape))
    return u


def _add_scaled(x: Tensor, y: Tensor, alpha: float | Tensor) -> Tensor:
    """x.add(y, alpha=alpha) of half float tensors as torch's CPU kernel: alpha (a number or a 0-d tensor) rounded to
    their dtype, x + alpha * y in float32, rounded once (its vector loop's; the last numel % 64 elements, which its
    scalar loop takes, round the product first)."""
    if isinstance(alpha, (int, float)):
        return x if alpha == 0 else x.add(y, alpha=alpha)
    return (x.float() + alpha.cast(x.dtype).float() * y.float()).cast(x.dtype)


def _sgd_update(p: Tensor, grad: Tensor, lr: Tensor) -> Tensor | None:
    """`p.detach() - lr * grad.detach()` for a float parameter, its gradient and the 0-d learning rate of one dtype
    and device, built as nodes directly: the nodes the Tensor methods build (a test checks), without their checks and
    intermediate tensors, for every parameter of every step (None: another case, for the Tensor methods)."""
    w, g, r = p.uop, grad.uop, lr.uop
    dt, shape = w.dtype, w.shape
    if g.dtype is not dt or r.dtype is not dt or dt is dtypes.bfloat16 or not dtypes.is_float(dt) or shape is None:
        return None
    if g.shape != shape or r.shape != () or not w.device == g.device == r.device:
        return None
    step = UOp(_MUL, dt, (_spread(r, shape), UOp(_DETACH, dt, (g,))))
    return Tensor(UOp(_ADD, dt, (UOp(_DETACH, dt, (w,)), UOp(_NEG, dt, (step,)))))


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight decay (PyTorch semantics).

    g = grad + weight_decay * p; b = momentum * b + (1 - dampening) * g (b = g on the first step);
    p -= lr * (g + momentum * b if nesterov else b)
    """

    dynamic = ("momentum",)
    state_names = ("momentum_buffer",)
    clock_state = ()

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        # (torch's positional order: lr, momentum, dampening, weight_decay, nesterov; tinygrad's puts weight_decay
        # third, which would read as a dampening here: pass those by name)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        defaults |= dict(maximize=maximize, foreach=foreach, differentiable=differentiable, fused=fused)
        _check_fused("SGD", fused, foreach, differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0")
        if group["nesterov"] and (momentum == 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening 0")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": _state_like(p)} if group["momentum"] else {}

    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        return {}

    @property
    def b(self) -> list[Tensor]:
        """The momentum buffers, parameter by parameter."""
        return [s["momentum_buffer"] for s in self._slots.values() if "momentum_buffer" in s]

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        dampening, weight_decay, nesterov = group["dampening"], group["weight_decay"], group["nesterov"]
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            # (the group's numbers on this parameter's device: a model may be split over devices)
            lr, momentum = group.lr_on(p.device), group.hyper("momentum", p.device)
            # (maximize: the gradient's negative, as torch's)
            grad = -p.grad if group["maximize"] else p.grad
            if not weight_decay and isinstance(momentum, (int, float)) and not momentum:
                # (plain SGD: the update's nodes built directly when the dtypes and devices allow)
                new = _sgd_update(p, grad, lr)
                if new is not None:
                    p.assign(new)
                    continue
            g = grad.detach()
            if p.dtype in dtypes.halves:
                written += self._half_update(group, p, g)
                continue
            if weight_decay:
                g = g + weight_decay * p.detach()
            if isinstance(momentum, Tensor) or momentum:
                mom = momentum.cast(g.dtype) if isinstance(momentum, Tensor) else momentum
                b = self._slot(p, "momentum_buffer")
                # (PyTorch's first step of each parameter takes its gradient as the momentum buffer, undampened)
                damped = (1 - dampening) * g if dampening and id(p) in self._started else g
                b.assign(mom * b + damped)
                written.append(b)
                # (half floats summed in float32 and rounded once; float32 and float64 in their own dtype)
                wide = dtypes.float32 if g.dtype in dtypes.halves else g.dtype
                if nesterov:
                    wide_mom = momentum.cast(wide) if isinstance(momentum, Tensor) else momentum
                    g = (g.cast(wide) + wide_mom * b.cast(wide)).cast(g.dtype)
                else:
                    g = b
            p.assign((p.detach() - lr.cast(p.dtype) * g).cast(p.dtype))
        return written

    def _half_update(self, group: ParamGroup, p: Tensor, g: Tensor) -> list[Tensor]:
        """The step of a float16 or bfloat16 parameter (`g` its gradient, detached), op by op as torch's CPU step,
        each op rounded to the parameter's dtype: g.add(p, alpha=weight_decay); b.mul_(momentum).add_(g,
        alpha=1 - dampening); g.add(b, alpha=momentum) (nesterov); p.add_(g, alpha=-lr). The buffers written."""
        momentum, dampening = group.hyper("momentum", p.device), group["dampening"]
        w = p.detach()
        if group["weight_decay"]:
            g = _add_scaled(g, w, group["weight_decay"])
        written: list[Tensor] = []
        if isinstance(momentum, Tensor) or momentum:
            b = self._slot(p, "momentum_buffer")
            # (the first step takes the gradient as the buffer, undampened; b * momentum: the momentum unrounded)
            damping = 1 - dampening if id(p) in self._started else 1
            b.assign(_add_scaled(b * momentum, g, damping))
            written.append(b)
            g = _add_scaled(g, b, momentum) if group["nesterov"] else b
        p.assign(_add_scaled(w, g, -group.lr_on(p.device)))
        return written


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; `weight_decay` adds L2 to the gradient, as PyTorch's Adam
    (`decoupled_weight_decay=True`: AdamW's decay).

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    `amsgrad=True`: the largest v of all steps so far (kept per element) takes v's place in the step, as PyTorch's.
    The betas are the third and fourth positional arguments (tinygrad's b1, b2); torch's `betas=` by name.
    """

    dynamic = ("betas",)
    state_names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    decoupled = False

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        betas: tuple[float, float] | None = None,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool | None = None,
    ) -> None:
        b1, b2 = _betas(type(self).__name__, b1, b2, betas)
        decoupled = self.decoupled if decoupled_weight_decay is None else decoupled_weight_decay
        defaults = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)
        defaults |= dict(foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused)
        defaults["decoupled_weight_decay"] = decoupled
        _check_fused(type(self).__name__, fused, foreach, differentiable)
        self._constants: dict[tuple[str, str], UOp] = {}
        super().__init__(params, defaults)

    def __getstate__(self) -> dict[str, Any]:
        # (the constants' nodes are a cache: a copy or a pickle starts without)
        return super().__getstate__() | {"_constants": {}}

    def _check_group(self, group: dict[str, Any]) -> None:
        b1, b2 = group["betas"]
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got ({b1}, {b2})")
        if group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"{type(self).__name__}: eps and weight_decay must be >= 0")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        slots = {"exp_avg": _state_like(p), "exp_avg_sq": _state_like(p)}
        if group["amsgrad"]:
            # amsgrad (Reddi et al.): the largest v so far divides the step, as PyTorch's max_exp_avg_sq
            slots["max_exp_avg_sq"] = _state_like(p)
        return slots

    # b1^t and b2^t, kept in buffers so the step count is data, not a constant baked into a kernel
    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        return {"step": float(step)} | _beta_powers(group["betas"], step)

    def _clock_next(self, group: ParamGroup, clock: dict[str, Tensor]) -> dict[str, Tensor]:
        b1, b2 = group["betas"]
        return {"step": clock["step"] + 1, "b1_t": clock["b1_t"] * b1, "b2_t": clock["b2_t"] * b2}

    # (the first clock and the moments, parameter by parameter: tinygrad's attribute names)
    @property
    def b1_t(self) -> Tensor:
        return self._first_clock()["b1_t"]

    @property
    def b2_t(self) -> Tensor:
        return self._first_clock()["b2_t"]

    def _first_clock(self) -> dict[str, Tensor]:
        # the first parameter's that has one (a parameter frozen when added gets its clock at its first step)
        return next(self._clocks[id(p)].values for p in self._members() if id(p) in self._clocks)

    @property
    def m(self) -> list[Tensor]:
        return [s["exp_avg"] for s in self._slots.values()]

    @property
    def v(self) -> list[Tensor]:
        return [s["exp_avg_sq"] for s in self._slots.values()]

    @property
    def v_max(self) -> list[Tensor]:
        return [s["max_exp_avg_sq"] for s in self._slots.values() if "max_exp_avg_sq" in s]

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        eps, weight_decay, amsgrad = group["eps"], group["weight_decay"], group["amsgrad"]
        decoupled = group["decoupled_weight_decay"]
        static = not isinstance(group.hyper("betas")[0], Tensor)
        consts = _AdamConstants(*group["betas"], eps, weight_decay, decoupled, self._constants) if static else None
        # the bias corrections and the learning rate, per clock and dtype: every parameter's update reads the same
        # (hash-consed) nodes, so they are built once, not once per parameter
        scalars: dict[tuple[int, DType], tuple[Tensor, Tensor, Tensor]] = {}
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            g, w = (-p.grad if group["maximize"] else p.grad).detach(), p.detach()
            if p.dtype in dtypes.halves:
                written += self._half_update(group, p, g)
                continue
            if weight_decay and not decoupled:
                g = g + weight_decay * w
            b1, b2 = group.hyper("betas", p.device)
            slots = self._slots[id(p)]
            m, v = slots["exp_avg"], slots["exp_avg_sq"]
            written += (m, v)
            clock = self._clocks[id(p)].values
            if (key := (id(clock), p.dtype)) not in scalars:
                scalars[key] = (
                    (1 - _powers(group, clock, "betas", 0)).cast(p.dtype),
                    (1 - _powers(group, clock, "betas", 1)).cast(p.dtype),
                    group.lr_on(p.device).cast(p.dtype),
                )
            bias1, bias2, lr = scalars[key]
            if consts is not None and not amsgrad and _adam_update(consts, p, g, w, m, v, (bias1, bias2, lr)):
                continue
            m.assign(_as(b1, p) * m + _one_minus(b1, p) * g)
            v.assign(_as(b2, p) * v + _one_minus(b2, p) * (g * g))
            m_hat = m / bias1
            if amsgrad:
                v_max = self._slot(p, "max_exp_avg_sq")
                v_max.assign(v_max.maximum(v))
                written.append(v_max)
                v = v_max
            v_hat = v / bias2
            if weight_decay and decoupled:
                w = w * (1 - lr * weight_decay)
            p.assign((w - lr * m_hat / (v_hat.sqrt() + eps)).cast(p.dtype))
        return written

    def _half_update(self, group: ParamGroup, p: Tensor, g: Tensor) -> list[Tensor]:
        """The step of a float16 or bfloat16 parameter (`g` its gradient, detached) op by op as torch's CPU step
        (its for-loop Adam, the default on CPU), each op rounded to the parameter's dtype: p.mul_(1 - lr *
        weight_decay) (AdamW) or g.add(p, alpha=weight_decay); m.lerp_(g, 1 - b1); v.mul_(b2).addcmul_(g, g,
        value=1 - b2); denom = (v.sqrt() / sqrt(1 - b2^t)).add_(eps); p.addcdiv_(m, denom, value=-lr / (1 - b1^t)),
        the numbers in float64 as torch's Python floats. The state written."""
        b1, b2 = group.hyper("betas", p.device)
        clock = self._clocks[id(p)].values
        wide, dt = clock["step"].dtype, p.dtype
        lr = group.lr_on(p.device).cast(wide)
        slots = self._slots[id(p)]
        m, v = slots["exp_avg"], slots["exp_avg_sq"]
        w, weight_decay = p.detach(), group["weight_decay"]
        if weight_decay and group["decoupled_weight_decay"]:
            # (times a 0-d float64: in float32, the factor unrounded)
            w = w * (1 - lr * weight_decay)
        elif weight_decay:
            g = _add_scaled(g, w, weight_decay)
        m.assign(m.lerp(g, 1 - b1))
        # v * b2 rounded, then + (1 - b2) * g * g in float32, the last multiply and add one fma (torch's vector loop)
        decayed = (v * b2).float()
        v.assign((g.float() * (1 - b2))._alu(Ops.MULACC, g.float(), decayed).cast(dt))
        written = [m, v]
        if group["amsgrad"]:
            v_max = self._slot(p, "max_exp_avg_sq")
            v_max.assign(v_max.maximum(v))
            written.append(v_max)
            v = v_max
        bias1 = 1 - _powers(group, clock, "betas", 0)
        bias2 = 1 - _powers(group, clock, "betas", 1)
        denominator = v.sqrt() / bias2.sqrt() + group["eps"]
        step = (-lr / bias1).float()
        p.assign((w.float() + step * m.float() / denominator.float()).cast(dt))
        return written


class _AdamConstants:
    """A group's constant Adam hyperparameters, with the cache of their 0-d constant nodes."""

    def __init__(self, b1: float, b2: float, eps: float, weight_decay: float, decoupled: bool, cache: dict) -> None:
        self.b1, self.b2, self.eps, self.weight_decay, self.decoupled = b1, b2, eps, weight_decay, decoupled
        self._constants = cache


def _adam_update(
    opt: _AdamConstants, p: Tensor, g: Tensor, w: Tensor, m: Tensor, v: Tensor, scalars: tuple[Tensor, ...]
) -> bool:
    """Adam's step of a float32 parameter (`g`, `w`: its gradient and value, detached and with weight decay added;
    `m`, `v`: its moments; `scalars`: the bias corrections and the learning rate, 0-d), assigned with nodes built
    directly: the nodes `Adam._update`'s Tensor methods build (a test checks), without their checks and intermediate
    tensors, for every parameter of every step (the main job's optimizer phase: 0.60-0.67 -> 0.55 ms a step). False:
    another case (another dtype, shapes or devices that differ), left to the Tensor methods."""
    dt, shape, device = p.dtype, p.shape, p.device
    if dt is not dtypes.float32:
        return False
    if any(t.dtype is not dt or t.shape != shape or t.device != device for t in (g, w, m, v)):
        return False
    if any(t.dtype is not dt or t.shape != () or t.device != device for t in scalars):
        return False
    bias1, bias2, lr = (_spread(t.uop, shape) for t in scalars)

    def scalar(x: float) -> UOp:
        # the 0-d constants' nodes, kept from step to step (a Tensor per number, per parameter, per step was ~10% of
        # a GPT step's optimizer build); keyed by repr: 0.0 and -0.0 are two constants
        if (u := opt._constants.get((repr(x), device))) is None:
            u = opt._constants[(repr(x), device)] = Tensor(x, device=device, dtype=dt).uop
        return u

    def const(x: float) -> UOp:
        return _spread(scalar(x), shape)

    gu, wu = g.uop, w.uop
    m.assign(Tensor(UOp(_ADD, dt, (UOp(_MUL, dt, (const(opt.b1), m.uop)), UOp(_MUL, dt, (const(1 - opt.b1), gu))))))
    g2 = UOp(_MUL, dt, (const(1 - opt.b2), UOp(_MUL, dt, (gu, gu))))
    v.assign(Tensor(UOp(_ADD, dt, (UOp(_MUL, dt, (const(opt.b2), v.uop)), g2))))
    m_hat, v_hat = UOp(_FDIV, dt, (m.uop, bias1)), UOp(_FDIV, dt, (v.uop, bias2))
    if opt.weight_decay and opt.decoupled:
        # w * (1 - lr * weight_decay), the factor 0-d
        lr_wd = UOp(_MUL, dt, (scalars[2].uop, scalar(opt.weight_decay)))
        keep = UOp(_ADD, dt, (scalar(1.0), UOp(_NEG, dt, (lr_wd,))))
        wu = UOp(_MUL, dt, (wu, _spread(keep, shape)))
    denominator = UOp(_ADD, dt, (UOp(_SQRT, dt, (v_hat,)), const(opt.eps)))
    step = UOp(_FDIV, dt, (UOp(_MUL, dt, (lr, m_hat)), denominator))
    p.assign(Tensor(UOp(_ADD, dt, (wu, UOp(_NEG, dt, (step,))))))
    return True


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the Adam update."""

    decoupled = True

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        betas: tuple[float, float] | None = None,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        options = dict(foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused)
        super().__init__(params, lr, b1, b2, eps, weight_decay, amsgrad, betas=betas, maximize=maximize, **options)

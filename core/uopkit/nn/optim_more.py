"""torch.optim's other optimizers, by torch's names, argument order and defaults, with torch's update rules: RMSprop,
Adagrad, Adadelta, Adamax, NAdam, RAdam (the base class, parameter groups and state dicts: nn/optimizer.py; re-exported
by `uopkit.nn.optim`).

Numbers that depend on the step count (bias corrections, NAdam's momentum schedule, RAdam's rectification) are 0-d
tensors computed on the device from the step count, so a step recompiles nothing and replays under TinyJit.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, -2.0], requires_grad=True)
>>> opt = Adagrad([w], lr=0.5)
>>> (w * w).sum().backward().shape
()
>>> opt.step()
>>> [round(x, 4) for x in w.tolist()]
[0.5, -1.5]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from uopkit.nn.optimizer import Optimizer, ParamGroup, _beta_powers, _powers, _state_like
from uopkit.tensor import Tensor

__all__ = ["RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam"]


def _check(name: str, group: dict[str, Any], *keys: str) -> None:
    for k in keys:
        if group[k] < 0:
            raise ValueError(f"{name}: {k} must be >= 0, got {group[k]}")


def _check_betas(name: str, group: dict[str, Any]) -> None:
    b1, b2 = group["betas"]
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"{name}: betas must be in [0, 1), got ({b1}, {b2})")


def _grad(group: ParamGroup, p: Tensor, weight_decay: float) -> Tensor:
    # the detached gradient, negated for maximize, with L2 weight decay added (torch's order)
    assert p.grad is not None
    g = (-p.grad if group["maximize"] else p.grad).detach()
    return g + weight_decay * p.detach() if weight_decay else g


def _as(x: float | Tensor, like: Tensor) -> float | Tensor:
    # a hyperparameter (a number, or a 0-d tensor once dynamic) in a parameter's dtype
    return x.cast(like.dtype) if isinstance(x, Tensor) else x


class RMSprop(Optimizer):
    """RMSprop (Hinton): v = alpha v + (1 - alpha) g^2; centered: minus the squared mean gradient; with momentum:
    b = momentum b + g / (sqrt(v) + eps), p -= lr b; else p -= lr g / (sqrt(v) + eps)."""

    dynamic = ("momentum",)
    state_names = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.01,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay)
        defaults |= dict(capturable=capturable, foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        _check("RMSprop", group, "eps", "momentum", "weight_decay", "alpha")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        slots = {"square_avg": _state_like(p)}
        if group["momentum"]:
            slots["momentum_buffer"] = _state_like(p)
        if group["centered"]:
            slots["grad_avg"] = _state_like(p)
        return slots

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        alpha, eps, momentum = group["alpha"], group["eps"], group.hyper("momentum")
        written: list[Tensor] = []
        for p in params:
            g, lr = _grad(group, p, group["weight_decay"]), group.tensors["lr"][0].cast(p.dtype)
            square_avg = self._slot(p, "square_avg")
            square_avg.assign(alpha * square_avg + (1 - alpha) * (g * g))
            written.append(square_avg)
            if group["centered"]:
                grad_avg = self._slot(p, "grad_avg")
                grad_avg.assign(grad_avg + (1 - alpha) * (g - grad_avg))
                written.append(grad_avg)
                avg = (square_avg - grad_avg * grad_avg).sqrt() + eps
            else:
                avg = square_avg.sqrt() + eps
            if isinstance(momentum, Tensor) or momentum > 0:
                buf = self._slot(p, "momentum_buffer")
                buf.assign(_as(momentum, p) * buf + g / avg)
                written.append(buf)
                p.assign((p.detach() - lr * buf).cast(p.dtype))
            else:
                p.assign((p.detach() - lr * (g / avg)).cast(p.dtype))
        return written


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.): s += g^2; p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)."""

    state_names = ("sum",)

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.01,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay)
        defaults |= dict(initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults | dict(differentiable=differentiable, fused=fused))

    def _check_group(self, group: dict[str, Any]) -> None:
        _check("Adagrad", group, "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"sum": _state_like(p, group["initial_accumulator_value"])}

    def _fresh_value(self, group: ParamGroup, name: str) -> float:
        return float(group["initial_accumulator_value"])

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, group["weight_decay"])
            step = self._clocks[id(p)].values["step"]
            clr = group.tensors["lr"][0].cast(step.dtype) / (1 + (step - 1) * group["lr_decay"])
            total = self._slot(p, "sum", group["initial_accumulator_value"])
            total.assign(total + g * g)
            written.append(total)
            p.assign((p.detach() - clr.cast(p.dtype) * (g / (total.sqrt() + group["eps"]))).cast(p.dtype))
        return written


class Adadelta(Optimizer):
    """Adadelta (Zeiler): v = rho v + (1 - rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g; u = rho u + (1 - rho) d^2;
    p -= lr d."""

    state_names = ("square_avg", "acc_delta")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize, capturable=capturable)
        super().__init__(params, defaults | dict(foreach=foreach, differentiable=differentiable))

    def _check_group(self, group: dict[str, Any]) -> None:
        _check("Adadelta", group, "eps", "weight_decay")
        if not 0 <= group["rho"] <= 1:
            raise ValueError(f"Adadelta: rho must be in [0, 1], got {group['rho']}")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"square_avg": _state_like(p), "acc_delta": _state_like(p), "delta": _state_like(p)}

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        rho, eps = group["rho"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, group["weight_decay"])
            square_avg, acc_delta = self._slot(p, "square_avg"), self._slot(p, "acc_delta")
            square_avg.assign(rho * square_avg + (1 - rho) * (g * g))
            # the step is stored once: the new acc_delta and the new weight both read it (else each kernel computes it
            # again from the old acc_delta and, through the gradient, the old weight)
            delta = self._slot(p, "delta")
            delta.assign((acc_delta + eps).sqrt() / (square_avg + eps).sqrt() * g)
            acc_delta.assign(rho * acc_delta + (1 - rho) * (delta * delta))
            written += (square_avg, delta, acc_delta)
            p.assign((p.detach() - group.tensors["lr"][0].cast(p.dtype) * delta).cast(p.dtype))
        return written


class _AdamFamily(Optimizer):
    # betas (dynamic once changed), their powers in the clock
    dynamic = ("betas",)

    def _check_group(self, group: dict[str, Any]) -> None:
        _check_betas(type(self).__name__, group)
        _check(type(self).__name__, group, "eps", "weight_decay")

    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        return {"step": float(step)} | _beta_powers(group["betas"], step)

    def _clock_next(self, group: ParamGroup, clock: dict[str, Tensor]) -> dict[str, Tensor]:
        b1, b2 = group["betas"]
        return {"step": clock["step"] + 1, "b1_t": clock["b1_t"] * b1, "b2_t": clock["b2_t"] * b2}

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {name: _state_like(p) for name in self.state_names}


class Adamax(_AdamFamily):
    """Adamax (Kingma & Ba): m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u."""

    state_names = ("exp_avg", "exp_inf")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.002,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, foreach=foreach)
        super().__init__(
            params, defaults | dict(maximize=maximize, differentiable=differentiable, capturable=capturable)
        )

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        b1, b2 = group.hyper("betas")
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, group["weight_decay"])
            clock = self._clocks[id(p)].values
            clr = group.tensors["lr"][0].cast(clock["step"].dtype) / (1 - _powers(group, clock, "betas", 0))
            exp_avg, exp_inf = self._slot(p, "exp_avg"), self._slot(p, "exp_inf")
            exp_avg.assign(exp_avg + (1 - _as(b1, p)) * (g - exp_avg))
            exp_inf.assign((_as(b2, p) * exp_inf).maximum(g.abs() + group["eps"]))
            written += (exp_avg, exp_inf)
            p.assign((p.detach() - clr.cast(p.dtype) * (exp_avg / exp_inf)).cast(p.dtype))
        return written


class NAdam(_AdamFamily):
    """NAdam (Dozat): Adam with Nesterov momentum and the momentum schedule mu_t = b1 (1 - 0.5 * 0.96^(t psi)),
    psi = momentum_decay; `decoupled_weight_decay=True`: AdamW's decay (NAdamW)."""

    state_names = ("exp_avg", "exp_avg_sq")
    clock_state = ("step", "mu_product")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.002,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 0.004,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay)
        defaults |= dict(decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, foreach=foreach)
        super().__init__(params, defaults | dict(capturable=capturable, differentiable=differentiable))

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        _check("NAdam", group, "momentum_decay")

    # the clock: the step, b2^t, the product of the mu's so far and 0.96^(t psi) (kept as a running product)
    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        b1, b2 = group["betas"]
        psi = group["momentum_decay"]
        mu_product = math.prod(b1 * (1 - 0.5 * 0.96 ** (i * psi)) for i in range(1, int(step) + 1))
        return {"step": float(step), "b2_t": b2**step, "mu_product": mu_product, "decay_t": 0.96 ** (step * psi)}

    def _clock_next(self, group: ParamGroup, clock: dict[str, Tensor]) -> dict[str, Tensor]:
        b1, b2 = group.hyper("betas")
        decay = clock["decay_t"] * 0.96 ** group["momentum_decay"]
        mu = _as(b1, clock["step"]) * (1 - 0.5 * decay)
        b2_t = clock["b2_t"] * group["betas"][1]
        return {"step": clock["step"] + 1, "b2_t": b2_t, "mu_product": clock["mu_product"] * mu, "decay_t": decay}

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        b1, b2 = group.hyper("betas")
        decoupled, weight_decay, eps = group["decoupled_weight_decay"], group["weight_decay"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, 0.0 if decoupled else weight_decay)
            w = p.detach()
            clock = self._clocks[id(p)].values
            lr = group.tensors["lr"][0].cast(clock["step"].dtype)
            if weight_decay and decoupled:
                w = w * (1 - lr * weight_decay).cast(p.dtype)
            wide_b1 = _as(b1, clock["step"])
            mu = wide_b1 * (1 - 0.5 * clock["decay_t"])
            mu_next = wide_b1 * (1 - 0.5 * clock["decay_t"] * 0.96 ** group["momentum_decay"])
            bias2 = (1 - _powers(group, clock, "betas", 1)).cast(p.dtype)
            coef_g = (lr * (1 - mu) / (1 - clock["mu_product"])).cast(p.dtype)
            coef_m = (lr * mu_next / (1 - clock["mu_product"] * mu_next)).cast(p.dtype)
            exp_avg, exp_avg_sq = self._slot(p, "exp_avg"), self._slot(p, "exp_avg_sq")
            exp_avg.assign(exp_avg + (1 - _as(b1, p)) * (g - exp_avg))
            exp_avg_sq.assign(_as(b2, p) * exp_avg_sq + (1 - _as(b2, p)) * (g * g))
            written += (exp_avg, exp_avg_sq)
            denom = (exp_avg_sq / bias2).sqrt() + eps
            p.assign((w - coef_g * (g / denom) - coef_m * (exp_avg / denom)).cast(p.dtype))
        return written


class RAdam(_AdamFamily):
    """RAdam (Liu et al.): Adam whose adaptive step is rectified by the variance of its length rho_t, and left out
    (plain momentum SGD with bias correction) while rho_t <= 5; `decoupled_weight_decay=True`: AdamW's decay."""

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize)
        defaults |= dict(foreach=foreach, capturable=capturable, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults | dict(differentiable=differentiable))

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        b1, b2 = group.hyper("betas")
        decoupled, weight_decay, eps = group["decoupled_weight_decay"], group["weight_decay"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, 0.0 if decoupled else weight_decay)
            w = p.detach()
            clock = self._clocks[id(p)].values
            step = clock["step"]
            lr = group.tensors["lr"][0].cast(step.dtype)
            if weight_decay and decoupled:
                w = w * (1 - lr * weight_decay).cast(p.dtype)
            b2_t = _powers(group, clock, "betas", 1)
            bias1, bias2 = 1 - _powers(group, clock, "betas", 0), 1 - b2_t
            # the length of the approximated SMA, its limit, and the rectification (1 where rho_t <= 5: no adaptive
            # step at all)
            rho_inf = 2 / (1 - _as(b2, step)) - 1
            rho_t = rho_inf - 2 * step * b2_t / bias2
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).maximum(0).sqrt()
            adaptive = rho_t > 5
            exp_avg, exp_avg_sq = self._slot(p, "exp_avg"), self._slot(p, "exp_avg_sq")
            exp_avg.assign(exp_avg + (1 - _as(b1, p)) * (g - exp_avg))
            exp_avg_sq.assign(_as(b2, p) * exp_avg_sq + (1 - _as(b2, p)) * (g * g))
            written += (exp_avg, exp_avg_sq)
            step_m = exp_avg / (bias1.cast(p.dtype)) * (lr.cast(p.dtype))
            scaled = step_m * (bias2.sqrt() * rect).cast(p.dtype) / (exp_avg_sq.sqrt() + eps)
            p.assign((w - adaptive.where(scaled, step_m)).cast(p.dtype))
        return written

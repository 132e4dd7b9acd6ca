"""torch.optim's other optimizers, by torch's names, argument order and defaults, with torch's update rules: RMSprop,
Adagrad, Adadelta, Adamax, SparseAdam, NAdam, RAdam, Rprop, ASGD, Adafactor; and tinygrad's LAMB (the base class,
parameter groups and state dicts: nn/optimizer.py; re-exported by `uopkit.nn.optim`).

Numbers that depend on the step count (bias corrections, NAdam's momentum schedule, RAdam's rectification, ASGD's eta
and mu) are 0-d tensors computed on the device from the step count, so a step recompiles nothing and replays under
TinyJit.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, -2.0], requires_grad=True)
>>> opt = Adagrad([w], lr=0.5)
>>> (w * w).sum().backward()
>>> opt.step()
>>> [round(x, 4) for x in w.tolist()]
[0.5, -1.5]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from uopkit.dtype import dtypes, finfo
from uopkit.nn.optimizer import Optimizer, ParamGroup, _beta_powers, _betas, _check_fused, _powers, _state_like
from uopkit.tensor import Tensor

__all__ = [
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
]


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


def _one_minus(x: float | Tensor, like: Tensor) -> float | Tensor:
    # 1 - x in a parameter's dtype, the subtraction in x's own (float64) dtype, as torch's on Python floats: from x
    # rounded to float32 first, 1 - 0.999 came out 1.3e-5 off
    return (1 - x).cast(like.dtype) if isinstance(x, Tensor) else 1 - x


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
        alpha, eps = group["alpha"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g, lr = _grad(group, p, group["weight_decay"]), group.lr_on(p.device).cast(p.dtype)
            momentum = group.hyper("momentum", p.device)
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
        _check_fused("Adagrad", fused, foreach, differentiable)
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
            clr = group.lr_on(p.device).cast(step.dtype) / (1 + (step - 1) * group["lr_decay"])
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
            p.assign((p.detach() - group.lr_on(p.device).cast(p.dtype) * delta).cast(p.dtype))
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
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, group["weight_decay"])
            b1, b2 = group.hyper("betas", p.device)
            clock = self._clocks[id(p)].values
            clr = group.lr_on(p.device).cast(clock["step"].dtype) / (1 - _powers(group, clock, "betas", 0))
            exp_avg, exp_inf = self._slot(p, "exp_avg"), self._slot(p, "exp_inf")
            exp_avg.assign(exp_avg + _one_minus(b1, p) * (g - exp_avg))
            exp_inf.assign((_as(b2, p) * exp_inf).maximum(g.abs() + group["eps"]))
            written += (exp_avg, exp_inf)
            p.assign((p.detach() - clr.cast(p.dtype) * (exp_avg / exp_inf)).cast(p.dtype))
        return written


class LAMB(_AdamFamily):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning"), tinygrad's `nn.optim.LAMB` and its arguments:
    Adam's bias-corrected moments give the update u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, which each
    parameter takes scaled by its trust ratio ||p|| / ||u|| (1 where either norm is 0): p -= lr * ratio * u.
    `adam=True` drops the ratio: Adam (weight_decay 0) or AdamW (decoupled decay, torch's AdamW step). torch's
    `betas=` is taken by name.

    >>> w = Tensor([3.0, 4.0], requires_grad=True)
    >>> opt = LAMB([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [2.6464, 3.6464]
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        *,
        betas: tuple[float, float] | None = None,
    ) -> None:
        b1, b2 = _betas("LAMB", b1, b2, betas)
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay, adam=adam))

    # (tinygrad's attribute names for the moments)
    @property
    def m(self) -> list[Tensor]:
        return [s["exp_avg"] for s in self._slots.values()]

    @property
    def v(self) -> list[Tensor]:
        return [s["exp_avg_sq"] for s in self._slots.values()]

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        eps, weight_decay = group["eps"], group["weight_decay"]
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            g, w = p.grad.detach(), p.detach()
            b1, b2 = group.hyper("betas", p.device)
            clock = self._clocks[id(p)].values
            m, v = self._slot(p, "exp_avg"), self._slot(p, "exp_avg_sq")
            m.assign(_as(b1, p) * m + _one_minus(b1, p) * g)
            v.assign(_as(b2, p) * v + _one_minus(b2, p) * (g * g))
            written += (m, v)
            m_hat = m / (1 - _powers(group, clock, "betas", 0)).cast(p.dtype)
            v_hat = v / (1 - _powers(group, clock, "betas", 1)).cast(p.dtype)
            update = m_hat / (v_hat.sqrt() + eps)
            if weight_decay:
                update = update + weight_decay * w
            if not group["adam"]:
                # (the norms of half floats are summed in float32, as vector_norm does)
                w_norm, u_norm = w.vector_norm(), update.vector_norm()
                ratio = (w_norm > 0).where((u_norm > 0).where(w_norm / u_norm, 1.0), 1.0)
                update = update * ratio.cast(p.dtype)
            p.assign((w - group.lr_on(p.device).cast(p.dtype) * update).cast(p.dtype))
        return written


def _present_rows(g: Tensor) -> Tensor:
    # the rows (index along the first axis) of a dense gradient with a nonzero entry: the ones a sparse gradient of
    # the same values would hold, as a bool mask broadcast to g's shape
    nonzero = g != 0
    if g.ndim > 1:
        nonzero = nonzero.any(axis=tuple(range(1, g.ndim)), keepdim=True)
    return nonzero.expand(g.shape) if nonzero.shape != g.shape else nonzero


class SparseAdam(_AdamFamily):
    """SparseAdam (torch's): Adam's moments and step, on the rows a sparse gradient holds only; the other rows of the
    parameter and of both moments keep their values. With bias corrections of the parameter's step count t:
    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps).

    uopkit has no sparse tensors: `Embedding(sparse=True)` and `EmbeddingBag(sparse=True)` give dense gradients,
    zero on the rows no index looked up (and on padding_idx), and SparseAdam takes those: a row of the dense
    gradient (an index of its first axis) whose entries are all zero is read as absent from a sparse gradient. So a
    port of Embedding(sparse=True) + SparseAdam steps as torch's, but for a looked-up row whose summed gradient is
    exactly zero, which torch updates (its moments decay and it moves) and this one leaves alone. Any other dense
    gradient is taken the same way (torch raises for a dense gradient).

    >>> from uopkit import Tensor
    >>> w = Tensor([[1.0, 1.0], [2.0, 2.0]], requires_grad=True)
    >>> opt = SparseAdam([w], lr=0.5)
    >>> (w[0] * 3).sum().backward()
    >>> opt.step()
    >>> [[round(x, 4) for x in row] for row in w.tolist()]
    [[0.5, 0.5], [2.0, 2.0]]
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float | Tensor = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        maximize: bool = False,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError(f"SparseAdam: a tensor lr must hold one value, got shape {lr.shape}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize)
        # (torch's checks and messages, before the base class's)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        lr = group["lr"].item() if isinstance(group["lr"], Tensor) else group["lr"]
        if not 0.0 < lr:
            raise ValueError(f"SparseAdam: lr must be > 0, got {lr}")
        if not 0.0 < group["eps"]:
            raise ValueError(f"SparseAdam: eps must be > 0, got {group['eps']}")
        for i, beta in enumerate(group["betas"]):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"SparseAdam: betas[{i}] must lie in [0, 1), got {beta}")

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        written: list[Tensor] = []
        for p in params:
            assert p.grad is not None
            g, w = (-p.grad if group["maximize"] else p.grad).detach(), p.detach()
            b1, b2 = group.hyper("betas", p.device)
            present = _present_rows(g)
            clock = self._clocks[id(p)].values
            bias1, bias2 = 1 - _powers(group, clock, "betas", 0), 1 - _powers(group, clock, "betas", 1)
            lr = group.lr_on(p.device).cast(bias1.dtype)
            step_size = (lr * bias2.sqrt() / bias1).cast(p.dtype)
            exp_avg, exp_avg_sq = self._slot(p, "exp_avg"), self._slot(p, "exp_avg_sq")
            # torch's order: old + (1 - b) (new - old)
            new_avg = exp_avg + (g - exp_avg) * _one_minus(b1, p)
            new_avg_sq = exp_avg_sq + (g * g - exp_avg_sq) * _one_minus(b2, p)
            moved = w - step_size * (new_avg / (new_avg_sq.sqrt() + group["eps"]))
            exp_avg.assign(present.where(new_avg, exp_avg))
            exp_avg_sq.assign(present.where(new_avg_sq, exp_avg_sq))
            p.assign(present.where(moved, w).cast(p.dtype))
            written += (exp_avg, exp_avg_sq)
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
        b1, b2 = group.hyper("betas", clock["step"].device)
        decay = clock["decay_t"] * 0.96 ** group["momentum_decay"]
        mu = _as(b1, clock["step"]) * (1 - 0.5 * decay)
        b2_t = clock["b2_t"] * group["betas"][1]
        return {"step": clock["step"] + 1, "b2_t": b2_t, "mu_product": clock["mu_product"] * mu, "decay_t": decay}

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        decoupled, weight_decay, eps = group["decoupled_weight_decay"], group["weight_decay"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, 0.0 if decoupled else weight_decay)
            w = p.detach()
            b1, b2 = group.hyper("betas", p.device)
            clock = self._clocks[id(p)].values
            lr = group.lr_on(p.device).cast(clock["step"].dtype)
            if weight_decay and decoupled:
                w = w * (1 - lr * weight_decay).cast(p.dtype)
            wide_b1 = _as(b1, clock["step"])
            mu = wide_b1 * (1 - 0.5 * clock["decay_t"])
            mu_next = wide_b1 * (1 - 0.5 * clock["decay_t"] * 0.96 ** group["momentum_decay"])
            bias2 = (1 - _powers(group, clock, "betas", 1)).cast(p.dtype)
            coef_g = (lr * (1 - mu) / (1 - clock["mu_product"])).cast(p.dtype)
            coef_m = (lr * mu_next / (1 - clock["mu_product"] * mu_next)).cast(p.dtype)
            exp_avg, exp_avg_sq = self._slot(p, "exp_avg"), self._slot(p, "exp_avg_sq")
            exp_avg.assign(exp_avg + _one_minus(b1, p) * (g - exp_avg))
            exp_avg_sq.assign(_as(b2, p) * exp_avg_sq + _one_minus(b2, p) * (g * g))
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
        decoupled, weight_decay, eps = group["decoupled_weight_decay"], group["weight_decay"], group["eps"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, 0.0 if decoupled else weight_decay)
            w = p.detach()
            b1, b2 = group.hyper("betas", p.device)
            clock = self._clocks[id(p)].values
            step = clock["step"]
            lr = group.lr_on(p.device).cast(step.dtype)
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
            exp_avg.assign(exp_avg + _one_minus(b1, p) * (g - exp_avg))
            exp_avg_sq.assign(_as(b2, p) * exp_avg_sq + _one_minus(b2, p) * (g * g))
            written += (exp_avg, exp_avg_sq)
            step_m = exp_avg / (bias1.cast(p.dtype)) * (lr.cast(p.dtype))
            scaled = step_m * (bias2.sqrt() * rect).cast(p.dtype) / (exp_avg_sq.sqrt() + eps)
            p.assign((w - adaptive.where(scaled, step_m)).cast(p.dtype))
        return written


class Rprop(Optimizer):
    """Rprop (Riedmiller & Braun), torch's form: each element's step size grows by etaplus while its gradient keeps its
    sign and shrinks by etaminus when it flips (clamped to `step_sizes`); p -= sign(g) * step_size, and after a flip
    that element skips the step and counts as unsigned next time (its "prev" is 0). `lr` is the first step size,
    taken when a parameter first steps, as torch's."""

    state_names = ("prev", "step_size")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.01,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), foreach=foreach, maximize=maximize)
        super().__init__(params, defaults | dict(differentiable=differentiable, capturable=capturable))

    def _check_group(self, group: dict[str, Any]) -> None:
        etaminus, etaplus = group["etas"]
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise ValueError(f"Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, got ({etaminus}, {etaplus})")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"prev": _state_like(p), "step_size": _state_like(p, group["lr"])}

    def _fresh_value(self, group: ParamGroup, name: str) -> float:
        return float(group["lr"]) if name == "step_size" else 0.0

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        (etaminus, etaplus), (smallest, largest) = group["etas"], group["step_sizes"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, 0.0)
            prev, step_size = self._slot(p, "prev"), self._slot(p, "step_size", group["lr"])
            # (the first step starts from the lr of that step, as torch fills its step sizes then)
            first = self._clocks[id(p)].values["step"] == 1
            start = first.where(group.lr_on(p.device).cast(p.dtype), step_size)
            # etaplus where the gradient kept its sign, etaminus where it flipped, 1 where either is 0 (NaN stays)
            sign = (g * prev).sign()
            factor = (sign > 0).where(etaplus, (sign < 0).where(etaminus, (sign == 0).where(1.0, sign)))
            step_size.assign((start * factor).clamp(smallest, largest))
            kept = (sign < 0).where(0.0, g)
            prev.assign(kept)
            written += (step_size, prev)
            p.assign((p.detach() - kept.sign() * step_size).cast(p.dtype))
        return written


class ASGD(Optimizer):
    """Averaged SGD (Polyak & Juditsky), torch's form: p = p (1 - lambd eta) - eta g with eta = lr / (1 + lambd lr
    t)^alpha, and "ax" the running average of the parameter from step t0 on (mu = 1 / max(1, t - t0); before that
    ax is the parameter itself). A step uses the eta and mu the step before left, as torch's."""

    state_names = ("ax",)
    clock_state = ("step", "eta", "mu")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 0.01,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, foreach=foreach)
        super().__init__(
            params, defaults | dict(maximize=maximize, differentiable=differentiable, capturable=capturable)
        )

    def _check_group(self, group: dict[str, Any]) -> None:
        _check("ASGD", group, "weight_decay")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        return {"ax": _state_like(p)}

    # the clock: the step, torch's eta and mu (what the next step uses), and this step's ("eta_now", "mu_now": what the
    # last step left, read by the update)
    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        lr, lambd = float(group["lr"]), group["lambd"]
        eta = lr / (1 + lambd * lr * step) ** group["alpha"]
        mu = 1 / max(1.0, step - group["t0"])
        return {"step": float(step), "eta": eta, "mu": mu, "eta_now": eta, "mu_now": mu}

    def _clock_next(self, group: ParamGroup, clock: dict[str, Tensor]) -> dict[str, Tensor]:
        step = clock["step"] + 1
        lr = group.lr_on(step.device).cast(step.dtype)
        eta = lr / (1 + group["lambd"] * lr * step) ** group["alpha"]
        mu = 1 / (step - group["t0"]).maximum(1)
        # (a parameter's first step takes the lr of that step, as torch makes its eta then)
        eta_now = (step == 1).where(_rounded(lr), clock["eta"])
        return {"step": step, "eta_now": eta_now, "mu_now": clock["mu"], "eta": _rounded(eta), "mu": _rounded(mu)}

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        lambd = group["lambd"]
        written: list[Tensor] = []
        for p in params:
            g = _grad(group, p, group["weight_decay"])
            clock = self._clocks[id(p)].values
            eta, mu = clock["eta_now"], clock["mu_now"]
            new = (p.detach() * (1 - lambd * eta).cast(p.dtype) - eta.cast(p.dtype) * g).cast(p.dtype)
            ax = self._slot(p, "ax")
            # (while mu is 1 the average is the parameter itself, as torch copies it)
            ax.assign((mu == 1).where(new, ax + (new - ax) * mu.cast(p.dtype)))
            written.append(ax)
            p.assign(new)
        return written


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern), torch.optim.Adafactor's form. Per step t: the second-moment weight
    1 - beta2_t = t ** beta2_decay; rho = min(lr, 1 / sqrt(t)); alpha = max(eps2, RMS(p)) * rho (from the parameter
    before its decay); p *= 1 - lr * weight_decay. A parameter of 2 or more dims keeps the mean of g^2 over its last
    dim ("row_var", shape [..., m, 1]) and over the one before ("col_var", [..., 1, n]), each a running average with
    that weight, and estimates v = row_var * col_var / max(mean of row_var over the rows, eps1); a 0-d or 1-d one
    keeps v itself ("variance"). u = g / sqrt(max(v, eps1^2)); p -= alpha / max(1, RMS(u) / d) * u.
    eps = (eps1, eps2), eps1 None: the parameter dtype's eps.

    >>> w = Tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True)
    >>> opt = Adafactor([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [[round(x, 4) for x in row] for row in w.tolist()]
    [[2.74, 3.7478], [0.0, 0.6847]]
    """

    state_names = ("row_var", "col_var", "variance")

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d, weight_decay=weight_decay)
        super().__init__(params, defaults | dict(foreach=foreach, maximize=maximize))

    def _check_group(self, group: dict[str, Any]) -> None:
        eps1, eps2 = group["eps"]
        if not group["beta2_decay"] <= 0:
            raise ValueError(f"Adafactor: beta2_decay must be <= 0, got {group['beta2_decay']}")
        if (eps1 is not None and not eps1 >= 0) or not eps2 >= 0:
            raise ValueError(f"Adafactor: eps (eps1, eps2) must be >= 0 (eps1 may be None), got {group['eps']}")
        if not group["d"] >= 1:
            raise ValueError(f"Adafactor: the clipping threshold d must be >= 1, got {group['d']}")
        _check("Adafactor", group, "weight_decay")

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        if p.ndim < 2:
            return {"variance": _state_like(p)}
        # the factored moments: one value per row (the last dim reduced) and one per column (the one before it)
        return {
            "row_var": _state_like(p, shape=(*p.shape[:-1], 1)),
            "col_var": _state_like(p, shape=(*p.shape[:-2], 1, p.shape[-1])),
        }

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        eps1, eps2 = group["eps"]
        written: list[Tensor] = []
        for p in params:
            g, w = _grad(group, p, 0.0), p.detach()
            dt = p.dtype
            floor = finfo(dt).eps if eps1 is None else eps1
            # the step's numbers on the clock's (float64) dtype, as torch's Python floats
            step = self._clocks[id(p)].values["step"]
            lr = group.lr_on(p.device).cast(step.dtype)
            weight = (step ** group["beta2_decay"]).cast(dt)
            rho = lr.minimum(step.rsqrt())
            # (a norm over the whole parameter, then divided by sqrt(numel): torch's order)
            alpha = (w.vector_norm().cast(step.dtype) / math.sqrt(max(p.numel(), 1))).maximum(eps2) * rho
            # (a half float parameter's products in float32, rounded once, as torch's CPU kernels: the factor 0.99 in
            # bfloat16 would be 0.988)
            wide = dtypes.float32 if dt in dtypes.halves else dt
            if group["weight_decay"]:
                w = (w.cast(wide) * (1 - lr * group["weight_decay"]).cast(wide)).cast(dt)
            if p.ndim < 2:
                variance = self._slot(p, "variance")
                variance.assign(variance.lerp(g * g, weight))
                written.append(variance)
                estimate = variance
            else:
                row_var, col_var = self._slot(p, "row_var"), self._slot(p, "col_var")
                # the mean of g^2 over a row (a column) as torch's: the norm squared, over the count
                row_mean = g.vector_norm(dim=-1, keepdim=True).square() / p.shape[-1]
                col_mean = g.vector_norm(dim=-2, keepdim=True).square() / p.shape[-2]
                row_var.assign(row_var.lerp(row_mean, weight))
                col_var.assign(col_var.lerp(col_mean, weight))
                written += (row_var, col_var)
                # (the outer product of the factors: torch's row_var @ col_var, one product per element)
                estimate = row_var * col_var / row_var.mean(axis=-2, keepdim=True).maximum(floor)
            update = estimate.maximum(floor * floor).rsqrt() * g
            # the update clipped to an RMS of at most d
            rms = update.vector_norm().cast(step.dtype) / (math.sqrt(max(p.numel(), 1)) * group["d"])
            # (p.add_(update, alpha=-scale) as torch's: the scale rounded to the parameter's dtype, the sum in wide)
            scale = (-alpha / rms.maximum(1.0)).cast(dt)
            p.assign((w.cast(wide) + scale.cast(wide) * update.cast(wide)).cast(dt))
        return written


def _rounded(x: Tensor) -> Tensor:
    # a value as torch keeps it in a float32 0-d state tensor (its default dtype), in x's own dtype
    return x.cast(dtypes.float32).cast(x.dtype)

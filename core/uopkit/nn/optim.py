"""Optimizers: each step writes the new parameters and optimizer state in place (assign -> STORE), all realized at once.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.1)
>>> (w * w).sum().backward().shape
()
>>> opt.step()
>>> w.tolist()
[0.800000011920929, 1.600000023841858]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from uopkit.device import Device
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.tensor import Tensor
from uopkit.uop.ops import Ops, UOp

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm_"]


def _state_like(t: Tensor, value: float = 0.0) -> Tensor:
    # a fresh buffer per state tensor (lazy constants are hash-consed and could share storage once realized); a
    # bfloat16 parameter's state is bfloat16, as PyTorch's (numpy has no bfloat16: made from float32)
    if t.dtype == dtypes.bfloat16:
        arr = np.full(t.shape, value, dtype=np.float32)
        return Tensor(arr, device=t.device).reshape(t.shape).cast(dtypes.bfloat16).realize().requires_grad_(False)
    arr = np.full(t.shape, value, dtype=to_numpy_dtype(t.dtype))
    return Tensor(arr, device=t.device).reshape(t.shape).requires_grad_(False)


def _scalar(value: float, device: str, dtype: DType) -> Tensor:
    # hyperparameters that change between steps live in a buffer, so changing them never recompiles a kernel
    return Tensor(np.array([value], dtype=to_numpy_dtype(dtype)), device=device).reshape(()).requires_grad_(False)


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


def _dedup(ts: list[Tensor]) -> list[Tensor]:
    seen: set[int] = set()
    return [t for t in ts if not (id(t) in seen or seen.add(id(t)))]  # type: ignore[func-returns-value]


class Optimizer:
    """Base class: `params` with requires_grad get updated; the others (e.g. BatchNorm running statistics) are
    realized with every step so that their pending in-place updates land too."""

    def __init__(self, params: Tensor | Iterable[Tensor], lr: float) -> None:
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be >= 0, got {lr}")
        # (any iterable, as torch: a generator such as model.parameters() is read once)
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: params must be Tensors, got {type(p).__name__}")
            if p.requires_grad is None:
                if not dtypes.is_float(p.dtype):
                    # (only float tensors can require gradients)
                    raise TypeError(
                        f"{type(self).__name__}: parameter of shape {p.shape} is {p.dtype}, not floating point"
                    )
                p.requires_grad = True
        self.params = _dedup([p for p in params if p.requires_grad])
        self.buffers = _dedup([p for p in params if not p.requires_grad])
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got no parameters that require a gradient")
        self.device = self.params[0].device
        # float32, or float64 where a parameter is: its update then uses the numbers as given, as PyTorch's Python
        # floats (0.1 in float32 is 0.1000000015)
        float64 = any(p.dtype == dtypes.float64 for p in self.params)
        self._hyper_dtype = dtypes.float64 if float64 else dtypes.float32
        self._lr = _scalar(lr, self.device, self._hyper_dtype)

    @property
    def lr(self) -> Tensor:
        """The learning rate, a 0-d float32 tensor (float64 when a parameter is): changing it (`opt.lr = 0.01`, or an
        assign into it) recompiles nothing, and a TinyJit replay reads the new value."""
        return self._lr

    @lr.setter
    def lr(self, value: float | Tensor) -> None:
        if isinstance(value, Tensor):
            self._lr = value
            return
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be a number >= 0, got {value!r}")
        self._lr.assign(Tensor(float(value), device=self.device, dtype=self._lr.dtype)).realize()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter from its `.grad` (one realize for all parameters and state)."""
        if pending := self.schedule_step():
            Tensor.realize(*pending)

    def schedule_step(self) -> list[Tensor]:
        """Build the in-place updates without running them; returns the tensors to realize (the updated parameters and
        state, and the gradients, which are realized with them).

        Realize them together with the loss (`Tensor.realize(loss, *opt.schedule_step())`) to read the loss of
        this step: a parameter's buffer is overwritten when the step runs.
        """
        with_grad = [p for p in self.params if p.grad is not None]
        if not with_grad:
            # (nothing to update, as torch's step: its buffers' pending updates still land)
            return list(self.buffers)
        for p in with_grad:
            assert p.grad is not None
            if p.grad.shape != p.shape:
                raise ValueError(
                    f"{type(self).__name__}.step: gradient shape {p.grad.shape} doesn't match its parameter's {p.shape}"
                )
        # the gradients are realized with the step (as PyTorch keeps them after step()): left lazy, they would read the
        # weights the step overwrites, and each step would first copy every weight for them (copy on write)
        grads = [p.grad for p in with_grad if p.grad is not None]
        return self._step(with_grad) + self.params + self.buffers + grads

    def _step(self, params: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight decay (PyTorch semantics).

    g = grad + weight_decay * p; b = momentum * b + (1 - dampening) * g (b = g on the first step);
    p -= lr * (g + momentum * b if nesterov else b)
    """

    def __init__(
        self,
        params: Tensor | Iterable[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        # (torch's positional order: lr, momentum, dampening, weight_decay, nesterov; tinygrad's puts weight_decay
        # third, which would read as a dampening here: pass those by name)
        super().__init__(params, lr)
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0")
        if nesterov and (momentum == 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening 0")
        self.momentum, self.weight_decay, self.nesterov, self.dampening = momentum, weight_decay, nesterov, dampening
        self.maximize = maximize
        self.b = [_state_like(p) for p in self.params] if momentum else []
        # (PyTorch's first step of each parameter takes its gradient as the momentum buffer, undampened)
        self._momentum_started = [False] * len(self.params)

    def _step(self, params: list[Tensor]) -> list[Tensor]:
        for p in params:
            assert p.grad is not None
            # (maximize: the gradient's negative, as torch's)
            grad = -p.grad if self.maximize else p.grad
            if not self.weight_decay and not self.momentum:
                # (plain SGD: the update's nodes built directly when the dtypes and devices allow)
                new = _sgd_update(p, grad, self.lr)
                if new is not None:
                    p.assign(new)
                    continue
            g = grad.detach()
            if self.weight_decay:
                g = g + self.weight_decay * p.detach()
            if self.momentum:
                i = self._index(p)
                b = self.b[i]
                damped = g if not self.dampening or not self._momentum_started[i] else (1 - self.dampening) * g
                b.assign(self.momentum * b + damped)
                self._momentum_started[i] = True
                # (half floats summed in float32 and rounded once; float32 and float64 in their own dtype)
                wide = dtypes.float32 if g.dtype in dtypes.halves else g.dtype
                g = (g.cast(wide) + self.momentum * b.cast(wide)).cast(g.dtype) if self.nesterov else b
            if p.dtype in dtypes.halves:
                # lr * g subtracted in float32 and rounded once, as PyTorch's p.add_(g, alpha=-lr) (lr rounded to a
                # half float is off by up to 0.4% in bfloat16)
                p.assign((p.detach().float() - self.lr * g.float()).cast(p.dtype))
                continue
            p.assign((p.detach() - self.lr.cast(p.dtype) * g).cast(p.dtype))
        return self.b

    def _index(self, p: Tensor) -> int:
        return next(i for i, q in enumerate(self.params) if q is p)


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; `weight_decay` adds L2 to the gradient, as PyTorch's Adam.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    `amsgrad=True`: the largest v of all steps so far (kept per element) takes v's place in the step, as PyTorch's.
    """

    decoupled = False

    def __init__(
        self,
        params: Tensor | Iterable[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        betas: tuple[float, float] | None = None,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if isinstance(b1, (tuple, list)):
            raise TypeError(
                f"{type(self).__name__}: pass betas by name (betas={tuple(b1)}): the third positional argument is b1"
            )
        if betas is not None:
            # (PyTorch's name for (b1, b2))
            b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got ({b1}, {b2})")
        self.b1, self.b2, self.eps, self.weight_decay, self.maximize = b1, b2, eps, weight_decay, maximize
        self.amsgrad = amsgrad
        self._constants: dict[tuple[str, str], UOp] = {}
        self.m = [_state_like(p) for p in self.params]
        self.v = [_state_like(p) for p in self.params]
        # amsgrad (Reddi et al.): the largest v so far divides the step, as PyTorch's max_exp_avg_sq
        self.v_max = [_state_like(p) for p in self.params] if amsgrad else []
        # b1^t and b2^t, kept in buffers so the step count is data, not a constant baked into a kernel
        # in float64 where the device has it, as PyTorch's Python floats: float32(0.999) is 0.99900001, and its powers'
        # 1 - b2^t were off by 1.3e-5 relative (every step size by ~6e-6)
        powers = dtypes.float64 if dtypes.float64 in Device[self.device].renderer.caps.supported_dtypes else None
        self.b1_t, self.b2_t = (
            _scalar(1.0, self.device, powers or self._hyper_dtype),
            _scalar(1.0, self.device, powers or self._hyper_dtype),
        )

    def _step(self, params: list[Tensor]) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        # the bias corrections and the learning rate, per dtype: every parameter's update reads the same (hash-consed)
        # nodes, so they are built once, not once per parameter
        scalars: dict[DType, tuple[Tensor, Tensor, Tensor]] = {}
        for p in params:
            i = next(i for i, q in enumerate(self.params) if q is p)
            assert p.grad is not None
            g, w = (-p.grad if self.maximize else p.grad).detach(), p.detach()
            if self.weight_decay and not self.decoupled:
                g = g + self.weight_decay * w
            m, v = self.m[i], self.v[i]
            if p.dtype not in scalars:
                scalars[p.dtype] = (
                    (1 - self.b1_t).cast(p.dtype),
                    (1 - self.b2_t).cast(p.dtype),
                    self.lr.cast(p.dtype),
                )
            bias1, bias2, lr = scalars[p.dtype]
            if not self.amsgrad and _adam_update(self, p, g, w, m, v, (bias1, bias2, lr)):
                continue
            m.assign(self.b1 * m + (1 - self.b1) * g)
            v.assign(self.b2 * v + (1 - self.b2) * (g * g))
            m_hat = m / bias1
            if self.amsgrad:
                v_max = self.v_max[i]
                v_max.assign(v_max.maximum(v))
                v = v_max
            v_hat = v / bias2
            if self.weight_decay and self.decoupled:
                w = w * (1 - lr * self.weight_decay)
            p.assign((w - lr * m_hat / (v_hat.sqrt() + self.eps)).cast(p.dtype))
        return [self.b1_t, self.b2_t, *self.m, *self.v, *self.v_max]


def _adam_update(opt: Adam, p: Tensor, g: Tensor, w: Tensor, m: Tensor, v: Tensor, scalars: tuple[Tensor, ...]) -> bool:
    """Adam's step of a float32 parameter (`g`, `w`: its gradient and value, detached and with weight decay added;
    `m`, `v`: its moments; `scalars`: the bias corrections and the learning rate, 0-d), assigned with nodes built
    directly: the nodes `Adam._step`'s Tensor methods build (a test checks), without their checks and intermediate
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
        params: Tensor | Iterable[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        *,
        betas: tuple[float, float] | None = None,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, betas=betas, amsgrad=amsgrad, maximize=maximize)


def clip_grad_norm_(params: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale the gradients of `params` so that their norm taken together is at most `max_norm` (torch's
    `clip_grad_norm_`: by max_norm / (norm + 1e-6) when that is below 1); returns that total norm.

    Nothing is read back: the norm and the scaled gradients stay lazy (realized with the step), so a step that clips
    still runs under TinyJit.

    >>> w = Tensor([3.0, 4.0], requires_grad=True)
    >>> (w * w).sum().backward().shape
    ()
    >>> round(clip_grad_norm_([w], 1.0).item(), 4), [round(g, 4) for g in w.grad.tolist()]
    (10.0, [0.6, 0.8])
    """
    # (a tensor or any iterable, read once; a tensor given twice counts twice and is scaled twice, as torch's)
    params = [params] if isinstance(params, Tensor) else list(params)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return Tensor(0.0)
    # (float32 for half floats, float64 when a gradient is: its norm isn't rounded to float32)
    wide = dtypes.float64 if any(g.dtype == dtypes.float64 for g in grads) else dtypes.float32
    if norm_type == float("inf"):
        total = Tensor.stack(*[g.detach().abs().max().cast(wide) for g in grads]).max()
    else:
        total = Tensor.stack(*[(g.detach().cast(wide).abs() ** norm_type).sum() for g in grads]).sum() ** (
            1 / norm_type
        )
    scale = (max_norm / (total + 1e-6)).minimum(1.0)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad * scale.cast(p.grad.dtype)
    # (in the gradients' dtype when they share one, as torch's: float16 gradients give a float16 norm)
    dtypes_of_grads = {g.dtype for g in grads}
    return total.cast(dtypes_of_grads.pop()) if len(dtypes_of_grads) == 1 else total

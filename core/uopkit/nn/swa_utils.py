"""torch.optim.swa_utils for uopkit (also `uopkit.nn.optim.swa_utils`): weight averaging (SWA, EMA) with torch's names,
signatures and formulas: `AveragedModel`, `SWALR`, `update_bn` and the averaging functions.

    swa_model = AveragedModel(model)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(epochs):
        train_one_epoch(model, optimizer)
        if epoch > swa_start:
            swa_model.update_parameters(model)
            swa_scheduler.step()
    update_bn(loader, swa_model)

The averages are written in place into the averaged model's tensors and realized at the end of each
`update_parameters` (the default average is torch's CPU formula, averaged + (current - averaged) / (n + 1)).

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> model = Linear(1, 1, bias=False)
>>> swa = AveragedModel(model)
>>> for w in (1.0, 2.0, 6.0):
...     _ = model.weight.assign(Tensor([[w]])).realize()
...     swa.update_parameters(model)
>>> swa.module.weight.tolist(), swa.n_averaged.item()
([[3.0]], 3)
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.nn.lr_scheduler import LRScheduler, _per_group
from uopkit.nn.module import Module
from uopkit.nn.modules import BatchNorm
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "AveragedModel",
    "update_bn",
    "SWALR",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]


def _count_as(n: Tensor | int, like: Tensor) -> Tensor | float:
    # the number of models averaged so far (a 0-d int64 tensor, or an int) in a tensor's float dtype
    return n.cast(like.dtype) if isinstance(n, Tensor) else float(n)


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable[[list[Tensor], list[Tensor], Any], None]:
    """The exponential moving average over lists of tensors, in place: ema = lerp(ema, current, 1 - decay) (torch's
    lerp; for float tensors), ema * decay + current * (1 - decay) otherwise."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"get_ema_multi_avg_fn: decay must lie in [0, 1], got {decay}")

    def ema_update(ema_param_list: list[Tensor], current_param_list: list[Tensor], _: Any) -> None:
        with no_grad():
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                if dtypes.is_float(p_ema.dtype):
                    p_ema.assign(p_ema.lerp(p_model, 1 - decay))
                else:
                    p_ema.assign((p_ema * decay + p_model * (1 - decay)).cast(p_ema.dtype))

    return ema_update


def get_swa_multi_avg_fn() -> Callable[[list[Tensor], list[Tensor], Any], None]:
    """The equal-weight (SWA) average over lists of tensors, in place: lerp(averaged, current, 1 / (n + 1)), as torch's
    (its foreach form, the one it uses on accelerators)."""

    def swa_update(averaged_param_list: list[Tensor], current_param_list: list[Tensor], num_averaged: Any) -> None:
        with no_grad():
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                if dtypes.is_float(p_avg.dtype):
                    p_avg.assign(p_avg.lerp(p_model, 1 / (_count_as(num_averaged, p_avg) + 1)))
                else:
                    p_avg.assign((p_avg + (p_model - p_avg) / (num_averaged + 1)).cast(p_avg.dtype))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable[[Tensor, Tensor, Any], Tensor]:
    """The exponential moving average of one tensor: decay * ema + (1 - decay) * current."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"get_ema_avg_fn: decay must lie in [0, 1], got {decay}")

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        return decay * ema_param.detach() + (1 - decay) * current_param.detach()

    return ema_update


def get_swa_avg_fn() -> Callable[[Tensor, Tensor, Any], Tensor]:
    """The equal-weight (SWA) average of one tensor: averaged + (current - averaged) / (n + 1)."""

    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        averaged, current = averaged_param.detach(), current_param.detach()
        return averaged + (current - averaged) / (_count_as(num_averaged, averaged) + 1)

    return swa_update


class AveragedModel(Module):
    """A copy of `model` (deep-copied, moved to `device` if given) whose parameters are a running average of the
    model's, as torch.optim.swa_utils.AveragedModel: `update_parameters(model)` copies the model's parameters the first
    time and averages them in after (`avg_fn(averaged, current, n)` per tensor, or `multi_avg_fn(averageds,
    currents, n)` in place over lists; neither: the equal-weight average), with `n_averaged` (an int64 buffer) the
    count so far. `use_buffers=True` averages the buffers too; otherwise they are copied from the model. Calling it
    calls the copy. The state dict is torch's ("n_averaged", "module.<name>"), without the averaging functions."""

    def extra_repr(self) -> str:
        # (torch's prints only the averaged copy, its sub-module)
        return ""

    def __init__(
        self,
        model: Module,
        device: str | None = None,
        avg_fn: Callable[[Tensor, Tensor, Any], Tensor] | None = None,
        multi_avg_fn: Callable[[list[Tensor], list[Tensor], Any], None] | None = None,
        use_buffers: bool = False,
    ) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("AveragedModel: give avg_fn or multi_avg_fn, not both")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        count = Tensor(np.zeros((), np.int64), device=device)
        self.register_buffer("n_averaged", count.requires_grad_(False))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Average `model`'s parameters (and buffers, with use_buffers) into this copy's, and count one more model.
        Reads `n_averaged` back once (torch syncs there too) and realizes the new averages."""
        if self.use_buffers:
            own: Iterable[Tensor] = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs: Iterable[Tensor] = itertools.chain(model.parameters(), model.buffers())
        else:
            own, theirs = self.module.parameters(), model.parameters()
        pairs = [(p, q.detach().to(p.device)) for p, q in zip(own, theirs, strict=False)]
        n = self.n_averaged
        with no_grad():
            if n.item() == 0:
                for p_avg, p_model in pairs:
                    p_avg.assign(p_model.cast(p_avg.dtype))
            elif self.avg_fn is not None:
                for p_avg, p_model in pairs:
                    p_avg.assign(self.avg_fn(p_avg.detach(), p_model, n.to(p_avg.device)).cast(p_avg.dtype))
            elif self.multi_avg_fn is not None:
                # (lists per device and dtype, as torch groups them)
                groups: dict[tuple[str, Any], tuple[list[Tensor], list[Tensor]]] = {}
                for p_avg, p_model in pairs:
                    mine, other = groups.setdefault((p_avg.device, p_avg.dtype), ([], []))
                    mine.append(p_avg)
                    other.append(p_model)
                for (device, _), (mine, other) in groups.items():
                    self.multi_avg_fn(mine, other, n.to(device))
            else:
                swa = get_swa_avg_fn()
                for p_avg, p_model in pairs:
                    p_avg.assign(swa(p_avg, p_model, n.to(p_avg.device)).cast(p_avg.dtype))
            if not self.use_buffers:
                # the buffers follow the model's (BatchNorm's running statistics: or recompute them with update_bn)
                for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                    b_swa.assign(b_model.detach().to(b_swa.device).cast(b_swa.dtype))
            n.assign(n + 1)
        written = [p for p, _ in pairs] + list(self.module.buffers()) + [n]
        Tensor.realize(*written)


def _reset_running_stats(bn: BatchNorm) -> None:
    # torch's _NormBase.reset_running_stats: mean 0, variance 1, no batches counted
    if bn.track_running_stats:
        bn.running_mean.assign(Tensor.zeros_like(bn.running_mean).contiguous())
        bn.running_var.assign(Tensor.ones_like(bn.running_var).contiguous())
        bn.num_batches_tracked.assign(Tensor.zeros_like(bn.num_batches_tracked).contiguous())


def update_bn(loader: Iterable[Any], model: Module, device: str | None = None) -> None:
    """Recompute the running statistics of every BatchNorm in `model` with one pass over `loader`, as
    torch.optim.swa_utils.update_bn (for an averaged model, whose averaged weights the statistics collected in training
    don't fit): they are reset, then every batch counts equally (momentum None for the pass), in training mode; the
    modes and momenta come back after. Each batch is a tensor, or a list/tuple whose first item is the input."""
    norms = [m for m in model.modules() if isinstance(m, BatchNorm)]
    if not norms:
        return
    momenta = {id(m): m.momentum for m in norms}
    modes = [(m, m.training) for m in model.modules()]
    with no_grad():
        for m in norms:
            _reset_running_stats(m)
            m.momentum = None
        model.train()
        try:
            for batch in loader:
                x = batch[0] if isinstance(batch, (list, tuple)) else batch
                if device is not None:
                    x = x.to(device)
                model(x)
                # (the statistics' in-place updates run batch by batch: the graphs stay small)
                Tensor.realize(*[t for m in norms if m.track_running_stats for t in _running_stats(m)])
        finally:
            for m in norms:
                m.momentum = momenta[id(m)]
            for m, mode in modes:
                m.training = mode


def _running_stats(bn: BatchNorm) -> list[Tensor]:
    return [bn.running_mean, bn.running_var, bn.num_batches_tracked]


class SWALR(LRScheduler):
    """Anneals each group's lr to `swa_lr` over `anneal_epochs` steps ("cos" or "linear") and keeps it there, as
    torch.optim.swa_utils.SWALR (the scheduler for the SWA phase; torch's formulas, so the lrs are torch's)."""

    def __init__(
        self,
        optimizer: Any,
        swa_lr: float | list[float],
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ) -> None:
        for lr, group in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"SWALR: anneal_strategy takes 'cos' or 'linear', got {anneal_strategy!r}")
        self._anneal_strategy = anneal_strategy
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"SWALR: anneal_epochs must be an int >= 0, got {anneal_epochs!r}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    def anneal_func(self, t: float) -> float:
        """How far along the annealing is after the fraction `t` of `anneal_epochs`."""
        return t if self._anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list[float]:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs, strict=True)]

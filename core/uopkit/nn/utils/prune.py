"""torch.nn.utils.prune: pruning a module's tensor by a mask, as torch's. Pruning `module.<name>` moves the tensor to
the parameter `<name>_orig` (the same tensor object: an optimizer holding it goes on with it), keeps the mask as the
buffer `<name>_mask`, and sets `<name>` = `<name>_mask` * `<name>_orig` before each forward (a forward pre-hook, the
pruning method itself), so the pruned entries get no gradient. Pruning the same tensor again prunes among the entries
(or, for a structured method, the channels) still kept: the methods are chained in a `PruningContainer`. `remove`
makes the pruning permanent: `<name>` is a parameter again (the `<name>_orig` object) holding the pruned values.

The masks are computed once, on the host (torch's, too, are a one-off eager computation): the entries or channels with
the smallest scores (|importance_scores|, or a channel's n-norm) are pruned, ties in index order; the random methods
draw from uopkit's generator, so they follow torch's rules, not its samples.

>>> from uopkit.nn import Linear
>>> layer = l1_unstructured(Linear(4, 2), "weight", amount=0.5)
>>> list(layer.state_dict()), int(layer.weight_mask.sum().item())
(['bias', 'weight_orig', 'weight_mask'], 4)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.nn.module import Module
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "BasePruningMethod",
    "PruningContainer",
    "Identity",
    "RandomUnstructured",
    "L1Unstructured",
    "RandomStructured",
    "LnStructured",
    "CustomFromMask",
    "identity",
    "random_unstructured",
    "l1_unstructured",
    "random_structured",
    "ln_structured",
    "global_unstructured",
    "custom_from_mask",
    "remove",
    "is_pruned",
]


class _ShapeMismatchError(ValueError, AssertionError):
    """importance_scores or a mask of another shape than the tensor pruned (torch asserts: an AssertionError)."""


def _host(t: Tensor) -> np.ndarray:
    # scores and masks read on the host in float64 (every dtype's values, in order)
    return t.detach().to(dtypes.float64).numpy()


def _as_mask(values: np.ndarray, like: Tensor, dtype: Any = None) -> Tensor:
    return Tensor(np.ascontiguousarray(values), dtype=like.dtype if dtype is None else dtype, device=like.device)


class BasePruningMethod:
    """A way of pruning (torch's abstract BasePruningMethod): subclasses set PRUNING_TYPE ("unstructured",
    "structured" with a `dim`, or "global") and define `compute_mask(t, default_mask)`, the mask of `t` given the mask
    it already has. An instance is the forward pre-hook of the module it prunes."""

    PRUNING_TYPE: str = "unstructured"
    _tensor_name: str | None = None

    def __call__(self, module: Module, inputs: Any) -> None:
        # (a plain attribute, recomputed at each call: not state, as torch's)
        object.__setattr__(module, self._name(), self.apply_mask(module))

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define compute_mask(t, default_mask)")

    def _name(self) -> str:
        if self._tensor_name is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a tensor: apply it to a module first")
        return self._tensor_name

    def apply_mask(self, module: Module) -> Tensor:
        """The pruned tensor: `<name>_mask` * `<name>_orig`."""
        name = self._name()
        orig, mask = getattr(module, name + "_orig"), getattr(module, name + "_mask")
        return mask.to(orig.dtype) * orig

    @classmethod
    def apply(
        cls, module: Module, name: str, *args: Any, importance_scores: Tensor | None = None, **kwargs: Any
    ) -> Any:
        """Prune `module.<name>` with `cls(*args, **kwargs)` (chained after the pruning it already has), scoring its
        entries by `importance_scores` (default: the tensor itself). Returns the method now attached."""
        return _apply(cls(*args, **kwargs), module, name, importance_scores)

    def prune(self, t: Tensor, default_mask: Tensor | None = None, importance_scores: Tensor | None = None) -> Tensor:
        """`t` pruned by this method: t * compute_mask(importance_scores or t, default_mask or ones)."""
        scores = t if importance_scores is None else importance_scores
        _check_shape(scores, t, "importance_scores", "t")
        return t * self.compute_mask(scores, t.ones_like() if default_mask is None else default_mask)

    def remove(self, module: Module) -> None:
        """Make the pruning permanent: `<name>` is a parameter again (the `<name>_orig` object) holding the pruned
        values; `<name>_orig` and `<name>_mask` go. (The hook itself is taken off by the module-level `remove`.)"""
        name = self._name()
        weight = self.apply_mask(module).detach().contiguous()
        if name in module.__dict__:
            object.__delattr__(module, name)
        orig = getattr(module, name + "_orig")
        with no_grad():
            orig.assign(weight)
        delattr(module, name + "_orig")
        delattr(module, name + "_mask")
        setattr(module, name, orig)


def _check_shape(t: Tensor, like: Tensor, what: str, of: str) -> None:
    if t.shape != like.shape:
        raise _ShapeMismatchError(f"prune: {what} has shape {t.shape}, but {of} has shape {like.shape}")


def _pruning_hooks(module: Module) -> Iterator[tuple[int, BasePruningMethod]]:
    st = module.__dict__.get("_module_state")
    hooks = {} if st is None else st.pre_hooks
    return ((k, h) for k, h in list(hooks.items()) if isinstance(h, BasePruningMethod))


def _apply(method: BasePruningMethod, module: Module, name: str, importance_scores: Tensor | None) -> Any:
    old = [(k, h) for k, h in _pruning_hooks(module) if h._tensor_name == name]
    if len(old) > 1:
        raise RuntimeError(f"prune: {name!r} of {type(module).__name__} has {len(old)} pruning hooks, expected one")
    orig = getattr(module, name)
    if not isinstance(orig, Tensor):
        raise AttributeError(f"prune: {type(module).__name__}.{name} is a {type(orig).__name__}, not a tensor")
    if importance_scores is not None:
        _check_shape(importance_scores, orig, "importance_scores", f"parameter {name!r}")
    method._tensor_name = name
    if old:
        default_mask = getattr(module, name + "_mask").detach().clone()
        key, previous = old[0]
        if isinstance(previous, PruningContainer):
            previous.add_pruning_method(method)
            method = previous
        else:
            method = PruningContainer(previous, method)
    else:
        default_mask = orig.detach().ones_like()
    mask = method.compute_mask(orig if importance_scores is None else importance_scores, default_mask=default_mask)
    if old:
        module._state().pre_hooks.pop(key)
    else:
        # the tensor itself moves to <name>_orig (a parameter: a Parameter, or a tensor that requires a gradient)
        delattr(module, name)
        setattr(module, name + "_orig", orig)
    module.register_buffer(name + "_mask", mask.detach().contiguous().realize())
    object.__setattr__(module, name, method.apply_mask(module))
    module.register_forward_pre_hook(method)
    return method


class PruningContainer(BasePruningMethod):
    """Pruning methods applied one after another to one tensor (torch's PruningContainer): the last one prunes among
    what the ones before it kept (an unstructured method among the entries, a structured one among the channels)."""

    def __init__(self, *methods: BasePruningMethod) -> None:
        self._pruning_methods: tuple[BasePruningMethod, ...] = ()
        if methods:
            self._tensor_name = methods[0]._tensor_name
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod) -> None:
        if not isinstance(method, BasePruningMethod):
            raise TypeError(f"PruningContainer.add_pruning_method: {type(method)} is not a BasePruningMethod subclass")
        if self._tensor_name != method._tensor_name:
            raise ValueError(
                f"PruningContainer: it prunes {self._tensor_name!r}; a method pruning {method._tensor_name!r} can't "
                "join it (prune each tensor with its own container)"
            )
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self) -> Iterator[BasePruningMethod]:
        return iter(self._pruning_methods)

    def __getitem__(self, idx: int) -> BasePruningMethod:
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        method = self._pruning_methods[-1]
        mask = _host(default_mask)
        if method.PRUNING_TYPE == "unstructured":
            kept = np.flatnonzero(mask == 1)
            index = Tensor(kept, device=t.device)
            partial = method.compute_mask(t.flatten()[index], default_mask=default_mask.flatten()[index])
            new = mask.reshape(-1).copy()
            new[kept] = _host(partial)
        elif method.PRUNING_TYPE == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError(f"prune: {type(method).__name__} is structured and needs a `dim` attribute")
            dim = _checked_dim(t, method.dim)
            kept = np.flatnonzero(np.moveaxis(mask, dim, 0).reshape(mask.shape[dim], -1).sum(1) != 0)
            index = Tensor(kept, device=t.device)
            partial = method.compute_mask(t.index_select(dim, index), default_mask.index_select(dim, index))
            new = np.moveaxis(mask.copy(), dim, 0)
            new[kept] = np.moveaxis(_host(partial), dim, 0)
            new = np.moveaxis(new, 0, dim)
        elif method.PRUNING_TYPE == "global":
            new = _host(method.compute_mask(t, default_mask=default_mask))
        else:
            raise ValueError(f"prune: PRUNING_TYPE {method.PRUNING_TYPE!r} is not unstructured, structured or global")
        return _as_mask(new.reshape(mask.shape), t, default_mask.dtype)


def _check_amount(amount: Any) -> None:
    # a fraction in [0, 1] or a count
    if not isinstance(amount, numbers.Real) or isinstance(amount, bool):
        raise TypeError(
            f"prune: amount={amount!r} is a {type(amount).__name__}; give a fraction (float) or a count (int)"
        )
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
        not isinstance(amount, numbers.Integral) and not 0.0 <= float(amount) <= 1.0
    ):
        raise ValueError(f"prune: amount={amount} is neither a fraction in [0, 1] nor a count >= 0")


def _to_prune(amount: Any, size: int) -> int:
    # how many of `size` entries (channels) `amount` prunes: a count as it is, a fraction rounded as Python rounds
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError(f"prune: amount={amount} is more than the {size} entries (channels) there are to prune")
        return int(amount)
    return round(amount * size)


def _checked_dim(t: Tensor, dim: int) -> int:
    if not -t.ndim <= dim < t.ndim:
        raise IndexError(f"prune: dim {dim} is out of range for a tensor of shape {t.shape}")
    return dim % t.ndim


def _check_structured(t: Tensor) -> None:
    if t.ndim <= 1:
        raise ValueError(f"prune: structured pruning needs a tensor of 2 or more dims, got shape {t.shape}")


def _channel_mask(t: Tensor, dim: int, kept: np.ndarray) -> np.ndarray:
    # ones in the channels `kept` along `dim`, zeros elsewhere
    mask = np.zeros(t.shape)
    index: list[Any] = [slice(None)] * t.ndim
    index[dim] = kept
    mask[tuple(index)] = 1.0
    return mask


def _channel_norms(x: np.ndarray, n: Any, dim: int) -> np.ndarray:
    # each channel's n-norm over every other dimension (torch.norm's p: a number, inf, -inf or "fro")
    a = np.abs(np.moveaxis(x, dim, 0).reshape(x.shape[dim], -1))
    if n == "fro":
        n = 2
    if not isinstance(n, numbers.Real):
        raise ValueError(f"LnStructured: n={n!r} is not a norm it takes (a number, inf, -inf or 'fro')")
    if n == math.inf:
        return a.max(1)
    if n == -math.inf:
        return a.min(1)
    if n == 0:
        return (a != 0).sum(1).astype(np.float64)
    return (a**n).sum(1) ** (1.0 / n)


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (torch's Identity)."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask

    @classmethod
    def apply(cls, module: Module, name: str) -> Any:  # type: ignore[override]
        return _apply(cls(), module, name, None)


class RandomUnstructured(BasePruningMethod):
    """Prunes `amount` (a fraction or a count) of the entries, at random."""

    def __init__(self, amount: float) -> None:
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        n = _to_prune(self.amount, t.numel())
        mask = _host(default_mask).reshape(-1)
        if n:
            # the entries drawing the n largest uniform numbers
            mask[np.argsort(-_host(Tensor.rand(t.numel(), device=t.device)), kind="stable")[:n]] = 0.0
        return _as_mask(mask.reshape(t.shape), default_mask)

    @classmethod
    def apply(cls, module: Module, name: str, amount: float) -> Any:  # type: ignore[override]
        return _apply(cls(amount), module, name, None)


class L1Unstructured(BasePruningMethod):
    """Prunes `amount` (a fraction or a count) of the entries, those of smallest absolute value."""

    def __init__(self, amount: float) -> None:
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        n = _to_prune(self.amount, t.numel())
        mask = _host(default_mask).reshape(-1)
        if n:
            mask[np.argsort(np.abs(_host(t).reshape(-1)), kind="stable")[:n]] = 0.0
        return _as_mask(mask.reshape(t.shape), default_mask)

    @classmethod
    def apply(  # type: ignore[override]
        cls, module: Module, name: str, amount: float, importance_scores: Tensor | None = None
    ) -> Any:
        return _apply(cls(amount), module, name, importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes `amount` (a fraction or a count) of the channels along `dim`, at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: float, dim: int = -1) -> None:
        _check_amount(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _check_structured(t)
        dim = _checked_dim(t, self.dim)
        n = _to_prune(self.amount, t.shape[dim])
        if n == 0:
            return default_mask
        prob = _host(Tensor.rand(t.shape[dim], device=t.device))
        kept = np.flatnonzero(prob > np.sort(prob)[n - 1])
        return _as_mask(_channel_mask(t, dim, kept) * _host(default_mask), t)

    @classmethod
    def apply(cls, module: Module, name: str, amount: float, dim: int = -1) -> Any:  # type: ignore[override]
        return _apply(cls(amount, dim), module, name, None)


class LnStructured(BasePruningMethod):
    """Prunes `amount` (a fraction or a count) of the channels along `dim`, those of smallest `n`-norm."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: float, n: Any, dim: int = -1) -> None:
        _check_amount(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _check_structured(t)
        dim = _checked_dim(t, self.dim)
        n = _to_prune(self.amount, t.shape[dim])
        if n == 0:
            return default_mask
        norms = _channel_norms(_host(t), self.n, dim)
        kept = np.argsort(-norms, kind="stable")[: t.shape[dim] - n]
        return _as_mask(_channel_mask(t, dim, kept) * _host(default_mask), t)

    @classmethod
    def apply(  # type: ignore[override]
        cls, module: Module, name: str, amount: float, n: Any, dim: int, importance_scores: Tensor | None = None
    ) -> Any:
        return _apply(cls(amount, n, dim), module, name, importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes the entries where the given mask is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask: Tensor) -> None:
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _check_shape(self.mask, default_mask, "the mask", "the tensor pruned")
        return default_mask * self.mask.to(default_mask.dtype)

    @classmethod
    def apply(cls, module: Module, name: str, mask: Tensor) -> Any:  # type: ignore[override]
        return _apply(cls(mask), module, name, None)


def identity(module: Module, name: str) -> Module:
    """Prune nothing of `module.<name>` (its mask all ones), so it has torch's pruned form. Returns `module`."""
    Identity.apply(module, name)
    return module


def random_unstructured(module: Module, name: str, amount: float) -> Module:
    """Prune `amount` (a fraction or a count) of `module.<name>`'s entries at random. Returns `module`."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Module, name: str, amount: float, importance_scores: Tensor | None = None) -> Module:
    """Prune `amount` (a fraction or a count) of `module.<name>`'s entries of smallest |importance_scores| (default:
    the tensor's own values). Returns `module`."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Module, name: str, amount: float, dim: int) -> Module:
    """Prune `amount` (a fraction or a count) of `module.<name>`'s channels along `dim` at random. Returns `module`."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(
    module: Module, name: str, amount: float, n: Any, dim: int, importance_scores: Tensor | None = None
) -> Module:
    """Prune `amount` (a fraction or a count) of `module.<name>`'s channels along `dim`, those whose importance
    scores (default: the tensor's values) have the smallest `n`-norm. Returns `module`."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module: Module, name: str, mask: Tensor) -> Module:
    """Prune `module.<name>`'s entries where `mask` is 0. Returns `module`."""
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(
    parameters: Iterable[tuple[Module, str]],
    pruning_method: type[BasePruningMethod],
    importance_scores: dict[tuple[Module, str], Tensor] | None = None,
    **kwargs: Any,
) -> None:
    """Prune the (module, name) tensors together: `pruning_method(**kwargs)` (an unstructured one) chooses among all
    their entries still kept at once, as if they were one vector, so an `amount` is a share of them all."""
    if not isinstance(parameters, Iterable):
        raise TypeError(
            f"global_unstructured: parameters is a {type(parameters).__name__}, not an iterable of (module, name)"
        )
    parameters = list(parameters)
    scores = {} if importance_scores is None else importance_scores
    if not isinstance(scores, dict):
        raise TypeError(
            f"global_unstructured: importance_scores is a {type(scores).__name__}; give a dict keyed by (module, name)"
        )
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(
            f"global_unstructured: {pruning_method.__name__} is {method.PRUNING_TYPE}; it takes unstructured methods"
        )
    tensors = [getattr(module, name) for module, name in parameters]
    flat_scores = Tensor.cat(
        *[scores.get(key, t).detach().flatten() for key, t in zip(parameters, tensors, strict=True)]
    )
    masks = [getattr(module, name + "_mask", None) for module, name in parameters]
    flat_mask = Tensor.cat(
        *[(t.ones_like() if m is None else m).flatten() for m, t in zip(masks, tensors, strict=True)]
    )
    container = PruningContainer(method)
    final = container.compute_mask(flat_scores, flat_mask)
    start = 0
    for (module, name), t in zip(parameters, tensors, strict=True):
        custom_from_mask(module, name, mask=final[start : start + t.numel()].reshape(t.shape))
        start += t.numel()


def remove(module: Module, name: str) -> Module:
    """Make the pruning of `module.<name>` permanent: it is a parameter again holding the pruned values, without
    `<name>_orig`, `<name>_mask` or the hook. Returns `module`."""
    for key, hook in _pruning_hooks(module):
        if hook._tensor_name == name:
            hook.remove(module)
            module._state().pre_hooks.pop(key)
            return module
    raise ValueError(f"prune.remove: {type(module).__name__}.{name} is not pruned, so there is no pruning to remove")


def is_pruned(module: Module) -> bool:
    """Whether `module` or any module inside it has a pruning hook."""
    return any(True for m in module.modules() for _ in _pruning_hooks(m))

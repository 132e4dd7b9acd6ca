"""torch.nn.utils.stateless: `functional_call`, a module called with some of its parameters and buffers replaced by
given tensors for that one call (MAML's fast weights, a hypernetwork's generated weights, per-sample gradients). The
given tensors are set in the module's place, so gradients flow to them; the module's own are put back afterwards, also
when the call raises. torch deprecates this name for `torch.func.functional_call` (uopkit.func), which also takes a
tuple of dicts.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> layer = Linear(2, 1)
>>> functional_call(layer, {"weight": Tensor([[1.0, 2.0]]), "bias": Tensor([0.5])}, Tensor([[1.0, 1.0]])).tolist()
[[3.5]]
>>> functional_call(layer, {"weight": Tensor([[1.0, 2.0]])}, Tensor([[1.0, 1.0]])).shape  # its own bias
(1, 1)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from uopkit.nn.module import Module
from uopkit.nn.utils.parametrize import is_parametrized
from uopkit.tensor import Tensor

__all__ = ["functional_call"]

# what a name had before the call when it had nothing (it is deleted again afterwards)
_MISSING: Any = object()


def _owner(module: Module, name: str) -> tuple[Any, str]:
    """The object holding the tensor at dotted `name` (a module, or a list or dict a module holds), and the last
    part of the name."""
    prefix, _, attr = name.rpartition(".")
    if not attr:
        raise KeyError(f"functional_call: tensor names can't be empty or end in '.', got {name!r}")
    owner: Any = module
    for part in prefix.split(".") if prefix else []:
        if isinstance(owner, Tensor):
            raise TypeError(f"functional_call: in {name!r}, {part!r} is inside a tensor, not a module")
        if isinstance(owner, (list, tuple)):
            child = owner[int(part)] if part.lstrip("-").isdigit() and -len(owner) <= int(part) < len(owner) else None
        elif isinstance(owner, dict):
            child = owner.get(part)
        else:
            child = getattr(owner, part, None)
        if child is None:
            raise AttributeError(f"functional_call: {type(owner).__name__} has no attribute `{part}` (in {name!r})")
        owner = child
    if isinstance(owner, Tensor):
        raise TypeError(f"functional_call: in {name!r}, {prefix.rpartition('.')[2]!r} is a tensor, not a module")
    return owner, attr


def _swap(owner: Any, attr: str, value: Any) -> Any:
    """Put `value` (a tensor, None, or _MISSING: nothing) at `owner.attr`; returns what was there."""
    if value is not _MISSING and value is not None and not isinstance(value, Tensor):
        raise TypeError(f"functional_call: the value for `{attr}` must be a Tensor or None, got {type(value).__name__}")
    if isinstance(owner, tuple):
        raise TypeError(f"functional_call: `{attr}` is an entry of a tuple, which can't be replaced")
    if isinstance(owner, list):
        if not (attr.lstrip("-").isdigit() and -len(owner) <= int(attr) < len(owner)):
            raise AttributeError(f"functional_call: a list of {len(owner)} has no entry `{attr}`")
        old, owner[int(attr)] = owner[int(attr)], value
    elif isinstance(owner, dict):
        old = owner.get(attr, _MISSING)
        if value is _MISSING:
            owner.pop(attr, None)
        else:
            owner[attr] = value
    elif isinstance(owner, Module) and is_parametrized(owner, attr):
        # the value replaces the parametrized tensor itself (torch's documented meaning), set beside the property
        # that computes it, which reads it from there; the originals are left alone
        old = owner.__dict__.get(attr, _MISSING)
        if value is _MISSING:
            owner.__dict__.pop(attr, None)
        else:
            owner.__dict__[attr] = value
        return old
    else:
        old = owner.__dict__.get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if old is _MISSING and hasattr(owner, attr):
            old = getattr(owner, attr)
        if old is not _MISSING and old is not None and not isinstance(old, Tensor):
            raise TypeError(f"functional_call: attribute `{attr}` of {type(owner).__name__} is not a tensor: {old!r}")
        # (a module's own rules are bypassed: a plain tensor stands in for a parameter during the call, as torch's,
        # and the module's bookkeeping of its buffers is left as it was)
        put, remove = (object.__setattr__, object.__delattr__) if isinstance(owner, Module) else (setattr, delattr)
        if value is not _MISSING:
            put(owner, attr, value)
        elif attr in getattr(owner, "__dict__", {}):
            remove(owner, attr)
    return old


def _swap_all(module: Module, tensors: dict[str, Any]) -> dict[str, Any]:
    """Swap every entry of `tensors` in; returns what was there, by name. An error puts back what was swapped."""
    old: dict[str, Any] = {}
    try:
        for name, value in tensors.items():
            owner, attr = _owner(module, name)
            old[name] = _swap(owner, attr, value)
    except Exception:
        for name, value in reversed(old.items()):
            owner, attr = _owner(module, name)
            _swap(owner, attr, value)
        raise
    return old


def _named_tensors(module: Module) -> dict[str, Tensor]:
    # every parameter and buffer under each of its names (a tied one under all of them)
    found = dict(module.named_parameters(remove_duplicate=False))
    found.update(module.named_buffers(remove_duplicate=False))
    return found


def _untie(module: Module, tensors: dict[str, Any]) -> dict[str, Any]:
    """`tensors` with, for each given name of a tied tensor (one tensor under several names), the same value under
    the other names too, as torch's tie_weights=True; different values for names of one tensor are an error."""
    names_of: dict[int, list[str]] = {}
    for name, t in _named_tensors(module).items():
        names_of.setdefault(id(t), []).append(name)
    untied = dict(tensors)
    for names in names_of.values():
        given = [n for n in names if n in tensors]
        if len(names) < 2 or not given:
            continue
        if len({id(tensors[n]) for n in given}) > 1:
            raise ValueError(
                f"functional_call: {sorted(names)} name one tied tensor but were given different values; give one "
                "value (or the same) for all of them, or pass tie_weights=False"
            )
        for n in names:
            untied[n] = tensors[given[0]]
    return untied


@contextlib.contextmanager
def _reparametrized(
    module: Module, tensors: dict[str, Any], tie_weights: bool = True, strict: bool = False
) -> Iterator[None]:
    """Inside the block, `module` holds `tensors` in place of its own (see functional_call); afterwards its own are
    back, and an entry the module replaced during the block (not in place) is updated in `tensors`, as torch's."""
    untied = _untie(module, tensors) if tie_weights else tensors
    if strict:
        valid = set(_named_tensors(module))
        unexpected, missing = sorted(set(untied) - valid), sorted(valid - set(untied))
        errors = [f"names the module doesn't have: {unexpected}"] if unexpected else []
        errors += [f"names missing: {missing}"] if missing else []
        if errors:
            raise RuntimeError(
                f"functional_call(strict=True) on {type(module).__name__}: the tensors given must name each of its "
                "parameters and buffers exactly once; " + "; ".join(errors)
            )
    old = _swap_all(module, untied)
    try:
        yield
    finally:
        # (put back last first: a module held under two names is one place swapped twice, whose first old value is
        # its own)
        last = _swap_all(module, dict(reversed(old.items())))
        tensors.update({k: last[k] for k in tensors if k in last and last[k] is not _MISSING})


def _functional_call(
    module: Module,
    tensors: dict[str, Any],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    if not isinstance(module, Module):
        raise TypeError(f"functional_call: module must be a uopkit.nn.Module, got {type(module).__name__}")
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrized(module, tensors, tie_weights=tie_weights, strict=strict):
        return module(*args, **(kwargs or {}))


def functional_call(
    module: Module,
    parameters_and_buffers: dict[str, Tensor],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """`module(*args, **kwargs)` with the parameters and buffers named in `parameters_and_buffers` (torch's dotted
    names, as `named_parameters()` gives them) replaced by the given tensors for this call, as
    torch.nn.utils.stateless.functional_call (deprecated there for torch.func.functional_call, uopkit.func's).

    - `args`: a tuple of positional arguments, or a single one (anything not a tuple); `kwargs` keyword arguments.
    - Gradients flow to the given tensors (not to the module's own, which the call doesn't read); the module holds
      its own tensors again afterwards, also when the call raises. A forward that writes a replaced buffer in place
      (BatchNorm's running statistics) writes the given tensor; one that replaces it changes the dict's entry.
    - `tie_weights`: a tensor the module holds under several names (tied weights) takes the given value under all of
      them; different values for those names raise ValueError. False: each name takes only its own value.
    - `strict`: every parameter and buffer must be given, and nothing else (RuntimeError listing the keys).
    - Without `strict`, a name the module doesn't have is set for the call and removed afterwards; a non-tensor
      value, or a name whose attribute isn't a tensor, raises TypeError.
    - On a parametrized module, the parametrized name (`weight`) replaces the computed tensor for the call, the
      parametrization left out; `parametrizations.weight.original` replaces the original, which the parametrization
      still runs on (torch documents these meanings; its code instead writes a value for `weight` into the originals
      through right_inverse, in place, without gradients, and doesn't restore them).
    """
    if not isinstance(parameters_and_buffers, dict):
        raise TypeError(
            f"functional_call: parameters_and_buffers must be a dict of names to tensors, got "
            f"{type(parameters_and_buffers).__name__} (uopkit.func.functional_call also takes a tuple of dicts)"
        )
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)

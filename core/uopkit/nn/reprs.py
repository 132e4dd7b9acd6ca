"""How modules print, as torch's: `repr(model)` is the layer's name, its `extra_repr()` (the settings torch shows for
that layer, in torch's words) and its sub-modules, each on a line `(name): ...` indented under it; a ModuleList groups
a run of equal layers as `(0-2): 3 x Linear(...)`. A module of one's own prints its sub-modules and what its
`extra_repr` returns (nothing unless overridden), as torch's; a uopkit layer torch has no twin of shows its plain
settings. Compared with torch's for every layer in tests/test_nn_repr.py.

>>> from uopkit.nn import BatchNorm2d, Conv2d, ReLU, Sequential
>>> print(Sequential(Conv2d(3, 16, 3, padding=1), BatchNorm2d(16), ReLU(inplace=True)))
Sequential(
  (0): Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
  (1): BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
  (2): ReLU(inplace=True)
)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uopkit.dtype import _torch_name, dtypes
from uopkit.tensor import Tensor

# each built-in layer class -> the extra_repr of its torch twin (nn/torch_reprs.py fills it in when uopkit.nn is
# imported: the layers' modules import nn/module.py, which imports this one); a subclass without an entry takes its
# base's
EXTRA_REPRS: dict[type, Callable[[Any], str]] = {}


def module_repr(module: Any) -> str:
    """torch's Module.__repr__: the name, then the extra_repr on the same line when it is one line and there are no
    sub-modules, else the extra_repr's lines and one line per sub-module, indented."""
    extra = module.extra_repr()
    lines = extra.split("\n") if extra else []
    children = [_child_line(str(name), child) for name, child in module.named_children()]
    if len(lines) == 1 and not children:
        return f"{type(module).__name__}({lines[0]})"
    return _block(type(module).__name__, lines + children)


def module_list_repr(module: Any) -> str:
    """torch's ModuleList.__repr__: consecutive entries that print alike are one line, `(first-last): n x ...`."""
    texts = [repr(m) for m in module]
    if not texts:
        return f"{type(module).__name__}()"
    lines = []
    start = 0
    for i in range(1, len(texts) + 1):
        if i < len(texts) and texts[i] == texts[start]:
            continue
        n = i - start
        key = str(start) if n == 1 else f"{start}-{i - 1}"
        lines.append(f"({key}): " + ("" if n == 1 else f"{n} x ") + _indented(texts[start]))
        start = i
    return _block(type(module).__name__, lines)


def parameters_repr(entries: Any, typename: bool, parameter: type) -> str:
    """A ParameterList's or ParameterDict's entries, one line each, as torch's: `(0): Parameter containing:
    [torch.float32 of size 2x3]` (a ParameterDict names the tensor type, `torch.FloatTensor`). `parameter`: the
    Parameter class."""

    lines = []
    for key, p in entries:
        if not isinstance(p, Tensor):
            lines.append(f"  ({key}): Object of type: {type(p).__name__}")
            continue
        kind = p.type() if typename else "torch." + ("bool" if p.dtype == dtypes.bool else _torch_name(p.dtype))
        size = "x".join(str(n) for n in p.shape)
        name = "Parameter" if isinstance(p, parameter) else "Tensor"
        lines.append(f"  ({key}): {name} containing: [{kind} of size {size}]")
    return "\n".join(lines)


def _child_line(name: str, child: Any) -> str:
    return f"({name}): " + _indented(repr(child))


def _indented(text: str) -> str:
    # every line after the first two spaces further in (a blank line stays blank), as torch's nesting
    first, *rest = text.split("\n")
    return "\n".join([first] + [f"  {line}" if line.strip() else "" for line in rest])


def _block(name: str, lines: list[str]) -> str:
    if not lines:
        return f"{name}()"
    return f"{name}(\n  " + "\n  ".join(lines) + "\n)"


def extra_repr_of(module: Any, base: type) -> str:
    """The settings torch's twin of the layer shows (its extra_repr); a uopkit layer torch has no twin of shows its
    plain settings (numbers, strings, tuples); a user's module nothing, as torch's Module.extra_repr. `base`: Module,
    where the search ends."""
    for cls in type(module).__mro__:
        show = EXTRA_REPRS.get(cls)
        if show is not None:
            return show(module)
    for cls in type(module).__mro__:
        if cls is base:
            break
        if cls.__module__.startswith("uopkit."):
            return plain_settings(module)
    return ""


def plain_settings(module: Any) -> str:
    simple = (bool, int, float, str, tuple, type(None))
    return ", ".join(
        f"{k}={v!r}"
        for k, v in module._entries()
        if not k.startswith("_") and isinstance(v, simple) and not isinstance(v, Tensor)
    )

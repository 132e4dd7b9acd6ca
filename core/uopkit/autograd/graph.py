"""torch.autograd.graph's context managers for saved tensors, as far as they mean anything here.

torch's autograd saves, op by op, the tensors each backward formula reads, and `saved_tensors_hooks(pack, unpack)`
sees (and may replace) every one of them. uopkit has no such step: a gradient is a lazy graph that reads the forward's
values directly (uopkit/gradient.py), so there is nothing to pack. `saved_tensors_hooks` therefore raises rather than
run hooks that would never be called; `save_on_cpu`, which in torch only moves saved values to host memory (the
gradients it gives are the same), is taken and changes nothing, and so is `disable_saved_tensors_hooks`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks"]


class saved_tensors_hooks:
    """torch.autograd.graph.saved_tensors_hooks: not supported (see the module docstring); raises
    NotImplementedError when made."""

    def __init__(self, pack_hook: Callable[[Any], Any], unpack_hook: Callable[[Any], Any]) -> None:
        raise NotImplementedError(
            "autograd.graph.saved_tensors_hooks: uopkit's autograd saves no tensors for backward (a gradient is a "
            "lazy graph reading the forward's values), so pack and unpack hooks would never run; leave them out "
            "(autograd.graph.save_on_cpu, which only offloads, is accepted and does nothing)"
        )


class save_on_cpu:
    """torch.autograd.graph.save_on_cpu: accepted, and changes nothing (torch moves the tensors saved for backward to
    host memory, which changes no value; uopkit saves none)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        self.pin_memory, self.device_type = pin_memory, device_type

    def __enter__(self) -> save_on_cpu:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class disable_saved_tensors_hooks:
    """torch.autograd.graph.disable_saved_tensors_hooks: accepted, and changes nothing (no saved-tensor hooks can be
    registered here)."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

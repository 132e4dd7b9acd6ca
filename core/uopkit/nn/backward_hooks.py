"""A module's backward hooks (torch's `register_full_backward_hook`, `register_full_backward_pre_hook` and the
deprecated `register_backward_hook`), run by one call of the module as torch's `BackwardHook` does.

The call's tensor arguments go through one identity `Function` node before `forward` reads them, and its tensor outputs
through another before the caller gets them. When a backward pass reaches the outputs' node, the pre-hooks see (and may
replace) grad_output; when it reaches the inputs' node, the hooks see grad_input (the gradients for the positional
tensor arguments, as the walk summed them) and grad_output, and may replace grad_input. Each node is a fresh value
(a copy), so two calls on the same input are hooked apart, as torch's.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> seen = []
>>> layer = Linear(2, 1)
>>> _ = layer.register_full_backward_hook(lambda m, grad_input, grad_output: seen.append(grad_output[0].tolist()))
>>> _ = layer(Tensor.ones(1, 2, requires_grad=True)).sum().backward(); seen
[[[1.0]]]
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any

from uopkit.tensor import Tensor
from uopkit.tensor.autograd import Function
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.support import IN_PLACE_ERROR, mark_no_in_place


class _BackwardHookFunction(Function):
    """The identity, on a tuple of tensors, whose backward hands the gradients to `on_grads` (the call's hook runner),
    which returns the ones that flow on."""

    @staticmethod
    def forward(ctx: Any, on_grads: Callable[..., tuple], *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.on_grads = on_grads
        # (a tensor that needs no gradient gets none: None in grad_output, zeros in grad_input, as torch's)
        ctx.mark_non_differentiable(*[t for t, need in zip(tensors, ctx.needs_input_grad[1:], strict=True) if not need])
        ctx.set_materialize_grads(False)
        return tensors

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        return (None, *ctx.on_grads(grads))


class ModuleBackwardCall:
    """One call of a module with backward hooks: wraps its inputs (`inputs`) and outputs (`outputs`), and runs the
    hooks captured at the call (as torch's: a hook removed after the forward still runs for it) in the backward.
    `full`: the hooks are full backward hooks (or there are only pre-hooks); False for the deprecated kind, whose
    forward may write its inputs in place."""

    def __init__(
        self, module: Any, hooks: list[Callable[..., Any]], pre_hooks: list[Callable[..., Any]], full: bool
    ) -> None:
        self.hooks, self.pre_hooks, self.full = hooks, pre_hooks, full
        # the module held weakly: this call lives in its nodes' gradient rules (values of a map keyed by the nodes), and
        # the module's parameters' lazy gradients read those nodes, so a strong reference would keep module, gradients
        # and graph alive for good after the program let go of the module
        self._module = weakref.ref(module)
        # set by the outputs' node in each backward pass, taken by the inputs' node
        self.grad_outputs: tuple[Tensor | None, ...] | None = None
        self.n_inputs, self.input_index = 0, None
        self.n_outputs, self.output_index = 0, None
        self.input_meta: list[tuple[tuple[int, ...], Any, str]] = []
        self.output_shapes: list[tuple[int, ...]] = []
        # (the caller's tensor, the one forward reads, its node): to tell one forward wrote in place
        self.given: list[tuple[Tensor, Tensor, Any]] = []

    def inputs(self, args: tuple) -> tuple:
        """The call's arguments with each tensor read through the inputs' node (as given when no tensor among them
        requires a gradient, or gradients are off)."""
        wrapped, self.input_index = _through_node(args, self._on_input_grads, self.full)
        self.n_inputs = len(args)
        if self.input_index is not None:
            self.input_meta = [(args[i].shape, args[i].dtype, args[i].device) for i in self.input_index]
            self.given = [(args[i], wrapped[i], wrapped[i].uop) for i in self.input_index]
        if not self.full and not all(isinstance(a, Tensor) for a in args):
            warnings.warn(
                f"register_backward_hook on {type(self._module()).__name__}: its forward takes arguments that are "
                "not all "
                "tensors, so the hook sees only part of grad_input (this old-style hook is deprecated); "
                "register_full_backward_hook gives every input's gradient",
                FutureWarning,
                stacklevel=4,
            )
        return wrapped

    def after_forward(self) -> None:
        """A hooked input forward gave another value in place: torch's error for full hooks (by a path the in-place
        ops' own check doesn't see); with the deprecated hooks the caller's tensor gets the write, as torch's."""
        for n, (caller, t, node) in enumerate(self.given):
            if t.uop is node:
                continue
            if self.full:
                raise RuntimeError(IN_PLACE_ERROR.format(i=n))
            caller._update_in_place(lambda t=t: t, "an in-place write in forward")
        self.given = []

    def outputs(self, result: Any) -> Any:
        """The forward's result with each tensor read through the outputs' node (a Tensor or a tuple of them; anything
        else is passed as it is, with torch's warning, and the hooks don't run)."""
        if not isinstance(result, (Tensor, tuple)):
            if self.full:
                warnings.warn(
                    f"full backward hook on {type(self._module()).__name__} will not run: forward returned "
                    f"{type(result).__name__}; return a tensor or a tuple of tensors for the hook to fire",
                    stacklevel=4,
                )
        if not self.full and not (
            isinstance(result, Tensor) or (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result))
        ):
            warnings.warn(
                f"register_backward_hook on {type(self._module()).__name__}: its forward returns "
                f"{type(result).__name__}, "
                "not one tensor or a tuple of tensors, so the hook sees only part of grad_output (this old-style hook "
                "is deprecated); register_full_backward_hook gives every output's gradient",
                FutureWarning,
                stacklevel=4,
            )
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        wrapped, self.output_index = _through_node(outs, self._on_output_grads, self.full)
        self.n_outputs = len(outs)
        if self.output_index is not None:
            self.output_shapes = [outs[i].shape for i in self.output_index]
        return wrapped[0] if single else wrapped

    def _on_output_grads(self, grads: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
        assert self.output_index is not None
        grad_outputs = _placed(self.output_index, grads, self.n_outputs)
        for hook in self.pre_hooks:
            out = hook(self._module(), grad_outputs)
            if out is None:
                continue
            out = _as_grads(out, "backward pre-hook", "grad_output", len(grad_outputs))
            grad_outputs = out
        self.grad_outputs = grad_outputs
        if self.input_index is None:
            # no input needs a gradient: the hooks run here, with no grad_input to give or take (torch's warning)
            if self.full:
                warnings.warn(
                    f"full backward hook on {type(self._module()).__name__}: none of the module's inputs requires "
                    "grad, so "
                    "the hook runs on the gradients of its outputs and grad_input is all None",
                    stacklevel=2,
                )
            grad_inputs = (None,) * self.n_inputs
            for hook in self.hooks:
                res = hook(self._module(), grad_inputs, grad_outputs)
                if res is not None and not (isinstance(res, tuple) and all(r is None for r in res)):
                    raise RuntimeError(
                        f"full backward hook on {type(self._module()).__name__} returned {type(res).__name__}: with "
                        "no input "
                        "requiring grad there is no grad_input to replace, so the hook must return None (or a tuple "
                        "of None)"
                    )
            self.grad_outputs = None
        out_grads = [grad_outputs[i] for i in self.output_index]
        _check_shapes(out_grads, self.output_shapes, "backward pre-hook")
        return tuple(out_grads)

    def _on_input_grads(self, grads: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
        assert self.input_index is not None
        # a tensor input whose gradient is not there (it needs none, or the backward doesn't reach it): zeros
        grads = tuple(
            g if g is not None else Tensor.zeros(shape, dtype=dt, device=dev)
            for g, (shape, dt, dev) in zip(grads, self.input_meta, strict=True)
        )
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing the outputs (a double backward): no hook, as torch's
            return grads
        grad_inputs = _placed(self.input_index, grads, self.n_inputs)
        for hook in self.hooks:
            out = hook(self._module(), grad_inputs, self.grad_outputs)
            if out is None:
                continue
            grad_inputs = _as_grads(out, "backward hook", "grad_input", len(grad_inputs))
        self.grad_outputs = None
        in_grads = [grad_inputs[i] for i in self.input_index]
        _check_shapes(in_grads, [m[0] for m in self.input_meta], "backward hook")
        return tuple(in_grads)


def _through_node(args: tuple, on_grads: Callable[..., tuple], fixed: bool) -> tuple[tuple, list[int] | None]:
    # the tensors of `args` read through one hook node, and their positions; (args, None) when none needs a gradient.
    # `fixed`: an in-place write into one is an error
    index = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    tensors = [args[i] for i in index]
    if not (is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return args, None
    new = _BackwardHookFunction.apply(on_grads, *tensors)
    out = list(args)
    for i, t in zip(index, new, strict=True):
        out[i] = t
        if fixed:
            mark_no_in_place(t)
    # (a namedtuple is rebuilt as one, as torch's)
    return (tuple(out) if type(args) is tuple else type(args)(*out)), index


def _placed(index: list[int], values: tuple, size: int) -> tuple:
    out: list[Any] = [None] * size
    for i, v in zip(index, values, strict=True):
        out[i] = v
    return tuple(out)


def _as_grads(out: Any, what: str, name: str, expected: int) -> tuple:
    if not isinstance(out, (tuple, list)):
        raise RuntimeError(
            f"a module's {what} must return None or a tuple of gradients (one per {name} entry), got "
            f"{type(out).__name__}"
        )
    if len(out) != expected:
        kind = "Backward pre hook" if "pre" in what else "Backward hook"
        raise RuntimeError(f"{kind} returned an invalid number of {name}, got {len(out)}, but expected {expected}")
    for g in out:
        if g is not None and not isinstance(g, Tensor):
            raise TypeError(f"a module's {what} returned a {type(g).__name__} in {name}; give Tensors or None")
    return tuple(out)


def _check_shapes(grads: list[Tensor | None], shapes: list[tuple[int, ...] | None], what: str) -> None:
    for g, shape in zip(grads, shapes, strict=True):
        if g is not None and shape is not None and g.shape != shape:
            raise RuntimeError(
                f"a module's {what} returned a gradient of shape {g.shape} where one of shape {shape} was expected; a "
                "hook may replace a gradient but not reshape it"
            )

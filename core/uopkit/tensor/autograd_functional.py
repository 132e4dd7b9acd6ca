"""torch.autograd.functional for uopkit Tensors: `vjp`, `jvp`, `jacobian`, `hessian`, `vhp` and `hvp` of a function of
Tensors, with torch's argument names, checks, error messages and nesting of the results (a Tensor where torch gives
one, a tuple, or a tuple of tuples, by whether the inputs and the outputs were given as tuples).

Everything is reverse mode on top of `uopkit.autograd.grad`: `jvp` uses the double-backward trick (the gradient of
the vector-Jacobian product, linear in its vector, with respect to that vector), and `jacobian` computes all the rows
of an output's Jacobian in one batched backward pass (`uopkit.tensor.batched_backward`), as torch's with `vectorize`.

>>> from uopkit import Tensor
>>> jacobian(lambda x: x * x, Tensor([1.0, 2.0])).tolist()
[[2.0, 0.0], [0.0, 4.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from uopkit.tensor.autograd import grad
from uopkit.tensor.batched_backward import one_hot_rows, vjp_rows
from uopkit.tensor.grad_mode import enable_grad
from uopkit.tensor.tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


# ---------------------------------------------------------------------------------------------------------------------
# torch's checks and the nesting of the results


def _as_tuple(x: Any, what: str, fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    # (whether x was a tuple, x as a tuple of Tensors); a list is refused, as torch's
    is_tuple = isinstance(x, tuple)
    items = x if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            got = f"entry {i} is a {type(t).__name__}" if is_tuple else f"got a {type(t).__name__}"
            raise TypeError(f"{fn}: the {what} must be a Tensor or a tuple of Tensors; {got}")
    return is_tuple, items


def _prepared(inputs: tuple[Tensor, ...], create_graph: bool, need_graph: bool) -> tuple[Tensor, ...]:
    # tensors that can be differentiated: with create_graph an input that requires grad is itself (the results stay
    # attached to what computed it), any other one a detached leaf
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t)
        else:
            leaf = t.detach()
            if need_graph:
                leaf.requires_grad_(True)
            out.append(leaf)
    return tuple(out)


def _finished(items: tuple[Any, ...], create_graph: bool) -> tuple[Any, ...]:
    # results come back detached unless create_graph, as torch's (nested tuples too)
    if create_graph:
        return items
    return tuple(t.detach() if isinstance(t, Tensor) else _finished(t, create_graph) for t in items)


def _unpacked(res: tuple[Any, ...], to_unpack: bool | tuple[bool, bool]) -> Any:
    # undo the tupling of inputs and outputs that weren't tuples
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(r[0] for r in res)
        if not to_unpack[0]:
            res = res[0]
        return res
    return res if to_unpack else res[0]


def _validate_v(v: tuple[Tensor, ...], other: tuple[Tensor, ...], is_other_tuple: bool) -> None:
    if len(v) != len(other):
        if is_other_tuple:
            raise RuntimeError(f"v: takes one tensor per entry, {len(other)} of them, got a tuple of {len(v)}")
        raise RuntimeError(f"v: takes a single tensor here, got a tuple of {len(v)}")
    for i, (a, b) in enumerate(zip(v, other, strict=True)):
        if a.shape != b.shape:
            where = f"entry {i} of v" if is_other_tuple else "v"
            raise RuntimeError(f"{where} has shape {a.shape}, the tensor it goes with has shape {b.shape}")


def _check_outputs_require_grad(outputs: tuple[Tensor, ...], strict: bool) -> None:
    if not strict:
        return
    for i, o in enumerate(outputs):
        if not o.requires_grad:
            raise RuntimeError(
                f"strict=True: output {i} of the function does not require grad, so it doesn't depend on the inputs "
                "through the graph; pass strict=False to get zeros for it"
            )


def _grad(
    outputs: tuple[Tensor | None, ...],
    inputs: tuple[Tensor, ...],
    grad_outputs: tuple[Tensor | None, ...] | None = None,
    create_graph: bool = False,
) -> tuple[Tensor | None, ...]:
    # autograd.grad over the outputs that require grad (None where an output is None or doesn't), None per input
    # the outputs don't reach
    given = grad_outputs if grad_outputs is not None else (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, given, strict=True) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    outs = [o for o, _ in pairs]
    gs = [g for _, g in pairs]
    return grad(outs, inputs, gs, create_graph=create_graph, allow_unused=True)


# what a missing gradient means in strict mode, by the pass that found it (torch's messages)
_INDEPENDENT = {
    "back": "strict=True: the outputs don't depend on input {i}; pass strict=False to get zeros for it",
    "back_trick": "strict=True: the result doesn't depend on output {i} (its backward pass, run twice for a jvp, gives "
    "no gradient for it); pass strict=False to get zeros for it",
    "double_back": "strict=True: the gradient doesn't depend on input {i}, so its derivative is missing; pass "
    "strict=False to get zeros for it",
}


def _zeros_for_missing(
    grads: tuple[Tensor | None, ...], refs: tuple[Tensor, ...], strict: bool, create_graph: bool, stage: str
) -> tuple[Tensor, ...]:
    out = []
    for i, (g, ref) in enumerate(zip(grads, refs, strict=True)):
        if g is None:
            if strict:
                raise RuntimeError(_INDEPENDENT[stage].format(i=i))
            g = Tensor.zeros(ref.shape, dtype=ref.dtype, device=ref.device)
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"strict=True with create_graph=True: the {what} with respect to input {i} is a constant, not a "
                "function of the inputs in the graph; pass strict=False"
            )
        out.append(g)
    return tuple(out)


def _vector(v: Any, fn: str, like: tuple[Tensor, ...], like_is_tuple: bool, create_graph: bool) -> tuple[Tensor, ...]:
    _, vs = _as_tuple(v, "v", fn)
    vs = _prepared(vs, create_graph, need_graph=False)
    _validate_v(vs, like, like_is_tuple)
    return vs


def _single_element_input(inputs: tuple[Tensor, ...]) -> None:
    if len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError(
            f"v=None stands for 1 only when there is one input of one element, got inputs of shapes "
            f"{[t.shape for t in inputs]}; pass v"
        )


# ---------------------------------------------------------------------------------------------------------------------
# products with the Jacobian and the Hessian


def vjp(
    func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple[Any, Any]:
    """(func(*inputs), v^T J): the vector-Jacobian product of `func` at `inputs` (a Tensor or a tuple of them), as
    torch.autograd.functional.vjp. `v` has the outputs' shapes; it may be left out when func returns one element.
    An input the outputs don't depend on gets zeros (an error with `strict`). The results are detached unless
    `create_graph`.

    >>> from uopkit import Tensor
    >>> vjp(lambda x: x * x, Tensor([1.0, 2.0]), Tensor([1.0, 1.0]))[1].tolist()
    [2.0, 4.0]
    """
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "vjp")
        ins = _prepared(ins, create_graph, need_graph=True)
        is_outputs_tuple, outs = _as_tuple(func(*ins), "outputs of the user-provided function", "vjp")
        _check_outputs_require_grad(outs, strict)
        if v is not None:
            vs: tuple[Tensor | None, ...] | None = _vector(v, "vjp", outs, is_outputs_tuple, create_graph)
        else:
            if len(outs) != 1 or outs[0].numel() != 1:
                raise RuntimeError(
                    "vjp: v=None stands for 1 only when the function returns one tensor of one element, got outputs "
                    "of "
                    f"shapes {[o.shape for o in outs]}; pass v"
                )
            vs = None
        grads = _grad(outs, ins, vs, create_graph)
        result = _zeros_for_missing(grads, ins, strict, create_graph, "back")
    return (
        _unpacked(_finished(outs, create_graph), is_outputs_tuple),
        _unpacked(_finished(result, create_graph), is_inputs_tuple),
    )


def jvp(
    func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple[Any, Any]:
    """(func(*inputs), J v): the Jacobian-vector product of `func` at `inputs`, as torch.autograd.functional.jvp.
    `v` has the inputs' shapes; it may be left out for a single one-element input. Computed by the double-backward
    trick, as torch's: the vector-Jacobian product with a vector u is linear in u, and its gradient with respect to u
    along v is J v (two backward passes, no forward mode).

    >>> from uopkit import Tensor
    >>> jvp(lambda x: x * x, Tensor([1.0, 2.0]), Tensor([1.0, 0.0]))[1].tolist()
    [2.0, 0.0]
    """
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "jvp")
        ins = _prepared(ins, create_graph, need_graph=True)
        if v is not None:
            vs: tuple[Tensor | None, ...] | None = _vector(v, "jvp", ins, is_inputs_tuple, create_graph)
        else:
            _single_element_input(ins)
            vs = None
        is_outputs_tuple, outs = _as_tuple(func(*ins), "outputs of the user-provided function", "jvp")
        _check_outputs_require_grad(outs, strict)
        # the backward pass is linear in its vector: its value (zeros) never shows, it only must not be inf or NaN
        us = tuple(Tensor.zeros(o.shape, dtype=o.dtype, device=o.device, requires_grad=True) for o in outs)
        grad_inputs = _grad(outs, ins, us, create_graph=True)
        if strict:
            for i, g in enumerate(grad_inputs):
                if g is None:
                    raise RuntimeError(
                        f"jvp (strict=True): the outputs don't depend on input {i}; pass strict=False to get zeros "
                        "for it"
                    )
                if not g.requires_grad:
                    raise RuntimeError(
                        f"jvp (strict=True): the gradient with respect to input {i} is a constant, not a function of "
                        "the "
                        "inputs in the graph; pass strict=False"
                    )
        result = _zeros_for_missing(_grad(grad_inputs, us, vs, create_graph), outs, strict, create_graph, "back_trick")
    return (
        _unpacked(_finished(outs, create_graph), is_outputs_tuple),
        _unpacked(_finished(result, create_graph), is_outputs_tuple),
    )


def _single_output(outs: tuple[Tensor, ...], is_tuple: bool, fn: str) -> None:
    if is_tuple:
        raise RuntimeError(f"{fn}: the function must return one tensor, got a tuple of {len(outs)}")
    if outs[0].numel() != 1:
        raise RuntimeError(f"{fn}: the function must return a single element, got shape {outs[0].shape}")


def _vhp(fn: str, func: Callable[..., Any], inputs: Any, v: Any, create_graph: bool, strict: bool) -> tuple[Any, Any]:
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", fn)
        ins = _prepared(ins, create_graph, need_graph=True)
        if v is not None:
            vs: tuple[Tensor | None, ...] | None = _vector(v, fn, ins, is_inputs_tuple, create_graph)
        else:
            _single_element_input(ins)
            vs = None
        is_outputs_tuple, outs = _as_tuple(func(*ins), "outputs of the user-provided function", fn)
        _check_outputs_require_grad(outs, strict)
        _single_output(outs, is_outputs_tuple, fn)
        jac = _grad(outs, ins, None, create_graph=True)
        if strict:
            for i, g in enumerate(jac):
                if g is None or not g.requires_grad:
                    raise RuntimeError(
                        f"hessian (strict=True): the gradient with respect to input {i} doesn't depend on the "
                        "inputs, so "
                        "its derivative is not in the graph (a function linear in that input does this); pass "
                        "strict=False to get zeros there"
                    )
        result = _zeros_for_missing(_grad(jac, ins, vs, create_graph), ins, strict, create_graph, "double_back")
    return (
        _unpacked(_finished(outs, create_graph), is_outputs_tuple),
        _unpacked(_finished(result, create_graph), is_inputs_tuple),
    )


def vhp(
    func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple[Any, Any]:
    """(func(*inputs), v^T H): the vector-Hessian product of a function that returns one element, as
    torch.autograd.functional.vhp (two backward passes).

    >>> from uopkit import Tensor
    >>> vhp(lambda x: (x**3).sum(), Tensor([1.0, 2.0]), Tensor([1.0, 1.0]))[1].tolist()
    [6.0, 12.0]
    """
    return _vhp("vhp", func, inputs, v, create_graph, strict)


def hvp(
    func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple[Any, Any]:
    """(func(*inputs), H v): the Hessian-vector product of a function that returns one element, as
    torch.autograd.functional.hvp. The Hessian of a twice-differentiable function is symmetric, so H v is v^T H: it
    is computed as `vhp` (two backward passes; torch's takes a third, the double-backward trick).

    >>> from uopkit import Tensor
    >>> hvp(lambda x: (x**3).sum(), Tensor([1.0, 2.0]), Tensor([1.0, 0.0]))[1].tolist()
    [6.0, 0.0]
    """
    return _vhp("hvp", func, inputs, v, create_graph, strict)


# ---------------------------------------------------------------------------------------------------------------------
# whole Jacobians and Hessians

_STRATEGY_HINT = "jacobian: strategy takes 'forward-mode' or 'reverse-mode'"


def jacobian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """The Jacobian of `func` at `inputs`, as torch.autograd.functional.jacobian: for one input and one output a
    Tensor of shape output.shape + input.shape; a tuple over the inputs (or the outputs) where only they are a
    tuple; a tuple (per output) of tuples (per input) where both are. An output that doesn't depend on an input gives
    zeros there (an error with `strict`).

    The rows of each output's Jacobian are computed together, with or without `vectorize` (torch's batched and
    per-row passes give the same values): the backward graph is built once and given a batch axis, then evaluated
    for the one-hot rows in chunks that fit a memory budget (`uopkit.tensor.batched_backward`). Where that graph
    can't be batched (a custom kernel or an assign on the way) it falls back to one backward pass per output
    element. `strategy="forward-mode"` (torch: with `vectorize=True`
    only) is computed by reverse mode too: uopkit has no forward-mode gradients.

    >>> from uopkit import Tensor
    >>> jacobian(lambda x: x.sum(), Tensor([1.0, 2.0])).tolist()
    [1.0, 1.0]
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(f"{_STRATEGY_HINT}, got {strategy!r}")
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "jacobian: strategy='forward-mode' can't build a graph of the result; with create_graph=True use "
                "strategy='reverse-mode'"
            )
        if not vectorize:
            raise NotImplementedError("jacobian: strategy='forward-mode' goes with vectorize=True only")
    with enable_grad():
        is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "jacobian")
        ins = _prepared(ins, create_graph, need_graph=True)
        is_outputs_tuple, outs = _as_tuple(func(*ins), "outputs of the user-provided function", "jacobian")
        _check_outputs_require_grad(outs, strict)
        if vectorize and strict:
            raise RuntimeError("jacobian: strict=True can't be checked with vectorize=True; drop one of them")
        result = tuple(_jacobian_of_output(i, o, ins, create_graph, strict) for i, o in enumerate(outs))
    return _unpacked(_finished(result, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _jacobian_of_output(
    i: int, out: Tensor, ins: tuple[Tensor, ...], create_graph: bool, strict: bool
) -> tuple[Tensor, ...]:
    """d out / d ins[j] for each j, of shape out.shape + ins[j].shape. All the rows in one batched backward pass
    (`uopkit.tensor.batched_backward`: the backward graph built once and given a batch of one-hot vectors, in
    chunks); where that graph can't be batched, one backward pass per element of out."""
    n = out.numel()
    rows = None
    if out.requires_grad:
        rows = vjp_rows(grad, (out,), ins, one_hot_rows(n, out.shape, out.dtype, out.device), n, create_graph)
    if rows is None:
        return _jacobian_by_rows(i, out, ins, create_graph, strict)
    return tuple(
        _checked_block(i, j, g, x, create_graph, strict, (n,)).reshape(out.shape + x.shape)
        for j, (g, x) in enumerate(zip(rows, ins, strict=True))
    )


def _checked_block(
    i: int, j: int, g: Tensor | None, x: Tensor, create_graph: bool, strict: bool, lead: tuple[int, ...]
) -> Tensor:
    # one row (lead ()) or a stack of rows of the Jacobian of output i with respect to input j: zeros where the output
    # doesn't reach the input (strict's errors instead)
    if g is None:
        if strict:
            raise RuntimeError(
                f"jacobian (strict=True): output {i} doesn't depend on input {j}; pass strict=False to get zeros there"
            )
        return Tensor.zeros(lead + x.shape, dtype=x.dtype, device=x.device)
    if strict and create_graph and not g.requires_grad:
        raise RuntimeError(
            f"jacobian (strict=True, create_graph=True): the jacobian of output {i} is a constant, not a function of "
            "the inputs in the graph; pass strict=False"
        )
    return g


def _jacobian_by_rows(
    i: int, out: Tensor, ins: tuple[Tensor, ...], create_graph: bool, strict: bool
) -> tuple[Tensor, ...]:
    """`_jacobian_of_output` one backward pass per element of out, its vector a one-hot row of the identity (a buffer
    of its own: the passes differ in its values only, so each one after the first replays the first one's kernels)."""
    rows: list[list[Tensor]] = [[] for _ in ins]
    n = out.numel()
    flat = out.reshape(-1)
    for k in range(n):
        one_hot = Tensor(np.eye(1, n, k).reshape(n), dtype=out.dtype, device=out.device)
        grads = _grad((flat,), ins, (one_hot,), create_graph) if out.requires_grad else (None,) * len(ins)
        for j, (g, x) in enumerate(zip(grads, ins, strict=True)):
            g = _checked_block(i, j, g, x, create_graph, strict, ())
            # (without create_graph each row is stored as it comes: the stack then gathers stored rows, not n graphs)
            rows[j].append(g if create_graph else g.detach().realize())
    return tuple(
        (Tensor.stack(r, 0) if r else Tensor.zeros((0, *x.shape), dtype=x.dtype, device=x.device)).reshape(
            out.shape + x.shape
        )
        for r, x in zip(rows, ins, strict=True)
    )


def hessian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """The Hessian of a function that returns one element, as torch.autograd.functional.hessian: the Jacobian of its
    gradient. For one input a Tensor of shape input.shape + input.shape; for a tuple of inputs a tuple of tuples,
    [i][j] of shape inputs[i].shape + inputs[j].shape.

    >>> from uopkit import Tensor
    >>> hessian(lambda x: (x**3).sum(), Tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    is_inputs_tuple, ins = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            f"hessian: outer_jacobian_strategy takes 'forward-mode' or 'reverse-mode', got {outer_jacobian_strategy!r}"
        )

    def single_output(*inp: Tensor) -> Tensor:
        out = func(*inp)
        is_tuple, outs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_outputs_require_grad(outs, strict)
        _single_output(outs, is_tuple, "hessian")
        return out.squeeze()

    def gradient(*inp: Tensor) -> tuple[Tensor, ...]:
        jac = jacobian(single_output, inp, create_graph=True)
        if strict:
            for i, g in enumerate(jac):
                if not g.requires_grad:
                    raise RuntimeError(
                        f"hessian (strict=True): the gradient with respect to input {i} doesn't depend on the "
                        "inputs, so "
                        "its derivative is not in the graph (a function linear in that input does this); pass "
                        "strict=False to get zeros there"
                    )
        return jac

    res = jacobian(
        gradient, ins, create_graph=create_graph, strict=strict, vectorize=vectorize, strategy=outer_jacobian_strategy
    )
    return _unpacked(res, (is_inputs_tuple, is_inputs_tuple))

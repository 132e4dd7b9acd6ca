"""torch.func's derivative transforms: `grad`, `grad_and_value`, `vjp`, `jvp`, `jacrev`, `jacfwd` and `hessian`, with
torch's arguments (argnums, has_aux), pytrees of tensors in and out, results shaped as torch's and its errors.

Everything is reverse mode on `uopkit.autograd.grad`, whose gradients are lazy graphs that can be differentiated again,
so the transforms compose (`grad(grad(f))`, `jacrev(jacrev(f))`, `vmap(grad(f))`). Each call is one level: the inputs
it differentiates with respect to become tensors of its own (`_Level`), so a gradient is the one through that argument
only (a closure over the same tensor doesn't count), and what the call returns stays attached to the graph only where
an outer level (an enclosing transform, or a tensor that requires grad) reaches it. Nothing is written into `.grad`.

`jvp` uses the double-backward trick (the vector-Jacobian product is linear in its vector: its gradient with respect
to that vector along the tangent is J v); `jacfwd` computes the same Jacobian as `jacrev` (one backward graph given a
batch axis for all the rows, `uopkit.tensor.batched_backward`): uopkit has no forward mode.

>>> from uopkit import Tensor
>>> grad(lambda x: (x**3).sum())(Tensor([1.0, 2.0])).tolist()
[3.0, 12.0]
>>> grad(grad(lambda x: x**3))(Tensor(2.0)).item()
12.0
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.func.pytree import Spec, tree_flatten, tree_map, tree_unflatten
from uopkit.func.vmapping import check_randomness, drawing_rule
from uopkit.tensor.autograd import grad as _autograd_grad
from uopkit.tensor.batched_backward import one_hot_rows, vjp_rows
from uopkit.tensor.grad_mode import enable_grad, is_grad_enabled
from uopkit.tensor.gradient_reach import walk_back
from uopkit.tensor.leaves import gradient_keys, wanted_keys
from uopkit.tensor.support import tensors_with_grad
from uopkit.tensor.tensor import Tensor
from uopkit.uop.ops import UOp

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian"]


# ---------------------------------------------------------------------------------------------------------------------
# one level of differentiation


class _Level:
    """The tensors one transform call differentiates with respect to, in place of the given ones: a fresh leaf, or,
    where the given tensor is part of an outer graph (it requires grad), a node of its own computed from it, so the
    outer level differentiates through this one. `released` gives back what the call returns: detached unless an
    outer level reaches it."""

    def __init__(self, tree: Any, not_float: type[Exception] = RuntimeError) -> None:
        flat, self.spec = tree_flatten(tree)
        self.outer = is_grad_enabled()
        self.inputs: list[Tensor] = []
        for x in flat:
            if not isinstance(x, Tensor):
                raise ValueError(
                    f"a func transform differentiates tensors (in tuples, lists or dicts), got {type(x).__name__}"
                )
            if not dtypes.is_float(x.dtype):
                # (torch's messages: jvp's primal is a ValueError, the others are requires_grad's RuntimeError)
                if not_float is ValueError:
                    raise ValueError(f"jvp: the primals must be floating point tensors, got one of {x.dtype}")
                raise RuntimeError(f"a func transform differentiates floating point tensors only, got one of {x.dtype}")
            if self.outer and x.requires_grad:
                # (computed under enable_grad: the outer graph runs through it)
                with enable_grad():
                    self.inputs.append(x * 1)
            else:
                self.inputs.append(x.detach().requires_grad_())
        self.tree = tree_unflatten(self.inputs, self.spec)
        self.own: set[UOp] = {k for t in self.inputs for k in gradient_keys(t)}

    def own_leaf(self, t: Tensor) -> Tensor:
        # a helper leaf of this level (jvp's vector): cut off like the inputs
        t = t.requires_grad_()
        self.own.update(gradient_keys(t))
        return t

    def released(self, tree: Any) -> Any:
        """`tree` with each tensor cut from this level's inputs: detached, unless an outer level reaches it (it depends,
        through what a gradient flows through, on a tensor that requires grad other than this level's own: the walk
        of Tensor.requires_grad with them left out)."""
        outer = self.outer and is_grad_enabled()
        wanted = wanted_keys() - self.own if outer else set()
        # (nodes a walk found to lead to none: the results of one level share most of their graphs)
        dead: set[UOp] = set()

        def found(u: UOp) -> bool:
            return u in wanted or (u not in self.own and tensors_with_grad.was_given_requires_grad((u,)))

        def release(t: Any) -> Any:
            if not isinstance(t, Tensor):
                return t
            if outer and dtypes.is_float(t.dtype):
                seen: set[UOp] = set()
                if walk_back(t.uop, found, seen, skip=dead):
                    return t
                dead.update(seen)
            return t.detach()

        return tree_map(release, tree)


def _pullback(outputs: list[Tensor], cotangents: list[Tensor | None], inputs: list[Tensor]) -> list[Tensor]:
    # sum over k of cotangent_k^T d outputs_k / d inputs, for each input (zeros where none depends on it), as a graph
    # that can be differentiated again
    pairs = [(o, c) for o, c in zip(outputs, cotangents, strict=True) if dtypes.is_float(o.dtype) and o.requires_grad]
    grads: tuple[Tensor | None, ...] = (None,) * len(inputs)
    if pairs:
        outs, cts = [o for o, _ in pairs], [c for _, c in pairs]
        grads = _autograd_grad(outs, inputs, cts, create_graph=True, allow_unused=True)
    return [
        g if g is not None else Tensor.zeros(x.shape, dtype=x.dtype, device=x.device)
        for g, x in zip(grads, inputs, strict=True)
    ]


# ---------------------------------------------------------------------------------------------------------------------
# arguments and outputs, checked as torch's


def _one_argnum(argnum: Any, n: int) -> int:
    if not isinstance(argnum, int):
        raise RuntimeError(f"argnums: each entry is an int, got {type(argnum).__name__}")
    if not -n <= argnum < n:
        raise RuntimeError(f"argnums: {argnum} names no argument of a call with {n} positional arguments")
    return argnum % n


def _argnums(argnums: Any, n: int) -> int | tuple[int, ...]:
    if isinstance(argnums, int):
        return _one_argnum(argnums, n)
    if not isinstance(argnums, tuple):
        raise RuntimeError(f"argnums is an int or a tuple of ints, got {type(argnums).__name__}")
    if not argnums:
        raise RuntimeError("argnums is an empty tuple: name at least one argument to differentiate")
    nums = tuple(_one_argnum(a, n) for a in argnums)
    if len(set(nums)) != len(nums):
        raise RuntimeError(f"argnums names an argument more than once: {argnums}")
    return nums


def _differentiated(args: tuple[Any, ...], argnums: Any) -> tuple[int | tuple[int, ...], Any]:
    # (argnums normalized, the arguments they pick: one tree for an int, a tuple of them for a tuple)
    nums = _argnums(argnums, len(args))
    return nums, (args[nums] if isinstance(nums, int) else tuple(args[i] for i in nums))


def _with_level(args: tuple[Any, ...], nums: int | tuple[int, ...], level: _Level) -> tuple[Any, ...]:
    new = list(args)
    if isinstance(nums, int):
        new[nums] = level.tree
    else:
        for i, sub in zip(nums, level.tree, strict=True):
            new[i] = sub
    return tuple(new)


def _split_aux(out: Any, has_aux: bool, where: str) -> tuple[Any, Any]:
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{where}: with has_aux=True the function returns a pair (output, aux)")
    return out


def _check_aux(aux: Any) -> None:
    for leaf in tree_flatten(aux)[0]:
        if not isinstance(leaf, Tensor):
            raise RuntimeError(f"has_aux: aux holds tensors only (in tuples, lists, dicts), got {type(leaf).__name__}")


def _tensor_outputs(out: Any, where: str) -> tuple[list[Tensor], Spec]:
    flat, spec = tree_flatten(out)
    for o in flat:
        if not isinstance(o, Tensor):
            raise RuntimeError(
                f"{where}: the function returns tensors only (in tuples, lists or dicts), got {type(o).__name__}"
            )
    return flat, spec


# ---------------------------------------------------------------------------------------------------------------------
# grad


def grad_and_value(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """`func` made to return (its gradient, its value), as torch.func.grad_and_value: the gradient with respect to the
    positional argument `argnums` (a tree of tensors: a tensor, or tuples/lists/dicts of them; a tuple of argnums
    gives a tuple of such trees). `func` must return a scalar tensor (with `has_aux`, a pair (scalar, aux): the value
    is then (scalar, aux)). Keyword arguments are passed on, not differentiated.

    >>> from uopkit import Tensor
    >>> g, v = grad_and_value(lambda x: (x * x).sum())(Tensor([1.0, 2.0]))
    >>> g.tolist(), v.item()
    ([2.0, 4.0], 5.0)
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        nums, picked = _differentiated(args, argnums)
        level = _Level(picked)
        with enable_grad():
            out, aux = _split_aux(func(*_with_level(args, nums, level), **kwargs), has_aux, "grad_and_value(f)(*args)")
            if has_aux:
                _check_aux(aux)
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad: the function returns one tensor, got {type(out).__name__}")
            if out.ndim != 0:
                raise RuntimeError(
                    f"grad: the function returns a 0-d tensor, got one of shape {tuple(out.shape)} (for a tensor of "
                    "outputs, take vjp or jacrev)"
                )
            grads = _pullback([out], [None], level.inputs)
        gradient = level.released(tree_unflatten(grads, level.spec))
        value = level.released((out, aux) if has_aux else out)
        return gradient, value

    return wrapper


def grad(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """`func` made to return its gradient with respect to the argument(s) `argnums`, as torch.func.grad (with
    `has_aux`: (gradient, aux)); `grad_and_value` without the value. Gradients don't reach `.grad`; they stay
    differentiable where an outer transform or a tensor that requires grad needs them (`grad(grad(f))`).

    >>> from uopkit import Tensor
    >>> grad(lambda x, y: (x * y).sum(), argnums=1)(Tensor([1.0, 2.0]), Tensor([3.0, 4.0])).tolist()
    [1.0, 2.0]
    """
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gradient, value = inner(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return wrapper


# ---------------------------------------------------------------------------------------------------------------------
# vjp and jvp


def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """(func(*primals), vjp_fn), as torch.func.vjp (with `has_aux`: (output, vjp_fn, aux)). `vjp_fn(cotangents)`,
    cotangents shaped as the output (a tree of tensors), gives a tuple with one tree per primal: cotangents^T J. It
    can be called many times.

    >>> from uopkit import Tensor
    >>> out, vjp_fn = vjp(lambda x: x * x, Tensor([1.0, 2.0]))
    >>> vjp_fn(Tensor([1.0, 1.0]))[0].tolist()
    [2.0, 4.0]
    """
    level = _Level(primals)
    with enable_grad():
        out, aux = _split_aux(func(*level.tree), has_aux, "vjp(f, *primals)")
        if has_aux:
            _check_aux(aux)
        flat_out, out_spec = _tensor_outputs(out, "vjp(f, *primals)")

    def vjp_fn(cotangents: Any, *, retain_graph: bool = True, create_graph: bool | None = None) -> tuple[Any, ...]:
        flat_ct, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError(
                f"vjp_fn: the cotangents' structure {ct_spec} differs from the outputs' {out_spec}: give one cotangent "
                "per output, in the same tuples, lists and dicts"
            )
        for i, (c, o) in enumerate(zip(flat_ct, flat_out, strict=True)):
            if not isinstance(c, Tensor):
                raise RuntimeError(f"vjp_fn: cotangent {i} is a {type(c).__name__}, not a tensor")
            if c.shape != o.shape:
                raise RuntimeError(
                    f"vjp_fn: cotangent {i} has shape {tuple(c.shape)}, its output shape {tuple(o.shape)}: they must "
                    "be the same"
                )
        with enable_grad():
            grads = _pullback(flat_out, [c.cast(o.dtype) for c, o in zip(flat_ct, flat_out, strict=True)], level.inputs)
        return level.released(tree_unflatten(grads, level.spec))

    released = level.released(out)
    return (released, vjp_fn, level.released(aux)) if has_aux else (released, vjp_fn)


def jvp(
    func: Callable[..., Any], primals: Any, tangents: Any, *, strict: bool = False, has_aux: bool = False
) -> tuple[Any, ...]:
    """(func(*primals), J tangents), as torch.func.jvp (with `has_aux`: (output, jvp_out, aux)): `primals` a tuple
    of trees of tensors, `tangents` the same structure and shapes. Computed by the double-backward trick (two backward
    passes: uopkit has no forward mode).

    >>> from uopkit import Tensor
    >>> jvp(lambda x: x * x, (Tensor([1.0, 2.0]),), (Tensor([1.0, 0.0]),))[1].tolist()
    [2.0, 0.0]
    """
    if not isinstance(primals, tuple):
        raise RuntimeError(
            f"jvp: primals is a {type(primals).__name__}; it must be a tuple (the function is called as f(*primals))"
        )
    flat_p, p_spec = tree_flatten(primals)
    flat_t, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(
            f"jvp: the tangents' structure {t_spec} differs from the primals' {p_spec}: give one tangent per primal"
        )
    for what, flat in (("primals", flat_p), ("tangents", flat_t)):
        for x in flat:
            if not isinstance(x, Tensor):
                raise RuntimeError(f"jvp: {what} hold tensors only, got a {type(x).__name__}")
    for p, t in zip(flat_p, flat_t, strict=True):
        if p.shape != t.shape:
            raise RuntimeError(
                f"jvp: a tangent of shape {tuple(t.shape)} for a primal of shape {tuple(p.shape)}: each tangent has "
                "its primal's shape"
            )
    level = _Level(primals, not_float=ValueError)
    with enable_grad():
        out, aux = _split_aux(func(*level.tree), has_aux, "jvp(f, primals, tangents)")
        if has_aux:
            _check_aux(aux)
        flat_out, out_spec = _tensor_outputs(out, "jvp(f, primals, tangents)")
        # the backward pass with a vector u is linear in u: its value (zeros) never shows, only its gradient along the
        # tangents
        us = [
            level.own_leaf(Tensor.zeros(o.shape, dtype=o.dtype, device=o.device)) if dtypes.is_float(o.dtype) else o
            for o in flat_out
        ]
        back = _pullback(flat_out, list(us), level.inputs)
        tangents_in = [t.cast(p.dtype) for t, p in zip(flat_t, flat_p, strict=True)]
        float_us = [u for u in us if dtypes.is_float(u.dtype)]
        pushed = iter(_pullback(back, list(tangents_in), float_us) if float_us else [])
        tangent_out = [next(pushed) if dtypes.is_float(o.dtype) else o.zeros_like() for o in flat_out]
    result = (level.released(out), level.released(tree_unflatten(tangent_out, out_spec)))
    return (*result, level.released(aux)) if has_aux else result


# ---------------------------------------------------------------------------------------------------------------------
# Jacobians and Hessians


def linearize(func: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """(func(*primals), jvp_fn), as torch.func.linearize: `jvp_fn(*tangents)` is J tangents at `primals`, the
    tangents a tree shaped as the primals (each tensor its primal's shape and dtype). Departure: uopkit has no
    forward mode to trace once, so each call of `jvp_fn` runs `func` again (`jvp`'s two backward passes).

    >>> from uopkit import Tensor
    >>> out, jvp_fn = linearize(lambda x: x * x, Tensor([1.0, 2.0]))
    >>> jvp_fn(Tensor([1.0, 0.0])).tolist()
    [2.0, 0.0]
    """
    out = func(*primals)
    flat_p, p_spec = tree_flatten(primals)

    def jvp_fn(*tangents: Any) -> Any:
        flat_t, t_spec = tree_flatten(tangents)
        if t_spec != p_spec:
            raise RuntimeError(
                f"linearize: the tangents' structure {t_spec} differs from the primals' {p_spec}: give jvp_fn one "
                "tangent per primal, as the primals were given"
            )
        for i, (p, t) in enumerate(zip(flat_p, flat_t, strict=True)):
            if isinstance(p, Tensor) and isinstance(t, Tensor) and (p.shape, p.dtype) != (t.shape, t.dtype):
                raise RuntimeError(
                    f"linearize: tangent {i} has shape {tuple(t.shape)} and dtype {t.dtype}, its primal shape "
                    f"{tuple(p.shape)} and dtype {p.dtype}; each tangent has its primal's shape and dtype"
                )
        return jvp(func, primals, tangents)[1]

    return out, jvp_fn


def _jacobian_blocks(outputs: list[Tensor], inputs: list[Tensor], chunk_size: int | None = None) -> list[list[Tensor]]:
    """[j][k]: d outputs[j] / d inputs[k], of shape outputs[j].shape + inputs[k].shape. All the rows of an output in
    one batched backward pass (`uopkit.tensor.batched_backward`: the backward graph built once and given a batch of
    one-hot vectors, `chunk_size` rows at a time where given); where that graph can't be batched, one backward pass
    per element (its vector a one-hot row, a buffer of its own: the passes differ in its values only)."""
    blocks = []
    for o in outputs:
        n = o.numel()
        rows: list[Tensor | None] | None = None
        if dtypes.is_float(o.dtype) and o.requires_grad:
            rows = vjp_rows(
                _autograd_grad, (o,), inputs, one_hot_rows(n, o.shape, o.dtype, o.device), n, True, chunk_size
            )
        if rows is None:
            blocks.append(_jacobian_by_rows(o, inputs))
            continue
        blocks.append(
            [
                g.reshape(o.shape + x.shape)
                if g is not None
                else Tensor.zeros(o.shape + x.shape, dtype=x.dtype, device=x.device)
                for g, x in zip(rows, inputs, strict=True)
            ]
        )
    return blocks


def _jacobian_by_rows(o: Tensor, inputs: list[Tensor]) -> list[Tensor]:
    # d o / d inputs[k] for each k, one backward pass per element of o
    n = o.numel()
    rows: list[list[Tensor]] = [[] for _ in inputs]
    flat = o.reshape(-1)
    for e in range(n):
        one_hot = Tensor(np.eye(1, n, e, dtype=np.float32).reshape(n), device=o.device).cast(o.dtype)
        for k, g in enumerate(_pullback([flat], [one_hot], inputs)):
            rows[k].append(g)
    return [
        Tensor.stack(r, 0).reshape(o.shape + x.shape)
        if r
        else Tensor.zeros(o.shape + x.shape, dtype=x.dtype, device=x.device)
        for r, x in zip(rows, inputs, strict=True)
    ]


def _jacobian(
    func: Callable[..., Any],
    argnums: Any,
    has_aux: bool,
    where: str,
    randomness: str | None,
    chunk_size: int | None = None,
) -> Callable:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums, picked = _differentiated(args, argnums)
        level = _Level(picked)
        with enable_grad(), drawing_rule(randomness):
            out, aux = _split_aux(func(*_with_level(args, nums, level), **kwargs), has_aux, where)
        with enable_grad():
            if has_aux:
                _check_aux(aux)
            flat_out, out_spec = _tensor_outputs(out, where)
            blocks = _jacobian_blocks(flat_out, level.inputs, chunk_size)
        jac = tree_unflatten([tree_unflatten(b, level.spec) for b in blocks], out_spec)
        return (level.released(jac), level.released(aux)) if has_aux else level.released(jac)

    return wrapper


def jacrev(
    func: Callable[..., Any],
    argnums: int | tuple[int, ...] = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
    _preallocate_and_copy: bool = False,
) -> Callable:
    """`func` made to return its Jacobian with respect to the argument(s) `argnums`, as torch.func.jacrev: for each
    output tensor (the output's tree kept) the tree of the arguments with blocks of shape output.shape + input.shape
    (with `has_aux`: (jacobian, aux)). The rows of each output's Jacobian are computed together: one backward graph
    given a batch axis (`uopkit.tensor.batched_backward`), evaluated `chunk_size` rows at a time (None: as many as
    fit a memory budget); a backward graph that can't be batched (a custom kernel on the way) falls back to one
    backward pass per output element.

    >>> from uopkit import Tensor
    >>> jacrev(lambda x: x * x)(Tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError(f"jacrev: chunk_size is None or a positive int, got {chunk_size}")
    return _jacobian(func, argnums, has_aux, "vjp(f, *primals)", None, chunk_size)


def jacfwd(
    func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """`func` made to return its Jacobian, as torch.func.jacfwd: the same results as `jacrev` (computed the same way,
    in reverse mode: uopkit has no forward mode). `randomness` is vmap's: with "error" a random draw in `func`
    raises, as torch's.

    >>> from uopkit import Tensor
    >>> jacfwd(lambda x: x.sum() * x)(Tensor([1.0, 2.0])).tolist()
    [[4.0, 1.0], [2.0, 5.0]]
    """
    check_randomness(randomness, "jacfwd")
    return _jacobian(func, argnums, has_aux, "jvp(f, primals, tangents)", randomness)


def hessian(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0) -> Callable:
    """`func` made to return its Hessian with respect to the argument(s) `argnums`, as torch.func.hessian:
    `jacfwd(jacrev(func, argnums), argnums)` (blocks of shape output.shape + input.shape + input.shape).

    >>> from uopkit import Tensor
    >>> hessian(lambda x: (x**3).sum())(Tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(func, argnums), argnums)

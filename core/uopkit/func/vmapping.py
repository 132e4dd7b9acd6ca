"""torch.func's `vmap` and `stack_module_state`.

`vmap` here is not vectorized: it calls the function once per slice of the batched inputs and stacks the results.
uopkit is lazy, so the slices' graphs are built first and realize together, when the stacked result is read (or, with
`chunk_size`, chunk by chunk); the results are torch's, and any function of tensors works (there are no batching rules
to miss), but each slice costs a Python call of the function, and of the autograd walk where it takes gradients.

>>> from uopkit import Tensor
>>> vmap(lambda row: row.sum())(Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
[3.0, 7.0]
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from uopkit.func.pytree import broadcast_prefix, tree_flatten, tree_unflatten
from uopkit.tensor.generator import Generator, random_draw_rules
from uopkit.tensor.tensor import Tensor
from uopkit.uop.ops import UOp

__all__ = ["vmap", "stack_module_state"]

_RANDOMNESS = ("error", "different", "same")


def check_randomness(randomness: str, where: str) -> None:
    """torch's RuntimeError for a `randomness` (vmap's and jacfwd's argument) that isn't one of `_RANDOMNESS`."""
    if randomness not in _RANDOMNESS:
        raise RuntimeError(f"{where}: randomness is one of {', '.join(map(repr, _RANDOMNESS))}, got {randomness!r}")


# ---------------------------------------------------------------------------------------------------------------------
# randomness: what a random draw inside a vmapped function does


class _RefuseDraws:
    """randomness="error": a draw raises, as torch's."""

    def drawing(self, generator: Generator | None) -> None:
        raise RuntimeError(
            "vmap: a random draw inside a vmap with randomness='error' (the default); pass randomness='same' or "
            "'different', or draw outside the vmapped function"
        )


class _SameDraws:
    """randomness="same": every slice draws the same numbers, as torch's one draw shared by the batch. The first draw
    from a stream records where it stood; each slice starts every recorded stream there again (`rewind`), and the
    stream ends where one slice's draws left it, as after torch's single draw."""

    def __init__(self) -> None:
        self.starts: dict[int, tuple[Generator | None, int]] = {}

    def drawing(self, generator: Generator | None) -> None:
        key = id(generator) if generator is not None else 0
        if key not in self.starts:
            self.starts[key] = (generator, generator._calls if generator is not None else Tensor._rng_counter)

    def rewind(self) -> None:
        for generator, calls in self.starts.values():
            if generator is None:
                Tensor._rng_counter = calls
            else:
                generator._calls = calls


@contextlib.contextmanager
def drawing_rule(randomness: str | None) -> Iterator[_SameDraws | None]:
    """While inside, random draws follow `randomness` ("error" raises, "same" gives a `_SameDraws` to rewind per
    slice; "different" and None change nothing), with the rules of enclosing vmaps still applying."""
    rule = _RefuseDraws() if randomness == "error" else _SameDraws() if randomness == "same" else None
    if rule is None:
        yield None
        return
    token = random_draw_rules.set((*random_draw_rules.get(), rule))
    try:
        yield rule if isinstance(rule, _SameDraws) else None
    finally:
        random_draw_rules.reset(token)


# ---------------------------------------------------------------------------------------------------------------------
# vmap


def _name(func: Any) -> str:
    return getattr(func, "__name__", repr(func))


def _batch_dims(name: str, in_dims: Any, args: tuple[Any, ...], flat: list[Any]) -> list[int | None]:
    # one normalized dimension (or None) per leaf of args, checked as torch's
    where = f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"
    if isinstance(in_dims, int):
        dims: list[Any] | None = [in_dims] * len(flat)
    elif isinstance(in_dims, tuple):
        dims = broadcast_prefix(in_dims, args)
    else:
        raise ValueError(
            f"{where}: in_dims is an int or a tuple shaped as the inputs (nested as they are), got a "
            f"{type(in_dims).__name__}"
        )
    if dims is None:
        raise ValueError(
            f"{where}: in_dims' structure {tree_flatten(in_dims)[1]} doesn't fit the inputs' {tree_flatten(args)[1]}"
        )
    out: list[int | None] = []
    for x, d in zip(flat, dims, strict=True):
        if d is None:
            out.append(None)
            continue
        if not isinstance(d, int):
            raise ValueError(f"{where}: an in_dim is an int (the mapped dimension) or None, got {d!r}")
        if not isinstance(x, Tensor):
            raise ValueError(
                f"{where}: in_dim {d} is given for a {type(x).__name__}, which has no dimension to map; give it "
                "in_dim None"
            )
        if not -x.ndim <= d < x.ndim:
            raise ValueError(
                f"{where}: in_dim {d} is out of range for an input of {x.ndim} dimensions (from -{x.ndim} to "
                f"{x.ndim - 1})"
            )
        out.append(d % x.ndim)
    return out


def _batched(t: Tensor, slices: set[UOp]) -> bool:
    # whether t was computed from a slice of a batched input (torch's BatchedTensor)
    return bool(slices) and any(u in slices for u in t.uop.toposort())


def _stacked(name: str, results: list[list[Any]], out_dims: Any, outputs: Any, slices: set[UOp]) -> list[Any]:
    # the per-slice outputs (leaf j of slice i: results[i][j]) joined along out_dims, leaf by leaf
    if out_dims is not None and not isinstance(out_dims, (int, tuple, list, dict)):
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims}): out_dims is an int, None, or tuples, lists and dicts of them "
            "(where each output gets the mapped dimension)"
        )
    spec = tree_flatten(outputs)[1]
    if spec.kind is None and isinstance(out_dims, tuple) and len(out_dims) == 1:
        # (a single output with out_dims=(d,): d, as torch's)
        out_dims = out_dims[0]
    dims = broadcast_prefix(out_dims, outputs)
    if dims is None:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims}): out_dims' structure {tree_flatten(out_dims)[1]} doesn't fit "
            f"the outputs' {spec}"
        )
    joined = []
    for j, d in enumerate(dims):
        column = [r[j] for r in results]
        if d is None:
            if any(isinstance(v, Tensor) and _batched(v, slices) for v in column):
                raise ValueError(f"vmap({name}, ...): an output with out_dim None is computed from the mapped inputs")
            joined.append(column[0])
            continue
        for v in column:
            if not isinstance(v, Tensor):
                raise ValueError(
                    f"vmap({name}, ...): a mapped output is a {type(v).__name__}, not a tensor (give it out_dim None)"
                )
        ndim = column[0].ndim + 1
        if not isinstance(d, int) or not -ndim <= d < ndim:
            raise IndexError(f"vmap({name}, ...): out_dim {d} is out of range for outputs of {ndim} dimensions")
        joined.append(Tensor.stack(column, d))
    return joined


def vmap(
    func: Callable[..., Any],
    in_dims: int | tuple[Any, ...] = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable[..., Any]:
    """`func` mapped over a dimension of its inputs, as torch.func.vmap: `in_dims` (an int for every input, or a tuple
    with one entry per positional argument: an int, None for an argument not mapped over, or a tree of them matching
    the argument's tree; negative dims count from the end) picks the dimension of each input, all of one size; the
    outputs (a tensor or a tree of them) are stacked at `out_dims` (an int, or a tree of them; None for an output
    that doesn't depend on the mapped inputs, returned once). Keyword arguments are passed on unmapped.

    `randomness`: "error" makes a random draw in `func` raise, "different" gives each slice its own numbers, "same"
    gives every slice the same numbers, as torch's. `chunk_size`: the slices' results are realized `chunk_size`
    slices at a time (less memory held at once).

    Not vectorized: `func` runs once per slice on tensors with the mapped dimension removed, and the results are
    stacked lazily, so the slices' graphs realize together. vmap nests and composes with the other transforms
    (`vmap(grad(f))` gives per-sample gradients, `vmap(functional_call...)` over `stack_module_state`'s tensors an
    ensemble's outputs).

    >>> from uopkit import Tensor
    >>> vmap(lambda x, y: x * y, in_dims=(0, None))(Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([10.0, 100.0])).tolist()
    [[10.0, 200.0], [30.0, 400.0]]
    """
    check_randomness(randomness, "vmap")
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError(f"vmap: chunk_size is None or a positive int, got {chunk_size}")

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = _name(func)
        if not args:
            raise ValueError(f"vmap({name}): called with no inputs; vmap maps a function over inputs it is given")
        flat, spec = tree_flatten(args)
        dims = _batch_dims(name, in_dims, args, flat)
        sizes = [x.shape[d] for x, d in zip(flat, dims, strict=True) if d is not None]
        if not sizes:
            raise ValueError("vmap: no input has a mapped dimension (every in_dim is None)")
        if any(s != sizes[0] for s in sizes):
            raise ValueError(f"vmap: the inputs' mapped dimensions differ in size: {sizes}")
        batch = sizes[0]
        slices: set[UOp] = set()

        def sliced(i: int) -> tuple[Any, ...]:
            leaves = []
            for x, d in zip(flat, dims, strict=True):
                if d is None:
                    leaves.append(x)
                    continue
                if batch == 0:
                    # (an empty batch: func runs once on zeros, to learn the outputs' shapes)
                    x = Tensor.zeros(x.shape[:d] + x.shape[d + 1 :], dtype=x.dtype, device=x.device)
                else:
                    x = x.select(d, i)
                slices.add(x.uop)
                leaves.append(x)
            return tree_unflatten(leaves, spec)

        results: list[list[Any]] = []
        outputs: Any = None
        with drawing_rule(randomness) as same:
            step = chunk_size or max(batch, 1)
            for start in range(0, max(batch, 1), step):
                chunk: list[Tensor] = []
                for i in range(start, min(start + step, max(batch, 1))):
                    if same is not None:
                        same.rewind()
                    out = func(*sliced(i), **kwargs)
                    leaves, out_spec = tree_flatten(out)
                    if outputs is None:
                        outputs, first_spec = out, out_spec
                    elif out_spec != first_spec:
                        raise ValueError(
                            f"vmap({name}, ...): `{name}` returned outputs of different structures for different "
                            f"slices ({first_spec} and {out_spec}): uopkit's vmap runs it once per slice"
                        )
                    results.append(leaves)
                    chunk.extend(v for v in leaves if isinstance(v, Tensor))
                if chunk_size is not None and chunk:
                    Tensor.realize(*chunk)
        joined = _stacked(name, results, out_dims, outputs, slices)
        if batch == 0:
            joined = [_emptied(v, d) for v, d in zip(joined, broadcast_prefix(out_dims, outputs) or [], strict=False)]
        return tree_unflatten(joined, first_spec)

    return wrapper


def _emptied(v: Any, d: Any) -> Any:
    # the stack of one slice's output, for an empty batch: its mapped dimension of size 0
    if d is None or not isinstance(v, Tensor):
        return v
    return v.narrow(d, 0, 0)


# ---------------------------------------------------------------------------------------------------------------------
# model ensembles


def _stacked_leaf(tensors: list[Tensor], name: str) -> Tensor:
    flags = [t.requires_grad for t in tensors]
    if any(flags) and not all(flags):
        raise RuntimeError(f"stack_module_state: {name} requires grad in some models and not in others")
    out = Tensor.stack(tensors)
    return out.detach().requires_grad_() if all(flags) else out.detach()


def stack_module_state(models: Sequence[Any]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(parameters, buffers) of `models` (modules of one class, all in one training mode), each name's
    tensors stacked along a new dimension 0, as torch.func.stack_module_state: the parameters are new leaves (they
    require grad where the models' do; an optimizer can take them), unrelated to the models' own. For ensembling
    with `vmap` over `functional_call`.

    >>> from uopkit.nn import Linear
    >>> params, buffers = stack_module_state([Linear(3, 2), Linear(3, 2)])
    >>> params["weight"].shape, params["weight"].requires_grad
    ((2, 2, 3), True)
    """
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: no models given")
    if len({m.training for m in models}) > 1:
        raise RuntimeError("stack_module_state: the models mix training and eval mode")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: the models are of different classes")
    all_params = [dict(m.named_parameters()) for m in models]
    all_buffers = [dict(m.named_buffers()) for m in models]
    params = {k: _stacked_leaf([p[k] for p in all_params], k) for k in all_params[0]}
    buffers = {k: _stacked_leaf([b[k] for b in all_buffers], k) for k in all_buffers[0]}
    return params, buffers

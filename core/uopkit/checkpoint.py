"""torch.utils.checkpoint for uopkit (as `uopkit.data` is torch.utils.data): `checkpoint` and `checkpoint_sequential`
with torch's signatures, so that models written with activation checkpointing run unchanged.

They only call the function. Activation checkpointing trades memory for compute in an eager autograd, which keeps each
op's saved tensors alive until backward; uopkit records no saved tensors: the forward is a lazy graph, `backward()`
builds the gradient as more graph, and the scheduler decides, when everything is realized, which intermediate values are
stored and which are computed again. So there is nothing to drop and recompute here, and the values and gradients are
those of calling the function directly.

>>> from uopkit import Tensor
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> y = checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False)
>>> _ = y.backward(); x.grad.tolist()
[2.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(
    function: Callable[..., Any],
    *args: Any,
    use_reentrant: bool | None = None,
    context_fn: Callable[[], Any] | None = None,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    **kwargs: Any,
) -> Any:
    """`function(*args, **kwargs)`, as torch.utils.checkpoint.checkpoint computes it (see the module's docstring: no
    recomputation is needed, so none happens).

    The arguments are torch's: `use_reentrant` (torch's default, when None, is True), `preserve_rng_state` (by name),
    `context_fn`, `determinism_check`, `debug` and `early_stop` are accepted and change nothing. As torch's, keyword
    arguments for `function` are refused unless `use_reentrant=False`. Departures: no warning when `use_reentrant` is
    left out, and with `use_reentrant=True` gradients reach the parameters `function` uses even when no input requires
    a gradient (torch's reentrant variant gives them none, with a warning).
    """
    kwargs.pop("preserve_rng_state", None)
    if kwargs and use_reentrant is not False:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    return function(*args, **kwargs)


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | Any,
    segments: int,
    input: Any,
    use_reentrant: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Run the functions (a list, or an `nn.Sequential`'s layers) one after the other on `input`, as
    torch.utils.checkpoint.checkpoint_sequential computes it; `segments` (how many checkpointed chunks torch makes) and
    `preserve_rng_state` are accepted and change nothing, any other keyword raises ValueError, as torch's.

    >>> from uopkit import Tensor
    >>> checkpoint_sequential([lambda t: t + 1, lambda t: t * 3], 2, Tensor([1.0]), use_reentrant=False).tolist()
    [6.0]
    """
    kwargs.pop("preserve_rng_state", None)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    for f in list(functions):
        input = f(input)
    return input

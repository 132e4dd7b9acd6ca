"""torch.random's names: the global random stream's seed and state, and `fork_rng`, which runs a block of code with
the stream's state saved before and restored after (compared with torch in tests/test_random_generator.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from uopkit.tensor import Generator, Tensor

__all__ = ["Generator", "fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed", "set_rng_state"]

manual_seed = Tensor.manual_seed
seed = Tensor.seed
initial_seed = Tensor.initial_seed
get_rng_state = Tensor.get_rng_state
set_rng_state = Tensor.set_rng_state


@contextlib.contextmanager
def fork_rng(
    devices: Any = None,
    enabled: bool = True,
    _caller: str = "fork_rng",
    _devices_kw: str = "devices",
    device_type: Any = None,
) -> Iterator[None]:
    """Run the `with` block on a fork of the global random stream, as torch.random.fork_rng: the stream's state is
    saved on entry and restored on exit (an exception too), so draws inside don't change what is drawn after.
    uopkit has one stream for every device, so `devices` and `device_type` select nothing; `enabled=False` forks
    nothing. A `uopkit.Generator`'s own stream is not forked (as torch's, which forks the default generators only).

    >>> Tensor.manual_seed(0); a = Tensor.rand(2).tolist()
    >>> Tensor.manual_seed(0)
    >>> with fork_rng(): _ = Tensor.rand(5)
    >>> Tensor.rand(2).tolist() == a
    True
    """
    if not enabled:
        yield
        return
    state = Tensor.get_rng_state()
    try:
        yield
    finally:
        Tensor.set_rng_state(state)

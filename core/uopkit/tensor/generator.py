"""uopkit.Generator: a random stream of its own, with torch.Generator's API.

Every random draw (`Tensor.rand`, `randn`, `randint`, `randperm`, `multinomial`, `bernoulli`, the in-place `uniform_`,
`normal_`, ... and nn.init) takes one fresh numpy generator from a stream: Philox keyed by the stream's seed, started
at the stream's call number. The global stream is `Tensor.manual_seed`'s; a `Generator` passed as `generator=` is one
of the same kind with a seed and a call number of its own, so its draws are reproducible from its seed and neither
stream moves the other. A Generator and the global stream seeded alike give the same draws, as torch's do.

>>> from uopkit import Tensor
>>> g = Generator().manual_seed(3)
>>> a = Tensor.rand(2, generator=g).tolist()
>>> a == Tensor.rand(2, generator=Generator().manual_seed(3)).tolist()
True
"""

from __future__ import annotations

import operator
import secrets
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.tensor.support import ArgumentError, _canonical_device

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor
else:
    # bound by uopkit.tensor.tensor once the class exists (it imports this module, through creation)
    Tensor = None

# what a random draw must do besides drawing, set by the vmaps it runs inside (uopkit.func.vmap's randomness): each
# rule's `drawing(generator)` is called before the draw (None: the global stream), and may raise or note the stream
random_draw_rules: ContextVar[tuple[Any, ...]] = ContextVar("random_draw_rules", default=())

# torch's seeds: 64 bits, a negative one taken modulo 2**64 (Generator().manual_seed(-1).initial_seed() is 2**64-1)
_SEED_BITS = 64


def _seed_value(seed: Any, where: str) -> int:
    """`seed` as the non-negative Philox key torch's manual_seed would keep."""
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(f"{where}: seed must be an int, got {type(seed).__name__}") from None
    if not -(2 ** (_SEED_BITS - 1)) <= value < 2**_SEED_BITS:
        raise ArgumentError(f"{where}: seed {value} is out of range [-2**63, 2**64)")
    return value % 2**_SEED_BITS


def _philox(seed: int, call: int) -> np.random.Generator:
    # Philox keyed by the seed, each call from its own stretch of the counter: reproducible for a given seed and call
    # order. (The call number is the counter's top 64 bits: Philox counts up from the bottom, so a call numbered in
    # the low bits drew the previous call's numbers again, one block on.)
    return np.random.Generator(np.random.Philox(key=seed, counter=call << 192))


def stream_state(seed: int, calls: int) -> Tensor:
    """A stream's state as a uint8 Tensor of 16 bytes: its seed and its call number (8 bytes each)."""
    return Tensor(np.array([seed, calls], dtype=np.uint64).view(np.uint8))


def read_stream_state(new_state: Any, where: str, getter: str) -> tuple[int, int]:
    """(seed, call number) from a state `stream_state` made; anything else (a torch state of 5056 bytes) raises."""
    if not hasattr(new_state, "numpy"):
        raise TypeError(f"{where}: expected the uint8 tensor {getter} returns, got {type(new_state).__name__}")
    state = np.ascontiguousarray(new_state.numpy())
    if state.dtype != np.uint8 or state.shape != (16,):
        raise ArgumentError(
            f"{where}: expected the uint8 tensor of 16 bytes {getter} returns, got {state.dtype} of shape "
            f"{state.shape} (a torch RNG state can't seed uopkit's stream)"
        )
    seed, calls = (int(v) for v in state.view(np.uint64))
    return seed, calls


class Generator:
    """A random stream of its own for the `generator=` argument of the random functions (torch.Generator's API):
    seeded with `manual_seed`, its draws don't depend on `Tensor.manual_seed`'s stream and don't move it. `device` is
    kept for torch's API only: every stream draws on the host, whatever the device of the tensors it fills.

    >>> g = Generator().manual_seed(0)
    >>> g.initial_seed(), g.device
    (0, 'CPU')
    """

    __slots__ = ("device", "_seed", "_calls")

    def __init__(self, device: str | None = None) -> None:
        self.device = _canonical_device(device)
        # (the global stream's default seed, so a fresh Generator draws what an unseeded program draws, as torch's)
        self._seed, self._calls = 0, 0

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from `seed` (an int in [-2**63, 2**64); negative ones taken modulo 2**64, as torch);
        returns the generator itself, so `g = Generator().manual_seed(0)` reads as torch's."""
        self._seed, self._calls = _seed_value(seed, "Generator.manual_seed"), 0
        return self

    def seed(self) -> int:
        """Restart the stream from a fresh non-deterministic seed and return that seed (torch.Generator.seed)."""
        self.manual_seed(secrets.randbits(_SEED_BITS))
        return self._seed

    def initial_seed(self) -> int:
        """The seed the stream was last started from."""
        return self._seed

    def get_state(self) -> Tensor:
        """The stream's state as a uint8 Tensor (its seed and call number, 8 bytes each), for `set_state`.

        >>> g = Generator().manual_seed(1); s = g.get_state(); a = Tensor.rand(3, generator=g).tolist()
        >>> g.set_state(s) is g, Tensor.rand(3, generator=g).tolist() == a
        (True, True)
        """
        return stream_state(self._seed, self._calls)

    def set_state(self, new_state: Tensor) -> Generator:
        """Go back to a state `get_state` returned; returns the generator itself, as torch's."""
        self._seed, self._calls = read_stream_state(new_state, "Generator.set_state", "get_state")
        return self

    def _next(self) -> np.random.Generator:
        # the next stretch of this stream (Tensor._rng takes the global stream's the same way)
        self._calls += 1
        return _philox(self._seed, self._calls)

    def __repr__(self) -> str:
        return f"<uopkit.Generator device={self.device!r} seed={self._seed}>"

"""torch.quasirandom's `SobolEngine`: Sobol' low-discrepancy points in [0, 1)^d, the collocation points of
physics-informed networks and the base samples of quasi-Monte Carlo.

The points are built on the host from S. Joe and F. Y. Kuo's direction numbers (`sobol_directions.py`) in Gray-code
order, 30 bits per coordinate, as torch's: unscrambled, point i of dimension d equals torch's bit for bit. With
`scramble=True` the direction numbers get a random linear matrix scramble and a random digital shift drawn from a
`uopkit.Generator` seeded with `seed`: the points are a scrambled Sobol' sequence with the same balance properties, but
not torch's numbers (uopkit's random streams are its own, docs/semantics.md, "Random numbers"). Departure: the
direction numbers cover the first 1111 dimensions (torch's table 21201); a larger `dimension` raises a ValueError.

>>> from uopkit.quasirandom import SobolEngine
>>> SobolEngine(2).draw(4).tolist()
[[0.0, 0.0], [0.5, 0.5], [0.75, 0.25], [0.25, 0.75]]
"""

from __future__ import annotations

import functools

import numpy as np

from uopkit.dtype import DType
from uopkit.sobol_directions import DIRECTIONS
from uopkit.tensor import Generator, Tensor

__all__ = ["SobolEngine"]


@functools.cache
def _table() -> tuple[tuple[int, tuple[int, ...]], ...]:
    rows = []
    for line in DIRECTIONS.splitlines():
        poly, *m = (int(v) for v in line.split())
        rows.append((poly, tuple(m)))
    return tuple(rows)


def _directions(dimension: int, bits: int) -> np.ndarray:
    """(dimension, bits) int64: V[d, j] = m_j << (bits - 1 - j), the m_j continued past the table's initial ones by
    the recurrence of dimension d's primitive polynomial (Bratley and Fox); dimension 0 is van der Corput's
    (m_j = 1)."""
    out = np.zeros((dimension, bits), np.int64)
    for d in range(dimension):
        poly, init = _table()[d]
        degree = poly.bit_length() - 1
        m = [1] * bits if d == 0 else list(init[:bits])
        for j in range(len(m), bits):
            # m_j = 2 a_1 m_{j-1} ^ 4 a_2 m_{j-2} ^ ... ^ 2^s m_{j-s} ^ m_{j-s}, a_k the polynomial's inner coefficients
            new = m[j - degree] ^ (m[j - degree] << degree)
            for k in range(1, degree):
                if (poly >> (degree - k)) & 1:
                    new ^= m[j - k] << k
            m.append(new)
        out[d] = [m[j] << (bits - 1 - j) for j in range(bits)]
    return out


class SobolEngine:
    """torch.quasirandom.SobolEngine(dimension, scramble=False, seed=None): draws the points of a Sobol' sequence
    in [0, 1)^dimension one run at a time (`draw`, `draw_base2`), continuing where the last draw stopped; `reset` starts
    over and `fast_forward(n)` skips n points. Unscrambled points equal torch's; scrambled ones are drawn from
    uopkit's own random stream (see the module's docstring), the same for the same `seed`."""

    MAXBIT = 30
    MAXDIM = 1111

    def __init__(self, dimension: int, scramble: bool = False, seed: int | None = None) -> None:
        if not 1 <= dimension <= self.MAXDIM:
            raise ValueError(
                f"SobolEngine: dimension is {dimension}; uopkit's direction numbers cover 1 to {self.MAXDIM} "
                "dimensions (torch's 21201): draw fewer coordinates per point"
            )
        self.dimension, self.scramble, self.seed = dimension, scramble, seed
        self._directions = _directions(dimension, self.MAXBIT)
        self._shift = np.zeros(dimension, np.int64)
        if scramble:
            self._scramble()
        self.reset()

    def _scramble(self) -> None:
        g = Generator()
        if self.seed is None:
            g.seed()
        else:
            g.manual_seed(self.seed)
        bits, dim = self.MAXBIT, self.dimension
        draws = Tensor.randint(0, 2, (dim, bits * bits + bits), generator=g).numpy().astype(np.int64)
        # unit lower triangular matrices over GF(2), rows and columns ordered from the most significant bit: digit k
        # of a scrambled direction number mixes digits 0..k of the original, which keeps the (t, s)-net property
        lower = np.tril(draws[:, : bits * bits].reshape(dim, bits, bits), -1) | np.eye(bits, dtype=np.int64)
        weights = np.int64(1) << np.arange(bits - 1, -1, -1, dtype=np.int64)  # digit k's value, most significant first
        digits = (self._directions[:, None, :] & weights[None, :, None]) != 0  # (dim, digit, j)
        scrambled = np.einsum("dkl,dlj->dkj", lower, digits.astype(np.int64)) & 1
        self._directions = np.einsum("dkj,k->dj", scrambled, weights)
        self._shift = draws[:, bits * bits :] @ weights

    def _points(self, start: int, n: int) -> np.ndarray:
        # point i is the shift XOR the direction numbers of the bits set in i's Gray code
        index = np.arange(start, start + n, dtype=np.int64)
        gray = index ^ (index >> 1)
        out = np.broadcast_to(self._shift, (n, self.dimension)).copy()
        for j in range(int(gray.max()).bit_length() if n else 0):
            sel = ((gray >> j) & 1).astype(bool)
            out[sel] ^= self._directions[:, j]
        return out

    def draw(self, n: int = 1, out: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """The next n points as an (n, dimension) tensor of `dtype` (the default float dtype unless given);
        `out` takes the result as torch's does (resized to it and overwritten)."""
        if n < 0:
            raise ValueError(f"SobolEngine.draw: n is {n}; draw a count of points of 0 or more")
        ints = self._points(self.num_generated, n)
        if n:
            self.quasi = Tensor(ints[-1])
        self.num_generated += n
        result = Tensor(ints.astype(np.float64) * 2.0**-self.MAXBIT, dtype=dtype or Tensor.get_default_dtype())
        if out is not None:
            out.resize_(*result.shape).copy_(result)
            return out
        return result

    def draw_base2(self, m: int, out: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """The next 2**m points, as `draw`; the points drawn in all must stay a power of 2 (the sequence's balance
        properties hold for such runs), else a ValueError."""
        n = 2**m
        total = self.num_generated + n
        if total & (total - 1):
            raise ValueError(
                f"SobolEngine.draw_base2: {self.num_generated} points drawn before and {n} now make {total}, not a "
                "power of 2, which Sobol' points need to stay balanced; use draw(n) to take them anyway"
            )
        return self.draw(n, out, dtype)

    def reset(self) -> SobolEngine:
        """Start the sequence over from its first point; returns the engine."""
        self.quasi = Tensor(self._shift.copy())
        self.num_generated = 0
        return self

    def fast_forward(self, n: int) -> SobolEngine:
        """Skip the next n points; returns the engine."""
        if n:
            self.quasi = Tensor(self._points(self.num_generated + n - 1, 1)[0])
        self.num_generated += n
        return self

    def __repr__(self) -> str:
        fmt = [f"dimension={self.dimension}"]
        if self.scramble:
            fmt.append("scramble=True")
        if self.seed is not None:
            fmt.append(f"seed={self.seed}")
        return f"{type(self).__name__}({', '.join(fmt)})"

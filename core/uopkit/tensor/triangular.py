"""Blocked triangular solves and the blocked Cholesky factorization: the work in matmuls over blocks of BLOCK rows,
so the kernels (and the Python that builds them) grow with n / BLOCK instead of n.

A triangular solve substitutes a block at a time, halving recursively: the top half, the bottom's update by one
matmul, the bottom half; a diagonal block row by row, in one elementwise kernel (no inverse: see _substitute_block).
Cholesky pads the matrix to a multiple of BLOCK and factors a panel of BLOCK columns per step (LAPACK's potf2 on the
panel, a column per kernel), then updates the trailing matrix with one matmul (potrf's syrk). Every step is the same
graph: the matrix's rows and columns rotate by BLOCK so that the next panel is always first (and the finished ones
last), so the panels of every n that pads alike run the same few kernels, compiled once and launched again
(`rounds.repeated`; a panel per graph of its own compiled for tens of seconds per n). A solve pads likewise and
stores the padded matrix, so that its kernels too are shared by the sizes that pad alike. Both differentiate by
their own rules (torch's formulas, each a pair of triangular solves), not through their steps; so does a Cholesky
solve, a pair of them in a row (torch's rule, whose factor gradient is not cut to the triangle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.gradient import set_gradient
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.replay import replay_call
from uopkit.tensor.rounds import repeated
from uopkit.tensor.support import tied_to_empty
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# columns of a block of Cholesky's: a column per step on the block's rows, then one matmul updates the rest
BLOCK = 16
# rows of a triangular solve's diagonal blocks, each substituted row by row in one kernel: its Python grows with the
# square of it and the matmuls between blocks with n over it (at n = 256, 2 and 8 built slower than 4)
SOLVE_BLOCK = 4


def _part(t: Tensor, rows: tuple[int, int], cols: tuple[int, int]) -> Tensor:
    """Rows [rows) and columns [cols) of matrices `t` (...,  m, n)."""
    return t.shrink((None,) * (t.ndim - 2) + (rows, cols))


def _placed(t: Tensor, top: int, bottom: int, left: int = 0, right: int = 0) -> Tensor:
    """Matrices `t` with zero rows above and below, zero columns left and right."""
    return t.pad(((0, 0),) * (t.ndim - 2) + ((top, bottom), (left, right)))


def _masks(n: int, device: str) -> tuple[Tensor, Tensor]:
    """Row and column indices of an n x n matrix, (n, 1) and (n,) int32: compared, they make triangle masks."""
    index = Tensor.arange(n, dtype=dtypes.int32, device=device)
    return index.unsqueeze(-1), index


def _lower(t: Tensor, strict: bool = False) -> Tensor:
    """The lower triangle of matrices `t` (`strict`: without the diagonal), zeros elsewhere."""
    rows, cols = _masks(t.shape[-1], t.device)
    return ((rows > cols) if strict else (rows >= cols)).where(t, 0)


def _block_size(n: int) -> int:
    # the smallest power of two >= n, at most SOLVE_BLOCK
    return min(SOLVE_BLOCK, 1 << max(0, (n - 1).bit_length()))


def _substitute_block(t: Tensor, y: Tensor, at: int, unit: bool) -> Tensor:
    """x with d x = y for the diagonal block d of lower triangular `t` at row and column `at`, `y` (..., b, k): forward
    substitution a row at a time, each row's products subtracted and then divided by its pivot (torch's order, so a
    zero or non-finite pivot or entry of y gives torch's inf and NaN, and rows above it stay as they are).
    Elementwise, so one kernel."""
    b, width = y.shape[-2], (0, y.shape[-1])
    done: list[Tensor] = []
    for i in range(b):
        row = _part(y, (i, i + 1), width)
        for j, x in enumerate(done):
            row = row - _part(t, (at + i, at + i + 1), (at + j, at + j + 1)) * x
        done.append(row if unit else row / _part(t, (at + i, at + i + 1), (at + i, at + i + 1)))
    return _summed([_placed(x, i, b - i - 1) for i, x in enumerate(done)])


def _substitute(t: Tensor, y: Tensor, lo: int, hi: int, b: int, unit: bool) -> Tensor:
    """x with t x = y for the rows of block rows lo..hi of lower triangular `t` (..., nb b, nb b); `y` (..., (hi - lo)
    b, k) holds those rows."""
    if hi - lo == 1:
        return _substitute_block(t, y, lo * b, unit)
    mid = (lo + hi) // 2
    top, rows = (mid - lo) * b, (hi - lo) * b
    x1 = _substitute(t, _part(y, (0, top), (0, y.shape[-1])), lo, mid, b, unit)
    rest = _part(y, (top, rows), (0, y.shape[-1])) - _part(t, (mid * b, hi * b), (lo * b, mid * b)) @ x1
    x2 = _substitute(t, rest, mid, hi, b, unit)
    return _placed(x1, 0, rows - top) + _placed(x2, top, 0)


def _solve(t: Tensor, y: Tensor, upper: bool, unit: bool) -> Tensor:
    """x with t @ x = y, `t` (..., n, n) triangular (its other triangle not read; `unit`: nor its diagonal, taken as
    ones), `y` (..., n, k), both with the same batch axes and dtype."""
    if upper:
        # (reversed rows and columns, an upper triangle is a lower one)
        return _solve(t.flip(-2, -1), y.flip(-2), False, unit).flip(-2)
    n = t.shape[-1]
    b = _block_size(n)
    # (past one block, padded to a multiple of Cholesky's BLOCK: the sizes n that pad alike share their kernels, so a
    # loop over a growing n compiles a new set once per BLOCK sizes, not per size)
    size = b if n <= b else -(-n // BLOCK) * BLOCK
    if size != n:
        # a whole last block: the identity past row n, whose rows solve to the zeros padded onto y
        rows, cols = _masks(size, t.device)
        # (stored: read through the padding, every kernel of the solve would be code of its own for this n)
        t = (_placed(t, 0, size - n, 0, size - n) + ((rows == cols) & (rows >= n)).cast(t.dtype)).contiguous()
        y = _placed(y, 0, size - n).contiguous()
    # (recorded once per shape and replayed: its many small nodes built op by op cost more Python than they run)
    x = replay_call(_substitute, (t, y), 0, size // b, b, unit)
    return _part(x, (0, n), (0, x.shape[-1])) if size != n else x


def _summed(pieces: list[Tensor]) -> Tensor:
    # padded pieces added pairwise: a balanced tree, not a chain as deep as the pieces are many
    while len(pieces) > 1:
        pieces = [pieces[i] + pieces[i + 1] if i + 1 < len(pieces) else pieces[i] for i in range(0, len(pieces), 2)]
    return pieces[0]


def _noop(x: Tensor) -> UOp:
    # a node of x's own to carry a gradient rule: the rule then holds x's graph, not the node (see set_gradient)
    return UOp(Ops.RESHAPE, x.dtype, (x.uop,), x.shape)


def triangular_solve(t: Tensor, y: Tensor, upper: bool, unit: bool) -> Tensor:
    """x with t @ x = y for triangular `t` (..., n, n) and `y` (..., n, k), same batch axes and dtype (t's other
    triangle is not read; `unit`: nor its diagonal, taken as ones). Its gradient is torch's: g_y = t^-T g solves the
    transposed system, g_t = -g_y x^T on t's triangle."""
    if t.shape[-1] == 0:
        return tied_to_empty(y, t)
    x = _solve(t, y, upper, unit)
    t_uop, x_uop = t.uop, x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        a = Tensor(t_uop)
        g_y = triangular_solve(a.transpose(-1, -2), Tensor(g), not upper, unit)
        g_t = None
        if wanted[0]:
            outer = -(g_y @ Tensor(x_uop).transpose(-1, -2))
            rows, cols = _masks(a.shape[-1], a.device)
            on = (rows < cols if unit else rows <= cols) if upper else (rows > cols if unit else rows >= cols)
            g_t = on.where(outer, 0).uop
        return g_t, g_y.uop

    node = _noop(x)
    set_gradient(node, (t.uop, y.uop), rule)
    return Tensor(node)


def cholesky_solve(factor: Tensor, y: Tensor, upper: bool) -> Tensor:
    """x with A @ x = y for A = L L^T given its Cholesky factor `factor` (..., n, n) (lower L; `upper`: U with
    A = U^T U, its other triangle not read) and `y` (..., n, k), same batch axes and dtype: two triangular solves. Its
    gradient is torch's: g_y = A^-1 g, and the factor's from dA = dL L^T + L dL^T, -(g_y x^T + x g_y^T) L (for U,
    U times it), on the whole matrix (torch's is not cut to the factor's triangle either)."""
    low = factor.transpose(-1, -2) if upper else factor
    x = triangular_solve(low.transpose(-1, -2), triangular_solve(low, y, False, False), True, False)
    factor_uop, x_uop = factor.uop, x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        f = Tensor(factor_uop)
        g_y = cholesky_solve(f, Tensor(g), upper)
        g_factor = None
        if wanted[0]:
            outer = g_y @ Tensor(x_uop).transpose(-1, -2)
            both = outer + outer.transpose(-1, -2)
            g_factor = (-(f @ both) if upper else -(both @ f)).uop
        return g_factor, g_y.uop

    node = _noop(x)
    set_gradient(node, (factor.uop, y.uop), rule)
    return Tensor(node)


def _column_step(p: Tensor) -> Tensor:
    """One column of the factorization of a panel p (..., m, w), m >= w, whose top w x w block is symmetric positive
    definite (the trailing updates applied): potf2's step, right-looking, so the rows below the block are solved by
    substitution (as accurate as the column algorithm). The panel is kept as `_cholesky_step` keeps the matrix: the
    block's lower triangle (zeros above), the finished columns last, its rows and columns rotated by one per step,
    the rows below the block in place. A pivot that is not > 0 gets a diagonal entry that is not either (its root:
    0 or NaN) and a zero column, so that no NaN reaches the finished columns."""
    m, w = p.shape[-2:]
    pivot = _part(p, (0, 1), (0, 1))
    # (rsqrt rounds less exactly: 2-3x the errors on an ill-conditioned matrix)
    scale = (pivot > 0).where(pivot.sqrt().reciprocal(), 0)
    column = _part(p, (1, m), (0, 1)) * scale
    rest = _part(p, (1, m), (1, w))
    # (in the block, the lower triangle only: its finished rows keep their zeros above the diagonal; every row below
    # it is at or below the diagonal)
    rows = Tensor.arange(m - 1, dtype=dtypes.int32, device=p.device).unsqueeze(-1)
    cols = Tensor.arange(w - 1, dtype=dtypes.int32, device=p.device)
    rest = (rows >= cols).where(rest - column * _part(column, (0, w - 1), (0, 1)).transpose(-1, -2), rest)
    done = rest.cat(column, dim=-1)
    finished = _part(p, (0, 1), (1, w)).cat(pivot.sqrt(), dim=-1)
    return _part(done, (0, w - 1), (0, w)).cat(finished, _part(done, (w - 1, m - 1), (0, w)), dim=-2)


def _cholesky_step(z: Tensor) -> Tensor:
    """One panel of `_cholesky_padded` on z (..., N, N), N a multiple of BLOCK: the first BLOCK columns factored a
    column per kernel (the same code for each), the trailing matrix's lower triangle updated by one matmul, then the
    rows and columns rotated by BLOCK so that the next panel comes first and this one goes last.

    z holds the lower triangles (zeros above): of the part still to factor, first, and of L's finished columns, last;
    the finished rows' entries in the other columns are upper-triangle ones, zeros, so they take no update (their
    rows of the panel stay zeros) and no step needs to know which one it is."""
    n = z.shape[-1]
    panel = _part(z, (0, n), (0, BLOCK))
    for _ in range(BLOCK):
        panel = _column_step(panel).contiguous()
    if n == BLOCK:
        return panel
    below = _part(panel, (BLOCK, n), (0, BLOCK))
    rest = _part(z, (BLOCK, n), (BLOCK, n))
    rows, cols = _masks(n - BLOCK, z.device)
    rest = (rows >= cols).where(rest - below @ below.transpose(-1, -2), rest)
    top = _part(z, (0, BLOCK), (BLOCK, n)).cat(_part(panel, (0, BLOCK), (0, BLOCK)), dim=-1)
    return rest.cat(below, dim=-1).cat(top, dim=-2)


def _cholesky_padded(s: Tensor, graph: bool) -> Tensor:
    """L with L L^T = s (..., n, n): s padded to a multiple of BLOCK (the identity past row n), then factored a panel
    per step (`_cholesky_step`, the same graph for every step of every n with the same padded size: its kernels are
    compiled once and launched again, `rounds.repeated`). `graph`: each step's graph is built (a gradient needs it)."""
    n = s.shape[-1]
    size = -(-n // BLOCK) * BLOCK
    if size != n:
        rows, cols = _masks(size, s.device)
        s = _placed(s, 0, size - n, 0, size - n) + ((rows == cols) & (rows >= n)).cast(s.dtype)
    low = repeated(_cholesky_step, _lower(s), size // BLOCK, graph=graph)
    # (a NaN pivot's column may leave NaNs above the diagonal)
    low = _lower(low)
    return _part(low, (0, n), (0, n)) if size != n else low


def cholesky_gradient(low: Tensor, g: Tensor) -> Tensor:
    """The gradient of s for the gradient `g` of its Cholesky factor `low` (torch's): L^-T Phi(L^T g) L^-1, Phi the
    lower triangle with the diagonal halved, made symmetric."""
    upper = low.transpose(-1, -2)
    inner = upper @ g
    # the lower triangle with half the diagonal, mirrored: (tril(X) + tril(X, -1)^T) / 2
    middle = (_lower(inner) + _lower(inner, strict=True).transpose(-1, -2)) / 2
    half = triangular_solve(upper, middle, upper=True, unit=False)
    return triangular_solve(upper, half.transpose(-1, -2), upper=True, unit=False).transpose(-1, -2)


def cholesky_lower(s: Tensor) -> tuple[Tensor, Tensor]:
    """L with L L^T = s for symmetric positive-definite `s` (..., n, n), and the order of the first leading minor that
    is not positive definite (int32 (...), 0 where none is): the first column whose pivot is not > 0 (NaN included)
    gets a diagonal entry that is not > 0 either (sqrt of it: 0 or NaN), and the ones after it are not read.
    Its gradient is torch's: L^-T Phi(L^T g) L^-1, Phi the lower triangle with the diagonal halved, made symmetric."""
    n = s.shape[-1]
    if n == 0:
        return s, Tensor.zeros(s.shape[:-2], dtype=dtypes.int32, device=s.device)
    low = _cholesky_padded(s, is_grad_enabled() and s.requires_grad)
    low_uop = low.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
        return (cholesky_gradient(Tensor(low_uop), Tensor(g)).uop,)

    node = _noop(low)
    set_gradient(node, (s.uop,), rule)
    out = Tensor(node)
    positive = out.diagonal(dim1=-2, dim2=-1) > 0
    index = Tensor.arange(1, n + 1, dtype=dtypes.int32, device=s.device)
    first = positive.where(n + 1, index).min(axis=-1)
    return out, (first == n + 1).where(0, first).cast(dtypes.int32)

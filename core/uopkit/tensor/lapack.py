"""The dense linear algebra of a device whose buffers are host memory (`Allocator.host_memory`: the CPU backend)
computed on the host by numpy's LAPACK: `solve`, `inverse`, `det`, `slogdet`, `eigh`, `svd`, `cholesky` and `qr`
(and what is built on them: `pinv`, `lstsq`, `matrix_rank`, `cond`, `svdvals`, `eigvalsh`, `logdet`); and, where no
input requires grad, `lu`, `lu_factor`, `lu_solve` and `solve_triangular` (getrf's column algorithm and substitution in
numpy: numpy has no LAPACK routine for them). The device path
(`factorize`) reads its pivots or its convergence back anyway, so it can't run inside a TinyJit either; on a CPU it
is hundreds of times LAPACK's time. float32 stays float32 (LAPACK's single precision routines), float64 likewise, a
batch in one call. The results follow LAPACK's conventions, as PyTorch's CPU (the same routines: getrf's pivots,
geqrf's signs, syevd's ascending eigenvalues).

Each result is a node over the host's values with its gradient given by the analytical formula torch uses, built
from tensor ops (so backward runs on the device, and differentiates again: a rule rebuilds the nodes it reads, with
their own rules). `on_host` says where this path applies; elsewhere the factorizations keep their device kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

try:
    # (numpy's private gufuncs behind numpy.linalg, the only way to its float32 LAPACK routines: its public functions
    # compute float32 in float64; a numpy without them keeps the device path)
    from numpy.linalg import _umath_linalg
except ImportError:  # pragma: no cover
    _umath_linalg = None

from uopkit.device import Device
from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.engine.realize import _is_stored, buffers, capturing, realize_lock
from uopkit.gradient import Walk, running_walk, set_gradient
from uopkit.helpers import LAPACK
from uopkit.tensor.grad_mode import enable_grad, is_grad_enabled, no_grad
from uopkit.tensor.leaves import reads_realized, requires_grad_of, wanted_keys
from uopkit.tensor.support import ArgumentError, LinAlgError, _from_numpy
from uopkit.tensor.triangular import cholesky_gradient, triangular_solve
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def on_host(*tensors: Tensor) -> bool:
    """Whether a factorization of `tensors` computes on the host: the LAPACK flag on, not inside a capture (a TinyJit's,
    which records kernels: a host computation would be a constant of the replays), and every tensor on a device whose
    buffers are host memory, with some elements (0 x 0 matrices and empty batches keep the device path's rules)."""
    if not LAPACK.value or capturing or _umath_linalg is None:
        return False
    for t in tensors:
        device = t.device
        if not isinstance(device, str) or 0 in t.shape:
            return False
        host = _host_memory.get(device)
        if host is None:
            host = _host_memory[device] = bool(Device[device].allocator.host_memory)
        if not host:
            return False
    return True


# whether a device's buffers are host memory, by its name (an allocator's flag does not change)
_host_memory: dict[str, bool] = {}


def _values(t: Tensor) -> np.ndarray:
    """`t`'s values, read from its buffer where it is one or a view of one (a transpose, a broadcast: copied out as
    `Tensor.numpy` reads a view, no kernel, not even the detached copy's). A computed `t` is realized in place first,
    so that its node (which the callers take after this, for the result's gradient) is its storage."""
    with realize_lock:
        # (a lazy value is realized in place, as `Tensor.numpy` does: the tensor then reads its storage, and so does the
        # node a host result ties in, instead of the graph that computed it, which a loop of host computations would
        # otherwise compute again at every later step. backward() follows the stored value back to that graph.) A
        # view's base is realized first, its writes pending through it
        walk = running_walk()
        held = _gradients_computed(t, walk) if walk is not None else {}
        t.realize(*held.values())
        if held and walk is not None:
            walk.replace_pending({g: h.uop for g, h in held.items()})
        if t._is_plain_buffer():
            return buffers[t.uop.base].numpy().reshape(t.shape)
        view = t._view_read_on_host()
        if view is not None:
            return view
    return t.numpy()


def _gradients_computed(t: Tensor, walk: Walk) -> dict[UOp, Tensor]:
    """Where a rule of a running gradient walk reads `t` (a host computation's gradient, which sums what flowed into
    it), the walk's gradients that `t`'s graph computes on the way and that those it has yet to pass on read, as
    tensors to realize with `t`: put back into the walk stored (`Walk.replace_pending`), the next such rule reads
    them there instead of computing them again from the root (the backward of a loop of T host computations: O(T)
    kernels, not O(T^2)). Constants stay as they are."""
    if _is_stored(t.uop):
        return {}
    pending = walk.pending()
    if not pending:
        return {}
    inside = t.uop.toposort()
    later = UOp(Ops.SINK, src=tuple([walk.grads[u] for u in pending])).toposort()
    return {
        g: Tensor(g)
        for g in dict.fromkeys(walk.grads.values())
        if g in inside and g in later and g is not t.uop and not _is_stored(g) and g.base.op is not Ops.CONST
    }


def _lapack(name: str, *arrays: np.ndarray, outputs: int = 1) -> np.ndarray | tuple[np.ndarray, ...]:
    """numpy's batched LAPACK routine `name` (the gufuncs behind numpy.linalg, whose functions compute float32 in
    float64) in the arrays' own dtype: sgesv for float32, dgesv for float64. A failure (a singular matrix, one not
    positive definite: LAPACK's info) raises FloatingPointError, the flag those routines set for it."""
    code = "f" if arrays[0].dtype == np.float32 else "d"
    signature = code * len(arrays) + "->" + code * outputs
    with np.errstate(invalid="raise", over="ignore", divide="ignore", under="ignore"):
        return getattr(_umath_linalg, name)(*arrays, signature=signature)


def _tensor(values: np.ndarray, like: Tensor) -> Tensor:
    """`values` (numpy's result, or a view of it) as a tensor of `like`'s dtype on its device: straight into a new
    buffer, no copy on the host where the array is already C-ordered in that dtype."""
    array = np.asarray(values, dtype=to_numpy_dtype(like.dtype), order="C")
    return Tensor(_from_numpy(array, like.device, like.dtype))


def _t(x: Tensor) -> Tensor:
    return x.transpose(-1, -2)


Rule = Callable[[UOp, tuple[bool, ...]], tuple[UOp | None, ...]]


def _node(out: Tensor, inputs: tuple[UOp, ...], rule: Rule) -> Tensor:
    """`out` (host values) as a node whose gradient with respect to `inputs` is `rule`'s. The inputs must be sources
    of the node for the walk to find them: a select that always takes `out` ties them in (as a `Function`'s outputs,
    `autograd._tied`), and a CONTIGUOUS of its own carries the rule (a reshape would not: realized, a view is followed
    back through what it views, the select, which no gradient reaches). `inputs`: their nodes once `_values` has read
    them (realized in place: stored values, which the walk follows back to the graphs that computed them, and which
    the rule and the later steps of a loop read without computing them again). Built again over the same buffer and
    inputs it is the same node (a rule rebuilds the nodes it reads this way, so that a second backward goes through
    them)."""
    value = out
    with no_grad():
        always = Tensor.full(out.shape, True, dtype=dtypes.bool, device=out.device)
    # an input that reads a realized value (`cov.realize()`, or stored by a realize since) is tied in outside the
    # detach: backward's walk puts realized values back as the graphs that computed them only where a gradient flows,
    # and the rule's input follows its node there (as `autograd._tied` does for a Function's inputs). Those go last: a
    # select made under no_grad after them would detach them again
    reads = [(u, reads_realized(u)) for u in inputs]
    for u, realized in sorted(reads, key=lambda read: read[1]):
        with enable_grad():
            # (a view built under no_grad is cut from what it views: `u` itself must be in the node's graph)
            tie = Tensor(u)
        with enable_grad() if realized else no_grad():
            tie = tie if realized else tie.detach()
            first = tie.reshape(-1)[:1].cast(out.dtype).reshape((1,) * out.ndim).expand(out.shape)
            value = always.where(value, first)
    node = UOp(Ops.CONTIGUOUS, out.dtype, (value.uop,), ("lapack",))
    set_gradient(node, inputs, rule)
    return Tensor(node)


def _wants_gradient(*inputs: Tensor) -> bool:
    """Whether any of `inputs` requires grad (torch's `requires_grad`), gradients being recorded: the live tensors
    with requires_grad gathered once for all of them."""
    if not is_grad_enabled():
        return False
    wanted = None
    for t in inputs:
        if t._requires_grad is not None:
            if t._requires_grad:
                return True
            continue
        if wanted is None:
            wanted = wanted_keys()
        if requires_grad_of(t, wanted):
            return True
    return False


# ---------------------------------------------------------------------------------------------------------------
# inverse, solve, det, slogdet


def inverse(a: Tensor, refusal: str) -> Tensor:
    """a^-1 (getrf + getrs, as torch.linalg.inv); LinAlgError(`refusal`) where a matrix is singular (an exact zero
    pivot, as PyTorch's check). Gradient -X^T g X^T."""
    try:
        x = _tensor(_lapack("inv", _values(a)), a)
    except FloatingPointError:
        raise LinAlgError(refusal) from None
    return _inverse_node(x, a.uop) if _wants_gradient(a) else x


def _inverse_node(x: Tensor, a: UOp) -> Tensor:
    return _node(x, (a,), functools.partial(_inverse_rule, x.uop, a))


def _inverse_rule(x_uop: UOp, a_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    x_t = _t(_inverse_node(Tensor(x_uop), a_uop))
    return ((-(x_t @ Tensor(g) @ x_t)).uop,)


def solve(a: Tensor, b: Tensor, refusal: str) -> Tensor:
    """x with a @ x = b for `a` (..., n, n) and `b` (..., n, k) of the same batch and dtype (gesv); LinAlgError
    (`refusal`) where a matrix is singular. Gradients: g_b = a^-T g (a solve), g_a = -g_b x^T."""
    try:
        x = _tensor(_lapack("solve", _values(a), _values(b)), b)
    except FloatingPointError:
        raise LinAlgError(refusal) from None
    return _solve_node(x, a.uop, b.uop) if _wants_gradient(a, b) else x


def _solve_node(x: Tensor, a: UOp, b: UOp) -> Tensor:
    return _node(x, (a, b), functools.partial(_solve_rule, x.uop, a, b))


def _solve_rule(x_uop: UOp, a_uop: UOp, b_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
    a = Tensor(a_uop)
    g_b = _t(a).solve(Tensor(g))
    g_a = None
    if wanted[0]:
        g_a = (-(g_b @ _t(_solve_node(Tensor(x_uop), a_uop, b_uop)))).uop
    return g_a, g_b.uop


def _adjugate_t(a: np.ndarray) -> np.ndarray:
    """The transposed adjugates of square matrices `a` (det's gradient, also where a matrix is singular) from their
    SVD, a = U S Vh: adj(a)^T = det(U) det(Vh) U diag(the product of the other singular values) Vh."""
    u, s, vh = np.linalg.svd(a)
    n = s.shape[-1]
    others = np.stack([np.prod(np.delete(s, i, axis=-1), axis=-1) for i in range(n)], axis=-1)
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return sign[..., None, None] * (u * others[..., None, :]) @ vh


def det(a: Tensor) -> Tensor:
    """det(a) (getrf's pivoted LU of a^T, as PyTorch: the same exact zeros). Gradient g det a^-T, where every matrix
    is invertible, else g adj(a)^T (from an SVD on the host)."""
    values = _values(a)
    key = a.uop
    d = _lapack("det", np.swapaxes(values, -1, -2))
    out = _tensor(d, a)
    if not _wants_gradient(a):
        return out
    adjugate = None if np.all(d != 0) else _tensor(_adjugate_t(values), a)
    return _det_node(out, key, adjugate)


def _det_node(d: Tensor, a: UOp, adjugate: Tensor | None) -> Tensor:
    return _node(d, (a,), functools.partial(_det_rule, d.uop, a, None if adjugate is None else adjugate.uop))


def _det_rule(d_uop: UOp, a_uop: UOp, adjugate: UOp | None, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    a, grad = Tensor(a_uop), Tensor(g).unsqueeze(-1).unsqueeze(-1)
    if adjugate is not None:
        # (a singular matrix: a constant, no second derivative)
        return ((grad * Tensor(adjugate)).uop,)
    d = _det_node(Tensor(d_uop), a_uop, None).unsqueeze(-1).unsqueeze(-1)
    return ((grad * d * _t(a.inverse())).uop,)


def slogdet(a: Tensor) -> tuple[Tensor, Tensor]:
    """(sign, log|det|) of `a` (of a^T, as `det`). The sign has no gradient; log|det|'s is g a^-T (inf or NaN
    where a matrix is singular)."""
    values = _values(a)
    key = a.uop
    sign, log_abs = _lapack("slogdet", np.swapaxes(values, -1, -2), outputs=2)
    out = _tensor(log_abs, a)
    if not _wants_gradient(a):
        return _tensor(sign, a), out
    inverse_t = None
    if not np.all(sign != 0):
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse_t = _tensor(_adjugate_t(values) / np.linalg.det(values)[..., None, None], a)
    return _tensor(sign, a), _logdet_node(out, key, inverse_t)


def _logdet_node(out: Tensor, a: UOp, inverse_t: Tensor | None) -> Tensor:
    rule = functools.partial(_logdet_rule, a, None if inverse_t is None else inverse_t.uop)
    return _node(out, (a,), rule)


def _logdet_rule(a_uop: UOp, inverse_t: UOp | None, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    grad = Tensor(g).unsqueeze(-1).unsqueeze(-1)
    if inverse_t is not None:
        return ((grad * Tensor(inverse_t)).uop,)
    return ((grad * _t(Tensor(a_uop).inverse())).uop,)


# ---------------------------------------------------------------------------------------------------------------
# cholesky, eigh: of the symmetric matrices `factorize._mirrored` reads (whose rule makes the gradient symmetric)


def cholesky(s: Tensor) -> Tensor | None:
    """The lower Cholesky factor of symmetric `s` (potrf), or None where a matrix is not positive definite or a value
    is not finite (the device path then finds which, and raises as it does). Gradient torch's
    (`triangular.cholesky_gradient`)."""
    try:
        low = _lapack("cholesky_lo", _values(s))
    except FloatingPointError:
        return None
    if not np.isfinite(low).all():
        # (a NaN pivot: potrf's check for one is not in every LAPACK)
        return None
    low = _tensor(low, s)
    return _cholesky_node(low, s.uop) if _wants_gradient(s) else low


def _cholesky_node(low: Tensor, s: UOp) -> Tensor:
    return _node(low, (s,), functools.partial(_cholesky_rule, low.uop, s))


def _cholesky_rule(low_uop: UOp, s_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    return (cholesky_gradient(_cholesky_node(Tensor(low_uop), s_uop), Tensor(g)).uop,)


def eigh(s: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and eigenvectors of symmetric `s` (syevd); a matrix with a NaN or inf gets NaN ones
    (as torch's), the others their own. Gradients torch's: V diag(g_w) V^T for the eigenvalues, V (skew(V^T g_V) / 2
    / E) V^T for the vectors, E_ij = w_j - w_i."""
    values = _values(s)
    key = s.uop
    finite = np.isfinite(values).all((-2, -1))
    if not finite.all():
        values = np.where(finite[..., None, None], values, np.eye(values.shape[-1], dtype=values.dtype))
    w, v = _lapack("eigh_lo", values, outputs=2)
    if not finite.all():
        w, v = np.where(finite[..., None], w, np.nan), np.where(finite[..., None, None], v, np.nan)
    w, v = _tensor(w, s), _tensor(v, s)
    return _eigh_nodes(w, v, key) if _wants_gradient(s) else (w, v)


def _eigh_nodes(w: Tensor, v: Tensor, s: UOp) -> tuple[Tensor, Tensor]:
    uops = (w.uop, v.uop, s)
    return (
        _node(w, (s,), functools.partial(_eigenvalues_rule, *uops)),
        _node(v, (s,), functools.partial(_eigenvectors_rule, *uops)),
    )


def _eigenvalues_rule(w_uop: UOp, v_uop: UOp, s_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    _, v = _eigh_nodes(Tensor(w_uop), Tensor(v_uop), s_uop)
    return (((v * Tensor(g).unsqueeze(-2)) @ _t(v)).uop,)


def _eigenvectors_rule(w_uop: UOp, v_uop: UOp, s_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    w, v = _eigh_nodes(Tensor(w_uop), Tensor(v_uop), s_uop)
    vg = _t(v) @ Tensor(g)
    gaps = _gaps(w)
    return ((v @ (((vg - _t(vg)) / 2) / gaps) @ _t(v)).uop,)


def _gaps(w: Tensor) -> Tensor:
    """E_ij = w_j - w_i, ones on the diagonal (where what it divides is 0)."""
    n = w.shape[-1]
    eye = w.eye(n, dtype=w.dtype, device=w.device)
    return (w.unsqueeze(-2) - w.unsqueeze(-1)) + eye


# ---------------------------------------------------------------------------------------------------------------
# svd, qr


def svd(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh of `a` (..., m, n) (gesdd, as torch's CPU); raises for NaN or inf (as the device path). Gradients
    torch's for distinct singular values, U and Vh cut to their first k = min(m, n) columns and rows (see
    `_svd_rule`)."""
    values = _values(a)
    key = a.uop
    if not np.isfinite(values).all():
        raise ArgumentError(f"svd: the input has values that aren't finite (nan or inf), shape {a.shape}")
    u, s, vh = (_tensor(x, a) for x in _lapack("svd_f" if full_matrices else "svd_s", values, outputs=3))
    return _svd_nodes(u, s, vh, key) if _wants_gradient(a) else (u, s, vh)


def _svd_nodes(u: Tensor, s: Tensor, vh: Tensor, a: UOp) -> tuple[Tensor, Tensor, Tensor]:
    uops = (u.uop, s.uop, vh.uop, a)
    return tuple(_node(x, (a,), functools.partial(_svd_rule, i, *uops)) for i, x in enumerate((u, s, vh)))  # type: ignore[return-value]


def _svd_rule(
    which: int, u_uop: UOp, s_uop: UOp, vh_uop: UOp, a_uop: UOp, g: UOp, wanted: tuple[bool, ...]
) -> tuple[UOp]:
    """a's gradient for the gradient `g` of U (`which` 0), S (1) or Vh (2); the three add up to torch's formula, which
    is linear in them: with k = min(m, n), U_k and Vh_k, skew(X) = X - X^T and E_ij = s_j^2 - s_i^2,
    U_k [diag(g_S) + (skew(U_k^T g_U) S + S skew(Vh_k g_Vh^T)) / E] Vh_k, plus the parts of g_U (m > n) or g_Vh
    (m < n) outside the span of U_k or Vh_k, divided by S."""
    u, s, vh = _svd_nodes(Tensor(u_uop), Tensor(s_uop), Tensor(vh_uop), a_uop)
    m, n = u.shape[-2], vh.shape[-1]
    k = s.shape[-1]
    u, vh, grad = u[..., :, :k], vh[..., :k, :], Tensor(g)
    if which == 1:
        return (((u * grad.unsqueeze(-2)) @ vh).uop,)
    squares = s.square()
    gaps = _gaps(squares)
    if which == 0:
        grad = grad[..., :, :k]
        ug = _t(u) @ grad
        inner = (ug - _t(ug)) * s.unsqueeze(-2) / gaps
        out = u @ inner
        if m > n:
            scaled = grad / s.unsqueeze(-2)
            out = out + scaled - u @ (_t(u) @ scaled)
        return ((out @ vh).uop,)
    grad = grad[..., :k, :]
    vg = vh @ _t(grad)
    inner = s.unsqueeze(-1) * (vg - _t(vg)) / gaps
    out = inner @ vh
    if m < n:
        scaled = grad / s.unsqueeze(-1)
        out = out + scaled - (scaled @ _t(vh)) @ vh
    return ((u @ out).uop,)


def qr(a: Tensor, complete: bool) -> tuple[Tensor, Tensor] | None:
    """Q and R of `a` (..., m, n) (geqrf + orgqr: LAPACK's signs, PyTorch's CPU's), Q (..., m, m) when `complete`, else
    (..., m, k), R (..., k, n). None where a gradient is wanted and torch's formula has none (`complete` with m > n:
    the device path differentiates through its reflections). Gradients torch's (`_qr_rule`)."""
    m, n = a.shape[-2:]
    wants = _wants_gradient(a)
    if wants and complete and m > n:
        return None
    q, r = (_tensor(x, a) for x in np.linalg.qr(_values(a), mode="complete" if complete else "reduced"))
    if not wants:
        return q, r
    return _qr_nodes(q, r, a.uop)


def _qr_nodes(q: Tensor, r: Tensor, a: UOp) -> tuple[Tensor, Tensor]:
    uops = (q.uop, r.uop, a)
    return (
        _node(q, (a,), functools.partial(_qr_rule, 0, *uops)),
        _node(r, (a,), functools.partial(_qr_rule, 1, *uops)),
    )


def _qr_rule(which: int, q_uop: UOp, r_uop: UOp, a_uop: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    """a's gradient for the gradient `g` of Q (`which` 0) or R (1), the other's taken as zero (torch's formula is
    linear in them). For m >= n: g_a = (g_Q + Q copyltu(M)) R^-T, M = R g_R^T - g_Q^T Q, copyltu the lower triangle
    mirrored onto the upper one. For m < n, A = (X Y) with X = Q R_1 square: X's gradient so, with g_Q + Y g_R2^T
    for g_Q, and Y's Q g_R2."""
    q, r = _qr_nodes(Tensor(q_uop), Tensor(r_uop), a_uop)
    m, n = q.shape[-2], r.shape[-1]
    k = min(m, n)
    grad = Tensor(g)
    g_q = grad if which == 0 else q.zeros_like()
    g_r = grad if which == 1 else r.zeros_like()
    r_1, g_r1 = r[..., :, :k], g_r[..., :, :k]
    if m < n:
        # (Y, a's columns past the first k)
        g_q = g_q + Tensor(a_uop)[..., :, k:] @ _t(g_r[..., :, k:])
    product = r_1 @ _t(g_r1) - _t(g_q) @ q
    mirrored = product.tril() + _t(product.tril(-1))
    g_x = _t(triangular_solve(r_1, _t(g_q + q @ mirrored), upper=True, unit=False))
    if m < n:
        g_x = g_x.cat(q @ g_r[..., :, k:], dim=-1)
    return (g_x.uop,)


# ---------------------------------------------------------------------------------------------------------------
# LU (getrf) and triangular solves: on the host where no gradient is wanted (one that is takes the device path, which
# differentiates as torch's)


def _getrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """getrf on matrices `a` (..., m, n), column by column as LAPACK's getf2 (the first largest |entry| on or below
    the diagonal; the column scaled by the pivot's reciprocal, as its scal, by a division where that reciprocal
    overflows; no swap and no elimination for a zero column): (packed L and U, 1-based pivots int32 (..., k), info
    int32 (...): the 1-based column of U's first zero on the diagonal, else 0). torch's CPU's pivots; its factors to
    rounding (its MKL getrf fuses each update's multiply and subtract where the CPU has FMA: an ulp apart)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    lu = np.array(a, copy=True).reshape(-1, m, n)
    count = lu.shape[0]
    at = np.arange(count)
    pivots = np.zeros((count, k), dtype=np.int32)
    info = np.zeros(count, dtype=np.int32)
    tiny = np.finfo(lu.dtype).tiny
    with np.errstate(all="ignore"):
        for j in range(k):
            # (argmax: the first largest, a NaN as the largest, as the device path's)
            p = j + np.argmax(np.abs(lu[:, j:, j]), axis=1)
            pivots[:, j] = p + 1
            row = lu[at, j].copy()
            lu[at, j] = lu[at, p]
            lu[at, p] = row
            pivot = lu[:, j, j]
            zero = pivot == 0
            info[(info == 0) & zero] = j + 1
            if j + 1 == m:
                continue
            column = lu[:, j + 1 :, j]
            safe = np.where(zero, 1, pivot)[:, None]
            scaled = np.where(np.abs(safe) >= tiny, column * (1 / safe), column / safe)
            lu[:, j + 1 :, j] = np.where(zero[:, None], column, scaled)
            update = lu[:, j + 1 :, j, None] * lu[:, j, None, j + 1 :]
            lu[:, j + 1 :, j + 1 :] -= np.where(zero[:, None, None], 0, update)
    return lu.reshape(*batch, m, n), pivots.reshape(*batch, k), info.reshape(batch)


def _permutation(pivots: np.ndarray, m: int) -> np.ndarray:
    """The row permutation of LAPACK's 1-based `pivots` (..., k): row i of P^T A is row perm[i] of A (..., m)."""
    perm = np.broadcast_to(np.arange(m), (*pivots.shape[:-1], m)).copy()
    flat, swaps = perm.reshape(-1, m), pivots.reshape(-1, pivots.shape[-1]) - 1
    at = np.arange(flat.shape[0])
    for j in range(swaps.shape[-1]):
        p = swaps[:, j]
        row = flat[at, j].copy()
        flat[at, j] = flat[at, p]
        flat[at, p] = row
    return perm


def lu_factor(a: Tensor) -> tuple[Tensor, Tensor, Tensor, np.ndarray] | None:
    """getrf of float matrices `a` (..., m, n) (`_getrf`): packed LU, 1-based pivots and info as tensors, and the row
    permutation (numpy, `_permutation`); None where a gradient is wanted."""
    if _wants_gradient(a):
        return None
    lu, pivots, info = _getrf(_values(a))
    perm = _permutation(pivots, a.shape[-2])
    index = Tensor(_from_numpy(pivots, a.device, dtypes.int32))
    return _tensor(lu, a), index, Tensor(_from_numpy(info, a.device, dtypes.int32)), perm


def _substituted(t: np.ndarray, y: np.ndarray, upper: bool, unit: bool) -> np.ndarray:
    """x with t @ x = y, `t` (..., n, n) triangular (its other triangle not read; `unit`: nor its diagonal), `y`
    (..., n, k), batches broadcast: a row at a time, its products with the rows solved subtracted, then divided by
    its pivot (so a zero pivot gives inf or NaN, as torch's)."""
    n = t.shape[-1]
    batch = np.broadcast_shapes(t.shape[:-2], y.shape[:-2])
    x = np.zeros((*batch, n, y.shape[-1]), dtype=np.result_type(t, y))
    with np.errstate(all="ignore"):
        for i in range(n - 1, -1, -1) if upper else range(n):
            done = slice(i + 1, n) if upper else slice(0, i)
            row = y[..., i, :] - (t[..., i : i + 1, done] @ x[..., done, :])[..., 0, :]
            x[..., i, :] = row if unit else row / t[..., i, i, None]
    return x


def triangular(t: Tensor, y: Tensor, upper: bool, unit: bool) -> Tensor | None:
    """x with t @ x = y (`triangular.triangular_solve`'s arguments) by substitution on the host; None where a
    gradient is wanted."""
    if _wants_gradient(t, y):
        return None
    return _tensor(_substituted(_values(t), _values(y), upper, unit), y)


def lu_solve(lu: Tensor, pivots: Tensor, b: Tensor) -> Tensor | None:
    """x with A @ x = b for A given by getrf's packed `lu` (..., n, n) and 1-based `pivots` (..., n), `b` (..., n, k)
    (batches broadcast, lu and b of one dtype): b's rows swapped as the pivots say, then L's and U's substitutions.
    None where a gradient is wanted, or a pivot is not in 1..n (the device path's)."""
    if _wants_gradient(lu, b):
        return None
    n = lu.shape[-1]
    swaps = _values(pivots).astype(np.int64) - 1
    if swaps.size and (swaps.min() < 0 or swaps.max() >= n):
        return None
    packed, rhs = _values(lu), _values(b)
    batch = np.broadcast_shapes(packed.shape[:-2], swaps.shape[:-1], rhs.shape[:-2])
    rows = np.broadcast_to(_permutation(swaps + 1, n), (*batch, n))
    permuted = np.take_along_axis(np.broadcast_to(rhs, (*batch, *rhs.shape[-2:])), rows[..., None], axis=-2)
    y = _substituted(packed, permuted, upper=False, unit=True)
    return _tensor(_substituted(packed, y, upper=True, unit=False), b)


def unpacked_lu(packed: Tensor, perm: np.ndarray, like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """P, L (unit lower (..., m, k)) and U ((..., k, n)) from `lu_factor`'s packed LU and row permutation."""
    values = _values(packed)
    m, n = values.shape[-2:]
    k = min(m, n)
    p = (perm[..., None, :] == np.arange(m)[:, None]).astype(values.dtype)
    low = np.tril(values[..., :, :k], -1) + np.eye(m, k, dtype=values.dtype)
    return _tensor(p, like), _tensor(low, like), _tensor(np.triu(values[..., :k, :]), like)

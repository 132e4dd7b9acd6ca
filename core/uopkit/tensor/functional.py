"""nn functional: losses, normalization, dropout, attention and friends (a mixin of `Tensor`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import (
    DType,
    UnsupportedDTypeError,
    dtypes,
    least_upper_dtype,
    to_dtype,
)
from uopkit.engine.realize import capturing_checks
from uopkit.helpers import CHECK_INDEX
from uopkit.tensor.autocast import FLOAT32, GPU, LOWER, autocast_op
from uopkit.tensor.elementwise import _scalar_uop
from uopkit.tensor.replay import replayed
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    _broadcast_shape,
    _check_targets,
    _dim_for_axis,
    _normalize_axis,
    _with_derivative,
    _with_gradient_of,
    _with_reduced_derivative,
    _zeros,
    in_float32,
)
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.device import Buffer
    from uopkit.tensor.tensor import Tensor


def _count_without_gradient(count: Tensor, x: Tensor, zeros: bool) -> Tensor:
    """`count` (p = 0's norm, the number of nonzeros of x), requiring grad where x does and giving x no gradient, as
    torch's: linalg.vector_norm's backward returns none (a loss of it alone leaves `.grad` None), cdist's zeros
    (`zeros`). (The count alone, a cast of a sum of a mask, would not require grad at all.)"""
    from uopkit.gradient import set_gradient

    shape, device = x.shape, x.device

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        return (_zeros(g.dtype, device, shape) if zeros else None,)

    # (a reshape that changes nothing carries the rule: the count node itself is shared with any other count)
    node = UOp(Ops.RESHAPE, count.dtype, (count.uop,), count.shape)
    set_gradient(node, (x.uop,), rule)
    return type(count)(node)


# module constants: on Python 3.11 every `Ops.X` is a lookup through EnumType's slow __getattr__ hook (~0.15 us)
_ADD, _MUL, _NEG, _EXP2, _LOG2, _MAX = Ops.ADD, Ops.MUL, Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.MAX
_CMPEQ, _CMPNE, _WHERE, _CAST, _FDIV = Ops.CMPEQ, Ops.CMPNE, Ops.WHERE, Ops.CAST, Ops.FDIV
_RESHAPE, _EXPAND, _REDUCE_AXIS = Ops.RESHAPE, Ops.EXPAND, Ops.REDUCE_AXIS
_DETACH, _IOTA, _DEVICE = Ops.DETACH, Ops.IOTA, Ops.DEVICE


def _expand_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    # a broadcast to the same rank, as `_broadcast_to` builds it
    return u if u.shape == shape else UOp(_EXPAND, u.dtype, (u,), shape)


def _sum_all_uop(u: UOp, dtype: DType) -> UOp:
    # `sum()` of a 1-D node already in its accumulation dtype
    total = u if u.shape == (1,) else UOp(_REDUCE_AXIS, dtype, (u,), (_ADD, (0,)))
    return UOp(_RESHAPE, dtype, (total,), ())


def _mean_class_nll_uop(logits: UOp, targets: UOp, ignore_index: int) -> UOp | None:
    """`cross_entropy`'s mean loss of float32 or float64 logits (N, C) at int32 or int64 class targets (N,) that
    were checked, without class weights or label smoothing, built as nodes directly (None: another case). The nodes
    are those of the general path (log_softmax over axis 1, a one-hot compare with an iota, two wheres and sums): the
    same graph, so the same kernels and gradients; a training step's loss, whose Tensor methods' checks and
    intermediate tensors cost several times the nodes."""
    shape = logits.shape
    dt, index_dt = logits.dtype, targets.dtype
    if shape is None or len(shape) != 2 or dt not in (dtypes.float32, dtypes.float64):
        return None
    n, c = shape
    if n == 0 or c == 1 or index_dt not in (dtypes.int32, dtypes.int64) or type(ignore_index) is not int:
        return None
    device = logits.device
    if targets.device != device or not dtypes.min(index_dt) <= ignore_index <= dtypes.max(index_dt):
        return None
    rows, lanes = (n,), (n, 1)
    # log_softmax(1): m = x - max(x).detach(), then m - log(sum(exp(m))), exp and log in base 2
    top = UOp(_DETACH, dt, (UOp(_REDUCE_AXIS, dt, (logits,), (_MAX, (1,))),))
    m = UOp(_ADD, dt, (logits, UOp(_NEG, dt, (_expand_uop(top, shape),))))
    e = UOp(_EXP2, dt, (UOp(_MUL, dt, (m, _scalar_uop(1 / math.log(2), dt, device, shape))),))
    total = UOp(_REDUCE_AXIS, dt, (e,), (_ADD, (1,)))
    log_total = UOp(_MUL, dt, (UOp(_LOG2, dt, (total,)), _scalar_uop(math.log(2), dt, device, lanes)))
    logp = UOp(_ADD, dt, (m, UOp(_NEG, dt, (_expand_uop(log_total, shape),))))
    # targets[:, None] == arange(C)[None, :]
    iota = UOp(_RESHAPE, index_dt, (UOp(_IOTA, index_dt, (UOp(_DEVICE, arg=device),), c),), (1, c))
    column = UOp(_RESHAPE, index_dt, (targets,), lanes)
    onehot = UOp(_CMPEQ, dtypes.bool, (_expand_uop(column, shape), _expand_uop(iota, shape)))
    picked = UOp(_WHERE, dt, (onehot, logp, _scalar_uop(0.0, dt, device, shape)))
    row_sum = UOp(_REDUCE_AXIS, dt, (picked,), (_ADD, (1,)))
    nll = UOp(_NEG, dt, (UOp(_RESHAPE, dt, (row_sum,), rows),))
    valid = UOp(_CMPNE, dtypes.bool, (targets, _scalar_uop(ignore_index, index_dt, device, rows)))
    nll = UOp(_WHERE, dt, (valid, nll, _scalar_uop(0.0, dt, device, rows)))
    count = _sum_all_uop(UOp(_CAST, dtypes.int32, (valid,)), dtypes.int32)
    return UOp(_FDIV, dt, (_sum_all_uop(nll, dt), UOp(_CAST, dt, (count,))))


def _same_size_target(x: Tensor, target: object, op: str) -> None:
    # the binary cross entropies take a target of the input's shape only (torch refuses a broadcast one: a (N,) input
    # and a (N, 1) target would silently be an (N, N) loss)
    shape = getattr(target, "shape", None)
    if shape is not None and tuple(shape) != x.shape:
        raise ArgumentError(
            f"{op}: the target's shape {tuple(shape)} differs from the input's {x.shape}; make them equal"
        )


def _unbatched_target(x: Tensor, Y: Tensor) -> Tensor:
    # torch's nll_loss and cross_entropy take the class index of one unbatched sample (C,) as a 0-d target or a
    # (1,) one; the loss is 0-d either way
    return Y.reshape(()) if x.ndim == 1 and Y.shape == (1,) else Y


def _float_input(t: Tensor, dtype: DType | None, op: str) -> Tensor:
    """t in `dtype` when one is given, else t itself, which must be floating point: torch's softmax family has no
    kernel for ints and bools (NotImplementedError) unless dtype= names the float to compute in."""
    if dtype is not None:
        return t.cast(dtype)
    if not dtypes.is_float(t.dtype):
        raise UnsupportedDTypeError(
            f"{op}: needs a floating-point input, got {t.dtype} (as PyTorch); pass dtype=dtypes.float32 or cast "
            f"with .float() first"
        )
    return t


def _check_probabilities(op: str, named: Sequence[tuple[str, Tensor]]) -> None:
    """Raise ArgumentError (a RuntimeError, as torch's) when a value of these float tensors lies outside [0, 1] or is
    NaN (`binary_cross_entropy`'s input and target). Host data is checked here; values computed on the device by
    reading back their min and max, all tensors' in one small kernel realized with them (a sync per call, as torch's
    CPU check; CHECK_INDEX=0 skips it), which a capturing TinyJit records and its replays repeat."""
    computed = []
    for name, t in named:
        if not t.numel():
            continue
        if t._is_plain_buffer():
            vals = t.numpy()
            if not ((vals >= 0) & (vals <= 1)).all():
                raise ArgumentError(_outside_unit(op, name, float(np.min(vals)), float(np.max(vals))))
            if not capturing_checks:
                continue
        computed.append((name, t))
    if not computed or not CHECK_INDEX:
        return
    ends = [e for _, t in computed for e in (t.min(), t.max())]
    bounds = ends[0].stack(*ends[1:]).cast(dtypes.float32)
    bounds.realize(*(t for _, t in computed))
    check = _UnitIntervalCheck(bounds._buffer(), op, [name for name, _ in computed])
    for captured in capturing_checks:
        captured.append(check)
    check()


def _outside_unit(op: str, name: str, lo: float, hi: float) -> str:
    return (
        f"{op}: every element of the {name} must be a probability in [0, 1], got min {lo:g} and max {hi:g} (NaN: "
        f"some is NaN); pass probabilities (a sigmoid's), or the logits to binary_cross_entropy_with_logits"
    )


class _UnitIntervalCheck:
    """Reads the realized (min, max) pairs of device-computed tensors and raises if one lies outside [0, 1]."""

    def __init__(self, bounds: Buffer, op: str, names: list[str]) -> None:
        self.bounds, self.op, self.names = bounds, op, names

    def __call__(self) -> None:
        vals = self.bounds.as_numpy().reshape(-1, 2)
        for name, (lo, hi) in zip(self.names, vals, strict=True):
            if not (lo >= 0 and hi <= 1):  # (NaN too: min and max propagate it)
                raise ArgumentError(_outside_unit(self.op, name, float(lo), float(hi)) + " (CHECK_INDEX=0 skips this)")


class FunctionalMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # nn functional

    @autocast_op(FLOAT32, GPU)
    @replayed
    def softmax(self, axis: int = -1, dtype: DType | None = None, *, dim: int | None = None) -> Tensor:
        """exp(x) / sum(exp(x)) along `axis` (shifted by the max).

        >>> Tensor([0.0, 0.0]).softmax().tolist()
        [0.5, 0.5]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, -1, "softmax")
        if self.ndim:
            # (checked here: the error names softmax, not the max inside it)
            axis = _normalize_axis(axis, self.ndim, "softmax", self.shape)
        if dtype is None and self.dtype in dtypes.halves:
            # computed in float32, rounded once (as PyTorch; see support.in_float32)
            return _with_half_softmax_gradient(self.float().softmax(axis).cast(self.dtype), self, axis, False)
        x = _float_input(self, dtype, "softmax")
        if x.numel() == 0:
            return x
        e = (x - x.max(axis=axis, keepdim=True).detach()).exp()
        # one division per row, a multiply per element (as PyTorch's CPU softmax)
        return e * e.sum(axis, keepdim=True).reciprocal()

    @autocast_op(FLOAT32, GPU)
    @replayed
    def log_softmax(self, axis: int = -1, dtype: DType | None = None, *, dim: int | None = None) -> Tensor:
        """log(softmax(x)) computed as x - logsumexp(x).

        >>> round(Tensor([0.0, 0.0]).log_softmax().tolist()[0], 5)
        -0.69315
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, -1, "log_softmax")
        if self.ndim:
            # (checked here: the error names log_softmax, not the max inside it)
            axis = _normalize_axis(axis, self.ndim, "log_softmax", self.shape)
        if dtype is None and self.dtype in dtypes.halves:
            return _with_half_softmax_gradient(self.float().log_softmax(axis).cast(self.dtype), self, axis, True)
        x = _float_input(self, dtype, "log_softmax")
        if x.numel() == 0:
            return x
        m = x - x.max(axis=axis, keepdim=True).detach()
        return m - m.exp().sum(axis, keepdim=True).log()

    @replayed
    def softmin(self, axis: int = -1, dtype: DType | None = None, *, dim: int | None = None) -> Tensor:
        """softmax(-x) along `axis`.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).softmin().tolist()]
        [0.7311, 0.2689]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, -1, "softmin")
        # (a bad axis is softmin's, not the softmax's)
        _normalize_axis(axis, self.ndim, "softmin", self.shape)
        x = _float_input(self, dtype, "softmin")
        return (-x).softmax(axis)

    @replayed
    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along `dim` (torch.nn.functional.normalize).

        >>> [round(v, 4) for v in Tensor([[3.0, 4.0]]).normalize().tolist()[0]]
        [0.6, 0.8]
        """
        if not dtypes.is_float(self.dtype):
            # (torch's vector norm takes floats only, as uopkit's norm)
            raise DTypeError(f"normalize: needs a floating-point tensor, got {self.dtype}; cast with .float() first")
        x = self
        axis = _normalize_axis(dim, x.ndim, "normalize", x.shape)
        norm = x._vector_norm(axis, p, "normalize")
        # as torch's clamp_min: the whole gradient goes to the norm where it is >= eps (and a NaN norm stays NaN)
        return x / (norm < eps).where(eps, norm)

    @autocast_op(FLOAT32, GPU)
    def norm(
        self,
        p: float | str = "fro",
        dim: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """The vector p-norm over `dim` (all elements when None) of a float tensor, as torch.Tensor.norm: "fro" (and
        p = 2) the Euclidean norm, inf the max of |x|, 0 the count of nonzeros; torch's gradient (0 at a zero norm).
        "nuc" is the nuclear norm (`matrix_norm("nuc")`) over two axes: `dim`, or the two of a matrix. `dtype` (a
        float dtype) casts the tensor to it first, as torch's.

        >>> Tensor([[3.0, 4.0]]).norm().item()
        5.0
        """
        if p == "fro":
            p = 2.0
        if isinstance(p, str) and p != "nuc":
            raise ArgumentError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"norm: needs a floating-point tensor, got {self.dtype}; cast with .float()")
        if dtype is not None:
            if not dtypes.is_float(want := to_dtype(dtype)):
                raise TypeError(f"norm: dtype must be a floating-point dtype, got {want}")
            return self.cast(want).norm(p, dim, keepdim)
        if p == "nuc":
            axes = tuple(range(self.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
            if len(axes) != 2:
                raise ArgumentError(f"norm: p='nuc' is a matrix norm over two dims, got dim={dim} of {self.shape}")
            return self.matrix_norm("nuc", axes, keepdim)
        axes = self._axes(dim, "norm")
        if not self.ndim:
            # (a 0-d tensor: dim 0 or -1 checked as the other reductions check it, and nothing to move)
            axes = ()
        rest = [a for a in range(self.ndim) if a not in axes]
        rest_shape = tuple(self.shape[a] for a in rest)
        # the reduced axes moved last and flattened into one
        flat = self.permute(rest + list(axes)).reshape(rest_shape + (math.prod(self.shape[a] for a in axes),))
        out = flat._vector_norm(len(rest), float(p), "norm").reshape(rest_shape)
        return out.reshape(tuple(1 if a in axes else s for a, s in enumerate(self.shape))) if keepdim else out

    def cosine_similarity(self, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
        """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along `dim`, the operands broadcast together
        (torch.nn.functional.cosine_similarity: each norm clamped by eps separately, its gradient the norm's own).

        >>> Tensor([[1.0, 0.0]]).cosine_similarity(Tensor([[1.0, 1.0]])).tolist()
        [0.7071067690849304]
        """
        x1, x2 = self._broadcasted(other, op="cosine_similarity")
        if not dtypes.is_float(x1.dtype):
            raise TypeError(
                f"cosine_similarity: needs floating-point operands, got {self.dtype} and {x2.dtype}; cast with .float()"
            )
        axis = _normalize_axis(dim, x1.ndim, "cosine_similarity", x1.shape)
        unit = []
        for x in (x1, x2):
            norm = x._vector_norm(axis, 2, "cosine_similarity")
            # torch clamps a copy of the norm without recording it: the value is clamped, the gradient is the norm's
            unit.append(x / _with_gradient_of((norm < eps).where(eps, norm), norm))
        return (unit[0] * unit[1]).sum(axis)

    @in_float32
    def _vector_norm(self, axis: int, p: float, op: str) -> Tensor:
        """||x||_p of a float tensor along `axis` (kept, size 1), with torch's derivative (linalg.vector_norm's, and
        cdist's for finite p): sign(x) |x|^(p-1) / norm^(p-1), 0 where the norm is 0 (and at x = 0 for p < 2), where
        the textbook chain is 0 * inf. p = 0 counts the nonzero elements (requiring grad, with none: see
        `_count_without_gradient`); +-inf is the max (min) of |x|,
        whose gradient is shared among ties."""
        x, a = self, self.abs()
        if p == math.inf or p == -math.inf:
            return a.max(axis=axis, keepdim=True) if p > 0 else a.min(axis=axis, keepdim=True)
        if p == 0:
            return _count_without_gradient((x != 0).sum(axis, keepdim=True).cast(x.dtype), x, zeros=op == "cdist")
        if p < 0 and op == "cdist":
            raise ArgumentError(f"{op}: p must be >= 0 or +-inf, got {p}")
        # (a negative p, as torch.linalg.vector_norm: (sum |x|^p)^(1/p), 0 when an element is 0)

        def norm_of(x: Tensor) -> Tensor:
            a = x.abs()
            return a.square().sum(axis, keepdim=True).sqrt() if p == 2 else a.pow(p).sum(axis, keepdim=True).pow(1 / p)

        def derivative(x: Tensor) -> Tensor:
            norm = norm_of(x)
            if p == 1:
                return x.sign()
            if p == 2:
                d = x / norm
            elif p > 2:
                d = x * x.abs().pow(p - 2) / norm.pow(p - 1)
            else:
                # below 2 as torch's: sign(x) |x|^(p-1), which stays finite where x |x|^(p-2) over- or underflows
                # (|x| ~ 1e-30 at p = 0.5), 0 at x = 0 below 1; torch.linalg multiplies by norm^(1-p) there,
                # unmasked (-inf with p = -1 gets 0, not -inf * 0), cdist divides by dist^(p-1) and then masks
                scaled = x.sign() * x.abs().pow(p - 1)
                if p < 1 and op != "cdist":
                    return (x == 0).where(0.0, scaled) * norm.pow(1 - p)
                d = scaled / norm.pow(p - 1)
                if p < 1:
                    d = (x == 0).where(0.0, d)
            return (norm == 0).where(0.0, d)

        return _with_reduced_derivative(norm_of(x), x, derivative, axis)

    def _loss_reduce(self, reduction: str, op: str) -> Tensor:
        if reduction == "none":
            return self
        if reduction == "sum":
            return self.sum()
        if reduction == "mean":
            return self.mean()
        raise ArgumentError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")

    def cross_entropy(
        self,
        Y: Tensor,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Cross entropy of logits (N, C, ...) against class indices (N, ...) or class probabilities (N, C, ...),
        with optional per-class `weight` (a weighted mean over class indices divides by the targets' weights, as torch).

        >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 5)
        0.69315
        """
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
        if self.ndim < 1:
            raise ShapeError(f"cross_entropy: logits need a class axis, got shape {self.shape}")
        axis = 1 if self.ndim >= 2 else 0
        C = self.shape[axis]
        if weight is not None and weight.shape != (C,):
            raise ShapeError(f"cross_entropy: weight shape {weight.shape} should be ({C},)")
        if not dtypes.is_float(Y.dtype):
            Y = _unbatched_target(self, Y)
            expected = self.shape[:axis] + self.shape[axis + 1 :]
            if Y.shape != expected:
                raise ShapeError(
                    f"cross_entropy: class targets {Y.shape} should have shape {expected} for logits {self.shape}"
                )
            _check_targets(Y, C, ignore_index, "cross_entropy")
            if weight is None and not label_smoothing and reduction == "mean":
                mean_nll = _mean_class_nll_uop(self.uop, Y.uop, ignore_index)
                if mean_nll is not None:
                    return Tensor(mean_nll)
        logp = self.log_softmax(axis)
        if weight is not None:
            # logp weighted per class: every term below is then weighted as torch weights it
            wshape = (1,) * axis + (C,) + (1,) * (self.ndim - axis - 1)
            w_class = weight.cast(logp.dtype).reshape(wshape)
            wlogp = logp * w_class
        else:
            wlogp = logp
        if dtypes.is_float(Y.dtype):
            if Y.shape != self.shape:
                raise ShapeError(f"cross_entropy: probability targets {Y.shape} must match logits {self.shape}")
            if ignore_index != -100:
                raise ArgumentError("cross_entropy: ignore_index applies to class-index targets, not probabilities")
            target = Y * (1 - label_smoothing) + label_smoothing / C
            return (-(wlogp * target).sum(axis))._loss_reduce(reduction, "cross_entropy")
        valid = Y != ignore_index
        onehot = Y._one_hot_along(C)
        onehot = onehot.permute(list(range(axis)) + [Y.ndim] + list(range(axis, Y.ndim))) if axis else onehot
        nll = -onehot.where(wlogp, 0.0).sum(axis)
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * wlogp.mean(axis)
        nll = valid.where(nll, 0.0)
        if reduction == "mean":
            if weight is None:
                return nll.sum() / valid.sum().cast(nll.dtype)
            # divided by the weights of the (valid) targets
            return nll.sum() / valid.where(onehot.where(w_class, 0.0).sum(axis), 0.0).sum()
        return nll._loss_reduce(reduction, "cross_entropy")

    def sparse_categorical_crossentropy(
        self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """tinygrad's cross entropy of logits with the classes on the LAST axis (..., C) against class indices (...);
        targets equal to `ignore_index` add nothing and are left out of the mean (as cross_entropy's).

        >>> round(Tensor([[0.0, 0.0]]).sparse_categorical_crossentropy(Tensor([1])).item(), 5)
        0.69315
        """
        if self.ndim < 1:
            raise ShapeError(f"sparse_categorical_crossentropy: logits need a class axis, got shape {self.shape}")
        # cross_entropy takes the classes on axis 1 (axis 0 of 1-D logits)
        logits = self if self.ndim <= 2 else self.permute(0, self.ndim - 1, *range(1, self.ndim - 1))
        return logits.cross_entropy(Y, reduction, label_smoothing, ignore_index)

    def nll_loss(
        self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
    ) -> Tensor:
        """Negative log likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...), as torch.

        >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).tolist()
        2.0
        """
        axis = 1 if self.ndim >= 2 else 0
        C = self.shape[axis]
        expected = self.shape[:axis] + self.shape[axis + 1 :]
        Y = _unbatched_target(self, Y)
        if Y.shape != expected or not dtypes.is_int(Y.dtype):
            raise ShapeError(f"nll_loss: targets {Y.shape} ({Y.dtype}) should be ints of shape {expected}")
        _check_targets(Y, C, ignore_index, "nll_loss")
        onehot = Y._one_hot_along(C)
        onehot = onehot.permute(list(range(axis)) + [Y.ndim] + list(range(axis, Y.ndim))) if axis else onehot
        picked = onehot.where(self, 0.0).sum(axis)
        valid = Y != ignore_index
        w = valid.cast(self.dtype)
        if weight is not None:
            if weight.shape != (C,):
                raise ShapeError(f"nll_loss: weight shape {weight.shape} should be ({C},)")
            wshape = (1,) * axis + (C,) + (1,) * (self.ndim - axis - 1)
            w = w * onehot.where(weight.reshape(wshape), 0.0).sum(axis)
        # (selected, not only weighted by 0: an ignored target's gradient is 0, not 0 times the mean's 1 / 0 when every
        # target is ignored)
        loss = valid.where(-picked * w, 0.0)
        if reduction == "mean":
            return loss.sum() / w.sum()
        return loss._loss_reduce(reduction, "nll_loss")

    def binary_cross_entropy(self, Y: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """-(Y log p + (1 - Y) log(1 - p)) of probabilities p = self (logs clamped at -100, as torch), times `weight`.
        The gradients are torch's: (p - Y) / max(p (1 - p), 1e-12) for p (finite at p = 0 and 1, where the clamped
        logs' chain rule gives NaN) and log(1 - p) - log(p) for Y.

        >>> round(Tensor([0.5]).binary_cross_entropy(Tensor([1.0])).item(), 5)
        0.69315
        """
        _same_size_target(self, Y, "binary_cross_entropy")
        _check_probabilities("binary_cross_entropy", (("input", self), ("target", Y)))
        p, Y = self._broadcasted(Y, False, "binary_cross_entropy")
        loss = -(Y * p.log().maximum(-100) + (1 - Y) * (1 - p).log().maximum(-100))
        d_p = (p - Y) / (p * (1 - p)).maximum(1e-12)
        loss = _with_derivative(loss, p, d_p, (Y, (-p).log1p() - p.log()))
        if weight is not None:
            loss = loss * weight
        return loss._loss_reduce(reduction, "binary_cross_entropy")

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
        """tinygrad's name for binary_cross_entropy.

        >>> round(Tensor([0.5]).binary_crossentropy(Tensor([0.0])).item(), 5)
        0.69315
        """
        return self.binary_cross_entropy(Y, reduction)

    def binary_crossentropy_logits(
        self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """tinygrad's name for binary_cross_entropy_with_logits.

        >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 5)
        0.69315
        """
        return self.binary_cross_entropy_with_logits(Y, reduction, pos_weight)

    def binary_cross_entropy_with_logits(
        self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None, weight: Tensor | None = None
    ) -> Tensor:
        """binary_cross_entropy(sigmoid(self), Y), computed stably from the logits.

        >>> round(Tensor([0.0]).binary_cross_entropy_with_logits(Tensor([1.0])).item(), 5)
        0.69315
        """
        op = "binary_cross_entropy_with_logits"
        _same_size_target(self, Y, op)
        # (the weights broadcast to the input's shape, as torch's; a bad one named here, not by a `mul` inside)
        for name, w in (("pos_weight", pos_weight), ("weight", weight)):
            if w is not None and _broadcast_shape(self.shape, w.shape, f"{op} ({name} and the input)") != self.shape:
                raise ShapeError(f"{op}: {name} {w.shape} must broadcast to the input's shape {self.shape}")
        x = self._float()
        # log(1 + exp(-x)) = softplus(-x); weighting the positive term by pos_weight
        log_sig_neg = (-x).softplus(threshold=math.inf)
        if pos_weight is None:
            loss = (1 - Y) * x + log_sig_neg
        else:
            loss = (1 - Y) * x + (1 + (pos_weight - 1) * Y) * log_sig_neg
        if weight is not None:
            loss = loss * weight
        return loss._loss_reduce(reduction, "binary_cross_entropy_with_logits")

    # ---- regression losses: elementwise terms of input - target (broadcast together, as torch does with a warning)

    def _loss_difference(self, target: Tensor, op: str) -> Tensor:
        x, y = self._broadcasted(target, op=op)
        if not dtypes.is_float(x.dtype):
            raise TypeError(f"{op}: needs a floating-point input or target, both are {x.dtype}; cast with .float()")
        return x - y

    def _weighted_loss(
        self, weight: Tensor | None, input_shape: tuple[int, ...], reduction: str, op: str, mean_by_weights: bool
    ) -> Tensor:
        # torch's weight= (of the input's shape) multiplies each term; then mse_loss's and l1_loss's "mean" divides by
        # the weights' sum, huber_loss's by the count
        if weight is None:
            return self._loss_reduce(reduction, op)
        if weight.shape != input_shape:
            raise ShapeError(f"{op}: weight shape {weight.shape} must be the input's shape {input_shape}")
        loss = self * weight
        if reduction == "mean" and mean_by_weights:
            return loss.sum() / weight.sum()
        return loss._loss_reduce(reduction, op)

    def mse_loss(self, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """(input - target)^2, times `weight` if given, reduced by `reduction` ("mean", "sum" or "none"; with
        weights the mean divides by their sum), as torch.nn.functional.mse_loss.

        >>> Tensor([1.0, 3.0]).mse_loss(Tensor([0.0, 0.0])).tolist()
        5.0
        """
        squares = self._loss_difference(target, "mse_loss").square()
        return squares._weighted_loss(weight, self.shape, reduction, "mse_loss", True)

    def l1_loss(self, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """|input - target|, times `weight` if given, reduced by `reduction` (with weights the mean divides by their
        sum), as torch.nn.functional.l1_loss.

        >>> Tensor([1.0, -3.0]).l1_loss(Tensor([0.0, 0.0]), reduction="sum").tolist()
        4.0
        """
        distances = self._loss_difference(target, "l1_loss").abs()
        return distances._weighted_loss(weight, self.shape, reduction, "l1_loss", True)

    def smooth_l1_loss(self, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
        """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target; beta = 0 is l1_loss), reduced by
        `reduction`, as torch.nn.functional.smooth_l1_loss.

        >>> Tensor([0.5, 3.0]).smooth_l1_loss(Tensor([0.0, 0.0]), reduction="none").tolist()
        [0.125, 2.5]
        """
        if beta < 0:
            raise ArgumentError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
        z = self._loss_difference(target, "smooth_l1_loss").abs()
        if beta == 0:
            return z._loss_reduce(reduction, "smooth_l1_loss")
        # the quadratic branch sees only |d| < beta (an infinite d there would turn its unused gradient into NaN)
        small = z < beta
        inner = small.where(z, 0.0)
        return small.where(0.5 * inner * inner / beta, z - 0.5 * beta)._loss_reduce(reduction, "smooth_l1_loss")

    def huber_loss(
        self, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight: Tensor | None = None
    ) -> Tensor:
        """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target), times `weight` if given,
        reduced by `reduction`, as torch.nn.functional.huber_loss (smooth_l1_loss times delta, with beta = delta).

        >>> Tensor([0.5, 3.0]).huber_loss(Tensor([0.0, 0.0]), reduction="none", delta=2.0).tolist()
        [0.125, 4.0]
        """
        if not delta > 0:
            raise ArgumentError(f"huber_loss: delta must be > 0, got {delta}")
        z = self._loss_difference(target, "huber_loss").abs()
        small = z < delta
        inner = small.where(z, 0.0)
        loss = small.where(0.5 * inner * inner, delta * (z - 0.5 * delta))
        return loss._weighted_loss(weight, self.shape, reduction, "huber_loss", False)

    def kl_div(self, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
        """The pointwise KL divergence target * (log(target) - input) of log-probabilities `input` (0 where target is
        0; with `log_target` the target is a log-probability too: exp(target) * (target - input)), as
        torch.nn.functional.kl_div. `reduction`: "mean" divides the sum by the number of elements (torch's default,
        though not the KL divergence), "batchmean" by the batch size (input.shape[0]), "sum" or "none".

        >>> round(Tensor([[-1.0, -1.0]]).kl_div(Tensor([[0.5, 0.5]]), reduction="batchmean").item(), 5)
        0.30685
        """
        if reduction not in ("none", "sum", "mean", "batchmean"):
            raise ArgumentError(f"kl_div: reduction must be 'none', 'sum', 'mean' or 'batchmean', got {reduction!r}")
        x, t = self._broadcasted(target, op="kl_div")
        if not dtypes.is_float(x.dtype):
            raise TypeError(f"kl_div: needs floating-point input and target, both are {x.dtype}; cast with .float()")
        if log_target:
            loss = t.exp() * (t - x)
        else:
            # torch's xlogy(t, t) - t * x: 0 at t = 0, and xlogy's derivative there (0/0: NaN) for the target
            t_log_t = (t == 0).where(0.0, t * t.log())
            loss = _with_derivative(t_log_t, t, (t != 0).where(t.log(), 0.0) + t / t) - t * x
        if reduction == "batchmean":
            return loss.sum() / self.shape[0] if self.ndim else loss.sum()
        return loss._loss_reduce(reduction, "kl_div")

    def sequential(self, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply each callable in `ll` in turn to the result of the previous one.

        >>> Tensor([-1.0, 2.0]).sequential([Tensor.relu, lambda t: t * 2]).tolist()
        [0.0, 4.0]
        """
        ret = self
        for fn in ll:
            ret = fn(ret)
        return ret

    @replayed
    @in_float32
    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (no affine part; see nn.LayerNorm).

        >>> [round(v, 4) for v in Tensor([[1.0, 3.0]]).layernorm().tolist()[0]]
        [-1.0, 1.0]
        """
        x = self._float()
        y = x - x.mean(axis, keepdim=True)
        return y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(
        self,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | Sequence[int] = 1,
    ) -> Tensor:
        """(x - mean) * invstd * weight + bias with the statistics along `axis` (tinygrad's batchnorm).

        >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0, 1.0]), Tensor([1.0, 2.0])).tolist()
        [[0.0, 2.0]]
        """
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(_normalize_axis(a, self.ndim, "batchnorm", self.shape) for a in axes)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return ret + bias.reshape(shape) if bias is not None else ret

    def dropout(self, p: float = 0.5, train: bool | None = None) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), only when Tensor.training (tinygrad's),
        or when `train` where it is given (torch's top-level `torch.dropout(input, p, train)`).

        >>> Tensor.ones(3).dropout(0.5).tolist()
        [1.0, 1.0, 1.0]
        >>> Tensor.dropout(Tensor.ones(3), 1.0, True).tolist()
        [0.0, 0.0, 0.0]
        """
        if not (Tensor.training if train is None else train):
            if not 0.0 <= p <= 1.0:
                raise ArgumentError(f"dropout: p must be in [0, 1], got {p}")
            return self
        return self._dropped(p)

    def _dropped(self, p: float, op: str = "dropout") -> Tensor:
        # dropout whatever Tensor.training says (torch's functional attention drops with its dropout_p always)
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"{op}: p must be in [0, 1], got {p}")
        if p == 0:
            return self
        if p == 1:
            # as PyTorch: times zero, so NaN and inf give NaN and negatives -0.0
            return self * 0
        keep = Tensor.rand(self.shape, device=self.device) >= p
        return keep.where(self, 0) * (1 / (1 - p))

    def embedding(self, weight: Tensor) -> Tensor:
        """Rows of `weight` (V, D) at the integer indices in self: shape self.shape + (D,).

        >>> Tensor([1, 0]).embedding(Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
        [[3.0, 4.0], [1.0, 2.0]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"embedding: indices must be integers, got {self.dtype}")
        if weight.ndim != 2:
            raise ShapeError(f"embedding: weight must be (num_embeddings, dim), got {weight.shape}")
        # rows 0..V-1 only: a negative index is an error, as PyTorch's (getitem would count it from the end)
        weight._check_index_range(self, weight.shape[0], 0, "embedding", negative=False)
        return weight._advanced_index([(0, self)])

    @autocast_op(LOWER)
    def scaled_dot_product_attention(
        self,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        """softmax(q k^T * scale + mask) v with self as the query (..., L, d), key (..., S, d), value (..., S, dv);
        scale defaults to 1 / sqrt(d). With `enable_gqa`, key and value may have fewer heads (axis -3) than the
        query, each shared by a group of query heads (torch's grouped-query attention). `attn_mask` is bool (True:
        attend) or a float added to the scores; with `is_causal` too, both apply (a query attends to no later key).
        `dropout_p` drops attention weights whatever `Tensor.training` says, as torch's functional attention (pass
        0.0 to evaluate).

        >>> q = Tensor.ones(1, 2, 4); q.scaled_dot_product_attention(q, q).shape
        (1, 2, 4)
        """
        if key.shape[-1] != self.shape[-1] or key.shape[-2] != value.shape[-2]:
            raise ShapeError(
                f"scaled_dot_product_attention: query {self.shape}, key {key.shape} and value {value.shape} don't fit"
            )
        if attn_mask is not None and attn_mask.dtype != dtypes.bool and not dtypes.is_float(attn_mask.dtype):
            # (as torch: a 0/1 int mask added as a bias would mask nothing)
            raise DTypeError(
                f"scaled_dot_product_attention: attn_mask must be bool (True: attend) or a float bias, got "
                f"{attn_mask.dtype}; for a mask of 0s and 1s pass attn_mask.bool()"
            )
        heads, kv_heads = (self.shape[-3], key.shape[-3]) if min(self.ndim, key.ndim) >= 3 else (1, 1)
        if not enable_gqa and heads != kv_heads and 1 not in (heads, kv_heads):
            raise ShapeError(
                f"scaled_dot_product_attention: the query has {heads} heads (axis -3) and the key {kv_heads}; for "
                "grouped-query attention (key and value heads each shared by a group of query heads) pass "
                "enable_gqa=True"
            )
        if enable_gqa and self.ndim >= 3 and kv_heads != heads:
            if kv_heads != value.shape[-3] or heads % kv_heads:
                raise ShapeError(
                    f"scaled_dot_product_attention: with enable_gqa the query's {heads} heads must be a multiple of "
                    f"the key's and value's, got key {key.shape} and value {value.shape}"
                )
            key = key.repeat_interleave(heads // kv_heads, -3)
            value = value.repeat_interleave(heads // kv_heads, -3)
        if self.dtype in dtypes.halves:
            # scores, softmax and the weighted sum in float32, rounded once, as torch's attention for half floats (a
            # float16 score past 65504 was inf and its row NaN)
            out_dtype = least_upper_dtype(self.dtype, key.dtype, value.dtype)
            key, value, mask = (
                t.float() if t is not None and t.dtype in dtypes.halves else t for t in (key, value, attn_mask)
            )
            out = self.float().scaled_dot_product_attention(key, value, mask, dropout_p, is_causal, scale)
            return out.cast(out_dtype)
        qk = self.matmul(key.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(self.shape[-1]))
        L, S = self.shape[-2], key.shape[-2]
        if attn_mask is not None:
            # (checked here: the error names attention, not the add or where inside it)
            _broadcast_shape(qk.shape, attn_mask.shape, "scaled_dot_product_attention (attn_mask and the scores)")
            qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
        if is_causal:
            # (after a given mask, as torch's: both apply)
            qk = Tensor.ones(L, S, dtype=dtypes.bool, device=self.device).tril(0).where(qk, -math.inf)
        if attn_mask is not None or is_causal:
            return _safe_softmax(qk)._dropped(dropout_p, "scaled_dot_product_attention") @ value
        return qk.softmax(-1)._dropped(dropout_p, "scaled_dot_product_attention") @ value


def _safe_softmax(x: Tensor) -> Tensor:
    """softmax over the last axis, where a row that is all -inf (a query that may attend to nothing) gives zeros, as
    torch's attention, not NaN, in the value and in the gradient. The row's max, which softmax takes anyway, tells
    such rows (a separate all(x == -inf) was another pass over the scores: a fifth of a small GPT's step): they are
    shifted by 0 instead of -inf (exp gives zeros) and divided by 1 instead of their zero sum."""
    if x.dtype in dtypes.halves:
        return _safe_softmax(x.float()).cast(x.dtype)
    x = x._float()
    top = x.max(axis=-1, keepdim=True).detach()
    empty = top == -math.inf
    e = (x - empty.where(0.0, top)).exp()
    return e * empty.where(1.0, e.sum(-1, keepdim=True)).reciprocal()


def _with_half_softmax_gradient(out: Tensor, x: Tensor, axis: int, log: bool) -> Tensor:
    """`out`, the (log_)softmax of the half float x along `axis`, with x's gradient computed as PyTorch's CPU backward
    computes it: from the rounded output, in float32, rounded once (softmax: y * (g - sum(g * y)); log_softmax:
    g - exp(y) * sum(g)). The chain through the float32 forward's nodes used the unrounded values: a third of a
    bfloat16 attention's score gradients were a unit in the last place off."""
    from uopkit.gradient import set_gradient

    x_uop = x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
        # (the output built again, the same node: a rule must not hold the node it is the gradient of)
        x_now = Tensor(x_uop)
        y = (x_now.log_softmax(axis) if log else x_now.softmax(axis)).float()
        grad = Tensor(g).float()
        if log:
            d = grad - y.exp() * grad.sum(axis, keepdim=True)
        else:
            d = y * (grad - (grad * y).sum(axis, keepdim=True))
        return (d.cast(x_uop.dtype).uop,)

    set_gradient(out.uop, (x_uop,), rule)
    return out

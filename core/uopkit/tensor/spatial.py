"""PyTorch's spatial and structural functions built from Tensor methods (fold, grid_sample, affine_grid, lp pooling,
local response norm, channel shuffle, embedding bags, bilinear forms, distances, channel-wise dropouts); compared with
torch in tests/test_spatial.py."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, dtypes, least_upper_float
from uopkit.helpers import prod
from uopkit.tensor import segments
from uopkit.tensor.autocast import CPU, FLOAT32, autocast_op
from uopkit.tensor.creation import _LinspaceValues
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.linalg import _set_first_max_gradient, _window_argmax
from uopkit.tensor.special import UnsupportedDTypeError
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    UnknownModeError,
    _broadcast_shape,
    _gradient_stored_once,
    _normalize_axis,
    _positive_n,
    _tuple_n,
    _with_derivative,
    _with_gradient_of,
    _with_reduced_derivative,
    in_float32,
)
from uopkit.tensor.unread import with_zero_gradient_to

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# alpha dropout's value for a dropped element before the affine correction: SELU's negative saturation, -lambda * alpha
_SELU_SATURATION = 1.7580993408473766
# the cubic convolution kernel's parameter in grid_sample's bicubic mode (as interpolate's bicubic)
_CUBIC_A = -0.75
_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")
_BAG_MODES = ("sum", "mean", "max")


# torch.cdist's ways to compute p = 2 distances (uopkit always takes the differences)
_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def _taps_by_phase(cols: Tensor, axis: int, d: int, s: int) -> Tensor:
    """cols with its tap axis `axis` (k taps, d apart in the output) split into (m, r): tap i, at offset i * d, is at
    m = i * d // s, r = i * d % s (zeros where no tap lands), so that it adds to output position (b + m) * s + r for
    block b."""
    k = cols.shape[axis]
    span = (k - 1) * d + 1
    m_count = -(-span // s)
    spread = cols._spread(axis, d)
    spread = spread.pad(tuple((0, m_count * s - span) if a == axis else (0, 0) for a in range(cols.ndim)))
    return spread.reshape(*cols.shape[:axis], m_count, s, *cols.shape[axis + 1 :])


class SpatialMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # folding and pooling

    def fold(
        self,
        output_size: int | Sequence[int],
        kernel_size: int | Sequence[int],
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        stride: int | Sequence[int] = 1,
    ) -> Tensor:
        """col2im, the inverse layout of sliding blocks (torch.nn.functional.fold): self is (N, C * kh * kw, L) or
        unbatched (C * kh * kw, L), one column per block, the blocks in row-major order over the padded
        `output_size`; each column is put back where its block was, overlapping positions summed.

        >>> Tensor.ones(4, 4).fold((3, 3), 2).tolist()
        [[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]
        """
        size = _tuple_n(output_size, 2, "fold: output_size")
        k_ = _positive_n(kernel_size, 2, "kernel_size", "fold")
        d_ = _positive_n(dilation, 2, "dilation", "fold")
        s_ = _positive_n(stride, 2, "stride", "fold")
        p_ = _tuple_n(padding, 2, "fold: padding")
        if any(p < 0 for p in p_):
            raise ArgumentError(f"fold: padding must not be negative, got {padding!r}")
        if self.ndim not in (2, 3) or any(s == 0 for s in self.shape[-2:]):
            raise ShapeError(f"fold: expected a 2-D or 3-D (batched) input with non-empty blocks, got {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"fold: needs a floating-point input, got {self.dtype} (as PyTorch)")
        x = self if self.ndim == 3 else self.unsqueeze(0)
        n, ck, length = x.shape
        if ck % prod(k_):
            raise ShapeError(f"fold: input dimension 1 ({ck}) must be divisible by the kernel's size {k_}")
        padded = tuple(o + 2 * p for o, p in zip(size, p_, strict=True))
        blocks = tuple((P - d * (k - 1) - 1) // s + 1 for P, k, d, s in zip(padded, k_, d_, s_, strict=True))
        if min(blocks) < 1 or prod(blocks) != length:
            raise ShapeError(
                f"fold: output_size {size}, kernel_size {k_}, dilation {d_}, padding {p_} and stride {s_} give "
                f"{blocks[0]} * {blocks[1]} sliding blocks, but the input has {length}"
            )
        c = ck // prod(k_)
        cols = x.reshape(n, c, *k_, *blocks)
        # col2im as a gather: output position (q * s + r) along an axis gets, for each m, the tap at offset m * s + r
        # (if any) of block q - m; so each position sums about (k * d / s) ** 2 values (each tap a padded tensor of the
        # whole output would cost k ** 2 reads a position)
        phased = _taps_by_phase(_taps_by_phase(cols, 2, d_[0], s_[0]), 4, d_[1], s_[1])
        # (n, c, mh, rh, mw, rw, oh, ow) -> (n, c, mh, mw, oh, rh, ow, rw)
        phased = phased.permute(0, 1, 2, 4, 6, 3, 7, 5)
        ms = phased.shape[2:4]
        qs = tuple(max(-(-p // s), o + m - 1) for p, s, o, m in zip(padded, s_, blocks, ms, strict=True))
        total: Tensor | None = None
        for mh, mw in itertools.product(range(ms[0]), range(ms[1])):
            part = phased[:, :, mh, mw]
            shifts = ((mh, qs[0] - mh - blocks[0]), (0, 0), (mw, qs[1] - mw - blocks[1]), (0, 0))
            part = part.pad(((0, 0), (0, 0), *shifts))
            total = part if total is None else total + part
        assert total is not None
        total = total.reshape(n, c, qs[0] * s_[0], qs[1] * s_[1])
        out = total.shrink((None, None, *((p, p + o) for p, o in zip(p_, size, strict=True))))
        return out if self.ndim == 3 else out.squeeze(0)

    def lp_pool1d(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        """The power-average pool over the last axis of (N, C, L) or (C, L): (sum of x**p over each window)**(1/p),
        as torch.nn.functional.lp_pool1d computes it (an average pool times the window's size, so a negative sum gives
        NaN for a fractional 1/p, a sum of 0 a zero gradient; p = +-inf is the max (min) of |x|).

        >>> Tensor([[3.0, 4.0, 1.0, 0.0]]).lp_pool1d(2, 2).tolist()
        [[5.0, 1.0]]
        """
        return self._lp_pool(1, norm_type, kernel_size, stride, ceil_mode, "lp_pool1d")

    def lp_pool2d(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        """lp_pool1d over the last two axes of (N, C, H, W) or (C, H, W), as torch.nn.functional.lp_pool2d.

        >>> Tensor([[[1.0, 1.0], [1.0, 1.0]]]).lp_pool2d(1, 2).tolist()
        [[[4.0]]]
        """
        return self._lp_pool(2, norm_type, kernel_size, stride, ceil_mode, "lp_pool2d")

    def lp_pool3d(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        """lp_pool1d over the last three axes of (N, C, D, H, W) or (C, D, H, W), as torch.nn.functional.lp_pool3d.

        >>> Tensor.ones(1, 2, 2, 2).lp_pool3d(2, 2).tolist()
        [[[[2.8284270763397217]]]]
        """
        return self._lp_pool(3, norm_type, kernel_size, stride, ceil_mode, "lp_pool3d")

    def _lp_pool(
        self,
        n: int,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None,
        ceil_mode: bool,
        op: str,
    ) -> Tensor:
        if self.ndim not in (n + 1, n + 2):
            raise ShapeError(f"{op}: expected a {n + 1}-D or {n + 2}-D (batched) input, got shape {self.shape}")
        k_ = _positive_n(kernel_size, n, "kernel_size", op)
        s_ = k_ if stride is None else _positive_n(stride, n, "stride", op)
        if norm_type == math.inf:
            return self.abs().max_pool2d(k_, s_, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -(-self.abs()).max_pool2d(k_, s_, 0, 1, ceil_mode)
        mean = self.pow(norm_type).avg_pool2d(k_, s_, 0, ceil_mode)
        # torch's sign(m) * relu(|m|) is m with a zero gradient where m is 0, which stops the root's infinite one
        # there (its relu's backward selects); a where selects too (a product with sign(0) would make it NaN)
        return (mean != 0).where(mean, 0.0).mul(prod(k_)).pow(1.0 / norm_type)

    def local_response_norm(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
        """x / (k + alpha * mean(x**2 over `size` neighbouring channels)) ** beta over axis 1 of (N, C, ...), the
        window zero-padded by size // 2 before and (size - 1) // 2 after, as torch.nn.functional.local_response_norm.

        >>> Tensor([[[2.0], [0.0]]]).local_response_norm(2, alpha=1.0, beta=1.0).tolist()
        [[[0.6666666865348816], [0.0]]]
        """
        if self.ndim < 3:
            raise ShapeError(f"local_response_norm: expected a 3-D or higher input (N, C, ...), got shape {self.shape}")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ArgumentError(f"local_response_norm: size must be a positive int, got {size!r}")
        if self.numel() == 0:
            return self
        n, c = self.shape[:2]
        # the channels as the rows of a one-channel image: an average pool down them (torch's avg_pool2d/3d)
        squares = (self * self).reshape(n, 1, c, prod(self.shape[2:]))
        squares = squares.pad(((0, 0), (0, 0), (size // 2, (size - 1) // 2), (0, 0)))
        mean = squares.avg_pool2d((size, 1), stride=1).reshape(self.shape)
        return self / (mean * alpha + k).pow(beta)

    def channel_shuffle(self, groups: int) -> Tensor:
        """The channels (axis 1) of (N, C, *) split into `groups` groups and interleaved: channel g * (C / groups) + i
        goes to i * groups + g, as torch.nn.functional.channel_shuffle.

        >>> Tensor.arange(6).reshape(1, 6, 1).channel_shuffle(2).flatten().tolist()
        [0, 3, 1, 4, 2, 5]
        """
        if self.ndim <= 2:
            raise ShapeError(f"channel_shuffle: expected an input with more than 2 dims, got shape {self.shape}")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
            raise ArgumentError(f"channel_shuffle: groups must be a positive int, got {groups!r}")
        n, c = self.shape[:2]
        if c % groups:
            raise ShapeError(f"channel_shuffle: {c} channels aren't divisible into {groups} groups")
        rest = self.shape[2:]
        return self.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(self.shape)

    # ------------------------------------------------------------------------------------------------------------
    # sampling grids

    def affine_grid(self, size: Sequence[int], align_corners: bool = False) -> Tensor:
        """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps self, theta (N, 2, 3) (or
        (N, 3, 4)), for an output of `size` (N, C, H, W) (or (N, C, D, H, W)), as torch.nn.functional.affine_grid:
        each output position's normalized (x, y[, z], 1) times theta's transpose. Differentiable in theta.

        >>> Tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]).affine_grid((1, 1, 1, 2), align_corners=True).tolist()
        [[[[-1.0, 0.0], [1.0, 0.0]]]]
        """
        if not dtypes.is_float(self.dtype):
            raise ArgumentError(f"affine_grid: theta must be floating point, got {self.dtype}")
        size = tuple(int(s) for s in size)
        if len(size) not in (4, 5):
            raise NotImplementedError(f"affine_grid: size must be 4-D (a 2-D map) or 5-D (a 3-D map), got {size}")
        nd = len(size) - 2
        if self.ndim != 3 or self.shape[1:] != (nd, nd + 1):
            raise ShapeError(f"affine_grid: theta must be (N, {nd}, {nd + 1}) for size {size}, got {self.shape}")
        spatial = size[2:]
        # (as torch: with align_corners and a unit-size axis, the other sizes go unchecked)
        if not (align_corners and min(spatial) == 1) and min(size) <= 0:
            raise ArgumentError(f"affine_grid: expected a positive output size, got {size}")
        if self.shape[0] != size[0]:
            raise ShapeError(f"affine_grid: theta's batch of {self.shape[0]} doesn't match size {size}")
        np_dt = np.float64 if self.dtype == dtypes.float64 else np.float32
        steps = [_affine_steps(L, align_corners, self.dtype) for L in spatial]
        # each position's (x, y[, z], 1): x runs along the last axis
        mesh = np.meshgrid(*steps, indexing="ij")
        base = np.stack([*reversed(mesh), np.ones(spatial, np_dt)], axis=-1).reshape(-1, nd + 1)
        base_t = Tensor(base, device=self.device).cast(self.dtype)
        return (base_t @ self.transpose(1, 2)).reshape(size[0], *spatial, nd)

    @autocast_op(FLOAT32, CPU)
    def grid_sample(
        self, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool = False
    ) -> Tensor:
        """The input (N, C, H, W) (or (N, C, D, H, W)) read at `grid` (N, Ho, Wo, 2) (or (N, Do, Ho, Wo, 3)), each
        point's (x, y[, z]) normalized to [-1, 1] across the input's width, height (and depth), as
        torch.nn.functional.grid_sample: `mode` "bilinear" (trilinear for 5-D), "nearest" (half to even) or "bicubic"
        (4-D only); `padding_mode` "zeros", "border" or "reflection" for points outside. The reads are gathers on the
        device; the gradient goes to the input and, for bilinear and bicubic, to the grid (nearest gives the grid
        zeros), as torch's.

        >>> img = Tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
        >>> img.grid_sample(Tensor([[[[0.0, 0.0], [1.0, -1.0]]]]), align_corners=True).tolist()
        [[[[1.5, 1.0]]]]
        """
        if mode not in _GRID_MODES:
            raise UnknownModeError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', got {mode!r}")
        if padding_mode not in _GRID_PADDINGS:
            raise UnknownModeError(
                f"grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}"
            )
        if self.ndim not in (4, 5) or grid.ndim != self.ndim:
            raise ShapeError(
                f"grid_sample: expected a 4-D or 5-D input and a grid of as many dims, got "
                f"{self.shape} and {grid.shape}"
            )
        nd = self.ndim - 2
        if grid.shape[0] != self.shape[0] or grid.shape[-1] != nd:
            raise ShapeError(
                f"grid_sample: the grid must be (N, ..., {nd}) with the input's batch, got input {self.shape} and "
                f"grid {grid.shape}"
            )
        if 0 in self.shape[2:]:
            raise ShapeError(f"grid_sample: the input's spatial dims must not be empty, got {self.shape}")
        if mode == "bicubic" and nd != 2:
            raise ArgumentError("grid_sample: bicubic interpolation only supports 4-D input")
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"grid_sample: needs a floating-point input, got {self.dtype} (as PyTorch)")
        if grid.dtype != self.dtype:
            raise DTypeError(f"grid_sample: the grid's dtype {grid.dtype} must be the input's {self.dtype}")
        n, c, spatial = self.shape[0], self.shape[1], self.shape[2:]
        out_sp = grid.shape[1:-1]
        points = prod(out_sp)
        g = grid.reshape(n, points, nd)
        # per input axis (depth, height, width): the points' coordinates in pixels; grid's x is the width's
        coords = [
            _unnormalized(g.shrink((None, None, (nd - 1 - i, nd - i))).reshape(n, points), L, align_corners)
            for i, L in enumerate(spatial)
        ]
        # per axis, the taps read: (position, weight) pairs, the weight None for nearest's single tap
        taps: list[list[tuple[Tensor, Tensor | None]]] = []
        for x, L in zip(coords, spatial, strict=True):
            if mode == "bicubic":
                low = x.detach().floor()
                t = x - low
                weights = _cubic_weights(t)
                positions = [_padded(low + (j - 1), L, padding_mode, align_corners).detach() for j in range(4)]
                taps.append(list(zip(positions, weights, strict=True)))
                continue
            x = _padded(x, L, padding_mode, align_corners)
            if mode == "nearest":
                taps.append([(x.detach().round(), None)])
            else:
                low = x.detach().floor()
                taps.append([(low, low + 1 - x), (low + 1, x - low)])
        flat_strides = [prod(spatial[i + 1 :]) for i in range(nd)]
        indices, insides = [], []
        for combo in itertools.product(*taps):
            inside: Tensor | None = None
            for (pos, _), L in zip(combo, spatial, strict=True):
                ok = (pos >= 0) & (pos <= L - 1)
                inside = ok if inside is None else inside & ok
            assert inside is not None
            # a tap outside reads element 0 (masked below): the gather needs no bounds read back
            flat = sum(
                inside.where(pos, 0).cast(dtypes.int32) * st for (pos, _), st in zip(combo, flat_strides, strict=True)
            )
            indices.append(flat)
            insides.append(inside)
        # the taps' indices and masks stored once (inlined, the gather's one-hot compare would work out every point's
        # coordinates again for every input element, and so would its gradient), as (N, 1, taps per axis..., P)
        k, per_axis = len(indices), tuple(len(t) for t in taps)
        index = Tensor.stack(*indices, dim=1).contiguous().reshape(n, 1, k * points)._broadcast_to((n, c, k * points))
        # (the reads stored too: fused into the weighted sum over the taps, the gather's one-hot sum is no longer
        # the lone reduce of its kernel that the lowerer turns into one load per read, it loops over the input)
        read = self.reshape(n, c, prod(spatial))._gather_checked(2, index).contiguous()
        read = read.reshape(n, c, *per_axis, points)
        values = Tensor.stack(*insides, dim=1).contiguous().reshape(n, 1, *per_axis, points).where(read, 0)
        if mode != "nearest":
            # the weights are separable: each axis's (N, taps, P), stored once, broadcast over the others
            for i, axis_taps in enumerate(taps):
                w = Tensor.stack(*(w for _, w in axis_taps), dim=1).contiguous()
                values = values * w.reshape(n, 1, *(t if a == i else 1 for a, t in enumerate(per_axis)), points)
        out = values.sum(tuple(range(2, 2 + nd))).reshape(n, c, *out_sp)
        # (nearest reads the rounded points: the grid gets a gradient of zeros, not None, as torch's)
        return with_zero_gradient_to(out, grid) if mode == "nearest" else out

    # ------------------------------------------------------------------------------------------------------------
    # embeddings, bilinear forms and distances

    def embedding_bag(
        self,
        weight: Tensor,
        offsets: Tensor | None = None,
        max_norm: float | None = None,
        norm_type: float = 2,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        per_sample_weights: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> Tensor:
        """The sum, mean or max of bags of rows of `weight` (V, D) at the integer indices in self, as
        torch.nn.functional.embedding_bag: a 2-D self (B, L) is B bags of L; a 1-D self is cut into bags at
        `offsets` (each bag's start; with `include_last_offset` the last offset ends the last bag). Entries equal to
        `padding_idx` are left out (a mean counts the others), an empty bag gives zeros; `per_sample_weights` (self's
        shape, mode "sum" only) scales each row. `scale_grad_by_freq` (modes "sum" and "mean") divides each row's
        gradient by how often its index occurs in self, as torch's. max_norm and sparse aren't supported.

        >>> w = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        >>> Tensor([0, 1, 2]).embedding_bag(w, Tensor([0, 2]), mode="sum").tolist()
        [[4.0, 6.0], [5.0, 6.0]]
        """
        if max_norm is not None or sparse:
            raise NotImplementedError(
                "embedding_bag: max_norm and sparse=True aren't supported (renormalize the weight with torch's formula "
                "first, or call nn.functional.embedding_bag, which does; gradients are dense)"
            )
        if mode not in _BAG_MODES:
            raise UnknownModeError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        if per_sample_weights is not None and per_sample_weights.shape != self.shape:
            raise ShapeError(
                f"embedding_bag: per_sample_weights {per_sample_weights.shape} must have the input's shape {self.shape}"
            )
        if weight.ndim != 2:
            raise ShapeError(f"embedding_bag: weight must be 2-D (num_embeddings, dim), got {weight.shape}")
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"embedding_bag: indices must be integers, got {self.dtype}")
        if not dtypes.is_float(weight.dtype):
            raise DTypeError(f"embedding_bag: weight must be floating point, got {weight.dtype}")
        if per_sample_weights is not None:
            if mode != "sum":
                raise NotImplementedError(f"embedding_bag: per_sample_weights needs mode='sum', got mode={mode!r}")
            if per_sample_weights.dtype != weight.dtype:
                raise DTypeError(
                    f"embedding_bag: per_sample_weights ({per_sample_weights.dtype}) must have the weight's dtype "
                    f"({weight.dtype})"
                )
        if scale_grad_by_freq:
            weight = frequency_scaled(self, weight, mode, "embedding_bag")
        num = weight.shape[0]
        if padding_idx is not None:
            if not -num <= padding_idx < num:
                raise ArgumentError(f"embedding_bag: padding_idx must be in [{-num}, {num}), got {padding_idx}")
            padding_idx %= num
        if self.ndim == 2:
            if offsets is not None:
                raise ArgumentError("embedding_bag: a 2-D input is a batch of fixed-length bags; offsets must be None")
            # (B, L, D) rows, bag b is row b, gathered and stored first: the bag reduce fused over the lookup's one-hot
            # sum compared every index with every table row (512 bags of 8 in 10000 rows: 2.6 s, stored: ~1 ms); their
            # gradient stored too and the lookup flat, so that the lookup's gradient is a scatter of it (one reduce
            # axis; over (B, L), or fused with a max's, a one-hot mask: 0.2 s, 4.5 s)
            flat = _gradient_stored_once(self.reshape(-1).embedding(weight)).contiguous()
            rows = flat.reshape(self.shape + (weight.shape[1],))
            member = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device)
            psw = per_sample_weights
        elif self.ndim == 1:
            if offsets is None or offsets.ndim != 1:
                raise ShapeError("embedding_bag: a 1-D input needs 1-D offsets")
            if not dtypes.is_int(offsets.dtype):
                raise DTypeError(f"embedding_bag: offsets must be integers, got {offsets.dtype}")
            length = self.shape[0]
            if offsets._is_plain_buffer() and offsets.numel():
                starts_np = offsets.numpy()
                if starts_np[0] != 0 or starts_np[-1] > length or (np.diff(starts_np) < 0).any():
                    raise ArgumentError(
                        f"embedding_bag: offsets must start at 0, never decrease and end by the input's length {length}"
                        f", got {starts_np.tolist()} (PyTorch checks the first and the last; its CPU result for bags"
                        " after a decrease is unspecified)"
                    )
            # bag b holds the positions in [starts[b], ends[b]): a (B, n) mask over all of them, rows (1, n, D)
            count = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
            if count < 0:
                raise ShapeError("embedding_bag: include_last_offset needs at least one offset")
            if segments.writes_one_by_one(self.device):
                return _bags_by_scatter(self, weight, offsets, count, mode, per_sample_weights, include_last_offset,
                                        padding_idx)  # fmt: skip
            starts = offsets.shrink(((0, count),)).reshape(count, 1)
            if include_last_offset:
                ends = offsets.shrink(((1, count + 1),)).reshape(count, 1)
            else:
                end = Tensor([length], dtype=offsets.dtype, device=self.device)
                ends = offsets.shrink(((1, count),)).cat(end).reshape(count, 1) if count else starts
            position = Tensor.arange(length, dtype=offsets.dtype, device=self.device).reshape(1, length)
            member = (position >= starts) & (position < ends)
            rows = self.embedding(weight).unsqueeze(0)
            psw = None if per_sample_weights is None else per_sample_weights.unsqueeze(0)
        else:
            raise ShapeError(f"embedding_bag: input must be 1-D or 2-D, got {self.shape}")
        if padding_idx is not None:
            member = member & (self != padding_idx)
        picked = member.unsqueeze(-1)
        if mode == "max" and picked.shape[1]:
            top = picked.where(rows, -math.inf).max(axis=1)
            return member.any(1).unsqueeze(-1).where(top, 0.0)
        if psw is not None:
            rows = rows * psw.unsqueeze(-1)
        total = picked.where(rows, 0.0).sum(1)
        if mode != "mean":
            # (a max over no entries at all is this sum: zeros)
            return total
        return total / member.sum(1).maximum(1).unsqueeze(-1).cast(total.dtype)

    def bilinear(self, x2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """y[..., o] = x1[..., :] @ weight[o] @ x2[..., :] + bias[o] with self as x1 (..., in1), x2 (..., in2) of the
        same leading shape and weight (out, in1, in2), as torch.nn.functional.bilinear.

        >>> Tensor([[1.0, 2.0]]).bilinear(Tensor([[3.0]]), Tensor([[[1.0], [1.0]]]), Tensor([0.5])).tolist()
        [[9.5]]
        """
        if weight.ndim != 3:
            raise ShapeError(f"bilinear: weight must be (out, in1, in2), got {weight.shape}")
        out, in1, in2 = weight.shape
        if self.ndim == 0 or x2.ndim != self.ndim or self.shape[:-1] != x2.shape[:-1]:
            raise ShapeError(f"bilinear: the inputs' leading dims must match, got {self.shape} and {x2.shape}")
        if self.shape[-1] != in1 or x2.shape[-1] != in2:
            raise ShapeError(
                f"bilinear: inputs {self.shape} and {x2.shape} don't fit weight {weight.shape} (..., in1), (..., in2)"
            )
        if bias is not None and bias.shape != (out,):
            raise ShapeError(f"bilinear: bias must be ({out},), got {bias.shape}")
        lead = self.shape[:-1]
        rows = prod(lead)
        # x1 times every weight[o] at once (one matrix product), then the dot with x2
        left = self.reshape(rows, in1) @ weight.permute(1, 0, 2).reshape(in1, out * in2)
        y = (left.reshape(rows, out, in2) * x2.reshape(rows, 1, in2)).sum(-1)
        if bias is not None:
            y = y + bias
        return y.reshape(*lead, out)

    @autocast_op(FLOAT32)
    def cdist(self, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
        """The p-norm distance between each row of self (..., P, M) and each row of x2 (..., R, M): (..., P, R), the
        batch axes broadcast (torch.cdist). p = 0 counts the coordinates that differ, p = inf takes the largest
        difference (each tied largest difference gets the whole gradient, as torch's). Computed from the P R M
        differences: exact, where torch computes p = 2 through a matrix product once P or R exceeds 25 (torch's
        `compute_mode` is accepted and changes nothing).

        >>> Tensor([[0.0, 0.0]]).cdist(Tensor([[3.0, 4.0], [1.0, 0.0]])).tolist()
        [[5.0, 1.0]]
        """
        if not isinstance(x2, Tensor):
            raise TypeError(f"cdist: x2 must be a Tensor, got {type(x2).__name__}")
        if self.ndim < 2 or x2.ndim < 2 or self.shape[-1] != x2.shape[-1]:
            raise ShapeError(
                f"cdist: needs (..., P, M) and (..., R, M) with the same M, got shapes {self.shape} and {x2.shape}"
            )
        for name, t in (("x1", self), ("x2", x2)):
            if not dtypes.is_float(t.dtype):
                raise TypeError(f"cdist: needs floating-point operands, {name} is {t.dtype}; cast with .float()")
        if not p >= 0:
            raise ArgumentError(f"cdist: p must be >= 0 (or inf), got {p}")
        if compute_mode not in _CDIST_MODES:
            raise ArgumentError(f"cdist: compute_mode must be one of {', '.join(_CDIST_MODES)}, got {compute_mode!r}")
        _broadcast_shape(self.shape[:-2], x2.shape[:-2], "cdist")
        diff = self.unsqueeze(-2) - x2.unsqueeze(-3)
        axis = diff.ndim - 1
        if p == math.inf and diff.shape[axis] == 0:
            # (no coordinates: distance 0, as torch's; the max of nothing has no value)
            dist = diff.sum(axis, keepdim=True)
        elif p == math.inf:
            largest = diff.abs().max(axis=axis, keepdim=True)
            # (the gradient to every largest |difference|, ties included)
            dist = _with_reduced_derivative(
                largest, diff, lambda d: d.sign() * (d.abs() == d.abs().max(axis=axis, keepdim=True)), axis
            )
        else:
            dist = diff._vector_norm(axis, p, "cdist")
        return dist.squeeze(axis)

    def pairwise_distance(self, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
        """||x1 - x2 + eps||_p over the last axis of the broadcast operands (self is x1), as
        torch.nn.functional.pairwise_distance.

        >>> round(Tensor([[3.0, 0.0]]).pairwise_distance(Tensor([[0.0, 4.0]]), eps=0.0).item(), 4)
        5.0
        """
        diff = self - x2 + eps
        return diff.norm(p, dim=-1, keepdim=keepdim) if diff.ndim else diff.abs()

    def pdist(self, p: float = 2.0) -> Tensor:
        """The p-norm distances between the rows of (N, M), the upper triangle of cdist(x, x) row by row (pairs
        (0, 1), (0, 2), ..., (1, 2), ...), N * (N - 1) / 2 of them, as torch.nn.functional.pdist.

        >>> Tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]]).pdist().tolist()
        [5.0, 10.0, 5.0]
        """
        if self.ndim != 2:
            raise ShapeError(f"pdist: only 2-D inputs (N, M), got shape {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"pdist: needs a floating-point input, got {self.dtype}")
        if p < 0:
            raise ArgumentError(f"pdist: p must be non-negative, got {p}")
        first, second = np.triu_indices(self.shape[0], 1)
        if not len(first):
            return Tensor.zeros(0, dtype=self.dtype, device=self.device)
        diff = self._take(0, first) - self._take(0, second)
        return diff._vector_norm(1, float(p), "pdist").reshape(-1)

    # ------------------------------------------------------------------------------------------------------------
    # channel-wise dropouts, alpha dropouts, gumbel softmax and group norm

    def dropout1d(self, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
        """Zero whole channels (axis 1 of (N, C, L), axis 0 of an unbatched (C, L)) with probability p, scaling the
        rest by 1 / (1 - p), as torch.nn.functional.dropout1d: `training` is the argument (default True), not
        Tensor.training; inplace writes into self.

        >>> Tensor.ones(2, 3).dropout1d(0.5, training=False).tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
        """
        _check_probability(p)
        if self.ndim not in (2, 3):
            raise ShapeError(f"dropout1d: expected a 2-D or 3-D input (one spatial dim), got shape {self.shape}")
        return self._feature_dropout(p, training, inplace, "dropout1d", batched=self.ndim == 3)

    def dropout2d(self, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
        """Zero whole channels (axis 1 of (N, C, H, W)) with probability p, scaling the rest by 1 / (1 - p), as
        torch.nn.functional.dropout2d (a 3-D input is taken as (N, C, L), with torch's warning).

        >>> Tensor.ones(1, 2, 1, 1).dropout2d(1.0).flatten().tolist()
        [0.0, 0.0]
        """
        _check_probability(p)
        if self.ndim not in (3, 4):
            warnings.warn(
                f"dropout2d: a {self.ndim}-D input is deprecated (torch's warning); dropout2d is for 3-D or 4-D inputs",
                stacklevel=2,
            )
        if self.ndim == 3:
            warnings.warn(
                "dropout2d: a 3-D input is taken as (N, C, L), channel-wise 1-D dropout (torch's behaviour); use "
                "dropout1d for that",
                stacklevel=2,
            )
        return self._feature_dropout(p, training, inplace, "dropout2d", batched=True)

    def dropout3d(self, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
        """Zero whole channels (axis 1 of (N, C, D, H, W), axis 0 of an unbatched (C, D, H, W)) with probability p,
        scaling the rest by 1 / (1 - p), as torch.nn.functional.dropout3d.

        >>> Tensor.ones(1, 2, 1, 1, 1).dropout3d(0.0).flatten().tolist()
        [1.0, 1.0]
        """
        _check_probability(p)
        if self.ndim not in (4, 5):
            warnings.warn(
                f"dropout3d: a {self.ndim}-D input is deprecated (torch's warning); dropout3d is for 4-D or 5-D inputs",
                stacklevel=2,
            )
        return self._feature_dropout(p, training, inplace, "dropout3d", batched=self.ndim == 5)

    def alpha_dropout(self, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
        """Dropout for SELU networks, as torch.nn.functional.alpha_dropout (training defaults to False, as torch's):
        each element is dropped with probability p to SELU's negative saturation, then all are scaled and shifted so
        that a zero-mean, unit-variance input keeps its mean and variance.

        >>> Tensor([1.0, 2.0]).alpha_dropout(0.5).tolist()
        [1.0, 2.0]
        """
        _check_probability(p)
        return self._alpha_dropped(p, training, inplace, self.shape, "alpha_dropout")

    def feature_alpha_dropout(self, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
        """alpha_dropout of whole channels (axis 1; the draws are shaped (N, C, 1, ...)), as
        torch.nn.functional.feature_alpha_dropout.

        >>> Tensor.ones(1, 2, 2).feature_alpha_dropout(0.5).tolist()
        [[[1.0, 1.0], [1.0, 1.0]]]
        """
        _check_probability(p)
        if training and 0 < p < 1 and self.numel() and self.ndim < 2:
            raise ShapeError(f"feature_alpha_dropout: needs at least 2 dims, got shape {self.shape}")
        shape = self.shape[:2] + (1,) * (self.ndim - 2)
        return self._alpha_dropped(p, training, inplace, shape, "feature_alpha_dropout")

    def feature_dropout(self, p: float, train: bool) -> Tensor:
        """Zero whole features with probability p when `train`, one draw per (sample, channel) (axes 0 and 1, the rest
        broadcast: a 2-D input's elements each), scaling the rest by 1 / (1 - p), as torch.feature_dropout(input, p,
        train); no-op without `train`.

        >>> Tensor.ones(2, 2, 3).feature_dropout(1.0, True).sum().item(), Tensor.ones(1, 2).feature_dropout(0.5, False)
        (0.0, Tensor([[1., 1.]]))
        """
        _check_probability(p)
        return self._feature_dropout(p, train, False, "feature_dropout", batched=True)

    def _feature_dropout(self, p: float, training: bool, inplace: bool, op: str, batched: bool) -> Tensor:
        # torch's feature dropout: one draw per (sample, channel) broadcast over the rest; the input times the noise
        # (keep / (1 - p) or 0), so a dropped inf or NaN gives NaN as torch's
        if p == 0 or not training or self.numel() == 0:
            return self
        x = self if batched else self.unsqueeze(0)
        if p == 1:
            out = self * 0
        elif x.ndim < 2:
            raise ShapeError(f"{op}: feature dropout needs at least 2 dims, got shape {self.shape}")
        else:
            noise_shape = x.shape[:2] + (1,) * (x.ndim - 2)
            keep = Tensor.rand(noise_shape, device=self.device) >= p
            # (in float for an int input, as dropout's: its scale truncated into the int dtype, and wrapped)
            noise = keep.where(1.0 / (1.0 - p), 0.0).cast(least_upper_float(self.dtype))
            out = x * noise if batched else (x * noise).squeeze(0)
        return self._update_in_place(lambda: out, op + "_") if inplace else out

    def _alpha_dropped(self, p: float, training: bool, inplace: bool, shape: tuple[int, ...], op: str) -> Tensor:
        if p == 0 or not training or self.numel() == 0:
            return self
        if p == 1:
            out = self * 0
        else:
            # kept: a * x + alpha * a * p; dropped: a * alpha * (p - 1) (torch's x * noise + b, x * 0 when dropped)
            a = 1.0 / math.sqrt((_SELU_SATURATION**2 * p + 1) * (1 - p))
            keep = Tensor.rand(shape, device=self.device) >= p
            # (in float for an int input, as dropout's: its scale and shift truncated into the int dtype)
            noise = keep.where(a, 0.0).cast(least_upper_float(self.dtype))
            shift = keep.where(_SELU_SATURATION * a * p, _SELU_SATURATION * a * (p - 1)).cast(noise.dtype)
            out = self * noise + shift
        return self._update_in_place(lambda: out, op + "_") if inplace else out

    def gumbel_softmax(self, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
        """softmax((logits + g) / tau) along `dim` with g drawn from the standard Gumbel distribution (self is the
        logits), as torch.nn.functional.gumbel_softmax; `hard` gives the one-hot of each argmax in the value and the
        soft sample's gradient (the straight-through estimator). `eps` is unused, as torch's (deprecated there).

        >>> Tensor([[0.0, 100.0, 0.0]]).gumbel_softmax(hard=True).tolist()
        [[0.0, 1.0, 0.0]]
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"gumbel_softmax: the logits must be floating point, got {self.dtype}")
        if eps != 1e-10:
            warnings.warn("gumbel_softmax: `eps` is deprecated and has no effect (as torch's)", stacklevel=2)
        axis = _normalize_axis(dim, self.ndim, "gumbel_softmax", self.shape)
        draws = Tensor.rand(self.shape, device=self.device, dtype=self.dtype)
        # -log(E) with E exponential(1) (torch's exponential_, from a uniform in [0, 1))
        gumbels = -(-(1 - draws).log()).log()
        soft = ((self + gumbels) / tau).softmax(axis)
        if not hard:
            return soft
        if self.ndim == 0:
            return _with_gradient_of(Tensor.ones_like(soft), soft)
        top = soft.argmax(axis, keepdim=True)
        n = self.shape[axis]
        places = Tensor.arange(n, device=self.device).reshape([n if a == axis else 1 for a in range(self.ndim)])
        # the one-hot's value, the soft sample's gradient (torch's y_hard - y_soft.detach() + y_soft, but exactly 0
        # and 1: that sum can round an ulp off)
        return _with_gradient_of((places == top).cast(self.dtype), soft)

    @in_float32
    def group_norm(
        self,
        num_groups: int,
        weight: Tensor | None = None,
        bias: Tensor | None = None,
        eps: float = 1e-5,
        cudnn_enabled: bool = True,
    ) -> Tensor:
        """Normalize (N, C, *) over each of `num_groups` groups of channels (and all positions), then scale and shift
        each channel by weight and bias (C,), as torch.nn.functional.group_norm (nn.GroupNorm's function) and
        torch.group_norm (whose `cudnn_enabled` changes nothing).

        >>> [round(v, 4) for v in Tensor([[[1.0], [3.0]]]).group_norm(1).flatten().tolist()]
        [-1.0, 1.0]
        """
        if self.ndim < 2:
            raise ShapeError(f"group_norm: expected at least 2 dims (N, C, ...), got shape {self.shape}")
        n, c = self.shape[:2]
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups <= 0 or c % num_groups:
            raise ShapeError(f"group_norm: {c} channels (shape {self.shape}) aren't divisible into {num_groups} groups")
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and t.shape != (c,):
                raise ShapeError(f"group_norm: {name} must be ({c},), one per channel, got {t.shape}")
        spatial = prod(self.shape[2:])
        if n * c // num_groups * spatial == 1:
            # (torch's check, on the statistics' batch)
            raise ArgumentError(
                f"group_norm: each group needs at least 2 values to take a variance, got input {self.shape}"
            )
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"group_norm: needs a floating-point input, got {self.dtype} (as PyTorch)")
        grouped = self.reshape(n, num_groups, c // num_groups * spatial)
        x = grouped.layernorm(-1, eps).reshape(self.shape)
        per_channel = (1, c) + (1,) * (self.ndim - 2)
        if weight is not None:
            x = x * weight.reshape(per_channel)
        return x if bias is None else x + bias.reshape(per_channel)

    @in_float32
    def adaptive_avg_pool2d(self, output_size: int | Sequence[int | None]) -> Tensor:
        """Mean over windows that split each of the last len(output_size) axes into `output_size` parts, output i
        averaging [floor(i L / O), ceil((i + 1) L / O)) as PyTorch's (None keeps an axis). Even splits are an
        avg_pool2d; others a masked sum over windows as long as the longest (`_adaptive_windows`).

        >>> Tensor.arange(6).reshape(1, 2, 3).float().adaptive_avg_pool2d((1, 2)).tolist()
        [[[2.0, 3.0]]]
        """
        return self._adaptive_pool(output_size, "adaptive_avg_pool2d")

    def adaptive_max_pool2d(self, output_size: int | Sequence[int | None], return_indices: bool = False) -> Any:
        """Max over the windows of adaptive_avg_pool2d, as PyTorch's (its gradient goes to each window's maxima).
        With return_indices, also where each max is: its (int32) flat index in the input's pooled plane (the first
        one on a tie), as max_pool2d's.

        >>> Tensor.arange(6).reshape(1, 2, 3).float().adaptive_max_pool2d((1, 2)).tolist()
        [[[4.0, 5.0]]]
        """
        return self._adaptive_pool(output_size, "adaptive_max_pool2d", return_indices)

    def _adaptive_pool(self, output_size: int | Sequence[int | None], op: str, return_indices: bool = False) -> Any:
        n = len(output_size) if isinstance(output_size, (tuple, list)) else 2
        sizes = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size] * n
        if self.ndim < n:
            raise ShapeError(f"{op}: output size {tuple(sizes)} has more dims than the input shape {self.shape}")
        spatial = self.shape[-n:]
        out = tuple(L if O is None else int(O) for L, O in zip(spatial, sizes, strict=True))
        if any(O < 0 for O in out):
            raise ShapeError(f"{op}: output size {tuple(sizes)} must not be negative")
        if any(L == 0 for L in spatial):
            raise ShapeError(f"{op}: the input {self.shape} is empty along a pooled axis (as PyTorch, that's refused)")
        is_max = op == "adaptive_max_pool2d"
        if 0 in out:
            # no windows: an empty result, as PyTorch's (an "area" resize by a scale that rounds an axis to 0)
            dt = self.dtype if is_max else self._float().dtype
            empty = Tensor.zeros(*self.shape[:-n], *out, device=self.device, dtype=dt)
            return (empty, empty.cast(dtypes.int32)) if return_indices else empty
        if all(L % O == 0 for L, O in zip(spatial, out, strict=True)):
            kernel = tuple(L // O for L, O in zip(spatial, out, strict=True))
            # (an integer input averages to floats, as on the uneven path)
            if is_max:
                return self.max_pool2d(kernel, return_indices=return_indices)
            return self._float().avg_pool2d(kernel)
        if self.requires_grad:
            # (the windows' gradient through their movement ops is a sum over the O repeats and the taps: 30x slower
            # than these paths' own, a mask per axis and a gather)
            values = self._adaptive_pool_for_gradient(out, is_max)
            if not (is_max and return_indices):
                return values
            # the indices, which take no gradient, from the windows of the path below
            return values, self.detach()._adaptive_pool(output_size, op, True)[1]
        windows, inside = self._adaptive_windows(out)
        axes = tuple(range(-n, 0))
        if not is_max:
            # each window's sum over its length (masked by a select: weights of 0 would spread a NaN or an inf in a tap
            # past the window's end as 0 * inf)
            x = windows._float()
            total = Tensor(inside, device=self.device).where(x, 0).sum(axes)
            count = Tensor(inside.sum(axes).astype(np.float32), device=self.device).cast(x.dtype)
            return total / count
        # positions past a window's end masked with the dtype's lowest value (they come last in its scan order, so a
        # tie never gives them the gradient), then the max over the taps, its gradient to each window's first maximum
        # as max_pool2d's
        low = dtypes.min(self.dtype)
        windows = Tensor(inside, device=self.device).where(windows, low)
        values = windows.max(axis=axes)
        _set_first_max_gradient(values.uop, windows.uop, n)
        if not return_indices:
            return values
        # the flat position of every input element in its plane, in the same windows (past a window's end: the plane's
        # size)
        plane = prod(spatial)
        pos = Tensor.arange(plane, device=self.device, dtype=dtypes.positions(plane)).reshape(spatial)
        pos_windows = Tensor(inside, device=self.device).where(pos._adaptive_windows(out)[0], plane)
        return values, _window_argmax(windows, values, pos_windows, plane, axes)

    def _adaptive_windows(self, out: tuple[int, ...]) -> tuple[Tensor, np.ndarray]:
        """The windows of an adaptive pool over the last len(out) axes as movement ops, (..., *out, *k) with k the
        longest window per axis, and which of their taps lie inside the window, (*out, *k). An uneven axis (L in, O
        out) is repeated O times in place: window i then reads taps i*L + j*O of that axis, element floor(i*L/O) + j,
        windows of stride L and dilation O, a pool's (a gather of the taps by index was a one-hot sum over the axis
        per tap, 60x slower than PyTorch)."""
        n, lead = len(out), self.ndim - len(out)
        x, inside = self, np.ones((), bool)
        for L, O in zip(self.shape[lead:], out, strict=True):
            # (the first axis left is moved last, its windows appended: (*lead, O_1, k_1, ..., O_n, k_n) at the end)
            t = x._move_to_end(lead)
            rest = t.shape[:-1]
            if L % O == 0:
                t, valid = t._reshaped(rest + (O, L // O)), np.ones((O, L // O), bool)
            else:
                starts, ends = _adaptive_bounds(L, O)
                k = int((ends - starts).max())
                wide = t.unsqueeze(-1).expand(*rest, L, O)._reshaped(rest + (L * O,))
                # (the last window's taps past its end wrap to the axis' start: masked)
                t, valid = wide._pool1d(k, L, O, wrapped=O), np.arange(k) < (ends - starts)[:, None]
            x = t
            inside = inside[..., None, None] & valid.reshape((1,) * inside.ndim + valid.shape)
        order = [*range(0, 2 * n, 2), *range(1, 2 * n, 2)]
        x = x.permute([*range(lead), *(lead + a for a in order)])
        return x, inside.transpose(order)

    def _adaptive_pool_for_gradient(self, out: tuple[int, ...], is_max: bool) -> Tensor:
        n, lead = len(out), self.ndim - len(out)
        if not is_max:
            # separable: per axis, each window's sum (a mask over the axis: weights of 0 would spread a NaN or an inf
            # to every window as 0 * inf) over its length
            x = self._float()
            for i, O in enumerate(out):
                L = self.shape[lead + i]
                starts, ends = _adaptive_bounds(L, O)
                inside = (np.arange(L) >= starts[:, None]) & (np.arange(L) < ends[:, None])
                rows = x._move_to_end(lead + i).unsqueeze(-2)
                total = Tensor(inside, device=self.device).where(rows, 0).sum(-1)
                count = Tensor((ends - starts).astype(np.float32), device=self.device).cast(x.dtype)
                x = (total / count)._move_from_end(lead + i)
            return x
        # the taps gathered per axis (clamped to the window's end), then masked as `_adaptive_pool`'s
        x, mask = self, np.ones((), bool)
        for i, O in enumerate(out):
            starts, ends = _adaptive_bounds(self.shape[lead + i], O)
            k = int((ends - starts).max())
            pos = starts[:, None] + np.arange(k)
            ax = lead + 2 * i
            x = x._take(ax, np.minimum(pos, ends[:, None] - 1).ravel())
            x = x.reshape(x.shape[:ax] + (O, k) + x.shape[ax + 1 :])
            valid = pos < ends[:, None]
            mask = mask[..., None, None] & valid.reshape((1,) * (2 * i) + valid.shape)
        windows = Tensor(mask, device=self.device).where(x, dtypes.min(self.dtype))
        windows = windows.permute([*range(lead), *range(lead, lead + 2 * n, 2), *range(lead + 1, lead + 2 * n, 2)])
        values = windows.max(axis=tuple(range(-n, 0)))
        _set_first_max_gradient(values.uop, windows.uop, n)
        return values


def frequency_scaled(input: Tensor, weight: Tensor, mode: str, fn: str) -> Tensor:
    """`weight` with the same values and each row's gradient divided by how often its index occurs in `input` (all
    bags together), as torch's scale_grad_by_freq in mode "sum" and "mean"; with no gradient to scale, weight itself.
    (torch 2.13's CPU backward divides some rows by another index's count; this is the
    documented rule, which its GPU backend and its `embedding` follow.)"""
    if mode == "max":
        raise ArgumentError(f"{fn}: max mode does not support scaling the gradient by the frequency (as PyTorch)")
    if not (weight.requires_grad and is_grad_enabled()):
        return weight
    flat = input.flatten()
    ones = Tensor.ones(flat.shape, dtype=weight.dtype, device=flat.device)
    counts = segments.added_at(flat, ones, weight.shape[0]).maximum(1).unsqueeze(-1)
    # (the value untouched: weight - weight.detach() is 0; an unused row's count 0 taken as 1, its gradient is 0)
    return weight.detach() + (weight - weight.detach()) / counts


def _bags_by_scatter(
    idx: Tensor,
    weight: Tensor,
    offsets: Tensor,
    count: int,
    mode: str,
    psw: Tensor | None,
    include_last_offset: bool,
    padding_idx: int | None,
) -> Tensor:
    """embedding_bag of a 1-D input cut at `offsets` into `count` bags, on a device that adds a scatter's writes one by
    one: each position's bag (how many bag starts after the first are at or before it) and a scatter of its row into
    that bag, writes + bags instead of the (bags, positions) mask (8192 bags: 314 ms -> a few ms). Positions in no bag
    (past an include_last_offset end, padding_idx) go to a bag more, dropped. The bags are in range by construction:
    the scatters don't read their bounds back (each check a sync)."""
    length = idx.shape[0]
    device = idx.device
    starts = offsets.cast(dtypes.int32).shrink(((0, count),))
    if count > 1:
        # a 1 at each later bag's start, summed up to each position
        later = starts.shrink(((1, count),)).clip(0, length)
        marks = segments.added_at(later, Tensor.ones(count - 1, dtype=dtypes.int32, device=device), length + 1)
        bag = marks.shrink(((0, length),)).cumsum(0).cast(dtypes.int32).clip(0, count - 1)
    else:
        bag = Tensor.zeros(length, dtype=dtypes.int32, device=device)
    position = Tensor.arange(length, dtype=dtypes.int32, device=device)
    member = position >= starts.shrink(((0, 1),)) if count else position < 0
    if include_last_offset:
        member = member & (position < offsets.cast(dtypes.int32).shrink(((count, count + 1),)))
    if padding_idx is not None:
        member = member & (idx != padding_idx)
    bag = member.where(bag, count)
    rows = idx.embedding(weight)
    if psw is not None:
        rows = rows * psw.unsqueeze(-1)
    # (no positions at all: every bag is empty, zeros, as the sum below gives them with the weight in their graph; the
    # scatter's gradient rule over no rows lost it)
    if mode == "max" and length:
        base = Tensor.zeros(count + 1, weight.shape[1], dtype=weight.dtype, device=device)
        spread = bag.contiguous().unsqueeze(-1)._broadcast_to(rows.shape)
        best = segments.scatter_extreme(base, 0, spread, rows, "amax", False)
        best = segments.with_extreme_gradient(best, base, 0, spread, rows, "amax", False)
        return best.shrink(((0, count), None))
    total = segments.added_at(bag, rows, count + 1).shrink(((0, count), None))
    if mode != "mean":
        return total
    sizes = segments.added_at(bag, Tensor.ones(length, dtype=dtypes.int32, device=device), count + 1)
    return total / sizes.shrink(((0, count),)).maximum(1).unsqueeze(-1).cast(total.dtype)


def _check_probability(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout: p is a probability, in [0, 1], got {p}")


def _affine_steps(L: int, align_corners: bool, dtype: DType) -> np.ndarray:
    # the normalized coordinates of L positions: -1 and 1 at the outer pixels' centres (align_corners), else at their
    # outer edges; one position is at 0. Rounded as torch's: its linspace(-1, 1, L) in the dtype, then (without
    # align_corners) times L - 1 and divided by L, each rounded to the dtype. An identity theta puts every point on
    # a pixel centre, where bilinear sampling's gradient to the grid is one-sided: a coordinate one ulp off flips
    # which side, so the grid's last bits decide the gradient to theta there
    np_dt = np.float64 if dtype == dtypes.float64 else np.float32
    if L <= 1:
        return np.zeros(max(L, 0), np_dt)
    steps = _LinspaceValues(-1, 1, L, dtype)
    r = np.asarray(steps(np.arange(L, dtype=np.float64)), np_dt)
    if not align_corners:
        r = steps._rounded(steps._rounded(r * np_dt(L - 1)) / np_dt(L))
    return np.asarray(r, np_dt)


def _unnormalized(x: Tensor, L: int, align_corners: bool) -> Tensor:
    # [-1, 1] to pixels: -1 and 1 the outer pixels' centres (align_corners) or their outer edges
    if align_corners:
        return (x + 1) / 2 * (L - 1)
    return ((x + 1) * L - 1) / 2


def _padded(x: Tensor, L: int, padding_mode: str, align_corners: bool) -> Tensor:
    """A pixel coordinate mapped into [0, L - 1] as `padding_mode` says ("zeros": as it is, reads outside give 0)."""
    if padding_mode == "zeros":
        return x
    if padding_mode == "reflection":
        x = _reflected(x, L, align_corners)
    # as torch's clip: NaN goes to 0 (and a reflected inf, NaN by then), the gradient is 1 strictly inside only (the
    # borders count as outside)
    low = (x > 0).where(x, 0.0)
    clipped = (low < L - 1).where(low, L - 1)
    return _with_derivative(clipped, x, ((x > 0) & (x < L - 1)).cast(x.dtype))


def _reflected(x: Tensor, L: int, align_corners: bool) -> Tensor:
    # reflected at the outer pixels' centres (align_corners) or their outer edges, as often as it takes; the gradient
    # is +-1 by the number of reflections
    twice_low, twice_high = (0, 2 * (L - 1)) if align_corners else (-1, 2 * L - 1)
    if twice_low == twice_high:
        return Tensor.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    a = x - low
    a = (a < 0).where(-a, a)
    flips = (a / span).floor().detach()
    extra = a - flips * span
    even = (flips * 0.5).floor() == flips * 0.5
    return even.where(extra + low, span - extra + low)


def _cubic_weights(t: Tensor) -> list[Tensor]:
    # the cubic convolution's weights of the taps at -1, 0, 1 and 2 from a point t in [0, 1) past tap 0
    def near(d: Tensor) -> Tensor:  # |d| <= 1
        return ((_CUBIC_A + 2) * d - (_CUBIC_A + 3)) * d * d + 1

    def far(d: Tensor) -> Tensor:  # 1 < |d| < 2
        return ((_CUBIC_A * d - 5 * _CUBIC_A) * d + 8 * _CUBIC_A) * d - 4 * _CUBIC_A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _adaptive_bounds(L: int, O: int) -> tuple[np.ndarray, np.ndarray]:
    # the windows of an adaptive pool splitting L into O, as PyTorch's: [floor(i L / O), ceil((i + 1) L / O))
    i = np.arange(O)
    return i * L // O, -((-(i + 1) * L) // O)

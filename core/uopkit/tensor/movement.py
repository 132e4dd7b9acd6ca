"""Movement ops: views (reshape, permute, expand, pad, shrink, flip) and their combinations (a mixin of `Tensor`)."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, complex_dtype_of, dtypes, is_dtype_like, least_upper_dtype, to_dtype
from uopkit.gradient import set_gradient
from uopkit.helpers import prod
from uopkit.schedule import live_tensors
from uopkit.tensor.complex_creation import to_complex
from uopkit.tensor.complex_tensor import ComplexTensor
from uopkit.tensor.memory_format import as_memory_format, dims_order
from uopkit.tensor.movement_args import (
    _check_output_size,
    _common_shape,
    _ComplexParts,
    _pixel_factor,
    _target_shape,
    _tensors_and_dim,
)
from uopkit.tensor.rearrange import rearrange
from uopkit.tensor.replay import replayed
from uopkit.tensor.several_views import mark_several_views
from uopkit.tensor.support import (
    _A_RESHAPED_COPY,
    ArgumentError,
    IndexRangeError,
    ShapeError,
    UnknownModeError,
    _as_shape,
    _canonical_device,
    _check_same_device,
    _check_stored_scalar,
    _contiguous_ids,
    _dim_for_axis,
    _expanded_const,
    _is_device_object,
    _mark_view,
    _normalize_axis,
    _remember_windows,
    _reshape_is_view,
    _reshape_uop,
    _returns_copy,
    _with,
    mark_dtype_view,
)
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# (a module constant: on Python 3.11 every `Ops.X` is a lookup through EnumType's slow __getattr__ hook)
_DETACH = Ops.DETACH


# a cat of a cat of ... this deep (a KV cache or a list grown by `torch.cat` in a loop, never realized) is stored before
# it is read again: each level is a pad and an add that the whole chain computes again on every realize
CAT_CHAIN_STORED = 4
_CHAIN_VIEWS = frozenset({Ops.DETACH, Ops.SHRINK, Ops.RESHAPE, Ops.PERMUTE})


def _cut_cat_chain(t: Tensor) -> Tensor:
    """`t`, realized first when it is the end of a chain of CAT_CHAIN_STORED unrealized cats (each a sum of padded
    pieces, followed through its first piece and views or detaches of it: a memory `cat([mem, h])[-n:].detach()`)."""
    u, depth = t.uop, 0
    while depth < CAT_CHAIN_STORED:
        while u.op in _CHAIN_VIEWS:
            u = u.src[0]
        if u.op not in (Ops.ADD, Ops.OR) or not all(_cat_piece_source(s) is not None for s in u.src):
            break
        u, depth = _cat_piece_source(u.src[0]), depth + 1
    return t.realize() if depth >= CAT_CHAIN_STORED else t


# the dtypes whose constant pad `_filled_outside` builds (bfloat16, stored as uint16 bits, and the int and bool dtypes,
# with their stored-value rules, go through Tensor.full and where)
_DIRECT_FILL_DTYPES = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})


def _filled_outside(padded: Tensor, source: UOp, pads: tuple[tuple[int, int], ...], value: Any) -> Tensor:
    """`padded` (PAD of `source`, zeros outside) with `value` outside: where(PAD(ones), padded, value), the graph
    `Tensor.ones(...).pad(pads).where(padded, value)` builds, with its nodes built directly. Every float piece of a cat
    is padded with -0.0 (`_cat_piece`), and through the public calls a pad took twice as long (stacking a model's 62
    gradient norms for clip_grad_norm_ took 5 ms)."""
    device = UOp(Ops.DEVICE, arg=padded.device)
    mask = UOp(Ops.PAD, dtypes.bool, (_expanded_const(True, dtypes.bool, device, source.shape),), pads)
    fill = _expanded_const(value, padded.dtype, device, padded.shape)
    return Tensor(UOp(Ops.WHERE, padded.dtype, (mask, padded.uop, fill)))


def _cat_piece_source(u: UOp) -> UOp | None:
    # what a piece of a cat pads: PAD(x), or where(mask, PAD(x), -0.0) for a float piece (Tensor.cat)
    u = u.src[0] if u.op is Ops.DETACH else u
    if u.op is Ops.WHERE and u.src[1].op is Ops.PAD:
        u = u.src[1]
    return u.src[0] if u.op is Ops.PAD else None


def _cat_piece(t: Tensor, pads: tuple[tuple[int, int], ...]) -> Tensor:
    """t padded to its place in a cat: a float piece with -0.0, which leaves every value it is added to as it is (+0.0
    turns a -0.0 of another piece into +0.0), its gradient the incoming one cut to t's place, as a plain pad's (a
    where's would carry the padded mask into the gradient, each piece's offset in its kernel: a recurrent layer's steps
    then compiled a kernel each)."""
    if not dtypes.is_float(t.dtype):
        return t.pad(pads)
    from uopkit.gradient import set_gradient

    piece = t.pad(pads, value=-0.0)
    region = tuple((b, b + n) for (b, _), n in zip(pads, t.shape, strict=True))

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        return (UOp(Ops.SHRINK, g.dtype, (g,), region),)

    set_gradient(piece.uop, (t.uop,), rule)
    return piece


class MovementMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # movement

    def reshape(self, shape: int | Sequence[int], *args: int) -> Tensor:
        """The same values in a new shape (one dimension may be -1; None keeps the dimension at that position, as
        tinygrad's).

        >>> Tensor.arange(6).reshape(2, -1).shape
        (2, 3)
        """
        dims = (shape, *args) if args else shape
        if isinstance(dims, (tuple, list)) and any(type(d) is not int for d in dims):
            dims = self._reshape_dims(dims)
        new = _as_shape(dims)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {new}")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: can't infer -1 in {new} for a tensor of shape {self.shape}")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if prod(new) != self.numel() or any(s < 0 for s in new):
            raise ShapeError(f"reshape: can't reshape {self.shape} ({self.numel()} elements) to {new}")
        if new == self.shape:
            return _alias(self)
        out = Tensor(_reshape_uop(self.uop, new))
        if not _reshape_is_view(self.uop, new):
            # no strides show these elements in this shape (`x.T.reshape(-1)`): PyTorch copies, so a write into the
            # result stays in it
            out._view_of = _A_RESHAPED_COPY
            return out
        return _mark_view(out, self)

    def _reshaped(self, shape: tuple[int, ...]) -> Tensor:
        # reshape for the library's own movement constructions (pooling windows, strided slices), whose results are
        # PyTorch views by construction or intermediates: no check of PyTorch's stride rules (a conv's backward
        # builds dozens per step)
        return self if shape == self.shape else _mark_view(Tensor(_reshape_uop(self.uop, shape)), self)

    def view(self, *shape: Any) -> Tensor:
        """Alias of reshape; with a dtype, the same bits read as that dtype, as torch's view(dtype): bitcast, and for
        a dtype of another item size the last dim scaled by the ratio of the sizes.

        >>> Tensor.arange(4).view(2, 2).shape
        (2, 2)
        >>> Tensor([1.0]).view(dtypes.uint8).tolist()
        [0, 0, 128, 63]
        """
        if len(shape) == 1 and is_dtype_like(shape[0]):
            dt = to_dtype(shape[0])
            if dt == self.dtype:
                return self
            out = self.bitcast(dt) if dt.itemsize == self.dtype.itemsize else self._bytes_as(dt)
            # (a copy: a write into it, which torch's view would pass on to self, raises)
            mark_dtype_view(out)
            return out
        return self.reshape(*shape)

    def permute(self, order: Sequence[int] | None = None, *args: int, dims: Sequence[int] | None = None) -> Tensor:
        """Reorder the axes (`dims=`, torch's keyword, too).

        >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        if dims is not None:
            order = _dim_for_axis(order, dims, None, "permute", "dims")
        order = (order,) if isinstance(order, (int, np.integer)) and not args else order  # type: ignore[assignment]
        order = tuple(order) if not args else (order, *args)  # type: ignore[arg-type]
        if len(order) != self.ndim:
            raise ShapeError(f"permute: {order} names {len(order)} axes, the tensor has {self.ndim} {self.shape}")
        norm = tuple(_normalize_axis(a, self.ndim, "permute", self.shape) for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        if norm == tuple(range(self.ndim)):
            return _alias(self)
        return _mark_view(Tensor(UOp(Ops.PERMUTE, self.dtype, (self.uop,), norm)), self)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two axes.

        >>> Tensor.zeros(2, 3).transpose().shape
        (3, 2)
        """
        order = list(range(self.ndim))
        a = _normalize_axis(dim0, self.ndim, "transpose", self.shape)
        b = _normalize_axis(dim1, self.ndim, "transpose", self.shape)
        if not order:
            # a 0-d tensor transposed over its axis 0 / -1 is a view of itself, as PyTorch's
            return _alias(self)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """torch's (and numpy's) name for transpose.

        >>> Tensor.zeros(2, 3).swapaxes(0, -1).shape
        (3, 2)
        """
        return self.transpose(axis0, axis1)

    @property
    def T(self) -> Tensor:
        """All axes reversed.

        >>> Tensor.zeros(2, 3).T.shape
        (3, 2)
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:  # noqa: N802 - torch's name
        """The last two axes swapped (a batch of matrices transposed), as torch's mT.

        >>> Tensor.zeros(4, 2, 3).mT.shape
        (4, 3, 2)
        """
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {self.shape}")
        return self.transpose(-2, -1)

    def expand(self, shape: Sequence[int | None] | int | None, *args: int | None) -> Tensor:
        """Broadcast size-1 axes to `shape` (-1 keeps a size, as torch's; None too, as tinygrad's).

        >>> Tensor([[1], [2]]).expand(2, 3).tolist()
        [[1, 1, 1], [2, 2, 2]]
        >>> Tensor([[1], [2]]).expand(None, 3).shape
        (2, 3)
        """
        sizes = (shape, *args) if args or shape is None or hasattr(shape, "__index__") else tuple(shape)
        if any(isinstance(n, bool) or not (n is None or hasattr(n, "__index__")) for n in sizes):
            raise TypeError(f"expand: sizes are ints, -1 or None (keep that size), got {sizes!r}")
        new = tuple(-1 if n is None else operator.index(n) for n in sizes)
        if len(new) < self.ndim:
            raise ShapeError(f"expand: can't expand {self.shape} to fewer dimensions {new}")
        added = len(new) - self.ndim
        if -1 in new[:added]:
            raise ShapeError(
                f"expand: -1 or None can't size a new leading dimension ({self.shape} to {sizes}), as torch's -1"
            )
        if any(n < -1 for n in new):
            raise ShapeError(f"expand: sizes must be >= 0 (or -1 to keep one), got {new} for shape {self.shape}")
        cur = (1,) * added + self.shape
        new = tuple(c if n == -1 else n for c, n in zip(cur, new, strict=True))
        for c, n in zip(cur, new, strict=True):
            if c != n and c != 1:
                raise ShapeError(f"expand: can't expand {self.shape} to {new}: size {c} is not 1 and differs from {n}")
        t = self.reshape(cur)
        if new == cur:
            return t if t is not self else _alias(self)
        return _mark_view(Tensor(UOp(Ops.EXPAND, self.dtype, (t.uop,), new)), self)

    @_returns_copy
    def pad(
        self, padding: Sequence[tuple[int, int] | None] | Sequence[int], mode: str = "constant", value: float = 0.0
    ) -> Tensor:
        """Pad each axis with (before, after) elements.

        `padding` is one (before, after) pair per axis (tinygrad), or PyTorch's flat form (last axis first).
        `mode` is "constant" (with `value`), "reflect", "replicate" or "circular". Negative padding crops.

        >>> Tensor([1, 2, 3]).pad(((1, 2),), mode="reflect").tolist()
        [2, 1, 2, 3, 2, 1]
        """
        if isinstance(mode, (int, float)) and not isinstance(mode, bool):
            # tinygrad's positional form pad(padding, value)
            mode, value = "constant", mode
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise UnknownModeError(f"pad: unknown mode {mode!r}; use constant, reflect, replicate or circular")
        if padding and isinstance(padding[0], (int, np.integer)):
            flat = [int(p) for p in padding]  # type: ignore[arg-type]
            if len(flat) % 2 or len(flat) // 2 > self.ndim:
                raise ShapeError(f"pad: flat padding {flat} needs an even length of at most 2*{self.ndim}")
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            padding = [(0, 0)] * (self.ndim - len(pairs)) + pairs
        pads = tuple((0, 0) if p is None else (int(p[0] or 0), int(p[1] or 0)) for p in padding)  # type: ignore[index]
        if len(pads) != self.ndim:
            raise ShapeError(f"pad: {len(pads)} (before, after) pairs for a tensor of shape {self.shape}")
        if any(b < 0 or a < 0 for b, a in pads):
            # negative padding crops: a circular pad wraps the cropped values (crop first), a reflection or a
            # replication is of the whole axis, its far side then cropped (pad first), as PyTorch's
            grown = tuple((max(b, 0), max(a, 0)) for b, a in pads)
            x = self if mode == "circular" else self.pad(grown, mode=mode, value=value)
            crop = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pads, x.shape, strict=True))
            if any(e < b for b, e in crop):
                raise ShapeError(f"pad: negative padding {pads} crops more than shape {self.shape} holds")
            return x.shrink(crop).pad(grown, mode=mode) if mode == "circular" else x.shrink(crop)
        if mode != "constant":
            return self._pad_mode(pads, mode)
        if all(b == 0 and a == 0 for b, a in pads):
            return self
        padded = Tensor(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
        if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
            return padded
        if type(value) in (float, int, bool) and self.dtype in _DIRECT_FILL_DTYPES:
            _check_stored_scalar(value, self.dtype, "pad", negative_unsigned=False)
            return _filled_outside(padded, self.uop, pads, value)
        mask = Tensor(
            UOp(Ops.PAD, dtypes.bool, (Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).uop,), pads)
        )
        _check_stored_scalar(value, self.dtype, "pad", negative_unsigned=False)
        return mask.where(padded, Tensor(value, device=self.device, dtype=self.dtype))

    def _pad_mode(self, pads: tuple[tuple[int, int], ...], mode: str) -> Tensor:
        t = self
        for ax, (b, a) in enumerate(pads):
            if b == 0 and a == 0:
                continue
            n = t.shape[ax]
            if mode == "reflect" and (b >= n or a >= n):
                raise ShapeError(f"pad: reflect padding {(b, a)} must be smaller than axis {ax} of size {n}")
            if mode == "circular" and (b > n or a > n):
                raise ShapeError(f"pad: circular padding {(b, a)} can't exceed axis {ax} of size {n}")
            if mode == "replicate" and n == 0:
                raise ShapeError(f"pad: can't replicate-pad an empty axis {ax}")
            parts = []
            if b:
                if mode == "reflect":
                    parts.append(t._slice_axis(ax, 1, b + 1).flip(ax))
                elif mode == "replicate":
                    parts.append(t._slice_axis(ax, 0, 1).expand(_with(t.shape, ax, b)))
                else:
                    parts.append(t._slice_axis(ax, n - b, n))
            parts.append(t)
            if a:
                if mode == "reflect":
                    parts.append(t._slice_axis(ax, n - 1 - a, n - 1).flip(ax))
                elif mode == "replicate":
                    parts.append(t._slice_axis(ax, n - 1, n).expand(_with(t.shape, ax, a)))
                else:
                    parts.append(t._slice_axis(ax, 0, a))
            t = Tensor.cat(*parts, dim=ax)
        return t

    def _reshape_dims(self, dims: Sequence[Any]) -> tuple[int, ...]:
        # reshape's dims that aren't all plain ints: None keeps the dimension at its position (tinygrad's); numpy ints
        # and 0-d int tensors (as torch's) count by their __index__, anything else is refused (int(2.5) would be 2)
        if any(d is None for d in dims[self.ndim :]):
            raise ShapeError(f"reshape: None keeps a dimension, but {tuple(dims)} has none past {self.shape}")
        dims = tuple(self.shape[i] if d is None else d for i, d in enumerate(dims))
        if any(isinstance(d, bool) or not hasattr(d, "__index__") for d in dims):
            raise TypeError(f"reshape: a shape is ints (-1 once, None to keep a dimension), got {dims!r}")
        return tuple(operator.index(d) for d in dims)

    def _slice_axis(self, axis: int, start: int, stop: int) -> Tensor:
        return self.shrink(tuple((start, stop) if i == axis else None for i in range(self.ndim)))

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep [begin, end) of each axis (None keeps the whole axis).

        >>> Tensor.arange(5).shrink(((1, 3),)).tolist()
        [1, 2]
        """
        if len(arg) != self.ndim:
            raise ShapeError(f"shrink: {len(arg)} bounds for a tensor of shape {self.shape}")
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(arg, self.shape, strict=True))
        for (b, e), s in zip(bounds, self.shape, strict=True):
            if not 0 <= b <= e <= s:
                raise ShapeError(f"shrink: bounds {bounds} don't fit in shape {self.shape}")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
            return _alias(self)
        return _mark_view(Tensor(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds)), self)

    def pad_to(self, shape: Any, *args: Any, value: float = 0.0) -> Tensor:
        """Pad the end of each axis with `value` up to `shape` (None keeps an axis), as tinygrad's pad_to.

        >>> Tensor([1, 2]).pad_to(4).tolist()
        [1, 2, 0, 0]
        """
        new = _target_shape(self.shape, shape, args, "pad_to")
        if any(n < s for n, s in zip(new, self.shape, strict=True)):
            raise ShapeError(f"pad_to: shape {new} is smaller than {self.shape} on some axis; use shrink_to")
        return self.pad(tuple((0, n - s) for n, s in zip(new, self.shape, strict=True)), value=value)

    def shrink_to(self, shape: Any, *args: Any) -> Tensor:
        """Keep the start of each axis, `shape` long (None keeps an axis), as tinygrad's shrink_to.

        >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(None, 2).tolist()
        [[1, 2], [4, 5]]
        """
        new = _target_shape(self.shape, shape, args, "shrink_to")
        if any(n > s for n, s in zip(new, self.shape, strict=True)):
            raise ShapeError(f"shrink_to: shape {new} is larger than {self.shape} on some axis; use pad_to")
        return self.shrink(tuple((0, n) for n in new))

    def flip(self, axis: int | Sequence[int] | None = None, *args: int, dims: Sequence[int] | None = None) -> Tensor:
        """Reverse the order along the given axes (`dims=`, torch's keyword, too).

        >>> Tensor([1, 2, 3]).flip(0).tolist()
        [3, 2, 1]
        """
        if dims is not None:
            axis = _dim_for_axis(axis, dims, None, "flip", "dims")
        raw = [axis, *args] if isinstance(axis, (int, np.integer)) else list(axis)  # type: ignore[arg-type]
        # (normalized, and an axis given twice refused, as the reductions' axes)
        axes = set(self._axes(raw, "flip"))  # type: ignore[attr-defined]
        if not axes or self.ndim == 0:
            return self
        return Tensor(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in axes for i in range(self.ndim))))

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop size-1 axes (all of them, or those in `dim` that have size 1).

        >>> Tensor.zeros(1, 3, 1).squeeze().shape
        (3,)
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        if self.ndim == 0:
            _normalize_axis(dim if isinstance(dim, int) else 0, 0, "squeeze", self.shape)
            return _alias(self)
        dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
        axes = [_normalize_axis(d, self.ndim, "squeeze", self.shape) for d in dims]
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"squeeze: dim {tuple(dims)} names an axis twice (shape {self.shape})")
        drop = {d for d in axes if self.shape[d] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in drop))

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 axis at `dim`.

        >>> Tensor.zeros(3).unsqueeze(0).shape
        (1, 3)
        """
        dim = _normalize_axis(dim, self.ndim + 1, "unsqueeze", self.shape)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge axes start_dim..end_dim into one.

        >>> Tensor.zeros(2, 3, 4).flatten(1).shape
        (2, 12)
        """
        if self.ndim == 0:
            return self.reshape((1,))
        s = _normalize_axis(start_dim, self.ndim, "flatten", self.shape)
        e = _normalize_axis(end_dim, self.ndim, "flatten", self.shape)
        if e < s:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unfold(self, dim: int, size: int, step: int) -> Tensor:
        """Every window of `size` elements along `dim`, `step` apart, as a new last axis (torch.Tensor.unfold).

        >>> Tensor.arange(5).unfold(0, 2, 2).tolist()
        [[0, 1], [2, 3]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "unfold", self.shape)
        n = self.shape[dim] if self.ndim else 1
        if size < 0 or size > n:
            raise ShapeError(f"unfold: size {size} doesn't fit dimension {dim} of shape {self.shape}")
        if step <= 0:
            raise ArgumentError(f"unfold: step must be positive, got {step}")
        x = self if self.ndim else self.reshape(1)
        count = (n - size) // step + 1
        along = x.movedim(dim, -1)
        if step != size and count > 1 and size > 1:
            # windows that overlap or leave gaps: movement ops over x (the pooling windows), so the result is a view
            # of x, as torch's: writes into either show in the other (a gather would be a copy)
            fits = count * step <= n
            windows = along._pool1d(size, step, 1, None if fits else count)
        else:
            idx = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
            windows = along._take(along.ndim - 1, idx).unflatten(-1, (count, size))
        # (their strides are torch's unfold's, which the movement ops that read them don't show)
        _remember_windows(windows.uop, along.uop, step)
        windows = windows.movedim(-2, dim)
        # (a 0-d tensor's one window is the result, (size,), as torch's)
        return windows if self.ndim else windows.reshape(size)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split axis `dim` into `sizes` (one may be -1).

        >>> Tensor.zeros(2, 12).unflatten(1, (3, 4)).shape
        (2, 3, 4)
        """
        dim = _normalize_axis(dim, self.ndim, "unflatten", self.shape, scalar=False)
        sizes = tuple(sizes)
        if sizes.count(-1) == 1:
            known = prod(s for s in sizes if s != -1)
            if known == 0:
                raise ShapeError(
                    f"unflatten: -1 is ambiguous among sizes {sizes} with a zero (axis {dim} of {self.shape})"
                )
            sizes = tuple(self.shape[dim] // known if s == -1 else s for s in sizes)
        if prod(sizes) != self.shape[dim]:
            raise ShapeError(
                f"unflatten: sizes {sizes} don't multiply to {self.shape[dim]} (axis {dim} of {self.shape})"
            )
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])

    def rearrange(self, pattern: str, **sizes: int) -> Tensor:
        """Reshape and permute by an einops pattern (see `uopkit.tensor.rearrange`): names for the axes on both sides
        of "->", groups in parentheses split (left) or merge (right) axes, "..." for the axes not named.

        >>> Tensor.zeros(2, 3, 12).rearrange("b c (h w) -> b h w c", h=3).shape
        (2, 3, 4, 3)
        """
        return rearrange(self, pattern, sizes)  # type: ignore[arg-type]

    @_returns_copy
    def pixel_shuffle(self, upscale_factor: int) -> Tensor:
        """(*, C r^2, H, W) -> (*, C, H r, W r) with r = `upscale_factor`: each channel's r x r block of pixels is
        taken from r^2 consecutive channels (torch.nn.functional.pixel_shuffle).

        >>> Tensor.arange(4).reshape(4, 1, 1).pixel_shuffle(2).tolist()
        [[[0, 1], [2, 3]]]
        """
        r = _pixel_factor(upscale_factor, "pixel_shuffle", "upscale_factor")
        if self.ndim < 3:
            raise ShapeError(f"pixel_shuffle: needs (*, C, H, W) or (C, H, W), got shape {self.shape}")
        *lead, c, h, w = self.shape
        if c % (r * r):
            raise ShapeError(
                f"pixel_shuffle: channels ({c}, axis -3 of shape {self.shape}) must be divisible by "
                f"upscale_factor^2 = {r * r}"
            )
        n = len(lead)
        x = self.reshape(*lead, c // (r * r), r, r, h, w)
        # (*, C, r_h, r_w, H, W) -> (*, C, H, r_h, W, r_w)
        x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return x.reshape(*lead, c // (r * r), h * r, w * r)

    @_returns_copy
    def pixel_unshuffle(self, downscale_factor: int) -> Tensor:
        """(*, C, H r, W r) -> (*, C r^2, H, W) with r = `downscale_factor`, pixel_shuffle's inverse
        (torch.nn.functional.pixel_unshuffle).

        >>> Tensor.arange(4).reshape(1, 2, 2).pixel_unshuffle(2).flatten().tolist()
        [0, 1, 2, 3]
        """
        r = _pixel_factor(downscale_factor, "pixel_unshuffle", "downscale_factor")
        if self.ndim < 3:
            raise ShapeError(f"pixel_unshuffle: needs (*, C, H, W) or (C, H, W), got shape {self.shape}")
        *lead, c, h, w = self.shape
        if h % r or w % r:
            raise ShapeError(
                f"pixel_unshuffle: height and width (the last two axes of shape {self.shape}) must be divisible by "
                f"downscale_factor = {r}"
            )
        n = len(lead)
        x = self.reshape(*lead, c, h // r, r, w // r, r)
        # (*, C, H, r_h, W, r_w) -> (*, C, r_h, r_w, H, W)
        x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
        return x.reshape(*lead, c * r * r, h // r, w // r)

    @_returns_copy
    def repeat(self, repeats: int | Sequence[int], *args: int) -> Tensor:
        """Tile the tensor: `repeats[i]` copies along axis i (extra leading repeats add axes), as torch.Tensor.repeat.

        >>> Tensor([1, 2]).repeat(2).tolist()
        [1, 2, 1, 2]
        """
        reps = _as_shape((repeats, *args) if args else repeats)
        if len(reps) < self.ndim:
            raise ShapeError(
                f"repeat: {len(reps)} repeats for a tensor of shape {self.shape}; need at least {self.ndim}"
            )
        if any(r < 0 for r in reps):
            raise ShapeError(f"repeat: negative repeats {reps}")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = tuple(x for s in base.shape for x in (1, s))
        expanded = tuple(x for r, s in zip(reps, base.shape, strict=True) for x in (r, s))
        return base.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, base.shape, strict=True)))

    @_returns_copy
    def tile(self, dims: int | Sequence[int], *args: int) -> Tensor:
        """repeat with missing leading repeats taken as 1 (torch.tile).

        >>> Tensor([[1, 2]]).tile(2).tolist()
        [[1, 2, 1, 2]]
        """
        reps = _as_shape((dims, *args) if args else dims)
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """`length` elements along `dim` from `start` (negative counts from the end), as torch.narrow.

        >>> Tensor([1, 2, 3, 4]).narrow(0, 1, 2).tolist()
        [2, 3]
        """
        d = _normalize_axis(dim, self.ndim, "narrow", self.shape, scalar=False)
        n = self.shape[d]
        begin = start + n if start < 0 else start
        if not (0 <= begin <= n and 0 <= length <= n - begin):
            raise IndexRangeError(
                f"narrow: start {start} and length {length} don't fit axis {dim} of shape {self.shape}"
            )
        return self._slice_axis(d, begin, begin + length)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """The slices along `dim`, that axis removed, as torch.unbind.

        >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)]
        [[1, 3], [2, 4]]
        """
        d = _normalize_axis(dim, self.ndim, "unbind", self.shape, scalar=False)
        return mark_several_views(
            tuple(self._slice_axis(d, i, i + 1).squeeze(d) for i in range(self.shape[d])), "unbind", self
        )

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
        """Axes `source` moved to positions `destination`, the others in their order, as torch.movedim.

        >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape
        (3, 4, 2)
        """
        src = [source] if isinstance(source, (int, np.integer)) else list(source)
        dst = [destination] if isinstance(destination, (int, np.integer)) else list(destination)
        if len(src) != len(dst):
            raise ArgumentError(f"movedim: {len(src)} source axes for {len(dst)} destinations")
        src = [_normalize_axis(a, self.ndim, "movedim", self.shape) for a in src]
        dst = [_normalize_axis(a, self.ndim, "movedim", self.shape) for a in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ArgumentError(f"movedim: repeated axes in {source} or {destination}")
        rest = iter(a for a in range(self.ndim) if a not in src)
        placed = dict(zip(dst, src, strict=True))
        return self.permute([placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    def expand_as(self, other: Tensor) -> Tensor:
        """expand to other's shape."""
        return self.expand(other.shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        """reshape to other's shape (view_as is the same)."""
        return self.reshape(other.shape)

    view_as = reshape_as

    def dim(self) -> int:
        """The number of axes (torch's name for ndim)."""
        return self.ndim

    def t(self) -> Tensor:
        """Transpose of a tensor of at most 2 dims, as torch.t.

        >>> Tensor([[1, 2]]).t().shape
        (2, 1)
        """
        if self.ndim > 2:
            raise ShapeError(f"t: needs at most 2 dimensions, got shape {self.shape}; use transpose or mT")
        return self.T

    @_returns_copy
    def repeat_interleave(
        self, repeats: int | Tensor | None = None, dim: int | None = None, *, output_size: int | None = None
    ) -> Tensor:
        """Repeat each element `repeats` times along `dim` (flattened when None); `repeats` an int, or as torch's an
        integer tensor of one count per element (or one count for all), read back to the host (the output's length
        depends on it). `output_size`, torch's hint of that length, is checked against it. Without `repeats`, as
        torch.repeat_interleave(counts): self is a 1-D integer tensor of counts, and index i is repeated self[i] times.

        >>> Tensor([1, 2]).repeat_interleave(2).tolist()
        [1, 1, 2, 2]
        >>> Tensor([1, 2]).repeat_interleave(Tensor([0, 3])).tolist()
        [2, 2, 2]
        >>> Tensor.repeat_interleave(Tensor([2, 0, 1])).tolist()
        [0, 0, 2]
        """
        if repeats is None:
            if dim is not None:
                raise TypeError("repeat_interleave: dim needs repeats (without them self is the counts, as torch's)")
            if not dtypes.is_int(self.dtype) or self.ndim != 1:
                raise TypeError(
                    "repeat_interleave: without repeats, self holds the counts: a 1-D integer tensor, got "
                    f"{self.dtype} of shape {self.shape}"
                )
            indices = Tensor.arange(self.shape[0], dtype=self.dtype, device=self.device)
            return indices.repeat_interleave(self, output_size=output_size)
        t = self.flatten() if dim is None else self
        d = 0 if dim is None else _normalize_axis(dim, t.ndim, "repeat_interleave", t.shape)
        if isinstance(repeats, Tensor):
            if not dtypes.is_int(repeats.dtype) or repeats.ndim > 1:
                raise TypeError(f"repeat_interleave: repeats must be a 0-d or 1-D integer tensor, got {repeats!r}")
            counts = repeats.numpy().reshape(-1).astype(np.int64)
            if len(counts) == 1:
                repeats = int(counts[0])
            else:
                if len(counts) != t.shape[d]:
                    raise ShapeError(
                        f"repeat_interleave: {len(counts)} repeats for axis {d} of size {t.shape[d]} (shape {t.shape})"
                    )
                if (counts < 0).any():
                    raise ArgumentError(f"repeat_interleave: repeats must be non-negative, got {counts.min()}")
                _check_output_size(output_size, int(counts.sum()))
                return t._take(d, np.repeat(np.arange(len(counts)), counts))
        if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 0:
            raise TypeError(f"repeat_interleave: repeats must be a non-negative int or an int tensor, got {repeats!r}")
        _check_output_size(output_size, t.shape[d] * int(repeats))
        t = t.unsqueeze(d + 1)
        return t.expand(_with(t.shape, d + 1, int(repeats))).flatten(d, d + 1)

    def cat(self: Tensor | Sequence[Tensor], *args: Any, dim: int | None = None) -> Tensor:
        """Concatenate tensors along `dim` (promoted to their common dtype): `a.cat(b, c)`, `Tensor.cat(a, b)` or, as
        torch.cat, `Tensor.cat([a, b], dim)`.

        >>> Tensor([1, 2]).cat(Tensor([3])).tolist()
        [1, 2, 3]
        >>> Tensor.cat([Tensor([[1]]), Tensor([[2.5]])], 1).tolist()
        [[1.0, 2.5]]
        """
        try:
            tensors, dim = _tensors_and_dim(self, args, dim, "cat")
        except _ComplexParts as e:  # (complex tensors: the parts concatenated)
            return ComplexTensor.concat(e.tensors, e.dim)  # type: ignore[return-value]
        _check_same_device("cat", tensors)
        given = tensors
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        if any(t.shape == (0,) for t in tensors) and any(t.shape != (0,) for t in tensors):
            # PyTorch's legacy rule, which `out = torch.tensor([])` accumulators rely on: a tensor of shape (0,) is
            # left out of the shapes (its dtype still counts)
            tensors = [t for t in tensors if t.shape != (0,)]
        self, args = tensors[0], tensors[1:]
        if self.ndim == 0:
            raise ShapeError("cat: zero-dimensional tensors can't be concatenated")
        dim = _normalize_axis(dim, self.ndim, "cat", self.shape)
        for t in args:
            if t.ndim != self.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=False)) if i != dim
            ):
                shapes = [x.shape for x in tensors]
                raise ShapeError(f"cat: shapes {shapes} differ outside dimension {dim}")
        empty = [t for t in given if t.numel() == 0 and t.requires_grad]
        tensors = [_cut_cat_chain(t).cast(dt) for t in tensors if t.shape[dim] > 0] or [self.cast(dt)]
        if empty:
            # an empty tensor that wants a gradient stays in the graph, to get its (empty) gradient as in PyTorch:
            # its sum (0) in a select that always takes the value
            carried = Tensor.stack(*[t.sum().cast(dt) for t in empty]).sum()
            tensors[0] = Tensor(True, device=self.device).where(tensors[0], carried)
        if len(tensors) == 1:
            return tensors[0]
        total = sum(t.shape[dim] for t in tensors)
        # each piece padded to the full length (a float one with -0.0), then added: one fused kernel
        out, offset = None, 0
        for t in tensors:
            pads = tuple((offset, total - offset - t.shape[dim]) if i == dim else (0, 0) for i in range(t.ndim))
            piece = _cat_piece(t, pads)
            out = piece if out is None else out._alu(Ops.ADD if dt != dtypes.bool else Ops.OR, piece)
            offset += t.shape[dim]
        assert out is not None
        return out

    @_returns_copy
    def stack(self: Tensor | Sequence[Tensor], *args: Any, dim: int | None = None) -> Tensor:
        """Stack same-shaped tensors along a new axis `dim`: `a.stack(b)`, `Tensor.stack(a, b)` or, as torch.stack,
        `Tensor.stack([a, b], dim)`.

        >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
        [[1, 2], [3, 4]]
        """
        try:
            tensors, dim = _tensors_and_dim(self, args, dim, "stack")
        except _ComplexParts as e:  # (complex tensors: the parts stacked)
            return ComplexTensor.stacked(e.tensors, e.dim)  # type: ignore[return-value]
        if any(t.shape != tensors[0].shape for t in tensors):
            raise ShapeError(f"stack: all tensors need the same shape, got {[t.shape for t in tensors]}")
        dim = _normalize_axis(dim, tensors[0].ndim + 1, "stack", tensors[0].shape)
        if len(tensors) >= GATHER_STACK_MIN and (gathered := _stacked_windows(tensors)) is not None:
            return gathered if dim == 0 else gathered.movedim(0, dim)
        return Tensor.cat(*(t.unsqueeze(dim) for t in tensors), dim=dim)

    def meshgrid(self: Tensor | Sequence[Tensor], *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-D tensors (`a.meshgrid(b)` or `Tensor.meshgrid(a, b)`), as torch.meshgrid;
        indexing "xy" swaps the first two axes.

        >>> [t.tolist() for t in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))][0]
        [[1, 1, 1], [2, 2, 2]]
        """
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        first = [self] if isinstance(self, Tensor) else list(self)
        tensors = first + (list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args))
        if any(t.ndim > 1 for t in tensors):
            raise ShapeError(f"meshgrid: needs 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
        flat = [t.reshape(-1) for t in tensors]
        if indexing == "xy" and len(flat) >= 2:
            flat[0], flat[1] = flat[1], flat[0]
        shape = tuple(t.shape[0] for t in flat)
        grids = [t.reshape(_with((1,) * len(flat), i, t.shape[0])).expand(shape) for i, t in enumerate(flat)]
        if indexing == "xy" and len(grids) >= 2:
            grids[0], grids[1] = grids[1], grids[0]
        return tuple(grids)

    def cartesian_prod(self: Tensor | Sequence[Tensor], *args: Tensor) -> Tensor:
        """Every combination of one element from each 1-D tensor, one per row (n1 * n2 * ... rows, in row-major
        order), as torch.cartesian_prod; a single tensor comes back as it is. Tensors of several dtypes promote
        (torch refuses them).

        >>> Tensor.cartesian_prod(Tensor([1, 2]), Tensor([3, 4])).tolist()
        [[1, 3], [1, 4], [2, 3], [2, 4]]
        """
        tensors = [self, *args] if isinstance(self, Tensor) else [*self, *args]
        if not tensors or any(not isinstance(t, Tensor) or t.ndim != 1 for t in tensors):
            shapes = [t.shape if isinstance(t, Tensor) else type(t).__name__ for t in tensors]
            raise ShapeError(f"cartesian_prod: needs one or more 1-D tensors, got {shapes}")
        if len(tensors) == 1:
            return tensors[0]
        return Tensor.stack([grid.reshape(-1) for grid in Tensor.meshgrid(tensors)], 1)

    def broadcast_tensors(self: Tensor | Sequence[Tensor], *args: Tensor) -> tuple[Tensor, ...]:
        """The tensors expanded (views) to their common broadcast shape, as torch.broadcast_tensors.

        >>> [t.shape for t in Tensor.broadcast_tensors(Tensor.ones(2, 1), Tensor.zeros(3))]
        [(2, 3), (2, 3)]
        """
        tensors = [self, *args] if isinstance(self, Tensor) else [*self, *args]
        if not all(isinstance(t, Tensor) for t in tensors):
            raise TypeError(f"broadcast_tensors: expects tensors, got {[type(t).__name__ for t in tensors]}")
        shape = _common_shape([t.shape for t in tensors], "broadcast_tensors")
        return tuple(t.expand(shape) for t in tensors)

    @staticmethod
    def broadcast_shapes(*shapes: int | Sequence[int]) -> tuple[int, ...]:
        """The shape that tensors of `shapes` (an int is a 1-D shape) broadcast to, as torch.broadcast_shapes (a
        tuple: torch's is a torch.Size).

        >>> Tensor.broadcast_shapes((2, 1), (3,))
        (2, 3)
        """
        return _common_shape(shapes, "broadcast_shapes")

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of `sizes` (an int: equal pieces, the last may be smaller). As torch's, the
        pieces can't be written in place while they need a gradient (clone one first).

        >>> [t.tolist() for t in Tensor.arange(5).split(2)]
        [[0, 1], [2, 3], [4]]
        """
        return mark_several_views(self._split(sizes, dim), "split", self)

    def _split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        # split's views, not marked as one op's several (torch's unsafe_split, which may be written in place)
        dim = _normalize_axis(dim, self.ndim, "split", self.shape, scalar=False)
        n = self.shape[dim]
        if isinstance(sizes, (int, np.integer)):
            if sizes <= 0:
                raise ArgumentError(f"split: size must be positive, got {sizes}")
            sizes = [min(int(sizes), n - i) for i in range(0, n, int(sizes))] or [0]
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {list(sizes)} don't add up to {n} (axis {dim} of {self.shape})")
        out, start = [], 0
        for s in sizes:
            out.append(self._slice_axis(dim, start, start + s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into `chunks` pieces of equal size (the last may be smaller).

        >>> [t.tolist() for t in Tensor.arange(6).chunk(3)]
        [[0, 1], [2, 3], [4, 5]]
        """
        return mark_several_views(self._chunk(chunks, dim), "chunk", self)

    def _chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        # chunk's views, not marked as one op's several (torch's unsafe_chunk)
        if chunks <= 0:
            raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
        dim = _normalize_axis(dim, self.ndim, "chunk", self.shape, scalar=False)
        if self.shape[dim] == 0:
            # (torch: `chunks` empty pieces)
            return tuple(self for _ in range(chunks))
        return self._split(max(math.ceil(self.shape[dim] / chunks), 1), dim)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along `dims` by `shifts` (flattened when dims is None), as torch.roll.

        >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
        [4, 1, 2, 3]
        """
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        sh = [shifts] if isinstance(shifts, (int, np.integer)) else list(shifts)
        ds = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
        if len(sh) != len(ds):
            raise ArgumentError(f"roll: {len(sh)} shifts for {len(ds)} dims")
        t = self
        for s, d in zip(sh, ds, strict=True):
            d = _normalize_axis(d, t.ndim, "roll", t.shape, scalar=False)
            n = t.shape[d]
            if n == 0 or s % n == 0:
                continue
            s %= n
            t = Tensor.cat(t._slice_axis(d, n - s, n), t._slice_axis(d, 0, n - s), dim=d)
        return t

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the matrices spanned by dim1 and dim2, `offset` above (> 0) or below (< 0) the main one,
        as a new last axis (torch.diagonal).

        >>> Tensor([[1, 2], [3, 4]]).diagonal().tolist(), Tensor([[1, 2], [3, 4]]).diagonal(1).tolist()
        ([1, 4], [2])
        """
        d1 = _normalize_axis(dim1, self.ndim, "diagonal", self.shape)
        d2 = _normalize_axis(dim2, self.ndim, "diagonal", self.shape)
        if d1 == d2:
            raise ShapeError(f"diagonal: dim1 and dim2 are the same axis ({dim1}, {dim2}) for shape {self.shape}")
        rest = [i for i in range(self.ndim) if i not in (d1, d2)]
        x = self.permute(*rest, d1, d2)
        rows, cols = x.shape[-2:]
        first_row, first_col = min(max(-offset, 0), rows), min(max(offset, 0), cols)
        n = max(0, min(rows - first_row, cols - first_col))
        lead = ((0, s) for s in x.shape[:-2])
        x = x.shrink((*lead, (first_row, first_row + n), (first_col, first_col + n)))
        if n == 0:
            return x.reshape(*x.shape[:-2], 0)
        # in the n*n matrix flattened and padded to n*(n+1), the diagonal is column 0 of rows n+1 long
        x = x.flatten(-2).pad(((0, 0),) * (x.ndim - 2) + ((0, n),))
        return _mark_view(x.reshape(*x.shape[:-1], n, n + 1)[..., 0], self)

    def diag(self, diagonal: int = 0) -> Tensor:
        """A 1-D tensor as the `diagonal`-th diagonal of a square matrix (zeros elsewhere), or a 2-D tensor's
        `diagonal`-th diagonal (torch.diag).

        >>> Tensor([1, 2]).diag().tolist(), Tensor([[1, 2], [3, 4]]).diag().tolist()
        ([[1, 0], [0, 2]], [1, 4])
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ShapeError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape}")
        n = self.shape[0]
        if n == 0:
            square = self.reshape(0, 0)
        else:
            # each value followed by n zeros, flattened: in the first n*n elements they land at i*(n+1), the diagonal
            square = self.reshape(n, 1).pad(((0, 0), (0, n))).flatten()._slice_axis(0, 0, n * n).reshape(n, n)
        k = abs(diagonal)
        if diagonal > 0:
            return square.pad(((0, k), (k, 0)))
        return square.pad(((k, 0), (0, k))) if diagonal < 0 else square

    @replayed
    def tril(self, diagonal: int = 0) -> Tensor:
        """Keep the lower triangle (j - i <= diagonal) of the last two axes, zero the rest.

        >>> Tensor.ones(2, 2).tril().tolist()
        [[1.0, 0.0], [1.0, 1.0]]
        """
        return self._tri_mask(diagonal, lower=True).where(self, self.zeros_like())

    @replayed
    def triu(self, diagonal: int = 0) -> Tensor:
        """Keep the upper triangle (j - i >= diagonal) of the last two axes, zero the rest.

        >>> Tensor.ones(2, 2).triu().tolist()
        [[1.0, 1.0], [0.0, 1.0]]
        """
        return self._tri_mask(diagonal, lower=False).where(self, self.zeros_like())

    def _tri_mask(self, diagonal: int, lower: bool) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"{'tril' if lower else 'triu'}: needs at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = Tensor.arange(r, device=self.device).reshape(r, 1)
        cols = Tensor.arange(c, device=self.device).reshape(1, c)
        return (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """A tensor whose values are stored in their own buffer, in order. `memory_format` (torch's) is checked and
        changes nothing: uopkit chooses layouts itself (uopkit/tensor/memory_format.py).

        >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
        [[1, 3], [2, 4]]
        """
        if memory_format is not None:
            dims_order(as_memory_format(memory_format, "contiguous"), self.ndim, "contiguous")
        # a fresh arg per call: two identical contiguous() calls must not end up sharing (and aliasing) storage
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), next(_contiguous_ids)))

    def contiguous_backward(self) -> Tensor:
        """The same values (tinygrad's), whose gradient is made contiguous (stored in order in a buffer of its own)
        before it flows back into this tensor's graph: for a backward pass that would otherwise recompute a costly
        gradient in every kernel that reads it. The forward adds -0.0, which changes no value and folds away in the
        kernel that reads it.

        >>> x = Tensor([1.0, 2.0], requires_grad=True)
        >>> (x.contiguous_backward() * 3).sum().backward()
        >>> x.grad.tolist()
        [3.0, 3.0]
        """
        if not dtypes.is_float(self.dtype):
            # (no gradient to make contiguous)
            return _alias(self)
        # a node of its own to give the gradient to (x + -0.0 is x, -0.0 included)
        out = self + self.full_like(-0.0)
        set_gradient(out.uop, (self.uop,), _contiguous_gradient)
        return out

    def detach(self) -> Tensor:
        """The same values with no gradient flowing back.

        >>> Tensor([1.0]).detach().tolist()
        [1.0]
        """
        return _mark_view(Tensor(UOp(_DETACH, self.dtype, (self.uop,))), self)

    def to(
        self,
        *args: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        non_blocking: bool = False,
        copy: bool = False,
        memory_format: Any = None,
    ) -> Tensor:
        """This tensor on another device (a copy when the device differs) and/or cast to a dtype, as torch's
        `to(device)`, `to(dtype)`, `to(device, dtype)` or `to(other)` (other's device and dtype); `copy=True` gives a
        copy even when nothing changes. `non_blocking` changes nothing (a copy runs when the result is realized), nor
        does `memory_format` (checked: see `contiguous`).

        >>> Tensor([1.7]).to("int32").tolist()
        [1]
        """
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif is_dtype_like(a) or complex_dtype_of(a) is not None:
                dtype = a
            elif a is None or isinstance(a, str) or _is_device_object(a):
                # (None: the default device, as before; a torch.device by its name)
                device = _canonical_device(a)
            else:
                # (a numpy dtype, a number: not a dtype nor a device)
                raise TypeError(
                    f"to: expected a device name, a dtype (dtypes.float16, 'float16', torch.float16, float) or a "
                    f"Tensor, got {a!r} ({type(a).__name__})"
                )
        if memory_format is not None:
            dims_order(as_memory_format(memory_format, "to"), self.ndim, "to")
        if dtype is not None and not isinstance(dtype, DType) and (cdt := complex_dtype_of(dtype)) is not None:
            return to_complex(self, cdt, device, copy)  # a ComplexTensor (tensor/complex_creation.py)
        t = self if dtype is None else self.cast(dtype)
        t = t if device is None else t._to_device(device)
        return t.clone() if copy and t is self else t

    def to_(self, device: str | None) -> Tensor:
        """tinygrad's in-place move: this tensor, and its `.grad`, now stored on `device` (None: the default one);
        returns it. It is realized there at once, its values copied; other tensors that viewed its old storage keep
        that (as after torch's `t.data = t.to(device)`).

        >>> t = Tensor([1.0, 2.0])
        >>> t.to_(t.device) is t
        True
        """
        device = _canonical_device(device)
        if self.grad is not None:
            self.grad.to_(device)
        if device == self.device:
            return self
        self._hold_in_place(self._to_device(device))
        return self

    def _hold_in_place(self, value: Tensor) -> None:
        # this tensor (the same object: an optimizer, a module, hooks keep it) takes `value`'s values, realized into
        # storage of its own; views of its old storage keep that (`to_`, and a module's conversions)
        live_tensors.set_uop(self, value.contiguous().realize().uop)
        self._view_of = None

    def _to_device(self, device: str) -> Tensor:
        device = _canonical_device(device)
        if device == self.device:
            return self
        return Tensor(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, arg=device))))

    def clone(self, memory_format: Any = None) -> Tensor:
        """A copy in a buffer of its own (`memory_format` as `contiguous`'s).

        >>> Tensor([1, 2]).clone().tolist()
        [1, 2]
        """
        return self.contiguous(memory_format)


def _contiguous_gradient(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    # `contiguous_backward`'s rule: the incoming gradient, stored (a fresh arg: two never share storage)
    return (UOp(Ops.CONTIGUOUS, g.dtype, (g,), next(_contiguous_ids)),)


# stacking this many slices of one stored tensor gathers them (see `_stacked_windows`)
GATHER_STACK_MIN = 8


def _stacked_windows(tensors: Sequence[Tensor]) -> Tensor | None:
    """`stack(tensors)` as one gather when every tensor is the same slice at another place along the first axis of one
    stored tensor: rows of a dataset collated into a batch (`stack([x[i] for i in idx])`), crops of a token stream
    (`stack([data[i:i+n] for i in ix])`). Stacked, n slices are a kernel reading n windows, whose graph is built and
    walked in Python for every batch (256 rows: ~75 ms); gathered, they are an upload of n indices. None where that
    doesn't apply (a slice that wants a gradient keeps the stack's own gradient)."""
    first = tensors[0]
    source, bounds = _slice_of_buffer(first.uop)
    if source is None or source.shape is None:
        return None
    shape = source.shape
    rows, starts = bounds[0][1] - bounds[0][0], []
    if rows <= 0 or any(b != (0, n) for b, n in zip(bounds[1:], shape[1:], strict=True)):
        return None
    for t in tensors:
        other, other_bounds = _slice_of_buffer(t.uop)
        if other is not source or other_bounds[1:] != bounds[1:] or other_bounds[0][1] - other_bounds[0][0] != rows:
            return None
        if t._requires_grad:
            return None
        starts.append(other_bounds[0][0])
    index = Tensor(np.asarray(starts, dtype=np.int32 if shape[0] < 2**31 else np.int64), device=first.device)
    if rows > 1:
        index = index.reshape(-1, 1) + Tensor.arange(rows, dtype=index.dtype, device=first.device)
    return Tensor(source)[index].reshape(len(tensors), *first.shape)


def _slice_of_buffer(u: UOp) -> tuple[UOp | None, tuple[tuple[int, int], ...]]:
    """(what is sliced: a stored buffer or a reshape of one, the slice's bounds) of a tensor that is (a reshape of) a
    slice of (a reshape of) a stored buffer; (None, ()) for anything else."""
    if u.op is Ops.RESHAPE:
        u = u.src[0]
    if u.op is not Ops.SHRINK:
        return None, ()
    src = u.src[0]
    if (src.src[0] if src.op is Ops.RESHAPE else src).op is not Ops.BUFFER:
        return None, ()
    return src, u.arg


def _alias(t: Tensor) -> Tensor:
    """A view that changes nothing: a new tensor object over t's graph, as PyTorch's (`x.view(-1)` of a 1-D x is not x:
    `x.unsqueeze_(0)` or `x.requires_grad_()` afterwards must leave it as it was), sharing t's storage."""
    return _mark_view(Tensor(t.uop), t)

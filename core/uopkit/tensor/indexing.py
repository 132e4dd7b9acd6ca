"""Indexing: getitem and setitem with ints, slices, None, ellipsis and index tensors; gather, scatter, index_select
and take (index_add, index_copy and index_fill are in tensor/placing.py); writes into a tensor: assign and the in-place
operators (a mixin of `Tensor`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import (
    ComplexDType,
    dtypes,
)
from uopkit.schedule import _storage_base, forget_source, live_tensors, shared_storage
from uopkit.tensor import segments
from uopkit.tensor.direct_write import store_element
from uopkit.tensor.elementwise import _alpha_first_in_place
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.index_errors import described
from uopkit.tensor.several_views import check_several_views_write
from uopkit.tensor.support import (
    _A_COPY,
    _A_RESHAPED_COPY,
    _VIEW_NODES,
    ArgumentError,
    DTypeError,
    IndexTensorError,
    ShapeError,
    _broadcast_shape,
    _check_same_device,
    _check_stored_scalar,
    _check_values_in,
    _flat_index,
    _mark_view,
    _Mask,
    _normalize_axis,
    _scalar_as_vector,
    _storage_uop,
    _sum_op,
    check_in_place_allowed,
)
from uopkit.tensor.unread import with_zero_gradient_to
from uopkit.tensor.view_writes import (
    _carried_by_lost_writes,
    _check_value_fits,
    _placed_through,
    _plain_mixed_view,
    _without_leading_ones,
)
from uopkit.tensor.write_history import (
    gradient_history,
    history_of_plain_storage,
    remember_write,
    unrecorded_write,
    unseen_by_autograd,
)
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# module constants for assign (every optimizer step assigns each parameter): on Python 3.11 every `Ops.X` is a lookup
# through EnumType's slow __getattr__ hook
_BUFFER, _STORE = Ops.BUFFER, Ops.STORE
_MOVEMENT = GroupOp.Movement
_NOT_A_VIEW = frozenset({Ops.PAD, Ops.FLIP, Ops.EXPAND})
_COPYING_MOVES = frozenset({Ops.PAD, Ops.FLIP})
_VIEW_OPS = _VIEW_NODES
# the in-place writes of one value everywhere: they may reach one element of storage through several of the view's
_ONE_VALUE_WRITES = frozenset({"fill_", "_foreach_zero_"})
# the in-place writes of the elements a bool mask picks (`_Picked`), the others left alone: through a view of an
# expand each element of storage a picked one shows takes the write, as PyTorch's; several picked elements may show
# one (one value written, or the last write wins; not index_put_ with accumulate, which would add each)
_PICKED_WRITES = frozenset({"masked_fill_", "index_fill_", "index_put_"})
_Picked = Callable[[], "Tensor"] | None
# a write staged for a batch's realize: (the tensor, its gradient history, the value's graph, the elements written)
_Staged = tuple["Tensor", tuple[UOp, UOp] | None, UOp, _Picked]
# the in-place writes PyTorch runs through a view of an expand (a stride 0), adding each write: the others raise there
_ADDING_THROUGH_EXPAND = frozenset({"index_put_(accumulate=True)"})


class _AliasedWrite(ArgumentError):
    """A write into a view several of whose written elements are one element of storage. `positions`: the flat
    position in storage of each element of the view (numpy, the view's shape; -1 where the op writes nothing);
    `zero_stride`: whether PyTorch's layout of the view steps 0 along an axis (an expand's: PyTorch refuses most
    writes there) rather than overlapping otherwise (`unfold`'s windows: PyTorch writes each element in turn)."""

    def __init__(self, shape: tuple[int, ...], positions: np.ndarray, zero_stride: bool) -> None:
        what = "an expanded tensor" if zero_stride else "overlapping windows"
        super().__init__(
            f"assign: the target (shape {shape}, a view of {what}) has several elements on one single memory "
            "location, so the write is ambiguous; clone() it before writing (PyTorch refuses it too)"
        )
        self.positions, self.zero_stride = positions, zero_stride


def _steps_zero(positions: np.ndarray) -> bool:
    # whether a view whose elements sit at the flat `positions` of storage (PyTorch strides: an affine map) has a
    # stride 0 along an axis of more than one element
    return any(n > 1 and not np.diff(positions, axis=d).any() for d, n in enumerate(positions.shape))


def _write_ranks(positions: np.ndarray) -> np.ndarray:
    # for each element of a view written (its flat position in storage, -1 where not written), how many elements
    # before it in row-major order are written to the same position: the turn it takes in PyTorch's write loop
    flat = positions.reshape(-1)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.maximum.accumulate(np.where(first, np.arange(flat.size), 0))
    ranks = np.empty_like(order)
    ranks[order] = np.arange(flat.size) - starts
    return np.where(flat >= 0, ranks, -1).reshape(positions.shape)


def _is_storage(u: UOp) -> bool:
    # a tensor's graph that stands for storage: a buffer, a view of one, or an assign still to run into one (a
    # bfloat16 one: the same under its BITCAST of the uint16 bits)
    base = u.base
    while base.op is Ops.DETACH:
        # (a detached view of storage is one too, as PyTorch's detach: it shows later writes)
        base = base.src[0].base
    if base.op is Ops.BITCAST and base.dtype == dtypes.bfloat16:
        base = base.src[0].base
    return base.op is _BUFFER or base.op is _STORE


def _writes_through(t: Tensor) -> bool:
    # whether an in-place write into t goes into storage: t stands for storage, and is either a PyTorch view of it or
    # the storage's own layout (a padded, flipped or expanded read of a buffer that isn't a view, `x.pad(...)`,
    # `x.flip(0)`, is a value of its own, as PyTorch's copies)
    if not _is_storage(t.uop) or t._view_of is _A_COPY or t._view_of is _A_RESHAPED_COPY:
        return False
    if t._view_of is not None and t._view_of() is not None:
        return True
    # (a view whose base is gone, `x.flip(1).T`, is one of a copy when a flip or a pad made that base)
    moves = _NOT_A_VIEW if t._view_of is None else _COPYING_MOVES
    return not any(n.op in moves for n in _view_chain(_storage_uop(t.uop)))


def _view_chain(u: UOp) -> list[UOp]:
    # the movement ops and detaches from `u` down to its storage, outermost first
    chain = []
    while u.op in _VIEW_OPS:
        chain.append(u)
        u = u.src[0]
    return chain


def _views_node(u: UOp, node: UOp) -> bool:
    # whether the graph `u` is `node` under movement ops and detaches (PyTorch's views of it)
    while u is not node:
        if u.op not in _VIEW_OPS:
            return False
        u = u.src[0]
    return True


def _view_root(t: Tensor) -> Tensor | None:
    # the live tensor t is a PyTorch view of, while t's graph is still a view of that tensor's graph
    root = t._view_of() if t._view_of is not None else None
    return root if root is not None and _views_node(t.uop, root.uop) else None


def _live_views(t: Tensor) -> list[Tensor]:
    # the live PyTorch views of t whose graphs are views of t's graph (each was built, or last changed, after it)
    ref, node = t._live_ref, t.uop
    return [
        v for v in live_tensors.changed_since(node.seq) if v._view_of is ref and v is not t and _views_node(v.uop, node)
    ]


def _give_storage(t: Tensor) -> None:
    # t's value computed into storage, with its live views turned into views of it: realizing a graph moves every
    # live tensor that holds its nodes, so views of a computed value follow it; a constant or a value that isn't a
    # view of its storage gets a buffer of its own, and its views are moved by hand
    t.realize()
    if not (_writes_through(t) and _storage_uop(t.uop).base.op is _BUFFER):
        _move_to_own_storage(t)


def _move_to_own_storage(t: Tensor) -> None:
    # t's contents copied into a buffer of its own, and its live views moved with it
    views, node = _live_views(t), t.uop
    own = t.contiguous().realize().uop
    for v in views:
        live_tensors.set_uop(v, _view_of(v.uop, node, own))
    live_tensors.set_uop(t, own)
    # (it owns that storage now: no longer a view, nor a copy made of views)
    t._view_of = None


def _same_storage(a: Tensor, b: Tensor) -> bool:
    # whether a and b are one tensor or PyTorch views of one another (or of one base)
    return (
        a is b
        or a._view_of is b._live_ref
        or b._view_of is a._live_ref
        or (a._view_of is not None and a._view_of is b._view_of)
    )


def _keep_other_sharers(t: Tensor, buffer: UOp) -> None:
    # before a write into `buffer` through t: the tensors that hold it only because their graphs were the same node as
    # t's when one realize computed it (not t's views) get a copy of the old contents, as separate tensors would have
    for ref in shared_storage.pop(buffer) or []:
        other = ref()
        if other is not None and not _same_storage(other, t) and _storage_base(other.uop) is buffer:
            _move_to_own_storage(other)


def _share_storage(t: Tensor) -> None:
    # before an in-place write into t: PyTorch's views share storage, so a lazy value t is a view of (`x[1] += 1`,
    # `x.T[0] = 1`, `x[:, 1:].fill_(4)` with x lazy or a constant), or a lazy t with live views (`v = x[0]; x += 1`),
    # is computed into storage first; the write then goes through it and every view sees it
    if _writes_through(t):
        return
    root = _view_root(t)
    if root is not None:
        _give_storage(root)
    elif _live_views(t):
        _give_storage(t)


def _realize_with_base(t: Tensor) -> None:
    # before a lazy PyTorch view is realized: its live base is computed into storage first, so the view stays a view
    # of it (realized alone it would be a buffer of its own, blind to later writes through the base or other views)
    if not _writes_through(t):
        root = _view_root(t)
        if root is not None:
            _give_storage(root)


def _detached_source(t: Tensor) -> Tensor | None:
    # for a view through `x.detach()` (PyTorch's detach shares x's storage), the same view without the detach, to
    # write into (the tensor itself is then a detach of it)
    if t._view_of is None:
        return None
    chain, node = [], t.uop
    while node.op in _VIEW_OPS:
        chain.append(node)
        node = node.src[0]
    if not any(n.op is Ops.DETACH for n in chain):
        return None
    for n in reversed(chain):
        if n.op is not Ops.DETACH:
            node = n.replace(src=(node,))
    if t.uop.op is Ops.DETACH and _alone_over_storage(t, node):
        # `x.detach()` itself, x gone, no other view of x alive and no graph a backward() follows behind the storage (a
        # `Parameter(Tensor.randn(...))`, whose randn is dropped at once): the detach cuts nothing, so the tensor
        # becomes x's view of the storage, whose writes are staged as any other's (written at once through the
        # detach, each such parameter was a realize of its own at every optimizer step). Checked once: the tensor
        # holds no detach after.
        live_tensors.set_uop(t, node)
        return None
    source = Tensor(node)
    source._view_of = t._view_of
    return source


def _alone_over_storage(t: Tensor, node: UOp) -> bool:
    # whether `t`, a detach of `node` (a view of a buffer), is the only live tensor left of the views of the tensor it
    # was made from, that tensor gone, and the storage was computed by no graph a backward() follows
    ref = t._view_of
    if ref is None or ref() is not None or node.base.op is not Ops.BUFFER or gradient_history(node) is not None:
        return False
    return not any(v is not t and v._view_of is ref for v in live_tensors.changed_since(node.seq))


def _view_of(view: UOp, node: UOp, other: UOp) -> UOp:
    # `view`'s movement ops down to `node`, applied to `other` instead (in other's dtype: a view of an int arange of
    # positions over a float16 buffer stays int)
    chain = []
    while view is not node:
        chain.append(view)
        view = view.src[0]
    for n in reversed(chain):
        other = n.replace(src=(other,), dtype=other.dtype)
    return other


def _positions_of(view: UOp, node: UOp, device: str) -> Tensor:
    # the flat positions in `node` of the elements `view` (movement ops over it) shows: the same view of an arange
    flat = Tensor.arange(math.prod(node.shape), device=device).reshape(node.shape)
    return Tensor(_view_of(view, node, flat.uop))


def _in_place_operator(symbol: str, compute: Callable[[Tensor, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    # `t op= x` (`_update_in_place`), from `compute(t, x)`, the operator's result
    def operator(self: Tensor, x: Any) -> Tensor:
        return self._update_in_place(lambda: compute(self, x), symbol)

    operator.__doc__ = f"self {symbol} x, in place (PyTorch's)."
    return operator


class IndexingMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # indexing: ints, slices, None and ... become shrink/flip/reshape views; integer and bool tensors (or lists)
    # select with a one-hot comparison and a sum; __setitem__ stores into the view (or the whole buffer)

    def _parse_index(self, index: Any) -> list[Any]:
        items = list(index) if isinstance(index, tuple) else [index]
        out: list[Any] = []
        for i in items:
            if isinstance(i, range):
                # a range indexes as the list of its numbers, as in PyTorch (`logp[range(n), labels]`)
                i = list(i)
            if isinstance(i, (list, tuple, np.ndarray, Tensor)):
                arr = i if isinstance(i, Tensor) else np.asarray(i)
                if isinstance(arr, np.ndarray) and arr.size == 0 and arr.dtype == np.float64:
                    # an empty list selects nothing (numpy would make it float)
                    arr = arr.astype(np.int32)
                t = arr if isinstance(arr, Tensor) else Tensor(arr, device=self.device)
                if t.dtype == dtypes.bool and t.ndim == 0:
                    # a 0-d mask is a Python bool read back: a new axis of size 1 or 0, as numpy and PyTorch
                    out.append(bool(t.item()))
                elif t.dtype == dtypes.bool:
                    out.append(_Mask(t))
                elif dtypes.is_int(t.dtype):
                    out.append(t)
                else:
                    raise IndexError(f"tensors used as indices must be integer or bool, got {t.dtype}")
            elif isinstance(i, (bool, np.bool_)):
                # as numpy and PyTorch: a new axis of size 1 (True) or 0 (False)
                out.append(bool(i))
            elif i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)):
                out.append(i)
            else:
                raise IndexError(f"unsupported index {i!r} of type {type(i).__name__}")
        flags = [pos for pos, i in enumerate(out) if isinstance(i, bool)]
        if len(flags) > 1:
            # several Python bools broadcast together into one new axis, as numpy's and PyTorch's 0-d masks
            every = all(out[pos] for pos in flags)
            out = [every if pos == flags[0] else i for pos, i in enumerate(out) if pos == flags[0] or pos not in flags]
        return out

    def _basic_view(self, items: list[Any]) -> tuple[Tensor, list[tuple[int, Tensor]], bool]:
        """Apply ints, slices, None and Ellipsis; returns the view, [(axis in view, index tensor)], and whether a
        strided slice needed padding (such a view can't be written through)."""
        n_real = sum(
            i.t.ndim if isinstance(i, _Mask) else 1
            for i in items
            if i is not None and i is not Ellipsis and not isinstance(i, bool)
        )
        if n_real > self.ndim:
            raise IndexError(f"too many indices ({n_real}) for a tensor of shape {self.shape}")
        if any(isinstance(i, bool) for i in items) and any(isinstance(i, (Tensor, _Mask)) for i in items):
            # PyTorch and numpy make the bool an index array then, broadcast with the others
            raise IndexError("a Python bool index together with index tensors or lists isn't supported")
        ellipses = [pos for pos, i in enumerate(items) if i is Ellipsis]
        if len(ellipses) > 1:
            raise IndexError("index: got more than one ellipsis (...); use at most one")
        if ellipses:
            at = ellipses[0]
            items = items[:at] + [slice(None)] * (self.ndim - n_real) + items[at + 1 :]
        else:
            items = items + [slice(None)] * (self.ndim - n_real)
        bounds, flips, strides, out_axes = [], [], [], []
        tensors: list[tuple[int, Tensor]] = []
        axis = 0
        for i in items:
            if isinstance(i, _Mask):
                k = i.t.ndim
                if i.t.shape != self.shape[axis : axis + k]:
                    raise IndexError(
                        f"bool index of shape {i.t.shape} doesn't match axes {axis}..{axis + k - 1} of {self.shape}"
                    )
                for p in i.t.numpy().nonzero():
                    idx = Tensor(np.asarray(p, dtype=np.int32), device=self.device)
                    bounds.append((0, self.shape[axis]))
                    flips.append(False)
                    strides.append(1)
                    out_axes.append(("tensor", axis))
                    tensors.append((axis, idx))
                    axis += 1
                continue
            if i is None or isinstance(i, bool):
                out_axes.append(("new", i is not False))
                continue
            size = self.shape[axis]
            if isinstance(i, Tensor):
                bounds.append((0, size))
                flips.append(False)
                strides.append(1)
                out_axes.append(("tensor", axis))
                tensors.append((axis, i))
            elif isinstance(i, (int, np.integer)):
                j = int(i)
                if not -size <= j < size:
                    raise IndexError(
                        f"index {j} is out of bounds for axis {axis} with size {size} (shape {self.shape})"
                    )
                j %= size
                bounds.append((j, j + 1))
                flips.append(False)
                strides.append(1)
                out_axes.append(("drop", axis))
            else:
                start, stop, step = i.indices(size)
                if step > 0:
                    n = max(0, math.ceil((stop - start) / step))
                    end = start + n * step if start + n * step <= size else start + max(n - 1, 0) * step + 1
                    bounds.append((start, end) if n else (0, 0))
                    flips.append(False)
                else:
                    n = max(0, math.ceil((start - stop) / -step))
                    lo = start + 1 + n * step if start + 1 + n * step >= 0 else start + (n - 1) * step
                    bounds.append((lo, start + 1) if n else (0, 0))
                    flips.append(True)
                strides.append(abs(step))
                out_axes.append(("keep", axis))
            axis += 1
        t = self.shrink(bounds)
        t = t.flip([a for a, f in enumerate(flips) if f])
        padded = False
        if any(s != 1 for s in strides):
            padded = any(k > 1 and t.shape[a] % k for a, k in enumerate(strides))
            t = t._stride(strides)
        new_shape, tensor_axes, empty_axes = [], [], []
        for kind, ax in out_axes:
            if kind == "new":
                if not ax:
                    empty_axes.append(len(new_shape))
                new_shape.append(1)
            elif kind in ("keep", "tensor"):
                if kind == "tensor":
                    tensor_axes.append(len(new_shape))
                new_shape.append(t.shape[ax])
        view = t.reshape(tuple(new_shape))
        if empty_axes:
            view = view.shrink(tuple((0, 0) if a in empty_axes else None for a in range(view.ndim)))
        return view, [(ax, idx) for ax, (_, idx) in zip(tensor_axes, tensors, strict=True)], padded

    def _stride(self, strides: Sequence[int]) -> Tensor:
        # take every k-th element of each axis: pad to a multiple of k if needed, split the axis, keep index 0
        t = self
        for ax, k in enumerate(strides):
            if k == 1:
                continue
            n = t.shape[ax]
            keep = math.ceil(n / k)
            padded = t.pad(tuple((0, keep * k - n) if a == ax else (0, 0) for a in range(t.ndim)))
            split = padded._reshaped(t.shape[:ax] + (keep, k) + t.shape[ax + 1 :])
            bounds = tuple((0, 1) if a == ax + 1 else (0, s) for a, s in enumerate(split.shape))
            t = split.shrink(bounds)._reshaped(t.shape[:ax] + (keep,) + t.shape[ax + 1 :])
        return t

    def _advanced_index(self, tensors: list[tuple[int, Tensor]]) -> Tensor:
        # out[b..., rest...] = self[.., idx_1[b], .., idx_m[b], ..]: a one-hot mask over the indexed axes, then a sum
        if self.dtype == dtypes.bfloat16:  # (picked in float32, as `_gather_checked`)
            return self.float()._advanced_index(tensors).cast(dtypes.bfloat16)
        axes = [a for a, _ in tensors]
        bshape: tuple[int, ...] = ()
        for _, idx in tensors:
            bshape = _broadcast_shape(bshape, idx.shape, "index")
        rest = [i for i in range(self.ndim) if i not in axes]
        rest_shape = tuple(self.shape[i] for i in rest)
        # several index tensors: one flat index into the indexed axes together, whose one-hot compare the lowerer
        # folds into a load (one compare per axis it doesn't: 100 ms for a batch of random crops)
        sizes = tuple(self.shape[a] for a in axes)
        source = self.permute(rest + axes)._reshaped(rest_shape + (math.prod(sizes),))
        out = source._picked_along_last(_flat_index(tensors, sizes, bshape), bshape)
        nb, nr = len(bshape), len(rest)
        # adjacent indexed axes: the broadcast index dims take their place (a 0-d index is an int, as PyTorch's rule
        # and not numpy's: its axis goes, it doesn't part the others)
        ints = {b for b, idx in tensors if idx.ndim == 0}
        kept = [a for a in range(self.ndim) if a not in ints]
        if (at := [kept.index(a) for a, idx in tensors if idx.ndim]) and at == list(range(at[0], at[0] + len(at))):
            p = at[0]
            out = out.permute(list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + nr)))
        return out

    def _picked_along_last(self, idx: Tensor, bshape: tuple[int, ...]) -> Tensor:
        # out[b..., rest...] = self[rest..., idx[b...]] for idx (of shape bshape) in range: a one-hot sum
        if len(bshape) > 1:
            # by a flat index: the gradient sums over one axis, a scatter (over (B, T) it compared index with row)
            flat = self._picked_along_last(idx.reshape(-1), (math.prod(bshape),))
            return flat.reshape(bshape + self.shape[:-1])
        rest_shape, n = self.shape[:-1], self.shape[-1]
        nb, nr = len(bshape), len(rest_shape)
        x = self._reshaped((1,) * nb + self.shape)
        one_hot = idx.reshape(bshape + (1,) * (nr + 1)) == Tensor.arange(
            n, device=self.device, dtype=idx.dtype
        ).reshape((1,) * (nb + nr) + (n,))
        full = bshape + self.shape
        zero = Tensor(0, device=self.device, dtype=self.dtype)
        picked = one_hot._broadcast_to(full).where(x._broadcast_to(full), zero)
        out = picked._reduce(Ops.ADD if self.dtype != dtypes.bool else Ops.MAX, (nb + nr,))
        if dtypes.is_float(self.dtype) and math.prod(full) >= segments.SCATTER_BY_SORTING:
            segments.pick_gradient_by_sorting(out, x, [idx], bshape, rest_shape, (n,))
        return out

    def _plain_view(self, index: Any) -> Tensor | None:
        # a row `x[i]`, a run of rows `x[a:b]` (a dataset's samples read one at a time, a replay buffer's slot
        # written) or an element `x[i, j]`: the view built straight away, the same nodes as `_basic_view`'s, in a
        # fraction of its time; None for any other index
        kind = type(index)
        if (kind is int or kind is slice) and (shape := self.uop.shape):
            n = shape[0]
            if kind is int:
                if -n <= index < n:
                    first = index % n
                    bounds = ((first, first + 1), *((0, s) for s in shape[1:]))
                    row = UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds)
                    return _mark_view(Tensor(UOp(Ops.RESHAPE, self.dtype, (row,), shape[1:])), self)
            elif index.step is None or index.step == 1:
                first, end, _ = index.indices(n)
                if first < end and (first, end) != (0, n):
                    bounds = ((first, end), *((0, s) for s in shape[1:]))
                    return _mark_view(Tensor(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds)), self)
        elif kind is tuple and (shape := self.uop.shape) and 0 < len(index) <= len(shape):
            # an element or a sub-array `x[i, j]` (a loop of `.item()`s over a matrix), and ints mixed with unit-step
            # slices (t-SNE's `dY[i, :] = ...`, a column `w[:, i:i + 1]`), likewise
            k = len(index)
            if all(type(i) is int and -n <= i < n for i, n in zip(index, shape[:k], strict=True)):
                picked = ((i % n, i % n + 1) for i, n in zip(index, shape[:k], strict=True))
                bounds = (*picked, *((0, s) for s in shape[k:]))
                part = UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds)
                return _mark_view(Tensor(UOp(Ops.RESHAPE, self.dtype, (part,), shape[k:])), self)
            return _plain_mixed_view(self, index, shape)
        return None

    def __getitem__(self, index: Any) -> Tensor:
        """numpy/PyTorch indexing: ints, slices (any step), None, ..., int/bool tensors or lists.

        >>> Tensor.arange(10)[1:8:3].tolist()
        [1, 4, 7]
        >>> Tensor([[1, 2], [3, 4]])[[1, 0], 1].tolist()
        [4, 2]
        """
        view = self._plain_view(index)
        if view is not None:
            return view
        if isinstance(index, Tensor) and index.dtype == dtypes.bool and index.ndim and index.shape == self.shape:
            # `x[x > 0]`: masked_select's, whose kernel isn't compiled anew for each count of hits
            return self.masked_select(index)
        return self._indexed(index, "getitem")

    def _indexed(self, index: Any, op: str) -> Tensor:
        # self[index]; `op` names the user's operation in errors (a setitem finds its positions by indexing)
        view, tensors, _ = self._basic_view(self._parse_index(index))
        for ax, idx in tensors:
            self._check_index_range(idx, view.shape[ax], ax, op)
        return view._advanced_index(tensors) if tensors else _mark_view(view, self)

    def _check_index_range(self, idx: Tensor, size: int, axis: int, op: str = "index", negative: bool = True) -> None:
        # numpy-style indexing counts negative indices from the end; gather and scatter don't (as torch)
        _check_same_device(op, [self, idx])
        where = f"for axis {axis} with size {size} (shape {self.shape})"
        _check_values_in(idx, -size if negative else 0, size, lambda bad: f"{op}: index {bad} is out of bounds {where}")

    def __setitem__(self, index: Any, value: Any) -> None:
        """Write `value` (broadcast) into the indexed positions, as a STORE into this tensor's buffer.

        >>> t = Tensor.zeros(4); t[1:3] = 5.0; t.tolist()
        [0.0, 5.0, 5.0, 0.0]
        """
        mask = _leading_mask(self, index, value)
        if mask is not None:
            # a bool mask of the leading dims set to a number (`mem[spike > 0] = 0.0`, a spiking neuron's reset at every
            # step) is a masked fill: the same elements, without reading the mask's count back to find their positions
            self.masked_fill_(mask, value)
            return
        check_in_place_allowed(self, "setitem")
        check_several_views_write(self, value, "setitem")
        if store_element(self, index, value):
            return
        _share_storage(self)
        source = _detached_source(self)
        if source is not None:
            with unseen_by_autograd(source):
                source[index] = value
            live_tensors.set_uop(self, UOp(Ops.DETACH, self.dtype, (source.uop,)))
            return
        self.realize()
        storage = _storage_uop(self.uop)
        if not _writes_through(self) or storage.base.op is not Ops.BUFFER:
            # the tensor needs storage of its own to be written into
            _move_to_own_storage(self)
        # the graph that computed the old contents (a backward() follows it from the buffer), as the value's graph
        history = gradient_history(self.uop)
        plain = self._plain_view(index)
        if plain is not None:
            view, tensors, padded = plain, [], False
        else:
            view, tensors, padded = self._basic_view(self._parse_index(index))
        if not tensors and not padded and isinstance(value, Tensor) and value.uop is view.uop:
            # the view itself (`t[1:] += x`: the in-place op wrote into it already, then Python sets it again)
            return
        if not isinstance(value, Tensor):
            _check_stored_scalar(value, self.dtype, "setitem", half_floats=False)
            value = Tensor(value, device=self.device, dtype=self.dtype)
        if not tensors:
            value = _without_leading_ones(value, view.ndim)
        if history is None:
            history = history_of_plain_storage(self, value)
        value_graph = value.uop
        storage = _storage_uop(self.uop)
        chain = storage.movement_chain()
        if not tensors and not padded:
            _check_value_fits(value, view.shape)
            view.assign(value.cast(self.dtype)._broadcast_to(view.shape)).realize()
        elif any(n.op is Ops.EXPAND for n in chain):
            # advanced indices into a view of an expand (`x.expand(3, 4)[:, [1, 2]] = 5`): the indexed elements are
            # written at their positions in the buffer, as PyTorch's index_put (the last write wins where they alias)
            base = chain[-1].src[0]
            if base in shared_storage:
                # (sorted out for this tensor, whose views share the buffer, before the write through `whole`)
                _keep_other_sharers(self, base)
            whole = Tensor(base)
            bits = Tensor(_storage_uop(value.cast(self.dtype).uop))
            whole.assign(
                whole._overwritten_at(_positions_of(storage, base, self.device)._indexed(index, "setitem"), bits)
            ).realize()
        else:
            self.assign(self._overwritten(index, value).contiguous()).realize()
        if history is not None:
            node, source = history
            view = self.uop

            def written(old: Tensor, value: Tensor) -> Tensor:
                # (written through a view of the storage: that view of old, indexed the same way)
                return old._overwritten(index, value, None if view is node else _view_of(view, node, old.uop))

            remember_write(node, source, value_graph, written, is_grad_enabled(), self.device)

    def __delitem__(self, index: Any) -> None:
        raise TypeError("Tensor doesn't support item deletion (as PyTorch); build a new tensor without the items")

    def _overwritten(self, index: Any, value: Tensor, seen: UOp | None = None) -> Tensor:
        # self with value (broadcast) at self[index], as a lazy graph; `seen`: a view of self (movement ops over its
        # graph) indexed instead, the value written where that view's [index] shows self's elements
        seen_t = self if seen is None else Tensor(seen)
        items = index if isinstance(index, tuple) else (index,)
        if all(i is None or i is Ellipsis or type(i) in (int, slice) or isinstance(i, np.integer) for i in items):
            # (ints, slices, None and ...: a view, written by moving the value back into place)
            placed = _placed_through(self, seen_t._basic_view(seen_t._parse_index(index))[0].uop, value)
            if placed is not None:
                return placed
        if seen is None:
            return self._overwritten_at(self._flat_positions(index, "setitem"), value)
        return self._overwritten_at(_positions_of(seen, self.uop, self.device)._indexed(index, "setitem"), value)

    def _flat_positions(self, index: Any, op: str) -> Tensor:
        # the flat position of each element self[index] reaches, found by indexing a tensor of positions the same way.
        # They count from 1 there: an index out of range (unchecked, CHECK_INDEX=0) reads 0, which becomes -1, a
        # position that matches nothing, so a write to it is dropped (not put at element 0)
        counted = Tensor.arange(1, self.numel() + 1, device=self.device).reshape(self.shape)
        return counted._indexed(index, op) - 1

    def _overwritten_at(self, positions: Tensor, value: Tensor) -> Tensor:
        # self with value (broadcast to positions' shape) written at the flat positions `positions`, as a lazy graph
        _check_value_fits(value, positions.shape)
        if positions.numel() == 0:
            return self
        vals = (
            _without_leading_ones(value, positions.ndim).cast(self.dtype)._broadcast_to(positions.shape).reshape(-1, 1)
        )
        if self.numel() * positions.numel() >= segments.SCATTER_BY_SORTING:
            # (a spare slot first takes the writes to position -1, the dropped ones: a sorted scan has no "no match")
            flat = self.reshape(1, -1).pad(((0, 0), (1, 0)))
            out = segments.scatter_rows(flat, positions.reshape(1, -1) + 1, vals.reshape(1, -1), "replace", False)
            return out[:, 1:].reshape(self.shape)
        hit = positions.reshape(-1, 1) == Tensor.arange(self.numel(), device=self.device).reshape(1, -1)
        # a position indexed more than once takes the last write (as PyTorch's CPU), not the sum of the writes
        writer = Tensor.arange(1, positions.numel() + 1, device=self.device).reshape(-1, 1)
        last = hit.where(writer, 0).max(axis=0, keepdim=True)
        wins = hit & (writer == last)
        zero = Tensor(0, device=self.device, dtype=self.dtype)
        vals = vals._broadcast_to(hit.shape)
        written = wins.where(vals, zero)._reduce(Ops.MAX if self.dtype == dtypes.bool else Ops.ADD, 0)
        if dtypes.is_float(self.dtype):
            # every written value gets the gradient at its target, overwritten or not (PyTorch's index_put backward),
            # as scatter's: the overwritten ones add an exact 0 that carries it
            written = written - _carried_by_lost_writes(hit & ~wins, vals).sum(0)
        return (last != 0).reshape(self.shape).where(written.reshape(self.shape), self)

    # ------------------------------------------------------------------------------------------------------------
    # gather and scatter along one dim, index_select and take: one-hot masks of the indices and a reduce

    def gather(self, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
        """out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and likewise for other dims), as torch.gather.
        `sparse_grad=True` is accepted and gives the same, dense, gradient (there are no sparse tensors).

        >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
        [[1, 1], [4, 3]]
        """
        dim = _normalize_axis(dim, self.ndim, "gather", self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise IndexTensorError(
                f"gather: index must be an integer tensor, got {described(index)}; cast it with .long()"
            )
        if max(self.ndim, index.ndim) <= 1 and min(self.ndim, index.ndim) == 0:
            # a 0-d tensor gathers as one element along a single axis, as PyTorch's (a 1-d index: that many reads),
            # and a 1-d tensor by a 0-d index reads one
            return self.reshape(-1).gather(0, index.reshape(-1)).reshape(index.shape)
        if index.ndim != self.ndim or any(
            i > s for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True)) if d != dim
        ):
            raise ShapeError(f"gather: index shape {index.shape} doesn't fit input shape {self.shape} (dim {dim})")
        self._check_index_range(index, self.shape[dim], dim, "gather", negative=False)
        return self._gather_checked(dim, index)

    def _gather_checked(self, dim: int, index: Tensor) -> Tensor:
        # gather with indices known to be in range (no read-back of their bounds)
        if self.dtype == dtypes.bfloat16:
            # (picked in float32, exact both ways: the one-hot sum over bfloat16's bits and casts is a real sum, and
            # -0.0 + 0.0 lost the sign of a picked -0.0)
            return self.float()._gather_checked(dim, index).cast(dtypes.bfloat16)
        n = self.shape[dim]
        region = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        # x with `dim` moved last and a size-1 axis in its place, aligned with the one-hot of index
        x = region._move_to_end(dim).unsqueeze(dim)._broadcast_to(index.shape + (n,))
        hit = index._one_hot_along(n)
        out = hit.where(x, Tensor(0, device=self.device, dtype=self.dtype))._reduce(_sum_op(self.dtype), -1)
        if dtypes.is_float(self.dtype) and math.prod(hit.shape) >= segments.SCATTER_BY_SORTING:
            segments.gather_gradient_by_sorting(out, region, dim, index)
        return out

    def _scatter_inputs(self, dim: int, index: Tensor, src: Any, op: str) -> tuple[int, Tensor]:
        # (dim normalized, src as a tensor of index's shape in self's dtype), the arguments checked
        dim = _normalize_axis(dim, self.ndim, op, self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise IndexTensorError(
                f"{op}: index must be an integer tensor, got {described(index)}; cast it with .long()"
            )
        if index.ndim != self.ndim or any(
            i > s for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True)) if d != dim
        ):
            raise ShapeError(f"{op}: index shape {index.shape} doesn't fit self shape {self.shape} (dim {dim})")
        self._check_index_range(index, self.shape[dim], dim, op, negative=False)
        if isinstance(src, Tensor):
            if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape, strict=True)):
                raise ShapeError(f"{op}: src shape {src.shape} is smaller than index shape {index.shape}")
            src = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
        else:
            src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
        return dim, src

    @_scalar_as_vector
    def scatter(self, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """A copy of self with self[index[i][j]][j] = src[i][j] (dim 0), as torch.scatter; `reduce` "add" or
        "multiply" combines instead of replacing. With repeated indices and no reduce, the last write (in index order)
        wins, as PyTorch's CPU scatter.

        >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([5.0, 6.0])).tolist()
        [6.0, 0.0, 5.0]
        """
        if reduce not in (None, "add", "multiply"):
            raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if reduce is not None:
            return self._scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce], True, "scatter")
        return self._scatter_replacing(dim, index, src, "scatter")

    def _scatter_replacing(self, dim: int, index: Tensor, src: Any, op: str) -> Tensor:
        # scatter without a reduce; errors name `op`, the method called (index_copy writes through it too)
        dim, src = self._scatter_inputs(dim, index, src, op)
        if index.numel() == 0:
            # nothing is written (and no write to pick a last one from): a copy, as _placed_at's
            return self.clone()
        if (sorted_form := segments.scattered_by_sorting(self, dim, index, src, "replace", False)) is not None:
            return sorted_form
        hit, vals = segments.one_hot_writes(self, dim, index, src)
        # of the writes to one position, keep the one with the highest position along `dim` in index
        k = hit.shape[-1]
        order = Tensor.arange(k, device=self.device, dtype=dtypes.positions(k)).reshape((1,) * (hit.ndim - 1) + (k,))
        last = hit.where(order, -1).max(axis=-1, keepdim=True)
        wins = hit & (order == last)
        zero = Tensor(0, device=self.device, dtype=self.dtype)
        written = wins.where(vals, zero)._reduce(_sum_op(self.dtype), -1)
        if dtypes.is_float(self.dtype):
            # every src element gets the gradient at its target, overwritten or not (PyTorch's gather backward): the
            # overwritten ones add an exact 0 that carries it
            lost = hit & ~wins & (vals - vals == 0)
            written = written - lost.where(vals.detach() - vals, zero).sum(-1)
        return hit.any(-1).where(written, self)

    @_scalar_as_vector
    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """A copy of self with src added at index along dim (repeated indices add up), as torch.scatter_add.

        >>> Tensor.zeros(3).scatter_add(0, Tensor([2, 0, 2]), Tensor([5.0, 6.0, 1.0])).tolist()
        [6.0, 0.0, 6.0]
        """
        return self._scatter_reduce(dim, index, src, "sum", True, "scatter_add")

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The slices at the 1-D (or 0-d) integer `index` along `dim`, as torch.index_select (no negative indices).

        >>> Tensor([[1, 2], [3, 4]]).index_select(1, Tensor([1, 1, 0])).tolist()
        [[2, 2, 1], [4, 4, 3]]
        """
        dim = _normalize_axis(dim, self.ndim, "index_select", self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype) or index.ndim > 1:
            raise IndexTensorError(f"index_select: index must be a 0-d or 1-D integer tensor, got {described(index)}")
        self._check_index_range(index, self.shape[dim] if self.ndim else 1, dim, "index_select", negative=False)
        if self.ndim == 0:
            if index.numel() != 1:
                raise ShapeError(f"index_select: a 0-d tensor takes one index, got {index.numel()}")
            return self
        return self._advanced_index([(dim, index.reshape(-1))])

    def take(self, index: Tensor) -> Tensor:
        """The elements of self, read as a flat array, at the integer `index` (any shape; negative counts from the
        end), as torch.take.

        >>> Tensor([[1, 2], [3, 4]]).take(Tensor([[0, -1]])).tolist()
        [[1, 4]]
        """
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise IndexTensorError(
                f"take: index must be an integer tensor, got {described(index)}; cast it with .long()"
            )
        flat = self.reshape(-1)
        flat._check_index_range(index, flat.shape[0], 0, "take")
        return flat._advanced_index([(0, index)])

    @_scalar_as_vector
    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        """Combine src into self at index along dim with "sum", "prod", "mean", "amax" or "amin", as torch.

        >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([2.0, 3.0, 4.0]), "sum").tolist()
        [6.0, 5.0]
        """
        return self._scatter_reduce(dim, index, src, reduce, include_self, "scatter_reduce")

    def _scatter_reduce(self, dim: int, index: Tensor, src: Any, reduce: str, include_self: bool, op: str) -> Tensor:
        # scatter_reduce; errors name `op`, the method called (scatter_add and index_add reduce through it)
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ArgumentError(f"{op}: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
        if self.dtype in dtypes.halves and reduce in ("sum", "mean"):
            # half floats summed in float32 and rounded once, as PyTorch's (a running half sum drifts by ulps)
            wide = src.cast(self.dtype).float() if isinstance(src, Tensor) else src
            return self.float()._scatter_reduce(dim, index, wide, reduce, include_self, op).cast(self.dtype)
        dim, src = self._scatter_inputs(dim, index, src, op)
        if reduce in ("amax", "amin"):
            if index.numel() == 0:
                # (no write: self as it is, and src's gradient torch's zeros, not None)
                return with_zero_gradient_to(self.clone(), src)
            extreme = segments.scatter_extreme(self, dim, index, src, reduce, include_self)
            return segments.with_extreme_gradient(extreme, self, dim, index, src, reduce, include_self)
        return segments.combined_at(self, dim, index, src, reduce, include_self)

    def nonzero(self, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
        """The indices of the nonzero elements as an (n, ndim) int32 tensor, in row-major order (torch.nonzero);
        with `as_tuple=True` one 1-D tensor of indices per dimension (a 0-d tensor: one, of its 0 or 1 hits), as
        torch's. Its length depends on the data: the mask is read back to the host, as masked_select's.

        >>> Tensor([[0, 1], [2, 0]]).nonzero().tolist()
        [[0, 1], [1, 0]]
        >>> [t.tolist() for t in Tensor([[0, 1], [2, 0]]).nonzero(as_tuple=True)]
        [[0, 1], [1, 0]]
        """
        # (int64 along an axis of 2**31 or more, as the other index results)
        wide = dtypes.positions(max(self.shape, default=1)) == dtypes.int64
        found = np.argwhere((self != 0).numpy()).astype(np.int64 if wide else np.int32)
        found = found.reshape(len(found), self.ndim)
        if not as_tuple:
            return Tensor(found, device=self.device)
        if self.ndim == 0:
            return (Tensor(np.zeros(len(found), found.dtype), device=self.device),)
        return tuple(Tensor(np.ascontiguousarray(found[:, d]), device=self.device) for d in range(self.ndim))

    # ---- in-place operators (`t += x`, `t.add_(x)`): PyTorch's, the tensor object itself takes the result

    def _update_in_place(self, compute: Callable[[], Tensor], op: str, picked: _Picked = None) -> Tensor:
        # `compute()` (self op x) becomes self's value, as PyTorch in-place ops (`update_all_in_place` of one);
        # `picked()`, a bool tensor broadcast to self's shape: the elements the op writes (the others keep theirs)
        update_all_in_place([self], [compute], op, [picked])
        return self

    __iadd__ = _in_place_operator("+=", lambda t, x: t.add(x))
    __isub__ = _in_place_operator("-=", lambda t, x: t.sub(x))
    __imul__ = _in_place_operator("*=", lambda t, x: t.mul(x))
    __itruediv__ = _in_place_operator("/=", lambda t, x: t.div(x))
    __ifloordiv__ = _in_place_operator("//=", lambda t, x: t.div(x, rounding_mode="floor"))
    __imod__ = _in_place_operator("%=", lambda t, x: t.mod(x))
    __ipow__ = _in_place_operator("**=", lambda t, x: t.pow(x))
    # (no __imatmul__: `t @= m` is `t = t @ m`, a new tensor, as PyTorch's, which has no in-place matmul)
    __iand__ = _in_place_operator("&=", lambda t, x: t & x)
    __ior__ = _in_place_operator("|=", lambda t, x: t | x)
    __ixor__ = _in_place_operator("^=", lambda t, x: t ^ x)
    __ilshift__ = _in_place_operator("<<=", lambda t, x: t.lshift(x))
    __irshift__ = _in_place_operator(">>=", lambda t, x: t.rshift(x))

    def add_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self += alpha * other in place (torch.Tensor.add_; alpha keyword-only, as torch's).

        >>> t = Tensor([1.0, 2.0]); t.add_(1).tolist()
        [2.0, 3.0]
        """
        if deprecated:
            # torch's deprecated add_(alpha, other): `p.data.add_(-lr, d_p)`; alpha is keyword-only otherwise
            other, alpha = _alpha_first_in_place("add_", other, deprecated, alpha)
        return self._update_in_place(lambda: self.add(other, alpha=alpha), "add_")

    def sub_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self -= alpha * other in place (torch.Tensor.sub_; alpha keyword-only, as torch's)."""
        if deprecated:
            # torch's deprecated sub_(alpha, other): `p.data.sub_(-lr, d_p)`; alpha is keyword-only otherwise
            other, alpha = _alpha_first_in_place("sub_", other, deprecated, alpha)
        return self._update_in_place(lambda: self.sub(other, alpha=alpha), "sub_")

    def mul_(self, x: Any) -> Tensor:
        """self *= x in place (torch.Tensor.mul_)."""
        return self._update_in_place(lambda: self.mul(x), "mul_")

    def div_(self, x: Any, rounding_mode: str | None = None) -> Tensor:
        """self /= x in place (torch.Tensor.div_)."""
        return self._update_in_place(lambda: self.div(x, rounding_mode=rounding_mode), "div_")

    def pow_(self, x: Any) -> Tensor:
        """self **= x in place (torch.Tensor.pow_)."""
        return self._update_in_place(lambda: self.pow(x), "pow_")

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        """self clamped to [min, max] in place (torch.Tensor.clamp_)."""
        return self._update_in_place(lambda: self.clamp(min, max), "clamp_")

    def fill_(self, value: Any) -> Tensor:
        """Every element set to `value` in place (torch.Tensor.fill_).

        >>> t = Tensor([1, 2, 3]); t.fill_(7).tolist()
        [7, 7, 7]
        """
        if isinstance(value, Tensor) and value.ndim != 0:
            raise ShapeError(f"fill_: the value must be a number or a 0-d tensor, got shape {value.shape}")
        if isinstance(value, Tensor):
            return self._update_in_place(lambda: value.cast(self.dtype).expand(self.shape), "fill_")
        _check_stored_scalar(value, self.dtype, "fill_")
        return self._update_in_place(
            lambda: Tensor.full(self.shape, value, device=self.device, dtype=self.dtype), "fill_"
        )

    def zero_(self) -> Tensor:
        """Every element set to zero in place (torch.Tensor.zero_)."""
        return self.fill_(0)

    def copy_(self, src: Any) -> Tensor:
        """`src` (broadcast to self's shape, cast to its dtype) written into self in place (torch.Tensor.copy_).

        >>> t = Tensor([0.0, 0.0]); t.copy_(Tensor([1, 2])).tolist()
        [1.0, 2.0]
        """
        if not isinstance(src, Tensor):
            _check_stored_scalar(src, self.dtype, "copy_")
            src = Tensor(src, device=self.device, dtype=self.dtype)
        if src.device != self.device:
            src = src.to(self.device)
        shape = _broadcast_shape(self.shape, src.shape, "copy_")
        return self._update_in_place(lambda: src._broadcast_to(shape).cast(self.dtype), "copy_")

    def assign(self, x: Any) -> Tensor:
        """Write `x` into this tensor's storage: builds STORE(view of BUFFER, x), realized with the next realize; a
        write through a view (`t[:3].assign(v)`) runs at once: the view is often dropped right away, and the tensor it
        views (which doesn't hold the STORE) must show the write when it is read.

        >>> t = Tensor([1, 2]); t.assign(Tensor([3, 4])).realize().tolist()
        [3, 4]
        """
        check_in_place_allowed(self, "assign")
        check_several_views_write(self, x, "assign")
        source = _detached_source(self)
        if source is not None:
            # (a write through a detach is a write through a view of the tensor detached: it runs now)
            with unseen_by_autograd(source):
                source.assign(x).realize()
            live_tensors.set_uop(self, UOp(Ops.DETACH, self.dtype, (source.uop,)))
        elif self._store_overlapping(x) and self._view_of is not None and self._view_of() is not None:
            self.realize()
        return self

    def _store_overlapping(self, x: Any) -> bool:
        # `_store`, also into overlapping windows (`w[...] = v`, w an unfold's): PyTorch's loop writes each element in
        # turn, so the last in row-major order wins
        try:
            return self._store(x)
        except _AliasedWrite as alias:
            if alias.zero_stride:
                raise
            return self._store(x, aliased_ok=True)

    def _store(self, x: Any, aliased_ok: bool = False, picked: _Picked = None, shared: bool = False) -> bool:
        # assign's STORE, not run: whether it writes through a view (of a live tensor, which must show it);
        # `aliased_ok`: the write may reach one element of storage through several of the view's (fill_'s one value);
        # `picked()`: the elements written (bool, broadcast to self's shape), all of them when None; `shared`: the
        # caller gave self storage to share with its views already (`_share_storage`)
        if not isinstance(x, Tensor):
            _check_stored_scalar(x, self.dtype, "assign")
            x = Tensor(x, device=self.device, dtype=self.dtype)
            if x.ndim == 0:
                # a number fills the tensor, as tinygrad's
                x = x._broadcast_to(self.shape)
        if x.shape != self.shape:
            raise ShapeError(f"assign: value shape {x.shape} doesn't match target shape {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {x.dtype} doesn't match target dtype {self.dtype}; cast it first")
        if x.device != self.device:
            raise ArgumentError(f"assign: value is on {x.device}, target on {self.device}; use .to() first")
        if self.numel() == 0:
            # nothing to write (a STORE of an empty view would make a kernel with an empty loop); found by the fuzzer
            return False
        if not shared:
            _share_storage(self)
        target = _storage_uop(self.uop)
        if target.base.op is not _BUFFER:
            # an unrealized target gets a buffer of its own first
            self.realize()
            target = _storage_uop(self.uop)
        chain = target.movement_chain()
        if target.base in shared_storage:
            _keep_other_sharers(self, target.base)
        expanded = any(n.op is Ops.EXPAND for n in chain)
        padded = any(n.op is Ops.PAD for n in chain)
        if self._view_of is None and (expanded or padded):
            raise ArgumentError("assign: can't write through an expanded or padded view (elements would alias)")
        value = _storage_uop(x.uop)
        if value is not target and value.base is target.base:
            # another view of the very storage written (`a[::-1] = a`, `a.T.copy_(a)`): read from a copy, or the
            # kernel overwrites elements before it reads them (the kernelizer can't copy a view that is part of the
            # target's own chain: the copy would become the target too)
            x = x.contiguous()
        if expanded or padded:
            # a strided slice (`x[::2]` of an odd length: padded, split and cut) or a view of an expand
            # (`x.expand(2, 3)[0]`): each element it shows is written at its position in the buffer, found by taking
            # the same view of the buffer's positions
            base = chain[-1].src[0]
            whole = Tensor(base)
            if not expanded:
                # (a strided slice shows each element once: the value is moved back into place)
                placed = _placed_through(whole, target, Tensor(_storage_uop(x.uop)))
                assert placed is not None
                whole._store(placed)
            else:
                positions = _positions_of(target, base, self.device)
                if picked is not None:
                    # (the elements not picked are written nowhere: position -1, which matches none)
                    positions = picked()._broadcast_to(self.shape).where(positions, -1)
                if not aliased_ok:
                    written = positions.numpy()
                    flat = written[written >= 0]
                    if np.unique(flat).size < flat.size:
                        every = written if picked is None else _positions_of(target, base, self.device).numpy()
                        raise _AliasedWrite(self.shape, written, _steps_zero(every))
                whole._store(whole._overwritten_at(positions, Tensor(_storage_uop(x.uop))))
            store = _view_of(target, base, whole.uop)
        else:
            store = UOp(_STORE, target.dtype, (target, _storage_uop(x.uop)))
        live_tensors.set_uop(self, UOp(Ops.BITCAST, self.dtype, (store,)) if self.dtype == dtypes.bfloat16 else store)
        return bool(chain)


def update_all_in_place(
    targets: Sequence[Tensor],
    computes: Sequence[Callable[[], Tensor]],
    op: str,
    picks: Sequence[_Picked] | None = None,
) -> None:
    """Each `computes[i]()` becomes targets[i]'s value, cast to its dtype, as PyTorch in-place ops: written into a
    tensor's storage (realized, a view of one, `requires_grad`) with one realize for all, its views see it; a lazy
    value takes the new graph (`out += residual`). Each is computed after the earlier writes are staged (foreach).
    `picks[i]()`, where given, is the bool mask of the elements of targets[i] the op writes (see `_PICKED_WRITES`)."""
    staged: list[_Staged] = []
    picks = picks if picks is not None else [None] * len(targets)
    # (a write under no_grad changes the values, not the gradient's graph: `remember_write`)
    recorded = is_grad_enabled()
    try:
        for t, compute, picked in zip(targets, computes, picks, strict=True):
            try:
                staged_one = _stage_in_place(t, compute(), op, picked)
            except _AliasedWrite as alias:
                if alias.zero_stride and op not in _ADDING_THROUGH_EXPAND:
                    raise
                _write_in_turns(t, compute, op, alias.positions)
                continue
            if staged_one is not None:
                staged.append(staged_one)
    finally:
        # (the writes staged before an error still land, as those of the loop's earlier ops)
        if staged:
            staged[0][0].realize(*[t for t, _, _, _ in staged[1:]])
    for t, history, value_graph, picked in staged:
        if history is None:
            continue
        # a realized value a backward() still follows to the graph that computed it: the result is written where
        # this tensor views it, as setitem keeps it
        node, source = history
        # (compared as storage: a bfloat16 view written is a BITCAST of a view of the bits, `_store`)
        view, stored = _storage_uop(t.uop), _storage_uop(node)
        if not _views_node(view, stored):
            # (the write went to storage of its own, a deep copy's realized with the write: nothing to follow)
            forget_source(node)
            continue

        def written(
            old: Tensor, value: Tensor, view: UOp = view, stored: UOp = stored, picked: _Picked = picked
        ) -> Tensor:
            placed = _placed_through(old, _view_of(view, stored, old.uop), value, picked)
            if placed is not None:
                return placed
            positions = _positions_of(view, stored, old.device)
            if picked is not None:
                # (the elements not written keep the old value, for the gradient too: a round of `_write_in_turns`)
                positions = picked()._broadcast_to(positions.shape).where(positions, -1)
            return old._overwritten_at(positions, value)

        remember_write(node, source, value_graph, None if view is stored else written, recorded, t.device)


def _write_in_turns(t: Tensor, compute: Callable[[], Tensor], op: str, positions: np.ndarray) -> None:
    # an in-place op into a view whose written elements alias (overlapping `unfold` windows, or index_put_ adding
    # through an expand), as PyTorch's loop, which writes each element in turn (row-major): the element of storage
    # several show takes the op once per element, each time on the value the one before left (`w.add_(1)` adds once
    # per window, `w.mul_(2)` doubles as often; a copy's last write wins). Done in rounds: round r writes the
    # elements that are the r-th to reach their storage (so no two of them alias), on the values the rounds before
    # left; each a write of its own, so a gradient follows them all
    ranks = _write_ranks(positions)
    for turn in range(int(ranks.max()) + 1):
        mask = Tensor(ranks == turn, device=t.device)
        update_all_in_place([t], [compute], op, [lambda mask=mask: mask])


def _stage_in_place(t: Tensor, result: Tensor, op: str, picked: _Picked = None) -> _Staged | None:
    # `result` made t's value: (t, its gradient history, the value's graph) for a write staged (an assign) for the
    # batch's realize; None when done already (result is held only until staged: a reader of the storage being
    # written would be computed apart or get a copy, an extra kernel)
    check_in_place_allowed(t, op)
    check_several_views_write(t, result, op)
    if result.shape != t.shape:
        raise ShapeError(
            f"{op}: the result's shape {result.shape} (broadcast with the operand) doesn't match the tensor's "
            f"{t.shape}; an in-place op can't change a tensor's shape"
        )
    if result.dtype != t.dtype:
        if (
            type(result.dtype) is ComplexDType  # (a complex result: `t += z`)
            or (dtypes.is_float(result.dtype) and not dtypes.is_float(t.dtype))
            or t.dtype == dtypes.bool
        ):
            # (a TypeError, and the RuntimeError torch raises: "result type Float can't be cast to ... Long")
            raise DTypeError(
                f"{op}: the result is {result.dtype}, which can't be stored in place into this {t.dtype} "
                "tensor (as PyTorch); cast the tensor first, or build a new one (t = t op x)"
            )
        result = result.cast(t.dtype)
    _share_storage(t)
    source = _detached_source(t)
    if source is not None:
        with unseen_by_autograd(source):
            source._update_in_place(lambda value=result: value, op)
        live_tensors.set_uop(t, UOp(Ops.DETACH, t.dtype, (source.uop,)))
        return None
    if not (t._requires_grad or _writes_through(t)):
        if _is_storage(result.uop):
            # (a value that is storage, `s.copy_(w)`, `s.fill_(w[0])`: t takes a copy, as PyTorch's, not a view that
            # would show w's later writes)
            result = result.contiguous()
        live_tensors.set_uop(t, unrecorded_write(t.uop, result.uop, t.device))
        return None
    # written with the batch, as PyTorch's at once: the tensor's base (which this may be a view of) must see it
    history = gradient_history(t.uop)
    root = t._view_of() if t._view_of is not None else None
    if history is None and not t._requires_grad and not (root is not None and root._requires_grad):
        # (into a leaf that requires grad, or a view of one, the write is an update unseen by autograd: semantics.md)
        history = history_of_plain_storage(t, result)
    value_graph = result.uop
    t._store(result, aliased_ok=op in _ONE_VALUE_WRITES or op in _PICKED_WRITES, picked=picked, shared=True)
    return t, history, value_graph, picked


def _in_place_method(name: str) -> Callable[..., Tensor]:
    # torch's `t.name_(...)`: `t.name(...)` written into t (`_update_in_place`)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self._update_in_place(lambda: getattr(self, name)(*args, **kwargs), f"{name}_")

    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"`{name}` in place (torch.Tensor.{name}_)."
    return method


def _leading_mask(t: Tensor, index: Any, value: Any) -> Tensor | None:
    # `t[mask] = number` for a bool mask of t's leading dims on t's device: the mask, with ones for the other dims.
    # (Half floats aside: setitem rounds a number too large for them to inf, where masked_fill refuses it, as torch's)
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if not isinstance(index, Tensor) or index.dtype != dtypes.bool or not 0 < index.ndim <= t.ndim:
        return None
    if type(value) not in (int, float, bool) or index.shape != t.shape[: index.ndim] or index.device != t.device:
        return None
    if dtypes.is_float(t.dtype) and t.dtype.itemsize == 2:
        return None
    return index.reshape(index.shape + (1,) * (t.ndim - index.ndim))

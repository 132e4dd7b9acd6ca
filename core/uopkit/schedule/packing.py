"""Repack the right operand of a matmul into column panels, for backends that read it a panel at a time.

A CPU kernel for A @ B (B row-major, K x N) keeps a tile of C in registers and, for each k, reads a short row of B:
B[k, j:j+P]. Consecutive k are N elements apart, so every read lands on another page and the hardware prefetcher
never sees a stream. Stored as (N/P, K, P) instead, a panel is one contiguous run that the kernel walks from start
to end. The copy is one pass over B; a large product reads B many times over (measured on a 2048 matmul: 2.8x).

The scheduler decides, once the graph is complete (gradients included) and before it kernelizes: `pack_panels` finds
each sum over a product (a matmul) whose operand is a broadcast, row-major view of stored data and, when the device's
renderer asks for panels (`Renderer.pack_panel`), replaces that operand by the same view of CONTIGUOUS(B in panel
layout), with the same shape and values; the panels are then stored by a kernel of their own and the matmul reads
them. The front end knows nothing of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat
from uopkit.uop.symbolic import decompose, simplify

# below these the copy costs more than the strided reads: the panel's reuse (rows of A) and the operand's size (up to
# 128K floats, half a core's L2, B stays in cache as it is: a 256x256 matmul runs as fast unpacked, one kernel less)
MIN_REUSE = 64
MIN_ELEMENTS = 128 * 1024


def panel_width(device: str) -> int:
    """The device renderer's panel width (0: it wants no packing)."""
    from uopkit.device import Device

    try:
        return int(getattr(Device[device].renderer, "pack_panel", 0))
    except Exception:  # noqa: BLE001 - a device that can't open here has nothing to say about layouts
        return 0


# strides by the view's movement ops (the same views of other buffers, or rebuilt every call, have the same strides)
_strides_cache: dict[tuple, dict[int, int] | None] = {}


def _strides(view: UOp) -> dict[int, int] | None:
    """Element strides of `view`'s axes in the BUFFER under it (None: not a plain strided view of a BUFFER)."""
    key = (view.base.op, view.base.shape, tuple((n.op, n.arg) for n in view.movement_chain()))
    if key not in _strides_cache:
        if len(_strides_cache) >= 1024:
            _strides_cache.clear()
        _strides_cache[key] = _view_strides(view)
    return _strides_cache[key]


def _packable(base: UOp) -> bool:
    """Whether a matmul operand over `base` can be stored in panels: stored data, or a value a kernel computes (it is
    then computed into panels, or copied there once); not a constant (an expanded 0 or 1 costs nothing to read)."""
    return base.op is Ops.BUFFER or (base.op not in _NOT_PACKABLE and bool(base.shape) and math.prod(base.shape) > 0)


_NOT_PACKABLE = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.DEVICE})


def _view_strides(view: UOp) -> dict[int, int] | None:
    from uopkit.codegen.lowerer import view_index

    chain = view.movement_chain()
    if any(n.op is Ops.PAD for n in chain) or not _packable(view.base):
        return None
    shape = view.shape
    assert shape is not None
    axes = tuple(UOp.variable(f"a{i}", 0, max(s - 1, 0)) for i, s in enumerate(shape))
    base, idx = view_index(view, axes)
    # (a computed value is laid out row-major in its own shape; a BUFFER is already flat)
    flat, stride = idx[0].const_like(0), 1
    for i, size in zip(reversed(idx), reversed(base.shape or (1,)), strict=True):
        flat, stride = flat + i * stride, stride * size
    terms, _ = decompose(simplify(flat))
    coefs = {t: c for c, t in terms}
    if any(t.op is not Ops.DEFINE_VAR for t in coefs):
        return None
    return {i: coefs.get(a, 0) for i, a in enumerate(axes)}


def panel_for(operand: UOp, j: int, k: int, reuse: int) -> int:
    """The panel width to store `operand` in (0: leave it as it is). `operand` is a matmul's right operand before
    its broadcast over the `reuse` rows of the left one; `j` its column axis, `k` the reduce axis."""
    shape = operand.shape
    assert shape is not None
    n, kk = shape[j], shape[k]
    p = panel_width(operand.device)
    # worth it: whole panels, reused across enough rows, big enough; a plain strided view of stored data or of a value
    # a kernel computes (a training step's activations and gradients: that kernel then writes the panels)
    if not p or n % p or reuse < MIN_REUSE or not _packable(operand.base):
        return 0
    strides = _strides(operand)
    if strides is None:
        return 0
    # row-major (B: each row of a panel contiguous) or transposed (W.T in x @ W.T, k.T in attention's q @ k.T: each
    # panel gathered from p rows, one pass, so the matmul's tile reads vectors along j instead of reducing vectors
    # along k and adding up each vector's lanes at the end, which a short k (a head's 64) pays for dearly: however
    # small, a transposed operand is worth the copy)
    along_j = strides[j] == 1 and abs(strides[k]) >= p and n * kk > MIN_ELEMENTS
    # (rows shorter than a panel too: g @ W.T with 10 classes, whose 10-long rows give no vector along k)
    along_k = strides[k] == 1 and abs(strides[j]) >= min(p, kk)
    return p if along_j or along_k else 0


def packed_view(operand: UOp, j: int, p: int) -> UOp:
    """`operand` as a view of a CONTIGUOUS copy laid out in panels of p along axis j (that axis innermost)."""
    shape = operand.shape
    assert shape is not None
    split = shape[:j] + (shape[j] // p, p) + shape[j + 1 :]
    order = tuple(a for a in range(len(split)) if a != j + 1) + (j + 1,)
    panels = UOp(Ops.PERMUTE, operand.dtype, (UOp(Ops.RESHAPE, operand.dtype, (operand,), split),), order)
    stored = UOp(Ops.CONTIGUOUS, operand.dtype, (panels,))
    back = tuple(order.index(a) for a in range(len(split)))
    return UOp(Ops.RESHAPE, operand.dtype, (UOp(Ops.PERMUTE, operand.dtype, (stored,), back),), shape)


def _packed_operand(operand: UOp, k: int, other: UOp) -> UOp | None:
    """`operand` (a factor of a matmul's product, reduced over axis `k`) read from panels, or None to leave it.

    Only a broadcast (EXPAND) of a view of stored data is packed: the rows it is broadcast over are what reuses each
    panel, and the view under the broadcast is what is copied (once, not once per row)."""
    if operand.op is not Ops.EXPAND:
        return None
    inner = operand.src[0]
    shape, out_shape = inner.shape, operand.shape
    assert shape is not None and out_shape is not None
    reuse = math.prod(o for s, o in zip(shape, out_shape, strict=True) if s == 1 and o != 1)
    strides = _strides(inner) if _packable(inner.base) else None
    if strides is None and _gathered_rows(inner, reuse):
        return operand.replace(src=(UOp(Ops.CONTIGUOUS, inner.dtype, (inner,)),))
    if strides is None or shape[k] == 1:
        return None
    # the column axis: the other axis the operand walks contiguously, else (a transposed operand, contiguous along
    # the reduce) its one other axis
    j = next((a for a, st in strides.items() if st == 1 and a != k and shape[a] > 1), None)
    if j is None and strides[k] == 1:
        # the column axis is the one the other operand is broadcast along (not a batch axis both have), and the
        # product's innermost (the right operand's columns, not the left one's rows)
        other_shape = (other.src[0] if other.op is Ops.EXPAND else other).shape
        columns = [a for a, st in strides.items() if st != 0 and a != k and shape[a] > 1 and other_shape[a] == 1]
        innermost = max((a for a, size in enumerate(out_shape) if a != k and size > 1), default=None)
        j = columns[0] if columns == [innermost] else None
    if j is None:
        return None
    if strides[j] == 1 and _few_columns(inner, j, k, reuse, other):
        return operand.replace(src=(stored_along(inner, k),))
    p = panel_for(inner, j, k, reuse)
    return operand.replace(src=(packed_view(inner, j, p),)) if p else None


def _few_columns(operand: UOp, j: int, k: int, reuse: int, other: UOp) -> bool:
    """Whether a row-major right operand has too few columns for a register tile's vectors (h @ W with 10 classes:
    the columns take pairs, and the tile stays scalar) while its long reduce could be read in vectors, as the left
    operand's is: stored transposed, both are (h @ W.T's form, vectors along k, 4x faster on a 256x512 @ 512x10)."""
    shape = operand.shape
    assert shape is not None
    n, kk = shape[j], shape[k]
    p = panel_width(operand.device)
    if not p or n >= p or n % 16 == 0 or kk < 64 or kk % 8 or reuse < MIN_REUSE:
        return False
    inner = other.src[0] if other.op is Ops.EXPAND else other
    other_strides = _strides(inner) if _packable(inner.base) else None
    return other_strides is not None and other_strides[k] == 1


def stored_along(operand: UOp, axis: int) -> UOp:
    """`operand` as a view of a CONTIGUOUS copy with `axis` innermost."""
    rank = len(operand.shape or ())
    if axis == rank - 1:
        return UOp(Ops.CONTIGUOUS, operand.dtype, (operand,))
    order = tuple(a for a in range(rank) if a != axis) + (axis,)
    stored = UOp(Ops.CONTIGUOUS, operand.dtype, (UOp(Ops.PERMUTE, operand.dtype, (operand,), order),))
    return UOp(Ops.PERMUTE, operand.dtype, (stored,), tuple(order.index(a) for a in range(rank)))


def _gathered_rows(inner: UOp, reuse: int) -> bool:
    """Whether a matmul operand is a view whose address isn't a sum of strides (a permute merged by a reshape: the
    heads of an attention output put back side by side), reused across enough rows to store it row-major first: each
    step of the matmul's reduce would otherwise divide its index (a 2048x256 @ 256x256 product ran at half speed)."""
    chain = inner.movement_chain()
    if not chain or reuse < MIN_REUSE or any(n.op in (Ops.PAD, Ops.EXPAND) for n in chain) or not _packable(inner.base):
        return False
    # (measured on the CPU; a GPU-style kernel's loads and index arithmetic are another trade)
    if not panel_width(inner.device):
        return False
    shape = inner.shape
    assert shape is not None
    return math.prod(shape) >= MIN_ELEMENTS // 4 and any(n.op is Ops.PERMUTE for n in chain)


def do_pack_matmul(red: UOp, mul: UOp) -> UOp | None:
    op, axes = red.arg
    if op is not Ops.ADD or len(axes) != 1:
        return None
    packed = [_packed_operand(s, axes[0], mul.src[1 - i]) for i, s in enumerate(mul.src)]
    if all(p is None for p in packed):
        return None
    new_mul = mul.replace(src=tuple(p if p is not None else s for p, s in zip(packed, mul.src, strict=True)))
    value = red.src[0]
    return red.replace(src=(new_mul if value is mul else value.replace(src=(new_mul,)),))


# a sum over one axis of a product (a matmul; the product may be cast to the accumulator's dtype first)
pm_pack_panels = PatternMatcher(
    [
        (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.MUL, name="mul"),), name="red"), do_pack_matmul),
        (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.CAST, src=(UPat(Ops.MUL, name="mul"),)),), name="red"), do_pack_matmul),
    ]
)


def pack_panels(sink: UOp, nodes: Iterable[UOp] | None = None) -> dict[UOp, UOp]:
    """{matmul REDUCE_AXIS: the same reduce reading its operands from panels} for the matmuls in `sink` worth it.
    `nodes`: sink's nodes in toposort order, when the caller has them already."""
    mapping: dict[UOp, UOp] = {}
    for u in sink.toposort() if nodes is None else nodes:
        new = pm_pack_panels.rewrite(u) if u.op is Ops.REDUCE_AXIS else None
        if new is not None:
            mapping[u] = new
    return mapping

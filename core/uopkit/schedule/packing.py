"""Repack the right operand of a matmul into column panels, for backends that read it a panel at a time.

A CPU kernel for A @ B (B row-major, K x N) keeps a tile of C in registers and, for each k, reads a short row of B:
B[k, j:j+P]. Consecutive k are N elements apart, so every read lands on another page and the hardware prefetcher
never sees a stream. Stored as (N/P, K, P) instead, a panel is one contiguous run that the kernel walks from start
to end. The copy is one pass over B; a large product reads B many times over (measured on a 2048 matmul: 2.8x).

The rule rewrites the tensor graph before kernelize: B's view becomes a view of CONTIGUOUS(B in panel layout) with
the same shape and values, so the scheduler stores the panels in a kernel of their own and the matmul reads them.
"""

from __future__ import annotations

from uopkit.uop.ops import GroupOp, Ops, UOp
from uopkit.uop.symbolic import decompose, simplify

# below these the copy costs more than the strided reads: the panel's reuse (rows of A) and the operand's size
MIN_REUSE = 64
MIN_ELEMENTS = 64 * 1024


def panel_width(device: str) -> int:
    """The device renderer's panel width (0: it wants no packing)."""
    from uopkit.device import Device

    try:
        return int(getattr(Device[device].renderer, "pack_panel", 0))
    except Exception:  # noqa: BLE001 - a device that can't open here has nothing to say about layouts
        return 0


def _strides(view: UOp) -> dict[int, int] | None:
    """Element strides of `view`'s axes in the BUFFER under it (None: not a plain strided view of a BUFFER)."""
    from uopkit.codegen.lowerer import view_index

    chain = view.movement_chain()
    if any(n.op is Ops.PAD for n in chain) or view.base.op is not Ops.BUFFER:
        return None
    shape = view.shape
    assert shape is not None
    axes = tuple(UOp.variable(f"a{i}", 0, max(s - 1, 0)) for i, s in enumerate(shape))
    _, idx = view_index(view, axes)
    terms, _ = decompose(simplify(idx[0]))
    coefs = {t: c for c, t in terms}
    if any(t.op is not Ops.DEFINE_VAR for t in coefs):
        return None
    return {i: coefs.get(a, 0) for i, a in enumerate(axes)}


def _packed(operand: UOp, j: int, k: int, p: int) -> UOp:
    """`operand` (the pre-broadcast view) as a view of a CONTIGUOUS copy laid out in panels of p along axis j."""
    shape = operand.shape
    assert shape is not None
    split = shape[:j] + (shape[j] // p, p) + shape[j + 1 :]
    inner, kk = j + 1, k + (1 if k > j else 0)
    order = tuple(a for a in range(len(split)) if a != inner) + (inner,)
    panels = UOp(Ops.PERMUTE, operand.dtype, (UOp(Ops.RESHAPE, operand.dtype, (operand,), split),), order)
    stored = UOp(Ops.CONTIGUOUS, operand.dtype, (panels,))
    back = tuple(order.index(a) for a in range(len(split)))
    assert kk in order
    return UOp(Ops.RESHAPE, operand.dtype, (UOp(Ops.PERMUTE, operand.dtype, (stored,), back),), shape)


def _pack_reduce(r: UOp) -> UOp | None:
    op, axes = r.arg
    mul = r.src[0]
    if op is not Ops.ADD or len(axes) != 1 or mul.op is not Ops.MUL or any(s.op is not Ops.EXPAND for s in mul.src):
        return None
    (k,) = axes
    shape = mul.shape
    assert shape is not None
    for side in (0, 1):
        expand, other = mul.src[side], mul.src[1 - side]
        small = expand.src[0].shape
        assert small is not None
        # the operand is broadcast along the rows (i) and moves along one output column axis (j) and along k
        rows = [a for a in range(len(shape)) if small[a] == 1 and shape[a] > 1 and a != k]
        if len(rows) != 1 or small[k] != shape[k]:
            continue
        reuse = shape[rows[0]]
        strides = _strides(expand.src[0])
        if strides is None:
            continue
        cols = [a for a in range(len(shape)) if a not in (k, rows[0]) and small[a] > 1 and strides[a] == 1]
        if len(cols) != 1 or other.src[0].shape is None:
            continue
        j = cols[-1]
        p = panel_width(expand.device)
        n, kk = small[j], small[k]
        # worth it: a row-major operand (k far apart), whole panels, reused across enough rows, big enough
        if not p or n % p or abs(strides[k]) < p or reuse < MIN_REUSE or n * kk < MIN_ELEMENTS:
            continue
        packed = expand.replace(src=(_packed(expand.src[0], j, k, p),))
        return r.replace(src=(mul.replace(src=(packed, other) if side == 0 else (other, packed)),))
    return None


def pack_matmul_operands(sink: UOp) -> dict[UOp, UOp]:
    """For each matmul in the graph whose right operand is worth repacking: the reduce -> its repacked version."""
    mapping: dict[UOp, UOp] = {}
    for u in sink.toposort(gate=lambda n: n.op not in (Ops.KERNEL, Ops.BUFFER)):
        if u.op is Ops.REDUCE_AXIS and u.src[0].op in GroupOp.ALU:
            new = _pack_reduce(u)
            if new is not None:
                mapping[u] = new
    return mapping

"""Gradients of bfloat16 values. No renderer computes in bfloat16: a bfloat16 tensor is BITCAST(bfloat16, <uint16
graph>), and every reader reads those bits (`support._storage_uop` rebuilds the bfloat16 graph over uint16), so a
gradient walk meets the uint16 nodes, never the bfloat16 ones, and a gradient flows through them in float32.

A gradient given to a bfloat16 value (`uopkit.gradient.set_gradient`), or taking bfloat16 inputs, is restated here in
those terms: given to the value's bits as well as to the value (the root of a backward pass), for its inputs' bits.
As in PyTorch, whose gradient of a bfloat16 tensor is a bfloat16 tensor, the rule sees the incoming gradient rounded to
bfloat16, and what it gives a bfloat16 input is rounded to bfloat16 (each held in float32)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from uopkit.dtype import DType, dtypes
from uopkit.gradient import restate_bfloat16_rules, set_gradient
from uopkit.tensor.support import _storage_uop
from uopkit.uop.ops import UOp
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    from uopkit.gradient import GradientRule
    from uopkit.tensor.tensor import Tensor

_BF16 = dtypes.bfloat16

# the gradients `rounded_gradient` made: a rule given to a bfloat16 value rounds the gradient it takes, which mostly
# comes from a reader that rounded it already
_rounded = WeakKeyMap()
# a bfloat16 value given a gradient -> the graph of its bits, which has it too: held while the value lives (the bits of
# a select or a view are nodes of their own, which a reader builds again, and a rule lives only as long as its node)
_bits_kept = WeakKeyMap()


def rounded_gradient(g: UOp) -> UOp:
    """`g` rounded to bfloat16, held in float32 (the dtype a gradient flows in through a bfloat16 value's bits)."""
    if g in _rounded:
        return g
    out = Tensor(g).cast(_BF16).cast(dtypes.float32).uop
    _rounded[out] = True
    return out


def restated_over_bits(
    node: UOp, inputs: tuple[UOp, ...], rule: GradientRule
) -> tuple[tuple[UOp, ...], tuple[UOp, ...], GradientRule]:
    """The nodes to give `rule` to, its inputs and the rule itself, in the terms of bfloat16 values' bits: `node`, and
    its bits when it is a bfloat16 value; the bits of the bfloat16 inputs."""
    nodes = (node,)
    if node.dtype is _BF16:
        bits = _bits_kept[node] = _storage_uop(node)
        nodes = (node, bits)
    halves = tuple([u.dtype is _BF16 for u in inputs])
    restated = functools.partial(_over_bits, rule, node.dtype is _BF16, halves)
    return nodes, tuple([_storage_uop(u) for u in inputs]), restated


def _over_bits(
    rule: GradientRule, rounds: bool, halves: tuple[bool, ...], g: UOp, wanted: tuple[bool, ...]
) -> tuple[UOp | None, ...]:
    grads = rule(rounded_gradient(g) if rounds else g, wanted)
    if len(grads) != len(halves):
        # (the walk names the rule's mistake)
        return grads
    return tuple([rounded_gradient(d) if half and d is not None else d for d, half in zip(grads, halves, strict=True)])


def set_cast_gradient(node: UOp, source: UOp, to: DType, rounded: bool = False) -> None:
    """A cast to or from bfloat16 passes the gradient on, as any cast between float types: `node` is the cast's value,
    `source` what it was cast from (a bfloat16 value's bits, whose gradient is float32, or a float value of dtype `to`).
    `rounded`: the value is read from bfloat16 bits, whose gradient is the value's rounded to bfloat16."""
    set_gradient(node, (source,), functools.partial(_cast_gradient, to, rounded))


def _cast_gradient(to: DType, rounded: bool, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    return (Tensor(rounded_gradient(g) if rounded else g).cast(to).uop,)


restate_bfloat16_rules(restated_over_bits)

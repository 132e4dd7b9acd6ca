"""einsum's equation, read into one string of letters per operand and one for the output, "..." spelled out: the
string form ("ij,jk->ik") and torch's sublist form (a, [0, 1], b, [1, 2], [0, 2], whose integers 0-51 stand for
the letters A-Z, a-z)."""

from __future__ import annotations

import operator
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from uopkit.tensor.support import ArgumentError, ShapeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# sublist integer i is letter SUBLIST_LETTERS[i], as torch numbers them (so the implicit output's sorted letters
# keep the integers' order)
SUBLIST_LETTERS = string.ascii_uppercase + string.ascii_lowercase
# the dims "..." stands for get letters no equation can name (a user's equation may hold any of A-Z and a-z)
_ELLIPSIS_FIRST = 0x100


class ComplexOperands(TypeError):
    """Complex tensors among einsum's operands: Tensor.einsum catches it and answers with the complex einsum."""

    def __init__(self, formula: str, operands: tuple[Any, ...]) -> None:
        super().__init__("einsum: complex operands")
        self.formula, self.operands = formula, operands


def einsum_subscripts(formula: Any, operands: Sequence[Any]) -> tuple[tuple[Tensor, ...], list[str], str, str]:
    """(operands, their letters, the output's letters, the equation as text for messages) of einsum's arguments:
    `formula` a string with the operands (or one list of them) after it, or the first operand of the sublist form."""
    if isinstance(formula, Tensor):
        formula, operands = _from_sublists((formula, *operands))
    elif not isinstance(formula, str):
        raise TypeError(
            f"einsum: the first argument must be an equation string or, in the sublist form, a Tensor, got "
            f"{type(formula).__name__}"
        )
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for t in operands:
        if not isinstance(t, Tensor):
            if any(type(u).__name__ == "ComplexTensor" for u in operands):
                raise ComplexOperands(formula, tuple(operands))
            raise TypeError(f"einsum: operands must be Tensors, got {type(t).__name__}")
    formula = formula.replace(" ", "")
    lhs, arrow, rhs = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ArgumentError(f"einsum: {formula!r} names {len(inputs)} operands, got {len(operands)}")
    if any(c not in SUBLIST_LETTERS for c in (lhs + rhs).replace("...", "").replace(",", "")):
        raise ArgumentError(f"einsum: {formula!r} may hold only the letters a-z and A-Z, ',', '...' and '->'")
    ell_dims = max(
        (t.ndim - len(s.replace("...", "")) for s, t in zip(inputs, operands, strict=True) if "..." in s), default=0
    )
    ell = "".join(chr(_ELLIPSIS_FIRST + i) for i in range(ell_dims))
    specs = []
    for s, t in zip(inputs, operands, strict=True):
        if "..." in s:
            n = t.ndim - len(s.replace("...", ""))
            s = s.replace("...", ell[ell_dims - n :])
        if len(s) != t.ndim:
            raise ShapeError(f"einsum: operand {s!r} has {len(s)} letters but the tensor has shape {t.shape}")
        specs.append(s)
    if arrow:
        out = rhs.replace("...", ell)
        if len(set(out)) != len(out):
            raise ArgumentError(f"einsum: an output letter appears more than once in {formula!r}")
    else:
        # the letters used once, sorted
        used = "".join(specs)
        out = ell + "".join(sorted(c for c in set(used) if used.count(c) == 1 and c not in ell))
    return tuple(operands), specs, out, formula


def _from_sublists(args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    # (operand, sublist) pairs, then the output's sublist if given
    pairs, out = (args, None) if len(args) % 2 == 0 else (args[:-1], args[-1])
    lhs = ",".join(_sublist_letters(pairs[i + 1], f"the sublist of operand {i // 2}") for i in range(0, len(pairs), 2))
    formula = lhs if out is None else lhs + "->" + _sublist_letters(out, "the output sublist")
    return formula, pairs[::2]


def _sublist_letters(sublist: Any, what: str) -> str:
    if not isinstance(sublist, (list, tuple)):
        raise TypeError(
            f"einsum: {what} must be a list of ints in [0, 52) and at most one Ellipsis, got {type(sublist).__name__}"
        )
    letters = []
    for v in sublist:
        if v is Ellipsis:
            letters.append("...")
            continue
        try:
            if isinstance(v, bool):
                raise TypeError
            i = operator.index(v)
        except TypeError:
            raise TypeError(f"einsum: {what} holds {v!r}; subscripts are ints in [0, 52) or Ellipsis") from None
        if not 0 <= i < len(SUBLIST_LETTERS):
            raise ArgumentError(f"einsum: {what} holds {v!r}; subscripts are ints in [0, 52) or Ellipsis")
        letters.append(SUBLIST_LETTERS[i])
    return "".join(letters)

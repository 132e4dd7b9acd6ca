"""torch.nn.attention.bias: causal masks for scaled_dot_product_attention that say which corner they are aligned to.

`causal_upper_left(L, S)`: query i attends to keys 0..i (what `is_causal=True` does). `causal_lower_right(L, S)`:
query i attends to keys 0..i + S - L, so the last query sees every key: the mask of the new tokens' queries against a
KV cache that holds the earlier ones. Pass either as `attn_mask` to `F.scaled_dot_product_attention`.

>>> from uopkit.nn.attention.bias import causal_lower_right
>>> causal_lower_right(2, 3)._materialize().tolist()
[[True, True, False], [True, True, True]]
"""

from __future__ import annotations

import warnings
from enum import IntEnum

from uopkit.dtype import dtypes
from uopkit.tensor import Tensor

__all__ = ["CausalVariant", "CausalBias", "causal_upper_left", "causal_lower_right"]


class CausalVariant(IntEnum):
    """The corner a causal mask's diagonal starts from, with torch's values."""

    UPPER_LEFT = 1
    LOWER_RIGHT = 2


class _BiasArgumentError(ValueError, AssertionError):
    # a ValueError by kind, and the AssertionError torch raises for it
    pass


class CausalBias:
    """A causal mask of `seq_len_q` queries by `seq_len_kv` keys, aligned as `variant` says; built as a bool Tensor
    (True: attend) only when attention reads it. The lower-right one with more queries than keys leaves the first
    queries no key: scaled_dot_product_attention gives those rows zeros (docs/semantics.md; torch warns of NaNs)."""

    def __init__(self, variant: CausalVariant, seq_len_q: int, seq_len_kv: int) -> None:
        if not isinstance(variant, CausalVariant):
            raise _BiasArgumentError(f"CausalBias: variant must be a CausalVariant, got {variant!r}")
        self.variant, self.seq_len_q, self.seq_len_kv = variant, seq_len_q, seq_len_kv
        if seq_len_q > seq_len_kv and variant == CausalVariant.LOWER_RIGHT:
            warnings.warn(
                f"causal_lower_right: {seq_len_q} queries and {seq_len_kv} keys leave the first "
                f"{seq_len_q - seq_len_kv} queries no key to attend to (their rows of attention are zeros)",
                stacklevel=3,
            )

    @property
    def shape(self) -> tuple[int, int]:
        return (self.seq_len_q, self.seq_len_kv)

    def _materialize(self, device: str | None = None) -> Tensor:
        """The mask as a bool Tensor of shape (seq_len_q, seq_len_kv), True where a query attends to a key."""
        keep = Tensor.ones(self.seq_len_q, self.seq_len_kv, dtype=dtypes.bool, device=device)
        diagonal = 0 if self.variant == CausalVariant.UPPER_LEFT else self.seq_len_kv - self.seq_len_q
        return keep.tril(diagonal)

    def __repr__(self) -> str:
        return repr(self._materialize())


def _causal(variant: CausalVariant, name: str, size: tuple) -> CausalBias:
    if len(size) != 2 or not all(isinstance(n, int) for n in size):
        raise _BiasArgumentError(f"{name}: takes the two sizes (seq_len_q, seq_len_kv), got {size!r}")
    return CausalBias(variant, size[0], size[1])


def causal_upper_left(*size: int) -> CausalBias:
    """torch.nn.attention.bias.causal_upper_left(seq_len_q, seq_len_kv): query i attends to keys 0..i."""
    return _causal(CausalVariant.UPPER_LEFT, "causal_upper_left", size)


def causal_lower_right(*size: int) -> CausalBias:
    """torch.nn.attention.bias.causal_lower_right(seq_len_q, seq_len_kv): query i attends to keys
    0..i + seq_len_kv - seq_len_q, so the last query sees them all."""
    return _causal(CausalVariant.LOWER_RIGHT, "causal_lower_right", size)

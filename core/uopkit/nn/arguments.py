"""Argument checks the torch.nn layers share (the spatial layers' input ranks, sizes, probabilities, inplace)."""

from __future__ import annotations

from collections.abc import Callable

from uopkit.tensor import ShapeError, Tensor

# ---------------------------------------------------------------------------------------------------------------------


# the spatial axes' names, by their number
_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _check_rank(x: Tensor, spatial_dims: int, layer: str) -> None:
    # torch's spatial layers take (N, C, *spatial) or an unbatched (C, *spatial)
    if x.ndim not in (spatial_dims + 1, spatial_dims + 2):
        spatial = _SPATIAL[spatial_dims]
        raise ShapeError(f"{layer}: expected input (N, C, {spatial}) or (C, {spatial}), got shape {x.shape}")


def _positive(values: tuple[int, ...], name: str, layer: str, allow_zero: bool = False) -> None:
    if any(v < 0 or (v == 0 and not allow_zero) for v in values):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{layer}: every {name} must be {bound}, got {values}")


def _probability(p: float, layer: str) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{layer}: p must be a probability in [0, 1], got {p}")


def _maybe_in_place(x: Tensor, inplace: bool, compute: Callable[[], Tensor], op: str) -> Tensor:
    # inplace=True writes the result into x (as torch's inplace activations), else a new tensor
    return x._update_in_place(compute, op) if inplace else compute()

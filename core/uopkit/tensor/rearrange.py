"""einops-style `rearrange` patterns ("b c (h w) -> b h w c"), as a reshape, a permute and a reshape.

A pattern names the input's axes on the left of "->" and the output's on the right. A parenthesized group on the left
splits one input axis into several (sizes from the keyword arguments, at most one left to infer), one on the right
merges axes into one. "..." stands for the axes not named (once a side; not inside a group on the left); "1" and "()"
are an axis of size 1. Every name appears exactly once on each side.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from uopkit.helpers import prod
from uopkit.tensor.support import ArgumentError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

ELLIPSIS = "..."
_TOKEN = re.compile(r"\.\.\.|…|\(|\)|[^\s().…]+|\S")

# one entry of a side: the names of a group (an empty group is an axis of size 1) or one name, "1" or "..."
Entry = tuple[tuple[str, ...], bool]


def _parse_side(side: str, pattern: str) -> list[Entry]:
    """The entries of one side, each (names, grouped); a "1" inside a group is dropped (a factor of 1)."""
    entries: list[Entry] = []
    group: list[str] | None = None
    for token in _TOKEN.findall(side):
        token = ELLIPSIS if token == "…" else token
        if token == "(":
            if group is not None:
                raise ArgumentError(f"rearrange {pattern!r}: groups can't nest")
            group = []
        elif token == ")":
            if group is None:
                raise ArgumentError(f"rearrange {pattern!r}: ')' without '('")
            entries.append((tuple(group), True))
            group = None
        elif token != ELLIPSIS and token != "1" and not token.isidentifier():
            raise ArgumentError(
                f"rearrange {pattern!r}: {token!r} is not an axis name (names are identifiers; numbers other "
                "than 1 are not axes)"
            )
        elif group is not None:
            if token != "1":
                group.append(token)
        else:
            entries.append(((token,), False))
    if group is not None:
        raise ArgumentError(f"rearrange {pattern!r}: '(' without ')'")
    return entries


def _names(entries: list[Entry], pattern: str, where: str) -> list[str]:
    names = [n for group, _ in entries for n in group if n != "1"]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ArgumentError(f"rearrange {pattern!r}: {', '.join(repeated)} given twice on the {where}")
    return names


def rearrange(t: Tensor, pattern: str, sizes: dict[str, int]) -> Tensor:
    if not isinstance(pattern, str) or pattern.count("->") != 1:
        raise ArgumentError(f"rearrange: the pattern needs exactly one '->', got {pattern!r}")
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text, pattern), _parse_side(right_text, pattern)
    left_names, right_names = _names(left, pattern, "left"), _names(right, pattern, "right")
    if set(left_names) != set(right_names):
        only_left = sorted(set(left_names) - set(right_names) - {ELLIPSIS})
        only_right = sorted(set(right_names) - set(left_names) - {ELLIPSIS})
        parts = [f"{', '.join(only_left)} only on the left"] if only_left else []
        parts += [f"{', '.join(only_right)} only on the right"] if only_right else []
        parts += [] if parts else ["'...' on one side only"]
        raise ArgumentError(f"rearrange {pattern!r}: {'; '.join(parts)} (each axis must be on both sides)")
    if any(grouped and ELLIPSIS in group for group, grouped in left):
        raise ArgumentError(f"rearrange {pattern!r}: '...' can't be inside a group on the left")
    unknown = sorted(set(sizes) - set(left_names))
    if unknown:
        raise ArgumentError(f"rearrange {pattern!r}: sizes given for {', '.join(unknown)}, not axes of the left side")
    # the input's axes, one per entry on the left ("..." takes what the others leave)
    rest = t.ndim - (len(left) - (ELLIPSIS in left_names))
    if rest < 0 or (rest != 0 and ELLIPSIS not in left_names):
        raise ArgumentError(
            f"rearrange {pattern!r}: the left side names {len(left)} axes, the tensor has {t.ndim} (shape {t.shape})"
        )
    axis_size: dict[str, int] = {}
    elementary: list[str] = []  # the axes after splitting the groups, in input order (size-1 anonymous ones dropped)
    dim = 0
    for group, grouped in left:
        if group == (ELLIPSIS,):
            for i in range(rest):
                axis_size[f"...{i}"] = t.shape[dim + i]
                elementary.append(f"...{i}")
            dim += rest
            continue
        size = t.shape[dim]
        if not grouped and group == ("1",) or grouped and not group:
            if size != 1:
                raise ArgumentError(f"rearrange {pattern!r}: axis {dim} has size {size}, the pattern says 1")
        elif not grouped:
            if group[0] in sizes and sizes[group[0]] != size:
                raise ArgumentError(
                    f"rearrange {pattern!r}: {group[0]}={sizes[group[0]]}, but axis {dim} has size {size}"
                )
            axis_size[group[0]] = size
            elementary.append(group[0])
        else:
            missing = [n for n in group if n not in sizes]
            if len(missing) > 1:
                raise ArgumentError(
                    f"rearrange {pattern!r}: can't split axis {dim} (size {size}) into ({' '.join(group)}) with "
                    f"{', '.join(missing)} unknown: give all but one of them as keyword arguments"
                )
            known = prod(sizes[n] for n in group if n in sizes)
            if missing and known == 0:
                raise ArgumentError(
                    f"rearrange {pattern!r}: {missing[0]} is ambiguous in ({' '.join(group)}) with a size of 0"
                )
            if any(sizes[n] < 0 for n in group if n in sizes) or (size % known if known else size):
                raise ArgumentError(
                    f"rearrange {pattern!r}: axis {dim} of size {size} can't split into ({' '.join(group)}) with "
                    f"{', '.join(f'{n}={sizes[n]}' for n in group if n in sizes)}"
                )
            if not missing and known != size:
                raise ArgumentError(
                    f"rearrange {pattern!r}: ({' '.join(group)}) has {known} elements, axis {dim} has {size}"
                )
            for n in group:
                axis_size[n] = sizes[n] if n in sizes else (size // known if known else 0)
                elementary.append(n)
        dim += 1
    # the output: the elementary axes in the right side's order, then its groups merged
    expand = {ELLIPSIS: tuple(f"...{i}" for i in range(rest))}
    order: list[str] = []
    out_shape: list[int] = []
    for group, grouped in right:
        names = [e for n in group if n != "1" for e in expand.get(n, (n,))]
        order += names
        if grouped or group != (ELLIPSIS,):
            out_shape.append(prod(axis_size[n] for n in names))
        else:
            out_shape += [axis_size[n] for n in names]
    split = t.reshape(tuple(axis_size[n] for n in elementary))
    return split.permute(tuple(elementary.index(n) for n in order)).reshape(tuple(out_shape))

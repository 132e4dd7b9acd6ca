"""Whether an index picks a box of a tensor: ints, slices of step 1 and at most one Ellipsis (`x[:, 1:, 3]`), so
that a write there is its value padded into place (setitem's lazy graph and its gradient, elementwise) rather than a
one-hot of the positions written."""

from __future__ import annotations

from typing import Any

import numpy as np


def index_box(index: Any, shape: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]] | None:
    """The [begin, end) of each axis that `index` picks when it is ints, slices of step 1 and at most one Ellipsis (a
    box of the tensor), and the shape of the view it gives (the axes of ints dropped); None for any other index."""
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(i is Ellipsis for i in items) > 1 or len(items) - (Ellipsis in items) > len(shape):
        return None
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (len(shape) - len(items) + 1)
    bounds, view_shape = [], []
    for i, n in zip(items + [slice(None)] * (len(shape) - len(items)), shape, strict=True):
        if isinstance(i, slice) and i.step in (None, 1):
            b, e, _ = i.indices(n)
            bounds.append((b, max(b, e)))
            view_shape.append(max(b, e) - b)
        elif isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) and -n <= i < n:
            bounds.append((int(i) % n, int(i) % n + 1))
        else:
            return None
    return tuple(bounds), tuple(view_shape)

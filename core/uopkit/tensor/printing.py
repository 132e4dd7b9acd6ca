"""How a Tensor prints (`str`, `repr`, `print`): its values laid out as PyTorch lays out a tensor's, with PyTorch's
number formatting, and the options `set_printoptions` / `get_printoptions` that change it.

Printing computes the tensor: the values shown are read back to the host (for a tensor past the summarizing threshold
only its edges are). A value that fails to compute still prints, naming the error instead of the values."""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.device import Device
from uopkit.dtype import dtypes

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

__all__ = ["set_printoptions", "get_printoptions", "tensor_repr"]


@dataclasses.dataclass
class PrintOptions:
    # digits after the point (and in scientific notation's mantissa)
    precision: int = 4
    # more elements than this print summarized: `edgeitems` at each end of every axis, "..." between
    threshold: float = 1000
    edgeitems: int = 3
    # the width a row of numbers wraps at
    linewidth: int = 80
    # True / False force scientific notation on or off for floats; None picks it from the values' magnitudes
    sci_mode: bool | None = None


_PROFILES = {
    "default": PrintOptions(),
    "short": PrintOptions(precision=2, edgeitems=2),
    "full": PrintOptions(threshold=math.inf),
}

options = PrintOptions()

# a tensor bigger than this is cut to its edges on its device before being read back (smaller ones are read whole: one
# read costs less than a kernel that gathers the edges)
READ_WHOLE_BYTES = 1 << 24


def _count(value: Any, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"set_printoptions: {name} must be an int >= {least}, got {value!r}")
    return int(value)


def set_printoptions(
    precision: int | None = None,
    threshold: float | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    """Change how tensors print, as torch.set_printoptions: `precision` (digits after the point, default 4),
    `threshold` (more elements than this print summarized, default 1000), `edgeitems` (elements shown at each end of
    a summarized axis, default 3), `linewidth` (characters per line, default 80), `profile` ("default", "short" or
    "full": all four at once, then the others given override them) and `sci_mode` (True/False force scientific notation
    for floats; None, as every call that doesn't give it, picks it from the values). Options left out keep their value,
    except `sci_mode`, as torch's.

    >>> import uopkit
    >>> uopkit.set_printoptions(precision=2)
    >>> Tensor([1.12345])
    Tensor([1.12])
    >>> uopkit.set_printoptions(profile="default")
    """
    # (all checked before any is set: a bad one changes nothing)
    if profile is not None and profile not in _PROFILES:
        raise ValueError(f"set_printoptions: profile must be one of {', '.join(_PROFILES)}, got {profile!r}")
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) or threshold < 0
    ):
        raise ValueError(f"set_printoptions: threshold must be a number >= 0, got {threshold!r}")
    if sci_mode is not None and not isinstance(sci_mode, (bool, np.bool_)):
        raise ValueError(f"set_printoptions: sci_mode must be True, False or None, got {sci_mode!r}")
    counts = {"precision": (precision, 0), "edgeitems": (edgeitems, 0), "linewidth": (linewidth, 1)}
    given = {name: _count(value, name, least) for name, (value, least) in counts.items() if value is not None}
    if profile is not None:
        base = _PROFILES[profile]
        options.precision, options.threshold = base.precision, base.threshold
        options.edgeitems, options.linewidth = base.edgeitems, base.linewidth
    for name, value in given.items():
        setattr(options, name, value)
    if threshold is not None:
        options.threshold = threshold
    options.sci_mode = None if sci_mode is None else bool(sci_mode)


def get_printoptions() -> dict[str, Any]:
    """The current print options as a dict, which `set_printoptions(**d)` takes back (to restore them).

    >>> import uopkit
    >>> uopkit.get_printoptions()["precision"]
    4
    """
    return dataclasses.asdict(options)


# ---------------------------------------------------------------------------------------------------------------------
# numbers


class _NumberFormat:
    """How every element of one tensor prints: one width for all (right-aligned), and for floats one notation chosen
    from the finite nonzero values: scientific when their magnitudes span more than 1000x or leave [1e-4, 1e8], else
    whole numbers with a trailing point when every one is whole (`1.`), else `precision` digits after the point."""

    def __init__(self, values: np.ndarray, is_float: bool, opts: PrintOptions) -> None:
        self.is_float = is_float
        self.precision = opts.precision
        self.whole = True
        self.sci = False
        self.width = 1
        if not is_float:
            self.width = max((len(str(v)) for v in values.ravel().tolist()), default=1)
            return
        flat = values.ravel().astype(np.float64)
        shown = flat[np.isfinite(flat) & (flat != 0)]
        if shown.size == 0:
            # only zeros, nans and infs: they print as whole numbers (0.), nan and inf
            return
        magnitudes = np.abs(shown)
        smallest, largest = float(magnitudes.min()), float(magnitudes.max())
        self.whole = bool(np.all(shown == np.ceil(shown)))
        if opts.sci_mode is None:
            self.sci = largest / smallest > 1000.0 or largest > 1.0e8 or smallest < 1.0e-4
        else:
            self.sci = opts.sci_mode
        # (the width comes from the finite nonzero values: a nan or inf wider than them pushes its row out, as torch)
        self.width = max(len(self._text(v)) for v in shown.tolist())

    def _text(self, value: Any) -> str:
        if not self.is_float:
            return str(value)
        if self.sci:
            return f"{value:.{self.precision}e}"
        if self.whole:
            # the point says it is a float; nan and inf have none
            return f"{value:.0f}" if math.isnan(value) or math.isinf(value) else f"{value:.0f}."
        return f"{value:.{self.precision}f}"

    def __call__(self, value: Any) -> str:
        return self._text(value).rjust(self.width)


# ---------------------------------------------------------------------------------------------------------------------
# layout


def _edges(values: np.ndarray, cut: tuple[bool, ...], edge: int) -> np.ndarray:
    # the first and last `edge` entries of every axis that is cut
    for axis, is_cut in enumerate(cut):
        if is_cut:
            n = values.shape[axis]
            keep = np.r_[0:edge, n - edge : n]
            values = np.take(values, keep, axis=axis)
    return values


def _device_edges(t: Tensor, cut: tuple[bool, ...], edge: int) -> Tensor:
    # the same cut computed on the device: only the edges of a large tensor are computed and read back
    for axis, is_cut in enumerate(cut):
        if is_cut:
            n = t.shape[axis]
            lead = (slice(None),) * axis
            t = Tensor.cat(t[(*lead, slice(0, edge))], t[(*lead, slice(n - edge, n))], dim=axis)
    return t


def _block(values: np.ndarray, cut: tuple[bool, ...], fmt: _NumberFormat, indent: int, opts: PrintOptions) -> str:
    """`values` (an axis or more, already cut to their edges) in brackets, nested rows indented under their bracket:
    a row of numbers wraps at the line width, rows of a 2-d block are one per line, blocks of higher ones are
    separated by blank lines."""
    edge = opts.edgeitems
    if values.ndim == 1:
        items = [fmt(v) for v in values.tolist()]
        if cut[0]:
            items = [*items[:edge], " ...", *items[edge:]]
        per_line = max(1, (opts.linewidth - indent) // (fmt.width + 2))
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    parts = [_block(row, cut[1:], fmt, indent + 1, opts) for row in values]
    if cut[0]:
        parts = [*parts[:edge], "...", *parts[edge:]]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _body(t: Tensor, indent: int, opts: PrintOptions) -> str:
    """The values part of the repr (computes the tensor)."""
    if t.numel() == 0:
        return "[]"
    summarize = t.numel() > opts.threshold
    edge = opts.edgeitems
    if summarize and edge == 0:
        # nothing to show but that there is something
        return "[...]"
    cut = tuple(summarize and n > 2 * edge for n in t.shape)
    source = t.detach()
    if any(cut) and t.numel() * t.dtype.itemsize > READ_WHOLE_BYTES:
        values_np = _device_edges(source, cut, edge).numpy()
    else:
        values_np = _edges(source.numpy(), cut, edge)
    fmt = _NumberFormat(values_np, dtypes.is_float(t.dtype), opts)
    if t.ndim == 0:
        return fmt(values_np.item())
    return _block(values_np, cut, fmt, indent, opts)


def _with_suffixes(text: str, suffixes: list[str], indent: int, linewidth: int) -> str:
    # each suffix goes on the line so far unless it would pass the line width; then on a line of its own, indented to
    # the bracket (the length of the last line is reckoned as torch does, two more than it is on a first line)
    out = [text]
    line_length = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if line_length + len(suffix) + 2 > linewidth:
            out.append(",\n" + " " * indent + suffix)
            line_length = indent + len(suffix)
        else:
            out.append(", " + suffix)
            line_length += len(suffix) + 2
    return "".join(out) + ")"


def _class_name(t: Tensor) -> str:
    # uopkit's own subclasses (nn.Parameter, what `.data` gives) print as Tensor, others by their class's name
    cls = type(t)
    return "Tensor" if cls.__module__.startswith("uopkit.") else cls.__name__


# a repr called while one is being made on the same thread (a tensor inside an error message raised while computing the
# one printed) shows no values: computing again could fail the same way, or never end
_printing = threading.local()


def tensor_repr(t: Tensor) -> str:
    """`Tensor([1., 2.])`: the values as PyTorch lays them out, then what differs from the defaults (the device when
    not the default one, the dtype when not the default float, the default int or bool, requires_grad=True)."""
    prefix = _class_name(t) + "("
    indent = len(prefix)
    opts = dataclasses.replace(options)
    try:
        if getattr(_printing, "active", False):
            raise RecursionError("a tensor printed while another one is being printed")
        _printing.active = True
        try:
            body = _body(t, indent, opts)
        finally:
            _printing.active = False
    except Exception as e:
        # (the values can't be had: still say what the tensor is, and why)
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if len(message) > 100:
            message = message[:97] + "..."
        reason = f"{type(e).__name__}: {message}" if message else type(e).__name__
        suffixes = [f"size={t.shape}", f"dtype={t.dtype!r}", f"device='{t.device}'"]
        return _with_suffixes(f"{prefix}<values not computed: {reason}>", suffixes, indent, opts.linewidth)
    suffixes = []
    if t.device != Device.DEFAULT:
        suffixes.append(f"device='{t.device}'")
    if t.numel() == 0:
        # (as torch's: an empty tensor shows its size unless 1-d, and any dtype but the default float)
        if t.ndim != 1:
            suffixes.append(f"size={t.shape}")
        if t.dtype != dtypes.default_float:
            suffixes.append(f"dtype={t.dtype!r}")
    else:
        if opts.edgeitems == 0:
            suffixes.append(f"size={t.shape}")
        if t.dtype not in (dtypes.default_float, dtypes.default_int, dtypes.bool):
            suffixes.append(f"dtype={t.dtype!r}")
    if t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + body, suffixes, indent, opts.linewidth)

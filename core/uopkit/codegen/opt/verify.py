"""Checking an optimized kernel against the unoptimized one: the inputs BEAM searches on, and how close two outputs
must be.

Opts only reorder work (a reduce split into lanes, groups or tensor-core tiles is summed in another order), so a
correct candidate matches the unoptimized kernel exactly on integers and bools and within a rounding tolerance on
floats, with NaN and inf in the same places.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from uopkit.codegen.plan import Opt, OptOps
from uopkit.dtype import DType, dtypes, to_numpy_dtype

if TYPE_CHECKING:
    from uopkit.renderer import Renderer

# how far a float output may move when its sums are reassociated, relative to the size of the values (see
# `output_error`); TF32 tensor cores round float32 operands to float16's mantissa, so they get float16's tolerance
TOLERANCE = {dtypes.float16: 1e-2, dtypes.bfloat16: 5e-2, dtypes.float32: 2e-3, dtypes.float64: 1e-9}


def search_inputs(dtype: DType, size: int, rng: np.random.Generator) -> bytes:
    """Random, non-trivial contents for a buffer (a wrong kernel must not agree by chance, as it would on zeros):
    floats in [-2, 2), integers in +-[1, 8] (no zero divisors), bools half true."""
    if dtype.scalar == dtypes.bool:
        return rng.integers(0, 2, size).astype(np.bool_).tobytes()
    if dtypes.is_int(dtype.scalar):
        values = rng.integers(1, 9, size)
        if not dtypes.is_unsigned(dtype.scalar):
            values = values * rng.choice(np.array([-1, 1]), size)
        return values.astype(to_numpy_dtype(dtype.scalar)).tobytes()
    values = rng.uniform(-2.0, 2.0, size).astype(np.float32)
    if dtype.scalar == dtypes.bfloat16:
        # the top half of each float32 is a bfloat16
        return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return values.astype(to_numpy_dtype(dtype.scalar)).tobytes()


def as_values(raw: bytes | memoryview, dtype: DType) -> np.ndarray:
    """A buffer's bytes as numbers (bfloat16 widened to float32)."""
    if dtype.scalar == dtypes.bfloat16:
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, to_numpy_dtype(dtype.scalar))


def output_error(got: np.ndarray, ref: np.ndarray) -> float:
    """How far `got` is from `ref`: 0.0 when equal; for floats the largest |got - ref| / (|ref| + rms(ref)) (relative
    where a value is large, against the typical size where it is near zero, as a cancelling sum is), inf where NaN
    or inf sit in different places. Compare with `TOLERANCE` (ints and bools must give 0.0)."""
    if got.shape != ref.shape:
        return float("inf")
    if got.dtype.kind not in "fc":
        return 0.0 if np.array_equal(got, ref) else float("inf")
    got, ref = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(ref)
    # NaN where NaN, the same infinity where infinity
    if not np.array_equal(np.isnan(got), np.isnan(ref)) or not np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]):
        return float("inf")
    if not np.isfinite(got[finite]).all():
        return float("inf")
    if not finite.any():
        return 0.0
    scale = float(np.sqrt(np.mean(ref[finite] ** 2))) or 1.0
    return float(np.max(np.abs(got[finite] - ref[finite]) / (np.abs(ref[finite]) + scale)))


def tolerance(dtype: DType, opts: list[Opt] | tuple[Opt, ...] = (), renderer: Renderer | None = None) -> float:
    """The largest `output_error` a correct kernel with `opts` gives for outputs of `dtype` (0.0: must be exact)."""
    if not dtypes.is_float(dtype.scalar):
        return 0.0
    tol = TOLERANCE.get(dtype.scalar, TOLERANCE[dtypes.float16])
    # a float32 tensor core (TF32) rounds its operands to float16's precision
    cores = renderer.caps.tensor_cores if renderer is not None else ()
    tf32 = any(o.op is OptOps.TC and cores[o.amount].dtype_in == dtypes.float32 for o in opts)
    return max(tol, TOLERANCE[dtypes.float16]) if tf32 else tol

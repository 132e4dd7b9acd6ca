"""Conformance: the ALU ops and casts a backend claims on whole vectors (``caps.vector_ops``, ``caps.vector_casts``), as
the core builds them (`uopkit.codegen.expander`), at every width up to ``caps.max_vector_width``.

- an op in `vector_ops` runs on vectors of every claimed dtype (but bool), its operands whole vectors;
- a comparison in `vector_ops` runs on vectors of lanes of the `vector_mask_bytes` sizes and gives a mask (a bool
  vector: -1 true, 0 false, as wide as the lanes), read back here lane by lane through GEP (a lane of a mask is a bool);
- WHERE in `vector_ops` selects such lanes by a mask of their width, or by one bool for every lane;
- OR and AND in `vector_ops` combine two masks;
- BITCAST in `vector_ops` reinterprets a float vector as the int vector of its size and back;
- a cast in `vector_casts` converts a whole vector.

Each (width, dtype) is one kernel holding every check, compared with the scalar reference of `test_alu`.
"""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.device import Device
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.emulator import float32_to_bf16_bits, round_bf16
from uopkit.renderer import RendererCaps
from uopkit.testing.programs import VECTOR_WIDTHS, chain, end, global_buf, load, loop, program, run_program, store
from uopkit.testing.test_alu import N, host_dtype, host_values, inputs, ops_for, reference, tolerance
from uopkit.uop.ops import GroupOp, Ops, UOp, cast_scalar

# loop iterations of each kernel: every input holds one vector per iteration
ITERATIONS = 2
COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
# transcendentals the renderer doesn't claim are decomposed before they could become vector ops
DECOMPOSABLE = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)
# the int type a float's bits are read as (a BITCAST)
_SAME_SIZE_INT = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}


class VectorKernel:
    """One kernel of vector checks: every output is stored whole (a vector) or lane by lane (a mask's GEPs)."""

    def __init__(self, width: int) -> None:
        self.width, self.n = width, width * ITERATIONS
        self.i = loop(0, ITERATIONS)
        self.arrays: list[np.ndarray] = []
        self.stores: list[UOp] = []
        # (what is checked, the output's buffer position, its dtype, the expected host values, the op for tolerances)
        self.checks: list[tuple[str, int, DType, np.ndarray, Ops | None]] = []

    def buffer(self, dt: DType, array: np.ndarray) -> UOp:
        self.arrays.append(array)
        return global_buf(len(self.arrays) - 1, dt, len(array))

    def vload(self, dt: DType, array: np.ndarray) -> UOp:
        return load(self.buffer(dt, array[: self.n]), self.i * self.width, dtype=dt.vec(self.width))

    def scalar_load(self, dt: DType, array: np.ndarray) -> UOp:
        """One value per loop iteration (for every lane of that iteration's vectors)."""
        return load(self.buffer(dt, array[:ITERATIONS]), self.i)

    def output(self, what: str, value: UOp, expected: np.ndarray, op: Ops | None = None) -> None:
        dt = value.dtype.scalar
        out = self.buffer(dt, np.zeros(self.n, np.bool_ if dt == dtypes.bool else host_dtype(dt)))
        position = len(self.arrays) - 1
        if dt == dtypes.bool:
            # a mask has no layout in memory: its lanes are bools
            for k in range(self.width):
                lane = UOp(Ops.GEP, dtypes.bool, (value,), (k,))
                self.stores.append(store(out, self.i * self.width + k, lane))
        else:
            self.stores.append(store(out, self.i * self.width, value))
        self.checks.append((what, position, dt, expected, op))

    def run(self, device: str, name: str, feature: str, claimed: str) -> list[str]:
        """Run the kernel; the failed checks, described."""
        if not self.stores:
            return []
        uops = program(end(chain(self.stores), self.i))
        results = run_program(device, uops, self.arrays, feature=feature, claimed=claimed, name=name)
        failures = []
        for what, position, dt, expected, op in self.checks:
            got = host_values(results[position], dt)
            try:
                if dt == dtypes.bool:
                    # bool is one byte, 0 or 1
                    np.testing.assert_array_equal(got.view(np.uint8), expected.astype(np.uint8))
                elif dtypes.is_float(dt):
                    rtol, atol = tolerance(op, dt) if op is not None else (0.0, 0.0)
                    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
                else:
                    np.testing.assert_array_equal(got, expected)
            except AssertionError as e:
                failures.append(f"{what}:\n{e}")
        return failures


def vector_caps(device: str, width: int) -> RendererCaps:
    caps = Device[device].renderer.caps
    if width > caps.max_vector_width:
        pytest.skip(f"{device} declares max_vector_width={caps.max_vector_width}")
    return caps


def add_op_checks(kernel: VectorKernel, dt: DType, caps: RendererCaps, rng: np.random.Generator) -> None:
    """Every op of `vector_ops` that the core runs on whole vectors of `dt` (see the module's docstring)."""
    n, vec = kernel.n, dt.vec(kernel.width)
    masked = dt.itemsize in caps.vector_mask_bytes
    for op in sorted(caps.vector_ops & set(ops_for(dt)), key=lambda o: o.value):
        if op in DECOMPOSABLE and op not in caps.transcendental_ops:
            continue
        args = [a[:n] for a in inputs(dt, op, rng)]
        if op in COMPARISONS:
            if not masked:
                continue
            a, b = kernel.vload(dt, args[0]), kernel.vload(dt, args[1])
            mask = UOp(op, dtypes.bool.vec(kernel.width), (a, b))
            kernel.output(f"{op.name} of {vec} (a mask, read lane by lane)", mask, reference(op, dt, args))
            if Ops.WHERE in caps.vector_ops:
                chosen = UOp(Ops.WHERE, vec, (mask, a, b))
                expected = np.where(reference(op, dt, args), args[0], args[1])
                kernel.output(f"WHERE({op.name}(a, b), a, b) on {vec}", chosen, expected)
            continue
        if op is Ops.WHERE:
            if not masked:
                continue
            # one bool for all lanes of an iteration's vectors (the mask form is checked with each comparison)
            cond, x, y = args
            one = UOp(Ops.WHERE, vec, (kernel.scalar_load(dtypes.bool, cond), kernel.vload(dt, x), kernel.vload(dt, y)))
            expected = np.where(np.repeat(cond[:ITERATIONS], kernel.width), x, y)
            kernel.output(f"WHERE(one bool, a, b) on {vec}", one, expected)
            continue
        value = UOp(op, vec, tuple(kernel.vload(dt, a) for a in args))
        kernel.output(f"{op.name} on {vec}", value, reference(op, dt, args), op)
    # masks combined: (a < b) | (c < a), as x <= 0 is (x < 0) | (x == 0)
    bits = _SAME_SIZE_INT.get(dt)
    if Ops.BITCAST in caps.vector_ops and bits is not None and bits in caps.supported_dtypes:
        values = inputs(dt, Ops.ADD, rng)[0][:n]
        as_int = UOp(Ops.BITCAST, bits.vec(kernel.width), (kernel.vload(dt, values),))
        kernel.output(f"BITCAST of {vec} to {bits.vec(kernel.width)}", as_int, values.view(to_numpy_dtype(bits)))
        back = UOp(Ops.BITCAST, vec, (kernel.vload(bits, values.view(to_numpy_dtype(bits))),))
        kernel.output(f"BITCAST of {bits.vec(kernel.width)} to {vec}", back, values)
    compare = next((op for op in COMPARISONS if op in caps.vector_ops), None)
    if not masked or compare is None:
        return
    a, b, c = (arg[:n] for arg in inputs(dt, Ops.MULACC, rng))
    va, vb, vc = (kernel.vload(dt, x) for x in (a, b, c))
    first = UOp(compare, dtypes.bool.vec(kernel.width), (va, vb))
    second = UOp(compare, dtypes.bool.vec(kernel.width), (vc, va))
    left, right = reference(compare, dt, [a, b]), reference(compare, dt, [c, a])
    for combine in sorted(caps.vector_ops & {Ops.OR, Ops.AND}, key=lambda o: o.value):
        both = UOp(combine, dtypes.bool.vec(kernel.width), (first, second))
        expected = left | right if combine is Ops.OR else left & right
        kernel.output(f"{combine.name} of two {compare.name} masks of {vec}", both, expected)


@pytest.mark.parametrize("width", VECTOR_WIDTHS)
def test_vector_ops(uopkit_device: str, width: int) -> None:
    """Each op of caps.vector_ops on whole vectors of `width` lanes, on each claimed dtype: a wrong mask, a WHERE that
    picks the wrong operand or an op that is right only on its first lane fails here, not in some Tensor program."""
    caps = vector_caps(uopkit_device, width)
    if not caps.vector_ops & GroupOp.ALU:
        pytest.skip(f"{uopkit_device} declares no vector_ops")
    rng = np.random.default_rng(width)
    failures = []
    for dt in caps.supported_dtypes:
        if dt == dtypes.bool:
            continue
        kernel = VectorKernel(width)
        add_op_checks(kernel, dt, caps, rng)
        claim = f"caps.max_vector_width={caps.max_vector_width} and caps.vector_ops"
        failures += kernel.run(uopkit_device, f"vector_ops_{dt.name}", f"vector ops on {dt.vec(width)}", claim)
    assert not failures, "\n\n".join(failures)


def cast_values(src: DType, rng: np.random.Generator) -> np.ndarray:
    """Values of `src` that every target holds (0..120, and for floats a NaN, which casts to 0), as host data."""
    if dtypes.is_int(src):
        return rng.integers(0, 120, N).astype(to_numpy_dtype(src))
    values = (rng.random(N) * 120).astype(np.float32)
    values[:3] = [np.nan, 0.5, 119.75]
    return float32_to_bf16_bits(values) if src == dtypes.bfloat16 else values.astype(to_numpy_dtype(src))


def cast_reference(values: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    if dst == dtypes.bfloat16:
        return round_bf16([cast_scalar(v, dtypes.float32) for v in host_values(values, src).tolist()])
    return np.array([cast_scalar(v, dst) for v in host_values(values, src).tolist()], dtype=to_numpy_dtype(dst))


@pytest.mark.parametrize("width", VECTOR_WIDTHS)
def test_vector_casts(uopkit_device: str, width: int) -> None:
    """Each (from, to) cast of caps.vector_casts on a whole vector of `width` lanes."""
    caps = vector_caps(uopkit_device, width)
    claimed = set(caps.supported_dtypes)
    pairs = sorted((s, d) for s, d in caps.vector_casts if s in claimed and d in claimed and dtypes.bool not in (s, d))
    if not pairs:
        pytest.skip(f"{uopkit_device} declares no vector_casts between dtypes it claims")
    rng = np.random.default_rng(width)
    kernel = VectorKernel(width)
    for src, dst in pairs:
        values = cast_values(src, rng)[: kernel.n]
        cast = UOp(Ops.CAST, dst.vec(width), (kernel.vload(src, values),))
        kernel.output(f"CAST {src.vec(width)} -> {dst.vec(width)}", cast, cast_reference(values, src, dst), Ops.CAST)
    claim = f"caps.max_vector_width={caps.max_vector_width} and caps.vector_casts"
    failures = kernel.run(uopkit_device, "vector_casts", f"vector casts of width {width}", claim)
    assert not failures, "\n\n".join(failures)

"""Conformance: every ALU op, CAST and BITCAST of the program spec, on every dtype the backend claims.

The reference is the core's definition of each op on Python scalars (`uopkit.uop.ops.exec_alu`, `cast_scalar`):
integers wrap, IDIV/MOD truncate toward zero with x/0 = 0, x%0 = 0 and x/-1 = -x; MAX propagates NaN.

bfloat16 has no numpy type: its buffers hold the 16-bit patterns (uint16 arrays here), values are compared as the
float32s they encode, and the reference computes in float32 and rounds once to bfloat16.

Transcendental ops are tested as the core sends them: an EXP2, LOG2, SIN or SQRT the renderer doesn't claim in
``caps.transcendental_ops`` is decomposed by the core first (so the decomposition runs on the device); TRUNC and POW
always reach the renderer. `test_decompositions` also runs the core's decompositions of all four on the device
when it claims them natively, with arguments across each float type's range.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit.codegen.transcendental import decompositions_for
from uopkit.device import Device
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.emulator import bf16_to_float32, float32_to_bf16_bits, round_bf16
from uopkit.testing.programs import chain, end, global_buf, load, loop, program, run_program, store
from uopkit.uop.ops import Ops, UOp, cast_scalar, exec_alu, graph_rewrite

N = 37

FLOAT_ONLY = [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC, Ops.FDIV, Ops.POW]
INT_ONLY = [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]
BITWISE = [Ops.XOR, Ops.OR, Ops.AND]
NUMERIC = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.NEG, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.MULACC]
BOOL_OPS = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, *BITWISE]
ARITY = {op: 1 for op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC, Ops.NEG)}
ARITY.update({Ops.WHERE: 3, Ops.MULACC: 3})


def claimed(device: str) -> tuple[DType, ...]:
    return tuple(Device[device].renderer.caps.supported_dtypes)


def host_dtype(dt: DType) -> np.dtype:
    """The numpy dtype of a buffer of `dt` (bfloat16: its bit patterns)."""
    return np.dtype(np.uint16) if dt == dtypes.bfloat16 else to_numpy_dtype(dt)


def host_values(a: np.ndarray, dt: DType) -> np.ndarray:
    """A buffer's contents as values numpy can compare (bfloat16 bits -> float32)."""
    return bf16_to_float32(a) if dt == dtypes.bfloat16 and a.dtype == np.uint16 else a


def ops_for(dt: DType) -> list[Ops]:
    if dt == dtypes.bool:
        return BOOL_OPS
    if dtypes.is_float(dt):
        return NUMERIC + FLOAT_ONLY
    return NUMERIC + INT_ONLY + BITWISE


def inputs(dt: DType, op: Ops, rng: np.random.Generator) -> list[np.ndarray]:
    """Operands for `op` on `dt` that stay inside the op's defined domain but reach its edges."""
    if dt == dtypes.bfloat16:
        # float32 operands rounded to bfloat16, as bit patterns
        return [a if a.dtype == np.bool_ else float32_to_bf16_bits(a) for a in inputs(dtypes.float32, op, rng)]
    np_dt = to_numpy_dtype(dt)
    if dt == dtypes.bool:
        return [rng.integers(0, 2, N).astype(bool) for _ in range(ARITY.get(op, 2))]
    if dtypes.is_int(dt):
        lo, hi = dtypes.min(dt), dtypes.max(dt)
        edges = np.array([lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1], dtype=np_dt)
        wide = rng.integers(int(lo), int(hi), N, endpoint=True, dtype=np_dt)
        wide[: len(edges)] = edges
        small = rng.integers(-7 if lo < 0 else 0, 8, N).astype(np_dt)
        if op in (Ops.SHL, Ops.SHR):
            amounts = rng.integers(0, 8 * dt.itemsize, N)
            return [wide.astype(np_dt), amounts.astype(np_dt)]
        if op in (Ops.IDIV, Ops.MOD):
            # divisors include 0 and -1, whose results the spec defines
            return [wide.astype(np_dt), np.concatenate([small[: N // 2], wide[N // 2 :]]).astype(np_dt)]
        if op is Ops.WHERE:
            return [rng.integers(0, 2, N).astype(bool), wide.astype(np_dt), small.astype(np_dt)]
        others = [rng.permutation(wide).astype(np_dt) for _ in range(ARITY.get(op, 2) - 1)]
        return [wide.astype(np_dt), *others]
    scale = 4.0 if dt == dtypes.float16 else 40.0
    base = rng.standard_normal(N) * scale
    if op in (Ops.LOG2, Ops.SQRT, Ops.POW):
        base = np.abs(base) + 0.25
    specials = {
        Ops.ADD: [np.inf, -np.inf, np.nan],
        Ops.MUL: [np.inf, 0.0, np.nan],
        Ops.MAX: [np.nan, 1.0, -np.inf],
        Ops.CMPLT: [np.nan, 1.0, np.inf],
        Ops.CMPNE: [np.nan, np.nan, 2.0],
        Ops.CMPEQ: [np.nan, 3.0, -0.0],
        Ops.RECIP: [0.0, np.inf, -np.inf],
        Ops.SQRT: [0.0, np.inf, 4.0, -1.0, np.nan],
        Ops.SIN: [np.inf, np.nan, 3e4, -0.0],
        Ops.LOG2: [0.0, np.inf, 1.0],
        Ops.EXP2: [-np.inf, 0.0, 10.0],
        Ops.FDIV: [1.0, 0.0, -2.0],
        # the sign of a zero result (checked for SIGNED_ZERO_OPS)
        Ops.TRUNC: [-0.5, 0.5, -0.0, -2.5, np.inf, -np.inf, np.nan],
        Ops.NEG: [0.0, -0.0, np.inf],
        Ops.SUB: [-0.0, 0.0, 1.0],
    }.get(op, [])
    base[: len(specials)] = specials
    if op is Ops.WHERE:
        return [rng.integers(0, 2, N).astype(bool), base.astype(np_dt), rng.permutation(base).astype(np_dt)]
    if op is Ops.POW:
        return [base.astype(np_dt), (rng.standard_normal(N) * 2).astype(np_dt)]
    if op is Ops.FDIV:
        divisors = rng.standard_normal(N) * scale
        divisors[:3] = [0.0, 0.0, -0.0]
        return [base.astype(np_dt), divisors.astype(np_dt)]
    others = [rng.permutation(base).astype(np_dt) for _ in range(ARITY.get(op, 2) - 1)]
    if op in (Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT, Ops.MAX):
        # equal pairs matter for comparisons
        others[0][len(specials) : len(specials) + 4] = base[len(specials) : len(specials) + 4]
    return [base.astype(np_dt), *others]


def reference(op: Ops, dt: DType, args: list[np.ndarray]) -> np.ndarray:
    """The expected results, as numpy values (bfloat16: float32s rounded to bfloat16)."""
    if dt == dtypes.bfloat16:
        ref = reference(op, dtypes.float32, [host_values(a, dt) for a in args])
        return ref if ref.dtype == np.bool_ else round_bf16(ref)
    out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    out = []
    for values in zip(*(a.tolist() for a in args), strict=True):
        if op is Ops.MAX and dtypes.is_float(dt) and any(math.isnan(v) for v in values):
            out.append(math.nan)
            continue
        out.append(exec_alu(op, out_dt, list(values)))
    return np.array(out, dtype=to_numpy_dtype(out_dt))


# ops whose zero results must keep IEEE's sign (TRUNC(-0.5) is -0.0, -(0.0) is -0.0): assert_allclose takes -0.0 for 0.0
SIGNED_ZERO_OPS = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.TRUNC, Ops.FDIV, Ops.RECIP)


def signed_zeros_differ(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Positions where `expected` is a zero and `got` is the zero of the other sign."""
    zero = (expected == 0) & (got == 0)
    return np.flatnonzero(zero & (np.signbit(got) != np.signbit(expected)))


def tolerance(op: Ops, dt: DType) -> tuple[float, float]:
    if dt == dtypes.bfloat16:
        # 8 significant bits: one rounding step is 2**-8 relative
        return 8e-3, 1e-3
    if dt == dtypes.float16:
        return 2e-3, 1e-3
    transcendental = op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.MULACC)
    if dt == dtypes.float32:
        return (2e-6, 1e-6) if transcendental else (1e-7, 0.0)
    return (1e-13, 1e-14) if transcendental else (0.0, 0.0)


def alu_program(op: Ops, dt: DType, n_in: int, in_dtypes: list[DType], native: frozenset[Ops]) -> list[UOp]:
    out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    out = global_buf(0, out_dt, N)
    ins = [global_buf(i + 1, in_dtypes[i], N) for i in range(n_in)]
    i = loop(0, N)
    srcs = tuple(load(b, i) for b in ins)
    value = UOp(op, out_dt, srcs)
    # what the core sends: the transcendentals the renderer doesn't claim, decomposed
    decompose = decompositions_for(native)
    if decompose is not None:
        value = graph_rewrite(value, decompose, name="transcendentals")
    return program(end(store(out, i, value), i))


@pytest.mark.parametrize("dtype_name", [d.name for d in dtypes.all])
def test_alu_ops(uopkit_device: str, dtype_name: str) -> None:
    dt = next(d for d in dtypes.all if d.name == dtype_name)
    if dt not in claimed(uopkit_device):
        pytest.skip(f"{uopkit_device} does not claim {dt}")
    rng = np.random.default_rng(sum(map(ord, dtype_name)))
    native = Device[uopkit_device].renderer.caps.transcendental_ops
    failures = []
    for op in ops_for(dt):
        args = inputs(dt, op, rng)
        uops = alu_program(op, dt, len(args), [dtypes.bool if a.dtype == np.bool_ else dt for a in args], native)
        expected = reference(op, dt, args)
        out = np.zeros(N, np.bool_ if expected.dtype == np.bool_ else host_dtype(dt))
        got = host_values(run_program(uopkit_device, uops, [out, *args], name=f"alu_{op.name.lower()}")[0], dt)
        try:
            if dtypes.is_float(dt) and expected.dtype != np.bool_:
                rtol, atol = tolerance(op, dt)
                np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
                flipped = signed_zeros_differ(got, expected) if op in SIGNED_ZERO_OPS else []
                assert not len(flipped), f"zeros of the wrong sign at {flipped.tolist()}: {got[flipped].tolist()}"
            else:
                np.testing.assert_array_equal(got, expected)
        except AssertionError as e:
            failures.append(f"{op.name} on {dt}: inputs {[a.tolist()[:8] for a in args]}...\n{e}")
    assert not failures, "\n\n".join(failures)


# the decompositions use 64-bit integer arithmetic (SIN's argument reduction, float32 SQRT's exact correction)
DECOMPOSED = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)


@pytest.mark.parametrize("dtype_name", [dtypes.float32.name, dtypes.float64.name])
def test_decompositions(uopkit_device: str, dtype_name: str) -> None:
    """EXP2, LOG2, SIN and SQRT as the core decomposes them for a renderer that doesn't claim them, on this
    device: over wide arguments (SIN up to 1e30 in float32) and the special values. (float16 and bfloat16 are
    decomposed through float32: test_alu_ops covers them where they are not claimed.)"""
    dt = next(d for d in dtypes.floats if d.name == dtype_name)
    if dt not in claimed(uopkit_device):
        pytest.skip(f"{uopkit_device} does not claim {dt}")
    missing = [d for d in (dtypes.int64, dtypes.uint64) if d not in claimed(uopkit_device)]
    if missing:
        pytest.skip(f"{uopkit_device} does not claim {missing}: it must claim {DECOMPOSED} in transcendental_ops")
    np_dt = to_numpy_dtype(dt)
    rng = np.random.default_rng(3)
    # the largest exponent of the arguments
    top = 100 if dt == dtypes.float32 else 1000
    failures = []
    for op in DECOMPOSED:
        with np.errstate(over="ignore"):
            base = (rng.random(N) * 2 - 1) * 2.0 ** rng.integers(-20, top, N).astype(np.float64)
        base = np.clip(base, -float(np.finfo(np_dt).max), float(np.finfo(np_dt).max))
        if op is Ops.EXP2:
            base = base / 2.0**top * 200
        if op in (Ops.LOG2, Ops.SQRT):
            base = np.abs(base)
        base[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0]
        arg = base.astype(np_dt)
        uops = alu_program(op, dt, 1, [dt], frozenset())
        got = run_program(uopkit_device, uops, [np.zeros(N, np_dt), arg], name=f"decomposed_{op.name.lower()}")[0]
        with np.errstate(all="ignore"):
            expected = reference(op, dt, [arg])
        rtol, atol = tolerance(Ops.SIN, dt)
        try:
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
            # signed zeros: sin(-0) = sqrt(-0) = -0
            if op in (Ops.SIN, Ops.SQRT):
                assert np.signbit(got[1]), f"{op.name}(-0) is {got[1]}, not -0"
        except AssertionError as e:
            failures.append(f"decomposed {op.name} on {dt}: inputs {base.tolist()[:8]}...\n{e}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("src_name", [d.name for d in dtypes.all])
def test_casts(uopkit_device: str, src_name: str) -> None:
    src = next(d for d in dtypes.all if d.name == src_name)
    targets = [d for d in claimed(uopkit_device) if d != src]
    if src not in claimed(uopkit_device):
        pytest.skip(f"{uopkit_device} does not claim {src}")
    rng = np.random.default_rng(7)
    if src == dtypes.bool:
        values = rng.integers(0, 2, N).astype(bool)
    elif dtypes.is_int(src):
        values = rng.integers(int(dtypes.min(src)), int(dtypes.max(src)), N, endpoint=True, dtype=to_numpy_dtype(src))
        values[:3] = [dtypes.min(src), dtypes.max(src), 0]
    else:
        # floats in the range every integer target holds (other values are undefined in C), and a NaN (-> 0)
        values = (rng.random(N) * 120).astype(np.float32 if src == dtypes.bfloat16 else to_numpy_dtype(src))
        values[:3] = [np.nan, 0.5, 119.75]
        if src == dtypes.bfloat16:
            values = float32_to_bf16_bits(values)
    inp = global_buf(1, src, N)
    outs = [global_buf(k + 2, d, N) for k, d in enumerate(targets)]
    i = loop(0, N)
    x = load(inp, i)
    stores = [store(o, i, UOp(Ops.CAST, d, (x,))) for o, d in zip(outs, targets, strict=True)]
    # data0 is unused: it keeps the buffer numbering of the other programs
    dummy = global_buf(0, dtypes.int32, 1)
    stores.append(store(dummy, 0, UOp.const(dtypes.int32, 1)))
    uops = program(end(chain(stores), i))
    arrays = [np.zeros(1, np.int32), values] + [np.zeros(N, host_dtype(d)) for d in targets]
    results = run_program(uopkit_device, uops, arrays, name="casts")[2:]
    for d, got in zip(targets, results, strict=True):
        got = host_values(got, d)
        if d == dtypes.bfloat16:
            expected = round_bf16([cast_scalar(v, dtypes.float32) for v in host_values(values, src).tolist()])
        else:
            expected = np.array([cast_scalar(v, d) for v in host_values(values, src).tolist()], dtype=to_numpy_dtype(d))
        if dtypes.is_float(d):
            rtol = {dtypes.float16: 1e-3, dtypes.bfloat16: 8e-3}.get(d, 1e-6)
            np.testing.assert_allclose(got, expected, rtol=rtol, equal_nan=True, err_msg=f"CAST {src} -> {d}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"CAST {src} -> {d}")


BITCAST_PAIRS = [
    (dtypes.float32, dtypes.int32),
    (dtypes.int32, dtypes.float32),
    (dtypes.float32, dtypes.uint32),
    (dtypes.float64, dtypes.int64),
    (dtypes.uint64, dtypes.float64),
    (dtypes.float16, dtypes.int16),
    (dtypes.uint16, dtypes.float16),
    (dtypes.int8, dtypes.uint8),
    (dtypes.bfloat16, dtypes.int16),
    (dtypes.uint16, dtypes.bfloat16),
]


@pytest.mark.parametrize("src, dst", BITCAST_PAIRS, ids=[f"{s.name}-{d.name}" for s, d in BITCAST_PAIRS])
def test_bitcast(uopkit_device: str, src: DType, dst: DType) -> None:
    if src not in claimed(uopkit_device) or dst not in claimed(uopkit_device):
        pytest.skip(f"{uopkit_device} does not claim both {src} and {dst}")
    rng = np.random.default_rng(3)
    values = rng.integers(0, 256, N * src.itemsize, dtype=np.uint8).view(host_dtype(src))
    if dtypes.is_float(src):
        # NaN payloads need not survive a float register; keep to finite values
        finite = np.where(np.isfinite(host_values(values, src)), host_values(values, src), 1.5)
        values = float32_to_bf16_bits(finite) if src == dtypes.bfloat16 else finite.astype(to_numpy_dtype(src))
    out, inp = global_buf(0, dst, N), global_buf(1, src, N)
    i = loop(0, N)
    uops = program(end(store(out, i, UOp(Ops.BITCAST, dst, (load(inp, i),))), i))
    got = run_program(uopkit_device, uops, [np.zeros(N, host_dtype(dst)), values], name="bitcast")[0]
    np.testing.assert_array_equal(got.view(np.uint8), values.view(np.uint8))

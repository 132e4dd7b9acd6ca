"""The differential fuzzer (uopkit.testing.fuzz): a short seeded run on the default device, its machinery (shrinking,
runnable repros), and regression tests for what it found."""

from __future__ import annotations

import random

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.testing import fuzz


def test_short_fuzz_run_agrees_with_torch():
    # seeded and bounded by count, so CI runs the same programs every time; reports print as runnable repros
    ran, failures = fuzz.fuzz(Device.DEFAULT, seed=0, count=100, shrink_s=20)
    assert ran == 100
    assert not failures, "\n".join(f.report() for f in failures)


def test_generated_programs_are_valid_torch_and_vary():
    progs = [fuzz.generate(random.Random(s)) for s in range(40)]
    for p in progs:
        fuzz._run_env(p)
    shapes = {inp.data.shape for p in progs for inp in p.inputs}
    dtypes_ = {str(inp.data.dtype) for p in progs for inp in p.inputs}
    assert any(0 in s for s in shapes) and any(1 in s for s in shapes)
    assert dtypes_ == {"float32", "float16", "int32", "bool"}


def _planted_bug_program() -> fuzz.Program:
    # uopkit computes "+ 1" where torch computes "+ 2": a mismatch the shrinker must keep while it drops the rest
    x = fuzz.Input(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = fuzz.Input(np.ones((4,), dtype=np.float32))
    steps = [
        fuzz.Step("{0} * {1}", "{0} * {1}", (0, 1)),
        fuzz.Step("{0}.permute([1, 0])", "{0}.permute([1, 0])", (2,)),
        fuzz.Step("{0} + 1", "{0} + 2", (3,)),
        fuzz.Step("{0}.sum(0)", "{0}.sum(0)", (4,)),
    ]
    return fuzz.Program([x, y], steps)


def test_compare_finds_and_shrink_reduces_a_mismatch():
    prog = _planted_bug_program()
    dev = Device.DEFAULT
    assert fuzz.compare(prog, dev) is not None
    small = fuzz.shrink(prog, dev, budget_s=60)
    assert fuzz.compare(small, dev) is not None
    assert len(small.steps) < len(prog.steps)
    assert any("+ 1" in s.ours for s in small.steps)
    assert sum(i.data.size for i in small.inputs) < 16
    # the repro is runnable Python that prints both answers
    code = small.repro(dev)
    exec(compile(code, "<repro>", "exec"), {})
    assert fuzz.fails_alone(small, dev)


def test_repro_of_special_values_runs(capsys):
    # nan and inf inputs print bare in the repro's lists: it must still run
    x = fuzz.Input(np.array([np.nan, np.inf, -np.inf, 1.0], np.float32))
    code = fuzz.Program([x], [fuzz.Step("{0}.maximum(0)", "{0}.clamp(min=0)", (0,))]).repro(Device.DEFAULT)
    exec(compile(code, "<repro>", "exec"), {})
    assert capsys.readouterr().out.count("nan inf  0.  1.]") == 2


def test_cli_runs_and_reports_failures_by_exit_code(capsys):
    assert fuzz.main(["--count", "3", "--device", Device.DEFAULT, "--seed", "5"]) == 0
    assert "3 programs from seed 5, 0 failures" in capsys.readouterr().out


# ---- what the fuzzer found


def test_where_with_the_same_tensor_in_both_branches():
    # where(c, x, x) simplifies to x: the kernel must still take the condition's buffer (it read x from the wrong one)
    x = Tensor([1.0, 2.0])
    assert Tensor([False, True]).where(x, x).tolist() == [1.0, 2.0]
    assert Tensor([True]).where(Tensor([3]), Tensor([3])).tolist() == [3]


@pytest.mark.parametrize("shape", [(0, 1), (5, 0), (0,)])
def test_zero_size_contiguous_and_empty_slice_assignment(shape):
    t = Tensor(np.zeros(shape, np.int32)).contiguous()
    t[0:0] = 2
    assert t.numpy().shape == shape
    v = Tensor([1.0, 2.0]).contiguous().realize()
    v[2:2] = 5.0
    v[0:0].assign(Tensor.zeros(0)).realize()
    assert v.tolist() == [1.0, 2.0]


def test_padding_a_zero_size_tensor():
    out = Tensor(np.zeros((7, 0, 2), np.float32)).contiguous().pad(((1, 1), (1, 2), (1, 1)))
    assert out.numpy().shape == (9, 3, 4) and not out.numpy().any()


def test_reduce_whose_combine_folds_to_a_constant():
    # max(acc, True) folds to True: the accumulator's update lost its loop and the linearizer could not place it
    assert Tensor(np.zeros((0,), bool)).pad(((0, 2),)).min().item() is False
    assert (Tensor.zeros(0).pad(((0, 2),)) != 1).max().item() is True
    assert (Tensor.ones(3, 0).pad((None, (1, 1))) == 0).all(1).tolist() == [True, True, True]


def test_empty_index_of_an_empty_bool_tensor():
    assert Tensor(np.zeros((0,), bool))[Tensor([], dtype="int32")].numpy().shape == (0,)
    assert Tensor(np.zeros((2, 0), bool)).any(1).tolist() == [False, False]


def test_half_mod_is_computed_in_float32():
    # -9 % 0.076 in float16 steps (quotient, floor, product) was off in the second digit; torch uses float32 inside
    a, b = np.array([-9], np.int32), np.array([0.07598876953125, -0.3, 3.0], np.float16)
    torch = pytest.importorskip("torch")
    ref = (torch.from_numpy(a) % torch.from_numpy(b)).numpy()
    np.testing.assert_allclose((Tensor(a) % Tensor(b)).numpy().astype(np.float32), ref.astype(np.float32), rtol=1e-3)


def test_bool_to_an_integer_power_is_an_integer_tensor():
    torch = pytest.importorskip("torch")
    for e in (0, 1, 2, 3, 2.0):
        ours, ref = Tensor([True, False]) ** e, torch.tensor([True, False]) ** e
        assert ours.tolist() == ref.tolist() and ours.dtype.name.startswith("float") == ref.dtype.is_floating_point


def test_half_cos_is_correctly_rounded():
    torch = pytest.importorskip("torch")
    x = np.linspace(-10, 10, 2001).astype(np.float16)
    np.testing.assert_array_equal(Tensor(x).cos().numpy(), torch.from_numpy(x).cos().numpy())

"""Errors PyTorch raises and uopkit raised late or not at all: the mean and moments of int and bool tensors,
binary_cross_entropy of values outside [0, 1], relu and unary + of bools, a tensor put on a device that can't run."""

import numpy as np
import pytest

import uopkit.nn.functional as F
from uopkit import Tensor, TinyJit, dtypes
from uopkit.device import DeviceError

torch = pytest.importorskip("torch")


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 (the exception is the answer compared)
        return e


STATISTICS = {
    "mean": lambda t: t.mean(),
    "mean(dim)": lambda t: t.mean(0),
    "var": lambda t: t.var(),
    "std": lambda t: t.std(0),
    "var_mean": lambda t: (torch if isinstance(t, torch.Tensor) else Tensor).var_mean(t),
    "std_mean": lambda t: (torch if isinstance(t, torch.Tensor) else Tensor).std_mean(t),
    "nanmean": lambda t: t.nanmean(),
    "relu": lambda t: t.relu(),
    "positive": lambda t: +t,
}


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("op", list(STATISTICS))
def test_int_and_bool_refusals_as_torch(op, dtype):
    values = np.array([1, 0, 1, 1])
    if op in ("relu", "positive") and dtype != "bool":
        pytest.skip("computed for ints, as torch's")
    ours = _outcome(STATISTICS[op], Tensor(values).cast(dtype))
    theirs = _outcome(STATISTICS[op], torch.tensor(values).to(getattr(torch, dtype)))
    assert isinstance(theirs, Exception), theirs
    assert isinstance(ours, type(theirs)), ours


def test_mean_of_ints_with_a_float_dtype_as_torch():
    x = [[1, 2], [4, 7]]
    ours = Tensor(x).mean(1, dtype="float64")
    theirs = torch.tensor(x).mean(1, dtype=torch.float64)
    assert ours.dtype == dtypes.float64 and np.allclose(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize(
    "p, y",
    [([0.2, 1.5], [1.0, 0.0]), ([-0.1, 0.5], [1.0, 0.0]), ([float("nan"), 0.5], [1.0, 0.0]), ([0.2, 0.5], [2.0, 0.0])],
)
@pytest.mark.parametrize("computed", [False, True])
def test_binary_cross_entropy_outside_0_1_raises_as_torch(p, y, computed):
    # host data, and values computed on the device (read back with their min and max)
    with pytest.raises(RuntimeError):
        torch.nn.functional.binary_cross_entropy(torch.tensor(p), torch.tensor(y))
    prob, target = Tensor(p), Tensor(y)
    if computed:
        prob, target = prob * 1.0, target + 0.0
    with pytest.raises(RuntimeError, match="binary_cross_entropy: every element of the .* in \\[0, 1\\]"):
        F.binary_cross_entropy(prob, target)


def test_binary_cross_entropy_checks_each_jit_replay():
    step = TinyJit(lambda x, y: F.binary_cross_entropy((x * 1.0).sigmoid() * 2 - 0.5, y).realize())
    y = Tensor([1.0, 0.0])
    for v in ([0.0, 0.1], [0.1, 0.0], [0.2, 0.1]):
        expected = torch.nn.functional.binary_cross_entropy(torch.tensor(v).sigmoid() * 2 - 0.5, torch.tensor([1.0, 0]))
        assert np.isclose(step(Tensor(v), y).item(), expected.item(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="binary_cross_entropy"):
        step(Tensor([5.0, 0.0]), y)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor.ones(3, device="cuda"),
        lambda: Tensor.zeros(2, device="cuda:1"),
        lambda: Tensor([1.0]).to("cuda"),
        lambda: Tensor([1.0]).cuda(),
        lambda: Tensor.ones(2, device="nosuchdevice"),
    ],
)
def test_unusable_device_raises_at_once(make):
    if torch.cuda.is_available() or Tensor.cuda.is_available():
        pytest.skip("CUDA runs here")
    # torch raises when the tensor is made or moved; not later, at its first use
    with pytest.raises(DeviceError, match="CUDA|NOSUCHDEVICE"):
        make()


_B, _I, _F = [True, False], [3, 2], [1.5, 2.0]
BINARY_DTYPE_CASES = {
    # (op, self: values and dtype, other: values and dtype or a Python number, the name our error gives); compared
    # with torch's answer: its exception type, or its values and dtype
    "pow(bool, bool)": (lambda a, b: a.pow(b), (_B, "bool"), (_B, "bool"), "pow"),
    "True ** bool": (lambda a, b: b.__rpow__(a), True, (_B, "bool"), "pow"),
    "bool ** True": (lambda a, b: a**b, (_B, "bool"), True, "pow"),
    "bool ** False": (lambda a, b: a**b, (_B, "bool"), False, "pow"),
    "bool ** 2": (lambda a, b: a**b, (_B, "bool"), 2, "pow"),
    "bool << True": (lambda a, b: a << b, (_B, "bool"), True, "lshift"),
    "bool >> True": (lambda a, b: a >> b, (_B, "bool"), True, "rshift"),
    "lerp(float32, float64)": (lambda a, b: a.lerp(b, 0.5), (_F, "float32"), (_F, "float64"), "lerp"),
    "lerp(float32, w=float64)": (lambda a, b: a.lerp(a, b), (_F, "float32"), (_F, "float64"), "lerp"),
    "isclose(float32, int32)": (lambda a, b: a.isclose(b), (_F, "float32"), (_I, "int32"), "isclose"),
    "dot(bool, bool)": (lambda a, b: a.dot(b), (_B, "bool"), (_B, "bool"), "matmul"),
    "mm(bool, bool)": (lambda a, b: a.reshape(1, 2).mm(b.reshape(2, 1)), (_B, "bool"), (_B, "bool"), "matmul"),
    "mv(bool, bool)": (lambda a, b: a.reshape(1, 2).mv(b), (_B, "bool"), (_B, "bool"), "matmul"),
    "clamp(bool, True)": (lambda a, b: a.clamp(None, b), (_B, "bool"), True, "clamp"),
    "clamp(bool, bool, bool)": (lambda a, b: a.clamp(b, b), (_B, "bool"), (_B, "bool"), "clamp"),
    "clamp(bool, min=bool)": (lambda a, b: a.clamp(min=b), (_B, "bool"), (_B, "bool"), "clamp"),
}


@pytest.mark.parametrize("case", list(BINARY_DTYPE_CASES))
def test_binary_dtype_refusals_as_torch(case):
    fn, x, y, name = BINARY_DTYPE_CASES[case]

    def make(lib_tensor, arg):
        return arg if not isinstance(arg, tuple) else lib_tensor(arg[0], arg[1])

    ours = _outcome(fn, *(make(lambda v, d: Tensor(np.array(v)).cast(d), a) for a in (x, y)))
    theirs = _outcome(fn, *(make(lambda v, d: torch.tensor(v, dtype=getattr(torch, d)), a) for a in (x, y)))
    if isinstance(theirs, Exception):
        assert isinstance(ours, type(theirs)), f"{case}: {ours!r}, torch raises {theirs!r}"
        assert str(ours).startswith(f"{name}:"), str(ours)
    else:
        assert not isinstance(ours, Exception), f"{case}: {ours!r}, torch gives {theirs}"
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.") or (ours.dtype.name, theirs.dtype) == (
            "int",
            torch.int64,
        ), case
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())

"""Printing a Tensor (uopkit/tensor/printing.py): the same text as torch's for the same values, with our class name,
our dtype names and our defaults (int32 is the default int, as torch's int64)."""

import re

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes
from uopkit.nn import Parameter
from uopkit.tensor import printing

torch = pytest.importorskip("torch")

# our dtype -> torch's dtype with the same place among the defaults: our default int (int32) is torch's int64, and the
# other way round, so that which of them prints a dtype suffix is the same
TORCH_TWIN = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int64,
    "int64": torch.int32,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
}
OUR_NAME = {
    "torch.float16": "dtypes.half",
    "torch.bfloat16": "dtypes.bfloat16",
    "torch.float64": "dtypes.double",
    "torch.int32": "dtypes.long",
    "torch.int64": "dtypes.int",
    "torch.uint8": "dtypes.uchar",
    "torch.int8": "dtypes.char",
    "torch.int16": "dtypes.short",
}


def torch_text(t) -> str:
    text = str(t).replace("tensor(", "Tensor(")
    return re.sub(r"torch\.\w+", lambda m: OUR_NAME.get(m.group(0), m.group(0)), text)


def both(data, dt: str):
    """The same values as a torch tensor and as ours (ours from torch's, so half floats round alike)."""
    t = torch.tensor(data, dtype=torch.float64 if dt in ("float16", "bfloat16") else TORCH_TWIN[dt])
    t = t.to(TORCH_TWIN[dt])
    values = t.float().numpy() if dt == "bfloat16" else t.numpy()
    return t, Tensor(values, dtype=dt)


rng = np.random.default_rng(0)
CASES = [
    ("whole floats", [1.0, 2.0, 3.0], "float32"),
    ("mixed magnitudes", [1e-8, 1.5, 1e8], "float32"),
    ("nan inf", [float("nan"), float("inf"), -1.0], "float32"),
    ("ints", [1, 2, 3], "int32"),
    ("int64", [-1, 100000], "int64"),
    ("bools", [True, False], "bool"),
    ("half", [0.1, 2.0], "float16"),
    ("half max", [65504.0, -1.0], "float16"),
    ("bfloat16", [0.1, 2.0], "bfloat16"),
    ("double", [1.5, -2.25], "float64"),
    ("uint8", [1, 2], "uint8"),
    ("int8", [-3, 4], "int8"),
    ("0-d float", 3.25, "float32"),
    ("0-d nan", float("nan"), "float32"),
    ("0-d zero", 0.0, "float32"),
    ("0-d bool", True, "bool"),
    ("0-d int", 7, "int32"),
    ("empty", [], "float32"),
    ("empty int", [], "int32"),
    ("empty 2-d", np.zeros((0, 3)).tolist(), "float32"),
    ("signed zeros", [0.0, -0.0], "float32"),
    ("ratio past 1000", [1.0, 2000.0], "float32"),
    ("just above 1e-4", [0.00011, 1.0], "float32"),
    ("below 1e-4", [0.00009, 1.0], "float32"),
    ("large whole", [123456789.0, 1.0], "float32"),
    ("2-d", rng.standard_normal((4, 5)).tolist(), "float32"),
    ("3-d", rng.standard_normal((2, 3, 4)).tolist(), "float32"),
    ("4-d double", rng.standard_normal((3, 2, 2, 2)).tolist(), "float64"),
    ("infs 2-d", [[1.0, float("inf")], [float("-inf"), 2.5]], "float32"),
    ("wrapping row", rng.standard_normal(30).tolist(), "float32"),
    ("summarized 2-d int", np.arange(2000).reshape(40, 50).tolist(), "int32"),
    ("summarized 3-d", (np.arange(2000).reshape(2, 10, 100) * 0.5).tolist(), "float32"),
    ("summarized 1-d", np.arange(1001).tolist(), "float32"),
    ("summarized bools", (np.arange(3000).reshape(3, 1000) % 3 == 0).tolist(), "bool"),
    ("sci wrapping", (np.arange(200) * 1e5).tolist(), "float32"),
]
OPTIONS = [
    {},
    {"precision": 2},
    {"sci_mode": True},
    {"sci_mode": False},
    {"threshold": 5},
    {"edgeitems": 1, "threshold": 10},
    {"linewidth": 30},
    {"profile": "short"},
    {"profile": "full"},
    {"edgeitems": 0, "threshold": 3},
]


@pytest.fixture
def restored_options():
    yield
    torch.set_printoptions(profile="default")
    uopkit.set_printoptions(profile="default")


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) or "default" for o in OPTIONS])
def test_prints_as_torch(options, restored_options):
    torch.set_printoptions(**options)
    uopkit.set_printoptions(**options)
    for name, data, dt in CASES:
        t, u = both(data, dt)
        assert str(u) == torch_text(t), name
        assert repr(u) == str(u)


def test_requires_grad_suffix():
    assert str(Tensor([1.0, 2.0], requires_grad=True)) == "Tensor([1., 2.], requires_grad=True)"
    # (torch names the grad_fn of a computed value; we say requires_grad, and break the line where torch does)
    x = Tensor.ones(3, 30, requires_grad=True) * 3.1
    t = torch.ones(3, 30) * 3.1
    assert str(x) == torch_text(t)[:-1] + ", requires_grad=True)"
    assert str(Tensor([1.0, 2.0], requires_grad=True).detach()) == "Tensor([1., 2.])"


def test_large_tensor_computes_only_its_edges(monkeypatch):
    # past the threshold and READ_WHOLE_BYTES the edges are cut on the device, and print as torch's
    monkeypatch.setattr(printing, "READ_WHOLE_BYTES", 1024)
    u = Tensor.arange(60000).reshape(200, 300).float() * 0.5
    t = torch.arange(60000).reshape(200, 300).float() * 0.5
    assert str(u) == torch_text(t)


def test_parameter_and_subclasses():
    assert repr(Parameter(Tensor([1.0, 2.0]))) == "Parameter containing:\nTensor([1., 2.], requires_grad=True)"
    assert repr(Tensor([1.0]).data) == "Tensor([1.])"

    class Mine(Tensor):
        __slots__ = ()

    assert repr(Mine([1.0])) == "Mine([1.])"


def test_device_suffix(monkeypatch):
    u = Tensor([1.0], device="cpu")
    assert "device" not in repr(u) or uopkit.Device.DEFAULT != "CPU"
    monkeypatch.setattr(printing, "Device", type("D", (), {"DEFAULT": "CUDA"}))
    assert repr(u) == "Tensor([1.], device='CPU')"


def test_a_value_that_fails_to_compute_still_prints(monkeypatch):
    def fail(self, force=False):
        raise RuntimeError("compile failed: bad kernel\nsecond line")

    x = Tensor([1.0, 2.0]) + 1
    monkeypatch.setattr(Tensor, "numpy", fail)
    text = repr(x)
    assert text.startswith("Tensor(<values not computed: RuntimeError: compile failed: bad kernel>")
    assert "size=(2,)" in text and "dtype=dtypes.float" in text and "second line" not in text
    assert str(x) == text
    assert f"{x}" == text
    # a 0-d one formats as its repr when it can't be computed (with a spec it raises: there is no number to format)
    assert f"{Tensor(2.0) + 1}".startswith("Tensor(<values not computed: RuntimeError")
    with pytest.raises(RuntimeError):
        f"{Tensor(2.0) + 1:.2f}"


def test_format_of_a_0d_tensor_is_its_number():
    # as torch's: a 0-d tensor formats as str(item) without a spec, and by the spec with one
    for u, t in [
        (Tensor(0.25), torch.tensor(0.25)),
        (Tensor(1 / 3), torch.tensor(1 / 3)),
        (Tensor(3), torch.tensor(3)),
        (Tensor(True), torch.tensor(True)),
        (Tensor(0.1, dtype=dtypes.half), torch.tensor(0.1, dtype=torch.float16)),
        (Tensor(0.1, dtype=dtypes.bfloat16), torch.tensor(0.1, dtype=torch.bfloat16)),
        (Tensor(2.0, requires_grad=True) * 2, torch.tensor(2.0, requires_grad=True) * 2),
    ]:
        assert f"loss {u}" == f"loss {t}"
        assert f"{u:>8}" == f"{t:>8}"
    assert f"{Tensor(1 / 3):.3f}" == "0.333"
    assert f"{Tensor([0.25])}" == "Tensor([0.2500])"
    with pytest.raises(TypeError, match="only a 0-d tensor"):
        f"{Tensor([0.25]):.2f}"


def test_printoptions_api(restored_options):
    assert uopkit.get_printoptions() == {
        "precision": 4,
        "threshold": 1000,
        "edgeitems": 3,
        "linewidth": 80,
        "sci_mode": None,
    }
    saved = uopkit.get_printoptions()
    uopkit.set_printoptions(precision=2, sci_mode=True)
    assert str(Tensor([1.12345])) == "Tensor([1.12e+00])"
    # an option left out keeps its value, except sci_mode (as torch's)
    uopkit.set_printoptions(linewidth=100)
    assert uopkit.get_printoptions()["precision"] == 2 and uopkit.get_printoptions()["sci_mode"] is None
    uopkit.set_printoptions(**saved)
    assert str(Tensor([1.12345])) == "Tensor([1.1235])"
    bad_calls = [
        {"precision": -1},
        {"edgeitems": 1.5},
        {"linewidth": 0},
        {"profile": "tiny"},
        {"sci_mode": "yes"},
        {"precision": 2, "linewidth": 0},
    ]
    for bad in bad_calls:
        with pytest.raises(ValueError, match="set_printoptions"):
            uopkit.set_printoptions(**bad)
    assert uopkit.get_printoptions() == saved

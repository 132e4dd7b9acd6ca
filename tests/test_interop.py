"""Values crossing to torch and numpy (uopkit/tensor/interop.py: DLPack, from_numpy), torch's devices and dtypes as
arguments, torch's `size=` keyword and tensor sizes in shapes."""

import os

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes
from uopkit.device import DeviceName
from uopkit.dtype import to_dtype
from uopkit.nn import Linear

torch = pytest.importorskip("torch")


# ---- to torch and numpy


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([1.5, -2.0], "float32"),
        ([1, 2, 3], "int32"),
        ([True, False], "bool"),
        ([0.1, 2.0], "float16"),
        (3.5, "float64"),
    ],
)
def test_torch_and_numpy_read_a_tensor_through_dlpack(values, dtype):
    u = Tensor(values, dtype=dtype, device="cpu")
    want = np.array(values, dtype=np.dtype(dtype))
    for got in (torch.from_dlpack(u), torch.tensor(u), torch.as_tensor(u)):
        np.testing.assert_array_equal(got.numpy(), want)
        assert got.numpy().dtype == want.dtype
    got = np.from_dlpack(u)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def test_dlpack_export_is_a_copy_of_a_computed_tensor():
    u = Tensor([1.0, 2.0], device="cpu")
    lazy = u * 3 + 1
    t = torch.from_dlpack(lazy)
    assert t.tolist() == [4.0, 7.0]
    t += 100
    assert lazy.tolist() == [4.0, 7.0]
    # rows of a tensor, each a 0-d tensor (torch.tensor used to walk them as sequences and fail on len())
    assert torch.stack([torch.tensor(x) for x in u]).tolist() == [1.0, 2.0]
    assert u.__dlpack_device__() == (1, 0)


def test_dlpack_export_refusals():
    u = Tensor([1.0], device="cpu")
    with pytest.raises(BufferError, match="copy=False"):
        u.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="bfloat16"):
        torch.from_dlpack(Tensor([1.0], dtype=dtypes.bfloat16, device="cpu"))


def test_dlpack_export_from_another_device_raises(monkeypatch):
    u = Tensor([1.0], device="cpu")
    monkeypatch.setattr(Tensor, "device", property(lambda self: DeviceName("CUDA")))
    with pytest.raises(BufferError, match="on CUDA"):
        torch.from_dlpack(u)
    with pytest.raises(BufferError, match="on CUDA"):
        u.__dlpack_device__()


# ---- from torch and numpy


@pytest.mark.parametrize(
    "t, dtype",
    [
        (torch.tensor([1.5, -2.0]), dtypes.float32),
        (torch.tensor([1, 2]), dtypes.int64),
        (torch.tensor([True, False]), dtypes.bool),
        (torch.tensor([0.1, 2.0], dtype=torch.float16), dtypes.float16),
        (torch.tensor([0.1, 2.0], dtype=torch.bfloat16), dtypes.bfloat16),
        (torch.tensor(2.5, dtype=torch.float64), dtypes.float64),
        (torch.arange(6.0).reshape(2, 3).t(), dtypes.float32),
    ],
)
def test_from_dlpack_and_tensor_of_a_torch_tensor(t, dtype):
    for u in (Tensor.from_dlpack(t), uopkit.from_dlpack(t), Tensor(t)):
        assert u.dtype == dtype and u.shape == tuple(t.shape)
        np.testing.assert_array_equal(u.float().numpy(), t.float().numpy())


def test_from_dlpack_copies():
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    u = Tensor.from_dlpack(t)
    with torch.no_grad():
        t += 10
    assert u.tolist() == [1.0, 2.0] and not u.requires_grad
    assert Tensor(torch.tensor([1, 2]), dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.from_dlpack(np.arange(3)).tolist() == [0, 1, 2]


def test_from_dlpack_refusals():
    with pytest.raises(TypeError, match="__dlpack__"):
        Tensor.from_dlpack([1, 2])

    class OnGpu:
        def __dlpack__(self, **kwargs):
            raise AssertionError("not read")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match="CUDA memory"):
        Tensor.from_dlpack(OnGpu())
    with pytest.raises(BufferError, match="CUDA memory"):
        Tensor(OnGpu())


def test_tensor_of_an_unknown_object_names_its_class():
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"test_interop\.test_tensor_of_an_unknown_object_names_its_class.*from_dlpack"):
        Tensor(Thing())

    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return np.array([1, 2], dtype=np.int16)

    assert Tensor(ArrayLike()).dtype == dtypes.int16


def test_from_numpy():
    a = np.array([1, 2], dtype=np.int64)
    for make in (Tensor.from_numpy, uopkit.from_numpy):
        u = make(a)
        assert u.dtype == dtypes.int64
        a[0] = 9
        # (a copy, where torch's shares the array's memory)
        assert u.tolist() == [1, 2]
        a[0] = 1
    with pytest.raises(TypeError, match="numpy.ndarray"):
        Tensor.from_numpy([1, 2])


@pytest.mark.parametrize(
    "dtype, count, offset",
    [
        ("uint8", -1, 0),
        ("int16", -1, 1),
        ("int16", 2, 1),
        ("int32", 2, 0),
        ("float32", -1, 1),
        ("bfloat16", 3, 2),
        ("bool", 4, 0),
        ("int64", 1, 1),
        ("uint8", -5, 3),
    ],
)
def test_frombuffer_reads_bytes_as_torchs(dtype, count, offset):
    import array

    raw = bytearray(range(1, 10))
    for buffer in (raw, bytes(raw), memoryview(raw), array.array("B", raw)):
        want = torch.frombuffer(buffer, dtype=getattr(torch, dtype), count=count, offset=offset)
        got = uopkit.frombuffer(buffer, dtype=getattr(dtypes, dtype), count=count, offset=offset)
        assert got.dtype == to_dtype(dtype) and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    assert Tensor.frombuffer(bytes([0, 1, 1, 0]), dtype=dtypes.bool).tolist() == [False, True, True, False]
    # a copy: a later write into the buffer doesn't show (torch's shares the memory)
    got = Tensor.frombuffer(raw, dtype=dtypes.uint8)
    raw[0] = 77
    assert got.tolist()[0] == 1


def test_bools_read_from_raw_bytes_are_torchs():
    # a byte past 0 and 1 read as a bool (view(bool) of uint8, np.frombuffer(..., bool), frombuffer) is True, and
    # sums, casts and bitwise ops see it as torch's do: they saw the byte (a sum of 258, 2.0 as a float, 2 & True False)
    raw = bytes([1, 0, 2, 255, 0, 128])
    mask = torch.tensor([True, True, True, False, True, True])
    # (a view(bool) of a uint8 tensor keeps its bytes, for a view back to uint8 as torch's: not compared here)
    ours = [
        Tensor(np.frombuffer(raw, np.bool_)),
        Tensor.frombuffer(raw, dtype=dtypes.bool),
    ]
    theirs = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(torch.bool)
    for t in ours:
        assert t.dtype == dtypes.bool
        assert t.sum().item() == theirs.sum().item()
        np.testing.assert_array_equal(t.float().numpy(), theirs.float().numpy())
        np.testing.assert_array_equal(t.int().numpy(), theirs.int().numpy())
        np.testing.assert_array_equal((t & Tensor(mask.numpy())).numpy(), (theirs & mask).numpy())
        np.testing.assert_array_equal((t ^ True).numpy(), (theirs ^ True).numpy())


def test_frombuffer_refusals_are_torchs():
    import warnings

    raw = bytearray(range(1, 10))
    for kwargs in (
        {"dtype": "int16"},  # 9 bytes aren't whole int16s
        {"dtype": "int32", "count": 3},  # past the end
        {"dtype": "uint8", "offset": 9},
        {"dtype": "uint8", "offset": -1},
        {"dtype": "uint8", "count": 0},
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ValueError):
                torch.frombuffer(raw, **{**kwargs, "dtype": getattr(torch, kwargs["dtype"])})
        with pytest.raises(ValueError):
            Tensor.frombuffer(raw, **kwargs)
    for empty, torch_type in ((bytearray(), ValueError), ([1, 2], ValueError)):
        with pytest.raises(torch_type):
            torch.frombuffer(empty, dtype=torch.uint8)
        with pytest.raises(torch_type):
            Tensor.frombuffer(empty, dtype=dtypes.uint8)


def test_as_tensor_and_is_tensor_are_torchs():
    # torch.as_tensor returns a tensor itself when nothing changes (the same object, its graph kept), converts it with
    # .to(...) otherwise, and takes a numpy array's dtype; uopkit.as_tensor is Tensor.as_tensor, as torch's name
    t, theirs = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    assert uopkit.as_tensor(t) is t and torch.as_tensor(theirs) is theirs
    assert Tensor.as_tensor(t, dtype=dtypes.float32, device="cpu") is t
    ours, want = Tensor.as_tensor(t, dtype=torch.float64), torch.as_tensor(theirs, dtype=torch.float64)
    assert ours.dtype == to_dtype(want.dtype) and ours.requires_grad == want.requires_grad
    ours.sum().backward()
    want.sum().backward()
    assert t.grad.tolist() == theirs.grad.tolist()
    for data, dtype in [(np.array([1, 2], np.int64), None), (np.array([1.5]), None), ([1, 2.5], None), (True, None)]:
        ours, want = uopkit.as_tensor(data, dtype=dtype), torch.as_tensor(data, dtype=dtype)
        assert ours.dtype == to_dtype(want.dtype) and ours.tolist() == want.tolist()
    ours, want = uopkit.as_tensor([[1, 2]], dtype=torch.float16), torch.as_tensor([[1, 2]], dtype=torch.float16)
    assert ours.dtype == dtypes.float16 and ours.tolist() == want.tolist()
    # (torch's as_tensor of a numpy array shares its memory; ours copies, as from_numpy)
    for make in (Tensor.is_tensor, uopkit.is_tensor):
        assert make(t) and make(uopkit.nn.Parameter(Tensor.zeros(1))) and not make([1.0]) and not make(theirs)


def test_tensor_constructor_is_torchs():
    # torch.tensor(data, dtype=, device=, requires_grad=): always a copy; a tensor is copied detached
    std = [0.229, 0.224, 0.225]
    ours, want = Tensor.tensor(std).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)
    assert ours.dtype == to_dtype(want.dtype) and ours.shape == tuple(want.shape) and ours.tolist() == want.tolist()
    ours, want = Tensor.tensor([[1, 2]], dtype=torch.float16), torch.tensor([[1, 2]], dtype=torch.float16)
    assert ours.dtype == dtypes.float16 and ours.tolist() == want.tolist()
    leaf, theirs = Tensor.tensor([0.5, 1.5], requires_grad=True), torch.tensor([0.5, 1.5], requires_grad=True)
    (leaf * leaf).sum().backward()
    (theirs * theirs).sum().backward()
    assert leaf.is_leaf and leaf.grad.tolist() == theirs.grad.tolist()
    t = Tensor([1.0, 2.0], requires_grad=True)
    copy = Tensor.tensor(t, dtype=dtypes.float64)
    assert copy.dtype == dtypes.float64 and not copy.requires_grad and copy.tolist() == [1.0, 2.0]
    w = Tensor.ones(2).contiguous().realize()
    copy = Tensor.tensor(w)
    w.assign(w * 3).realize()
    assert copy.tolist() == [1.0, 1.0]
    a = np.array([1, 2], np.int64)
    copy = Tensor.tensor(a)
    a[0] = 5
    assert copy.dtype == dtypes.int64 and copy.tolist() == [1, 2]
    with pytest.raises(RuntimeError):
        Tensor.tensor([1, 2], requires_grad=True)


def test_subpackages_are_attributes_of_a_bare_import():
    # `import torch; torch.nn.functional.relu(x)`: after a bare `import uopkit` (a fresh interpreter, so no other
    # test imported them first), nn, distributions, data and func are reached as attributes
    import subprocess
    import sys

    code = (
        "import uopkit, sys\n"
        "assert 'uopkit.nn' not in sys.modules\n"
        "x = uopkit.Tensor([-1.0, 2.0])\n"
        "print(uopkit.nn.functional.relu(x).tolist(), uopkit.distributions.Normal(0.0, 1.0).mean.item(),\n"
        "      uopkit.data.DataLoader.__name__, callable(uopkit.func.grad), hasattr(uopkit, 'no_such_name'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[0.0,", "2.0]", "0.0", "DataLoader", "True", "False"]


@pytest.mark.parametrize("kind", [">i4", ">u2", ">i8", ">f2", ">f4", ">f8"])
def test_big_endian_numpy_arrays_keep_their_values(kind):
    # (np.frombuffer(data, ">i4") of a file format such as MNIST's): torch.tensor refuses the byte order, so compare
    # with torch's tensor of the same values in the native order
    a = np.array([[1, 2, 300], [7, 0, 65]], dtype=kind)[:, ::-1]
    theirs = torch.tensor(a.astype(a.dtype.newbyteorder("=")))
    for u in (Tensor(a), Tensor.from_numpy(a), Tensor(a[0, 0])):
        want = theirs if u.ndim else theirs[0, 0]
        assert u.dtype == to_dtype(want.dtype)
        assert u.tolist() == want.tolist()


def test_numpy_force():
    x = Tensor([1.0, 2.0], requires_grad=True)
    np.testing.assert_array_equal(x.numpy(force=True), [1.0, 2.0])


# ---- torch's devices and dtypes as arguments


def test_device_has_torch_device_attributes():
    d = Tensor([1.0], device="cpu").device
    assert isinstance(d, str) and d == "CPU" and str(d) == "CPU" and hash(d) == hash("CPU")
    assert (d.type, d.index) == ("cpu", 0)
    assert (DeviceName("CUDA:1").type, DeviceName("CUDA:1").index) == ("cuda", 1)
    assert Tensor.zeros(2, device=d).device == "CPU"


def test_torch_devices_are_taken_by_name():
    assert Tensor.zeros(2, device=torch.device("cpu")).device == "CPU"
    assert Tensor([1.0], device=torch.device("cpu", 0)).device == "CPU"
    assert Tensor.zeros(2).to(torch.device("cpu")).device == "CPU"
    assert Linear(2, 2).to(torch.device("cpu")).weight.device == "CPU"
    with pytest.raises(TypeError, match="torch.device"):
        Tensor.zeros(2, device=3.5)


@pytest.mark.parametrize(
    "kind, want", [(bool, dtypes.bool), (int, dtypes.int32), (float, dtypes.float64), (torch.float16, dtypes.float16)]
)
def test_python_types_and_torch_dtypes_as_dtypes(kind, want):
    # Python's int is our default int (int32), where torch's is int64; float is float64, as torch's and numpy's
    assert Tensor.zeros(3, dtype=kind).dtype == want
    assert Tensor([1, 0], dtype=kind).dtype == want
    assert Tensor.ones(2).to(kind).dtype == want
    assert Tensor.ones(2).to(dtype=kind).dtype == want
    assert Tensor.arange(3, dtype=kind).dtype == want


def test_torch_dtypes_elsewhere():
    assert Tensor.ones(2).type(torch.float64).dtype == dtypes.float64
    assert Tensor.ones(2).view(torch.int32).dtype == dtypes.int32
    assert Linear(2, 2).to(torch.float64).weight.dtype == dtypes.float64
    with pytest.raises(ValueError, match="torch.quint8 has no uopkit dtype"):
        Tensor.zeros(2, dtype=torch.quint8)
    assert Tensor.zeros(2, dtype=torch.complex64).dtype == dtypes.complex64  # (a ComplexTensor, docs/complex.md)
    with pytest.raises(TypeError, match="expected a device name, a dtype"):
        Tensor.ones(2).to(np.float32)


# ---- torch's size= keyword and tensors as sizes


@pytest.mark.parametrize(
    "make",
    [
        lambda size: Tensor.zeros(size=size),
        lambda size: Tensor.ones(size=size),
        lambda size: Tensor.empty(size=size),
        lambda size: Tensor.full(size=size, fill_value=2.0),
        lambda size: Tensor.rand(size=size),
        lambda size: Tensor.randn(size=size),
        lambda size: Tensor.randint(0, 10, size=size),
        lambda size: Tensor.randint(10, size=size),
        lambda size: Tensor.randint(size=size, high=3),
    ],
)
def test_size_keyword(make):
    assert make((2, 3)).shape == (2, 3)
    assert make([4]).shape == (4,)


def test_size_keyword_with_a_positional_shape_raises():
    with pytest.raises(TypeError, match="shape twice"):
        Tensor.zeros(2, size=(3,))
    with pytest.raises(TypeError, match="shape twice"):
        Tensor.full((2,), 1.0, size=(2,))


def test_tensors_as_sizes():
    n = Tensor(3)
    assert Tensor.zeros(n).shape == (3,)
    assert Tensor.zeros((Tensor(2), 3)).shape == (2, 3)
    assert Tensor.ones(Tensor([1, 1, 0]).sum(), 2).shape == (2, 2)
    assert Tensor.full(n, 1.0).shape == (3,)
    with pytest.raises(TypeError, match="only integer tensors"):
        Tensor.zeros(Tensor(3.0))
    with pytest.raises(TypeError, match="ambiguous"):
        Tensor.zeros(Tensor([2, 3]))


@pytest.mark.parametrize(
    "name",
    ["float32", "float", "float64", "double", "float16", "half", "bfloat16", "int8", "uint8", "int16", "short",
     "int32", "int", "int64", "long", "bool", "complex64", "cfloat", "complex128", "cdouble"],
)  # fmt: skip
def test_torch_dtype_names_on_the_module_and_the_class(name):
    # a port that imports uopkit as torch writes `torch.float32`, one that renames `torch.` to `Tensor.` writes
    # `Tensor.cfloat`: both are the dtype of torch's name (a cast method of that name stands for its dtype)
    theirs = getattr(torch, name)
    ours = Tensor.zeros(2, dtype=getattr(uopkit, name))
    assert ours.dtype == Tensor.zeros(2, dtype=getattr(Tensor, name)).dtype
    assert ours.dtype.itemsize == theirs.itemsize
    assert (ours.is_floating_point(), ours.is_complex()) == (theirs.is_floating_point, theirs.is_complex)
    if name != "bfloat16":  # (torch has no numpy bfloat16)
        assert ours.numpy().dtype == torch.zeros(2, dtype=theirs).numpy().dtype

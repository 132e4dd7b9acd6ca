"""The device lines of torch programs, ported (`torch.` -> `Tensor.`, or `import uopkit as torch`): torch.device,
torch.cuda's questions and switches, torch.backends' flags, the default device; against torch on this machine where
torch answers, and the errors for a CUDA device that can't run here."""

import doctest
import pickle
import warnings

import pytest

import uopkit
import uopkit.backends
import uopkit.cuda
import uopkit.device
from uopkit import Tensor, nn
from uopkit.device import Device, DeviceError, DeviceName, TorchDevice
from uopkit.plugin.manager import get_manager
from uopkit.tensor.torch_copies_settings import _Settings

torch = pytest.importorskip("torch")

NO_CUDA = not uopkit.cuda.is_available()
needs_no_cuda = pytest.mark.skipif(not NO_CUDA or torch.cuda.is_available(), reason="compares CUDA-less answers")


def test_docstring_examples():
    for module in (uopkit.cuda, uopkit.backends, uopkit.device):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize("make", [Tensor.device, uopkit.device])
@pytest.mark.parametrize(
    "args", [("cuda",), ("cuda", 0), ("cuda:1",), ("cpu",), ("cpu", 0), ("cpu:0",), ("cuda", 2), ("mps",)]
)
def test_device_values_match_torch(make, args):
    ours, theirs = make(*args), torch.device(*args)
    assert (ours.type, ours.index, str(ours), repr(ours)) == (theirs.type, theirs.index, str(theirs), repr(theirs))
    assert make(ours) == ours and TorchDevice(theirs) == ours and ours == theirs
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert isinstance(ours, Tensor.device) and isinstance(ours, uopkit.device)


@pytest.mark.parametrize(
    "args, error",
    [(("foo",), RuntimeError), (("cuda:x",), RuntimeError), (("cuda:-1",), RuntimeError), (("cpu", -1), RuntimeError),
     ((" cpu",), RuntimeError), (("cuda", "1"), TypeError), (("cuda:1", 1), RuntimeError)],
)  # fmt: skip
def test_device_errors_match_torch_types(args, error):
    with pytest.raises(error):
        torch.device(*args)
    with pytest.raises(error, match="device"):
        Tensor.device(*args)


def test_device_compares_with_names_and_tensor_devices():
    # (a departure: torch's device is never equal to a str; uopkit's tensors' devices are strs)
    x = Tensor([1.0], device="cpu")
    cpu = Tensor.device("cpu")
    assert cpu == "cpu" and cpu == "CPU" and cpu == x.device and x.device == cpu and cpu != "cuda"
    assert Tensor.device("cuda") == Tensor.device("cuda:0") == "CUDA" and Tensor.device("cuda:1") != "cuda"
    assert {cpu: 1}[x.device] == 1 and hash(cpu) == hash(x.device)
    assert isinstance(x.device, Tensor.device) and x.device.type == cpu.type
    assert cpu != 1 and cpu != None  # noqa: E711


def test_device_is_taken_wherever_a_device_is():
    cpu = Tensor.device("cpu")
    assert Tensor.zeros(2, device=cpu).device == "CPU"
    assert Tensor([1.0]).to(cpu, non_blocking=True).device == "CPU"
    assert Tensor.ones(2).to(cpu, Tensor.float64).dtype == uopkit.dtypes.float64
    layer = nn.Linear(2, 2).to(cpu)
    assert layer.weight.device == cpu
    with Tensor.device("cpu"):
        assert Tensor.zeros(1).device == "CPU"


def test_the_class_and_instance_attributes_stay_apart():
    # on the class, torch's device type and cuda namespace; on a tensor, its device and its cuda() method
    x = Tensor([1.0], device="cpu")
    assert Tensor.device is TorchDevice and Tensor.cuda is uopkit.cuda
    assert type(x.device) is DeviceName and callable(x.cuda)
    assert isinstance(Tensor.__dict__["device"], property) and nn.Parameter.device is TorchDevice
    # uopkit.device is still the device module
    assert uopkit.device.Device is Device


def test_class_attribute_can_still_be_patched(monkeypatch):
    monkeypatch.setattr(Tensor, "device", property(lambda self: DeviceName("CUDA")))
    assert Tensor([1.0], device="cpu").device == "CUDA" and Tensor.device is TorchDevice
    monkeypatch.undo()
    assert Tensor([1.0], device="cpu").device == "CPU" and Tensor.device is TorchDevice


def test_device_line_ports():
    device = Tensor.device("cuda" if Tensor.cuda.is_available() else "cpu")
    theirs = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if NO_CUDA and not torch.cuda.is_available():
        assert str(device) == str(theirs) == "cpu"
    assert Tensor.randn(2, 2).to(device).device == device
    with uopkit.autocast(device_type=device.type):
        pass


@needs_no_cuda
@pytest.mark.parametrize(
    "call",
    ["is_available()", "device_count()", "is_initialized()", "is_bf16_supported()", "manual_seed(0)",
     "manual_seed_all(0)", "empty_cache()", "memory_allocated()", "max_memory_allocated()", "memory_reserved()"],
)  # fmt: skip
def test_cuda_answers_match_torch_without_cuda(call):
    ours = eval(f"uopkit.cuda.{call}")
    theirs = eval(f"torch.cuda.{call}")
    assert ours == theirs and type(ours) is type(theirs)
    assert eval(f"Tensor.cuda.{call}") == ours


@needs_no_cuda
@pytest.mark.parametrize("call", ["synchronize()", "current_device()", "get_device_name(0)", "set_device(0)"])
def test_cuda_calls_that_need_a_gpu_raise_and_say_why(call):
    with pytest.raises(Exception):  # noqa: B017 (torch: AssertionError or AttributeError, by build)
        eval(f"torch.cuda.{call}")
    with pytest.raises(RuntimeError, match=r"no CUDA device can be used here: .*uopkit devices"):
        eval(f"Tensor.cuda.{call}")


def test_cuda_manual_seed_leaves_the_stream_without_cuda():
    if not NO_CUDA:
        pytest.skip("seeds the shared stream where CUDA runs")
    Tensor.manual_seed(3)
    Tensor.rand(2).realize()
    second = Tensor.rand(2).tolist()
    Tensor.manual_seed(3)
    Tensor.rand(2).realize()
    Tensor.cuda.manual_seed_all(3)
    assert Tensor.rand(2).tolist() == second
    with pytest.raises(TypeError, match="seed"):
        Tensor.cuda.manual_seed("3")


def test_missing_cuda_backend_says_what_to_install(monkeypatch):
    manager = get_manager()
    real = manager.status
    monkeypatch.setattr(manager, "status", lambda name: None if name == "CUDA" else real(name))
    assert not uopkit.cuda.is_available() and uopkit.cuda.device_count() == 0
    with pytest.raises(RuntimeError, match=r"CUDA backend is not installed \(pip install ./plugins/cuda\)"):
        uopkit.cuda.synchronize()
    with pytest.raises(DeviceError, match=r"pip install ./plugins/cuda"):
        Device._usable_status("CUDA")


@needs_no_cuda
def test_cuda_device_without_cuda_says_why():
    with pytest.raises(DeviceError, match="CUDA .*cannot be used here"):
        Tensor.zeros(2, device=Tensor.device("cuda")).numpy()
    with pytest.raises(RuntimeError, match=r"device\(1\): an index alone names a CUDA device"):
        Tensor.device(1)


@needs_no_cuda
def test_cuda_amp_disabled_without_cuda_as_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.cuda.amp.GradScaler()
        ours = Tensor.cuda.amp.GradScaler()
        assert ours.is_enabled() == theirs.is_enabled() is False
        assert uopkit.cuda.amp.autocast().enabled is False
    with pytest.warns(UserWarning, match="cuda.amp.GradScaler: no CUDA device"):
        uopkit.cuda.amp.GradScaler()


@pytest.mark.parametrize(
    "flag",
    ["cudnn.benchmark", "cudnn.deterministic", "cudnn.enabled", "cudnn.allow_tf32", "cuda.matmul.allow_tf32",
     "cuda.matmul.allow_fp16_reduced_precision_reduction", "mkldnn.enabled"],
)  # fmt: skip
def test_backends_flags_default_and_set_as_torch(flag, monkeypatch):
    monkeypatch.setattr(_Settings, "matmul_precision", _Settings.matmul_precision)
    ours, theirs = eval(f"uopkit.backends.{flag}"), eval(f"torch.backends.{flag}")
    assert ours == theirs and type(ours) is bool and eval(f"Tensor.backends.{flag}") == ours
    owner, name = flag.rsplit(".", 1)
    target = eval(f"uopkit.backends.{owner}")
    try:
        setattr(target, name, not ours)
        assert eval(f"uopkit.backends.{flag}") is (not ours)
    finally:
        setattr(target, name, ours)


def test_backends_questions_and_tf32_link(monkeypatch):
    monkeypatch.setattr(_Settings, "matmul_precision", _Settings.matmul_precision)
    for call in ("mps.is_available()", "mps.is_built()", "openmp.is_available()", "cudnn.version()"):
        assert eval(f"uopkit.backends.{call}") == eval(f"torch.backends.{call}"), call
    assert uopkit.backends.cudnn.is_available() is False
    uopkit.backends.cuda.matmul.allow_tf32 = True
    assert Tensor.get_float32_matmul_precision() == "high"
    uopkit.set_float32_matmul_precision("highest")
    assert uopkit.backends.cuda.matmul.allow_tf32 is False
    with uopkit.backends.cudnn.flags(enabled=False):
        assert uopkit.backends.cudnn.enabled is False
    assert uopkit.backends.cudnn.enabled is True


def test_default_device_lines():
    if NO_CUDA:
        assert uopkit.get_default_device() == Tensor.device(torch.get_default_device()) == Tensor.device("cpu")
    Tensor.set_default_device(Tensor.device("cpu"))
    try:
        assert Tensor.zeros(1).device == "CPU"
    finally:
        Tensor.set_default_device(None)
    assert uopkit.get_default_dtype() == Tensor.float32 == uopkit.dtypes.float32

"""torch_load reads what torch.save writes (zip and legacy formats, every dtype, views into shared storages, real
state dicts, nested containers) and torch_save writes what torch.load(weights_only=True) reads; hostile or broken files
raise clearly without running anything."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes, nn
from uopkit.device import DeviceError
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.nn.stored_bytes import stored_bytes
from uopkit.nn.torch_format import TorchFormatError, UnsafePickleError, torch_load, torch_save

torch = pytest.importorskip("torch")

TORCH_TO_UOPKIT = {
    torch.bool: dtypes.bool,
    torch.uint8: dtypes.uint8,
    torch.int8: dtypes.int8,
    torch.int16: dtypes.int16,
    torch.int32: dtypes.int32,
    torch.int64: dtypes.int64,
    torch.uint16: dtypes.uint16,
    torch.uint32: dtypes.uint32,
    torch.uint64: dtypes.uint64,
    torch.float16: dtypes.float16,
    torch.bfloat16: dtypes.bfloat16,
    torch.float32: dtypes.float32,
    torch.float64: dtypes.float64,
}
UOPKIT_TO_TORCH = {v: k for k, v in TORCH_TO_UOPKIT.items()}


def _sample(dtype, shape=(3, 4), seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
        flat = t.view(-1)
        # the values a bit-exact copy must keep: -0.0, inf, nan
        flat[:3] = torch.tensor([-0.0, float("inf"), float("nan")], dtype=dtype)
        return t
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def _torch_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def assert_same(ours: Tensor, theirs: torch.Tensor) -> None:
    """Same dtype, shape and bytes (NaN payloads, -0.0 and bfloat16 included)."""
    assert isinstance(ours, Tensor), type(ours)
    assert ours.dtype == TORCH_TO_UOPKIT[theirs.dtype]
    assert ours.shape == tuple(theirs.shape)
    assert stored_bytes(ours) == _torch_bytes(theirs)


def _roundtrip_torch(obj, **kwargs):
    f = io.BytesIO()
    torch.save(obj, f, **kwargs)
    return torch_load(io.BytesIO(f.getvalue()))


# ---------------------------------------------------------------------------------------------------------------------
# torch.save -> torch_load


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("dtype", list(TORCH_TO_UOPKIT), ids=str)
def test_each_dtype(dtype, legacy):
    t = _sample(dtype)
    loaded = _roundtrip_torch({"t": t}, _use_new_zipfile_serialization=not legacy)
    assert_same(loaded["t"], t)
    assert loaded["t"].device == Device.DEFAULT


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_views_into_shared_storage(legacy):
    a = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {
        "a": a,
        "tail": a[1:],
        "t": a.t(),
        "every_other": a[:, ::2],
        "inner_t": a[1:, 2:].t(),
        "row": a[2],
        "elem": a[3, 5],
        "expanded": torch.arange(3.0).expand(2, 3),
        "permuted": torch.arange(24).reshape(2, 3, 4).permute(2, 0, 1),
    }
    loaded = _roundtrip_torch(views, _use_new_zipfile_serialization=not legacy)
    assert list(loaded) == list(views)
    for k, v in views.items():
        assert_same(loaded[k], v)


def test_zero_dim_and_empty():
    objs = {
        "scalar": torch.tensor(3.5),
        "int_scalar": torch.tensor(-7, dtype=torch.int64),
        "bf16_scalar": torch.tensor(1.25, dtype=torch.bfloat16),
        "empty": torch.zeros(0),
        "empty2": torch.zeros(2, 0, 3, dtype=torch.int32),
        "empty_view": torch.arange(5.0)[5:],
    }
    loaded = _roundtrip_torch(objs)
    for k, v in objs.items():
        assert_same(loaded[k], v)
    assert loaded["scalar"].item() == 3.5


def test_nested_containers_and_python_values():
    p = torch.nn.Parameter(torch.randn(2, 3))
    obj = {
        "epoch": 7,
        "big": 2**80,
        "lr": 0.125,
        "name": "résumé ✓",
        "flags": [True, False, None],
        "shape": torch.Size([2, 3]),
        "dtype": torch.float16,
        "device": torch.device("cpu"),
        "pair": (1, (2.5, "x")),
        "ordered": OrderedDict([("b", torch.ones(2)), ("a", [torch.zeros(1, dtype=torch.int64), {"deep": p}])]),
        "param": p,
        3: "int key",
    }
    loaded = _roundtrip_torch(obj)
    assert loaded["epoch"] == 7 and loaded["big"] == 2**80 and loaded["lr"] == 0.125
    assert loaded["name"] == "résumé ✓" and loaded["flags"] == [True, False, None] and loaded[3] == "int key"
    assert loaded["shape"] == (2, 3) and loaded["dtype"] == dtypes.float16 and loaded["device"] == "cpu"
    assert loaded["pair"] == (1, (2.5, "x"))
    assert type(loaded["ordered"]) is OrderedDict and list(loaded["ordered"]) == ["b", "a"]
    assert_same(loaded["ordered"]["b"], obj["ordered"]["b"])
    assert_same(loaded["ordered"]["a"][0], obj["ordered"]["a"][0])
    assert_same(loaded["ordered"]["a"][1]["deep"], p.detach())
    # a Parameter comes back as a Tensor that requires grad; the same one twice is one Tensor
    assert_same(loaded["param"], p.detach())
    assert loaded["param"].requires_grad
    assert loaded["param"] is loaded["ordered"]["a"][1]["deep"]


def test_training_checkpoint_with_optimizer_state():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}
    loaded = _roundtrip_torch(ckpt)
    for k, v in ckpt["model"].items():
        assert_same(loaded["model"][k], v)
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 0.1
    assert loaded["optimizer"]["param_groups"][0]["params"] == [0, 1]
    assert_same(loaded["optimizer"]["state"][0]["momentum_buffer"], ckpt["optimizer"]["state"][0]["momentum_buffer"])


def _models():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 5)
    )
    # running statistics that are not the defaults
    with torch.no_grad():
        theirs[1].running_mean.uniform_(-1, 1)
        theirs[1].running_var.uniform_(0.5, 2)
        theirs[1].num_batches_tracked.fill_(12)
    ours = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 5))
    return ours, theirs.eval()


def test_real_model_state_dict_into_uopkit_model(tmp_path):
    ours, theirs = _models()
    path = tmp_path / "model.pt"
    torch.save(theirs.state_dict(), path)
    sd = torch_load(path)
    assert type(sd) is OrderedDict and list(sd) == list(theirs.state_dict())
    for k, v in theirs.state_dict().items():
        assert_same(sd[k], v)
    load_state_dict(ours, sd)
    ours.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    with torch.no_grad():
        ref = theirs(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_map_location():
    t = torch.arange(4.0)
    assert torch_load(_saved({"t": t}), map_location="cpu")["t"].device == "CPU"
    assert torch_load(_saved({"t": t}), map_location="CPU")["t"].device == "CPU"
    assert torch_load(_saved({"t": t}), map_location={"cpu": "CPU"})["t"].device == "CPU"
    with pytest.raises(TypeError, match="map_location"):
        torch_load(_saved({"t": t}), map_location=3)
    with pytest.raises(DeviceError, match="NOSUCHDEV"):
        torch_load(_saved({"t": t}), map_location="nosuchdev")


def test_map_location_as_torch_writes_it():
    # the idioms of torch scripts: torch.device, and a function (storage, location) that returns the storage (kept on
    # the CPU, as torch keeps it); ours may also return a device
    t = torch.arange(4.0)
    for map_location in (torch.device("cpu"), lambda storage, loc: storage):
        loaded = torch_load(_saved({"t": t}), map_location=map_location)["t"]
        assert loaded.device == "CPU"
        assert loaded.tolist() == torch.load(_saved({"t": t}), map_location=map_location)["t"].tolist()
    assert torch_load(_saved({"t": t}), map_location=lambda storage, loc: "cpu")["t"].device == "CPU"
    seen = []
    torch_load(_saved({"t": t}), map_location=lambda storage, loc: seen.append(loc) or storage)
    assert seen == ["cpu"]
    with pytest.raises(TypeError, match="map_location"):
        torch_load(_saved({"t": t}), map_location=lambda storage, loc: 3)


def test_weights_only_and_mmap_are_accepted(tmp_path):
    # torch.load(f, weights_only=True) and mmap=... are routine in torch scripts; the file reads the same
    saved = {"w": torch.arange(6.0).reshape(2, 3), "step": 3}
    path = tmp_path / "ckpt.pt"
    torch.save(saved, path)
    for kwargs in ({"weights_only": True}, {"weights_only": False}, {"mmap": False}, {"mmap": True}):
        theirs = torch.load(path, **kwargs)
        ours = torch_load(path, **kwargs)
        assert ours["step"] == theirs["step"]
        assert_same(ours["w"], theirs["w"])
    with pytest.raises(TypeError, match="weights_only"):
        torch_load(_saved(saved), weights_only="yes")


def _saved(obj, **kwargs) -> io.BytesIO:
    f = io.BytesIO()
    torch.save(obj, f, **kwargs)
    return io.BytesIO(f.getvalue())


def test_bare_storage_is_a_flat_tensor():
    loaded = torch_load(_saved({"s": torch.arange(3, dtype=torch.int16).untyped_storage()}))
    assert loaded["s"].dtype == dtypes.uint8 and loaded["s"].tolist() == [0, 0, 1, 0, 2, 0]


def test_unsupported_dtype_is_named():
    with pytest.raises(TorchFormatError, match="ComplexFloatStorage"):
        torch_load(_saved({"c": torch.zeros(2, dtype=torch.complex64)}))


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda: torch.eye(2).to_sparse(), "sparse"),
        (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), "quantized"),
    ],
    ids=["sparse", "quantized"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # (torch deprecates its quantized tensors)
def test_unsupported_tensor_kinds_are_named(make, what):
    # torch.load(weights_only=True) reads these: ours says what it can't read, not that the file is unsafe
    saved = {"t": make()}
    torch.load(_saved(saved), weights_only=True)
    with pytest.raises(TorchFormatError, match=what) as caught:
        torch_load(_saved(saved))
    assert not isinstance(caught.value, UnsafePickleError)


# ---------------------------------------------------------------------------------------------------------------------
# torch_save -> torch.load


def _torch_load(f: io.BytesIO | str | os.PathLike, **kwargs):
    if isinstance(f, io.BytesIO):
        f = io.BytesIO(f.getvalue())
    return torch.load(f, weights_only=True, **kwargs)


@pytest.mark.parametrize("dtype", list(UOPKIT_TO_TORCH), ids=str)
def test_save_each_dtype(dtype):
    ref = _sample(UOPKIT_TO_TORCH[dtype], seed=3)
    ours = torch_load(_saved({"t": ref}))["t"]
    f = io.BytesIO()
    torch_save({"t": ours, "t_T": ours.T}, f)
    back = _torch_load(f)
    assert back["t"].dtype == ref.dtype and _torch_bytes(back["t"]) == _torch_bytes(ref)
    assert back["t_T"].shape == ref.T.shape and _torch_bytes(back["t_T"]) == _torch_bytes(ref.T)
    assert not back["t"].requires_grad


def test_save_nested_containers_zero_dim_and_empty(tmp_path):
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    obj = {
        "model": OrderedDict([("w", a), ("w_view", a[1:, ::2]), ("same", a)]),
        "scalar": Tensor(2.5),
        "empty": Tensor.zeros(2, 0, 3),
        "meta": {"epoch": 3, "big": -(2**70), "lr": 1e-3, "name": "net ✓", "ok": True, "none": None},
        "list": [1, (2, "three"), [Tensor([1, 2, 3], dtype="int64")]],
        "dtype": dtypes.bfloat16,
        "np_scalar": np.float32(0.5),
    }
    path = tmp_path / "ours.pt"
    torch_save(obj, path)
    back = torch.load(path, weights_only=True)
    assert type(back["model"]) is OrderedDict and list(back["model"]) == ["w", "w_view", "same"]
    np.testing.assert_array_equal(back["model"]["w"].numpy(), a.numpy())
    np.testing.assert_array_equal(back["model"]["w_view"].numpy(), a.numpy()[1:, ::2])
    assert back["model"]["w_view"].is_contiguous()
    # the same Tensor twice is one storage
    assert back["model"]["same"].untyped_storage().data_ptr() == back["model"]["w"].untyped_storage().data_ptr()
    assert back["scalar"].shape == () and back["scalar"].item() == 2.5
    assert back["empty"].shape == (2, 0, 3) and back["empty"].stride() == torch.zeros(2, 0, 3).stride()
    assert back["meta"] == obj["meta"]
    assert back["list"][:2] == [1, (2, "three")] and back["list"][2][0].tolist() == [1, 2, 3]
    assert back["list"][2][0].dtype == torch.int64
    assert back["dtype"] is torch.bfloat16 and back["np_scalar"] == 0.5
    # torch's memory-mapped reader needs each storage 64-byte aligned
    mapped = torch.load(path, weights_only=True, mmap=True)
    np.testing.assert_array_equal(mapped["model"]["w"].numpy(), a.numpy())
    with zipfile.ZipFile(path) as zf:
        assert zf.read("archive/byteorder") == b"little" and zf.read("archive/version") == b"3\n"
        for info in zf.infolist():
            if info.filename.startswith("archive/data/"):
                start = info.header_offset + 30 + len(info.filename) + len(_local_extra(path, info))
                assert start % 64 == 0


def _local_extra(path, info) -> bytes:
    with open(path, "rb") as f:
        f.seek(info.header_offset + 28)
        n = int.from_bytes(f.read(2), "little")
        f.seek(info.header_offset + 30 + len(info.filename))
        return f.read(n)


def test_uopkit_model_into_torch_model():
    ours, theirs = _models()
    for t in get_state_dict(ours).values():
        t.assign(Tensor(np.random.default_rng(5).standard_normal(t.shape).astype(np.float32)).cast(t.dtype)).realize()
    f = io.BytesIO()
    torch_save(get_state_dict(ours), f)
    theirs.load_state_dict(_torch_load(f))
    ours.eval()
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 6)).astype(np.float32)
    with torch.no_grad():
        ref = theirs(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_save_load_roundtrip_without_torch():
    obj = {"a": Tensor([[1.0, 2.0], [3.0, 4.0]], dtype="bfloat16").T, "u": Tensor([1, 65535], dtype="uint16")}
    f = io.BytesIO()
    torch_save(obj, f)
    back = torch_load(io.BytesIO(f.getvalue()))
    assert back["a"].dtype == dtypes.bfloat16 and back["a"].tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert back["u"].dtype == dtypes.uint16 and back["u"].tolist() == [1, 65535]


def test_save_bytes_as_torch_reads_them():
    saved = {"raw": b"ab\xff\x00", "empty": b"", "nested": [b"\x80"]}
    f = io.BytesIO()
    torch_save(saved, f)
    assert torch.load(io.BytesIO(f.getvalue()), weights_only=True) == saved
    assert torch_load(io.BytesIO(f.getvalue())) == saved


def test_save_rejects_what_torch_cannot_read():
    with pytest.raises(TypeError, match="set"):
        torch_save({"s": {1, 2}}, io.BytesIO())
    with pytest.raises(TypeError, match=r"obj\['w'\]"):
        torch_save({"w": object()}, io.BytesIO())
    # a torch tensor is named as one, not as "a Tensor" beside "only Tensors are written"
    with pytest.raises(TypeError, match=r"obj\['t'\] is a torch\.Tensor"):
        torch_save({"t": torch.ones(1)}, io.BytesIO())
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        torch_save(loop, io.BytesIO())


# ---------------------------------------------------------------------------------------------------------------------
# hostile and broken files


class _RunsCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _replace_record(data: bytes, suffix: str, content: bytes) -> bytes:
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, content if info.filename.endswith(suffix) else src.read(info))
    return out.getvalue()


def test_malicious_pickle_is_refused_unrun(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"w": _RunsCommand(marker)}, protocol=2)
    data = _replace_record(_saved({"w": torch.ones(1)}).getvalue(), "data.pkl", evil)
    with pytest.raises(UnsafePickleError, match=r"(posix|os)\.system"):
        torch_load(io.BytesIO(data))
    # the legacy path too: a bare pickle stream
    with pytest.raises(UnsafePickleError, match=r"(posix|os)\.system"):
        torch_load(io.BytesIO(evil))
    assert not marker.exists()
    # it is also a pickle.UnpicklingError, like torch's weights_only refusal
    eval_pickle = b"\x80\x02cbuiltins\neval\nX\x0a\x00\x00\x00print(123)\x85R."
    with pytest.raises(pickle.UnpicklingError, match="builtins.eval"):
        torch_load(io.BytesIO(_replace_record(_saved({}).getvalue(), "data.pkl", eval_pickle)))


def test_whole_module_pickle_is_refused():
    with pytest.raises(UnsafePickleError, match="torch.nn.modules.linear.Linear"):
        torch_load(_saved(torch.nn.Linear(2, 2)))


def test_broken_files_raise_clearly(tmp_path):
    good = _saved({"w": torch.arange(64.0), "x": torch.ones(3)}).getvalue()
    with pytest.raises(TorchFormatError, match="zip"):
        torch_load(io.BytesIO(good[: len(good) // 2]))
    with pytest.raises(TorchFormatError, match="empty"):
        torch_load(io.BytesIO(b""))
    with pytest.raises(TorchFormatError, match="not a torch checkpoint"):
        torch_load(io.BytesIO(b"hello world, not a checkpoint"))
    path = tmp_path / "trunc.pt"
    path.write_bytes(good[:100])
    with pytest.raises(TorchFormatError, match="trunc.pt"):
        torch_load(path)
    # a storage's bytes damaged in place: the zip's CRC catches it
    at = good.index(np.arange(64, dtype=np.float32).tobytes())
    damaged = good[:at] + b"\xff" * 8 + good[at + 8 :]
    with pytest.raises(TorchFormatError, match="corrupt"):
        torch_load(io.BytesIO(damaged))
    # a storage shorter than its record says
    with pytest.raises(TorchFormatError, match="truncated or corrupt"):
        torch_load(io.BytesIO(_replace_record(good, "data/0", b"\x00" * 12)))
    # a storage missing, a corrupt pickle
    with pytest.raises(TorchFormatError, match="no record data/1"):
        torch_load(io.BytesIO(_drop_record(good, "data/1")))
    with pytest.raises(TorchFormatError, match="corrupt pickle"):
        torch_load(io.BytesIO(_replace_record(good, "data.pkl", b"\x80\x02}q\x00(X")))
    with pytest.raises(TorchFormatError, match="big"):
        torch_load(io.BytesIO(_replace_record(good, "byteorder", b"big")))
    legacy = _saved({"w": torch.arange(8.0)}, _use_new_zipfile_serialization=False).getvalue()
    with pytest.raises(TorchFormatError, match="truncated or corrupt"):
        torch_load(io.BytesIO(legacy[:-5]))


def test_view_past_its_storage_is_refused():
    good = _saved({"w": torch.arange(4.0)}).getvalue()
    with zipfile.ZipFile(io.BytesIO(good)) as zf:
        name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        pkl = zf.read(name)
    # size (4,) -> (5,): one element more than the storage holds
    assert b"K\x04\x85" in pkl
    bad = pkl.replace(b"K\x04\x85", b"K\x05\x85", 1)
    with pytest.raises(TorchFormatError, match="reaches element 4"):
        torch_load(io.BytesIO(_replace_record(good, "data.pkl", bad)))


def _drop_record(data: bytes, suffix: str) -> bytes:
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(suffix):
                dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_extension_opcodes_are_refused():
    ext = b"\x80\x02\x82\x01."
    with pytest.raises(UnsafePickleError, match="EXT1"):
        torch_load(io.BytesIO(_replace_record(_saved({}).getvalue(), "data.pkl", ext)))


def test_module_examples():
    import doctest

    from uopkit.nn import torch_format

    assert doctest.testmod(torch_format).failed == 0


def test_an_optimizer_checkpoint_resumes_in_torch_with_per_parameter_steps() -> None:
    # the step count that parameters stepping together share is saved once per parameter, as torch's state holds it:
    # shared in the file, torch resuming added 1 to it once per parameter (2, 3, 4 came out 3, 5, 7)
    from uopkit import nn
    from uopkit.nn.torch_format import torch_save

    m = nn.Linear(3, 2)
    opt = nn.optim.Adam(m.parameters(), lr=1e-2)
    m(Tensor.ones(4, 3)).sum().backward()
    opt.step()
    f = io.BytesIO()
    torch_save({"opt": opt.state_dict()}, f)
    f.seek(0)
    tm = torch.nn.Linear(3, 2)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-2)
    topt.load_state_dict(torch.load(f, weights_only=True)["opt"])
    for i in range(3):
        topt.zero_grad()
        tm(torch.ones(4, 3)).sum().backward()
        topt.step()
        assert [topt.state[p]["step"].item() for p in tm.parameters()] == [i + 2, i + 2]


def test_a_resume_checkpoint_with_a_multistep_scheduler_goes_both_ways() -> None:
    # MultiStepLR's state_dict holds its milestones as a collections.Counter, which torch's weights_only reader allows:
    # {model, optimizer, scheduler} saved by torch loads here, and ours (the Counter kept) loads in torch
    from collections import Counter

    from uopkit.nn.optim import SGD, lr_scheduler

    p = torch.nn.Parameter(torch.zeros(2))
    topt = torch.optim.SGD([p], lr=0.1)
    tsched = torch.optim.lr_scheduler.MultiStepLR(topt, milestones=[3, 5, 5], gamma=0.5)
    f = io.BytesIO()
    torch.save({"model": {"p": p.detach()}, "optimizer": topt.state_dict(), "scheduler": tsched.state_dict()}, f)
    loaded = torch_load(io.BytesIO(f.getvalue()))
    assert type(loaded["scheduler"]["milestones"]) is Counter
    assert loaded["scheduler"]["milestones"] == Counter({3: 1, 5: 2})
    opt = SGD([Tensor.zeros(2, requires_grad=True)], lr=0.1)
    sched = lr_scheduler.MultiStepLR(opt, milestones=[1], gamma=0.5)
    sched.load_state_dict(loaded["scheduler"])
    for _ in range(4):
        topt.step()
        sched.step()
        tsched.step()
    assert sched.get_last_lr() == tsched.get_last_lr() == [0.05]
    # ours into torch, read with weights_only=True
    f = io.BytesIO()
    torch_save({"scheduler": sched.state_dict()}, f)
    f.seek(0)
    saved = torch.load(f, weights_only=True)["scheduler"]
    assert type(saved["milestones"]) is Counter and saved["milestones"] == Counter({3: 1, 5: 2})
    tsched.load_state_dict(saved)
    for _ in range(2):
        sched.step()
        tsched.step()
    assert tsched.get_last_lr() == sched.get_last_lr() == [0.0125]
    # a Counter's call takes one mapping (what pickle gives it), nothing else
    bad = b"\x80\x02ccollections\nCounter\nX\x03\x00\x00\x00abc\x85R."
    with pytest.raises(TorchFormatError, match="Counter"):
        torch_load(io.BytesIO(_replace_record(_saved({}).getvalue(), "data.pkl", bad)))

"""State dicts and safetensors: names, in-place loading, and bit-exact round trips (checked against `safetensors`)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.nn import BatchNorm, Linear
from uopkit.nn.optim import SGD
from uopkit.nn.state import (
    SafetensorsError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)
from uopkit.tensor import ShapeError


class Net:
    def __init__(self) -> None:
        self.fc = Linear(3, 2)
        self.bn = BatchNorm(2)
        self.blocks = [Linear(2, 2, bias=False), {"extra": Linear(2, 1)}]
        self.name = "not a tensor"


def test_get_state_dict_names() -> None:
    sd = get_state_dict(Net())
    assert list(sd) == [
        "fc.weight", "fc.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
        "blocks.0.weight", "blocks.1.extra.weight", "blocks.1.extra.bias",
    ]  # fmt: skip


def test_get_parameters_dedups_shared_tensors() -> None:
    net = Net()
    net.shared = net.fc.weight  # type: ignore[attr-defined]
    params = get_parameters(net)
    assert len(params) == 10 and sum(p is net.fc.weight for p in params) == 1


def test_load_state_dict_in_place_keeps_optimizer_valid() -> None:
    a, b = Net(), Net()
    opt = SGD(get_parameters(a), lr=0.1)
    w = a.fc.weight
    load_state_dict(a, get_state_dict(b))
    assert a.fc.weight is w and opt.params[0] is w
    for k, v in get_state_dict(b).items():
        np.testing.assert_array_equal(get_state_dict(a)[k].numpy(), v.numpy())


def test_load_state_dict_from_numpy_and_casts() -> None:
    net = Linear(2, 2)
    load_state_dict(net, {"weight": np.eye(2, dtype=np.float64), "bias": [1, 2]})
    assert net.weight.dtype == dtypes.float32 and net.weight.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert net.bias is not None and net.bias.tolist() == [1.0, 2.0]


def test_load_state_dict_errors() -> None:
    net = Linear(2, 2)
    with pytest.raises(KeyError, match=r"missing keys \['bias'\], unexpected keys \['other'\]"):
        load_state_dict(net, {"weight": np.zeros((2, 2)), "other": np.zeros(1)})
    with pytest.raises(ShapeError, match=r"'weight' has shape \(3, 2\) in the state dict but \(2, 2\) in the model"):
        load_state_dict(net, {"weight": np.zeros((3, 2)), "bias": np.zeros(2)})
    # strict=False loads what matches
    load_state_dict(net, {"weight": np.ones((2, 2))}, strict=False)
    assert net.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_load_state_dict_one_element_value_into_a_0d_tensor_as_torch() -> None:
    # torch loads a 1-D value of one element into a 0-d tensor (checkpoints from before 0-d tensors); other sizes raise
    torch = pytest.importorskip("torch")
    theirs = torch.nn.BatchNorm1d(2)
    ours = BatchNorm(2)
    values = {k: v.numpy() for k, v in theirs.state_dict().items()}
    values["num_batches_tracked"] = np.array([7], np.int64)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in values.items()})
    load_state_dict(ours, values)
    assert ours.num_batches_tracked.shape == () == tuple(theirs.num_batches_tracked.shape)
    assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 7
    values["num_batches_tracked"] = np.array([7, 8], np.int64)
    with pytest.raises(ShapeError, match=r"'num_batches_tracked' has shape \(2,\) in the state dict but \(\) in"):
        load_state_dict(ours, values)


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38, -1.5], dtype=np.float32)


def _all_dtypes() -> dict[str, Tensor]:
    rng = np.random.default_rng(3)
    out = {
        "f32_special": Tensor(SPECIAL),
        # a NaN with a payload, stored bit for bit
        "f32_payload": Tensor(np.array([0x7FC01234, 0xFF800001], dtype=np.uint32).view(np.float32)),
        "f64": Tensor(rng.standard_normal((2, 3))),
        "f16": Tensor(rng.standard_normal(5).astype(np.float16)),
        "i8": Tensor(np.array([-128, 127, 0], np.int8)),
        "u8": Tensor(np.array([0, 255], np.uint8)),
        "i16": Tensor(np.array([-32768, 7], np.int16)),
        "u16": Tensor(np.array([65535], np.uint16)),
        "i32": Tensor(np.arange(-3, 3, dtype=np.int32).reshape(2, 3)),
        "u32": Tensor(np.array([2**32 - 1], np.uint32)),
        "i64": Tensor(np.array([-(2**63), 2**63 - 1], np.int64)),
        "u64": Tensor(np.array([2**64 - 1], np.uint64)),
        "bool": Tensor(np.array([True, False, True])),
        "empty": Tensor(np.zeros((0, 4), np.float32)),
        "view": Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).T[1:, ::2],
    }
    return out


def _bits(t: Tensor) -> bytes:
    return t.numpy().tobytes()


def test_safetensors_roundtrip_bit_exact(tmp_path: Path) -> None:
    tensors = _all_dtypes()
    path = tmp_path / "all.safetensors"
    safe_save(tensors, path, metadata={"format": "pt", "note": "uopkit"})
    loaded = safe_load(path)
    assert list(loaded) == list(tensors)
    for k, t in tensors.items():
        assert loaded[k].shape == t.shape and loaded[k].dtype == t.dtype, k
        assert _bits(loaded[k]) == _bits(t), k
    assert safe_load_metadata(path) == {"format": "pt", "note": "uopkit"}
    # saving what was loaded gives the same file, byte for byte
    path2 = tmp_path / "again.safetensors"
    safe_save(loaded, path2, metadata={"format": "pt", "note": "uopkit"})
    assert path.read_bytes() == path2.read_bytes()


def test_bfloat16_roundtrip(tmp_path: Path) -> None:
    bits = np.array([0x3F80, 0xC000, 0x7FC1, 0x0001], dtype=np.uint16)
    path = tmp_path / "bf16.safetensors"
    header = json.dumps({"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bits.tobytes())
    loaded = safe_load(path)
    assert loaded["x"].dtype == dtypes.bfloat16
    safe_save(loaded, tmp_path / "out.safetensors")
    # the data section (after the header) holds the same bits, NaN payload and subnormal included
    assert (tmp_path / "out.safetensors").read_bytes()[-8:] == bits.tobytes()


def test_against_the_safetensors_package(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    tensors = {k: v for k, v in _all_dtypes().items() if k != "view"}
    ours = tmp_path / "ours.safetensors"
    safe_save(tensors, ours)
    theirs_read = st.load_file(str(ours))
    for k, t in tensors.items():
        assert theirs_read[k].shape == t.shape and theirs_read[k].tobytes() == _bits(t), k
    # and a file the reference writer made loads bit for bit
    ref = tmp_path / "ref.safetensors"
    st.save_file({k: v.numpy() for k, v in tensors.items()}, str(ref), metadata={"a": "b"})
    loaded = safe_load(ref)
    for k, t in tensors.items():
        assert _bits(loaded[k]) == _bits(t), k
    assert safe_load_metadata(ref) == {"a": "b"}


def test_model_save_load(tmp_path: Path) -> None:
    a, b = Net(), Net()
    safe_save(get_state_dict(a), tmp_path / "net.safetensors")
    load_state_dict(b, safe_load(tmp_path / "net.safetensors"))
    for k, v in get_state_dict(a).items():
        assert _bits(get_state_dict(b)[k]) == _bits(v), k


def test_safetensors_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'w' is a list, not a Tensor"):
        safe_save({"w": [1.0]}, tmp_path / "x")  # type: ignore[dict-item]
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError, match="too short"):
        safe_load(bad)
    bad.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(SafetensorsError, match="says its header has 1000 bytes"):
        safe_load(bad)
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 8)
    with pytest.raises(SafetensorsError, match=r"'x' \(F32 \[4\]\) has data_offsets \[0, 8\]"):
        safe_load(bad)
    header = json.dumps({"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00")
    with pytest.raises(SafetensorsError, match="dtype 'F8_E4M3'"):
        safe_load(bad)

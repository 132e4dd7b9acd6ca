"""tinygrad's names that tinygrad programs (beautiful_mnist, GPT ports) use, with the semantics uopkit gives them:
`@Tensor.train()`, `dtypes.default_float` for layers, `getenv`, the top-level imports and `GlobalCounters`, `expand`
with None, `bitcast` across item sizes, `LAMB`, `contiguous_backward`, `xor`, `Tensor(bytes)`, `to_`,
`nn.datasets.mnist`; compared with PyTorch where the semantics are its."""

from __future__ import annotations

import gc
import gzip
import struct

import numpy as np
import pytest
import torch

import uopkit
from uopkit import Tensor, dtypes, nn
from uopkit.helpers import GlobalCounters, getenv
from uopkit.nn import datasets, optim
from uopkit.nn.state import get_state_dict
from uopkit.uop.ops import Ops

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------------------------------
# Tensor.train / Tensor.test as decorators


def test_train_and_test_decorate_functions():
    @Tensor.train()
    def step():
        return Tensor.training

    @Tensor.test()
    def evaluate():
        return Tensor.training

    @Tensor.train(False)
    def evaluate_too():
        return Tensor.training

    assert Tensor.training is False
    assert step() is True and Tensor.training is False
    with Tensor.train():
        assert evaluate() is False and evaluate_too() is False
        assert Tensor.training is True
    assert Tensor.training is False


def test_train_decorator_restores_the_mode_through_recursion_and_errors():
    @Tensor.train()
    def nested(n):
        assert Tensor.training
        return nested(n - 1) if n else Tensor.training

    # (one decorator object enters again before it exits: each exit restores its own entry's mode)
    assert nested(3) is True and Tensor.training is False

    @Tensor.train()
    def fails():
        raise KeyError("x")

    with pytest.raises(KeyError):
        fails()
    assert Tensor.training is False


# ---------------------------------------------------------------------------------------------------------------------
# dtypes.default_float for layers' parameters


@pytest.fixture
def default_float():
    """Sets dtypes.default_float for a test, and puts it back."""
    old = dtypes.default_float

    def set_to(dt):
        dtypes.default_float = dt

    yield set_to
    dtypes.default_float = old


def _layers():
    return {
        "Linear": nn.Linear(4, 3),
        "Conv2d": nn.Conv2d(2, 3, 3),
        "ConvTranspose2d": nn.ConvTranspose2d(2, 3, 3),
        "Embedding": nn.Embedding(5, 4),
        "BatchNorm2d": nn.BatchNorm2d(3),
        "LayerNorm": nn.LayerNorm(4),
        "GroupNorm": nn.GroupNorm(1, 3),
        "RMSNorm": nn.RMSNorm(4),
        "LSTMCell": nn.LSTMCell(3, 4),
        "LSTM": nn.LSTM(3, 4),
        "MultiheadAttention": nn.MultiheadAttention(4, 2),
        "PReLU": nn.PReLU(),
        "Bilinear": nn.Bilinear(2, 2, 3),
    }


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_layers_are_made_in_the_default_float(default_float, dt):
    default_float(dt)
    for name, layer in _layers().items():
        for key, t in get_state_dict(layer).items():
            want = dtypes.int64 if key.endswith("num_batches_tracked") else dt
            assert t.dtype == want, f"{name}.{key} is {t.dtype}, want {want}"
    assert nn.EmbeddingBag(5, 3).weight.dtype == dt
    assert nn.Parameter().dtype == dt and Tensor.empty(2).dtype == dt
    x = Tensor.randn(2, 4)
    assert x.dtype == dt and nn.Linear(4, 3)(x).dtype == dt and nn.LayerNorm(4)(x).dtype == dt


def test_layer_dtypes_follow_the_default_as_torchs_do(default_float):
    # torch.set_default_dtype(float64) makes its layers float64; dtypes.default_float = float64 does here
    default_float(dtypes.float64)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pairs = [
            (nn.Linear(4, 3), torch.nn.Linear(4, 3)),
            (nn.Conv2d(2, 3, 3), torch.nn.Conv2d(2, 3, 3)),
            (nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)),
            (nn.LayerNorm(4), torch.nn.LayerNorm(4)),
            (nn.Embedding(5, 4), torch.nn.Embedding(5, 4)),
            (nn.GRUCell(3, 4), torch.nn.GRUCell(3, 4)),
        ]
        for ours, theirs in pairs:
            want = {k: str(v.dtype).removeprefix("torch.") for k, v in theirs.state_dict().items()}
            got = {k: {"double": "float64", "long": "int64"}[v.dtype.name] for k, v in get_state_dict(ours).items()}
            assert got == want, type(ours).__name__
    finally:
        torch.set_default_dtype(old)


def test_an_explicit_embedding_dtype_still_wins(default_float):
    default_float(dtypes.float16)
    assert nn.Embedding(3, 2, dtype=dtypes.float32).weight.dtype == dtypes.float32


# ---------------------------------------------------------------------------------------------------------------------
# getenv


def test_getenv_returns_the_defaults_type(monkeypatch):
    monkeypatch.setenv("UOPKIT_TEST_BS", "64")
    assert getenv("UOPKIT_TEST_BS", 512) == 64 and type(getenv("UOPKIT_TEST_BS", 512)) is int
    assert getenv("UOPKIT_TEST_BS", 0.5) == 64.0 and type(getenv("UOPKIT_TEST_BS", 0.5)) is float
    assert getenv("UOPKIT_TEST_BS", "x") == "64"
    assert getenv("UOPKIT_TEST_BS") == 64
    assert getenv("UOPKIT_TEST_UNSET", 512) == 512 and getenv("UOPKIT_TEST_UNSET") == 0
    monkeypatch.setenv("UOPKIT_TEST_FLAG", "0")
    assert getenv("UOPKIT_TEST_FLAG", True) is False
    monkeypatch.setenv("UOPKIT_TEST_FLAG", "yes")
    assert getenv("UOPKIT_TEST_FLAG", False) is True
    monkeypatch.setenv("UOPKIT_TEST_FLAG", "")
    assert getenv("UOPKIT_TEST_FLAG", 7) == 7
    # beautiful_mnist's line
    assert Tensor.randint(getenv("UOPKIT_TEST_BS", 512), high=60000).shape == (64,)


def test_getenv_names_a_variable_that_doesnt_parse(monkeypatch):
    monkeypatch.setenv("UOPKIT_TEST_BS", "lots")
    with pytest.raises(ValueError, match="UOPKIT_TEST_BS='lots' is not a valid int"):
        getenv("UOPKIT_TEST_BS", 512)


# ---------------------------------------------------------------------------------------------------------------------
# top-level names and GlobalCounters


def test_top_level_names_tinygrad_programs_import():
    from uopkit import Context, TinyJit
    from uopkit import GlobalCounters as counters
    from uopkit import getenv as top_getenv
    from uopkit.helpers import Context as helpers_context
    from uopkit.jit import TinyJit as jit_tinyjit

    assert TinyJit is jit_tinyjit and Context is helpers_context and top_getenv is getenv
    assert counters is GlobalCounters
    assert {"TinyJit", "Context", "getenv", "GlobalCounters"} <= set(uopkit.__all__)


def _counts():
    return GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem


def test_global_counters_count_kernels_ops_and_bytes():
    n = 32
    a = Tensor.randn(n, n).realize()
    b = Tensor.randn(n, n).realize()
    GlobalCounters.reset()
    assert _counts() == (0, 0, 0) and GlobalCounters.time_sum_s == 0.0
    (a @ b).realize()
    kernels, ops, mem = _counts()
    # one kernel: n^3 multiplies and n^3 adds, reading two n x n float32 and writing one
    assert kernels == 1 and ops >= 2 * n**3 and mem >= 3 * n * n * 4
    # the same graph over other buffers: the schedule cache's replay counts the same
    GlobalCounters.reset()
    (b @ a).realize()
    assert _counts() == (kernels, ops, mem)
    # time is measured only with DEBUG=2 (which waits for every kernel)
    assert GlobalCounters.time_sum_s == 0.0


def test_global_counters_count_tinyjit_replays_as_the_capture():
    from uopkit import TinyJit

    @TinyJit
    def f(x):
        return (x * 2 + 1).sum().realize()

    # (earlier tests' garbage freed first: a capture realizes every live tensor's pending write before the call, and a
    # write left pending in a reference cycle that no collect has freed yet counted as this capture's kernels)
    gc.collect()
    seen = []
    for _ in range(4):
        x = Tensor.randn(16).realize()
        GlobalCounters.reset()
        f(x)
        seen.append(_counts())
    # calls 1-2 run eagerly (the second captures), 3-4 replay: the same kernels, counted the same
    assert seen[1] == seen[2] == seen[3] and seen[3][0] >= 1


@pytest.mark.usefixtures("gc_of_this_test")
def test_global_counters_mem_used_follows_buffers():
    # (earlier tests' garbage is frozen: a collect here frees only what this test made)
    import gc

    before = GlobalCounters.mem_used
    t = Tensor.zeros(1000).contiguous().realize()
    assert GlobalCounters.mem_used - before == 1000 * 4
    GlobalCounters.reset()
    # (reset keeps what is allocated)
    assert GlobalCounters.mem_used - before == 1000 * 4
    del t
    gc.collect()
    assert GlobalCounters.mem_used == before


# ---------------------------------------------------------------------------------------------------------------------
# expand with None


def test_expand_takes_none_to_keep_a_size():
    x = np.arange(8, dtype=np.float32).reshape(2, 1, 4)
    want = torch.tensor(x).expand(-1, 5, -1).numpy()
    t = Tensor(x)
    np.testing.assert_array_equal(t.expand(None, 5, None).numpy(), want)
    np.testing.assert_array_equal(t.expand((None, 5, -1)).numpy(), want)
    assert t.expand(3, None, 5, None).shape == (3, 2, 5, 4)
    with pytest.raises(ValueError, match="new leading dimension"):
        t.expand(None, 2, 5, 4)
    with pytest.raises(TypeError, match="sizes are ints, -1 or None"):
        t.expand(2.0, 5, 4)


# ---------------------------------------------------------------------------------------------------------------------
# bitcast across item sizes


@pytest.mark.parametrize(
    "values, src, dst",
    [
        ([[1.0, 2.0], [-3.5, 0.25]], "float32", "uint8"),
        ([[0, 0, 128, 63, 0, 0, 0, 64]], "uint8", "float32"),
        ([1.5, -2.0, 7.0, 0.5], "float16", "int8"),
        ([1, -2, 3 << 40], "int64", "int32"),
        ([1, 2, 3, 4], "int16", "int64"),
    ],
)
def test_bitcast_to_another_size_is_torchs_view_dtype(values, src, dst):
    want = torch.tensor(values, dtype=getattr(torch, src)).view(getattr(torch, dst))
    got = Tensor(values, dtype=src).bitcast(dst)
    assert got.dtype == getattr(dtypes, dst) and got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_bitcast_to_another_size_refuses_torchs_bad_layouts():
    with pytest.raises(ValueError, match="bitcast: the last dim's size .* divide by 4"):
        Tensor([1, 2, 3], dtype="uint8").bitcast(dtypes.float32)
    with pytest.raises(ValueError, match="bitcast: the last dim must have stride 1"):
        Tensor([[1.0, 2.0], [3.0, 4.0]]).T.bitcast(dtypes.uint8)
    with pytest.raises(ValueError, match="bitcast: a 0-d tensor"):
        Tensor(1.0).bitcast(dtypes.uint8)


# ---------------------------------------------------------------------------------------------------------------------
# backward with nothing that requires a gradient


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor([1.0]).sum(),
        lambda: Tensor([3.0]),
        lambda: Tensor([1.0, 2.0]).sum(),
        lambda: (Tensor([1.0, 2.0]) * 2).sum().realize(),
    ],
)
def test_backward_with_no_tensor_requiring_grad_says_so(make):
    with pytest.raises(RuntimeError, match="no tensor with requires_grad=True"):
        make().backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.tensor([1.0]).sum().backward()


# ---------------------------------------------------------------------------------------------------------------------
# LAMB


def _lamb_reference(ws, grads_per_step, lr, b1, b2, eps, wd, adam):
    # the update as the LAMB paper and tinygrad's docs state it, in float64
    ws = [w.astype(np.float64) for w in ws]
    m = [np.zeros_like(w) for w in ws]
    v = [np.zeros_like(w) for w in ws]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            up = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps) + wd * ws[i]
            w_norm, u_norm = np.linalg.norm(ws[i]), np.linalg.norm(up)
            ratio = 1.0 if adam or w_norm == 0 or u_norm == 0 else w_norm / u_norm
            ws[i] = ws[i] - lr * ratio * up
    return ws


@pytest.mark.parametrize("adam", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lamb_against_its_update_rule(adam, wd):
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal((3, 4)).astype(np.float32), np.zeros(4, np.float32)]
    x = rng.standard_normal((5, 3)).astype(np.float32)
    params = [Tensor(w, requires_grad=True) for w in w0]
    opt = optim.LAMB(params, lr=0.01, weight_decay=wd, adam=adam)
    grads = []
    for _ in range(3):
        opt.zero_grad()
        loss = ((Tensor(x) @ params[0] + params[1]).tanh() ** 2).sum()
        loss.backward()
        grads.append([p.grad.numpy().astype(np.float64) for p in params])
        opt.step()
    want = _lamb_reference(w0, grads, 0.01, 0.9, 0.999, 1e-6, wd, adam)
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-5, atol=1e-6)


def test_lamb_adam_is_torchs_adam_and_adamw():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    for wd, torch_opt in ((0.0, torch.optim.Adam), (0.05, torch.optim.AdamW)):
        ours = Tensor(w0, requires_grad=True)
        theirs = torch.tensor(w0, requires_grad=True)
        opt = optim.LAMB([ours], lr=0.01, weight_decay=wd, adam=True)
        topt = torch_opt([theirs], lr=0.01, eps=1e-6, weight_decay=wd)
        for _ in range(3):
            opt.zero_grad()
            topt.zero_grad()
            (ours**3).sum().backward()
            (theirs**3).sum().backward()
            opt.step()
            topt.step()
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_lamb_takes_tinygrads_arguments_and_state_names():
    w = Tensor([3.0, 4.0], requires_grad=True)
    opt = optim.LAMB([w], 0.1, 0.8, 0.99, 1e-6, 0.0, False)
    (w * w).sum().backward()
    opt.step()
    assert len(opt.m) == len(opt.v) == 1
    with pytest.raises(TypeError, match="betas by name"):
        optim.LAMB([w], 0.1, (0.9, 0.999))
    assert optim.LAMB([w], betas=(0.8, 0.9)).param_groups[0]["betas"] == (0.8, 0.9)


# ---------------------------------------------------------------------------------------------------------------------
# contiguous_backward, xor, Tensor(bytes), to_


def test_contiguous_backward_is_the_identity_with_a_stored_gradient():
    x_np = np.array([[1.0, -0.0], [3.0, 4.0]], np.float32)
    x = Tensor(x_np, requires_grad=True)
    y = x.contiguous_backward()
    np.testing.assert_array_equal(y.numpy(), x_np)
    assert np.signbit(y.numpy()[0, 1])
    w = np.array([[2.0], [5.0]], np.float32)
    (y.T * Tensor(w)).sum().backward()
    assert Ops.CONTIGUOUS in {u.op for u in x.grad.uop.toposort()}
    tx = torch.tensor(x_np, requires_grad=True)
    (tx.T * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert Tensor([1, 2]).contiguous_backward().tolist() == [1, 2]


def test_xor_method_is_bitwise_xor():
    a, b = [1, 6, -3], [3, 5, 7]
    assert Tensor(a).xor(Tensor(b)).tolist() == torch.tensor(a).bitwise_xor(torch.tensor(b)).tolist()
    assert Tensor([True, False]).xor(True).tolist() == [False, True]
    assert Tensor([1, 2]).xor(3, reverse=True).tolist() == [2, 1]


def test_tensor_from_bytes():
    raw = b"\x01\x02\xff\x00\x00\x80\x3f\x00"
    t = Tensor(raw)
    assert t.dtype == dtypes.uint8
    assert t.tolist() == torch.frombuffer(bytearray(raw), dtype=torch.uint8).tolist()
    assert Tensor(bytearray(raw[3:7]), dtype=dtypes.float32).tolist() == [1.0]
    assert Tensor(memoryview(raw[5:7]), dtype=dtypes.bfloat16).tolist() == [1.0]
    with pytest.raises(ValueError, match="3 bytes are not a whole number of dtypes.float elements"):
        Tensor(raw[:3], dtype=dtypes.float32)


def test_to_moves_a_tensor_and_its_grad_in_place():
    t = Tensor([1.0, 2.0], requires_grad=True)
    (t * t).sum().backward()
    assert t.to_("EMULATOR") is t
    assert t.device == "EMULATOR" and t.grad.device == "EMULATOR"
    assert t.tolist() == [1.0, 2.0] and t.grad.tolist() == [2.0, 4.0]
    # still a leaf that trains
    t.grad = None
    (t * 3).sum().backward()
    assert t.grad.tolist() == [3.0, 3.0]
    assert t.to_("CPU").device == "CPU"


# ---------------------------------------------------------------------------------------------------------------------
# nn.datasets.mnist


def _idx(arr: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def test_parse_idx_reads_each_type_gzipped_or_not():
    for arr, code in [
        (np.arange(24, dtype=np.uint8).reshape(2, 3, 4), 0x08),
        (np.array([-1, 2, -300], np.int16), 0x0B),
        (np.array([[1.5, -2.25]], np.float32), 0x0D),
    ]:
        for data in (_idx(arr, code), gzip.compress(_idx(arr, code))):
            got = datasets.parse_idx(data)
            assert got.dtype == arr.dtype and got.shape == arr.shape
            np.testing.assert_array_equal(got, arr)
    with pytest.raises(ValueError, match="not an IDX file"):
        datasets.parse_idx(b"PK\x03\x04")
    with pytest.raises(ValueError, match="needs 11 bytes, the file has 10"):
        datasets.parse_idx(bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2]))


def test_mnist_reads_the_cached_files(monkeypatch, tmp_path):
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "datasets" / "mnist"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x_train, x_test = (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for n in (6, 4))
    y_train, y_test = (rng.integers(0, 10, n, dtype=np.uint8) for n in (6, 4))
    for name, arr, code in [
        ("train-images-idx3-ubyte.gz", x_train, 8),
        ("train-labels-idx1-ubyte.gz", y_train, 8),
        ("t10k-images-idx3-ubyte.gz", x_test, 8),
        ("t10k-labels-idx1-ubyte.gz", y_test, 8),
    ]:
        (folder / name).write_bytes(gzip.compress(_idx(arr, code)))

    def no_network(*args, **kwargs):
        raise AssertionError("mnist() downloaded a cached file")

    monkeypatch.setattr("urllib.request.urlopen", no_network)
    X_train, Y_train, X_test, Y_test = datasets.mnist()
    assert X_train.dtype == dtypes.uint8 and X_train.shape == (6, 1, 28, 28)
    assert Y_train.dtype == dtypes.default_int and Y_test.shape == (4,)
    np.testing.assert_array_equal(X_train.numpy()[:, 0], x_train)
    np.testing.assert_array_equal(X_test.numpy()[:, 0], x_test)
    assert Y_train.tolist() == y_train.tolist() and Y_test.tolist() == y_test.tolist()


def test_mnist_offline_names_the_url_and_the_cache_path(monkeypatch, tmp_path):
    import urllib.error

    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr("urllib.request.urlopen", offline)
    path = tmp_path / "datasets" / "mnist" / "train-images-idx3-ubyte.gz"
    with pytest.raises(OSError) as e:
        datasets.mnist()
    assert datasets.MNIST_URL + "train-images-idx3-ubyte.gz" in str(e.value) and str(path) in str(e.value)

"""Tensor creation, random numbers, movement ops and joining, compared with numpy and PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit.dtype import dtypes
from uopkit.tensor import ShapeError, Tensor

torch = pytest.importorskip("torch")

rng = np.random.default_rng(2)


def same(t: Tensor, want: object) -> None:
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = t.numpy()
    assert got.shape == want.shape, f"{got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------------------------------
# creation


def test_creation_basics():
    same(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32))
    same(Tensor.ones((2, 3)), np.ones((2, 3), np.float32))
    same(Tensor.full((2, 2), 7), np.full((2, 2), 7))
    assert Tensor.full((2,), 7).dtype == dtypes.int32 and Tensor.full((2,), 7.0).dtype == dtypes.float32
    assert Tensor.full((2,), True).dtype == dtypes.bool
    assert Tensor.zeros(2, dtype=dtypes.int8).dtype == dtypes.int8
    assert Tensor.empty(3, 4).shape == (3, 4)
    assert Tensor.empty(0).numel() == 0
    x = Tensor(np.arange(6, dtype=np.int16).reshape(2, 3))
    assert x.zeros_like().dtype == dtypes.int16 and x.ones_like(dtype=dtypes.float64).dtype == dtypes.float64
    same(x.full_like(3), np.full((2, 3), 3))
    same(Tensor.arange(5), np.arange(5))
    same(Tensor.arange(2, 11, 3), np.arange(2, 11, 3))
    same(Tensor.arange(5, 0, -2), np.arange(5, 0, -2))
    same(Tensor.arange(0, 1, 0.25), np.arange(0, 1, 0.25))
    assert Tensor.arange(0, 1, 0.25).dtype == dtypes.float32
    assert Tensor.arange(3, 0).shape == (0,)
    same(Tensor.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    same(Tensor.linspace(0, 1, 1), torch.linspace(0, 1, 1))
    same(Tensor.eye(3), torch.eye(3))
    same(Tensor.eye(2, 4), torch.eye(2, 4))
    with pytest.raises(ValueError, match="arange"):
        Tensor.arange(0, 5, 0)
    with pytest.raises(ShapeError, match="full"):
        Tensor.full((2, -1), 0)


def test_from_python_numpy_and_scalars():
    assert Tensor(3).dtype == dtypes.int32 and Tensor(3).shape == ()
    assert Tensor(2.5).item() == 2.5
    assert Tensor(True).dtype == dtypes.bool
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert Tensor([1, 2.5]).dtype == dtypes.float32
    assert Tensor([]).shape == (0,)
    assert Tensor(np.float64(1.5)).dtype == dtypes.float64
    assert Tensor(np.arange(4, dtype=np.uint8)).dtype == dtypes.uint8
    assert Tensor([1, 2], dtype="float16").dtype == dtypes.float16
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="Tensor"):
        Tensor({"a": 1})
    # torch's legacy `torch.Tensor(1, 4, 16)` (sizes): an error that says so, not "unknown dtype 16"
    with pytest.raises(TypeError, match=r"legacy sizes.*Tensor.empty\(1, 4, 16\)"):
        Tensor(1, 4, 16)
    with pytest.raises(TypeError, match=r"Tensor.empty\(3, 4\)"):
        Tensor(3, 4)


def test_random_reproducible_and_distributed():
    Tensor.manual_seed(42)
    a = Tensor.rand(2000).numpy()
    Tensor.manual_seed(42)
    b = Tensor.rand(2000).numpy()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, Tensor.rand(2000).numpy())
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.03
    n = Tensor.randn(4000).numpy()
    assert abs(n.mean()) < 0.06 and abs(n.std() - 1) < 0.06
    u = Tensor.uniform(3000, low=-2, high=4).numpy()
    assert -2 <= u.min() and u.max() < 4 and abs(u.mean() - 1) < 0.15
    g = Tensor.normal(4000, mean=3.0, std=0.5).numpy()
    assert abs(g.mean() - 3) < 0.05 and abs(g.std() - 0.5) < 0.05
    r = Tensor.randint(3000, low=-3, high=5)
    assert r.dtype == dtypes.int32
    rv = r.numpy()
    assert rv.min() == -3 and rv.max() == 4
    assert Tensor.rand(3, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.randn(2, 2).rand_like().shape == (2, 2)
    with pytest.raises(ValueError, match="randint"):
        Tensor.randint(3, low=5, high=5)


def test_initializers_bounds():
    Tensor.manual_seed(0)
    k = Tensor.kaiming_uniform(64, 32).numpy()
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01**2)) / math.sqrt(32)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
    kn = Tensor.kaiming_normal(128, 64).numpy()
    assert abs(kn.std() - math.sqrt(2.0 / (1 + 0.01**2)) / 8) < 0.01
    g = Tensor.glorot_uniform(40, 60).numpy()
    assert np.abs(g).max() <= math.sqrt(6 / 100) and np.abs(g).max() > 0.9 * math.sqrt(6 / 100)
    s = Tensor.scaled_uniform(10, 10).numpy()
    assert np.abs(s).max() <= 0.1


# ---------------------------------------------------------------------------------------------------------------------
# movement


def test_movement_ops():
    x = rng.uniform(size=(2, 3, 4)).astype(np.float32)
    t, r = Tensor(x), torch.tensor(x)
    same(t.reshape(4, -1), r.reshape(4, -1))
    same(t.view(-1), r.view(-1))
    same(t.permute(2, 0, 1), r.permute(2, 0, 1))
    same(t.permute((-1, 0, 1)), r.permute(-1, 0, 1))
    same(t.transpose(0, 2), r.transpose(0, 2))
    same(t[0].T, r[0].T)
    same(t[:, :1].expand(2, 5, 4), r[:, :1].expand(2, 5, 4))
    same(t[:, :1].expand(-1, 3, -1), r[:, :1].expand(-1, 3, -1))
    same(t.flip(0), r.flip(0))
    same(t.flip((1, -1)), r.flip((1, -1)))
    same(t.shrink(((0, 1), None, (1, 3))), r[0:1, :, 1:3])
    same(t.reshape(2, 1, 3, 4).squeeze(), r.reshape(2, 1, 3, 4).squeeze())
    same(t.reshape(2, 1, 3, 4).squeeze(1), r.reshape(2, 1, 3, 4).squeeze(1))
    same(t.reshape(1, 2, 1, 3, 4).squeeze((0, 2)), r.reshape(1, 2, 1, 3, 4).squeeze((0, 2)))
    same(t.unsqueeze(-1), r.unsqueeze(-1))
    same(t.flatten(), r.flatten())
    same(t.flatten(1), r.flatten(1))
    same(t.unflatten(2, (2, 2)), r.unflatten(2, (2, 2)))
    same(t.repeat(2, 1, 3), r.repeat(2, 1, 3))
    same(t.repeat(2, 1, 1, 2), r.repeat(2, 1, 1, 2))
    same(t.repeat_interleave(2, dim=1), r.repeat_interleave(2, dim=1))
    same(t.repeat_interleave(3), r.repeat_interleave(3))
    same(t.roll(1, 2), r.roll(1, 2))
    same(t.roll((1, -2), (0, 2)), r.roll((1, -2), (0, 2)))
    same(t.roll(5), r.roll(5))
    same(t.tril(), r.tril())
    same(t.triu(1), r.triu(1))
    same(t.tril(-1), r.tril(-1))
    same(t.contiguous(), r)
    same(t.clone(), r)
    same(t.detach(), r)


@pytest.mark.parametrize("offset", [-3, -1, 0, 1, 2, 5])
@pytest.mark.parametrize("dims", [(0, 1), (1, 2), (2, 0), (-1, -2)])
def test_diagonal(offset, dims):
    x = rng.uniform(size=(2, 3, 4)).astype(np.float32)
    same(Tensor(x).diagonal(offset, *dims), torch.tensor(x).diagonal(offset, *dims))


def test_diagonal_gradient_and_errors():
    x = rng.uniform(size=(3, 4)).astype(np.float32)
    t, r = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (t.diagonal(1) * 2).sum().backward()
    (r.diagonal(1) * 2).sum().backward()
    same(t.grad, r.grad)
    with pytest.raises(ShapeError, match="diagonal: dim1 and dim2 are the same axis"):
        Tensor(x).diagonal(0, 1, -1)


def test_size():
    t = Tensor.zeros(2, 3, 4)
    assert t.size() == (2, 3, 4) and t.size(0) == 2 and t.size(-1) == 4
    with pytest.raises(IndexError, match="size: axis 3 is out of range"):
        t.size(3)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes(mode):
    x = rng.uniform(size=(2, 3, 4, 5)).astype(np.float32)
    pads = (1, 2, 2, 0)
    ref = torch.nn.functional.pad(torch.tensor(x), pads, mode=mode)
    same(Tensor(x).pad(pads, mode=mode), ref)
    # tinygrad's form: one (before, after) pair per axis
    same(Tensor(x).pad((None, None, (2, 0), (1, 2)), mode=mode), ref)


def test_pad_value_and_negative():
    x = rng.uniform(size=(3, 4)).astype(np.float32)
    same(Tensor(x).pad(((1, 1), (0, 2)), value=-5.0), np.pad(x, ((1, 1), (0, 2)), constant_values=-5.0))
    same(Tensor(x).pad(((-1, 1), (0, -2))), np.pad(x, ((0, 1), (0, 0)))[1:, :2])
    same(Tensor(x).pad(((1, 0), (0, 0)), value=float("-inf")), np.pad(x, ((1, 0), (0, 0)), constant_values=-np.inf))


def test_cat_stack_split_chunk():
    a, b = rng.uniform(size=(2, 3)).astype(np.float32), rng.uniform(size=(2, 5)).astype(np.float32)
    same(Tensor(a).cat(Tensor(b), dim=1), torch.cat([torch.tensor(a), torch.tensor(b)], 1))
    same(Tensor.cat(Tensor(a), Tensor(a), Tensor(a), dim=-2), torch.cat([torch.tensor(a)] * 3, -2))
    same(Tensor.cat(Tensor(a), Tensor.zeros(2, 0), dim=1), a)
    same(Tensor([1, 2]).cat(Tensor([2.5])), [1, 2, 2.5])
    same(Tensor([True]).cat(Tensor([False, True])), [True, False, True])
    same(Tensor.stack(Tensor(a), Tensor(a), dim=1), torch.stack([torch.tensor(a)] * 2, 1))
    same(Tensor.stack([Tensor(a), Tensor(a)], dim=-1), torch.stack([torch.tensor(a)] * 2, -1))
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    for got, want in zip(Tensor(x).split(3), torch.tensor(x).split(3), strict=True):
        same(got, want)
    for got, want in zip(Tensor(x).split([2, 5]), torch.tensor(x).split([2, 5]), strict=True):
        same(got, want)
    for got, want in zip(Tensor(x).chunk(3), torch.tensor(x).chunk(3), strict=True):
        same(got, want)
    for got, want in zip(Tensor(x).chunk(2, dim=1), torch.tensor(x).chunk(2, dim=1), strict=True):
        same(got, want)


@pytest.mark.parametrize("no_grad", [False, True])
def test_a_cache_grown_by_cat_in_a_loop_keeps_a_bounded_graph(no_grad):
    # k = cat([past_k, k_new]) per token, never realized by the program: each CAT_CHAIN_STORED levels the chain is
    # stored, so a token's graph (and its time) doesn't grow with every earlier token's cat; values and gradients
    # as without the cut
    import uopkit
    from uopkit.tensor.movement import CAT_CHAIN_STORED

    w = Tensor(rng.uniform(size=(1, 3)).astype(np.float32), requires_grad=True)
    rows, past, sizes = [], None, []
    with uopkit.no_grad() if no_grad else uopkit.enable_grad():
        for t in range(4 * CAT_CHAIN_STORED + 1):
            new = w * (t + 1)
            past = new if past is None else Tensor.cat([past, new])
            sizes.append(len(past.uop.toposort()))
            rows.append((t + 1) * w.numpy())
    assert max(sizes[CAT_CHAIN_STORED:]) <= 2 * max(sizes[: CAT_CHAIN_STORED + 1])
    np.testing.assert_allclose(past.numpy(), np.concatenate(rows), rtol=1e-6)
    if not no_grad:
        (past * past).sum().backward()
        assert w.grad is not None
        np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy() * sum((t + 1) ** 2 for t in range(len(rows))), 1e-5)


def test_a_memory_sliced_from_a_cat_each_step_keeps_a_bounded_graph():
    # Transformer-XL's memory: mem = cat([mem, h])[-n:].detach() every segment, never realized by the program. The
    # chain runs through a slice and a detach of each cat; it is stored as a plain cat chain is, so each step's graph
    # (and the schedule cache's key) stops growing; values as torch's
    torch = pytest.importorskip("torch")
    import uopkit.nn as nn

    lin, ref = nn.Linear(3, 3), torch.nn.Linear(3, 3)
    lin.load_state_dict(ref.state_dict())
    mem, tmem, sizes = Tensor.empty(0, 3), torch.empty(0, 3), []
    for _ in range(20):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        h, th = lin(Tensor(x)).tanh(), ref(torch.tensor(x)).tanh()
        mem, tmem = Tensor.cat([mem, h], 0)[-5:].detach(), torch.cat([tmem, th], 0)[-5:].detach()
        sizes.append(len(mem.uop.toposort()))
    assert max(sizes[10:]) <= max(sizes[:10])
    np.testing.assert_allclose(mem.numpy(), tmem.numpy(), rtol=1e-6, atol=1e-7)


def test_zero_size_and_scalar_tensors():
    z = Tensor.zeros(0, 4)
    assert (z + 1).shape == (0, 4) and (z + 1).numpy().shape == (0, 4)
    assert z.reshape(4, 0).shape == (4, 0)
    assert z.T.shape == (4, 0)
    assert z.cumsum(1).shape == (0, 4)
    assert (z @ Tensor.zeros(4, 2)).tolist() == []
    assert (Tensor.zeros(2, 0) @ Tensor.zeros(0, 3)).tolist() == [[0.0] * 3] * 2
    s = Tensor(4.0)
    assert (s * 2).item() == 8.0 and s.reshape(1, 1).shape == (1, 1)
    assert s.exp().shape == () and s.unsqueeze(0).shape == (1,)
    assert s.flatten().shape == (1,)
    assert s.expand(3).tolist() == [4.0, 4.0, 4.0]


def test_movement_errors():
    t = Tensor.zeros(2, 3)
    with pytest.raises(ShapeError, match="reshape"):
        t.reshape(-1, -1)
    with pytest.raises(ShapeError, match="permute"):
        t.permute(0, 0)
    with pytest.raises(ShapeError, match="shrink"):
        t.shrink(((0, 3), None))
    with pytest.raises(IndexError, match="flip"):
        t.flip(3)
    with pytest.raises(ShapeError, match="repeat"):
        t.repeat(2)
    with pytest.raises(ShapeError, match="unflatten"):
        t.unflatten(1, (2, 2))
    with pytest.raises(ValueError, match="roll"):
        t.roll((1, 2), 0)
    with pytest.raises(ShapeError, match="flatten"):
        Tensor.zeros(2, 3, 4).flatten(2, 1)


def test_zero_dim_numpy_keeps_its_shape():
    assert Tensor(np.zeros(())).shape == ()
    assert Tensor(np.float32(2.0)).shape == ()
    assert Tensor(np.float32(2.0)).item() == 2.0


def test_methods_made_from_tables_keep_their_names_and_docs():
    # the one-call methods (exp2, add, float, eq, ...) are built by factories in tensor/support.py from table rows
    made = {
        name: fn
        for cls in Tensor.__mro__
        for name, fn in vars(cls).items()
        if callable(fn) and getattr(getattr(fn, "__code__", None), "co_name", "") == "method"
    }
    # (sin is written out: it gives its derivative through Tensor.cos)
    assert {"exp2", "log2", "sqrt", "reciprocal", "maximum", "float", "long", "eq", "ge"} <= set(made)
    for name, fn in made.items():
        # its name is where it lives (an alias such as __add__ = add included; there, or the wrapper that takes
        # torch's keyword names, tensor/torch_keywords.py; read from the class, through
        # tensor_type._ComplexFirst's dispatch on a complex first argument), and it has its docstring
        chain = [getattr(Tensor, fn.__name__)]
        while len(chain) < 3 and hasattr(chain[-1], "__wrapped__"):
            chain.append(chain[-1].__wrapped__)
        assert any(f is fn for f in chain) and fn.__doc__, name
    assert ">>> Tensor([3.0]).exp2().tolist()\n[8.0]" in Tensor.exp2.__doc__
    # the same results, gradients and promotion as the hand-written methods they replaced
    x = Tensor([1.0, 4.0], requires_grad=True)
    (x.sqrt().add(x.reciprocal()).mul(2)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (0.5 / np.sqrt([1.0, 4.0]) - 1 / np.array([1.0, 4.0]) ** 2))
    assert Tensor([1, 2]).exp2().dtype == dtypes.float32 and Tensor([1, 2]).add(1.5).dtype == dtypes.float32
    assert (2 + Tensor([1])).tolist() == [3] and Tensor([1, 5]).maximum(3).tolist() == [3, 5]


def test_large_lists_build_quickly_with_the_dtype_of_their_values():
    # a flat list of plain numbers takes a fast path (a million ints took seconds); its dtype is still the values'
    import time

    start = time.perf_counter()
    big = Tensor(list(range(200_000)))
    assert time.perf_counter() - start < 10  # (generous: only a call per element would get near it)
    assert big.dtype == dtypes.int32 and big[-1].item() == 199_999
    cases = [
        ([True, 5], dtypes.int32, [1, 5]),
        ([True, False], dtypes.bool, [True, False]),
        ([1, 2**40], dtypes.int64, [1, 2**40]),
        ([-(2**31), 2**31 - 1], dtypes.int32, [-(2**31), 2**31 - 1]),
        ([-(2**31) - 1], dtypes.int64, [-(2**31) - 1]),
        ([1.5, True], dtypes.float32, [1.5, 1.0]),
        ([[True], [2.0]], dtypes.float32, [[1.0], [2.0]]),
        ([[1, 2], [3, 4]], dtypes.int32, [[1, 2], [3, 4]]),
        ([], dtypes.float32, []),
        # (a numpy scalar keeps its dtype, as in torch.tensor)
        ([np.int64(3), 4], dtypes.int64, [3, 4]),
        # ranges inside a list are lists of their ints, as torch.tensor's
        ([range(3), range(1, 4)], dtypes.int32, [[0, 1, 2], [1, 2, 3]]),
        ([range(0)], dtypes.float32, [[]]),
    ]
    for data, dt, values in cases:
        t = Tensor(data)
        assert (t.dtype, t.tolist()) == (dt, values), data
        assert t.tolist() == torch.tensor(data).tolist(), data


def test_dtype_none_is_the_default_dtype_as_torch():
    x = Tensor([1.5, 2.5])
    assert x.zeros_like(dtype=None).dtype == x.dtype and x.ones_like(dtype=None).dtype == x.dtype
    assert Tensor.randn(3, dtype=None).dtype == dtypes.default_float
    assert Tensor.rand(3, dtype=None).dtype == dtypes.default_float
    assert Tensor.linspace(0, 1, 3, dtype=None).dtype == dtypes.default_float
    assert Tensor.eye(3, dtype=None).dtype == dtypes.default_float
    assert Tensor.empty(3, dtype=None).dtype == dtypes.default_float
    assert Tensor.arange(3, dtype=None).dtype == Tensor.arange(3).dtype
    assert Tensor.arange(start=1, end=4, dtype=dtypes.float32).tolist() == [1.0, 2.0, 3.0]
    assert Tensor.arange(end=3).tolist() == [0, 1, 2]

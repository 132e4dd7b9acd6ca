"""torch's top-level functions a port calls as `Tensor.X(...)` (tensor/torch_functions.py) and uopkit.random, against
torch itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import uopkit
from uopkit import Tensor, dtypes, nn
from uopkit.dtype import to_dtype

RNG = np.random.default_rng(5)


def _same(got: Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, atol)
        return
    assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
    assert got.dtype == to_dtype(str(want.dtype)[6:]) or (got.dtype == dtypes.int32 and want.dtype == torch.int64)
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.double().numpy(), atol=atol, rtol=1e-5)


def _made_dtypes(T, mk) -> dict:
    # the dtype of every float value made without a dtype, as torch chooses it from its default dtype
    return {
        "list": mk([1.0, 2.0]).dtype, "number": mk(1.5).dtype, "zeros": T.zeros(2).dtype, "ones": T.ones(2).dtype,
        "empty": T.empty(2).dtype, "full": T.full((2,), 1.5).dtype, "rand": T.rand(2).dtype, "randn": T.randn(2).dtype,
        "arange": T.arange(0, 1, 0.5).dtype, "linspace": T.linspace(0, 1, 3).dtype, "eye": T.eye(2).dtype,
        "logspace": T.logspace(0, 1, 3).dtype, "hann_window": T.hann_window(4).dtype,
        "float64_array": mk(np.array([1.0])).dtype, "int_sqrt": mk([1, 4]).sqrt().dtype,
        "int_true_divide": (mk([1, 4]) / mk([2, 2])).dtype, "int_times_float": (mk([1, 4]) * 0.5).dtype,
        "scalar_tensor": T.scalar_tensor(3).dtype,
    }  # fmt: skip


LAYERS = [("Linear", (3, 4)), ("Conv2d", (2, 3, 3)), ("BatchNorm1d", (3,)), ("LayerNorm", (3,)), ("Embedding", (5, 3)),
          ("LSTM", (3, 4)), ("MultiheadAttention", (4, 2)), ("GroupNorm", (2, 4)), ("RMSNorm", (3,))]  # fmt: skip


@pytest.mark.parametrize("name", ["float64", "float16", "bfloat16", "float32"])
def test_set_default_dtype_as_torch(name):
    torch.set_default_dtype(getattr(torch, name))
    try:
        want = {k: to_dtype(str(v)[6:]) for k, v in _made_dtypes(torch, torch.tensor).items()}
        want_layers = [
            {k: to_dtype(str(v.dtype)[6:]) for k, v in getattr(torch.nn, layer)(*args).state_dict().items()}
            for layer, args in LAYERS
        ]
        want_default = to_dtype(str(torch.get_default_dtype())[6:])
    finally:
        torch.set_default_dtype(torch.float32)
    uopkit.set_default_dtype(name)
    try:
        got = _made_dtypes(Tensor, Tensor)
        got_layers = [{k: v.dtype for k, v in getattr(nn, layer)(*args).state_dict().items()} for layer, args in LAYERS]
        got_default = Tensor.get_default_dtype()
    finally:
        Tensor.set_default_dtype(dtypes.float32)
    assert got == want and got_layers == want_layers and got_default == want_default
    assert uopkit.get_default_dtype() == dtypes.float32


def test_set_default_dtype_refuses_what_torch_refuses():
    for bad in ("int32", dtypes.bool, torch.int64):
        with pytest.raises(TypeError):
            torch.set_default_dtype(bad if isinstance(bad, torch.dtype) else getattr(torch, str(bad).split(".")[-1]))
        with pytest.raises(TypeError, match="set_default_dtype: the default dtype must be a float one"):
            uopkit.set_default_dtype(bad)
    assert Tensor.get_default_dtype() == dtypes.float32
    # a torch dtype is taken too
    uopkit.set_default_dtype(torch.float64)
    try:
        assert Tensor([0.5]).dtype == dtypes.float64
    finally:
        uopkit.set_default_dtype(torch.float32)


def test_asarray_as_torch():
    x = RNG.standard_normal(3).astype(np.float32)
    t, tt = Tensor(x), torch.from_numpy(x.copy())
    assert Tensor.asarray(t) is t and torch.asarray(tt) is tt
    for kwargs in ({"dtype": "float64"}, {"copy": True}, {"dtype": "float16", "copy": True}):
        theirs = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
        mine = Tensor.asarray(t, **kwargs)
        assert mine is not t
        _same(mine, torch.asarray(tt, **theirs), atol=1e-3)
    with pytest.raises(ValueError):
        torch.asarray(tt, dtype=torch.float64, copy=False)
    with pytest.raises(ValueError, match="asarray: copy=False can't alias a float tensor on"):
        Tensor.asarray(t, dtype="float64", copy=False)
    # requires_grad: set on the tensor itself where it is returned; a conversion or a copy keeps the graph
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kwargs in ({}, {"requires_grad": False}, {"requires_grad": True}, {"dtype": "float64"}, {"copy": True}):
            w, tw = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            theirs = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
            mine, want = Tensor.asarray(w, **kwargs), torch.asarray(tw, **theirs)
            assert (mine is w) == (want is tw), kwargs
            assert (mine.requires_grad, w.requires_grad) == (want.requires_grad, tw.requires_grad), kwargs
            if want.requires_grad:
                (mine * mine).sum().backward()
                (want * want).sum().backward()
                _same(w.grad, tw.grad)
    made = Tensor.asarray([1.0, 2.0], requires_grad=True)
    assert made.requires_grad and made.is_leaf
    for data in ([1, 2], [1.5], 3, 2.5, np.array([1.0, 2.0]), np.array([1, 2], np.int16), [True, False]):
        _same(Tensor.asarray(data), torch.asarray(data))
    _same(Tensor.asarray([Tensor(1.0), Tensor(2.0)]), torch.asarray([torch.tensor(1.0), torch.tensor(2.0)]))
    _same(Tensor.asarray([1, 2], dtype="float16"), torch.asarray([1, 2], dtype=torch.float16))


def test_row_stack_chain_matmul_rsub_scalar_tensor_as_torch():
    a, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    _same(Tensor.row_stack([Tensor(a), Tensor(b)]), torch.row_stack([torch.from_numpy(a), torch.from_numpy(b)]))
    ms = [RNG.standard_normal(s).astype(np.float32) for s in [(2, 5), (5, 3), (3, 4), (4, 1)]]
    mine = [Tensor(m, requires_grad=True) for m in ms]
    theirs = [torch.tensor(m, requires_grad=True) for m in ms]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.chain_matmul(*theirs)
        want_one = torch.chain_matmul(theirs[0])
        with pytest.raises(RuntimeError):
            torch.chain_matmul(torch.ones(2))
    got = Tensor.chain_matmul(*mine)
    _same(got, want.detach(), atol=1e-4)
    (got * got).sum().backward()
    (want * want).sum().backward()
    for m, t in zip(mine, theirs, strict=True):
        _same(m.grad, t.grad, atol=1e-4)
    _same(Tensor.chain_matmul(mine[0]), want_one.detach())
    with pytest.raises(RuntimeError, match=r"chain_matmul: every argument must be a matrix \(2-D\), argument 0"):
        Tensor.chain_matmul(Tensor.ones(2))
    x = RNG.standard_normal(4).astype(np.float32)
    _same(Tensor.rsub(Tensor(x), 5, alpha=2), torch.rsub(torch.from_numpy(x), 5, alpha=2))
    _same(Tensor.rsub(Tensor(x), Tensor(b[0, :1])), torch.rsub(torch.from_numpy(x), torch.from_numpy(b[0, :1])))
    _same(Tensor([1, 2]).rsub(3), torch.rsub(torch.tensor([1, 2]), 3))
    for s, dtype in [(3, None), (True, None), (2.5, "float64"), (7, "int16")]:
        kwargs = {} if dtype is None else {"dtype": dtype}
        tkwargs = {} if dtype is None else {"dtype": getattr(torch, dtype)}
        _same(Tensor.scalar_tensor(s, **kwargs), torch.scalar_tensor(s, **tkwargs))


def test_poisson_and_binomial_draw_torchs_distributions():
    Tensor.manual_seed(3)
    rates = Tensor.full((20000,), 3.5)
    draw = Tensor.poisson(rates).numpy()
    assert rates.poisson().dtype == dtypes.float32 and np.all(draw == np.floor(draw))
    assert abs(draw.mean() - 3.5) < 0.1 and abs(draw.var() - 3.5) < 0.2
    zeros = Tensor.zeros(3, dtype="float64")
    _same(Tensor.poisson(zeros), torch.poisson(torch.zeros(3, dtype=torch.float64)))
    # a generator of its own draws the same from the same seed
    g1, g2 = uopkit.Generator().manual_seed(9), uopkit.Generator().manual_seed(9)
    assert Tensor.poisson(rates[:5], g1).tolist() == Tensor.poisson(rates[:5], generator=g2).tolist()
    with pytest.raises(RuntimeError):
        torch.poisson(torch.tensor([-1.0]))
    with pytest.raises(RuntimeError, match="poisson: invalid Poisson rate"):
        Tensor.poisson(Tensor([-1.0]))
    with pytest.raises(NotImplementedError):
        torch.poisson(torch.tensor([1]))
    with pytest.raises(NotImplementedError, match="poisson: the rates must be a float tensor"):
        Tensor.poisson(Tensor([1]))
    counts, probs = Tensor.full((20000,), 10.0), Tensor.full((20000,), 0.3)
    draw = Tensor.binomial(counts, probs).numpy()
    assert abs(draw.mean() - 3.0) < 0.1 and abs(draw.var() - 2.1) < 0.15 and draw.min() >= 0 and draw.max() <= 10
    _same(
        Tensor.binomial(Tensor([4.0, 4.0]), Tensor([0.0, 1.0])),
        torch.binomial(torch.tensor([4.0] * 2), torch.tensor([0.0, 1.0])),
    )
    with pytest.raises(ValueError):
        torch.binomial(torch.tensor([5]), torch.tensor([0.5]))
    with pytest.raises(ValueError, match="binomial only supports floating-point dtypes for count"):
        Tensor.binomial(Tensor([5]), Tensor([0.5]))


def test_fork_rng_restores_the_global_stream_as_torch():
    def run(lib, draw):
        lib.random.manual_seed(4)
        with lib.random.fork_rng():
            draw()
        inside_kept = draw()
        lib.random.manual_seed(4)
        with pytest.raises(KeyError), lib.random.fork_rng():
            draw()
            raise KeyError
        after_error = draw()
        lib.random.manual_seed(4)
        with lib.random.fork_rng(enabled=False):
            draw()
        return inside_kept, after_error, draw()

    first, after_error, unforked = run(uopkit, lambda: Tensor.rand(3).tolist())
    uopkit.random.manual_seed(4)
    assert first == after_error == Tensor.rand(3).tolist() and unforked != first
    want = run(torch, lambda: torch.rand(3).tolist())
    assert want[0] == want[1] and want[2] != want[0]
    assert uopkit.random.get_rng_state is Tensor.get_rng_state

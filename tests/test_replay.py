"""Elementwise methods replay a graph recorded once per input signature (`uopkit.tensor.replay`): the replayed graph
computes what the method itself computes, values and gradients (also second ones), over any input of that signature;
arguments are part of the key; what can't be replayed runs the method itself."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import uopkit
from uopkit import Tensor, dtypes, nn
from uopkit.tensor import elementwise as tensor_elementwise
from uopkit.tensor import functional as tensor_functional
from uopkit.tensor import math as tensor_math
from uopkit.tensor import replay

VALUES = [-30.0, -3.0, -1.0, -0.5, -0.0, 0.0, 1e-4, 0.3, 0.6, 2.0, 25.0, float("nan"), float("inf"), -float("inf")]

METHODS: dict[str, Callable[[Tensor], Tensor]] = {
    "abs": Tensor.abs,
    "sign": Tensor.sign,
    "tanh": Tensor.tanh,
    "sigmoid": Tensor.sigmoid,
    "gelu": Tensor.gelu,
    "gelu tanh": lambda t: t.gelu(approximate="tanh"),
    "silu": Tensor.silu,
    "mish": Tensor.mish,
    "softplus beta 2": lambda t: t.softplus(2.0),
    "elu": Tensor.elu,
    "erf": Tensor.erf,
    "log1p": Tensor.log1p,
    "expm1": Tensor.expm1,
    "asinh": Tensor.asinh,
    "atan": Tensor.atan,
    "round": Tensor.round,
    "round 1": lambda t: t.round(1),
    "clip": lambda t: t.clip(-1, 0.5),
    "clamp min=": lambda t: t.clamp(min=0.25),
    "hardswish": Tensor.hardswish,
    "nan_to_num": lambda t: t.nan_to_num(posinf=7.0),
    "softmax": lambda t: t.reshape(2, 7).softmax(-1),
    "log_softmax dim=": lambda t: t.reshape(2, 7).log_softmax(dim=0),
    "layernorm": lambda t: t.reshape(2, 7).layernorm(),
}


def _direct(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    # the same method with every replayed method running itself (no signature gives a key)
    key = replay._key
    replay._key = lambda *a: None  # type: ignore[assignment]
    try:
        return fn(x)
    finally:
        replay._key = key  # type: ignore[assignment]


def _values_and_grads(fn: Callable[[Tensor], Tensor], values: list[float], direct: bool) -> tuple[np.ndarray, ...]:
    x = Tensor(values, requires_grad=True)
    y = _direct(fn, x) if direct else fn(x)
    weights = Tensor(np.linspace(0.5, 2, y.numel()).reshape(y.shape), dtype=y.dtype)
    (y * weights).sum().backward()
    assert x.grad is not None
    return y.numpy(), x.grad.numpy()


@pytest.mark.parametrize("name", list(METHODS))
def test_replay_matches_the_method(name: str) -> None:
    fn = METHODS[name]
    want = _values_and_grads(fn, VALUES, direct=True)
    # the first call records the template, the others replay it over other tensors of the same signature
    for values in (VALUES, VALUES, list(reversed(VALUES))):
        got = _values_and_grads(fn, values, direct=False)
        expect = want if values is VALUES else _values_and_grads(fn, values, direct=True)
        for g, w in zip(got, expect, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "mish", "erf", "softplus beta 2", "abs"])
def test_second_derivatives_through_a_replay(name: str) -> None:
    fn = METHODS[name]
    values = [-2.0, -0.7, 0.2, 0.9, 3.0]
    results = []
    for direct in (True, False, False):
        x = Tensor(values, requires_grad=True)
        y = _direct(fn, x) if direct else fn(x)
        (dx,) = y.sum().gradient(x)
        dx.square().sum().backward()
        assert x.grad is not None
        results.append((dx.numpy(), x.grad.numpy()))
    for got in results[1:]:
        np.testing.assert_allclose(got[0], results[0][0], rtol=1e-6)
        np.testing.assert_allclose(got[1], results[0][1], rtol=1e-6)


def test_a_replayed_value_keeps_its_input_as_it_was() -> None:
    x = Tensor([0.5, -1.0]).realize()
    y = x.tanh()
    x += 1
    np.testing.assert_allclose(y.numpy(), np.tanh([0.5, -1.0]), rtol=1e-6)
    np.testing.assert_allclose(x.tanh().numpy(), np.tanh([1.5, 0.0]), rtol=1e-6)


def test_arguments_are_part_of_the_key() -> None:
    x = Tensor([-2.0, 0.3, 2.0])
    assert x.clip(-1, 1).tolist() == pytest.approx([-1.0, 0.3, 1.0])
    assert x.clip(-0.5, 0.5).tolist() == pytest.approx([-0.5, 0.3, 0.5])
    # an int and a float bound of one value: an int tensor clipped by a float is a float (as torch)
    i = Tensor([1, 5, 9])
    assert i.clip(2, 6).dtype == dtypes.int32 and i.clip(2, 6).tolist() == [2, 5, 6]
    assert i.clip(2.5, 6).dtype == dtypes.float32 and i.clip(2.5, 6).tolist() == [2.5, 5.0, 6.0]
    # -0.0 and 0.0 are other keys (equal as Python numbers)
    z = Tensor([-1.0, 1.0])
    assert [np.signbit(v) for v in z.clip(0.0, 0.0).numpy()] == [False, False]
    assert [np.signbit(v) for v in z.clip(-0.0, -0.0).numpy()] == [True, True]


def test_signatures_are_apart() -> None:
    signatures = [((3,), dtypes.float32), ((2, 3), dtypes.float32), ((3,), dtypes.float64), ((), dtypes.float16)]
    for shape, dtype in signatures:
        x = Tensor(np.linspace(-2, 2, int(np.prod(shape))).reshape(shape), dtype=dtype)
        y = x.tanh()
        assert y.shape == shape and y.dtype == dtype
        np.testing.assert_allclose(y.numpy(), np.tanh(x.numpy().astype(np.float64)), rtol=2e-3)


def test_what_cant_be_replayed_runs_the_method() -> None:
    u = Tensor([1, 2], dtype=dtypes.uint8)
    # abs of an unsigned tensor is the tensor itself
    assert u.abs() is u
    # tensor arguments
    x = Tensor([-2.0, 0.5, 3.0])
    assert x.clip(Tensor([-1.0, -1.0, -1.0]), Tensor(1.0)).tolist() == [-1.0, 0.5, 1.0]
    # bfloat16 inputs
    assert Tensor([0.5], dtype=dtypes.bfloat16).tanh().dtype == dtypes.bfloat16
    # the method's own error, each time
    for _ in range(2):
        with pytest.raises(IndexError, match="softmax: axis 3 is out of range"):
            Tensor([1.0, 2.0]).softmax(3)


def test_templates_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "MAX_TEMPLATES", 3)
    replay._templates.clear()
    for n in range(1, 8):
        assert Tensor.ones(n).tanh().shape == (n,)
    assert len(replay._templates) <= 3
    # none kept: every call records (and still builds the right graph)
    monkeypatch.setattr(replay, "MAX_TEMPLATES", 0)
    for _ in range(2):
        assert Tensor([0.5]).tanh().tolist() == pytest.approx([np.tanh(0.5)])
    assert not replay._templates


def _is_replayed(fn) -> bool:
    # a replayed method, also under other decorators (autocast's)
    while getattr(fn, "__wrapped__", None) is not None:
        if fn.__code__ is replay.replayed(lambda s: s).__code__:
            return True
        fn = fn.__wrapped__
    return False


REPLAYED = [
    name
    for module in (tensor_math, tensor_functional, tensor_elementwise)
    for mixin in vars(module).values()
    if isinstance(mixin, type) and mixin.__module__ == module.__name__
    for name, fn in vars(mixin).items()
    if _is_replayed(fn)
]


def test_every_replayed_method_matches_itself_on_odd_inputs():
    # each replayed method against itself with replay off, on the inputs whose branches differ: half floats (computed
    # in float32), ints and bools (some methods return the input, some raise), 0-d and empty tensors
    assert len(REPLAYED) >= 40 and {"tanh", "softmax", "isinf"} <= set(REPLAYED)
    rng = np.random.default_rng(0)
    for name in REPLAYED:
        for dtype, shape in [(dtypes.float16, (3,)), (dtypes.int32, (3,)), (dtypes.bool, (3,)), (dtypes.float32, ())]:
            values = rng.standard_normal(shape) * 3
            x = Tensor(values > 0 if dtype == dtypes.bool else values, dtype=dtype)
            outcomes = []
            for direct in (True, False, False):
                try:
                    y = _direct(getattr(Tensor, name), x) if direct else getattr(x, name)()
                    outcomes.append((y.dtype, y.shape, y.numpy().tobytes()))
                except Exception as e:  # noqa: BLE001 - the same error both ways is what is checked
                    outcomes.append((type(e), str(e)))
            assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0], (name, dtype, shape)


def _mix(a: Tensor, b: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    # two tensors in, two out: a step of a loop over its own results
    s = (a * scale + b.exp()).tanh()
    return s + b, (s * b).sum(-1, keepdim=True) - b


def _sum_and_view(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    return a + b, b[:1]


def test_replay_call_of_several_tensors_builds_the_functions_own_graph():
    rng = np.random.default_rng(0)
    replay._templates.clear()
    for _ in range(3):
        a, b = (Tensor(rng.standard_normal((3, 4)).astype(np.float32)) for _ in range(2))
        got = replay.replay_call(_mix, (a, b), 0.5)
        want = _direct(lambda x, b=b: _mix(x, b, 0.5), a)
        # (hash-consed: the same graph is the same nodes)
        assert type(got) is tuple and all(g.uop is w.uop for g, w in zip(got, want, strict=True))
    recorded = [k for k, t in replay._templates.items() if k[0] is _mix]
    assert len(recorded) == 1 and replay._templates[recorded[0]] is not None
    # another scalar or signature is another recording
    replay.replay_call(_mix, (a, b), 2.0)
    replay.replay_call(_mix, (a[:2], b[:2]), 2.0)
    assert len([k for k in replay._templates if k[0] is _mix]) == 3
    # a view among the results (its storage is the input's) is not replayed: the function runs itself
    got = replay.replay_call(_sum_and_view, (a, b))
    assert got[1].uop is b[:1].uop and [t for k, t in replay._templates.items() if k[0] is _sum_and_view] == [None]


def test_replay_call_gradients_match_the_function():
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    grads = []
    for replayed in (False, True, True):
        a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
        out = replay.replay_call(_mix, (a, b), 0.5) if replayed else _mix(a, b, 0.5)
        (out[0].sum() + (out[1] * 2).sum()).backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    for g in grads[1:]:
        np.testing.assert_allclose(g[0], grads[0][0], rtol=1e-5)
        np.testing.assert_allclose(g[1], grads[0][1], rtol=1e-5)


def _graph_key(t: Tensor) -> tuple:
    # the graph's structure over its buffers (the schedule cache's key): fresh CONTIGUOUS args are numbered
    from uopkit.engine import realize

    param = realize._parameterize((t.uop,))
    assert param is not None
    return param.key


@pytest.mark.parametrize(
    "name",
    ["sort int32", "sort int64 desc", "sort float rows", "solve", "solve batch", "lu wide", "det tall"],
)
def test_replayed_loops_build_the_graph_of_their_steps(name: str, monkeypatch):
    # a factorization's column steps and a sort's kernels (its searches: `uopkit.tensor.blocksort`) are built by
    # replay_call: the whole graph (so every kernel) is the one the steps build op by op
    from uopkit.tensor import relaunch
    from uopkit.tensor.factorize import _eliminate

    # (a sort's graph each call: the second one's kernels would be launched again, with no graph to compare)
    monkeypatch.setattr(relaunch, "ENABLED", False)

    def eliminated(x: Tensor, rhs: Tensor | None, jordan: bool) -> Tensor:
        # (the graph of every step: else the first step's kernels are launched again, with no graph to compare)
        return _eliminate(x, rhs, jordan, graph=True)[0]

    rng = np.random.default_rng(2)
    cases = {
        "sort int32": (lambda x: x.argsort(), rng.integers(0, 50, 300).astype(np.int32)),
        "sort int64 desc": (lambda x: x.sort(descending=True)[1], rng.integers(0, 50, (2, 300))),
        "sort float rows": (lambda x: x.sort()[0], rng.standard_normal((3, 700)).astype(np.float32)),
        "solve": (lambda x: eliminated(x, x[..., :2], True), rng.standard_normal((6, 6)).astype(np.float32)),
        "solve batch": (lambda x: eliminated(x, x[..., :1], True), rng.standard_normal((2, 5, 5)).astype("float32")),
        "lu wide": (lambda x: eliminated(x, None, False), rng.standard_normal((3, 5)).astype(np.float32)),
        "det tall": (lambda x: eliminated(x, None, False), rng.standard_normal((2, 6, 4)).astype(np.float32)),
    }
    fn, values = cases[name]
    replay._templates.clear()
    x = Tensor(values)
    got, want = fn(x), _direct(fn, x)
    assert _graph_key(got) == _graph_key(want)
    step_names = ("_elimination_step", "_bitonic_exchange", "_counts_before", "_positions_ranked")
    steps = [t for k, t in replay._templates.items() if k[0].__name__ in step_names]
    assert steps and all(t is not None for t in steps)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _layers(name: str) -> tuple[Callable[[Tensor], Tensor], Callable[[torch.Tensor], torch.Tensor], str]:
    # (uopkit's function, torch's, the function whose graph is replayed): a norm layer made once, used for every call
    if name == "layer norm":
        ln = nn.LayerNorm(7)
        return ln, torch.nn.LayerNorm(7), "_normalized"
    if name == "group norm":
        gn, tgn = nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)
        return (lambda t: gn(t.reshape(2, 4, 7))), (lambda t: tgn(t.reshape(2, 4, 7))), "_normalized"
    if name == "triu 1":
        return (lambda t: t.triu(1)), (lambda t: t.triu(1)), "triu"
    return (lambda t: t.tril(-1)), (lambda t: t.tril(-1)), "tril"


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("name", ["layer norm", "group norm", "triu 1", "tril -1"])
def test_norms_and_triangles_replay_the_graph_built_op_by_op(name: str, grad: bool) -> None:
    # a norm layer's normalization and triu/tril are built by replaying their recorded graph: the same nodes (so the
    # same kernels) as op by op, under no_grad too, with torch's values and gradients
    fn, torch_fn, recorded = _layers(name)
    rng = np.random.default_rng(3)
    replay._templates.clear()
    for _ in range(3):
        values = rng.standard_normal((8, 7)).astype(np.float32)
        x = Tensor(values, requires_grad=True)
        with uopkit.enable_grad() if grad else uopkit.no_grad():
            got, want = fn(x), _direct(fn, x)
        assert got.uop is want.uop
        tx = torch.tensor(values, requires_grad=True)
        with torch.enable_grad() if grad else torch.no_grad():
            expected = torch_fn(tx)
        np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
        if grad:
            (got * got).sum().backward()
            (expected * expected).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert [k for k, t in replay._templates.items() if k[0].__name__ == recorded and t is not None]


def test_a_device_index_check_replays_its_bounds_and_still_raises() -> None:
    # an embedding looked up with a computed index (a decode loop's token) checks it by reading back its min and max,
    # whose graph is replayed per index signature; out of range it raises IndexError, as torch's
    emb = nn.Embedding(10, 3)
    replay._templates.clear()
    for dtype in (dtypes.int32, dtypes.int64):
        for k in range(3):
            idx = Tensor([[1, 2], [3, 0]], dtype=dtype) * 2 + k
            np.testing.assert_array_equal(emb(idx).numpy(), emb.weight.numpy()[idx.numpy()])
        assert [k for k, t in replay._templates.items() if k[0].__name__ == "_min_and_max" and t is not None]
        replay._templates.clear()
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        emb(Tensor([[1, 2], [3, 0]]) * 2 + 4)
    with pytest.raises(IndexError):
        torch.nn.Embedding(10, 3)(torch.tensor([[1, 2], [3, 0]]) * 2 + 4)


def test_a_replayed_view_of_a_detached_leaf_keeps_that_leaf():
    # `x.detach().requires_grad_()` makes a DETACH with a fresh id of its own, which the schedule cache keys by order
    # of appearance: a replay rebuilt a view of it with the first call's id, so the second call's view no longer read
    # its own leaf and backward() found no tensor requiring grad (torch: the gradient of each call)
    torch = pytest.importorskip("torch")
    for i in range(3):
        a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) + i
        leaf = Tensor(a).detach().requires_grad_(True)
        x = leaf.diagonal()
        x.numpy()
        (x * x).sum().backward()
        t = torch.tensor(a, requires_grad=True)
        (t.diagonal() ** 2).sum().backward()
        np.testing.assert_allclose(leaf.grad.numpy(), t.grad.numpy())

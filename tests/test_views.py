"""PyTorch's views share storage: an in-place write into a view (`x[1] += 1`, `x.T[0] = 1`, `x[:, 1:].fill_(4)`,
`x.detach().mul_(2)`) shows in its base and the base's write in its views, also while the base is a lazy value or a
constant; tensors that only hold the same hash-consed node (`Tensor.zeros(3)` twice) never share a write; a pending
assign keeps reading what it was built from; and PyTorch's in-place methods (docs/semantics.md). Every case runs the
same program on torch and on uopkit."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes
from uopkit.helpers import GlobalCounters
from uopkit.tensor.support import ArgumentError

torch = pytest.importorskip("torch")


def _lazy(T: Any, *shape: int) -> Any:
    # a computed value (not stored yet) in both frameworks
    return T.arange(float(np.prod(shape))).reshape(shape) * 1


def _realized(T: Any, *shape: int) -> Any:
    x = _lazy(T, *shape)
    return x.realize() if T is Tensor else x


def _index(T: Any, values: list[int]) -> Any:
    return Tensor(values) if T is Tensor else torch.tensor(values)


def _then(*results: Any) -> Any:
    # run the writes (the leading arguments) for their effect; the last argument is what the case returns
    return results[-1]


CASES: dict[str, Callable[[Any], Any]] = {
    "slice of a lazy value": lambda T: (lambda x: _then(x[1].add_(5), x))(_lazy(T, 3, 4)),
    "iadd on a row": lambda T: (lambda x: _then(x[1].__iadd__(5), x))(_lazy(T, 3, 4)),
    "setitem through a transpose of zeros": lambda T: (lambda x: _then(x.T.__setitem__(0, 1), x))(T.zeros(3, 4)),
    "chained setitem on zeros": lambda T: (lambda x: _then(x[1].__setitem__(2, 9), x))(T.zeros(2, 3)),
    "fill_ of a column slice": lambda T: (lambda x: _then(x[:, 1:].fill_(4), x))(T.zeros(2, 3)),
    "unbind rows": lambda T: (lambda x: _then([r.mul_(i) for i, r in enumerate(x.unbind(0))], x))(_lazy(T, 3, 2)),
    "chunk": lambda T: (lambda x: _then([c.add_(i) for i, c in enumerate(x.chunk(2, 1))], x))(_lazy(T, 2, 4)),
    "narrow": lambda T: (lambda x: _then(x.narrow(1, 1, 2).mul_(0), x))(_lazy(T, 2, 3)),
    "diagonal": lambda T: (lambda x: _then(x.diagonal().fill_(-5), x))(_lazy(T, 3, 3)),
    "diagonal above, realized": lambda T: (lambda x: _then(x.diagonal(1).fill_(-5), x))(_realized(T, 3, 4)),
    "view of a view": lambda T: (lambda x: _then(x[1][1:].add_(5), x))(_lazy(T, 3, 4)),
    "flatten strided": lambda T: (lambda x: _then(x.flatten()[::3].fill_(-1), x))(_lazy(T, 2, 3)),
    "odd strided slice, lazy": lambda T: (lambda x: _then(x[::2].add_(10), x))(_lazy(T, 5)),
    "odd strided slice, realized": lambda T: (lambda x: _then(x[::2].add_(10), x))(_realized(T, 5)),
    "setitem into an odd strided slice": lambda T: (lambda x: _then(x[::2].__setitem__(1, 99), x))(_realized(T, 5)),
    "strided columns": lambda T: (lambda x: _then(x[:, ::2].mul_(-1), x))(_lazy(T, 3, 5)),
    "a view kept while the base changes": lambda T: (lambda x: (lambda v: _then(x.mul_(2), v))(x[1:]))(_lazy(T, 3, 4)),
    "a column kept while the base is set": lambda T: (lambda x: (lambda v: _then(x.__setitem__(0, -1), v))(x[:, 0]))(
        _lazy(T, 3, 4)
    ),
    "two views of zeros": lambda T: (lambda x: (lambda a, b: _then(a.add_(1), b.add_(2), [x, a, b]))(x[0], x[:, 1]))(
        T.zeros(3, 4)
    ),
    "a value computed from the view keeps the old contents": lambda T: (
        lambda x: (lambda y: _then(x[0].add_(100), [y, x]))(x[0] * 2)
    )(_lazy(T, 2, 2)),
    "masked setitem on a row": lambda T: (lambda x: _then(x[0].__setitem__(x[0] > 1, 0), x))(_lazy(T, 2, 4)),
    "index setitem on a column": lambda T: (lambda x: _then(x[:, 1].__setitem__(_index(T, [0, 2]), 9), x))(
        _lazy(T, 3, 4)
    ),
    "flip is a copy": lambda T: (lambda x: _then(x.flip(0).add_(1), x))(_realized(T, 4)),
    "setitem into a flip is a copy": lambda T: (lambda x: _then(x.flip(0).__setitem__(0, 9), x))(_realized(T, 4)),
    "a pad is a copy": lambda T: (
        lambda x: _then((x.pad(((1, 1),)) if T is Tensor else torch.nn.functional.pad(x, (1, 1))).add_(1), x)
    )(_realized(T, 4)),
    "detach shares storage": lambda T: (lambda x: _then(x.detach().mul_(2), x))(_realized(T, 3)),
    "setitem through detach of zeros": lambda T: (lambda x: _then(x.detach().__setitem__(1, 5), x))(T.zeros(3)),
    "int column": lambda T: (lambda x: _then(x[:, 1].__imul__(3), x))(
        T.ones(2, 3, dtype=dtypes.int32 if T is Tensor else torch.int32)
    ),
    "bfloat16 row": lambda T: (lambda x: _then(x[1].add_(1), x))(
        _lazy(T, 2, 3).cast(dtypes.bfloat16) if T is Tensor else _lazy(T, 2, 3).to(torch.bfloat16)
    ),
}


def _values(r: Any) -> list[np.ndarray]:
    items = r if isinstance(r, list) else [r]
    return [
        np.asarray(t.float().numpy() if isinstance(t, torch.Tensor) else t.cast(dtypes.float32).numpy()) for t in items
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_views_share_writes_as_torch(name: str) -> None:
    expected, got = _values(CASES[name](torch)), _values(CASES[name](Tensor))
    assert len(expected) == len(got)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)


def test_writing_through_an_expanded_view_raises():
    x = Tensor([1.0, 2.0, 3.0]).realize()
    with pytest.raises(ArgumentError, match="expanded"):
        x.expand(2, 3).add_(1)
    with pytest.raises(ArgumentError, match="single memory location"):
        x.expand(2, 3)[:, 1] = 7.0
    assert x.tolist() == [1.0, 2.0, 3.0]


EXPANDED_WRITES: dict[str, Callable[[Any], Any]] = {
    "one element": lambda e: e.__setitem__((0, 0), 5.0),
    "a row": lambda e: e.__setitem__(1, e[1] * 0 - 1),
    "part of a row": lambda e: e.__setitem__((1, slice(1, None)), 7.0),
    "in place into a row": lambda e: e[0].add_(100),
    "fill_ (one value, aliased)": lambda e: e.fill_(9.0),
    "zero_": lambda e: e.zero_(),
    "advanced index": lambda e: e.__setitem__((slice(None), [0, 2]), 4.0),
    "advanced index, repeated": lambda e: e.__setitem__(([0, 0],), 6.0),
}


@pytest.mark.parametrize("name", list(EXPANDED_WRITES))
@pytest.mark.parametrize("base", ["realized", "lazy", "constant"])
def test_writes_into_a_view_of_an_expand_reach_the_base(name: str, base: str):
    # PyTorch writes them into the expanded tensor's storage, and every row (an alias) shows it
    write = EXPANDED_WRITES[name]
    results = []
    for T in (torch, Tensor):
        if base == "constant":
            x = T.zeros(3)
        else:
            x = T.arange(3.0) * 1
            if base == "realized" and T is Tensor:
                x.realize()
        e = x.expand(2, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: index_put on an expanded tensor is deprecated
            write(e)
        results.append((x.tolist(), e.tolist()))
    assert results[1] == results[0]


# ---------------------------------------------------------------------------------------------------------------------
# tensors whose graphs were one hash-consed node are separate tensors


def test_equal_constants_never_share_a_write():
    a, b = Tensor.zeros(3), Tensor.zeros(3)
    a[0] = 1
    assert a.tolist() == [1.0, 0.0, 0.0] and b.tolist() == [0.0, 0.0, 0.0]
    a, b = Tensor.zeros(3), Tensor.zeros(3)
    a.realize()
    a += 1
    assert a.tolist() == [1.0, 1.0, 1.0] and b.tolist() == [0.0, 0.0, 0.0]
    a, b = Tensor.zeros(3, 4), Tensor.zeros(3, 4)
    a[0].fill_(1)
    assert a.sum().item() == 4 and b.sum().item() == 0


def test_equal_computed_values_never_share_a_write():
    x = Tensor([1.0, 2.0, 3.0])
    a, b = x + 1, x + 1
    kept = b[1:]
    a.realize()
    a += 1
    assert a.tolist() == [3.0, 4.0, 5.0] and b.tolist() == [2.0, 3.0, 4.0] and kept.tolist() == [3.0, 4.0]


# ---------------------------------------------------------------------------------------------------------------------
# assign (tinygrad's in-place write)


def test_a_pending_assign_keeps_reading_what_it_was_built_from():
    a = Tensor([0.0, 1.0, 2.0, 3.0]).contiguous().realize()
    b = Tensor([4.0, 5.0, 6.0, 7.0]).contiguous().realize()
    new_a, new_b = a + b, a * 2
    a.assign(new_a)
    b.assign(new_b)
    # torch: a.copy_(a + b); b.copy_(old a * 2)
    assert a.tolist() == [4.0, 6.0, 8.0, 10.0]
    assert b.tolist() == [0.0, 2.0, 4.0, 6.0] and new_b.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_assign_through_a_view_lands_in_the_base():
    t = Tensor.zeros(6).contiguous().realize()
    sums = [t.sum()]
    t[:3].assign(Tensor.ones(3))
    sums.append(t.sum())
    t.reshape(2, 3)[1].assign(Tensor.full((3,), 2.0))
    sums.append(t.sum())
    assert [s.item() for s in sums] == [0.0, 3.0, 9.0]
    assert t.tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    t[::2].assign(0.5)
    assert t.tolist() == [0.5, 1.0, 0.5, 2.0, 0.5, 2.0]


# ---------------------------------------------------------------------------------------------------------------------
# PyTorch's in-place methods


INPLACE = [
    ("abs_", ()), ("neg_", ()), ("exp_", ()), ("sigmoid_", ()), ("tanh_", ()), ("relu_", ()), ("floor_", ()),
    ("clamp_min_", (0.5,)), ("clamp_max_", (0.5,)), ("lerp_", ("other", 0.25)), ("addcmul_", ("other", "other")),
    ("addcdiv_", ("other", "other")), ("masked_fill_", ("mask", -1.0)), ("tril_", ()), ("triu_", (1,)),
    ("index_fill_", (1, "index", 7.0)), ("fmod_", (0.7,)), ("nan_to_num_", ()),
]  # fmt: skip


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_methods_write_into_the_base(name: str, args: tuple) -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 4)).astype(np.float32)
    other = rng.uniform(0.5, 2, (4,)).astype(np.float32)
    results = []
    for T in (torch, Tensor):
        x = (Tensor(base) * 1) if T is Tensor else torch.tensor(base) * 1
        extra = {
            "other": Tensor(other) if T is Tensor else torch.tensor(other),
            "mask": x[1:] > 0,
            "index": _index(T, [0, 2]),
        }
        view = x[1:]
        out = getattr(view, name)(*(extra.get(a, a) if isinstance(a, str) else a for a in args))
        assert out is view
        results.append(x.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


def test_inplace_methods_keep_the_dtype_rules():
    with pytest.raises(TypeError, match="sqrt_"):
        Tensor([1, 4]).sqrt_()
    t = Tensor.zeros(4, dtype=dtypes.int32)
    assert t.index_fill_(0, Tensor(1), 2.7).tolist() == [0, 2, 0, 0]


def test_random_fills():
    Tensor.manual_seed(0)
    t = Tensor.zeros(2000)
    t[1000:].uniform_(-2, 3)
    head, tail = t.numpy()[:1000], t.numpy()[1000:]
    assert (head == 0).all() and tail.min() >= -2 and tail.max() < 3 and abs(tail.mean() - 0.5) < 0.2
    t.normal_(1.0, 0.5)
    assert abs(t.numpy().mean() - 1.0) < 0.1 and abs(t.numpy().std() - 0.5) < 0.1
    b = Tensor.zeros(1000).bernoulli_(0.25)
    assert set(np.unique(b.numpy())) <= {0.0, 1.0} and 0.15 < b.numpy().mean() < 0.35


def test_index_copy_and_addcmul_as_torch():
    src = np.arange(4, dtype=np.float32).reshape(2, 2)
    got = Tensor.zeros(3, 2).index_copy(0, Tensor([2, 0]), Tensor(src)).numpy()
    want = torch.zeros(3, 2).index_copy(0, torch.tensor([2, 0]), torch.tensor(src)).numpy()
    np.testing.assert_array_equal(got, want)
    got = Tensor([1.0, 2.0]).addcdiv(Tensor([3.0, 4.0]), Tensor([2.0, 8.0]), value=2).numpy()
    np.testing.assert_array_equal(
        got, torch.tensor([1.0, 2.0]).addcdiv(torch.tensor([3.0, 4.0]), torch.tensor([2.0, 8.0]), value=2).numpy()
    )


# ---------------------------------------------------------------------------------------------------------------------
# gradients through writes into views of an intermediate (PyTorch's autograd follows the write)


def _grad_case(T: Any, w: Any, name: str) -> Any:
    if name == "imul on a slice":
        h = w * 2
        h[1:3] *= 3
        return (h * h).sum()
    if name == "add_ on a slice":
        h = w * 2
        h[0:2].add_(1)
        return (h * h).sum()
    if name == "mul_ on a row of a view":
        h = w * 2
        h.view(2, 2)[0].mul_(5)
        return (h * h).sum()
    if name == "a kept view after the base's write":
        h = w * 2
        v = h[1:]
        h.mul_(3)
        return (v * v).sum()
    if name == "strided mul_":
        h = w * 2
        h[::2].mul_(3)
        return (h * h).sum()
    if name == "relu_ through a transpose":
        h = (w * 2).reshape(2, 2)
        h.T.relu_()
        return (h * h).sum()
    if name == "setitem into a row":
        h = (w * 2).reshape(2, 2)
        h[1][0:1] = 7.0
        return (h * h).sum()
    if name == "setitem into a kept view":
        h = w * 3
        v = h[1:]
        v[0] = -1.0
        return (h * h).sum() + (v * v).sum()
    raise AssertionError(name)


GRAD_CASES = [
    "imul on a slice", "add_ on a slice", "mul_ on a row of a view", "a kept view after the base's write",
    "strided mul_", "relu_ through a transpose", "setitem into a row", "setitem into a kept view",
]  # fmt: skip


@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients_follow_writes_into_views(name: str) -> None:
    w0 = [1.0, 2.0, 3.0, 4.0]
    tw, uw = torch.tensor(w0, requires_grad=True), Tensor(w0, requires_grad=True)
    tl, ul = _grad_case(torch, tw, name), _grad_case(Tensor, uw, name)
    tl.backward()
    ul.backward()
    assert ul.item() == pytest.approx(tl.item())
    np.testing.assert_allclose(uw.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# assigns that read what they overwrite, and setitem's gradients and shapes


def test_a_value_reading_a_buffer_and_its_pending_assign_reads_the_old_contents():
    a = Tensor([1.0, 1.0, 1.0, 1.0]).realize()
    s = a * 3
    a.assign(a + 10)
    assert (s + a).tolist() == [14.0] * 4  # torch: s (3) + the new a (11)
    assert s.tolist() == [3.0] * 4 and a.tolist() == [11.0] * 4


def test_an_assign_after_a_read_of_a_pending_one():
    # (the scheduler's rewrite of the live graphs used to map the buffer to a store into itself, and never finish)
    a = Tensor.zeros(4).contiguous().realize()
    a.assign(Tensor([1.0, 2.0, 0.0, 0.0]))
    second = a + 1
    a.assign(a + 10)
    assert (second + a).tolist() == [13.0, 15.0, 11.0, 11.0]


def test_assign_through_detach_writes_the_base():
    b = Tensor([1.0, 2.0]).realize()
    b.detach().assign(b + 1)
    assert b.tolist() == [2.0, 3.0]


def test_a_lazy_leaf_read_before_backward_keeps_its_gradient():
    # Tensor.zeros(requires_grad=True) is computed with the first value read from it; backward still reaches it
    b = Tensor.zeros(3, requires_grad=True)
    out = Tensor([[1.0, 2.0, 3.0]]) * 2 + b
    out.numpy()
    out.sum().backward()
    assert b.grad is not None and b.grad.tolist() == [1.0, 1.0, 1.0]
    z = Tensor.ones(3, 2, requires_grad=True)
    y = z * 2
    y[:, 0] = 5.0
    y.sum().backward()
    assert z.grad.tolist() == [[0.0, 2.0]] * 3


@pytest.mark.parametrize("base", ["randn", "zeros", "intermediate"])
def test_setitem_of_a_value_with_a_gradient(base: str) -> None:
    results = []
    for T in (torch, Tensor):
        w = T.tensor([1.0, 2.0, 3.0], requires_grad=True) if T is torch else Tensor([1.0, 2.0, 3.0], requires_grad=True)
        if base == "randn":
            z = (torch.randn(3, 2) if T is torch else Tensor.randn(3, 2)) * 0
        elif base == "zeros":
            z = T.zeros(3, 2)
        else:
            v = (
                T.tensor([[1.0, 2.0]] * 3, requires_grad=True)
                if T is torch
                else Tensor([[1.0, 2.0]] * 3, requires_grad=True)
            )
            z = v * 2
        z[:, 0] = w * w
        (z * z).sum().backward()
        results.append(w.grad.numpy())
    np.testing.assert_allclose(results[1], results[0])


def test_gradient_through_box_setitems_is_elementwise_as_torch() -> None:
    # Longformer's banded scores: slices of a chunked product written into a zeros tensor, then corners masked through
    # a transposed view of it. The gradient through such writes (ints, step-1 slices, an Ellipsis; through the
    # tensor's flat buffer, a reshape or a permute of it) is the value padded into place: before, a one-hot of every
    # element against every write (1.6 s a training step where torch takes 0.2 s)
    from uopkit.uop.ops import Ops

    rng = np.random.default_rng(0)
    s_np, w_np = (
        rng.standard_normal((6, 3, 4, 5)).astype(np.float32),
        rng.standard_normal((6, 5, 2, 4)).astype(np.float32),
    )
    grads = []
    for T in (torch, Tensor):
        s = T.tensor(s_np, requires_grad=True) if T is torch else Tensor(s_np, requires_grad=True)
        diag = s.new_zeros((6, 4, 2, 5))
        diag[:, :-1, :, 2:] = s[:, :, :2, :3]
        diag[:, -1, :, 2:] = s[:, -1, 2:, :3]
        diag[:, 1:, :, :2] = s[:, :, -3:-1, 3:]
        diag[..., 0, 1:2, 1:2] = s[:, 0, :1, -1:] * 2
        view = diag.view(6, 8, 5).transpose(0, 1)
        view[:2, :, :3] = view[:2, :, :3].masked_fill(view[:2, :, :3] > 0.5, -1.0)
        view[-1] = 0.0
        (diag.reshape(6, 5, 2, 4) * (T.tensor(w_np) if T is torch else Tensor(w_np))).sum().backward()
        if T is Tensor:
            assert not any(u.op is Ops.REDUCE_AXIS for u in s.grad.uop.toposort())
        grads.append((diag.detach().numpy(), s.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-6)


_IN_PLACE_WRITES_OF_A_GRADIENT: dict[str, Callable[[Any, Any], None]] = {
    "add_": lambda b, x: b.add_(x),
    "copy_": lambda b, x: b.copy_(x),
    "slice +=": lambda b, x: b[1:3].__iadd__(x[:2]),
    "reshaped copy_": lambda b, x: b.reshape(2, 2)[1].copy_(x[:2]),
    "expanded row add_": lambda b, x: b.reshape(1, 4).expand(3, 4)[0].add_(x),
    "expanded row copy_": lambda b, x: b.reshape(1, 4).expand(3, 4)[2].copy_(x),
    "expanded element mul_": lambda b, x: b.reshape(1, 4).expand(3, 4)[1, 1:2].mul_(x[2]),
}


@pytest.mark.parametrize("write", list(_IN_PLACE_WRITES_OF_A_GRADIENT))
@pytest.mark.parametrize("base", ["arange", "realized", "lazy"])
def test_an_in_place_write_of_a_value_with_a_gradient(base: str, write: str) -> None:
    # an in-place method writing a value that carries a gradient into storage that carries none (a never-realized
    # arange, a realized tensor, a view of a lazy value), also through an expanded view: the target takes the
    # gradient as setitem's (the gradient was lost, and backward() raised or gave only the loss's other terms)
    results = []
    for T in (torch, Tensor):
        x = (
            T.tensor([5.0, 6.0, 7.0, 8.0], requires_grad=True)
            if T is torch
            else Tensor([5.0, 6.0, 7.0, 8.0]).requires_grad_()
        )
        b = T.arange(4.0) if base == "arange" else _realized(T, 4) if base == "realized" else _lazy(T, 4)
        _IN_PLACE_WRITES_OF_A_GRADIENT[write](b, x)
        assert b.requires_grad
        loss = (b * b).sum() + (b * x).sum()
        loss.backward()
        results.append((loss.item(), x.grad.numpy()))
    assert results[1][0] == pytest.approx(results[0][0])
    np.testing.assert_allclose(results[1][1], results[0][1])


_WRITES_THROUGH_SLICES: dict[str, Callable[[Any, Any], Any]] = {
    # a periodic wavelet's inverse folds its tail back onto its head: `x[:, :, :2] += x[:, :, n:]`, then crops
    "wrap-around +=": lambda o, y: _then(o[:, :, :2].__iadd__(o[:, :, 32:]), o[..., :3].__iadd__(o[..., 31:]), o),
    "strided setitem": lambda o, y: _then(o.__setitem__((Ellipsis, slice(0, None, 2), slice(1, 34, 3)), y), o),
    "transposed slice mul_": lambda o, y: _then(o.transpose(-1, -2)[:, :, 3:9, 1:5].mul_(2.0), o),
}


@pytest.mark.parametrize("write", list(_WRITES_THROUGH_SLICES))
def test_a_write_through_a_slice_of_a_value_with_a_gradient_is_a_select(write: str) -> None:
    # the gradient through a write into a slice (plain, strided or transposed) of a value that has one: the value and
    # the mask of the written elements moved back into place, not a one-hot scatter of every written element against
    # every element of the tensor (an inverse wavelet transform's wrap-around, 4x3x34x34: 374M ops, 1.2 s a step)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((4, 3, 34, 34), (4, 3, 17, 11)))
    results = []
    for T in (torch, Tensor):
        x = T.tensor(a, requires_grad=True) if T is torch else Tensor(a, requires_grad=True)
        y = T.tensor(b, requires_grad=True) if T is torch else Tensor(b, requires_grad=True)
        o = _WRITES_THROUGH_SLICES[write](x * 1, y * 3)
        loss = (o * o).sum()
        if T is Tensor:
            GlobalCounters.reset()
        loss.backward()
        grads = [x.grad.numpy(), y.grad.numpy() if y.grad is not None else None]
        results.append((o.numpy() if T is Tensor else o.detach().numpy(), *grads))
    # (the backward pass's kernels: a few ops per element, where the scatter took ~27000)
    assert GlobalCounters.global_ops < 50 * a.size
    for ours, theirs in zip(results[1], results[0], strict=True):
        if theirs is None:
            assert ours is None
        else:
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_a_strided_setitem_of_an_odd_length_writes_in_place_of_a_scatter() -> None:
    # `x[::2] = v` over an odd length (a padded view) is the value moved back into place (a mosaic's pixel grid):
    # 1 op per element, where the one-hot scatter compared every written element with every element (32000)
    for _ in range(2):
        o, ref = Tensor.zeros(4001).contiguous().realize(), np.zeros(4001, np.float32)
        GlobalCounters.reset()
        o[::2] = Tensor.arange(2001).float()
        o.realize()
    ref[::2] = np.arange(2001)
    np.testing.assert_array_equal(o.numpy(), ref)
    assert GlobalCounters.global_ops < 4 * o.numel()
    m, tm = Tensor.zeros(9, 7).contiguous().realize(), torch.zeros(9, 7)
    m.T[::2, 1::3], tm.T[::2, 1::3] = Tensor.ones(4, 3) * 2, torch.ones(4, 3) * 2
    np.testing.assert_array_equal(m.numpy(), tm.numpy())


def test_an_in_place_write_of_a_gradient_is_not_recorded_without_grad_or_into_a_leaf() -> None:
    x = Tensor([5.0, 6.0], requires_grad=True)
    b = Tensor([1.0, 2.0])
    with uopkit.no_grad():
        b.add_(x)
    assert not b.requires_grad and b.tolist() == [6.0, 8.0]
    # (a write into a view of a leaf that requires grad is an update, as into the leaf: docs/semantics.md)
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    w[1:].add_(x)
    assert w.is_leaf and w.tolist() == [1.0, 7.0, 9.0]


def test_setitem_drops_a_values_leading_ones_and_indexes_as_torch():
    a, t = Tensor.zeros(2, 3), torch.zeros(2, 3)
    a[0], t[0] = Tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1.0, 2.0, 3.0]])
    a[[1]], t[[1]] = Tensor([[[4.0, 5.0, 6.0]]]), torch.tensor([[[4.0, 5.0, 6.0]]])
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(Tensor(x)[range(3), [1, 3, 0]].numpy(), torch.tensor(x)[range(3), [1, 3, 0]].numpy())
    assert Tensor.ones(2, 3)[True, True].shape == tuple(torch.ones(2, 3)[True, True].shape)
    assert Tensor.ones(2, 3, 4)[False, True, ...].shape == tuple(torch.ones(2, 3, 4)[False, True, ...].shape)
    with pytest.raises(TypeError):
        del a[0]


def test_a_detached_tensor_shows_later_writes() -> None:
    # PyTorch's detach shares storage: a state dict taken before training holds the trained weights after it
    from uopkit import nn
    from uopkit.nn.optim import SGD

    for p in (Tensor.zeros(2, 2).contiguous().realize(), Tensor.zeros(2, 2, requires_grad=True).realize()):
        d, r = p.detach(), p.reshape(-1)[:2]
        with uopkit.no_grad():
            p.add_(1)
        np.testing.assert_array_equal(d.numpy(), np.ones((2, 2), np.float32))
        np.testing.assert_array_equal(r.numpy(), np.ones(2, np.float32))
    layer = nn.Linear(2, 2)
    before = layer.state_dict()
    opt = SGD(layer.parameters(), lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        layer(Tensor([[1.0, 2.0]])).sum().backward()
        opt.step()
    np.testing.assert_array_equal(before["bias"].numpy(), layer.bias.numpy())
    np.testing.assert_array_equal(before["weight"].numpy(), layer.weight.numpy())


def test_a_view_that_changes_nothing_is_a_new_tensor() -> None:
    # as PyTorch's: x.view(-1) of a 1-D x is another object over the same storage, so a metadata change of x in place
    # (unsqueeze_, requires_grad_) leaves it alone, and writes through either show in both
    def run(T: Any) -> list[Any]:
        out = []
        for make in (
            lambda x: x.view(-1),
            lambda x: x.reshape(3),
            lambda x: x[:],
            lambda x: x.permute(0),
            lambda x: x.expand(3),
            lambda x: x.squeeze(0),
        ):
            x = T.zeros(3) + 1
            y = make(x)
            assert y is not x
            x.unsqueeze_(0)
            y[0] = 5
            out += [x, y]
        return out

    for e, g in zip(_values(run(torch)), _values(run(Tensor)), strict=True):
        np.testing.assert_array_equal(g, e)


def test_data_is_torchs_detached_view_and_tinygrads_memoryview() -> None:
    # torch's p.data: the values without autograd, sharing storage (weights_init's `m.weight.data.normal_()`, an EMA's
    # `ema_p.data.mul_()`); called, tinygrad's data(); `p.data = x` rebinds p's values
    from uopkit import nn

    p = Tensor([1.0, 2.0], requires_grad=True)
    assert bytes(p.data()) == np.array([1.0, 2.0], np.float32).tobytes()
    p.data.mul_(3)
    np.testing.assert_array_equal(p.numpy(), [3.0, 6.0])
    lin = nn.Linear(3, 2)
    lin.weight.data.fill_(0.5)
    np.testing.assert_array_equal(lin.weight.numpy(), np.full((2, 3), 0.5, np.float32))
    p.data = Tensor([5.0, 6.0])
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(p.grad.numpy(), [2.0, 2.0])


def test_a_write_into_a_dtype_view_raises_instead_of_being_lost() -> None:
    # view(dtype) is a copy here (torch's shares the source's storage): `v &= mask` or `buf.view(half)[:] = h` left
    # the source as it was, silently; now the write raises, saying how to write the source
    x = Tensor([1.0, -2.0, 3.5]).contiguous().realize()
    v = x.view(dtypes.int32)
    buf = Tensor.zeros(8, dtype=dtypes.uint8).contiguous().realize()
    h = Tensor([1.5, -2.0, 65504.0, 0.1], dtype=dtypes.float16)
    writes: list[Callable[[], Any]] = [
        lambda: v.__iand__(0x7FFFFFFF),
        lambda: v.add_(1),
        lambda: v.fill_(0),
        lambda: v.copy_(v),
        lambda: v.assign(v + 1),
        lambda: v.__setitem__(0, 1),
        lambda: v[1:].zero_(),
        lambda: buf.view(dtypes.float16).__setitem__(slice(None), h),
        lambda: x.view(dtypes.bfloat16).mul_(2),
    ]
    for i, write in enumerate(writes):
        with pytest.raises(ArgumentError, match="view.*copy.*copy_"):
            write()
        assert x.tolist() == [1.0, -2.0, 3.5] and buf.tolist() == [0] * 8, i
    # what the message names: the source written, and a clone of the view written as a tensor of its own
    x.copy_((x.view(dtypes.int32) & 0x7FFFFFFF).view(x.dtype))
    tx = torch.tensor([1.0, -2.0, 3.5])
    tx.view(torch.int32).__iand__(0x7FFFFFFF)
    assert x.tolist() == tx.tolist()
    buf.copy_(h.view(dtypes.uint8))
    tbuf = torch.zeros(8, dtype=torch.uint8)
    tbuf.view(torch.float16)[:] = torch.tensor([1.5, -2.0, 65504.0, 0.1], dtype=torch.float16)
    assert buf.tolist() == tbuf.tolist()
    w = x.view(dtypes.int32).clone()
    w |= 1
    assert w.tolist() == [b | 1 for b in tx.view(torch.int32).tolist()]
    # out of place, and a view to the same dtype (the tensor itself), stay as they were
    assert (v & 1).tolist() == (tx.view(torch.int32) & 1).tolist()
    same = x.view(dtypes.float32)
    same += 1
    assert x.tolist() == (tx + 1).tolist()


def _expanded(T: Any) -> tuple[Any, Any]:
    x = _realized(T, 3)
    return x, x.expand(2, 3)


def _overlapping_windows(T: Any) -> tuple[Any, Any]:
    x = _realized(T, 6)
    return x, x.unfold(0, 3, 1)


def _index(T: Any, values: list) -> Any:
    return torch.tensor(values) if T is torch else Tensor(values)


def _first_and_last(T: Any, rows: int) -> Any:
    # a mask the aliases don't agree on: the first element of the first row and the last of the last
    return _index(T, [[True, False, False]] + [[False] * 3] * (rows - 2) + [[False, False, True]])


@pytest.mark.parametrize("make", [_expanded, _overlapping_windows])
@pytest.mark.parametrize(
    "write",
    [
        # a mask the aliases agree on, and one they don't: a storage element a masked element shows takes the value
        lambda T, v: v.masked_fill_(_index(T, [True, False, True]).reshape(1, 3).expand(v.shape[0], 3), 9.0),
        lambda T, v: v.masked_fill_(_first_and_last(T, v.shape[0]), -1.0),
        lambda T, v: v.masked_fill_(_index(T, True), _index(T, 7.0)),
        lambda T, v: v.index_put_((_index(T, [0, 1]), _index(T, [1, 2])), _index(T, [5.0, 6.0])),
        lambda T, v: v.index_put_((_index(T, [0]), _index(T, [1])), _index(T, [4.0]), accumulate=True),
        lambda T, v: v.index_put_((_index(T, [True] + [False] * (v.shape[0] - 1)),), _index(T, [7.0, 8.0, 9.0])),
        lambda T, v: v.index_fill_(1, _index(T, [0, 2]), 5.0),
        lambda T, v: v.index_fill_(0, _index(T, [1]), _index(T, 3.0)),
    ],
)  # fmt: skip
def test_picked_writes_into_aliased_views_as_torch(make: Callable, write: Callable) -> None:
    # torch's masked_fill_, index_put_ and index_fill_ write only the elements they pick, so through a view whose
    # elements alias (an expand, overlapping unfold windows) each picked element's storage takes the write (torch warns
    # that it is deprecated); uopkit raised "more than one element ... refers to a single memory location"
    results = []
    for T in (torch, Tensor):
        base, view = make(T)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write(T, view)
        results.append((base.tolist(), view.tolist()))
    assert results[1] == results[0]


def test_writes_into_aliased_views_that_torch_refuses_still_raise() -> None:
    # every element written (add_) or an accumulate whose picked elements alias: torch raises, as ours
    for T in (torch, Tensor):
        _, view = _expanded(T)
        with pytest.raises(RuntimeError, match="single memory location"):
            view.add_(1)
        with pytest.raises(RuntimeError, match="single memory location"):
            view.masked_scatter_(_index(T, [True, False, True]), view.clone())
        with pytest.raises(RuntimeError, match="single memory location"):
            view.index_add_(1, _index(T, [0, 1]), T.ones(2, 2))
        with pytest.raises(RuntimeError, match="single memory location"):
            view.put_(_index(T, [1]), _index(T, [5.0]), accumulate=True)
        with pytest.raises(RuntimeError, match="single memory location"):
            view.copy_(T.ones(2, 3))


@pytest.mark.parametrize(
    "write",
    [
        lambda T, v: v.index_put_((_index(T, [0, 1]), _index(T, [1, 1])), _index(T, [10.0, 20.0]), accumulate=True),
        lambda T, v: v.index_put_((_index(T, [0, 1]),), _index(T, 10.0), accumulate=True),
        lambda T, v: v.index_put_((_index(T, [[True, False, True], [False, True, True]]),), _index(T, 4.0), True),
        lambda T, v: v.index_put_((_index(T, [1, 0, 1]), _index(T, [2, 2, 0])), _index(T, [1.0, 2.0, 3.0]), True),
    ],
)  # fmt: skip
def test_index_put_accumulating_through_an_expand_adds_each_write_as_torch(write: Callable) -> None:
    # torch's index_put_(accumulate=True) adds every picked element into the storage it shows, also where several
    # show one (torch warns that it is deprecated); uopkit raised "more than one element ... refers to a single memory
    # location"
    results = []
    for T in (torch, Tensor):
        base, view = _expanded(T)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write(T, view)
        results.append(base.tolist())
    assert results[1] == results[0]


def _rows(T: Any, values: list) -> Any:
    # (3, 3) values for the windows of `_overlapping_windows`
    return (torch.tensor(values) if T is torch else Tensor(values)).reshape(-1, 3)


WINDOW_WRITES: dict[str, Callable[[Any, Any], Any]] = {
    "add_": lambda T, w: w.add_(1),
    "+=": lambda T, w: w.__iadd__(_rows(T, [1.0, 2.0, 3.0] * 4)),
    "sub_ of a tensor": lambda T, w: w.sub_(_rows(T, list(range(12))), alpha=2),
    "mul_": lambda T, w: w.mul_(2),
    "div_": lambda T, w: w.div_(_rows(T, [2.0, 4.0, 8.0] * 4)),
    "neg_": lambda T, w: w.neg_(),
    "pow_": lambda T, w: w.pow_(2),
    "clamp_": lambda T, w: w.clamp_(1.0, 3.0),
    "addcmul_ of itself": lambda T, w: w.addcmul_(w, w),
    "fill_": lambda T, w: w.fill_(7.0),
    "zero_": lambda T, w: w.zero_(),
    "copy_ (the last write wins)": lambda T, w: w.copy_(_rows(T, [float(i) for i in range(12)])),
    "setitem of all": lambda T, w: w.__setitem__(Ellipsis, 9.0),
    "setitem of columns": lambda T, w: w.__setitem__((slice(None), slice(1, None)), _index(T, [7.0, 8.0])),
    "index_add_": lambda T, w: w.index_add_(1, _index(T, [0, 1]), _rows(T, [10.0] * 12)[:, :2]),
    "scatter_add_": lambda T, w: w.scatter_add_(1, _index(T, [[0, 1], [1, 1]]), _rows(T, [10.0] * 6)[:2, :2]),
    "scatter_": lambda T, w: w.scatter_(1, _index(T, [[0, 1], [1, 1]]), _index(T, [[10.0, 11.0], [12.0, 13.0]])),
    "scatter_reduce_": lambda T, w: w.scatter_reduce_(0, _index(T, [[1, 0, 2]]), _rows(T, [5.0, 6.0, 7.0]), "sum"),
    "index_copy_": lambda T, w: w.index_copy_(1, _index(T, [0, 2]), _rows(T, [float(i) for i in range(12)])[:, :2]),
    "masked_scatter_": lambda T, w: w.masked_scatter_(w > 2, _rows(T, [float(i) for i in range(12)]).reshape(-1)),
    "put_": lambda T, w: w.put_(_index(T, [1, 4, 3]), _index(T, [10.0, 20.0, 30.0])),
    "put_ accumulating": lambda T, w: w.put_(_index(T, [1, 4, 3]), _index(T, [10.0, 20.0, 30.0]), accumulate=True),
    "index_put_ accumulating": lambda T, w: w.index_put_((_index(T, [0, 1, 2]),), _index(T, 5.0), accumulate=True),
}  # fmt: skip


@pytest.mark.parametrize("name", list(WINDOW_WRITES))
def test_in_place_writes_into_overlapping_windows_as_torch(name: str) -> None:
    # torch's loop writes each element of the windows in turn, so an element of storage in k windows takes the op k
    # times (`w.add_(1)` adds k, `w.mul_(2)` multiplies by 2**k, a copy's last write in row-major order wins); uopkit
    # raised "more than one element ... refers to a single memory location"
    results = []
    for T in (torch, Tensor):
        base, windows = _overlapping_windows(T)
        WINDOW_WRITES[name](T, windows)
        results.append(base.tolist())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


def test_gradient_through_a_write_into_overlapping_windows():
    # an add (and index_put_'s accumulate) through overlapping windows: torch's gradient, each window's write adding
    # once; a multiply: the gradient of what was computed (torch's own treats it as done once: 2 everywhere)
    grads = []
    for T in (torch, Tensor):
        x, v = T.arange(5.0).requires_grad_(), _index(T, [10.0, 20.0]).requires_grad_()
        b = x * 1
        b.unfold(0, 3, 1).add_(v.sum())
        b.unfold(0, 3, 1).index_put_((_index(T, [0, 1]), _index(T, [1, 0])), v * v, accumulate=True)
        (b * T.arange(5.0)).sum().backward()
        grads.append((b.tolist(), x.grad.tolist(), v.grad.tolist()))
    assert grads[1] == grads[0]
    x = Tensor.arange(5.0).requires_grad_()
    b = x * 1
    b.unfold(0, 3, 1).mul_(2)
    b.sum().backward()
    assert (b.tolist(), x.grad.tolist()) == ([0.0, 4.0, 16.0, 12.0, 8.0], [2.0, 4.0, 8.0, 4.0, 2.0])


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("shape", [(7,), (4, 5), (2, 3, 6), (3, 1, 8)])
def test_unfold_strides_are_torchs(shape: tuple[int, ...], transposed: bool) -> None:
    # overlapping windows are read through a flattened expand, which no strides show: stride() gave (108, 36, 1, 7)
    # for zeros(2, 3, 6).unfold(-1, 5, 1), torch (18, 6, 1, 1); a view of a view whose base is gone was laid out
    # from a contiguous base
    theirs = torch.arange(float(np.prod(shape))).reshape(shape)
    ours = Tensor.arange(float(np.prod(shape))).reshape(shape).contiguous().realize()
    if transposed:
        theirs, ours = theirs.transpose(0, -1), ours.transpose(0, -1)
    assert ours.stride() == theirs.stride()
    for dim in range(-theirs.ndim, theirs.ndim):
        n = theirs.shape[dim]
        for size in range(n + 1):
            for step in range(1, n + 2):
                want, got = theirs.unfold(dim, size, step), ours.unfold(dim, size, step)
                assert (got.shape, got.stride()) == (tuple(want.shape), want.stride()), (dim, size, step)
                assert got.is_contiguous() == want.is_contiguous(), (dim, size, step)
                assert got.tolist() == want.tolist(), (dim, size, step)
    assert Tensor.zeros(2, 3, 6).unfold(-1, 5, 1).stride() == (18, 6, 1, 1)


def test_strides_of_a_view_of_a_view_whose_base_is_gone() -> None:
    x = Tensor.arange(6.0).reshape(2, 3).contiguous().realize().t()
    t = torch.arange(6.0).reshape(2, 3).t()
    assert (x[1:].stride(), x.unsqueeze(0).stride()) == (t[1:].stride(), t.unsqueeze(0).stride())


_WRITES_INTO_SEVERAL_VIEWS: dict[str, tuple[str | None, Callable[[Any, Any], Any]]] = {
    # (the op torch's refusal names, None where torch lets the write through)
    "unbind mul_": ("unbind", lambda T, y: y.unbind(0)[1].mul_(2)),
    "split add_": ("split", lambda T, y: y.split(1)[1].add_(1)),
    "split sizes copy_": ("split", lambda T, y: y.split([1, 2])[1].copy_(T.ones(2, 4))),
    "split whole fill_": ("split", lambda T, y: y.split(3)[0].fill_(1)),
    "split_with_sizes +=": ("split", lambda T, y: y.split_with_sizes([2, 1])[0].__iadd__(1)),
    "chunk along 1": ("chunk", lambda T, y: y.chunk(2, 1)[1].mul_(2)),
    "a view of a chunk": ("chunk", lambda T, y: y.chunk(3)[1].reshape(2, 2).__setitem__(0, 5.0)),
    "setitem into unbind": ("unbind", lambda T, y: y.unbind(0)[2].__setitem__(0, 5.0)),
    "a gradient into plain unbind": ("unbind", lambda T, y: T.ones(3, 4).unbind(0)[1].mul_(y[0])),
    "unbind, no gradient": (None, lambda T, y: T.ones(3, 4).unbind(0)[1].mul_(2)),
    "unbind's detach": (None, lambda T, y: y.unbind(0)[1].detach().mul_(2)),
    "unsafe_split": (None, lambda T, y: y.unsafe_split(1)[1].mul_(2)),
    "unsafe_chunk": (None, lambda T, y: y.unsafe_chunk(3)[1].mul_(2)),
    "tensor_split": (None, lambda T, y: y.tensor_split(3)[1].mul_(2)),
    "hsplit": (None, lambda T, y: y.hsplit(2)[1].mul_(2)),
    "vsplit": (None, lambda T, y: y.vsplit(3)[1].mul_(2)),
    "unflatten": (None, lambda T, y: y.unflatten(1, (2, 2))[1].mul_(2)),
    "the base after unbind": (None, lambda T, y: (y.unbind(0), y.mul_(2))),
}


@pytest.mark.parametrize("write", list(_WRITES_INTO_SEVERAL_VIEWS))
def test_an_in_place_write_into_one_of_several_views(write: str) -> None:
    # torch refuses an in-place write into an output of split/chunk/unbind (or a view of one) that needs a gradient,
    # and lets tensor_split's, unsafe_split's and the rest through: the same RuntimeError here, naming the op
    maker, make_write = _WRITES_INTO_SEVERAL_VIEWS[write]
    for T in (torch, Tensor):
        y = (torch.arange(12.0) if T is torch else Tensor.arange(12.0)).reshape(3, 4).requires_grad_() * 1
        if maker is None:
            make_write(T, y)
            continue
        with pytest.raises(RuntimeError) as refused:
            make_write(T, y)
        if T is Tensor:
            assert f"{maker}() returned together" in str(refused.value) and "clone()" in str(refused.value)


def test_an_in_place_write_into_one_of_several_views_without_recording() -> None:
    # allowed under no_grad(), as torch's; the write shows in the base
    for T in (torch, Tensor):
        y = (torch.arange(4.0) if T is torch else Tensor.arange(4.0)).requires_grad_() * 1
        with torch.no_grad() if T is torch else uopkit.no_grad():
            y.split(2)[1].mul_(2)
        assert y.tolist() == [0.0, 1.0, 4.0, 6.0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("how", ["contiguous", "where", "written"])
@pytest.mark.parametrize("write", ["through_view", "realized_then_view", "through_view_of_view"])
def test_views_of_a_lazy_half_value_see_writes_as_torchs(dtype: str, how: str, write: str) -> None:
    # a bfloat16 value computed "in bfloat16" (a CONTIGUOUS, a WHERE, an in-place write's result) is realized as its
    # bits, which its views hold no node of: they stayed lazy copies, and a write through one was lost
    # (`y = (x.bfloat16() * 1).contiguous(); y[1:].add_(5)` left y as it was)
    import torch

    def run(lib: Any, make: Callable[..., Any], dt: Any) -> list[float]:
        x = make([1.0, 2.0, 3.0]).to(dt) if lib is torch else make([1.0, 2.0, 3.0]).cast(dt)
        if how == "contiguous":
            y = (x * 1.0).contiguous()
        elif how == "where":
            y = (
                (make([1.0, 0.0, 1.0]) > 0).where(x, x * 2.0)
                if lib is not torch
                else torch.where(make([1.0, 0.0, 1.0]) > 0, x, x * 2.0)
            )
        else:
            y = x * 1.0
            y.mul_(2.0)
        v = y[1:]
        if write == "realized_then_view":
            if lib is not torch:
                y.realize()
            v.add_(5.0)
        elif write == "through_view":
            v.add_(5.0)
        else:
            v[1:].mul_(10.0)
        return y.float().numpy().tolist() + v.float().numpy().tolist()

    expected = run(torch, torch.tensor, getattr(torch, dtype))
    assert run(uopkit, Tensor, getattr(dtypes, dtype)) == expected

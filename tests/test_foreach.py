"""torch's `_foreach_*` functions (uopkit.tensor.foreach) against torch's: values of every function with each kind of
operand, the errors, the in-place semantics (views, repeated and cross-read tensors, dtypes), and that an in-place
form writes all its tensors with one schedule (counted, never timed)."""

import doctest

import numpy as np
import pytest

import uopkit
from uopkit import Tensor
from uopkit.engine.realize import stats
from uopkit.tensor import foreach

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
SHAPES = [(2, 3), (4,), (3, 1, 2)]


def _arrays(low=-2.0, high=2.0, dtype=np.float32):
    return [RNG.uniform(low, high, s).astype(dtype) for s in SHAPES]


def _pair(arrays):
    # realized uopkit tensors and torch tensors of the same values
    return [Tensor(a).realize() for a in arrays], [torch.tensor(a) for a in arrays]


def _close(ours, theirs, rtol=1e-6, atol=1e-6):
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs, strict=True):
        assert o.shape == tuple(t.shape)
        assert o.numpy().dtype == t.numpy().dtype
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=rtol, atol=atol)


def _schedules():
    return stats["schedule_hits"] + stats["schedule_misses"]


def test_docstring_examples():
    assert doctest.testmod(foreach).failed == 0


def test_exposed_at_top_level_as_torch():
    for name in ("_foreach_add_", "_foreach_lerp_", "_foreach_mul_", "_foreach_norm", "_foreach_zero_", "_foreach_exp"):
        assert getattr(uopkit, name) is getattr(foreach, name)
        assert hasattr(torch, name)


# every unary function, out of place and in place, over a domain where each is defined
UNARY_DOMAINS = {name: (0.1, 0.9) for name in foreach._UNARY}
UNARY_DOMAINS |= {"neg": (-2, 2), "abs": (-2, 2), "exp": (-2, 2), "sign": (-2, 2), "round": (-3, 3), "trunc": (-3, 3)}


@pytest.mark.parametrize("name", foreach._UNARY)
@pytest.mark.parametrize("in_place", [False, True])
def test_unary_matches_torch(name, in_place):
    arrays = _arrays(*UNARY_DOMAINS[name])
    ours, theirs = _pair(arrays)
    suffix = "_" if in_place else ""
    got = getattr(uopkit, f"_foreach_{name}{suffix}")(ours)
    want = getattr(torch, f"_foreach_{name}{suffix}")(theirs)
    if in_place:
        assert got == ours
        got, want = ours, theirs
    _close(got, want, rtol=2e-5, atol=1e-6)


def _operand_kinds(lists_of_arrays):
    # each kind of second operand torch takes, built for both sides
    other = _arrays()
    return {
        "number": (0.75, 0.75),
        "int": (2, 2),
        "0-d tensor": (Tensor(np.float32(1.5)), torch.tensor(1.5)),
        "scalar list": ([0.5, -1.0, 2.0], [0.5, -1.0, 2.0]),
        "tensor list": _pair(other),
        "broadcast tensor list": _pair([RNG.uniform(1, 2, (3,)).astype(np.float32), *other[1:]]),
    }


BINARY = ["add", "sub", *foreach._BINARY]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("kind", ["number", "int", "0-d tensor", "scalar list", "tensor list", "broadcast tensor list"])
def test_binary_matches_torch(name, in_place, kind):
    # (pow over positive bases; torch has no _foreach_pow with a 0-d tensor exponent, nor clamp with one)
    arrays = _arrays(0.5, 2.0) if name == "pow" else _arrays()
    ours, theirs = _pair(arrays)
    ours_other, theirs_other = _operand_kinds(arrays)[kind]
    suffix = "_" if in_place else ""
    try:
        want = getattr(torch, f"_foreach_{name}{suffix}")(theirs, theirs_other)
    except (RuntimeError, TypeError) as e:
        with pytest.raises(type(e)):
            getattr(uopkit, f"_foreach_{name}{suffix}")(ours, ours_other)
        return
    got = getattr(uopkit, f"_foreach_{name}{suffix}")(ours, ours_other)
    if in_place:
        got, want = ours, theirs
    _close(got, want, rtol=1e-5)


@pytest.mark.parametrize("name", ["add", "sub"])
@pytest.mark.parametrize("in_place", [False, True])
def test_alpha_with_tensors(name, in_place):
    ours, theirs = _pair(_arrays())
    (ours_other, theirs_other), suffix = _pair(_arrays()), "_" if in_place else ""
    got = getattr(uopkit, f"_foreach_{name}{suffix}")(ours, ours_other, alpha=-0.25)
    want = getattr(torch, f"_foreach_{name}{suffix}")(theirs, theirs_other, alpha=-0.25)
    if in_place:
        got, want = ours, theirs
    _close(got, want)
    if name == "add":
        # (torch's add has a 0-d tensor overload with alpha; its sub doesn't)
        ours, theirs = _pair(_arrays())
        uopkit._foreach_add_(ours, Tensor(np.float32(2.0)), alpha=3)
        torch._foreach_add_(theirs, torch.tensor(2.0), alpha=3)
        _close(ours, theirs)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("weight", ["number", "big number", "scalar list", "tensor list", "0-d tensor"])
def test_lerp_matches_torch(in_place, weight):
    ours, theirs = _pair(_arrays())
    ours_end, theirs_end = _pair(_arrays())
    ours_w, theirs_w = {
        "number": (0.001, 0.001),
        "big number": (0.8, 0.8),
        "scalar list": ([0.1, 0.6, 1.0], [0.1, 0.6, 1.0]),
        "tensor list": _pair(_arrays(0, 1)),
        "0-d tensor": (Tensor(np.float32(0.3)), torch.tensor(0.3)),
    }[weight]
    suffix = "_" if in_place else ""
    got = getattr(uopkit, f"_foreach_lerp{suffix}")(ours, ours_end, ours_w)
    want = getattr(torch, f"_foreach_lerp{suffix}")(theirs, theirs_end, theirs_w)
    if in_place:
        got, want = ours, theirs
    _close(got, want)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("value", ["default", "number", "scalar list", "1-d tensor"])
def test_addcmul_addcdiv_match_torch(name, in_place, value):
    ours, theirs = _pair(_arrays())
    ours1, theirs1 = _pair(_arrays())
    ours2, theirs2 = _pair(_arrays(0.5, 2.0))
    # (passed by position: torch names the list and tensor forms `scalars`)
    args = {
        "default": ((), ()),
        "number": ((-0.5,), (-0.5,)),
        "scalar list": (([1.0, 2.0, -3.0],), ([1.0, 2.0, -3.0],)),
        "1-d tensor": ((Tensor([1.0, 2.0, -3.0]),), (torch.tensor([1.0, 2.0, -3.0]),)),
    }[value]
    suffix = "_" if in_place else ""
    got = getattr(uopkit, f"_foreach_{name}{suffix}")(ours, ours1, ours2, *args[0])
    want = getattr(torch, f"_foreach_{name}{suffix}")(theirs, theirs1, theirs2, *args[1])
    if in_place:
        got, want = ours, theirs
    _close(got, want, rtol=1e-5)


def test_copy_and_zero_match_torch():
    ours, theirs = _pair(_arrays())
    sources = [RNG.integers(-5, 5, (3,)).astype(np.int32), np.float64(2.5), RNG.standard_normal((3, 1, 2))]
    assert uopkit._foreach_copy_(ours, [Tensor(s) for s in sources]) == ours
    torch._foreach_copy_(theirs, [torch.tensor(s) for s in sources])
    _close(ours, theirs)
    uopkit._foreach_zero_(ours)
    torch._foreach_zero_(theirs)
    _close(ours, theirs)


@pytest.mark.parametrize("ord_", [2, 1, 0, 3.5, float("inf"), -float("inf")])
def test_norm_matches_torch(ord_):
    ours, theirs = _pair(_arrays())
    _close(uopkit._foreach_norm(ours, ord_), torch._foreach_norm(theirs, ord_), rtol=1e-5)
    got = uopkit._foreach_norm(ours, ord_, dtype="float64")
    _close(got, torch._foreach_norm(theirs, ord_, dtype=torch.float64), rtol=1e-5)


def test_half_and_int_dtypes_follow_the_single_ops():
    ours, theirs = _pair(_arrays(dtype=np.float16))
    ends, tends = _pair(_arrays(dtype=np.float16))
    uopkit._foreach_lerp_(ours, ends, 0.3)
    torch._foreach_lerp_(theirs, tends, 0.3)
    _close(ours, theirs, rtol=1e-3, atol=1e-3)
    ours_i, theirs_i = _pair([np.array([3, 4], np.int32)])
    uopkit._foreach_mul_(ours_i, 3)
    torch._foreach_mul_(theirs_i, 3)
    _close(ours_i, theirs_i)
    _close(uopkit._foreach_div(ours_i, 2), torch._foreach_div(theirs_i, 2))
    _close(uopkit._foreach_sqrt(ours_i), torch._foreach_sqrt(theirs_i))


ERRORS = [
    # (call on both sides, with `a` a list of two float tensors) -> torch raises, so do we
    lambda m, a: m._foreach_add([], 1),
    lambda m, a: m._foreach_add(a, [a[0]]),
    lambda m, a: m._foreach_add(a, [1.0]),
    lambda m, a: m._foreach_add(a, [1.0, 2.0], alpha=2),
    lambda m, a: m._foreach_add(a, 1.0, alpha=2),
    lambda m, a: m._foreach_add(a, [1.0, a[0]]),
    lambda m, a: m._foreach_mul(a, a[0]),
    lambda m, a: m._foreach_add_(a, [a[0], a[0].reshape(1, 2).expand(3, 2)]),
    lambda m, a: m._foreach_lerp_(a, [a[0]], 0.5),
    lambda m, a: m._foreach_addcmul_(a, a, a, [1.0]),
    lambda m, a: m._foreach_addcdiv_(a, a, a, m.tensor([1.0, 2.0, 3.0]) if m is torch else Tensor([1.0, 2.0, 3.0])),
    lambda m, a: m._foreach_copy_(a, a[:1]),
    lambda m, a: m._foreach_norm(a, "fro"),
    lambda m, a: m._foreach_norm([m.ones(2, dtype=m.int32)]),
    lambda m, a: m._foreach_add_([m.ones(2, dtype=m.int32)], 1.5),
    lambda m, a: m._foreach_sqrt_([m.ones(2, dtype=m.int32)]),
    lambda m, a: m._foreach_div_([m.ones(2, dtype=m.int32)], 2),
    lambda m, a: m._foreach_neg([m.ones(2, dtype=m.bool)]),
]
# dtype errors: a TypeError, as uopkit's single ops raise there (torch: RuntimeError)
DTYPE_ERRORS = {14, 15, 16, 17}


@pytest.mark.parametrize("call", range(len(ERRORS)))
def test_errors_as_torch(call):
    arrays = [np.ones(2, np.float32), np.ones(2, np.float32)]
    with pytest.raises((RuntimeError, TypeError)) as theirs:
        ERRORS[call](torch, [torch.tensor(a) for a in arrays])
    # (ours: the same exception class torch's users catch; ShapeError and ArgumentError are RuntimeErrors too)
    uk = type("uk", (), {n: getattr(uopkit, n) for n in dir(uopkit) if n.startswith("_foreach")})
    uk.ones, uk.int32, uk.bool = (lambda *s, dtype: Tensor.ones(*s, dtype=dtype)), "int32", "bool"
    with pytest.raises(TypeError if call in DTYPE_ERRORS else theirs.type):
        ERRORS[call](uk, [Tensor(a).realize() for a in arrays])


def test_in_place_writes_all_tensors_with_one_schedule():
    ours, theirs = _pair(_arrays() * 4)
    ends, tends = _pair(_arrays() * 4)
    with uopkit.no_grad():
        uopkit._foreach_lerp_(ours, ends, 0.1)  # (compiles, first time)
        before, kernels = _schedules(), stats["kernels_run"]
        uopkit._foreach_lerp_(ours, ends, 0.1)
        assert _schedules() - before == 1
        # one kernel per tensor: the scheduler makes one kernel per stored buffer
        assert stats["kernels_run"] - kernels == len(ours)
        # a loop of single in-place ops realizes each
        before = _schedules()
        for t, e in zip(ours, ends, strict=True):
            t.lerp_(e, 0.1)
        assert _schedules() - before == len(ours)
        before = _schedules()
        uopkit._foreach_mul_(ours, 0.9)
        uopkit._foreach_add_(ours, ends, alpha=0.1)
        assert _schedules() - before == 2
    with torch.no_grad():
        for _ in range(3):
            torch._foreach_lerp_(theirs, tends, 0.1)
        torch._foreach_mul_(theirs, 0.9)
        torch._foreach_add_(theirs, tends, alpha=0.1)
    _close(ours, theirs)


def test_in_place_writes_are_seen_through_views():
    base, tbase = _pair([np.arange(6, dtype=np.float32).reshape(2, 3)])
    view, tview = base[0][1:], tbase[0][1:]
    row, trow = base[0][1], tbase[0][1]
    other, tother = _pair([np.ones(4, np.float32)])
    # (a view in the list writes into its base; the base in the list is seen by views of it)
    uopkit._foreach_add_([row, *other], [Tensor(np.ones(3, np.float32)), Tensor(np.ones(4, np.float32))])
    torch._foreach_add_([trow, *tother], [torch.ones(3), torch.ones(4)])
    uopkit._foreach_mul_([*base], 2.0)
    torch._foreach_mul_([*tbase], 2.0)
    _close([view, row, *base, *other], [tview, trow, *tbase, *tother])


def test_repeated_and_cross_read_tensors_as_torchs_loop():
    (a, b), (ta, tb) = _pair([np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)])
    uopkit._foreach_add_([a, a, b], [b, b, a])
    torch._foreach_add_([ta, ta, tb], [tb, tb, ta])
    _close([a, b], [ta, tb])
    uopkit._foreach_lerp_([a, b], [b, a], 0.25)
    torch._foreach_lerp_([ta, tb], [tb, ta], 0.25)
    _close([a, b], [ta, tb])


def test_an_error_mid_list_keeps_the_earlier_writes():
    ours, theirs = _pair([np.ones(2, np.float32), np.ones(2, np.float32)])
    other = [Tensor(np.ones(2, np.float32)), Tensor(np.ones((3, 2), np.float32))]
    with pytest.raises(RuntimeError):
        uopkit._foreach_add_(ours, other)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(theirs, [torch.ones(2), torch.ones(3, 2)])
    _close(ours, theirs)


def test_gradients_through_out_of_place_and_lazy_in_place():
    arrays = _arrays()
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    got = uopkit._foreach_mul(ours, [2.0, 3.0, 4.0])
    want = torch._foreach_mul(theirs, [2.0, 3.0, 4.0])
    # (in place into the lazy results: gradients flow through, as torch's)
    uopkit._foreach_addcmul_(got, ours, ours)
    torch._foreach_addcmul_(want, theirs, theirs)
    sum(g.sum() for g in got).backward()
    sum(w.sum() for w in want).backward()
    _close([o.grad for o in ours], [t.grad for t in theirs])


def test_in_place_on_a_leaf_that_requires_grad_follows_the_single_ops():
    # (torch raises outside no_grad; uopkit's single in-place ops write it, a documented departure, and so does this)
    a = [Tensor([1.0, 2.0], requires_grad=True)]
    b = [Tensor([1.0, 2.0], requires_grad=True)]
    uopkit._foreach_add_(a, 1.0)
    b[0].add_(1.0)
    assert a[0].tolist() == b[0].tolist() == [2.0, 3.0]
    assert a[0].requires_grad and a[0].is_leaf
    with torch.no_grad():
        t = [torch.tensor([1.0, 2.0], requires_grad=True)]
        torch._foreach_add_(t, 1.0)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(t, 1.0)

"""ParameterDict's and ParameterList's order and dict methods against torch.nn's (a plain dict's entries by key, which
is the order of parameters(), an optimizer's state and parameters_to_vector), and ModuleList.pop."""

from collections import OrderedDict

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn.utils import parameters_to_vector

torch = pytest.importorskip("torch")


def _both(make):
    return make(nn, Tensor.tensor), make(torch.nn, torch.tensor)


def test_parameter_dict_takes_a_plain_dict_in_key_order():
    def make(L, T):
        return L.ParameterDict({"mu": T([1.0, 2.0]), "log_sigma": T([3.0]), "b": T([4.0])})

    ours, theirs = _both(make)
    assert list(ours.keys()) == list(theirs.keys()) == ["b", "log_sigma", "mu"]
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    np.testing.assert_array_equal(
        parameters_to_vector(ours.parameters()).numpy(),
        torch.nn.utils.parameters_to_vector(theirs.parameters()).detach().numpy(),
    )


def test_parameter_dict_keeps_the_order_of_ordered_inputs():
    def make(L, T):
        d = L.ParameterDict(OrderedDict([("z", T([1.0])), ("a", T([2.0]))]))
        d.update([("y", T([3.0])), ("b", T([4.0]))])
        d.update(L.ParameterDict(OrderedDict([("x", T([5.0])), ("c", T([6.0]))])))
        d.update({"w": T([7.0]), "d": T([8.0])})
        return d

    ours, theirs = _both(make)
    assert list(ours.keys()) == list(theirs.keys()) == ["z", "a", "y", "b", "x", "c", "d", "w"]


def test_parameter_dict_dict_methods_match_torch():
    def run(L, T):
        d = L.ParameterDict({"b": T([1.0]), "a": T([2.0])})
        out = [list(d.keys())]
        out.append(list((d | {"q": T([0.0]), "p": T([0.0])}).keys()))
        merged = {"z": T([0.0])} | d
        out.append((type(merged).__name__, list(merged.keys())))
        d |= {"y": T([0.0]), "x": T([0.0])}
        out.append((list(d.keys()), list(reversed(d))))
        key, value = d.popitem()
        out.append((key, isinstance(value, L.Parameter), list(d.keys())))
        out.append((d.get("nope", 7), float(d.get("a")[0])))
        out.append((float(d.setdefault("m", T([9.0]))[0]), float(d.setdefault("m", T([1.0]))[0]), list(d.keys())))
        fresh = d.fromkeys(["k", "j"], T([3.0]))
        out.append((type(fresh).__name__, list(fresh.keys()), isinstance(fresh["k"], L.Parameter)))
        copied = d.copy()
        out.append((copied["a"] is d["a"], list(copied.keys())))
        return out

    assert run(nn, Tensor.tensor) == run(torch.nn, torch.tensor)
    with pytest.raises(KeyError):
        nn.ParameterDict().popitem()


def test_module_list_pop_matches_torch():
    def run(L):
        m = L.ModuleList([L.ReLU(), L.Tanh(), L.Sigmoid(), L.GELU()])
        first = type(m.pop(1)).__name__
        rest = [type(x).__name__ for x in m.pop(slice(1, None))]
        return first, rest, [type(x).__name__ for x in m], [n for n, _ in m.named_children()]

    assert run(nn) == run(torch.nn)


def test_module_dict_takes_another_module_dict():
    def run(L):
        d = L.ModuleDict(L.ModuleDict({"x": L.ReLU(), "b": L.Tanh()}))
        d.update(L.ModuleDict({"q": L.GELU()}))
        return [(k, type(v).__name__) for k, v in d.items()]

    assert run(nn) == run(torch.nn)


def test_parameter_containers_keep_other_values_as_torch():
    def run(L, ones):
        plist = L.ParameterList([ones(2), 3.0, "x", None])
        plist.append(2)
        pdict = L.ParameterDict({"b": 1.5, "a": ones(1), "c": None})
        return (
            [type(v).__name__ for v in plist],
            [n for n, _ in plist.named_parameters()],
            list(plist.state_dict()),
            [(k, type(v).__name__) for k, v in pdict.items()],
            [n for n, _ in pdict.named_parameters()],
            repr(plist),
            repr(pdict),
        )

    assert run(nn, Tensor.ones) == run(torch.nn, torch.ones)

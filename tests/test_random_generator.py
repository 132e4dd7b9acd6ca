"""uopkit.Generator and the `generator=` argument of the random functions (torch.Generator's API), bernoulli_ with a
tensor of probabilities, and torch.normal's forms of `Tensor.normal`."""

from __future__ import annotations

import doctest
import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import uopkit
from uopkit import Generator, Tensor, data
from uopkit.jit import TinyJit
from uopkit.nn import init
from uopkit.nn.state import torch_load, torch_save
from uopkit.tensor import ArgumentError, ShapeError
from uopkit.tensor import generator as generator_module

torch = pytest.importorskip("torch")

# every random function torch gives `generator=`, called with one
DRAWS: dict[str, Callable[[Any], Tensor]] = {
    "rand": lambda g: Tensor.rand(2, 3, generator=g),
    "randn": lambda g: Tensor.randn(5, generator=g),
    "randint": lambda g: Tensor.randint(0, 100, (6,), generator=g),
    "randperm": lambda g: Tensor.randperm(8, generator=g),
    "uniform": lambda g: Tensor.uniform(4, low=-2.0, high=3.0, generator=g),
    "normal": lambda g: Tensor.normal(4, mean=1.0, std=2.0, generator=g),
    "normal_torch_tensor_mean": lambda g: Tensor.normal(Tensor.zeros(4), 2.0, generator=g),
    "normal_torch_size": lambda g: Tensor.normal(1.0, 2.0, (4,), generator=g),
    "rand_like": lambda g: Tensor.ones(5).rand_like(generator=g),
    "randn_like": lambda g: Tensor.ones(5).randn_like(generator=g),
    "bernoulli": lambda g: Tensor.full((16,), 0.5).bernoulli(generator=g),
    "bernoulli_p": lambda g: Tensor.zeros(16).bernoulli(0.3, generator=g),
    "multinomial": lambda g: Tensor([[0.1, 0.2, 0.3, 0.4]] * 2).multinomial(3, generator=g),
    "multinomial_replacement": lambda g: Tensor([0.1, 0.2, 0.3, 0.4]).multinomial(6, True, generator=g),
    "uniform_": lambda g: Tensor.zeros(5).uniform_(-1.0, 1.0, generator=g),
    "normal_": lambda g: Tensor.zeros(5).normal_(generator=g),
    "bernoulli_": lambda g: Tensor.zeros(16).bernoulli_(0.5, generator=g),
    "bernoulli_tensor_p": lambda g: Tensor.zeros(16).bernoulli_(Tensor.full((16,), 0.5), generator=g),
    "random_": lambda g: Tensor.zeros(6).random_(0, 1000, generator=g),
    "exponential_": lambda g: Tensor.zeros(5).exponential_(generator=g),
    "geometric_": lambda g: Tensor.zeros(5).geometric_(0.3, generator=g),
    "cauchy_": lambda g: Tensor.zeros(5).cauchy_(generator=g),
    "log_normal_": lambda g: Tensor.zeros(5).log_normal_(generator=g),
    "init.uniform_": lambda g: init.uniform_(Tensor.empty(3, 4), generator=g),
    "init.normal_": lambda g: init.normal_(Tensor.empty(3, 4), generator=g),
    "init.trunc_normal_": lambda g: init.trunc_normal_(Tensor.empty(3, 4), generator=g),
    "init.xavier_uniform_": lambda g: init.xavier_uniform_(Tensor.empty(3, 4), generator=g),
    "init.xavier_normal_": lambda g: init.xavier_normal_(Tensor.empty(3, 4), generator=g),
    "init.kaiming_uniform_": lambda g: init.kaiming_uniform_(Tensor.empty(3, 4), generator=g),
    "init.kaiming_normal_": lambda g: init.kaiming_normal_(Tensor.empty(3, 4), generator=g),
    "init.orthogonal_": lambda g: init.orthogonal_(Tensor.empty(3, 4), generator=g),
    "init.sparse_": lambda g: init.sparse_(Tensor.empty(6, 4), 0.3, generator=g),
}
NAMES = list(DRAWS)


def _values(name: str, g: Generator | None) -> np.ndarray:
    return DRAWS[name](g).numpy()


@pytest.mark.parametrize("name", NAMES)
def test_generator_none_is_the_global_stream(name):
    Tensor.manual_seed(11)
    plain = _values(name, None)
    Tensor.manual_seed(11)
    np.testing.assert_array_equal(_values(name, None), plain)


@pytest.mark.parametrize("name", NAMES)
def test_generators_seeded_alike_draw_alike(name):
    first, second = Generator().manual_seed(7), Generator().manual_seed(7)
    for _ in range(2):
        np.testing.assert_array_equal(_values(name, first), _values(name, second))


@pytest.mark.parametrize("name", NAMES)
def test_a_generator_neither_moves_nor_follows_the_global_stream(name):
    Tensor.manual_seed(3)
    want = Tensor.rand(4).numpy()
    g = Generator().manual_seed(5)
    drawn = _values(name, g)
    Tensor.manual_seed(3)
    _values(name, Generator().manual_seed(5))
    # the global stream draws what it would have drawn without the generator
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), want)
    # and moving the global stream doesn't change what the generator draws
    Tensor.rand(9).realize()
    np.testing.assert_array_equal(_values(name, Generator().manual_seed(5)), drawn)


@pytest.mark.parametrize("name", NAMES)
def test_a_generator_draws_what_the_global_stream_seeded_alike_draws_as_torch(name):
    # torch.Generator().manual_seed(s) and torch.manual_seed(s) give the same draws; so do these
    Tensor.manual_seed(21)
    np.testing.assert_array_equal(_values(name, Generator().manual_seed(21)), _values(name, None))


def test_seeds_give_different_draws_and_the_stream_moves_on():
    g = Generator().manual_seed(1)
    first, second = Tensor.rand(8, generator=g).numpy(), Tensor.rand(8, generator=g).numpy()
    assert not np.array_equal(first, second)
    assert not np.array_equal(first, Tensor.rand(8, generator=Generator().manual_seed(2)).numpy())


def test_generator_api_is_torchs():
    g = Generator()
    assert uopkit.Generator is Generator and g.device == "CPU" and Generator(device="cpu").device == "CPU"
    # a fresh generator starts from the global stream's default seed (torch's do from theirs)
    assert g.initial_seed() == 0
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    for seed in (-1, -(2**63), 2**64 - 1, 123):
        assert Generator().manual_seed(seed).initial_seed() == torch.Generator().manual_seed(seed).initial_seed()
    with pytest.raises(ArgumentError, match="out of range"):
        Generator().manual_seed(2**64)
    with pytest.raises(TypeError, match="seed must be an int"):
        Generator().manual_seed(1.5)
    seeded = g.seed()
    assert isinstance(seeded, int) and g.initial_seed() == seeded and 0 <= seeded < 2**64
    assert Generator().seed() != Generator().seed()


def test_get_state_and_set_state_replay_the_stream():
    g = Generator().manual_seed(9)
    Tensor.rand(3, generator=g).realize()
    state = g.get_state()
    assert state.dtype == uopkit.dtypes.uint8 and state.shape == (16,)
    later = [Tensor.randn(4, generator=g).tolist() for _ in range(3)]
    assert g.set_state(state) is g
    assert [Tensor.randn(4, generator=g).tolist() for _ in range(3)] == later
    # another generator takes the state over
    assert Tensor.randn(4, generator=Generator().set_state(state)).tolist() == later[0]
    with pytest.raises(ArgumentError, match="uint8 tensor of 16 bytes"):
        g.set_state(Tensor.zeros(16))


def test_global_rng_state_resumes_draws_and_shuffles_as_torchs_get_rng_state():
    # torch.get_rng_state/set_rng_state/initial_seed/seed as Tensor's: a checkpoint's RNG state, saved and loaded back
    # through torch_save/torch_load, replays the draws and the loader's next shuffle that followed it
    Tensor.manual_seed(13)
    assert Tensor.initial_seed() == 13
    Tensor.rand(3).realize()
    buf = io.BytesIO()
    torch_save({"rng": Tensor.get_rng_state()}, buf)
    loader = data.DataLoader(range(10), batch_size=4, shuffle=True)
    later = ([b.tolist() for b in loader], Tensor.randn(4).tolist(), Tensor.randperm(6).tolist())
    state = torch_load(io.BytesIO(buf.getvalue()))["rng"]
    assert state.dtype == uopkit.dtypes.uint8 and state.shape == (16,)
    assert Tensor.set_rng_state(state) is None
    assert ([b.tolist() for b in loader], Tensor.randn(4).tolist(), Tensor.randperm(6).tolist()) == later
    # the global stream's state is a Generator's: seeded alike, each takes the other's state
    assert Tensor.get_rng_state().tolist() != Generator().manual_seed(13).get_state().tolist()
    Tensor.manual_seed(13)
    assert Tensor.get_rng_state().tolist() == Generator().manual_seed(13).get_state().tolist()
    seed = Tensor.seed()
    assert (
        Tensor.initial_seed() == seed
        and Tensor.rand(2).tolist() == Tensor.rand(2, generator=Generator().manual_seed(seed)).tolist()
    )
    with pytest.raises(ArgumentError, match="set_rng_state: expected the uint8 tensor of 16 bytes"):
        Tensor.set_rng_state(torch.get_rng_state())
    with pytest.raises(TypeError, match="set_rng_state"):
        Tensor.set_rng_state([1, 2])


def test_anything_but_a_uopkit_generator_is_refused_by_name():
    with pytest.raises(TypeError, match=r"uopkit.Generator or None, got torch.*Generator"):
        Tensor.rand(2, generator=torch.Generator())
    with pytest.raises(TypeError, match="uopkit.Generator"):
        Tensor.zeros(2).normal_(generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match="kaiming_uniform_: generator must be a uopkit.Generator"):
        init.kaiming_uniform_(Tensor.empty(3, 4), generator=object())


def test_a_jit_replay_draws_from_the_generator_and_leaves_the_global_stream_alone():
    g = Generator()

    def noisy(x: Tensor) -> Tensor:
        return (x + Tensor.rand(3, generator=g)).realize()

    g.manual_seed(4)
    want = [noisy(Tensor.zeros(3).contiguous()).tolist() for _ in range(4)]
    Tensor.manual_seed(0)
    global_draws = Tensor.rand(2).tolist()
    Tensor.manual_seed(0)
    jitted = TinyJit(noisy)
    g.manual_seed(4)
    assert [jitted(Tensor.zeros(3).contiguous()).tolist() for _ in range(4)] == want
    assert jitted.captured is not None
    assert Tensor.rand(2).tolist() == global_draws


def test_samplers_and_random_split_take_a_generator():
    orders = [list(data.RandomSampler(range(10), generator=Generator().manual_seed(2))) for _ in range(2)]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(10))
    splits = [data.random_split(range(10), [0.5, 0.5], generator=Generator().manual_seed(2)) for _ in range(2)]
    assert [s.indices for s in splits[0]] == [s.indices for s in splits[1]]


def test_module_docstring_examples():
    assert doctest.testmod(generator_module, extraglobs={"Tensor": Tensor}).failed == 0


# ---------------------------------------------------------------------------------------------------------------------
# bernoulli_ with a tensor of probabilities


def test_bernoulli_with_a_tensor_p_of_zeros_and_ones_is_exact_as_torch():
    p = np.array([0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    ours = Tensor.full((3, 5), 7.0).bernoulli_(Tensor(p))
    theirs = torch.full((3, 5), 7.0).bernoulli_(torch.tensor(p))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # an int tensor keeps its dtype; p broadcasts along the rows
    ints = Tensor.zeros(2, 5, dtype=uopkit.dtypes.int32).bernoulli_(Tensor(p))
    assert ints.dtype == uopkit.dtypes.int32 and ints.tolist() == [p.astype(int).tolist()] * 2


def test_bernoulli_with_a_tensor_p_has_mean_p():
    rng = np.random.default_rng(0)
    p = rng.random(50).astype(np.float32)
    draws = Tensor.zeros(4000, 50).bernoulli_(Tensor(p)).numpy()
    assert set(np.unique(draws).tolist()) <= {0.0, 1.0}
    # per column: 4000 draws, standard error below 0.008
    np.testing.assert_allclose(draws.mean(0), p, atol=0.04)
    assert abs(draws.mean() - p.mean()) < 0.01


def test_bernoulli_with_a_tensor_p_writes_in_place_and_is_checked():
    t = Tensor.zeros(4).contiguous().realize()
    assert t.bernoulli_(Tensor.ones(4)) is t and t.tolist() == [1.0] * 4
    with pytest.raises(TypeError, match="p must be a float tensor"):
        Tensor.zeros(3).bernoulli_(Tensor([1, 0, 1]))
    with pytest.raises(ShapeError):
        Tensor.zeros(3).bernoulli_(Tensor.ones(2, 3)).realize()
    with pytest.raises(ArgumentError, match=r"p must be in \[0, 1\]"):
        Tensor.zeros(3).bernoulli_(1.5)


def _on_float32_grid(u: np.ndarray) -> float:
    # the share of uniform draws (recovered from a sample) within 1e-3 of a multiple of 2**-24: all of a float32
    # draw's, about 0.2% of a float64 one's
    scaled = np.asarray(u, np.float64) * 2**24
    return float((np.abs(scaled - np.round(scaled)) < 1e-3).mean())


def _float32_exact(z: np.ndarray) -> float:
    # the share of normal draws (recovered from a sample) that a float32 holds to 1e-12: all of a float32 draw's
    z = np.asarray(z, np.float64)
    return float((np.abs(z - z.astype(np.float32)) <= 1e-12 * np.abs(z)).mean())


F64 = uopkit.dtypes.float64
# float64 samplers, each with the map from its sample back to the U[0, 1) or N(0, 1) draw it came from
UNIFORM_F64: dict[str, tuple[Callable[[], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "rand": (lambda: Tensor.rand(4096, dtype=F64), lambda x: x),
    "rand_like": (lambda: Tensor.zeros(4096, dtype=F64).rand_like(), lambda x: x),
    "uniform": (lambda: Tensor.uniform(4096, low=2.0, high=4.0, dtype=F64), lambda x: (x - 2) / 2),
    "uniform_": (lambda: Tensor.zeros(4096, dtype=F64).uniform_(), lambda x: x),
    "exponential_": (lambda: Tensor.zeros(4096, dtype=F64).exponential_(), lambda x: -np.expm1(-x)),
    "cauchy_": (lambda: Tensor.zeros(4096, dtype=F64).cauchy_(), lambda x: np.arctan(x) / np.pi + 0.5),
    "Uniform.rsample": (
        lambda: uopkit.distributions.Uniform(Tensor(0.0, dtype=F64), Tensor(1.0, dtype=F64)).rsample((4096,)),
        lambda x: x,
    ),
    "Exponential.rsample": (
        lambda: uopkit.distributions.Exponential(Tensor(1.0, dtype=F64)).rsample((4096,)),
        lambda x: -np.expm1(-x),
    ),
}
NORMAL_F64: dict[str, tuple[Callable[[], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "randn": (lambda: Tensor.randn(4096, dtype=F64), lambda x: x),
    "randn_like": (lambda: Tensor.zeros(4096, dtype=F64).randn_like(), lambda x: x),
    "normal_": (lambda: Tensor.zeros(4096, dtype=F64).normal_(), lambda x: x),
    "log_normal_": (lambda: Tensor.zeros(4096, dtype=F64).log_normal_(0.0, 1.0), np.log),
    "Normal.rsample": (
        lambda: uopkit.distributions.Normal(Tensor(0.0, dtype=F64), Tensor(1.0, dtype=F64)).rsample((4096,)),
        lambda x: x,
    ),
}


@pytest.mark.parametrize("name", sorted(UNIFORM_F64))
def test_float64_uniform_draws_have_float64_resolution_as_torch(name):
    # a float32 draw cast up is a multiple of 2**-24: the tails of -log(u) stop at 16.6
    sample, to_uniform = UNIFORM_F64[name]
    Tensor.manual_seed(3)
    x = sample()
    assert x.dtype == F64
    assert _on_float32_grid(torch.rand(4096, dtype=torch.float64).numpy()) < 0.02
    assert _on_float32_grid(to_uniform(x.numpy())) < 0.02


@pytest.mark.parametrize("name", sorted(NORMAL_F64))
def test_float64_normal_draws_have_float64_resolution_as_torch(name):
    sample, to_normal = NORMAL_F64[name]
    Tensor.manual_seed(3)
    x = sample()
    assert x.dtype == F64
    assert _float32_exact(torch.randn(4096, dtype=torch.float64).numpy()) < 0.02
    assert _float32_exact(to_normal(x.numpy())) < 0.02


def test_float32_draws_stay_float32_and_seeded_float64_draws_repeat():
    Tensor.manual_seed(5)
    u32, z32 = Tensor.rand(4096).numpy(), Tensor.randn(4096).numpy()
    assert _on_float32_grid(u32) == 1.0 and u32.dtype == np.float32 and z32.dtype == np.float32
    Tensor.manual_seed(5)
    first = Tensor.rand(100, dtype=F64).numpy(), Tensor.randn(100, dtype=F64).numpy()
    Tensor.manual_seed(5)
    again = Tensor.rand(100, dtype=F64).numpy(), Tensor.randn(100, dtype=F64).numpy()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])


# ---------------------------------------------------------------------------------------------------------------------
# torch.normal's forms: a tensor mean or std (one draw per element), numbers with a size


def test_torch_normal_with_a_tensor_mean_draws_each_element():
    # ES perturbations `torch.normal(mean=theta.expand(n, -1), std=sigma)`: one independent draw per element (a
    # tensor mean given by keyword was once taken as tinygrad's mean of a 0-d draw, one value for every element)
    mean = np.linspace(-3.0, 3.0, 8).astype(np.float32)
    Tensor.manual_seed(1)
    ours = Tensor.normal(mean=Tensor(mean).expand(20000, 8), std=0.5).numpy()
    theirs = torch.normal(mean=torch.tensor(mean).expand(20000, 8), std=0.5).numpy()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    # per column: 20000 draws, standard errors 0.0035 (mean) and 0.0025 (std)
    np.testing.assert_allclose(ours.mean(0), mean, atol=0.02)
    np.testing.assert_allclose(ours.std(0), 0.5, atol=0.015)
    assert len(np.unique(ours[:, 0])) > 19000
    # both tensors broadcast; std a tensor with a number mean; the dtype is the tensor mean's, else the std's
    for args in [(torch.zeros(2, 1), torch.ones(3)), (0.0, torch.ones(3, dtype=torch.float64))]:
        want = torch.normal(*args)
        got = Tensor.normal(*(Tensor(a.numpy()) if isinstance(a, torch.Tensor) else a for a in args))
        assert got.shape == tuple(want.shape) and got.numpy().dtype == want.numpy().dtype
    assert Tensor.normal(Tensor([1.0, 5.0]), 0.0).tolist() == [1.0, 5.0]
    # numbers with a size, by position or keyword; tinygrad's ints as the shape stay tinygrad's
    assert Tensor.normal(2, 3, (4,)).shape == tuple(torch.normal(2, 3, (4,)).shape) == (4,)
    assert Tensor.normal(0.0, 1.0, size=(2, 3)).shape == (2, 3)
    assert Tensor.normal(2, 3).shape == (2, 3) and Tensor.normal(3, mean=1.0, std=0.0).tolist() == [1.0] * 3


def test_torch_normal_gives_its_parameters_zero_gradients_and_refuses_as_torch():
    m, s = Tensor.zeros(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
    tm, ts = torch.zeros(3, requires_grad=True), torch.ones(3, requires_grad=True)
    ours, theirs = Tensor.normal(m, s), torch.normal(tm, ts)
    assert ours.requires_grad == theirs.requires_grad
    (ours * 3).sum().backward()
    (theirs * 3).sum().backward()
    np.testing.assert_array_equal(m.grad.numpy(), tm.grad.numpy())
    np.testing.assert_array_equal(s.grad.numpy(), ts.grad.numpy())
    for ours, theirs, error in [
        (lambda: Tensor.normal(0.0, 1.0), lambda: torch.normal(0.0, 1.0), TypeError),
        (lambda: Tensor.normal(Tensor.zeros(3), 1.0, (3,)), lambda: torch.normal(torch.zeros(3), 1.0, (3,)), TypeError),
        (lambda: Tensor.normal(Tensor.zeros(3), -1.0), lambda: torch.normal(torch.zeros(3), -1.0), RuntimeError),
        (
            lambda: Tensor.normal(Tensor.zeros(3, dtype="int64"), 1.0),
            lambda: torch.normal(torch.zeros(3, dtype=torch.int64), 1.0),
            NotImplementedError,
        ),
    ]:
        with pytest.raises(error):
            theirs()
        with pytest.raises(error):
            ours()

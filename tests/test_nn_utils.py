"""uopkit.nn.utils against torch.nn.utils: gradient clipping on a small model's gradients (total norm and clipped
gradients to 1e-6, every norm type, non-finite gradients), parameter vectors, and nn.utils.rnn's padding and packing."""

import doctest
import importlib
import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes, nn
from uopkit.nn import utils
from uopkit.nn.utils import rnn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "module",
    [
        utils,
        utils.clip_grad,
        rnn,
        utils.parametrize,
        utils.parametrizations,
        utils.fusion,
        "uopkit.nn.utils.weight_norm",
        "uopkit.nn.utils.init",
    ],
)
def test_docstring_examples(module):
    # (the older weight_norm's module by name: `utils.weight_norm` is the function, as torch's)
    module = importlib.import_module(module) if isinstance(module, str) else module
    assert doctest.testmod(module, extraglobs={"Tensor": Tensor}).failed == 0


def _models(seed=0):
    # the same two-layer network in uopkit and torch, with the same weights and one backward pass done
    rng = np.random.default_rng(seed)
    ours = [nn.Linear(5, 7), nn.Linear(7, 3)]
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    with torch.no_grad():
        for layer, twin in zip(ours, [theirs[0], theirs[2]], strict=True):
            twin.weight.copy_(torch.from_numpy(layer.weight.numpy()))
            twin.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    x = rng.standard_normal((4, 5)).astype(np.float32)
    out = ours[1](ours[0](Tensor(x)).tanh())
    (out * out).sum().mul(3).backward()
    expected = theirs(torch.from_numpy(x))
    (expected * expected).sum().mul(3).backward()
    params, torch_params = [p for layer in ours for p in (layer.weight, layer.bias)], list(theirs.parameters())
    _same_grads(params, torch_params, atol=1e-5)
    # the clipping is compared on the very same gradients (the backward passes agree to rounding only)
    for p, q in zip(params, torch_params, strict=True):
        p.grad = Tensor(q.grad.numpy())
    return params, torch_params


def _same_grads(params, torch_params, atol=1e-6):
    for p, q in zip(params, torch_params, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=atol)


NORM_TYPES = [2.0, 1.0, 3.5, 0.5, math.inf, -math.inf, 0.0, "inf"]


@pytest.mark.parametrize("norm_type", NORM_TYPES)
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    params, torch_params = _models()
    grads = [p.grad for p in params]
    total = utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(torch_params, max_norm, norm_type=norm_type)
    assert isinstance(total, Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
    # the same gradient tensors, scaled in place
    assert all(p.grad is g for p, g in zip(params, grads, strict=True))
    _same_grads(params, torch_params)


@pytest.mark.parametrize("norm_type", [2.0, 3.0, 1.0, math.inf])
def test_half_gradients_norm_in_float32_as_torch(norm_type):
    # a float16 gradient of norm 800: its squares overflow float16, and clipping by an inf norm zeroed it
    g = np.full((4, 100), 40.0, np.float32)
    for dtype in ("float16", "bfloat16"):
        t_dtype = getattr(torch, dtype)
        total = utils.get_total_norm([Tensor(g).cast(dtype), Tensor(g[:2]).cast(dtype)], norm_type)
        expected = torch.nn.utils.get_total_norm(
            [torch.from_numpy(g).to(t_dtype), torch.from_numpy(g[:2]).to(t_dtype)], norm_type
        )
        assert total.dtype == getattr(dtypes, dtype) and total.item() == expected.item()
        p = Tensor.zeros(4, 100, dtype=dtype, requires_grad=True)
        p.grad = Tensor(g).cast(dtype)
        q = torch.zeros(4, 100, dtype=t_dtype, requires_grad=True)
        q.grad = torch.from_numpy(g).to(t_dtype)
        utils.clip_grad_norm_([p], 1.0, norm_type)
        torch.nn.utils.clip_grad_norm_([q], 1.0, norm_type)
        np.testing.assert_array_equal(p.grad.float().numpy(), q.grad.float().numpy())


def test_clip_grad_norm_takes_a_generator_a_single_tensor_and_skips_missing_grads():
    layer = nn.Linear(3, 2)
    layer(Tensor.ones(1, 3)).sum().backward()
    weight_grad = layer.weight.grad
    extra = Tensor.zeros(4, requires_grad=True)
    total = utils.clip_grad_norm_(iter([layer.weight, extra, layer.bias]), 0.1)
    assert total.item() == pytest.approx(math.sqrt(2 * 3 + 2), rel=1e-6)
    assert layer.weight.grad is weight_grad and extra.grad is None
    assert utils.clip_grad_norm_(layer.weight, 1e-3).item() == pytest.approx(0.1 * math.sqrt(6 / 8), rel=1e-4)
    assert np.sqrt((layer.weight.grad.numpy() ** 2).sum()) == pytest.approx(1e-3, rel=1e-3)
    assert utils.clip_grad_norm_([extra], 1.0).item() == 0.0
    assert utils.clip_grad_norm_([], 1.0).item() == 0.0


@pytest.mark.parametrize("bad", [math.inf, math.nan])
@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0])
def test_clip_grad_norm_nonfinite(bad, norm_type):
    values = [np.array([1.0, bad, -2.0], np.float32), np.array([[0.5, -3.0]], np.float32)]
    ours = [Tensor(v.copy(), requires_grad=True) for v in values]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    for p, q in zip(ours, theirs, strict=True):
        p.grad, q.grad = Tensor(p.numpy()), q.detach().clone()
    with pytest.raises(RuntimeError, match="clip_grad_norm_: the .*-norm of the gradients is (inf|nan)"):
        utils.clip_grad_norm_(ours, 1.0, norm_type, error_if_nonfinite=True)
    with pytest.raises(RuntimeError):
        torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type, error_if_nonfinite=True)
    # nothing was scaled by the refused call; without the check the gradients are scaled by the non-finite norm
    np.testing.assert_array_equal(ours[1].grad.numpy(), values[1])
    total = utils.clip_grad_norm_(ours, 1.0, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type)
    np.testing.assert_array_equal(total.numpy(), expected.numpy())
    for p, q in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_clip_grad_norm_of_mixed_dtypes_matches_torch():
    values = [np.array([1.0, 2.0, -0.3]), np.array([3.0, 4.0, 1e-3])]
    ours = [Tensor(values[0], dtype="float32"), Tensor(values[1], dtype="float16")]
    theirs = [torch.tensor(values[0], dtype=torch.float32), torch.tensor(values[1], dtype=torch.float16)]
    for p, q in zip(ours, theirs, strict=True):
        p.grad, q.grad = p.detach().contiguous(), q.clone()
    grads = [p.grad for p in ours]
    total = utils.clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
    for p, q, g in zip(ours, theirs, grads, strict=True):
        assert p.grad is g and p.grad.dtype == p.dtype
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_get_total_norm_and_clip_grads_with_norm_match_torch():
    params, torch_params = _models(1)
    grads = [p.grad for p in params]
    for norm_type in (2.0, 1.0, math.inf):
        total = utils.get_total_norm(grads, norm_type)
        expected = torch.nn.utils.get_total_norm([q.grad for q in torch_params], norm_type)
        np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
    utils.clip_grads_with_norm_(params, 0.3, total)
    torch.nn.utils.clip_grads_with_norm_(torch_params, 0.3, expected)
    assert all(p.grad is g for p, g in zip(params, grads, strict=True))
    _same_grads(params, torch_params)


@pytest.mark.parametrize("clip_value", [0.01, 0.5, 100])
def test_clip_grad_value_matches_torch(clip_value):
    params, torch_params = _models(2)
    grads = [p.grad for p in params]
    assert utils.clip_grad_value_(params, clip_value) is None
    torch.nn.utils.clip_grad_value_(torch_params, clip_value)
    assert all(p.grad is g for p, g in zip(params, grads, strict=True))
    _same_grads(params, torch_params)


def test_clipping_records_nothing():
    w = Tensor([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()
    grad = w.grad
    utils.clip_grad_norm_([w], 1.0)
    assert w.grad is grad and not w.grad.requires_grad
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_parameters_to_vector_matches_torch_and_is_differentiable():
    params, torch_params = _models(3)
    vec = utils.parameters_to_vector(params)
    expected = torch.nn.utils.parameters_to_vector(torch_params)
    assert vec.shape == tuple(expected.shape)
    np.testing.assert_array_equal(vec.numpy(), expected.detach().numpy())
    for p in params:
        p.grad = None
    (vec * vec).sum().backward()
    for p in params:
        np.testing.assert_allclose(p.grad.numpy(), 2 * p.numpy(), rtol=1e-6)


def test_vector_to_parameters_writes_into_the_parameters():
    layer = nn.Linear(4, 3)
    weight, bias = layer.weight, layer.bias
    view = weight.reshape(-1)
    vec = Tensor.arange(15).float()
    assert utils.vector_to_parameters(vec, layer.parameters()) is None
    assert layer.weight is weight and layer.bias is bias and weight.requires_grad
    np.testing.assert_array_equal(weight.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(bias.numpy(), [12, 13, 14])
    np.testing.assert_array_equal(view.numpy(), np.arange(12))
    # a round trip, and torch's values
    twin = torch.nn.Linear(4, 3)
    torch.nn.utils.vector_to_parameters(torch.arange(15.0), twin.parameters())
    np.testing.assert_array_equal(utils.parameters_to_vector(layer.parameters()).numpy(), np.arange(15))
    np.testing.assert_array_equal(twin.weight.detach().numpy(), weight.numpy())
    # a longer vector is read from its start, as torch's
    utils.vector_to_parameters(Tensor.ones(20), [weight, bias])
    np.testing.assert_array_equal(bias.numpy(), [1, 1, 1])


def test_vector_to_parameters_errors():
    with pytest.raises(TypeError, match="vector_to_parameters: expected a Tensor"):
        utils.vector_to_parameters(np.zeros(3), [Tensor.zeros(3)])
    with pytest.raises(ValueError, match="at least 5 elements"):
        utils.vector_to_parameters(Tensor.zeros(4), [Tensor.zeros(3), Tensor.zeros(2)])


# ---- nn.utils.rnn


def _sequences(lengths, trailing=(), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *trailing)).astype(np.float32) for n in lengths]


@pytest.mark.parametrize("lengths", [[3, 1, 4], [2, 2], [5], [0, 2]])
@pytest.mark.parametrize("trailing", [(), (2,), (2, 3)])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(lengths, trailing, batch_first, padding_side):
    seqs = _sequences(lengths, trailing)
    ours = rnn.pad_sequence([Tensor(s) for s in seqs], batch_first, -1.5, padding_side)
    theirs = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(s) for s in seqs], batch_first, -1.5, padding_side)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_pad_sequence_of_a_tensor_ints_and_gradients():
    stacked = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(
        rnn.pad_sequence(Tensor(stacked)).numpy(), torch.nn.utils.rnn.pad_sequence(torch.tensor(stacked)).numpy()
    )
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    padded = rnn.pad_sequence([a, b], batch_first=True)
    (padded * Tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert a.grad.tolist() == [1.0, 2.0] and b.grad.tolist() == [3.0]


def test_pad_sequence_errors():
    with pytest.raises(ValueError, match="padding_side"):
        rnn.pad_sequence([Tensor([1.0])], padding_side="center")
    with pytest.raises(ValueError, match="empty list"):
        rnn.pad_sequence([])
    with pytest.raises(ValueError, match="every sequence must have shape"):
        rnn.pad_sequence([Tensor.zeros(2, 3), Tensor.zeros(2, 4)])


def _same_packed(ours, theirs):
    np.testing.assert_array_equal(ours.data.numpy(), theirs.data.detach().numpy())
    np.testing.assert_array_equal(ours.batch_sizes.numpy(), theirs.batch_sizes.numpy())
    for mine, other in [(ours.sorted_indices, theirs.sorted_indices), (ours.unsorted_indices, theirs.unsorted_indices)]:
        assert (mine is None) == (other is None)
        if mine is not None:
            np.testing.assert_array_equal(mine.numpy(), other.numpy())


PACK_CASES = [([4, 3, 3, 1], True), ([1, 4, 2, 4, 3], False), ([2, 2, 2], False), ([5], True), ([3, 1], False)]


@pytest.mark.parametrize("lengths, enforce_sorted", PACK_CASES)
@pytest.mark.parametrize("trailing", [(), (3,)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_packing_matches_torch(lengths, enforce_sorted, trailing, batch_first):
    seqs = _sequences(lengths, trailing, seed=len(lengths))
    padded = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(s) for s in seqs], batch_first)
    ours = rnn.pack_padded_sequence(Tensor(padded.numpy()), lengths, batch_first, enforce_sorted)
    theirs = torch.nn.utils.rnn.pack_padded_sequence(padded, lengths, batch_first, enforce_sorted)
    assert isinstance(ours, rnn.PackedSequence) and isinstance(ours, tuple)
    assert ours._fields == theirs._fields
    _same_packed(ours, theirs)
    for total_length in (None, max(lengths) + 2):
        out, out_lengths = rnn.pad_packed_sequence(ours, batch_first, -2.0, total_length)
        expected, expected_lengths = torch.nn.utils.rnn.pad_packed_sequence(theirs, batch_first, -2.0, total_length)
        np.testing.assert_array_equal(out.numpy(), expected.numpy())
        np.testing.assert_array_equal(out_lengths.numpy(), expected_lengths.numpy())
    # a lengths tensor works as a list does
    _same_packed(rnn.pack_padded_sequence(Tensor(padded.numpy()), Tensor(lengths), batch_first, enforce_sorted), theirs)


@pytest.mark.parametrize("lengths, enforce_sorted", PACK_CASES)
def test_pack_sequence_and_unpacking_match_torch(lengths, enforce_sorted):
    seqs = _sequences(lengths, (2,), seed=7)
    ours = rnn.pack_sequence([Tensor(s) for s in seqs], enforce_sorted)
    theirs = torch.nn.utils.rnn.pack_sequence([torch.from_numpy(s) for s in seqs], enforce_sorted)
    _same_packed(ours, theirs)
    for got, s in zip(rnn.unpack_sequence(ours), seqs, strict=True):
        np.testing.assert_array_equal(got.numpy(), s)
    padded = rnn.pad_sequence([Tensor(s) for s in seqs], batch_first=True)
    for got, s in zip(rnn.unpad_sequence(padded, lengths, batch_first=True), seqs, strict=True):
        np.testing.assert_array_equal(got.numpy(), s)


def test_packing_is_differentiable():
    x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), requires_grad=True)
    packed = rnn.pack_padded_sequence(x, [2, 4, 1], enforce_sorted=False)
    out, _ = rnn.pad_packed_sequence(packed)
    (out * Tensor(np.arange(12, dtype=np.float32).reshape(4, 3))).sum().backward()
    expected = np.arange(12, dtype=np.float32).reshape(4, 3) * (np.arange(4)[:, None] < np.array([2, 4, 1]))
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_packing_errors():
    x = Tensor.zeros(4, 3)
    with pytest.raises(ValueError, match=r"lengths must not increase, got \[2, 4, 1\]"):
        rnn.pack_padded_sequence(x, [2, 4, 1])
    with pytest.raises(ValueError, match=r"every length must be at least 1, got lengths \[4, 2, 0\]"):
        rnn.pack_padded_sequence(x, [4, 2, 0])
    with pytest.raises(ValueError, match="expected 2 sequences"):
        rnn.pack_padded_sequence(x, [4, 2])
    with pytest.raises(ValueError, match="longer than the input"):
        rnn.pack_padded_sequence(x, [5, 2, 1])
    with pytest.raises(ValueError, match="total_length=2"):
        rnn.pad_packed_sequence(rnn.pack_padded_sequence(x, [4, 2, 1]), total_length=2)


def test_packing_errors_are_torchs_runtime_errors():
    # torch raises RuntimeError for these (ours are ValueErrors too)
    x = Tensor.zeros(4, 3)
    for call in (
        lambda: rnn.pack_padded_sequence(x, [2, 4, 1]),
        lambda: rnn.pack_padded_sequence(x, [4, 2, 0]),
        lambda: rnn.pack_padded_sequence(x, [4, 2]),
        lambda: rnn.pack_sequence([Tensor.ones(1, 2), Tensor.ones(3, 2)]),
        lambda: rnn.pad_sequence([]),
        lambda: rnn.pad_sequence([Tensor.ones(2, 3), Tensor.ones(2, 4)]),
        lambda: rnn.pad_sequence([Tensor.ones(2)], padding_side="middle"),
    ):
        with pytest.raises(RuntimeError):
            call()


def test_packed_sequence_casts_as_torch():
    seqs = [np.array([1.5, 2.5], np.float32), np.array([3.5], np.float32)]
    ours = rnn.pack_sequence([Tensor(s) for s in seqs])
    theirs = torch.nn.utils.rnn.pack_sequence([torch.from_numpy(s) for s in seqs])
    for method in ("double", "float", "half", "long", "int", "short", "char", "byte", "cpu"):
        got, want = getattr(ours, method)(), getattr(theirs, method)()
        assert isinstance(got, rnn.PackedSequence), method
        assert got.data.numpy().dtype == want.data.numpy().dtype, method
        np.testing.assert_array_equal(got.data.numpy(), want.data.numpy())
        assert got.batch_sizes is ours.batch_sizes
    # (torch's pin_memory needs an accelerator; ours keeps the data's values)
    np.testing.assert_array_equal(ours.pin_memory().data.numpy(), ours.data.numpy())
    assert ours.is_pinned() is False


def test_packed_sequence_to():
    packed = rnn.pack_sequence([Tensor([1.0, 2.0]), Tensor([3.0])])
    half = packed.to(dtype="float16")
    assert half.data.dtype != packed.data.dtype and half.batch_sizes is packed.batch_sizes


def _conv_pair(seed=0):
    # a Conv1d in uopkit and torch with the same weights, and an input
    torch.manual_seed(seed)
    theirs = torch.nn.Conv1d(2, 3, 3)
    ours = nn.Conv1d(2, 3, 3)
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(seed).standard_normal((2, 2, 7)).astype(np.float32)
    return ours, theirs, x


@pytest.mark.parametrize("dim", [0, 1, 2, -1, None, -2])
def test_parametrizations_weight_norm_matches_torch(dim):
    ours, theirs, x = _conv_pair()
    utils.parametrizations.weight_norm(ours, dim=dim)
    torch.nn.utils.parametrizations.weight_norm(theirs, dim=dim)
    assert type(ours).__name__ == type(theirs).__name__ == "ParametrizedConv1d"
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (n, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert p.shape == tuple(q.shape), n
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7, err_msg=n)
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-6, atol=1e-7)
    # values, gradients and three SGD steps on g and v
    opt, topt = nn.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        topt.zero_grad()
        _outputs_and_gradients_match(ours, theirs, x)
        opt.step()
        topt.step()
    # the state dicts load both ways
    fresh, tfresh = _conv_pair(1)[:2]
    utils.parametrizations.weight_norm(fresh, dim=dim)
    torch.nn.utils.parametrizations.weight_norm(tfresh, dim=dim)
    fresh.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    tfresh.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    np.testing.assert_allclose(fresh.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tfresh.weight.detach().numpy(), ours.weight.numpy(), rtol=1e-5, atol=1e-6)
    # removed: a plain parameter holding the parametrized value, and the class back
    utils.parametrize.remove_parametrizations(ours, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(theirs, "weight")
    assert type(ours) is nn.Conv1d and not utils.parametrize.is_parametrized(ours)
    assert list(ours.state_dict()) == list(theirs.state_dict()) and isinstance(ours.weight, nn.Parameter)
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_register_parametrization_follows_torch():
    parametrize = utils.parametrize

    class Symmetric(nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(0, 1)

        def right_inverse(self, a):
            return a.triu()

    class Doubled(nn.Module):
        def forward(self, x):
            return x * 2

    layer = nn.Linear(3, 3)
    weight = layer.weight
    parametrize.register_parametrization(layer, "weight", Symmetric())
    # a single original: the same tensor object, set to right_inverse of the weight
    assert layer.parametrizations.weight.original is weight
    np.testing.assert_allclose(weight.numpy(), np.triu(weight.numpy()))
    parametrize.register_parametrization(layer, "weight", Doubled())
    assert len(layer.parametrizations.weight) == 2 and parametrize.is_parametrized(layer, "weight")
    assert parametrize.type_before_parametrizations(layer) is nn.Linear
    w = layer.weight.numpy()
    np.testing.assert_allclose(w, w.T)
    np.testing.assert_allclose(w, 2 * (np.triu(weight.numpy()) + np.triu(weight.numpy(), 1).T))
    # gradients reach the original through both parametrizations
    layer(Tensor.ones(1, 3)).sum().backward()
    assert weight.grad is not None and weight.grad.shape == (3, 3)
    # assigning the tensor sets the original through right_inverse; cached() computes it once per block
    with pytest.raises(RuntimeError, match="does not implement right_inverse"):
        layer.weight = Tensor.eye(3)
    with parametrize.cached():
        assert layer.weight is layer.weight
    assert layer.weight is not layer.weight
    with pytest.raises(
        ValueError, match="ParametrizedLinear has no parameter, buffer or parametrized tensor named 'nothing'"
    ):
        parametrize.register_parametrization(layer, "nothing", Doubled())
    with pytest.raises(ValueError, match="it must keep both"):
        parametrize.register_parametrization(nn.Linear(2, 3), "weight", nn.Flatten(0))
    sym = parametrize.register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
    sym.weight = Tensor([[1.0, 2.0, 3.0], [0.0, 4.0, 5.0], [0.0, 0.0, 6.0]])
    assert sym.weight.tolist() == [[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]]
    parametrize.remove_parametrizations(sym, "weight", leave_parametrized=False)
    assert type(sym) is nn.Linear and sym.weight.tolist() == [[1.0, 2.0, 3.0], [0.0, 4.0, 5.0], [0.0, 0.0, 6.0]]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_older_weight_norm_matches_torch():
    ours, theirs, x = _conv_pair()
    utils.weight_norm(ours)
    torch.nn.utils.weight_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight_g", "weight_v"]
    # a torch checkpoint with weight_g / weight_v loads as it is
    ours.load_state_dict({k: Tensor(v.detach().numpy() * 1.5) for k, v in theirs.state_dict().items()})
    with torch.no_grad():
        for p in theirs.parameters():
            p.mul_(1.5)
    _outputs_and_gradients_match(ours, theirs, x)
    with pytest.raises(RuntimeError, match="'weight' of Conv1d already has a weight_norm hook"):
        utils.weight_norm(ours)
    utils.remove_weight_norm(ours)
    torch.nn.utils.remove_weight_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-5)


def _outputs_and_gradients_match(ours, theirs, x):  # noqa: ANN001, ANN202
    # the same forward, and the gradients of sum(out ** 2), in both libraries
    out, tout = ours(Tensor(x)), theirs(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)


# (torch's fuse_linear_bn_weights needs a BatchNorm weight: a linear layer is fused with an affine one only)
@pytest.mark.parametrize(
    "kind, bias, affine",
    [(kind, bias, affine) for kind in ("conv", "conv_transpose") for bias in (True, False) for affine in (True, False)]
    + [("linear", True, True), ("linear", False, True)],
)
def test_fuse_bn_eval_as_torchs(kind, bias, affine):
    # nn.utils.fuse_conv_bn_eval / fuse_linear_bn_eval (and their *_weights): a new layer, its weight and bias
    # torch's to the last bit, each a Parameter that requires grad as torch's (a bias made from none doesn't)
    import torch.nn.utils.fusion as tfusion

    rng = np.random.default_rng(1)
    if kind == "linear":
        ours, theirs = nn.Linear(2, 3, bias=bias), torch.nn.Linear(2, 3, bias=bias)
        obn, tbn = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
        x = rng.standard_normal((4, 2)).astype(np.float32)
    else:
        layer = "Conv2d" if kind == "conv" else "ConvTranspose2d"
        ours, theirs = getattr(nn, layer)(2, 3, 3, bias=bias), getattr(torch.nn, layer)(2, 3, 3, bias=bias)
        obn, tbn = nn.BatchNorm2d(3, affine=affine), torch.nn.BatchNorm2d(3, affine=affine)
        x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    for name, t in theirs.state_dict().items():
        t.copy_(torch.tensor(ours.state_dict()[name].numpy()))
    for name in ("running_mean", "running_var", "weight", "bias"):
        if getattr(tbn, name) is not None:
            v = rng.uniform(0.5, 2, 3).astype(np.float32)
            getattr(obn, name).assign(Tensor(v)).realize()
            getattr(tbn, name).data.copy_(torch.tensor(v))
    theirs.eval()
    tbn.eval()
    ours.eval()
    obn.eval()
    if kind == "linear":
        fused, tfused = utils.fuse_linear_bn_eval(ours, obn), tfusion.fuse_linear_bn_eval(theirs, tbn)
    else:
        transpose = kind == "conv_transpose"
        fused = utils.fuse_conv_bn_eval(ours, obn, transpose)
        tfused = tfusion.fuse_conv_bn_eval(theirs, tbn, transpose)
    assert fused is not ours and fused.weight is not ours.weight
    for name in ("weight", "bias"):
        mine, want = getattr(fused, name), getattr(tfused, name)
        assert isinstance(mine, nn.Parameter) and mine.requires_grad == want.requires_grad
        np.testing.assert_array_equal(mine.numpy(), want.detach().numpy())
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in tfused.named_parameters()]
    out, want = fused(Tensor(x)).numpy(), tfused(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # and bn(layer(x)) as it was
    np.testing.assert_allclose(out, obn(ours(Tensor(x))).numpy(), rtol=1e-5, atol=1e-5)


def test_fuse_bn_eval_refuses_training_mode_and_mismatched_features_as_torch():
    for layer in (nn.Linear(2, 3), nn.BatchNorm1d(3)):
        layer.train()
        with pytest.raises(AssertionError, match="Fusion only for eval"):
            utils.fuse_linear_bn_eval(
                *((layer, nn.BatchNorm1d(3)) if isinstance(layer, nn.Linear) else (nn.Linear(2, 3), layer))
            )
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        # (new layers train, as torch's; the global flag doesn't reach them)
        with Tensor.test():
            utils.fuse_conv_bn_eval(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    with pytest.raises(
        AssertionError, match="batch norm's 4 features match neither the linear layer's 3 outputs nor 1"
    ):
        utils.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), nn.BatchNorm1d(4).eval())
    with pytest.raises(AssertionError, match="keeps no running statistics"):
        utils.fuse_conv_bn_eval(nn.Conv2d(1, 2, 3).eval(), nn.BatchNorm2d(2, track_running_stats=False).eval())
    # a BatchNorm of one feature scales every output, as torch's
    torch_fused = torch.nn.utils.fusion.fuse_linear_bn_eval(
        torch.nn.Linear(2, 3).eval(), torch.nn.BatchNorm1d(1).eval()
    )
    fused = utils.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), nn.BatchNorm1d(1).eval())
    assert fused.weight.shape == tuple(torch_fused.weight.shape)


def test_skip_init_as_torchs():
    class Net(nn.Module):
        def __init__(self, n, device=None):
            super().__init__()
            self.fc = nn.Linear(n, 2)
            self.device = device

    made = utils.skip_init(Net, 3, device="CPU")
    assert made.device == "CPU" and made.fc.weight.shape == (2, 3) and made.training is True
    layer = utils.skip_init(nn.Linear, 5, 1, bias=False)
    assert layer.weight.shape == (1, 5) and layer.bias is None and layer.weight.requires_grad
    assert [n for n, _ in layer.named_parameters()] == [
        n for n, _ in torch.nn.utils.skip_init(torch.nn.Linear, 5, 1, bias=False).named_parameters()
    ]
    with pytest.raises(RuntimeError, match="Expected a Module"):
        torch.nn.utils.skip_init(int)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        utils.skip_init(int)


@pytest.mark.parametrize(
    "shape, orthogonal_map, use_trivialization",
    [((4, 4), None, True), ((4, 4), "cayley", True), ((4, 4), "householder", True), ((5, 3), None, True),
     ((3, 5), None, True), ((5, 3), "matrix_exp", True), ((4, 4), "householder", False),
     ((5, 3), "householder", False), ((3, 5), "householder", False)],
)  # fmt: skip
def test_orthogonal_parametrization_as_torchs(shape, orthogonal_map, use_trivialization):
    import torch.nn.utils.parametrizations as tparam

    from uopkit.nn.utils.parametrizations import orthogonal

    rng = np.random.default_rng(sum(shape))
    w = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal((2, shape[1])).astype(np.float32)
    c = rng.standard_normal((2, shape[0])).astype(np.float32)
    theirs = torch.nn.Linear(shape[1], shape[0], bias=False)
    theirs.weight.data = torch.from_numpy(w.copy())
    mine = nn.Linear(shape[1], shape[0], bias=False)
    mine.weight = nn.Parameter(Tensor(w))
    tparam.orthogonal(theirs, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    assert orthogonal(mine, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization) is mine
    want = theirs.state_dict()
    got = mine.state_dict()
    assert list(got) == list(want)
    for key in want:
        # (a wide or tall weight's base is completed by random columns: the first ones are the weight's)
        cols = min(shape)
        np.testing.assert_allclose(got[key].numpy()[..., :cols], want[key].numpy()[..., :cols], atol=1e-5)
    np.testing.assert_allclose(mine.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-5)
    w_np = mine.weight.numpy()
    np.testing.assert_allclose(w_np @ w_np.T if shape[0] <= shape[1] else w_np.T @ w_np, np.eye(min(shape)), atol=1e-5)
    if use_trivialization:
        mine.parametrizations.weight[0].base = Tensor(want["parametrizations.weight.0.base"].numpy())
    # a step away from the start (off the diagonal, which householder reads signs from), then values and gradients
    step = 0.1 * np.tril(w, -1)
    with torch.no_grad():
        theirs.parametrizations.weight.original.add_(torch.from_numpy(step))
    mine.parametrizations.weight.original.add_(Tensor(step))
    (theirs(torch.from_numpy(x)) * torch.from_numpy(c)).sum().backward()
    (mine(Tensor(x)) * Tensor(c)).sum().backward()
    np.testing.assert_allclose(mine.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-5)
    want_grad = theirs.parametrizations.weight.original.grad.numpy()
    assert np.abs(want_grad).max() > 0.1
    np.testing.assert_allclose(mine.parametrizations.weight.original.grad.numpy(), want_grad, atol=1e-5)


def test_orthogonal_refuses_what_torch_refuses():
    from uopkit.nn.utils.parametrizations import orthogonal

    with pytest.raises(ValueError, match='orthogonal_map has to be one of "matrix_exp", "cayley", "householder"'):
        orthogonal(nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="orthogonal: expected a matrix or batch of matrices"):
        orthogonal(nn.LayerNorm(3))
    layer = orthogonal(nn.Linear(3, 3), use_trivialization=False)
    with pytest.raises(NotImplementedError, match="not possible to assign to the matrix exponential"):
        layer.weight = Tensor.eye(3)
    # assigning an orthogonal matrix with the trivialization makes it the base, as torch's
    layer = orthogonal(nn.Linear(3, 3))
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))[0].astype(np.float32)
    layer.weight = Tensor(q)
    np.testing.assert_allclose(layer.weight.numpy(), q, atol=1e-6)

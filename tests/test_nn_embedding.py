"""nn.Embedding against torch.nn.Embedding: torch's constructor and from_pretrained, max_norm, scale_grad_by_freq."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from uopkit import Tensor, dtypes, no_grad
from uopkit.nn import Embedding, Parameter
from uopkit.nn.state import load_state_dict

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
# repeated indices (1 three times, 2 twice) so that scale_grad_by_freq and the renorm of a row read twice matter
IDX = np.array([[1, 2, 2, 7], [1, 1, 0, 3]])


def _pair(**options: object) -> tuple[Embedding, torch.nn.Embedding]:
    # the same weights (torch's, scaled so that some rows' norms exceed max_norm) in both
    theirs = torch.nn.Embedding(10, 4, **options)
    with torch.no_grad():
        theirs.weight.mul_(2.0)
    ours = Embedding(10, 4, **options)
    load_state_dict(ours, {"weight": theirs.weight.detach().numpy().copy()})
    return ours, theirs


def _step(ours: Embedding, theirs: torch.nn.Embedding, idx: np.ndarray) -> None:
    # one lookup and backward in both; the output, the (renormed) weight and its gradient agree
    upstream = RNG.standard_normal((*idx.shape, 4)).astype(np.float32)
    ours.weight.grad, theirs.weight.grad = None, None
    out, ref = ours(Tensor(idx)), theirs(torch.tensor(idx))
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-6, atol=1e-6)
    grad = theirs.weight.grad
    want = grad.to_dense() if grad.is_sparse else grad
    np.testing.assert_allclose(ours.weight.grad.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)  # type: ignore[union-attr]


def _signature(fn: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


def test_constructor_and_from_pretrained_take_torchs_signature():
    assert _signature(Embedding.__init__) == _signature(torch.nn.Embedding.__init__)
    assert _signature(Embedding.from_pretrained) == _signature(torch.nn.Embedding.from_pretrained)


def test_attributes_and_repr_are_torchs():
    options = {"padding_idx": 3, "max_norm": 1.5, "norm_type": 1.0, "scale_grad_by_freq": True, "sparse": True}
    ours = Embedding(num_embeddings=10, embedding_dim=4, **options)
    theirs = torch.nn.Embedding(num_embeddings=10, embedding_dim=4, **options)
    for name in ("num_embeddings", "embedding_dim", *options):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert repr(ours) == repr(theirs)
    assert repr(Embedding(10, 4)) == repr(torch.nn.Embedding(10, 4)) == "Embedding(10, 4)"


def test_tinygrad_positional_use_and_names_still_work():
    emb = Embedding(6, 3)
    assert (emb.vocab_size, emb.embed_size) == (6, 3) and emb.weight.requires_grad
    assert emb(Tensor([[5, 0]])).shape == (1, 2, 3)
    assert Embedding(6, 3, 2).padding_idx == 2


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_max_norm_renormalizes_the_looked_up_rows_in_the_weight_as_torch(norm_type):
    ours, theirs = _pair(max_norm=1.0, norm_type=norm_type)
    before = ours.weight.numpy().copy()
    for _ in range(2):
        _step(ours, theirs, IDX)
    # the rows never looked up keep their values
    untouched = sorted(set(range(10)) - set(IDX.ravel().tolist()))
    np.testing.assert_array_equal(ours.weight.numpy()[untouched], before[untouched])


def test_scale_grad_by_freq_divides_each_rows_gradient_by_its_count_as_torch():
    ours, theirs = _pair(scale_grad_by_freq=True)
    _step(ours, theirs, IDX)
    # with a padding row and max_norm as well
    ours, theirs = _pair(scale_grad_by_freq=True, padding_idx=1, max_norm=1.0)
    for _ in range(2):
        _step(ours, theirs, IDX)


def test_scale_grad_by_freq_leaves_the_values_alone_without_a_gradient():
    emb = Embedding(10, 4, scale_grad_by_freq=True)
    with no_grad():
        np.testing.assert_array_equal(emb(Tensor(IDX)).numpy(), emb.weight.numpy()[IDX])


def test_sparse_gives_torchs_gradient_dense():
    ours, theirs = _pair(sparse=True)
    _step(ours, theirs, IDX)


def test_from_pretrained_as_torch():
    table = RNG.standard_normal((5, 3)).astype(np.float32)
    ours, theirs = Embedding.from_pretrained(Tensor(table)), torch.nn.Embedding.from_pretrained(torch.tensor(table))
    assert isinstance(ours.weight, Parameter) and not ours.weight.requires_grad
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == ["weight"]
    np.testing.assert_array_equal(ours(Tensor([4, 0])).numpy(), theirs(torch.tensor([4, 0])).numpy())
    # trained, with a padding row: the row is kept as given (torch zeroes it only in a new weight) and gets no gradient
    ours = Embedding.from_pretrained(Tensor(table), freeze=False, padding_idx=0)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(table), freeze=False, padding_idx=0)
    assert ours.weight.requires_grad and ours.padding_idx == theirs.padding_idx == 0
    out, ref = ours(Tensor([0, 2, 0])), theirs(torch.tensor([0, 2, 0]))
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(ours.weight.grad.numpy(), theirs.weight.grad.numpy())  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="2-D Tensor"):
        Embedding.from_pretrained(Tensor(table[0]))


def test_from_pretrained_max_norm_writes_into_the_embeddings_as_torchs_shared_storage():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    embeddings, reference = Tensor(table.copy()), torch.tensor(table.copy())
    ours = Embedding.from_pretrained(embeddings, max_norm=2.0)
    theirs = torch.nn.Embedding.from_pretrained(reference, max_norm=2.0)
    np.testing.assert_allclose(ours(Tensor([1, 3])).numpy(), theirs(torch.tensor([1, 3])).numpy(), rtol=1e-6)
    np.testing.assert_allclose(embeddings.numpy(), reference.numpy(), rtol=1e-6)


def test_weight_options_device_dtype_and_freeze():
    assert Embedding(4, 2, dtype=dtypes.float64).weight.dtype == dtypes.float64
    assert Embedding(4, 2, device="CPU").weight.device == "CPU"
    frozen = Embedding(4, 2, _freeze=True)
    assert not frozen.weight.requires_grad and [n for n, _ in frozen.named_parameters()] == ["weight"]
    given = Tensor(np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(Embedding(4, 2, padding_idx=0, _weight=given).weight.numpy(), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"_weight must have shape \(4, 2\)"):
        Embedding(4, 2, _weight=Tensor.ones(2, 4))
    with pytest.raises(TypeError, match="float dtype"):
        Embedding(4, 2, dtype=dtypes.int32)

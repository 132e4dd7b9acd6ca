"""uopkit.nn.spatial against torch.nn: Fold, Unfold, EmbeddingBag, Bilinear, LPPool1d/2d/3d, FeatureAlphaDropout and
CrossMapLRN2d with torch's constructor arguments (values, the inputs' and the parameters' gradients, state dicts,
errors)."""

from __future__ import annotations

import doctest
import inspect
from typing import Any

import numpy as np
import pytest

import uopkit.nn.functional as UF
from uopkit import Tensor, nn
from uopkit.nn import spatial
from uopkit.nn.module import Module
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.tensor import ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(29)


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _load_torch(ours: Any, theirs: Any) -> None:
    # strict: the keys must be torch's, every one of them
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def compare(ours: Any, theirs: Any, *args: Any, grad_of: tuple[int, ...] = (0,), atol: float = 1e-5) -> None:
    """torch's state loaded into ours, both called on the same arguments (numpy arrays become tensors, those at the
    positions `grad_of` leaves that take a gradient; anything else is passed as it is); the output, the gradient of
    each leaf (of a random weighting of the output) and every parameter's gradient compared."""
    _load_torch(ours, theirs)
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
    ours_args, theirs_args, leaves = [], [], []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            grad = i in grad_of
            o, t = Tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)
            if grad:
                leaves.append((o, t))
        else:
            o = t = a
        ours_args.append(o)
        theirs_args.append(t)
    out, ref = ours(*ours_args), theirs(*theirs_args)
    assert out.shape == tuple(ref.shape)
    trained = [(name, tp) for name, tp in theirs.named_parameters() if tp.requires_grad]
    if not leaves and not trained:
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
        return
    upstream = _randn(*ref.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    for i, (o, t) in enumerate(leaves):
        assert o.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient {i}")
    params = get_state_dict(ours)
    for name, tp in trained:
        assert params[name].grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(
            params[name].grad.numpy(), tp.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient of {name}"
        )


def _both(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)


def test_every_layer_is_exported_documented_and_a_module() -> None:
    public = {n for n, v in vars(spatial).items() if inspect.isclass(v) and v.__module__ == spatial.__name__}
    assert {n for n in public if not n.startswith("_")} == set(spatial.__all__)
    for name in spatial.__all__:
        assert getattr(nn, name) is getattr(spatial, name)
        assert name in nn.__all__
        assert hasattr(torch.nn, name), name
        assert issubclass(getattr(spatial, name), Module), name
        assert ">>>" in (getattr(spatial, name).__doc__ or ""), f"{name} has no example"


def test_docstring_examples_run() -> None:
    result = doctest.testmod(spatial, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", spatial.__all__)
def test_constructor_signatures_are_torchs(name: str) -> None:
    ours, theirs = inspect.signature(getattr(nn, name)), inspect.signature(getattr(torch.nn, name))
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    if name == "EmbeddingBag":
        ours, theirs = (
            inspect.signature(nn.EmbeddingBag.from_pretrained),
            inspect.signature(torch.nn.EmbeddingBag.from_pretrained),
        )
        assert list(ours.parameters) == list(theirs.parameters)


# ---------------------------------------------------------------------------------------------------------------------
# sliding blocks


UNFOLDS = [
    ({"kernel_size": 2}, (2, 3, 5, 5)),
    ({"kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (1, 2)}, (1, 2, 6, 7)),
    ({"kernel_size": 3, "padding": (0, 2), "stride": 2}, (3, 5, 6)),
]


@pytest.mark.parametrize("kwargs, shape", UNFOLDS)
def test_unfold_matches_torch(kwargs: dict[str, Any], shape: tuple[int, ...]) -> None:
    ours, theirs = _both("Unfold", **kwargs)
    assert get_state_dict(ours) == {}
    compare(ours, theirs, _randn(*shape))


@pytest.mark.parametrize("kwargs, shape", UNFOLDS)
def test_fold_matches_torch_and_inverts_unfold_layout(kwargs: dict[str, Any], shape: tuple[int, ...]) -> None:
    cols = torch.nn.Unfold(**kwargs)(torch.zeros(shape))
    ours, theirs = _both("Fold", shape[-2:], **kwargs)
    compare(ours, theirs, _randn(*cols.shape))
    # fold(unfold(x)) == x times each position's block count, as torch's
    x = _randn(*shape)
    once = nn.Fold(shape[-2:], **kwargs)(nn.Unfold(**kwargs)(Tensor(x)))
    np.testing.assert_allclose(once.numpy(), theirs(torch.nn.Unfold(**kwargs)(torch.tensor(x))).numpy(), atol=1e-5)


def test_fold_and_unfold_errors() -> None:
    bad_arguments = [
        {"kernel_size": 0},
        {"kernel_size": (2, 2, 2)},
        {"kernel_size": 2, "stride": 0},
        {"kernel_size": 2, "padding": -1},
        {"kernel_size": 2.5},
        {"kernel_size": 2, "dilation": (1,)},
    ]
    for bad in bad_arguments:
        with pytest.raises(ValueError, match="Unfold: "):
            nn.Unfold(**bad)
        with pytest.raises(ValueError, match="Fold: "):
            nn.Fold(4, **bad)
    with pytest.raises(ValueError, match=r"Fold: every output_size must be >= 1, got \(0, 3\)"):
        nn.Fold((0, 3), 2)
    with pytest.raises(ShapeError, match=r"Unfold: expected input \(N, C, H, W\) or \(C, H, W\), got shape \(4, 4\)"):
        nn.Unfold(2)(Tensor.ones(4, 4))
    with pytest.raises(ShapeError, match=r"Unfold: input \(1, 1, 2, 2\) padded by \(0, 0\) has no \(3, 3\) block"):
        nn.Unfold(3)(Tensor.ones(1, 1, 2, 2))
    with pytest.raises(ShapeError, match=r"Fold: expected input \(N, C \* kh \* kw, L\)"):
        nn.Fold(3, 2)(Tensor.ones(1, 1, 4, 4))
    with pytest.raises(ShapeError, match="fold: output_size"):
        nn.Fold(3, 2)(Tensor.ones(1, 4, 5))


# ---------------------------------------------------------------------------------------------------------------------
# embedding bags and bilinear forms


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scattered", [True, False])
def test_embedding_bag_with_offsets_matches_torch(
    mode: str, padding_idx: int | None, scattered: bool, monkeypatch
) -> None:
    # scattered: each position's row added into its bag (the CPU's scatter kernels); else the mask of every bag
    # against every position (GPU-style devices)
    if not scattered:
        import uopkit.tensor.segments as segments

        monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    ours, theirs = _both("EmbeddingBag", 7, 3, mode=mode, padding_idx=padding_idx)
    if padding_idx is not None:
        assert ours.weight.numpy()[padding_idx].tolist() == [0.0] * 3
    idx = np.array([1, 2, 4, 2, 2, 6, 0, 3], dtype=np.int64)
    # bags [1, 2, 4], [2, 2] (all padding when padding_idx is 2), [6, 0, 3], and an empty one
    offsets = np.array([0, 3, 5, 8], dtype=np.int64)
    compare(ours, theirs, idx, offsets, grad_of=())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("scattered", [True, False])
def test_embedding_bag_2d_input_and_include_last_offset_match_torch(mode: str, scattered: bool, monkeypatch) -> None:
    if not scattered:
        import uopkit.tensor.segments as segments

        monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    ours, theirs = _both("EmbeddingBag", 6, 4, mode=mode)
    compare(ours, theirs, RNG.integers(0, 6, (3, 4)), grad_of=())
    ours, theirs = _both("EmbeddingBag", 6, 4, mode=mode, include_last_offset=True)
    compare(ours, theirs, np.array([5, 1, 2, 0, 3]), np.array([0, 2, 5]), grad_of=())
    # a last offset short of the input's end ends the last bag (torch's CPU runs it to the input's end; its docs ask
    # for the input's length there): positions 5 and 6 are in no bag
    bag = nn.EmbeddingBag.from_pretrained(Tensor(np.eye(6, dtype=np.float32)), mode=mode, include_last_offset=True)
    got = bag(Tensor([5, 1, 2, 0, 3, 4, 4]), Tensor([0, 2, 5])).numpy()
    want = {"sum": [[0, 1, 0, 0, 0, 1], [1, 0, 1, 1, 0, 0]], "max": [[0, 1, 0, 0, 0, 1], [1, 0, 1, 1, 0, 0]]}
    want["mean"] = [[0, 0.5, 0, 0, 0, 0.5], [1 / 3, 0, 1 / 3, 1 / 3, 0, 0]]
    np.testing.assert_allclose(got, want[mode], atol=1e-6)


def test_embedding_bag_per_sample_weights_match_torch() -> None:
    ours, theirs = _both("EmbeddingBag", 6, 4, mode="sum", padding_idx=0)
    idx, offsets = np.array([1, 0, 4, 5, 2]), np.array([0, 2])
    compare(ours, theirs, idx, offsets, _randn(5), grad_of=(2,))
    # offsets as a list
    np.testing.assert_allclose(
        ours(Tensor(idx), [0, 2]).numpy(), theirs(torch.tensor(idx), torch.tensor([0, 2])).detach().numpy(), atol=1e-6
    )


def test_embedding_bag_from_pretrained_as_torch() -> None:
    table = _randn(5, 3)
    for freeze in (True, False):
        ours = nn.EmbeddingBag.from_pretrained(Tensor(table), freeze=freeze, mode="max")
        theirs = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(table), freeze=freeze, mode="max")
        assert ours.weight.requires_grad == theirs.weight.requires_grad == (not freeze)
        # a frozen weight is still a parameter, as torch's
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == ["weight"]
        assert (ours.num_embeddings, ours.embedding_dim, ours.mode) == (5, 3, "max")
        compare(ours, theirs, np.array([[0, 4], [2, 2]]), grad_of=())
    with pytest.raises(ValueError, match=r"EmbeddingBag.from_pretrained: embeddings must be 2-D, got shape \(5,\)"):
        nn.EmbeddingBag.from_pretrained(Tensor.ones(5))


def test_embedding_bag_errors() -> None:
    with pytest.raises(ValueError, match=r"EmbeddingBag\(5, 3\): mode must be 'sum', 'mean' or 'max', got 'min'"):
        nn.EmbeddingBag(5, 3, mode="min")
    with pytest.raises(ValueError, match=r"EmbeddingBag\(5, 3\): padding_idx must be an int in \[-5, 5\), got 7"):
        nn.EmbeddingBag(5, 3, padding_idx=7)
    assert nn.EmbeddingBag(5, 3, padding_idx=-1).padding_idx == 4
    with pytest.raises(ValueError, match=r"_weight must have shape \(5, 3\), got \(2, 2\)"):
        nn.EmbeddingBag(5, 3, _weight=Tensor.ones(2, 2))
    # torch refuses it at the first call
    with pytest.raises(ValueError, match=r"EmbeddingBag\(5, 3\): max mode does not support scaling the gradient"):
        nn.EmbeddingBag(5, 3, mode="max", scale_grad_by_freq=True)
    with pytest.raises(ValueError, match="embedding_bag: max mode does not support scaling the gradient"):
        UF.embedding_bag(Tensor([1, 2]), Tensor.ones(5, 3), Tensor([0]), mode="max", scale_grad_by_freq=True)
    with pytest.raises(ShapeError, match="embedding_bag: a 1-D input needs 1-D offsets"):
        nn.EmbeddingBag(5, 3)(Tensor([1, 2]))
    # decreasing offsets: refused (PyTorch's CPU checks only the first and the last offset, and gives unspecified
    # values for the bags after a decrease)
    decreasing = r"offsets must start at 0, never decrease .* got \[0, 5, 3\] \(PyTorch checks the first and the last"
    with pytest.raises(ValueError, match=decreasing):
        nn.EmbeddingBag(10, 3, mode="sum")(Tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0]), Tensor([0, 5, 3]))


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_scale_grad_by_freq_as_torch(mode: str, padding_idx: int | None) -> None:
    # each row's gradient divided by how often its index occurs in the whole input. The reference is torch's
    # `embedding` with scale_grad_by_freq, its rows bagged by hand: torch 2.13's CPU EmbeddingBag divides a row by
    # another index's count where counts differ (here row 3, once, by 2's count 3)
    idx, offsets = np.array([1, 2, 4, 2, 4, 3, 2, 9]), np.array([0, 3, 5])
    ours, theirs = _both("EmbeddingBag", 10, 3, mode=mode, scale_grad_by_freq=True, padding_idx=padding_idx)
    _load_torch(ours, theirs)
    weight = theirs.weight.detach().clone().requires_grad_()
    rows = torch.nn.functional.embedding(torch.tensor(idx), weight, padding_idx, scale_grad_by_freq=True)
    bags = []
    for start, end in zip(offsets, [*offsets[1:], len(idx)], strict=True):
        kept = torch.tensor(idx[start:end] != (-1 if padding_idx is None else padding_idx)).unsqueeze(-1)
        total = (rows[start:end] * kept).sum(0)
        bags.append(total / kept.sum() if mode == "mean" else total)
    ref = torch.stack(bags)
    upstream = _randn(*ref.shape)
    (ref * torch.tensor(upstream)).sum().backward()
    out = ours(Tensor(idx), Tensor(offsets))
    np.testing.assert_allclose(ref.detach().numpy(), theirs(torch.tensor(idx), torch.tensor(offsets)).detach().numpy())
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-6)
    (out * Tensor(upstream)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), weight.grad.numpy(), atol=1e-6)
    # the functional too, and a 2-D input (equal counts there: torch's own EmbeddingBag is right)
    table = Tensor(theirs.weight.detach().numpy(), requires_grad=True)
    out = UF.embedding_bag(
        Tensor(idx), table, Tensor(offsets), mode=mode, scale_grad_by_freq=True, padding_idx=padding_idx
    )
    (out * Tensor(upstream)).sum().backward()
    np.testing.assert_allclose(table.grad.numpy(), weight.grad.numpy(), atol=1e-6)
    ours, theirs = _both("EmbeddingBag", 6, 4, mode=mode, scale_grad_by_freq=True)
    compare(ours, theirs, np.array([[1, 1, 5], [5, 0, 0]]), grad_of=())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_sparse_and_max_norm_as_torch(mode: str) -> None:
    # DLRM builds EmbeddingBag(n, m, mode="sum", sparse=True): accepted, its gradient dense (torch's is sparse, the
    # same values); max_norm scales each looked-up row whose norm exceeds it down to it, in the weight itself
    table = _randn(9, 4) * 2
    idx, offsets = np.array([1, 2, 4, 2, 7, 0, 3, 3]), np.array([0, 3, 5])
    sparse = mode != "max"
    for kwargs in ({"sparse": sparse}, {"max_norm": 1.5}, {"max_norm": 2.0, "norm_type": 1.0, "sparse": sparse}):
        ours, theirs = _both("EmbeddingBag", 9, 4, mode=mode, **kwargs)
        assert (ours.max_norm, ours.norm_type, ours.sparse) == (theirs.max_norm, theirs.norm_type, theirs.sparse)
        theirs.weight.data = torch.tensor(table)
        _load_torch(ours, theirs)
        out = ours(Tensor(idx), Tensor(offsets))
        ref = theirs(torch.tensor(idx), torch.tensor(offsets))
        upstream = _randn(*ref.shape)
        (out * Tensor(upstream)).sum().backward()
        (ref * torch.tensor(upstream)).sum().backward()
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-5, rtol=1e-5)
        # the rows looked up renormalized (5, 6 and 8 untouched), the others as they were
        np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-5, rtol=1e-5)
        assert ours.weight.grad is not None
        np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.to_dense().numpy(), atol=1e-5)
    assert not np.allclose(ours.weight.numpy(), table)
    if mode == "max":
        # torch refuses a sparse gradient in max mode (at the first call; here at construction, as other bad arguments)
        with pytest.raises(ValueError, match=r"EmbeddingBag\(9, 4\): max mode does not support sparse weights"):
            nn.EmbeddingBag(9, 4, mode="max", sparse=True)
        with pytest.raises(ValueError, match="max mode does not support sparse weights"):
            torch.nn.EmbeddingBag(9, 4, mode="max", sparse=True)(torch.tensor(idx), torch.tensor(offsets))
        with pytest.raises(ValueError, match="embedding_bag: max mode does not support sparse weights"):
            UF.embedding_bag(Tensor(idx), Tensor(table), Tensor(offsets), mode="max", sparse=True)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lead", [(4,), (2, 3), ()])
def test_bilinear_matches_torch(bias: bool, lead: tuple[int, ...]) -> None:
    ours, theirs = _both("Bilinear", 3, 5, 2, bias=bias)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert ours.weight.shape == (2, 3, 5) and (ours.bias is not None) == bias
    compare(ours, theirs, _randn(*lead, 3), _randn(*lead, 5), grad_of=(0, 1))


def test_bilinear_initialization_bounds_as_torch() -> None:
    Tensor.manual_seed(3)
    layer = nn.Bilinear(16, 4, 64)
    bound = 1 / 4
    for t in (layer.weight, layer.bias):
        values = t.numpy()
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.9 * bound
    with pytest.raises(ValueError, match=r"Bilinear\(3, -1, 2\): in1_features, in2_features and out_features"):
        nn.Bilinear(3, -1, 2)
    with pytest.raises(ShapeError, match=r"Bilinear\(3, 5, 2\): input1 \(4, 2\) must end in 3"):
        nn.Bilinear(3, 5, 2)(Tensor.ones(4, 2), Tensor.ones(4, 5))
    with pytest.raises(ShapeError, match=r"Bilinear\(3, 5, 2\): input2 \(3, 5\) must be \(\*, 5\) with input1's"):
        nn.Bilinear(3, 5, 2)(Tensor.ones(4, 3), Tensor.ones(3, 5))


# ---------------------------------------------------------------------------------------------------------------------
# power-average pooling


@pytest.mark.parametrize(
    "dims, args, kwargs",
    [
        (1, (2, 3), {}),
        (1, (1.5, 2), {"stride": 1, "ceil_mode": True}),
        (2, (2, (2, 3)), {"stride": (1, 2)}),
        (2, (3.0, 2), {"ceil_mode": True}),
        (3, (2, 2), {}),
        (3, (1, (1, 2, 2)), {"stride": 1}),
    ],
)
@pytest.mark.parametrize("batched", [True, False])
def test_lppool_matches_torch(dims: int, args: tuple, kwargs: dict[str, Any], batched: bool) -> None:
    ours, theirs = _both(f"LPPool{dims}d", *args, **kwargs)
    shape = (2, 3, *(5,) * dims) if batched else (3, *(5,) * dims)
    # positive inputs: a fractional power of a negative sum is NaN in both
    x = np.abs(_randn(*shape)) + 0.1
    compare(ours, theirs, x, atol=1e-4)


def test_lppool_errors() -> None:
    with pytest.raises(ValueError, match="LPPool2d: norm_type must be a non-zero number"):
        nn.LPPool2d(0, 2)
    with pytest.raises(ValueError, match=r"LPPool2d: kernel_size must be an int or a sequence of 2 ints, got \(2,\)"):
        nn.LPPool2d(2, (2,))
    with pytest.raises(ValueError, match=r"LPPool1d: every stride must be >= 1, got 0"):
        nn.LPPool1d(2, 2, stride=0)
    with pytest.raises(ShapeError, match=r"LPPool3d: expected a 4-D or 5-D input, got shape \(2, 4, 4\)"):
        nn.LPPool3d(2, 2)(Tensor.ones(2, 4, 4))


# ---------------------------------------------------------------------------------------------------------------------
# dropout and normalization


def test_feature_alpha_dropout_follows_the_training_flag() -> None:
    x = _randn(4, 300, 3)
    drop = nn.FeatureAlphaDropout(0.2).eval()
    np.testing.assert_array_equal(drop(Tensor(x)).numpy(), torch.nn.FeatureAlphaDropout(0.2).eval()(torch.tensor(x)))
    # a new layer trains, as torch's
    out = nn.FeatureAlphaDropout(0.2)(Tensor(x)).numpy()
    # each (sample, channel) is either a * x + alpha a p (kept) or alpha a (p - 1) (dropped), torch's a and alpha
    saturation = 1.7580993408473766
    a = 1.0 / np.sqrt((saturation**2 * 0.2 + 1) * 0.8)
    kept = np.isclose(out, a * x + saturation * a * 0.2, atol=1e-5).all(-1)
    dropped = np.isclose(out, saturation * a * (0.2 - 1), atol=1e-5).all(-1)
    assert (kept ^ dropped).all()
    assert 0.7 < kept.mean() < 0.9
    with Tensor.train():
        assert nn.FeatureAlphaDropout(0.0)(Tensor(x)).numpy().tolist() == x.tolist()
        y = Tensor(x).contiguous().realize()
        out = nn.FeatureAlphaDropout(0.5, inplace=True)(y)
        np.testing.assert_array_equal(y.numpy(), out.numpy())
    # the module's own mode, as torch's train() and eval()
    layer = nn.FeatureAlphaDropout(0.5).train()
    assert not (layer(Tensor(x)).numpy() == x).all()
    with Tensor.train():
        assert (layer.eval()(Tensor(x)).numpy() == x).all()
    with pytest.raises(ValueError, match=r"FeatureAlphaDropout: p must be a probability in \[0, 1\], got 1.5"):
        nn.FeatureAlphaDropout(1.5)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_cross_map_lrn2d_matches_torchs_forward(size: int) -> None:
    ours, theirs = _both("CrossMapLRN2d", size, alpha=0.5, beta=0.75, k=1.5)
    x = _randn(2, 7, 3, 3)
    out, ref = ours(Tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5, rtol=1e-4)


def test_cross_map_lrn2d_gradient_is_its_forwards() -> None:
    # torch's hand-written backward is not its forward's gradient (torch.autograd.gradcheck fails on it): ours is the
    # true one, checked against torch's autograd through the same window in float64
    x = RNG.standard_normal((1, 6, 2, 2))
    xo, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    nn.CrossMapLRN2d(3, 0.5, 0.75, 1.5)(xo).square().sum().backward()
    h, c = 1, np.arange(6)
    window = torch.tensor(((np.abs(c[:, None] - c[None, :]) <= h) | (c[None, :] == 0)).astype(np.float64))
    scale = 1.5 + 0.5 / 3 * torch.einsum("cj,njhw->nchw", window, xt * xt)
    (xt * scale.pow(-0.75)).square().sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=1e-6, rtol=1e-5)


def test_cross_map_lrn2d_is_local_response_norm_within_the_first_channels() -> None:
    # an odd size covering every channel's window from channel 0: torch's CrossMapLRN2d and LocalResponseNorm agree
    x = _randn(2, 3, 4, 4)
    ref = torch.nn.LocalResponseNorm(5, 0.5, 0.75, 1.5)(torch.tensor(x))
    np.testing.assert_allclose(nn.CrossMapLRN2d(5, 0.5, 0.75, 1.5)(Tensor(x)).numpy(), ref.numpy(), atol=1e-5)


def test_cross_map_lrn2d_errors() -> None:
    with pytest.raises(ValueError, match="CrossMapLRN2d: size must be a positive int, got 0"):
        nn.CrossMapLRN2d(0)
    with pytest.raises(ShapeError, match=r"CrossMapLRN2d: expected a 4-D input \(N, C, H, W\), got shape \(1, 3, 4\)"):
        nn.CrossMapLRN2d(3)(Tensor.ones(1, 3, 4))
    with pytest.raises(ValueError):
        torch.nn.CrossMapLRN2d(3)(torch.ones(1, 3, 4))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_weight_gradient_with_offsets_matches_torch(mode: str) -> None:
    import torch

    import uopkit.nn.functional as F

    w = RNG.standard_normal((9, 4)).astype(np.float32)
    idx, offsets = np.array([1, 2, 4, 2, 2, 6, 0, 3, 8, 8]), np.array([0, 3, 5, 5, 8])
    ours = Tensor(w, requires_grad=True)
    theirs = torch.tensor(w, requires_grad=True)
    out = F.embedding_bag(Tensor(idx), ours, Tensor(offsets), mode=mode, padding_idx=6)
    tout = torch.nn.functional.embedding_bag(torch.tensor(idx), theirs, torch.tensor(offsets), mode=mode, padding_idx=6)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert ours.grad is not None
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("scattered", [True, False])
def test_embedding_bag_of_an_empty_input_has_a_zero_weight_gradient_as_torch(
    mode: str, scattered: bool, monkeypatch
) -> None:
    # no positions at all: every bag empty, zeros, and backward gives the weight a zero gradient (the max's scatter
    # lost the weight from the graph: backward raised "no tensor with requires_grad=True")
    if not scattered:
        import uopkit.tensor.segments as segments

        monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    ours, theirs = Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    idx, offsets = np.zeros(0, np.int64), np.array([0, 0])
    out = UF.embedding_bag(Tensor(idx), ours, Tensor(offsets), mode=mode)
    tout = torch.nn.functional.embedding_bag(torch.tensor(idx), theirs, torch.tensor(offsets), mode=mode)
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    assert ours.grad is not None
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())

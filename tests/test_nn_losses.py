"""uopkit.nn.losses against torch.nn: the margin, embedding, likelihood, CTC and adaptive softmax losses with torch's
constructor arguments, every reduction (values, the inputs' and the parameters' gradients, state dicts, errors)."""

from __future__ import annotations

import doctest
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.nn import losses, optim
from uopkit.nn.module import Module
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.tensor import ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(28)
REDUCTIONS = ["none", "mean", "sum"]
# (AdaptiveLogSoftmaxWithLoss' second cluster projects 8 // 4^2 = 0 features: torch warns about an empty tensor)
pytestmark = pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _signs(*shape: int) -> np.ndarray:
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


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
    upstream = _randn(*ref.shape)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    for i, (o, t) in enumerate(leaves):
        assert o.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient {i}")
    params = get_state_dict(ours)
    for name, tp in theirs.named_parameters():
        assert params[name].grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(
            params[name].grad.numpy(), tp.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient of {name}"
        )


def _both(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)


def test_every_loss_is_exported_documented_and_a_module() -> None:
    public = {n for n, v in vars(losses).items() if inspect.isclass(v) and v.__module__ == losses.__name__}
    assert {n for n in public if not n.startswith("_")} == set(losses.__all__)
    for name in losses.__all__:
        assert getattr(nn, name) is getattr(losses, name)
        assert name in nn.__all__
        assert hasattr(torch.nn, name), name
        assert issubclass(getattr(losses, name), Module), name
        assert ">>>" in (getattr(losses, name).__doc__ or ""), f"{name} has no example"


def test_docstring_examples_run() -> None:
    result = doctest.testmod(losses, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", losses.__all__)
def test_constructor_signatures_are_torchs(name: str) -> None:
    # (torch's NLLLoss2d is wrapped by its deprecation decorator, which hides NLLLoss' signature)
    theirs = inspect.signature(torch.nn.NLLLoss if name == "NLLLoss2d" else getattr(torch.nn, name))
    ours = inspect.signature(getattr(nn, name))
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]


# ---------------------------------------------------------------------------------------------------------------------
# every loss, every reduction


def _cases() -> list[tuple[str, dict[str, Any], Callable[[], tuple]]]:
    # (the inputs that take a gradient: GRAD_OF's, else the first alone; targets don't)
    n, c = 4, 5
    return [
        ("MarginRankingLoss", {}, lambda: (_randn(n), _randn(n), _signs(n))),
        ("MarginRankingLoss", {"margin": 0.5}, lambda: (_randn(n, 3), _randn(n, 3), _signs(n, 3))),
        ("HingeEmbeddingLoss", {}, lambda: (_randn(n, 3), _signs(n, 3))),
        ("HingeEmbeddingLoss", {"margin": 0.3}, lambda: (_randn(n, 3), _signs(n, 3))),
        ("SoftMarginLoss", {}, lambda: (_randn(n, 3), _signs(n, 3))),
        ("MultiLabelSoftMarginLoss", {}, lambda: (_randn(n, c), (RNG.random((n, c)) < 0.5).astype(np.float32))),
        (
            "MultiLabelSoftMarginLoss",
            {"weight": torch.rand(c) + 0.5},
            lambda: (_randn(n, c), (RNG.random((n, c)) < 0.5).astype(np.float32)),
        ),
        ("MultiLabelMarginLoss", {}, lambda: (_randn(n, c), np.array([[3, 0, -1, 1, 2]] * 2 + [[1, 2, 3, 4, 0]] * 2))),
        ("MultiLabelMarginLoss", {}, lambda: (_randn(c), np.array([4, 2, -1, 0, 0]))),
        ("MultiMarginLoss", {}, lambda: (_randn(n, c), RNG.integers(0, c, n))),
        ("MultiMarginLoss", {"p": 2, "margin": 0.7}, lambda: (_randn(n, c), RNG.integers(0, c, n))),
        ("MultiMarginLoss", {"weight": torch.rand(c) + 0.5}, lambda: (_randn(n, c), RNG.integers(0, c, n))),
        ("CosineEmbeddingLoss", {}, lambda: (_randn(n, c), _randn(n, c), _signs(n))),
        ("CosineEmbeddingLoss", {"margin": 0.2}, lambda: (_randn(n, c), _randn(n, c), _signs(n))),
        ("TripletMarginLoss", {}, lambda: (_randn(n, c), _randn(n, c), _randn(n, c))),
        (
            "TripletMarginLoss",
            {"margin": 2.0, "p": 1.0, "swap": True},
            lambda: (_randn(n, c), _randn(n, c), _randn(n, c)),
        ),
        ("TripletMarginWithDistanceLoss", {}, lambda: (_randn(n, c), _randn(n, c), _randn(n, c))),
        ("PoissonNLLLoss", {}, lambda: (_randn(n, 3), RNG.poisson(2.0, (n, 3)).astype(np.float32))),
        (
            "PoissonNLLLoss",
            {"log_input": False, "full": True},
            lambda: (RNG.random((n, 3)).astype(np.float32) + 0.5, RNG.poisson(2.0, (n, 3)).astype(np.float32)),
        ),
        (
            "GaussianNLLLoss",
            {},
            lambda: (_randn(n, 3), _randn(n, 3), RNG.random((n, 3)).astype(np.float32) + 0.1),
        ),
        (
            "GaussianNLLLoss",
            {"full": True, "eps": 0.2},
            lambda: (_randn(n, 3), _randn(n, 3), RNG.random((n, 1)).astype(np.float32)),
        ),
    ]


CASES = _cases()
GRAD_OF = {
    "MarginRankingLoss": (0, 1),
    "CosineEmbeddingLoss": (0, 1),
    "TripletMarginLoss": (0, 1, 2),
    "TripletMarginWithDistanceLoss": (0, 1, 2),
    "GaussianNLLLoss": (0, 2),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, kwargs, make", CASES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)])
def test_losses_match_torch(name: str, kwargs: dict[str, Any], make: Callable[[], tuple], reduction: str) -> None:
    ours_kwargs = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    ours, theirs = (
        getattr(nn, name)(reduction=reduction, **ours_kwargs),
        getattr(torch.nn, name)(reduction=reduction, **kwargs),
    )
    assert ours.reduction == reduction
    compare(ours, theirs, *make(), grad_of=GRAD_OF.get(name, (0,)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_triplet_margin_with_a_distance_function_and_swap(reduction: str) -> None:
    def cosine_distance(a: Any, b: Any) -> Any:
        return 1 - a.cosine_similarity(b, dim=-1) if isinstance(a, Tensor) else 1 - torch.cosine_similarity(a, b)

    kwargs = {"distance_function": cosine_distance, "margin": 0.5, "swap": True, "reduction": reduction}
    ours, theirs = _both("TripletMarginWithDistanceLoss", **kwargs)
    compare(ours, theirs, _randn(3, 4), _randn(3, 4), _randn(3, 4), grad_of=(0, 1, 2))


def test_loss_weights_are_buffers_in_torchs_state_dict() -> None:
    ours, theirs = _both("MultiMarginLoss", weight=torch.ones(3))
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict()) == ["weight"]
    # torch's weights loaded over ours: the loss follows them
    weight = torch.tensor([0.5, 1.0, 2.0])
    theirs = torch.nn.MultiMarginLoss(weight=weight)
    compare(ours, theirs, _randn(4, 3), np.array([0, 1, 2, 2]))
    ours = nn.MultiLabelSoftMarginLoss(weight=[1.0, 2.0])
    assert get_state_dict(ours)["weight"].tolist() == [1.0, 2.0]
    assert get_state_dict(nn.MultiLabelSoftMarginLoss()) == {}
    # a Tensor weight is a buffer too (torch's register_buffer), not a parameter
    ours = nn.MultiLabelSoftMarginLoss(weight=Tensor([1.0, 2.0]))
    assert [n for n, _ in ours.named_buffers()] == ["weight"] and list(ours.parameters()) == []


def test_deprecated_size_average_and_reduce_as_torch() -> None:
    for size_average, reduce, expected in ((False, None, "sum"), (None, False, "none"), (True, True, "mean")):
        with pytest.warns(UserWarning, match="size_average and reduce are deprecated"):
            ours = nn.HingeEmbeddingLoss(1.0, size_average, reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = torch.nn.HingeEmbeddingLoss(1.0, size_average, reduce)
        assert ours.reduction == theirs.reduction == expected
        with pytest.warns(UserWarning):
            assert nn.PoissonNLLLoss(True, False, size_average, 1e-8, reduce).reduction == expected


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_matches_torch(reduction: str, zero_infinity: bool) -> None:
    T, N, C, S = 6, 3, 4, 3
    logits = _randn(T, N, C)
    targets = np.array([[1, 2, 2], [3, 1, 0], [2, 0, 0]], dtype=np.int64)
    # the third sample's target (2 labels and a repeat-free alignment) can't fit in 1 step: an infinite loss
    input_lengths, target_lengths = [6, 5, 1], [3, 2, 2]
    ours, theirs = _both("CTCLoss", blank=0, reduction=reduction, zero_infinity=zero_infinity)
    xo, xt = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    out = ours(xo.log_softmax(2), Tensor(targets), input_lengths, target_lengths)
    ref = theirs(xt.log_softmax(2), torch.tensor(targets), torch.tensor(input_lengths), torch.tensor(target_lengths))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
    assert (out.shape, S) == (tuple(ref.shape), 3)
    if zero_infinity or reduction == "none":
        upstream = _randn(*ref.shape) if reduction == "none" else np.float32(1.0)
        (out * Tensor(upstream)).sum().backward()
        (ref * torch.tensor(upstream)).sum().backward()
        np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_ctc_loss_blank_and_reduction_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="CTCLoss: blank must be a non-negative class index, got -1"):
        nn.CTCLoss(blank=-1)
    with pytest.raises(ValueError, match="CTCLoss: reduction must be one of 'none', 'mean', 'sum', got 'avg'"):
        nn.CTCLoss(reduction="avg")


def test_nllloss2d_is_a_deprecated_nllloss() -> None:
    with pytest.warns(FutureWarning, match="NLLLoss2d is deprecated"):
        ours = nn.NLLLoss2d(weight=[1.0, 2.0, 0.5], ignore_index=1)
    assert isinstance(ours, nn.NLLLoss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.nn.NLLLoss2d(weight=torch.tensor([1.0, 2.0, 0.5]), ignore_index=1)
    x = _randn(2, 3, 4, 4)
    compare(ours, theirs, x, RNG.integers(0, 3, (2, 4, 4)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["CrossEntropyLoss", "NLLLoss"])
def test_unbatched_input_takes_a_one_element_target_as_torch(name: str, reduction: str) -> None:
    # one sample's scores (C,) with its class as a (1,) target: torch's 0-d loss, as with a 0-d target
    ours, theirs = _both(name, weight=torch.tensor([1.0, 2.0, 0.5, 1.5]), reduction=reduction)
    _load_torch(ours, theirs)
    x = _randn(4)
    out = ours(Tensor(x), Tensor(np.array([2])))
    ref = theirs(torch.tensor(x), torch.tensor([2]))
    assert out.shape == tuple(ref.shape) == ()
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"targets? \(2,\)"):
        ours(Tensor(x), Tensor(np.array([2, 1])))


def test_custom_losses_subclass_torchs_loss_bases() -> None:
    # a focal loss as written for torch: a subclass of nn.modules.loss._WeightedLoss using its weight and reduction
    from uopkit.nn.modules.loss import _Loss, _WeightedLoss

    def focal(loss_base: Any, F: Any) -> Any:
        class FocalLoss(loss_base):
            def __init__(self, weight: Any = None, gamma: float = 2.0, reduction: str = "mean") -> None:
                super().__init__(weight, reduction=reduction)
                self.gamma = gamma

            def forward(self, input: Any, target: Any) -> Any:
                logp = F.log_softmax(input, dim=1)
                ce = F.nll_loss(logp, target, weight=self.weight, reduction="none")
                p = logp.gather(1, target.unsqueeze(1)).squeeze(1).exp()
                loss = (1 - p) ** self.gamma * ce
                return loss.mean() if self.reduction == "mean" else loss.sum()

        return FocalLoss

    ours_cls = focal(nn.modules.loss._WeightedLoss, nn.functional)
    theirs_cls = focal(torch.nn.modules.loss._WeightedLoss, torch.nn.functional)
    weight = np.array([0.5, 1.0, 2.0], dtype=np.float32)
    ours, theirs = ours_cls(Tensor(weight), reduction="sum"), theirs_cls(torch.tensor(weight), reduction="sum")
    assert ours.reduction == "sum" and list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    compare(ours, theirs, _randn(4, 3), np.array([0, 2, 1, 2]))
    assert isinstance(nn.CrossEntropyLoss(), _WeightedLoss) and isinstance(nn.MultiMarginLoss(), _WeightedLoss)
    assert isinstance(nn.L1Loss(), _Loss) and not isinstance(nn.L1Loss(), _WeightedLoss)
    assert nn.modules.loss.TripletMarginLoss is nn.TripletMarginLoss


def test_loss_constructor_errors() -> None:
    with pytest.raises(ValueError, match=r"MultiMarginLoss: p must be 1 or 2, got 3"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match=r"MultiMarginLoss: weight must be None or a 1-D tensor, got shape \(2, 2\)"):
        nn.MultiMarginLoss(weight=np.ones((2, 2)))
    for name in ("TripletMarginLoss", "TripletMarginWithDistanceLoss"):
        with pytest.raises(ValueError, match=f"{name}: margin must be greater than 0, got 0"):
            getattr(nn, name)(margin=0)
        with pytest.raises(ValueError):
            getattr(torch.nn, name)(margin=0)
    with pytest.raises(ValueError, match="TripletMarginWithDistanceLoss: distance_function must be callable"):
        nn.TripletMarginWithDistanceLoss(distance_function=3)
    for name in ("SoftMarginLoss", "MultiLabelMarginLoss", "CosineEmbeddingLoss", "GaussianNLLLoss"):
        with pytest.raises(ValueError, match=f"{name}: reduction must be one of 'none', 'mean', 'sum', got 'avg'"):
            getattr(nn, name)(reduction="avg")
    with pytest.raises(TypeError):
        nn.GaussianNLLLoss(True)  # keyword-only, as torch's


def test_loss_shape_errors_name_the_shapes() -> None:
    with pytest.raises(ShapeError, match="margin_ranking_loss"):
        nn.MarginRankingLoss()(Tensor.ones(3), Tensor.ones(3, 1), Tensor.ones(3))
    with pytest.raises(ShapeError, match=r"multi_margin_loss: the target must be 1-D"):
        nn.MultiMarginLoss()(Tensor.ones(2, 3), Tensor([0, 1, 2]))


@pytest.mark.parametrize(
    "name, kwargs, args, match",
    [
        # (each said "where:", "sub:" or "mul:" before, naming neither the loss nor which inputs)
        ("CosineEmbeddingLoss", {}, ((3, 2), (3, 2), (2,)), r"cosine_embedding_loss \(the inputs' rows and the"),
        ("CosineEmbeddingLoss", {}, ((3, 2), (2, 2), (3,)), r"cosine_embedding_loss \(the inputs' rows\)"),
        ("TripletMarginWithDistanceLoss", {}, ((3, 2), (3, 2), (2, 2)), r"triplet_margin_with_distance_loss \(anchor"),
        ("TripletMarginLoss", {}, ((3, 2), (2, 2), (3, 2)), r"triplet_margin_loss \(anchor and positive\)"),
        ("PoissonNLLLoss", {}, ((3, 2), (2, 3)), r"poisson_nll_loss \(input and target\): shapes \(3, 2\) and"),
        ("BCEWithLogitsLoss", {"pos_weight": (4,)}, ((2, 3), (2, 3)), r"binary_cross_entropy_with_logits \(pos_weight"),
        ("BCEWithLogitsLoss", {"weight": (2, 2, 3)}, ((2, 3), (2, 3)), r"weight \(2, 2, 3\) must broadcast to"),
    ],
)
def test_loss_shape_errors_name_the_loss_and_the_inputs(
    name: str, kwargs: dict[str, Any], args: tuple, match: str
) -> None:
    # torch refuses each of these too
    built = {k: np.ones(v, np.float32) for k, v in kwargs.items()}
    xs = [np.ones(shape, np.float32) for shape in args]
    with pytest.raises(RuntimeError):
        getattr(torch.nn, name)(**{k: torch.tensor(v) for k, v in built.items()})(*map(torch.tensor, xs))
    with pytest.raises(ShapeError, match=match):
        getattr(nn, name)(**{k: Tensor(v) for k, v in built.items()})(*map(Tensor, xs))


# ---------------------------------------------------------------------------------------------------------------------
# adaptive softmax


def _asm_pair(in_features: int = 8, n_classes: int = 10, cutoffs: tuple = (3, 6), **kwargs: Any) -> tuple[Any, Any]:
    ours = nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, list(cutoffs), **kwargs)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, list(cutoffs), **kwargs)
    _load_torch(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("kwargs", [{}, {"div_value": 2.0, "head_bias": True}, {"cutoffs": (5,)}])
def test_adaptive_log_softmax_matches_torch(kwargs: dict[str, Any]) -> None:
    ours, theirs = _asm_pair(**kwargs)
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
    assert (ours.cutoffs, ours.shortlist_size, ours.n_clusters, ours.head_size) == (
        theirs.cutoffs,
        theirs.shortlist_size,
        theirs.n_clusters,
        theirs.head_size,
    )
    x = _randn(6, 8)
    target = np.array([0, 4, 9, 2, 6, 5])
    xo, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xo, Tensor(target)), theirs(xt, torch.tensor(target))
    assert type(out).__name__ == type(ref).__name__ == "_ASMoutput"
    output, loss = out
    np.testing.assert_allclose(output.numpy(), ref.output.detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(out.loss.numpy(), ref.loss.detach().numpy(), atol=1e-5, rtol=1e-4)
    upstream = _randn(6)
    (loss + (output * Tensor(upstream)).sum()).backward()
    (ref.loss + (ref.output * torch.tensor(upstream)).sum()).backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=1e-5, rtol=1e-4)
    params = get_state_dict(ours)
    for name, tp in theirs.named_parameters():
        assert params[name].grad is not None, name
        np.testing.assert_allclose(params[name].grad.numpy(), tp.grad.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)
    # every class' log-probability, and the most likely class
    x2 = _randn(5, 8)
    full = ours.log_prob(Tensor(x2))
    np.testing.assert_allclose(full.numpy(), theirs.log_prob(torch.tensor(x2)).detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(np.exp(full.numpy()).sum(1), 1.0, rtol=1e-5)
    assert ours.predict(Tensor(x2)).tolist() == theirs.predict(torch.tensor(x2)).tolist()


def test_adaptive_log_softmax_parameters_are_torchs() -> None:
    ours, theirs = _asm_pair(head_bias=True)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    assert isinstance(ours.tail, nn.ModuleList) and ours.tail[1][0].weight.shape == (0, 8)


def test_adaptive_log_softmax_unbatched_input() -> None:
    ours, theirs = _asm_pair()
    x = _randn(8)
    for t in (1, 7):
        out, ref = ours(Tensor(x), Tensor(t)), theirs(torch.tensor(x), torch.tensor(t))
        assert out.output.shape == () and out.loss.shape == ()
        np.testing.assert_allclose(out.output.numpy(), ref.output.detach().numpy(), atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(out.loss.numpy(), ref.loss.detach().numpy(), atol=1e-5, rtol=1e-4)


def test_adaptive_log_softmax_errors() -> None:
    for cutoffs in ([5, 3], [0, 3], [3, 10], [3, 3], [2.5], []):
        with pytest.raises(ValueError, match="AdaptiveLogSoftmaxWithLoss: cutoffs must be unique positive ints"):
            nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)
    with pytest.raises(ValueError, match="div_value must be > 0"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3], div_value=0.0)
    asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6])
    with pytest.raises(IndexError, match=r"AdaptiveLogSoftmaxWithLoss\(8, 10\): target 10 is out of range \[0, 9\]"):
        asm(Tensor.ones(2, 8), Tensor([3, 10]))
    with pytest.raises(ShapeError, match=r"takes a target of shape \(3,\), got \(2,\)"):
        asm(Tensor.ones(3, 8), Tensor([3, 1]))
    with pytest.raises(ShapeError, match=r"expected input \(N, 8\) or \(8,\), got shape \(3, 7\)"):
        asm(Tensor.ones(3, 7), Tensor([3, 1, 0]))
    with pytest.raises(ShapeError, match="log_prob: expected a 2-D input"):
        asm.log_prob(Tensor.ones(8))
    with pytest.raises(TypeError, match="integer class indices"):
        asm(Tensor.ones(2, 8), Tensor([1.0, 2.0]))


def test_adaptive_log_softmax_is_trained_by_an_optimizer() -> None:
    Tensor.manual_seed(0)
    asm = nn.AdaptiveLogSoftmaxWithLoss(4, 6, [2, 4], div_value=1.0)
    opt = optim.SGD(nn.state.get_parameters(asm), lr=0.5)
    x, y = Tensor(_randn(8, 4)), Tensor(RNG.integers(0, 6, 8))
    first = None
    with Tensor.train():
        for _ in range(5):
            opt.zero_grad()
            loss = asm(x, y).loss
            loss.backward()
            opt.step()
            first = loss.item() if first is None else first
    assert asm(x, y).loss.item() < first
    assert math.isfinite(first)

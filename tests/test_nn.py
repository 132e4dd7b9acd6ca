"""uopkit.nn layers against torch.nn: the same weights, the same input, the same outputs and gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.nn import (
    BatchNorm,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    Linear,
    RMSNorm,
)
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.tensor import ArgumentError, ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(1)


def _copy_torch_weights(ours: Any, theirs: Any) -> None:
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def compare_layer(ours: Any, theirs: Any, x: np.ndarray, atol: float = 1e-5, input_grad: bool = True) -> None:
    """Same weights in; compare the output, the input gradient and every parameter gradient."""
    _copy_torch_weights(ours, theirs)
    xt = torch.tensor(x, requires_grad=input_grad)
    xo = Tensor(x, requires_grad=input_grad)
    out, ref = ours(xo), theirs(xt)
    upstream = RNG.standard_normal(tuple(ref.shape)).astype(np.float32)
    params = {k: v for k, v in get_state_dict(ours).items() if dtypes.is_float(v.dtype)}
    for p in params.values():
        p.requires_grad = True
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    if input_grad:
        np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), atol=atol, rtol=1e-4)  # type: ignore[union-attr]
    for name, tp in theirs.named_parameters():
        assert params[name].grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(
            params[name].grad.numpy(), tp.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient of {name}"
        )


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------------
# Linear


@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(bias: bool) -> None:
    compare_layer(Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias), _randn(4, 5))


def test_linear_batched_input() -> None:
    compare_layer(Linear(4, 2), torch.nn.Linear(4, 2), _randn(2, 3, 4))


def test_linear_init_bounds_and_seed() -> None:
    Tensor.manual_seed(3)
    a = Linear(16, 8)
    Tensor.manual_seed(3)
    b = Linear(16, 8)
    w = a.weight.numpy()
    assert a.weight.shape == (8, 16) and a.bias is not None and a.bias.shape == (8,)
    assert np.abs(w).max() <= 1 / 4 and w.std() > 0.05
    np.testing.assert_array_equal(w, b.weight.numpy())


def test_linear_parameters_are_independent_buffers() -> None:
    ln = LayerNorm(3)
    other = LayerNorm(3)
    assert ln.weight is not None and other.weight is not None
    ln.weight.assign(Tensor([5.0, 5.0, 5.0])).realize()
    assert other.weight.tolist() == [1.0, 1.0, 1.0]


def test_linear_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"Linear\(5, 3\): input of shape \(4, 4\)"):
        Linear(5, 3)(Tensor.ones(4, 4))


# ---------------------------------------------------------------------------------------------------------------------
# convolutions (need Tensor.conv2d / conv_transpose2d)


def _needs(name: str) -> None:
    if not hasattr(Tensor, name):
        pytest.skip(f"Tensor.{name} doesn't exist yet")


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stride": 2, "padding": 1},
        {"padding": (1, 2), "dilation": 2},
        {"groups": 2, "bias": False},
    ],
)
def test_conv2d_matches_torch(kwargs: dict) -> None:
    _needs("conv2d")
    compare_layer(Conv2d(4, 6, 3, **kwargs), torch.nn.Conv2d(4, 6, 3, **kwargs), _randn(2, 4, 7, 8), atol=1e-4)


def test_conv2d_rectangular_kernel() -> None:
    _needs("conv2d")
    compare_layer(Conv2d(2, 3, (2, 3), stride=(1, 2)), torch.nn.Conv2d(2, 3, (2, 3), stride=(1, 2)), _randn(1, 2, 5, 6))


def test_conv2d_errors() -> None:
    with pytest.raises(ValueError, match="divisible by groups"):
        Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ShapeError, match=r"Conv2d\(3, 4\): expected input \(N, 3, H, W\), got \(1, 2, 5, 5\)"):
        Conv2d(3, 4, 3)(Tensor.ones(1, 2, 5, 5))


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1}, {"groups": 2, "dilation": 2, "bias": False}])
def test_conv1d_matches_torch(kwargs: dict) -> None:
    compare_layer(Conv1d(4, 6, 3, **kwargs), torch.nn.Conv1d(4, 6, 3, **kwargs), _randn(2, 4, 11), atol=1e-4)


def test_conv3d_matches_torch() -> None:
    ours, theirs = Conv3d(2, 3, (2, 3, 3), padding=1), torch.nn.Conv3d(2, 3, (2, 3, 3), padding=1)
    compare_layer(ours, theirs, _randn(1, 2, 4, 5, 6), atol=1e-4)


def test_conv1d_and_conv3d_errors() -> None:
    with pytest.raises(ShapeError, match=r"Conv1d\(3, 4\): expected input \(N, 3, W\), got \(1, 3, 5, 5\)"):
        Conv1d(3, 4, 3)(Tensor.ones(1, 3, 5, 5))
    with pytest.raises(ValueError, match="Conv3d: kernel_size must be an int or a sequence of 3"):
        Conv3d(3, 4, (3, 3))


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1, "output_padding": 1}, {"groups": 2}])
def test_conv_transpose2d_matches_torch(kwargs: dict) -> None:
    _needs("conv_transpose2d")
    compare_layer(
        ConvTranspose2d(4, 6, 3, **kwargs), torch.nn.ConvTranspose2d(4, 6, 3, **kwargs), _randn(2, 4, 5, 5), atol=1e-4
    )


# ---------------------------------------------------------------------------------------------------------------------
# normalization


def test_batchnorm_training_matches_torch_and_updates_running_stats() -> None:
    ours, theirs = BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
        theirs.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    theirs.train()
    with Tensor.train():
        for _ in range(2):
            compare_layer(ours, theirs, _randn(4, 3, 5, 5) * 2 + 1, atol=1e-4)
            # the next step reads the running statistics the last one stored
            sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
            np.testing.assert_allclose(ours.running_mean.numpy(), sd["running_mean"], atol=1e-5)
            np.testing.assert_allclose(ours.running_var.numpy(), sd["running_var"], atol=1e-5)
    assert ours.num_batches_tracked.shape == () and ours.num_batches_tracked.item() == 2


def test_batchnorm_running_stats_accumulate() -> None:
    ours, theirs = BatchNorm(2, momentum=0.3), torch.nn.BatchNorm1d(2, momentum=0.3)
    theirs.train()
    xs = [_randn(8, 2) * 3 + 2 for _ in range(3)]
    with Tensor.train():
        for x in xs:
            ours(Tensor(x)).realize()
            theirs(torch.tensor(x))
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), atol=1e-5)
    assert ours.num_batches_tracked.item() == 3


def test_batchnorm_eval_uses_running_stats() -> None:
    ours, theirs = BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        theirs.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        theirs.running_var.copy_(torch.tensor([1.5, 0.5, 3.0]))
        theirs.weight.copy_(torch.tensor([1.0, 2.0, 3.0]))
    theirs.eval()
    ours.eval()
    assert not Tensor.training
    compare_layer(ours, theirs, _randn(2, 3, 4, 4))


def test_batchnorm_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"BatchNorm\(3\): expected input \(N, 3, ...\), got \(2, 4, 5\)"):
        BatchNorm(3)(Tensor.ones(2, 4, 5))


def test_train_and_test_context_managers() -> None:
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.test():
            assert Tensor.training is False
        assert Tensor.training is True
    assert Tensor.training is False


@pytest.mark.parametrize("shape", [(6,), (3, 6)])
def test_layernorm_matches_torch(shape: tuple) -> None:
    compare_layer(LayerNorm(shape), torch.nn.LayerNorm(shape), _randn(4, *shape) * 2 + 0.5, atol=1e-4)


def test_layernorm_without_affine() -> None:
    compare_layer(LayerNorm(5, elementwise_affine=False), torch.nn.LayerNorm(5, elementwise_affine=False), _randn(3, 5))


def test_layernorm_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"LayerNorm\(\(4,\)\): input of shape \(2, 5\)"):
        LayerNorm(4)(Tensor.ones(2, 5))


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_groupnorm_matches_torch(groups: int) -> None:
    compare_layer(GroupNorm(groups, 4), torch.nn.GroupNorm(groups, 4), _randn(3, 4, 5, 2) + 1, atol=1e-4)


def test_groupnorm_errors() -> None:
    with pytest.raises(ValueError, match="divisible by num_groups"):
        GroupNorm(3, 4)
    with pytest.raises(ShapeError, match=r"GroupNorm\(2, 4\)"):
        GroupNorm(2, 4)(Tensor.ones(2, 3, 5))


@pytest.mark.parametrize("affine", [True, False])
def test_instancenorm_matches_torch(affine: bool) -> None:
    theirs = torch.nn.InstanceNorm2d(3, affine=affine)
    compare_layer(InstanceNorm(3, affine=affine), theirs, _randn(2, 3, 4, 5) * 2 + 1, atol=1e-4)


@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_matches_torch(affine: bool) -> None:
    theirs = torch.nn.RMSNorm(6, eps=1e-6, elementwise_affine=affine)
    compare_layer(RMSNorm(6, elementwise_affine=affine), theirs, _randn(3, 4, 6) * 3, atol=1e-4)


def test_instancenorm_and_rmsnorm_shape_errors() -> None:
    with pytest.raises(ShapeError, match=r"InstanceNorm\(3\): expected input \(N, 3, ...\), got \(2, 4, 5\)"):
        InstanceNorm(3)(Tensor.ones(2, 4, 5))
    with pytest.raises(ShapeError, match=r"RMSNorm\(6\): input of shape \(2, 5\) doesn't end in 6"):
        RMSNorm(6)(Tensor.ones(2, 5))


# ---------------------------------------------------------------------------------------------------------------------
# Embedding


def test_embedding_matches_torch() -> None:
    ours, theirs = Embedding(7, 3), torch.nn.Embedding(7, 3)
    _copy_torch_weights(ours, theirs)
    idx = np.array([[1, 2, 2], [6, 0, 1]], dtype=np.int64)
    ours.weight.requires_grad = True
    out, ref = ours(Tensor(idx)), theirs(torch.tensor(idx))
    upstream = _randn(2, 3, 3)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-6)
    # repeated indices accumulate their gradients into one row
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-5)  # type: ignore


def test_embedding_from_list_and_errors() -> None:
    emb = Embedding(4, 2)
    np.testing.assert_allclose(emb([3, 0]).numpy(), emb.weight.numpy()[[3, 0]])
    with pytest.raises(IndexError, match=r"Embedding\(4, 2\): index 4 is out of range \[0, 4\)"):
        emb([1, 4])
    # a tensor of indices is checked on the device, negative ones included (torch's rule)
    with pytest.raises(IndexError, match=r"Embedding\(4, 2\): index -1 is out of bounds"):
        emb(Tensor([[0, -1]])).numpy()
    with pytest.raises(TypeError, match="indices must be integers"):
        emb(Tensor([1.0, 2.0]))


def test_embedding_gathers_rows_and_keeps_the_padding_row_out_of_the_gradient_as_torch() -> None:
    # the lookup is the table indexed (one load per row, as `weight[idx]`), not a one-hot matrix times the whole
    # table (2048 lookups in 30000 rows: 140 ms, now under 1 ms)
    ours, theirs = Embedding(6, 3, padding_idx=-6), torch.nn.Embedding(6, 3, padding_idx=0)
    assert ours.padding_idx == 0 and not ours.weight.numpy()[0].any()
    theirs.weight.data = torch.tensor(ours.weight.numpy())
    idx = np.array([[0, 2, 0], [3, 0, 5]])
    plain, tidx = Embedding(6, 3), Tensor(idx)
    assert plain(tidx).uop is plain.weight[tidx].uop
    ours.weight.requires_grad = True
    for _ in range(2):
        # (the padding row made nonzero: its value is read, its gradient stays 0)
        ours.weight.grad, theirs.weight.grad = None, None
        out, ref = ours(Tensor(idx)), theirs(torch.tensor(idx))
        (out * out).sum().backward()
        (ref * ref).sum().backward()
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-6)
        np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-5)  # type: ignore
        ours.weight.assign(ours.weight.detach() + 1).realize()
        theirs.weight.data += 1


def test_batchnorm_backward_computes_its_output_gradient_once():
    # BatchNorm's backward reads its output's gradient in three places (sum(g), sum(g * x_hat), dx): a gradient
    # computed from other values (here ReLU's mask over BatchNorm's output) was computed again in each of their kernels
    # (a ResNet step 0.22 s, 0.17 s stored once); the values and gradients stay torch's
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit.uop.ops import Ops

    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xs, a = rng.standard_normal((2, 3, 4, 4)).astype(np.float32), rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    ours, theirs = BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    x = Tensor(xs, requires_grad=True)
    ours.weight.requires_grad = ours.bias.requires_grad = True
    with Tensor.train():
        (ours(x).relu() * Tensor(a)).sum().backward()
    grads = [x.grad, ours.weight.grad, ours.bias.grad]
    items = create_schedule(kernelize_tensors(grads))
    assert sum(any(u.op is Ops.CMPLT for u in it.ast.toposort()) for it in items) == 1
    tx = torch.tensor(xs, requires_grad=True)
    (theirs(tx).relu() * torch.tensor(a)).sum().backward()
    for got, want in zip(grads, [tx.grad, theirs.weight.grad, theirs.bias.grad], strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_layer_parameters_require_gradients_without_an_optimizer() -> None:
    # as torch's Parameters: backward() fills each weight's .grad before any optimizer exists
    lin, conv, norm, emb = Linear(3, 2), Conv2d(1, 2, 3), LayerNorm(4), Embedding(5, 4)
    x = Tensor.ones(2, 3)
    lin(x).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.full((2, 3), 2.0))
    np.testing.assert_allclose(lin.bias.grad.numpy(), [2.0, 2.0])
    conv(Tensor.ones(1, 1, 4, 4)).sum().backward()
    assert conv.weight.grad is not None and conv.bias.grad is not None
    norm(emb(Tensor([[1, 2]]))).square().sum().backward()
    assert norm.weight.grad is not None and emb.weight.grad is not None
    assert all(p.requires_grad for p in (lin.weight, conv.bias, norm.bias, emb.weight))
    bn = BatchNorm2d(3)
    assert bn.weight.requires_grad and not bn.running_mean.requires_grad


@pytest.mark.parametrize("kwargs", [{"stride": 2, "padding": "same"}, {"padding": "full"}])
def test_conv_padding_string_checked_when_built(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="padding"):
        Conv2d(2, 4, 3, **kwargs)
    with pytest.raises(ValueError):
        torch.nn.Conv2d(2, 4, 3, **kwargs)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_recurrent_cells_match_torch(name: str) -> None:
    import uopkit.nn as nn

    ours, theirs = getattr(nn, name)(3, 5), getattr(torch.nn, name)(3, 5)
    with torch.no_grad():
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(theirs, n).copy_(torch.tensor(getattr(ours, n).numpy()))
    x, h, c = (RNG.standard_normal(s).astype(np.float32) for s in ((4, 3), (4, 5), (4, 5)))
    xt = torch.tensor(x, requires_grad=True)
    xu = Tensor(x, requires_grad=True)
    if name == "LSTMCell":
        got, want = ours(xu, (Tensor(h), Tensor(c))), theirs(xt, (torch.tensor(h), torch.tensor(c)))
        got, want = got[0] * 2 + got[1], want[0] * 2 + want[1]
    else:
        got, want = ours(xu, Tensor(h)), theirs(xt, torch.tensor(h))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(xu.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.weight_hh.grad.numpy(), theirs.weight_hh.grad.numpy(), rtol=1e-5, atol=1e-6)
    # no state: zeros, as torch; unbatched input
    np.testing.assert_allclose(
        np.asarray(ours(Tensor(x[0]))[0].numpy()), theirs(torch.tensor(x[0]))[0].detach().numpy(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_recurrent_cell_state_errors_as_torch(name: str) -> None:
    # torch names the state and the sizes; a wrong hidden size was a matmul's "inner dimensions differ"
    import uopkit.nn as nn

    cell = getattr(nn, name)(4, 5)

    def call(h: Tensor, c: Tensor | None = None) -> Any:
        return cell(Tensor.zeros(3, 4), (h, Tensor.zeros(3, 5) if c is None else c) if name == "LSTMCell" else h)

    with pytest.raises(ShapeError, match="hidden0 has inconsistent hidden_size: got 6, expected 5"):
        call(Tensor.zeros(3, 6))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 6, expected 5"):
        torch_cell = getattr(torch.nn, name)(4, 5)
        h_t = torch.zeros(3, 6)
        torch_cell(torch.zeros(3, 4), (h_t, torch.zeros(3, 5)) if name == "LSTMCell" else h_t)
    with pytest.raises(ShapeError, match="input batch size 3 doesn't match hidden0 batch size 2"):
        call(Tensor.zeros(2, 5))
    with pytest.raises(ShapeError, match="unbatched"):
        cell(Tensor.zeros(4), Tensor.zeros(3, 5) if name != "LSTMCell" else (Tensor.zeros(3, 5), Tensor.zeros(3, 5)))
    if name == "LSTMCell":
        with pytest.raises(ShapeError, match="hidden1 has inconsistent hidden_size: got 6, expected 5"):
            call(Tensor.zeros(3, 5), Tensor.zeros(3, 6))
    # other dtypes than the weights': torch's matmul refuses them
    with pytest.raises(ArgumentError, match=r"input dtype \(dtypes.double\) does not match weight dtype"):
        cell(Tensor.zeros(3, 4, dtype=dtypes.float64))
    with pytest.raises(ArgumentError, match="hidden0 dtype"):
        call(Tensor.zeros(3, 5, dtype=dtypes.float64))


@pytest.mark.parametrize("dims", [1, 3])
def test_conv_transpose_1d_and_3d_match_torch(dims: int) -> None:
    import uopkit.nn as nn

    ours = getattr(nn, f"ConvTranspose{dims}d")(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    theirs = getattr(torch.nn, f"ConvTranspose{dims}d")(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
        theirs.bias.copy_(torch.tensor(ours.bias.numpy()))
    x = RNG.standard_normal((2, 4) + (5,) * dims).astype(np.float32)
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match=f"ConvTranspose{dims}d"):
        ours(Tensor.ones(1, 3, *(5,) * dims))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_norm_layers_on_half_floats_compute_in_float32_as_torch(dtype):
    # x * x in float16 overflowed past 256 and a row came out zeros; torch's norms compute in float32, round once
    from uopkit.nn import GroupNorm, InstanceNorm, RMSNorm

    x = np.array([[300.0, -200.0, 100.0, 50.0], [1.0, 2.5, -3.0, 0.5]], np.float32)
    tdt = getattr(torch, dtype)
    tx = torch.tensor(x, dtype=tdt)
    cases = [
        (LayerNorm(4), torch.nn.LayerNorm(4), x, tx),
        (RMSNorm(4), torch.nn.RMSNorm(4), x, tx),
        (GroupNorm(1, 2), torch.nn.GroupNorm(1, 2), x.reshape(1, 2, 4), tx.reshape(1, 2, 4)),
        (InstanceNorm(2), torch.nn.InstanceNorm1d(2, affine=True), x.reshape(1, 2, 4), tx.reshape(1, 2, 4)),
        (BatchNorm(4), torch.nn.BatchNorm1d(4), x, tx),
    ]
    for ours, theirs, xs, txs in cases:
        # the layers' weights in the input's dtype, as after model.half()
        for name in ("weight", "bias"):
            if getattr(ours, name, None) is not None:
                setattr(ours, name, getattr(ours, name).cast(dtype))
        theirs = theirs.to(tdt)
        with Tensor.train():  # (BatchNorm: the batch's statistics, as torch's module in training mode)
            out = ours(Tensor(xs).cast(dtype))
        assert out.dtype == getattr(dtypes, dtype), type(ours).__name__
        want = theirs(txs).detach().float().numpy()
        # (within an ulp: torch's float32 statistics may round differently, Welford's variance for one)
        ulp = torch.finfo(tdt).eps
        np.testing.assert_allclose(out.float().numpy(), want, rtol=ulp, atol=ulp, err_msg=type(ours).__name__)


def test_attention_on_float16_computes_in_float32_as_torch():
    q = np.array([[[300.0, -200.0, 100.0, 50.0], [1, 2, 3, 4]]], np.float16)
    for causal in (False, True):
        out = Tensor(q).scaled_dot_product_attention(Tensor(q), Tensor(q), is_causal=causal)
        want = torch.nn.functional.scaled_dot_product_attention(*[torch.tensor(q)] * 3, is_causal=causal)
        assert out.dtype == dtypes.float16
        np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_attention_dropout_applies_outside_training_as_torchs_functional():
    q = Tensor(np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32))
    assert not Tensor.training
    plain = q.scaled_dot_product_attention(q, q).numpy()
    assert not np.allclose(q.scaled_dot_product_attention(q, q, dropout_p=0.9).numpy(), plain)
    np.testing.assert_array_equal(q.scaled_dot_product_attention(q, q, dropout_p=0.0).numpy(), plain)
    with pytest.raises(ValueError, match="^scaled_dot_product_attention: p must be in"):
        q.scaled_dot_product_attention(q, q, dropout_p=1.5)
    # Tensor.dropout stays a no-op outside training
    assert q.dropout(0.9) is q


def test_nll_loss_with_every_target_ignored_has_a_zero_gradient():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    ux = Tensor(x, requires_grad=True)
    loss = ux.nll_loss(Tensor(np.array([1, 1, 1], np.int32)), ignore_index=1)
    loss.backward()
    assert np.isnan(loss.item())  # (0 / 0, as torch's)
    np.testing.assert_array_equal(np.abs(ux.grad.numpy()), np.zeros((3, 5), np.float32))


def test_interpolate_copies_unchanged_axes_and_picks_nearest_pixels_as_torch():
    f = torch.nn.functional
    # an axis whose size a scale_factor leaves alone is copied, as torch's kernels (linear modes and 2-d nearest;
    # bicubic, nearest-exact and 1-d/3-d nearest resample: 8 wide by 1.1 drops a pixel)
    cases = [(1, "linear"), (2, "bilinear"), (3, "trilinear"), (2, "nearest"), (1, "nearest"), (2, "bicubic")]
    cases += [(1, "nearest-exact"), (2, "nearest-exact"), (3, "nearest-exact"), (3, "nearest")]
    for nsp, mode in cases:
        for sf in (1.1, 0.95):
            x = np.arange(8.0**nsp, dtype=np.float32).reshape((1, 1) + (8,) * nsp)
            kw = {} if mode.startswith("nearest") else {"align_corners": False}
            sfs = (sf,) + (2.0,) * (nsp - 1)
            want = f.interpolate(torch.tensor(x), scale_factor=sfs, mode=mode, **kw).numpy()
            got = Tensor(x).interpolate(scale_factor=sfs, mode=mode, **kw).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=f"{mode} {sf}")
    # the nearest source pixel is found in float32, as torch's (in float64, 6 -> 74 wide took pixel 3 for output 37)
    for length, out in ((6, 74), (14, 46), (7, 23), (9, 61)):
        x = np.arange(length, dtype=np.float32).reshape(1, 1, length)
        want = f.interpolate(torch.tensor(x), size=out, mode="nearest").numpy()
        np.testing.assert_array_equal(Tensor(x).interpolate(size=out).numpy(), want)
    # float64 keeps float64's precision (the weights were float32)
    x = np.random.default_rng(0).standard_normal((1, 1, 7, 6))
    for mode in ("bilinear", "bicubic"):
        want = f.interpolate(torch.tensor(x), size=(11, 9), mode=mode, align_corners=False).numpy()
        got = Tensor(x).interpolate(size=(11, 9), mode=mode, align_corners=False).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_linear_interpolate_of_a_long_signal_finds_source_positions_in_float32_as_torch():
    # resampling audio: torch computes each source position in float32, which near sample 4000 rounds by up to
    # 2.4e-4 of a sample; positions in float64 left values up to 6e-4 from torch's (an ulp now)
    f = torch.nn.functional
    x = np.random.default_rng(0).standard_normal((1, 2, 4000)).astype(np.float32)
    for kw in (
        dict(size=2999, align_corners=True),
        dict(size=2999, align_corners=False),
        dict(scale_factor=1.7, align_corners=False),
    ):
        want = f.interpolate(torch.tensor(x), mode="linear", **kw).numpy()
        got = Tensor(x).interpolate(mode="linear", **kw).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=str(kw))


def test_batchnorm_running_statistics_are_updated_with_the_training_step():
    # the running mean is assigned from the batch mean the step's gradients compute: it runs in the step's schedule
    # (left pending it ran at the next forward, computing the last step's forward again from copies of the weights)
    from uopkit import nn
    from uopkit.engine.realize import stats

    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    make = lambda m: m.Sequential(m.Conv2d(1, 4, 3, padding=1), m.BatchNorm2d(4), m.ReLU(), m.Conv2d(4, 1, 3))  # noqa: E731
    ref, ours = make(torch.nn), make(nn)
    ours.load_state_dict({k: Tensor(v.detach().numpy().copy()) for k, v in ref.state_dict().items()})
    opt_ref, opt = torch.optim.SGD(ref.parameters(), 0.1), nn.optim.SGD(ours.parameters(), 0.1)
    for _ in range(3):
        x = rng.random((4, 1, 8, 8), dtype=np.float32)
        opt_ref.zero_grad()
        ref(torch.from_numpy(x)).square().mean().backward()
        opt_ref.step()
        opt.zero_grad()
        ours(Tensor(x)).square().mean().backward()
        opt.step()
        before = stats["kernels_run"]
        mean = ours[1].running_mean.numpy()
        assert stats["kernels_run"] == before
        np.testing.assert_allclose(mean, ref[1].running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1].running_var.numpy(), ref[1].running_var.numpy(), rtol=1e-5, atol=1e-6)

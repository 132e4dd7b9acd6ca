"""torch.nn.functional's activations, softmaxes and dropouts over Tensor methods (re-exported by
uopkit.nn.functional); inplace=True and the `_` forms write into the input, as torch's."""

from __future__ import annotations

from uopkit.dtype import DType
from uopkit.nn.arguments import _maybe_in_place
from uopkit.nn.functional.arguments import _softmax_dim, _tensor_input
from uopkit.tensor import ArgumentError, Tensor

__all__ = [
    "relu", "relu_", "relu6", "elu", "elu_", "selu", "selu_", "celu", "celu_", "leaky_relu", "leaky_relu_", "hardtanh",
    "hardtanh_", "rrelu", "rrelu_", "threshold", "threshold_", "prelu", "glu", "gelu", "silu", "mish", "hardswish",
    "hardsigmoid", "hardshrink", "softshrink", "tanhshrink", "softsign", "softplus", "logsigmoid", "sigmoid", "tanh",
    "softmax", "softmin", "log_softmax", "gumbel_softmax", "dropout", "dropout1d", "dropout2d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# activations: inplace=True (and the `_` forms) write the result into the input, as torch's


@_tensor_input
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.relu."""
    return input.relu_() if inplace else input.relu()  # type: ignore[attr-defined]


@_tensor_input
def relu_(input: Tensor) -> Tensor:
    """torch.nn.functional.relu_."""
    return input.relu_()  # type: ignore[attr-defined]


@_tensor_input
def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.relu6."""
    return _maybe_in_place(input, inplace, input.relu6, "relu6_")


@_tensor_input
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """torch.nn.functional.elu."""
    return _maybe_in_place(input, inplace, lambda: input.elu(alpha), "elu_")


@_tensor_input
def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """torch.nn.functional.elu_."""
    return elu(input, alpha, inplace=True)


@_tensor_input
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.selu."""
    return _maybe_in_place(input, inplace, input.selu, "selu_")


@_tensor_input
def selu_(input: Tensor) -> Tensor:
    """torch.nn.functional.selu_."""
    return selu(input, inplace=True)


@_tensor_input
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """torch.nn.functional.celu."""
    return _maybe_in_place(input, inplace, lambda: input.celu(alpha), "celu_")


@_tensor_input
def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """torch.nn.functional.celu_."""
    return celu(input, alpha, inplace=True)


@_tensor_input
def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """torch.nn.functional.leaky_relu."""
    return _maybe_in_place(input, inplace, lambda: input.leaky_relu(negative_slope), "leaky_relu_")


@_tensor_input
def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """torch.nn.functional.leaky_relu_."""
    return leaky_relu(input, negative_slope, inplace=True)


@_tensor_input
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """torch.nn.functional.hardtanh."""
    if min_val > max_val:
        raise ArgumentError(f"hardtanh: min_val {min_val} must not be greater than max_val {max_val}")
    return _maybe_in_place(input, inplace, lambda: input.hardtanh(min_val, max_val), "hardtanh_")


@_tensor_input
def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """torch.nn.functional.hardtanh_."""
    return hardtanh(input, min_val, max_val, inplace=True)


@_tensor_input
def rrelu(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False
) -> Tensor:
    """torch.nn.functional.rrelu (the random slopes, when training, come from uopkit's generator, not torch's)."""
    return _maybe_in_place(input, inplace, lambda: input.rrelu(lower, upper, training), "rrelu_")


@_tensor_input
def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False) -> Tensor:
    """torch.nn.functional.rrelu_."""
    return rrelu(input, lower, upper, training, inplace=True)


@_tensor_input
def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """torch.nn.functional.threshold: input where input > threshold, else value."""
    return _maybe_in_place(input, inplace, lambda: input.threshold(threshold, value), "threshold_")


@_tensor_input
def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    """torch.nn.functional.threshold_."""
    return _maybe_in_place(input, True, lambda: input.threshold(threshold, value), "threshold_")


@_tensor_input
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """torch.nn.functional.prelu."""
    return input.prelu(weight)


@_tensor_input
def glu(input: Tensor, dim: int = -1) -> Tensor:
    """torch.nn.functional.glu."""
    return input.glu(dim)


@_tensor_input
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """torch.nn.functional.gelu."""
    return input.gelu(approximate)


@_tensor_input
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.silu."""
    return _maybe_in_place(input, inplace, input.silu, "silu_")


@_tensor_input
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.mish."""
    return _maybe_in_place(input, inplace, input.mish, "mish_")


@_tensor_input
def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.hardswish."""
    return _maybe_in_place(input, inplace, input.hardswish, "hardswish_")


@_tensor_input
def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """torch.nn.functional.hardsigmoid."""
    return _maybe_in_place(input, inplace, input.hardsigmoid, "hardsigmoid_")


@_tensor_input
def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """torch.nn.functional.hardshrink."""
    return input.hardshrink(lambd)


@_tensor_input
def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """torch.nn.functional.softshrink."""
    return input.softshrink(lambd)


@_tensor_input
def tanhshrink(input: Tensor) -> Tensor:
    """torch.nn.functional.tanhshrink."""
    return input.tanhshrink()


@_tensor_input
def softsign(input: Tensor) -> Tensor:
    """torch.nn.functional.softsign."""
    return input.softsign()


@_tensor_input
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """torch.nn.functional.softplus."""
    return input.softplus(beta, threshold)


@_tensor_input
def logsigmoid(input: Tensor) -> Tensor:
    """torch.nn.functional.logsigmoid."""
    return input.logsigmoid()


@_tensor_input
def sigmoid(input: Tensor) -> Tensor:
    """torch.nn.functional.sigmoid."""
    return input.sigmoid()


@_tensor_input
def tanh(input: Tensor) -> Tensor:
    """torch.nn.functional.tanh."""
    return input.tanh()


@_tensor_input
def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """torch.nn.functional.softmax (dtype is a uopkit dtype)."""
    dim = _softmax_dim("softmax", input.ndim, _stacklevel) if dim is None else dim
    return input.softmax(dim, dtype)


@_tensor_input
def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """torch.nn.functional.softmin (dtype is a uopkit dtype)."""
    dim = _softmax_dim("softmin", input.ndim, _stacklevel) if dim is None else dim
    return input.softmin(dim, dtype)


@_tensor_input
def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """torch.nn.functional.log_softmax (dtype is a uopkit dtype)."""
    dim = _softmax_dim("log_softmax", input.ndim, _stacklevel) if dim is None else dim
    return input.log_softmax(dim, dtype)


@_tensor_input
def gumbel_softmax(logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """torch.nn.functional.gumbel_softmax (the Gumbel noise comes from uopkit's generator, not torch's)."""
    return logits.gumbel_softmax(tau, hard, eps, dim)


# ---------------------------------------------------------------------------------------------------------------------
# dropout: `training` is the argument, not Tensor.training; the masks come from uopkit's generator, not torch's


@_tensor_input
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """torch.nn.functional.dropout: training=False returns the input itself."""
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout: p must be a probability in [0, 1], got {p}")
    if not training:
        return input
    with Tensor.train():
        return _maybe_in_place(input, inplace, lambda: input.dropout(p), "dropout_")


@_tensor_input
def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """torch.nn.functional.dropout1d."""
    return input.dropout1d(p, training, inplace)


@_tensor_input
def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """torch.nn.functional.dropout2d."""
    return input.dropout2d(p, training, inplace)


@_tensor_input
def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """torch.nn.functional.dropout3d."""
    return input.dropout3d(p, training, inplace)


@_tensor_input
def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """torch.nn.functional.alpha_dropout (training defaults to False, as torch's)."""
    return input.alpha_dropout(p, training, inplace)


@_tensor_input
def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """torch.nn.functional.feature_alpha_dropout (training defaults to False, as torch's)."""
    return input.feature_alpha_dropout(p, training, inplace)

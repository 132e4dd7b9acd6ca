"""torch.nn's activation layers over the Tensor's activations, with torch's arguments (inplace included); compared
with torch in tests/test_nn_layers.py."""

from __future__ import annotations

import warnings

import numpy as np

from uopkit.nn import modules as _layers
from uopkit.nn.arguments import _maybe_in_place
from uopkit.nn.module import _MODE_FREE_FORWARDS, Module
from uopkit.nn.modules import _host
from uopkit.tensor import ShapeError, Tensor

__all__ = [
    "LeakyReLU",
    "ELU",
    "SELU",
    "CELU",
    "GLU",
    "Hardtanh",
    "ReLU6",
    "Hardswish",
    "Hardsigmoid",
    "Hardshrink",
    "Softshrink",
    "Tanhshrink",
    "Threshold",
    "Mish",
    "Softplus",
    "Softsign",
    "LogSigmoid",
    "Softmax",
    "LogSoftmax",
    "Softmin",
    "Softmax2d",
    "PReLU",
    "RReLU",
]


# ---------------------------------------------------------------------------------------------------------------------
# activations


class LeakyReLU(Module):
    """x for x > 0, negative_slope * x otherwise, as torch.nn.LeakyReLU.

    >>> LeakyReLU(0.5)(Tensor([-2.0, 3.0])).tolist()
    [-1.0, 3.0]
    """

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        self.negative_slope, self.inplace = negative_slope, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: x.leaky_relu(self.negative_slope), "leaky_relu_")


class ELU(Module):
    """x for x > 0, alpha * (exp(x) - 1) otherwise, as torch.nn.ELU.

    >>> ELU()(Tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        self.alpha, self.inplace = alpha, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: x.elu(self.alpha), "elu_")


class SELU(Module):
    """scale * elu(x, alpha) with the self-normalizing constants, as torch.nn.SELU.

    >>> SELU()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, x.selu, "selu_")


class CELU(Module):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), as torch.nn.CELU (alpha 0 is refused).

    >>> CELU(2.0)(Tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        if alpha == 0:
            raise ValueError("CELU: alpha can't be 0 (it divides x)")
        self.alpha, self.inplace = alpha, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: x.celu(self.alpha), "celu_")


class GLU(Module):
    """The first half of axis `dim` times the sigmoid of the second half, as torch.nn.GLU.

    >>> GLU()(Tensor([[3.0, 0.0]])).tolist()
    [[1.5]]
    """

    def __init__(self, dim: int = -1) -> None:
        self.dim = dim

    def __call__(self, x: Tensor) -> Tensor:
        return x.glu(self.dim)


class Hardtanh(Module):
    """clip(x, min_val, max_val), as torch.nn.Hardtanh (min_value and max_value are its deprecated names).

    >>> Hardtanh(-2.0, 2.0)(Tensor([-3.0, 1.0, 5.0])).tolist()
    [-2.0, 1.0, 2.0]
    """

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        for old, new, value in (("min_value", "min_val", min_value), ("max_value", "max_val", max_value)):
            if value is not None:
                warnings.warn(f"Hardtanh: {old} is deprecated, use {new}", FutureWarning, stacklevel=2)
        min_val = min_value if min_value is not None else min_val
        max_val = max_value if max_value is not None else max_val
        if max_val <= min_val:
            raise ValueError(f"{type(self).__name__}: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: x.hardtanh(self.min_val, self.max_val), "hardtanh_")


class ReLU6(Hardtanh):
    """min(max(x, 0), 6), as torch.nn.ReLU6 (a Hardtanh(0, 6)).

    >>> ReLU6()(Tensor([-1.0, 3.0, 7.0])).tolist()
    [0.0, 3.0, 6.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)


class Hardswish(Module):
    """x * relu6(x + 3) / 6, as torch.nn.Hardswish.

    >>> Hardswish()(Tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, x.hardswish, "hardswish_")


class Hardsigmoid(Module):
    """relu6(x + 3) / 6, as torch.nn.Hardsigmoid.

    >>> Hardsigmoid()(Tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, x.hardsigmoid, "hardsigmoid_")


class Hardshrink(Module):
    """x where |x| > lambd, else 0, as torch.nn.Hardshrink.

    >>> Hardshrink()(Tensor([-1.0, 0.25, 2.0])).tolist()
    [-1.0, 0.0, 2.0]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        self.lambd = lambd

    def __call__(self, x: Tensor) -> Tensor:
        return x.hardshrink(self.lambd)


class Softshrink(Module):
    """x - lambd above lambd, x + lambd below -lambd, else 0, as torch.nn.Softshrink (lambd >= 0).

    >>> Softshrink()(Tensor([-1.0, 0.25, 2.0])).tolist()
    [-0.5, 0.0, 1.5]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        if not lambd >= 0:
            raise ValueError(f"Softshrink: lambd must be >= 0, got {lambd}")
        self.lambd = lambd

    def __call__(self, x: Tensor) -> Tensor:
        return x.softshrink(self.lambd)


class Tanhshrink(Module):
    """x - tanh(x), as torch.nn.Tanhshrink.

    >>> Tanhshrink()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.tanhshrink()


class Threshold(Module):
    """x where x > threshold, else `value`, as torch.nn.Threshold (a NaN stays NaN).

    >>> Threshold(1.0, -5.0)(Tensor([0.5, 1.0, 2.0])).tolist()
    [-5.0, -5.0, 2.0]
    """

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: x.threshold(self.threshold, self.value), "threshold_")


class Mish(Module):
    """x * tanh(softplus(x)), as torch.nn.Mish.

    >>> Mish()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, x.mish, "mish_")


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, x itself where beta * x > threshold, as torch.nn.Softplus.

    >>> Softplus(threshold=1.0)(Tensor([2.0])).tolist()
    [2.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        self.beta, self.threshold = beta, threshold

    def __call__(self, x: Tensor) -> Tensor:
        return x.softplus(self.beta, self.threshold)


class Softsign(Module):
    """x / (1 + |x|), as torch.nn.Softsign.

    >>> Softsign()(Tensor([1.0, -3.0])).tolist()
    [0.5, -0.75]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.softsign()


class LogSigmoid(Module):
    """log(sigmoid(x)), as torch.nn.LogSigmoid.

    >>> round(LogSigmoid()(Tensor([0.0])).item(), 5)
    -0.69315
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.logsigmoid()


def _softmax_dim(dim: int | None, x: Tensor, layer: str) -> int:
    if dim is not None:
        return dim
    # torch's old implicit choice: axis 0 of a 0-, 1- or 3-d input, else axis 1 (it warns the same)
    warnings.warn(f"{layer}: the implicit dim is deprecated, pass dim= (as PyTorch warns)", UserWarning, stacklevel=3)
    return 0 if x.ndim in (0, 1, 3) else 1


class Softmax(Module):
    """exp(x) / sum(exp(x)) along `dim`, as torch.nn.Softmax (dim None: torch's old implicit choice, with a warning).

    >>> Softmax(dim=-1)(Tensor([[0.0, 0.0]])).tolist()
    [[0.5, 0.5]]
    """

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def __call__(self, x: Tensor) -> Tensor:
        return x.softmax(_softmax_dim(self.dim, x, type(self).__name__))


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, as torch.nn.LogSoftmax.

    >>> round(LogSoftmax(dim=0)(Tensor([0.0, 0.0])).tolist()[0], 5)
    -0.69315
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.log_softmax(_softmax_dim(self.dim, x, type(self).__name__))


class Softmin(Softmax):
    """softmax(-x) along `dim`, as torch.nn.Softmin.

    >>> [round(v, 4) for v in Softmin(dim=0)(Tensor([0.0, 1.0])).tolist()]
    [0.7311, 0.2689]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.softmin(_softmax_dim(self.dim, x, type(self).__name__))


class Softmax2d(Module):
    """Softmax over the channels (axis -3) of (N, C, H, W) or (C, H, W), as torch.nn.Softmax2d.

    >>> Softmax2d()(Tensor.zeros(2, 1, 1)).tolist()
    [[[0.5]], [[0.5]]]
    """

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise ShapeError(f"Softmax2d: expected input (N, C, H, W) or (C, H, W), got shape {x.shape}")
        return x.softmax(-3)


class PReLU(Module):
    """x for x > 0, weight * x otherwise, with a learned `weight` of num_parameters slopes (1: shared; else one per
    channel, axis 1 of the input), initialized to `init`, as torch.nn.PReLU.

    >>> PReLU()(Tensor([-4.0, 2.0])).tolist()
    [-1.0, 2.0]
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25) -> None:
        if num_parameters < 1:
            raise ValueError(f"PReLU: num_parameters must be >= 1, got {num_parameters}")
        self.num_parameters, self.init = num_parameters, init
        self.weight = _host(np.full(num_parameters, init))

    def __call__(self, x: Tensor) -> Tensor:
        n = self.num_parameters
        channels = x.shape[1] if x.ndim >= 2 else 1
        if n != 1 and channels != n:
            raise ShapeError(
                f"PReLU({n}): {n} slopes for an input with {channels} channels (axis 1 of shape {x.shape})"
            )
        return x.prelu(self.weight)


class RReLU(Module):
    """x for x >= 0, a * x otherwise, as torch.nn.RReLU: in training mode a is drawn from U(lower, upper) for
    each element, in eval mode it is (lower + upper) / 2.

    >>> RReLU(0.1, 0.3).eval()(Tensor([-1.0, 2.0])).tolist()
    [-0.20000000298023224, 2.0]
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False) -> None:
        if lower > upper:
            raise ValueError(f"RReLU: lower ({lower}) must be <= upper ({upper})")
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def __call__(self, x: Tensor) -> Tensor:
        return _maybe_in_place(x, self.inplace, lambda: self._forward(x), "rrelu_")

    def _forward(self, x: Tensor) -> Tensor:
        return x.rrelu(self.lower, self.upper, training=Tensor.training)


# the layers whose forward reads no training mode (nn.module's fast path for a lone layer; a subclass that overrides
# the forward isn't one)
_MODE_FREE_FORWARDS.update(
    cls.forward
    for cls in (
    _layers.Linear, _layers.Conv2d, _layers.Conv1d, _layers.Conv3d, _layers.ConvTranspose2d, _layers.ConvTranspose1d,
    _layers.ConvTranspose3d, _layers.LayerNorm, _layers.GroupNorm, _layers.RMSNorm, _layers.Embedding, _layers.ReLU,
    _layers.GELU, _layers.SiLU, _layers.Tanh, _layers.Sigmoid, _layers.Flatten, _layers.Identity, LeakyReLU, ELU, SELU,
    CELU, GLU, Hardtanh, ReLU6, Hardswish, Hardsigmoid, Mish, Softplus, Softsign, LogSigmoid, Softmax, LogSoftmax,
    Softmin, PReLU,
    )
)  # fmt: skip

"""uopkit.nn.init: torch.nn.init by torch's names, signatures and formulas.

Each function fills the tensor it is given in place (the same Tensor object: a module's parameter, and every view of
it, shows the new values) and returns it; nothing is recorded by autograd (as torch's, which run under no_grad). The
draws come from uopkit's global stream, so `Tensor.manual_seed` makes them reproducible, or from the
`uopkit.Generator` passed as `generator=`; they follow torch's distributions, not its samples.

>>> from uopkit import Tensor
>>> from uopkit.nn import init
>>> w = Tensor.empty(3, 4)
>>> init.constant_(w, 0.5) is w, w.tolist()[0]
(True, [0.5, 0.5, 0.5, 0.5])
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from uopkit.tensor import Generator, Tensor, no_grad

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
]

# the nonlinearities whose gain is 1: the linear layers themselves, and the sigmoid (torch's table)
_UNIT_GAIN = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)


def _check_generator(generator: Any, name: str) -> None:
    # (checked before anything is drawn, so the message names the initializer)
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(
            f"{name}: generator must be a uopkit.Generator or None, got {type(generator).__name__} (a torch.Generator "
            "can't be drawn from here: pass uopkit.Generator().manual_seed(seed))"
        )


def _is_empty(tensor: Tensor) -> bool:
    # torch warns and leaves a zero-element tensor alone in the fan-based initializers
    if 0 in tensor.shape:
        warnings.warn(f"init: the tensor of shape {tensor.shape} has no elements, nothing to initialize", stacklevel=3)
        return True
    return False


def calculate_gain(nonlinearity: str, param: int | float | None = None) -> float:
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain): 1 for the linear layers and sigmoid,
    5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope**2)) for leaky_relu (slope `param`, default 0.01), 3/4 for
    selu.

    >>> round(calculate_gain("leaky_relu", 0.2), 6)
    1.38675
    """
    if nonlinearity in _UNIT_GAIN:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, int | float):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        # torch's choice (from the self-normalizing networks' scaling), not a derived value
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor, name: str = "_calculate_fan_in_and_fan_out") -> tuple[int, int]:
    """(fan_in, fan_out) of a weight laid out as torch's: (out, in, *kernel); a conv weight's fans include its
    receptive field (the product of the kernel dimensions)."""
    if tensor.ndim < 2:
        raise ValueError(
            f"{name}: fan_in/fan_out need a weight of at least 2 dims (out, in, ...), got shape {tensor.shape}"
        )
    receptive_field = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor: Tensor, mode: str, name: str = "_calculate_correct_fan") -> int:
    """The fan `mode` names ("fan_in" keeps the forward pass' variance, "fan_out" the backward pass')."""
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{name}: mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, name)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill `tensor` with draws from U(a, b) (torch.nn.init.uniform_)."""
    _check_generator(generator, "uniform_")
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill `tensor` with draws from N(mean, std**2) (torch.nn.init.normal_)."""
    _check_generator(generator, "normal_")
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: Generator | None = None,
) -> Tensor:
    """Fill `tensor` with draws from N(mean, std**2) truncated to [a, b] (torch.nn.init.trunc_normal_; a and b are
    values, not numbers of standard deviations).

    >>> t = trunc_normal_(Tensor.empty(1000), std=5.0, a=-1.0, b=1.0)
    >>> bool(((t >= -1) & (t <= 1)).all().item())
    True
    """
    _check_generator(generator, "trunc_normal_")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            f"trunc_normal_: mean={mean} lies over 2 std outside [a={a}, b={b}]; the samples may not follow the "
            "truncated normal",
            stacklevel=2,
        )
    # inverse transform sampling: a uniform draw between the normal CDF at a and at b, through the inverse CDF
    # (written with erfinv on [2 cdf(a) - 1, 2 cdf(b) - 1]); the clamp catches rounding at the ends
    low, high = (math.erf((a - mean) / (std * math.sqrt(2.0))), math.erf((b - mean) / (std * math.sqrt(2.0))))
    with no_grad():
        u = Tensor.uniform(*tensor.shape, low=low, high=high, device=tensor.device, generator=generator)
        values = (u.erfinv() * (std * math.sqrt(2.0)) + mean).clamp(a, b)
        return tensor.copy_(values)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill `tensor` with `val` (torch.nn.init.constant_)."""
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    """Fill `tensor` with ones (torch.nn.init.ones_)."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill `tensor` with zeros (torch.nn.init.zeros_)."""
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D `tensor` with the identity matrix (ones on the main diagonal) (torch.nn.init.eye_).

    >>> eye_(Tensor.empty(2, 3)).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    if tensor.ndim != 2:
        raise ValueError(f"eye_: takes a 2-D tensor, got shape {tensor.shape}")
    with no_grad():
        return tensor.copy_(Tensor.eye(*tensor.shape, device=tensor.device, dtype=tensor.dtype))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D conv weight with the Dirac delta, so the convolution passes its input channels through:
    in each of `groups` blocks of output channels, output channel d has a one at input channel d, kernel centre
    (torch.nn.init.dirac_).

    >>> dirac_(Tensor.empty(2, 2, 3)).tolist()[1]
    [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    if tensor.ndim not in (3, 4, 5):
        raise ValueError(f"dirac_: takes a 3-D, 4-D or 5-D conv weight, got shape {tensor.shape}")
    out_channels, in_channels, *kernel = tensor.shape
    if groups < 1 or out_channels % groups != 0:
        raise ValueError(f"dirac_: dim 0 ({out_channels}) must be divisible by groups ({groups})")
    per_group = out_channels // groups
    centre = tuple(k // 2 for k in kernel)
    delta = np.zeros(tensor.shape, dtype=np.float32)
    for g in range(groups):
        for d in range(min(per_group, in_channels)):
            delta[(g * per_group + d, d, *centre)] = 1
    with no_grad():
        return tensor.copy_(Tensor(delta, device=tensor.device))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill `tensor` from U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010;
    torch.nn.init.xavier_uniform_)."""
    _check_generator(generator, "xavier_uniform_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_uniform_")
    # a uniform on [-bound, bound] has standard deviation bound / sqrt(3)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))
    with no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill `tensor` from N(0, std**2), std = gain * sqrt(2 / (fan_in + fan_out)) (torch.nn.init.xavier_normal_)."""
    _check_generator(generator, "xavier_normal_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_normal_")
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    with no_grad():
        return tensor.normal_(0.0, std, generator=generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str, name: str) -> float:
    fan = _calculate_correct_fan(tensor, mode, name)
    try:
        gain = calculate_gain(nonlinearity, a)
    except ValueError as error:
        raise ValueError(f"{name}: {str(error).removeprefix('calculate_gain: ')}") from None
    return gain / math.sqrt(fan)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """Fill `tensor` from U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al., 2015;
    torch.nn.init.kaiming_uniform_): `a` is leaky_relu's negative slope, `mode` picks fan_in or fan_out.

    >>> w = kaiming_uniform_(Tensor.empty(64, 16), nonlinearity="relu")
    >>> bool((w.abs() <= math.sqrt(6 / 16)).all().item())
    True
    """
    _check_generator(generator, "kaiming_uniform_")
    if _is_empty(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    with no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """Fill `tensor` from N(0, std**2), std = gain / sqrt(fan) (torch.nn.init.kaiming_normal_)."""
    _check_generator(generator, "kaiming_normal_")
    if _is_empty(tensor):
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_")
    with no_grad():
        return tensor.normal_(0.0, std, generator=generator)


def orthogonal_(tensor: Tensor, gain: float = 1, generator: Generator | None = None) -> Tensor:
    """Fill `tensor` (2 or more dimensions, read as rows = dim 0 by columns = the rest) with a random (semi-)orthogonal
    matrix times `gain` (Saxe et al., 2013; torch.nn.init.orthogonal_): the rows are orthonormal when there are
    fewer rows than columns, else the columns are.

    >>> q = orthogonal_(Tensor.empty(4, 4)).numpy()
    >>> bool(np.allclose(q.T @ q, np.eye(4), atol=1e-5))
    True
    """
    _check_generator(generator, "orthogonal_")
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: takes a tensor of at least 2 dims, got shape {tensor.shape}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    # a Gaussian matrix from uopkit's generator, factorized on the host: Q of its QR, with each column's sign made
    # that of R's diagonal so Q is uniformly (Haar) distributed
    gaussian = Tensor.randn(rows, cols, generator=generator).numpy().astype(np.float64)
    if rows < cols:
        gaussian = gaussian.T
    q, r = np.linalg.qr(gaussian)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with no_grad():
        return tensor.copy_(Tensor(q * gain, device=tensor.device, dtype=tensor.dtype).reshape(tensor.shape))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Generator | None = None) -> Tensor:
    """Fill a 2-D `tensor` from N(0, std**2), then zero ceil(sparsity * rows) randomly chosen rows of each column
    (Martens, 2010; torch.nn.init.sparse_).

    >>> w = sparse_(Tensor.empty(10, 3), sparsity=0.3)
    >>> (w == 0).sum(0).tolist()
    [3, 3, 3]
    """
    _check_generator(generator, "sparse_")
    if tensor.ndim != 2:
        raise ValueError(f"sparse_: takes a 2-D tensor, got shape {tensor.shape}")
    rows, cols = tensor.shape
    zeros_per_column = int(math.ceil(sparsity * rows))
    # each column's rows in a random order (the rank of a uniform draw within its column): the first ones are zeroed
    draws = Tensor.rand(rows, cols, generator=generator).numpy()
    ranks = np.argsort(np.argsort(draws, axis=0, kind="stable"), axis=0, kind="stable")
    keep = Tensor(ranks >= zeros_per_column, device=tensor.device)
    with no_grad():
        values = Tensor.normal(
            rows, cols, mean=0.0, std=std, device=tensor.device, dtype=tensor.dtype, generator=generator
        )
        return tensor.copy_(keep.where(values, 0.0))

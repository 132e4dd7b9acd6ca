"""torch.nn.utils.parametrizations: `weight_norm`, `spectral_norm` and `orthogonal` (nn/utils/orthogonal.py), as
parametrizations (nn/utils/parametrize.py).

>>> from uopkit.nn import Linear
>>> layer = weight_norm(Linear(3, 4))
>>> [name for name, _ in layer.named_parameters()]
['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
>>> layer.parametrizations.weight.original0.shape
(4, 1)
>>> list(spectral_norm(Linear(3, 4)).state_dict())
['bias', 'parametrizations.weight.original', 'parametrizations.weight.0._u', 'parametrizations.weight.0._v']
"""

from __future__ import annotations

from uopkit.nn.module import Module
from uopkit.nn.modules import ConvTranspose2d
from uopkit.nn.utils.orthogonal import orthogonal
from uopkit.nn.utils.parametrize import register_parametrization
from uopkit.tensor import Tensor, no_grad

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


def _norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """torch's norm_except_dim(v, 2, dim): the Euclidean norm over every dimension but `dim`, keeping them as 1s; dim -1
    is the whole tensor's norm (a 0-d tensor), as torch's (not the last dimension)."""
    if dim == -1:
        return v.norm()
    keep = dim % v.ndim
    return v.norm(dim=tuple(i for i in range(v.ndim) if i != keep), keepdim=True)


def _weight_norm(v: Tensor, g: Tensor, dim: int) -> Tensor:
    # torch's _weight_norm: v scaled so that its norm over every dimension but `dim` is g
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    """The weight-norm parametrization, as torch's: forward(g, v) = v * g / ||v|| (the norm over every dimension but
    `dim`), right_inverse(weight) = (||weight||, weight)."""

    def extra_repr(self) -> str:
        # (torch's prints no settings)
        return ""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization (Salimans & Kingma), torch.nn.utils.parametrizations.weight_norm: `module.<name>` becomes
    g * v / ||v||, computed at each access from the parameters `parametrizations.<name>.original0` (g, the magnitude:
    the norm over every dimension but `dim`, kept as size-1 dimensions) and `original1` (v, the direction), torch's
    names, so the state dicts load both ways. `dim=None` (or -1, as torch's) takes the norm of the whole tensor (g is
    0-d). Undo it with `parametrize.remove_parametrizations(module, name)`. Returns `module`.

    Departure: a state dict with the older `weight_norm`'s keys (`weight_g`, `weight_v`) isn't renamed on loading
    (torch's load hook does that); rename them to `parametrizations.weight.original0` / `original1` first.
    """
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


# ---------------------------------------------------------------------------------------------------------------------
# spectral normalization


def _weight_matrix(weight: Tensor, dim: int) -> Tensor:
    """The weight as a matrix whose rows run along `dim` (torch's reshape_weight_to_matrix): the largest singular value
    of this matrix is the one spectral normalization divides by."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def _power_iteration(
    mat: Tensor, u: Tensor, v: Tensor, steps: int, eps: float, v_first: bool = False
) -> tuple[Tensor, Tensor]:
    """`steps` steps of the power iteration on `mat` from the buffers `u` and `v` (u = normalize(mat v), then
    v = normalize(mat^T u); v first with `v_first`, the older form's order), written into the buffers in place.
    Returns the new vectors in storage of their own: the forward reads those, so the next step's write into the
    buffers leaves the gradient of this forward intact (what torch's clones of u and v are for)."""
    with no_grad():
        mat = mat.detach()
        new_u, new_v = u, v
        for _ in range(steps):
            if v_first:
                new_v = mat.T.mv(new_u).normalize(2, 0, eps)
            new_u = mat.mv(new_v).normalize(2, 0, eps)
            if not v_first:
                new_v = mat.T.mv(new_u).normalize(2, 0, eps)
        new_u, new_v = new_u.contiguous(), new_v.contiguous()
        u.assign(new_u)
        v.assign(new_v)
        # (one realize for the new vectors and the writes)
        new_u.realize(new_v, u, v)
    return new_u, new_v


def _unit_vector(n: int, like: Tensor, eps: float) -> Tensor:
    # a random start for the power iteration, N(0, 1) normalized, in storage of its own (torch's normal_ then normalize)
    return Tensor.randn(n, dtype=like.dtype, device=like.device).normalize(2, 0, eps).contiguous().realize()


def _default_dim(module: Module) -> int:
    # a transposed convolution's weight is (in, out, ...): its output channels are dimension 1, as torch's default
    # (ConvTranspose1d and 3d are subclasses of 2d)
    return 1 if isinstance(module, ConvTranspose2d) else 0


def _check_power_iterations(n_power_iterations: int) -> None:
    if not isinstance(n_power_iterations, int) or n_power_iterations <= 0:
        raise ValueError(f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}")


class _SpectralNorm(Module):
    """The spectral-norm parametrization, as torch's: forward(weight) = weight / sigma, sigma the largest singular value
    of the weight as a matrix (rows along `dim`), estimated by power iteration with the buffers `_u` and `_v`; in
    training mode each call first runs `n_power_iterations` steps (u, then v) and updates the buffers in place. A 1-d
    weight is just normalized. right_inverse is the identity."""

    def extra_repr(self) -> str:
        # (torch's prints no settings)
        return ""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if not -ndim <= dim < ndim:
            raise IndexError(
                f"spectral_norm: dim={dim} is not a dim of the {ndim}-D weight (valid: {-ndim} to {ndim - 1})"
            )
        _check_power_iterations(n_power_iterations)
        self.dim = dim % ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                mat = _weight_matrix(weight.detach(), self.dim)
                self.register_buffer("_u", _unit_vector(mat.shape[0], weight, eps))
                self.register_buffer("_v", _unit_vector(mat.shape[1], weight, eps))
                # a good start: 15 steps now, as torch's
                _power_iteration(mat, self._u, self._v, 15, eps)

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return weight.normalize(2, 0, self.eps)
        mat = _weight_matrix(weight, self.dim)
        u, v = self._u, self._v
        if Tensor.training:
            u, v = _power_iteration(mat, u, v, self.n_power_iterations, self.eps)
        # u and v are constants to the gradient
        sigma = u.detach().dot(mat.mv(v.detach()))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """Spectral normalization (Miyato et al.; SN-GAN critics), torch.nn.utils.parametrizations.spectral_norm:
    `module.<name>` becomes weight / sigma at each access, sigma its largest singular value estimated by power iteration
    (the weight as a matrix with rows along `dim`; None: 1 for a transposed convolution, else 0). The weight stays in
    `parametrizations.<name>.original`, the iteration's vectors are the buffers `parametrizations.<name>.0._u` and
    `_v` (torch's keys: state dicts load both ways). In training mode each access runs `n_power_iterations` steps and
    updates them; in eval mode they are used as they are. Undo it with `parametrize.remove_parametrizations`. Returns
    `module`. The parametrization's mode is the module's at registration (training, for a new layer), as torch's; then
    its own `train()`/`eval()` (or a parent's) decide."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{type(module).__name__}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = _default_dim(module)
    return register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))

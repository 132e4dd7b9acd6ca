"""torch's top-level functions that a port calls as `Tensor.X(...)` and that no other module holds: the default float
dtype (`get_default_dtype`/`set_default_dtype`), `asarray`, `row_stack`, `chain_matmul`, the Poisson and binomial
draws and `scalar_tensor`, compared with torch in tests/test_torch_functions.py. And how `Tensor.X` reaches torch's
top-level functional names whose arguments differ from any method's (`TOP_LEVEL_FUNCTIONAL`,
uopkit/nn/torch_top_level.py, compared with torch in tests/test_torch_top_level.py)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.engine.realize import capturing
from uopkit.tensor import lobpcg as _lobpcg
from uopkit.tensor.generator import Generator
from uopkit.tensor.support import ArgumentError, DTypeError, ShapeError, UnsupportedDTypeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# the dtypes torch.set_default_dtype takes
_DEFAULT_FLOATS = (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16)

# torch's top-level functional names (`torch.layer_norm`, `torch.batch_norm`, `torch.kl_div`, ...) whose arguments no
# Tensor method of the name takes: `Tensor.X` read from the class is uopkit.nn.torch_top_level's X (which forwards to
# uopkit.nn.functional: imported when first read, the tensor layer being below nn), through `_TensorType.__getattr__`
# where Tensor has no X, through `TopLevelOrMethod` where a method X reads other arguments (`x.kl_div(target)` is F's)
TOP_LEVEL_FUNCTIONAL = frozenset(
    {
        "layer_norm",
        "batch_norm",
        "instance_norm",
        "conv_transpose1d",
        "conv_transpose3d",
        "max_pool1d",
        "max_pool3d",
        "avg_pool1d",
        "adaptive_avg_pool1d",
        "adaptive_max_pool1d",
        "embedding",
        "kl_div",
        "hinge_embedding_loss",
        "margin_ranking_loss",
        "cosine_embedding_loss",
        "triplet_margin_loss",
        "poisson_nll_loss",
        "binary_cross_entropy_with_logits",
        "ctc_loss",
    }
)


def top_level_function(name: str) -> Callable[..., Any]:
    """torch's top-level function `name` (one of `TOP_LEVEL_FUNCTIONAL`) with torch's arguments."""
    return getattr(importlib.import_module("uopkit.nn.torch_top_level"), name)


class TopLevelOrMethod:
    """A Tensor attribute that is torch's top-level function of its name read from the class (`Tensor.kl_div(input,
    target, 2)`, a port of `torch.kl_div`) and the method read from a tensor (`x.kl_div(target, "sum")`), where the two
    take different arguments."""

    __slots__ = ("method", "name")

    def __init__(self, method: Callable[..., Any], name: str) -> None:
        self.method, self.name = method, name

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return top_level_function(self.name)
        return self.method.__get__(obj, cls)


def install_top_level(cls: type) -> None:
    """Make each method of `cls` named in `TOP_LEVEL_FUNCTIONAL` a `TopLevelOrMethod`."""
    for name in sorted(TOP_LEVEL_FUNCTIONAL):
        method = inspect.getattr_static(cls, name, None)
        if method is not None:
            setattr(cls, name, TopLevelOrMethod(method, name))


def _host_draw(op: str, draw: Any, like: Tensor) -> Tensor:
    # values drawn on the host (numpy's samplers), in `like`'s dtype and on its device, with no gradient (as bernoulli)
    if capturing:
        raise RuntimeError(
            f"{op}: draws on the host from values read back, which a TinyJit replay can't repeat (it would return the "
            "captured sample every time); call it outside the jitted function"
        )
    return Tensor(np.asarray(draw, dtype=np.float64), device=like.device).cast(like.dtype)


class TorchFunctionsMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # the default float dtype

    @staticmethod
    def get_default_dtype() -> DType:
        """The dtype of float tensors made without one (torch.get_default_dtype): `dtypes.default_float`.

        >>> Tensor.get_default_dtype()
        dtypes.float
        """
        return dtypes.default_float

    @staticmethod
    def set_default_dtype(d: Any) -> None:
        """Make `d` (float32, float64, float16 or bfloat16: a DType, its name or a torch dtype) the dtype of float
        tensors made without one, as torch.set_default_dtype: `Tensor([1.5])`, `zeros`/`rand`/`randn`/`arange` of
        floats/`linspace`/..., an int tensor's `sqrt` or true division, and every nn layer's parameters and float
        buffers made from then on. It sets `dtypes.default_float`; any other dtype raises torch's TypeError.

        >>> Tensor.set_default_dtype("float64"); d = Tensor([1.5]).dtype; Tensor.set_default_dtype("float32"); d
        dtypes.double
        """
        try:
            dtype = to_dtype(d)
        except (TypeError, ValueError, KeyError, AttributeError):
            dtype = None
        if dtype not in _DEFAULT_FLOATS:
            raise TypeError(
                f"set_default_dtype: the default dtype must be a float one (float32, float64, "
                f"float16 or bfloat16), got {d!r}"
            )
        dtypes.default_float = dtype

    # ------------------------------------------------------------------------------------------------------------
    # making tensors

    @staticmethod
    def asarray(
        obj: Any, *, dtype: Any = None, device: Any = None, copy: bool | None = None, requires_grad: bool | None = None
    ) -> Tensor:
        """torch.asarray: a tensor is returned as it is (the same object) when no `dtype`/`device` change and no copy
        is asked for, else converted or copied (`copy=True`), its graph kept, as torch's; `copy=False` with a
        conversion raises torch's ValueError. Anything else (a list, a number, a numpy array, a list of 0-d tensors)
        is taken as `Tensor(data)` takes it, its values copied (torch shares a numpy array's memory).
        `requires_grad`, where given, is set on the result with `requires_grad_` (on the tensor itself where it is
        returned, as torch's).

        >>> t = Tensor([1.0, 2.0])
        >>> Tensor.asarray(t) is t, Tensor.asarray([1, 2]).dtype, Tensor.asarray(t, dtype="float64").dtype
        (True, dtypes.int, dtypes.double)
        """
        if isinstance(obj, Tensor):
            target = obj.dtype if dtype is None else to_dtype(dtype)
            moves = device is not None and obj.to(device=device).device != obj.device
            if copy is False and (target != obj.dtype or moves):
                raise ValueError(
                    f"asarray: copy=False can't alias a {obj.dtype.name} tensor on {obj.device} as {target.name}"
                    f"{'' if device is None else f' on {device}'} (leave copy unset to convert)"
                )
            out = obj.to(device=device, dtype=target)
            if copy is True and out is obj:
                out = obj.clone()
        else:
            if isinstance(obj, (list, tuple)) and any(isinstance(v, Tensor) for v in obj):
                obj = [v.item() if isinstance(v, Tensor) else v for v in obj]
            out = Tensor(obj, dtype=dtype, device=device)
        return out if requires_grad is None else out.requires_grad_(requires_grad)

    @staticmethod
    def scalar_tensor(s: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
        """A 0-d tensor holding the number `s`, of the default float dtype unless `dtype` is given (also for an int
        or a bool), as torch.scalar_tensor.

        >>> Tensor.scalar_tensor(3).dtype, Tensor.scalar_tensor(3).item()
        (dtypes.float, 3.0)
        """
        if isinstance(s, Tensor):
            s = s.item()
        out = Tensor(s, dtype=dtypes.default_float if dtype is None else dtype, device=device)
        return out.requires_grad_(requires_grad) if requires_grad else out

    # ------------------------------------------------------------------------------------------------------------
    # other names for compositions

    @staticmethod
    def row_stack(tensors: Sequence[Tensor]) -> Tensor:
        """torch.row_stack: another name for `vstack` (1-D tensors become rows, then they are concatenated).

        >>> Tensor.row_stack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[1, 2], [3, 4]]
        """
        return Tensor.vstack(tensors)

    @staticmethod
    def chain_matmul(*matrices: Tensor) -> Tensor:
        """The product of two or more matrices in the cheapest order, as torch.chain_matmul (deprecated there for
        `linalg.multi_dot`); one matrix is returned as a copy. Every argument must be 2-D.

        >>> Tensor.chain_matmul(Tensor.ones(2, 3), Tensor.ones(3, 4), Tensor.ones(4, 1)).tolist()
        [[12.0], [12.0]]
        """
        if not matrices:
            raise ArgumentError("chain_matmul: expected one or more tensors, got none")
        for i, m in enumerate(matrices):
            if not isinstance(m, Tensor) or m.ndim != 2:
                got = f"shape {m.shape}" if isinstance(m, Tensor) else type(m).__name__
                raise ShapeError(f"chain_matmul: every argument must be a matrix (2-D), argument {i} has {got}")
        if len(matrices) == 1:
            return matrices[0].clone()
        return Tensor.multi_dot(list(matrices))

    # ------------------------------------------------------------------------------------------------------------
    # draws

    def poisson(self: Tensor, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """A Poisson draw with each element as its rate (torch.poisson), in this tensor's float dtype, drawn from
        `generator` or the global stream (on the host: the rates are read back); no gradient. A negative or NaN
        rate raises torch's RuntimeError.

        >>> Tensor([0.0, 0.0]).poisson().tolist()
        [0.0, 0.0]
        """
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"poisson: the rates must be a float tensor, got {self.dtype}")
        rates = self.detach().float().numpy().astype(np.float64)
        if np.isnan(rates).any() or (rates < 0).any():
            raise ArgumentError("poisson: invalid Poisson rate, expected rate to be non-negative (and not NaN)")
        return _host_draw("poisson", Tensor._rng(generator).poisson(rates), self)

    @staticmethod
    def lobpcg(
        A: Tensor,  # noqa: N803
        k: int | None = None,
        B: Tensor | None = None,  # noqa: N803
        X: Tensor | None = None,  # noqa: N803
        n: int | None = None,
        iK: Tensor | None = None,  # noqa: N803
        niter: int | None = None,
        tol: float | None = None,
        largest: bool | None = None,
        method: str | None = None,
        tracker: Any = None,
        ortho_iparams: Any = None,
        ortho_fparams: Any = None,
        ortho_bparams: Any = None,
    ) -> tuple[Tensor, Tensor]:
        """The k largest (largest=False: smallest) eigenpairs of symmetric A (..., m, m), or of A x = e B x with B
        symmetric positive definite, by LOBPCG, as torch.lobpcg: returns (E (..., k), X (..., m, k)), E sorted from
        the most extreme. X (..., m, n) is the starting block (default: n = k random columns from the global
        stream), iK a preconditioner, niter the most iterations (default 1000, negative: until converged), tol the
        relative residual to reach (default: the square root of the dtype's epsilon); m must be at least 3 n.
        method and the ortho_* settings are accepted and the orthogonalization is always the robust one; tracker is
        not supported. Runs on the host (tensor/lobpcg.py). E carries a gradient to A and B; X is a constant, and
        its signs are arbitrary (torch's too).

        >>> e, x = Tensor.lobpcg(Tensor.diag(Tensor([1.0, 2.0, 3.0, 4.0])), k=1)
        >>> round(e.item(), 4)
        4.0
        """
        return _lobpcg.lobpcg(
            A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams, ortho_fparams, ortho_bparams
        )

    @staticmethod
    def binomial(count: Tensor, prob: Tensor, generator: Generator | None = None) -> Tensor:
        """The number of successes in `count` trials of probability `prob` each (elementwise, broadcast), as
        torch.binomial: both float tensors of one dtype, the result in it; drawn from `generator` or the global
        stream (on the host); no gradient.

        >>> Tensor.binomial(Tensor([4.0, 4.0]), Tensor([0.0, 1.0])).tolist()
        [0.0, 4.0]
        """
        for what, t in (("count", count), ("prob", prob)):
            if not isinstance(t, Tensor):
                raise TypeError(f"binomial: {what} must be a Tensor, got {type(t).__name__}")
            if not dtypes.is_float(t.dtype):
                raise ValueError(f"binomial only supports floating-point dtypes for {what}, got: {t.dtype}")
        if count.dtype != prob.dtype:
            raise DTypeError(f"binomial: count is {count.dtype} and prob is {prob.dtype}; they must be one dtype")
        n, p = np.broadcast_arrays(
            count.detach().float().numpy().astype(np.float64), prob.detach().float().numpy().astype(np.float64)
        )
        if np.isnan(n).any() or (n < 0).any() or np.isnan(p).any() or (p < 0).any() or (p > 1).any():
            raise ArgumentError("binomial: count must be >= 0 and prob in [0, 1] (and neither NaN)")
        draw = Tensor._rng(generator).binomial(np.floor(n).astype(np.int64), p)
        return _host_draw("binomial", draw, count)

"""torch.autograd.gradcheck and gradgradcheck for uopkit Tensors: the analytical Jacobian (one backward pass per
output element) against central finite differences, as torch's slow mode.

Each perturbed input is a new leaf with the original's `requires_grad` (torch perturbs the input in place), and the
differences are taken in float64 from the outputs read back; the perturbation itself is in the input's dtype, so
float32 inputs fail the default tolerances as torch warns they will.

>>> from uopkit import Tensor, dtypes
>>> gradcheck(lambda x: x.sin(), Tensor([0.5, 1.0], dtype=dtypes.float64, requires_grad=True))
True
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.tensor.autograd import grad
from uopkit.tensor.grad_mode import enable_grad, no_grad
from uopkit.tensor.tensor import Tensor

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """What gradcheck and gradgradcheck raise when a check fails, as torch.autograd.gradcheck.GradcheckError."""


def _as_tuple(x: Any) -> tuple[Any, ...]:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _check_inputs(inputs: tuple[Any, ...]) -> None:
    any_requires_grad = False
    for i, t in enumerate(inputs):
        if isinstance(t, Tensor) and t.requires_grad:
            if t.dtype != dtypes.float64:
                warnings.warn(
                    f"gradcheck: input {i} requires grad but is {t.dtype}; finite differences in less than float64 are "
                    "usually too coarse for the check to pass",
                    stacklevel=3,
                )
            any_requires_grad = True
    if not any_requires_grad:
        raise ValueError(
            "gradcheck: no input has requires_grad=True, so there is no gradient to check; set it on the inputs to "
            "differentiate"
        )


def _differentiable(outputs: tuple[Any, ...]) -> tuple[Tensor, ...]:
    return tuple(o for o in outputs if isinstance(o, Tensor) and o.requires_grad)


def _read(t: Tensor) -> np.ndarray:
    return t.detach().cast(dtypes.float64).numpy().reshape(-1) if dtypes.is_float(t.dtype) else np.zeros(t.numel())


def _numerical(
    func: Callable[..., Any], inputs: tuple[Any, ...], positions: list[int], n_outputs: int, eps: float
) -> list[list[np.ndarray]]:
    """[input][output] -> (input numel, output numel) central differences (f(x + eps) - f(x - eps)) / 2 eps, each
    input element moved in turn (in the input's dtype, as torch's in-place step), the others as given."""
    out: list[list[np.ndarray]] = []
    for p in positions:
        x = inputs[p]
        base = x.detach().cast(dtypes.float64).numpy().reshape(-1)
        per_output = [np.zeros((x.numel(), 0))] * n_outputs
        rows: list[list[np.ndarray]] = [[] for _ in range(n_outputs)]
        for k in range(x.numel()):
            sides = []
            for sign in (1, -1):
                moved = base.copy()
                moved[k] += sign * eps
                leaf = Tensor(moved.reshape(x.shape), dtype=x.dtype, device=x.device).requires_grad_(x.requires_grad)
                args = inputs[:p] + (leaf,) + inputs[p + 1 :]
                sides.append([_read(o) for o in _as_tuple(func(*args))])
            for j in range(n_outputs):
                rows[j].append((sides[0][j] - sides[1][j]) / (2 * eps))
        for j in range(n_outputs):
            if rows[j]:
                per_output[j] = np.stack(rows[j])
        out.append(per_output)
    return out


def _analytical(outputs: tuple[Tensor, ...], diff_inputs: tuple[Tensor, ...]) -> list[list[np.ndarray]]:
    """[input][output] -> (input numel, output numel): one backward pass per output element (zeros where an input is
    not reached)."""
    out = [[np.zeros((x.numel(), o.numel())) for o in outputs] for x in diff_inputs]
    for j, o in enumerate(outputs):
        flat = o.reshape(-1)
        n = o.numel()
        for k in range(n):
            one_hot = Tensor(np.eye(1, n, k).reshape(n), dtype=o.dtype, device=o.device)
            grads = grad([flat], list(diff_inputs), [one_hot], allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    out[i][j][:, k] = g.cast(dtypes.float64).numpy().reshape(-1)
    return out


def _slow_gradcheck(
    func: Callable[..., Any], inputs: tuple[Any, ...], func_out: Any, eps: float, atol: float, rtol: float
) -> None:
    outs = _as_tuple(func_out)
    outputs = _differentiable(outs)
    positions = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not outputs:
        # no output requires grad: its numerical gradient must be zero
        for per_output in _numerical(func, inputs, positions, len(outs), eps):
            for n in per_output:
                if not np.allclose(n, 0, rtol=rtol, atol=atol):
                    raise GradcheckError(
                        "gradcheck: no output requires grad, yet the finite differences are not all zero (the "
                        "function depends on its "
                        "inputs outside the graph)"
                    )
        return
    # (the numerical Jacobian is taken over the differentiable outputs only, as torch's)
    diff_positions = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]

    def differentiable_func(*args: Any) -> tuple[Any, ...]:
        got = _as_tuple(func(*args))
        return tuple(got[i] for i in diff_positions)

    numerical = _numerical(differentiable_func, inputs, positions, len(outputs), eps)
    with enable_grad():
        analytical = _analytical(outputs, tuple(inputs[p] for p in positions))
    for i, (ns, as_) in enumerate(zip(numerical, analytical, strict=True)):
        for j, (n, a) in enumerate(zip(ns, as_, strict=True)):
            if not np.allclose(a, n, rtol=rtol, atol=atol, equal_nan=True):
                raise GradcheckError(
                    f"gradcheck: d(output {j:d})/d(input {i:d}) differs: finite differences give\n{n}\nbackward "
                    f"gives\n{a}\n"
                )


def _unsupported(**flags: bool) -> None:
    for name, on in flags.items():
        if on:
            raise NotImplementedError(
                f"gradcheck: {name}=True is not supported (uopkit has no forward-mode or batched gradients); leave it "
                "False"
            )


def gradcheck(
    func: Callable[..., Any],
    inputs: Any,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Check the gradients of `func` at `inputs` (a Tensor, or a tuple or list of arguments) with respect to the
    float inputs that require grad against central finite differences of step `eps`, as torch.autograd.gradcheck:
    each Jacobian within `atol + rtol * |numerical|` (numpy's allclose, torch's too). True when they match; otherwise
    a GradcheckError (a RuntimeError) naming the output and the input with both Jacobians, or False with
    `raise_exception=False`. Inputs should be float64 (others warn, as torch).

    `fast_mode` computes the slow (full) check; `nondet_tol`, `check_undefined_grad`, `check_grad_dtypes` and
    `masked` are accepted (backward passes here are deterministic and return the input's dtype). Forward-mode and
    batched checks raise NotImplementedError.

    >>> from uopkit import Tensor, dtypes
    >>> x = Tensor([1.0, 2.0], dtype=dtypes.float64, requires_grad=True)
    >>> gradcheck(lambda x: (x * x).sum(), (x,))
    True
    """
    _unsupported(
        check_batched_grad=check_batched_grad,
        check_batched_forward_grad=check_batched_forward_grad,
        check_forward_ad=check_forward_ad,
    )
    try:
        tupled = _as_tuple(inputs)
        _check_inputs(tupled)
        if check_backward_ad:
            _slow_gradcheck(func, tupled, func(*tupled), eps, atol, rtol)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(
    func: Callable[..., Any],
    inputs: Any,
    grad_outputs: Any = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """Check the second derivatives of `func`, as torch.autograd.gradgradcheck: gradcheck of the function that maps
    (inputs, grad_outputs) to the gradients of func's outputs along grad_outputs, with respect to both. Without
    `grad_outputs`, random ones in [-1, 1) are drawn (uopkit's generator), requiring grad.

    >>> from uopkit import Tensor, dtypes
    >>> x = Tensor([1.0, 2.0], dtype=dtypes.float64, requires_grad=True)
    >>> gradgradcheck(lambda x: x**3, (x,))
    True
    """
    _unsupported(check_batched_grad=check_batched_grad, check_fwd_over_rev=check_fwd_over_rev)
    tupled = _as_tuple(inputs)
    if grad_outputs is None:
        # (one per output that requires grad: the call is recorded to know which do)
        outs = _differentiable(_as_tuple(func(*tupled)))
        with no_grad():
            drawn = [(Tensor.rand(*o.shape, dtype=o.dtype, device=o.device) * 2 - 1).realize() for o in outs]
        tupled_grad_outputs = tuple(g.requires_grad_(True) for g in drawn)
    else:
        tupled_grad_outputs = _as_tuple(grad_outputs)
    n_outputs = len(tupled_grad_outputs)
    diff_inputs = {i for i, t in enumerate(tupled) if isinstance(t, Tensor) and t.requires_grad}

    def gradients(*args: Any) -> tuple[Tensor, ...]:
        input_args = args[: len(args) - n_outputs]
        outputs = _differentiable(_as_tuple(func(*input_args)))
        given = args[len(args) - n_outputs :]
        wrt = [t for i, t in enumerate(input_args) if i in diff_inputs]
        grads = grad(outputs, wrt, list(given), create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        gradients,
        tupled + tupled_grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_backward_ad=check_rev_over_rev,
        fast_mode=fast_mode,
    )

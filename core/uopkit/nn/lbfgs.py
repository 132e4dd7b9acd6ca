"""L-BFGS, as torch.optim.LBFGS: a quasi-Newton method that re-evaluates the loss through a closure, with an optional
strong-Wolfe line search.

The direction is computed on the host: the parameters' gradients are read into one flat numpy vector per evaluation
(one realize), and the two-loop recursion over the history runs in numpy in the parameters' dtype, as torch runs it
in theirs. Keeping it as a lazy graph would build a graph of another shape for every history length (and compile
it); the method reads the loss and gradient norms back at every iteration anyway (its stopping tests).

>>> from uopkit import Tensor
>>> x = Tensor([1.5, -0.5], requires_grad=True)
>>> opt = LBFGS([x], line_search_fn="strong_wolfe")
>>> def closure():
...     opt.zero_grad()
...     loss = ((x - Tensor([3.0, 2.0])) ** 2).sum()
...     loss.backward()
...     return loss
>>> _ = opt.step(closure); [round(v, 4) for v in x.tolist()]
[3.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from uopkit.dtype import to_numpy_dtype
from uopkit.nn.optimizer import Optimizer
from uopkit.tensor import Tensor, enable_grad, no_grad

# strong-Wolfe conditions: sufficient decrease (c1) and curvature (c2), as torch's (Nocedal & Wright's defaults)
WOLFE_C1, WOLFE_C2 = 1e-4, 0.9
# function evaluations one line search may take
MAX_LINE_SEARCH = 25
# the line search ends once its bracket (times the direction's largest entry) is below this: torch's fixed value, which
# the optimizer's tolerance_change doesn't change (that one is the iterations' stopping test)
LINE_SEARCH_TOLERANCE = 1e-9
# a pair (s, y) joins the history only when its curvature y.s is above this (else the update isn't positive definite)
MIN_CURVATURE = 1e-10
_STATE_NAMES = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss")


class LBFGS(Optimizer):
    """torch.optim.LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
    history_size=100, line_search_fn=None): `step(closure)` runs up to `max_iter` iterations, each evaluating the
    closure (which must zero the gradients, compute the loss, call backward and return it) once, or as often as the
    "strong_wolfe" line search needs. One parameter group only, as torch's. Returns the closure's first loss."""

    def __init__(
        self,
        params: Tensor | Iterable[Any],
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
        defaults = {
            "lr": lr,
            "max_iter": max_iter,
            "max_eval": max_eval,
            "tolerance_grad": tolerance_grad,
            "tolerance_change": tolerance_change,
            "history_size": history_size,
            "line_search_fn": line_search_fn,
        }
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(
                f"LBFGS takes a single parameter group, got {len(self.param_groups)}: pass one list of tensors"
            )
        self._lbfgs: dict[str, Any] = {"func_evals": 0, "n_iter": 0}

    def _update(self, group: Any, params: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError("LBFGS steps through step(closure) only")

    # ---- the flat view of the parameters

    @property
    def _params(self) -> list[Tensor]:
        # torch's attribute: the one group's parameter list (PINN loops read `opt.state[opt._params[0]]["n_iter"]`)
        return self.param_groups[0]["params"]

    @property
    def _trained(self) -> list[Tensor]:
        return [p for p in self.param_groups[0]["params"] if p._requires_grad]

    def _np_dtype(self) -> Any:
        return to_numpy_dtype(self._trained[0].dtype)

    def _flat_grad(self) -> np.ndarray:
        params = self._trained
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            Tensor.realize(*grads)
        parts = [
            np.zeros(p.numel(), self._np_dtype())
            if p.grad is None
            else p.grad.numpy().reshape(-1).astype(self._np_dtype())
            for p in params
        ]
        return np.concatenate(parts) if parts else np.zeros(0, self._np_dtype())

    def _move(self, t: float, d: np.ndarray) -> None:
        # every parameter += t * its piece of d, in place (as torch's add_)
        offset = 0
        params = self._trained
        with no_grad():
            for p in params:
                n = p.numel()
                step = (np.asarray(t, d.dtype) * d[offset : offset + n]).reshape(p.shape)
                p.assign(p + Tensor(step, device=p.device, dtype=p.dtype))
                offset += n
            Tensor.realize(*params)

    def _saved(self) -> list[Tensor]:
        with no_grad():
            return [p.clone().realize() for p in self._trained]

    def _restore(self, saved: list[Tensor]) -> None:
        with no_grad():
            for p, v in zip(self._trained, saved, strict=True):
                p.assign(v)
            Tensor.realize(*self._trained)

    def _evaluate(self, closure: Callable[[], Any]) -> float:
        return float(enable_grad()(closure)())

    # ---- the step

    def step(self, closure: Any = None) -> Any:
        """Up to max_iter L-BFGS iterations on the closure's loss; returns its first value."""
        if closure is None:
            raise TypeError(
                "LBFGS.step needs a closure: a function that zeroes the gradients, computes the loss, calls "
                "backward() and returns the loss (it is evaluated several times per step)"
            )
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        history = group["history_size"]
        st = self._lbfgs

        first = enable_grad()(closure)()
        loss = float(first)
        evals = 1
        st["func_evals"] += 1
        g = self._flat_grad()
        if np.abs(g).max(initial=0.0) <= tol_grad:
            return first

        d, t = st.get("d"), st.get("t")
        old_dirs, old_stps, ro = st.get("old_dirs", []), st.get("old_stps", []), st.get("ro", [])
        h_diag, prev_g, prev_loss = st.get("H_diag", 1.0), st.get("prev_flat_grad"), st.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            st["n_iter"] += 1
            if st["n_iter"] == 1:
                d = -g
                old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
            else:
                d, h_diag = self._direction(g, g - prev_g, d * t, old_dirs, old_stps, ro, h_diag, history)
            prev_g, prev_loss = g.copy(), loss
            # the first step is scaled to at most a unit move (the gradient's 1-norm), later ones take the lr
            t = min(1.0, 1.0 / float(np.abs(g).sum())) * lr if st["n_iter"] == 1 else lr
            gtd = float(g.dot(d))
            if gtd > -tol_change:
                # not a descent direction (or a flat one): nothing more to gain
                break
            if group["line_search_fn"] == "strong_wolfe":
                start = self._saved()

                def at(step: float, start: list[Tensor] = start, d: np.ndarray = d) -> tuple[float, np.ndarray]:
                    self._move(step, d)
                    value = self._evaluate(closure)
                    grad = self._flat_grad()
                    self._restore(start)
                    return value, grad

                # (the line search may take what is left of max_eval, as torch's since 2.5)
                loss, g, t, ls_evals = _strong_wolfe(at, t, d, loss, g, gtd, LINE_SEARCH_TOLERANCE, max_eval - evals)
                self._move(t, d)
                converged = np.abs(g).max(initial=0.0) <= tol_grad
            else:
                self._move(t, d)
                ls_evals = 0
                converged = False
                if n_iter != max_iter:
                    # (the last iteration's loss isn't needed: the next step evaluates the closure first)
                    loss = self._evaluate(closure)
                    g = self._flat_grad()
                    converged = np.abs(g).max(initial=0.0) <= tol_grad
                    ls_evals = 1
            evals += ls_evals
            st["func_evals"] += ls_evals
            if n_iter == max_iter or evals >= max_eval or converged:
                break
            if np.abs(d * t).max(initial=0.0) <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        st.update(
            d=d,
            t=t,
            old_dirs=old_dirs,
            old_stps=old_stps,
            ro=ro,
            H_diag=h_diag,
            prev_flat_grad=prev_g,
            prev_loss=prev_loss,
        )
        return first

    @staticmethod
    def _direction(
        g: np.ndarray,
        y: np.ndarray,
        s: np.ndarray,
        old_dirs: list[np.ndarray],
        old_stps: list[np.ndarray],
        ro: list[Any],
        h_diag: Any,
        history: int,
    ) -> tuple[np.ndarray, Any]:
        """The L-BFGS direction -H g from the history (updated in place with the newest pair when its curvature is
        positive), by the two-loop recursion; and the initial Hessian scale y.s / y.y."""
        ys = y.dot(s)
        if ys > MIN_CURVATURE:
            if len(old_dirs) == history:
                del old_dirs[0], old_stps[0], ro[0]
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(1.0 / ys)
            h_diag = ys / y.dot(y)
        q = -g
        alphas = []
        for i in reversed(range(len(old_dirs))):
            a = old_stps[i].dot(q) * ro[i]
            alphas.append(a)
            q = q - a * old_dirs[i]
        r = q * h_diag
        for i, a in zip(range(len(old_dirs)), reversed(alphas), strict=True):
            b = old_dirs[i].dot(r) * ro[i]
            r = r + (a - b) * old_stps[i]
        return r, h_diag

    # ---- state

    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        """torch's layout: the first parameter holds the method's state (the history, the last direction and step)."""
        st = self._lbfgs
        if st["n_iter"] == 0 and st["func_evals"] == 0:
            return {}
        return {self.param_groups[0]["params"][0]: _as_tensors(st)}

    def state_dict(self) -> dict[str, Any]:
        group = self.param_groups[0]
        st = self._lbfgs
        saved = {} if st["n_iter"] == 0 and st["func_evals"] == 0 else {0: _as_tensors(st)}
        params = {k: v for k, v in group.items() if k != "params"} | {"params": list(range(len(group["params"])))}
        return {"state": saved, "param_groups": [params]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.param_groups[0]["params"]):
            raise ValueError("LBFGS.load_state_dict: the saved state is for another parameter list")
        for k, v in groups[0].items():
            if k not in ("params", "param_names"):
                self.param_groups[0][k] = v
        saved = {int(k): v for k, v in state_dict["state"].items()}.get(0, {})
        dtype = self._np_dtype()
        st: dict[str, Any] = {
            "func_evals": int(_host(saved.get("func_evals", 0))),
            "n_iter": int(_host(saved.get("n_iter", 0))),
        }
        for k in ("d", "prev_flat_grad"):
            if saved.get(k) is not None:
                st[k] = np.asarray(_host(saved[k]), dtype).reshape(-1)
        for k in ("old_dirs", "old_stps"):
            if k in saved:
                st[k] = [np.asarray(_host(v), dtype).reshape(-1) for v in saved[k]]
        if "ro" in saved:
            st["ro"] = [dtype.type(_host(v)) for v in saved["ro"]]
        for k in ("t", "prev_loss"):
            if saved.get(k) is not None:
                st[k] = float(_host(saved[k]))
        if saved.get("H_diag") is not None:
            st["H_diag"] = dtype.type(_host(saved["H_diag"]))
        self._lbfgs = st


def _host(v: Any) -> Any:
    # a saved value as numpy: our Tensors, torch's tensors, numpy arrays and numbers
    if isinstance(v, Tensor):
        return v.numpy()
    if hasattr(v, "detach"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def _as_tensors(st: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in _STATE_NAMES:
        if k not in st or st[k] is None:
            continue
        v = st[k]
        if isinstance(v, list):
            out[k] = [Tensor(np.asarray(x)) for x in v]
        elif isinstance(v, np.ndarray) or isinstance(v, np.generic):
            out[k] = Tensor(np.asarray(v))
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------------------------------
# the strong-Wolfe line search (Nocedal & Wright, algorithms 3.5 and 3.6), as torch's


def _cubic_minimum(
    x1: float, f1: float, g1: float, x2: float, f2: float, g2: float, bounds: tuple[float, float] | None = None
) -> float:
    """The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to `bounds` (default: the
    interval between the points); the interval's middle where the cubic has no minimum."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2
    d2 = math.sqrt(disc)
    if x1 <= x2:
        x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, lo), hi)


def _strong_wolfe(
    at: Callable[[float], tuple[float, np.ndarray]],
    t: float,
    d: np.ndarray,
    f: float,
    g: np.ndarray,
    gtd: float,
    tol_change: float,
    max_tries: int = MAX_LINE_SEARCH,
) -> tuple[float, np.ndarray, float, int]:
    """A step t along d meeting the strong Wolfe conditions from (f, g) at t = 0 (`at(t)` evaluates the loss and
    gradient there), in at most `max_tries` evaluations after the first: (loss, gradient, t, evaluations)."""
    d_norm = float(np.abs(d).max())
    f_new, g_new = at(t)
    evals = 1
    gtd_new = float(g_new.dot(d))
    # bracketing: grow t until an interval holds a point meeting the conditions (or t meets them)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    bracket: list[float] = []
    b_f: list[float] = []
    b_g: list[np.ndarray] = []
    b_gtd: list[float] = []
    tries = 0
    while tries < max_tries:
        if f_new > f + WOLFE_C1 * t * gtd or (tries > 1 and f_new >= f_prev):
            bracket, b_f, b_g, b_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -WOLFE_C2 * gtd:
            bracket, b_f, b_g, done = [t], [f_new], [g_new], True
            break
        if gtd_new >= 0:
            bracket, b_f, b_g, b_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # extrapolate: the cubic's minimum between 1.01 t and 10 t
        step = _cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = t, f_new, g_new.copy(), gtd_new
        t = step
        f_new, g_new = at(t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        tries += 1
    if tries == max_tries:
        bracket, b_f, b_g = [0.0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket around a point meeting the conditions
    stalled = False
    low, high = (0, 1) if b_f[0] <= b_f[-1] else (1, 0)
    while not done and tries < max_tries:
        if abs(bracket[1] - bracket[0]) * d_norm < tol_change:
            break
        t = _cubic_minimum(bracket[0], b_f[0], b_gtd[0], bracket[1], b_f[1], b_gtd[1])
        # a trial too close to an end makes little progress: after one such, move it a tenth of the bracket inside
        lo_b, hi_b = min(bracket), max(bracket)
        margin = 0.1 * (hi_b - lo_b)
        if min(hi_b - t, t - lo_b) < margin:
            if stalled or t >= hi_b or t <= lo_b:
                t = hi_b - margin if abs(t - hi_b) < abs(t - lo_b) else lo_b + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        f_new, g_new = at(t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        tries += 1
        if f_new > f + WOLFE_C1 * t * gtd or f_new >= b_f[low]:
            # not lower than the low end: the new high end
            bracket[high], b_f[high], b_g[high], b_gtd[high] = t, f_new, g_new.copy(), gtd_new
            low, high = (0, 1) if b_f[0] <= b_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -WOLFE_C2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                # the minimum lies between the old low end and t: the old low end is the new high end
                bracket[high], b_f[high], b_g[high], b_gtd[high] = bracket[low], b_f[low], b_g[low], b_gtd[low]
            bracket[low], b_f[low], b_g[low], b_gtd[low] = t, f_new, g_new.copy(), gtd_new
    t = bracket[low]
    return b_f[low], b_g[low], t, evals

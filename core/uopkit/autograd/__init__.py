"""torch.autograd's names (`from uopkit.autograd import Function, grad, gradcheck`): uopkit.tensor.autograd's, with
gradcheck/gradgradcheck, `function` (torch.autograd.function's names: `once_differentiable`, ...), the `functional`
module (jacobian, hessian, vjp, jvp, vhp, hvp), `graph` (its saved-tensor context managers, autograd/graph.py),
the legacy `Variable` (autograd/variable.py), `profiler` (torch.autograd.profiler's `record_function`),
`forward_ad` (dual tensors, computed by reverse mode: autograd/forward_ad.py) and the anomaly-mode switches
`detect_anomaly` and `set_detect_anomaly` (autograd/anomaly_mode.py)."""

from uopkit.autograd import anomaly_mode, forward_ad, function, functional, graph, profiler
from uopkit.autograd.anomaly_mode import detect_anomaly, set_detect_anomaly
from uopkit.autograd.variable import Variable
from uopkit.tensor.autograd import *  # noqa: F403
from uopkit.tensor.autograd import __all__ as _names
from uopkit.tensor.gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = [
    *_names,
    "anomaly_mode",
    "detect_anomaly",
    "set_detect_anomaly",
    "forward_ad",
    "function",
    "functional",
    "graph",
    "profiler",
    "Variable",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
]

"""uopkit: a small tensor compiler whose device backends are pip-installable plugins."""

from uopkit.device import Device
from uopkit.dtype import dtypes

__all__ = ["Device", "dtypes"]

# Tensor is re-exported once uopkit.tensor exists; any other import error inside it must still surface
try:
    from uopkit.tensor import Tensor  # noqa: F401

    __all__ += ["Tensor"]
except ModuleNotFoundError as e:
    if e.name != "uopkit.tensor":
        raise

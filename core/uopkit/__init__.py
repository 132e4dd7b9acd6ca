"""uopkit: a small tensor compiler whose device backends are pip-installable plugins."""

import importlib.metadata

from uopkit.device import Device
from uopkit.dtype import dtypes, finfo, iinfo
from uopkit.helpers import Context, GlobalCounters, getenv

# one source for the version: pyproject.toml, read back from the installed distribution's metadata
try:
    __version__ = importlib.metadata.version("uopkit")
except importlib.metadata.PackageNotFoundError:
    # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Device", "dtypes", "finfo", "iinfo", "Context", "GlobalCounters", "getenv", "__version__"]

# Tensor is re-exported once uopkit.tensor exists; any other import error inside it must still surface
try:
    # torch.amp's, torch.autograd's, torch.linalg's and torch.special's names
    from uopkit import amp, autograd, linalg, random, special  # noqa: F401
    from uopkit.amp import autocast, get_autocast_dtype, is_autocast_available, is_autocast_enabled  # noqa: F401
    from uopkit.jit import TinyJit  # noqa: F401
    from uopkit.tensor import (  # noqa: F401
        Generator,
        Tensor,
        enable_grad,
        inference_mode,
        is_grad_enabled,
        is_inference_mode_enabled,
        no_grad,
        set_grad_enabled,
    )
    from uopkit.tensor import foreach as _foreach
    from uopkit.tensor.foreach import *  # noqa: F403  (torch's _foreach_* functions)
    from uopkit.tensor.memory_format import (  # noqa: F401
        channels_last,
        channels_last_3d,
        contiguous_format,
        memory_format,
        preserve_format,
    )
    from uopkit.tensor.printing import get_printoptions, set_printoptions  # noqa: F401

    # torch's module-level names for Tensor's constructors from other libraries' arrays (copies: see tensor/interop.py)
    # and for is_tensor
    from_dlpack = Tensor.from_dlpack
    from_numpy = Tensor.from_numpy
    frombuffer = Tensor.frombuffer
    as_tensor = Tensor.as_tensor
    is_tensor = Tensor.is_tensor
    # torch's dtype questions
    result_type = Tensor.result_type
    promote_types = Tensor.promote_types
    can_cast = Tensor.can_cast
    # torch's default float dtype (dtypes.default_float)
    get_default_dtype = Tensor.get_default_dtype
    set_default_dtype = Tensor.set_default_dtype
    # torch's module constants
    pi, e, inf, nan, newaxis = Tensor.pi, Tensor.e, Tensor.inf, Tensor.nan, Tensor.newaxis
    # torch's process settings (threads, flags, the default device), `Size` and the legacy typed constructors
    # (`uopkit.FloatTensor`): Tensor's, tensor/torch_copies_settings.py
    from uopkit.tensor.torch_copies_settings import SETTINGS_NAMES as _settings_names

    globals().update({_name: getattr(Tensor, _name) for _name in _settings_names})

    __all__ += [
        "Tensor",
        "TinyJit",
        "Generator",
        "autograd",
        "amp",
        "linalg",
        "special",
        "random",
        "autocast",
        "is_autocast_enabled",
        "is_autocast_available",
        "get_autocast_dtype",
        "memory_format",
        "contiguous_format",
        "channels_last",
        "channels_last_3d",
        "preserve_format",
        "no_grad",
        "enable_grad",
        "set_grad_enabled",
        "inference_mode",
        "is_grad_enabled",
        "is_inference_mode_enabled",
        "set_printoptions",
        "get_printoptions",
        "from_dlpack",
        "from_numpy",
        "frombuffer",
        "as_tensor",
        "is_tensor",
        "result_type",
        "promote_types",
        "can_cast",
        "get_default_dtype",
        "set_default_dtype",
        "pi",
        "e",
        "inf",
        "nan",
        "newaxis",
        *_foreach.__all__,
        *_settings_names,
    ]
except ModuleNotFoundError as e:
    if e.name != "uopkit.tensor":
        raise

# torch's subpackages reached as attributes of a bare `import torch` (torch.nn.functional.relu,
# torch.distributions.Normal, torch.func.grad, torch.cuda.is_available(), torch.backends.cudnn.benchmark): imported
# on first use, so `import uopkit` loads no more than before. (`uopkit.device` is the device module, which, called,
# is torch.device: `uopkit.device("cuda")`.)
_SUBPACKAGES = frozenset({"nn", "distributions", "data", "func", "signal", "quasirandom", "fft", "cuda", "backends"})


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"uopkit.{name}")
    if name == "vmap":
        # torch.vmap, torch.func.vmap's other name
        return importlib.import_module("uopkit.func").vmap
    from uopkit.dtype import COMPLEX_DTYPES, DTYPES_BY_NAME

    if name in DTYPES_BY_NAME or name in COMPLEX_DTYPES:
        # torch's dtypes by name, for a port that imports uopkit as torch (`dtype=torch.float32`, `torch.long`)
        return DTYPES_BY_NAME[name] if name in DTYPES_BY_NAME else COMPLEX_DTYPES[name]
    raise AttributeError(f"module 'uopkit' has no attribute {name!r}")

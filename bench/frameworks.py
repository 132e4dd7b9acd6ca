"""Loading each framework once and turning its results into synchronized, comparable values."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FRAMEWORKS = ("numpy", "torch", "tinygrad", "uopkit")


class Skip(Exception):
    """A benchmark that can't run on a framework (an op is missing, the framework isn't installed)."""


@dataclass
class Framework:
    name: str
    module: Any = None
    version: str = ""
    problem: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def tensor(self, x: np.ndarray, requires_grad: bool = False) -> Any:
        """`x` on this framework, materialized (so uploading it is never part of a timing)."""
        if self.name == "numpy":
            return x
        if self.name == "torch":
            t = self.module.from_numpy(np.ascontiguousarray(x)).clone()
            return t.requires_grad_(requires_grad) if requires_grad else t
        if self.name == "tinygrad":
            # tinygrad 0.14 has no requires_grad: every float tensor is a parameter unless marked otherwise
            return self.module.Tensor(np.ascontiguousarray(x)).realize()
        return self.module.Tensor(np.ascontiguousarray(x), requires_grad=requires_grad or None).realize()

    def sync(self, out: Any) -> Any:
        """Finish computing `out` (a result or a tuple of results)."""
        if isinstance(out, (tuple, list)):
            for o in out:
                self.sync(o)
            return out
        if self.name in ("tinygrad", "uopkit"):
            out.realize()
            if self.name == "tinygrad":
                self.extra["Device"][self.extra["Device"].DEFAULT].synchronize()
        return out

    def numpy(self, out: Any) -> np.ndarray:
        if self.name == "numpy":
            return np.asarray(out)
        if self.name == "torch":
            return out.detach().numpy()
        return out.numpy()


# environment variables the bench changed for another framework (tinygrad's CC), restored for uopkit's subprocesses
ORIGINAL_ENV: dict[str, str | None] = {}


def _find_clang() -> str | None:
    for name in ("clang", *(f"clang-{v}" for v in range(21, 13, -1))):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def load(name: str) -> Framework:
    """Import a framework; a missing one comes back with `problem` set instead of raising."""
    fw = Framework(name)
    try:
        if name == "numpy":
            fw.module, fw.version = np, np.__version__
            fw.extra["blas"] = numpy_blas()
        elif name == "torch":
            import torch

            fw.module, fw.version = torch, torch.__version__
        elif name == "uopkit":
            import uopkit
            from uopkit import Device, Tensor

            # open the device now: its compiler is chosen before tinygrad's CC (below) can be set
            fw.extra["device"] = Device[Device.DEFAULT]
            fw.module, fw.version = uopkit, _dist_version("uopkit")
            fw.extra["Tensor"] = Tensor
        elif name == "tinygrad":
            # tinygrad's CPU backend compiles with clang; it reads CC, and DEV picks the device
            os.environ.setdefault("DEV", "CPU")
            clang = _find_clang()
            if clang is None:
                fw.problem = "tinygrad's CPU backend needs clang (apt-get install clang-15)"
                return fw
            ORIGINAL_ENV.setdefault("CC", os.environ.get("CC"))
            os.environ["CC"] = clang
            import tinygrad
            from tinygrad import Device

            fw.module, fw.version = tinygrad, _dist_version("tinygrad")
            fw.extra["Device"] = Device
            # fail here, not inside a benchmark, when the device can't start
            Device[Device.DEFAULT]
        else:
            fw.problem = f"unknown framework {name!r}; choose from {', '.join(FRAMEWORKS)}"
    except ImportError as e:
        fw.problem = f"not installed ({e.name or e})"
    except Exception as e:  # a broken install is reported in the table, not fatal to the run
        fw.problem = f"failed to start: {type(e).__name__}: {e}"
    return fw


def numpy_blas() -> str:
    """The BLAS numpy's matmul runs and the kernel it picked (OPENBLAS_CORETYPE can pin an older, slower one)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not blas:
        return "unknown"
    info = blas[0]
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    note = f"; OPENBLAS_CORETYPE={pinned} pins it" if pinned else ""
    return f"{info.get('internal_api')} {info.get('version')}, {info.get('architecture')} kernels{note}"


def _dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"

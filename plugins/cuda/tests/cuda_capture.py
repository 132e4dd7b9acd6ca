"""A pytest plugin that saves, as CUDA C, every kernel a test run builds for the emulator with ``EMULATE=CUDA``.

With ``EMULATE=CUDA`` the emulator takes CUDA's renderer capabilities (locals, shared memory, tensor cores), so
the core produces exactly the programs a CUDA device would get; this plugin renders each through the CUDA
renderer as well and writes the source to ``$UOPKIT_CUDA_CAPTURE/<sha>.cu`` (a kernel the CUDA renderer rejects
goes to ``<sha>.err`` with the error and the UOp listing). test_cuda_kernels.py compiles them with NVRTC.

    EMULATE=CUDA UOPKIT_CUDA_CAPTURE=/tmp/k pytest -p cuda_capture --uopkit-device=EMULATOR ...
"""

from __future__ import annotations

import hashlib
import os
import pathlib

from uopkit.renderer.cstyle import RenderError
from uopkit.testing import emulator


def _save(folder: pathlib.Path, text: str, suffix: str) -> None:
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = folder / f"{digest}{suffix}"
    if not path.exists():
        path.write_text(text)


def pytest_configure(config: object) -> None:
    folder_name = os.environ.get("UOPKIT_CUDA_CAPTURE")
    if not folder_name:
        return
    folder = pathlib.Path(folder_name)
    folder.mkdir(parents=True, exist_ok=True)
    plain_render = emulator.EmulatorRenderer.render

    def render(self: emulator.EmulatorRenderer, name: str, uops: list) -> str:
        target = self.target
        if target is not None and target.device == "CUDA":
            try:
                _save(folder, target.render(name, uops), ".cu")
            except RenderError as e:
                _save(folder, f"{name}: {type(e).__name__}: {e}\n" + "\n".join(emulator.listing(uops)), ".err")
        return plain_render(self, name, uops)

    emulator.EmulatorRenderer.render = render  # type: ignore[method-assign]
